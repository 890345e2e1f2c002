#!/bin/sh
# bench_prepare.sh — the prepare phase (building a job's inputs) side by side
# on the three backends, and how soon a cancel ends a job still in it.
#
#   sh tests/bench/bench_prepare.sh path/to/tesseld [port]
#
# For {"random"} inputs of 10^8 values (uniform, normal) it runs a reduce
# (sum: a tiny compute, a scalar result) on serial, cpu and cuda (cuda
# rows say "unavailable" without a GPU) and prints prepare / compute / total
# in ms and prepare's speed-up over serial; then it submits a map over 10^9
# normal float32 values on each backend, cancels it 0.5 s in (inside its
# prepare) and prints the time from the cancel's answer to the job's end.
# A serial job builds its inputs on one thread, the others on the pool.
# Needs curl and python3.
set -eu
bin=${1:?path to tesseld}
port=${2:-18601}
d=$(mktemp -d /tmp/tessel-prep.XXXXXX)
"$bin" --port "$port" --data-dir "$d" --access-log 0 > "$d/out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$d"' EXIT
for i in $(seq 1 100); do
  curl -sf "localhost:$port/readyz" > /dev/null 2>&1 && break
  sleep 0.1
done
sleep 2 # the cost model's calibration at start uses the cores
J='Content-Type: application/json'
echo "cores: $(nproc)"
printf '%-8s %-8s %12s %12s %12s %10s\n' input backend prepare_ms compute_ms total_ms speedup
for dist in uniform normal; do
  base=""
  for b in serial cpu cuda; do
    out=$(curl -s -H "$J" "localhost:$port/v1/jobs?wait=60" -d "{\"kind\":\"reduce\",\"backend\":\"$b\",\"params\":{\"op\":\"sum\",\"expr\":\"x\",\"inputs\":{\"x\":{\"random\":{\"shape\":[100000000],\"seed\":1,\"dist\":\"$dist\"}}}}}")
    line=$(echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j.get("timings_ms")
if not t:
    print("- - - %s" % j.get("error", {}).get("code", j.get("status")))
else:
    print("%.1f %.1f %.1f %s" % (t["prepare"], t["compute"], t["total"], j["status"]))')
    set -- $line
    [ "$b" = serial ] && base=$1
    sp=$(python3 -c "import sys; a,b=sys.argv[1:]; print('%.1fx' % (float(a)/float(b)) if b not in ('-','0.0') and a not in ('','-') else '-')" "$base" "$1")
    printf '%-8s %-8s %12s %12s %12s %10s %s\n' "$dist" "$b" "$1" "$2" "$3" "$sp" "$4"
  done
done
echo
printf '%-8s %22s %18s %s\n' backend cancel_to_end_s prepare_ms status
for b in serial cpu cuda; do
  id=$(curl -s -H "$J" "localhost:$port/v1/jobs" -d "{\"kind\":\"map\",\"backend\":\"$b\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":{\"random\":{\"shape\":[1000000000],\"seed\":1,\"dist\":\"normal\"}}},\"dtype\":\"float32\"}}" |
       python3 -c 'import json,sys; print(json.load(sys.stdin).get("id", ""))')
  if [ -z "$id" ]; then printf '%-8s %22s\n' "$b" unavailable; continue; fi
  sleep 0.5
  t1=$(python3 -c 'import time; print(time.time())')
  curl -s -X POST "localhost:$port/v1/jobs/$id/cancel" -o /dev/null
  out=$(curl -s "localhost:$port/v1/jobs/$id?wait=60")
  t2=$(python3 -c 'import time; print(time.time())')
  echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j.get("timings_ms", {})
print("%-8s %22.3f %18.1f %s" % (sys.argv[1], float(sys.argv[3]) - float(sys.argv[2]), t.get("prepare", 0), j["status"]))' "$b" "$t1" "$t2"
done
