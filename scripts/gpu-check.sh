#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run of under 9 minutes: build Tessera, run the cuda driver
# through the conformance suite, measure its per-call latency, train PyTorch on Tessera, replay a Kineto
# trace of a GPU job against its own peaks, and record the machine.
#
#   OUT=/some/dir scripts/gpu-check.sh      (default OUT: gpu-out)
#   scripts/gpu-check.sh --prepare          (here, where the package registry is: see "Offline" below)
#
# Offline: the GPU machine reaches no package registry. `--prepare`, run on a Debian 12 amd64 machine that
# does, downloads with `apt-get download` the Debian packages of the build's dependencies into gpu-deps/
# (git-ignored; carry it with the device command): GoogleTest's sources, fmt, CLI11, nlohmann-json and Boost's
# headers, zlib's headers and static library. Where gpu-deps/ is present the check unpacks them (dpkg -x, or
# ar and tar where there is no dpkg) into build-gpu-deps/, builds GoogleTest from its sources with the
# machine's own compiler, and points CMake at that prefix: fmt header only (FMT_HEADER_ONLY), zlib linked
# statically, so the binaries need no library from the prefix at run time. No apt-get then.
# GPU_CHECK_BUDGET (seconds for the whole run, default 560), GPU_CHECK_BUILD_LIMIT (the build step's, default
# 300) and GPU_CHECK_JOBS (default: nproc) exist for the slow offline proof (scripts/gpu-check-offline-proof.sh).
#
# Writes under $OUT: environment.txt (nvidia-smi, compiler, cmake), one log per step, cuda-tests.xml,
# cuda-latency.json and .txt, torch-gpu.txt and .json (PyTorch on Tessera), kineto-gpu.json with
# kineto-replay.json and .html (the Kineto bar), summary.txt. Exit status 0 when every
# step passed.
set -euo pipefail

cd "$(dirname "$0")/.."
DEPS=gpu-deps  # the prepared .debs (--prepare)
# What the build needs and the machine may lack, as Debian 12 packages. libboost-dev is resolved to its
# versioned package (libboost1.74-dev on Debian 12): the headers are there, libboost-dev only depends on it.
DEP_PACKAGES=(googletest libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libboost-dev)

if (($# > 0)); then
  if [[ $1 != --prepare || $# -gt 1 ]]; then
    echo "gpu-check: unknown arguments '$*' (the only one is --prepare)" >&2
    exit 2
  fi
  command -v apt-get >/dev/null || { echo "gpu-check --prepare: no apt-get here; run it on Debian 12" >&2; exit 1; }
  packages=()
  for package in "${DEP_PACKAGES[@]}"; do
    if [[ $package == libboost-dev ]]; then
      versioned=$(apt-cache depends libboost-dev 2>/dev/null | sed -n 's/^ *Depends: \(libboost[0-9.]*-dev\)$/\1/p' | head -1)
      [[ -n $versioned ]] || { echo "gpu-check --prepare: cannot resolve libboost-dev to its versioned package" >&2; exit 1; }
      package=$versioned
    fi
    packages+=("$package")
  done
  rm -rf "$DEPS.new"
  mkdir -p "$DEPS.new"
  if ! (cd "$DEPS.new" && apt-get download "${packages[@]}"); then
    echo "gpu-check --prepare: apt-get download failed; trying once more after apt-get update" >&2
    { apt-get update >/dev/null && (cd "$DEPS.new" && apt-get download "${packages[@]}"); } ||
      { echo "gpu-check --prepare: apt-get download ${packages[*]} failed" >&2; rm -rf "$DEPS.new"; exit 1; }
  fi
  for deb in "$DEPS.new"/*.deb; do  # plain names: zlib1g-dev's epoch gives it a '%3a'
    plain=$(basename "$deb" | sed 's/%3a/_/; s/[^A-Za-z0-9._-]/_/g')
    [[ $plain == "$(basename "$deb")" ]] || mv "$deb" "$DEPS.new/$plain"
  done
  {
    echo "# gpu-check --prepare, $(date -u +%F), on $(. /etc/os-release && echo "$PRETTY_NAME") $(dpkg --print-architecture)"
    for package in "${packages[@]}"; do
      deb=$(ls "$DEPS.new/${package}"_*.deb)
      echo "$package $(dpkg-deb -f "$deb" Version) $(stat -c %s "$deb") $(basename "$deb")"
    done
    echo "# total bytes $(cat "$DEPS.new"/*.deb | wc -c)"
  } >"$DEPS.new/MANIFEST"
  rm -rf "$DEPS"
  mv "$DEPS.new" "$DEPS"
  cat "$DEPS/MANIFEST"
  echo "gpu-check --prepare: $DEPS/ ready ($(du -sh "$DEPS" | cut -f1)); carry it with the device command"
  exit 0
fi

OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD=build-gpu
DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET:-560}))  # 9 minutes and a third for everything; each step gets what is left at most
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
STATUS=0

CHECK_NAME=gpu-check
# shellcheck source=scripts/check-steps.sh
source scripts/check-steps.sh  # log, run_step

: >"$OUT/summary.txt"

# 1. The machine.
{
  echo "== date"; date -u
  echo "== uname"; uname -a
  echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo "== nvidia-smi -q (memory, compute)"; nvidia-smi -q -d MEMORY,COMPUTE 2>&1 || true
  echo "== libcuda"; ldconfig -p 2>/dev/null | grep -i libcuda || echo "libcuda not in the linker cache"
  echo "== cuda.h"; ls -l /usr/local/cuda/include/cuda.h 2>&1 || true
} >"$OUT/environment.txt" 2>&1
log "machine recorded in environment.txt"

# 2. Build dependencies. From the prepared gpu-deps/ where it is here (no network needed), else installed with
# apt-get if we can; a machine without network and without gpu-deps/ keeps what it has.
offline_args=()
# shellcheck disable=SC2317  # the two functions run through bash -c (exported), as run_step runs a command
# unpack_deb DEB DIR: dpkg -x, or the same by hand (a .deb is an ar archive holding data.tar.*) without dpkg.
unpack_deb() {
  if command -v dpkg >/dev/null; then
    dpkg -x "$1" "$2"
  else
    local work deb
    work=$(mktemp -d)
    deb="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
    (cd "$work" && ar x "$deb") && tar -xf "$work"/data.tar.* -C "$2"
    local rc=$?
    rm -rf "$work"
    return "$rc"
  fi
}
# shellcheck disable=SC2317
# prepare_offline PREFIX: every .deb of gpu-deps/ unpacked under PREFIX/root, a header-only fmt package, and
# GoogleTest built from its sources with this machine's compiler and installed under PREFIX/gtest.
prepare_offline() {
  local prefix=$1 deb
  rm -rf "$prefix"
  mkdir -p "$prefix/root" "$prefix/fmt"
  for deb in "$DEPS"/*.deb; do
    echo "unpacking $deb"
    unpack_deb "$deb" "$prefix/root" || { echo "cannot unpack $deb"; return 1; }
  done
  # fmt as a header-only package: libfmt-dev's own fmt-config.cmake wants the shared libfmt.so.9 of libfmt9,
  # built for Debian 12's glibc and libstdc++, which another distribution's may not satisfy.
  cat >"$prefix/fmt/fmt-config.cmake" <<FMT
# Written by scripts/gpu-check.sh: fmt header only, from the unpacked libfmt-dev.
if(NOT TARGET fmt::fmt)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$prefix/root/usr/include"
    INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endif()
FMT
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$prefix/root/usr/src/googletest" -B "$prefix/gtest-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$prefix/gtest" &&
    cmake --build "$prefix/gtest-build" --parallel "$JOBS" && cmake --install "$prefix/gtest-build"
}
export -f unpack_deb prepare_offline  # run_step runs a command under timeout: bash -c, not a function
export DEPS JOBS
if [[ -d $DEPS ]]; then
  DEPS_PREFIX="$PWD/$BUILD-deps"
  absent=()
  for package in "${DEP_PACKAGES[@]}"; do
    pattern=$package
    [[ $package == libboost-dev ]] && pattern='libboost[0-9.]*-dev'
    compgen -G "$DEPS/${pattern}_*.deb" >/dev/null || absent+=("$package")
  done
  [[ $(uname -m) == x86_64 ]] || log "$DEPS/ holds Debian amd64 packages (zlib's libz.a) and this machine is $(uname -m)"
  # shellcheck disable=SC2016  # in the elif: $1 is prepare_offline's argument, expanded by the inner bash
  if ((${#absent[@]} > 0)); then
    log "$DEPS/ lacks ${absent[*]}: run scripts/gpu-check.sh --prepare again; building with what is here"
    echo "offline-deps failed ($DEPS/ lacks ${absent[*]})" >>"$OUT/summary.txt"
    STATUS=1
  elif run_step offline-deps 150 bash -c 'prepare_offline "$1"' prepare_offline "$DEPS_PREFIX"; then
    root="$DEPS_PREFIX/root"
    gtest_dir=$(dirname "$(find "$DEPS_PREFIX/gtest" -name GTestConfig.cmake | head -1)")
    boost_dir=$(dirname "$(find "$root/usr/lib" -path '*/cmake/Boost-*/BoostConfig.cmake' | head -1)")
    zlib_library=$(find "$root/usr/lib" -name libz.a | head -1)
    # -isystem: the unpacked headers stand where Debian's packages put them (/usr/include) for every target.
    offline_args=(-DCMAKE_CXX_FLAGS="-isystem $root/usr/include -DFMT_HEADER_ONLY=1"
      -Dfmt_DIR="$DEPS_PREFIX/fmt" -DCLI11_DIR="$root/usr/share/cmake/CLI11"
      -Dnlohmann_json_DIR="$root/usr/share/cmake/nlohmann_json" -DBoost_DIR="$boost_dir" -DGTest_DIR="$gtest_dir"
      -DZLIB_INCLUDE_DIR="$root/usr/include" -DZLIB_LIBRARY="$zlib_library")
    log "building against the packages of $DEPS/ unpacked in $DEPS_PREFIX (no apt-get)"
  else
    STATUS=1
  fi
else
  missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  [[ -e /usr/include/gtest/gtest.h ]] || missing+=(libgtest-dev)
  [[ -e /usr/include/fmt/format.h ]] || missing+=(libfmt-dev)
  [[ -e /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
  [[ -e /usr/include/nlohmann/json.hpp ]] || missing+=(nlohmann-json3-dev)
  [[ -e /usr/include/boost/intrusive/set.hpp ]] || missing+=(libboost-dev)
  [[ -e /usr/include/zlib.h ]] || missing+=(zlib1g-dev)
  if ((${#missing[@]} > 0)); then
    log "no $DEPS/ (scripts/gpu-check.sh --prepare makes it) and missing ${missing[*]}"
    SUDO=()
    if ((EUID != 0)); then
      if sudo -n true 2>/dev/null; then SUDO=(sudo -n); else log "missing ${missing[*]} and not root: not installing"; fi
    fi
    if ((EUID == 0)) || ((${#SUDO[@]} > 0)); then
      export DEBIAN_FRONTEND=noninteractive
      run_step apt-update 60 "${SUDO[@]}" apt-get update || log "apt-get update failed (no network?)"
      run_step apt-install 150 "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" ||
        log "apt-get install failed; building with what is here"
    fi
  fi
fi
{
  echo "== g++"; g++ --version 2>&1 | head -1 || true
  echo "== cmake"; cmake --version 2>&1 | head -1 || true
  echo "== ninja"; ninja --version 2>&1 || true
} >>"$OUT/environment.txt" 2>&1

# 3. Configure and build only what the checks run. Benchmarks are left out to stay inside the time.
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
if run_step configure 90 cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSERA_BUILD_BENCHMARKS=OFF "${offline_args[@]}" &&
  run_step build "${GPU_CHECK_BUILD_LIMIT:-300}" cmake --build "$BUILD" --parallel "$JOBS" \
    --target tessera_tests tessera-driver-latency tessera_cli; then
  # 4. The cuda driver in the conformance suite (its "cuda" parameter exists only when the driver comes
  # up) and in the tests of the unavailable-platform file.
  run_step cuda-tests 150 "$BUILD/tests/tessera_tests" --gtest_filter='*cuda*:*Cuda*' \
    --gtest_output="xml:$OUT/cuda-tests.xml" || STATUS=1
  if ! grep -qE '/cuda \(' "$OUT/cuda-tests.log" 2>/dev/null; then  # ".../cuda (12 ms)", not ".../cuda_fake (12 ms)"
    log "no conformance test ran with the cuda parameter: the cuda driver did not come up (see cuda-latency.log)"
    echo "cuda-conformance missing (the cuda driver did not come up)" >>"$OUT/summary.txt"
    STATUS=1
  fi
  # 5. Per-call latency of the cuda driver: the numbers the sim driver's model should use.
  run_step cuda-latency 120 "$BUILD/tools/tessera-driver-latency" --driver cuda --sizes 2MiB,20MiB \
    --iterations 200 --json "$OUT/cuda-latency.json" || STATUS=1
  [[ -f "$OUT/cuda-latency.log" ]] && cp "$OUT/cuda-latency.log" "$OUT/cuda-latency.txt"
else
  STATUS=1
fi

# 6. PyTorch on Tessera (scripts/gpu-torch-check.py): the machine's own PyTorch trains a small GPT with the native
# allocator, expandable segments and Tessera (CUDAPluggableAllocator); equal losses, peaks and step times in
# torch-gpu.txt and .json, snapshots beside them. Skips, and passes, where PyTorch or CUDA is missing.
if [[ -d "$BUILD" ]] && run_step capi-build 120 cmake --build "$BUILD" --parallel "$JOBS" --target tessera_c; then
  run_step torch-gpu 200 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "${TESSERA_GPU_PYTHON:-python3}" \
    scripts/gpu-torch-check.py --out "$OUT" || STATUS=1
  # 7. Pause and resume by tag on CUDA (scripts/gpu-pause-check.py): device memory returned, weights equal.
  run_step gpu-pause 90 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "${TESSERA_GPU_PYTHON:-python3}" \
    scripts/gpu-pause-check.py --out "$OUT" || STATUS=1
  # 7b. CUDA graphs in Tessera's graph pools, their memory paused and resumed, and torch.cuda.MemPool
  # (scripts/gpu-graph-check.py).
  run_step gpu-graph 60 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "${TESSERA_GPU_PYTHON:-python3}" \
    scripts/gpu-graph-check.py --out "$OUT" || STATUS=1
  # 7c. A CUDA tensor shared between two processes through tessera.ipc, bytes checked both ways, and the
  # sharer's free and next allocation leaving the child's view alone (scripts/gpu-ipc-check.py).
  run_step gpu-ipc 60 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" PYTHONPATH="$PWD/python" \
    "${TESSERA_GPU_PYTHON:-python3}" scripts/gpu-ipc-check.py || STATUS=1
else
  STATUS=1
fi

# 8. The Kineto bar: a small CUDA training job recorded with torch.profiler (profile_memory=True, CPU and CUDA)
# to kineto-gpu.json (scripts/gpu-kineto-record.py), replayed by `tessera replay --format kineto
# --profile-device cuda:0`; scripts/kineto-replay-check.py fails when the replay's live peak is more than 1% off
# the trace's own most Total Allocated, or when the reports lack the real allocator's line (Total Reserved).
# Skips, and passes, where PyTorch, CUDA or Kineto's memory events are missing. Under a minute.
if [[ -x "$BUILD/tools/tessera" ]]; then
  run_step kineto-record 50 "${TESSERA_GPU_PYTHON:-python3}" scripts/gpu-kineto-record.py --out "$OUT" || STATUS=1
  if [[ -f "$OUT/kineto-gpu.json" ]]; then
    run_step kineto-replay 30 python3 scripts/kineto-replay-check.py "$OUT/kineto-gpu.json" --device cuda:0 \
      --tessera "$BUILD/tools/tessera" --out "$OUT" --require-real-line || STATUS=1
  fi
else
  log "kineto: no $BUILD/tools/tessera (the build failed): skipped"
  echo "kineto skipped (no tessera command)" >>"$OUT/summary.txt"
  STATUS=1
fi

# What comes back first: the summary and the ends of the logs that matter.
echo "== summary"; cat "$OUT/summary.txt"
for name in offline-deps configure build cuda-tests cuda-latency capi-build torch-gpu gpu-pause kineto-record kineto-replay; do
  [[ -f "$OUT/$name.log" ]] || continue
  echo "== $name.log (tail)"
  tail -n 25 "$OUT/$name.log"
done
log "done, status $STATUS, outputs in $OUT"
exit "$STATUS"
