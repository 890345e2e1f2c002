#!/bin/sh
# tests/cluster/test_split_nodes.sh — split jobs on a cluster (compute/sched/split.c
# with compute/sched/cluster.c): a PostgreSQL server (tests/cluster/pgserver.sh),
# two nodes a and b on one data directory splitting from 1000 pairs into 4
# tiles, and a third tesseld on its own SQLite store that never splits.
#   sh tests/cluster/test_split_nodes.sh build/tesseld
# Exits 77 (skipped) without a PostgreSQL server, pgserver.sh, curl/python3 or a
# tesseld built with libpq. Asserts:
#   - a split matrix (condensed) and a knn job submitted to a end
#     succeeded with tiles {total 4, done 4}, by_node counting 4, and every
#     part is the same .npy bytes as the unsplit job's;
#   - the tiles are in no list: GET /v1/jobs's total on b is the jobs
#     submitted;
#   - cancel of a running split job through the node that does not
#     coordinate it ends it canceled;
#   - kill -9 of the coordinating node mid-split: after the lease (2 s) the
#     other node resumes the job, which succeeds (attempts 2, every tile by
#     the survivor or before the kill) with the unsplit job's bytes.
# No timing is asserted: waits are bounded only so that a bug fails rather
# than hangs.
set -eu

bin=${1:?usage: $0 path/to/tesseld}
tag=split
. "$(dirname "$0")/nodes.sh"
mkdir -p "$tmp/whole"

cluster_node() {
  start_node "$1" --store-file "$tmp/store-url" --data-dir "$tmp/data" \
    --lease-s 2 --node-name "$1" --split-min-pairs 1000 --tiles 4
}

# wait_final PORT ID -> the job's JSON once final (fails after 120 s)
wait_final() {
  i=0
  while :; do
    out=$(get "$1" "/v1/jobs/$2")
    s=$(printf '%s' "$out" | j "d['status']")
    case "$s" in succeeded|failed|canceled) printf '%s' "$out"; return 0 ;; esac
    i=$((i + 1))
    [ $i -lt 1200 ] || fail "job $2 not final: $out"
    sleep 0.1
  done
}
# same PORT1 ID1 PORT2 ID2 PART: the two results' .npy bytes are equal
same() {
  curl -sS -o "$tmp/x1.npy" "http://127.0.0.1:$1/v1/jobs/$2/result$5?format=npy"
  curl -sS -o "$tmp/x2.npy" "http://127.0.0.1:$3/v1/jobs/$4/result$5?format=npy"
  [ -s "$tmp/x1.npy" ] && cmp -s "$tmp/x1.npy" "$tmp/x2.npy" || fail "result$5 of $2 differs from $4's"
}

cluster_node a
cluster_node b
start_node w --data-dir "$tmp/whole"

# ---- split equals whole, tiles counted
mat='{"kind":"geodesic","backend":"cpu","params":{"points":{"random":{"shape":[400,2],"low":-80,"high":80,"seed":1}},"layout":"condensed"}}'
knn='{"kind":"geodesic","backend":"cpu","params":{"points":{"random":{"shape":[400,2],"low":-80,"high":80,"seed":2}},"query":{"knn":{"k":5}}}}'
for body in "$mat" "$knn"; do
  id=$(post "$port_a" /v1/jobs "$body" | j "d['id']")
  wid=$(post "$port_w" /v1/jobs "$body" | j "d['id']")
  out=$(wait_final "$port_b" "$id")
  t=$(printf '%s' "$out" | j "d['status'], d['tiles']['total'], d['tiles']['done'], sum(d['tiles']['by_node'].values())")
  [ "$t" = "succeeded 4 4 4" ] || fail "split job $id: $t"
  wait_final "$port_w" "$wid" > /dev/null
  case "$body" in
    *knn*) same "$port_b" "$id" "$port_w" "$wid" /distance
           same "$port_a" "$id" "$port_w" "$wid" /index ;;
    *) same "$port_b" "$id" "$port_w" "$wid" "" ;;
  esac
done
n=$(get "$port_b" "/v1/jobs?limit=100" | j "d['total'], len(d['jobs'])")
[ "$n" = "2 2" ] || fail "GET /v1/jobs on b: (total, listed) $n, want (2, 2)"

# ---- cancel through the other node
big='{"kind":"geodesic","backend":"serial","params":{"points":{"random":{"shape":[6000,2],"seed":3}}}}'
id=$(post "$port_a" /v1/jobs "$big" | j "d['id']")
i=0
while [ "$(get "$port_a" "/v1/jobs/$id" | j "d['status']")" != running ]; do
  i=$((i + 1)); [ $i -lt 300 ] || fail "split job $id never ran"; sleep 0.1
done
holder=$(get "$port_a" "/v1/jobs/$id" | j "d['node']")
other=$port_b
[ "$holder" = b ] && other=$port_a
c=$(code "$other" "/v1/jobs/$id/cancel")
case "$c" in 200|202) ;; *) fail "cancel through the other node: $c" ;; esac
s=$(wait_final "$port_a" "$id" | j "d['status']")
[ "$s" = canceled ] || fail "canceled split job: $s"

# ---- kill -9 of the coordinator mid-split
body='{"kind":"geodesic","backend":"serial","params":{"points":{"random":{"shape":[5000,2],"seed":4}},"layout":"condensed"}}'
id=$(post "$port_a" /v1/jobs "$body" | j "d['id']")
i=0
while [ "$(get "$port_a" "/v1/jobs/$id" | j "d['status'] == 'running' and d['node'] is not None")" != True ]; do
  i=$((i + 1)); [ $i -lt 300 ] || fail "split job $id never ran"; sleep 0.1
done
holder=$(get "$port_a" "/v1/jobs/$id" | j "d['node']")
d=$(get "$port_a" "/v1/jobs/$id" | j "d['tiles']['done']")
[ "$d" -lt 4 ] || fail "split job $id ended before the kill: the test proves nothing"
if [ "$holder" = a ]; then kill -9 "$pid_a"; live=$port_b; else kill -9 "$pid_b"; live=$port_a; fi
wid=$(post "$port_w" /v1/jobs "$body" | j "d['id']")
out=$(wait_final "$live" "$id")
t=$(printf '%s' "$out" | j "d['status'], d['attempts'] >= 2, d['node'] != '$holder', d['tiles']['done']")
[ "$t" = "succeeded True True 4" ] || fail "after killing $holder: $t"
wait_final "$port_w" "$wid" > /dev/null
same "$live" "$id" "$port_w" "$wid" ""
echo "ok: split jobs across two nodes"
