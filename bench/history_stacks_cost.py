"""What Python stacks cost an allocation: allocate+free pairs of 4 KiB through the C ABI (ctypes) on the host
driver, with the history off, on without stacks, and on with stacks="python" at a call depth of about
`--depth` frames (a model's forward is some tens deep); and, where python3-torch and libtessera_torch_cpu.so
are at hand, torch.empty(1024) through PyTorch's CPU allocator the same three ways. Prints the median of
`--repeats` runs per case, in microseconds per pair, and the difference stacks make.

    PYTHONPATH=python TESSERA_LIBRARY=build/src/capi/libtessera_c.so \
    TESSERA_TORCH_CPU_LIBRARY=build/torch_cpu/libtessera_torch_cpu.so \
    /usr/bin/python3 bench/history_stacks_cost.py

A timing for docs/benchmarks.md, not a test: it asserts nothing.
"""

import argparse
import os
import statistics
import time

os.environ["TESSERA_DRIVER"] = "host"
os.environ.pop("TESSERA_ALLOC_CONF", None)

import tessera  # noqa: E402
from tessera import _lib  # noqa: E402


def at_depth(depth, work):
    """Runs work() `depth` Python frames below here."""
    if depth <= 0:
        return work()
    return at_depth(depth - 1, work)


def ctypes_pairs(count):
    lib = _lib.library()
    alloc, free = lib.tessera_alloc, lib.tessera_free

    def work():
        start = time.perf_counter()
        for _ in range(count):
            free(alloc(4096, 0, None), 4096, 0, None)
        return time.perf_counter() - start

    return work


def torch_pairs(count):
    import torch

    def work():
        start = time.perf_counter()
        for _ in range(count):
            torch.empty(1024)  # 4 KiB, freed when the temporary goes
        return time.perf_counter() - start

    return work


def measure(work, depth, repeats, count, setup):
    times = []
    for _ in range(repeats):
        setup()
        times.append(at_depth(depth, work) / count * 1e6)
    tessera.record_memory_history(False)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20000, help="pairs per run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--depth", type=int, default=30, help="Python frames above the allocation")
    args = parser.parse_args()
    cases = {
        "history off": lambda: tessera.record_memory_history(False),
        "history on, no stacks": lambda: tessera.record_memory_history(max_entries=10 * args.count),
        "history on, stacks='python'": lambda: tessera.record_memory_history(max_entries=10 * args.count,
                                                                             stacks="python"),
    }
    paths = {"C ABI (ctypes)": ctypes_pairs(args.count)}
    library = os.environ.get("TESSERA_TORCH_CPU_LIBRARY")
    try:
        import torch  # noqa: F401

        import tessera.torch

        if library and os.path.isfile(library):
            tessera.torch.enable("cpu")
            paths["torch.empty on the CPU"] = torch_pairs(args.count)
    except ImportError:
        pass
    print(f"{args.count} pairs of 4 KiB a run, median of {args.repeats} runs, {args.depth} frames deep (µs per pair)")
    for path, work in paths.items():
        at_depth(args.depth, work)  # warm: the allocator's pages, the interpreter's caches
        results = {case: measure(work, args.depth, args.repeats, args.count, setup) for case, setup in cases.items()}
        line = ", ".join(f"{case} {value:.2f}" for case, value in results.items())
        extra = results["history on, stacks='python'"] - results["history on, no stacks"]
        print(f"{path}: {line}; stacks add {extra:.2f} µs per allocation")


if __name__ == "__main__":
    main()
