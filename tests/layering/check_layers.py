#!/usr/bin/env python3
"""Checks every #include "..." of src/ and include/tessera/ against the layer table that the build writes
(cmake/TesseraLayers.cmake): a file may include its own layer and the layers its layer depends on, directly
or through others; no two folders may include each other. Prints each offending include as file:line and
exits 1.

Usage: check_layers.py <layers.json> <source root>
"""
import json
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".c"}


def load_table(path):
    layers = json.loads(Path(path).read_text())["layers"]
    depends = {layer["name"]: list(layer["depends"]) for layer in layers}
    folder_layer = {layer["folder"]: layer["name"] for layer in layers if layer["folder"]}
    header_layer = {}
    problems = []
    for layer in layers:
        for header in layer["headers"]:
            if header in header_layer:
                problems.append(f"{path}: tessera/{header} is in layers {header_layer[header]} and {layer['name']}")
            header_layer[header] = layer["name"]
        for dependency in layer["depends"]:
            if dependency not in depends:
                problems.append(f"{path}: layer {layer['name']} depends on {dependency}, which is no layer")
    return depends, folder_layer, header_layer, problems


def below(depends):
    """Each layer's dependencies, direct or not; None for a layer on a cycle of the table."""
    closure = {}

    def visit(name, path):
        if name in path:
            return None
        if name not in closure:
            reached = set()
            for dependency in depends.get(name, []):
                sub = visit(dependency, path | {name})
                if sub is None:
                    return None
                reached |= sub | {dependency}
            closure[name] = reached
        return closure[name]

    return {name: visit(name, frozenset()) for name in depends}


def layer_of_file(relative, folder_layer, header_layer):
    parts = relative.parts
    if parts[0] == "src" and len(parts) > 2:
        return folder_layer.get(parts[1]), f"src/{parts[1]}"
    if parts[:2] == ("include", "tessera"):
        return header_layer.get(parts[2]), f"include/tessera/{parts[2]}"
    return None, str(relative)


def layer_of_include(spelling, folder_layer, header_layer):
    first, _, rest = spelling.partition("/")
    if not rest:
        return None
    if first == "tessera":
        return header_layer.get(rest)
    return folder_layer.get(first)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    depends, folder_layer, header_layer, problems = load_table(sys.argv[1])
    root = Path(sys.argv[2])
    closure = below(depends)
    for name, reached in closure.items():
        if reached is None:
            problems.append(f"{sys.argv[1]}: layer {name} is on a cycle of the layer table")

    files = [p for p in sorted((root / "src").rglob("*")) if p.suffix in SOURCE_SUFFIXES]
    files += sorted(p for p in (root / "include" / "tessera").glob("*") if p.is_file())
    first_edge = {}  # (from layer, to layer) -> "file:line" of the first include that makes it
    for path in files:
        relative = path.relative_to(root)
        layer, owner = layer_of_file(relative, folder_layer, header_layer)
        if layer is None:
            problems.append(f"{relative}: {owner} belongs to no layer of the table")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            spelling = match.group(1)
            where = f"{relative}:{number}"
            target = layer_of_include(spelling, folder_layer, header_layer)
            if target is None:
                problems.append(f"{where}: \"{spelling}\" is in no layer (spell it tessera/<header> or "
                                "<folder>/<header> of a layer's folder)")
                continue
            if target == layer:
                continue
            first_edge.setdefault((layer, target), where)
            allowed = closure.get(layer) or set()
            if target not in allowed:
                problems.append(f"{where}: layer {layer} includes \"{spelling}\" of layer {target}, which it does "
                                f"not depend on (it depends on: {', '.join(sorted(allowed)) or 'nothing'})")
    for (source, target), where in sorted(first_edge.items()):
        back = first_edge.get((target, source))
        if back is not None and source < target:
            problems.append(f"{where}: folders {source} and {target} include each other (and {back})")

    for problem in problems:
        print(problem)
    if problems:
        sys.exit(1)
    print(f"{len(files)} files: every include goes to the file's own layer or one below it")


if __name__ == "__main__":
    main()
