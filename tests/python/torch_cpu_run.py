"""One training run of the tiny GPT on the CPU, in a process of its own (the allocator must be chosen before
PyTorch allocates): `default` with PyTorch's CPU allocator, `tessera` with Tessera's through
libtessera_torch_cpu.so. Writes a JSON result: the losses (float.hex, to compare bit for bit) and, for tessera,
its statistics during and after training. Used by torch_cpu_training_test.py.

    python3 torch_cpu_run.py default|tessera RESULT.json [SNAPSHOT.pickle]
"""

import json
import sys

import torch

import tiny_gpt


def main():
    allocator, result_path = sys.argv[1], sys.argv[2]
    snapshot_path = sys.argv[3] if len(sys.argv) > 3 else None
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    result = {"torch": torch.__version__, "allocator": allocator}
    during = []
    on_step = None
    if allocator == "tessera":
        import tessera
        import tessera.torch

        tessera.torch.enable("cpu")
        tessera.record_memory_history(max_entries=1_000_000)

        def on_step(step):
            stats = tessera.memory_stats("cpu")
            during.append({key: stats[key] for key in ("allocated_bytes.all.current", "allocation.all.current")})

    losses = tiny_gpt.train(on_step=on_step)
    result["losses"] = [loss.hex() for loss in losses]
    if allocator == "tessera":
        import tessera

        result["during"] = during
        result["stats"] = tessera.memory_stats("cpu")
        result["summary"] = tessera.memory_summary("cpu")
        if snapshot_path:
            tessera.dump_snapshot(snapshot_path, device="cpu")
    with open(result_path, "w") as file:
        json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
