#!/usr/bin/env python3
"""bench_client.py — the Python client (clients/python) against its peers in
one run (issue 12's benchmark):

  1. over HTTP, a NumPy array of N float64 up and the result of
     x**2 + 2*x + 1 back: the client's upload (c.upload) and download
     (Job.result into a new array; Job.result(out=) into a reused one)
     against curl moving the same bytes (curl -T of the same .npy to
     POST /v1/arrays, curl -o /dev/null of the same result), as throughput
     (bytes / seconds; the job itself is not timed on either side);
  2. through the same-host path (--local-dir): the client's whole
     c.map(..., x=a) (the result mapped from the output file) and
     submit_map(...).result(out=buf) (read into a reused array) against a
     minimal raw client doing what bench_e2e's C same-host client does
     (the .npy written with one write of header + buffer, the job posted
     with http.client ?wait=60, the output file read into a reused buffer
     with readinto).

Medians of REPS after a warm-up, every method taking its turn in each run.

  /usr/bin/python3 tests/bench/bench_client.py path/to/tesseld [N=1e8] [REPS=3]
      starts its own tesseld (--local-dir in /dev/shm) and prints two tables;
  ($TESSEL_CLIENT_DIR: measure that copy of clients/python instead)
  python3 tests/bench/bench_client.py --row URL LOCAL_DIR N REPS BACKEND
      against a running daemon whose --local-dir is LOCAL_DIR (bench_e2e runs
      it so: its client rows): prints one line
      "RESULT bytes=... curl_up=... curl_down=... py_up=... py_down=...
      py_down_out=... sh_py=... sh_py_out=... sh_raw=..." (seconds).
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
# $TESSEL_CLIENT_DIR: another copy of clients/python to measure (before/after).
sys.path.insert(0, os.environ.get("TESSEL_CLIENT_DIR") or
                os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402
from tessel.transport import npy_header  # noqa: E402

EXPR = "x**2 + 2*x + 1"
KEYS = ("curl_up", "curl_down", "py_up", "py_down", "py_down_out", "sh_py", "sh_py_out", "sh_raw")


def start(exe, data, local):
    p = subprocess.Popen([exe, "--port", "0", "--data-dir", data, "--local-dir", local,
                          "--access-log", "0", "--max-upload", str(1 << 34)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if "listening on http://" in line:
            return p, line.split("listening on ")[1].split()[0].rstrip(",/")
    raise SystemExit("tesseld did not start")


def curl(*args):
    t0 = time.perf_counter()
    out = subprocess.run(["curl", "-s", "-S", "--fail"] + list(args), capture_output=True, check=True)
    return time.perf_counter() - t0, out.stdout


def med(v):
    return sorted(v)[len(v) // 2]


def read_into(path, buf):
    """The raw client's read of an output .npy into its reused buffer."""
    with open(path, "rb", buffering=0) as f:
        pre = f.read(10)
        f.read(int.from_bytes(pre[8:10], "little"))  # the header (version 1.0)
        view, got = memoryview(buf).cast("B"), 0
        while got < view.nbytes:
            k = f.readinto(view[got:])
            if not k:
                raise SystemExit(f"bench_client: {path} is short")
            got += k


def drain():
    """Wait until the client's reaper thread removed its temporary files (a
    client without one removed them before returning)."""
    if hasattr(tessel.job, "reaper"):
        tessel.job.reaper.drain()


def want(a):
    return a[-1] ** 2 + 2 * a[-1] + 1


def measure(url, local, n, reps, backend, work):
    """Medians (seconds) of every KEYS entry, and the .npy's bytes."""
    a = np.random.default_rng(1).random(n)
    src = os.path.join(work, "a.npy")
    http_c = tessel.Client(url, same_host=False)
    local_c = tessel.Client(url, local_dir=local)
    if local_c.local_dir() != os.path.realpath(local):
        raise SystemExit(f"bench_client: the same-host path to {local} was not proven")
    host, port = url.split("//")[1].split(":")
    out = np.empty_like(a)
    out[:] = 0  # the reused arrays are faulted in once, like bench_e2e's buffer
    raw_buf = np.empty_like(a)
    raw_buf[:] = 0
    rows = {k: [] for k in KEYS}
    nbytes = 0
    for r in range(reps + 1):
        a[0] = r + 0.5  # new content every run: nothing is deduplicated
        np.save(src, a)
        nbytes = os.path.getsize(src)
        # curl: the same bytes up, the result down
        t_up, body = curl("-X", "POST", "-H", "Content-Type: application/x-npy",
                          "-T", src, url + "/v1/arrays")
        aid = json.loads(body)["id"]
        _, body = curl("-X", "POST", "-H", "Content-Type: application/json", "-d",
                       json.dumps({"kind": "map", "backend": backend,
                                   "params": {"expr": EXPR, "inputs": {"x": {"array": aid}}}}),
                       url + "/v1/jobs?wait=60")
        jid = json.loads(body)["id"]
        t_down, _ = curl("-o", "/dev/null", url + f"/v1/jobs/{jid}/result?format=npy")
        curl("-X", "DELETE", url + f"/v1/jobs/{jid}")
        curl("-X", "DELETE", url + f"/v1/arrays/{aid}")
        # the client, over HTTP: into a new array, then into the reused one
        a[0] = r + 0.25
        t0 = time.perf_counter()
        arr = http_c.upload(a)
        t1 = time.perf_counter()
        job = http_c.submit_map(EXPR, x=arr, backend=backend)
        job.wait()
        t2 = time.perf_counter()
        y = job.result()
        t3 = time.perf_counter()
        assert y[-1] == want(a) and y.shape == a.shape
        del y
        t3b = time.perf_counter()
        job.result(out=out)
        t3c = time.perf_counter()
        assert out[-1] == want(a)
        job.delete()
        arr.delete()
        # the same-host path: the client mapped, the client into out=, raw
        a[0] = r + 0.75
        t4 = time.perf_counter()
        y = local_c.map(EXPR, x=a, backend=backend)
        t5 = time.perf_counter()
        ok_py = y[-1] == want(a)
        del y
        drain()  # the client's background unlinks, untimed as the C client's unlinks are
        a[0] = r + 0.625
        t5b = time.perf_counter()
        local_c.submit_map(EXPR, x=a, backend=backend, wait=60).result(out=out)
        t5c = time.perf_counter()
        ok_out = out[-1] == want(a)
        drain()
        a[0] = r + 0.875
        t6 = time.perf_counter()
        inp, outp = os.path.join(local, "raw-in.npy"), os.path.join(local, "raw-out.npy")
        with open(inp, "wb") as f:
            f.write(npy_header(a.dtype, a.shape))
            f.write(memoryview(a).cast("B"))
        hc = http.client.HTTPConnection(host, int(port), timeout=120)
        hc.request("POST", "/v1/jobs?wait=60", json.dumps(
            {"kind": "map", "backend": backend,
             "params": {"expr": EXPR, "inputs": {"x": {"file": inp}}},
             "output": {"file": outp}}), {"Content-Type": "application/json"})
        info = json.loads(hc.getresponse().read())
        hc.close()
        read_into(outp, raw_buf)  # as bench_e2e's C client: read() into its buffer
        t7 = time.perf_counter()
        ok_raw = info.get("status") == "succeeded" and raw_buf[-1] == want(a)
        os.unlink(inp)
        os.unlink(outp)
        if not (ok_py and ok_out and ok_raw):
            raise SystemExit(f"bench_client: a wrong result (mapped {ok_py}, out= {ok_out}, raw {ok_raw})")
        if r == 0:
            continue  # the warm-up
        for k, v in (("curl_up", t_up), ("curl_down", t_down), ("py_up", t1 - t0),
                     ("py_down", t3 - t2), ("py_down_out", t3c - t3b), ("sh_py", t5 - t4),
                     ("sh_py_out", t5c - t5b), ("sh_raw", t7 - t6)):
            rows[k].append(v)
    os.unlink(src)
    http_c.close()
    local_c.close()
    return {k: med(v) for k, v in rows.items()}, nbytes


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "--row":
        url, local, n, reps, backend = sys.argv[2], sys.argv[3], int(float(sys.argv[4])), \
            int(sys.argv[5]), sys.argv[6]
        work = tempfile.mkdtemp(prefix="tessel-bench-client-")
        try:
            m, nbytes = measure(url, local, n, reps, backend, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("RESULT bytes=%d %s" % (nbytes, " ".join(f"{k}={m[k]:.6f}" for k in KEYS)))
        return
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        raise SystemExit(__doc__)
    exe = sys.argv[1]
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 100_000_000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    work = tempfile.mkdtemp(prefix="tessel-bench-client-")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    local = tempfile.mkdtemp(prefix="tessel-bench-client-", dir=shm)
    proc, url = start(exe, os.path.join(work, "data"), local)
    try:
        m, nbytes = measure(url, local, n, reps, "auto", work)
        gb = nbytes / 1e9
        print(f"# bench_client: {os.cpu_count()} CPUs, N = {n}, {nbytes / 1e6:.0f} MB each way, "
              f"median of {reps} after a warm-up, load {os.getloadavg()[0]:.2f}\n")
        print("| path | up s | down s | GB/s (up + down) | / curl |\n|---|---|---|---|---|")
        c = 2 * gb / (m["curl_up"] + m["curl_down"])
        p = 2 * gb / (m["py_up"] + m["py_down"])
        q = 2 * gb / (m["py_up"] + m["py_down_out"])
        print(f"| curl -T / curl -o /dev/null | {m['curl_up']:.3f} | {m['curl_down']:.3f} | {c:.2f} | 1.00 |")
        print(f"| tessel client: c.upload / Job.result (new array) | {m['py_up']:.3f} | "
              f"{m['py_down']:.3f} | {p:.2f} | {p / c:.2f} |")
        print(f"| tessel client: c.upload / Job.result(out=reused) | {m['py_up']:.3f} | "
              f"{m['py_down_out']:.3f} | {q:.2f} | {q / c:.2f} |")
        print("\n| same-host path, whole (write input, job, read output) | s | / raw |\n|---|---|---|")
        print(f"| minimal raw client (bench_e2e's C client's steps) | {m['sh_raw']:.3f} | 1.00 |")
        print(f"| tessel client c.map(..., x=a) (result mapped) | {m['sh_py']:.3f} | "
              f"{m['sh_py'] / m['sh_raw']:.2f} |")
        print(f"| tessel client submit_map(...).result(out=reused) | {m['sh_py_out']:.3f} | "
              f"{m['sh_py_out'] / m['sh_raw']:.2f} |")
        print("\nissue 12's targets: client / curl >= 0.8; same-host client / C client <= 1.2 "
              "(bench_e2e's client rows compare with the C client itself)")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    main()
