"""Seed 004 (Numba, Example 1): x**2 + 2*x + 1 over a million float32s."""
import os
import numpy as np
import tessel

x = np.arange(10**5 if os.environ.get("TESSEL_EXAMPLE_SMALL") else 10**6).astype(np.float32)
result = tessel.Client().map("x**2 + 2*x + 1", x=x, dtype="float32")  # serial, CPU threads or GPU
print(result[:5], result.dtype)
np.testing.assert_allclose(result, x**2 + 2*x + 1, rtol=1e-6)
