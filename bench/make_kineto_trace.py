"""Writes a Kineto (Chrome trace) JSON as torch.profiler's export_chrome_trace does with profile_memory=True,
of `--events` "[memory]" events: allocations and frees of `--live` rolling blocks of one CUDA device, with
the allocator's totals after each, and `--operators` operator events before each [memory] event (the
reader drops those). `--compact` writes each [memory] event with only the fields the reader needs (ph,
name, ts, Addr, Bytes) and no spaces: 10^7 events in 913 MB, under the 1 GiB bound; Kineto's own layout
takes 250 bytes an event. For timing the Kineto reader on traces too large to keep in the repository
(docs/benchmarks.md, "Reading a large Kineto trace"):

    /usr/bin/python3 bench/make_kineto_trace.py --events 10000000 --compact /tmp/big.json
    /usr/bin/time -v build/tools/tessera info /tmp/big.json

A generator, not a test: the trace's content is what a profile could hold, not a recorded one.
"""

import argparse
import random


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--events", type=int, default=1_000_000, help="[memory] events (default 10^6)")
    parser.add_argument("--live", type=int, default=1000, help="blocks live at once (default 1000)")
    parser.add_argument("--operators", type=int, default=0, help="operator events before each [memory] one")
    parser.add_argument("--compact", action="store_true", help="only the fields the reader needs, no spaces")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    base = 0x7F0000000000
    live = {}  # address -> bytes
    free_slots = list(range(args.live))
    allocated = 0
    reserved = 0
    with open(args.output, "w", buffering=1 << 24) as out:
        out.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(args.events):
            for _ in range(args.operators):
                out.write(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {i}, '
                          f'"dur": 1, "args": {{"Input Dims": [[8, 8], [8, 8]]}}}},\n')
            # Allocate while free slots remain and half the time after; free otherwise.
            if free_slots and (not live or rng.random() < 0.5):
                slot = free_slots.pop(rng.randrange(len(free_slots)))
                address = base + slot * (1 << 24)
                size = 512 * rng.randint(1, 1 << 14)
                live[address] = size
                allocated += size
                reserved = max(reserved, -(-allocated // (1 << 21)) * (1 << 21))
                change = size
            else:
                address = rng.choice(list(live)) if len(live) < 64 else next(iter(live))
                size = live.pop(address)
                free_slots.append((address - base) >> 24)
                allocated -= size
                change = -size
            sep = ",\n" if i + 1 < args.events else "\n"
            if args.compact:
                out.write(f'{{"ph":"i","name":"[memory]","ts":{i},"args":{{"Addr":{address},"Bytes":{change}}}}}{sep}')
                continue
            out.write(f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, '
                      f'"ts": {i}, "args": {{"Total Reserved": {reserved}, "Total Allocated": {allocated}, '
                      f'"Bytes": {change}, "Addr": {address}, "Device Id": 0, "Device Type": 1}}}}{sep}')
        out.write("]}\n")


if __name__ == "__main__":
    main()
