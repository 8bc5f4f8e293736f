"""Records kineto_cpu.json: a Chrome trace of a tiny model's three training steps under torch.profiler with
profile_memory=True, on the CPU, where every allocation and free of the CPU allocator is recorded.

Run with Debian's torch (python3-torch, 1.13):

    /usr/bin/python3 tests/trace/data/record_kineto.py tests/trace/data/kineto_cpu.json

Debian builds torch without Kineto, and then export_chrome_trace writes the operators but not the
"[memory]" events that a Kineto build writes. The profiler records them all the same (its event tree holds
each allocation's pointer, size, device and the allocator's totals), so this script writes them as Kineto
does: instant events named "[memory]" whose args hold Addr, Bytes (negative for a free), Device Type
(c10's DeviceType: 0 CPU, 1 CUDA), Device Id (-1 for the CPU), Total Allocated and Total Reserved, with ts
in microseconds since the trace began, beside the operators, in an object holding traceEvents.
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def memory_events(result):
    start_us = result.trace_start_us()
    events = []
    stack = list(result.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        fields = node.extra_fields
        if type(fields).__name__ != "_ExtraFields_Allocation":
            continue
        device = fields.device
        events.append({
            "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": 0, "tid": 0,
            "ts": node.start_time_ns / 1000 - start_us,
            "args": {
                "Total Reserved": fields.total_reserved, "Total Allocated": fields.total_allocated,
                "Bytes": fields.alloc_size, "Addr": fields.ptr,
                "Device Id": -1 if device.index is None else device.index,
                "Device Type": 0 if device.type == "cpu" else 1,
            },
        })
    events.sort(key=lambda event: event["ts"])
    return events


def main(path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = torch.randn(32, 64)  # allocated before profiling: live throughout
    target = torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch), target)
            loss.backward()
            optimizer.step()
    prof.export_chrome_trace(path)  # the operators
    with open(path) as f:
        operators = json.load(f)
    trace = {"schemaVersion": 1, "traceEvents": operators + memory_events(prof.profiler.kineto_results)}
    with open(path, "w") as f:
        json.dump(trace, f)


if __name__ == "__main__":
    main(sys.argv[1])
