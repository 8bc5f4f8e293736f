"""The exceptions of the tessera package, one class per kind of failure the C ABI reports.

libtessera_c.so gives each failure a code (tessera_error_code in include/tessera/tessera_c.h, mirrored by
ErrorCode below) and a message; error_for() turns the two into the exception of that kind:

    TesseraError (RuntimeError)                   every failure; the codes without a class of their own
    ├── TesseraOutOfMemoryError (MemoryError)     OUT_OF_MEMORY: no room on the device; also a
    │                                             torch.cuda.OutOfMemoryError once torch is imported
    ├── TesseraHostOutOfMemoryError (MemoryError) HOST_OUT_OF_MEMORY: host memory ran out inside the library
    ├── TesseraValueError (ValueError)            INVALID_ARGUMENT: a bad device, tag, size or setting
    ├── TesseraNotFoundError (LookupError)        NOT_FOUND: an unknown tag or pointer, a device without memory
    ├── TesseraUnavailableError                   UNAVAILABLE: the platform library, the device or the
    │                                             library itself is missing (or unusable after fork())
    └── TesseraUnsupportedError (NotImplementedError)  UNSUPPORTED: the driver lacks what was asked

Each has `code`, the ErrorCode (None for a failure the package found itself, before calling the C ABI).

PyTorch's out-of-memory handlers catch torch.cuda.OutOfMemoryError. Importing torch costs seconds, so this
module never imports it: torch's class joins TesseraOutOfMemoryError's bases once torch is imported by
anyone — checked when this module is imported, when tessera.torch is, and whenever an out-of-memory error is
raised, so that every one raised after torch is loaded is torch's kind too.
"""

import enum
import sys

__all__ = [
    "ErrorCode",
    "TesseraError",
    "TesseraHostOutOfMemoryError",
    "TesseraNotFoundError",
    "TesseraOutOfMemoryError",
    "TesseraUnavailableError",
    "TesseraUnsupportedError",
    "TesseraValueError",
    "error_for",
]


class ErrorCode(enum.IntEnum):
    """tessera_error_code of tessera_c.h, value for value (tests/python/ctypes_declarations_test.py checks)."""

    OK = 0
    OUT_OF_MEMORY = 1
    INVALID_ARGUMENT = 2
    NOT_FOUND = 3
    NOT_MAPPED = 4
    ALREADY_MAPPED = 5
    STILL_MAPPED = 6
    MAP_LIMIT = 7
    UNAVAILABLE = 8
    UNSUPPORTED = 9
    PLATFORM = 10
    HOST_OUT_OF_MEMORY = 11
    INTERNAL = 12


class TesseraError(RuntimeError):
    """A failure reported by Tessera; the message names what is wrong, `code` says its kind."""

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.code = code


class TesseraOutOfMemoryError(TesseraError, MemoryError):
    """The device (its capacity, its memory fraction) has no room for the request. A MemoryError, and a
    torch.cuda.OutOfMemoryError where torch is imported (module docstring)."""


class TesseraHostOutOfMemoryError(TesseraError, MemoryError):
    """Host memory ran out inside libtessera_c.so (a C++ std::bad_alloc)."""


class TesseraValueError(TesseraError, ValueError):
    """A bad argument (a device that names none, a refused tag name, a negative max_entries, a bad
    configuration): a TesseraError like every failure of the package, and a ValueError as Python's own functions
    raise for a bad value."""


class TesseraNotFoundError(TesseraError, LookupError):
    """No such thing: a tag nothing was allocated under, a pointer that is no live block, a device without an
    allocator."""


class TesseraUnavailableError(TesseraError):
    """What the call needs is missing: the platform library (libcuda, libascendcl), the device, libtessera_c.so
    itself, or a device opened before fork() in this child."""


class TesseraUnsupportedError(TesseraError, NotImplementedError):
    """The driver lacks what the call needs (e.g. copying device memory to host memory for a backup)."""


_CLASSES = {
    ErrorCode.OUT_OF_MEMORY: TesseraOutOfMemoryError,
    ErrorCode.HOST_OUT_OF_MEMORY: TesseraHostOutOfMemoryError,
    ErrorCode.INVALID_ARGUMENT: TesseraValueError,
    ErrorCode.NOT_FOUND: TesseraNotFoundError,
    ErrorCode.UNAVAILABLE: TesseraUnavailableError,
    ErrorCode.UNSUPPORTED: TesseraUnsupportedError,
}


def adopt_torch_out_of_memory():
    """Makes TesseraOutOfMemoryError a torch.cuda.OutOfMemoryError too, once torch is loaded (never imports
    it). Returns whether it is one."""
    torch_class = getattr(getattr(sys.modules.get("torch"), "cuda", None), "OutOfMemoryError", None)
    if not isinstance(torch_class, type) or not issubclass(torch_class, BaseException):
        return False
    if issubclass(TesseraOutOfMemoryError, torch_class):
        return True
    try:
        TesseraOutOfMemoryError.__bases__ = (TesseraError, torch_class, MemoryError)
    except TypeError:  # a torch whose class cannot share a layout with MemoryError: stay as we are
        return False
    return True


def error_for(code, message):
    """The exception for a C code (an int, maybe one newer than this package) and its message."""
    try:
        kind = ErrorCode(code)
    except ValueError:
        return TesseraError(f"{message} (error code {code}, unknown to this tessera package)", code)
    cls = _CLASSES.get(kind, TesseraError)
    if cls is TesseraOutOfMemoryError:
        adopt_torch_out_of_memory()
    return cls(message, kind)


adopt_torch_out_of_memory()
