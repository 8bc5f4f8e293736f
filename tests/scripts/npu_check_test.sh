#!/usr/bin/env bash
# scripts/npu-check.sh without CANN: exit 2, a message naming libascendcl.so, set_env.sh and
# TESSERA_ASCEND_LIBRARY, nothing built. With a set_env.sh that sets ASCEND_HOME_PATH to a directory without the
# library, that directory is named. With a libascendcl.so found there (the stand-in), --preflight reports it and
# then torch_npu: exit 3 and "torch_npu is missing" where the python has none, 0 where it has it.
#
#   bash tests/scripts/npu_check_test.sh scripts/npu-check.sh build/tests/libtessera_fake_ascend.so
set -uo pipefail

script=$1 stand_in=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# npu-check with a clean CANN environment, the given NAME=value variables and --options; sets output and rc.
npu_check() {
  local variables=() options=()
  for argument in "$@"; do
    if [[ $argument == --* ]]; then options+=("$argument"); else variables+=("$argument"); fi
  done
  output=$(env -u ASCEND_HOME_PATH -u ASCEND_TOOLKIT_HOME -u TESSERA_ASCEND_LIBRARY "${variables[@]}" \
    bash "$script" "${options[@]}" 2>&1)
  rc=$?
}

# 1. No CANN at all.
npu_check OUT="$work/none" NPU_CHECK_SET_ENV="$work/absent/set_env.sh" NPU_CHECK_LIBRARY_DIRS="$work/empty"
((rc == 2)) || fail "exit $rc without CANN, expected 2: $output"
for expected in "CANN is missing: no libascendcl.so" "ASCEND_HOME_PATH is not set" "$work/absent/set_env.sh" \
  "TESSERA_ASCEND_LIBRARY" "Nothing was run"; do
  grep -qF "$expected" <<<"$output" || fail "no '$expected' in: $output"
done
grep -q "cann missing" "$work/none/summary.txt" || fail "summary.txt: $(cat "$work/none/summary.txt")"
[[ ! -e "$work/none/configure.log" && ! -e "$work/none/environment.txt" ]] || fail "something ran without CANN"

# 2. set_env.sh sourced, its ASCEND_HOME_PATH without the library: named.
mkdir -p "$work/cann/lib64"
echo "export ASCEND_HOME_PATH=$work/cann" >"$work/set_env.sh"
npu_check OUT="$work/empty-cann" NPU_CHECK_SET_ENV="$work/set_env.sh" NPU_CHECK_LIBRARY_DIRS="$work/cann/lib64"
((rc == 2)) || fail "exit $rc with an empty CANN, expected 2: $output"
grep -qF "ASCEND_HOME_PATH is $work/cann (from $work/set_env.sh), but holds no lib64/libascendcl.so" <<<"$output" ||
  fail "the empty CANN directory is not named: $output"

# 3. The library found (the stand-in in its place): --preflight goes on to torch_npu.
cp "$stand_in" "$work/cann/lib64/libascendcl.so"
python=${TESSERA_NPU_PYTHON:-python3}
npu_check OUT="$work/preflight" NPU_CHECK_SET_ENV="$work/set_env.sh" NPU_CHECK_LIBRARY_DIRS="$work/cann/lib64" \
  TESSERA_NPU_PYTHON="$python" --preflight
grep -qF "CANN: libascendcl.so is $work/cann/lib64/libascendcl.so" <<<"$output" || fail "library not reported: $output"
if "$python" -c "import torch_npu" 2>/dev/null; then
  ((rc == 0)) || fail "exit $rc with CANN and torch_npu, expected 0: $output"
else
  ((rc == 3)) || fail "exit $rc without torch_npu, expected 3: $output"
  grep -qF "torch_npu is missing for $python" <<<"$output" || fail "torch_npu's absence not said: $output"
fi
echo "npu-check: CANN and torch_npu missing are reported as such"
