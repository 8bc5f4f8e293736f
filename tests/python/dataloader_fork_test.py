"""PyTorch's DataLoader forks its workers (the default on Linux): with Tessera as libtorch's CPU allocator, a
worker inherits Tessera's bookkeeping and mappings. Trained twice, each in a fresh process — PyTorch's default
CPU allocator, then Tessera — with two forked workers that allocate while the parent trains:
  - every sample the workers produced is the same under both allocators, and each worker's own tensors held
    what it wrote;
  - the parent's dataset tensors are intact after the workers ended;
  - the losses are identical bit for bit (before fork safety, the loss went to NaN).

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... PYTHONPATH=python /usr/bin/python3 \\
    tests/python/dataloader_fork_test.py
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from torch_skip import SKIP, skip_reason

HERE = Path(__file__).resolve().parent


def run(allocator, directory):
    result = Path(directory) / f"{allocator}.json"
    command = [sys.executable, str(HERE / "dataloader_fork_run.py"), allocator, str(result)]
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    environment.pop("TESSERA_DRIVER", None)
    environment.pop("TESSERA_ALLOC_CONF", None)
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=240)
    if completed.returncode != 0:
        raise AssertionError(f"{allocator} run failed ({completed.returncode}):\n"
                             f"{completed.stdout}\n{completed.stderr}")
    return json.loads(result.read_text())


class DataLoaderFork(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as directory:
            cls.default = run("default", directory)
            cls.tessera = run("tessera", directory)

    def test_tessera_served_the_tensors(self):
        self.assertGreater(self.tessera["allocations"], 100)

    def test_every_sample_is_the_default_allocators(self):
        self.assertEqual(len(self.tessera["samples"]), len(self.default["samples"]))
        for step, (mine, theirs) in enumerate(zip(self.tessera["samples"], self.default["samples"])):
            self.assertEqual(mine, theirs, f"batch {step} differs")

    def test_each_worker_kept_what_it_wrote(self):
        self.assertTrue(all(self.default["worker_checks"]))
        self.assertEqual(self.tessera["worker_checks"], [True] * len(self.tessera["worker_checks"]))

    def test_the_parents_dataset_is_intact(self):
        self.assertTrue(self.tessera["dataset_intact"])

    def test_losses_are_identical(self):
        losses = [float.fromhex(loss) for loss in self.tessera["losses"]]
        self.assertFalse(any(math.isnan(loss) for loss in losses), losses)
        self.assertEqual(self.tessera["losses"], self.default["losses"])


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
