"""Multiply two matrices, check the result against numpy and report GFLOP/s."""

import time

import numpy as np
import torch

N = 256
a, b = torch.randn(N, N), torch.randn(N, N)
expected = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
torch.matmul(a, b)  # warm up
start = time.perf_counter()
repeats = 5
for _ in range(repeats):
    c = torch.matmul(a, b)
seconds = (time.perf_counter() - start) / repeats
error = float(np.abs(c.numpy() - expected).max())
assert error < 1e-2, f"matmul differs from numpy by {error}"
print(f"matmul {N}x{N}: {2 * N**3 / seconds / 1e9:.1f} GFLOP/s, max error {error:.2e}")
