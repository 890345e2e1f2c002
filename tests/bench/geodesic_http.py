"""geodesic_http.py — geodesic jobs end to end through a running Tessel
daemon: submit -> result stored -> .npy downloaded, per size and backend.

    /usr/bin/python3 tests/bench/geodesic_http.py URL [--sizes 1000,5000,20000]
        [--backends cpu,cuda] [--token TOKEN] [--dir /tmp]

Without a URL it says so and exits 0 (skipped): the figures need the whole
daemon. Points come from the {"random": ...} array form (no upload), so the
request is small and the time is the service's. For each job it prints the
client-side times (until the job is stored, the download, the total), the
server's phase timings (timings_ms) and the download rate. Compare the GPU
total with bench_geodesic --e2e's "copy + write" peer for the same n.
"""
import json
import os
import sys
import time
import urllib.request


def call(url, method="GET", body=None, token=None, stream_to=None):
    req = urllib.request.Request(url, method=method)
    if body is not None:
        req.data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if stream_to:
        req.add_header("Accept", "application/x-npy")
    with urllib.request.urlopen(req, timeout=900) as r:
        if stream_to:
            n = 0
            with open(stream_to, "wb") as f:
                while True:
                    b = r.read(1 << 22)
                    if not b:
                        break
                    f.write(b)
                    n += len(b)
            return n
        return json.loads(r.read().decode())


def main(argv):
    args = [a for a in argv[1:]]
    if not args or args[0].startswith("--"):
        print("SKIPPED: no server URL given (geodesic_http.py URL ...)")
        return 0
    base = args.pop(0).rstrip("/")
    opts = {"--sizes": "1000,5000,20000", "--backends": "cpu,cuda",
            "--token": None, "--dir": "/tmp"}
    while args:
        k = args.pop(0)
        opts[k] = args.pop(0)
    sizes = [int(s) for s in opts["--sizes"].split(",")]
    backends = opts["--backends"].split(",")
    tok = opts["--token"]
    print("| n | backend | used | to stored s | download s | total s | "
          "MB/s down | server timings_ms |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        for b in backends:
            body = {"kind": "geodesic", "backend": b,
                    "params": {"points": {"random": {
                        "shape": [n, 2], "low": -90, "high": 90,
                        "seed": 1}}}}
            t0 = time.perf_counter()
            try:
                job = call(base + "/v1/jobs?wait=60", "POST", body, tok)
            except urllib.error.HTTPError as e:
                print("| %d | %s | - | %s | | | | |" % (n, b, e))
                continue
            while job["status"] in ("queued", "running"):
                time.sleep(0.02)
                job = call(base + "/v1/jobs/%s" % job["id"], token=tok)
            t1 = time.perf_counter()
            if job["status"] != "succeeded":
                print("| %d | %s | - | %s | | | | |" % (n, b, job.get("error")))
                continue
            path = os.path.join(opts["--dir"], "geod_http_%d.npy" % n)
            nbytes = call(base + "/v1/jobs/%s/result?format=npy" % job["id"],
                          token=tok, stream_to=path)
            t2 = time.perf_counter()
            os.unlink(path)
            print("| %d | %s | %s | %.3f | %.3f | %.3f | %.0f | %s |" % (
                n, b, job.get("backend", {}).get("used"), t1 - t0, t2 - t1,
                t2 - t0, nbytes / 1e6 / max(t2 - t1, 1e-9),
                json.dumps(job.get("timings_ms"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
