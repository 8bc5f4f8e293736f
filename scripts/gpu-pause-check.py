#!/usr/bin/env python3
"""Pause and resume by tag on a GPU: PyTorch on Tessera (CUDAPluggableAllocator) builds a small model's weights
under a backed-up region and a KV-cache-like tensor under another, pauses both, and checks that

  - the memory the device has free (cudaMemGetInfo, torch.cuda.mem_get_info) grows by at least 90% of what the
    two tags held, and Tessera's reserved bytes fall by as much;
  - other tensors can be allocated and written in that memory;
  - after resume every weight sits at the same address and equals, bit for bit, a copy taken on the host
    before the pause, and a training step goes on.

Then it times what the host bar of docs/benchmarks.md measures on the host driver, on the device: a tag holding
1 GiB in blocks of 64 MiB paused with backup and resumed (the backup buffers kept from a first, untimed cycle),
against copying the same bytes to pinned host buffers and back with `copy_`, in the same run (medians of three).
The figures and their ratio go into gpu-pause.json (`timing`); the ratio is reported, not a check.

    python3 scripts/gpu-pause-check.py --out gpu-out [--library build-gpu/src/capi/libtessera_c.so]

Uses the machine's own PyTorch. Without PyTorch or a CUDA device it prints SKIPPED and why, and exits 0. Exit 1
when a check fails. Writes gpu-pause.json under --out. Not run yet: written for the first GPU machine this
project is lent (docs/gpu.md).
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_pause_against_copy(torch, tessera, device, synchronize, pin=True, blocks=16, block_bytes=64 << 20):
    """Medians (ms) of pause + resume with backup of a tag holding blocks x block_bytes, and of copying the same
    bytes to ready host buffers and back; and whether every block still holds its value afterwards."""
    with tessera.region("timed", enable_cpu_backup=True):
        tensors = [torch.full((block_bytes,), index % 251, dtype=torch.uint8, device=device) for index in range(blocks)]
    host = [torch.empty(block_bytes, dtype=torch.uint8) for _ in range(blocks)]
    if pin:
        host = [buffer.pin_memory() for buffer in host]

    def timed(step):
        times = []
        for _ in range(3):
            synchronize()
            start = time.perf_counter()
            step()
            synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    def cycle():
        tessera.pause("timed")
        tessera.resume("timed")

    def copies():
        for buffer, tensor in zip(host, tensors):
            buffer.copy_(tensor)
        for buffer, tensor in zip(host, tensors):
            tensor.copy_(buffer)

    cycle()  # allocates the backup buffers, which the backup cache keeps
    copies()  # the same for the copies: warm buffers on both sides
    pause_resume_ms = timed(cycle)
    copy_ms = timed(copies)
    intact = all(bool((tensor == index % 251).all()) for index, tensor in enumerate(tensors))
    del tensors
    return {
        "bytes": blocks * block_bytes,
        "pause_resume_ms": pause_resume_ms,
        "copy_there_and_back_ms": copy_ms,
        "ratio": pause_resume_ms / copy_ms,
        "values_intact": intact,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu-out")
    parser.add_argument("--library")
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
    sys.path.insert(0, str(ROOT / "python"))
    import tessera
    import tessera.torch

    tessera.torch.enable("cuda")
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    with tessera.region("weights", enable_cpu_backup=True):
        model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).to(device)  # 128 MiB
    with tessera.region("kv_cache"):
        kv_cache = torch.empty(256 << 20, dtype=torch.uint8, device=device)  # 256 MiB
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    on_host = {name: parameter.detach().cpu() for name, parameter in model.named_parameters()}
    addresses = {name: parameter.data_ptr() for name, parameter in model.named_parameters()}
    torch.cuda.synchronize()
    stats = tessera.memory_stats(0)
    held = stats["tessera.tag.weights.reserved_bytes"] + stats["tessera.tag.kv_cache.reserved_bytes"]
    free_before, _ = torch.cuda.mem_get_info()

    tessera.pause()
    free_paused, _ = torch.cuda.mem_get_info()
    paused = tessera.memory_stats(0)
    others = torch.ones(192 << 20, dtype=torch.uint8, device=device)  # in the memory given back
    others_ok = bool((others == 1).all())
    del others
    tessera.resume()

    same_addresses = all(parameter.data_ptr() == addresses[name] for name, parameter in model.named_parameters())
    equal = all(torch.equal(parameter.detach().cpu(), on_host[name]) for name, parameter in model.named_parameters())
    kv_cache.fill_(1)
    loss = model(torch.randn(64, 2048, device=device)).square().mean()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    result = {
        "held_by_tags": held,
        "device_free_before": free_before,
        "device_free_paused": free_paused,
        "freed_on_device": free_paused - free_before,
        "reserved_before": stats["reserved_bytes.all.current"],
        "reserved_paused": paused["reserved_bytes.all.current"],
        "others_written": others_ok,
        "same_addresses": same_addresses,
        "weights_equal": equal,
        "loss_after_resume": float(loss.item()),
    }
    checks = {
        "device memory returned": result["freed_on_device"] >= 0.9 * held,
        "reserved fell": result["reserved_before"] - result["reserved_paused"] >= held,
        "others written": others_ok,
        "same addresses": same_addresses,
        "weights equal bit for bit": equal,
        "training goes on": result["loss_after_resume"] == result["loss_after_resume"],
    }
    result["timing"] = time_pause_against_copy(torch, tessera, device, torch.cuda.synchronize)
    checks["timed blocks intact"] = result["timing"]["values_intact"]
    result["checks"] = checks
    Path(arguments.out).mkdir(parents=True, exist_ok=True)
    (Path(arguments.out) / "gpu-pause.json").write_text(json.dumps(result, indent=1))
    for name, passed in checks.items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    print(json.dumps(result, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
