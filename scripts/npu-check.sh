#!/usr/bin/env bash
# The checks that need an Ascend NPU and CANN, the counterpart of scripts/gpu-check.sh (docs/npu.md): build
# Tessera, run the driver conformance suite on the real ascend driver, the C ABI's and the Python package's NPU
# tests, the ascend driver's per-call latency, then torch_npu on Tessera (scripts/npu-torch-check.py).
#
#   OUT=/some/dir scripts/npu-check.sh              (default OUT: npu-out)
#   scripts/npu-check.sh --preflight                (only say whether CANN and torch_npu are there)
#
# CANN: ASCEND_HOME_PATH as CANN's set_env.sh sets it; when unset, the script sources the first set_env.sh of
# /usr/local/Ascend/ascend-toolkit/set_env.sh, $HOME/Ascend/ascend-toolkit/set_env.sh (NPU_CHECK_SET_ENV, a path,
# replaces the two).
# libascendcl.so is TESSERA_ASCEND_LIBRARY if set, else looked for under the CANN directories, LD_LIBRARY_PATH
# and the linker cache (NPU_CHECK_LIBRARY_DIRS, colon-separated, replaces that search). torch_npu is that of
# ${TESSERA_NPU_PYTHON:-python3}. The build needs the packages README lists; the script installs nothing.
#
# Writes under $OUT: environment.txt, one log per step, ascend-tests.xml, ascend-latency.json,
# torch-npu.txt and .json, summary.txt. Exit status: 0 every step passed; 1 a step failed; 2 CANN is missing
# (nothing is run); 3 torch_npu is missing (the other steps still run).
set -euo pipefail

cd "$(dirname "$0")/.."
PREFLIGHT=0
[[ "${1:-}" == "--preflight" ]] && PREFLIGHT=1
OUT="${OUT:-npu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD=build-npu
PYTHON="${TESSERA_NPU_PYTHON:-python3}"
DEADLINE=$((SECONDS + 900))  # 15 minutes for everything; each step gets what is left at most
STATUS=0

CHECK_NAME=npu-check
# shellcheck source=scripts/check-steps.sh
source scripts/check-steps.sh  # log, run_step

: >"$OUT/summary.txt"

# 1. CANN: its environment, then libascendcl.so. Without it nothing here can run.
set_env_candidates=(/usr/local/Ascend/ascend-toolkit/set_env.sh "${HOME:-/root}/Ascend/ascend-toolkit/set_env.sh")
[[ -n "${NPU_CHECK_SET_ENV:-}" ]] && set_env_candidates=("$NPU_CHECK_SET_ENV")
sourced=""
if [[ -z "${ASCEND_HOME_PATH:-}" ]]; then
  for candidate in "${set_env_candidates[@]}"; do
    [[ -n "$candidate" && -f "$candidate" ]] || continue
    set +u  # set_env.sh reads variables that may be unset
    # shellcheck disable=SC1090
    source "$candidate"
    set -u
    sourced=$candidate
    break
  done
fi
if [[ -n "${TESSERA_ASCEND_LIBRARY:-}" ]]; then
  library_dirs=()
  [[ -f "$TESSERA_ASCEND_LIBRARY" ]] && ascendcl="$TESSERA_ASCEND_LIBRARY" || ascendcl=""
  searched="TESSERA_ASCEND_LIBRARY=$TESSERA_ASCEND_LIBRARY (no such file)"
else
  if [[ -n "${NPU_CHECK_LIBRARY_DIRS+set}" ]]; then
    IFS=: read -r -a library_dirs <<<"$NPU_CHECK_LIBRARY_DIRS"
  else
    library_dirs=()
    for home in "${ASCEND_HOME_PATH:-}" "${ASCEND_TOOLKIT_HOME:-}"; do
      [[ -n "$home" ]] && library_dirs+=("$home/lib64" "$home/runtime/lib64")
    done
    IFS=: read -r -a path_dirs <<<"${LD_LIBRARY_PATH:-}"
    library_dirs+=("${path_dirs[@]}")
  fi
  ascendcl=""
  for dir in "${library_dirs[@]}"; do
    [[ -n "$dir" && -f "$dir/libascendcl.so" ]] && { ascendcl="$dir/libascendcl.so"; break; }
  done
  if [[ -z "$ascendcl" && -z "${NPU_CHECK_LIBRARY_DIRS+set}" ]]; then
    ascendcl="$(ldconfig -p 2>/dev/null | awk '/libascendcl\.so / {print $NF; exit}')"
  fi
  searched="${library_dirs[*]:-no CANN directory, LD_LIBRARY_PATH empty}, and the linker cache"
  [[ -n "${NPU_CHECK_LIBRARY_DIRS+set}" ]] && searched="${library_dirs[*]:-nothing} (NPU_CHECK_LIBRARY_DIRS)"
fi
if [[ -z "$ascendcl" ]]; then
  {
    echo "npu-check: CANN is missing: no libascendcl.so (looked in $searched)."
    if [[ -z "${ASCEND_HOME_PATH:-}" ]]; then
      echo "  ASCEND_HOME_PATH is not set and no CANN set_env.sh was found (tried: ${set_env_candidates[*]})."
    else
      echo "  ASCEND_HOME_PATH is $ASCEND_HOME_PATH${sourced:+ (from $sourced)}, but holds no lib64/libascendcl.so."
    fi
    echo "  Install the CANN toolkit and source its set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh),"
    echo "  or set TESSERA_ASCEND_LIBRARY to the path of libascendcl.so. Nothing was run."
  } | tee -a "$OUT/npu-check.log" >&2
  echo "cann missing: no libascendcl.so; nothing run" >>"$OUT/summary.txt"
  exit 2
fi
log "CANN: libascendcl.so is $ascendcl${sourced:+ (environment from $sourced)};" \
  "ASCEND_HOME_PATH=${ASCEND_HOME_PATH:-unset}"
export TESSERA_ASCEND_LIBRARY="$ascendcl"

# 2. torch_npu: missing is said now and fails the torch-npu step at the end; the driver steps still run.
TORCH_NPU=1
versions='import torch, torch_npu; print(torch.__version__, torch_npu.__version__)'
if ! torch_npu_version="$("$PYTHON" -c "$versions" 2>&1)"; then
  TORCH_NPU=0
  {
    echo "npu-check: torch_npu is missing for $PYTHON: ${torch_npu_version##*$'\n'}"
    echo "  Install the torch_npu that matches this CANN and torch (torch_npu 2.7.1 or later has the statistics"
    echo "  hooks), or set TESSERA_NPU_PYTHON to a python3 that has it."
  } | tee -a "$OUT/npu-check.log" >&2
  echo "torch_npu missing for $PYTHON" >>"$OUT/summary.txt"
else
  log "torch and torch_npu: $torch_npu_version"
fi
if ((PREFLIGHT)); then
  ((TORCH_NPU)) || exit 3
  log "preflight: CANN and torch_npu are here"
  exit 0
fi

# 3. The machine.
{
  echo "== date"; date -u
  echo "== uname"; uname -a
  echo "== npu-smi info"; npu-smi info 2>&1 || echo "npu-smi failed"
  echo "== CANN"; echo "libascendcl: $ascendcl"; echo "ASCEND_HOME_PATH: ${ASCEND_HOME_PATH:-unset}"
  cat "${ASCEND_HOME_PATH:-/nonexistent}"/*install.info 2>/dev/null || true
  cat "${ASCEND_HOME_PATH:-/nonexistent}"/version.cfg 2>/dev/null || true
  echo "== torch, torch_npu"; echo "$torch_npu_version"
  echo "== g++"; g++ --version 2>&1 | head -1 || true
  echo "== cmake"; cmake --version 2>&1 | head -1 || true
} >"$OUT/environment.txt" 2>&1
log "machine recorded in environment.txt"

# 4. Configure and build only what the checks run.
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
if run_step configure 120 cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTESSERA_BUILD_BENCHMARKS=OFF &&
  run_step build 420 cmake --build "$BUILD" --parallel "$(nproc)" --target tessera_tests tessera_capi_tests \
    tessera_c tessera_fake_ascend tessera-driver-latency; then
  # 5. The conformance suite and the ascend driver's tests. The real driver's "ascend" parameter exists only
  # when it comes up; the stand-in's ("ascend_fake") runs beside it.
  run_step ascend-tests 150 "$BUILD/tests/tessera_tests" --gtest_filter='*ascend*:*Ascend*' \
    --gtest_output="xml:$OUT/ascend-tests.xml" || STATUS=1
  if ! grep -qE '/ascend \(' "$OUT/ascend-tests.log" 2>/dev/null; then  # ".../ascend (12 ms)", not "ascend_fake"
    log "no conformance test ran with the ascend parameter: the ascend driver did not come up (see ascend-latency.log)"
    echo "ascend-conformance missing (the ascend driver did not come up)" >>"$OUT/summary.txt"
    STATUS=1
  fi
  # 6. The C ABI's NPU entry points (over the stand-in) and the statistics hooks on the real driver.
  run_step capi-npu-tests 90 "$BUILD/tests/capi/tessera_capi_tests" --gtest_filter='*Ascend*:*Npu*' || STATUS=1
  python_env=(env PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1
              TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so")
  run_step python-npu-stats 90 "${python_env[@]}" TESSERA_TEST_NPU_DRIVER=ascend "$PYTHON" \
    tests/python/npu_stats_hook_test.py || STATUS=1
  run_step python-npu-enable 90 "${python_env[@]}" "$PYTHON" tests/python/npu_enable_hooks_test.py || STATUS=1
  # 7. Per-call latency of the ascend driver: the numbers the sim driver's Ascend model should use.
  run_step ascend-latency 120 "$BUILD/tools/tessera-driver-latency" --driver ascend --library "$ascendcl" \
    --sizes 2MiB,20MiB --iterations 200 --json "$OUT/ascend-latency.json" || STATUS=1
  # 8. torch_npu on Tessera (not run without torch_npu: said above, and the exit status is 3).
  if ((TORCH_NPU)); then
    run_step torch-npu 200 env TESSERA_LIBRARY="$PWD/$BUILD/src/capi/libtessera_c.so" "$PYTHON" \
      scripts/npu-torch-check.py --out "$OUT" || STATUS=1
  else
    echo "torch-npu not run (torch_npu missing)" >>"$OUT/summary.txt"
  fi
else
  STATUS=1
fi
((TORCH_NPU || STATUS != 0)) || STATUS=3

# What comes back first: the summary and the ends of the logs that matter.
echo "== summary"; cat "$OUT/summary.txt"
for name in configure build ascend-tests capi-npu-tests python-npu-stats python-npu-enable ascend-latency torch-npu; do
  [[ -f "$OUT/$name.log" ]] || continue
  echo "== $name.log (tail)"
  tail -n 25 "$OUT/$name.log"
done
log "done, status $STATUS, outputs in $OUT"
exit "$STATUS"
