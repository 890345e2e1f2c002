#!/bin/sh
# bench_split.sh — a geodesic matrix run whole and split into tiles, side by
# side on one machine: the same job on a tesseld that never splits (U) and
# on one that splits from 1000 pairs (S, --tiles T), each with --threads W.
#
#   sh tests/bench/bench_split.sh path/to/tesseld [n] [tiles] [workers] [backend]
#
# For each layout (square, condensed, with targets: n x n/2) on backend
# serial (the default: a whole job on one thread, a split job's tiles on up
# to W workers at once; or cpu, cuda) it prints submit -> succeeded wall ms of both and the
# ratio whole / split (above 1: the split job is faster). The results are
# compared byte for byte (a split job's result is the whole job's).
# Needs curl and python3.
set -eu
bin=${1:?path to tesseld}
n=${2:-3000}
T=${3:-4}
W=${4:-$(nproc)}
B=${5:-serial}
d=$(mktemp -d /tmp/tessel-bsplit.XXXXXX)
start() { # name port flags...
  name=$1 port=$2
  shift 2
  "$bin" --port "$port" --data-dir "$d/$name" --access-log 0 --threads "$W" "$@" \
    > "$d/$name.log" 2>&1 &
  echo $! >> "$d/pids"
  for i in $(seq 1 100); do
    curl -sf "localhost:$port/readyz" > /dev/null 2>&1 && return
    sleep 0.1
  done
  echo "tesseld did not start: $(tail -3 "$d/$name.log")" >&2
  exit 1
}
trap 'kill $(cat "$d/pids" 2>/dev/null) 2>/dev/null; wait 2>/dev/null; rm -rf "$d"' EXIT
pu=18621 ps=18622
start whole $pu
start split $ps --split-min-pairs 1000 --tiles "$T"
sleep 2 # the cost model's calibration at start
run() { # port body -> "ms id"
  python3 - "$1" "$2" <<'PY'
import json, sys, time, urllib.request
port, body = sys.argv[1], sys.argv[2]
def call(method, path, data=None):
    rq = urllib.request.Request("http://localhost:%s%s" % (port, path), data=data,
                                method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=600) as r:
        return json.load(r)
t0 = time.time()
j = call("POST", "/v1/jobs", body.encode())
while j["status"] in ("queued", "running"):
    j = call("GET", "/v1/jobs/%s?wait=60" % j["id"])
ms = (time.time() - t0) * 1e3
if j["status"] != "succeeded":
    sys.exit("job %s: %s" % (j["id"], j.get("error")))
print("%.1f %s %s" % (ms, j["id"], (j.get("tiles") or {}).get("total", 0)))
PY
}
npy() { curl -s "localhost:$1/v1/jobs/$2/result?format=npy" | sha256sum | cut -c1-16; }
echo "n = $n, tiles = $T, workers = $W, cores = $(nproc), backend $B"
printf '%-10s %12s %12s %8s %7s %s\n' layout whole_ms split_ms ratio tiles same_bytes
for layout in square condensed targets; do
  extra=""
  case $layout in
    condensed) extra=',"layout":"condensed"' ;;
    targets) extra=",\"targets\":{\"random\":{\"shape\":[$((n / 2)),2],\"low\":-60,\"high\":60,\"seed\":2}}" ;;
  esac
  body="{\"kind\":\"geodesic\",\"backend\":\"$B\",\"params\":{\"points\":{\"random\":{\"shape\":[$n,2],\"low\":-80,\"high\":80,\"seed\":1}}$extra}}"
  set -- $(run $pu "$body")
  wms=$1 wid=$2
  set -- $(run $ps "$body")
  sms=$1 sid=$2 tiles=$3
  same=no
  [ "$(npy $pu "$wid")" = "$(npy $ps "$sid")" ] && same=yes
  ratio=$(python3 -c "print('%.2f' % ($wms / $sms))")
  printf '%-10s %12s %12s %8s %7s %s\n' "$layout" "$wms" "$sms" "$ratio" "$tiles" "$same"
done
