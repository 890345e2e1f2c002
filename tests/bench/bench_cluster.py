#!/usr/bin/python3
"""bench_cluster.py — what one, two and three nodes on PostgreSQL give
against one node on SQLite, in one run on one machine, for the jobs a
cluster adds the most overhead to: tiny `?wait` jobs (a map of 3 elements,
submit to answer).

  python3 tests/bench/bench_cluster.py build/tesseld [--seconds 8] [--clients 16]
          [--batch K] [--nodes 0,1,2,3] [--threads T] [--queue-limit N]
          [--waits] [--hops]

For each set-up it starts the nodes fresh (PostgreSQL: tests/cluster/
pgserver.sh, one database per set-up, one shared data directory), warms up,
then `--clients` threads submit `POST /v1/jobs?wait=30` round robin over
the nodes for `--seconds` (with `--batch K`: `POST /v1/jobs:batch?wait=30`
of K tiny jobs a request instead, jobs/s counting jobs; `--nodes` picks the
set-ups, 0 being the SQLite one; `--threads`: each node's worker threads,
2 by default as on the 2-core machine, more on a bigger one;
`--queue-limit`: each node's, when the batches in flight exceed the
default 10,000 and throughput, not admission, is measured). The table gives jobs/s, p50 and p99 latency,
the ratio of jobs/s to the one SQLite node, and where the CPU went (the
nodes' and the PostgreSQL server's processes, in cores and in CPU ms per
job, from /proc: the store's ms per job over its cores is where it
saturates; and this client's own, in cores: one Python process whose
threads share one GIL, so near 1.0 it is the client that limits). With --waits, what the server's backends were doing over the
measured run: pg_stat_activity sampled every 20 ms (wait event, state,
statement), as backends on average per row — a store that is not
CPU-bound shows here what it waits on (tests/bench/results/
pg-2core-2026-11-29b.md: a "Lock:object" on COMMIT was every notifying
commit of every node queued behind one lock). With --hops (and --batch),
the wait chain of a batch from its answered records: submit -> the first
row created, created -> started (the claim), started -> finished, the last
end -> the answer, and the share of its jobs the submitting node ran
(each as p50/p90 over the batches). Then
bench_claim (next to tesseld in the build directory) gives the claim rate
of the store alone. Results as markdown: --out FILE.
"""
import calendar
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PGS = os.path.join(HERE, "..", "cluster", "pgserver.sh")
# the server's binaries, as pgserver.sh finds them (PG_BIN: a carried pack)
PG_BIN = os.environ.get("PG_BIN") or "/usr/lib/postgresql/15/bin"
HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pids):
    t = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                parts = f.read().rsplit(")", 1)[1].split()
            t += int(parts[11]) + int(parts[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return t


def pg_pids(pgdir):
    """The PostgreSQL server's processes (the postmaster and its children)."""
    try:
        with open(os.path.join(pgdir, "data", "postmaster.pid")) as f:
            pm = int(f.readline())
    except (OSError, ValueError):
        return []
    pids = [pm]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                        pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


NODE_THREADS = ["2"]  # --threads T
NODE_EXTRA = []  # --queue-limit N


def start_node(binary, tmp, name, store, data, log):
    p = subprocess.Popen([binary, "--port", "0", "--data-dir", data, "--store",
                          store, "--node-name", name, "--access-log", "0",
                          "--threads", NODE_THREADS[0]] + NODE_EXTRA,
                         stdout=subprocess.PIPE, stderr=open(log, "w"))
    line = p.stdout.readline().decode()
    if "listening on" not in line:
        raise RuntimeError("%s did not start: %s" % (name, open(log).read()[-800:]))
    threading.Thread(target=p.stdout.read, daemon=True).start()
    return p, int(line.strip().rstrip("/").rsplit(":", 1)[1])


def submit(port):
    body = json.dumps({"kind": "map", "backend": "cpu",
                       "params": {"expr": "x+1", "inputs": {"x": [1, 2, 3]}}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/jobs?wait=30" % port,
                                 data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        d = json.loads(r.read())
        return r.status == 200 and d["status"] == "succeeded"


FAILED = []  # the first failed batch's jobs (submit_batch)
HOPS = []  # --hops: per batch, its hops in ms (batch_hops)
PORT_NODE = {}  # port -> its node's name (--hops: which node ran a job)


def iso_s(t):
    """An API timestamp ("2026-11-21T07:20:00.123Z") as epoch seconds."""
    return (calendar.timegm(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) +
            float("0" + t[19:].rstrip("Z")))


def batch_hops(sent, got, port, jobs):
    """One answered batch's wait chain in ms, from its records (the store's
    clock and this client's are one machine's): submit -> the first row
    created, each job's created -> started (its claim: queued, the notify,
    the claimer), started -> finished (its run and end), the last end -> the
    answer, and the share of its jobs the node that took the batch ran."""
    try:
        c = [iso_s(j["created_at"]) for j in jobs]
        st = [iso_s(j["started_at"]) for j in jobs]
        fi = [iso_s(j["finished_at"]) for j in jobs]
    except (KeyError, TypeError, ValueError):
        return
    me = PORT_NODE.get(port)
    HOPS.append(((min(c) - sent) * 1e3,
                 pct([b - a for a, b in zip(c, st)], 0.5) * 1e3,
                 (max(st) - min(c)) * 1e3,
                 pct([b - a for a, b in zip(st, fi)], 0.5) * 1e3,
                 (got - max(fi)) * 1e3,
                 sum(1 for j in jobs if j.get("node") == me) / len(jobs)))


HOP_NAMES = ["submit -> first row created", "created -> started (p50 of its jobs)",
             "first created -> last started", "started -> finished (p50)",
             "last finished -> answer", "share run by the submitting node"]


def hops_table(rows):
    """Each hop's p50 and p90 over the batches (ms; the last a share)."""
    out = ["| hop (per batch, %d batches) | p50 | p90 |" % len(rows), "|---|---|---|"]
    for i, name in enumerate(HOP_NAMES):
        v = [r[i] for r in rows]
        fmt = "%.2f" if i == 5 else "%.1f"
        out.append(("| %s | " + fmt + " | " + fmt + " |") %
                   (name, pct(v, 0.5), pct(v, 0.9)))
    return out


def submit_batch(port, k):
    """POST /v1/jobs:batch?wait=30 of k tiny jobs: True when every one
    succeeded."""
    one = {"kind": "map", "backend": "cpu",
           "params": {"expr": "x+1", "inputs": {"x": [1, 2, 3]}}}
    body = json.dumps({"jobs": [one] * k}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/jobs:batch?wait=30" % port,
                                 data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    sent = time.time()
    with urllib.request.urlopen(req, timeout=90) as r:
        d = json.loads(r.read())
        got = time.time()
        ok = (r.status == 200 and len(d["jobs"]) == k and
              all(j.get("status") == "succeeded" for j in d["jobs"]))
        if ok and PORT_NODE:
            batch_hops(sent, got, port, d["jobs"])
        if not ok and not FAILED:  # the first one, to say why
            bad = [j for j in d.get("jobs", []) if j.get("status") != "succeeded"]
            FAILED.append(json.dumps(bad[:2])[:600])
            sys.stderr.write("bench_cluster: a batch failed: %s\n" % FAILED[0])
        return ok


def drive_batch(ports, seconds, clients, k):
    """drive() with batches of k jobs a request: the latencies are per
    batch (len(lat) * k jobs)."""
    return drive(ports, seconds, clients, lambda port: submit_batch(port, k))


def drive(ports, seconds, clients, fn=submit):
    lat, bad = [], [0]
    lock = threading.Lock()
    end = time.time() + seconds

    def client(k):
        i = k
        mine = []
        while time.time() < end:
            t0 = time.perf_counter()
            try:
                ok = fn(ports[i % len(ports)])
            except Exception as x:  # noqa: BLE001 - counted, not fatal
                ok = False
                with lock:
                    if not FAILED:
                        FAILED.append(repr(x)[:600])
                        sys.stderr.write("bench_cluster: a request failed: %s\n"
                                         % FAILED[0])
            mine.append((time.perf_counter() - t0) * 1e3)
            if not ok:
                with lock:
                    bad[0] += 1
            i += 1
        with lock:
            lat.extend(mine)

    t0 = time.time()
    ths = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return lat, time.time() - t0, bad[0]


WAITS_SQL = """CREATE TEMP TABLE s(w text, st text, q text);
DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM pg_stat_clear_snapshot();
INSERT INTO s SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'),
 state, left(regexp_replace(query, '\\s+', ' ', 'g'), 60)
 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname IS NOT NULL;
PERFORM pg_sleep(0.02); END LOOP; END $$;
SELECT round(count(*) / %d.0, 2), w, st, q FROM s
 GROUP BY w, st, q ORDER BY 1 DESC LIMIT 16;"""


def waits_start(pgdir, db, seconds):
    """Sample the server's backends in the background (psql as postgres)
    for about `seconds`; waits_table(proc) gives the table."""
    n = max(1, int(seconds / 0.025))
    return subprocess.Popen(["runuser", "-u", "postgres", "--",
                             os.path.join(PG_BIN, "psql"), "-h", pgdir,
                             "-d", db, "-qAt", "-F", " | ",
                             "-c", WAITS_SQL % (n, n)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def waits_table(proc):
    out = proc.communicate(timeout=120)[0].strip().splitlines()
    return (["| backends | wait | state | statement |", "|---|---|---|---|"] +
            ["| %s |" % l.replace("`", "'") for l in out if " | " in l])


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    binary = os.path.abspath(args[0])
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 8
    clients = int(args[args.index("--clients") + 1]) if "--clients" in args else 16
    out = args[args.index("--out") + 1] if "--out" in args else None
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 0
    if "--queue-limit" in args:
        NODE_EXTRA[:] = ["--queue-limit",
                         str(int(args[args.index("--queue-limit") + 1]))]
    if "--threads" in args:
        NODE_THREADS[0] = str(int(args[args.index("--threads") + 1]))
    pick = ([int(x) for x in args[args.index("--nodes") + 1].split(",")]
            if "--nodes" in args else [0, 1, 2, 3])
    run = drive if not batch else (
        lambda ports, s, c: drive_batch(ports, s, c, batch))
    per = max(batch, 1)
    tmp = tempfile.mkdtemp(prefix="tessel-bcl-")
    os.chmod(tmp, 0o755)
    pgdir = os.path.join(tmp, "pg")
    os.makedirs(pgdir)
    rows = []
    waits = []
    hops = []
    try:
        url = subprocess.check_output(["sh", PGS, "start", pgdir], text=True).strip().splitlines()[-1]
        setups = [("SQLite, 1 node", 0), ("PostgreSQL, 1 node", 1),
                  ("PostgreSQL, 2 nodes", 2), ("PostgreSQL, 3 nodes", 3)]
        for label, n in setups:
            if n not in pick:
                continue
            data = os.path.join(tmp, "data-%d" % n)
            os.makedirs(data)
            if n:
                db = "bench%d" % n
                subprocess.check_call(["runuser", "-u", "postgres", "--",
                                       os.path.join(PG_BIN, "createdb"),
                                       "-h", pgdir, db])
                store = url.replace("/tessel?", "/%s?" % db)
            else:
                store = "sqlite:"
            procs = [start_node(binary, tmp, "b%d" % i, store, data,
                                os.path.join(tmp, "b%d-%d.log" % (n, i)))
                     for i in range(max(1, n))]
            ports = [p[1] for p in procs]
            run(ports, 1.0, clients)  # warm-up
            if "--hops" in args and batch:
                PORT_NODE.clear()
                PORT_NODE.update({p: "b%d" % i for i, p in enumerate(ports)})
                del HOPS[:]
            npids = [p[0].pid for p in procs]
            ppids = pg_pids(pgdir) if n else []
            c0n, c0p = cpu_ticks(npids), cpu_ticks(ppids)
            t0 = os.times()
            wp = (waits_start(pgdir, db, seconds * 0.8)
                  if n and "--waits" in args else None)
            lat, wall, bad = run(ports, seconds, clients)
            if PORT_NODE:
                hops += ["%s, the wait chain of a batch (--hops):" % label,
                         ""] + hops_table(HOPS) + [""]
                PORT_NODE.clear()
            if wp:
                waits.append("%s:" % label)
                waits += [""] + waits_table(wp) + [""]
            cn = (cpu_ticks(npids) - c0n) / HZ / wall
            cp = (cpu_ticks(ppids) - c0p) / HZ / wall if n else 0.0
            t1 = os.times()  # this client: its GIL is one core at most
            cc = (t1.user - t0.user + t1.system - t0.system) / wall
            # jobs/s counts the requests that succeeded whole (a refused
            # batch answers at once and is no throughput)
            rows.append((label, (len(lat) - bad) * per / wall, pct(lat, 0.5),
                         pct(lat, 0.99), cn, cp, bad, cc))
            for p, _ in procs:
                p.send_signal(signal.SIGTERM)
            for p, _ in procs:
                p.wait(timeout=60)
        claim = ""
        bc = os.path.join(os.path.dirname(binary), "bench_claim")
        if os.path.exists(bc) and "--no-claim" not in args:
            subprocess.check_call(["runuser", "-u", "postgres", "--",
                                   os.path.join(PG_BIN, "createdb"),
                                   "-h", pgdir, "claims"])
            claim = subprocess.run([bc, url.replace("/tessel?", "/claims?"),
                                    "4000", "1,2,4,8"], capture_output=True,
                                   text=True, timeout=600).stdout
    finally:
        subprocess.run(["sh", PGS, "stop", pgdir], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0][1] if rows and 0 in pick else 0
    lines = ["tiny ?wait jobs, %d clients, %s, %.0f s each, %d cores, load %s" %
             (clients, "batches of %d (p50/p99: a batch)" % batch if batch
              else "one job a request", seconds, os.cpu_count(),
              open("/proc/loadavg").read().split()[0]),
             "",
             "| set-up | jobs/s | p50 ms | p99 ms | vs SQLite | nodes' CPU (cores) | PostgreSQL CPU (cores) | nodes' CPU ms/job | PostgreSQL CPU ms/job | failed | client CPU (cores) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, rate, p50, p99, cn, cp, bad, cc in rows:
        lines.append("| %s | %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %.2f |" %
                     (label, rate, p50, p99, rate / base if base else 0, cn, cp,
                      1e3 * cn / rate if rate else 0,
                      1e3 * cp / rate if rate else 0, bad, cc))
    if hops:
        lines += [""] + hops
    if waits:
        lines += ["", "What the server's backends did (--waits; backends on "
                  "average):", ""] + waits
    if claim:
        lines += ["", "```", claim.rstrip(), "```"]
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0 if rows and all(r[6] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
