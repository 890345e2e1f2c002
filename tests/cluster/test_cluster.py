#!/usr/bin/python3
"""tests/cluster/test_cluster.py — Tessel as several nodes on one PostgreSQL
store, judged as issue 14 says: a PostgreSQL server of its own (any major)
(tests/cluster/pgserver.sh, on a Unix socket in a temporary directory, run
as the postgres user) and three tesseld nodes on one shared data directory.

  python3 tests/cluster/test_cluster.py build/tesseld

Phases (each says what it asserts where it runs):
  1. bad configuration (the store made by one node that then stopped, so
     that nothing else writes to it): an unreachable store, a wrong
     password (a role with a password and scram-sha-256 for it in
     pg_hba.conf), a schema newer than the binary, a node on another data
     directory -> the node exits non-zero at start with a clear message and
     without the password, and the store's data (a pg_dump) is what it was;
  2. 2,000 small jobs (map, reduce, matmul with answers computed here)
     submitted through random nodes by 8 threads while one node is killed
     with kill -9 and started again: every accepted job ends succeeded
     exactly once (the nodes' JSON logs: one succeeded job_end per job, a
     run whose end the node fence refused not counted), with the right
     result read from every node, and no job ran on two nodes at once
     (every run's span from its job_start and job_end lines; a run the
     kill cut ends at the kill);
  3. across nodes: the same request_id through two nodes is one job (the
     second answer 200 with the first's id); ?wait on one node for a job
     another node runs answers 200 when it ends; cancel through a node
     that does not hold a running job answers 202 and the job ends
     canceled;
  4. a cuda job on a cluster without a GPU node -> 503 naming the backend;
     with one (the GPU machine, TESSEL_CLUSTER_GPU_N0=1: only n0 sees the
     GPU), submitted to n1 it runs on n0 on cuda, its result right;
  5. a split geodesic job runs tiles on at least two nodes and its result
     equals, byte for byte, the same job on a one-node SQLite tesseld;
  6. PostgreSQL stopped and started again under load: every node answers
     /readyz 503 while it is down and 200 after, and every job accepted
     before, during or after succeeds;
  7. expiry runs once: with a short --job-ttl on every node, each expired
     result file is removed by exactly one node and no node logs an error.
Only n0 splits (--split-min-pairs 1000): a split is decided by the node a
job is submitted to, so the long jobs of phase 3 go to n1 and n2 whole.
No wall-clock time is asserted: waits have deadlines only so that a bug
fails instead of hanging.

Exit 0 when every check passed, 1 otherwise; 77 (skipped, with the reason)
only when no PostgreSQL server (deps/: postgresql-15 or -16) is installed.
"""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PGS = os.path.join(HERE, "pgserver.sh")
# PG_BIN: the server's binaries (pgserver.sh reads the same variable), for
# a machine where they are not installed in Debian's place (the GPU
# machine: tests/cluster/pack_pg.sh).
# Else the newest installed major (Debian 12: 15, Ubuntu 24.04: 16), as
# pgserver.sh picks it.
def newest_pg_bin():
    def major(d):
        name = os.path.basename(os.path.dirname(d))
        return int(name) if name.isdigit() else -1
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major)
    return found[-1] if found else "/usr/lib/postgresql/NONE/bin"


PG_BIN = os.environ.get("PG_BIN") or newest_pg_bin()
# TESSEL_CLUSTER_GPU_N0=1: n1 and n2 see no GPU (CUDA_VISIBLE_DEVICES=""),
# so that on a GPU machine phase 4 proves a cuda job submitted to a node
# without one runs on n0, the node with one.
GPU_N0 = os.environ.get("TESSEL_CLUSTER_GPU_N0") == "1"
SPLIT = ["--split-min-pairs", "1000", "--tiles", "6"]  # n0 only

failures = []


def check(cond, what):
    if cond:
        print("ok   " + what, flush=True)
    else:
        print("FAIL " + what, flush=True)
        failures.append(what)
    return cond


# ---- HTTP ------------------------------------------------------------------
def http(port, method, path, body=None, timeout=90):
    """(status, headers, body bytes); status 0 when the node is unreachable."""
    data = None
    headers = {}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(
        "http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
        headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0, {}, b""


def jget(port, path, timeout=90):
    st, _, b = http(port, "GET", path, timeout=timeout)
    return st, (json.loads(b) if b and st else None)


# ---- PostgreSQL ----------------------------------------------------------------
def pg(cmd, pgdir):
    out = subprocess.run(["sh", PGS, cmd, pgdir], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("pgserver.sh %s: %s" % (cmd, out.stderr.strip()))
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def psql(pgdir, sql, db="tessel"):
    out = subprocess.run(
        ["runuser", "-u", "postgres", "--", PG_BIN + "/psql", "-h", pgdir, "-d", db, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("psql: " + out.stderr.strip())
    return out.stdout


def dump(pgdir):
    """The store's data as text (to compare before/after a refused start)."""
    out = subprocess.run(
        ["runuser", "-u", "postgres", "--", PG_BIN + "/pg_dump", "-h", pgdir,
         "-d", "tessel", "--data-only", "--inserts", "--no-comments"],
        capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("pg_dump: " + out.stderr.strip())
    return "\n".join(sorted(l for l in out.stdout.splitlines()
                            if l.startswith("INSERT")))


# ---- nodes ------------------------------------------------------------------
class Node:
    def __init__(self, binary, tmp, name, store, data, extra=(), env=None):
        self.binary, self.tmp, self.name = binary, tmp, name
        self.store, self.data, self.extra = store, data, list(extra)
        self.env = env  # None: this process's environment
        self.proc = None
        self.port = None
        self.incarnation = 0
        self.logs = []

    def argv(self):
        return [self.binary, "--port", "0", "--data-dir", self.data,
                "--store", self.store, "--node-name", self.name,
                "--lease-s", "2", "--log-format", "json", "--threads", "2",
                "--access-log", "0"] + self.extra

    def start(self):
        self.incarnation += 1
        log = os.path.join(self.tmp, "%s.%d.log" % (self.name, self.incarnation))
        self.logs.append(log)
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE,
                                     stderr=open(log, "w"), env=self.env)
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.proc.wait(timeout=10)
            raise RuntimeError("node %s did not start: %s" %
                               (self.name, open(log).read()[-2000:]))
        self.port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
        # Keep draining stdout so that the node never blocks on it.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return time.time() * 1000

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def events(self, what):
        out = []
        for inc, path in enumerate(self.logs, 1):
            with open(path, errors="replace") as f:
                for line in f:
                    if not line.startswith("{"):
                        continue
                    try:
                        d = json.loads(line)
                    except ValueError:
                        continue
                    if d.get("event") == what or d.get("msg") == what:
                        d["_inc"] = (self.name, inc)
                        out.append(d)
        return out


def start_fails(binary, tmp, store, data, what, expect):
    """A node that must refuse to start: non-zero exit, `expect` in its
    message, the URL's password nowhere."""
    log = os.path.join(tmp, "refused.log")
    p = subprocess.run([binary, "--port", "0", "--data-dir", data, "--store",
                        store, "--node-name", "refused"],
                       stdout=subprocess.PIPE, stderr=open(log, "w"),
                       timeout=60)
    msg = open(log).read()
    check(p.returncode != 0, "%s: the node exits non-zero (%d)" %
          (what, p.returncode))
    said = [l for l in msg.splitlines() if expect.lower() in l.lower()]
    check(said, "%s: the message says %r (%s)" %
          (what, expect, said[:1] or msg.strip().splitlines()[-3:]))
    check("secret123" not in msg and "secret123" not in p.stdout.decode(),
          "%s: no password in what it prints" % what)


# ---- jobs with known answers ---------------------------------------------------
def job_of(i):
    """Job i's request body and its expected result (JSON data)."""
    a, b = i % 97, i % 13 + 1
    k = i % 3
    if k == 0:
        x = [a, a + 1.5, -a]
        return ({"kind": "map", "backend": "cpu",
                 "params": {"expr": "x * %d + 1" % b, "inputs": {"x": x}}},
                [v * b + 1 for v in x])
    if k == 1:
        x = [a, b, a * b, 7]
        return ({"kind": "reduce", "backend": "serial",
                 "params": {"op": "sum", "inputs": {"x": x}}},
                float(sum(x)))
    m = [[a, 1], [0, b]]
    n = [[1, 2], [3, 4]]
    return ({"kind": "matmul", "backend": "cpu",
             "params": {"a": m, "b": n}},
            [[a * 1 + 1 * 3, a * 2 + 1 * 4], [b * 3, b * 4]])


def same(got, want):
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same(g, w) for g, w in zip(got, want))
    return isinstance(got, (int, float)) and abs(got - want) <= 1e-9 * max(
        1.0, abs(want))


def wait_final(ports, ids, deadline_s=240):
    """{id: job} once every job is final (or the deadline passed)."""
    final = {}
    end = time.time() + deadline_s
    pending = list(ids)
    while pending and time.time() < end:
        nxt = []
        for jid in pending:
            st, d = jget(random.choice(ports), "/v1/jobs/%s" % jid)
            if st == 200 and d["status"] in ("succeeded", "failed", "canceled"):
                final[jid] = d
            else:
                nxt.append(jid)
        pending = nxt
        if pending:
            time.sleep(0.5)
    return final


# ---- phases --------------------------------------------------------------------
def phase_bad_config(binary, tmp, pgdir, url, data):
    """Run while no node is up: nothing else writes to the store, so its
    dump before and after each refused start must be equal."""
    psql(pgdir, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE "
         "rolname='pwuser') THEN CREATE ROLE pwuser LOGIN PASSWORD "
         "'right-one'; END IF; END $$; GRANT ALL ON DATABASE tessel TO pwuser;"
         " GRANT ALL ON SCHEMA public TO pwuser;")
    hba = os.path.join(pgdir, "data", "pg_hba.conf")
    text = open(hba).read()
    if "pwuser" not in text:  # first match wins: scram for pwuser only
        with open(hba, "w") as f:
            f.write("local all pwuser scram-sha-256\n" + text)
        psql(pgdir, "SELECT pg_reload_conf()")
    before = dump(pgdir)
    check("INSERT INTO public.jobs" in before,
          "bad configuration: the store has the first node's jobs to keep")
    start_fails(binary, tmp, "postgresql:///tessel?host=%s/nowhere&user=postgres"
                "&password=secret123&connect_timeout=2" % tmp, data,
                "unreachable store", "PostgreSQL")
    check(dump(pgdir) == before, "unreachable store: the store is unchanged")
    start_fails(binary, tmp, "postgresql:///tessel?host=%s&user=pwuser"
                "&password=secret123" % pgdir, data, "wrong password",
                "password")
    check(dump(pgdir) == before, "wrong password: the store is unchanged")
    psql(pgdir, "INSERT INTO schema_migrations(version, applied_at) "
         "VALUES (9999, 0)")
    mid = dump(pgdir)
    start_fails(binary, tmp, url, data, "a newer schema", "newer")
    check(dump(pgdir) == mid, "a newer schema: the store is unchanged")
    psql(pgdir, "DELETE FROM schema_migrations WHERE version = 9999")
    other = os.path.join(tmp, "other-data")
    os.makedirs(other, exist_ok=True)
    start_fails(binary, tmp, url, other, "another data directory",
                "data director")
    check(dump(pgdir) == before,
          "another data directory: the store is unchanged")


def phase_many_jobs(nodes):
    n_jobs = 2000
    ports = lambda: [n.port for n in nodes]
    accepted = {}  # request_id -> (id, expected)
    lock = threading.Lock()
    errors = []
    counter = iter(range(n_jobs))
    kill = {"at": None, "restarted": False}
    victim = nodes[2]

    def submit(i):
        body, want = job_of(i)
        body["request_id"] = "many-%d" % i
        for _ in range(60):  # another node on a failure: same request_id
            st, _, b = http(random.choice(ports()), "POST", "/v1/jobs", body,
                            timeout=30)
            if st in (200, 201, 202):
                with lock:
                    accepted[body["request_id"]] = (json.loads(b)["id"], want)
                return
            if st not in (0, 503, 429):
                errors.append("job %d: %d %s" % (i, st, b[:200]))
                return
            time.sleep(0.2)
        errors.append("job %d: never accepted" % i)

    def worker():
        for i in counter:
            submit(i)
            if i == n_jobs // 3 and kill["at"] is None:
                kill["at"] = victim.kill9()
                time.sleep(0.5)
                victim.start()
                kill["restarted"] = True

    ths = [threading.Thread(target=worker, daemon=True) for _ in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    check(not errors, "2000 jobs: every submit accepted (%s)" % errors[:3])
    check(kill["at"] is not None and kill["restarted"],
          "2000 jobs: a node was killed with kill -9 and started again")
    ids = {v[0]: v[1] for v in accepted.values()}
    check(len(ids) == len(accepted) == n_jobs,
          "2000 jobs: one job per request (%d ids for %d requests)" %
          (len(ids), len(accepted)))
    final = wait_final(ports(), list(ids))
    bad = [j for j in ids if final.get(j, {}).get("status") != "succeeded"]
    check(not bad, "2000 jobs: every accepted job succeeded (%d did not: %s)"
          % (len(bad), [(j, final.get(j, {}).get("status"),
                          final.get(j, {}).get("error")) for j in bad[:3]]))
    # The right result of every job, read from every node (8 readers).
    wrong, wlock = [], threading.Lock()
    work = iter(list(ids.items()))

    def reader():
        for jid, want in work:
            for n in nodes:
                st, d = jget(n.port, "/v1/jobs/%s/result" % jid)
                if st != 200 or not same(d.get("data"), want):
                    with wlock:
                        wrong.append((jid, n.name, st))
    rs = [threading.Thread(target=reader, daemon=True) for _ in range(8)]
    for t in rs:
        t.start()
    for t in rs:
        t.join()
    check(not wrong, "2000 jobs: every job's right result read from each of "
          "the %d nodes (%d wrong: %s)" % (len(nodes), len(wrong), wrong[:3]))
    # Exactly one succeeded end per job, over every node's logs.
    # Every run's span: job_start to its job_end, or to its job_dropped (a
    # run whose end the store refused: the node fence, after its lease went
    # to another node); a start with neither in the killed incarnation is a
    # run the kill cut, ending at the kill.
    spans, cut_runs = {}, set()
    for n in nodes:
        starts = {}
        for ev in n.events("job_start"):
            starts[(ev["_inc"], ev.get("id"), ev.get("attempt"))] = ev
        for ev in n.events("job_end") + n.events("job_dropped"):
            key = (ev["_inc"], ev.get("id"), ev.get("attempt"))
            st = starts.pop(key, None)
            t0 = st["started"] if st else ev.get("started")
            if t0 is not None:
                spans.setdefault(ev.get("id"), []).append(
                    (t0, ev.get("finished"), ev["_inc"]))
        for (inc, jid, att), st in starts.items():
            cut = kill["at"] if inc == (victim.name, 1) else None
            if cut is not None:
                cut_runs.add((jid, att))
            spans.setdefault(jid, []).append((st["started"], cut, inc))
    # Exactly one succeeded end per job. job_end is written once the end is
    # committed, so kill -9 can fall between a commit and its line: a job
    # with no succeeded line counts once only when the store says the
    # killed node ended it in the run the kill cut (same node, same attempt).
    ends = {}
    for n in nodes:
        for ev in n.events("job_end"):
            ends.setdefault(ev.get("id"), []).append(ev)
    twice, unlogged = [], 0
    for j in ids:
        k = sum(1 for e in ends.get(j, []) if e.get("status") == "succeeded")
        f = final.get(j, {})
        if k == 0 and f.get("node") == victim.name and \
                (j, f.get("attempts")) in cut_runs:
            unlogged += 1
        elif k != 1:
            twice.append(j)
    check(not twice, "2000 jobs: each succeeded exactly once in the logs "
          "(%d not: %s)" % (len(twice), [
              (j, [(e["_inc"], e.get("status"), e.get("attempt"))
                   for e in ends.get(j, [])],
               final.get(j, {}).get("node"), final.get(j, {}).get("attempts"))
              for j in twice[:3]]))
    print("     (%d job(s) ended by the killed node just before the kill, "
          "their line lost with it)" % unlogged)
    misnamed = [(n.name, ev.get("node")) for n in nodes
                for ev in n.events("job_start") + n.events("job_end")
                if ev.get("node") != n.name]
    check(not misnamed, "2000 jobs: every job_start/job_end line names its "
          "node (%s)" % misnamed[:3])
    have_spans = sum(1 for j in ids if j in spans)
    check(have_spans == len(ids),
          "2000 jobs: every job's run is in the logs (%d of %d)" %
          (have_spans, len(ids)))
    overlap = []
    for jid, sp in spans.items():
        sp.sort(key=lambda s: s[0])
        for a, b in zip(sp, sp[1:]):
            if a[1] is None or a[1] > b[0]:
                overlap.append((jid, a, b))
    check(not overlap, "2000 jobs: no job ran on two nodes at once (%s)" %
          overlap[:2])
    reran = sum(1 for d in final.values() if d.get("attempts", 1) > 1)
    print("     (%d jobs ran again after the kill)" % reran)


def long_body(seed, n):
    """A geodesic job that keeps one worker busy a while: every pair of n
    points, serial (submitted to n1/n2, which do not split)."""
    return {"kind": "geodesic", "backend": "serial",
            "params": {"points": {"random": {"shape": [n, 2], "low": -60,
                                             "high": 60, "seed": seed}},
                       "query": {"rowwise": {"op": "sum"}}}}


def running_on(ports, jid, deadline_s=60):
    """The name of the node running job jid, once it runs (None: never)."""
    end = time.time() + deadline_s
    while time.time() < end:
        st, d = jget(random.choice(ports), "/v1/jobs/%s" % jid)
        if st == 200 and d["status"] == "running" and d.get("node"):
            return d["node"]
        if st == 200 and d["status"] in ("succeeded", "failed", "canceled"):
            return None
        time.sleep(0.05)
    return None


def phase_across(nodes):
    by_name = {n.name: n for n in nodes}
    ports = [n.port for n in nodes]
    # Idempotency: one request_id through two nodes is one job.
    body = {"kind": "map", "backend": "cpu", "request_id": "across-1",
            "params": {"expr": "x * 3", "inputs": {"x": [1, 2, 3]}}}
    st1, _, b1 = http(nodes[0].port, "POST", "/v1/jobs?wait=30", body)
    st2, _, b2 = http(nodes[1].port, "POST", "/v1/jobs", body)
    d1 = json.loads(b1) if b1 else {}
    d2 = json.loads(b2) if b2 else {}
    # API.md: a submit without ?wait answers 202 (even for an ended job),
    # the replay of a request_id the original job.
    check(st1 == 200 and st2 == 202 and d1.get("id") and
          d1.get("id") == d2.get("id") and d2.get("status") == "succeeded",
          "across nodes: one request_id through n0 (?wait: 200) then n1 "
          "(202) is one job, succeeded (%d %s, %d %s %s)" %
          (st1, d1.get("id"), st2, d2.get("id"), d2.get("status")))
    st4, _, b4 = http(nodes[2].port, "POST", "/v1/jobs?wait=30", body)
    d4 = json.loads(b4) if b4 else {}
    check(st4 == 200 and d4.get("id") == d1.get("id"),
          "across nodes: its replay through n2 with ?wait is the same job, "
          "200 (%d %s)" % (st4, d4.get("id")))
    st, d = jget(nodes[0].port, "/v1/jobs?limit=200")
    same_key = [j for j in (d or {}).get("jobs", [])
                if j.get("request_id") == "across-1"]
    check(len(same_key) == 1, "across nodes: one job listed with that "
          "request_id (%d)" % len(same_key))
    st3, _, b3 = http(nodes[2].port, "POST", "/v1/jobs",
                      dict(body, params={"expr": "x * 4",
                                         "inputs": {"x": [1, 2, 3]}}))
    check(st3 == 409, "across nodes: the same request_id with another body "
          "through n2 -> 409 (%d %s)" % (st3, b3[:120]))
    # ?wait on a node that does not run the job.
    st, _, b = http(nodes[1].port, "POST", "/v1/jobs", long_body(1, 2500))
    jid = json.loads(b)["id"] if st == 202 else None
    holder = running_on(ports, jid) if jid else None
    check(holder in by_name, "across nodes: a long job runs (%s on %s)" %
          (jid, holder))
    if holder in by_name:
        other = [n for n in nodes if n.name != holder][0]
        for _ in range(4):  # ?wait is at most 60 s (API.md)
            st, d = jget(other.port, "/v1/jobs/%s?wait=60" % jid, timeout=90)
            if st != 200 or d["status"] != "running":
                break
        check(st == 200 and d["status"] == "succeeded" and
              d.get("node") == holder,
              "across nodes: ?wait on %s for the job %s ran answers 200 "
              "succeeded when it ends (%d %s)" %
              (other.name, holder, st, d and d.get("status")))
    # Cancel through a node that does not hold the running job.
    st, _, b = http(nodes[2].port, "POST", "/v1/jobs", long_body(2, 6000))
    jid = json.loads(b)["id"] if st == 202 else None
    holder = running_on(ports, jid) if jid else None
    check(holder in by_name, "across nodes: a job to cancel runs (%s on %s)"
          % (jid, holder))
    if holder in by_name:
        other = [n for n in nodes if n.name != holder][0]
        st, _, b = http(other.port, "POST", "/v1/jobs/%s/cancel" % jid)
        check(st == 202, "across nodes: cancel through %s of a job %s runs "
              "-> 202 (%d %s)" % (other.name, holder, st, b[:160]))
        st, d = jget(other.port, "/v1/jobs/%s?wait=60" % jid, timeout=90)
        check(st == 200 and d["status"] == "canceled",
              "across nodes: the job %s ran ends canceled (%d %s)" %
              (holder, st, d and d.get("status")))


def phase_cuda(nodes):
    """API.md, Nodes: a cuda job is refused 503 when no live node has a GPU,
    else accepted and run by a GPU node: submitted to a node without one
    (TESSEL_CLUSTER_GPU_N0 on a GPU machine), it runs on one that has."""
    st, d = jget(nodes[1].port, "/v1/nodes")
    live = [x for x in (d or {}).get("nodes", []) if x.get("alive")]
    gpus = sum(x.get("gpus") or 0 for x in live)
    with_gpu = sorted(x["name"] for x in live if x.get("gpus"))
    without = [n for n in nodes if n.name not in with_gpu]
    via = without[0] if without else nodes[0]
    x = [float(i) for i in range(1000)]
    st, _, b = http(via.port, "POST", "/v1/jobs?wait=30",
                    {"kind": "map", "backend": "cuda",
                     "params": {"expr": "x*x+1", "inputs": {"x": x}}})
    d = json.loads(b) if b else {}
    if gpus == 0:
        check(st == 503 and (d.get("error") or {}).get("field") == "backend",
              "a cuda job with no GPU node: 503 naming the backend (%d %s)" %
              (st, b[:160]))
        return
    used = (d.get("backend") or {}).get("used") or ""
    check(st == 200 and d.get("status") == "succeeded" and
          used.startswith("cuda") and d.get("node") in with_gpu,
          "a cuda job submitted to %s (%s GPU) with %d GPU(s) in the cluster: "
          "run on %s by %s (%d %s)" %
          (via.name, "a" if via.name in with_gpu else "no", gpus,
           d.get("node"), used, st, b[:160]))
    if st == 200 and d.get("status") == "succeeded":
        st, r = jget(via.port, "/v1/jobs/%s/result" % d["id"])
        got = (r or {}).get("data")
        check(got == [v * v + 1 for v in x],
              "the cuda job's result, read through %s, is x*x+1" % via.name)


def geodesic_body():
    return {"kind": "geodesic", "backend": "cpu",
            "params": {"points": {"random": {"shape": [300, 2], "low": -60,
                                             "high": 60, "seed": 7}},
                       "targets": {"random": {"shape": [200, 2], "low": -60,
                                              "high": 60, "seed": 8}}}}


def phase_split(nodes, solo):
    st, d = None, None
    st, _, b = http(nodes[0].port, "POST", "/v1/jobs?wait=60", geodesic_body())
    d = json.loads(b) if b else {}
    check(st == 200 and d.get("status") == "succeeded",
          "split job: succeeded (%s %s)" % (st, d.get("status")))
    tiles = d.get("tiles") or {}
    by = tiles.get("by_node") or {}
    check(tiles.get("total", 0) >= 2 and tiles.get("done") == tiles.get("total"),
          "split job: every tile done (%s)" % tiles)
    check(len([k for k, v in by.items() if v > 0]) >= 2,
          "split job: tiles ran on at least two nodes (%s)" % by)
    st1, _, mine = http(nodes[1].port, "GET",
                        "/v1/jobs/%s/result?format=npy" % d.get("id"))
    st2, _, b2 = http(solo.port, "POST", "/v1/jobs?wait=60", geodesic_body())
    sid = json.loads(b2)["id"] if st2 == 200 else None
    st3, _, ref = http(solo.port, "GET", "/v1/jobs/%s/result?format=npy" % sid)
    check(st1 == 200 and st3 == 200 and mine == ref and len(mine) > 300 * 200 * 8,
          "split job: result equals the one-node SQLite result byte for byte")


def phase_pg_restart(nodes, pgdir):
    ports = [n.port for n in nodes]
    accepted, errors = [], []
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            body, want = job_of(10000 + i)
            st, _, b = http(random.choice(ports), "POST", "/v1/jobs", body,
                            timeout=30)
            if st in (201, 202):
                accepted.append((json.loads(b)["id"], want))
            elif st not in (503, 0):
                errors.append((st, b[:200]))
            i += 1
            time.sleep(0.02)

    # daemon: a phase that raises must not leave the process running
    ths = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    for t in ths:
        t.start()
    try:
        phase_pg_down_up(nodes, pgdir)
    finally:
        stop.set()
        for t in ths:
            t.join()
    check(not errors, "store down: submits get 503, never another error (%s)"
          % errors[:3])
    final = wait_final(ports, [a[0] for a in accepted])
    bad = [(j, final.get(j, {}).get("status"), final.get(j, {}).get("error"))
           for j, _ in accepted if final.get(j, {}).get("status") != "succeeded"]
    check(accepted and not bad,
          "store restarted under load: all %d accepted jobs succeeded (%s)"
          % (len(accepted), bad[:3]))
    wrong = []
    for jid, want in accepted:
        st, d = jget(random.choice(ports), "/v1/jobs/%s/result" % jid)
        if st != 200 or not same(d.get("data"), want):
            wrong.append((jid, st))
    check(not wrong, "store restarted under load: the right results (%s)"
          % wrong[:3])


def phase_pg_down_up(nodes, pgdir):
    """Stop PostgreSQL (the load of phase_pg_restart goes on): /readyz 503
    on every node; start it again: 200 on every node."""
    time.sleep(1.5)
    pg("stop", pgdir)
    seen503 = set()
    end = time.time() + 30
    while time.time() < end and len(seen503) < len(nodes):
        for n in nodes:
            if http(n.port, "GET", "/readyz", timeout=5)[0] == 503:
                seen503.add(n.name)
        time.sleep(0.2)
    check(len(seen503) == len(nodes),
          "store down: every node answers /readyz 503 (%s)" % sorted(seen503))
    time.sleep(1.0)
    pg("restart", pgdir)  # pg_ctl restart starts a stopped server
    ready = set()
    end = time.time() + 60
    while time.time() < end and len(ready) < len(nodes):
        for n in nodes:
            if http(n.port, "GET", "/readyz", timeout=5)[0] == 200:
                ready.add(n.name)
        time.sleep(0.2)
    check(len(ready) == len(nodes),
          "store back: every node answers /readyz 200 (%s)" % sorted(ready))
    time.sleep(2.0)  # load after the restart too


def phase_expiry(binary, tmp, url_expiry):
    """Three nodes with --result-ttl 3 on a fresh data directory and
    database: each job's result file is removed by exactly one node (the
    nodes' "expired N files" lines add up to one file a job)."""
    data = os.path.join(tmp, "data-expiry")
    os.makedirs(data)
    nodes = [Node(binary, tmp, "x%d" % i, url_expiry, data,
                  ["--result-ttl", "3"]).start() for i in range(3)]
    try:
        ids = []
        for i in range(12):
            body = {"kind": "map", "backend": "cpu",
                    "params": {"expr": "x*%d" % (i + 1),
                               "inputs": {"x": {"random": {"shape": [50000],
                                                           "seed": i}}}}}
            st, _, b = http(nodes[i % 3].port, "POST", "/v1/jobs?wait=30", body)
            if st == 200:
                ids.append(json.loads(b)["id"])
        check(len(ids) == 12, "expiry: 12 jobs with file results succeeded")
        files = [f for f in os.listdir(os.path.join(data, "results"))
                 if any(f.startswith(j) for j in ids)]
        end = time.time() + 90
        while time.time() < end:
            left = [f for f in os.listdir(os.path.join(data, "results"))
                    if any(f.startswith(j) for j in ids)]
            if not left:
                break
            time.sleep(1)
        check(files and not left, "expiry: every result file removed (%d left)"
              % len(left))
        gone = sum(1 for j in ids
                   if jget(nodes[0].port, "/v1/jobs/%s" % j)[0] == 404)
        check(gone == len(ids), "expiry: every expired job is gone (%d)" % gone)
    finally:
        for n in nodes:
            n.stop()
    removed, errs = 0, []
    for n in nodes:
        for path in n.logs:
            for line in open(path, errors="replace"):
                if "expired" in line and "files" in line:
                    try:
                        removed += int(json.loads(line).get("msg", "").split()[1])
                    except (ValueError, IndexError):
                        pass
                if '"level":"error"' in line.replace(" ", ""):
                    errs.append(line.strip()[:200])
    check(removed == len(ids),
          "expiry: the nodes removed %d files together, one a job (%d jobs)"
          % (removed, len(ids)))
    check(not errs, "expiry: no node logged an error (%s)" % errs[:2])


def main():
    if len(sys.argv) < 2:
        print("usage: test_cluster.py path/to/tesseld")
        return 2
    binary = os.path.abspath(sys.argv[1])
    if not os.path.exists(PG_BIN + "/postgres"):
        print("skipped: no PostgreSQL server (Debian postgresql-15, Ubuntu postgresql-16)")
        return 77
    tmp = tempfile.mkdtemp(prefix="tessel-cluster-")
    os.chmod(tmp, 0o755)
    pgdir = os.path.join(tmp, "pg")
    os.makedirs(pgdir)
    nodes, solo = [], None
    try:
        url = pg("start", pgdir)
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        # The store made by one node, with a few jobs, then left alone.
        first = Node(binary, tmp, "n0", url, data, SPLIT).start()
        for i in range(3):
            body, _ = job_of(i)
            st, _, _ = http(first.port, "POST", "/v1/jobs?wait=30", body)
            check(st == 200, "first node: job %d ran (%d)" % (i, st))
        first.stop()
        phase_bad_config(binary, tmp, pgdir, url, data)
        hide = dict(os.environ, CUDA_VISIBLE_DEVICES="") if GPU_N0 else None
        nodes = [first.start()] + [Node(binary, tmp, "n%d" % i, url, data,
                                        env=hide).start() for i in (1, 2)]
        phase_many_jobs(nodes)
        phase_across(nodes)
        phase_cuda(nodes)
        sdir = os.path.join(tmp, "solo")
        os.makedirs(sdir)
        solo = Node(binary, tmp, "solo", "sqlite:", sdir)
        solo.start()
        phase_split(nodes, solo)
        phase_pg_restart(nodes, pgdir)
        psql(pgdir, "CREATE DATABASE tessel_expiry", db="postgres")
        phase_expiry(binary, tmp, url.replace("/tessel?", "/tessel_expiry?"))
    finally:
        for n in nodes + ([solo] if solo else []):
            n.stop()
        try:
            pg("stop", pgdir)
        except Exception:  # noqa: BLE001 - cleanup must go on
            pass
        if failures:
            for n in nodes:
                for p in n.logs:
                    print("--- tail of " + p)
                    print("".join(open(p, errors="replace").readlines()[-15:]))
        if os.environ.get("TESSEL_KEEP_TMP"):
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d check(s) failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
