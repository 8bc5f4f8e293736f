"""`pip install .` as a user runs it, offline: a fresh virtual environment (--system-site-packages, for Debian's
python3-torch), `pip install --no-build-isolation --no-index <repository>`, then, from a folder outside the
repository with no PYTHONPATH and no TESSERA_* variables:
  - the installed package trains a small model on Tessera's CPU allocator (pip_install_run.py): finite losses
    that fall, Tessera's peak allocated bytes above zero, libtessera_c.so and libtessera_torch_cpu.so loaded from
    inside the environment's site-packages;
  - the environment's `tessera --help` prints the command's usage;
  - the installed distribution's version is the library's;
and the install left nothing new in `git status` of the repository.

pip's CMake step builds in TESSERA_PIP_BUILD_DIR, which CTest sets to this build: its targets are up to date, so
nothing is rebuilt (setup.py). Exits 77 (CTest: skipped) with the reason where python3-venv or python3-torch is
missing (CI installs both), or where libtessera_torch_cpu.so is not built (no libtorch-dev): then after checking
the install, the import and the command.
    TESSERA_SOURCE_DIR=. TESSERA_PIP_BUILD_DIR=build TESSERA_EXPECT_TORCH_CPU=1 \\
    /usr/bin/python3 tests/python/pip_install_test.py
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
SOURCE = Path(os.environ["TESSERA_SOURCE_DIR"]).resolve()
BUILD = Path(os.environ["TESSERA_PIP_BUILD_DIR"]).resolve()
EXPECT_TORCH_CPU = os.environ.get("TESSERA_EXPECT_TORCH_CPU") == "1"


def skip_reason():
    if importlib.util.find_spec("ensurepip") is None:
        return f"{sys.executable} has no venv with pip (ensurepip); apt-get install python3-venv"
    if importlib.util.find_spec("torch") is None:
        return f"PyTorch is not importable by {sys.executable}; apt-get install python3-torch"
    return None


def clean_environment(**extra):
    """The caller's environment less what would point Python or Tessera at the repository."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYTHON", "TESSERA_", "PIP_", "VIRTUAL_ENV"))}
    environment.update(extra)
    return environment


def run(command, what, **options):
    started = time.monotonic()
    completed = subprocess.run([str(word) for word in command], capture_output=True, text=True, timeout=600,
                               **options)
    print(f"{what}: {time.monotonic() - started:.1f}s", flush=True)
    if completed.returncode != 0:
        raise AssertionError(f"{what} failed ({completed.returncode}): {command}\n"
                             f"{completed.stdout}\n{completed.stderr}")
    return completed


def git_status():
    """The repository's `git status` entries, or None where it is not a git checkout."""
    if shutil.which("git") is None or not (SOURCE / ".git").exists():
        return None
    completed = subprocess.run(["git", "--no-optional-locks", "-C", str(SOURCE), "status", "--porcelain",
                                "--untracked-files=all"], capture_output=True, text=True, check=True)
    return set(completed.stdout.splitlines())


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.TemporaryDirectory(prefix="tessera-pip-")
        scratch = Path(cls.directory.name)
        cls.venv = scratch / "venv"
        cls.outside = scratch / "outside"
        cls.outside.mkdir()
        cls.status_before = git_status()
        run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv], "python3 -m venv")
        cls.python = cls.venv / "bin" / "python"
        cls.install = run([cls.python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "--no-cache-dir", SOURCE], "pip install",
                          cwd=cls.outside, env=clean_environment(TESSERA_PIP_BUILD_DIR=str(BUILD)))
        cls.status_after = git_status()
        found = run([cls.python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                    "site-packages", cwd=cls.outside, env=clean_environment())
        cls.site_packages = Path(found.stdout.strip()).resolve()

    @classmethod
    def tearDownClass(cls):
        cls.directory.cleanup()

    def inside_site_packages(self, path):
        self.assertTrue(Path(path).resolve().is_relative_to(self.site_packages),
                        f"{path} is not inside {self.site_packages}")

    def test_package_imports_from_the_environment_with_its_library(self):
        code = "import json, tessera; print(json.dumps([tessera.__file__, tessera.library_path(), tessera.version()]))"
        package, library, version = json.loads(run([self.python, "-c", code], "import tessera",
                                                   cwd=self.outside, env=clean_environment()).stdout)
        self.inside_site_packages(package)
        self.inside_site_packages(library)
        installed = run([self.python, "-c", "import importlib.metadata as m; print(m.version('tessera'))"],
                        "version", cwd=self.outside, env=clean_environment()).stdout.strip()
        self.assertEqual(installed, version)

    def test_tessera_command_runs(self):
        command = self.venv / "bin" / "tessera"
        self.assertTrue(command.is_file(), f"pip installed no {command}")
        completed = run([command, "--help"], "tessera --help", cwd=self.outside, env=clean_environment())
        self.assertIn("Usage:", completed.stdout)
        for subcommand in ("replay", "gen", "info", "convert", "demo"):
            self.assertIn(subcommand, completed.stdout)

    def test_install_leaves_the_repository_clean(self):
        if self.status_before is None:
            self.skipTest(f"{SOURCE} is not a git checkout")
        self.assertEqual(sorted(self.status_after - self.status_before), [],
                         "pip install . left these in the repository")

    def test_trains_on_tessera_outside_the_repository(self):
        if not EXPECT_TORCH_CPU:
            self.skipTest("libtessera_torch_cpu.so is not built (Debian's libtorch-dev was not found)")
        script = self.outside / "pip_install_run.py"  # a copy: nothing of the repository on sys.path
        shutil.copyfile(HERE / "pip_install_run.py", script)
        result = self.outside / "result.json"
        run([self.python, script, result], "training", cwd=self.outside,
            env=clean_environment(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"))
        seen = json.loads(result.read_text())
        self.inside_site_packages(seen["package"])
        self.inside_site_packages(seen["library_path"])
        self.assertEqual(len(seen["loaded"]), 2, seen["loaded"])  # libtessera_c.so, libtessera_torch_cpu.so
        for library in seen["loaded"]:
            self.inside_site_packages(library)
        losses = seen["losses"]
        self.assertTrue(seen["all_finite"], losses)
        self.assertLess(losses[-1], 0.5 * losses[0], losses)
        self.assertGreater(seen["stats"]["allocated_bytes.all.peak"], 0)
        self.assertGreater(seen["stats"]["allocation.all.allocated"], 30)


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(SKIP)
    outcome = unittest.main(exit=False, verbosity=2).result
    if not outcome.wasSuccessful():
        sys.exit(1)
    sys.exit(SKIP if outcome.skipped and not EXPECT_TORCH_CPU else 0)
