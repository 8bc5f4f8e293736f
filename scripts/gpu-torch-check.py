#!/usr/bin/env python3
"""PyTorch on a GPU with Tessera: the tiny GPT of tests/python/tiny_gpt.py, made larger, trained on CUDA three
ways, each in a fresh process — PyTorch's native caching allocator, native with expandable_segments:True, and
Tessera through CUDAPluggableAllocator (tessera.torch.enable) — asserting that the losses are identical bit for
bit and reporting peak reserved, peak allocated and step time of each. The native run also records its
allocation history with torch.cuda.memory._record_memory_history and dumps a snapshot (and the Tessera run its
own, through tessera.dump_snapshot), for `tessera replay` and pytorch.org/memory_viz.

    python3 scripts/gpu-torch-check.py --out gpu-out [--steps 20] [--library build-gpu/src/capi/libtessera_c.so]

Uses the machine's own PyTorch (the python3 that runs it). Without PyTorch or without a CUDA device it prints
SKIPPED and why, and exits 0. Exit 1 when a run fails or the losses differ. Writes under --out: torch-gpu.json,
torch-gpu.txt, native-snapshot.pickle, tessera-snapshot.pickle, one log per run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("native", "expandable", "tessera")
MODEL = dict(vocab=4096, width=512, layers=4, context=256, batch=16)


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(0)


# ---- one run, in its own process


def worker(mode, result_path, snapshot_path, steps):
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import torch

    tessera = None
    if mode == "tessera":  # before anything touches CUDA
        import tessera
        import tessera.torch

        tessera.torch.enable("cuda")
        tessera.record_memory_history(max_entries=200_000)
    elif mode == "native":
        try:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
        except TypeError:  # PyTorch 2.0: the older signature
            torch.cuda.memory._record_memory_history(True)
    import tiny_gpt

    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    step_times = []
    last = [time.perf_counter()]

    def on_step(_):
        torch.cuda.synchronize()
        now = time.perf_counter()
        step_times.append(now - last[0])
        last[0] = now

    started = time.perf_counter()
    losses = tiny_gpt.train(device="cuda", steps=steps, seed=0, on_step=on_step, **MODEL)
    torch.cuda.synchronize()
    total = time.perf_counter() - started
    result = {"mode": mode, "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "losses": [loss.hex() for loss in losses], "seconds": total,
              "median_step_ms": 1000 * statistics.median(step_times[2:] or step_times)}
    if tessera is not None:
        stats = tessera.memory_stats(0)
        result["peak_allocated"] = stats["allocated_bytes.all.peak"]
        result["peak_reserved"] = stats["reserved_bytes.all.peak"]
        result["tessera_stats"] = stats
        tessera.dump_snapshot(snapshot_path, device=0)
    else:
        result["peak_allocated"] = torch.cuda.max_memory_allocated(0)
        result["peak_reserved"] = torch.cuda.max_memory_reserved(0)
        if mode == "native":
            torch.cuda.memory._dump_snapshot(snapshot_path)
    Path(result_path).write_text(json.dumps(result, indent=1))


# ---- the three runs and the comparison


def run_mode(mode, out, steps, library):
    environment = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONDONTWRITEBYTECODE="1")
    environment.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if mode == "expandable":
        environment["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if library:
        environment["TESSERA_LIBRARY"] = str(library)
    environment.pop("TESSERA_DRIVER", None)
    result = out / f"torch-{mode}.json"
    snapshot = out / f"{mode}-snapshot.pickle"
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--result", str(result),
               "--snapshot", str(snapshot), "--steps", str(steps)]
    with open(out / f"torch-{mode}.log", "w") as log:
        completed = subprocess.run(command, env=environment, stdout=log, stderr=subprocess.STDOUT, timeout=240)
    if completed.returncode != 0:
        tail = (out / f"torch-{mode}.log").read_text()[-3000:]
        return {"mode": mode, "error": f"exit {completed.returncode}", "log_tail": tail}
    return json.loads(result.read_text())


def mib(value):
    return f"{value / 2**20:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpu-out")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--library", help="libtessera_c.so (default: TESSERA_LIBRARY, else found by the package)")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--snapshot", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        worker(arguments.worker, arguments.result, arguments.snapshot, arguments.steps)
        return 0

    try:
        import torch
    except ImportError as error:
        skip(f"PyTorch is not importable by {sys.executable} ({error})")
    if not torch.cuda.is_available():
        skip(f"PyTorch {torch.__version__} sees no CUDA device")
    modes = list(MODES)
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        print(f"PyTorch {torch.__version__} has no CUDAPluggableAllocator (PyTorch >= 2.0): the tessera run is "
              "skipped", flush=True)
        modes.remove("tessera")
    out = Path(arguments.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    results = []
    for mode in modes:
        started = time.monotonic()
        result = run_mode(mode, out, arguments.steps, arguments.library)
        print(f"{mode}: {'failed, ' + result['error'] if 'error' in result else 'done'} "
              f"in {time.monotonic() - started:.0f}s", flush=True)
        results.append(result)

    failures = [r for r in results if "error" in r]
    finished = [r for r in results if "error" not in r]
    reference = finished[0]["losses"] if finished else None
    equal = all(r["losses"] == reference for r in finished)
    lines = [f"PyTorch {finished[0]['torch']} on {finished[0]['device']}" if finished else "no run finished",
             f"tiny GPT {MODEL}, {arguments.steps} steps, fixed seed, deterministic algorithms", "",
             f"{'allocator':<12} {'peak allocated MiB':>19} {'peak reserved MiB':>18} {'step ms':>9}  losses"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['mode']:<12} failed: {r['error']} (torch-{r['mode']}.log)")
            continue
        same = "same" if r["losses"] == reference else "DIFFERENT"
        lines.append(f"{r['mode']:<12} {mib(r['peak_allocated']):>19} {mib(r['peak_reserved']):>18} "
                     f"{r['median_step_ms']:>9.2f}  {same} (last {float.fromhex(r['losses'][-1]):.6f})")
    lines.append("")
    lines.append("losses identical bit for bit" if equal and finished else "LOSSES DIFFER between allocators")
    report = "\n".join(lines)
    print(report, flush=True)
    (out / "torch-gpu.txt").write_text(report + "\n")
    (out / "torch-gpu.json").write_text(json.dumps({"model": MODEL, "steps": arguments.steps, "runs": results},
                                                   indent=1))
    for r in failures:
        print(f"== {r['mode']} log tail\n{r['log_tail']}", flush=True)
    return 0 if not failures and equal else 1


if __name__ == "__main__":
    sys.exit(main())
