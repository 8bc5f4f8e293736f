"""Pausing memory by tag from Python, on the host driver without PyTorch: region() tags allocations,
pause() gives their pages back with the bytes kept in host memory where asked, resume() restores them at the
same addresses, and sleep()/wake_up() do the same in vLLM's shape. Errors name the tag.

    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so python3 tests/python/regions_test.py
"""

import ctypes
import os
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


def fill(pointer, size, seed):
    ctypes.memmove(pointer, bytes((seed + i * 13) % 256 for i in range(size)), size)


def holds(pointer, size, seed):
    return ctypes.string_at(pointer, size) == bytes((seed + i * 13) % 256 for i in range(size))


def tag_stat(tag, key):
    return tessera.memory_stats()[f"tessera.tag.{tag}.{key}"]


class RegionsTest(unittest.TestCase):
    def test_pause_with_backup_keeps_the_bytes_and_the_addresses(self):
        with tessera.region("py_weights", enable_cpu_backup=True):
            weights = [(allocate(size), size) for size in (3000, 300_000, 3 * MiB + 5)]
        with tessera.region("py_cache"):
            cache = allocate(4 * MiB)
        for seed, (pointer, size) in enumerate(weights):
            fill(pointer, size, seed)
        reserved = tessera.memory_stats()["reserved_bytes.all.current"]
        held = tag_stat("py_weights", "reserved_bytes") + tag_stat("py_cache", "reserved_bytes")
        tessera.pause()  # both region tags
        self.assertEqual(tag_stat("py_weights", "paused"), 1)
        self.assertEqual(tag_stat("py_cache", "paused"), 1)
        self.assertEqual(tag_stat("py_weights", "reserved_bytes"), 0)
        self.assertGreaterEqual(tag_stat("py_weights", "backup_bytes"), 3000 + 300_000 + 3 * MiB + 5)
        self.assertEqual(tag_stat("py_cache", "backup_bytes"), 0, "no backup asked for the cache")
        self.assertLessEqual(tessera.memory_stats()["reserved_bytes.all.current"], reserved - held)
        # Memory for others meanwhile, in the pages the tags gave back.
        other = allocate(6 * MiB)
        fill(other, 6 * MiB, 99)
        with tessera.region("py_cache"):
            self.assertFalse(_lib.library().tessera_alloc(1000, 0, None), "the tag is paused")
        self.assertIn("'py_cache'", tessera.last_error())
        free(other)
        tessera.resume()
        for seed, (pointer, size) in enumerate(weights):
            self.assertTrue(holds(pointer, size, seed), f"weights block {seed}")
        ctypes.memset(cache, 1, 4 * MiB)  # usable again
        self.assertEqual(tag_stat("py_weights", "backup_bytes"), 0)
        backed_up = sum(size for _, size in weights)
        self.assertGreaterEqual(tessera.memory_stats()["tessera.backup_cache_bytes"], backed_up,
                                "the backup buffers are kept for the next pause")
        tessera.empty_cache()
        self.assertEqual(tessera.memory_stats()["tessera.backup_cache_bytes"], 0, "empty_cache frees them")
        for pointer, _ in weights:
            free(pointer)
        free(cache)

    def test_sleep_and_wake_up_back_up_only_the_offloaded_tags(self):
        with tessera.region("vllm_weights"):
            weights = allocate(2 * MiB)
        with tessera.region("vllm_kv"):
            kv = allocate(2 * MiB)
        fill(weights, 2 * MiB, 5)
        tessera.sleep(offload_tags=("vllm_weights",))
        self.assertGreater(tag_stat("vllm_weights", "backup_bytes"), 0)
        self.assertEqual(tag_stat("vllm_kv", "backup_bytes"), 0)
        self.assertEqual(tag_stat("default", "paused"), 0, "memory outside regions stays")
        tessera.wake_up()
        self.assertTrue(holds(weights, 2 * MiB, 5))
        self.assertEqual(tag_stat("vllm_kv", "paused"), 0)
        free(weights)
        free(kv)

    def test_errors_name_the_tag(self):
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.pause("never_used_tag")
        self.assertIn("'never_used_tag'", str(raised.exception))
        with self.assertRaises(tessera.TesseraValueError):
            with tessera.region(""):
                pass
        with self.assertRaises(tessera.TesseraError) as raised:
            tessera.resume("py_weights", device=5)
        self.assertIn("device 5", str(raised.exception))


if __name__ == "__main__":
    allocate(1)  # the allocator of device 0 exists from here on
    unittest.main()
