#!/bin/sh
# postgres-entrypoint.sh — first start: initdb, the role and database
# "tessel" (password from $POSTGRES_PASSWORD_FILE), scram-sha-256 for TCP;
# every start: run the server in the foreground (SIGINT: a fast shutdown).
set -eu
bin=/usr/lib/postgresql/15/bin
as_pg() { runuser -u postgres -- "$@"; }
chown postgres:postgres "$PGDATA"
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(head -n1 "${POSTGRES_PASSWORD_FILE:?set POSTGRES_PASSWORD_FILE}")
  as_pg "$bin/initdb" -D "$PGDATA" --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "max_connections = 200" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_pg "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  esc=$(printf '%s' "$pw" | sed "s/'/''/g")
  as_pg "$bin/psql" -q -d postgres -c "CREATE ROLE tessel LOGIN PASSWORD '$esc'"
  as_pg "$bin/psql" -q -d postgres -c "CREATE DATABASE tessel OWNER tessel"
  as_pg "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
# setpriv execs the server itself (pid 1 gets Docker's signals directly).
exec setpriv --reuid=postgres --regid=postgres --init-groups \
  "$bin/postgres" -D "$PGDATA"
