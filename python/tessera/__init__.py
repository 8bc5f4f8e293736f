"""Tessera from Python: statistics, summary, history and snapshots of the Tessera allocator, over the C ABI of
libtessera_c.so (ctypes, no build step). Pure Python; PyTorch is needed only by tessera.torch.

    import tessera.torch
    tessera.torch.enable("cuda")              # before the first CUDA tensor
    ...
    tessera.memory_stats()["allocated_bytes.all.peak"]
    print(tessera.memory_summary())
    tessera.record_memory_history()           # then, later:
    tessera.dump_snapshot("snapshot.pickle")  # open it in https://pytorch.org/memory_viz

These are what torch.cuda.memory_stats(), memory_summary() and _dump_snapshot() refuse to give for a pluggable
allocator; PyTorch's own functions of those names answer with Tessera's figures after
tessera.torch.enable(..., patch_torch=True), and the same functions with PyTorch's signatures are here too
(memory_allocated(), max_memory_reserved(), _snapshot(), _record_memory_history(), _dump_snapshot(), ...: see
tessera.torch_views). docs/pytorch.md is the guide.
"""

import json
import operator
import sys

from tessera._lib import TesseraError, TesseraValueError, encode, fail, last_error, library
from tessera.regions import pause, region, resume, sleep, wake_up

__all__ = [
    "TesseraError",
    "TesseraValueError",
    "configure",
    "driver",
    "dump_snapshot",
    "empty_cache",
    "has_allocator",
    "last_error",
    "library_path",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "pause",
    "record_memory_history",
    "region",
    "reset_peak_memory_stats",
    "resume",
    "sleep",
    "version",
    "wake_up",
]


_MAX_DEVICES = 64  # max_devices of the C ABI (src/capi/registry.hpp)


def _device_index(device, function):
    """0, 1, ... from an int, None (0), "cuda:1", "npu:0", "cpu", or a torch.device; TesseraValueError naming
    `function` and the device for anything else. The C ABI refuses an index out of its range, naming the range."""
    try:
        index = _parse_device(device)
    except (TypeError, ValueError):
        raise TesseraValueError(f"tessera.{function}: unknown device {device!r}: expected an index (0, 1, ...), "
                                "'cuda:N', 'npu:N', 'cpu' or a torch.device") from None
    if not -(2**31) <= index < 2**31:  # ctypes would wrap it into a C int, maybe a valid device
        raise TesseraValueError(f"tessera.{function}: device {index} is out of range: Tessera serves devices 0 to "
                                f"{_MAX_DEVICES - 1}")
    return index


def _parse_device(device):
    if device is None:
        return 0
    index = getattr(device, "index", None)  # torch.device
    if getattr(device, "type", None) is not None:
        return 0 if index is None else int(index)
    if isinstance(device, int):
        return device
    text = str(device)
    if ":" in text:
        return int(text.rsplit(":", 1)[1])
    if text in ("cpu", "cuda", "npu"):
        return 0
    return int(text)


def configure(driver=None, conf=None):
    """Chooses the driver ("cuda", "ascend", "host", "sim") and the configuration (TESSERA_ALLOC_CONF's
    `key:value,...` form) for the allocators not created yet; None keeps the environment's. Checks both now
    and raises TesseraError naming the problem."""
    if library().tessera_configure(encode(driver), encode(conf)) != 0:
        fail("tessera_configure")


def driver():
    """The driver the allocators use ('' before the first allocation)."""
    return library().tessera_driver_name().decode()


def has_allocator(device=0):
    """Whether the allocator of the device exists (it is created by the device's first allocation)."""
    found = library().tessera_has_allocator(_device_index(device, "has_allocator"))
    if found < 0:
        fail("tessera_has_allocator")
    return found == 1


def version():
    return library().tessera_version().decode()


def library_path():
    """The path of the libtessera_c.so in use."""
    from tessera import _lib

    return _lib.path()


def memory_stats(device=None):
    """A dict with PyTorch's memory_stats() keys ("allocated_bytes.all.current", "reserved_bytes.all.peak",
    "allocation.all.allocated", "num_ooms", ...) and Tessera's own under "tessera." ("tessera.driver",
    "tessera.stitches", ...). All zero before the device's first allocation. device None: device 0."""
    text = library().tessera_memory_stats_json(_device_index(device, "memory_stats"))
    if text is None:
        fail("tessera_memory_stats_json")
    return json.loads(text)


def memory_summary(device=None, abbreviated=False):
    """A text table of the statistics, like torch.cuda.memory_summary() (device None: device 0). Tessera's
    table has one size: `abbreviated` changes nothing."""
    text = library().tessera_memory_summary(_device_index(device, "memory_summary"))
    if text is None:
        fail("tessera_memory_summary")
    return text.decode()


def reset_peak_memory_stats(device=None):
    """Every peak of memory_stats() ("*.peak": bytes and counts of every pool) starts again from the current
    value, as torch.cuda.reset_peak_memory_stats (device None: device 0)."""
    if library().tessera_reset_peak_memory_stats(_device_index(device, "reset_peak_memory_stats")) != 0:
        fail("tessera_reset_peak_memory_stats")


def empty_cache():
    """Gives every cached, unused page of every device back to the driver."""
    library().tessera_empty_cache()


def record_memory_history(enabled=True, max_entries=100000, stacks=None):
    """Records the newest `max_entries` allocs and frees of every device, and the pages mapped and unmapped
    between them (like torch.cuda.memory._record_memory_history, whose max_entries counts segment entries too).
    enabled None or False, or max_entries 0, stops and forgets. max_entries is a whole number, 0 or more:
    anything else raises TesseraValueError naming it. stacks="python" files the Python frames of the thread
    that made each allocation with it (tessera/stacks.py says how; docs/pytorch.md what it costs); None (the
    default) records no stack. C++ frames are not recorded: stacks="all" and "cpp" raise TesseraValueError."""
    from tessera import stacks as python_stacks

    if stacks not in (None, "python"):
        raise TesseraValueError(f"tessera.record_memory_history: stacks={stacks!r}: expected None or 'python' "
                                "(Tessera records Python frames, not C++ ones)")
    entries = 0
    if enabled not in (None, False):
        try:
            entries = operator.index(max_entries)
        except TypeError:
            raise TesseraValueError(f"tessera.record_memory_history: max_entries={max_entries!r} is not a whole "
                                    "number of entries") from None
        if entries < 0:  # ctypes would pass it on as 2^64 - |max_entries|
            raise TesseraValueError(f"tessera.record_memory_history: max_entries={max_entries!r} is negative: "
                                    "expected the number of entries to keep, 0 or more (0 stops and forgets)")
    entries = min(entries, sys.maxsize)
    if entries > 0 and stacks == "python":
        python_stacks.install()
    else:
        python_stacks.remove()
    if library().tessera_record_memory_history(entries) != 0:
        fail("tessera_record_memory_history")


def dump_snapshot(path, device=0):
    """Writes the recorded history and the device's current segments as a PyTorch snapshot (a pickle that
    https://pytorch.org/memory_viz opens; gzip when the path ends in .gz). Raises TesseraError when the device
    has no allocator yet."""
    if library().tessera_dump_snapshot(encode(str(path)), _device_index(device, "dump_snapshot")) != 0:
        fail("tessera_dump_snapshot")


# PyTorch's functions of the same names, with its signatures (after the functions above, which they call).
from tessera.torch_views import (  # noqa: E402
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
)
