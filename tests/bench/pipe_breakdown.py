#!/usr/bin/python3
"""pipe_breakdown.py — issue 25's breakdown of a `map x+1` job on an
uploaded 10^8 float64 array, per backend, from the job records' timings_ms
(queue, prepare, h2d, compute, d2h, store, total): starts the daemon given,
uploads the array once, runs the job REPS times on cuda and cpu in turns
(the first cuda run pays the kernel's compile: it is shown apart), prints a
table of medians. Standard library only (NumPy, when there, makes the
array faster).
Usage: pipe_breakdown.py TESSELD [N=1e8] [REPS=5] [EXPR=x+1]
"""
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

tesseld = sys.argv[1]
N = int(float(sys.argv[2])) if len(sys.argv) > 2 else 100_000_000
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
EXPR = sys.argv[4] if len(sys.argv) > 4 else "x+1"

data = tempfile.mkdtemp(prefix="tessel-breakdown-")
out = open(os.path.join(data, "out"), "w")
d = subprocess.Popen([tesseld, "--port", "0", "--data-dir", data, "--access-log", "0"],
                     stdout=out, stderr=open(os.path.join(data, "err"), "w"))
url = None
for _ in range(200):
    time.sleep(0.05)
    m = re.search(r"listening on (http://[^/\s]+)", open(os.path.join(data, "out")).read())
    if m:
        url = m.group(1)
        break
if not url:
    print("daemon did not start:", open(os.path.join(data, "err")).read()[-2000:])
    sys.exit(1)


def req(method, path, body=None, ctype="application/json"):
    r = urllib.request.Request(url + path, data=body, method=method,
                               headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(r, timeout=600) as f:
            return json.loads(f.read())
    except urllib.error.HTTPError as ex:
        sys.exit("%s %s: %s %s" % (method, path, ex.code, ex.read()[:500]))


try:
    import numpy as np
    arr = np.random.default_rng(1).uniform(-3, 3, N)
    hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d,), }" % N
    hdr = hdr + " " * (63 - (10 + len(hdr)) % 64) + "\n"
    body = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + arr.tobytes()
except ImportError:
    sys.exit("needs numpy")
a = req("POST", "/v1/arrays", body, "application/x-npy")
print("uploaded", a["id"], a["bytes"], "bytes")
del body


results = {}


def job(backend):
    j = req("POST", "/v1/jobs?wait=60", json.dumps(
        {"kind": "map", "backend": backend,
         "params": {"expr": EXPR, "inputs": {"x": {"array": a["id"]}}}}).encode())
    if j.get("status") != "succeeded":
        print("job:", json.dumps(j)[:600])
    t = j.get("timings_ms", {})
    if backend not in results:  # each backend's result once, to compare
        with urllib.request.urlopen(url + "/v1/jobs/%s/result?format=npy" % j["id"], timeout=600) as f:
            results[backend] = f.read()
    req("DELETE", "/v1/jobs/" + j["id"])
    return t


print(json.dumps(req("GET", "/v1/devices"))[:200])
first = job("cuda")
runs = {"cuda": [], "cpu": []}
for _ in range(REPS):
    for b in ("cuda", "cpu"):
        runs[b].append(job(b))
same = results.get("cuda") == results.get("cpu")
print("cuda and cpu results: %s (%d bytes)" % ("the same bytes" if same else "DIFFER",
                                             len(results.get("cuda", b""))))
keys = ["queue", "prepare", "h2d", "compute", "d2h", "store", "total"]
print("\n## `map %s` on an uploaded %g float64 array (job timings_ms, medians of %d)\n"
      % (EXPR, N, REPS))
print("| backend | " + " | ".join(keys) + " |")
print("|---|" + "---:|" * len(keys))
print("| cuda, first run (compile) | " + " | ".join("%.1f" % first.get(k, 0) for k in keys) + " |")
for b in ("cuda", "cpu"):
    print("| %s | " % b + " | ".join(
        "%.1f" % statistics.median(r.get(k, 0) for r in runs[b]) for k in keys) + " |")
d.terminate()
d.wait()
# the daemon's log lines of TESSEL_GPU_TRACE (cuda_map's own marks), if set
for line in open(os.path.join(data, "err")):
    if "trace" in line:
        print("    " + line.rstrip())
shutil.rmtree(data, ignore_errors=True)
