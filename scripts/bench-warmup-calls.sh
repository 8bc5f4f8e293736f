#!/usr/bin/env bash
# Warm-up driver calls (docs/benchmarks.md, "Warm-up driver calls"): the shared traces and the four generated
# workloads replayed with tessera and the pytorch model at unlimited capacity and at 1.05 x peak live;
# modelled driver time per trace (sim driver, A100 latencies); where the pytorch model runs out of memory at
# 1.05 x, tessera's over the same events ("t same ev"); and tessera's min_capacity against a reference
# replay's (a `tessera replay --json` file, e.g. ../shared/reference/replay-5d9bde4.json) where one is given;
# LATENCY_MODEL is the sim driver's (per_call, the default, or per_byte: docs/drivers.md).
#   bash scripts/bench-warmup-calls.sh [REFERENCE_JSON [TESSERA_CONF [LATENCY_MODEL]]]   (TESSERA_CONF may be
#   empty; needs a built build/tools/tessera)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="$root/build/tools/tessera"
reference="${1:-}"
conf=(); [[ -n "${2:-}" ]] && conf=(--conf "$2")
conf+=(--latency-model "${3:-per_call}")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
traces=("$root"/../shared/traces/pytorch/*.pickle.gz)
for workload in training moe inference finetune; do
  "$tessera" gen "$workload" -o "$work/$workload.trace.gz" >/dev/null
  traces+=("$work/$workload.trace.gz")
done
"$tessera" replay "${traces[@]}" --allocators tessera,pytorch --min-capacity -j 2 "${conf[@]}" \
  --json "$work/default.json" >/dev/null
for trace in "${traces[@]}"; do
  name=$(basename "$trace"); name=${name%.pickle.gz}; name=${name%.trace.gz}
  peak=$(python3 -c "import json; print(next(r['peak_allocated'] for r in json.load(open('$work/default.json'))['results'] if r['trace'] == '$name'))")
  capacity=$(python3 -c "import math; print(math.ceil($peak * 1.05 / 2097152) * 2097152)")
  "$tessera" replay "$trace" --allocators tessera,pytorch --capacity "$capacity" "${conf[@]}" \
    --json "$work/cap_$name.json" >/dev/null
done
# Where the pytorch model runs out of memory at 1.05 x, its time is that of the events it replayed: tessera
# replayed over the same events (the initial blocks, the events before the one that failed, and that one) at
# the same capacity.
for json in "$work"/cap_*.json; do
  name=$(basename "$json" .json); name=${name#cap_}
  # The index of the event that failed; -1 where placing the initial blocks failed (no event replayed).
  oom_event=$(python3 -c "import json; print(next((-1 if r['oom_event'] is None else r['oom_event'] for r in json.load(open('$json'))['results'] if r['allocator'] == 'pytorch' and r['oom']), ''))")
  [[ -n "$oom_event" ]] || continue
  trace=$(printf '%s\n' "${traces[@]}" | grep -F "/$name." | head -1)
  capacity=$(python3 -c "import json; print(json.load(open('$json'))['results'][0]['capacity'])")
  "$tessera" convert "$trace" "$work/$name.txt" >/dev/null
  python3 - "$work/$name.txt" "$oom_event" "$work/prefix_$name.txt" <<'PY'
import sys
lines, keep, out = open(sys.argv[1]).read().split("\n"), int(sys.argv[2]) + 1, []
events = 0
for line in lines:
    if line == "end" or line == "":
        continue
    if line.split(" ")[0] in ("a", "f", "i", "pause", "resume", "record_stream", "begin_pool", "end_pool", "release_pool"):
        if events == keep:
            break
        events += 1
    out.append(line)
open(sys.argv[3], "w").write("\n".join(out + ["end", ""]))
PY
  "$tessera" replay "$work/prefix_$name.txt" --allocators tessera --capacity "$capacity" "${conf[@]}" \
    --json "$work/prefix_$name.json" >/dev/null
done
python3 - "$work" "$reference" <<'PY'
import glob, json, sys
work, reference = sys.argv[1], sys.argv[2]
def rows(path):
    return {(r["trace"], r["allocator"]): r for r in json.load(open(path))["results"]}
default = rows(f"{work}/default.json")
capped = {}
for path in glob.glob(f"{work}/cap_*.json"):
    capped.update(rows(path))
ref = rows(reference) if reference else {}
ms = lambda r: r["driver_time_us"] / 1000
prefix = {}
for path in glob.glob(f"{work}/prefix_*.json"):
    name = path[len(f"{work}/prefix_"):-len(".json")]
    prefix[name] = json.load(open(path))["results"][0]
print(f"{'trace':<58} {'tessera':>8} {'pytorch':>8} | {'1.05x t':>8} {'1.05x pt':>8} {'t same ev':>9} | {'min_cap vs ref':>14}")
for trace in sorted({t for t, _ in default}):
    t, p = default[(trace, "tessera")], default[(trace, "pytorch")]
    ct, cp = capped[(trace, "tessera")], capped[(trace, "pytorch")]
    delta = ""
    if (trace, "tessera") in ref:
        delta = f"{(t['min_capacity'] - ref[(trace, 'tessera')]['min_capacity']) // 2097152:+d} granules"
    oom = lambda r: " oom" if r["oom"] else ""
    same = f"{ms(prefix[trace]):9.1f}" if trace in prefix else " " * 9
    print(f"{trace[:58]:<58} {ms(t):8.1f} {ms(p):8.1f} | {ms(ct):8.1f}{oom(ct)} {ms(cp):8.1f}{oom(cp)} {same} | {delta:>14}")
PY
