"""Sharing a tensor's memory with another process on the same machine (docs/pytorch.md, "IPC").

    h = tessera.ipc.share(tensor)   # picklable: send it through pickle, a Queue, a Process's arguments
    t = tessera.ipc.open(h)         # in the other process: the same shape, dtype, strides and storage offset,
                                    # over the same memory: writes are seen both ways
    tessera.ipc.close(t)            # when done with it there
    tessera.ipc.install_reducer()   # Tessera tensors through torch.multiprocessing queues share, not copy

Both processes need TESSERA_SHAREABLE=1 in their environment before Tessera's allocator is made (the drivers
then make memory another process can import), and Tessera as the tensor's allocator (tessera.torch.enable).
Only a tensor whose storage is a Tessera block on whole granules can be shared: a storage of a multiple of
2 MiB allocated as such (a smaller or odd-sized one shares a granule with other blocks, and share() raises
TesseraValueError saying so).

The lifetime rule (docs/allocator.md): what a process opened stays valid until it closes it, whatever the
sharing process does after — frees the tensor, exits —; the sharing process never reuses that memory for another
tensor, and a pause of its tag is refused while the tensor lives there. A handle's descriptors travel with
multiprocessing's descriptor passing (multiprocessing.reduction.DupFd), so it must be unpickled while the
process that pickled it lives. A handle is stale once the sharing process has exited (or destroyed its
allocator): open() then raises TesseraValueError naming the block and the process. A child forked from the
sharing process does not keep its handles live. A tensor freed by the sharing process after share() is
not stale: open() gives its bytes as they were at the free.
"""

import ctypes
import os
from multiprocessing import reduction

from tessera import _lib
from tessera.errors import TesseraError

_HANDLE_CAPACITY = 1 << 20
_DESCRIPTOR_CAPACITY = 4096
_opened = {}  # storage address -> device index, for close()


class Handle:
    """What share() gives: the block's handle (bytes), its descriptors (this process's, closed when the handle
    goes) and the tensor's view of the block."""

    def __init__(self, data, descriptors, device_type, device_index, nbytes, dtype, shape, stride, offset):
        self.data = bytes(data)
        self.descriptors = list(descriptors)
        self.device_type = device_type
        self.device_index = device_index
        self.nbytes = nbytes
        self.dtype = dtype  # its name in torch: "float32", ...
        self.shape = tuple(shape)
        self.stride = tuple(stride)
        self.offset = offset

    def __reduce__(self):
        # Each descriptor is duplicated now and handed to the unpickling process by multiprocessing.
        descriptors = [reduction.DupFd(descriptor) for descriptor in self.descriptors]
        return (_rebuild_handle, (self.data, descriptors, self.device_type, self.device_index, self.nbytes,
                                  self.dtype, self.shape, self.stride, self.offset))

    def close(self):
        """Closes this process's descriptors (open() does it; a handle never opened closes when it goes)."""
        descriptors, self.descriptors = self.descriptors, []
        for descriptor in descriptors:
            try:
                os.close(descriptor)
            except OSError:
                pass

    def __del__(self):
        self.close()


def _rebuild_handle(data, descriptors, device_type, device_index, nbytes, dtype, shape, stride, offset):
    return Handle(data, [d.detach() for d in descriptors], device_type, device_index, nbytes, dtype, shape, stride,
                  offset)


def _storage_of(tensor):
    """(address, bytes) of the tensor's storage: untyped_storage() from PyTorch 2.0, storage() before."""
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    return storage.data_ptr(), storage.nbytes()


def _device_index(device):
    return 0 if device.type == "cpu" else (device.index or 0)


def share(tensor):
    """A picklable Handle over the memory of `tensor`'s storage (a Tessera block on whole granules)."""
    address, nbytes = _storage_of(tensor)
    device_index = _device_index(tensor.device)
    data = ctypes.create_string_buffer(_HANDLE_CAPACITY)
    size = ctypes.c_size_t()
    descriptors = (ctypes.c_int * _DESCRIPTOR_CAPACITY)()
    count = ctypes.c_size_t()
    _lib.call("tessera_export", device_index, ctypes.c_void_p(address), data, _HANDLE_CAPACITY,
              ctypes.byref(size), descriptors, _DESCRIPTOR_CAPACITY, ctypes.byref(count), failure=-1)
    return Handle(data.raw[:size.value], descriptors[:count.value], tensor.device.type, device_index,
                  nbytes, str(tensor.dtype).replace("torch.", ""), tensor.shape, tensor.stride(),
                  tensor.storage_offset())


class _CudaMemory:
    """A device range as __cuda_array_interface__, for torch.as_tensor."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 2}


def open(handle):  # noqa: A001 - tessera.ipc.open, as the issue names it
    """The tensor `handle` describes, over the same memory, mapped in this process. The handle's descriptors are
    closed (the mapping holds the memory). Raises the error of its kind: a handle that is none, or whose
    memory cannot be imported, is TesseraValueError naming what is wrong."""
    import torch

    if not isinstance(handle, Handle):
        raise TesseraError(f"tessera.ipc.open: {type(handle).__name__} is not a tessera.ipc.Handle")
    if handle.device_type == "cpu":
        from tessera import torch as tessera_torch
        tessera_torch.enable("cpu")
    descriptors = (ctypes.c_int * max(1, len(handle.descriptors)))(*handle.descriptors)
    try:
        address = _lib.call("tessera_import", handle.device_index, handle.data, len(handle.data), descriptors,
                            len(handle.descriptors), failure=None)
    finally:
        handle.close()  # refused or not: the mapping, if any, holds the memory
    if handle.device_type == "cpu":
        memory = (ctypes.c_uint8 * handle.nbytes).from_address(address)
        flat = torch.frombuffer(memory, dtype=torch.uint8)
    else:
        flat = torch.as_tensor(_CudaMemory(address, handle.nbytes), device=f"{handle.device_type}:{handle.device_index}")
    _opened[address] = handle.device_index
    dtype = getattr(torch, handle.dtype)
    return flat.view(dtype).as_strided(handle.shape, handle.stride, handle.offset)


def close(tensor):
    """Unmaps the memory of a tensor open() gave; the tensor (and every view of it) must not be used after."""
    address = _storage_of(tensor)[0]
    device_index = _opened.pop(address, None)
    if device_index is None:
        raise TesseraError(f"tessera.ipc.close: the tensor at {address:#x} was not opened by tessera.ipc.open")
    _lib.call("tessera_close_import", device_index, ctypes.c_void_p(address), failure=-1)


def _reduce_tensor(tensor):
    """torch.multiprocessing's reducer for a tensor: Tessera's blocks share, every other tensor goes to
    PyTorch's own reducer (which copies CPU tensors into shared memory)."""
    from torch.multiprocessing import reductions

    try:
        return (open, (share(tensor),))
    except TesseraError:
        return reductions.reduce_tensor(tensor)


def install_reducer():
    """Makes tensors put on torch.multiprocessing queues (and other ForkingPickler users) share Tessera's
    memory: a tensor whose storage is a Tessera block on whole granules is opened, not copied, in the receiving
    process. Other tensors keep PyTorch's own reducer."""
    import torch
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(torch.Tensor, _reduce_tensor)
    ForkingPickler.register(torch.nn.parameter.Parameter, _reduce_tensor)
