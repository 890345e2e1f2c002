#!/bin/sh
# The Docker test, run by `make test`: build the CPU-only image, run it,
# submit a map and a geodesic job and check their results and /healthz,
# restart the container and check the jobs are still there (the volume),
# then remove what it started.
#
# It needs a Docker engine. If none answers it installs docker.io and starts
# dockerd (host networking, no bridge) when it can; Docker Hub is not
# reachable here, so the base image is made locally with debootstrap (and
# kept as tessel-base:bookworm for the next run). When no engine can be
# started it prints SKIPPED and why — it never reports a pass it did not
# make. With $TESSEL_TEST_RESULTS (make test) it also writes its verdict,
# "passed", "skipped: WHY" or "failed: WHY", to docker.verdict there, so
# that the closing line of make test counts a skip as a skip; a run that
# stops without one counts as failed.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
WORK="$ROOT/tests/docker/work"
RUNDIR=/run/tessel-dockerd
PORT=${TESSEL_DOCKER_TEST_PORT:-18181}
IMAGE=tessel:cpu-test
NAME=tessel-docker-test
VOLUME=tessel-docker-test-data
BASE=tessel-base:bookworm
PY=/usr/bin/python3
started_dockerd=""

verdict() {
  if [ -n "${TESSEL_TEST_RESULTS:-}" ]; then echo "$*" > "$TESSEL_TEST_RESULTS/docker.verdict"; fi
}
skip() { echo "docker test: SKIPPED: $*"; verdict "skipped: $*"; exit 0; }
fail() { echo "docker test: FAILED: $*"; verdict "failed: $*"; docker logs "$NAME" 2>&1 | tail -30 || true; cleanup; exit 1; }
cleanup() {
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  docker volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
  if [ -n "$started_dockerd" ]; then
    kill "$(cat "$RUNDIR/dockerd.pid")" 2>/dev/null || true
    sleep 2
    # dockerd leaves its network namespace mounted under its exec root.
    umount "$RUNDIR/exec/netns/default" 2>/dev/null || true
  fi
}

# ---- docker/compose.yaml's cluster profile, on any machine -------------------
# A YAML parse with what the README promises (tests/cluster/check_compose.py);
# Compose's own reading of it follows once an engine answers.
if ! $PY tests/cluster/check_compose.py docker/compose.yaml >"$WORK.compose.txt" 2>&1; then
  cat "$WORK.compose.txt"; rm -f "$WORK.compose.txt"
  echo "docker test: FAILED: docker/compose.yaml's cluster profile"
  verdict "failed: docker/compose.yaml's cluster profile"; exit 1
fi
rm -f "$WORK.compose.txt"

# ---- an engine --------------------------------------------------------------
mkdir -p "$WORK"
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then skip "no Docker engine answers and not root to start one"; fi
  if ! command -v dockerd >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null 2>&1 \
      || skip "docker.io could not be installed"
  fi
  command -v docker >/dev/null 2>&1 || skip "no docker client"
  echo "docker test: starting dockerd (no bridge, host networking)"
  # Its runtime state lives outside the repo (it mounts a network namespace
  # there, which would pin the directory).
  mkdir -p "$RUNDIR/exec"
  dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
    --exec-root "$RUNDIR/exec" --pidfile "$RUNDIR/dockerd.pid" \
    -H unix:///var/run/docker.sock >"$WORK/dockerd.log" 2>&1 &
  started_dockerd=1
  i=0
  until docker info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 60 ]; then
      tail -5 "$WORK/dockerd.log"
      started_dockerd=""
      skip "dockerd did not start (see above)"
    fi
    sleep 1
  done
fi
trap 'cleanup' INT TERM

# Compose reads the cluster profile as it would run it (its secret files are
# the user's: stand-ins while it reads, removed after).
if docker compose version >/dev/null 2>&1; then
  made=""
  for f in pg_password.txt store_url.txt; do
    [ -e "docker/$f" ] || { echo placeholder > "docker/$f"; made="$made docker/$f"; }
  done
  ok=1
  docker compose -f docker/compose.yaml --profile cluster config -q || ok=0
  [ -z "$made" ] || rm -f $made
  [ $ok = 1 ] || fail "docker compose config --profile cluster"
  echo "docker test: docker compose reads the cluster profile"
fi

# ---- a base image -----------------------------------------------------------
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  if timeout 30 docker pull debian:bookworm >/dev/null 2>&1; then
    docker tag debian:bookworm "$BASE"
  else
    echo "docker test: no registry; making $BASE with debootstrap"
    command -v debootstrap >/dev/null 2>&1 || \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 || \
      fail "debootstrap could not be installed"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian \
      >"$WORK/debootstrap.log" 2>&1 || { tail -5 "$WORK/debootstrap.log"; fail "debootstrap"; }
    # The same package sources as this machine's image.
    tar -C "$WORK/rootfs" -c . | docker import - "$BASE" >/dev/null || fail "docker import"
    rm -rf "$WORK/rootfs"
  fi
fi

# ---- build and run ----------------------------------------------------------
echo "docker test: building the CPU-only image"
docker build --network host -f docker/Dockerfile -t "$IMAGE" \
  --build-arg BUILDER_IMAGE="$BASE" --build-arg RUNTIME_IMAGE="$BASE" \
  --build-arg TESSEL_CUDA=OFF . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; fail "docker build"; }

docker rm -f "$NAME" >/dev/null 2>&1 || true
docker volume rm -f "$VOLUME" >/dev/null 2>&1 || true
docker run -d --name "$NAME" --network host -e TESSEL_PORT="$PORT" \
  -v "$VOLUME":/data "$IMAGE" >/dev/null || fail "docker run"

wait_healthy() {
  i=0
  until curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 60 ] && fail "no /healthz answer"
    sleep 1
  done
}
wait_healthy
T="http://127.0.0.1:$PORT"

user=$(docker exec "$NAME" id -u)
[ "$user" != 0 ] || fail "the container runs as root"

map=$(curl -fsS -X POST "$T/v1/jobs?wait=30" -H 'Content-Type: application/json' \
  -d '{"kind":"map","params":{"expr":"x**2 + 2*x + 1","inputs":{"x":{"range":{"start":0,"stop":1000}}}}}') \
  || fail "map submit"
geo=$(curl -fsS -X POST "$T/v1/jobs?wait=30" -H 'Content-Type: application/json' \
  -d '{"kind":"geodesic","params":{"points":[[0,0],[0,1],[10,10]]}}') || fail "geodesic submit"
map_id=$(echo "$map" | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j["status"]=="succeeded", j; print(j["id"])') || fail "map job: $map"
geo_id=$(echo "$geo" | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j["status"]=="succeeded", j; print(j["id"])') || fail "geodesic job: $geo"

check_results() {
  curl -fsS "$T/v1/jobs/$map_id/result" | $PY -c '
import json,sys
d=json.load(sys.stdin)["data"]
assert len(d)==1000 and all(d[i]==(i+1)**2 for i in range(1000)), "map result wrong"' || fail "map result"
  curl -fsS "$T/v1/jobs/$geo_id/result" | $PY -c '
import json,sys
d=json.load(sys.stdin)["data"]
assert abs(d[0][1]-111319.49079327357)<1e-6 and d[1][0]==d[0][1] and d[2][2]==0, d' || fail "geodesic result"
}
check_results
curl -fsS "$T/v1/devices" | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j["cuda"]["available"] is False' \
  || fail "/v1/devices"

# The image's HEALTHCHECK reports healthy.
i=0
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$NAME")" = healthy ]; do
  i=$((i + 1)); [ $i -gt 40 ] && fail "HEALTHCHECK never healthy"
  sleep 1
done

# Restart: the volume keeps the jobs and their results.
docker restart "$NAME" >/dev/null || fail "docker restart"
wait_healthy
check_results

cleanup
verdict passed
echo "docker test: passed (image built, map and geodesic jobs checked, healthy, data survived a restart)"
