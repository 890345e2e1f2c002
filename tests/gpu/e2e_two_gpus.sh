#!/bin/sh
# e2e_two_gpus.sh BIN — two daemons in turn (one GPU visible, then both): a knn 10^6 query and a
# 30000-point square matrix on cuda, submit -> stored from the job's timings.
BIN=${1:?directory with the packed binaries (tests/gpu/pack.sh)}
ROOT=$PWD
cd "$BIN"
export LD_LIBRARY_PATH=$PWD/lib
for vis in 0 0,1; do
  d=$(mktemp -d /tmp/t2.XXXXXX)
  CUDA_VISIBLE_DEVICES=$vis ./tesseld --port 0 --data-dir $d --access-log 0 > $d/out 2> $d/log &
  pid=$!
  for i in $(seq 1 100); do grep -q "listening on" $d/out && break; sleep 0.2; done
  url=$(grep -o 'http://[^/]*' $d/out | head -1)
  echo "== CUDA_VISIBLE_DEVICES=$vis ($url)"
  PYTHONPATH=$ROOT/clients/python python3 - "$url" <<'PY'
import sys, numpy as np, tessel
c = tessel.Client(sys.argv[1], same_host=False, timeout=600)
rng = np.random.default_rng(1)
pts = np.column_stack([np.degrees(np.arcsin(rng.uniform(-1, 1, 1000000))), rng.uniform(-180, 180, 1000000)])
a = c.upload(pts)
for rep in range(2):
    j = c.submit_geodesic(a, query={"knn": {"k": 10}}, backend="cuda", output=False); j.wait()
    print("knn 1e6 k=10 cuda", j.status, j.info["timings_ms"])
m = c.upload(pts[:30000])
for rep in range(2):
    j = c.submit_geodesic(m, backend="cuda", output=False); j.wait()
    print("matrix 30000 cuda", j.status, j.info["timings_ms"]); j.delete()
PY
  kill $pid; wait $pid 2>/dev/null; grep -i "borrow\|lent" $d/log | head -3; rm -rf $d
done
