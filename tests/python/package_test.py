"""The tessera Python package over libtessera_c.so on the host driver, without PyTorch: statistics with
PyTorch's key names, the summary, errors as TesseraError naming the problem, and a snapshot that Python's own
pickle reads with PyTorch's structure.

Run by CTest with Debian's /usr/bin/python3, PYTHONPATH=<repo>/python and TESSERA_LIBRARY set; by hand:
    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so python3 tests/python/package_test.py
"""

import ctypes
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

os.environ["TESSERA_DRIVER"] = "host"  # before the library creates any allocator
os.environ.pop("TESSERA_ALLOC_CONF", None)
os.environ["TESSERA_CAPACITY"] = "256MiB"

import tessera  # noqa: E402
from tessera import _lib  # noqa: E402


def allocate(size, device=0):
    return _lib.library().tessera_alloc(size, device, None)


def free(pointer, device=0):
    _lib.library().tessera_free(pointer, 0, device, None)


class PackageTest(unittest.TestCase):
    def test_a_stats_before_the_first_allocation_are_zero(self):
        # Named _a_ to run first: the allocator of device 3 is never created in this process.
        stats = tessera.memory_stats(3)
        self.assertEqual(stats["allocated_bytes.all.current"], 0)
        self.assertEqual(stats["tessera.driver"], "")
        self.assertFalse(tessera.has_allocator(3))
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.dump_snapshot(os.path.join(tempfile.gettempdir(), "never.pickle"), device=3)
        self.assertIn("device 3 has no allocator yet", str(raised.exception))

    def test_memory_stats_have_pytorchs_keys_and_count_allocations(self):
        before = tessera.memory_stats()
        pointers = [allocate(1000 * (i + 1)) for i in range(20)]
        self.assertTrue(all(pointers), tessera.last_error())
        stats = tessera.memory_stats("cpu")
        for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                    "reserved_bytes.all.peak", "requested_bytes.all.current", "requested_bytes.all.peak",
                    "allocation.all.current", "allocation.all.allocated", "num_alloc_retries", "num_ooms",
                    "num_sync_all_streams", "num_device_alloc", "num_device_free", "tessera.driver", "tessera.stitches", "tessera.pooled_bytes"):
            self.assertIn(key, stats)
        self.assertEqual(stats["tessera.driver"], "host")
        self.assertEqual(tessera.driver(), "host")
        self.assertEqual(stats["allocation.all.allocated"] - before["allocation.all.allocated"], 20)
        self.assertEqual(stats["requested_bytes.all.current"] - before["requested_bytes.all.current"],
                         sum(1000 * (i + 1) for i in range(20)))
        self.assertGreaterEqual(stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"])
        for pointer in pointers:
            ctypes.memset(pointer, 7, 1000)  # real memory
            free(pointer)
        self.assertEqual(tessera.memory_stats()["allocation.all.current"], before["allocation.all.current"])

    def test_summary_is_a_table(self):
        pointer = allocate(4096)
        summary = tessera.memory_summary(0)
        free(pointer)
        self.assertIn("Tessera memory summary, device 0, host driver", summary)
        self.assertIn("Allocated memory", summary)
        self.assertIn("Reserved memory", summary)

    def test_empty_cache_gives_pages_back(self):
        pointer = allocate(8 << 20)
        free(pointer)
        tessera.empty_cache()
        self.assertEqual(tessera.memory_stats()["tessera.pooled_bytes"], 0)

    def test_configuration_errors_name_the_key(self):
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.configure(conf="max_split_size_mb:64")
        self.assertIn("unknown key 'max_split_size_mb'", str(raised.exception))
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.configure(driver="sim")
        self.assertIn("TESSERA_DRIVER=host", str(raised.exception))

    def test_out_of_memory_leaves_a_message(self):
        self.assertIsNone(allocate(1 << 30))
        self.assertIn("out_of_memory", tessera.last_error())
        self.assertGreaterEqual(tessera.memory_stats()["num_ooms"], 1)

    def test_snapshot_is_a_pytorch_snapshot_pickle(self):
        tessera.record_memory_history(max_entries=1000)
        kept = [allocate(512 * (i + 1)) for i in range(6)]
        for pointer in kept[:3]:
            free(pointer)
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "snapshot.pickle")
            tessera.dump_snapshot(path)
            with open(path, "rb") as file:
                snapshot = pickle.load(file)
        tessera.record_memory_history(enabled=None)
        for pointer in kept[3:]:
            free(pointer)
        self.assertIn("segments", snapshot)
        self.assertIn("device_traces", snapshot)
        trace = snapshot["device_traces"][0]
        actions = [entry["action"] for entry in trace]
        self.assertEqual(actions.count("alloc"), 6, actions)
        self.assertGreaterEqual(actions.count("free_completed") + actions.count("free_requested"), 3, actions)
        sizes = sorted(entry["size"] for entry in trace if entry["action"] == "alloc")
        self.assertEqual(sizes[-1], 512 * 6)
        live = [block for segment in snapshot["segments"] for block in segment["blocks"]
                if block["state"] == "active_allocated"]
        self.assertGreaterEqual(len(live), 3)

    def test_a_snapshot_without_history_or_live_blocks_reads_back(self):
        tessera.record_memory_history(enabled=False)
        free(allocate(3 << 20))
        free(allocate(1000))
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "segments-alone.pickle")
            tessera.dump_snapshot(path)
            with open(path, "rb") as file:
                snapshot = pickle.load(file)
        self.assertIsInstance(snapshot["segments"], list)
        self.assertEqual(snapshot["device_traces"], [[]])
        live = [block for segment in snapshot["segments"] for block in segment["blocks"]
                if block["state"] == "active_allocated"]
        self.assertEqual(live, [])

    def test_record_memory_history_refuses_a_negative_or_non_integer_max_entries(self):
        for bad in (-5, -1, "many", 2.5):
            with self.assertRaises(tessera.TesseraError) as raised:
                tessera.record_memory_history(max_entries=bad)
            self.assertIsInstance(raised.exception, ValueError, "a bad value is a ValueError too")
            self.assertIn("max_entries", str(raised.exception))
            self.assertIn(repr(bad), str(raised.exception))
        tessera.record_memory_history(max_entries=0)  # records nothing, as PyTorch's
        tessera.record_memory_history(enabled=False, max_entries=-5)  # stopping needs no size
        tessera.record_memory_history(enabled=None)

    def test_an_unknown_device_is_a_tessera_error_naming_it(self):
        for function in (tessera.memory_stats, tessera.memory_summary, tessera.has_allocator):
            for bad in ("nonsense", "cuda:x", 1.5):
                with self.assertRaises(tessera.TesseraError) as raised:
                    function(bad)
                self.assertIsInstance(raised.exception, ValueError, "what int() raised before, for compatibility")
                self.assertIn(repr(bad), str(raised.exception))
                self.assertIn(function.__name__, str(raised.exception))
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.dump_snapshot(os.path.join(tempfile.gettempdir(), "never.pickle"), device="nonsense")
        self.assertIn("'nonsense'", str(raised.exception))
        for function in (tessera.memory_stats, tessera.memory_summary, tessera.has_allocator):
            for bad in (-1, 64, 2**32):  # 2**32 would reach the C ABI as 0, a device in range
                with self.assertRaises(tessera.TesseraError) as raised:
                    function(bad)
                self.assertIn(f"device {bad} is out of range", str(raised.exception))
                self.assertIn("devices 0 to 63", str(raised.exception))
        self.assertEqual(tessera.memory_stats("cuda:2")["tessera.driver"], "")
        self.assertEqual(tessera.memory_stats("cpu")["tessera.driver"], "host")

    def test_a_missing_library_is_a_clear_error(self):
        code = "import tessera\ntry:\n    tessera.memory_stats()\nexcept tessera.TesseraError as e:\n    print(e)\n"
        environment = dict(os.environ, TESSERA_LIBRARY="/nonexistent/libtessera_c.so")
        result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                                timeout=60)
        self.assertIn("cannot load libtessera_c.so", result.stdout, result.stderr)
        self.assertIn("/nonexistent/libtessera_c.so", result.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
