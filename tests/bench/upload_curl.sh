#!/bin/sh
# upload_curl.sh — issue 11's upload check as the issue measured it: curl -T
# of a 1 GiB .npy into tesseld's POST /v1/arrays and into a plain Python
# socket sink (upload_sink.py), interleaved, ROUNDS times; prints curl's
# time and speed for each and the ratio of the medians.
#   sh tests/bench/upload_curl.sh path/to/tesseld [ROUNDS=3]
set -eu
bin=${1:?usage: upload_curl.sh TESSELD [ROUNDS]}
rounds=${2:-3}
py=${PYTHON:-python3}
work=$(mktemp -d /tmp/tessel-upload.XXXXXX)
"$py" -c "import numpy as np; np.save('$work/big.npy', np.random.rand(1 << 27))"
"$bin" --port 0 --data-dir "$work/data" --access-log 0 --max-upload 4294967296 \
  > "$work/out" 2> "$work/daemon.log" &
dpid=$!
"$py" "$(dirname "$0")/upload_sink.py" 0 > "$work/sink" 2>&1 &
spid=$!
trap 'kill $dpid $spid 2>/dev/null; rm -rf "$work"' EXIT
port=""
for i in $(seq 1 100); do
  port=$(grep -o 'listening on http://[^/]*' "$work/out" 2>/dev/null | sed 's/.*://') || true
  sport=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$work/sink" 2>/dev/null) || true
  [ -n "$port" ] && [ -n "$sport" ] && break
  sleep 0.1
done
[ -n "$port" ] && [ -n "$sport" ] || { echo "upload_curl.sh: daemon or sink did not start" >&2; exit 1; }
r=1
: > "$work/times"
while [ "$r" -le "$rounds" ]; do
  curl -s -o /dev/null -w "sink   %{time_total} s %{speed_upload} B/s\n" -X POST \
    -H 'Content-Type: application/x-npy' -T "$work/big.npy" "http://127.0.0.1:$sport/x" | tee -a "$work/times"
  curl -s -o "$work/answer" -w "tessel %{time_total} s %{speed_upload} B/s\n" -X POST \
    -H 'Content-Type: application/x-npy' -T "$work/big.npy" "http://127.0.0.1:$port/v1/arrays" | tee -a "$work/times"
  id=$(sed -n 's/.*"id":"\(a_[^"]*\)".*/\1/p' "$work/answer")
  [ -n "$id" ] && curl -s -o /dev/null -X DELETE "http://127.0.0.1:$port/v1/arrays/$id"
  r=$((r + 1))
done
"$py" - "$work/times" <<'PY'
import statistics, sys
t = {"sink": [], "tessel": []}
for line in open(sys.argv[1]):
    k, s = line.split()[0], float(line.split()[1])
    t[k].append(s)
ms, mt = statistics.median(t["sink"]), statistics.median(t["tessel"])
print(f"median: sink {ms:.3f} s, tesseld {mt:.3f} s: tesseld / sink speed = {ms / mt:.2f}")
PY
