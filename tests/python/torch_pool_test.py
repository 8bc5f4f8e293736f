"""tessera.use_pool under PyTorch on the CPU: Debian's python3-torch allocates through Tessera (host driver),
and a tensor made inside use_pool(pool) lives in the pool: its memory, once freed, goes only to tensors made
inside use_pool(pool) again, never to one made outside; a tensor made outside never lands in the pool.

Exits 77 (CTest: skipped) with the reason when torch is not importable or libtessera_torch_cpu.so was not built.
    TESSERA_LIBRARY=... TESSERA_TORCH_CPU_LIBRARY=... PYTHONPATH=python /usr/bin/python3 tests/python/torch_pool_test.py
"""

import os
import sys
import unittest

from torch_skip import SKIP, skip_reason

os.environ.pop("TESSERA_ALLOC_CONF", None)


class TorchPool(unittest.TestCase):
    def test_a_pools_tensors_reuse_only_the_pools_memory(self):
        import torch

        import tessera
        import tessera.torch

        tessera.torch.enable("cpu")
        pool = tessera.Pool(device="cpu")
        elements = 1 << 18  # 1 MiB of float32
        with tessera.use_pool(pool):
            inside = torch.full((elements,), 1.0)
        inside_address = inside.data_ptr()
        del inside
        outside = torch.full((elements,), 2.0)
        self.assertNotEqual(outside.data_ptr(), inside_address, "a tensor outside the pool got its memory")
        outside_address = outside.data_ptr()
        with tessera.use_pool(pool):
            again = torch.full((elements,), 3.0)
            self.assertEqual(again.data_ptr(), inside_address, "the pool's tensor reuses the pool's block")
        self.assertTrue(bool((outside == 2.0).all()) and bool((again == 3.0).all()))
        del outside
        with tessera.use_pool(pool):
            other = torch.full((elements,), 4.0)
            self.assertNotEqual(other.data_ptr(), outside_address, "the pool took the shared cache's block")
        del again, other
        pool.release()


if __name__ == "__main__":
    reason = skip_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        sys.exit(SKIP)
    unittest.main()
