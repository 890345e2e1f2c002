#!/bin/bash
# tiny_instr.sh — instructions per tiny job, counted by callgrind: a figure
# that does not move with the load of a shared machine (issue 26; CPU time
# per job moves by +-15 % there, more than most single changes save).
#
# Starts TESSELD under valgrind --tool=callgrind (its own data dir, port
# 18777 unless PORT is set), sends a warm-up, zeroes the counters
# (callgrind_control -z), sends the load, dumps (callgrind_control -d) and
# prints the instructions of the whole daemon in that window per job, then
# the inclusive share of its main parts (needs callgrind_annotate).
#   batch MODE: N batches of B tiny map jobs (x+1 over 3 values) through
#               POST /v1/jobs:batch, each followed by POST /v1/jobs:get
#               {"ids", "wait": 60}, from T client threads;
#   single MODE: N POST /v1/jobs?wait=60 from T threads (B ignored).
# A benchmark, not a test. Results: tests/bench/results/tiny-2core-2026-11-29.md
#
#   sh tests/bench/tiny_instr.sh build/tesseld batch 8 100 4
#   sh tests/bench/tiny_instr.sh build/tesseld single 400 1 4
# KEEP=FILE keeps callgrind's output there (for callgrind_annotate).
# CONN=keep: each client thread keeps one connection (http.client), as the
# Python client and bench_service do; default a new connection per request
# (urllib), as the figures before 2026-11-29b were taken.
set -eu
EXE=$1 MODE=$2 N=$3 B=$4 T=$5
PORT=${PORT:-18777}
PY=${PYTHON:-python3}
W=$(mktemp -d /tmp/tiny_instr_XXXXXX)
drive() { # drive N B T
  "$PY" - "http://127.0.0.1:$PORT" "$MODE" "$1" "$2" "$3" "${CONN:-new}" <<'PYEOF'
import http.client, json, sys, threading, urllib.request
base, mode, n, b, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
keep = sys.argv[6] == "keep"
job = {"kind": "map", "params": {"expr": "x+1", "inputs": {"x": [1, 2, 3]}}}
local = threading.local()
def post(path, body):
    data, hdr = json.dumps(body).encode(), {"Content-Type": "application/json"}
    if keep:
        c = getattr(local, "c", None)
        if c is None:
            c = local.c = http.client.HTTPConnection(base[7:], timeout=600)
        c.request("POST", path, data, hdr)
        return json.loads(c.getresponse().read())
    req = urllib.request.Request(base + path, data=data, headers=hdr)
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())
bad = [0]
def worker(k):
    for _ in range(k):
        if mode == "single":
            bad[0] += post("/v1/jobs?wait=60", job).get("status") != "succeeded"
        else:
            ids = [j["id"] for j in post("/v1/jobs:batch", {"jobs": [job] * b})["jobs"]]
            got = post("/v1/jobs:get", {"ids": ids, "wait": 60})["jobs"]
            bad[0] += sum(j.get("status") != "succeeded" for j in got)
th = [threading.Thread(target=worker, args=(n // t,)) for _ in range(t)]
[x.start() for x in th]; [x.join() for x in th]
if bad[0]: print("not succeeded:", bad[0]); sys.exit(1)
PYEOF
}
valgrind --tool=callgrind --callgrind-out-file="$W/cg" --dump-instr=no \
  "$EXE" --port "$PORT" --data-dir "$W/data" --access-log 0 --log-level warn \
  >"$W/log" 2>&1 &
VP=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.2
done
drive 4 "$B" 2
callgrind_control -z "$VP" >/dev/null
drive "$N" "$B" "$T"
callgrind_control -d "$VP" >/dev/null
kill -TERM "$VP"
wait "$VP" || true
JOBS=$N
[ "$MODE" = batch ] && JOBS=$((N * B))
IR=$(sed -n 's/^summary: //p' "$W/cg.1")
echo "$MODE: $JOBS jobs, $IR instructions, $((IR / JOBS)) per job"
callgrind_annotate --inclusive=yes "$W/cg.1" 2>/dev/null |
  grep -E ':(http_on_access|writer_main|sched_run_job|finish_fn|insert_fn|start_async_fn|jobs_json|stext_estimate|jobs_submit_prepare) ' |
  awk -v j="$JOBS" '{ gsub(",", "", $1); n = ""
                      for (i = 2; i <= NF; i++) if ($i ~ /:[a-z_]+$/) { n = $i; sub(/.*:/, "", n) }
                      if (n != "" && $1 > best[n]) best[n] = $1 }
                    END { for (n in best) printf "  %-22s %9d per job\n", n, best[n] / j }' |
  sort -k2 -n -r
[ -n "${KEEP:-}" ] && cp "$W/cg.1" "$KEEP"
rm -rf "$W"
