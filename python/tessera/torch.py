"""Makes Tessera PyTorch's allocator.

    import tessera.torch
    tessera.torch.enable("cuda")   # CUDAPluggableAllocator (PyTorch >= 2.0), before the first CUDA tensor
    tessera.torch.enable("npu")    # torch_npu's NPUPluggableAllocator and its statistics hooks (untested on Ascend
                                   # hardware and against torch_npu itself)
    tessera.torch.enable("cpu")    # libtorch's CPU allocator, through libtessera_torch_cpu.so (host driver)

Then tessera.memory_stats(), memory_summary(), record_memory_history() and dump_snapshot() report on it; with
patch_torch=True PyTorch's own torch.cuda.memory_stats(), max_memory_reserved(), ... do too (tessera.torch_views).
docs/pytorch.md is the guide, with the known limits.
"""

import ctypes
import os
import warnings
from pathlib import Path

import torch

from tessera import _lib, errors, pytorch_conf, torch_views
from tessera.errors import TesseraError

errors.adopt_torch_out_of_memory()  # torch is imported now: tessera's out-of-memory error is torch's kind too

__all__ = ["enable", "enabled", "mem_pool"]

_enabled = {}  # "cuda" | "npu" | "cpu" -> the allocator object PyTorch holds (kept alive here)
_CPU_LIBRARY_NAME = "libtessera_torch_cpu.so"


def enabled(device="cuda"):
    """Whether enable(device) has made Tessera the allocator of that device type in this process."""
    return _device_type(device) in _enabled


def enable(device="cuda", conf=None, driver=None, patch_torch=False):
    """Makes Tessera the allocator of `device` ("cuda", "npu" or "cpu") in this process.

    conf: the allocator's configuration, `key:value,...` as in TESSERA_ALLOC_CONF (None: that variable). On cuda
          and npu, PyTorch's variable (PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_NPU_ALLOC_CONF) counts
          too: the keys that mean the same in Tessera are honoured, the others ignored, and a warning says once
          which (tessera/pytorch_conf.py).
    driver: forces the driver ("cuda", "ascend", "host", "sim"; None: TESSERA_DRIVER, else the device's own).
    patch_torch: also make PyTorch's own memory functions (torch.cuda.memory_stats(), max_memory_reserved(),
          memory_summary(), memory._snapshot(), ...; torch_npu's on npu; torch.cuda's on cpu, which then need no
          CUDA) answer with Tessera's figures: tessera.torch_views.patch(device). False leaves them as they are;
          tessera.torch_views.unpatch() restores PyTorch's.

    On cuda and npu it must come before PyTorch's first allocation on the device: PyTorch cannot swap an
    allocator that has served memory, and enable() raises TesseraError saying so. On cpu, tensors allocated
    before keep their allocator; new ones come from Tessera. Raises TesseraError naming any other problem (a bad
    configuration key, no CUDAPluggableAllocator in this PyTorch, no libtessera_c.so).

    Calling it again for the same device changes nothing when conf and driver are None or name what is in use (a
    configuration is compared by its values, not its text). Other settings are checked as configure() checks
    them: once the allocator exists (on cpu, from the first enable) that is TesseraError "too late to change the
    configuration" (or to choose the driver); before, they apply to the allocator still to be created.
    """
    kind = _device_type(device)
    conf = _with_pytorch_conf(kind, conf)
    if kind in _enabled:
        _enable_again(kind, conf, driver)
    elif kind == "cuda":
        _enabled[kind] = _enable_cuda(conf, driver)
    elif kind == "npu":
        _enabled[kind] = _enable_npu(conf, driver)
    else:
        _enabled[kind] = _enable_cpu(conf, driver)
    if patch_torch:
        torch_views.patch(kind)
    return _enabled[kind]


_mem_pool_allocators = []  # the pluggable allocators behind mem_pool()'s pools, kept alive here


def mem_pool(tag=None, enable_cpu_backup=False):
    """A torch.cuda.MemPool (PyTorch 2.5 and later) whose segments come from Tessera under `tag`:

        pool = tessera.torch.mem_pool("kv_cache")
        with torch.cuda.use_mem_pool(pool):
            kv_cache = torch.empty(...)      # only this code's memory is Tessera's
        tessera.pause("kv_cache"); tessera.resume("kv_cache")

    The rest of the process stays on PyTorch's allocator; enable() is not needed (and not wanted: with it, every
    allocation is Tessera's already). PyTorch's caching allocator asks Tessera for whole segments and splits them
    itself, so Tessera pauses, resumes and backs up (enable_cpu_backup) those segments, but does not defragment
    inside them (docs/pytorch.md, "torch.cuda.MemPool"). A process may have TESSERA_MEM_POOL_SLOTS (8) such pools
    of distinct (tag, enable_cpu_backup); the same pair gives a pool over the same slot. Raises TesseraError
    when this PyTorch has no torch.cuda.MemPool, or naming a refused tag."""
    memory = getattr(torch.cuda, "memory", None)
    pool_type = getattr(torch.cuda, "MemPool", None) or getattr(memory, "MemPool", None)
    if pool_type is None or memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
        raise TesseraError(f"tessera.torch.mem_pool: PyTorch {torch.__version__} has no torch.cuda.MemPool "
                           "(it arrived in PyTorch 2.5)")
    try:
        slot = _lib.call("tessera_mem_pool_slot", _lib.encode(tag), 1 if enable_cpu_backup else 0, failure=-1)
    except TesseraError as error:
        raise type(error)(f"tessera.torch.mem_pool: {error}", error.code) from None
    allocator = memory.CUDAPluggableAllocator(_lib.path(), f"tessera_mem_pool_alloc_{slot}", "tessera_free")
    _mem_pool_allocators.append(allocator)
    return pool_type(_allocator_handle(allocator))


def _with_pytorch_conf(kind, conf):
    """PyTorch's allocator variable for this device: its shared keys honoured, the rest named (once)."""
    merged, notice = pytorch_conf.merge(kind, conf)
    pytorch_conf.tell_once(notice, lambda text: warnings.warn(text, stacklevel=4))
    return merged


def _device_type(device):
    kind = getattr(device, "type", None) or str(device).split(":", 1)[0]
    if kind not in ("cuda", "npu", "cpu"):
        raise TesseraError(f"tessera.torch.enable: unknown device {device!r}: expected 'cuda', 'npu' or 'cpu'")
    return kind


def _enable_again(kind, conf, driver):
    """A second enable() never ignores its settings: the same are accepted, others refused as too late."""
    if kind == "cpu":
        _check_cpu_driver(driver)
    if conf is None and driver is None:
        return
    try:
        _lib.call("tessera_configure", _lib.encode(driver), _lib.encode(conf), failure=-1)
    except TesseraError as error:
        raise type(error)(f"tessera.torch.enable({kind!r}): {error}", error.code) from None


def _check_cpu_driver(driver):
    if driver not in (None, "host"):
        raise TesseraError(f"tessera.torch.enable('cpu') runs on the host driver only, not {driver!r}")


def _configure(driver, conf):
    _lib.call("tessera_configure", _lib.encode(driver), _lib.encode(conf), failure=-1)
    return _lib.library()


def _allocator_handle(allocator):
    """The C++ allocator object behind PyTorch's (or torch_npu's) Python wrapper: the one with the set_*_fn."""
    return allocator.allocator() if hasattr(allocator, "allocator") else getattr(allocator, "_allocator", None)


def _address(lib, symbol):
    """A C function's address, as the pluggable allocators' setters take it (an integer)."""
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def _install_hooks(allocator, prefix, reset_name):
    """The optional hooks of a pluggable allocator, where this PyTorch offers them."""
    lib = _lib.library()
    handle = _allocator_handle(allocator)
    hooks = {
        "set_init_fn": f"tessera{prefix}_init",
        "set_reset_fn": reset_name,
        "set_memory_fraction_fn": f"tessera{prefix}_set_memory_fraction",
        "set_record_stream_fn": f"tessera{prefix}_record_stream",
    }
    for setter, symbol in hooks.items():
        if handle is not None and hasattr(handle, setter):
            getattr(handle, setter)(_address(lib, symbol))


# PyTorch's CUDA graph pool hooks (CUDAPluggableAllocator, PyTorch 2.3 and later; torch_npu's where it has them):
# the setter -> the C function (tessera_torch_hooks.hpp) with the C++ type PyTorch casts its address to. All three
# or none: a begin without its end would route every later allocation of the capture's streams to the pool.
_POOL_HOOKS = {
    "set_begin_allocate_to_pool": "tessera{}_begin_allocate_to_pool",
    "set_end_allocate_to_pool_fn": "tessera{}_end_allocate_to_pool",
    "set_release_pool": "tessera{}_release_pool",
}


def _install_pool_hooks(allocator, kind, prefix):
    """Installs the graph pool hooks where this PyTorch offers all three setters; says once what it did.
    Returns whether they are installed."""
    lib = _lib.library()
    handle = _allocator_handle(allocator)
    offered = [setter for setter in _POOL_HOOKS if handle is not None and hasattr(handle, setter)]
    installed = len(offered) == len(_POOL_HOOKS)
    if installed:
        for setter in offered:
            getattr(handle, setter)(_address(lib, _POOL_HOOKS[setter].format(prefix)))
        notice = (f"tessera.torch.enable({kind!r}): graph pool hooks installed ({', '.join(offered)}): a captured "
                  "graph takes its memory from a Tessera graph pool, which keeps it until the graph is destroyed")
    else:
        lacking = [setter for setter in _POOL_HOOKS if setter not in offered]
        notice = (f"tessera.torch.enable({kind!r}): this PyTorch ({torch.__version__}) lacks "
                  f"{', '.join(lacking)} (PyTorch 2.3 has them), so graph capture cannot use Tessera: "
                  + _WITHOUT_POOL_HOOKS[kind])
    pytorch_conf.tell_once(notice, lambda text: warnings.warn(text, stacklevel=6))  # at enable()'s caller
    return installed


# What a capture does where the hooks are not installed (_guard_graph_capture).
_WITHOUT_POOL_HOOKS = {
    "cuda": ("an allocation on a stream capturing a CUDA graph is refused with an error (a RuntimeError during the "
             "capture) rather than taken from the cache that eager tensors share"),
    "npu": "do not capture graphs with Tessera enabled (whether an NPU stream is capturing is not checked)",
}


def _guard_graph_capture(allocator, kind, prefix):
    """The graph pool hooks where this PyTorch takes them; else, on cuda, graph capture refused: a graph's memory
    would come from the shared cache, and eager tensors could later get memory the graph replays into (tessera_c.h,
    tessera_refuse_graph_capture). On npu nothing is refused: the ascend driver cannot tell a capturing stream.
    Returns whether the hooks are installed."""
    installed = _install_pool_hooks(allocator, kind, prefix)
    if not installed and kind == "cuda":
        _lib.call("tessera_refuse_graph_capture", 1, failure=-1)  # raises TesseraError if it fails
    return installed


# torch_npu's statistics hooks (NPUPluggableAllocator of torch_npu 2.7.1; earlier ones may lack them), so that
# torch_npu.npu.memory_stats(), max_memory_reserved() and memory_summary() read Tessera's figures (tessera_c.h:
# tessera_npu_device_stats).
_NPU_STATS_HOOKS = {
    "set_get_device_stats_fn": "tessera_npu_get_device_stats",
    "set_reset_peak_status_fn": "tessera_npu_reset_peak_stats",
}


def _install_npu_stats_hooks(allocator):
    """Installs the statistics hooks this torch_npu offers; says once which, and which it lacks. Returns the
    setters installed."""
    lib = _lib.library()
    handle = _allocator_handle(allocator)
    installed = [setter for setter in _NPU_STATS_HOOKS if handle is not None and hasattr(handle, setter)]
    for setter in installed:
        getattr(handle, setter)(_address(lib, _NPU_STATS_HOOKS[setter]))
    lacking = [setter for setter in _NPU_STATS_HOOKS if setter not in installed]
    notice = "tessera.torch.enable('npu'): NPUPluggableAllocator statistics hooks installed: " + (
        ", ".join(installed) or "none")
    if lacking:
        notice += ("; this torch_npu lacks " + ", ".join(lacking) + " (torch_npu 2.7.1 has them), so "
                   "torch_npu.npu.memory_stats() cannot show Tessera's figures: read tessera.memory_stats()")
    # set_snapshot_fn's hook returns torch_npu's C++ SnapshotInfo (std::vector members): no C function can.
    notice += ("; set_snapshot_fn left unset (a C library cannot build its C++ SnapshotInfo): "
               "use tessera.dump_snapshot()")
    pytorch_conf.tell_once(notice, lambda text: warnings.warn(text, stacklevel=6))  # at enable()'s caller
    return installed


def _enable_cuda(conf, driver):
    memory = getattr(torch.cuda, "memory", None)
    if memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
        raise TesseraError(f"tessera.torch.enable('cuda'): PyTorch {torch.__version__} has no "
                           "torch.cuda.memory.CUDAPluggableAllocator (it arrived in PyTorch 2.0)")
    if not torch.cuda.is_available():  # does not initialize PyTorch's allocator
        raise TesseraError(f"tessera.torch.enable('cuda'): PyTorch {torch.__version__} sees no CUDA device")
    if torch.cuda.is_initialized():
        raise TesseraError("tessera.torch.enable('cuda') is too late: CUDA is initialized in this process, so "
                           "PyTorch's own allocator is in place and cannot be swapped. Call it before the first CUDA "
                           "tensor (and before anything that initializes CUDA, such as torch.cuda.get_device_name).")
    _configure(driver, conf)
    allocator = memory.CUDAPluggableAllocator(_lib.path(), "tessera_torch_alloc", "tessera_free")
    _install_hooks(allocator, "", "tessera_empty_cache")
    _guard_graph_capture(allocator, "cuda", "")
    try:
        memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise TesseraError(f"tessera.torch.enable('cuda') is too late: PyTorch refused to swap its allocator "
                           f"({error}). Call it before the first CUDA allocation.") from error
    return allocator


def _enable_npu(conf, driver):
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
        from torch_npu.npu import memory
    except ImportError as error:
        raise TesseraError(f"tessera.torch.enable('npu') needs torch_npu, which is not importable ({error})") from error
    if not hasattr(memory, "NPUPluggableAllocator"):
        raise TesseraError("tessera.torch.enable('npu'): this torch_npu has no NPUPluggableAllocator")
    _configure(driver, conf)
    allocator = memory.NPUPluggableAllocator(_lib.path(), "tessera_torch_npu_alloc", "tessera_npu_free")
    _install_hooks(allocator, "_npu", "tessera_npu_empty_cache")
    _install_npu_stats_hooks(allocator)
    _guard_graph_capture(allocator, "npu", "_npu")
    try:
        memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise TesseraError(f"tessera.torch.enable('npu') is too late: torch_npu refused to swap its allocator "
                           f"({error}). Call it before the first NPU allocation.") from error
    return allocator


def _cpu_library_path():
    explicit = os.environ.get("TESSERA_TORCH_CPU_LIBRARY")
    if explicit:
        return Path(explicit)
    c_library = Path(_lib.path()).resolve()
    candidates = [c_library.parent / _CPU_LIBRARY_NAME,                    # installed side by side
                  c_library.parent.parent.parent / "torch_cpu" / _CPU_LIBRARY_NAME]  # build/src/capi -> build/torch_cpu
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise TesseraError(f"cannot find {_CPU_LIBRARY_NAME} (looked in " + ", ".join(str(c.parent) for c in candidates)
                       + "): it is built where Debian's libtorch-dev is installed; or set TESSERA_TORCH_CPU_LIBRARY")


def _enable_cpu(conf, driver):
    _check_cpu_driver(driver)
    _lib.library()  # load libtessera_c.so first: the CPU library then binds to this same copy
    path = _cpu_library_path()
    try:
        glue = ctypes.CDLL(str(path))
    except OSError as error:
        raise TesseraError(f"cannot load {path}: {error}") from error
    glue.tessera_torch_cpu_enable.restype = ctypes.c_int
    glue.tessera_torch_cpu_enable.argtypes = [ctypes.c_char_p]
    glue.tessera_torch_cpu_enabled.restype = ctypes.c_int
    if glue.tessera_torch_cpu_enable(_lib.encode(conf)) != 0:
        _lib.fail("tessera_torch_cpu_enable")
    if glue.tessera_torch_cpu_enabled() != 1:
        raise TesseraError("tessera.torch.enable('cpu'): libtorch kept another CPU allocator of higher priority")
    return glue
