"""What tessera.torch.enable installs for CUDA graphs, against stand-in pluggable allocators: where the object
offers PyTorch 2.3's three pool setters, each gets the address of the C function with the C++ type PyTorch
casts it to (tessera_torch_hooks.hpp), and a notice says so once; where it lacks one, none is installed and the
notice names what is missing. Needs no GPU (PyTorch is stood in for where python3-torch is absent).

    PYTHONPATH=python python3 tests/python/pool_hooks_enable_test.py
"""

import ctypes
import importlib.util
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


if __name__ == "__main__":
    unittest.main()
