#!/usr/bin/env python3
"""torch_npu on Tessera, on an Ascend NPU: tessera.torch.enable("npu") before the first NPU tensor, tensors
allocated and freed, and torch_npu's own statistics (fed by Tessera's hooks, docs/pytorch.md) checked against
tessera.memory_stats() — memory_allocated(), max_memory_reserved(), memory_stats() key by key, the peak reset,
empty_cache() — and a tensor's bytes read back.

    python3 scripts/npu-torch-check.py --out npu-out [--library build-npu/src/capi/libtessera_c.so]

Uses the machine's own torch and torch_npu (the python3 that runs it). Exit 0 when every check passed; 1 when
one failed; 3, saying so, when torch or torch_npu is missing. Writes under --out: torch-npu.txt (the checks,
torch_npu.npu.memory_summary() and Tessera's) and torch-npu.json.
"""

import argparse
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
# torch_npu's memory_stats() keys that Tessera fills (the rest of DeviceStats is 0: docs/pytorch.md).
POOLS = ("all", "small_pool", "large_pool")
COMPARED = [f"{name}.{pool}.{field}" for name in ("allocation", "allocated_bytes", "requested_bytes", "active",
                                                  "active_bytes", "segment", "reserved_bytes")
            for pool in POOLS for field in ("current", "peak", "allocated", "freed")]
COMPARED += [f"{name}.{pool}.current" for name in ("inactive_split", "inactive_split_bytes") for pool in POOLS]
COMPARED += ["num_alloc_retries", "num_ooms"]
# Tessera's key for each torch_npu key: the same names.
TESSERA_KEY = {key: key for key in COMPARED}


class Checks:
    def __init__(self):
        self.lines, self.failed = [], 0

    def check(self, what, ok, detail=""):
        self.lines.append(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""))
        print(self.lines[-1], flush=True)
        self.failed += 0 if ok else 1


def compare_stats(checks, when, torch_npu, tessera):
    ours = tessera.memory_stats(0)
    theirs = torch_npu.npu.memory_stats(0)
    differing = [f"{key}: torch_npu {theirs.get(key)!r}, tessera {ours.get(TESSERA_KEY[key])!r}"
                 for key in COMPARED if theirs.get(key) != ours.get(TESSERA_KEY[key])]
    checks.check(f"{when}: torch_npu.npu.memory_stats() equals tessera.memory_stats() on {len(COMPARED)} keys",
                 not differing, "; ".join(differing[:6]))
    allocated = torch_npu.npu.memory_allocated(0)
    checks.check(f"{when}: memory_allocated()", allocated == ours["allocated_bytes.all.current"],
                 f"{allocated} vs {ours['allocated_bytes.all.current']}")
    checks.check(f"{when}: max_memory_reserved()",
                 torch_npu.npu.max_memory_reserved(0) == ours["reserved_bytes.all.peak"],
                 f"{torch_npu.npu.max_memory_reserved(0)} vs {ours['reserved_bytes.all.peak']}")
    return ours, theirs


def run(out):
    try:
        import torch
        import torch_npu
    except ImportError as error:
        print(f"npu-torch-check: torch_npu is missing: {error}. Install the torch_npu that matches this CANN "
              "and torch (Ascend Extension for PyTorch; torch_npu 2.7.1 or later has the statistics hooks).",
              file=sys.stderr, flush=True)
        return 3
    sys.path.insert(0, str(ROOT / "python"))
    import tessera
    import tessera.torch

    checks = Checks()
    report = {"torch": torch.__version__, "torch_npu": getattr(torch_npu, "__version__", "?")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tessera.torch.enable("npu")  # before the first NPU tensor
    notices = [str(w.message) for w in caught]
    report["notices"] = notices
    hooks = next((n for n in notices if "statistics hooks" in n), "")
    checks.check("enable('npu') installed both statistics hooks",
                 "installed: set_get_device_stats_fn, set_reset_peak_status_fn" in hooks, hooks)
    checks.check("driver is ascend", tessera.driver() in ("", "ascend"), tessera.driver())

    device = torch.device("npu:0")
    tensors = [torch.full((size // 4,), float(i + 1), dtype=torch.float32, device=device)
               for i, size in enumerate([4096, 300 * 1024, 3 * MiB, 20 * MiB, 64 * MiB])]
    torch_npu.npu.synchronize()
    checks.check("a tensor's values read back", float(tensors[3].sum().item()) == 4.0 * (20 * MiB // 4))
    checks.check("Tessera's driver after the first tensor", tessera.driver() == "ascend", tessera.driver())
    ours, theirs = compare_stats(checks, "five tensors", torch_npu, tessera)
    report["after_allocation"] = {"tessera": ours, "torch_npu": dict(theirs)}
    checks.check("five live blocks", ours["allocation.all.current"] >= 5, str(ours["allocation.all.current"]))

    del tensors[3:]
    torch_npu.npu.synchronize()
    compare_stats(checks, "two freed", torch_npu, tessera)
    torch_npu.npu.reset_peak_memory_stats(0)
    ours, theirs = compare_stats(checks, "after reset_peak_memory_stats", torch_npu, tessera)
    checks.check("reset peak: allocated peak is the current value",
                 theirs["allocated_bytes.all.peak"] == theirs["allocated_bytes.all.current"])
    summary = torch_npu.npu.memory_summary(0)
    checks.check("memory_summary() shows Tessera's allocated bytes", "Allocated memory" in summary)

    tensors.clear()
    torch_npu.npu.synchronize()
    torch_npu.npu.empty_cache()
    ours, theirs = compare_stats(checks, "after empty_cache", torch_npu, tessera)
    checks.check("empty_cache gave every page back", ours["reserved_bytes.all.current"] == 0,
                 str(ours["reserved_bytes.all.current"]))

    report["checks"], report["failed"] = checks.lines, checks.failed
    (out / "torch-npu.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "torch-npu.txt").write_text("\n".join(checks.lines) + "\n\n== torch_npu.npu.memory_summary()\n" + summary
                                       + "\n== tessera.memory_summary()\n" + tessera.memory_summary(0))
    print(f"npu-torch-check: {len(checks.lines) - checks.failed} checks passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="npu-out")
    parser.add_argument("--library", help="libtessera_c.so (default: TESSERA_LIBRARY, else found by the package)")
    args = parser.parse_args()
    if args.library:
        os.environ["TESSERA_LIBRARY"] = str(Path(args.library).resolve())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return run(out)
    except Exception:  # a failure anywhere is a failed check, with its trace in the log
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
