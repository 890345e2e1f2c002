#!/bin/sh
# bench_mgpu.sh BIN — one job over one GPU against the same job over two (issue 27).
# Daemons in turn (default three), the first seeing GPU 0 only (CUDA_VISIBLE_DEVICES=0),
# the second both (0,1) with the daemon's defaults (geodesic matrix lanes on, map
# and reduce lanes off: compute/kinds/mgpu.h), the third both with every lane on
# (TESSEL_GPU_LANES=1; "+nolanes" sets it to 0, which turns the geodesic matrix's,
# the map's and the reduce's lanes off; until stop 38 a config without "+lanes"
# set 0, so stop 37's "0,1" square rows ran on one GPU; the matmul's lanes have
# their own switch, TESSEL_MM_LANES); each runs, twice, on cuda: a geodesic square matrix of 40,000
# points float32 (6.4 GB), a geodesic kNN of 10^7 points k = 10, and a matmul
# 16384 x 16384 float64 (2 GB result), with "square64" in BENCH_MGPU_JOBS a
# geodesic square matrix of 30,000 points float64 (7.2 GB; issue 27's
# <= 350 ms on one H200, <= 250 on two), a kNN of 40,000 copies of one point (the
# pile issue 27 asks to stay under 1 s), and a map "a*b + c" of 2^28 float64
# (a, b uploaded arrays of 2 GiB each, c a scalar; the 2 GiB result stored: the
# lanes of compute/kinds/map/lanes.h, where the run's own device reads a and b
# from its cache once they are there and a lent one streams them), and a reduce
# sum of "a*b" over the same 2^28 float64 a and b (compute/kinds/reduce/lanes.h:
# 4 GiB read, a 0-d result; fresh uploads: the first run's own lane caches them
# whole while a lent lane streams its blocks; from the second run only the own
# device holds them, reads them from its memory and lends no lane, "-"; the
# streamed case run after run is bench_reduce_lanes's). Prints one
# table: submit -> stored
# (timings_ms.total, the better of two), its compute and d2h, and the spread the
# daemon logged (job_end's "spread": the devices and the rows each wrote; "-"
# when the job ran on one device). A config's "+even" runs its daemon with
# TESSEL_GEOQ_EVEN=1 (the kNN's chunks and uploads as before the guided tail:
# the before of an A/B in one run). Every daemon runs with TESSEL_GPU_TRACE=1 and the
# kNN calls' "geoq trace:" lines follow the table (where their time went:
# compute/kinds/geodesic/query/query.cu). BIN: tests/gpu/pack.sh's directory (tesseld
# and its libraries); the Python client from this checkout; numpy needed.
# The exact command for the lent 2xH200 machine is in tests/bench/README.md.
set -eu
BIN=${1:?directory with the packed binaries (tests/gpu/pack.sh)}
ROOT=$PWD
cd "$BIN"
export LD_LIBRARY_PATH=$PWD/lib
res=$(mktemp -d /tmp/bmgpu.XXXXXX)
# BENCH_MGPU_CFGS picks the daemons (default all three; "0" on a one-GPU host). A
# config is VISIBLE[+lanes|+nolanes][+even][:VAR=VALUE...]: e.g. "0:TESSEL_MM_LANES=0" runs a daemon
# on GPU 0 with that variable set (the A/B switches of compute/kinds/matmul/lanes.h).
# BENCH_MGPU_JOBS picks the jobs (default "square knn pile matmul map reduce"); BENCH_MGPU_REPS
# the runs of each (default 2; the table shows the best, and a result file spare is
# ready from the third on: compute/array/codec/spare.h).
for cfg in ${BENCH_MGPU_CFGS:-0 0,1 0,1+lanes}; do
  base=${cfg%%:*}
  envs=""
  [ "$base" = "$cfg" ] || envs=$(echo "${cfg#*:}" | tr ':' ' ')
  vis=${base%%+*}
  lanes=""
  even=0
  case "$base" in *+lanes*) lanes=1 ;; esac
  case "$base" in *+nolanes*) lanes=0 ;; esac
  case "$base" in *+even*) even=1 ;; esac
  d=$(mktemp -d /tmp/bmgpu_d.XXXXXX)
  env TESSEL_GPU_TRACE=1 TESSEL_GEOQ_EVEN=$even ${lanes:+TESSEL_GPU_LANES=$lanes} CUDA_VISIBLE_DEVICES=$vis $envs \
    ./tesseld --port 0 --data-dir "$d" --access-log 0 > "$d/out" 2> "$d/log" &
  pid=$!
  for i in $(seq 1 150); do grep -q "listening on" "$d/out" && break; sleep 0.2; done
  url=$(grep -o 'http://[^/]*' "$d/out" | head -1)
  PYTHONPATH=$ROOT/clients/python BENCH_MGPU_JOBS="${BENCH_MGPU_JOBS:-square knn pile matmul map reduce}" \
    BENCH_MGPU_REPS=${BENCH_MGPU_REPS:-2} python3 - "$url" "$cfg" >> "$res/rows" <<'PY'
import os, sys, time, numpy as np, tessel
c = tessel.Client(sys.argv[1], same_host=False, timeout=1200)
vis = sys.argv[2]
jobs = os.environ["BENCH_MGPU_JOBS"].split()
reps = int(os.environ["BENCH_MGPU_REPS"])
rng = np.random.default_rng(1)
def pts(n):
    return np.column_stack([np.degrees(np.arcsin(rng.uniform(-1, 1, n))),
                            rng.uniform(-180, 180, n)])
def best(name, submit):
    runs = []
    for rep in range(reps):
        if rep: time.sleep(float(os.environ.get("BENCH_MGPU_GAP", "0.5")))  # the spare keeper's turn
        j = submit(); j.wait()
        t = j.info["timings_ms"]
        runs.append((t.get("total", 0), t.get("compute", 0), t.get("d2h", 0), j.status, j.id,
                     t.get("prepare", 0), t.get("h2d", 0), t.get("store", 0)))
        j.delete()
    r = min(runs)
    print(f"{name}\t{vis}\t{r[3]}\t{r[0]:.0f}\t{r[1]:.0f}\t{r[2]:.0f}\t{r[4]}"
          f"\t{r[5]:.0f}/{r[6]:.0f}/{r[7]:.0f}\t" + "/".join(f"{x[0]:.0f}" for x in runs),
          flush=True)
if "square" in jobs:
    sq = c.upload(pts(40000))
    best("geodesic square n=40000 f32",
         lambda: c.submit_geodesic(sq, dtype="float32", backend="cuda", output=False))
    sq.delete()
if "square64" in jobs:
    sq = c.upload(pts(30000))
    best("geodesic square n=30000 f64",
         lambda: c.submit_geodesic(sq, backend="cuda", output=False))
    sq.delete()
if "knn" in jobs:
    kp = c.upload(pts(10_000_000))
    best("geodesic knn 1e7 k=10",
         lambda: c.submit_geodesic(kp, query={"knn": {"k": 10}}, backend="cuda", output=False))
    kp.delete()
if "pile" in jobs:
    pile = c.upload(np.tile([[48.85, 2.35]], (40000, 1)))
    best("geodesic knn 40000 identical k=10",
         lambda: c.submit_geodesic(pile, query={"knn": {"k": 10}}, backend="cuda", output=False))
    pile.delete()
if "matmul" in jobs:
    a = c.upload(rng.standard_normal((16384, 16384)))
    b = c.upload(rng.standard_normal((16384, 16384)))
    best("matmul 16384^2 f64",
         lambda: c.submit_matmul(a, b, backend="cuda", output=False))
if "map" in jobs:
    ma = c.upload(rng.standard_normal(1 << 28))
    mb = c.upload(rng.standard_normal(1 << 28))
    best("map 2^28 f64 a*b+c",
         lambda: c.submit_map("a*b + c", backend="cuda", a=ma, b=mb, c=1.5, output=False))
    ma.delete(); mb.delete()
if "reduce" in jobs:
    ua = c.upload(rng.standard_normal(1 << 28))
    ub = c.upload(rng.standard_normal(1 << 28))
    best("reduce sum 2^28 f64 a*b",
         lambda: c.submit_reduce("sum", "a*b", backend="cuda", a=ua, b=ub))
    ua.delete(); ub.delete()
PY
  kill $pid; wait $pid 2>/dev/null || true
  # job id -> the spread its job_end logged
  grep -o 'id=j_[a-z0-9]* .*spread="[^"]*"' "$d/log" \
    | sed 's/^id=\(j_[a-z0-9]*\) .*spread="\([^"]*\)"/\1\t\2/' >> "$res/spread" || true
  grep -o 'geoq trace: [0-9]\{7,\} queries.*' "$d/log" | sed "s/^/[$cfg] /" >> "$res/trace" || true
  rm -rf "$d"
done
echo "| job | GPUs visible | status | submit->stored ms | compute ms | d2h ms | prepare/h2d/store ms | every run's total ms | spread |"
echo "|---|---|---|---|---|---|---|---|---|"
touch "$res/spread"
while IFS='	' read -r name vis st tot comp d2h id rest reps; do
  sp=$(awk -F'\t' -v id="$id" '$1 == id { print $2 }' "$res/spread")
  echo "| $name | $vis | $st | $tot | $comp | $d2h | $rest | $reps | ${sp:--} |"
done < "$res/rows"
if [ -s "$res/trace" ]; then
  echo
  echo "kNN calls of 10^6 points or more, as each daemon traced them (query.cu's gq_trace):"
  cat "$res/trace"
fi
rm -rf "$res"
