"""Runs scripts/bench-seed.sh --quick and checks its table: the header, one row per allocator, numbers that
parse and hold together (min_capacity no less than peak live, fractions between 0 and 1, no allocator's
avg_frag below ideal_cache's, the floor for an allocator that keeps its pages).
   python3 bench_seed_check.py BENCH_SEED_SH TESSERA_BINARY"""
import subprocess
import sys

HEADER = "| scenario | allocator | peak live GiB | avg_frag | frag at peak | min_capacity GiB | overhead | at 64 GiB |"
ALLOCATORS = {"tessera", "pytorch", "expandable", "gmlake", "ideal_cache"}


def fail(message):
    sys.exit(f"bench_seed_check: {message}")


def percent(cell, where):
    if not cell.endswith("%"):
        fail(f"{where}: '{cell}' is not a percentage")
    value = float(cell[:-1])
    if not 0 <= value < 100:
        fail(f"{where}: {value}% is outside [0, 100)")
    return value


def main():
    script, tessera = sys.argv[1], sys.argv[2]
    run = subprocess.run(["bash", script, "--quick", "--tessera", tessera, "--jobs", "1"],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        fail(f"bench-seed.sh exited {run.returncode}: {run.stderr.strip()}")
    lines = run.stdout.strip().splitlines()
    if len(lines) < 3 or lines[0] != HEADER or lines[1] != "|---" * 8 + "|":
        fail(f"the table's header is not as expected:\n{run.stdout}")
    seen = set()
    avg_frags = {}
    for number, line in enumerate(lines[2:], start=3):
        where = f"line {number}"
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 8:
            fail(f"{where}: {len(cells)} cells, expected 8: {line}")
        scenario, allocator, peak, avg_frag, frag_at_peak, min_capacity, overhead, fit = cells
        if not scenario.startswith("seed-"):
            fail(f"{where}: '{scenario}' is not a seed scenario")
        seen.add(allocator)
        peak_gib = float(peak)
        if peak_gib <= 0:
            fail(f"{where}: peak live {peak_gib} GiB")
        avg_frags[allocator] = percent(avg_frag, where)
        percent(frag_at_peak, where)
        if float(min_capacity) < peak_gib:
            fail(f"{where}: min_capacity {min_capacity} GiB is below peak live {peak} GiB")
        percent(overhead, where)
        if fit != "fits":
            fail(f"{where}: the quick scenario does not fit 64 GiB: {fit}")
    if seen != ALLOCATORS:
        fail(f"allocators {sorted(seen)}, expected {sorted(ALLOCATORS)}")
    floor = avg_frags["ideal_cache"]
    for allocator, value in avg_frags.items():
        if value < floor:
            fail(f"{allocator}'s avg_frag {value}% is below the floor, ideal_cache's {floor}%")


if __name__ == "__main__":
    main()
