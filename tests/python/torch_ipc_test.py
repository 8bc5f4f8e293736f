"""tessera.ipc under PyTorch on the CPU (Debian's python3-torch, Tessera as libtorch's CPU allocator on the host
driver with TESSERA_SHAREABLE=1), between two spawned processes:

  - share() in one, open() in the other: the same shape, dtype, strides and storage offset over the same
    memory; a write in either is seen in the other;
  - the sharing process frees the tensor and allocates more of the same size: the other still reads its bytes
    (the lifetime rule: the freed memory is never reused there);
  - a tensor put on a torch.multiprocessing queue after install_reducer() arrives sharing memory, not copied;
  - a handle that is none, a tensor that cannot be shared, close() of a tensor open() did not give, a stale
    handle (the sharing process exited before open()): errors naming what is wrong.

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... PYTHONPATH=python /usr/bin/python3 tests/python/torch_ipc_test.py
"""

import os
import sys
import unittest

from torch_skip import SKIP, skip_reason

os.environ.pop("TESSERA_ALLOC_CONF", None)
os.environ["TESSERA_SHAREABLE"] = "1"  # before the allocator exists, here and in every spawned child

ELEMENTS = 1 << 20  # float32: 4 MiB, two granules


def _importer(handle, opened, written, done, results):
    """The other process: opens the handle, reports what it sees, writes, and reads again after the sharer
    freed its tensor."""
    import tessera.ipc

    tensor = tessera.ipc.open(handle)
    results.put(("view", tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset(), str(tensor.dtype),
                 float(tensor[0, 0]), float(tensor[-1, -1])))
    tensor[0, 0] = -7.0
    opened.set()
    written.wait(60)
    results.put(("after_free", float(tensor[0, 1]), float(tensor[-1, -1])))
    tessera.ipc.close(tensor)
    done.set()


def _queue_receiver(queue, results):
    import tessera.torch

    tessera.torch.enable("cpu")
    tensor = queue.get(timeout=60)
    results.put(("received", float(tensor[5]), tensor.shape[0]))
    tensor[6] = 66.0
    results.put(("wrote", True))
    queue.get(timeout=60)  # the sender read it: done


def _sharer_that_exits(handles, received):
    """Shares a tensor, waits until the handle (and its descriptors) reached the other process, and exits."""
    import torch

    import tessera.ipc
    import tessera.torch

    tessera.torch.enable("cpu")
    tensor = torch.ones(ELEMENTS)
    handles.put((tessera.ipc.share(tensor), os.getpid()))
    received.wait(60)


class TorchIpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import multiprocessing

        import tessera.torch

        tessera.torch.enable("cpu")
        cls.context = multiprocessing.get_context("spawn")

    def test_a_shared_tensor_is_the_same_memory_in_both_processes_and_outlives_the_sharers_free(self):
        import torch

        import tessera.ipc

        base = torch.empty(ELEMENTS, dtype=torch.float32)  # a block of its own, on whole granules
        base.copy_(torch.arange(ELEMENTS, dtype=torch.float32))
        view = base.view(1024, 1024)[1:, ::2]  # an offset and strides to carry
        handle = tessera.ipc.share(view)
        before_first, before_last = float(view[0, 0]), float(view[-1, -1])  # the child writes [0, 0] soon
        opened, written, done = self.context.Event(), self.context.Event(), self.context.Event()
        results = self.context.Queue()
        child = self.context.Process(target=_importer, args=(handle, opened, written, done, results))
        child.start()
        handle.close()
        kind, shape, stride, offset, dtype, first, last = results.get(timeout=120)
        self.assertEqual(kind, "view")
        self.assertEqual(shape, tuple(view.shape))
        self.assertEqual(stride, view.stride())
        self.assertEqual(offset, view.storage_offset())
        self.assertEqual(dtype, "torch.float32")
        self.assertEqual(first, before_first)
        self.assertEqual(last, before_last)
        self.assertTrue(opened.wait(60))
        self.assertEqual(float(view[0, 0]), -7.0, "the sharer does not see the other process's write")
        view[0, 1] = 9.0
        expected_last = float(view[-1, -1])
        del view, base  # the sharer frees its tensor ...
        others = [torch.full((ELEMENTS,), 3.0) for _ in range(3)]  # ... and allocates the same size again
        written.set()
        kind, seen, last = results.get(timeout=60)
        self.assertEqual(kind, "after_free")
        self.assertEqual(seen, 9.0, "the other process lost the sharer's write after its free")
        self.assertEqual(last, expected_last, "the sharer reused the freed memory")
        self.assertTrue(done.wait(60))
        child.join(60)
        self.assertEqual(child.exitcode, 0)
        del others

    def test_a_tensor_on_a_torch_multiprocessing_queue_shares_memory(self):
        import torch
        import torch.multiprocessing as torch_mp

        import tessera.ipc

        tessera.ipc.install_reducer()
        context = torch_mp.get_context("spawn")
        queue, results = context.Queue(), context.Queue()
        child = context.Process(target=_queue_receiver, args=(queue, results))
        child.start()
        tensor = torch.empty(ELEMENTS, dtype=torch.float32)
        tensor.fill_(0.0)
        tensor[5] = 55.0
        queue.put(tensor)
        self.assertEqual(results.get(timeout=120), ("received", 55.0, ELEMENTS))
        self.assertEqual(results.get(timeout=60), ("wrote", True))
        self.assertEqual(float(tensor[6]), 66.0, "the tensor was copied, not shared")
        queue.put(None)
        child.join(60)
        self.assertEqual(child.exitcode, 0)

    def test_bad_handles_and_tensors_are_refused_naming_why(self):
        import torch

        import tessera.ipc
        from tessera.errors import TesseraError, TesseraValueError

        small = torch.ones(100)
        with self.assertRaisesRegex(TesseraValueError, "whole granules"):
            tessera.ipc.share(small)
        with self.assertRaisesRegex(TesseraError, "not a tessera.ipc.Handle"):
            tessera.ipc.open(b"bytes")
        bogus = tessera.ipc.Handle(b"not a handle, but long enough for a header of its own", [], "cpu", 0, 16, "float32",
                                   (4,), (1,), 0)
        with self.assertRaisesRegex(TesseraValueError, "TSIP"):
            tessera.ipc.open(bogus)
        with self.assertRaisesRegex(TesseraError, "not opened by tessera.ipc.open"):
            tessera.ipc.close(small)

    def test_a_handle_whose_sharing_process_exited_is_stale(self):
        import tessera.ipc
        from tessera.errors import TesseraValueError

        handles, received = self.context.Queue(), self.context.Event()
        child = self.context.Process(target=_sharer_that_exits, args=(handles, received))
        child.start()
        handle, pid = handles.get(timeout=120)
        received.set()
        child.join(60)
        self.assertEqual(child.exitcode, 0)
        with self.assertRaisesRegex(TesseraValueError, f"is stale: block 0x[0-9a-f]+ of process {pid} "):
            tessera.ipc.open(handle)
        handle.close()


if __name__ == "__main__":
    reason = skip_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        sys.exit(SKIP)
    unittest.main()
