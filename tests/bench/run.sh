#!/bin/sh
# run.sh — every benchmark of tests/bench in turn, with sizes that finish in
# a few minutes on a 2-core machine; each prints its own table (ratios
# against a peer measured in the same run). `make bench` calls it after a
# Release build:
#
#   sh tests/bench/run.sh [build dir, default build]
#
# A benchmark that is not built is reported and skipped; one that fails is
# reported and the others still run; the exit status says whether any
# failed. See tests/bench/README.md for what each table means.
set -u
B=${1:-build}
failed=0

run() {
  name=$1
  shift
  echo
  if [ ! -x "$B/$name" ]; then
    echo "== $name: not built in $B (skipped)"
    return
  fi
  echo "== $name $*"
  "$B/$name" "$@"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "== $name exited with status $rc"
    failed=1
  fi
}

echo "tessel benchmarks: $(nproc) cores, load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg) (the machine may be shared: see the" \
  "load averages the tables print)"

# The service's own overhead: tiny jobs over HTTP, against GET /healthz and
# the store's per-job calls.
if [ -x "$B/tesseld" ]; then
  run bench_service "$B/tesseld" --seconds 3 --conc 1,4,8,16,64
else
  echo "== bench_service: no $B/tesseld (skipped)"
fi
run bench_store 2 1
run bench_insert --seconds 2
run bench_sched
run bench_map 1e7 2
run bench_sink 1e6,1e7 2
run bench_matmul 3 1000
run bench_geodesic --sizes 1000,5000 --geopy 300 --no-gpu

# Geodesic neighbour queries (issue 13) against PostGIS, BallTree and the
# square matrix; its markdown copy goes to the build dir, not results/.
echo
if [ -x "$B/tesseld" ]; then
  echo "== bench_geoquery.py --n 1e4"
  if ! "${PYTHON:-python3}" "$(dirname "$0")/bench_geoquery.py" --tesseld "$B/tesseld" \
      --n 1e4 --out "$B/geoquery.md"; then
    echo "== bench_geoquery.py failed"
    failed=1
  fi
else
  echo "== bench_geoquery.py: no $B/tesseld (skipped)"
fi

exit $failed
