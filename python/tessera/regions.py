"""Pausing memory by tag: the shapes of torch_memory_saver and of vLLM's CuMemAllocator, over Tessera.

    with tessera.region("weights", enable_cpu_backup=True):
        model = build_model()                 # its tensors carry the tag "weights", and each is backed up
    with tessera.region("kv_cache"):
        cache = torch.empty(...)
    tessera.pause()                           # every tag: pages back to the device, addresses kept
    ...                                       # train: the memory is free for other tensors
    tessera.resume()                          # same addresses; the weights restored from their host backups

    tessera.sleep(offload_tags=("weights",))  # vLLM's shape: pause every tag, backing up those named
    tessera.wake_up()

enable_cpu_backup belongs to each tensor, as in torch_memory_saver: the region open when a tensor is allocated
decides for that tensor only, whatever regions are opened later. A paused tensor must not be touched until it is
resumed (on the GPU its addresses are unmapped). Without a backup a resumed tensor's contents are unspecified.
The tag "default" holds every tensor allocated outside a region and is never paused. docs/allocator.md ("Pausing
a tag") and docs/pytorch.md say more.
"""

import contextlib

from tessera import _lib
from tessera.api import device_index, tags
from tessera.errors import TesseraError, TesseraNotFoundError, TesseraValueError

DEFAULT_TAG = "default"


def _tag_bytes(tag, function):
    """The tag as the C ABI takes it; TesseraValueError naming what is wrong with it. The C ABI checks the rest
    (its length, control characters) and refuses with a message of its own."""
    if not isinstance(tag, str) or not tag:
        raise TesseraValueError(f"tessera.{function}: tag {tag!r} is not a non-empty string")
    if tag == DEFAULT_TAG:
        raise TesseraValueError(f"tessera.{function}: tag 'default' holds every tensor allocated outside a region "
                                "and is never paused; give the memory to pause a tag of its own")
    if "\0" in tag:
        raise TesseraValueError(f"tessera.{function}: tag {tag!r} holds a NUL character at index {tag.index(chr(0))} "
                                "(the C string would end there and name another tag)")
    try:
        return tag.encode("utf-8")
    except UnicodeEncodeError as error:
        raise TesseraValueError(f"tessera.{function}: tag {tag!r} cannot be written as UTF-8 ({error.reason} at "
                                f"index {error.start})") from None


@contextlib.contextmanager
def region(tag, enable_cpu_backup=False):
    """Allocations made by this thread inside the block carry `tag`; with enable_cpu_backup every pause backs
    them up (each tensor keeps the choice of the region it was allocated in)."""
    name = _tag_bytes(tag, "region")
    try:
        _lib.call("tessera_push_tag_with_backup", name, 1 if enable_cpu_backup else 0, failure=-1)
    except TesseraError as error:  # the C ABI's refusal of the name: a TesseraValueError
        raise type(error)(f"tessera.region: {error}", error.code) from None
    try:
        yield
    finally:
        # Closes the tag this region opened; it cannot fail, as it was opened on this thread above.
        _lib.call("tessera_pop_tag")


def _allocator_tags(device, function):
    """The tags the device's allocator has memory under, but the default: one list from the C ABI, so that
    regions other threads open meanwhile change nothing here."""
    return [tag for tag in tags(device_index(device, function)) if tag != DEFAULT_TAG]


def _named(tags, function):
    if isinstance(tags, str):
        tags = (tags,)
    return [(tag, _tag_bytes(tag, function)) for tag in tags]


def _check_known(named, device, function):
    known = _allocator_tags(device, function)
    unknown = [tag for tag, _ in named if tag not in known]
    if unknown:
        raise TesseraNotFoundError(f"tessera.{function}: no memory was allocated under tag(s) "
                                f"{', '.join(repr(t) for t in unknown)} on device {device} (tags there: "
                                f"{', '.join(repr(t) for t in known) or 'none'}); nothing was changed")


def _apply(function, named, device, backed_up=()):
    """Pauses or resumes every tag named: each is tried, and the first failure is raised once all were, of its
    kind (a TesseraOutOfMemoryError for a resume without room), naming the tags it left as they were."""
    index = device_index(device, function)
    failures = []
    for tag, name in named:
        try:
            if function in ("pause", "sleep"):
                _lib.call("tessera_pause", index, name, 1 if tag in backed_up else 0, failure=-1)
            else:
                _lib.call("tessera_resume", index, name, failure=-1)
        except TesseraError as error:
            failures.append((tag, error))
    if failures:
        left = ", ".join(repr(tag) for tag, _ in failures)
        state = "paused" if function in ("resume", "wake_up") else "not paused"
        first = failures[0][1]
        raise type(first)(f"tessera.{function}: {first} (tag(s) left {state}: {left})", first.code) from first


def pause(tag=None, device=0):
    """Pauses `tag` (None: every tag the device has memory under, but "default"); the tensors allocated with
    enable_cpu_backup are backed up. Raises TesseraNotFoundError naming the tag when it is unknown, and the
    TesseraError of its kind when the pause fails (nothing is lost)."""
    if tag is None:
        named = _named(_allocator_tags(device, "pause"), "pause")
    else:
        named = _named(tag, "pause")
    _apply("pause", named, device)


def resume(tag=None, device=0):
    """Resumes `tag` (None: every tag the device has memory under, but "default") at the addresses it had. Out
    of memory raises TesseraOutOfMemoryError saying what was needed; the tag stays paused with its backups, and
    resume works once memory is free. Every tag named is tried before a failure is raised."""
    if tag is None:
        named = _named(_allocator_tags(device, "resume"), "resume")
    else:
        named = _named(tag, "resume")
    _apply("resume", named, device)


def sleep(offload_tags=(), device=0):
    """vLLM's CuMemAllocator.sleep: pauses every tag but "default" (the memory allocated outside any region),
    backing up every tensor of the tags in offload_tags (a tag name or a sequence of them) and those allocated
    with enable_cpu_backup. A tag in offload_tags without memory on the device is refused before anything
    pauses: its backup would silently hold nothing."""
    offload = _named(offload_tags, "sleep")
    _check_known(offload, device, "sleep")
    _apply("sleep", _named(_allocator_tags(device, "sleep"), "sleep"), device,
           backed_up={tag for tag, _ in offload})


def wake_up(tags=None, device=0):
    """vLLM's CuMemAllocator.wake_up: resumes `tags` (None: every tag but "default")."""
    if tags is None:
        named = _named(_allocator_tags(device, "wake_up"), "wake_up")
    else:
        named = _named(tags, "wake_up")
        _check_known(named, device, "wake_up")
    _apply("wake_up", named, device)
