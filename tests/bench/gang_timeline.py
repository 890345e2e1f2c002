#!/usr/bin/env python3
"""gang_timeline.py — where the seeds' batch of 100 sums goes (issue 26
item 6): the raw requests of bench_gang.py (one jobs:batch of N reduce
jobs `sum(x**2)` over N arrays of LEN float64 uploaded before, then one
jobs:get waiting with the results inline), REPS times, against daemons
started with each of the environments named, in turns (A B A B ...), so
that a busy machine weighs on every side alike.

  python3 tests/bench/gang_timeline.py build/tesseld [--n 100] [--len 10000]
          [--reps 40] [--rounds 3] [--backend cpu|cuda]
          [--env NAME[@BINARY]:VAR=V,VAR=V ...] [--mode raw|masked|one]
          [--timeline]

--mode: raw (bench_gang.py's: whole records in both answers), masked (as
the client asks: "fields" ["status", "error"] on jobs:batch, ["status",
"error", "result"] on jobs:get), one (one jobs:batch?wait=30 with
"include" and "fields": the ids, the wait and the results in one answer;
its ms are in the jobs:batch column).

An environment NAME@PATH:VAR=V runs the daemon at PATH instead (two
builds in turns: "--env base@/tmp/tesseld.base: new@build/tesseld:").

Per environment (default: "kept" with the daemon's defaults and "off"
with TESSEL_ARRAY_CACHE_MB=0, the arrays kept mapped or not) it prints the
medians over all rounds of: jobs:batch ms, jobs:get ms, the two together,
and the daemon's CPU per batch (utime + stime from /proc over the reps,
divided by reps: what the batch cost every core together).

--timeline (root and perf needed; not on the GPU machine unless perf is
there): uprobes on the daemon's functions along one batch's path, one
batch in the middle of a run of the first environment, as a table of
each event's count and its first, median and last time in ms from the
batch's arrival (handle_batch), and the per-job durations of the phases.
The probes add a few µs to each event.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402

sys.path.insert(0, HERE)
from bench_many import start  # noqa: E402

H = {"Content-Type": "application/json"}
PROBES = ["handle_batch", "submit_chunk", "submit_chunk%return", "jobs_submit_prepare",
          "jobs_submit_check", "jobs_submit_check%return", "jobs_submit_admit",
          "store_insert_jobs", "store_insert_jobs%return", "sched_run_job", "srun_open",
          "srun_open%return", "srun_backend", "srun_close", "srun_close%return",
          "srun_finished", "srun_finished%return", "reply_after_mwait", "reply_items",
          "reply_items%return", "handle_batch%return", "handle_get_many", "on_one_end"]


def cpu_ms(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / os.sysconf("SC_CLK_TCK")


MASK = {"raw": None, "masked": (["status", "error"], ["status", "error", "result"])}


def batch_body(handles, backend, mode):
    b = {"jobs": [{"kind": "reduce", "backend": backend,
                   "params": {"op": "sum", "expr": "x**2",
                              "inputs": {"x": {"array": h.id}}}} for h in handles]}
    if mode == "one":  # everything in the one answer
        b.update(include=["result"], fields=["status", "error", "result"])
    elif MASK[mode]:
        b["fields"] = MASK[mode][0]
    return json.dumps(b).encode()


def one_batch(c, raw, mode):
    t0 = time.perf_counter()
    _, out = c._t.request("POST", "/v1/jobs:batch" + ("?wait=30" if mode == "one" else ""),
                          raw, H)
    t1 = time.perf_counter()
    if mode == "one":
        return (t1 - t0) * 1e3, 0.0, [j["result"]["data"] for j in out["jobs"]]
    ids = [j["id"] for j in out["jobs"]]
    g = {"ids": ids, "wait": 30, "include": ["result"]}
    if MASK[mode]:
        g["fields"] = MASK[mode][1]
    _, got = c._t.request("POST", "/v1/jobs:get", json.dumps(g).encode(), H)
    t2 = time.perf_counter()
    vals = [j["result"]["data"] for j in got["jobs"]]
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3, vals


def run_env(binary, env, xs, a, on_start=None):
    """One daemon: upload, warm up, reps batches; (batch ms list, get ms
    list, daemon CPU ms per batch, the values of the last batch)."""
    p, d, url = start(binary, env)
    try:
        c = tessel.Client(url)
        handles = [c.upload(x) for x in xs]
        raw = batch_body(handles, a.backend, a.mode)
        one_batch(c, raw, a.mode)  # warm-up: connections open, kernels compiled
        if on_start:
            on_start(p.pid)
        tb, tg = [], []
        c0 = cpu_ms(p.pid)
        for _ in range(a.reps):
            b, g, vals = one_batch(c, raw, a.mode)
            tb.append(b)
            tg.append(g)
        return tb, tg, (cpu_ms(p.pid) - c0) / a.reps, vals
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def perf_probes(binary):
    subprocess.run(["perf", "probe", "-q", "-d", "probe_tesseld:*"],
                   stderr=subprocess.DEVNULL)
    for f in PROBES:  # a function this build lacks (older, newer) is left out
        subprocess.run(["perf", "probe", "-q", "-x", binary, "--add", f],
                       stderr=subprocess.DEVNULL)


def timeline_table(path):
    ev = []
    for line in open(path):
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+\S+:(\S+):", line)
        if m:
            ev.append((float(m.group(2)) * 1e3, int(m.group(1)),
                       m.group(3).replace("__return", ".ret")))
    starts = [i for i, e in enumerate(ev) if e[2] == "handle_batch"]
    if len(starts) < 3:
        print("# timeline: too few batches recorded")
        return
    k = len(starts) // 2
    seg = ev[starts[k]:starts[k + 1]]
    t0 = seg[0][0]
    g = {}
    for t, tid, n in seg:
        g.setdefault(n, []).append((t - t0, tid))
    print("\n| event | n | first ms | median ms | last ms |")
    print("|---|---:|---:|---:|---:|")
    for n, v in sorted(g.items(), key=lambda kv: kv[1][0][0]):
        ts = [x[0] for x in v]
        print(f"| {n} | {len(v)} | {ts[0]:.2f} | {statistics.median(ts):.2f} | {ts[-1]:.2f} |")
    print("\n| phase (per job, per thread) | n | median µs | sum ms |")
    print("|---|---:|---:|---:|")
    for a, b in (("jobs_submit_prepare", "jobs_submit_prepare"),
                 ("jobs_submit_check", "jobs_submit_check.ret"),
                 ("store_insert_jobs", "store_insert_jobs.ret"),
                 ("srun_open", "srun_open.ret"), ("srun_backend", "srun_close"),
                 ("srun_close", "srun_close.ret"), ("srun_finished", "srun_finished.ret")):
        d = []
        for tid in {x[1] for x in g.get(a, [])}:
            A = [x[0] for x in g[a] if x[1] == tid]
            B = [x[0] for x in g.get(b, []) if x[1] == tid]
            d += [y - x for x, y in zip(A, B[1:] if a == b else B) if y >= x]
        if d:
            name = "prepare (one item to the next)" if a == b else f"{a} -> {b}"
            print(f"| {name} | {len(d)} | {statistics.median(d) * 1e3:.1f} | {sum(d):.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--len", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default=os.environ.get("BENCH_BACKEND", "cpu"))
    ap.add_argument("--env", nargs="*", default=["kept:", "off:TESSEL_ARRAY_CACHE_MB=0"])
    ap.add_argument("--timeline", action="store_true")
    ap.add_argument("--mode", choices=("raw", "masked", "one"), default="raw")
    a = ap.parse_args()
    envs, bins = [], {}
    for spec in a.env:
        name, _, kv = spec.partition(":")
        name, _, path = name.partition("@")  # NAME@BINARY: its own daemon
        bins[name] = path or a.binary
        envs.append((name, dict(x.split("=", 1) for x in kv.split(",") if x)))
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(a.len) for _ in range(a.n)]
    want = [float(np.sum(x ** 2)) for x in xs]
    res = {name: ([], [], []) for name, _ in envs}
    values = {}
    for _ in range(a.rounds):
        for name, env in envs:
            tb, tg, cpu, vals = run_env(bins[name], env, xs, a)
            res[name][0].extend(tb)
            res[name][1].extend(tg)
            res[name][2].append(cpu)
            values[name] = vals
    first = values[envs[0][0]]
    same = all(np.array_equal(np.array(v).view(np.int64), np.array(first).view(np.int64))
               for v in values.values())
    rel = max(abs(v - w) / w for v, w in zip(first, want))
    print(f"{a.n} x sum(x**2) over {a.len} float64, backend {a.backend}, mode {a.mode}: "
          f"jobs:batch, then jobs:get (wait, results inline); medians of {a.rounds} x "
          f"{a.reps} batches")
    print(f"# every environment's values equal bit for bit: {same}; max rel. diff to "
          f"NumPy {rel:.2e}\n")
    print("| daemon | jobs:batch ms | jobs:get ms | together ms | daemon CPU ms / batch |")
    print("|---|---:|---:|---:|---:|")
    for name, env in envs:
        tb, tg, cpu = res[name]
        both = [x + y for x, y in zip(tb, tg)]
        label = name + (" (" + ",".join(f"{k}={v}" for k, v in env.items()) + ")" if env else "")
        print(f"| {label} | {statistics.median(tb):.2f} | {statistics.median(tg):.2f} | "
              f"{statistics.median(both):.2f} | {statistics.median(cpu):.2f} |")
    if a.timeline:
        perf_probes(bins[envs[0][0]])
        tmp = tempfile.mkdtemp(prefix="gang-tl-")
        rec = {}

        def attach(pid):
            rec["p"] = subprocess.Popen(["perf", "record", "-q", "-e", "probe_tesseld:*",
                                         "-p", str(pid), "-o", f"{tmp}/p.data"],
                                        stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # perf attached before the batches

        a.reps = 15
        run_env(bins[envs[0][0]], envs[0][1], xs, a, on_start=attach)
        rec["p"].send_signal(2)
        rec["p"].wait()
        with open(f"{tmp}/p.txt", "w") as f:
            subprocess.run(["perf", "script", "-i", f"{tmp}/p.data", "-F", "tid,time,event"],
                           stdout=f, stderr=subprocess.DEVNULL)
        print(f"\n# timeline of one batch ({envs[0][0]}), ms from its arrival")
        timeline_table(f"{tmp}/p.txt")
        subprocess.run(["perf", "probe", "-q", "-d", "probe_tesseld:*"],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if same and rel < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
