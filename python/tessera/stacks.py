"""Python stacks for the allocation history: tessera.record_memory_history(stacks="python") installs a capture
in libtessera_c.so (tessera_set_history_stacks) that files, with each recorded allocation, the Python frames of
the thread that made it, so that https://pytorch.org/memory_viz shows who allocated what.

The capture runs on the allocating thread, before Tessera takes any lock of its own:
  - only on a thread the interpreter knows (PyGILState_GetThisThreadState is not NULL, asked without the GIL):
    a thread of libtorch's own that never ran Python records no stack, and never waits for the GIL;
  - a ctypes callback takes the GIL itself, so a thread that let the GIL go (libtorch's operators do, and so
    does ctypes around every foreign call) gets its frames as they stood when it called into C;
  - it never raises into Tessera: a failure costs the allocation its stack, not the allocation.
It is removed at interpreter exit, before the interpreter goes away. docs/pytorch.md says what it costs.
"""

import atexit
import ctypes
import sys
import threading

from tessera._lib import call

MAX_FRAMES = 64  # the innermost ones: deep enough for a model's forward, cheap enough for every allocation

_READY = ctypes.CFUNCTYPE(ctypes.c_int)
_CAPTURE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)

_lock = threading.Lock()
_installed = False
_exit_hook = False


# Each stack as its text, made once: a training loop allocates from the same few hundred places again and
# again, and formatting is most of what a capture would cost. Keyed by the frames' code objects and lines.
_texts = {}


def _frames_text(capacity):
    """The calling thread's Python frames, innermost first, one a line "filename<TAB>line<TAB>name", at most
    `capacity` bytes of UTF-8."""
    frame = sys._getframe(2)  # 0: this function, 1: the callback, 2: the code that called into C
    key = []
    while frame is not None and len(key) < 2 * MAX_FRAMES:
        key.append(frame.f_code)
        key.append(frame.f_lineno)
        frame = frame.f_back
    key = tuple(key)
    text = _texts.get(key)
    if text is None or len(text) > capacity:
        lines = []
        size = 0
        for code, line_number in zip(key[0::2], key[1::2]):
            line = f"{code.co_filename}\t{line_number or 0}\t{code.co_name}\n".encode("utf-8", "replace")
            if size + len(line) > capacity:
                break
            lines.append(line)
            size += len(line)
        text = b"".join(lines)
        _texts[key] = text
    return text


def _capture(buffer, capacity):
    try:
        text = _frames_text(capacity)
        ctypes.memmove(buffer, text, len(text))
        return len(text)
    except BaseException:  # nothing may cross into C; the allocation goes on without a stack
        return 0


# Kept for the life of the process: the library may call them until tessera_set_history_stacks(NULL) returns,
# and a thread may be inside one when it does.
_capture_function = _CAPTURE(_capture)
_ready_function = ctypes.cast(ctypes.pythonapi.PyGILState_GetThisThreadState, ctypes.c_void_p)


def install():
    """Each allocation the history records from now on carries the Python frames of the thread that made it."""
    global _installed, _exit_hook
    with _lock:
        call("tessera_set_history_stacks", ctypes.cast(_capture_function, ctypes.c_void_p), _ready_function,
             failure=-1)
        _installed = True
        if not _exit_hook:
            atexit.register(remove)
            _exit_hook = True


def remove():
    """No stacks from now on (a no-op when none were installed)."""
    global _installed
    with _lock:
        if not _installed:
            return
        call("tessera_set_history_stacks", None, None, failure=-1)
        _installed = False


def installed():
    """Whether allocations the history records carry Python stacks."""
    return _installed
