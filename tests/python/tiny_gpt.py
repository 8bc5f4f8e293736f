"""A tiny GPT-style model trained for a few steps on the CPU, deterministically: the workload of the PyTorch
tests and of scripts/gpu-torch-check.py. Token embedding and learned positions, transformer blocks with causal
self-attention written with plain torch ops, layer norm, a linear head; AdamW; arithmetic token sequences from a
seeded generator. Runs on torch 1.13 (Debian) and 2.x.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def attention(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=96, width=64, heads=4, layers=2, context=32):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(1, context, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        x = self.tokens(tokens) + self.positions[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def sequences(batch, length, vocab, generator):
    """Arithmetic sequences modulo the vocabulary, from random starts with random strides 1 to 3: something a
    tiny model learns within a few steps."""
    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    stride = torch.randint(1, 4, (batch, 1), generator=generator)
    return (start + stride * torch.arange(length)) % vocab


def train(device="cpu", steps=8, batch=8, context=32, vocab=96, width=64, layers=2, seed=0, on_step=None):
    """Trains from a fixed seed; returns the loss of every step as floats. on_step(step) runs after each
    step's backward pass (while activations' gradients are live), e.g. to read allocator statistics."""
    torch.manual_seed(seed)
    model = TinyGPT(vocab=vocab, width=width, layers=layers, context=context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed + 1)
    losses = []
    for step in range(steps):
        tokens = sequences(batch, context + 1, vocab, generator).to(device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if on_step is not None:
            on_step(step)
        optimizer.step()
        losses.append(loss.item())
    return losses
