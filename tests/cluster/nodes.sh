# tests/cluster/nodes.sh — what the shell tests of tests/cluster share;
# sourced, after `set -eu`, as  tag=TAG; . "$(dirname "$0")/nodes.sh"  with $bin
# set to the tesseld under test. It exits 77 (skipped, with the reason)
# without a PostgreSQL server (any major: Debian 12 has 15, Ubuntu 24.04
# 16), pgserver.sh, curl or python3; makes $tmp
# (/tmp/tessel-TAG-XXXXXX, removed at exit with every node started and the
# server), starts a PostgreSQL server in $tmp/pg with its URL in
# $tmp/store-url and an empty $tmp/data, and defines:
#   start_node NAME ARGS...  tesseld --port 0 --threads 1 --access-log 0 ARGS,
#                            stdout/stderr in $tmp/node-NAME.{out,log}; sets
#                            pid_NAME and port_NAME once it listens (exit 77
#                            when tesseld was built without libpq)
#   fail MSG                 print MSG and every node's log tail, exit 1
#   j EXPR                   a Python expression over the JSON d on stdin
#   get PORT PATH, post PORT PATH BODY, code PORT PATH (a POST's status)
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
here=$(cd "$(dirname "$0")" && pwd)
pgs="$here/pgserver.sh"
# PG_BIN (pgserver.sh reads it too): the server's binaries elsewhere than
# Debian's place (the GPU machine: tests/cluster/pack_pg.sh); else the
# newest installed major, as pgserver.sh picks it.
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
export PG_BIN
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/postgres" ] || { echo "skipped: no PostgreSQL server (Debian postgresql-15, Ubuntu postgresql-16)"; exit 77; }
[ -f "$pgs" ] || { echo "skipped: no tests/cluster/pgserver.sh"; exit 77; }
command -v curl >/dev/null && command -v python3 >/dev/null || { echo "skipped: needs curl and python3"; exit 77; }

tmp=$(mktemp -d "/tmp/tessel-${tag:-cluster}-XXXXXX")
chmod 755 "$tmp"
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sh "$pgs" stop "$tmp/pg" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/node-*.log; do echo "--- $f" >&2; tail -30 "$f" >&2; done; exit 1; }

mkdir -p "$tmp/pg" "$tmp/data"
url=$(sh "$pgs" start "$tmp/pg" | tail -1)
printf '%s\n' "$url" > "$tmp/store-url"

start_node() {
  name=$1
  shift
  "$bin" --port 0 --threads 1 --access-log 0 "$@" \
    > "$tmp/node-$name.out" 2> "$tmp/node-$name.log" &
  pid=$!
  pids="$pids $pid"
  i=0
  while ! grep -q 'listening on' "$tmp/node-$name.out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 $pid 2>/dev/null; then
      if grep -q 'without PostgreSQL' "$tmp/node-$name.log"; then
        echo "skipped: tesseld was built without libpq"; exit 77
      fi
      fail "node $name did not start"
    fi
    sleep 0.1
  done
  port=$(sed -n 's|.*:\([0-9]*\)/$|\1|p' "$tmp/node-$name.out" | head -1)
  eval "pid_$name=$pid port_$name=$port"
}

j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
get() { curl -sS "http://127.0.0.1:$1$2"; }
post() { curl -sS -H 'Content-Type: application/json' -d "$3" "http://127.0.0.1:$1$2"; }
code() { curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$1$2"; }
