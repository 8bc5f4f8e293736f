"""`pip install .`: the tessera package with its native parts built by CMake inside it.

The build step (build_py) builds the CMake target tessera_python (python/CMakeLists.txt) and installs it into the
package with `cmake --install --component python`: tessera/libtessera_c.so, tessera/libtessera_torch_cpu.so (where
libtorch's c10 is found) and tessera/bin/tessera, the command the `tessera` script runs (tessera/_command.py).

The CMake build directory: TESSERA_PIP_BUILD_DIR, else build-pip/ in the repository (ignored by git, kept between
installs so that a second one rebuilds only what changed).
- Not configured yet: configured for the package alone (Release; no tests, no benchmarks; Ninja where installed).
  TESSERA_CMAKE_ARGS adds arguments (shell words); CMake itself honours CMAKE_CXX_COMPILER_LAUNCHER (e.g. ccache).
- Already configured (e.g. TESSERA_PIP_BUILD_DIR=build, the build scripts/test.sh makes): used as it is, its
  configuration untouched; only the package's targets are built, so an up-to-date build costs nothing. The
  libraries then carry that build's type and options.
Parallel jobs: CMAKE_BUILD_PARALLEL_LEVEL, else every core. setuptools' own scratch files go to a temporary
directory, removed at exit: nothing but the CMake build directory is written into the source tree.
"""

import atexit
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution
from setuptools.errors import ExecError

ROOT = Path(__file__).resolve().parent
TARGET = "tessera_python"


class NativeError(ExecError):
    """The CMake step failed; the message says which command and why (setuptools prints it as `error: ...`)."""


def _version():
    match = re.search(r"project\(tessera\s+VERSION\s+([0-9][0-9.]*)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise NativeError(f"setup.py: no `project(tessera VERSION x.y.z)` in {ROOT / 'CMakeLists.txt'}")
    return match.group(1)


def _run(command):
    words = [str(word) for word in command]
    print("tessera: " + shlex.join(words), flush=True)
    result = subprocess.run(words, check=False)
    if result.returncode != 0:
        raise NativeError(f"tessera: `{shlex.join(words)}` failed (exit status {result.returncode})")


def _cached_source(build_dir):
    """The source tree a configured build directory belongs to (CMakeCache.txt's CMAKE_HOME_DIRECTORY)."""
    for line in (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            return Path(line.split("=", 1)[1]).resolve()
    return None


def build_native(package_dir):
    """Builds the package's native parts and installs them into package_dir (the tessera package being built)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise NativeError("tessera: cmake not found: install the build's Debian packages (scripts/common.sh lists them)")
    configured = os.environ.get("TESSERA_PIP_BUILD_DIR")
    build_dir = Path(configured).expanduser().resolve() if configured else ROOT / "build-pip"
    if (build_dir / "CMakeCache.txt").is_file():
        source = _cached_source(build_dir)
        if source != ROOT:
            raise NativeError(f"tessera: {build_dir} is configured for the source tree {source}, not {ROOT}: "
                              "point TESSERA_PIP_BUILD_DIR at a build of this tree, or at an empty directory")
        print(f"tessera: building in {build_dir} as it is configured", flush=True)
    else:
        configure = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DTESSERA_BUILD_TESTS=OFF", "-DTESSERA_BUILD_BENCHMARKS=OFF", "-DTESSERA_BUILD_TOOLS=ON"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        _run(configure + shlex.split(os.environ.get("TESSERA_CMAKE_ARGS", "")))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run([cmake, "--build", build_dir, "--target", TARGET, "--parallel", jobs])
    # --strip: the package carries no debug information (a RelWithDebInfo build's would triple its size).
    _run([cmake, "--install", build_dir, "--component", "python", "--prefix", package_dir, "--strip"])
    for needed in ("libtessera_c.so", "bin/tessera"):
        if not (package_dir / needed).is_file():
            raise NativeError(f"tessera: {needed} was not installed from {build_dir} "
                              "(a build configured with TESSERA_BUILD_TOOLS=OFF has no `tessera` command)")
    if not (package_dir / "libtessera_torch_cpu.so").is_file():
        print("tessera: libtorch's c10 not found: the package has no libtessera_torch_cpu.so, "
              "tessera.torch.enable('cpu') will say so (apt-get install libtorch-dev)", flush=True)


class BuildWithNative(build_py):
    """build_py, then the CMake step into the built package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # pip install -e: the package stays in python/, which finds build*/ trees of the repository itself.
            print("tessera: editable install: no CMake step; build the targets in build/", flush=True)
            return
        build_native(Path(self.build_lib).resolve() / "tessera")


class NativeDistribution(Distribution):
    """Native code inside: a platform wheel (linux_x86_64...), not a pure-Python one."""

    def has_ext_modules(self):
        return True


_scratch = tempfile.mkdtemp(prefix="tessera-setuptools-")
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)

setup(
    version=_version(),
    packages=["tessera"],  # here rather than in pyproject.toml's [tool.setuptools], which setuptools 66 calls beta
    package_dir={"": "python"},
    distclass=NativeDistribution,
    cmdclass={"build_py": BuildWithNative},
    # setuptools' build/ and tessera.egg-info/ out of the source tree (build/ is CMake's there).
    options={"build": {"build_base": os.path.join(_scratch, "build")}, "egg_info": {"egg_base": _scratch}},
)
