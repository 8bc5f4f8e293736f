#!/usr/bin/env bash
# avg_frag on generated training workloads, from activation-heavy to the static-memory-heavy regime of
# large-model training (full recomputation, fused attention), against each trace's floor (ideal_cache):
# unlimited capacity, sim driver (docs/benchmarks.md, "avg_frag and its floor").
#   bash scripts/bench-avg-frag.sh     (needs a built build/tools/tessera)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="$root/build/tools/tessera"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
configs=(
  "preset=gpt3-1.3b"
  "preset=gpt3-1.3b recompute=full flash_attention=true"
  "preset=llama2-7b-tp2"
  "preset=llama2-7b-tp2 recompute=selective flash_attention=true"
  "preset=llama2-7b-tp2 recompute=full"
  "preset=llama2-7b-tp2 recompute=full flash_attention=true"
  "preset=llama2-13b-tp4 recompute=full flash_attention=true"
)
printf '| training workload | tessera | pytorch | expandable | gmlake | floor (ideal_cache) |\n|---|---|---|---|---|---|\n'
for config in "${configs[@]}"; do
  sets=()
  for setting in $config; do sets+=(--set "$setting"); done
  "$tessera" gen training "${sets[@]}" -o "$work/t.trace.gz" >/dev/null
  "$tessera" replay "$work/t.trace.gz" --allocators tessera,pytorch,expandable,gmlake,ideal_cache -j 2 \
    --json "$work/r.json" >/dev/null
  python3 - "$work/r.json" "$config" <<'PY'
import json, sys
frag = {r["allocator"]: r["avg_frag"] for r in json.load(open(sys.argv[1]))["results"]}
cells = " | ".join(f'{100 * frag[a]:.2f}%' for a in ("tessera", "pytorch", "expandable", "gmlake", "ideal_cache"))
print(f"| {sys.argv[2]} | {cells} |")
PY
done
