"""Seed 003 (Example 2): sum(x**2) of 100 datasets, one job instead of a Pool of 100."""
import numpy as np
import tessel

datasets = [np.random.rand(10000) for _ in range(100)]
results = tessel.Client().reduce("sum", "x**2", x=np.stack(datasets), axis=1)  # one sum per row
print(f"task results: {results[:3]} ... ({len(results)})")
np.testing.assert_allclose(results, [np.sum(d**2) for d in datasets], rtol=1e-12)
