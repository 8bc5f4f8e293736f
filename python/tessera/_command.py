"""The `tessera` command of the installed package (pip install .): runs the C++ command (tools/tessera) that the
install put inside the package, tessera/bin/tessera. From a repository checkout it runs build/tools/tessera, as
_lib.py finds build/src/capi/libtessera_c.so there."""

import os
import sys
from pathlib import Path


def path():
    """The path of the `tessera` executable this package runs, or None when there is none."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "bin" / "tessera", here.parent.parent / "build" / "tools" / "tessera"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def main():
    command = path()
    if command is None:
        here = Path(__file__).resolve().parent
        sys.stderr.write(f"tessera: no `tessera` executable in {here / 'bin'}: reinstall the package with "
                         "`pip install --no-build-isolation .` from the repository\n")
        return 127
    os.execv(command, [sys.argv[0], *sys.argv[1:]])
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
