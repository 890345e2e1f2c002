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

Each side's timeline of its last raw batch, from the job records (the
daemon's wall clock, ms from just before the batch was sent): the last
item's created_at (every item checked and admitted), the first and last
started_at, the last finished_at (the end decided on its worker, before
its commit), then when jobs:batch and jobs:get were answered.

  python3 tests/bench/bench_gang.py path/to/tesseld [N=100] [LEN=10000] [REPS=7]
          [--backend cuda|cpu] [--base OTHER_TESSELD] [--rounds R]

--backend cpu runs the same flow without a GPU (no gangs: the CPU
workers take the items one by one; the batch's submit, wait and read
are the same). --base: a second build (main's, say) run in turns with
the first, R rounds of every side (default 1; 2 with --base), so that a
busy machine weighs on both alike; its rows are marked "(base)".
"""
import argparse
import json
from datetime import datetime
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

H = {"Content-Type": "application/json"}


def timed(fn, reps):
    fn()  # warm-up: kernels compiled, connections open
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts, out


def records(c, handles, reps, backend):
    """Raw batches (jobs:batch, then jobs:get with the results inline),
    reps times: the two requests' ms lists, then the last batch's records:
    (launches, shared sizes, per-job median timings, statuses, timeline)."""
    body = {"jobs": [{"kind": "reduce", "backend": backend,
                      "params": {"op": "sum", "expr": "x**2",
                                 "inputs": {"x": {"array": h.id}}}} for h in handles]}
    raw = json.dumps(body).encode()
    tb, tg = [], []
    for _ in range(reps):
        w0 = time.time() * 1e3
        t0 = time.perf_counter()
        _, out = c._t.request("POST", "/v1/jobs:batch", raw, H)
        t1 = time.perf_counter()
        ids = [j["id"] for j in out["jobs"]]
        _, got = c._t.request("POST", "/v1/jobs:get",
                              json.dumps({"ids": ids, "wait": 30,
                                          "include": ["result"]}).encode(), H)
        t2 = time.perf_counter()
        tb.append((t1 - t0) * 1e3)
        tg.append((t2 - t1) * 1e3)
    _, got = c._t.request("POST", "/v1/jobs:get", json.dumps({"ids": ids}).encode(), H)
    jobs = got["jobs"]
    firsts, shared = set(), []
    for j in jobs:
        la = j.get("launch")
        firsts.add(la["first"] if la else j["id"])
        shared.append(la["shared"] if la else 1)
    tm = {k: statistics.median(j["timings_ms"][k] for j in jobs)
          for k in ("queue", "prepare", "h2d", "compute", "d2h", "store", "total")}

    def at(key, f):  # RFC 3339 with ms, UTC
        return f(datetime.fromisoformat(j[key].replace("Z", "+00:00")).timestamp() * 1e3
                 for j in jobs) - w0
    line = (at("created_at", max), at("started_at", min), at("started_at", max),
            at("finished_at", max), (t1 - t0) * 1e3, (t2 - t0) * 1e3)
    return len(firsts), sorted(set(shared)), tm, [j["status"] for j in jobs], tb, tg, line


def side(name, binary, env, xs, a, acc):
    """One daemon: reduce_many over the uploaded arrays (and, for gangs,
    over the NumPy arrays), then the raw requests; into acc[name]."""
    p, d, url = start(binary, env)
    try:
        c = tessel.Client(url)
        handles = [c.upload(x) for x in xs]
        r = acc.setdefault(name, {"t": [], "up": [], "b": [], "g": []})
        ts, out = timed(lambda: c.reduce_many("sum", handles, expr="x**2",
                                              backend=a.backend), a.reps)
        r["t"] += ts
        r["values"] = np.array([float(v) for v in out])
        launches, shared, tm, st, tb, tg, line = records(c, handles, a.reps, a.backend)
        r["b"] += tb
        r["g"] += tg
        r["last"] = (launches, shared, tm, st, line)
        if "alone" not in name:
            ts, _ = timed(lambda: c.reduce_many("sum", xs, expr="x**2",
                                                backend=a.backend), a.reps)
            r["up"] += ts
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("n", nargs="?", type=int, default=100)
    ap.add_argument("length", nargs="?", type=int, default=10000)
    ap.add_argument("reps", nargs="?", type=int, default=7)
    ap.add_argument("--backend", default=os.environ.get("BENCH_BACKEND", "cuda"))
    ap.add_argument("--base", help="a second tesseld, run in turns with the first")
    ap.add_argument("--rounds", type=int, default=0)
    a = ap.parse_args()
    rounds = a.rounds or (2 if a.base else 1)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(a.length) for _ in range(a.n)]
    want = np.array([np.sum(x ** 2) for x in xs])
    sides = [("gangs", a.binary, {})]
    if a.base:
        sides.append(("gangs (base)", a.base, {}))
    sides.append(("alone", a.binary, {"TESSEL_GPU_GANG": "0"}))
    if a.base:
        sides.append(("alone (base)", a.base, {"TESSEL_GPU_GANG": "0"}))
    acc = {}
    for _ in range(rounds):
        for name, binary, env in sides:
            side(name, binary, env, xs, a, acc)
    rows = []
    print(f"# {a.n} x sum(x**2) over {a.length} float64, backend {a.backend}, "
          f"{rounds} round(s) x {a.reps} reps per side")
    for name, _, _ in sides:
        r = acc[name]
        launches, shared, tm, st, line = r["last"]
        print(f"# {name}: {launches} launches for {a.n} jobs (launch.shared "
              f"{shared}), statuses {sorted(set(st))}; per-job median ms "
              + ", ".join(f"{k} {v:.3f}" for k, v in tm.items()))
        print(f"# {name}: raw requests, median ms: jobs:batch {statistics.median(r['b']):.2f}, "
              f"jobs:get (wait, results inline) {statistics.median(r['g']):.2f}, together "
              f"{statistics.median([x + y for x, y in zip(r['b'], r['g'])]):.2f}")
        print(f"# {name}: last raw batch, ms from its send: items admitted {line[0]:.2f}, "
              f"started {line[1]:.2f}..{line[2]:.2f}, last end {line[3]:.2f}, "
              f"jobs:batch answered {line[4]:.2f}, jobs:get answered {line[5]:.2f}")
        rows.append((f"tessel {name}", statistics.median(r["t"]), min(r["t"])))
        if r["up"]:
            rows.append((f"tessel {name} + upload", statistics.median(r["up"]), min(r["up"])))
    ref = acc["alone"]["values"]
    same = all(np.array_equal(acc[k]["values"].view(np.int64), ref.view(np.int64))
               for k in acc)
    rel = float(np.max(np.abs(ref - want) / np.abs(want)))
    print(f"# every side's values equal bit for bit: {same}; max rel. diff to NumPy {rel:.2e}")
    if a.backend == "cuda":
        try:
            import cupy as cp
            cp.cuda.Device(0).use()
            ts, _ = timed(lambda: [float(cp.sum(cp.asarray(x) ** 2)) for x in xs], a.reps)
            rows.append(("cupy loop", statistics.median(ts), min(ts)))
            gx = [cp.asarray(x) for x in xs]
            ts, _ = timed(lambda: [float(cp.sum(x ** 2)) for x in gx], a.reps)
            rows.append(("cupy loop resident", statistics.median(ts), min(ts)))
            ts, _ = timed(lambda: (cp.asarray(np.stack(xs)) ** 2).sum(axis=1).get(), a.reps)
            rows.append(("cupy stacked", statistics.median(ts), min(ts)))
        except ImportError:
            print("# cupy: not installed, its rows skipped")
    print(f"\n{a.n} datasets x sum(x**2) over {a.length} float64, submit -> all results "
          f"read (median of {rounds} x {a.reps})\n")
    print("| method | median ms | best ms |")
    print("|---|---:|---:|")
    for name, med, best in rows:
        print(f"| {name} | {med:.2f} | {best:.2f} |")
    return 0 if same and rel < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
