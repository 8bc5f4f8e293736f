#!/usr/bin/env python3
"""Checks the layer map of docs/architecture.md (the table under "## The layer map") against the layer table
that the build writes (cmake/TesseraLayers.cmake): every layer has one row, found by its build target; the
row's src/ folder and include/tessera/ headers are the layer's, and what it says the layer may call is the
layers it depends on. Rows of targets that are no layer (tools, benchmarks) are not checked. Prints each
difference as file:line and exits 1.

Usage: check_layer_map.py <layers.json> <architecture.md>
"""
import json
import re
import sys
from pathlib import Path

CODE = re.compile(r"`([^`]+)`")
BRACES = re.compile(r"^(.*)\{([^}]*)\}(.*)$")


def expand(path):
    """include/tessera/{a,b}.hpp -> [include/tessera/a.hpp, include/tessera/b.hpp]."""
    match = BRACES.match(path)
    if not match:
        return [path]
    head, alternatives, tail = match.groups()
    return [f"{head}{alternative.strip()}{tail}" for alternative in alternatives.split(",")]


def map_rows(doc):
    """(line number, cells) of each body row of the first table under "## The layer map"."""
    lines = doc.read_text().splitlines()
    try:
        start = lines.index("## The layer map")
    except ValueError:
        sys.exit(f"{doc}: no \"## The layer map\" heading")
    rows, in_table = [], False
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if line.startswith("|"):
            in_table = True
            rows.append((number, [cell.strip() for cell in line.strip().strip("|").split("|")]))
        elif in_table or line.startswith("#"):
            break
    return rows[2:]  # past the header and the |---| line


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    layers = json.loads(Path(sys.argv[1]).read_text())["layers"]
    doc = Path(sys.argv[2])
    by_target = {layer["target"]: layer for layer in layers}
    names = {layer["name"] for layer in layers}
    problems, seen = [], {}
    for number, cells in map_rows(doc):
        if len(cells) != 4:
            problems.append(f"{doc}:{number}: a row of the layer map has {len(cells)} cells, not 4")
            continue
        where_cell, target_cell, _, calls_cell = cells
        targets = [t for t in CODE.findall(target_cell) if t in by_target]
        if not targets:
            continue
        layer = by_target[targets[0]]
        name = layer["name"]
        where = f"{doc}:{number}: layer {name}"
        if name in seen:
            problems.append(f"{where}: a second row (the first is line {seen[name]})")
            continue
        seen[name] = number
        paths = [p for code in CODE.findall(where_cell) for p in expand(code)]
        folders = sorted(p.split("/")[1] for p in paths if p.startswith("src/"))
        headers = sorted(p.split("/", 2)[2] for p in paths if p.startswith("include/tessera/"))
        expected_folders = [layer["folder"]] if layer["folder"] else []
        if folders != expected_folders:
            problems.append(f"{where}: the map names folders {folders}; the build: {expected_folders}")
        if headers != sorted(layer["headers"]):
            problems.append(f"{where}: the map names headers {headers}; the build: {sorted(layer['headers'])}")
        calls = sorted({token.strip().strip("`") for token in re.split(r"[,;]", calls_cell)} & names)
        if calls != sorted(layer["depends"]):
            problems.append(f"{where}: the map says it may call {calls}; the build: {sorted(layer['depends'])}")
    for layer in layers:
        if layer["name"] not in seen:
            problems.append(f"{doc}: layer {layer['name']} ({layer['target']}) has no row in the layer map")

    for problem in problems:
        print(problem)
    if problems:
        sys.exit(1)
    print(f"{len(seen)} layers: the layer map names each one's folder, headers and dependencies as the build does")


if __name__ == "__main__":
    main()
