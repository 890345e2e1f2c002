#!/bin/sh
# tests/browser/run.sh — the dashboard's browser tests against the real server.
#   sh tests/browser/run.sh build/tesseld
# Installs playwright-core and axe-core into tests/browser/node_modules (npm
# ci, from the committed package-lock.json) when either is missing, finds Debian's chromium,
# starts tesseld on a free loopback port with a fresh data dir and
# TESSEL_WEB_DIR=web, waits for /readyz, runs dashboard.test.mjs and then
# map_lists.test.mjs under node's test runner and stops the server. Screenshots and the server log go
# to tests/browser/artifacts/.
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 <path-to-tesseld>" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$1
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
if [ ! -x "$bin" ]; then
  echo "browser tests: $bin is not an executable (build it first: make build)" >&2
  exit 1
fi

chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  echo "browser tests: no Chromium at $chromium (Debian package 'chromium', in deps/packages.txt [test])" >&2
  exit 1
fi
command -v node >/dev/null || { echo "browser tests: node is missing (Debian package 'nodejs')" >&2; exit 1; }

if [ ! -f "$here/node_modules/playwright-core/package.json" ] || [ ! -f "$here/node_modules/axe-core/axe.min.js" ]; then
  echo "browser tests: installing playwright-core and axe-core (npm ci)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

art="$here/artifacts"
rm -rf "$art"
mkdir -p "$art"
data=$(mktemp -d "${TMPDIR:-/tmp}/tessel-browser.XXXXXX")
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});')

pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$data"
}
trap cleanup EXIT INT TERM

# A memory budget of 4 GiB on any machine, so the test of the 413 message
# (a job that needs ~36 GiB) is refused the same way everywhere.
TESSEL_LISTEN=127.0.0.1 TESSEL_PORT=$port TESSEL_DATA_DIR=$data TESSEL_WEB_DIR="$root/web" TESSEL_MAX_MEMORY=4294967296 \
  "$bin" >"$art/server.log" 2>&1 &
pid=$!

url="http://127.0.0.1:$port"
ready=0
i=0
while [ $i -lt 300 ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "browser tests: tesseld exited at start; its log:" >&2
    cat "$art/server.log" >&2
    exit 1
  fi
  if node -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "$url/readyz"; then
    ready=1
    break
  fi
  sleep 0.1
  i=$((i + 1))
done
if [ $ready -ne 1 ]; then
  echo "browser tests: tesseld not ready after 30 s; its log:" >&2
  cat "$art/server.log" >&2
  exit 1
fi

# One file after the other, never side by side: map_lists.test.mjs makes
# 1,000 jobs, and dashboard.test.mjs counts the jobs it sees.
# With $TESSEL_TEST_RESULTS (make test) each file's TAP report goes there
# too (browser-FILE.tap) for tests/summary.py to count.
status=0
for f in dashboard.test.mjs map_lists.test.mjs; do
  set -- --test-reporter=spec --test-reporter-destination=stdout
  if [ -n "${TESSEL_TEST_RESULTS:-}" ]; then
    set -- "$@" --test-reporter=tap \
      --test-reporter-destination="$TESSEL_TEST_RESULTS/browser-${f%%.*}.tap"
  fi
  TESSEL_URL=$url TESSEL_BIN=$bin WEB_DIR="$root/web" CHROMIUM=$chromium ARTIFACTS=$art \
    node --test "$@" "$here/$f" || status=$?
done
if [ $status -ne 0 ]; then
  echo "browser tests: failed; screenshots and the server log are in $art" >&2
fi
exit $status
