"""bench_upload.py — uploads and downloads over HTTP beside their floors
(issue 25: "curl -T into the daemon >= 0.8x the same curl into a plain
socket sink"; the client's parallel streams).

    /usr/bin/python3 tests/bench/bench_upload.py build/tesseld
        [--mib 1024] [--rounds 3] [--streams 6] [--client-mib 512]
        [--sink build/bench_upload_sink] [--also LABEL=OTHER_TESSELD ...]

One run, one table. Every row moves the same kind of bytes on loopback and
is timed from the outside (curl's time_total, or the client call's wall
time); medians of --rounds, the rows interleaved round by round so a
neighbour's load falls on all of them alike:

  curl -T → C sink          the floor: bench_upload_sink.c reads and drops
  curl -T → POST /v1/arrays tesseld storing a .npy (file, hash, row)
  curl -T → PUT /v1/uploads one part carrying the whole data (same path,
                            no header, written in place)
  curl GET /v1/arrays/…/data the download (sendfile), into /dev/null
  client upload / download  tessel.Client with streams=1 and streams=N (upload_streams the same)
                            (--client-mib of float64; a new array each
                            round, so nothing is deduplicated)

Every row starts after os.sync(), with no dirty page cache left by the
row before (its writeback otherwise lands on the next row: the same build
measured twice in a row read 0.77 s, then 1.49 s).

--also adds the POST /v1/arrays row for other builds of tesseld (each its
own daemon, interleaved with the rest): a change to the upload path
measured beside the build before it, under the same load.

The ratio column is the sink's median time over the row's (1.00 = as fast
as the sink). Nothing here asserts a speed.
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import numpy as np  # noqa: E402

import tessel  # noqa: E402


def start(cmd, pattern, log):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stdout.readline().decode(errors="replace")
        m = re.search(pattern, line)
        if m:
            return p, int(m.group(1))
        if not line and p.poll() is not None:
            break
    raise RuntimeError(f"{cmd[0]} did not start")


def settle():
    """Every row starts with no dirty page cache left by the one before:
    without this the row after a 1 GiB upload paid for its writeback (the
    same tesseld measured twice in a row, --also, read 0.77 s then 1.49 s
    on the 2-core VM)."""
    os.sync()


def curl(args):
    out = subprocess.run(["curl", "-s", "-S", "-w", "%{time_total}"] + args,
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip())  # every call writes the body with -o


def curl_json(args):
    r = subprocess.run(["curl", "-s", "-S"] + args, check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tesseld")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=6)
    ap.add_argument("--client-mib", type=int, default=512)
    ap.add_argument("--sink", default=None)
    ap.add_argument("--also", action="append", default=[])
    a = ap.parse_args()
    sink_bin = a.sink or os.path.join(os.path.dirname(os.path.abspath(a.tesseld)),
                                      "bench_upload_sink")
    work = tempfile.mkdtemp(prefix="tessel-bench-upload-")
    log = open(os.path.join(work, "log"), "wb")
    procs = []
    try:
        n = a.mib * 1024 * 1024 // 8
        data = np.random.default_rng(1).random(n)
        npy = os.path.join(work, "big.npy")
        raw = os.path.join(work, "big.raw")
        np.save(npy, data)
        data.tofile(raw)
        del data
        sink, sport = start([sink_bin, "0"], r"listening on (\d+)", log)
        procs.append(sink)
        d, port = start([a.tesseld, "--port", "0", "--data-dir", os.path.join(work, "data"),
                         "--access-log", "0", "--max-upload", str(8 << 30),
                         "--max-upload-pending", str(16 << 30)],
                        r"listening on http://[^:]+:(\d+)", log)
        procs.append(d)
        base = f"http://127.0.0.1:{port}"
        others = []
        for k, spec in enumerate(a.also):
            label, _, path = spec.partition("=")
            p2, port2 = start([path, "--port", "0", "--data-dir",
                               os.path.join(work, f"data{k}"), "--access-log", "0",
                               "--max-upload", str(8 << 30)],
                              r"listening on http://[^:]+:(\d+)", log)
            procs.append(p2)
            others.append((label, f"http://127.0.0.1:{port2}"))
        times = {}

        def add(row, t, nbytes):
            times.setdefault(row, ([], nbytes))[0].append(t)
            settle()

        nbytes = os.path.getsize(npy)
        cn = a.client_mib * 1024 * 1024 // 8
        c1 = tessel.Client(base, same_host=False, streams=1, upload_streams=1)
        cN = tessel.Client(base, same_host=False, streams=a.streams, upload_streams=a.streams)
        settle()
        for r in range(a.rounds):
            add("curl -T → C sink", curl(["-o", "/dev/null", "-X", "POST", "-H",
                                         "Content-Type: application/x-npy", "-T", npy,
                                         f"http://127.0.0.1:{sport}/x"]), nbytes)
            out = os.path.join(work, "answer")
            add("curl -T → tesseld POST /v1/arrays",
                curl(["-o", out, "-X", "POST", "-H", "Content-Type: application/x-npy",
                      "-T", npy, base + "/v1/arrays"]), nbytes)
            aid = json.load(open(out))["id"]
            for label, b2 in others:
                add(f"curl -T → tesseld [{label}] POST /v1/arrays",
                    curl(["-o", out, "-X", "POST", "-H", "Content-Type: application/x-npy",
                          "-T", npy, b2 + "/v1/arrays"]), nbytes)
                curl_json(["-X", "DELETE", b2 + f"/v1/arrays/{json.load(open(out))['id']}"])
            add("curl GET /v1/arrays/{id}/data → /dev/null",
                curl(["-o", "/dev/null", base + f"/v1/arrays/{aid}/data?format=npy"]), nbytes)
            curl_json(["-X", "DELETE", base + f"/v1/arrays/{aid}"])
            up = curl_json(["-X", "POST", "-H", "Content-Type: application/json", "-d",
                            json.dumps({"dtype": "float64", "shape": [n]}),
                            base + "/v1/uploads"])
            add("curl -T → tesseld PUT /v1/uploads (one part)",
                curl(["-o", "/dev/null", "-X", "PUT", "-H",
                      "Content-Type: application/octet-stream", "-T", raw,
                      base + f"/v1/uploads/{up['id']}?offset=0"]), os.path.getsize(raw))
            done = curl_json(["-X", "POST", base + f"/v1/uploads/{up['id']}/complete"])
            curl_json(["-X", "DELETE", base + f"/v1/arrays/{done['id']}"])
            x = np.random.default_rng(100 + r).random(cn)
            for label, c in (("1 stream", c1), (f"{a.streams} streams", cN)):
                x[0] += 1.0  # a new array each time: no deduplication
                t0 = time.perf_counter()
                arr = c.upload(x)
                add(f"client upload, {label}", time.perf_counter() - t0, x.nbytes)
                t0 = time.perf_counter()
                y = arr.download()
                add(f"client download, {label}", time.perf_counter() - t0, x.nbytes)
                assert y[0] == x[0] and y[-1] == x[-1]
                del y
                arr.delete()
        c1.close()
        cN.close()
        floor = statistics.median(times["curl -T → C sink"][0])
        print(f"\n{a.mib} MiB per curl row, {a.client_mib} MiB per client row; "
              f"medians of {a.rounds}; {os.cpu_count()} cores\n")
        print("| transfer | median s | GB/s | sink time / this time |")
        print("|---|---|---|---|")
        for row, (ts, nb) in times.items():
            m = statistics.median(ts)
            ratio = f"{floor / m:.2f}" if row.startswith("curl -T") else ""
            print(f"| {row} | {m:.3f} | {nb / m / 1e9:.2f} | {ratio} |")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
