#!/usr/bin/env python3
"""A CUDA tensor shared between two processes through tessera.ipc, bytes checked both ways, for a GPU run
(docs/pytorch.md, "IPC"). NOT RUN ON A GPU YET: written and checked only against the stand-in libcuda's
contract; the first run on a GPU is the test of it.

    TESSERA_LIBRARY=build/src/capi/libtessera_c.so PYTHONPATH=python python3 scripts/gpu-ipc-check.py

What it does: the parent makes Tessera the CUDA allocator with TESSERA_SHAREABLE=1 (chunks created with a
POSIX file descriptor handle), fills a 4 MiB tensor, shares it; a spawned child opens it, checks every byte,
writes its own and closes; the parent checks the child's bytes, frees the tensor and allocates again (the
child's view must not change: the lifetime rule). Exit 0 when every check holds; 1 and what failed otherwise.
"""
import multiprocessing
import os
import sys

os.environ["TESSERA_SHAREABLE"] = "1"
ELEMENTS = 1 << 20  # float32: 4 MiB, two 2 MiB granules


def child(handle, results):
    import torch

    import tessera.ipc
    import tessera.torch

    tessera.torch.enable("cuda")
    tensor = tessera.ipc.open(handle)
    expected = torch.arange(ELEMENTS, dtype=torch.float32, device="cuda")
    results.put(("bytes", bool(torch.equal(tensor, expected))))
    tensor.fill_(2.5)
    torch.cuda.synchronize()
    results.put(("wrote", True))
    tessera.ipc.close(tensor)


def main():
    import torch

    import tessera.ipc
    import tessera.torch

    tessera.torch.enable("cuda")
    tensor = torch.arange(ELEMENTS, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    handle = tessera.ipc.share(tensor)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=child, args=(handle, results))
    process.start()
    handle.close()
    failures = []
    if results.get(timeout=300) != ("bytes", True):
        failures.append("the child did not read the parent's bytes")
    if results.get(timeout=300) != ("wrote", True):
        failures.append("the child did not write")
    elif not bool((tensor == 2.5).all()):
        failures.append("the parent does not see the child's bytes")
    process.join(300)
    if process.exitcode != 0:
        failures.append(f"the child exited with {process.exitcode}")
    del tensor
    again = torch.full((ELEMENTS,), 7.0, device="cuda")  # must not land on the shared pages
    torch.cuda.synchronize()
    del again
    for failure in failures:
        print(f"gpu-ipc-check: {failure}", file=sys.stderr)
    print("gpu-ipc-check: " + ("FAILED" if failures else "a CUDA tensor shared both ways between two processes"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
