#!/usr/bin/env bash
# run.sh — run every GPU test (and, with --bench, the GPU benchmark) on the
# GPU machine. Looks for the executables in $1 (default: .dev-gpu, where
# they are carried to the device; else the build dir build/), so it works
# both on the device tool's copy of the repo and in a local build tree.
#   tests/gpu/run.sh [BIN_DIR] [--bench]
# Exit status: 0 when every test passed or was skipped, 1 otherwise.
set -u
BIN=${1:-.dev-gpu}
[ -d "$BIN" ] || BIN=build
BENCH=0
for a in "$@"; do [ "$a" = "--bench" ] && BENCH=1; done
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || true
fail=0
for t in "$BIN"/gpu_test_*; do
  [ -x "$t" ] || continue
  echo "=== $(basename "$t")"
  "$t"
  rc=$?
  if [ $rc -eq 77 ]; then echo "--- skipped"; elif [ $rc -ne 0 ]; then echo "--- FAILED ($rc)"; fail=1; fi
done
if [ $BENCH -eq 1 ] && [ -x "$BIN/bench_gpu" ]; then
  echo "=== bench_gpu"
  "$BIN/bench_gpu" || fail=1
fi
exit $fail
