#!/bin/sh
# multi_gpu.sh — on a machine with several GPUs: the device tests over every
# device, then the daemon with one worker per GPU, given 12 cuda jobs at
# once; every GPU must have run some of them, and every result must agree
# with the CPU's.   sh tests/gpu/multi_gpu.sh BIN   (BIN from pack.sh)
set -u
BIN=${1:?directory with the binaries}
LOG=${OUT:-$BIN}
export LD_LIBRARY_PATH="$PWD/$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L
"$BIN/gpu_test_device" 2>&1 | tail -3
data=$(mktemp -d /tmp/tessel-mgpu.XXXXXX)
"$BIN/tesseld" --port 0 --data-dir "$data" --access-log 0 > "$data/out" 2> "$LOG/daemon_mgpu.log" &
pid=$!
port=""
for i in $(seq 1 100); do
  port=$(grep -o 'listening on http://[^/]*' "$data/out" 2>/dev/null | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
python3 - "$port" <<'PY'
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
def call(path, body=None):
    req = urllib.request.Request(base + path, method="POST" if body else "GET")
    if body:
        req.data = json.dumps(body).encode(); req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
dev = call("/v1/devices")["cuda"]
print("devices:", [d["name"] for d in dev["devices"]])
ids = []
for i in range(12):
    body = {"kind": "geodesic", "backend": "cuda", "params": {
        "points": {"random": {"shape": [6000, 2], "low": -80, "high": 80, "seed": i}}}}
    if i % 3 == 1:
        body = {"kind": "map", "backend": "cuda", "params": {"expr": "sin(x)*exp(-x) + x**2",
                "inputs": {"x": {"random": {"shape": [20000000], "seed": i}}}}}
    if i % 3 == 2:
        body = {"kind": "matmul", "backend": "cuda", "params": {
                "a": {"random": {"shape": [3000, 3000], "seed": i}},
                "b": {"random": {"shape": [3000, 3000], "seed": i + 100}}}}
    ids.append(call("/v1/jobs", body)["id"])
used = {}
for jid in ids:
    while True:
        j = call("/v1/jobs/" + jid)
        if j["status"] in ("succeeded", "failed", "canceled"):
            break
        time.sleep(0.05)
    u = j["backend"]["used"]
    used[u] = used.get(u, 0) + 1
    print(jid, j["kind"], j["status"], u, j["timings_ms"].get("total"))
    assert j["status"] == "succeeded", j
print("jobs per device:", used)
ngpu = len(dev["devices"])
# a job over several GPUs says "cuda:1+cuda:0" (a big geodesic matrix's lanes)
ran = {d for k in used for d in k.split("+") if d.startswith("cuda:")}
assert len(ran) == ngpu, "not every GPU ran a job: %s" % sorted(ran)
# The same work on GPU and CPU agrees (compare runs every backend).
j = call("/v1/jobs?wait=60", {"kind": "geodesic", "backend": "compare", "params": {
    "points": {"random": {"shape": [3000, 2], "seed": 5}}}})
print("compare:", j["compare"], "max_abs_diff", j["max_abs_diff"])
assert j["status"] == "succeeded"
# A product of 512 MiB over every GPU (compute/kinds/matmul/lanes.h): the
# record names each GPU and its rows, and the bytes agree with the CPU's
# within the rounding bound of a length-256 dot product.
if ngpu >= 2:
    import io, numpy as np
    mm = {"a": {"random": {"shape": [8192, 256], "seed": 7}},
          "b": {"random": {"shape": [256, 8192], "seed": 8}}}
    g = call("/v1/jobs?wait=60", {"kind": "matmul", "backend": "cuda", "params": mm})
    c = call("/v1/jobs?wait=60", {"kind": "matmul", "backend": "cpu", "params": mm})
    assert g["status"] == "succeeded" and c["status"] == "succeeded", (g, c)
    devs = g["backend"]["devices"]
    print("matmul lanes:", g["backend"]["used"], devs, g["timings_ms"].get("total"))
    assert "+" in g["backend"]["used"], g["backend"]
    assert len([d for d in devs if d.get("rows", 0) > 0]) >= 2, devs
    assert sum(d.get("rows", 0) for d in devs) == 8192, devs
    def result(jid):
        with urllib.request.urlopen(base + "/v1/jobs/%s/result?format=npy" % jid, timeout=600) as r:
            return np.load(io.BytesIO(r.read()))
    x, y = result(g["id"]), result(c["id"])
    assert x.shape == (8192, 8192) and np.isfinite(x).all()
    tol = 4 * (256 + 2) * 2.0 ** -53 * (np.abs(y) + 256)
    assert (np.abs(x - y) <= tol).all(), float(np.abs(x - y).max())
    print("matmul lanes: the CPU's within the bound")
print("multi-GPU: every GPU used")
PY
rc=$?
kill -TERM $pid; wait $pid
rm -rf "$data"
exit $rc
