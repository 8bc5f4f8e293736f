#!/usr/bin/env python3
"""CUDA graphs and MemPools on Tessera, on a GPU. In one process with Tessera enabled (CUDAPluggableAllocator with
the graph pool hooks):

  - a small MLP's forward pass is captured with torch.cuda.graph under tessera.region("graph") and replayed on
    new inputs: the outputs equal the eager outputs bit for bit (same kernels), before and after other eager
    tensors are allocated, written and freed (the graph's memory is its pool's, not theirs);
  - the "graph" tag is paused: the device's free memory grows by at least 90% of what the tag held; eager
    tensors use that memory; on resume the graph replays again with the same outputs;
  - the graph is deleted: its pool is released (Tessera's reserved bytes for the tag fall to what live
    tensors hold).

Then, in a second process with Tessera not enabled (PyTorch's own allocator), where this PyTorch has
torch.cuda.MemPool (2.5+): tensors made under torch.cuda.use_mem_pool(tessera.torch.mem_pool("kv")) are
Tessera's, pause and resume with the tag keep their bytes (backed up), and tensors outside stay PyTorch's.

    python3 scripts/gpu-graph-check.py --out gpu-out [--library build-gpu/src/capi/libtessera_c.so]

Uses the machine's own PyTorch. Without PyTorch or a CUDA device it prints SKIPPED and why, and exits 0; where
this PyTorch lacks the pool hooks (before 2.3) the graph part prints SKIPPED and why. Exit 1 when a check
fails. Writes gpu-graph.json under --out. Not run yet: written for the first GPU machine this project is lent
(docs/gpu.md).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check(condition, what, failures):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


def graph_part(torch, tessera, failures, result):
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
    static_input = torch.randn(64, 512, device=device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):  # warm-up on the side stream, as torch.cuda.graph's documentation asks
            model(static_input)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with tessera.region("graph"), torch.no_grad(), torch.cuda.graph(graph):
        static_output = model(static_input)

    def replay_equals_eager(label):
        fresh = torch.randn(64, 512, device=device)
        static_input.copy_(fresh)
        graph.replay()
        with torch.no_grad():
            eager = model(fresh)
        torch.cuda.synchronize()
        check(torch.equal(static_output, eager), f"{label}: the graph's replay equals the eager pass", failures)

    replay_equals_eager("after capture")
    others = [torch.full((1 << 20,), float(index), device=device) for index in range(32)]  # 4 MiB each
    del others
    replay_equals_eager("after eager tensors came and went")

    held = tessera.memory_stats()["tessera.tag.graph.reserved_bytes"]
    free_before, _ = torch.cuda.mem_get_info()
    tessera.pause("graph")
    free_paused, _ = torch.cuda.mem_get_info()
    result["graph_tag_bytes"] = held
    result["freed_on_pause"] = free_paused - free_before
    check(free_paused - free_before >= 0.9 * held, f"pause of 'graph' freed {free_paused - free_before} of {held} "
          "bytes on the device", failures)
    borrowed = torch.full((held // 4,), 3.0, device=device) if held >= 4 else None
    del borrowed
    tessera.resume("graph")
    replay_equals_eager("after pause and resume")
    del graph
    torch.cuda.synchronize()


def mem_pool_part(library):
    """Runs in a process of its own: Tessera not enabled."""
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    os.environ["TESSERA_LIBRARY"] = library or os.environ.get("TESSERA_LIBRARY", "")
    import tessera
    import tessera.torch

    failures = []
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        print(f"SKIPPED: PyTorch {torch.__version__} has no torch.cuda.MemPool")
        return {"skipped": "no torch.cuda.MemPool"}, failures
    pool = tessera.torch.mem_pool("kv", enable_cpu_backup=True)
    with torch.cuda.use_mem_pool(pool):
        kv = torch.arange(1 << 22, dtype=torch.float32, device="cuda")  # 16 MiB
    outside = torch.ones(1 << 20, device="cuda")
    stats = tessera.memory_stats("cuda:0")
    check(stats.get("tessera.tag.kv.allocated_bytes", 0) >= kv.numel() * 4, "the MemPool's tensor is Tessera's",
          failures)
    copy = kv.cpu()
    tessera.pause("kv")
    tessera.resume("kv")
    check(torch.equal(kv.cpu(), copy), "the MemPool's tensor keeps its bytes through pause and resume", failures)
    check(bool((outside == 1).all()), "the tensor outside the MemPool is untouched", failures)
    return {"kv_bytes": kv.numel() * 4}, failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu-out")
    parser.add_argument("--library")
    parser.add_argument("--mem-pool-only", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.library:
        os.environ["TESSERA_LIBRARY"] = arguments.library
    try:
        import torch
    except ImportError as error:
        print(f"SKIPPED: PyTorch is not importable ({error})")
        return 0
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 0
    if arguments.mem_pool_only:
        result, failures = mem_pool_part(arguments.library)
        print(json.dumps({"mem_pool": result, "failures": failures}))
        return 1 if failures else 0

    sys.path.insert(0, str(ROOT / "python"))
    import tessera
    import tessera.torch

    failures = []
    result = {"torch": torch.__version__}
    tessera.torch.enable("cuda")
    if not hasattr(tessera.torch._allocator_handle(tessera.torch._enabled["cuda"]), "set_begin_allocate_to_pool"):
        print(f"SKIPPED (graph part): PyTorch {torch.__version__} has no graph pool hooks (2.3 has them)")
        result["graph"] = "skipped"
    else:
        graph_part(torch, tessera, failures, result)
    child = subprocess.run([sys.executable, __file__, "--mem-pool-only"] +
                           (["--library", arguments.library] if arguments.library else []),
                           capture_output=True, text=True, timeout=120)
    print(child.stdout, end="")
    result["mem_pool_exit"] = child.returncode
    if child.returncode != 0:
        failures.append("the MemPool part failed: " + child.stderr[-2000:])
    result["failures"] = failures
    out = Path(arguments.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-graph.json").write_text(json.dumps(result, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
