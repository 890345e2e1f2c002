#!/bin/sh
# tests/cluster/test_two_nodes.sh — the cross-node paths of compute/sched/cluster.c,
# end to end: a PostgreSQL server (tests/cluster/pgserver.sh) and two
# tesseld nodes on one data directory.
#   sh tests/cluster/test_two_nodes.sh build/tesseld
# Exits 77 (skipped) without a PostgreSQL server, pgserver.sh or a tesseld built
# with libpq. The cluster's big test (many jobs, restarts, a stopped server)
# is tests/cluster's others; this one proves each path once:
#   - both nodes are live in GET /v1/nodes of either, and /v1/info says
#     store "postgresql" and the node's own name;
#   - a job submitted to the node whose only worker is busy runs on the
#     other one: ?wait on the submitting node answers 200 succeeded (woken
#     by the other node's "end" event) with node = the other node;
#   - cancel through the node that does not hold a running job answers 202
#     and the holder stops it: canceled, seen through a ?wait on the first;
#   - the same request_id through both nodes is one job;
#   - kill -9 of the node running a job: after the lease (2 s) the job
#     runs again on the other node and succeeds with attempts 2 and node =
#     the survivor; GET /v1/nodes then says the dead one is not alive.
# No timing is asserted: waits are bounded only so that a bug fails rather
# than hangs.
set -eu

bin=${1:?usage: $0 path/to/tesseld}
tag=cl2
. "$(dirname "$0")/nodes.sh"

# a node of this test: the shared store and data directory, a 2 s lease
cluster_node() {
  start_node "$1" --store-file "$tmp/store-url" --data-dir "$tmp/data" \
    --lease-s 2 --node-name "$1"
}

cluster_node a
pida=$pid_a
cluster_node b
pidb=$pid_b

# ---- nodes
n=$(get "$port_a" /v1/nodes | j "sum(1 for x in d['nodes'] if x['alive'])")
[ "$n" = 2 ] || fail "/v1/nodes on a: $n live nodes, want 2"
n=$(get "$port_b" /v1/nodes | j "sorted(x['name'] for x in d['nodes'] if x['alive'])")
[ "$n" = "['a', 'b']" ] || fail "/v1/nodes on b: $n"
s=$(get "$port_b" /v1/info | j "d['store'] + ' ' + d['node']['name']")
[ "$s" = "postgresql b" ] || fail "/v1/info on b: $s"

# A job that keeps one worker busy (every pair, serial, small result).
long='{"kind":"geodesic","backend":"serial","params":{"points":{"random":{"shape":[6000,2],"low":-60,"high":60,"seed":SEED}},"query":{"rowwise":{"op":"sum"}}}}'
tiny='{"kind":"map","backend":"cpu","params":{"expr":"x+1","inputs":{"x":[1,2,3]}}}'

# running_node ID PORT: waits until the job runs, prints its node's name
running_node() {
  i=0
  while :; do
    s=$(get "$2" "/v1/jobs/$1" | j "d['status'] + ' ' + str(d['node'])")
    case "$s" in running\ a|running\ b) echo "${s#running }"; return ;; esac
    case "$s" in succeeded*|failed*|canceled*) fail "job $1 ended before the test could use it: $s" ;; esac
    i=$((i + 1)); [ $i -lt 600 ] || fail "job $1 never ran: $s"
    sleep 0.1
  done
}

# ---- a job submitted to the busy node runs on the other; ?wait across nodes
l1=$(post "$port_a" /v1/jobs "$(echo "$long" | sed s/SEED/1/)" | j "d['id']")
holder=$(running_node "$l1" "$port_a")
if [ "$holder" = a ]; then busy=$port_a other=b; else busy=$port_b other=a; fi
r=$(post "$busy" '/v1/jobs?wait=60' "$tiny" | j "d['status'] + ' ' + str(d['node'])")
[ "$r" = "succeeded $other" ] || fail "a job submitted to the busy node: $r, want succeeded on $other"

# ---- cancel through the node that does not hold the job
if [ "$holder" = a ]; then notholder=$port_b; else notholder=$port_a; fi
c=$(code "$notholder" "/v1/jobs/$l1/cancel")
[ "$c" = 202 ] || fail "cancel of a job held by the other node: $c, want 202"
s=$(get "$notholder" "/v1/jobs/$l1?wait=30" | j "d['status']")
[ "$s" = canceled ] || fail "the canceled job: $s"

# ---- idempotency across nodes
body='{"kind":"map","request_id":"same-across-nodes","params":{"expr":"x*2","inputs":{"x":[1]}}}'
i1=$(post "$port_a" /v1/jobs "$body" | j "d['id']")
i2=$(post "$port_b" /v1/jobs "$body" | j "d['id']")
[ "$i1" = "$i2" ] || fail "one request_id through two nodes made two jobs: $i1 $i2"

# ---- a waited batch across nodes: every item its own record and result
# (the answer reads its rows in one statement, api/batch.c's pre-read:
# a row given to the wrong item shows here), a bad item its error
batch=$(python3 -c "import json; print(json.dumps({'include': ['result'], 'jobs': [{'kind': 'map', 'backend': 'cpu', 'params': {'expr': 'x+1' if i != 7 else 'x+', 'inputs': {'x': [i]}}} for i in range(40)]}))")
ans=$(post "$port_a" '/v1/jobs:batch?wait=30' "$batch")
r=$(echo "$ans" | j "' '.join('E' + x['error']['field'] if x.get('error') else x['status'] + ':' + str([int(v) for v in x['result']['data']]) for x in d['jobs'])")
want=$(python3 -c "print(' '.join('Ejobs[7].params.expr' if i == 7 else 'succeeded:[%d]' % (i + 1) for i in range(40)))")
[ "$r" = "$want" ] || fail "a waited batch across nodes: $r, want $want"
# jobs:get through the other node: the rows read together, an unknown and
# a malformed id each its own not_found, in the order asked
ids=$(echo "$ans" | j "json.dumps([d['jobs'][i]['id'] for i in (3, 0)] + ['j_01m8mfw1hj00000bxfx9tknmy9', 'nope'])")
r=$(post "$port_b" /v1/jobs:get "{\"ids\": $ids}" | j "' '.join(x['error']['code'] if x.get('error') else str(x['params']['inputs']['x']) for x in d['jobs'])")
[ "$r" = "[3] [0] not_found not_found" ] || fail "jobs:get of two jobs, an unknown and a malformed id: $r"

# ---- kill -9 of the node running a job: it reruns on the other
l2=$(post "$port_a" /v1/jobs "$(echo "$long" | sed 's/SEED/2/; s/6000/2500/')" | j "d['id']")
holder=$(running_node "$l2" "$port_a")
if [ "$holder" = a ]; then victim=$pida; survivor=$port_b; sname=b; pida=;
else victim=$pidb; survivor=$port_a; sname=a; pidb=; fi
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
i=0
while :; do
  s=$(get "$survivor" "/v1/jobs/$l2?wait=30" | j "d['status'] + ' ' + str(d['node']) + ' ' + str(d['attempts'])")
  case "$s" in queued*|running*) ;; *) break ;; esac
  i=$((i + 1)); [ $i -lt 20 ] || fail "the dead node's job never ended: $s"
done
[ "$s" = "succeeded $sname 2" ] || fail "the dead node's job: $s, want succeeded on $sname after 2 attempts"
dead=$(get "$survivor" /v1/nodes | j "[x['alive'] for x in d['nodes'] if x['name'] == '$holder'][0]")
[ "$dead" = False ] || fail "the killed node is still alive in /v1/nodes"
echo "ok"
