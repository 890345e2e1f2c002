#!/usr/bin/python3
"""peers_map.py — the peers of bench_map.c: NumPy and numexpr on the same
expressions, sizes and input distributions. Run by bench_map with
/usr/bin/python3 (the Debian python that has numpy and numexpr).

Usage: peers_map.py THREADS MAX_SIZE [MIN_SIZE=1000]  (sizes: powers of 10)
Prints one line per measurement: "<peer>|<case>|<size>|<melem_per_s>",
each the median of 5 timings (like bench_map.c: repeat a call until
>= 20 ms have passed, per-call time = elapsed / calls). Map results go to a
reused output array (out=), as in bench_map.c: page faults of fresh
allocations are not what is measured.
"""
import statistics
import sys
import time

import numexpr
import numpy as np

THREADS = int(sys.argv[1])
MAX = int(float(sys.argv[2]))
MIN = int(float(sys.argv[3])) if len(sys.argv) > 3 else 1000
numexpr.set_num_threads(THREADS)

MAPS = ["x*x", "x**2 + 2*x + 1", "-b/a", "sin(x)*exp(-x)"]
# The last operation writes into a reused output, as tessel and numexpr
# do here; NumPy's temporaries before it are its own way of working.
NP_MAPS = {
    "x*x": lambda x, a, b, o: np.multiply(x, x, out=o),
    "x**2 + 2*x + 1": lambda x, a, b, o: np.add(x**2 + 2 * x, 1, out=o),
    "-b/a": lambda x, a, b, o: np.divide(-b, a, out=o),
    "sin(x)*exp(-x)": lambda x, a, b, o: np.multiply(np.sin(x), np.exp(-x),
                                                   out=o),
}


def timeit(fn):
    samples = []
    for _ in range(5):
        calls, t0 = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            el = time.perf_counter() - t0
            if el >= 0.02:
                break
        samples.append(el / calls)
    return statistics.median(samples)


def say(peer, case, n, t):
    print(f"{peer}|{case}|{n}|{n / t / 1e6:.3f}", flush=True)


def main():
    rng = np.random.default_rng(7)
    n = MIN
    while n <= MAX:
        x = rng.random(n)
        a = 1.0 + rng.random(n)
        b = rng.random(n)
        o = np.empty(n)
        env = {"x": x, "a": a, "b": b}
        for case in MAPS:
            say("numpy", case, n, timeit(lambda: NP_MAPS[case](x, a, b, o)))
            say("numexpr", case, n,
                timeit(lambda: numexpr.evaluate(case, local_dict=env, out=o)))
        say("numpy", "sum(x**2)", n, timeit(lambda: np.sum(x**2)))
        x2 = x.reshape(100, n // 100)
        say("numpy", "sum axis=1 [100,N/100]", n,
            timeit(lambda: x2.sum(axis=1)))
        del x, a, b, o, env, x2
        n *= 10


main()
