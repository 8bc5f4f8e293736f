"""PyTorch's own memory views answered by Tessera, so that scripts that log torch.cuda.max_memory_reserved() and
its kin keep working (and report Tessera's figures) once Tessera is PyTorch's allocator. Opt-in:

    tessera.torch.enable("cuda", patch_torch=True)   # or tessera.torch_views.patch("cuda") after enable()
    torch.cuda.max_memory_reserved()                 # == tessera.memory_stats()["reserved_bytes.all.peak"]
    tessera.torch_views.unpatch()                    # PyTorch's own functions again

patch() replaces each function of PATCHED that this PyTorch has, in torch.cuda and torch.cuda.memory for the
device types "cuda" and "cpu" (on the CPU path scripts still call torch.cuda's functions; they need no CUDA once
patched), in torch.npu, torch_npu.npu and torch_npu.npu.memory for "npu". A function this PyTorch lacks is not
added (PyTorch 1.13 has no _dump_snapshot). unpatch() puts back the very objects it replaced.

The same functions, with PyTorch 2.x's signatures, are attributes of the tessera package: tessera.memory_allocated(),
max_memory_allocated(), memory_reserved(), max_memory_reserved(), _snapshot(), _record_memory_history() and
_dump_snapshot(), beside tessera.memory_stats(), memory_summary() and reset_peak_memory_stats().
docs/pytorch.md ("PyTorch's own views") is the guide.
"""

import collections
import os
import pickle
import sys
import tempfile
import threading

from tessera import api
from tessera.errors import TesseraError, TesseraValueError

__all__ = ["PATCHED", "patch", "patched", "unpatch"]

# PyTorch's names, patched where the PyTorch (or torch_npu) in use has them.
PATCHED = ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "memory_summary", "_snapshot", "_record_memory_history", "_dump_snapshot")

_lock = threading.Lock()
_patched_type = None  # the device type patched, or None
_originals = []       # (module, name, the object it had) for every attribute replaced


# ---- The functions, with PyTorch 2.x's signatures. A device is None (device 0 here; the current device of
# the patched type through PyTorch), an index, "cuda:N", "npu:N", "cpu" or a torch.device.

def _stat(device, key, function):
    return api.memory_stats(api.device_index(device, function)).get(key, 0)


def memory_allocated(device=None):
    """Bytes of live blocks, rounded as Tessera allocates them: memory_stats()["allocated_bytes.all.current"]."""
    return _stat(device, "allocated_bytes.all.current", "memory_allocated")


def max_memory_allocated(device=None):
    """The peak of memory_allocated() since the start or the last reset_peak_memory_stats()."""
    return _stat(device, "allocated_bytes.all.peak", "max_memory_allocated")


def memory_reserved(device=None):
    """Bytes of the pages Tessera holds from the device, mapped or pooled: memory_stats()["reserved_bytes.all.current"]."""
    return _stat(device, "reserved_bytes.all.current", "memory_reserved")


def max_memory_reserved(device=None):
    """The peak of memory_reserved() since the start or the last reset_peak_memory_stats()."""
    return _stat(device, "reserved_bytes.all.peak", "max_memory_reserved")


def _empty_snapshot(index):
    return {"segments": [], "device_traces": [[] for _ in range(index + 1)]}


def _snapshot(device=None):
    """The snapshot _dump_snapshot() writes, as a dict ("segments", "device_traces", and whatever else Tessera's
    writer puts in): the file tessera.dump_snapshot() writes, read back with Python's pickle. With no allocator on
    the device yet, no segment and no event."""
    index = api.device_index(device, "_snapshot")
    if not api.has_allocator(index):
        return _empty_snapshot(index)
    with tempfile.TemporaryDirectory(prefix="tessera-snapshot-") as folder:
        path = os.path.join(folder, "snapshot.pickle")
        api.dump_snapshot(path, index)
        with open(path, "rb") as file:
            return pickle.load(file)  # Tessera's own file, just written


def _dump_snapshot(filename="dump_snapshot.pickle", device=None):
    """Writes the snapshot of the device (None: device 0) to `filename`, as torch.cuda.memory._dump_snapshot:
    a pickle that pytorch.org/memory_viz opens (gzip-compressed when the name ends in .gz)."""
    index = api.device_index(device, "_dump_snapshot")
    if api.has_allocator(index):
        api.dump_snapshot(filename, index)
        return
    with open(filename, "wb") as file:
        pickle.dump(_empty_snapshot(index), file, protocol=4)


_LEGACY_KEYWORDS = ("record_context", "trace_alloc_max_entries", "trace_alloc_record_context", "record_context_cpp")


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           **legacy):
    """Starts or stops Tessera's allocation history, as torch.cuda.memory._record_memory_history.

    enabled: "all" (or True) records the newest max_entries allocs and frees; None (or False) stops and forgets;
    "state" stops recording events (a snapshot then holds the segments and blocks alone). The boolean form of
    PyTorch 1.13 and 2.0 is accepted with its keyword trace_alloc_max_entries (default: tessera's 100000); its
    other keywords are about stack traces. stacks "all" or "python" records the Python frames of each allocation
    (tessera.record_memory_history(stacks="python"); C++ frames are not recorded, so "cpp" records none), unless
    context is None or "state"; Tessera records every device's history at once, so `device` is not used.
    """
    unknown = sorted(set(legacy) - set(_LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"_record_memory_history() got an unexpected keyword argument {unknown[0]!r}")
    if isinstance(enabled, bool):
        entries = legacy.get("trace_alloc_max_entries")
        arguments = {"enabled": enabled or None}
        if enabled and entries is not None:
            arguments["max_entries"] = entries
    elif enabled in (None, "state"):
        arguments = {"enabled": None}
    elif enabled == "all":
        arguments = {"enabled": True, "max_entries": max_entries}
    else:
        raise TesseraValueError(f"tessera._record_memory_history: enabled={enabled!r}: expected 'all', 'state', None "
                                "or a bool")
    # PyTorch's stacks "all" and "python" both ask for the Python frames, which Tessera records; C++ frames it does
    # not ("cpp" alone records none).
    if arguments["enabled"] and context not in (None, "state") and stacks in ("all", "python"):
        arguments["stacks"] = "python"
    api.record_memory_history(**arguments)


# ---- Patching.

def _device_type(device_type):
    kind = getattr(device_type, "type", None) or str(device_type).split(":", 1)[0]
    if kind not in ("cuda", "npu", "cpu"):
        raise TesseraValueError(f"tessera.torch_views.patch: unknown device type {device_type!r}: expected 'cuda', "
                                "'npu' or 'cpu'")
    return kind


def _modules(kind):
    """The modules whose functions scripts call for the device type, each once."""
    import torch

    if kind == "npu":
        try:
            import torch_npu
        except ImportError as error:
            raise TesseraError(f"tessera.torch_views.patch('npu') needs torch_npu, which is not importable "
                               f"({error})") from error
        npu = torch_npu.npu
        candidates = [npu, getattr(npu, "memory", None), getattr(torch, "npu", None)]
    else:
        candidates = [torch.cuda, getattr(torch.cuda, "memory", None)]
    modules = []
    for module in candidates:
        if module is not None and all(module is not seen for seen in modules):
            modules.append(module)
    return modules


def _current_device(kind):
    """PyTorch's current device of the type where PyTorch has started it (asking would start it), else 0."""
    if kind == "cpu":
        return 0
    import torch

    namespace = getattr(torch, kind, None)
    try:
        if namespace is not None and namespace.is_initialized():
            return namespace.current_device()
    except (AttributeError, RuntimeError):
        pass
    return 0


def _replacements(kind):
    """PyTorch's functions, answered by Tessera; a device None means PyTorch's current device of `kind`."""
    def resolve(device):
        return _current_device(kind) if device is None else device

    def memory_stats(device=None):
        stats = api.memory_stats(resolve(device))
        numbers = ((key, value) for key, value in stats.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool))
        return collections.OrderedDict(sorted(numbers))

    def reset_peak_memory_stats(device=None):
        api.reset_peak_memory_stats(resolve(device))

    def memory_summary(device=None, abbreviated=False):
        return api.memory_summary(resolve(device), abbreviated)

    def record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                              **legacy):
        _record_memory_history(enabled, context, stacks, max_entries, device, **legacy)

    def dump_snapshot(filename="dump_snapshot.pickle"):
        _dump_snapshot(filename, resolve(None))

    functions = {
        "memory_stats": memory_stats,
        "memory_allocated": lambda device=None: memory_allocated(resolve(device)),
        "max_memory_allocated": lambda device=None: max_memory_allocated(resolve(device)),
        "memory_reserved": lambda device=None: memory_reserved(resolve(device)),
        "max_memory_reserved": lambda device=None: max_memory_reserved(resolve(device)),
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "memory_summary": memory_summary,
        "_snapshot": lambda device=None: _snapshot(resolve(device)),
        "_record_memory_history": record_memory_history,
        "_dump_snapshot": dump_snapshot,
    }
    for name, function in functions.items():
        function.__name__ = function.__qualname__ = name
        function.__doc__ = (f"torch's {name}, answered by Tessera (tessera.torch_views; docs/pytorch.md). "
                            "tessera.torch_views.unpatch() restores PyTorch's own.")
        function.__module__ = __name__
        function.tessera_view = True
    return functions


def patch(device_type="cuda"):
    """Replaces PyTorch's memory functions of the device type ("cuda", "cpu": torch.cuda's; "npu": torch_npu's)
    with Tessera's, keeping the originals for unpatch(). Patching the same type again changes nothing; another
    type while one is patched is a TesseraError (unpatch() first). Returns the names patched."""
    global _patched_type
    kind = _device_type(device_type)
    with _lock:
        if _patched_type == kind:
            return sorted({name for _, name, _ in _originals})
        if _patched_type is not None:
            raise TesseraError(f"tessera.torch_views.patch({kind!r}): PyTorch's functions are patched for "
                               f"{_patched_type!r}; call tessera.torch_views.unpatch() first")
        replacements = _replacements(kind)
        for module in _modules(kind):
            for name in PATCHED:
                if name in vars(module):
                    _originals.append((module, name, vars(module)[name]))
                    setattr(module, name, replacements[name])
        _patched_type = kind
        return sorted({name for _, name, _ in _originals})


def unpatch():
    """Puts back every function patch() replaced (the same objects); nothing to do when none is patched."""
    global _patched_type
    with _lock:
        while _originals:
            module, name, original = _originals.pop()
            setattr(module, name, original)
        _patched_type = None


def patched():
    """The device type whose functions are patched ("cuda", "cpu", "npu"), or None."""
    return _patched_type
