"""The ctypes declarations of the Python package (tessera._lib.SIGNATURES) against the C header they copy
(include/tessera/tessera_c.h): every function declared exists there, with as many parameters, each of a ctypes
type that passes the C type, and the result type that reads the C result. Also tessera.errors.ErrorCode against
the header's tessera_error_code. A declaration that drifts from the header fails here, not as a crash or a
truncated pointer at run time; the checker's own test feeds it wrong declarations and expects each reported.

No library is loaded. By hand:
    PYTHONPATH=python python3 tests/python/ctypes_declarations_test.py
"""

import ctypes
import os
import re
import unittest
from pathlib import Path

from tessera import _lib
from tessera.errors import ErrorCode

HEADER = Path(os.environ.get("TESSERA_C_HEADER") or
              Path(__file__).resolve().parents[2] / "include" / "tessera" / "tessera_c.h")

# The ctypes types that pass (as an argument) or read (as a result) each C type of the header. ctypes has
# aliases (c_size_t is c_ulong, c_int64 is c_long on LP64): types are compared as objects, so an alias is
# the same type.
_POINTER = "pointer"  # any T*: c_void_p, c_char_p or a ctypes.POINTER(...)
_C_TYPES = {
    "void": (None,),  # ctypes spells a void result None
    "int": (ctypes.c_int,),
    "unsigned": (ctypes.c_uint,),
    "bool": (ctypes.c_bool,),
    "double": (ctypes.c_double,),
    "size_t": (ctypes.c_size_t,),
    "int64_t": (ctypes.c_int64,),
    "uint64_t": (ctypes.c_uint64,),
    "int32_t": (ctypes.c_int32,),
    "uint32_t": (ctypes.c_uint32,),
    "const char*": (ctypes.c_char_p,),
    "char*": (ctypes.c_char_p, _POINTER),
}


def parse_header(text):
    """{function: (result C type, [parameter C types])} from the TESSERA_C_API prototypes of the header, and
    {enumerator: value} of tessera_error_code."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments may hold parentheses
    typedefs = set(re.findall(r"typedef\s+\w[\w\s\*]*\(\s*\*\s*(\w+)\s*\)", text))  # function pointers
    functions = {}
    for result, name, parameters in re.findall(r"TESSERA_C_API\s+([^;()]*?)\b(tessera_\w+)\s*\(([^)]*)\)\s*;", text):
        kinds = [] if parameters.strip() in ("", "void") else [_parameter_type(p, typedefs)
                                                               for p in parameters.split(",")]
        functions[name] = (_normalize(result, typedefs), kinds)
    body = re.search(r"typedef\s+enum\s+tessera_error_code\s*\{(.*?)\}", text, flags=re.S)
    codes = {name: int(value) for name, value in re.findall(r"(TESSERA_\w+)\s*=\s*(\d+)", body.group(1))} if body else {}
    return functions, codes


def _parameter_type(parameter, typedefs):
    # "size_t size" -> "size_t", "const char* tag" -> "const char*", "void* stream" -> "void*".
    words = parameter.replace("*", " * ").split()
    if len(words) > 1 and words[-1] != "*":
        words = words[:-1]  # the parameter's name
    return _normalize(" ".join(words), typedefs)


def _normalize(c_type, typedefs):
    c_type = " ".join(c_type.replace("*", " * ").split()).replace(" *", "*")
    if c_type in typedefs:
        return "function pointer"
    return c_type


def _accepts(c_type, declared):
    """Whether the ctypes type `declared` passes (or reads) the C type."""
    if c_type in _C_TYPES:
        allowed = _C_TYPES[c_type]
        if declared in allowed:
            return True
        return _POINTER in allowed and _is_pointer(declared)
    if c_type.endswith("*") or c_type == "function pointer":
        if c_type == "const char*":
            return declared is ctypes.c_char_p
        return _is_pointer(declared) or (c_type == "function pointer" and _is_function(declared))
    return False  # a struct by value, or a type this test does not know: declare it by hand and teach the test


def _is_pointer(declared):
    return declared in (ctypes.c_void_p, ctypes.c_char_p) or (
        isinstance(declared, type) and issubclass(declared, ctypes._Pointer))


def _is_function(declared):
    return isinstance(declared, type) and issubclass(declared, ctypes._CFuncPtr)


def problems(signatures, functions):
    """What is wrong with `signatures` ({name: (restype, argtypes)}) against the header's `functions`."""
    found = []
    for name, (restype, argtypes) in sorted(signatures.items()):
        if name not in functions:
            found.append(f"{name}: declared in Python but not in tessera_c.h")
            continue
        result, parameters = functions[name]
        if not _accepts(result, restype):
            found.append(f"{name}: result {_name(restype)} does not read C '{result}'")
        if len(argtypes) != len(parameters):
            found.append(f"{name}: {len(argtypes)} argument types for the {len(parameters)} parameters of "
                         f"({', '.join(parameters)})")
            continue
        for index, (declared, c_type) in enumerate(zip(argtypes, parameters)):
            if not _accepts(c_type, declared):
                found.append(f"{name}: argument {index} is {_name(declared)}, the header's is '{c_type}'")
    return found


def _name(ctype):
    return "None" if ctype is None else getattr(ctype, "__name__", repr(ctype))


class CtypesDeclarationsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.functions, cls.codes = parse_header(HEADER.read_text())

    def test_the_header_parses(self):
        # A parser that finds nothing would pass every check below.
        self.assertGreaterEqual(len(self.functions), 30, sorted(self.functions))
        self.assertEqual(self.functions["tessera_free"], ("void", ["void*", "size_t", "int", "void*"]))
        self.assertEqual(self.functions["tessera_last_error"], ("const char*", []))
        self.assertEqual(self.functions["tessera_set_history_stacks"][1], ["function pointer", "function pointer"])

    def test_every_python_declaration_matches_the_header(self):
        self.assertEqual(problems(_lib.SIGNATURES, self.functions), [])

    def test_the_error_functions_are_declared(self):
        for name in ("tessera_last_error_code", "tessera_last_error", "tessera_tags_json"):
            self.assertIn(name, _lib.SIGNATURES)

    def test_error_code_is_the_headers_enum(self):
        from_header = {name.replace("TESSERA_ERROR_", "").replace("TESSERA_", ""): value
                       for name, value in self.codes.items()}
        self.assertEqual(from_header, {code.name: code.value for code in ErrorCode})

    def test_the_checker_reports_each_kind_of_drift(self):
        good = _lib.SIGNATURES
        c = ctypes
        drifts = {
            "tessera_alloc": ((c.c_void_p, [c.c_size_t, c.c_int]), "2 argument types for the 3 parameters"),
            "tessera_free": ((None, [c.c_void_p, c.c_int, c.c_int, c.c_void_p]), "argument 1 is c_int"),
            "tessera_last_error": ((c.c_void_p, []), "result c_void_p does not read C 'const char*'"),
            "tessera_has_allocator": ((c.c_int, [c.c_double]), "argument 0 is c_double, the header's is 'int'"),
            "tessera_alloc_typo": ((c.c_void_p, []), "declared in Python but not in tessera_c.h"),
            "tessera_configure": ((None, [c.c_char_p, c.c_char_p]), "result None does not read C 'int'"),
            "tessera_record_memory_history": ((c.c_int, [c.c_int]), "argument 0 is c_int, the header's is 'size_t'"),
        }
        for name, (wrong, expected) in drifts.items():
            with self.subTest(name=name):
                reported = problems({**good, name: wrong}, self.functions)
                self.assertEqual(len(reported), 1, reported)
                self.assertIn(expected, reported[0])
                self.assertTrue(reported[0].startswith(name + ":"), reported[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
