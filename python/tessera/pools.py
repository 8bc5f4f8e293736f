"""Private pools: memory that only the code inside `use_pool` allocates from, for any device.

    pool = tessera.Pool()                     # a plain pool (kind="graph": keeps its pages, as a CUDA graph's)
    with tessera.use_pool(pool):
        kv_cache = torch.empty(...)           # this thread's allocations go into the pool
    del kv_cache                              # its freed blocks are reused only inside use_pool(pool)
    with tessera.region("kv"), tessera.use_pool(pool):
        ...                                   # under a tag too: tessera.pause("kv") pauses them
    pool.release()                            # the pool is gone; its cached memory goes back to the shared cache

A CUDA graph captured with Tessera enabled uses its own graph pool through PyTorch's hooks (tessera.torch);
this is the same mechanism for code of one's own. docs/pytorch.md ("Private pools") says what each rule is.
"""

import contextlib
import itertools
import threading

from tessera import _lib
from tessera.api import device_index
from tessera.errors import TesseraError, TesseraValueError

__all__ = ["Pool", "use_pool"]

# Ids of the pools made here: (_ID_TAG, n). PyTorch's own pool ids have a small first or second number
# (a graph's uid, or 0), so these never name one of PyTorch's.
_ID_TAG = 0x7E55E7A000000000
_KINDS = {"graph": 0, "plain": 1}
_counter = itertools.count(1)
_counter_lock = threading.Lock()


class Pool:
    """A private pool of one device's Tessera allocator. kind: "plain" (its idle pages may be reclaimed for
    other allocations, as the shared cache's) or "graph" (it keeps every page it was given until released).
    The pool exists from its first use_pool until release()."""

    def __init__(self, kind="plain", device=None):
        if kind not in _KINDS:
            raise TesseraValueError(f"tessera.Pool: kind {kind!r} is neither 'plain' nor 'graph'")
        self.kind = kind
        self.device = device_index(device, "Pool")
        with _counter_lock:
            self.id = (_ID_TAG, next(_counter))
        self._uses = 0
        self._released = False

    def release(self):
        """Releases the pool: its id is forgotten, its cached memory goes back to the shared cache at once, and
        its live tensors' memory as each is freed. Refused while a use_pool of it is open."""
        if self._released:
            raise TesseraValueError(f"tessera.Pool.release: {self!r} is released already")
        if self._uses > 0:
            try:
                _lib.call("tessera_pool_release", self.device, *self.id, failure=-1)
            except TesseraError as error:
                raise type(error)(f"tessera.Pool.release: {error}", error.code) from None
        self._released = True

    def __repr__(self):
        state = "released" if self._released else f"{self._uses} use(s)"
        return f"tessera.Pool(kind={self.kind!r}, device={self.device}, id={self.id}, {state})"


@contextlib.contextmanager
def use_pool(pool):
    """This thread's allocations on the pool's device, inside the block, go into `pool`."""
    if not isinstance(pool, Pool):
        raise TesseraValueError(f"tessera.use_pool: {pool!r} is not a tessera.Pool")
    if pool._released:
        raise TesseraValueError(f"tessera.use_pool: {pool!r} is released")
    try:
        _lib.call("tessera_pool_begin", pool.device, *pool.id, _KINDS[pool.kind], failure=-1)
    except TesseraError as error:
        raise type(error)(f"tessera.use_pool: {error}", error.code) from None
    # Each use_pool adds one use to the C pool; the Pool keeps one for itself, given back by release().
    if pool._uses > 0:
        _lib.call("tessera_pool_release", pool.device, *pool.id, failure=-1)
    pool._uses += 1
    try:
        yield pool
    finally:
        _lib.call("tessera_pool_end", pool.device, *pool.id, failure=-1)
