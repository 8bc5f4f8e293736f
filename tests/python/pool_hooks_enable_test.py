"""What tessera.torch.enable installs for CUDA graphs, against stand-in pluggable allocators: where the object
offers PyTorch 2.3's three pool setters, each gets the address of the C function with the C++ type PyTorch
casts it to (tessera_torch_hooks.hpp), and a notice says so once; where it lacks one, none is installed and the
notice names what is missing. And tessera.torch.mem_pool against a stand-in torch.cuda.MemPool: the pool's
allocator is a slot function of libtessera_c.so bound to the tag. Needs no GPU (PyTorch is stood in for where
python3-torch is absent).

    PYTHONPATH=python python3 tests/python/pool_hooks_enable_test.py
"""

import ctypes
import importlib.util
import sys
import types
import unittest
import warnings

import tessera
from tessera import _lib

if importlib.util.find_spec("torch") is None:
    sys.modules["torch"] = types.ModuleType("torch")
    sys.modules["torch"].__version__ = "stand-in"

import tessera.torch  # noqa: E402

POOL_SETTERS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")


def allocator_with(setters):
    """A pluggable allocator's Python object whose C++ handle has only `setters`; each records its address."""
    def setter(name):
        def record(self, address):
            if not isinstance(address, int):
                raise TypeError(f"{name} takes an integer address, got {address!r}")
            self.installed[name] = address
        return record
    handle = type("FakeHandle", (), {name: setter(name) for name in setters})()
    handle.installed = {}
    return types.SimpleNamespace(_allocator=handle)


def address(symbol):
    return ctypes.cast(getattr(_lib.library(), symbol), ctypes.c_void_p).value


class PoolHooksEnableTest(unittest.TestCase):
    def test_every_pool_hook_goes_to_its_c_function(self):
        for kind, prefix in (("cuda", ""), ("npu", "_npu")):
            allocator = allocator_with(POOL_SETTERS + ("set_init_fn",))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.assertTrue(tessera.torch._install_pool_hooks(allocator, kind, prefix))
            expected = {
                "set_begin_allocate_to_pool": address(f"tessera{prefix}_begin_allocate_to_pool"),
                "set_end_allocate_to_pool_fn": address(f"tessera{prefix}_end_allocate_to_pool"),
                "set_release_pool": address(f"tessera{prefix}_release_pool"),
            }
            self.assertEqual(allocator._allocator.installed, expected)
            self.assertEqual(len(set(expected.values())), 3)
            messages = [str(w.message) for w in caught]
            self.assertEqual(len(messages), 1, messages)
            self.assertIn("graph pool hooks installed", messages[0])

    def test_a_pytorch_without_all_three_gets_none_and_is_told_what_it_lacks(self):
        allocator = allocator_with(("set_begin_allocate_to_pool", "set_init_fn"))  # end and release missing
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertFalse(tessera.torch._install_pool_hooks(allocator, "cuda", ""))
        self.assertEqual(allocator._allocator.installed, {}, "a begin without its end would trap later allocations")
        messages = [str(w.message) for w in caught]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("lacks set_end_allocate_to_pool_fn, set_release_pool", messages[0])
        self.assertIn("PyTorch 2.3", messages[0])


class MemPoolTest(unittest.TestCase):
    def setUp(self):
        self.torch = sys.modules["torch"]

    def stand_in(self):
        built = []

        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_fn_name, free_fn_name):
                library = ctypes.CDLL(path)  # as PyTorch does: the symbols must resolve
                self.functions = (getattr(library, alloc_fn_name), getattr(library, free_fn_name))
                self.names = (alloc_fn_name, free_fn_name)
                self._allocator = types.SimpleNamespace(owner=self)
                built.append(self)

        class MemPool:
            def __init__(self, allocator=None):
                self.allocator = allocator

        cuda = types.SimpleNamespace(MemPool=MemPool, memory=types.SimpleNamespace(
            CUDAPluggableAllocator=CUDAPluggableAllocator))
        return cuda, built

    def test_mem_pool_builds_a_mem_pool_over_the_tags_slot(self):
        cuda, built = self.stand_in()
        original = getattr(self.torch, "cuda", None)
        self.torch.cuda = cuda
        try:
            pool = tessera.torch.mem_pool("py_kv", enable_cpu_backup=True)
            same = tessera.torch.mem_pool("py_kv", enable_cpu_backup=True)
            other = tessera.torch.mem_pool("py_weights")
        finally:
            self.torch.cuda = original
        slot = _lib.library().tessera_mem_pool_slot(b"py_kv", 1)
        self.assertEqual(built[0].names, (f"tessera_mem_pool_alloc_{slot}", "tessera_free"))
        self.assertIs(pool.allocator.owner, built[0])
        self.assertEqual(built[1].names, built[0].names, "the same tag and choice: the same slot")
        self.assertNotEqual(built[2].names, built[0].names)
        self.assertIsInstance(same, cuda.MemPool)
        self.assertIsInstance(other, cuda.MemPool)

    def test_mem_pool_refuses_a_pytorch_without_mem_pool_and_a_bad_tag(self):
        cuda, _ = self.stand_in()
        original = getattr(self.torch, "cuda", None)
        try:
            self.torch.cuda = types.SimpleNamespace(memory=cuda.memory)  # no MemPool: PyTorch before 2.5
            with self.assertRaisesRegex(tessera.TesseraError, "PyTorch 2.5"):
                tessera.torch.mem_pool("py_kv")
            self.torch.cuda = cuda
            with self.assertRaisesRegex(tessera.TesseraValueError, "control byte"):
                tessera.torch.mem_pool("bad\x01tag")
        finally:
            self.torch.cuda = original


if __name__ == "__main__":
    unittest.main()
