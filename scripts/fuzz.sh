#!/usr/bin/env bash
# Fuzzing (docs/reliability.md, "Fuzzing"): builds the fuzz preset (clang, libFuzzer, ASan + UBSan) into
# build-fuzz/, makes seed corpora from ../shared/traces and the tests' data, runs every target for a while,
# prints the executions of each, and fails when a target found a bug, keeping the input that shows it.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 20 s each, every target
#
# Environment:
#   FUZZ_RUNS=N       N executions per target instead of a time limit
#   FUZZ_JOBS=N       targets run at once (default 1; each target is one process)
#   FUZZ_FRESH=1      start from the seeds alone, forgetting the corpora earlier runs kept in build-fuzz/
#
# Corpora live in build-fuzz/fuzz-corpus/<target>, kept between runs, not committed (runs under 60 s use a
# fresh one, build-fuzz/fuzz-corpus-short/, so that loading a grown corpus does not outlast them). Inputs
# that broke a target go to build-fuzz/fuzz-artifacts/<target>/; build-fuzz/fuzz/fuzz_<target> FILE
# reproduces one.
# Once the bug is fixed, the input is committed under fuzz/regressions/<target>/, which the regression
# test (tests/fuzz) runs in the normal suite.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# clang and its libFuzzer runtime, beside what the normal build needs.
TESSERA_PACKAGES+=(clang libclang-rt-14-dev)
tessera_install_packages

build="$TESSERA_ROOT/build-fuzz"
seconds="${1:-20}"
shift || true
all_targets=(pytorch_snapshot kineto_json operator_memory_csv memory_record_csv lifetimes_csv stalloc_trace text_trace allocator_config allocator_ops export_handle)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
jobs="${FUZZ_JOBS:-1}"

# The longest input libFuzzer makes (and the most of a seed it reads): readers of whole files are fast on
# small ones, and every structure they have fits in 16 KiB.
seed_limit=16384
declare -A max_len=([pytorch_snapshot]=$seed_limit [kineto_json]=$seed_limit [operator_memory_csv]=$seed_limit
                    [memory_record_csv]=$seed_limit [lifetimes_csv]=$seed_limit [stalloc_trace]=$seed_limit
                    [text_trace]=$seed_limit [allocator_config]=512 [allocator_ops]=2048
                    [export_handle]=1024)
for target in "${targets[@]}"; do
  [[ -n "${max_len[$target]:-}" ]] || { echo "fuzz.sh: unknown target '$target' (${all_targets[*]})" >&2; exit 2; }
done

started=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build "$build" --target tessera_fuzzers --parallel "$(nproc)"
built=$(date +%s)

# ---- Seeds: prefixes of the real traces and the tests' traces in every format (at most 16 KiB each), the
# small real files as they are (gzip included), the configurations the docs and tests use.
seeds="$build/fuzz-seeds"
rm -rf "$seeds"
mkdir -p "$seeds"
inputs=("$TESSERA_ROOT"/tests/trace/data/* "$TESSERA_ROOT"/tests/cli/data/*)
shared="$TESSERA_ROOT/../shared/traces"
if [[ -d "$shared" ]]; then
  inputs+=("$shared"/pytorch/*.gz "$shared"/lifetimes/*.gz)
else
  echo "fuzz.sh: $shared is absent: seeds from the tests' data only" >&2
fi
"$build/fuzz/fuzz_make_seeds" "$seeds" "$seed_limit" "${inputs[@]}" 2>/dev/null
copy_small() {  # TARGET FILE...: the files of at most 16 KiB, as they are
  local target="$1"
  shift
  mkdir -p "$seeds/$target"
  for file in "$@"; do
    [[ -f "$file" && $(stat -c %s "$file") -le $seed_limit ]] && cp "$file" "$seeds/$target/"
  done
  return 0
}
copy_small pytorch_snapshot "$shared"/pytorch/*.gz
copy_small lifetimes_csv "$TESSERA_ROOT"/tests/trace/data/*.csv "$TESSERA_ROOT"/tests/cli/data/*.csv "$shared"/lifetimes/*.gz
copy_small stalloc_trace "$TESSERA_ROOT"/tests/trace/data/stalloc*
copy_small kineto_json "$TESSERA_ROOT"/tests/trace/data/kineto*.gz
copy_small operator_memory_csv "$TESSERA_ROOT"/tests/trace/data/*operator_memory.csv "$TESSERA_ROOT"/tests/trace/data/*/operator_memory.csv
copy_small memory_record_csv "$TESSERA_ROOT"/tests/trace/data/*/memory_record.csv
# and a layout without Stream Ptr (MindSpore's profiler writes one), with quoted fields and a second device
printf 'Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),Device Type\n"PTA",1700000000000001.5,0.5,2.0,0.5,NPU:1\nGE,1700000000000002,0,4,0,NPU:1\nPTA,1700000000000003,1.25,2.0,1.25,"NPU:1"\nPTA,1700000000000003,0.25,6.0,0.25,NPU:0\r\n' \
  >"$seeds/memory_record_csv/no_stream_ptr.csv"
head -c 16000 "$TESSERA_ROOT"/tests/trace/data/kineto_cpu.json >"$seeds/kineto_json/kineto_cpu-prefix.json"
copy_small text_trace "$TESSERA_ROOT"/tests/trace/data/*.trace "$TESSERA_ROOT"/tests/cli/data/*.trace
for target in pytorch_snapshot lifetimes_csv stalloc_trace text_trace; do  # gzip-compressed small ones
  for file in "$seeds/$target"/*-8.*; do
    [[ -f "$file" ]] && gzip -c "$file" >"$file.gz"
  done
done
mkdir -p "$seeds/allocator_config"
config=0
for text in "" "small_max_kb:64" "small_max_kb:64,page_max_mb:1" "reclaim:first" "reclaim:never,virtual_factor:1" \
            "garbage_collection_threshold:0.5" "roundup_power2_divisions:4,small_max_kb:1024" \
            "garbage_collection_threshold:0.8,roundup_power2_divisions:16,small_max_kb:4096,page_max_mb:64,reclaim:when_full,virtual_factor:4" \
            " small_max_kb : 64 , reclaim:first " "page_max_mb:1024" "bogus:1" "small_max_kb:64,small_max_kb:64"; do
  printf '%s' "$text" >"$seeds/allocator_config/seed-$((config++))"
done
seeded=$(date +%s)

# ---- Run.
corpora="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
logs="$build/fuzz-logs"
[[ "${FUZZ_FRESH:-0}" == 1 ]] && rm -rf "$corpora"
if [[ -z "${FUZZ_RUNS:-}" ]] && ((seconds < 60)); then
  # A short run (CI's) starts from the seeds alone: libFuzzer first runs every input it is given, and a
  # corpus grown by long runs takes longer than that to load (allocator_ops runs about 20 inputs a second).
  corpora="$build/fuzz-corpus-short"
  rm -rf "$corpora"
fi
mkdir -p "$logs"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_target() {
  local target="$1"
  local limit=(-max_total_time="$seconds")
  [[ -n "${FUZZ_RUNS:-}" ]] && limit=(-runs="$FUZZ_RUNS")
  local dict=()
  [[ -f "$TESSERA_ROOT/fuzz/dicts/$target.dict" ]] && dict=(-dict="$TESSERA_ROOT/fuzz/dicts/$target.dict")
  rm -rf "$artifacts/$target"  # what an earlier run kept was reported then
  # libFuzzer refuses a corpus folder that is missing; a target whose seeds are its regressions has none.
  mkdir -p "$corpora/$target" "$seeds/$target" "$artifacts/$target" "$TESSERA_ROOT/fuzz/regressions/$target"
  local begin=$(date +%s)
  local status=0
  "$build/fuzz/fuzz_$target" "${limit[@]}" -max_len="${max_len[$target]}" -timeout=30 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$target/" "${dict[@]}" \
    "$corpora/$target" "$seeds/$target" "$TESSERA_ROOT/fuzz/regressions/$target" >"$logs/$target.log" 2>&1 || status=$?
  echo "$status $(( $(date +%s) - begin ))" >"$logs/$target.status"
}

for target in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  echo "fuzz.sh: $target ..." >&2
  run_target "$target" &
done
wait

# ---- Report.
failed=0
total=0
printf '\n%-18s %9s %14s %10s %8s  %s\n' target seconds executions exec/s corpus result
for target in "${targets[@]}"; do
  read -r status took <"$logs/$target.status"
  runs=$(grep -a -o 'stat::number_of_executed_units: [0-9]*' "$logs/$target.log" | tail -1 | grep -o '[0-9]*$' || true)
  runs="${runs:-0}"
  total=$((total + runs))
  corpus=$(find "$corpora/$target" -type f | wc -l)
  result="ok"
  if [[ "$status" != 0 ]]; then
    result="FAILED (status $status)"
    failed=1
  fi
  printf '%-18s %9s %14s %10s %8s  %s\n' "$target" "$took" "$runs" "$((runs / (took > 0 ? took : 1)))" "$corpus" "$result"
done
printf '%-18s %9s %14s\n' total "$(( $(date +%s) - seeded ))" "$total"
echo "fuzz.sh: build $((built - started)) s, seeds $((seeded - built)) s, fuzzing $(( $(date +%s) - seeded )) s; logs in $logs"

if ((failed)); then
  for target in "${targets[@]}"; do
    read -r status took <"$logs/$target.status"
    [[ "$status" == 0 ]] && continue
    echo
    echo "== $target: $(grep -a -m1 -E '==tessera-fuzz== FAILURE|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$logs/$target.log" || echo "see $logs/$target.log")"
    for input in "$artifacts/$target"/*; do
      [[ -f "$input" ]] || continue
      echo "   kept: $input"
      echo "   reproduce: $build/fuzz/fuzz_$target $input"
    done
  done
  echo
  echo "fuzz.sh: a target failed; once fixed, commit the input under fuzz/regressions/<target>/" >&2
  exit 1
fi
