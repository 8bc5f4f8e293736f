#!/usr/bin/env python3
"""Checks that the mapper (src/core/mapper.{hpp,cpp}) is the only part of the core that calls a Driver: no
other file of src/core includes tessera/driver.hpp, holds a Driver, or calls a member through something named
driver. Prints each offending line as file:line and exits 1.

Usage: check_mechanism.py <source root>
"""
import re
import sys
from pathlib import Path

MECHANISM = {"mapper.hpp", "mapper.cpp"}
RULES = [
    (re.compile(r'^\s*#\s*include\s*"tessera/driver\.hpp"'), "includes the driver interface"),
    (re.compile(r'\bDriver\s*[&*]\s*\w+_\s*;'), "holds a driver"),
    (re.compile(r'\bdriver_?\s*(\.|->)\s*\w+\s*\('), "calls the driver"),
]


def main(root):
    problems = []
    core = Path(root) / "src" / "core"
    files = sorted(p for p in core.iterdir() if p.suffix in {".cpp", ".hpp"} and p.name not in MECHANISM)
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("//", 1)[0]
            for pattern, what in RULES:
                if pattern.search(code):
                    problems.append(f"{path.relative_to(root)}:{number}: {what} outside the mapper: {line.strip()}")
    for problem in problems:
        print(problem)
    print(f"{len(files)} files of src/core checked, {len(problems)} driver uses outside the mapper")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
