"""torch_npu's statistics hooks, called as torch_npu calls them: the addresses of tessera_npu_get_device_stats and
tessera_npu_reset_peak_stats turned back into functions (DeviceStats(*)(int), void(*)(int)), the struct read
through a ctypes mirror of torch_npu's DeviceStats, after a seeded run of NPU allocations and frees on the
stand-in libascendcl (TESSERA_ASCEND_LIBRARY; the host driver without it; TESSERA_TEST_NPU_DRIVER forces one).
Every field is checked against tessera.memory_stats() and against the run's own bookkeeping, peak reset
included. torch_npu is not needed.

    TESSERA_ASCEND_LIBRARY=build/tests/libtessera_fake_ascend.so PYTHONPATH=python \\
        python3 tests/python/npu_stats_hook_test.py
"""

import ctypes
import os
import random
import unittest

import tessera
from tessera import _lib

POOLS = ("all", "small_pool", "large_pool")  # torch_npu's StatType: AGGREGATE, SMALL_POOL, LARGE_POOL
FIELDS = ("current", "peak", "allocated", "freed")
MiB = 1 << 20


class Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in FIELDS]


StatArray = Stat * 3
ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
          "inactive_split_bytes", "requested_bytes")


class DeviceStats(ctypes.Structure):
    """torch_npu's c10_npu::NPUCachingAllocator::DeviceStats (NPUCachingAllocator.h, torch_npu v2.7.1)."""
    _fields_ = [(name, StatArray) for name in ARRAYS] + [
        ("num_alloc_retries", ctypes.c_int64),
        ("num_ooms", ctypes.c_int64),
        ("oversize_allocations", Stat),
        ("oversize_segments", Stat),
        ("max_split_size", ctypes.c_int64),
    ]


def as_dict(stat):
    return {field: getattr(stat, field) for field in FIELDS}


class StatsHookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The stand-in libascendcl in CTest; scripts/npu-check.sh runs this on the real one
        # (TESSERA_TEST_NPU_DRIVER=ascend, TESSERA_ASCEND_LIBRARY naming CANN's libascendcl.so).
        library = os.environ.get("TESSERA_ASCEND_LIBRARY")
        cls.driver = os.environ.get("TESSERA_TEST_NPU_DRIVER") or ("ascend" if library else "host")
        tessera.configure(cls.driver)
        cls.fake = None  # the stand-in's controls, where they are
        if cls.driver == "ascend" and library and hasattr(ctypes.CDLL(library), "fake_ascend_set_physical_limit"):
            cls.fake = ctypes.CDLL(library)
        lib = _lib.library()
        lib.tessera_npu_alloc.restype = ctypes.c_void_p
        lib.tessera_npu_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.tessera_npu_free.restype = None
        lib.tessera_npu_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        cls.lib = lib
        # As torch_npu receives them: integer addresses, cast back to function pointers of the hooks' types.
        stats_address = ctypes.cast(lib.tessera_npu_get_device_stats, ctypes.c_void_p).value
        reset_address = ctypes.cast(lib.tessera_npu_reset_peak_stats, ctypes.c_void_p).value
        cls.get_device_stats = ctypes.CFUNCTYPE(DeviceStats, ctypes.c_int)(stats_address)
        cls.reset_peak_status = ctypes.CFUNCTYPE(None, ctypes.c_int)(reset_address)

    def test_the_layout_is_torch_npus(self):
        self.assertEqual(ctypes.sizeof(Stat), 32)
        self.assertEqual(ctypes.sizeof(DeviceStats), 9 * 96 + 8 + 8 + 32 + 32 + 8)
        self.assertEqual(DeviceStats.num_alloc_retries.offset, 9 * 96)
        self.assertEqual(DeviceStats.max_split_size.offset, 944)

    def check_against_memory_stats(self, stats):
        """Every field of the struct against tessera.memory_stats(), read right after it."""
        json = tessera.memory_stats(0)
        for name in ("allocation", "allocated_bytes", "requested_bytes"):
            for index, pool in enumerate(POOLS):
                for field in FIELDS:
                    key = f"{name}.{pool}.{field}"
                    self.assertEqual(getattr(getattr(stats, name)[index], field), json[key], key)
        for name in ("active", "active_bytes", "segment", "reserved_bytes"):
            for index, pool in enumerate(POOLS):
                for field in FIELDS:
                    key = f"{name}.{pool}.{field}"
                    self.assertEqual(getattr(getattr(stats, name)[index], field), json[key], key)
        for index in range(3):  # no free here waits for an event: every active block is live
            self.assertEqual(stats.active[index].current, stats.allocation[index].current)
            self.assertEqual(stats.active_bytes[index].current, stats.allocated_bytes[index].current)
        # The bytes agree with the allocator's own counts, kept apart from the usage counter: the pools' are what
        # their segments map, the aggregate every page held, pooled ones too.
        self.assertEqual(stats.reserved_bytes[0].current, json["tessera.mapped_bytes"] + json["tessera.pooled_bytes"])
        self.assertEqual(stats.reserved_bytes[1].current + stats.reserved_bytes[2].current, json["tessera.mapped_bytes"])
        self.assertEqual(stats.segment[1].current + stats.segment[2].current, stats.segment[0].current)
        self.assertEqual(stats.num_alloc_retries, json["num_alloc_retries"])
        self.assertEqual(stats.num_ooms, json["num_ooms"])
        for name in ("inactive_split", "inactive_split_bytes"):  # read from the state: the current value only
            for index, pool in enumerate(POOLS):
                self.assertEqual(getattr(stats, name)[index].current, json[f"{name}.{pool}.current"], name)
                self.assertEqual(as_dict(getattr(stats, name)[index]),
                                 dict(dict.fromkeys(FIELDS, 0), current=getattr(stats, name)[index].current), name)
        self.assertEqual(as_dict(stats.oversize_allocations), dict.fromkeys(FIELDS, 0))
        self.assertEqual(as_dict(stats.oversize_segments), dict.fromkeys(FIELDS, 0))
        self.assertEqual(stats.max_split_size, 0)

    def test_a_seeded_run_through_the_hooks(self):
        lib, rng = self.lib, random.Random(1616)
        live = {}  # address -> requested size
        requested_peak = allocs = frees = 0
        for step in range(60):
            if live and rng.random() < 0.4:
                address = rng.choice(sorted(live))
                lib.tessera_npu_free(address, live.pop(address), 0, None)
                frees += 1
            else:
                size = rng.choice([rng.randrange(512, 1 << 20), rng.randrange(1 << 20, 24 * MiB)])
                address = lib.tessera_npu_alloc(size, 0, None)
                self.assertIsNotNone(address, tessera.last_error())
                live[address] = size
                allocs += 1
            requested_peak = max(requested_peak, sum(live.values()))
        self.assertEqual(tessera.driver(), self.driver)
        stats = self.get_device_stats(0)
        self.check_against_memory_stats(stats)
        # The run's own bookkeeping.
        all_pools = 0
        self.assertEqual(stats.allocation[all_pools].current, len(live))
        self.assertEqual(stats.allocation[all_pools].allocated, allocs)
        self.assertEqual(stats.allocation[all_pools].freed, frees)
        self.assertEqual(stats.requested_bytes[all_pools].current, sum(live.values()))
        self.assertEqual(stats.requested_bytes[all_pools].peak, requested_peak)
        self.assertGreater(stats.allocation[1].allocated, 0, "the run made small blocks")
        self.assertGreater(stats.allocation[2].allocated, 0, "the run made large blocks")
        for name in ("allocation", "allocated_bytes", "requested_bytes"):
            array = getattr(stats, name)
            self.assertEqual(array[1].current + array[2].current, array[0].current, name)
        self.assertGreaterEqual(stats.allocated_bytes[0].current, stats.requested_bytes[0].current)
        self.assertGreaterEqual(stats.reserved_bytes[0].current, stats.allocated_bytes[0].current)
        self.assertGreater(stats.segment[0].current, 0)

        # Free the larger half: the peaks stay above; reset them through the hook and they are the current values.
        for address in sorted(live, key=live.get)[len(live) // 2:]:
            lib.tessera_npu_free(address, live.pop(address), 0, None)
        before = self.get_device_stats(0)
        self.assertGreater(before.allocated_bytes[0].peak, before.allocated_bytes[0].current)
        self.reset_peak_status(0)
        after = self.get_device_stats(0)
        self.check_against_memory_stats(after)
        for name in ARRAYS:
            if name.startswith("inactive_split"):
                continue  # current only
            for index in range(3):
                self.assertEqual(getattr(after, name)[index].peak, getattr(after, name)[index].current, name)
                self.assertEqual(getattr(after, name)[index].allocated, getattr(before, name)[index].allocated)
        self.assertEqual(tessera.memory_stats(0)["reserved_bytes.all.peak"], after.reserved_bytes[0].current)

        # A new block raises the peaks from there, and they stay when it is freed.
        size = 40 * MiB
        address = lib.tessera_npu_alloc(size, 0, None)
        self.assertIsNotNone(address, tessera.last_error())
        lib.tessera_npu_free(address, size, 0, None)
        freed = self.get_device_stats(0)
        self.check_against_memory_stats(freed)
        self.assertEqual(freed.requested_bytes[0].peak, sum(live.values()) + size)
        self.assertGreaterEqual(freed.allocated_bytes[0].peak, after.allocated_bytes[0].current + size)
        self.assertGreaterEqual(freed.reserved_bytes[0].peak, freed.allocated_bytes[0].peak)  # pages under them

        if self.fake:  # the runtime's out of memory is counted in num_ooms
            limit = self.fake.fake_ascend_set_physical_limit
            limit.argtypes = [ctypes.c_size_t]
            limit(freed.reserved_bytes[0].current + 4 * MiB)
            self.assertIsNone(lib.tessera_npu_alloc(512 * MiB, 0, None))
            oom = self.get_device_stats(0)
            self.assertEqual(oom.num_ooms, freed.num_ooms + 1)
            self.check_against_memory_stats(oom)
            limit(256 * MiB)  # the stand-in's default

        # The package's reset: the same peaks start again, through the same C function.
        largest = max(live, key=live.get)
        lib.tessera_npu_free(largest, live.pop(largest), 0, None)
        self.assertGreater(tessera.memory_stats(0)["allocated_bytes.all.peak"],
                           tessera.memory_stats(0)["allocated_bytes.all.current"])
        tessera.reset_peak_memory_stats("npu:0")
        json = tessera.memory_stats(0)
        for key in ("allocated_bytes.all", "requested_bytes.large_pool", "allocation.small_pool", "reserved_bytes.all",
                    "segment.all"):
            self.assertEqual(json[f"{key}.peak"], json[f"{key}.current"], key)
        with self.assertRaises(tessera.TesseraError):
            tessera.reset_peak_memory_stats(64)

        for address in list(live):
            lib.tessera_npu_free(address, live.pop(address), 0, None)
        tessera.empty_cache()
        empty = self.get_device_stats(0)
        self.check_against_memory_stats(empty)
        self.assertEqual(empty.allocation[0].current, 0)
        self.assertEqual(empty.reserved_bytes[0].current, 0)
        self.assertEqual(empty.segment[0].freed, empty.segment[0].allocated)

    def test_a_device_out_of_range_is_all_zero_and_a_message(self):
        stats = self.get_device_stats(64)
        self.assertEqual(bytes(stats), bytes(ctypes.sizeof(DeviceStats)))
        self.assertIn("device 64 is out of range", tessera.last_error())
        _lib.library().tessera_clear_error()
        self.reset_peak_status(-1)
        self.assertIn("device -1 is out of range", tessera.last_error())


if __name__ == "__main__":
    unittest.main()
