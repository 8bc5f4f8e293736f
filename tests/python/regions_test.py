"""Pausing memory by tag from Python, on the host driver without PyTorch: region() tags allocations,
pause() gives their pages back with the bytes kept in host memory where asked, resume() restores them at the
same addresses, and sleep()/wake_up() do the same in vLLM's shape. Errors name the tag.

    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so python3 tests/python/regions_test.py
"""

import ctypes
import os
import sys
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
            self.assertIn("'py_cache'", tessera.last_error())  # the message of this thread's last call
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

    def test_the_backup_is_each_tensors_choice_made_when_it_is_allocated(self):
        # torch_memory_saver keeps enable_cpu_backup per allocation: a region opened inside another for the same
        # tag changes nothing for the tensors allocated before or after it in the outer one.
        tessera.empty_cache()  # no buffer kept by another test: each backup is a new buffer of its tensor's size
        with tessera.region("nested", enable_cpu_backup=True):
            before = allocate(1 * MiB)
            with tessera.region("nested", enable_cpu_backup=False):
                inner = allocate(1 * MiB)
            after = allocate(2 * MiB + 3)
        fill(before, 1 * MiB, 1)
        fill(after, 2 * MiB + 3, 2)
        tessera.pause("nested")
        self.assertGreaterEqual(tag_stat("nested", "backup_bytes"), 3 * MiB + 3)
        self.assertLess(tag_stat("nested", "backup_bytes"), 4 * MiB, "the inner region's tensor is not backed up")
        tessera.resume("nested")
        self.assertTrue(holds(before, 1 * MiB, 1), "allocated before the inner region")
        self.assertTrue(holds(after, 2 * MiB + 3, 2), "allocated after the inner region")
        for pointer in (before, inner, after):
            free(pointer)

    def test_the_default_tag_and_names_that_are_not_tags_are_refused(self):
        keep = allocate(1000)
        for call in (lambda: tessera.pause("default"), lambda: tessera.resume("default"),
                     lambda: tessera.sleep(offload_tags="default")):
            with self.assertRaises(tessera.TesseraValueError) as raised:
                call()
            self.assertIn("'default'", str(raised.exception))
        self.assertEqual(tag_stat("default", "paused"), 0)
        for bad, why in (("a\0b", "NUL"), ("\udcff", "UTF-8"), ("x" * 300, "bytes long"), ("bell\a", "control")):
            with self.assertRaises(tessera.TesseraValueError) as raised:
                with tessera.region(bad):
                    allocate(1)
            self.assertIn(why, str(raised.exception))
        # Straight through the C ABI: refused there too, and the statistics stay readable.
        self.assertEqual(_lib.library().tessera_push_tag(b"\xff"), -1)
        self.assertIn("UTF-8", tessera.last_error())
        self.assertIn("tessera.tag.default.allocated_bytes", tessera.memory_stats())
        tessera.empty_cache()
        self.assertIsInstance(tessera.memory_stats(), dict)
        free(keep)

    def test_sleep_refuses_an_offload_tag_without_memory_before_pausing_anything(self):
        with tessera.region("sleep_weights"):
            weights = allocate(1 * MiB)
        with self.assertRaises(tessera.TesseraNotFoundError) as raised:
            tessera.sleep(offload_tags=("sleep_weigths",))  # a typo
        self.assertIn("'sleep_weigths'", str(raised.exception))
        self.assertIn("'sleep_weights'", str(raised.exception), "lists the tags there")
        self.assertEqual(tag_stat("sleep_weights", "paused"), 0, "nothing paused")
        with self.assertRaises(tessera.TesseraNotFoundError):
            tessera.wake_up(tags=("sleep_weigths",))
        free(weights)

    def test_pause_and_resume_of_every_tag_while_other_threads_open_regions(self):
        import threading

        stop = threading.Event()
        errors = []

        def open_regions():
            count = 0
            while not stop.is_set():
                count += 1
                try:
                    with tessera.region(f"race_new_{threading.get_ident()}_{count}"):  # a tag never seen before
                        pass
                    with tessera.region(f"race_{count % 20}"):
                        pointer = _lib.library().tessera_alloc(4096, 0, None)  # NULL while its tag is paused
                    if pointer:
                        free(pointer)
                except Exception as error:  # noqa: BLE001 - any error of region() is the failure
                    errors.append(error)
                    return

        threads = [threading.Thread(target=open_regions) for _ in range(2)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads switch often, inside any loop over shared state
        for thread in threads:
            thread.start()
        try:
            for _ in range(40):
                tessera.pause()
                tessera.resume()
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            sys.setswitchinterval(interval)
        self.assertEqual(errors, [])
        tessera.resume()
        paused = [key for key, value in tessera.memory_stats().items()
                  if key.startswith("tessera.tag.") and key.endswith(".paused") and value]
        self.assertEqual(paused, [], "every tag resumed")


if __name__ == "__main__":
    allocate(1)  # the allocator of device 0 exists from here on
    unittest.main()
