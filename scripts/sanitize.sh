#!/usr/bin/env bash
# The sanitizer builds (CMakePresets.json): configure, build and test with the `asan` preset (AddressSanitizer +
# UndefinedBehaviorSanitizer + LeakSanitizer, the whole suite, into build-asan/) and/or the `tsan` preset
# (ThreadSanitizer, the concurrency tests, into build-tsan/), timing each step.
#   bash scripts/sanitize.sh [asan|tsan|all]     (default: all)
# Installs only what scripts/common.sh installs (the sanitizer runtimes come with g++). Exit status: non-zero
# when any step of any preset failed; every preset asked for is still run.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

which=${1:-all}
case "$which" in
  asan) presets=(asan) ;;
  tsan) presets=(tsan) ;;
  all) presets=(asan tsan) ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac

tessera_install_packages
cd "$TESSERA_ROOT" || exit 1

timings=()
failed=()

# step PRESET NAME COMMAND...: runs COMMAND, records its time; returns its status.
step() {
  local preset=$1 name=$2
  shift 2
  echo "==> $preset: $name: $*" >&2
  local start=$SECONDS status=0
  "$@" || status=$?
  local took=$((SECONDS - start))
  timings+=("$(printf '%-5s %-9s %5ds  %s' "$preset" "$name" "$took" "$([[ $status -eq 0 ]] && echo ok || echo "FAILED ($status)")")")
  return "$status"
}

for preset in "${presets[@]}"; do
  started=$SECONDS
  if step "$preset" configure cmake --preset "$preset" >/dev/null &&
    step "$preset" build cmake --build --preset "$preset" --parallel "$(nproc)" &&
    step "$preset" test ctest --preset "$preset" --parallel "$(nproc)"; then
    :
  else
    failed+=("$preset")
  fi
  timings+=("$(printf '%-5s %-9s %5ds' "$preset" total "$((SECONDS - started))")")
done

echo
echo "sanitize.sh: times on $(nproc) cores"
printf '  %s\n' "${timings[@]}"
if ((${#failed[@]} > 0)); then
  echo "sanitize.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "sanitize.sh: all clean: ${presets[*]}"
