"""Python stacks in the allocation history (tessera.record_memory_history(stacks="python"), tessera/stacks.py):
an allocation made from a named Python function carries that function and its file as its innermost frame in
the snapshot that dump_snapshot writes (read back here with Python's own pickle), on its alloc, on its free and
on its block while it is live; without stacks no entry has a frame. Through the C ABI (ctypes, which lets the
GIL go around the call, as libtorch's operators do), and through PyTorch's CPU allocator when python3-torch and
libtessera_torch_cpu.so are at hand (skipped otherwise, saying why).

    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so /usr/bin/python3 tests/python/history_stacks_test.py
"""

import os
import pickle
import tempfile
import threading
import unittest

os.environ["TESSERA_DRIVER"] = "host"  # before the library creates any allocator
os.environ.pop("TESSERA_ALLOC_CONF", None)
os.environ["TESSERA_CAPACITY"] = "256MiB"

import tessera  # noqa: E402
from tessera import _lib  # noqa: E402
from tessera import stacks  # noqa: E402
from torch_skip import skip_reason  # noqa: E402


def allocate_in_named_function(size):
    pointer = _lib.library().tessera_alloc(size, 0, None)
    if not pointer:
        raise AssertionError(tessera.last_error())
    return pointer


def free(pointer, size):
    _lib.library().tessera_free(pointer, size, 0, None)


def snapshot(device=0):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "history.pickle")
        tessera.dump_snapshot(path, device)
        with open(path, "rb") as file:
            return pickle.load(file)


def entries(data, device=0):
    return [entry for entry in data["device_traces"][device] if not entry["action"].startswith("segment")]


def entry_at(data, action, address, device=0):
    found = [entry for entry in entries(data, device) if entry["action"] == action and entry["addr"] == address]
    if not found:
        raise AssertionError(f"no {action} at {address:#x}")
    return found[-1]


class HistoryStacks(unittest.TestCase):
    def tearDown(self):
        tessera.record_memory_history(False)

    def test_an_allocation_names_the_function_and_file_that_made_it(self):
        tessera.record_memory_history(stacks="python")
        self.assertTrue(stacks.installed())
        kept = allocate_in_named_function(3000)
        freed = allocate_in_named_function(5000)
        free(freed, 5000)
        data = snapshot()
        for action, address in (("alloc", kept), ("alloc", freed), ("free_completed", freed)):
            frames = entry_at(data, action, address)["frames"]
            self.assertTrue(frames, f"{action} has frames")
            self.assertEqual(frames[0]["name"], "allocate_in_named_function")
            self.assertEqual(frames[0]["filename"], os.path.abspath(__file__))
            self.assertIsInstance(frames[0]["line"], int)
            self.assertIn("test_an_allocation_names_the_function_and_file_that_made_it",
                          [frame["name"] for frame in frames], "the caller is the next frame out")
        blocks = [block for segment in data["segments"] for block in segment["blocks"] if block["state"] == "active_allocated"]
        live = [block for block in blocks if block["address"] == kept]
        self.assertEqual(len(live), 1)
        self.assertEqual(live[0]["frames"][0]["name"], "allocate_in_named_function")
        free(kept, 3000)

    def test_without_stacks_no_entry_has_a_frame(self):
        tessera.record_memory_history()
        self.assertFalse(stacks.installed())
        pointer = allocate_in_named_function(4000)
        free(pointer, 4000)
        data = snapshot()
        recorded = entries(data)
        self.assertEqual([entry["action"] for entry in recorded], ["alloc", "free_requested", "free_completed"])
        self.assertTrue(all(entry["frames"] == [] for entry in recorded))

    def test_stopping_the_history_removes_the_capture(self):
        tessera.record_memory_history(stacks="python")
        tessera.record_memory_history(enabled=False)
        self.assertFalse(stacks.installed())
        tessera.record_memory_history()
        pointer = allocate_in_named_function(2000)
        self.assertEqual(entry_at(snapshot(), "alloc", pointer)["frames"], [])
        free(pointer, 2000)

    def test_another_python_thread_gets_its_own_frames(self):
        tessera.record_memory_history(stacks="python")
        made = []

        def worker_allocates():
            made.append(allocate_in_named_function(6000))

        thread = threading.Thread(target=worker_allocates)
        thread.start()
        thread.join()
        frames = entry_at(snapshot(), "alloc", made[0])["frames"]
        self.assertEqual([frame["name"] for frame in frames[:2]], ["allocate_in_named_function", "worker_allocates"])
        free(made[0], 6000)

    def test_a_bad_stacks_value_is_refused_by_name(self):
        with self.assertRaises(tessera.TesseraValueError) as raised:
            tessera.record_memory_history(stacks="all")
        self.assertIn("stacks='all'", str(raised.exception))


@unittest.skipIf(skip_reason() is not None, skip_reason() or "")
class TorchCpuStacks(unittest.TestCase):
    def test_a_tensor_names_the_function_that_made_it(self):
        import torch

        import tessera.torch

        tessera.torch.enable("cpu")
        tessera.record_memory_history(stacks="python")

        def make_activation():
            return torch.empty(64, 1024)  # 256 KiB through libtorch's CPU allocator

        tensor = make_activation()
        data = snapshot("cpu")
        frames = entry_at(data, "alloc", tensor.data_ptr())["frames"]
        tessera.record_memory_history(False)
        self.assertTrue(frames, "libtorch lets the GIL go around the operator; the capture takes it back")
        self.assertEqual(frames[0]["name"], "make_activation")
        self.assertEqual(frames[0]["filename"], os.path.abspath(__file__))


if __name__ == "__main__":
    unittest.main()
