"""Seed 000: some_function(x) = x * x over [1, 2, 3, 4, 5] with an Executor, each call a job."""
import tessel

inputs = [1, 2, 3, 4, 5]
with tessel.Client() as c, c.executor() as executor:  # was: concurrent.futures.ProcessPoolExecutor()
    results = list(executor.map(lambda x: float(c.map("x * x", x=x)), inputs))
print("Results:", results)
assert results == [x * x for x in inputs], results
