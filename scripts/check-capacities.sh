#!/usr/bin/env bash
# Does every capacity above a trace's min_capacity fit too? Bisection (`replay --min-capacity`) assumes so;
# a heuristic allocator near its limit need not be monotone (docs/benchmarks.md). For each trace, replays
# Tessera at each of the N granules above its min_capacity and lists those that run out of memory.
#   bash scripts/check-capacities.sh [N] [TRACE...]   (default: 32, the shared PyTorch traces; needs a built
#                                                     build/tools/tessera)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="$root/build/tools/tessera"
above="${1:-32}"
shift || true
traces=("$@")
[[ ${#traces[@]} -gt 0 ]] || traces=("$root"/../shared/traces/pytorch/*.pickle.gz)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$tessera" replay "${traces[@]}" --allocators tessera --min-capacity --json "$work/min.json" >/dev/null
python3 - "$tessera" "$above" "$work/min.json" "${traces[@]}" <<'PY'
import json, subprocess, sys
tessera, above, min_json, traces = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
granule = 2 * 1024 * 1024
results = json.load(open(min_json))["results"]
broken = 0
for trace, result in zip(traces, results):
    if result["trace"] not in trace:
        sys.exit(f"check-capacities: results out of order: {result['trace']} for {trace}")
    start = result["min_capacity"] // granule
    failing = []
    for granules in range(start + 1, start + above + 1):
        run = subprocess.run([tessera, "replay", trace, "--allocators", "tessera", "--capacity",
                              str(granules * granule), "--json", "-"], capture_output=True, text=True, check=True)
        if json.loads(run.stdout)["results"][0]["oom"]:
            failing.append(granules)
    broken += bool(failing)
    print(f'{result["trace"]:<60} min_capacity {start:>6} granules  '
          + (f"out of memory at {failing}" if failing else f"the {above} above fit"))
print(f"{broken} of {len(results)} traces fail at a capacity above their min_capacity")
sys.exit(1 if broken else 0)
PY
