"""PyTorch's allocator configuration variables, read beside Tessera's own (TESSERA_ALLOC_CONF).

A job moved onto Tessera usually still sets PyTorch's variable. Tessera honours the keys that mean the same in
both — garbage_collection_threshold and roundup_power2_divisions (a single number of divisions) — and ignores the
others, and enable() says once which is which: never silently.

Which variable counts, as the frameworks read them: on CUDA, PYTORCH_ALLOC_CONF (PyTorch 2.10's device-neutral
name), else PYTORCH_CUDA_ALLOC_CONF; on NPU, PYTORCH_NPU_ALLOC_CONF, else PYTORCH_ALLOC_CONF (torch_npu's order).
Tessera's own configuration wins: a key set there (or in enable's conf) is taken from there.
"""

import os

# Keys with PyTorch's meaning in Tessera's configuration too.
HONOURED_KEYS = ("garbage_collection_threshold", "roundup_power2_divisions")

# Why the others are ignored, for the keys PyTorch documents; any other key is ignored as unknown to Tessera.
_WHY_IGNORED = {
    "expandable_segments": "Tessera maps pages under blocks itself",
    "max_split_size_mb": "Tessera keeps small requests in their own pool and takes idle pages back",
    "max_non_split_rounding_mb": "Tessera does not round large blocks up to a segment",
    "pinned_use_cuda_host_register": "a setting of pinned host memory, which Tessera does not allocate",
    "pinned_num_register_threads": "a setting of pinned host memory, which Tessera does not allocate",
    "backend": "Tessera is the backend",
    "release_lock_on_cudamalloc": "a detail of PyTorch's own allocator",
}

_VARIABLES = {
    "cuda": ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"),
    "npu": ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF"),
}

_told = set()  # the notices already given in this process


def _entries(text):
    """`key:value,key:value` as PyTorch writes it; a value in brackets may hold commas ([256:1,>:4])."""
    entries, depth, start = [], 0, 0
    for index, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            item = text[start:index].strip()
            start = index + 1
            if item:
                key, _, value = item.partition(":")
                entries.append((key.strip(), value.strip()))
    return entries


def merge(device, conf, environ=None):
    """Tessera's configuration for enable(device, conf) with PyTorch's variable taken into account.

    Returns (conf, notice): the configuration to hand to Tessera (None: Tessera reads TESSERA_ALLOC_CONF itself,
    as before), and the text to tell the user (None when no PyTorch variable is set for this device).
    """
    environ = os.environ if environ is None else environ
    variable = next((name for name in _VARIABLES.get(device, ()) if environ.get(name)), None)
    if variable is None:
        return conf, None
    own_text = conf if conf is not None else environ.get("TESSERA_ALLOC_CONF", "")
    own_keys = {key for key, _ in _entries(own_text)}
    honoured, taken_from_tessera, ignored = [], [], []
    for key, value in _entries(environ[variable]):
        if key in HONOURED_KEYS and value.startswith("["):
            ignored.append(f"{key} (the per-size list; Tessera takes one number of divisions)")
        elif key in HONOURED_KEYS and key in own_keys:
            taken_from_tessera.append(key)
        elif key in HONOURED_KEYS:
            honoured.append((key, value))
        else:
            ignored.append(f"{key} ({_WHY_IGNORED.get(key, 'not a key of Tessera')})")
    merged = conf
    if honoured:
        extra = ",".join(f"{key}:{value}" for key, value in honoured)
        merged = f"{own_text},{extra}" if own_text.strip() else extra
    parts = [f"tessera: {variable} is set"]
    if honoured:
        parts.append("honoured with PyTorch's meaning: " + ", ".join(f"{key}:{value}" for key, value in honoured))
    if taken_from_tessera:
        parts.append("set by Tessera's own configuration instead: " + ", ".join(taken_from_tessera))
    if ignored:
        parts.append("ignored: " + ", ".join(ignored))
    return merged, "; ".join(parts)


def tell_once(notice, warn):
    """Calls warn(notice) the first time this process meets this notice; whether it did."""
    if notice is None or notice in _told:
        return False
    _told.add(notice)
    warn(notice)
    return True
