#!/usr/bin/python3
"""bench_spare.py — big results with spare result files against without them
(compute/array/codec/spare.h; issues 25 and 27: the store of a big result
into a fresh file).

Usage: bench_spare.py TESSELD [--reps 3] [--backend cuda] [--small]

Two daemons in turn on fresh data directories: the default --spare-results
("on") and --spare-results 0 ("off"). Each runs every job REPS times
(submit -> stored, the job record's timings_ms; each result deleted before
the next), with os.sync() before each (no dirty page cache left by the
job before). With spares on, every rep after the first waits (up to 20 s,
not timed) until the spares hold at least the job's result size: the
keeper makes them in the background after a big result, so back-to-back
big results with no time between them find none (the first rep of each
job shows that case). "took" is whether the job's result took a spare
(GET /v1/info's spare_results.taken moved). Nothing here asserts a speed.

Jobs: map x*2+1 over 10^8 float64 (800 MB), geodesic square n = 20,000 and
30,000 float64 (3.2 GB, 7.2 GB), matmul 16384^2 float64 (2 GB), geodesic
kNN 10^7 k = 10 (two 800 MB parts). --small divides every size for a quick
run on a machine without a GPU (with --backend cpu).
"""
import argparse
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

import tessel  # noqa: E402
from bench_many import start  # noqa: E402


def spare(url):
    return json.load(urllib.request.urlopen(url + "/v1/info"))["spare_results"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tesseld")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    k = 10 if a.small else 1
    rng = np.random.default_rng(1)

    def pts(n):
        return np.column_stack([np.degrees(np.arcsin(rng.uniform(-1, 1, n))),
                                rng.uniform(-180, 180, n)])
    n20, n30, nk, nm, nx = 20000 // k, 30000 // k, 10_000_000 // k, 16384 // k, 100_000_000 // k
    data = {"p20": pts(n20), "p30": pts(n30), "k7": pts(nk),
            "a": rng.standard_normal((nm, nm)), "b": rng.standard_normal((nm, nm)),
            "x": rng.random(nx)}
    print(f"backend {a.backend}; ms from the job record; 'took': the result took a spare")
    print("| spares | job | rep | took | total | compute | d2h | store |")
    print("|---|---|---|---|---|---|---|---|")
    for label, extra in (("on", []), ("off", ["--spare-results", "0"])):
        p, _, url = start(a.tesseld, extra=extra)
        try:
            c = tessel.Client(url, same_host=False, timeout=1200)
            ins = {name: c.upload(v) for name, v in data.items()}
            be = a.backend
            jobs = [
                (f"map x*2+1 {nx:.0e} f64", nx * 8,
                 lambda: c.submit_map("x*2+1", x=ins["x"], backend=be, output=False)),
                (f"geodesic n={n20} f64", n20 * n20 * 8,
                 lambda: c.submit_geodesic(ins["p20"], backend=be, output=False)),
                (f"geodesic n={n30} f64", n30 * n30 * 8,
                 lambda: c.submit_geodesic(ins["p30"], backend=be, output=False)),
                (f"matmul {nm}^2 f64", nm * nm * 8,
                 lambda: c.submit_matmul(ins["a"], ins["b"], backend=be, output=False)),
                (f"knn {nk:.0e} k=10", nk * 10 * 16,
                 lambda: c.submit_geodesic(ins["k7"], query={"knn": {"k": 10}}, backend=be,
                                           output=False))]
            for name, want, sub in jobs:
                for rep in range(a.reps):
                    os.sync()
                    if label == "on" and rep > 0:
                        for _ in range(200):
                            if spare(url)["held"] >= want:
                                break
                            time.sleep(0.1)
                    t0 = spare(url)["taken"]
                    j = sub()
                    j.wait()
                    took = spare(url)["taken"] - t0
                    t = j.info["timings_ms"]
                    print(f"| {label} | {name} | {rep} | {'yes' if took else 'no'} | "
                          f"{t.get('total', 0):.0f} | {t.get('compute', 0):.0f} | "
                          f"{t.get('d2h', 0):.0f} | {t.get('store', 0):.0f} |", flush=True)
                    j.delete()
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
