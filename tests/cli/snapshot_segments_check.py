"""`tessera replay --snapshot` through the command: a generated training workload replayed by each allocator
writes segment entries (segment_alloc/segment_map less segment_free/segment_unmap) whose running sum never goes
below zero, peaks at the replay's peak_reserved (from its --json report) and ends at what the snapshot's segments
hold; read with Python's own pickle. The per-event sum is pinned by tests/replay/replay_snapshot_test.cpp.
   python3 snapshot_segments_check.py TESSERA_BINARY WORK_DIR"""
import json
import os
import pickle
import subprocess
import sys

ALLOCATORS = ["tessera", "pytorch", "expandable", "gmlake", "memory-saver"]


def fail(message):
    sys.exit(f"snapshot_segments_check: {message}")


def run(*arguments):
    done = subprocess.run(arguments, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        fail(f"{' '.join(arguments)} exited {done.returncode}: {done.stderr.strip()}")


def main():
    tessera, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    trace = os.path.join(work, "training.trace")
    run(tessera, "gen", "training", "--set", "preset=tiny", "--set", "steps=2", "-o", trace)
    for allocator in ALLOCATORS:
        snapshot = os.path.join(work, f"{allocator}.pickle")
        report = os.path.join(work, f"{allocator}.json")
        run(tessera, "replay", trace, "--allocators", allocator, "--snapshot", snapshot, "--json", report)
        with open(report) as file:
            peak_reserved = json.load(file)["results"][0]["peak_reserved"]
        with open(snapshot, "rb") as file:
            data = pickle.load(file)
        held = peak = entries = 0
        for entry in data["device_traces"][0]:
            action = entry["action"]
            if action in ("segment_alloc", "segment_map"):
                held += entry["size"]
            elif action in ("segment_free", "segment_unmap"):
                held -= entry["size"]
            else:
                continue
            entries += 1
            if held < 0:
                fail(f"{allocator}: the segment entries give back more than they held")
            peak = max(peak, held)
        segments = sum(segment["total_size"] for segment in data["segments"])
        if entries == 0:
            fail(f"{allocator}: no segment entry in the snapshot")
        if peak != peak_reserved:
            fail(f"{allocator}: the entries peak at {peak} bytes, the replay's peak_reserved is {peak_reserved}")
        if held != segments:
            fail(f"{allocator}: the entries end at {held} bytes, the segments hold {segments}")
        print(f"{allocator}: {entries} segment entries, peak {peak} = peak_reserved, end {held} = the segments")


if __name__ == "__main__":
    main()
