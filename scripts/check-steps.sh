# shellcheck shell=bash
# Shared by scripts/gpu-check.sh and scripts/npu-check.sh (sourced, not run): a log line and a step with a
# time limit. The caller sets OUT (the output folder), DEADLINE (in $SECONDS) and CHECK_NAME.

log() { echo "[$CHECK_NAME $(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/$CHECK_NAME.log"; }

# run_step NAME LIMIT COMMAND...: runs with a timeout, output to $OUT/NAME.log, result to summary.txt.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  if ((left < 15)); then
    log "$name: skipped, out of time"
    echo "$name skipped (out of time)" >>"$OUT/summary.txt"
    return 1
  fi
  ((limit > left)) && limit=$left
  log "$name (at most ${limit}s): $*"
  local started=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  local verdict=passed
  ((rc == 124 || rc == 137)) && verdict="timed out"
  ((rc != 0 && rc != 124 && rc != 137)) && verdict="failed (exit $rc)"
  echo "$name $verdict in $((SECONDS - started))s" >>"$OUT/summary.txt"
  log "$name: $verdict"
  return "$rc"
}
