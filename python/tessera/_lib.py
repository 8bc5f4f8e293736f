"""Finds and loads libtessera_c.so (the C ABI, include/tessera/tessera_c.h) with ctypes.

Where it looks, first found wins:
  1. the TESSERA_LIBRARY environment variable (the path of libtessera_c.so);
  2. inside this package (where `pip install .` puts it, setup.py);
  3. the build trees of the repository this package sits in: build/src/capi, then any build*/src/capi, newest first;
  4. the dynamic loader's search path (an installed libtessera_c.so, e.g. after `cmake --install`).
"""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

LIBRARY_NAME = "libtessera_c.so"

_lock = threading.Lock()
_library = None
_path = None


class TesseraError(RuntimeError):
    """A failure reported by Tessera; the message names what is wrong."""


class TesseraValueError(TesseraError, ValueError):
    """A bad argument (a device that names none, a negative max_entries): a TesseraError like every failure of
    the package, and a ValueError as Python's own functions raise for a bad value."""


def _candidates():
    explicit = os.environ.get("TESSERA_LIBRARY")
    if explicit:
        return [Path(explicit)], True
    here = Path(__file__).resolve().parent
    found = [here / LIBRARY_NAME]
    repository = here.parent.parent  # python/tessera -> repository root
    found.append(repository / "build" / "src" / "capi" / LIBRARY_NAME)
    others = sorted(repository.glob("build*/src/capi/" + LIBRARY_NAME), key=lambda p: p.stat().st_mtime, reverse=True)
    found.extend(p for p in others if p not in found)
    return found, False


def _declare(lib):
    c = ctypes
    signatures = {
        "tessera_alloc": (c.c_void_p, [c.c_size_t, c.c_int, c.c_void_p]),
        "tessera_free": (None, [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]),
        "tessera_init": (None, [c.c_int]),
        "tessera_empty_cache": (None, []),
        "tessera_set_memory_fraction": (None, [c.c_double, c.c_int]),
        "tessera_record_stream": (None, [c.c_void_p, c.c_void_p]),
        "tessera_configure": (c.c_int, [c.c_char_p, c.c_char_p]),
        "tessera_driver_name": (c.c_char_p, []),
        "tessera_has_allocator": (c.c_int, [c.c_int]),
        "tessera_version": (c.c_char_p, []),
        "tessera_last_error": (c.c_char_p, []),
        "tessera_last_error_any_thread": (c.c_char_p, []),
        "tessera_clear_error": (None, []),
        "tessera_memory_stats_json": (c.c_char_p, [c.c_int]),
        "tessera_memory_summary": (c.c_char_p, [c.c_int]),
        "tessera_reset_peak_memory_stats": (c.c_int, [c.c_int]),
        "tessera_record_memory_history": (c.c_int, [c.c_size_t]),
        "tessera_dump_snapshot": (c.c_int, [c.c_char_p, c.c_int]),
        "tessera_push_tag": (c.c_int, [c.c_char_p]),
        "tessera_push_tag_with_backup": (c.c_int, [c.c_char_p, c.c_int]),
        "tessera_pop_tag": (None, []),
        "tessera_pause": (c.c_int, [c.c_int, c.c_char_p, c.c_int]),
        "tessera_resume": (c.c_int, [c.c_int, c.c_char_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


def library():
    """The loaded library (loaded on first use). Raises TesseraError when it cannot be found."""
    global _library, _path
    with _lock:
        if _library is not None:
            return _library
        candidates, explicit = _candidates()
        tried = []
        for candidate in candidates:
            if not candidate.is_file():
                tried.append(f"{candidate} (absent)")
                continue
            try:
                lib = ctypes.CDLL(str(candidate))
            except OSError as error:
                tried.append(f"{candidate} ({error})")
                continue
            _declare(lib)
            _library, _path = lib, str(candidate)
            return lib
        if not explicit:
            system = ctypes.util.find_library("tessera_c")
            if system:
                try:
                    lib = ctypes.CDLL(system)
                    _declare(lib)
                    _library, _path = lib, system
                    return lib
                except OSError as error:
                    tried.append(f"{system} ({error})")
            else:
                tried.append("the dynamic loader's path (no libtessera_c.so)")
        hint = ("TESSERA_LIBRARY names a file that cannot be loaded" if explicit else
                "build it (cmake --build build --target tessera_c) or set TESSERA_LIBRARY to its path")
        raise TesseraError(f"cannot load {LIBRARY_NAME}: {hint}; tried: " + "; ".join(tried))


def path():
    """The path of the loaded libtessera_c.so (loading it if needed)."""
    library()
    return _path


def last_error():
    """The message of the most recent Tessera failure on this thread, else on any thread ('' when none)."""
    lib = library()
    message = lib.tessera_last_error() or b""
    if not message:
        message = lib.tessera_last_error_any_thread() or b""
    return message.decode("utf-8", "replace")


def fail(what):
    """Raises TesseraError with Tessera's message for the failure just reported."""
    message = last_error()
    raise TesseraError(message or f"{what} failed")


def encode(text):
    return None if text is None else str(text).encode("utf-8")
