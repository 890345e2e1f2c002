#!/bin/sh
# upload_text.sh — speed of CSV and JSON uploads (issue 11, item 1): curl
# --data-binary of a ~200 MB CSV body (10,000,000 float64 as %.17g, 2
# columns) and of the same values as JSON nested lists into POST
# /v1/arrays of two daemons, e.g. before and after streaming, ROUNDS times,
# interleaved; prints each run and a table of medians (MB/s of body).
#   sh tests/bench/upload_text.sh OLD_TESSELD NEW_TESSELD [ROUNDS=3]
set -eu
old=${1:?usage: upload_text.sh OLD_TESSELD NEW_TESSELD [ROUNDS]}
new=${2:?usage: upload_text.sh OLD_TESSELD NEW_TESSELD [ROUNDS]}
rounds=${3:-3}
py=${PYTHON:-python3}
work=$(mktemp -d /tmp/tessel-upload-text.XXXXXX)
trap 'kill $opid $npid 2>/dev/null; rm -rf "$work"' EXIT
opid=""; npid=""
"$py" - "$work" <<'PY'
import random, sys
w = sys.argv[1]
random.seed(11)
rows = 5_000_000
with open(f"{w}/body.csv", "w") as c, open(f"{w}/body.json", "w") as j:
    j.write("[")
    for r in range(rows):
        a, b = random.uniform(-1e3, 1e3), random.uniform(-1, 1) * 10 ** random.randint(-300, 300)
        c.write(f"{a!r},{b!r}\n")
        j.write(f"{',' if r else ''}[{a!r},{b!r}]")
    j.write("]")
PY
start() { # $1 binary, $2 name -> port in $work/$2.port
  "$1" --port 0 --data-dir "$work/$2" --access-log 0 > "$work/$2.out" 2> "$work/$2.log" &
  echo $! > "$work/$2.pid"
  for i in $(seq 1 100); do
    p=$(grep -o 'listening on http://[^/]*' "$work/$2.out" 2>/dev/null | sed 's/.*://') || true
    [ -n "$p" ] && { echo "$p" > "$work/$2.port"; return 0; }
    sleep 0.1
  done
  echo "upload_text.sh: $1 did not start" >&2; exit 1
}
start "$old" old; opid=$(cat "$work/old.pid")
start "$new" new; npid=$(cat "$work/new.pid")
ls -l "$work/body.csv" "$work/body.json" | awk '{print $5, $NF}'
for d in old new; do # peak RSS from here on (after start-up's calibration)
  echo 5 > /proc/$(cat "$work/$d.pid")/clear_refs 2>/dev/null || true
  echo "$d: VmRSS at start $(grep VmRSS /proc/$(cat "$work/$d.pid")/status | awk '{print $2, $3}')"
done
: > "$work/times"
r=1
while [ "$r" -le "$rounds" ]; do
  for fmt in csv json; do
    ct=text/csv; [ "$fmt" = json ] && ct=application/json
    for d in old new; do
      port=$(cat "$work/$d.port")
      curl -s -o "$work/answer" -w "$d $fmt %{http_code} %{time_total} %{size_upload}\n" \
        -H "Content-Type: $ct" --data-binary @"$work/body.$fmt" \
        "http://127.0.0.1:$port/v1/arrays" | tee -a "$work/times"
      id=$(sed -n 's/.*"id":"\(a_[^"]*\)".*/\1/p' "$work/answer")
      [ -n "$id" ] && curl -s -o /dev/null -X DELETE "http://127.0.0.1:$port/v1/arrays/$id"
    done
  done
  r=$((r + 1))
done
for d in old new; do
  echo "$d: VmHWM after the uploads $(grep VmHWM /proc/$(cat "$work/$d.pid")/status | awk '{print $2, $3}')"
done
"$py" - "$work/times" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    d, fmt, code, s, size = line.split()
    assert code in ("200", "201"), line
    t.setdefault((fmt, d), []).append((float(s), float(size)))
print("| body | before (collected) | after (streamed) | after / before |")
print("|---|---|---|---|")
for fmt in ("csv", "json"):
    o = statistics.median(s for s, _ in t[(fmt, "old")])
    n = statistics.median(s for s, _ in t[(fmt, "new")])
    mb = t[(fmt, "old")][0][1] / 1e6
    print(f"| {fmt.upper()} {mb:.0f} MB | {o:.2f} s, {mb / o:.0f} MB/s | {n:.2f} s, {mb / n:.0f} MB/s | {o / n:.2f}x |")
PY
