"""Seed 000: solve a*x + b = 0 for many (a, b), x = -b/a; one job, or one job per equation."""
import numpy as np
import tessel

c = tessel.Client()
a, b = np.array([1, 2, 3, 4, 5], np.float32), np.array([2, 3, 4, 5, 6], np.float32)
print("Results:", c.map("-b/a", a=a, b=b))  # all equations in one job
with c.executor() as executor:  # was: concurrent.futures.ProcessPoolExecutor()
    results = list(executor.map(lambda ab: float(c.map("-b/a", a=ab[0], b=ab[1])), zip(a, b)))
print("Results:", results)
np.testing.assert_allclose(results, -b / a, rtol=1e-6)
