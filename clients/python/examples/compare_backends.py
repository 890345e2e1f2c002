"""Seed 000 timed -b/a with ProcessPoolExecutor and with PyTorch on the GPU: here serial, CPU threads, GPU in one table."""
import os
import numpy as np
import tessel

n = 10**5 if os.environ.get("TESSEL_EXAMPLE_SMALL") else 10**7
a, b = np.random.rand(n) + 1, np.random.rand(n)
table = tessel.Client().compare("map", expr="-b/a", a=a, b=b)  # every backend, results checked equal
for row in table:
    print(row)  # {'backend': 'serial', 'ms': ..., 'speedup': 1.0}, then 'cpu' (threads), 'cuda'
np.testing.assert_allclose(table.result, -b / a)
assert {"serial", "cpu"} <= {row["backend"] for row in table}, table
