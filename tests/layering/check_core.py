#!/usr/bin/env python3
"""Checks the core's inner layers (docs/architecture.md, "Inside the core"):
- the mapper (src/core/mapper.{hpp,cpp}) is the only part of the core that calls a Driver: no other file of
  src/core includes tessera/driver.hpp or a driver/ header, holds a Driver, or calls a member through
  something named driver;
- no header of src/core but the facade's own includes the facade's header (core/tessera_allocator.hpp), nor
  does a source whose first include is a component's header (the source of that component): components sit
  below the facade and are built without it. The facade's own sources start with its header.
Prints each offending line as file:line and exits 1.

Usage: check_core.py <source root>
"""
import re
import sys
from pathlib import Path

MECHANISM = {"mapper.hpp", "mapper.cpp"}
DRIVER_RULES = [
    (re.compile(r'^\s*#\s*include\s*"tessera/driver\.hpp"'), "includes the driver interface"),
    (re.compile(r'^\s*#\s*include\s*"driver/'), "includes a header of the driver layer"),
    (re.compile(r'\bDriver\s*[&*]\s*\w+_\s*;'), "holds a driver"),
    (re.compile(r'\bdriver_?\s*(\.|->)\s*\w+\s*\('), "calls the driver"),
]
FACADE = "tessera_allocator.hpp"
INCLUDES_FACADE = re.compile(r'^\s*#\s*include\s*"core/tessera_allocator\.hpp"')
FIRST_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def main(root):
    problems = []
    core = Path(root) / "src" / "core"
    files = sorted(p for p in core.iterdir() if p.suffix in {".cpp", ".hpp"})
    for path in files:
        text = path.read_text()
        first = FIRST_INCLUDE.search(text)
        implements = first.group(1) if first else ""
        component = path.name != FACADE and (
            path.suffix == ".hpp" or (implements.startswith("core/") and implements != f"core/{FACADE}"))
        for number, line in enumerate(text.splitlines(), start=1):
            code = line.split("//", 1)[0]
            where = f"{path.relative_to(root)}:{number}"
            if path.name not in MECHANISM:
                for pattern, what in DRIVER_RULES:
                    if pattern.search(code):
                        problems.append(f"{where}: {what} outside the mapper: {line.strip()}")
            if component and INCLUDES_FACADE.search(code):
                problems.append(f"{where}: a component includes the facade's header: {line.strip()}")
    for problem in problems:
        print(problem)
    print(f"{len(files)} files of src/core checked, {len(problems)} breaches of its inner layers")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
