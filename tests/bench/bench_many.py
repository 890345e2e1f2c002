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


def main():
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
