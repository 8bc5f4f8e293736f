#!/usr/bin/env bash
# Generated workloads replayed with every allocator at a capacity of 1.05 x and 1.1 x their peak live bytes
# (docs/benchmarks.md): modelled driver time, and driver calls per iteration after the first two.
#   bash scripts/bench-workloads.sh [TESSERA_CONF]     (needs a built build/tools/tessera)
#   LATENCY_MODEL=per_byte bash scripts/bench-workloads.sh   (the sim driver's other latency model, docs/drivers.md)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="$root/build/tools/tessera"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
conf=(); [[ $# -gt 0 ]] && conf=(--conf "$1")
model=(); [[ -n "${LATENCY_MODEL:-}" ]] && model=(--latency-model "$LATENCY_MODEL")
for workload in training moe inference finetune; do
  "$tessera" gen "$workload" -o "$work/$workload.trace.gz" >/dev/null
  peak=$("$tessera" info "$work/$workload.trace.gz" | awk '/^peak live/ {print $3}')
  for factor in 1.05 1.1; do
    capacity=$(python3 -c "import math; print(math.ceil($peak * $factor / 2097152) * 2097152)")
    echo "== $workload at $factor x peak ($capacity bytes) ${conf[*]} ${model[*]}"
    "$tessera" replay "$work/$workload.trace.gz" --allocators tessera,pytorch,expandable,gmlake \
      --capacity "$capacity" "${conf[@]}" "${model[@]}" --json "$work/r.json" >/dev/null
    python3 - "$work/r.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    per = r["calls_per_iteration"]
    steady = max(per[2:]) if len(per) > 2 else None
    print(f'  {r["allocator"]:<11} oom {str(r["oom"]):<5} driver {r["driver_time_us"]/1000:9.1f} ms'
          f'  calls {sum(r["driver_calls"].values()):7d}  max calls/iteration after the first two: {steady}')
PY
  done
done
