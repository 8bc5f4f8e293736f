"""Pausing memory by tag: the shapes of torch_memory_saver and of vLLM's CuMemAllocator, over Tessera.

    with tessera.region("weights", enable_cpu_backup=True):
        model = build_model()                 # its tensors carry the tag "weights"
    with tessera.region("kv_cache"):
        cache = torch.empty(...)
    tessera.pause()                           # every region's tag: pages back to the device, addresses kept
    ...                                       # train: the memory is free for other tensors
    tessera.resume()                          # same addresses; "weights" restored from its host backup

    tessera.sleep(offload_tags=("weights",))  # vLLM's shape: pause every tag, backing up those named
    tessera.wake_up()

A paused tensor must not be touched until it is resumed (on the GPU its addresses are unmapped). Without a
backup a resumed tag's contents are unspecified, as with torch_memory_saver's enable_cpu_backup=False and the
tags vLLM does not offload. docs/allocator.md ("Pausing a tag") and docs/pytorch.md say more.
"""

import contextlib

from tessera._lib import TesseraValueError, encode, fail, library

# The tags opened with region() in this process, and whether each is backed up when paused.
_backup_of = {}


def _check_tag(tag, function):
    if not isinstance(tag, str) or not tag:
        raise TesseraValueError(f"tessera.{function}: tag {tag!r} is not a non-empty string")
    return tag


@contextlib.contextmanager
def region(tag, enable_cpu_backup=False):
    """Allocations made by this thread inside the block carry `tag`; pause() backs the tag up when
    enable_cpu_backup (the last region opened for a tag decides)."""
    _check_tag(tag, "region")
    _backup_of[tag] = bool(enable_cpu_backup)
    lib = library()
    lib.tessera_push_tag(encode(tag))
    try:
        yield
    finally:
        lib.tessera_pop_tag()


def _allocator_tags(device):
    from tessera import _device_index, memory_stats

    stats = memory_stats(_device_index(device, "pause"))
    return [key[len("tessera.tag."):-len(".paused")] for key in stats
            if key.startswith("tessera.tag.") and key.endswith(".paused")]


def _apply(function, tags, device, backup_of):
    from tessera import _device_index

    index = _device_index(device, function)
    lib = library()
    for tag in tags:
        if function == "pause":
            status = lib.tessera_pause(index, encode(tag), 1 if backup_of(tag) else 0)
        else:
            status = lib.tessera_resume(index, encode(tag))
        if status != 0:
            fail(f"tessera_{function}")


def _region_tags(tag, device, function):
    if tag is not None:
        return [_check_tag(tag, function)]
    # Every region's tag that the device's allocator has memory under (a region may have allocated nothing).
    present = set(_allocator_tags(device))
    return [name for name in _backup_of if name in present]


def pause(tag=None, device=0):
    """Pauses `tag` (None: every tag opened with region()), backing up those opened with enable_cpu_backup.
    Raises TesseraError naming the tag when it is unknown or the pause fails (nothing is lost)."""
    _apply("pause", _region_tags(tag, device, "pause"), device, lambda name: _backup_of.get(name, False))


def resume(tag=None, device=0):
    """Resumes `tag` (None: every tag opened with region()) at the addresses it had. Out of memory raises
    TesseraError saying what was needed; the tag stays paused with its backups, and resume works once memory
    is free."""
    _apply("resume", _region_tags(tag, device, "resume"), device, None)


def sleep(offload_tags=(), device=0):
    """vLLM's CuMemAllocator.sleep: pauses every tag but "default" (the memory allocated outside any region),
    backing up those in offload_tags (a tag name or a sequence of them)."""
    if isinstance(offload_tags, str):
        offload_tags = (offload_tags,)
    offload = {_check_tag(tag, "sleep") for tag in offload_tags}
    tags = [name for name in _allocator_tags(device) if name != "default"]
    _apply("pause", tags, device, lambda name: name in offload)


def wake_up(tags=None, device=0):
    """vLLM's CuMemAllocator.wake_up: resumes `tags` (None: every tag but "default")."""
    if isinstance(tags, str):
        tags = (tags,)
    names = [name for name in _allocator_tags(device) if name != "default"] if tags is None else \
        [_check_tag(tag, "wake_up") for tag in tags]
    _apply("resume", names, device, None)
