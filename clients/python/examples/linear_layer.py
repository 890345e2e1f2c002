"""Seed 000: y = W @ x + b with 1000 x 1000 matrices (torch.matmul(w, x) + b on the GPU)."""
import numpy as np
import tessel

x, w, b = np.random.randn(1000, 1000), np.random.randn(1000, 1000), np.random.randn(1000, 1)
y = tessel.Client().matmul(w, x, bias=b)  # on the server's best backend (GPU when it has one)
print("y:", y.shape, y[0, :3])
np.testing.assert_allclose(y, w @ x + b, rtol=1e-9, atol=1e-9)
