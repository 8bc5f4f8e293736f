"""Run by pip_install_test.py with the fresh virtual environment's Python, from a folder outside the repository
and with no PYTHONPATH or TESSERA_* variables: the installed package alone. Trains a small model on Tessera (the
CPU path) and writes what it saw as JSON to argv[1]."""

import json
import math
import sys

import tessera
import tessera.torch
import torch

tessera.torch.enable("cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
inputs = torch.randn(256, 32)
targets = inputs[:, :4].sum(dim=1, keepdim=True)
losses = []
for _ in range(30):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

with open("/proc/self/maps", encoding="utf-8") as maps:
    loaded = sorted({line.split()[-1] for line in maps if "libtessera" in line})
json.dump({
    "package": tessera.__file__,
    "library_path": tessera.library_path(),
    "loaded": loaded,
    "losses": losses,
    "all_finite": all(math.isfinite(value) for value in losses),
    "stats": tessera.memory_stats(),
    "version": tessera.version(),
}, open(sys.argv[1], "w", encoding="utf-8"))
