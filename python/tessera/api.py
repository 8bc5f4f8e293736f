"""The package's functions over the C ABI: configuration, statistics, summary, history, snapshots, tags. The
tessera package re-exports them (tessera/__init__.py); regions.py and torch_views.py build on them.

Every function that calls into libtessera_c.so checks the call's error code (tessera_c.h, "Errors") and
raises the exception of its kind (tessera/errors.py), with Tessera's message.
"""

import json
import operator
import sys

from tessera import _lib
from tessera._lib import call, encode
from tessera.errors import TesseraValueError

__all__ = [
    "configure",
    "driver",
    "dump_snapshot",
    "empty_cache",
    "has_allocator",
    "last_error",
    "library_path",
    "memory_stats",
    "memory_summary",
    "record_memory_history",
    "reset_peak_memory_stats",
    "tag_stats",
    "tags",
    "version",
]

_MAX_DEVICES = 64  # max_devices of the C ABI (src/capi/registry.hpp)


def device_index(device, function):
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


def last_error():
    """The message of the most recent Tessera call on this thread when it failed; '' when it succeeded. Every
    function of the package raises its failure already: this is for calls made through tessera._lib directly."""
    return _lib.last_error()


def configure(driver=None, conf=None):
    """Chooses the driver ("cuda", "ascend", "host", "sim") and the configuration (TESSERA_ALLOC_CONF's
    `key:value,...` form) for the allocators not created yet; None keeps the environment's. Checks both now
    and raises TesseraValueError naming the problem."""
    call("tessera_configure", encode(driver), encode(conf), failure=-1)


def driver():
    """The driver the allocators use ('' before the first allocation)."""
    return call("tessera_driver_name").decode()


def has_allocator(device=0):
    """Whether the allocator of the device exists (it is created by the device's first allocation)."""
    return call("tessera_has_allocator", device_index(device, "has_allocator"), failure=-1) == 1


def version():
    return call("tessera_version").decode()


def library_path():
    """The path of the libtessera_c.so in use."""
    return _lib.path()


def memory_stats(device=None):
    """A dict with PyTorch's memory_stats() keys ("allocated_bytes.all.current", "reserved_bytes.all.peak",
    "allocation.all.allocated", "num_ooms", ...) and Tessera's own under "tessera." ("tessera.driver",
    "tessera.stitches", ...). All zero before the device's first allocation. device None: device 0."""
    return json.loads(call("tessera_memory_stats_json", device_index(device, "memory_stats"), failure=None))


def memory_summary(device=None, abbreviated=False):
    """A text table of the statistics, like torch.cuda.memory_summary() (device None: device 0). Tessera's
    table has one size: `abbreviated` changes nothing."""
    return call("tessera_memory_summary", device_index(device, "memory_summary"), failure=None).decode()


def reset_peak_memory_stats(device=None):
    """Every peak of memory_stats() ("*.peak": bytes and counts of every pool) starts again from the current
    value, as torch.cuda.reset_peak_memory_stats (device None: device 0)."""
    call("tessera_reset_peak_memory_stats", device_index(device, "reset_peak_memory_stats"), failure=-1)


def empty_cache():
    """Gives every cached, unused page of every device back to the driver. Raises the first failure (every
    device is tried)."""
    call("tessera_empty_cache")


def _tags_json(device, function):
    return json.loads(call("tessera_tags_json", device_index(device, function), failure=None))


def tags(device=0):
    """The names of the tags the device's allocator has allocated under, in the order first used, "default"
    among them (the memory allocated outside any region); [] before its first allocation."""
    return [tag["name"] for tag in _tags_json(device, "tags")]


def tag_stats(device=0):
    """{name: {"paused": bool, "allocated_bytes": ..., "reserved_bytes": ..., "paused_bytes": ...,
    "backup_bytes": ...}} for every tag of tags(device), read at one moment."""
    return {tag.pop("name"): tag for tag in _tags_json(device, "tag_stats")}


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
    call("tessera_record_memory_history", entries, failure=-1)


def dump_snapshot(path, device=0):
    """Writes the recorded history and the device's current segments as a PyTorch snapshot (a pickle that
    https://pytorch.org/memory_viz opens; gzip when the path ends in .gz). Raises TesseraNotFoundError when the
    device has no allocator yet."""
    call("tessera_dump_snapshot", encode(str(path)), device_index(device, "dump_snapshot"), failure=-1)
