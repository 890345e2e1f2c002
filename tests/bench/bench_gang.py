#!/usr/bin/env python3
"""bench_gang.py — the seeds' "100 independent datasets, each summed on the
GPU" (issue 26 item 6): 100 arrays of 10^4 float64, sum(x**2) of each, as
one batch of cuda jobs, beside CuPy doing the same. One table.

Rows (medians of REPS runs; ms from the first request to the last result
in hand, NumPy arrays in, NumPy values out):

  tessel gangs        c.reduce_many("sum", handles, expr="x**2",
                      backend="cuda") over the 100 arrays uploaded once
                      before (c.upload): one jobs:batch, one jobs:get; the
                      GPU worker takes the queued jobs together and runs
                      them in few launches (compute/sched/README.md, "Gangs")
  tessel alone        the same against a tesseld started with
                      TESSEL_GPU_GANG=0: every job its own launch, h2d, d2h
  tessel gangs+upload the same from the NumPy arrays (the client uploads
                      each first, then drops them)
  cupy loop           for x in xs: float(cp.sum(cp.asarray(x)**2))
  cupy loop resident  the same over arrays already on the GPU
  cupy stacked        cp.asarray(np.stack(xs)) ** 2 summed along rows, .get()

It also reads every job's record of one gang run: the launches (distinct
"launch.first", jobs without "launch" counted one each) and the jobs'
timings; and checks every value equals the ganged-off run's bit for bit
and NumPy's within 1e-12 relative.

  python3 tests/bench/bench_gang.py path/to/tesseld [N=100] [LEN=10000] [REPS=7]
"""
import json
import os
import shutil
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402

sys.path.insert(0, HERE)
from bench_many import start  # noqa: E402

BACKEND = os.environ.get("BENCH_BACKEND", "cuda")  # "cpu": try the script without a GPU


def timed(fn, reps):
    fn()  # warm-up: kernels compiled, connections open
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), min(ts), out


def records(c, handles, reps):
    """Raw batches (jobs:batch, then jobs:get with the results inline),
    reps times: the medians of the two requests' ms, then the last batch's
    records: (launches, shared sizes, per-job median timings, statuses)."""
    body = {"jobs": [{"kind": "reduce", "backend": BACKEND,
                      "params": {"op": "sum", "expr": "x**2",
                                 "inputs": {"x": {"array": h.id}}}} for h in handles]}
    raw = json.dumps(body).encode()
    tb, tg = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        _, out = c._t.request("POST", "/v1/jobs:batch", raw,
                              {"Content-Type": "application/json"})
        t1 = time.perf_counter()
        ids = [j["id"] for j in out["jobs"]]
        _, got = c._t.request("POST", "/v1/jobs:get",
                              json.dumps({"ids": ids, "wait": 30,
                                          "include": ["result"]}).encode(),
                              {"Content-Type": "application/json"})
        t2 = time.perf_counter()
        tb.append((t1 - t0) * 1e3)
        tg.append((t2 - t1) * 1e3)
    _, got = c._t.request("POST", "/v1/jobs:get", json.dumps({"ids": ids}).encode(),
                          {"Content-Type": "application/json"})
    jobs = got["jobs"]
    firsts, shared = set(), []
    for j in jobs:
        la = j.get("launch")
        firsts.add(la["first"] if la else j["id"])
        shared.append(la["shared"] if la else 1)
    tm = {k: statistics.median(j["timings_ms"][k] for j in jobs)
          for k in ("queue", "prepare", "h2d", "compute", "d2h", "store", "total")}
    return (len(firsts), sorted(set(shared)), tm, [j["status"] for j in jobs],
            statistics.median(tb), statistics.median(tg))


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    length = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(length) for _ in range(n)]
    want = np.array([np.sum(x ** 2) for x in xs])
    rows, values = [], {}
    for name, env in (("gangs", {}), ("alone", {"TESSEL_GPU_GANG": "0"})):
        p, d, url = start(binary, env)
        try:
            c = tessel.Client(url)
            handles = [c.upload(x) for x in xs]
            med, best, out = timed(lambda: c.reduce_many("sum", handles, expr="x**2",
                                                          backend=BACKEND), reps)
            values[name] = np.array([float(v) for v in out])
            rows.append((f"tessel {name}", med, best))
            launches, shared, tm, st, tb, tg = records(c, handles, reps)
            print(f"# {name}: {launches} launches for {n} jobs (launch.shared "
                  f"{shared}), statuses {sorted(set(st))}; per-job median ms "
                  + ", ".join(f"{k} {v:.3f}" for k, v in tm.items()))
            print(f"# {name}: raw requests, median ms: jobs:batch {tb:.2f}, "
                  f"jobs:get (wait, results inline) {tg:.2f}, together {tb + tg:.2f}")
            if name == "gangs":
                med, best, _ = timed(lambda: c.reduce_many("sum", xs, expr="x**2",
                                                            backend=BACKEND), reps)
                rows.append(("tessel gangs+upload", med, best))
        finally:
            p.terminate()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)
    same = np.array_equal(values["gangs"].view(np.int64), values["alone"].view(np.int64))
    rel = float(np.max(np.abs(values["gangs"] - want) / np.abs(want)))
    print(f"# gangs == alone bit for bit: {same}; max rel. diff to NumPy {rel:.2e}")
    try:
        import cupy as cp
        cp.cuda.Device(0).use()
        med, best, _ = timed(lambda: [float(cp.sum(cp.asarray(x) ** 2)) for x in xs], reps)
        rows.append(("cupy loop", med, best))
        gx = [cp.asarray(x) for x in xs]
        med, best, _ = timed(lambda: [float(cp.sum(x ** 2)) for x in gx], reps)
        rows.append(("cupy loop resident", med, best))
        med, best, _ = timed(lambda: (cp.asarray(np.stack(xs)) ** 2).sum(axis=1).get(), reps)
        rows.append(("cupy stacked", med, best))
    except ImportError:
        print("# cupy: not installed, its rows skipped")
    print(f"\n{n} datasets x sum(x**2) over {length} float64, submit -> all results "
          f"read (median of {reps})\n")
    print("| method | median ms | best ms |")
    print("|---|---:|---:|")
    for name, med, best in rows:
        print(f"| {name} | {med:.2f} | {best:.2f} |")
    return 0 if same and rel < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
