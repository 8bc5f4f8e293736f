"""Pausing memory by tag under PyTorch on the CPU: Debian's python3-torch allocates through Tessera (host
driver: real virtual memory, a memfd mapped page by page) and

  - a model's weights created under a backed-up region, and a KV-cache-like tensor under another region,
    are both paused: the memory Tessera holds falls by what they held;
  - other tensors are allocated and written meanwhile, in the memory they gave back;
  - both are resumed: every weight equal bit for bit to a copy taken before, at the same address, and
    training goes on from there with finite losses.

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... PYTHONPATH=python /usr/bin/python3 tests/python/torch_pause_test.py
"""

import os
import sys
import unittest

from torch_skip import SKIP, skip_reason

os.environ.pop("TESSERA_ALLOC_CONF", None)


class TorchPause(unittest.TestCase):
    def test_weights_survive_pause_and_resume_and_training_goes_on(self):
        import torch
        import torch.nn.functional as F

        import tessera
        import tessera.torch
        import tiny_gpt

        tessera.torch.enable("cpu")
        torch.manual_seed(0)
        vocab, context = 96, 32
        with tessera.region("weights", enable_cpu_backup=True):
            model = tiny_gpt.TinyGPT(vocab=vocab, width=64, layers=2, context=context)
        with tessera.region("kv_cache"):
            kv_cache = torch.randn(64, 256, 64)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(1)

        def step():
            tokens = tiny_gpt.sequences(8, context + 1, vocab, generator)
            loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss.item()

        losses = [step() for _ in range(3)]
        copies = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
        addresses = {name: parameter.data_ptr() for name, parameter in model.named_parameters()}
        stats = tessera.memory_stats("cpu")
        held = stats["tessera.tag.weights.reserved_bytes"] + stats["tessera.tag.kv_cache.reserved_bytes"]
        self.assertGreater(stats["tessera.tag.weights.allocated_bytes"], 0, "the weights carry the tag")
        self.assertGreater(held, kv_cache.numel() * 4)

        tessera.pause()
        paused = tessera.memory_stats("cpu")
        self.assertEqual(paused["tessera.tag.weights.paused"], 1)
        self.assertEqual(paused["tessera.tag.kv_cache.paused"], 1)
        self.assertLessEqual(paused["reserved_bytes.all.current"], stats["reserved_bytes.all.current"] - held)
        others = [torch.full((1 << 18,), float(i)) for i in range(4)]  # 1 MiB each, in the memory given back
        self.assertTrue(all(bool((other == i).all()) for i, other in enumerate(others)))
        del others
        tessera.resume()

        for name, parameter in model.named_parameters():
            self.assertEqual(parameter.data_ptr(), addresses[name], name)
            self.assertTrue(torch.equal(parameter.detach(), copies[name]), f"{name} changed")
        kv_cache.fill_(1.0)  # usable again (its contents were not backed up)
        losses += [step() for _ in range(3)]
        self.assertTrue(all(loss == loss and loss < 10 for loss in losses), losses)
        self.assertEqual(tessera.memory_stats("cpu")["tessera.tag.weights.backup_bytes"], 0)


if __name__ == "__main__":
    reason = skip_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        sys.exit(SKIP)
    unittest.main()
