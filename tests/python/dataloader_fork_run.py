"""One training run of the tiny GPT fed by a DataLoader with two forked workers, in a process of its own:
`default` with PyTorch's CPU allocator, `tessera` with Tessera's. The dataset's tensors are made in the parent
before the workers fork; each worker allocates, writes and checks tensors of its own while the parent trains.
Writes a JSON result: every sample the workers produced, what each worker's own check found, and the losses
(float.hex, to compare bit for bit). Used by dataloader_fork_test.py.

    python3 dataloader_fork_run.py default|tessera RESULT.json
"""

import json
import sys

import torch
from torch.utils.data import DataLoader, Dataset

import tiny_gpt

VOCAB, CONTEXT, BATCH, STEPS = 96, 32, 8, 8


class Sequences(Dataset):
    """Token sequences made in the parent; each item also costs the worker allocations of its own (a scratch
    tensor filled and checked), as a real dataset's decoding and augmentation would."""

    def __init__(self):
        generator = torch.Generator().manual_seed(7)
        self.tokens = tiny_gpt.sequences(BATCH * STEPS, CONTEXT + 1, VOCAB, generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        scratch = torch.full((256, 1024), float(index), dtype=torch.float32)  # 1 MiB
        intact = bool((scratch == float(index)).all())
        item = self.tokens[index].clone() * 1
        del scratch
        return item, intact


def main():
    allocator, result_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if allocator == "tessera":
        import tessera.torch

        tessera.torch.enable("cpu")
    torch.manual_seed(0)
    dataset = Sequences()
    model = tiny_gpt.TinyGPT(vocab=VOCAB, context=CONTEXT)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
    samples, intact, losses = [], [], []
    for tokens, checks in loader:
        samples.append(tokens.tolist())
        intact.extend(bool(check) for check in checks)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # The parent's own tensors after the workers ended: the dataset as it was made.
    expected = tiny_gpt.sequences(BATCH * STEPS, CONTEXT + 1, VOCAB, torch.Generator().manual_seed(7))
    result = {
        "allocator": allocator,
        "samples": samples,
        "worker_checks": intact,
        "dataset_intact": bool(torch.equal(dataset.tokens, expected)),
        "losses": [loss.hex() for loss in losses],
    }
    if allocator == "tessera":
        import tessera

        result["allocations"] = tessera.memory_stats("cpu")["allocation.all.allocated"]
    with open(result_path, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main()
