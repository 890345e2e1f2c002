#!/bin/sh
# A throwaway PostgreSQL 15 server for the tests: its data and its unix socket
# live in DIR, it listens on no TCP port, and it trusts local socket logins.
#   pgserver.sh start DIR    fresh initdb in DIR/data, start, create database
#                            tessel; prints the conninfo
#                            postgresql:///tessel?host=DIR&user=postgres
#   pgserver.sh stop DIR     stop it (fast shutdown)
#   pgserver.sh restart DIR  stop and start again on the same data
# The server refuses to run as root, so when run as root every server command
# runs as the `postgres` user (runuser) and DIR is made traversable by it.
# fsync stays on (the tests exercise restarts); max_connections 200 so that
# several nodes with their pools fit.
set -eu
# PG_BIN: the server binaries (default: the newest /usr/lib/postgresql/N).
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: pgserver.sh start|stop|restart DIR" >&2
  exit 2
fi
dir=$(cd "$dir" && pwd)

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pgctl() {
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w "$@"
}

case "$cmd" in
  start)
    if [ "$(id -u)" = 0 ]; then
      chown postgres "$dir"
      chmod 0755 "$dir"
      # every folder above DIR must be traversable by postgres (mktemp gives 0700)
      d=$(dirname "$dir")
      while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
    fi
    as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
    {
      echo "listen_addresses = ''"
      echo "unix_socket_directories = '$dir'"
      echo "fsync = on"
      echo "max_connections = 200"
    } >>"$dir/data/postgresql.conf"
    echo "local all all trust" >"$dir/data/pg_hba.conf"
    pgctl start >/dev/null
    as_pg "$bin/createdb" -h "$dir" -U postgres tessel
    echo "postgresql:///tessel?host=$dir&user=postgres"
    ;;
  stop)
    pgctl -m fast stop >/dev/null
    ;;
  restart)
    pgctl -m fast restart >/dev/null
    ;;
  *)
    echo "pgserver.sh: unknown command $cmd" >&2
    exit 2
    ;;
esac
