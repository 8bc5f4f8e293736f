"""Graph capture where PyTorch cannot take Tessera's graph pool hooks (before 2.3): tessera.torch.enable("cuda")
turns on tessera_refuse_graph_capture, and an allocation on a capturing stream is then refused with an error that
names PyTorch 2.3; where the hooks are installed, nothing is refused. Over the cuda driver and the stand-in
libcuda (TESSERA_CUDA_LIBRARY), whose streams capture as the CUDA runtime makes them; PyTorch is stood in for.

    TESSERA_CUDA_LIBRARY=build/tests/libtessera_fake_cuda.so PYTHONPATH=python \
        python3 tests/python/graph_capture_refusal_test.py
"""

import ctypes
import importlib.util
import os
import sys
import types
import unittest
import warnings

from tessera import _lib

if importlib.util.find_spec("torch") is None:
    sys.modules["torch"] = types.ModuleType("torch")
    sys.modules["torch"].__version__ = "stand-in"

import tessera.torch  # noqa: E402

POOL_SETTERS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")
MIB = 1 << 20
TESSERA_ERROR_UNSUPPORTED = 9


def allocator_with(setters):
    """A pluggable allocator's Python object whose C++ handle has only `setters` (each takes an address)."""
    handle = type("FakeHandle", (), {name: (lambda self, address: None) for name in setters})()
    return types.SimpleNamespace(_allocator=handle)


def pytorch_2_1():
    """torch as enable("cuda") sees PyTorch 2.1 on a GPU machine: CUDAPluggableAllocator without the pool setters."""
    swapped = []

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc, free):
            self._allocator = allocator_with(("set_init_fn", "set_reset_fn"))._allocator

    memory = types.SimpleNamespace(CUDAPluggableAllocator=CUDAPluggableAllocator,
                                   change_current_allocator=swapped.append)
    cuda = types.SimpleNamespace(memory=memory, is_available=lambda: True, is_initialized=lambda: False)
    return types.SimpleNamespace(__version__="2.1.0", cuda=cuda), swapped


class GraphCaptureRefusalTest(unittest.TestCase):
    def setUp(self):
        self.lib = _lib.library()
        _lib.call("tessera_configure", b"cuda", None, failure=-1)
        # Device 0's driver from here on, with its context current on this thread (the capture calls need it).
        self.lib.tessera_free(self.allocate(0), MIB, 0, None)
        self.fake = ctypes.CDLL(os.environ["TESSERA_CUDA_LIBRARY"])  # the library the driver loaded: one state
        self.fake.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.fake.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]

    def allocate(self, stream):
        address = self.lib.tessera_alloc(MIB, 0, stream)
        if address is not None:
            return address
        raise AssertionError(_lib.library().tessera_last_error().decode())

    def test_capture_is_refused_only_where_the_hooks_cannot_be_installed(self):
        capture = 0x1234
        self.assertEqual(self.fake.cuStreamBeginCapture_v2(capture, 0), 0)

        # PyTorch 2.3 and later: the hooks route the graph's memory, and nothing is refused.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertTrue(tessera.torch._guard_graph_capture(allocator_with(POOL_SETTERS), "cuda", ""))
        self.lib.tessera_free(self.allocate(capture), MIB, 0, capture)

        # Older: enable() turns the refusal on, and says so.
        stand_in, swapped = pytorch_2_1()
        real_torch, tessera.torch.torch = tessera.torch.torch, stand_in
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                tessera.torch.enable("cuda", driver="cuda")
        finally:
            tessera.torch.torch = real_torch
        self.assertEqual(len(swapped), 1, "enable() made the stand-in allocator PyTorch's")
        notices = [str(w.message) for w in caught if "graph capture" in str(w.message)]
        self.assertEqual(len(notices), 1, [str(w.message) for w in caught])
        self.assertIn("PyTorch 2.3 has them", notices[0])
        self.assertIn("refused with an error", notices[0])

        self.assertIsNone(self.lib.tessera_alloc(MIB, 0, capture))
        self.assertEqual(self.lib.tessera_last_error_code(), TESSERA_ERROR_UNSUPPORTED)
        message = self.lib.tessera_last_error().decode()
        self.assertIn("stream 0x1234 is capturing a CUDA graph", message)
        self.assertIn("PyTorch 2.3 has it", message)
        # Eager work beside the capture is served.
        self.lib.tessera_free(self.allocate(0x5678), MIB, 0, 0x5678)
        graph = ctypes.c_void_p()
        self.assertEqual(self.fake.cuStreamEndCapture(capture, ctypes.byref(graph)), 0)
        self.lib.tessera_free(self.allocate(capture), MIB, 0, capture)


if __name__ == "__main__":
    unittest.main()
