#!/usr/bin/env python3
"""bench_many.py — tiny jobs from Python: map_many against single submits
(issue 26 item 5's benchmark), one table.

Each row runs N tiny map jobs (x*x over 10 float64) through the client
against a tesseld it starts (SQLite store, its own --data-dir):

  single  N x c.submit_map(...) in a row, then every .result()
  many    c.map_many("x*x", [N arrays]): one jobs:batch, jobs:get waits
  executor  c.executor(max_in_flight=16).map of submit_map(...).result():
          submits made together go out as jobs:batch (the client's Coalescer)
  sync    one c.map("x*x", x=<10 numbers>) at a time: its latency (the
          median of N calls, ms), not a rate

jobs/s is N / the wall time from the first submit to the last result in
hand; the ratio is many / single. Medians of REPS runs, the methods taking
turns in each.

  /usr/bin/python3 tests/bench/bench_many.py path/to/tesseld [N=2000] [REPS=3]

A/B of two clients against one daemon (issue 26 item 5: where a map_many
job's time goes, client side and daemon side apart):

  /usr/bin/python3 tests/bench/bench_many.py --ab OLD_CLIENT_DIR path/to/tesseld [N] [REPS]

runs map_many of N tiny jobs from OLD_CLIENT_DIR's client (e.g. a
`git worktree` of main's clients/python), from this tree's, and from this
tree's with Client(retries=1) ("new+rids": a request_id per item), each
in a child process of its own, taking turns, REPS times, and prints per client
the median jobs/s, the client's CPU µs per job (its process time over
the call) and the daemon's (utime + stime from /proc/PID/stat over the
call): on a machine of C cores, the client alone caps jobs/s at about
1e6 / client µs (one GIL), the daemon at about C * 1e6 / daemon µs.

  /usr/bin/python3 tests/bench/bench_many.py --sweep path/to/tesseld [N=20000] [REPS=3]

map_many of N tiny jobs from this tree's client with other chunk sizes
(batch.CHUNK: 100 ... 2,500) and connections (Client(streams=): 2 ... 16),
taking turns against one daemon: jobs/s and the client's and the
daemon's CPU µs per job, medians of REPS (how CHUNK = 500 with 8 was
chosen; results/many-2core-2026-11-29.md).

  /usr/bin/python3 tests/bench/bench_many.py --parts

times the client's own steps of a map_many job without a daemon (best of
7, µs per job over a chunk of 500): the params, the chunk's body
(_jobs_json: inputs made lists, json.dumps), json.loads of a canned
answer, its conversion to arrays (_Call.take: inlines) and the final
list (_results); what the client's CPU per job has beyond their sum is
the transport (sockets, the transfer threads) and the garbage collector.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402


def start(binary, env=None, extra=()):
    """tesseld on a fresh data directory (env: added to its environment;
    extra: more flags); (process, data directory, url). bench_gang.py and
    bench_spare.py start theirs through this too."""
    d = tempfile.mkdtemp(prefix="bench-many-")
    p = subprocess.Popen([binary, "--port", "0", "--data-dir", d, "--access-log", "0"] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, **(env or {})))
    for line in p.stdout:
        if "listening on http://" in line:
            url = line.split("listening on ")[1].split()[0].rstrip(",/")
            # keep reading its log so that a full pipe never stalls it
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, d, url
    raise SystemExit("tesseld did not start")


def run_single(c, items):
    t = time.perf_counter()
    jobs = [c.submit_map("x*x", x=a) for a in items]
    for j in jobs:
        j.result()
    return time.perf_counter() - t


def run_many(c, items):
    t = time.perf_counter()
    c.map_many("x*x", items)
    return time.perf_counter() - t


def run_executor(c, items):
    t = time.perf_counter()
    with c.executor(max_in_flight=16) as ex:
        list(ex.map(lambda a: c.submit_map("x*x", x=a).result(), items))
    return time.perf_counter() - t


def run_sync(c, n):
    x = [float(i) for i in range(10)]
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        c.map("x*x", x=x)
        lat.append(time.perf_counter() - t)
    return statistics.median(lat)


def _cpu_s(pid):
    """utime + stime of process pid, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def child(url, n):
    """One map_many of n tiny jobs from this process's client: prints
    "wall_s client_cpu_s" (a warm-up call first, not counted)."""
    c = tessel.Client(url, retries=int(os.environ.get("BENCH_RETRIES", "0")))
    items = [np.arange(10.0) + i for i in range(n)]
    c.map_many("x*x", items[:200])
    t, cpu = time.perf_counter(), time.process_time()
    c.map_many("x*x", items)
    print(time.perf_counter() - t, time.process_time() - cpu)


def ab(old_dir, binary, n, reps):
    p, d, url = start(binary)
    new_dir = os.path.join(HERE, "..", "..", "clients", "python")
    rows = {"old": [], "new": [], "new+rids": []}
    try:
        for _ in range(reps):
            for name, cdir in (("old", old_dir), ("new", new_dir), ("new+rids", new_dir)):
                before = _cpu_s(p.pid)
                env = dict(os.environ, TESSEL_CLIENT_DIR=cdir,
                           BENCH_RETRIES="1" if name == "new+rids" else "0")
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", url,
                                      str(n)], env=env,
                                     check=True, capture_output=True, text=True).stdout
                wall, ccpu = map(float, out.split())
                # the daemon's CPU over the whole child (its warm-up of 200 too)
                rows[name].append((wall, ccpu, (_cpu_s(p.pid) - before) / (n + 200) * n))
        print(f"map_many of {n} tiny jobs (x*x over 10 float64), {os.cpu_count()} cores, "
              f"medians of {reps}, clients taking turns against one daemon")
        print(f"{'client':<8}{'jobs/s':>10}{'client us/job':>16}{'daemon us/job':>16}")
        for name, r in rows.items():
            w, c, dc = (statistics.median(x[k] for x in r) for k in range(3))
            print(f"{name:<8}{n / w:>10.0f}{c / n * 1e6:>16.1f}{dc / n * 1e6:>16.1f}")
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def sweep(binary, n, reps):
    from tessel import batch as tb
    p, d, url = start(binary)
    try:
        items = [np.arange(10.0) + i for i in range(n)]
        confs = [(ch, 8) for ch in (100, 250, 500, 1000, 2500)] + [(500, s) for s in (2, 4, 16)]
        clients = {s: tessel.Client(url, streams=s) for s in (2, 4, 8, 16)}
        for c in clients.values():
            c.map_many("x*x", items[:200])
        rows = {k: [] for k in confs}
        for _ in range(reps):
            for ch, s in confs:
                tb.CHUNK = ch
                before, t0, w = _cpu_s(p.pid), os.times(), time.perf_counter()
                clients[s].map_many("x*x", items)
                t1, w = os.times(), time.perf_counter() - w
                rows[(ch, s)].append((n / w, t1.user + t1.system - t0.user - t0.system,
                                      _cpu_s(p.pid) - before))
        print(f"map_many of {n} tiny jobs, {os.cpu_count()} cores, medians of {reps}")
        print(f"{'CHUNK':>6}{'conns':>6}{'jobs/s':>10}{'client us/job':>15}{'daemon us/job':>15}")
        for (ch, s), r in rows.items():
            j, c, dc = (statistics.median(x[k] for x in r) for k in range(3))
            print(f"{ch:>6}{s:>6}{j:>10.0f}{c / n * 1e6:>15.1f}{dc / n * 1e6:>15.1f}")
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def parts(n=500):
    import json
    import timeit
    from tessel import batch as tb
    c = tessel.Client("http://127.0.0.1:1")  # never asked: no request is made
    items = [np.arange(10.0) + i for i in range(n)]
    params = [{"expr": "x*x", "dtype": None, "inputs": {"x": a}} for a in items]
    opts = dict(backend="auto", priority=None, timeout_s=None, label=None)
    ans = {"jobs": [{"id": f"j_01m8mee98z000005f7dq5{k:05d}", "status": "succeeded",
                     "result": {"dtype": "float64", "shape": [10], "bytes": 80,
                                "href": f"/v1/jobs/j_01m8mee98z000005f7dq5{k:05d}/result",
                                "data": (np.arange(10.0) + k).tolist()}, "error": None}
                    for k in range(n)]}
    raw = json.dumps(ans, separators=(",", ":")).encode()
    answer = json.loads(raw)

    def done():
        call = tb._Call(n)
        call.take(0, answer)
        return c._results(call.ids, call.done, call.arrays)
    steps = [("params (map_many's loop)",
              lambda: [{"expr": "x*x", "dtype": None, "inputs": dict(x=a)} for a in items]),
             ("body (_jobs_json)", lambda: c._jobs_json("map", params, opts, [])),
             ("answer json.loads", lambda: json.loads(raw)),
             ("arrays (_Call.take + _results)", done)]
    print(f"the client's steps of a map_many job, no daemon, {len(raw) / n:.0f} answer "
          f"bytes a job, best of 7")
    for name, f in steps:
        best = min(timeit.repeat(f, number=10, repeat=7)) / 10 / n
        print(f"{name:<34}{best * 1e6:>8.2f} us/job")


def main():
    if sys.argv[1] == "--parts":
        return parts()
    if sys.argv[1] == "--sweep":
        return sweep(sys.argv[2], int(float(sys.argv[3])) if len(sys.argv) > 3 else 20000,
                     int(sys.argv[4]) if len(sys.argv) > 4 else 3)
    if sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]))
    if sys.argv[1] == "--ab":
        return ab(sys.argv[2], sys.argv[3], int(float(sys.argv[4])) if len(sys.argv) > 4 else 4000,
                  int(sys.argv[5]) if len(sys.argv) > 5 else 5)
    binary = sys.argv[1]
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 2000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    p, d, url = start(binary)
    try:
        c = tessel.Client(url)
        items = [np.arange(10.0) + i for i in range(n)]
        run_many(c, items[:100])
        run_single(c, items[:100])  # warm-up
        single, many, execu, sync = [], [], [], []
        for _ in range(reps):
            single.append(run_single(c, items))
            many.append(run_many(c, items))
            execu.append(run_executor(c, items))
            sync.append(run_sync(c, min(n, 500)))
        s, m, y = statistics.median(single), statistics.median(many), statistics.median(sync)
        print(f"tiny map jobs (x*x over 10 float64), N={n}, {os.cpu_count()} cores, "
              f"medians of {reps}")
        print(f"{'method':<34}{'jobs/s':>10}{'ms':>10}")
        print(f"{'submit_map x N, then results':<34}{n / s:>10.0f}{s * 1e3:>10.1f}")
        print(f"{'map_many (jobs:batch + jobs:get)':<34}{n / m:>10.0f}{m * 1e3:>10.1f}")
        x = statistics.median(execu)
        print(f"{'executor(16).map of submit_map':<34}{n / x:>10.0f}{x * 1e3:>10.1f}")
        print(f"{'ratio many / single':<34}{s / m:>10.1f}")
        print(f"{'one synchronous c.map (median)':<34}{'':>10}{y * 1e3:>10.2f}")
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
