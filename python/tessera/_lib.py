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

from tessera.errors import ErrorCode, TesseraError, TesseraUnavailableError, error_for

LIBRARY_NAME = "libtessera_c.so"

_lock = threading.Lock()
_library = None
_path = None


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


# The C functions this package calls, as tessera_c.h declares them: name -> (result type, argument types).
# tests/python/ctypes_declarations_test.py checks every entry against the header.
_c = ctypes
SIGNATURES = {
    "tessera_alloc": (_c.c_void_p, [_c.c_size_t, _c.c_int, _c.c_void_p]),
    "tessera_free": (None, [_c.c_void_p, _c.c_size_t, _c.c_int, _c.c_void_p]),
    "tessera_init": (None, [_c.c_int]),
    "tessera_empty_cache": (None, []),
    "tessera_set_memory_fraction": (None, [_c.c_double, _c.c_int]),
    "tessera_record_stream": (None, [_c.c_void_p, _c.c_void_p]),
    "tessera_configure": (_c.c_int, [_c.c_char_p, _c.c_char_p]),
    "tessera_driver_name": (_c.c_char_p, []),
    "tessera_has_allocator": (_c.c_int, [_c.c_int]),
    "tessera_version": (_c.c_char_p, []),
    "tessera_last_error_code": (_c.c_int, []),
    "tessera_last_error": (_c.c_char_p, []),
    "tessera_last_error_any_thread": (_c.c_char_p, []),
    "tessera_clear_error": (None, []),
    "tessera_memory_stats_json": (_c.c_char_p, [_c.c_int]),
    "tessera_memory_summary": (_c.c_char_p, [_c.c_int]),
    "tessera_reset_peak_memory_stats": (_c.c_int, [_c.c_int]),
    "tessera_record_memory_history": (_c.c_int, [_c.c_size_t]),
    "tessera_dump_snapshot": (_c.c_int, [_c.c_char_p, _c.c_int]),
    "tessera_set_history_stacks": (_c.c_int, [_c.c_void_p, _c.c_void_p]),
    "tessera_push_tag": (_c.c_int, [_c.c_char_p]),
    "tessera_push_tag_with_backup": (_c.c_int, [_c.c_char_p, _c.c_int]),
    "tessera_pop_tag": (None, []),
    "tessera_pause": (_c.c_int, [_c.c_int, _c.c_char_p, _c.c_int]),
    "tessera_resume": (_c.c_int, [_c.c_int, _c.c_char_p]),
    "tessera_tags_json": (_c.c_char_p, [_c.c_int]),
    "tessera_pool_begin": (_c.c_int, [_c.c_int, _c.c_uint64, _c.c_uint64, _c.c_int]),
    "tessera_pool_end": (_c.c_int, [_c.c_int, _c.c_uint64, _c.c_uint64]),
    "tessera_pool_release": (_c.c_int, [_c.c_int, _c.c_uint64, _c.c_uint64]),
    "tessera_mem_pool_slot": (_c.c_int, [_c.c_char_p, _c.c_int]),
    "tessera_refuse_graph_capture": (_c.c_int, [_c.c_int]),
    "tessera_export": (_c.c_int, [_c.c_int, _c.c_void_p, _c.c_void_p, _c.c_size_t, _c.POINTER(_c.c_size_t),
                                  _c.POINTER(_c.c_int), _c.c_size_t, _c.POINTER(_c.c_size_t)]),
    "tessera_import": (_c.c_void_p, [_c.c_int, _c.c_void_p, _c.c_size_t, _c.POINTER(_c.c_int), _c.c_size_t]),
    "tessera_close_import": (_c.c_int, [_c.c_int, _c.c_void_p]),
    "tessera_send_handle": (_c.c_int, [_c.c_int, _c.c_void_p, _c.c_size_t, _c.POINTER(_c.c_int), _c.c_size_t]),
    "tessera_receive_handle": (_c.c_int, [_c.c_int, _c.c_void_p, _c.c_size_t, _c.POINTER(_c.c_size_t),
                                          _c.POINTER(_c.c_int), _c.c_size_t, _c.POINTER(_c.c_size_t)]),
    "tessera_take_descriptor": (_c.c_int, [_c.c_int, _c.c_int]),
}
del _c


def _declare(lib):
    for name, (restype, argtypes) in SIGNATURES.items():
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
        raise TesseraUnavailableError(f"cannot load {LIBRARY_NAME}: {hint}; tried: " + "; ".join(tried),
                                      ErrorCode.UNAVAILABLE)


def path():
    """The path of the loaded libtessera_c.so (loading it if needed)."""
    library()
    return _path


def last_error():
    """The message of the most recent Tessera call on this thread when it failed; '' when it succeeded. Another
    thread's failure is never reported here (tessera_c.h, "Errors")."""
    return (library().tessera_last_error() or b"").decode("utf-8", "replace")


def last_error_code():
    """The ErrorCode of the most recent Tessera call on this thread (an int when the library is newer)."""
    code = library().tessera_last_error_code()
    try:
        return ErrorCode(code)
    except ValueError:
        return code


def check(function):
    """Raises the exception of the failure the C call just made on this thread reported, if it failed; the
    check for every call, void ones included. `function` names the call when the library gave no message."""
    lib = library()
    code = lib.tessera_last_error_code()
    if code != ErrorCode.OK:
        raise error_for(code, (lib.tessera_last_error() or b"").decode("utf-8", "replace") or f"{function} failed")


def fail(function):
    """Raises the exception of the failure the C call just made reported through its result (NULL, -1). A
    TesseraError even if the code says OK: the result is the C ABI's word too."""
    check(function)
    raise TesseraError(f"{function} failed without an error code")


_NO_FAILURE_VALUE = object()


def call(function, *arguments, failure=_NO_FAILURE_VALUE):
    """Calls the C function named `function` and raises the exception of its failure, if it failed; else
    returns its result. `failure`: the result that means failure (-1, None for NULL), checked as well as the
    code, so that a failure is raised even if something reset the code in between (a tensor's finalizer
    freeing memory on this thread)."""
    lib = library()
    result = getattr(lib, function)(*arguments)
    if failure is not _NO_FAILURE_VALUE and result == failure:
        fail(function)
    check(function)
    return result


def encode(text):
    return None if text is None else str(text).encode("utf-8")
