#!/bin/sh
# Run CMD... with a throwaway PostgreSQL server: starts pgserver.sh in a fresh
# mktemp folder, exports its conninfo as TESSEL_TEST_PG, runs CMD, then stops
# the server and removes the folder (also on failure). Returns CMD's status.
# Also exported: TESSEL_TEST_PG_DIR (the server's folder) and
# TESSEL_TEST_PGSERVER (this pgserver.sh), for tests that stop and restart it.
#   with_pg.sh ./test_store
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# No server binaries (deps/install.sh test not run): skipped, said so.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ -z "${PG_BIN:-}" ]; then
  echo "SKIPPED: no PostgreSQL server installed (deps/install.sh test)"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/tessel-pg.XXXXXX")
cleanup() {
  "$here/pgserver.sh" stop "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
if ! TESSEL_TEST_PG=$("$here/pgserver.sh" start "$dir"); then
  echo "with_pg: could not start PostgreSQL (log below)" >&2
  cat "$dir/server.log" >&2 2>/dev/null || true
  exit 1
fi
export TESSEL_TEST_PG
TESSEL_TEST_PG_DIR=$dir
TESSEL_TEST_PGSERVER=$here/pgserver.sh
export TESSEL_TEST_PG_DIR TESSEL_TEST_PGSERVER
set +e
"$@"
rc=$?
set -e
exit $rc
