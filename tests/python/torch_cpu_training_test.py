"""PyTorch for real on Tessera, on the CPU: Debian's python3-torch trains a tiny GPT twice, each in a fresh
process — PyTorch's default CPU allocator, then Tessera (host driver) as libtorch's CPU allocator — and:
  - the losses are identical bit for bit;
  - Tessera served the tensors: during training its allocated bytes are above zero, and it counted thousands of
    allocations;
  - the history Tessera recorded writes a snapshot that `tessera replay` reads back and replays;
and a CPU allocation Tessera cannot serve is torch's out-of-memory error with Tessera's message.

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... TESSERA_COMMAND=build/tools/tessera \\
    PYTHONPATH=python /usr/bin/python3 tests/python/torch_cpu_training_test.py
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from torch_skip import SKIP, skip_reason

HERE = Path(__file__).resolve().parent


def run(allocator, directory, snapshot=None):
    result = Path(directory) / f"{allocator}.json"
    command = [sys.executable, str(HERE / "torch_cpu_run.py"), allocator, str(result)]
    if snapshot:
        command.append(str(snapshot))
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    environment.pop("TESSERA_DRIVER", None)
    environment.pop("TESSERA_ALLOC_CONF", None)
    started = time.monotonic()
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    if completed.returncode != 0:
        raise AssertionError(f"{allocator} run failed ({completed.returncode}):\n"
                             f"{completed.stdout}\n{completed.stderr}")
    print(f"{allocator} run: {time.monotonic() - started:.1f}s", flush=True)
    return json.loads(result.read_text())


class TorchCpuTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory()
        cls.snapshot = Path(cls.directory.name) / "tessera-cpu.pickle"
        cls.default = run("default", cls.directory.name)
        cls.tessera = run("tessera", cls.directory.name, cls.snapshot)

    @classmethod
    def tearDownClass(cls):
        cls.directory.cleanup()

    def test_losses_are_identical_bit_for_bit(self):
        self.assertEqual(len(self.default["losses"]), 8)
        self.assertEqual(self.tessera["losses"], self.default["losses"])
        first, last = (float.fromhex(self.default["losses"][i]) for i in (0, -1))
        self.assertLess(last, first, "the model learns")

    def test_tessera_served_the_tensors(self):
        stats = self.tessera["stats"]
        self.assertEqual(stats["tessera.driver"], "host")
        for step in self.tessera["during"]:
            self.assertGreater(step["allocated_bytes.all.current"], 0)
            self.assertGreater(step["allocation.all.current"], 10)
        self.assertGreater(stats["allocation.all.allocated"], 2000, "every tensor of 8 steps came from Tessera")
        self.assertGreater(stats["allocated_bytes.all.peak"], 1 << 20)
        self.assertEqual(stats["tessera.bad_frees"], 0)
        self.assertEqual(stats["num_ooms"], 0)
        self.assertIn("host driver", self.tessera["summary"])

    def test_the_recorded_history_replays(self):
        self.assertTrue(self.snapshot.is_file())
        tessera_command = os.environ.get("TESSERA_COMMAND")
        if not tessera_command or not Path(tessera_command).is_file():
            self.skipTest("TESSERA_COMMAND does not name the built tessera command")
        completed = subprocess.run([tessera_command, "replay", str(self.snapshot), "--allocators", "tessera,pytorch"],
                                   capture_output=True, text=True, timeout=120)
        self.assertEqual(completed.returncode, 0, f"{completed.stdout}\n{completed.stderr}")
        self.assertIn("tessera", completed.stdout)
        info = subprocess.run([tessera_command, "info", str(self.snapshot)], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(info.returncode, 0, info.stderr)
        print(info.stdout, flush=True)


OUT_OF_MEMORY_SCRIPT = """
import torch, tessera, tessera.torch
tessera.torch.enable("cpu")
try:
    torch.empty(100 << 20, dtype=torch.uint8)
    print("no error")
except RuntimeError as error:
    print("torch's out-of-memory kind:", isinstance(error, torch.cuda.OutOfMemoryError))
    print(type(error).__name__, "|", error)
print("after:", float(torch.ones(1000).sum()), tessera.memory_stats("cpu")["num_ooms"])
"""


ENABLE_TWICE_SCRIPT = """
import torch, tessera, tessera.torch
first = tessera.torch.enable("cpu", conf="reclaim:first")
print("same:", tessera.torch.enable("cpu") is first, tessera.torch.enable("cpu", conf="reclaim:first") is first,
      tessera.torch.enable("cpu", conf="share_slivers:on, reclaim:first") is first)
for conf, driver in (("reclaim:never", None), (None, "sim")):
    try:
        tessera.torch.enable("cpu", conf=conf, driver=driver)
        print("accepted", conf, driver)
    except tessera.TesseraError as error:
        print("refused |", error)
try:
    tessera.configure(conf="reclaim:never")
except tessera.TesseraError as error:
    print("configure refused |", error)
print("after:", float(torch.ones(1000).sum()))
"""


class TorchCpuErrors(unittest.TestCase):
    def test_enabling_again_with_other_settings_is_too_late_and_with_the_same_changes_nothing(self):
        environment = dict(os.environ)
        environment.pop("TESSERA_DRIVER", None)
        environment.pop("TESSERA_ALLOC_CONF", None)
        completed = subprocess.run([sys.executable, "-c", ENABLE_TWICE_SCRIPT], env=environment, capture_output=True,
                                   text=True, timeout=120)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        lines = completed.stdout.splitlines()
        self.assertIn("same: True True True", lines, completed.stdout)
        refusals = [line for line in lines if line.startswith("refused |")]
        self.assertEqual(len(refusals), 2, completed.stdout)
        too_late = "too late to change the configuration"
        self.assertIn(too_late, refusals[0])
        self.assertIn("tessera.torch.enable('cpu')", refusals[0])
        self.assertIn("'sim'", refusals[1])
        configure_refusal = next(line for line in lines if line.startswith("configure refused |"))
        self.assertIn(too_late, configure_refusal)
        self.assertIn("after: 1000.0", lines, "the allocator is as it was")

    def test_out_of_memory_is_torchs_error_with_tesseras_message(self):
        environment = dict(os.environ, TESSERA_CAPACITY="64MiB")
        environment.pop("TESSERA_DRIVER", None)
        completed = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY_SCRIPT], env=environment, capture_output=True,
                                   text=True, timeout=120)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertIn("OutOfMemoryError | Tessera CPU allocator: tessera_alloc(104857600 bytes, device 0): "
                      "out_of_memory", completed.stdout)
        self.assertIn("torch's out-of-memory kind: True", completed.stdout, "what PyTorch's handlers catch")
        self.assertIn("after: 1000.0 1", completed.stdout, "the allocator is usable after the failure")

    def test_enable_explains_what_is_missing(self):
        import torch

        import tessera.torch

        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.torch.enable("tpu")
        self.assertIn("unknown device 'tpu'", str(raised.exception))
        if torch.cuda.is_available():
            return
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.torch.enable("cuda")
        message = str(raised.exception)
        self.assertTrue("CUDAPluggableAllocator (it arrived in PyTorch 2.0)" in message
                        or "sees no CUDA device" in message, message)
        self.assertFalse(tessera.torch.enabled("cuda"))


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"SKIPPED: {reason}", flush=True)
        sys.exit(SKIP)
    unittest.main(verbosity=2)
