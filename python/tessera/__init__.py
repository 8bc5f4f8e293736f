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
tessera.torch_views). Failures raise the exception of their kind (tessera.errors: TesseraOutOfMemoryError,
TesseraValueError, TesseraNotFoundError, ..., each a TesseraError). docs/pytorch.md is the guide.

This module only gathers the package's names; they live in tessera.api, tessera.regions, tessera.pools,
tessera.torch_views and tessera.errors, none of which imports this one.
"""

from tessera.api import (
    configure,
    device_index as _device_index,
    driver,
    dump_snapshot,
    empty_cache,
    has_allocator,
    last_error,
    library_path,
    memory_stats,
    memory_summary,
    record_memory_history,
    reset_peak_memory_stats,
    tag_stats,
    tags,
    version,
)
from tessera.errors import (
    ErrorCode,
    TesseraError,
    TesseraHostOutOfMemoryError,
    TesseraNotFoundError,
    TesseraOutOfMemoryError,
    TesseraUnavailableError,
    TesseraUnsupportedError,
    TesseraValueError,
)
from tessera.pools import Pool, use_pool
from tessera.regions import pause, region, resume, sleep, wake_up
from tessera.torch_views import (
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
)

__all__ = [
    "ErrorCode",
    "Pool",
    "TesseraError",
    "TesseraHostOutOfMemoryError",
    "TesseraNotFoundError",
    "TesseraOutOfMemoryError",
    "TesseraUnavailableError",
    "TesseraUnsupportedError",
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
    "tag_stats",
    "tags",
    "use_pool",
    "version",
    "wake_up",
]
