#!/usr/bin/env bash
# Warm-up driver calls (docs/benchmarks.md, "Warm-up driver calls"): the shared traces and the four generated
# workloads replayed with tessera and the pytorch model at unlimited capacity and at 1.05 x peak live;
# modelled driver time per trace (sim driver, A100 latencies), and tessera's min_capacity against a reference
# replay's (a `tessera replay --json` file, e.g. ../shared/reference/replay-5d9bde4.json) where one is given.
#   bash scripts/bench-warmup-calls.sh [REFERENCE_JSON [TESSERA_CONF]]   (needs a built build/tools/tessera)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="$root/build/tools/tessera"
reference="${1:-}"
conf=(); [[ $# -gt 1 ]] && conf=(--conf "$2")
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
print(f"{'trace':<58} {'tessera':>8} {'pytorch':>8} | {'1.05x t':>8} {'1.05x pt':>8} | {'min_cap vs ref':>14}")
for trace in sorted({t for t, _ in default}):
    t, p = default[(trace, "tessera")], default[(trace, "pytorch")]
    ct, cp = capped[(trace, "tessera")], capped[(trace, "pytorch")]
    delta = ""
    if (trace, "tessera") in ref:
        delta = f"{(t['min_capacity'] - ref[(trace, 'tessera')]['min_capacity']) // 2097152:+d} granules"
    oom = lambda r: " oom" if r["oom"] else ""
    print(f"{trace[:58]:<58} {ms(t):8.1f} {ms(p):8.1f} | {ms(ct):8.1f}{oom(ct)} {ms(cp):8.1f}{oom(cp)} | {delta:>14}")
PY
