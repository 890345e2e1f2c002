#!/bin/sh
# bench_auto.sh — is `auto` as fast as the best backend, submit -> stored?
# (issue 11 item 5). Starts tesseld on a free port with a fresh data dir (so
# it calibrates, and its corrections start from nothing), uploads the inputs
# as .npy (made by the daemon itself from {"random"} jobs and downloaded:
# no NumPy needed), then for each case submits the same job with backend
# auto, serial, cpu (and cuda when the daemon has a usable GPU), REPS
# rounds interleaved, each with ?wait=; the time is the job's own
# timings_ms.total (queued -> result stored), the medians are printed as a
# Markdown table: the backend auto picked in the first round (before its
# corrections learnt from this case) and, in brackets, the first letters of
# its pick in every round (se, cp, cu), its first estimate, each backend's
# median, auto's median, "picked / best" (the median of the backend auto
# picked most often over the best median: the choice judged apart from
# auto's own run-to-run noise) and auto / best (issue 11's target).
#   sh tests/bench/bench_auto.sh TESSELD [REPS=3]
# (a case whose first round took under 10 ms on every backend gets 3 x REPS
# rounds: sub-millisecond jobs on a shared machine need them)
# Environment: CASES (a space-separated subset of the case names below,
# default all), BIG (1: include the 1e8 cases, default 1), KEEP (1: keep the
# work dir). Needs curl and jq. Every job is deleted once measured, so the
# disk holds one case's results at a time.
set -eu
bin=${1:?usage: bench_auto.sh TESSELD [REPS]}
reps=${2:-3}
big=${BIG:-1}
work=$(mktemp -d /tmp/tessel-auto.XXXXXX)
"$bin" --port 0 --data-dir "$work/data" --access-log 0 --log-level info \
  --max-upload 4294967296 --job-timeout 600 > "$work/out" 2> "$work/daemon.log" &
dpid=$!
cleanup() {
  kill "$dpid" 2>/dev/null || true
  wait "$dpid" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap "exit 1" INT TERM
port=""
for i in $(seq 1 300); do
  port=$(grep -o 'listening on http://[^/]*' "$work/out" 2>/dev/null | sed 's/.*://') || true
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "bench_auto.sh: the daemon did not start" >&2; cat "$work/daemon.log" >&2; exit 1; }
base="http://127.0.0.1:$port"
gpus=$(curl -sf "$base/v1/devices" | jq '[.devices[]? | select(.healthy != false)] | length' 2>/dev/null || echo 0)
[ -n "$gpus" ] || gpus=0
backends="serial cpu"
[ "$gpus" -gt 0 ] && backends="serial cpu cuda"

# POST a job (JSON in $1) and wait; prints the finished job.
job() {
  curl -sf -X POST -H 'Content-Type: application/json' --data-binary "$1" \
    "$base/v1/jobs?wait=60"
}
# An uploaded array made from the params of a map job ($1: its inputs JSON,
# $2 its expression): computed by the daemon, downloaded as .npy, uploaded.
upload_of() {
  j=$(job "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":\"$2\",\"inputs\":$1}}")
  id=$(echo "$j" | jq -r .id)
  [ "$(echo "$j" | jq -r .status)" = succeeded ] || { echo "bench_auto.sh: input job: $j" >&2; exit 1; }
  curl -sf -o "$work/in.npy" "$base/v1/jobs/$id/result?format=npy"
  curl -sf -X DELETE "$base/v1/jobs/$id" > /dev/null
  a=$(curl -sf -X POST -H 'Content-Type: application/x-npy' -T "$work/in.npy" "$base/v1/arrays" | jq -r .id)
  rm -f "$work/in.npy"
  echo "$a"
}
rnd() { # rnd SHAPE SEED LOW HIGH
  echo "{\"x\":{\"random\":{\"shape\":$1,\"seed\":$2,\"low\":$3,\"high\":$4}}}"
}

# Cases: name, kind, params (with the uploaded arrays' ids).
: > "$work/cases"
add() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$work/cases"; }
sizes="100000 1000000 10000000"
[ "$big" = 1 ] && sizes="$sizes 100000000"
want() { [ -z "${CASES:-}" ] || echo " $CASES " | grep -q " $1 "; }
for n in $sizes; do
  e=$(printf '%.0e' "$n" | sed 's/+0*//')
  if want "map-poly-$e" || want "map-div-$e" || want "reduce-sum-$e" || want "chain-poly-$e"; then
    x=$(upload_of "$(rnd "[$n]" 1 0 1)" x)
  fi
  want "map-poly-$e" && add "map-poly-$e" map "{\"expr\":\"x**2 + 2*x + 1\",\"inputs\":{\"x\":{\"array\":\"$x\"}}}"
  if want "map-div-$e"; then
    a=$(upload_of "$(rnd "[$n]" 2 1 2)" x)
    add "map-div-$e" map "{\"expr\":\"-b/a\",\"inputs\":{\"a\":{\"array\":\"$a\"},\"b\":{\"array\":\"$x\"}}}"
  fi
  want "reduce-sum-$e" && add "reduce-sum-$e" reduce "{\"op\":\"sum\",\"inputs\":{\"x\":{\"array\":\"$x\"}}}"
  if want "chain-poly-$e" && [ "$n" -ge 10000000 ]; then
    # the input is a finished job's result (its file mapped), not an upload
    c=$(job "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":\"x + 1\",\"inputs\":{\"x\":{\"array\":\"$x\"}}}}" | jq -r .id)
    add "chain-poly-$e" map "{\"expr\":\"x**2 + 2*x + 1\",\"inputs\":{\"x\":{\"result\":\"$c\"}}}"
  fi
done
for n in 256 512 1024 2048; do
  want "matmul-$n" || continue
  w=$(upload_of "$(rnd "[$n,$n]" 3 -1 1)" x)
  v=$(upload_of "$(rnd "[$n,$n]" 4 -1 1)" x)
  add "matmul-$n" matmul "{\"a\":{\"array\":\"$w\"},\"b\":{\"array\":\"$v\"},\"bias\":1.5}"
done
for n in 500 1000 2000 5000; do
  want "geodesic-$n" || continue
  p=$(upload_of "$(rnd "[$n,2]" 5 -80 80)" x)
  add "geodesic-$n" geodesic "{\"points\":{\"array\":\"$p\"}}"
done

echo "# bench_auto: $(uname -n), $(nproc) cores, $gpus GPU(s), reps $reps, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# calibration: $(grep -o 'router: calibrated.*' "$work/daemon.log" | head -1)"
echo
hdr="| case | auto chose | its estimate ms |"
sep="|---|---|---|"
for b in $backends; do hdr="$hdr $b ms |"; sep="$sep---|"; done
echo "$hdr auto ms | picked / best | auto / best | auto's estimates (serial / cpu / cuda ms) |"
echo "$sep---|---|---|---|"
ok=0 okp=0 total=0
: > "$work/acc"
while IFS="$(printf '\t')" read -r name kind params; do
  : > "$work/t"
  chose="" est="" ests="" picks=""
  r=1
  case_reps=$reps
  while [ "$r" -le "$case_reps" ]; do
    # each round starts one backend further on, so that none always runs
    # first (after the previous case's results were deleted) or last
    order=$(echo auto $backends | awk -v r="$r" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r - 1) % NF + 1) }')
    for b in $order; do
      j=$(job "{\"kind\":\"$kind\",\"backend\":\"$b\",\"params\":$params}") || j='{}'
      id=$(echo "$j" | jq -r '.id // empty')
      st=$(echo "$j" | jq -r '.status // "?"')
      if [ "$st" != succeeded ]; then
        echo "bench_auto.sh: $name on $b: $st $(echo "$j" | jq -c '.error // .')" >&2
      else
        echo "$b $(echo "$j" | jq -r .timings_ms.total)" >> "$work/t"
        [ "$b" = auto ] && picks="$picks$(echo "$j" | jq -r '.backend.used | sub(":.*";"")' | cut -c1-2)"
        if [ "$b" = auto ] && [ -z "$chose" ]; then
          chose=$(echo "$j" | jq -r .backend.used)
          est=$(echo "$j" | jq -r '.estimate.router[(.backend.used | sub(":.*";"")) + "_ms"] // .estimate[(.backend.used | sub(":.*";"")) + "_ms"] // "?"')
          ests=$(echo "$j" | jq -r '(.estimate.router // .estimate) | [.serial_ms, .cpu_ms, .cuda_ms] | map(if . == null then "-" else (. * 10 | round / 10 | tostring) end) | join(" / ")')
        fi
      fi
      [ -n "$id" ] && curl -s -o /dev/null -X DELETE "$base/v1/jobs/$id"
    done
    # jobs under 10 ms are all noise at REPS rounds: three times as many
    [ "$r" = 1 ] && awk '$2 > m { m = $2 } END { exit !(m < 10) }' "$work/t" &&
      case_reps=$((reps * 3))
    r=$((r + 1))
  done
  # the backend auto picked most often
  pick=$(echo "$picks" | fold -w2 | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
  case "$pick" in se) pick=serial ;; cp) pick=cpu ;; cu) pick=cuda ;; esac
  line=$(awk -v bs="auto $backends" -v pick="$pick" '
    { v[$1] = v[$1] " " $2; n[$1]++ }
    function median(name,   a, k, i, j, t) {
      k = split(v[name], a, " "); if (k == 0) return -1
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
    END {
      nb = split(bs, bk, " "); best = -1; s = ""
      for (i = 2; i <= nb; i++) { m = median(bk[i]); s = s sprintf(" %.1f |", m)
        if (m >= 0 && (best < 0 || m < best)) best = m }
      am = median("auto"); pm = median(pick)
      printf "%s %.1f | %.2f | %.2f |", s, am, (best > 0 ? pm / best : 0), (best > 0 ? am / best : 0) }' "$work/t")
  est=$(printf '%.1f' "$est" 2>/dev/null || echo "$est")
  # the first estimate against the median of the backend it was for
  awk -v b="${chose%%:*}" -v est="$est" '$1 == b { v[++n] = $2 }
    END { if (n == 0 || est + 0 <= 0) exit
          for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
          if (m > 0) print est / m }' "$work/t" >> "$work/acc"
  echo "| $name | $chose ($picks) | $est |$line $ests |"
  ratio=$(echo "$line" | awk -F'|' 'NF > 1 { print $(NF-1) }')
  pratio=$(echo "$line" | awk -F'|' 'NF > 2 { print $(NF-2) }')
  total=$((total + 1))
  awk -v r="$ratio" 'BEGIN { exit !(r + 0 <= 1.10) }' && ok=$((ok + 1))
  awk -v r="$pratio" 'BEGIN { exit !(r + 0 <= 1.10) }' && okp=$((okp + 1))
done < "$work/cases"
echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "auto's own median within 10 % of the best backend's on $ok of $total cases (target: >= 90 %)"
echo "the backend auto picked most often within 10 % of the best (same medians) on $okp of $total cases"
sort -n "$work/acc" 2>/dev/null | awk '{ r = $1 < 1 ? 1 / $1 : $1; f[NR] = r; w += ($1 >= 0.5 && $1 <= 2) }
  END { if (NR == 0) exit; n = asort_f(f, NR); printf "auto'"'"'s first estimate within 2x of that backend'"'"'s median on %d of %d cases; median factor %.2f\n", w, NR, n }
  function asort_f(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }'
