"""The tessera package's modules import from one another, never from the package's __init__: each `from tessera
import X` in a module names a module of the package, and no module imports the bare package to read names off
it. __init__.py only gathers the names (so a module's import never runs half of __init__ to reach another).

Reads the sources only. By hand:
    python3 tests/python/package_layout_test.py
"""

import ast
import unittest
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "tessera"


def back_imports(source, modules):
    """The imports of one module's source that reach into the package's __init__, as text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "tessera" and node.level == 0:
            found += [f"from tessera import {alias.name}" for alias in node.names if alias.name not in modules]
        elif isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names if alias.name == "tessera"]
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            found += [f"from . import {alias.name}" for alias in node.names if alias.name not in modules]
    return found


class PackageLayoutTest(unittest.TestCase):
    def test_no_module_imports_back_into_init(self):
        modules = {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
        self.assertIn("api", modules)
        found = {path.name: back_imports(path.read_text(), modules)
                 for path in sorted(PACKAGE.glob("*.py")) if path.name != "__init__.py"}
        self.assertEqual({name: imports for name, imports in found.items() if imports}, {})

    def test_the_checker_finds_a_back_import(self):
        modules = {"api", "errors"}
        self.assertEqual(back_imports("from tessera import memory_stats, api\nimport tessera\n", modules),
                         ["from tessera import memory_stats", "import tessera"])
        self.assertEqual(back_imports("from tessera import api\nimport tessera.errors\nfrom . import errors\n",
                                      modules), [])

    def test_init_defines_no_function(self):
        tree = ast.parse((PACKAGE / "__init__.py").read_text())
        defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        self.assertEqual(defined, [], "__init__.py re-exports; the definitions live in the modules")


if __name__ == "__main__":
    unittest.main(verbosity=2)
