#!/usr/bin/env python3
"""bench_sync_call.py — one synchronous tiny call from the Python client
(issue 26's target "one synchronous tiny call <= 0.5 ms"), with and without
the request_id the client sends.

The call is c.map("x*x", x=np.arange(10.0)): one POST /v1/jobs?wait=...&
include=result. The client always sends a fresh request_id (a retry after a
dropped connection makes no second job); the "no request_id" row sends the
same request without it. Both rows go through the same shim on the
client's transport (the body decoded and encoded again; only the "no
request_id" row drops the key), so the shim's cost is in both.
The rows alternate call by call (both see the same machine state) against
one fresh daemon (its own data directory), after WARM calls each; per row the median and
p90 of the calls' wall times in microseconds (time.perf_counter around the
call), and calls/s.

  python3 tests/bench/bench_sync_call.py path/to/tesseld [N=2000] [ROUNDS=1]
      starts its own tesseld (its default threads; $BENCH_THREADS: --threads),
      prints one table (a column per round, then all rounds together);
  ($TESSEL_CLIENT_DIR: measure that copy of clients/python instead)

Several builds side by side (before/after): run it once per build,
alternating, e.g.
  for r in 1 2 3; do for b in BEFORE AFTER; do
    python3 tests/bench/bench_sync_call.py $b/tesseld 2000; done; done
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402

WARM = 100
ROWS = ("no request_id", "request_id")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tesseld):
    data = tempfile.mkdtemp(prefix="bench-sync-")
    port = free_port()
    log = open(os.path.join(data, "daemon.log"), "w")
    args = [tesseld, "--port", str(port), "--data-dir", data]
    if os.environ.get("BENCH_THREADS"):
        args += ["--threads", os.environ["BENCH_THREADS"]]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in p.stdout:
        if "listening on" in line:
            break
    else:
        raise SystemExit("tesseld did not start: see " + data + "/daemon.log")
    return p, data, f"http://127.0.0.1:{port}"


class Shim:
    """The client's transport with a switch: drop request_id from job
    submits (both settings decode and encode the body again)."""

    def __init__(self, t):
        self.t, self.inner, self.drop = t, t.request, False

    def request(self, method, path, body=None, headers=None, timeout=None,
                raw=False):
        if method == "POST" and path.startswith("/v1/jobs?") and body:
            d = json.loads(body)
            if self.drop:
                d.pop("request_id", None)
            body = json.dumps(d).encode()
        return self.inner(method, path, body, headers, timeout, raw)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def run(tesseld, n, rounds):
    p, data, url = start(tesseld)
    try:
        c = tessel.Client(url)
        shim = Shim(c._t)
        c._t.request = shim.request
        x = np.arange(10.0)
        want = x * x
        for drop in (False, True):  # warm both paths
            shim.drop = drop
            for _ in range(WARM):
                c.map("x*x", x=x)
        per = []  # per round: {row: [us]}
        for _ in range(rounds):
            got = {r: [] for r in ROWS}
            for _ in range(n):
                for i, r in enumerate(ROWS):
                    shim.drop = i == 0
                    t0 = time.perf_counter()
                    y = c.map("x*x", x=x)
                    got[r].append((time.perf_counter() - t0) * 1e6)
                    if not np.array_equal(y, want):
                        raise SystemExit("wrong result")
            per.append(got)
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(data, ignore_errors=True)
    return per


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    tesseld = sys.argv[1]
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 2000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    per = run(tesseld, n, rounds)
    print(f"# bench_sync_call: {tesseld}, {n} calls per row and round, "
          f"c.map(\"x*x\", x=np.arange(10.0)), {os.cpu_count()} CPUs")
    head = "| row |" + "".join(f" round {i + 1} p50 / p90 µs |"
                               for i in range(rounds))
    head += " all p50 µs | all p90 µs | calls/s |"
    print(head)
    print("|---" * (1 + rounds + 3) + "|")
    for r in ROWS:
        cells = "".join(f" {pct(g[r], .5):.0f} / {pct(g[r], .9):.0f} |"
                        for g in per)
        allv = [v for g in per for v in g[r]]
        print(f"| {r} |{cells} {pct(allv, .5):.0f} | {pct(allv, .9):.0f} | "
              f"{1e6 * len(allv) / sum(allv):.0f} |")


if __name__ == "__main__":
    main()
