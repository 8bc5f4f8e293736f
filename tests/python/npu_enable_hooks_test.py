"""tessera.torch.enable("npu") against a stand-in torch_npu (put in sys.modules): the allocator it builds from
libtessera_c.so's functions, and the hooks it installs on NPUPluggableAllocator's C++ object, each the address
of the C function meant for it; a torch_npu without the statistics setters is told about, once, by name.
Needs neither torch_npu nor an NPU (PyTorch is stood in for too where python3-torch is absent).

    PYTHONPATH=python python3 tests/python/npu_enable_hooks_test.py
"""

import ctypes
import importlib.util
import os
import sys
import types
import unittest
import warnings

import tessera
from tessera import _lib

# What each setter of torch_npu's NPUPluggableAllocator (v2.7.1) must receive: the C function's address.
EXPECTED = {
    "set_init_fn": "tessera_npu_init",
    "set_reset_fn": "tessera_npu_empty_cache",
    "set_memory_fraction_fn": "tessera_npu_set_memory_fraction",
    "set_record_stream_fn": "tessera_npu_record_stream",
    "set_get_device_stats_fn": "tessera_npu_get_device_stats",
    "set_reset_peak_status_fn": "tessera_npu_reset_peak_stats",
}


def handle_class(setters):
    """The C++ allocator object's Python face, with only the given setters; each records the address it got."""
    def setter(name):
        def record(self, address):
            if not isinstance(address, int):
                raise TypeError(f"{name} takes an integer address, got {address!r}")  # as pybind11's uint64_t
            self.installed[name] = address
        return record
    return type("FakeNPUPluggableAllocatorHandle", (), {name: setter(name) for name in setters})


def fake_torch_npu(setters):
    """torch_npu, torch_npu.npu and torch_npu.npu.memory as far as enable("npu") reaches into them."""
    memory = types.ModuleType("torch_npu.npu.memory")
    memory.swapped_to = []
    handle_type = handle_class(setters)

    class NPUPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            library = ctypes.CDLL(path)  # as torch_npu does: the symbols must resolve
            self.functions = (getattr(library, alloc_fn_name), getattr(library, free_fn_name))
            self.path, self.names = path, (alloc_fn_name, free_fn_name)
            self._allocator = handle_type()
            self._allocator.installed = {}

        def allocator(self):
            return self._allocator

    memory.NPUPluggableAllocator = NPUPluggableAllocator
    memory.change_current_allocator = memory.swapped_to.append
    npu = types.ModuleType("torch_npu.npu")
    npu.memory = memory
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.npu = npu
    return {"torch_npu": torch_npu, "torch_npu.npu": npu, "torch_npu.npu.memory": memory}


def address(symbol):
    return ctypes.cast(getattr(_lib.library(), symbol), ctypes.c_void_p).value


if importlib.util.find_spec("torch") is None:  # tessera.torch imports PyTorch; enable("npu") needs no more of it
    sys.modules["torch"] = types.ModuleType("torch")
    sys.modules["torch"].__version__ = "stand-in"

import tessera.torch  # noqa: E402


class EnableNpuTest(unittest.TestCase):
    def setUp(self):
        for name in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TESSERA_ALLOC_CONF", "TESSERA_DRIVER"):
            os.environ.pop(name, None)

    def test_enable_installs_every_hook_at_its_c_functions_address(self):
        # A torch_npu whose Python object offered set_snapshot_fn too: it is left alone.
        modules = fake_torch_npu(list(EXPECTED) + ["set_erase_stream_fn", "set_snapshot_fn"])
        sys.modules.update(modules)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            allocator = tessera.torch.enable("npu", driver="host")
            again = tessera.torch.enable("npu")
        self.assertIs(again, allocator)
        memory = modules["torch_npu.npu.memory"]
        self.assertEqual(memory.swapped_to, [allocator])
        self.assertEqual(allocator.path, tessera.library_path())
        self.assertEqual(allocator.names, ("tessera_torch_npu_alloc", "tessera_npu_free"))
        installed = allocator.allocator().installed
        self.assertEqual(installed, {setter: address(symbol) for setter, symbol in EXPECTED.items()})
        self.assertEqual(len(set(installed.values())), len(EXPECTED), "six different functions")
        pool_messages = [str(w.message) for w in caught if "graph" in str(w.message)]
        self.assertEqual(len(pool_messages), 1, pool_messages)
        self.assertIn("lacks set_begin_allocate_to_pool", pool_messages[0])  # this torch_npu offers none
        messages = [str(w.message) for w in caught if "statistics hooks" in str(w.message)]
        self.assertEqual(len(messages), 1, messages)  # once, though enable ran twice
        self.assertIn("installed: set_get_device_stats_fn, set_reset_peak_status_fn", messages[0])
        self.assertNotIn("lacks", messages[0])
        self.assertIn("set_snapshot_fn left unset", messages[0])
        self.assertTrue(tessera.torch.enabled("npu"))

        # An older torch_npu, without the statistics setters: the other hooks still go in, the gap is named.
        older = fake_torch_npu(["set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_record_stream_fn"])
        old_allocator = older["torch_npu.npu.memory"].NPUPluggableAllocator(
            tessera.library_path(), "tessera_torch_npu_alloc", "tessera_npu_free")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual(tessera.torch._install_npu_stats_hooks(old_allocator), [])
            tessera.torch._install_npu_stats_hooks(old_allocator)
        self.assertEqual(old_allocator.allocator().installed, {})
        messages = [str(w.message) for w in caught]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("installed: none", messages[0])
        self.assertIn("lacks set_get_device_stats_fn, set_reset_peak_status_fn", messages[0])


if __name__ == "__main__":
    unittest.main()
