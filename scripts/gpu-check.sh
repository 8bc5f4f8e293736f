#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run of under 9 minutes: build Tessera, run the cuda driver
# through the conformance suite, measure its per-call latency, train PyTorch on Tessera, replay a Kineto
# trace of a GPU job against its own peaks, and record the machine.
#
#   OUT=/some/dir scripts/gpu-check.sh      (default OUT: gpu-out)
#
# Writes under $OUT: environment.txt (nvidia-smi, compiler, cmake), one log per step, cuda-tests.xml,
# cuda-latency.json and .txt, torch-gpu.txt and .json (PyTorch on Tessera), kineto-gpu.json with
# kineto-replay.json and .html (the Kineto bar), summary.txt. Exit status 0 when every
# step passed.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD=build-gpu
DEADLINE=$((SECONDS + 560))  # 9 minutes and a third for everything; each step gets what is left at most
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

# 2. Build tools: install what is missing if we can; a machine without network keeps what it has.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
[[ -e /usr/include/gtest/gtest.h ]] || missing+=(libgtest-dev)
[[ -e /usr/include/benchmark/benchmark.h ]] || missing+=(libbenchmark-dev)
[[ -e /usr/include/fmt/format.h ]] || missing+=(libfmt-dev)
[[ -e /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
if ((${#missing[@]} > 0)); then
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
{
  echo "== g++"; g++ --version 2>&1 | head -1 || true
  echo "== cmake"; cmake --version 2>&1 | head -1 || true
  echo "== ninja"; ninja --version 2>&1 || true
} >>"$OUT/environment.txt" 2>&1

# 3. Configure and build only what the checks run. Benchmarks are left out to stay inside the time.
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
if run_step configure 90 cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSERA_BUILD_BENCHMARKS=OFF &&
  run_step build 300 cmake --build "$BUILD" --parallel "$(nproc)" --target tessera_tests tessera-driver-latency tessera_cli; then
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
if [[ -d "$BUILD" ]] && run_step capi-build 120 cmake --build "$BUILD" --parallel "$(nproc)" --target tessera_c; then
  run_step torch-gpu 200 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "${TESSERA_GPU_PYTHON:-python3}" \
    scripts/gpu-torch-check.py --out "$OUT" || STATUS=1
  # 7. Pause and resume by tag on CUDA (scripts/gpu-pause-check.py): device memory returned, weights equal.
  run_step gpu-pause 90 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "${TESSERA_GPU_PYTHON:-python3}" \
    scripts/gpu-pause-check.py --out "$OUT" || STATUS=1
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
for name in configure build cuda-tests cuda-latency capi-build torch-gpu gpu-pause kineto-record kineto-replay; do
  [[ -f "$OUT/$name.log" ]] || continue
  echo "== $name.log (tail)"
  tail -n 25 "$OUT/$name.log"
done
log "done, status $STATUS, outputs in $OUT"
exit "$STATUS"
