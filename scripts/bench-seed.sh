#!/usr/bin/env bash
# The seed's experiment as near as a simulation gets (docs/benchmarks.md, "The seed's experiment"): each
# seed-* scenario (MindSpeed-style training of Llama-2-7B and a PanGu-like 13B on four 910B cards, one
# card's trace, docs/workloads.md) replayed through tessera and every model on the sim driver set up as an
# Ascend 910B (--platform ascend: 2 MiB granule, whole-handle mapping, no set-access, assumed latencies;
# --capacity 64GiB). Prints one markdown row per scenario and allocator: avg_frag (the seed's metric),
# frag at peak (GMLake's), min_capacity.
#   bash scripts/bench-seed.sh [--quick] [--tessera PATH] [--jobs N] [--json-dir DIR]
# --quick: one scenario, one optimizer step of one micro-batch (seconds; what ctest runs). Without
# --tessera it uses build/tools/tessera, building it first if it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera=""
quick=false
jobs=2
json_dir=""
usage() { sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($# > 0)); do
  case "$1" in
    --quick) quick=true ;;
    --tessera) tessera="${2:?--tessera needs a path}"; shift ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    --json-dir) json_dir="${2:?--json-dir needs a directory}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-seed.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

if [[ -z "$tessera" ]]; then
  tessera="$root/build/tools/tessera"
  if [[ ! -x "$tessera" ]]; then
    echo "bench-seed.sh: building $tessera" >&2
    [[ -f "$root/build/CMakeCache.txt" ]] ||
      cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON >/dev/null
    cmake --build "$root/build" --target tessera_cli >&2
  fi
fi
if [[ ! -x "$tessera" ]]; then
  echo "bench-seed.sh: $tessera is not an executable tessera binary" >&2
  exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
[[ -n "$json_dir" ]] && mkdir -p "$json_dir"

# The scenarios from the binary itself, so that the script never lists one the binary lacks.
mapfile -t scenarios < <("$tessera" gen --list | awk '$1 ~ /^seed-/ {print $1}')
if ((${#scenarios[@]} == 0)); then
  echo "bench-seed.sh: $tessera lists no seed-* scenario (tessera gen --list)" >&2
  exit 1
fi
sets=()
if $quick; then
  scenarios=(seed-llama2-7b-tp2dp2-full)
  sets=(--set steps=1 --set micro_batches=1)
fi

allocators=tessera,pytorch,expandable,gmlake,ideal_cache  # ideal_cache: the avg_frag floor (docs/replay.md)
echo "| scenario | allocator | peak live GiB | avg_frag | frag at peak | min_capacity GiB | overhead | at 64 GiB |"
echo "|---|---|---|---|---|---|---|---|"
for scenario in "${scenarios[@]}"; do
  trace="$work/$scenario.trace.gz"
  json="${json_dir:-$work}/$scenario.json"
  "$tessera" gen "$scenario" "${sets[@]}" -o "$trace" >/dev/null
  "$tessera" replay "$trace" --driver sim --platform ascend --capacity 64GiB --allocators "$allocators" \
    --min-capacity -j "$jobs" --json "$json" >/dev/null
  python3 - "$json" "$scenario" <<'PY'
import json, sys
GiB = 1 << 30
for r in json.load(open(sys.argv[1]))["results"]:
    if r["failure"]:
        sys.exit(f"bench-seed.sh: {sys.argv[2]} on {r['allocator']}: {r['failure']}")
    fit = f"OOM at event {r['oom_event']}" if r["oom"] else "fits"
    min_cap = "-" if r["min_capacity"] is None else f"{r['min_capacity'] / GiB:.3f}"
    overhead = "-" if r["overhead"] is None else f"{100 * r['overhead']:.2f}%"
    print(f"| {sys.argv[2]} | {r['allocator']} | {r['peak_allocated'] / GiB:.3f} | {100 * r['avg_frag']:.2f}% | "
          f"{100 * r['frag_at_peak']:.2f}% | {min_cap} | {overhead} | {fit} |")
PY
done
