#!/usr/bin/env python3
"""Records a Kineto trace of a small CUDA training job for the Kineto bar (scripts/kineto-replay-check.py):
a few steps of an MLP with Adam under torch.profiler with profile_memory=True and activities CPU and CUDA,
exported with export_chrome_trace. PyTorch's caching allocator reports every allocation and free with its
Total Allocated and Total Reserved, which Kineto writes as "[memory]" events.

    python3 scripts/gpu-kineto-record.py --out gpu-out [--steps 4]     writes gpu-out/kineto-gpu.json

Uses the machine's own PyTorch. Without PyTorch, without a CUDA device, or with a PyTorch built without
Kineto (no "[memory]" events in the export), it prints SKIPPED and why, writes nothing, and exits 0.
"""

import argparse
import json
import sys
import time
from pathlib import Path


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as error:
        skip(f"no PyTorch ({error})")
    if not torch.cuda.is_available():
        skip(f"PyTorch {torch.__version__} sees no CUDA device")

    started = time.time()
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    # Big enough that the caching allocator holds segments of several sizes, small enough for a second.
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                                torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        for step in range(args.steps):
            batch = torch.randn(64 * (1 + step % 3), 2048, device=device)  # varying sizes: some frees, some reuse
            loss = model(batch).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "kineto-gpu.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    memory = [e for e in events if isinstance(e, dict) and e.get("name") == "[memory]"]
    cuda = [e for e in memory if e.get("args", {}).get("Device Type") == 1]
    if not cuda:
        path.unlink()
        skip(f"PyTorch {torch.__version__}'s export has {len(memory)} [memory] events, none of CUDA "
             "(a build without Kineto?)")
    print(f"recorded {path}: {len(events)} events, {len(cuda)} CUDA [memory] events, PyTorch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}, max_memory_reserved {torch.cuda.max_memory_reserved()}, "
          f"{time.time() - started:.1f}s")


if __name__ == "__main__":
    main()
