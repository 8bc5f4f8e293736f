#!/usr/bin/env python3
"""The Kineto bar: `tessera replay` of a Kineto trace (torch.profiler with profile_memory=True) reproduces the
trace's own peak of Total Allocated within 1%, and shows its Total Reserved as the real allocator's line in the
text, JSON and HTML reports.

    python3 scripts/kineto-replay-check.py TRACE --device cuda:0 --tessera build/tools/tessera --out DIR
                                           [--require-real-line]

Finds the peaks in the trace itself (its "[memory]" events of the device), apart from Tessera's reader, runs
`tessera replay TRACE --format kineto --profile-device DEVICE --allocators tessera` with --json and --html under
DIR, and checks:
  - the tessera replay's peak_allocated is within 1% of the trace's most Total Allocated;
  - where the trace's Total Reserved is above zero somewhere, a "recorded" result whose peak_reserved is the
    trace's most Total Reserved and whose peak_allocated is its most Total Allocated, a "recorded" row in the
    table, and the line "reserved: recorded (real allocator)" in the HTML chart; where it is zero throughout
    (a CPU profile: the CPU allocator caches nothing), none of them, and with --require-real-line a failure.
Prints one line per check; exit 1 when one fails, 2 when the command cannot run.
"""

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

# c10's DeviceType values, as Tessera's Kineto reader names devices.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 12: "xpu", 13: "mps", 20: "npu"}


def device_name(device_type, device_id):
    kind = DEVICE_TYPES.get(device_type, f"device_type_{device_type}")
    return kind if kind == "cpu" else f"{kind}:{device_id}"


def trace_peaks(path, device):
    opener = gzip.open if Path(path).read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        document = json.load(f)
    events = document["traceEvents"] if isinstance(document, dict) else document
    allocated = reserved = count = 0
    for event in events:
        if not isinstance(event, dict) or event.get("name") != "[memory]":
            continue
        args = event.get("args", {})
        if device_name(args.get("Device Type", 0), args.get("Device Id", -1)) != device:
            continue
        count += 1
        allocated = max(allocated, args.get("Total Allocated", 0))
        reserved = max(reserved, args.get("Total Reserved", 0))
    return count, allocated, reserved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--device", required=True, help="cpu, cuda:0, ...")
    parser.add_argument("--tessera", required=True, help="the tessera command")
    parser.add_argument("--out", required=True, help="folder for the reports")
    parser.add_argument("--require-real-line", action="store_true", help="fail when the trace has no Total Reserved")
    args = parser.parse_args()

    events, peak_allocated, peak_reserved = trace_peaks(args.trace, args.device)
    print(f"trace: {args.trace}: {events} [memory] events of {args.device}, most Total Allocated {peak_allocated}, "
          f"most Total Reserved {peak_reserved}")
    if events == 0:
        print(f"FAIL: no [memory] events of {args.device}: was the profile recorded with profile_memory=True?")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "kineto-replay.json", out / "kineto-replay.html"
    command = [args.tessera, "replay", args.trace, "--format", "kineto", "--profile-device", args.device,
               "--allocators", "tessera", "--json", str(json_path), "--html", str(html_path)]
    print("running:", " ".join(command), flush=True)
    run = subprocess.run(command, capture_output=True, text=True)
    print(run.stdout, end="")
    print(run.stderr, end="", file=sys.stderr)
    if run.returncode != 0:
        print(f"FAIL: tessera replay exited {run.returncode}")
        return 2
    results = json.loads(json_path.read_text())["results"]
    html = html_path.read_text()
    failures = 0

    def check(ok, what):
        nonlocal failures
        print(("ok:   " if ok else "FAIL: ") + what)
        failures += 0 if ok else 1

    replayed = [r for r in results if r["allocator"] == "tessera"]
    check(len(replayed) == 1 and replayed[0]["failure"] is None, "one tessera replay, and it did not fail")
    if replayed:
        live = replayed[0]["peak_allocated"]
        off = abs(live - peak_allocated) / peak_allocated if peak_allocated else float(live != 0)
        check(off <= 0.01, f"replay's live peak {live} vs the trace's most Total Allocated {peak_allocated}: "
                           f"{off * 100:.3f}% apart (at most 1%)")
    recorded = [r for r in results if r["allocator"] == "recorded"]
    table_row = any(line.startswith("  recorded ") for line in run.stdout.splitlines())
    chart_line = "<title>reserved: recorded (real allocator)</title>" in html
    if peak_reserved > 0:
        check(len(recorded) == 1, "the JSON report has the real allocator's line (\"recorded\")")
        if recorded:
            check(recorded[0]["peak_reserved"] == peak_reserved,
                  f"its peak_reserved {recorded[0]['peak_reserved']} is the trace's most Total Reserved {peak_reserved}")
            check(recorded[0]["peak_allocated"] == peak_allocated,
                  f"its peak_allocated {recorded[0]['peak_allocated']} is the trace's most Total Allocated {peak_allocated}")
            print(f"      real allocator: frag at peak {recorded[0]['frag_at_peak'] * 100:.2f}%, "
                  f"avg frag {recorded[0]['avg_frag'] * 100:.2f}%")
        check(table_row, "the table has a \"recorded\" row")
        check(chart_line, "the HTML chart draws \"reserved: recorded (real allocator)\"")
    else:
        if args.require_real_line:
            check(False, "the trace records a Total Reserved above zero (--require-real-line)")
        check(not recorded and not table_row and not chart_line,
              "Total Reserved is zero throughout: no real allocator's line in any report")
    print("kineto-replay-check:", "passed" if failures == 0 else f"{failures} checks FAILED")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
