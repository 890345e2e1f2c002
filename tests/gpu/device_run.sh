#!/bin/sh
# device_run.sh — everything that needs a GPU, in one go, on the lent GPU
# machine (its copy of the repo; binaries and the libraries that machine
# lacks carried in BIN, see tests/gpu/README.md):
#   1. the GPU tests (tests/gpu/run.sh),
#   2. the integration tests against the daemon WITH a GPU (compare then
#      includes cuda:0, auto may route to it),
#   3. geodesic end to end through HTTP (n = 20,000, square, float64, cuda
#      and cpu) beside bench_geodesic's "copy + write" peer,
#   4. the GPU benchmark table,
#   5. bench_e2e (SKIP_E2E=1 skips it, ONLY_E2E=1 runs it alone; E2E_ARGS="--matmul-big ..." adds flags;
#      its peers run tests/bench/peers_e2e.py with python3, its Python
#      client rows tests/bench/bench_client.py with $TESSEL_PYTHON or python3),
#   6. bench_auto.sh: auto's backend against serial, cpu and cuda,
#      submit -> stored, per case (SKIP_AUTO=1 skips it; needs curl, jq).
# Step 3b runs tests/cluster (two nodes, split nodes, test_cluster.py with
# a GPU node) on PostgreSQL carried in BIN/pg.tar.xz (SKIP_CLUSTER=1 skips).
# Logs go to $OUT when set (the device tool), else to BIN. SKIP_BENCH=1 skips
# step 4. Carry only libraries that machine lacks (not libnettle: its GnuTLS
# needs its own).
#   sh tests/gpu/device_run.sh BIN
set -u
BIN=${1:?directory with the binaries}
LOG=${OUT:-$BIN}
export LD_LIBRARY_PATH="$PWD/$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TESSEL_WEB_DIR="$PWD/$BIN/web"
fail=0
step() { echo; echo "######## $*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$LOG/gpu.txt"

# ONLY_E2E=1: step 5 alone (the device tool gives a command 10 minutes, and
# bench_e2e with every case takes most of them).
if [ -z "${ONLY_E2E:-}" ]; then

step "1. GPU tests"
for t in "$BIN"/gpu_test_*; do
  echo "=== $(basename "$t")"
  timeout 300 "$t" > "$LOG/$(basename "$t").log" 2>&1
  rc=$?
  tail -3 "$LOG/$(basename "$t").log"
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || { echo "--- FAILED ($rc)"; fail=1; }
  [ $rc -eq 77 ] && echo "--- skipped (77)"
done

step "2. integration tests with a GPU"
for t in "$BIN"/integ_test_*; do
  echo "=== $(basename "$t")"
  timeout 300 "$t" "$BIN/tesseld" > "$LOG/$(basename "$t").log" 2>&1
  rc=$?
  grep -E "CHECK failed|FAIL|passed|SKIP" "$LOG/$(basename "$t").log" | tail -5
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || { echo "--- FAILED ($rc)"; fail=1; }
  [ $rc -eq 77 ] && echo "--- skipped (77: a tool this machine lacks)"
done

step "3. geodesic end to end through HTTP"
data=$(mktemp -d /tmp/tessel-dev.XXXXXX)
"$BIN/tesseld" --port 0 --data-dir "$data" --access-log 0 > "$data/out" 2> "$LOG/daemon.log" &
pid=$!
port=""
for i in $(seq 1 100); do
  port=$(grep -o 'listening on http://[^/]*' "$data/out" 2>/dev/null | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
curl -s "http://127.0.0.1:$port/v1/devices" | tee "$LOG/devices.json"; echo
timeout 240 python3 tests/bench/geodesic_http.py "http://127.0.0.1:$port" --sizes 5000,20000 \
  --backends cuda,cpu --dir "$data" 2>&1 | tee "$LOG/geodesic_http.txt"
curl -s -X POST "http://127.0.0.1:$port/v1/jobs?wait=60" -H 'Content-Type: application/json' \
  -d '{"kind":"map","backend":"compare","params":{"expr":"sin(x)*exp(-x)","inputs":{"x":{"random":{"shape":[50000000],"seed":1}}}}}' \
  | tee "$LOG/compare_map.json"; echo
kill -TERM $pid; wait $pid
timeout 200 "$BIN/bench_geodesic" --no-cpu --gpu-sizes 20000,50000 --e2e 20000 --e2e-dir "$data" \
  2>&1 | tee "$LOG/bench_geodesic.txt"
rm -rf "$data"

step "3b. a PostgreSQL cluster with a GPU node (tests/cluster, pack_pg.sh)"
if [ -f "$BIN/pg.tar.xz" ] && [ -z "${SKIP_CLUSTER:-}" ]; then
  # the server carried in $BIN (no PostgreSQL there); only n0 sees the GPU
  PG_BIN=$(sh tests/cluster/pack_pg.sh --unpack "$BIN") && export PG_BIN
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$BIN/pg/lib"
  for t in test_two_nodes.sh test_split_nodes.sh; do
    echo "=== $t"
    timeout 280 sh "tests/cluster/$t" "$BIN/tesseld" > "$LOG/$t.log" 2>&1
    rc=$?
    grep -E "^ok|^FAIL" "$LOG/$t.log"
    [ $rc -eq 0 ] || { echo "--- FAILED ($rc)"; fail=1; }
  done
  echo "=== test_cluster.py (TESSEL_CLUSTER_GPU_N0=1)"
  TESSEL_CLUSTER_GPU_N0=1 timeout 500 python3 tests/cluster/test_cluster.py "$BIN/tesseld" \
    > "$LOG/test_cluster.log" 2>&1
  rc=$?
  grep -E "^FAIL|cuda job|all passed" "$LOG/test_cluster.log"
  [ $rc -eq 0 ] || { echo "--- FAILED ($rc)"; fail=1; }
else
  echo "no $BIN/pg.tar.xz (pack.sh makes it where PostgreSQL 15 is installed) or SKIP_CLUSTER: skipped"
fi

step "4. GPU benchmarks"
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 200 "$BIN/bench_gpu" --max-exp 9 2>&1 | tee "$LOG/bench_gpu.txt"
fi
fi # ONLY_E2E

step "5. end to end (bench_e2e: upload, job, download beside CuPy and PyTorch)"
if [ -z "${SKIP_E2E:-}" ]; then
  # Every case on serial, cpu, cuda and auto, the ceilings (memcpy, sink,
  # sendfile server, pinned PCIe), NumPy/CuPy/PyTorch; geodesic n = 20,000
  # comes by itself with a GPU; E2E_ARGS adds or overrides (--matmul-big for
  # 8192^2, --reps 5, --cases map1,chain ...). Then the Python client's rows
  # (issue 12: tests/bench/bench_client.py, 1e8 float64, beside curl and the
  # C same-host client) with this machine's python3, which has NumPy;
  # E2E_ARGS="--cases none" gives the ceilings and those rows alone,
  # "--client-sizes none" leaves them out.
  TESSEL_PYTHON=${TESSEL_PYTHON:-$(command -v python3)} \
  timeout 580 "$BIN/bench_e2e" "$BIN/tesseld" --sizes 1e6,1e7,1e8 --matmul 1024,4096 \
    --geo 5000 --upload-mib 1024 --download-mb 800 --reps 3 ${E2E_ARGS:-} 2>&1 \
    | tee "$LOG/bench_e2e.txt"
fi
step "6. auto against the best backend, submit -> stored (bench_auto.sh)"
if [ -z "${SKIP_AUTO:-}" ]; then
  if command -v jq > /dev/null && command -v curl > /dev/null; then
    timeout 500 sh tests/bench/bench_auto.sh "$BIN/tesseld" 3 2>&1 | tee "$LOG/bench_auto.md"
  else
    echo "bench_auto.sh needs curl and jq: skipped"
  fi
fi
echo
[ $fail -eq 0 ] && echo "device_run: all passed" || echo "device_run: FAILURES"
exit $fail
