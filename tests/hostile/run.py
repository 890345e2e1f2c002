#!/usr/bin/env python3
"""The hostile-input suite: what a hostile client sends, against the real daemon.

    python3 tests/hostile/run.py path/to/tesseld

Phases: malformed JSON bodies, expressions, .npy and CSV uploads, zero-size
and overflowing shapes through every kind and backend, HTTP framing and
smuggling, floods and slow clients, a 64 MiB tmpfs data dir (root only),
kill -9 during writes. After every phase the same invariants are checked:
the daemon is alive and /healthz answers 200, every job that was
acknowledged (a 2xx with an id) still exists and reaches a final state,
PRAGMA integrity_check of the store is "ok", and the daemon's log holds no
sanitizer report (this suite also runs against the ASan+UBSan daemon, see
the Makefile's test-asan). A daemon that died is recorded as a failure
naming the last input, then restarted so that the suite carries on.

Only loopback is contacted; every loop is bounded in count and time.
The last line is "N passed, N failed[, N skipped]"; the exit code is 1 on
any failure.
"""
import http.client
import json
import os
import random
import re
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT = 30
passed = failed = skipped = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)
    return ok


class Daemon:
    def __init__(self, binary, data=None, extra=()):
        self.binary = binary
        self.data = data or tempfile.mkdtemp(prefix="tessel-hostile-")
        self.extra = list(extra)
        self.proc = None
        self.port = None
        self.acked = set()
        self.last_input = "(none)"

    def start(self):
        self.log = open(os.path.join(self.data, "daemon.log"), "ab")
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [self.binary, "--port", "0", "--data-dir", self.data, "--threads", "2",
             "--access-log", "0"] + self.extra,
            stdout=subprocess.PIPE, stderr=self.log, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                return
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("the daemon did not start; see " + self.data + "/daemon.log")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=15):
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def request(self, method, path, body=None, headers=None, timeout=TIMEOUT):
        """(status, headers dict, bytes); status -1 when no answer came."""
        if isinstance(body, str):
            body = body.encode()
        self.last_input = f"{method} {path} {body[:120]!r}" if body else f"{method} {path}"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        except (OSError, http.client.HTTPException):
            return -1, {}, b""
        finally:
            c.close()

    def submit(self, job, wait=None):
        path = "/v1/jobs" + (f"?wait={wait}" if wait else "")
        st, h, b = self.request("POST", path, json.dumps(job) if not isinstance(job, (bytes, str)) else job,
                                {"Content-Type": "application/json"})
        try:
            j = json.loads(b) if b else None
        except ValueError:
            j = None
        if 200 <= st < 300 and isinstance(j, dict) and "id" in j:
            self.acked.add(j["id"])
        return st, j

    def sanitizer_report(self):
        try:
            with open(os.path.join(self.data, "daemon.log"), "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        for pat in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
            i = text.find(pat)
            if i >= 0:
                return text[max(0, i - 200):i + 800]
        return None


def json_error(body):
    try:
        return bool(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return False


def error_ok(st, body, statuses=None, field_prefix=None):
    """A 4xx JSON error (status in `statuses` when given) with a code, and a
    field starting with field_prefix when given."""
    if statuses and st not in statuses:
        return False
    if not 400 <= st < 500:
        return False
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    if not e.get("code"):
        return False
    if field_prefix is not None and not str(e.get("field", "")).startswith(field_prefix):
        return False
    return True


def invariants(d, phase):
    """After each phase: alive, /healthz, acknowledged jobs final, store ok."""
    if not d.alive():
        check(False, f"[{phase}] the daemon died (last input: {d.last_input}); restarting")
        d.stop()
        d.start()
    st, _, _ = d.request("GET", "/healthz")
    check(st == 200, f"[{phase}] /healthz answered {st}")
    deadline = time.time() + 120
    pending = set(d.acked)
    while pending and time.time() < deadline:
        for jid in list(pending):
            st, _, b = d.request("GET", f"/v1/jobs/{jid}")
            if st == 404:
                check(False, f"[{phase}] acknowledged job {jid} is gone")
                pending.discard(jid)
                d.acked.discard(jid)
            elif st == 200 and json.loads(b)["status"] in ("succeeded", "failed", "canceled"):
                pending.discard(jid)
        if pending:
            time.sleep(0.2)
    check(not pending, f"[{phase}] {len(pending)} acknowledged jobs never finished: {sorted(pending)[:5]}")
    try:
        db = sqlite3.connect(f"file:{d.data}/tessel.db?mode=ro", uri=True, timeout=30)
        ok = db.execute("PRAGMA integrity_check").fetchone()[0]
        db.close()
    except sqlite3.Error as e:
        ok = str(e)
    check(ok == "ok", f"[{phase}] PRAGMA integrity_check: {ok}")
    rep = d.sanitizer_report()
    check(rep is None, f"[{phase}] sanitizer report in the daemon's log:\n{rep}")
    print(f"phase {phase}: done ({passed} passed, {failed} failed so far)", flush=True)


# ---- 1. malformed JSON ---------------------------------------------------
def phase_json(d):
    bodies = [
        b"", b"{", b'{"kind":', b"[]", b"null", b"1e999", b'"map"', b"{}",
        b'{"kind":"map","kind":"reduce","params":{}}',
        b'{"kind":"map","params":{"expr":"x","inputs":{"x":[1e999]}}}',
        b'{"kind":"map","params":{"expr":"x\x00","inputs":{"x":[1]}}}',
        b'{"kind":"map\xff\xfe","params":{}}',
        b"[" * 100000 + b"]" * 100000,
        b'{"kind":"map","params":{"expr":"x","inputs":{"x":' + b"[" * 5000 + b"1" + b"]" * 5000 + b"}}}",
        b'{"kind":"map","params":{"expr":"x","inputs":{"x":[1,2]}},"unknown":1}',
        b'{"kind":"map","priority":1e300,"params":{"expr":"x","inputs":{"x":[1]}}}',
        b'{"kind":"map","timeout_s":-1,"params":{"expr":"x","inputs":{"x":[1]}}}',
    ]
    kinds = {"map": ["expr", "inputs", "dtype"], "reduce": ["op", "expr", "axis", "inputs"],
             "matmul": ["a", "b", "bias", "dtype"],
             "geodesic": ["points", "targets", "method", "units", "layout", "ellipsoid", "dtype"]}
    wrong = [None, 1, -1, 1.5, "x", [], {}, [[]], True, "9" * 400 + "q"]
    for kind, fields in kinds.items():
        for f in fields:
            for w in wrong:
                bodies.append(json.dumps({"kind": kind, "params": {f: w}}).encode())
        for top in ("backend", "priority", "timeout_s", "label", "request_id"):
            for w in wrong:
                bodies.append(json.dumps({"kind": kind, top: w, "params": {}}).encode())
    for b in bodies:
        st, j = d.submit(b)
        body = json.dumps(j).encode() if j is not None else b""
        check(error_ok(st, body), f"[json] {b[:80]!r} -> {st} {body[:200]!r}")
        if not d.alive():
            break
    # lying Content-Length: longer than what is sent, then the client leaves
    for n in (10, 100000):
        s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n{\"kind\"" % n)
        s.close()


# ---- 2. expressions --------------------------------------------------------
def phase_expr(d):
    exprs = ["", "x+", "+", "(((x)", "x)", "y", "x**", "sin(", "sin()", "sin(x,x)", "1/",
             "x" * 100000, "(" * 10000 + "x" + ")" * 10000, "-" * 10000 + "x",
             "x" + "+x" * 20000, "\x00", "x\u00e9", "__import__('os')", "x[0]", "x.y",
             "1e999*x", "nan", "x if x else x", "x;x", "@x"]
    for e in exprs:
        st, j = d.submit({"kind": "map", "params": {"expr": e, "inputs": {"x": [1, 2]}}})
        field = str(j["error"].get("field", "")) if st == 400 and j else ""
        # NUL cannot even be JSON text for the parser: then the body is named
        ok = (st == 400 and (field.startswith("params.expr") or (e == "\x00" and field == "body"))) \
            or (st in (200, 202) and e in ("1e999*x", "nan"))
        check(ok, f"[expr] {e[:40]!r} -> {st} {json.dumps(j)[:200] if j else ''}")
        if not d.alive():
            break
    many = {f"x{i}": [1] for i in range(10000)}
    st, j = d.submit({"kind": "map", "params": {"expr": "x0", "inputs": many}})
    check(st in (200, 202) or error_ok(st, json.dumps(j).encode()), f"[expr] 10^4 inputs -> {st}")


# ---- 3. uploads ------------------------------------------------------------
def npy(header, data=b"", major=1, pad=True):
    h = header.encode() if isinstance(header, str) else header
    pre = 10 if major == 1 else 12
    if pad:
        total = (pre + len(h) + 1 + 63) // 64 * 64
        h = h + b" " * (total - pre - len(h) - 1) + b"\n"
    size = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + size + h + data


def phase_uploads(d):
    hdr = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }"
    bad = [
        b"", b"NOTNUMPY", b"\x93NUMPY", b"\x93NUMPY\x09\x00\x10\x00{}",
        b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 100,
        npy(hdr % ("<f8", "False", "(2,)"), b"\0" * 8),
        npy(hdr % ("<f8", "False", "(2,)"), b"\0" * 24),
        npy(hdr % (">f8", "False", "(1,)"), b"\0" * 8),
        npy(hdr % ("|O", "False", "(1,)"), b"\0" * 8),
        npy(hdr % ("<c16", "False", "(1,)"), b"\0" * 16),
        npy(hdr % ("<f8", "True", "(1, 1)"), b"\0" * 8),
        npy(hdr % ("<f8", "False", "(0, %d)" % 2 ** 62)),
        npy(hdr % ("<f8", "False", "(0, %d)" % (2 ** 63 - 1))),
        npy(hdr % ("<f8", "False", "(0, %d, %d)" % (2 ** 32, 2 ** 32))),
        npy(hdr % ("<f8", "False", "(-1,)")),
        npy(hdr % ("<f8", "False", "(" + "1, " * 100 + ")"), b"\0" * 8),
        npy("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8),
        npy(hdr % ("<f8", "False", "(1,)"), b"\0" * 8, pad=False)[:-3],
    ]
    for b in bad:
        st, _, body = d.request("POST", "/v1/arrays", b, {"Content-Type": "application/x-npy"})
        check(error_ok(st, body, field_prefix="body") or (st == 413 and error_ok(st, body)),
              f"[npy] {b[:60]!r} -> {st} {body[:200]!r}")
    for b in [b"0x10", b"1;2", b".", b"1,2\n3\n", b"1,,2", b"a,b\n", b"nan,1\n", b"1,2\n\n3,4\n",
              b"\xff\xfe1,2", b"1," * 50000]:
        st, _, body = d.request("POST", "/v1/arrays", b, {"Content-Type": "text/csv"})
        check(error_ok(st, body, field_prefix="body"), f"[csv] {b[:40]!r} -> {st} {body[:200]!r}")
    for b, shape in [(b"\xef\xbb\xbf1,2\n3,4\n5,6\n", [3, 2]), (b"1,2\r3,4\r", [2, 2]),
                     (b'"1",2\n', [2]), (b"x,y\r\n1,2\r\n", [2])]:
        st, _, body = d.request("POST", "/v1/arrays", b, {"Content-Type": "text/csv"})
        got = json.loads(body).get("shape") if st in (200, 201) else None
        check(got == shape, f"[csv] {b!r} -> {st} shape {got}, want {shape}")
    st, _, body = d.request("POST", "/v1/arrays", b"[1,2]", {"Content-Type": "text/plain"})
    check(error_ok(st, body, [415]), f"[upload] text/plain -> {st}")


# ---- 4. zero-size and overflowing shapes ----------------------------------
def phase_shapes(d):
    st, _, b = d.request("GET", "/v1/devices")
    has_gpu = st == 200 and bool(json.loads(b).get("cuda", {}).get("available"))
    backends = ["serial", "cpu", "auto", "compare", "cuda"]
    zero_inputs = [[], [[], []], {"range": {"stop": 0}}, {"random": {"shape": [0, 3], "seed": 1}},
                   {"random": {"shape": [3, 0], "seed": 1}}, {"random": {"shape": [2, 0, 2], "seed": 1}}]
    # an uploaded zero-size array
    st, _, body = d.request("POST", "/v1/arrays", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4, 0), }"),
                            {"Content-Type": "application/x-npy"})
    if check(st in (200, 201), f"[shapes] upload of shape (4, 0) -> {st} {body[:200]!r}"):
        zero_inputs.append({"array": json.loads(body)["id"]})
    jobs = []
    for be in backends:
        for x in zero_inputs:
            jobs.append({"kind": "map", "backend": be, "params": {"expr": "x*2+1", "inputs": {"x": x}}})
            jobs.append({"kind": "map", "backend": be, "params": {"expr": "x+y", "inputs": {"x": x, "y": [[1]]}}})
            for op in ("sum", "prod", "mean", "min", "max", "argmin", "argmax", "std", "var", "norm"):
                for axis in (None, 0, 1, -1):
                    jobs.append({"kind": "reduce", "backend": be,
                                 "params": {"op": op, "axis": axis, "inputs": {"x": x}}})
        jobs.append({"kind": "matmul", "backend": be, "params": {"a": {"random": {"shape": [3, 0], "seed": 1}},
                                                                 "b": {"random": {"shape": [0, 4], "seed": 2}}}})
        jobs.append({"kind": "matmul", "backend": be, "params": {"a": [[]], "b": [[]]}})
        jobs.append({"kind": "geodesic", "backend": be, "params": {"points": {"random": {"shape": [0, 2], "seed": 1}}}})
        jobs.append({"kind": "geodesic", "backend": be, "params": {"points": [[0, 0]], "layout": "condensed"}})
        for big in ([2 ** 31, 0], [0, 2 ** 62], [2 ** 40, 2 ** 40], [2 ** 62]):
            jobs.append({"kind": "map", "backend": be,
                         "params": {"expr": "x", "inputs": {"x": {"random": {"shape": big, "seed": 1}}}}})
            jobs.append({"kind": "reduce", "backend": be,
                         "params": {"op": "sum", "axis": 0, "inputs": {"x": {"random": {"shape": big, "seed": 1}}}}})
    for job in jobs:
        st, j = d.submit(job, wait=30)
        be = job["backend"]
        if be == "cuda" and not has_gpu:
            ok = st == 503 or error_ok(st, json.dumps(j).encode())
        elif st in (200, 202):
            ok = j is not None and j.get("status") in ("succeeded", "queued", "running") or (
                j.get("status") == "failed" and j.get("error", {}).get("code") not in ("internal", "crashed"))
        else:
            ok = error_ok(st, json.dumps(j).encode() if j else b"")
        check(ok, f"[shapes] {json.dumps(job)[:160]} -> {st} {json.dumps(j)[:200] if j else ''}")
        if not d.alive():
            break
    # the reproduction, and its answer
    st, j = d.submit({"kind": "reduce", "params": {"op": "sum", "axis": 0, "inputs": {"x": [[], []]}}}, wait=30)
    if check(st == 200 and j["status"] == "succeeded", f"[shapes] sum over axis 0 of [[],[]] -> {st}"):
        st, _, b = d.request("GET", f"/v1/jobs/{j['id']}/result")
        check(st == 200 and json.loads(b)["data"] == [], f"[shapes] its result -> {b[:100]!r}")


# ---- 5. framing -----------------------------------------------------------
def raw(d, data, wait=5):
    s = socket.create_connection(("127.0.0.1", d.port), timeout=wait)
    s.sendall(data)
    out = b""
    try:
        while True:
            k = s.recv(65536)
            if not k:
                break
            out += k
    except socket.timeout:
        out += b"<timeout>"
    s.close()
    return out


def phase_framing(d):
    P = b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    then = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    cases = [
        ("CL+TE", P + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("two CL", P + b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}", 400),
        ("TE space", P + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400),
        ("TE gzip", P + b"Transfer-Encoding: gzip\r\n\r\nabc", 501),
        ("no Host", b"GET /v1/jobs HTTP/1.1\r\n\r\n", 400),
        ("bad CL", P + b"Content-Length: 1x\r\n\r\n{}", 400),
    ]
    for name, req, status in cases:
        out = raw(d, req + then)
        first = out.split(b"\r\n", 1)[0]
        check(first.startswith(b"HTTP/1.1 %d" % status) and b'"status":"ok"' not in out
              and b"<timeout>" not in out, f"[framing] {name}: {first!r}, pipelined answered: {b'status' in out}")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        st, _, b = d.request("POST", "/v1/jobs", '{"kind":"map","params":{"expr":"x","inputs":{"x":[1]}}}',
                             {"Content-Type": ctype})
        check(error_ok(st, b, [415]), f"[framing] POST /v1/jobs as {ctype} -> {st}")
    st, _, b = d.request("POST", "/v1/jobs", '{"kind":"map","params":{"expr":"x","inputs":{"x":[1]}}}',
                         {"Content-Type": "application/json", "Origin": "https://evil.example"})
    check(error_ok(st, b, [403]), f"[framing] foreign Origin -> {st}")
    st, _, b = d.request("GET", "/v1/jobs", headers={"Host": "evil.example"})
    check(error_ok(st, b, [421]), f"[framing] Host evil.example -> {st}")
    out = raw(d, b"GARBAGE\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 4") or out == b"", f"[framing] a garbage request line -> {out[:40]!r}")
    out = raw(d, b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 4") or out == b"", f"[framing] a 100 KB URL -> {out[:40]!r}")
    out = raw(d, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: b\r\n" * 20000 + b"\r\n")
    check(out.startswith(b"HTTP/1.1 4") or out == b"", f"[framing] 20,000 headers -> {out[:40]!r}")


# ---- 6. floods and slow clients -------------------------------------------
def phase_floods(d):
    socks = []
    for _ in range(150):
        s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    st, _, _ = d.request("GET", "/healthz", timeout=30)
    check(st in (200, 503), f"[floods] a probe while 150 connections trickle -> {st}")
    # the header deadline (2 s here) cuts every trickler
    t0 = time.time()
    left = list(socks)
    while left and time.time() - t0 < 20:
        for s in list(left):
            try:
                s.setblocking(False)
                k = s.recv(4096)
                if k == b"" or b"408" in k:
                    left.remove(s)
                    continue
            except BlockingIOError:
                pass
            except OSError:
                left.remove(s)
                continue
            try:
                s.send(b"X")
            except OSError:
                left.remove(s)
        time.sleep(0.3)
    check(not left, f"[floods] {len(left)} of 150 trickling connections still open after 20 s")
    for s in socks:
        s.close()
    # 300 short requests at once: each gets an HTTP answer
    results = []

    def one():
        try:
            out = raw(d, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", wait=20)
        except OSError as e:
            out = repr(e).encode()
        results.append(out[:12])
    th = [threading.Thread(target=one) for _ in range(300)]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    silent = [r for r in results if not (r.startswith(b"HTTP/1.1 200") or r.startswith(b"HTTP/1.1 503"))]
    check(len(results) == 300 and not silent, f"[floods] {len(silent)} of 300 requests got no answer: {silent[:3]}")
    # a slow reader of a large result
    st, j = d.submit({"kind": "map", "params": {"expr": "x*2", "inputs": {"x": {"range": {"stop": 2000000}}}}}, wait=60)
    if check(st == 200, f"[floods] 16 MB result -> {st}"):
        s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        s.sendall(b"GET /v1/jobs/%s/result?format=npy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % j["id"].encode())
        s.recv(1024)
        time.sleep(2)  # read nothing for a while
        st2, _, _ = d.request("GET", "/healthz")
        check(st2 == 200, f"[floods] /healthz while a reader stalls -> {st2}")
        s.close()


# ---- 7. a small tmpfs data dir ----------------------------------------------
def phase_tmpfs(binary):
    global skipped
    if os.geteuid() != 0:
        print("SKIPPED: tmpfs phase: not root")
        skipped += 1
        return
    mnt = tempfile.mkdtemp(prefix="tessel-hostile-tmpfs-")
    if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt]) != 0:
        print("SKIPPED: tmpfs phase: mount failed")
        skipped += 1
        return
    try:
        d = Daemon(binary, data=mnt, extra=["--header-timeout", "2"])
        d.start()
        st, j = d.submit({"kind": "map", "params": {"expr": "x*2", "inputs": {"x": {"range": {"stop": 10000000}}}}},
                         wait=60)
        ok = (st == 200 and j["status"] == "failed" and j["error"]["code"] in ("resource_exhausted", "io_error")) \
            or (st == 507)
        check(ok, f"[tmpfs] an 80 MB result on a 64 MiB disk -> {st} {json.dumps(j)[:200] if j else ''}")
        st, _, b = d.request("POST", "/v1/arrays", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (9000000,), }",
                                                       b"\0" * 72000000), {"Content-Type": "application/x-npy"})
        check(st in (507, 413, 503) and json_error(b),
              f"[tmpfs] a 72 MB upload -> {st} {b[:200]!r}")
        st, j = d.submit({"kind": "map", "params": {"expr": "x+1", "inputs": {"x": [1, 2]}}}, wait=30)
        check(st == 200 and j["status"] == "succeeded", f"[tmpfs] a small job afterwards -> {st}")
        invariants(d, "tmpfs")
        d.stop()
        d.start()  # a restart must not crash on what the full disk left
        invariants(d, "tmpfs-restart")
        d.stop()
        rep = d.sanitizer_report()
        check(rep is None, f"[tmpfs] sanitizer report after SIGTERM:\n{rep}")
    finally:
        subprocess.call(["umount", "-l", mnt])
        os.rmdir(mnt)


# ---- 8. kill -9 during writes ----------------------------------------------
def phase_kill(d):
    rnd = random.Random(9)
    for rnd_i in range(3):
        stop = threading.Event()

        def writer(k):
            i = 0
            while not stop.is_set() and i < 200:
                i += 1
                if k % 2:
                    data = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (%d,), }" % (1000 + i),
                               struct.pack("<%dd" % (1000 + i), *range(1000 + i)))
                    d.request("POST", "/v1/arrays", data, {"Content-Type": "application/x-npy"}, timeout=5)
                else:
                    d.submit({"kind": "map", "params": {"expr": "x*3", "inputs": {"x": {"range": {"stop": 200000 + i}}}}})
        th = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in th:
            t.start()
        time.sleep(0.3 + rnd.random())
        d.proc.kill()
        d.proc.wait()
        stop.set()
        for t in th:
            t.join(30)
        d.log.close()
        d.start()
        invariants(d, f"kill-9 round {rnd_i + 1}")
    # every listed array downloads whole
    st, _, b = d.request("GET", "/v1/arrays?limit=1000")
    arrays = json.loads(b)["arrays"] if st == 200 else []
    bad = 0
    for a in arrays:
        st, _, data = d.request("GET", f"/v1/arrays/{a['id']}/data?format=npy")
        if st != 200 or len(data) < a["bytes"]:
            bad += 1
    check(st == 200 or not arrays, "[kill-9] listing arrays")
    check(bad == 0, f"[kill-9] {bad} of {len(arrays)} listed arrays do not download whole")


def main():
    binary = sys.argv[1]
    d = Daemon(binary, extra=["--header-timeout", "2", "--per-ip-limit", "64"])
    d.start()
    phases = [("json", phase_json), ("expressions", phase_expr), ("uploads", phase_uploads),
              ("shapes", phase_shapes), ("framing", phase_framing), ("floods", phase_floods),
              # a second tesseld on the data directory or port is refused
              ("datadir", __import__("phase_datadir").phase),
              # a malformed Content-Length gets one answer
              ("content-length", __import__("phase_server").phase)]
    for name, fn in phases:
        t0 = time.time()
        try:
            fn(d)
        except Exception as e:  # a harness error is a failure, not a crash of the suite
            check(False, f"[{name}] the phase raised {e!r} (last input: {d.last_input})")
        invariants(d, name)
        print(f"phase {name}: {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    try:
        phase_kill(d)
    except Exception as e:
        check(False, f"[kill-9] the phase raised {e!r}")
    print(f"phase kill-9: {time.time() - t0:.1f} s", flush=True)
    d.stop()
    rep = d.sanitizer_report()  # LeakSanitizer reports at a clean exit
    check(rep is None, f"[exit] sanitizer report after SIGTERM:\n{rep}")
    try:
        phase_tmpfs(binary)
    except Exception as e:
        check(False, f"[tmpfs] the phase raised {e!r}")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    if failed == 0:
        subprocess.call(["rm", "-rf", d.data])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
