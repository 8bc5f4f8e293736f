"""Failures from Python keep their kind: each C error code becomes its exception class (tessera/errors.py), with
Tessera's message, from every call that can fail, void ones included; a message is this thread's last call's and
no other's; out of memory is a MemoryError, and torch.cuda.OutOfMemoryError once torch is imported; tags() lists
tag names that statistics keys could not carry.

Host driver, without PyTorch but for the one test that imports it (skipped without it). By hand:
    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so python3 tests/python/errors_test.py
"""

import ctypes
import os
import subprocess
import sys
import threading
import unittest

os.environ["TESSERA_DRIVER"] = "host"  # before the library creates any allocator
os.environ.pop("TESSERA_ALLOC_CONF", None)
os.environ["TESSERA_CAPACITY"] = "64MiB"

import tessera  # noqa: E402
from tessera import _lib  # noqa: E402
from tessera.errors import ErrorCode, error_for  # noqa: E402

MiB = 1 << 20


def allocate(size):
    return _lib.call("tessera_alloc", size, 0, None, failure=None)


def free(pointer):
    _lib.call("tessera_free", pointer, 0, 0, None)


class ClassesTest(unittest.TestCase):
    def test_each_class_is_also_the_builtin_of_its_kind(self):
        for cls, builtin in ((tessera.TesseraOutOfMemoryError, MemoryError),
                             (tessera.TesseraHostOutOfMemoryError, MemoryError),
                             (tessera.TesseraValueError, ValueError),
                             (tessera.TesseraNotFoundError, LookupError),
                             (tessera.TesseraUnsupportedError, NotImplementedError),
                             (tessera.TesseraUnavailableError, RuntimeError)):
            self.assertTrue(issubclass(cls, tessera.TesseraError), cls)
            self.assertTrue(issubclass(cls, builtin), cls)
        self.assertTrue(issubclass(tessera.TesseraError, RuntimeError))

    def test_every_code_maps_to_its_class(self):
        expected = {ErrorCode.OUT_OF_MEMORY: tessera.TesseraOutOfMemoryError,
                    ErrorCode.HOST_OUT_OF_MEMORY: tessera.TesseraHostOutOfMemoryError,
                    ErrorCode.INVALID_ARGUMENT: tessera.TesseraValueError,
                    ErrorCode.NOT_FOUND: tessera.TesseraNotFoundError,
                    ErrorCode.UNAVAILABLE: tessera.TesseraUnavailableError,
                    ErrorCode.UNSUPPORTED: tessera.TesseraUnsupportedError}
        for code in ErrorCode:
            if code == ErrorCode.OK:
                continue
            error = error_for(int(code), "the message")
            self.assertIs(type(error), expected.get(code, tessera.TesseraError), code)
            self.assertIs(error.code, code)
            self.assertEqual(str(error), "the message")
        newer = error_for(999, "from a newer library")
        self.assertIs(type(newer), tessera.TesseraError)
        self.assertIn("error code 999", str(newer))
        self.assertEqual(newer.code, 999)

    def test_importing_tessera_imports_no_torch(self):
        code = "import sys, tessera, tessera.errors\nprint('torch' in sys.modules)\n"
        completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.strip(), "False")


class FailuresTest(unittest.TestCase):
    def test_out_of_memory_is_a_memory_error_with_the_code(self):
        with self.assertRaises(MemoryError) as raised:
            allocate(1 << 30)
        error = raised.exception
        self.assertIsInstance(error, tessera.TesseraOutOfMemoryError)
        self.assertIs(error.code, ErrorCode.OUT_OF_MEMORY)
        self.assertIn("tessera_alloc(1073741824 bytes, device 0): out_of_memory", str(error))

    def test_a_resume_without_room_is_out_of_memory_and_the_tag_stays_paused(self):
        with tessera.region("errors_weights"):
            weights = allocate(40 * MiB)
        tessera.pause("errors_weights")
        squatter = allocate(40 * MiB)  # in the pages the pause gave back
        with self.assertRaises(tessera.TesseraOutOfMemoryError) as raised:
            tessera.resume("errors_weights")
        self.assertIn("'errors_weights'", str(raised.exception))
        self.assertTrue(tessera.tag_stats()["errors_weights"]["paused"])
        free(squatter)
        tessera.resume("errors_weights")
        self.assertFalse(tessera.tag_stats()["errors_weights"]["paused"])
        free(weights)

    def test_a_tag_the_c_abi_refuses_is_a_value_error(self):
        for bad, why in (("x" * 300, "bytes long"), ("bell\a", "control byte")):
            with self.assertRaises(tessera.TesseraValueError) as raised:
                with tessera.region(bad):
                    self.fail("the region opened")
            self.assertIs(raised.exception.code, ErrorCode.INVALID_ARGUMENT, "the C ABI's refusal")
            self.assertIn(why, str(raised.exception))

    def test_an_unknown_tag_or_a_device_without_memory_is_not_found(self):
        keep = allocate(1000)
        for operation in (tessera.pause, tessera.resume):
            for device in (0, 5):  # 5: no allocator
                with self.assertRaises(tessera.TesseraNotFoundError) as raised:
                    operation("errors_never_used", device=device)
                self.assertIsInstance(raised.exception, LookupError)
                self.assertIs(raised.exception.code, ErrorCode.NOT_FOUND)
                self.assertIn("errors_never_used" if device == 0 else "device 5", str(raised.exception))
            with self.assertRaises(tessera.TesseraValueError):
                operation("errors_never_used", device=64)
        free(keep)

    def test_a_void_calls_failure_is_this_calls_and_a_success_clears_it(self):
        local = ctypes.c_int(0)
        with self.assertRaises(tessera.TesseraNotFoundError) as raised:
            free(ctypes.addressof(local))
        self.assertIn("not a live block", str(raised.exception))
        self.assertEqual(_lib.last_error_code(), ErrorCode.NOT_FOUND)
        tessera.empty_cache()  # succeeds: the free's failure is not raised again, and its message is gone
        self.assertEqual(_lib.last_error_code(), ErrorCode.OK)
        self.assertEqual(tessera.last_error(), "")
        with self.assertRaises(tessera.TesseraNotFoundError):
            _lib.call("tessera_pop_tag")  # no tag open

    def test_another_threads_failure_is_not_this_threads(self):
        tessera.has_allocator(0)  # this thread's last call succeeds
        failed = []
        thread = threading.Thread(target=lambda: failed.append(_lib.library().tessera_alloc(1 << 30, 0, None)))
        thread.start()
        thread.join()
        self.assertEqual(failed, [None])
        self.assertEqual(tessera.last_error(), "", "no fallback to another thread's message")
        self.assertEqual(_lib.last_error_code(), ErrorCode.OK)
        self.assertIn(b"out_of_memory", _lib.library().tessera_last_error_any_thread())

    def test_tags_come_from_the_c_abi_whatever_their_names(self):
        names = ["errors.with.dots", 'say "hi"', "gewichte-ä重"]
        pointers = []
        for name in names:
            with tessera.region(name):
                pointers.append(allocate(MiB))
        listed = tessera.tags()
        for name in names:
            self.assertIn(name, listed)
        self.assertIn("default", listed)
        tessera.pause(names[0])
        states = tessera.tag_stats()
        self.assertTrue(states[names[0]]["paused"])
        self.assertFalse(states[names[1]]["paused"])
        self.assertEqual(states[names[2]]["allocated_bytes"], MiB)
        tessera.resume(names[0])
        self.assertEqual(tessera.tags(device=5), [], "no allocator there")
        with self.assertRaises(tessera.TesseraValueError) as raised:
            tessera.tags(device=64)
        self.assertIn("device 64 is out of range", str(raised.exception))
        for pointer in pointers:
            free(pointer)

    def test_out_of_memory_is_torchs_kind_once_torch_is_imported(self):
        imported_before = "torch" in sys.modules
        try:
            import torch
        except ImportError as error:
            self.skipTest(f"PyTorch is not importable ({error})")
        torch_class = getattr(torch.cuda, "OutOfMemoryError", None)
        if torch_class is None:  # an older PyTorch: the class stays a MemoryError only
            with self.assertRaises(tessera.TesseraOutOfMemoryError):
                allocate(1 << 30)
            return
        if not imported_before:
            self.assertFalse(issubclass(tessera.TesseraOutOfMemoryError, torch_class), "torch was not loaded")
        with self.assertRaises(torch_class) as raised:  # what PyTorch's own out-of-memory handlers catch
            allocate(1 << 30)
        self.assertIsInstance(raised.exception, tessera.TesseraOutOfMemoryError)
        self.assertIsInstance(raised.exception, MemoryError)
        self.assertTrue(issubclass(tessera.TesseraOutOfMemoryError, torch_class))


# empty_cache fails where a device cannot be used: in a fork()'s child of a process with a CUDA device (the
# fake libcuda), which must start its workers with 'spawn'.
EMPTY_CACHE_IN_A_FORK = """
import os, tessera
from tessera import _lib
pointer = _lib.call("tessera_alloc", 4096, 0, None, failure=None)
_lib.call("tessera_free", pointer, 4096, 0, None)
child = os.fork()
if child == 0:
    try:
        tessera.empty_cache()
        os._exit(10)
    except tessera.TesseraUnavailableError as error:
        os._exit(0 if "fork()" in str(error) and "tessera_empty_cache" in str(error) else 11)
    except BaseException:
        os._exit(12)
_, status = os.waitpid(child, 0)
print("child", os.waitstatus_to_exitcode(status))
tessera.empty_cache()
print("parent emptied")
"""


class EmptyCacheFailureTest(unittest.TestCase):
    def test_empty_cache_raises_its_failure(self):
        fake_cuda = os.environ.get("TESSERA_FAKE_CUDA_LIBRARY")
        if not fake_cuda:
            self.skipTest("TESSERA_FAKE_CUDA_LIBRARY is not set (CTest sets it)")
        environment = dict(os.environ, TESSERA_CUDA_LIBRARY=fake_cuda)
        for name in ("TESSERA_DRIVER", "TESSERA_CAPACITY"):
            environment.pop(name, None)
        completed = subprocess.run([sys.executable, "-c", EMPTY_CACHE_IN_A_FORK], env=environment,
                                   capture_output=True, text=True, timeout=60)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.split(), ["child", "0", "parent", "emptied"], completed.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
