#!/usr/bin/python3
"""pg_profile.py — where the PostgreSQL server's time goes per tiny job:
pg_stat_statements over a run of tiny `?wait` jobs on N nodes.

  python3 tests/bench/pg_profile.py build/tesseld [--nodes 1] [--seconds 5]
          [--clients 16] [--batch 0] [--out FILE]

It starts a throwaway server (tests/cluster/pgserver.sh) with
pg_stat_statements preloaded (track = all, planning tracked), starts the
nodes (bench_cluster.start_node), warms up, resets the statistics, drives
the jobs (bench_cluster.drive; with --batch K: bench_cluster.drive_batch,
POST /v1/jobs:batch of K jobs then one jobs:get ?wait), and prints one row
per statement: calls per job, rows per call, mean and total execution and
planning ms, and the share of all statement time, next to the server's
CPU ms per job from /proc. Statement text is cut to 110 characters.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_cluster as bc  # noqa: E402

PSQL = os.path.join(bc.PG_BIN, "psql")  # PG_BIN: a carried pack


def psql(pgdir, db, sql):
    return subprocess.check_output(
        ["runuser", "-u", "postgres", "--", PSQL, "-h", pgdir, "-U", "postgres",
         "-d", db, "-At", "-F", "\t", "-c", sql], text=True)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2

    def opt(name, default, conv):
        return conv(args[args.index(name) + 1]) if name in args else default

    binary = os.path.abspath(args[0])
    nodes = opt("--nodes", 1, int)
    seconds = opt("--seconds", 5.0, float)
    clients = opt("--clients", 16, int)
    batch = opt("--batch", 0, int)
    out = opt("--out", None, str)
    tmp = tempfile.mkdtemp(prefix="tessel-pgprof-")
    os.chmod(tmp, 0o755)
    pgdir = os.path.join(tmp, "pg")
    os.makedirs(pgdir)
    procs = []
    try:
        url = subprocess.check_output(["sh", bc.PGS, "start", pgdir],
                                      text=True).strip().splitlines()[-1]
        with open(os.path.join(pgdir, "data", "postgresql.conf"), "a") as f:
            f.write("shared_preload_libraries = 'pg_stat_statements'\n"
                    "pg_stat_statements.track = all\n"
                    "pg_stat_statements.track_planning = on\n")
        subprocess.check_call(["sh", bc.PGS, "restart", pgdir])
        psql(pgdir, "tessel", "CREATE EXTENSION pg_stat_statements")
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        procs = [bc.start_node(binary, tmp, "p%d" % i, url, data,
                               os.path.join(tmp, "p%d.log" % i))
                 for i in range(nodes)]
        ports = [p[1] for p in procs]
        drive = bc.drive if not batch else (
            lambda ports, s, c: bc.drive_batch(ports, s, c, batch))
        drive(ports, 1.0, clients)  # warm-up
        psql(pgdir, "tessel", "SELECT pg_stat_statements_reset()")
        ppids = bc.pg_pids(pgdir)
        npids = [p[0].pid for p in procs]
        c0p, c0n = bc.cpu_ticks(ppids), bc.cpu_ticks(npids)
        lat, wall, bad = drive(ports, seconds, clients)
        cp = (bc.cpu_ticks(ppids) - c0p) / bc.HZ
        cn = (bc.cpu_ticks(npids) - c0n) / bc.HZ
        jobs = len(lat) * max(batch, 1)
        rows = psql(pgdir, "tessel",
                    "SELECT calls, rows, total_exec_time, total_plan_time,"
                    " regexp_replace(query, '\\s+', ' ', 'g')"
                    " FROM pg_stat_statements ORDER BY total_exec_time +"
                    " total_plan_time DESC LIMIT 25").splitlines()
    finally:
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["sh", bc.PGS, "stop", pgdir], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    parsed = []
    for r in rows:
        f = r.split("\t", 4)
        if len(f) == 5:
            parsed.append((int(f[0]), int(f[1]), float(f[2]), float(f[3]), f[4]))
    tot = sum(x[2] + x[3] for x in parsed) or 1
    lines = ["%d node(s), %d clients, %s, %.0f s: %d jobs (%.0f/s), %d failed;"
             " server CPU %.2f ms/job, nodes' CPU %.2f ms/job; statement time"
             " (exec + plan) %.2f ms/job" %
             (nodes, clients, "batches of %d" % batch if batch else "one job a request",
              wall, jobs, jobs / wall, bad, 1e3 * cp / max(jobs, 1),
              1e3 * cn / max(jobs, 1), tot / max(jobs, 1)),
             "",
             "| calls/job | rows/call | exec ms/call | plan ms/call | ms/job | share | statement |",
             "|---|---|---|---|---|---|---|"]
    for calls, nrows, ex, pl, q in parsed:
        lines.append("| %.2f | %.1f | %.3f | %.3f | %.3f | %.0f%% | `%s` |" %
                     (calls / max(jobs, 1), nrows / max(calls, 1),
                      ex / max(calls, 1), pl / max(calls, 1),
                      (ex + pl) / max(jobs, 1), 100 * (ex + pl) / tot,
                      q[:110].replace("|", "\\|")))
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
