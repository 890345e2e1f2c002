#!/usr/bin/env python3
"""bench_sync_call.py — one synchronous tiny call from the Python client
(issue 26's target "one synchronous tiny call <= 0.5 ms"), beside the floor
a client could reach and, optionally, other copies of the client.

The call is c.map("x*x", x=np.arange(10.0)): one POST /v1/jobs?wait=...&
include=result. Rows, alternating call by call against one fresh daemon
(its own data directory), so that every row sees the same machine state:

  client         this checkout's clients/python (or $TESSEL_CLIENT_DIR);
  client NAME    each --also NAME=DIR: the package in DIR/tessel, imported
                 under another name (a before build of the client, say:
                 git archive main clients/python | tar -x -C /tmp/before);
  raw socket     the floor: the same request's bytes (a fresh request_id
                 each call) sent with one sendall on a kept-alive socket
                 with TCP_NODELAY, the answer read with recv and its JSON
                 parsed, the result's list made an ndarray: what a client
                 cannot avoid doing in Python.
  no request_id  (--rid) the client without its request_id (the body
                 decoded and encoded again by a shim, which "client" then
                 pays too): what the idempotency key costs the daemon;
  daemon NAME    each --daemon NAME[@BINARY]=SPEC: this client against a
                 second daemon (BINARY, else the first's) started with
                 SPEC's words, VAR=VALUE ones in its environment and the
                 rest as arguments (e.g. "kb64=TESSEL_CONN_MEMORY_KB=64",
                 "warn=--log-level warn", "before@/tmp/old/tesseld="): two
                 daemon builds or settings compared call by call.

The rows' order turns by one every call (each row takes every place
equally often). After WARM calls per row, N calls per row and round; per row the median
and p90 of the calls' wall times (time.perf_counter around the call), the
client thread's CPU per call (time.thread_time: the Python work and the
kernel's share of send and recv) and calls/s.

  python3 tests/bench/bench_sync_call.py path/to/tesseld [N=2000] [ROUNDS=1]
      [--also NAME=DIR ...] [--rid] [--daemon NAME[@BINARY]=SPEC ...]
  ($BENCH_THREADS: the daemon's --threads; default one per core)
"""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402

WARM = 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tesseld, spec=""):
    data = tempfile.mkdtemp(prefix="bench-sync-")
    port = free_port()
    log = open(os.path.join(data, "daemon.log"), "w")
    args = [tesseld, "--port", str(port), "--data-dir", data, "--access-log", "0"]
    if os.environ.get("BENCH_THREADS"):
        args += ["--threads", os.environ["BENCH_THREADS"]]
    env = dict(os.environ)
    for w in spec.split():
        k, eq, v = w.partition("=")
        if eq and k.isupper() and not w.startswith("-"):
            env[k] = v
        else:
            args.append(w)
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    for line in p.stdout:
        if "listening on" in line:
            break
    else:
        raise SystemExit("tesseld did not start: see " + data + "/daemon.log")
    return p, data, port


def load_client(name, pkg_dir):
    """The package pkg_dir/tessel imported as tessel_<name>."""
    mod = "tessel_" + "".join(ch if ch.isalnum() else "_" for ch in name)
    init = os.path.join(pkg_dir, "tessel", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        mod, init, submodule_search_locations=[os.path.dirname(init)])
    m = importlib.util.module_from_spec(spec)
    sys.modules[mod] = m
    spec.loader.exec_module(m)
    return m


class Raw:
    """The floor: the request's bytes on a kept socket, the answer parsed."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = (b"POST /v1/jobs?wait=60.000&include=result HTTP/1.1\r\n"
                     b"Host: 127.0.0.1:%d\r\nAccept: application/json\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " % port)

    def __call__(self, x):
        body = json.dumps({"kind": "map", "backend": "auto", "params": {
            "expr": "x*x", "inputs": {"x": x.tolist()}},
            "request_id": "py-" + uuid.uuid4().hex}).encode()
        self.s.sendall(self.head + b"%d\r\n\r\n" % len(body) + body)
        got = self.s.recv(65536)
        while (end := got.find(b"\r\n\r\n")) < 0:
            got += self.s.recv(65536)
        h = got[:end].lower()
        i = h.index(b"content-length:") + 15
        j = h.find(b"\r\n", i)
        n = int(h[i:j if j > 0 else len(h)])
        while len(got) < end + 4 + n:
            got += self.s.recv(65536)
        r = json.loads(got[end + 4:end + 4 + n])["result"]
        return np.array(r["data"], dtype=float)


class Shim:
    """The client's transport with request_id dropped from job submits
    when `drop` (the body decoded and encoded again either way)."""

    def __init__(self, t):
        self.inner, self.drop = t.request, False

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


def rows_for(port, also, rid, others):
    """[(row name, call(x) -> array)]; others: [(name, port)] of more daemons."""
    url = f"http://127.0.0.1:{port}"
    rows = []
    for name, oport in others:
        oc = tessel.Client(f"http://127.0.0.1:{oport}")
        rows.append((f"daemon {name}", lambda x, c=oc: c.map("x*x", x=x)))
    c = tessel.Client(url)
    if rid:
        shim = Shim(c._t)
        c._t.request = shim.request

        def keyed(x, c=c, shim=shim):
            shim.drop = False
            return c.map("x*x", x=x)

        def unkeyed(x, c=c, shim=shim):
            shim.drop = True
            return c.map("x*x", x=x)
        rows += [("client", keyed), ("no request_id", unkeyed)]
    else:
        rows.append(("client", lambda x, c=c: c.map("x*x", x=x)))
    for name, d in also:
        other = load_client(name, d).Client(url)
        rows.append((f"client {name}", lambda x, c=other: c.map("x*x", x=x)))
    rows.append(("raw socket", Raw(port)))
    return rows


def run(tesseld, n, rounds, also, rid, daemons):
    p, data, port = start(tesseld)
    more = []  # (name, process, data dir, port)
    try:
        for name, spec in daemons:
            nm, _, binary = name.partition("@")
            q, qdata, qport = start(binary or tesseld, spec)
            more.append((nm, q, qdata, qport))
        rows = rows_for(port, also, rid, [(m[0], m[3]) for m in more])
        x = np.arange(10.0)
        want = x * x
        for _, call in rows:
            for _ in range(WARM):
                call(x)
        per = []  # per round: {row: ([us], cpu s)}
        for _ in range(rounds):
            got = {r: [[], 0.0] for r, _ in rows}
            for i in range(n):
                # each row takes each place in turn: the row after another
                # daemon's (or the raw socket's) call pays for caches and
                # sleeping threads, 50-70 us here, more than most A/Bs
                for r, call in rows[i % len(rows):] + rows[:i % len(rows)]:
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    y = call(x)
                    t1 = time.perf_counter()
                    got[r][1] += time.thread_time() - c0
                    got[r][0].append((t1 - t0) * 1e6)
                    if not np.array_equal(y, want):
                        raise SystemExit(f"{r}: wrong result")
            per.append(got)
    finally:
        for q, d in [(p, data)] + [(m[1], m[2]) for m in more]:
            q.terminate()
            q.wait()
            shutil.rmtree(d, ignore_errors=True)
    return [r for r, _ in rows], per


def main():
    args, also, rid, daemons = [], [], False, []
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--also":
            name, _, d = next(it).partition("=")
            also.append((name, d))
        elif a == "--daemon":
            name, _, spec = next(it).partition("=")
            daemons.append((name, spec))
        elif a == "--rid":
            rid = True
        else:
            args.append(a)
    if not args:
        raise SystemExit(__doc__)
    tesseld = args[0]
    n = int(float(args[1])) if len(args) > 1 else 2000
    rounds = int(args[2]) if len(args) > 2 else 1
    names, per = run(tesseld, n, rounds, also, rid, daemons)
    load = os.getloadavg()[0]
    print(f"# bench_sync_call: {tesseld}, {n} calls per row and round, "
          f"c.map(\"x*x\", x=np.arange(10.0)), {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at the end")
    head = "| row |" + "".join(f" round {i + 1} p50 / p90 µs |"
                               for i in range(rounds))
    head += " all p50 µs | all p90 µs | client CPU µs/call | calls/s |"
    print(head)
    print("|---" * (1 + rounds + 4) + "|")
    for r in names:
        cells = "".join(f" {pct(g[r][0], .5):.0f} / {pct(g[r][0], .9):.0f} |"
                        for g in per)
        allv = [v for g in per for v in g[r][0]]
        cpu = sum(g[r][1] for g in per) / len(allv) * 1e6
        print(f"| {r} |{cells} {pct(allv, .5):.0f} | {pct(allv, .9):.0f} | "
              f"{cpu:.0f} | {1e6 * len(allv) / sum(allv):.0f} |")


if __name__ == "__main__":
    main()
