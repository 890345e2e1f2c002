#!/bin/sh
# tests/bench/ab.sh — the service's benchmarks on two builds in one run,
# interleaved (before, after, before, after, ...), so that a change's effect
# on speed is read side by side under the same machine state (issue 10's
# "within noise" check of a refactor).
#
#   tests/bench/ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS=2]
#
# Each build folder holds tesseld, bench_service, bench_map and
# bench_geodesic (a Release build: cmake -DCMAKE_BUILD_TYPE=Release). Per
# round and build it runs
#   bench_service <that build's tesseld> --seconds 3 --conc 1,8
#       (the client is AFTER's bench_service for both daemons: one client),
#   bench_map 1e7 2            (serial and 2-thread map/reduce engine),
#   bench_geodesic --sizes 2000 --no-gpu --geopy 0   (karney, 1 and 2 threads),
# and prints each program's own table under a header naming the build and
# the round. Peers (NumPy, numexpr, PROJ) are in those tables too.
set -eu
before=${1:?usage: ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]}
after=${2:?usage: ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]}
rounds=${3:-2}
for b in "$before" "$after"; do
  for x in tesseld bench_map bench_geodesic; do
    [ -x "$b/$x" ] || { echo "ab.sh: $b/$x is missing" >&2; exit 2; }
  done
done
[ -x "$after/bench_service" ] || { echo "ab.sh: $after/bench_service is missing" >&2; exit 2; }
r=1
while [ "$r" -le "$rounds" ]; do
  for side in before after; do
    if [ "$side" = before ]; then b=$before; else b=$after; fi
    echo "=== round $r, $side ($b) ==="
    echo "--- bench_service"
    "$after/bench_service" "$b/tesseld" --seconds 3 --conc 1,8
    echo "--- bench_map"
    "$b/bench_map" 1e7 2
    echo "--- bench_geodesic"
    "$b/bench_geodesic" --sizes 2000 --no-gpu --geopy 0
  done
  r=$((r + 1))
done
