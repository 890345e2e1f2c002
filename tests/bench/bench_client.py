#!/usr/bin/env python3
"""bench_client.py — the Python client (clients/python) against its peers in
one run (issue 12's benchmark):

  1. over HTTP, a NumPy array of N float64 up and the result of
     x**2 + 2*x + 1 back: the client's upload (c.upload) and download
     (Job.result into a new array) against curl moving the same bytes
     (curl -T of the same .npy to POST /v1/arrays, curl -o /dev/null of the
     same result), as throughput (bytes / seconds; the job itself is not
     timed on either side);
  2. through the same-host path (--local-dir): the client's whole
     c.map(..., x=a) against a minimal client doing the same with raw calls
     (the .npy written with one write of header + buffer, the job posted
     with http.client, the output mapped with np.load(mmap_mode='r') as the
     client maps it).

Medians of REPS after a warm-up. Usage:
  /usr/bin/python3 tests/bench/bench_client.py path/to/tesseld [N=1e8] [REPS=3]
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402
from tessel.transport import npy_header  # noqa: E402

EXPR = "x**2 + 2*x + 1"


def start(exe, data, local):
    p = subprocess.Popen([exe, "--port", "0", "--data-dir", data, "--local-dir", local,
                          "--access-log", "0", "--max-upload", str(1 << 34)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if "listening on http://" in line:
            return p, line.split("listening on ")[1].split()[0].rstrip("/")
    raise SystemExit("tesseld did not start")


def curl(*args):
    t0 = time.perf_counter()
    out = subprocess.run(["curl", "-s", "-S", "--fail"] + list(args), capture_output=True, check=True)
    return time.perf_counter() - t0, out.stdout


def med(v):
    return sorted(v)[len(v) // 2]


def main():
    exe = sys.argv[1]
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 100_000_000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    work = tempfile.mkdtemp(prefix="tessel-bench-client-")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    local = tempfile.mkdtemp(prefix="tessel-bench-client-", dir=shm)
    proc, url = start(exe, os.path.join(work, "data"), local)
    try:
        a = np.random.default_rng(1).random(n)
        src = os.path.join(work, "a.npy")
        np.save(src, a)
        nbytes = os.path.getsize(src)
        http_c = tessel.Client(url, same_host=False)
        local_c = tessel.Client(url, local_dir=local)
        assert local_c.local_dir() == os.path.realpath(local)
        rows = {k: [] for k in ("curl_up", "curl_down", "py_up", "py_down", "sh_py", "sh_raw")}
        for r in range(reps + 1):
            a[0] = r + 0.5  # new content every run: nothing is deduplicated
            np.save(src, a)
            # curl: the same bytes up, the result down
            t_up, body = curl("-X", "POST", "-H", "Content-Type: application/x-npy",
                              "-T", src, url + "/v1/arrays")
            aid = json.loads(body)["id"]
            _, body = curl("-X", "POST", "-H", "Content-Type: application/json", "-d",
                           json.dumps({"kind": "map", "params": {"expr": EXPR, "inputs": {"x": {"array": aid}}}}),
                           url + "/v1/jobs?wait=60")
            jid = json.loads(body)["id"]
            t_down, _ = curl("-o", "/dev/null", url + f"/v1/jobs/{jid}/result?format=npy")
            curl("-X", "DELETE", url + f"/v1/jobs/{jid}")
            curl("-X", "DELETE", url + f"/v1/arrays/{aid}")
            # the client, over HTTP
            a[0] = r + 0.25
            t0 = time.perf_counter()
            arr = http_c.upload(a)
            t1 = time.perf_counter()
            job = http_c.submit_map(EXPR, x=arr)
            job.wait()
            t2 = time.perf_counter()
            y = job.result()
            t3 = time.perf_counter()
            assert y[0] == a[0] ** 2 + 2 * a[0] + 1 and y.shape == a.shape
            del y
            # the same-host path: the client whole, and a minimal raw client
            a[0] = r + 0.75
            t4 = time.perf_counter()
            y = local_c.map(EXPR, x=a)
            t5 = time.perf_counter()
            ok_py = y[-1] == a[-1] ** 2 + 2 * a[-1] + 1
            del y
            t6 = time.perf_counter()
            inp, out = os.path.join(local, "raw-in.npy"), os.path.join(local, "raw-out.npy")
            with open(inp, "wb") as f:
                f.write(npy_header(a.dtype, a.shape))
                f.write(memoryview(a).cast("B"))
            host, port = url.split("//")[1].split(":")
            hc = http.client.HTTPConnection(host, int(port), timeout=120)
            hc.request("POST", "/v1/jobs?wait=60", json.dumps(
                {"kind": "map", "params": {"expr": EXPR, "inputs": {"x": {"file": inp}}},
                 "output": {"file": out}}), {"Content-Type": "application/json"})
            info = json.loads(hc.getresponse().read())
            hc.close()
            z = np.load(out, mmap_mode="r")  # as the client gives it: mapped
            t7 = time.perf_counter()
            ok_raw = info.get("status") == "succeeded" and z[-1] == a[-1] ** 2 + 2 * a[-1] + 1
            os.unlink(inp)
            os.unlink(out)
            del z
            assert ok_py and ok_raw
            if r == 0:
                continue  # the warm-up
            for k, v in (("curl_up", t_up), ("curl_down", t_down), ("py_up", t1 - t0),
                         ("py_down", t3 - t2), ("sh_py", t5 - t4), ("sh_raw", t7 - t6)):
                rows[k].append(v)
        m = {k: med(v) for k, v in rows.items()}
        gb = nbytes / 1e9
        print(f"# bench_client: {os.cpu_count()} CPUs, N = {n}, {nbytes / 1e6:.0f} MB each way, "
              f"median of {reps} after a warm-up, load {os.getloadavg()[0]:.2f}\n")
        print("| path | up s | down s | GB/s (up + down) | / curl |\n|---|---|---|---|---|")
        c = 2 * gb / (m["curl_up"] + m["curl_down"])
        p = 2 * gb / (m["py_up"] + m["py_down"])
        print(f"| curl -T / curl -o /dev/null | {m['curl_up']:.3f} | {m['curl_down']:.3f} | {c:.2f} | 1.00 |")
        print(f"| tessel client: c.upload / Job.result | {m['py_up']:.3f} | {m['py_down']:.3f} | {p:.2f} | {p / c:.2f} |")
        print("\n| same-host path, whole (write input, job, read output) | s | / raw |\n|---|---|---|")
        print(f"| minimal raw client | {m['sh_raw']:.3f} | 1.00 |")
        print(f"| tessel client c.map(..., x=a) | {m['sh_py']:.3f} | {m['sh_py'] / m['sh_raw']:.2f} |")
        print("\nissue 12's targets: client / curl >= 0.8; same-host client / raw <= 1.2")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    main()
