"""PyTorch's own memory functions answered by Tessera (tessera.torch_views), on the CPU path with Debian's
python3-torch, where CUDA is absent and torch.cuda's own functions report nothing or raise:
tessera.torch.enable("cpu", patch_torch=True), then every patched function of torch.cuda equals what
tessera.memory_stats() (or memory_summary(), dump_snapshot()) says; the peak reset works through torch; the
history is started and stopped through torch's _record_memory_history; unpatch() puts back the very objects
it replaced, which behave as before. torch_npu's functions are patched on a stand-in torch_npu.

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... PYTHONPATH=python /usr/bin/python3 tests/python/torch_views_test.py
"""

import collections
import os
import pickle
import sys
import tempfile
import types
import unittest

from torch_skip import SKIP, skip_reason

os.environ.pop("TESSERA_ALLOC_CONF", None)
MiB = 1 << 20


def outcome(function, *args):
    """What a call gives: ("value", v) or ("raises", the exception's type)."""
    try:
        return ("value", function(*args))
    except Exception as error:  # noqa: BLE001 - PyTorch's own functions raise several kinds without CUDA
        return ("raises", type(error))


class TorchViews(unittest.TestCase):
    def test_torch_cuda_functions_report_tesseras_figures_until_unpatched(self):
        import torch

        import tessera
        import tessera.torch
        from tessera import torch_views

        names = [name for name in torch_views.PATCHED if name in vars(torch.cuda.memory)]
        self.assertIn("max_memory_reserved", names)
        originals = {(module.__name__, name): vars(module)[name]
                     for module in (torch.cuda, torch.cuda.memory) for name in torch_views.PATCHED
                     if name in vars(module)}
        before = {name: outcome(getattr(torch.cuda.memory, name)) for name in
                  ("max_memory_reserved", "memory_allocated", "memory_stats", "memory_summary")}
        self.assertEqual(tessera._snapshot(), {"segments": [], "device_traces": [[]]}, "no allocator yet")

        tessera.torch.enable("cpu", patch_torch=True)
        self.assertEqual(torch_views.patched(), "cpu")
        big = torch.empty(3 * MiB, dtype=torch.uint8)
        small = [torch.ones(100 + i) for i in range(20)]
        stats = tessera.memory_stats()
        self.assertGreater(stats["allocated_bytes.all.current"], 3 * MiB, "the tensors came from Tessera")

        # The bar: with the patch on, torch.cuda.max_memory_reserved() is Tessera's reserved peak.
        self.assertEqual(torch.cuda.max_memory_reserved(), tessera.memory_stats()["reserved_bytes.all.peak"])
        self.assertGreater(torch.cuda.max_memory_reserved(), 0)
        for function, key in (("memory_allocated", "allocated_bytes.all.current"),
                              ("max_memory_allocated", "allocated_bytes.all.peak"),
                              ("memory_reserved", "reserved_bytes.all.current"),
                              ("max_memory_reserved", "reserved_bytes.all.peak")):
            expected = tessera.memory_stats()[key]
            for device in (None, 0, "cuda:0", torch.device("cuda:0"), torch.device("cuda")):
                self.assertEqual(getattr(torch.cuda, function)(device), expected, (function, device))
            self.assertEqual(getattr(torch.cuda.memory, function)(), expected, function)
            self.assertEqual(getattr(tessera, function)(), expected, function)
            self.assertEqual(getattr(tessera, function)("cpu"), expected, function)

        # memory_stats: PyTorch's layout (a sorted OrderedDict of numbers), every number Tessera reports.
        theirs = torch.cuda.memory_stats()
        ours = tessera.memory_stats()
        self.assertIsInstance(theirs, collections.OrderedDict)
        self.assertEqual(list(theirs), sorted(theirs))
        self.assertEqual(dict(theirs), {key: value for key, value in ours.items() if not isinstance(value, str)})
        self.assertNotIn("tessera.driver", theirs)
        for key in ("active_bytes.all.current", "segment.small_pool.current", "reserved_bytes.large_pool.peak",
                    "inactive_split_bytes.all.current", "num_ooms"):
            self.assertIn(key, theirs)
        self.assertEqual(theirs["active_bytes.all.current"], ours["allocated_bytes.all.current"])
        self.assertEqual(torch.cuda.memory_stats("cuda:0"), theirs)

        # The peak reset, through torch.
        del big
        stats = tessera.memory_stats()
        self.assertGreater(stats["allocated_bytes.all.peak"], stats["allocated_bytes.all.current"])
        torch.cuda.reset_peak_memory_stats()
        stats = tessera.memory_stats()
        self.assertEqual(stats["allocated_bytes.all.peak"], stats["allocated_bytes.all.current"])
        self.assertEqual(torch.cuda.max_memory_allocated(), stats["allocated_bytes.all.current"])
        self.assertEqual(torch.cuda.max_memory_reserved(), stats["reserved_bytes.all.current"])

        summary = torch.cuda.memory_summary()
        self.assertEqual(summary, tessera.memory_summary())
        self.assertIn("Tessera memory summary, device 0, host driver", summary)
        self.assertEqual(torch.cuda.memory_summary(0, abbreviated=True), summary)

        # The history through torch: PyTorch 1.13's form (a bool), then 2.x's.
        torch.cuda.memory._record_memory_history(True)
        recorded = torch.empty(123456, dtype=torch.uint8)
        snapshot = torch.cuda.memory._snapshot()
        allocs = [event for event in snapshot["device_traces"][0] if event["action"] == "alloc"]
        self.assertIn(123456, [event["size"] for event in allocs])
        self.assertEqual(snapshot["segments"], tessera._snapshot()["segments"])
        live = sum(block["size"] for segment in snapshot["segments"] for block in segment["blocks"]
                   if block["state"] == "active_allocated")
        self.assertEqual(live, tessera.memory_stats()["allocated_bytes.all.current"], "the snapshot's live blocks")
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "dump.pickle")
            tessera.dump_snapshot(path)
            with open(path, "rb") as file:
                self.assertEqual(pickle.load(file), torch.cuda.memory._snapshot(), "the dump, unpickled")
            written = os.path.join(folder, "written.pickle")
            tessera._dump_snapshot(written)
            with open(written, "rb") as file:
                self.assertEqual(pickle.load(file), tessera._snapshot())
        torch.cuda.memory._record_memory_history(enabled=None)
        del recorded
        self.assertEqual(tessera._snapshot()["device_traces"], [[]], "stopped and forgotten")
        torch.cuda.memory._record_memory_history("all", max_entries=4)
        kept = [torch.empty(1000 + i, dtype=torch.uint8) for i in range(10)]
        self.assertLessEqual(len(tessera._snapshot()["device_traces"][0]), 4 * 2, "a ring of 4 (a free writes two)")
        # torch's default stacks="all": the Python frames of each allocation (C++ ones are not recorded).
        allocs = [event for event in tessera._snapshot()["device_traces"][0] if event["action"] == "alloc"]
        self.assertTrue(allocs)
        here = sys._getframe().f_code.co_name
        for event in allocs:
            self.assertIn(here, [frame["name"] for frame in event.get("frames", [])], event)
        with self.assertRaises(tessera.TesseraValueError):
            torch.cuda.memory._record_memory_history("sometimes")
        with self.assertRaises(TypeError):
            torch.cuda.memory._record_memory_history(True, trace_alloc_entries=3)
        torch.cuda.memory._record_memory_history(False)
        del kept

        # Patching again (also through enable) changes nothing; another device type is refused.
        self.assertEqual(torch_views.patch("cpu"), sorted(set(names)))
        tessera.torch.enable("cpu", patch_torch=True)
        with self.assertRaises(tessera.TesseraError):
            torch_views.patch("cuda")

        torch_views.unpatch()
        self.assertIsNone(torch_views.patched())
        for (module, name), original in originals.items():
            self.assertIs(vars(sys.modules[module])[name], original, (module, name))
        if "_dump_snapshot" not in names:  # PyTorch 1.13: not added by the patch
            self.assertNotIn("_dump_snapshot", vars(torch.cuda.memory))
        after = {name: outcome(getattr(torch.cuda.memory, name)) for name in before}
        self.assertEqual(after, before, "PyTorch's own functions, behaving as before the patch")
        torch_views.unpatch()  # nothing to do
        del small

    def test_torch_npus_functions_are_patched_on_a_stand_in(self):
        import tessera
        from tessera import torch_views

        torch_views.unpatch()
        originals = {}
        npu = types.ModuleType("torch_npu.npu")
        memory = types.ModuleType("torch_npu.npu.memory")
        for name in ("memory_stats", "max_memory_reserved", "memory_allocated", "memory_summary",
                     "reset_peak_memory_stats", "_record_memory_history"):
            def original(*args, **kwargs):
                raise AssertionError("torch_npu's own function was called")
            originals[name] = original
            setattr(memory, name, original)
            setattr(npu, name, original)
        npu.memory = memory
        torch_npu = types.ModuleType("torch_npu")
        torch_npu.npu = npu
        saved = {name: sys.modules.get(name) for name in ("torch_npu", "torch_npu.npu", "torch_npu.npu.memory")}
        sys.modules.update({"torch_npu": torch_npu, "torch_npu.npu": npu, "torch_npu.npu.memory": memory})
        try:
            patched = torch_views.patch("npu:0")
            self.assertEqual(patched, sorted(originals), "only what this torch_npu has")
            self.assertNotIn("_snapshot", vars(npu), "nothing added")
            self.assertEqual(npu.max_memory_reserved(), tessera.memory_stats(0)["reserved_bytes.all.peak"])
            self.assertEqual(memory.memory_allocated("npu:0"), tessera.memory_stats(0)["allocated_bytes.all.current"])
            self.assertEqual(npu.memory_summary(), tessera.memory_summary(0))
            torch_views.unpatch()
            for name, original in originals.items():
                self.assertIs(getattr(npu, name), original)
                self.assertIs(getattr(memory, name), original)
        finally:
            torch_views.unpatch()
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"SKIPPED: {reason}")
        sys.exit(SKIP)
    unittest.main()
