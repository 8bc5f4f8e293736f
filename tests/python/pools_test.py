"""Private pools from Python, on the host driver without PyTorch: tessera.use_pool(pool) puts this thread's
allocations in the pool, whose freed blocks only it reuses; a pool under a region pauses and resumes with the
tag; release() and the refusals, each naming what is wrong.

    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so python3 tests/python/pools_test.py
"""

import ctypes
import os
import threading
import unittest

os.environ["TESSERA_DRIVER"] = "host"  # before the library creates any allocator
os.environ.pop("TESSERA_ALLOC_CONF", None)
os.environ["TESSERA_CAPACITY"] = "256MiB"

import tessera  # noqa: E402
from tessera import _lib  # noqa: E402

MiB = 1 << 20


def allocate(size):
    pointer = _lib.library().tessera_alloc(size, 0, None)
    if not pointer:
        raise AssertionError(tessera.last_error())
    return pointer


def free(pointer):
    _lib.library().tessera_free(pointer, 0, 0, None)


class PoolsTest(unittest.TestCase):
    def test_a_pools_freed_block_is_reused_inside_use_pool_only(self):
        pool = tessera.Pool()
        pools_before = tessera.memory_stats()["tessera.private_pools"]
        with tessera.use_pool(pool):
            inside = allocate(MiB)
        self.assertEqual(tessera.memory_stats()["tessera.private_pools"], pools_before + 1)
        free(inside)
        outside = allocate(MiB)
        self.assertNotEqual(outside, inside, "the shared cache took the pool's freed block")
        with tessera.use_pool(pool):
            again = allocate(MiB)
        self.assertEqual(again, inside, "the pool reuses its own freed block")
        free(again)
        free(outside)
        self.assertEqual(allocate(MiB), outside, "and the shared cache its own")
        free(outside)
        pool.release()
        self.assertEqual(tessera.memory_stats()["tessera.private_pools"], pools_before)

    def test_only_the_thread_inside_use_pool_allocates_into_it(self):
        pool = tessera.Pool()
        found = {}
        with tessera.use_pool(pool):
            mine = allocate(2 * MiB)
            worker = threading.Thread(target=lambda: found.setdefault("theirs", allocate(2 * MiB)))
            worker.start()
            worker.join()
        theirs = found["theirs"]
        free(mine)
        free(theirs)
        self.assertEqual(allocate(2 * MiB), theirs, "the other thread's block was the shared cache's")
        free(theirs)
        with tessera.use_pool(pool):
            self.assertEqual(allocate(2 * MiB), mine)
        free(mine)
        pool.release()

    def test_a_graph_pool_under_a_region_pauses_and_resumes_with_its_tag(self):
        pool = tessera.Pool(kind="graph")
        size = 3 * MiB
        with tessera.region("py_graph", enable_cpu_backup=True), tessera.use_pool(pool):
            output = allocate(size)
            temporary = allocate(size)
        free(temporary)
        ctypes.memmove(output, bytes(range(256)) * (size // 256), size)
        tessera.pause("py_graph")
        self.assertEqual(tessera.memory_stats()["tessera.tag.py_graph.reserved_bytes"], 0)
        tessera.resume("py_graph")
        self.assertEqual(ctypes.string_at(output, size), bytes(range(256)) * (size // 256))
        ctypes.memset(temporary, 7, size)  # the graph's freed block is mapped again: no fault
        free(output)
        pool.release()

    def test_release_and_use_pool_refuse_what_is_wrong(self):
        pool = tessera.Pool()
        with tessera.use_pool(pool):
            with self.assertRaisesRegex(tessera.TesseraValueError, "still being allocated to"):
                pool.release()
        pool.release()
        with self.assertRaisesRegex(tessera.TesseraValueError, "released already"):
            pool.release()
        with self.assertRaisesRegex(tessera.TesseraValueError, "is released"):
            with tessera.use_pool(pool):
                pass
        with self.assertRaisesRegex(tessera.TesseraValueError, "neither 'plain' nor 'graph'"):
            tessera.Pool(kind="eager")
        with self.assertRaisesRegex(tessera.TesseraValueError, "is not a tessera.Pool"):
            with tessera.use_pool("kv"):
                pass
        with self.assertRaisesRegex(tessera.TesseraValueError, "unknown device"):
            tessera.Pool(device="gpu:x")

    def test_a_pool_never_used_is_released_without_a_call(self):
        pool = tessera.Pool()
        pool.release()
        self.assertIn("released", repr(pool))


if __name__ == "__main__":
    unittest.main()
