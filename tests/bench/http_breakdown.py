#!/usr/bin/python3
"""http_breakdown.py — where the time of bench_regions.py's "http" column goes.

Usage: http_breakdown.py TESSELD [--n 1e8] [--mm 8192] [--geo 20000] [--reps 3]
                         [--backend cuda] [--cases map1,map2,matmul,geodesic]

bench_regions.py times one call (ndarray in -> ndarray out over loopback HTTP);
this splits the same call into its steps, each timed on its own in the same run
(medians of REPS after a warm-up) beside the whole call:
- up:     c.upload() of every input, all at once (as a call sends them);
- job:    submit with the uploaded ids to the job's end (client wall), and the
          job record's own phases (timings_ms: queue, prepare, h2d, compute,
          d2h, store, total);
- down:   the result's download into a fresh ndarray (several ranges);
- call:   the whole c.map / c.matmul / c.geodesic with ndarrays, as bench_regions;
- sum:    up + job + down, against call (what overlaps or is spent elsewhere).
No peer runs here: the ratios against CuPy are bench_regions.py's.
"""
import argparse
import concurrent.futures
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402
from bench_regions import start  # noqa: E402

PHASES = ("queue", "prepare", "h2d", "compute", "d2h", "store", "total")


def timed(f):
    os.sync()  # no dirty page cache left by the step before (bench_regions.med)
    t0 = time.perf_counter()
    v = f()
    return time.perf_counter() - t0, v


def one_case(c, kind, arrays, params, backend, reps):
    """Median ms of each step over reps (after one warm-up), and the phases."""
    rows = []
    for rep in range(reps + 1):
        with concurrent.futures.ThreadPoolExecutor(len(arrays)) as ex:
            t_up, ids = timed(lambda: {k: f.result() for k, f in
                                       {k: ex.submit(c.upload, v) for k, v in arrays.items()}.items()})
        body = dict(params)
        for k, v in ids.items():
            if k.startswith("inputs."):
                body.setdefault("inputs", {})[k[7:]] = v
            else:
                body[k] = v
        t_job, job = timed(lambda: c.submit(kind, backend=backend, output=False, **body))
        t_wait, _ = timed(lambda: job.wait())
        t_down, res = timed(lambda: job.result())
        call = {"map": lambda: c.map(params["expr"], backend=backend, **{
                    k[7:]: v for k, v in arrays.items()}),
                "matmul": lambda: c.matmul(arrays["a"], arrays["b"], arrays.get("bias"),
                                           backend=backend),
                "geodesic": lambda: c.geodesic(arrays["points"], backend=backend)}[kind]
        t_call, res2 = timed(call)
        same = np.array_equal(res, res2, equal_nan=True)
        tm = job.info.get("timings_ms") or {}
        for v in ids.values():
            v.delete()
        job.delete() if hasattr(job, "delete") else None
        if rep:
            rows.append((t_up, t_job + t_wait, t_down, t_call, tm, same))
    m = lambda i: statistics.median(r[i] for r in rows) * 1e3
    ph = {p: statistics.median(float(r[4].get(p, 0) or 0) for r in rows) for p in PHASES}
    return m(0), m(1), m(2), m(3), ph, all(r[5] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tesseld")
    ap.add_argument("--n", type=float, default=1e8)
    ap.add_argument("--mm", type=int, default=8192)
    ap.add_argument("--geo", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cases", default="map1,map2,matmul,geodesic")
    ap.add_argument("--log", help="keep the daemon's log here")
    a = ap.parse_args()
    top = tempfile.mkdtemp(prefix="http-breakdown-")
    p, url, _ = start(os.path.abspath(a.tesseld), top, a.threads)
    out = []
    try:
        c = tessel.Client(url, same_host=False, timeout=600)
        rng = np.random.default_rng(1)
        n, cases = int(a.n), a.cases.split(",")
        if "map1" in cases:
            out.append((f"map x**2+2*x+1 {n:.0e} f64", one_case(
                c, "map", {"inputs.x": rng.random(n)}, {"expr": "x**2 + 2*x + 1"},
                a.backend, a.reps)))
        if "map2" in cases:
            out.append((f"map -b/a {n:.0e} f64", one_case(
                c, "map", {"inputs.a": rng.random(n) + 0.5, "inputs.b": rng.random(n)},
                {"expr": "-b/a"}, a.backend, a.reps)))
        if "matmul" in cases:
            k = a.mm
            out.append((f"matmul W@X+b {k}² f64", one_case(
                c, "matmul", {"a": rng.random((k, k)), "b": rng.random((k, k)),
                              "bias": rng.random(k)}, {}, a.backend, a.reps)))
        if "geodesic" in cases:
            pts = np.column_stack([rng.uniform(-80, 80, a.geo), rng.uniform(-180, 180, a.geo)])
            out.append((f"geodesic square n={a.geo} f64", one_case(
                c, "geodesic", {"points": pts}, {}, a.backend, a.reps)))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        if a.log:
            shutil.copy(os.path.join(top, "tesseld.log"), a.log)
        shutil.rmtree(top, ignore_errors=True)
    la = os.getloadavg()
    print(f"\nbackend {a.backend}, ms, medians of {a.reps} after a warm-up, load {la[0]:.1f}; "
          "job = submit -> ended (client wall); phases from the job record")
    print("| case | up | job | down | up+job+down | call | " + " | ".join(PHASES) + " | same |")
    print("|---" * (7 + len(PHASES)) + "|")
    bad = False
    for name, (up, job, down, call, ph, same) in out:
        bad |= not same
        print(f"| {name} | {up:.0f} | {job:.0f} | {down:.0f} | {up + job + down:.0f} | {call:.0f} | "
              + " | ".join(f"{ph[q]:.1f}" for q in PHASES) + f" | {'ok' if same else 'DIFFER'} |")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
