"""bench_big_matrix.py — issue 27 item 2: the rate a big geodesic matrix leaves the device at.

    python3 tests/bench/bench_big_matrix.py build/tesseld     (GEO_N=30000, GEO_BACKEND=cuda)

A geodesic square matrix of GEO_N points, float64 (7.2 GB at n = 30,000), four times into a region the
client registers under /dev/shm (pinned where the daemon has a GPU: the d2h goes straight into it),
then three times stored (a result file in the data directory, which is on the machine's disk), printing
each job's record: total, compute and d2h (ms) and the d2h's rate. The last region result and the last
stored one are compared bit for bit. Nothing is asserted about speed."""
import os, sys, re, subprocess, tempfile, time, json, shutil
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import numpy as np, tessel
tesseld = sys.argv[1]
local = tempfile.mkdtemp(prefix="bench-big-local-", dir="/dev/shm")
work = tempfile.mkdtemp(prefix="bench-big-")
p = subprocess.Popen([tesseld, "--port", "0", "--data-dir", work + "/data", "--access-log", "0",
                      "--local-dir", local], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
while True:
    line = p.stdout.readline().decode()
    m = re.search(r"listening on http://[^:]+:(\d+)", line)
    if m: url = f"http://127.0.0.1:{m.group(1)}"; break
    if not line: raise SystemExit("no start")
rng = np.random.default_rng(1)
n = int(os.environ.get("GEO_N", 30000)); BK = os.environ.get("GEO_BACKEND", "cuda")
P = np.column_stack([np.degrees(np.arcsin(rng.uniform(-1, 1, n))), rng.uniform(-180, 180, n)])
def show(label, j, wall):
    t = j.info.get("timings_ms", {})
    d2h = t.get("d2h") or float("nan")
    print(f"{label}: wall {wall:.0f} ms, total {t.get('total', 0):.0f}, compute {t.get('compute', 0):.0f}, "
          f"d2h {d2h:.0f} ms = {n * n * 8 / d2h / 1e6:.1f} GB/s, store {t.get('store', 0):.0f}", flush=True)
try:
    reg = tessel.Client(url, same_host=True, local_dir=local, timeout=1200)
    rp = reg.empty(P.shape); rp[...] = P
    out = None
    for rep in range(4):
        t1 = time.perf_counter(); j = reg.submit_geodesic(rp, backend=BK); j.wait()
        wall = (time.perf_counter() - t1) * 1e3
        show(f"n={n} f64 into a region rep {rep}", j, wall)
        if rep == 3:
            out = j.result()
    _, info = reg._t.json("GET", "/v1/regions")
    print("regions pinned:", sorted({bool(r.get("pinned")) for r in info["regions"]}))
    c = tessel.Client(url, same_host=False, timeout=1200)
    h = c.upload(P)
    for rep in range(3):
        os.sync()
        t1 = time.perf_counter(); j = c.submit_geodesic(h, backend=BK, output=False); j.wait()
        wall = (time.perf_counter() - t1) * 1e3
        show(f"n={n} f64 stored rep {rep}", j, wall)
        if rep == 2:
            got = j.result()
            print("region == stored bit for bit:", bool(np.array_equal(np.asarray(out).view(np.int64), np.asarray(got).view(np.int64))))
        j.delete()
finally:
    p.terminate(); p.wait()
    shutil.rmtree(local, ignore_errors=True); shutil.rmtree(work, ignore_errors=True)
