"""bench_knn_client.py — exact kNN through the Python client, the index on the host against the index
on the GPUs (issue 27: kNN 10^6 points k = 10, compute <= 100 ms, submit -> NumPy <= 250 ms on one H200).

    python3 tests/bench/bench_knn_client.py BIN/tesseld [n ...]   (default n: 100000 1000000; GEO_BACKEND=cuda)

Two daemons in turn on the same machine, one with TESSEL_GEOQ_HOST_INDEX=1 (the index built on the host,
the way before stop 37), one as shipped (built on the devices). For each n: the points uploaded once,
three `submit_geodesic(query={"knn": {"k": 10}})` + both parts as NumPy (distances and indices), then
`geodesic_knn(ndarray)` (the upload inside the call). Prints submit -> NumPy (wall, median of 3), the job
record's total and compute, and the two configurations' ratio. Every run's indices are compared with the
first configuration's, element for element. Nothing is asserted about speed."""
import os, sys, re, subprocess, tempfile, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import numpy as np, tessel

tesseld = sys.argv[1]
BK = os.environ.get("GEO_BACKEND", "cuda")
sizes = [int(x) for x in sys.argv[2:]] or [100_000, 1_000_000]
rng = np.random.default_rng(7)
pts = {n: np.column_stack([np.degrees(np.arcsin(rng.uniform(-1, 1, n))), rng.uniform(-180, 180, n)])
       for n in sizes}

def daemon(env):
    work = tempfile.mkdtemp(prefix="bench-knn-")
    p = subprocess.Popen([tesseld, "--port", "0", "--data-dir", work, "--access-log", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **env})
    while True:
        line = p.stdout.readline().decode()
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m: return p, f"http://127.0.0.1:{m.group(1)}"
        if not line: raise SystemExit("the daemon did not start")

rows, first = [], {}
for label, env in (("host index", {"TESSEL_GEOQ_HOST_INDEX": "1"}), ("device index", {})):
    p, url = daemon(env)
    try:
        c = tessel.Client(url, same_host=False, timeout=600)
        for n in sizes:
            up = c.upload(pts[n])
            c.submit_geodesic(up, query={"knn": {"k": 10}}, backend=BK).wait()  # warm-up
            walls, tot, comp = [], [], []
            for rep in range(3):
                t0 = time.perf_counter()
                j = c.submit_geodesic(up, query={"knn": {"k": 10}}, backend=BK)
                d, idx = j.part("distance"), j.part("index")
                walls.append((time.perf_counter() - t0) * 1e3)
                t = j.info["timings_ms"]
                tot.append(t.get("total", 0)); comp.append(t.get("compute", 0))
                if n in first:
                    assert np.array_equal(first[n], idx), f"{label}: indices differ at n={n}"
                else:
                    first[n] = idx.copy()
                j.delete()
            t0 = time.perf_counter()
            d2, i2 = c.geodesic_knn(pts[n], 10, backend=BK)
            call = (time.perf_counter() - t0) * 1e3
            assert np.array_equal(first[n], i2), f"{label}: geodesic_knn differs at n={n}"
            rows.append((n, label, statistics.median(walls), statistics.median(tot),
                         statistics.median(comp), call))
            up.delete()
    finally:
        p.terminate(); p.wait()

print("| n | index | submit->NumPy ms (median of 3) | job total ms | compute ms | geodesic_knn(ndarray) ms |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]:,} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.0f} |")
for n in sizes:
    h = [r for r in rows if r[0] == n and r[1] == "host index"][0]
    d = [r for r in rows if r[0] == n and r[1] == "device index"][0]
    print(f"n = {n:,}: host / device index, submit->NumPy {h[2] / d[2]:.2f}x, compute {h[4] / max(d[4], 1e-9):.2f}x")
