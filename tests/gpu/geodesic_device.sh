#!/bin/sh
# geodesic_device.sh — build the geodesic GPU test and benchmark here, run
# them on the lent GPU machine (which has no PROJ and no libmicrohttpd).
#
#   sh tests/gpu/geodesic_device.sh build DIR   (here, from the repo root)
#   sh tests/gpu/geodesic_device.sh run DIR     (there; DIR carried)
#
# build: compiles tests/gpu/test_geodesic_gpu.c and
# tests/bench/bench_geodesic.c with nvcc for Hopper (sm_90, static cudart)
# against only what they use, without PROJ; builds the same test once more
# with PROJ to write GeographicLib's references for the sample
# (--write-ref), and copies libnettle (util.c's SHA-256) beside them.
# run: the test against those references, compute-sanitizer memcheck on
# --quick, and the benchmark (on-device rate, to-host rate, kernel shapes,
# end to end into a file against the "copy + write" peer). Logs go to $OUT
# when set (the device tool), else to DIR.
set -eu
mode=${1:?build|run}
dir=${2:?directory}
case "$mode" in
build)
  NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
  CC=${CC:-cc}
  mkdir -p "$dir/obj" "$dir/lib"
  CF="-O3 -std=gnu11 -D_GNU_SOURCE -DTESSEL_HAVE_CUDA=1 -I. -Itests"
  CF="$CF -DTESSEL_SOURCE_DIR=\"$(pwd)\" -I/usr/local/cuda/include"
  $NVCC -std=c++17 -O3 -arch=sm_90 -I. -D_GNU_SOURCE -DTESSEL_HAVE_CUDA=1 \
    -c compute/kinds/geodesic/geodesic.cu -o "$dir/obj/geodesic.cu.o"
  for f in compute/kinds/geodesic/plan.c compute/kinds/geodesic/cpu.c compute/array/tarray.c \
    util/err.c util/util.c tests/gpu/test_geodesic_gpu.c \
    tests/bench/bench_geodesic.c; do
    $CC $CF -c "$f" -o "$dir/obj/$(basename "$f").o"
  done
  $CC $CF -DTESSEL_HAVE_PROJ=1 -c tests/gpu/test_geodesic_gpu.c \
    -o "$dir/obj/test_proj.o"
  o="$dir/obj"
  core="$o/geodesic_plan.c.o $o/tarray.c.o $o/err.c.o $o/util.c.o $o/geodesic.cu.o"
  libs="-lnettle -lpthread -lm"
  $NVCC -arch=sm_90 -o "$dir/test_geodesic_gpu" "$o/test_geodesic_gpu.c.o" $core $libs
  $NVCC -arch=sm_90 -o "$dir/bench_geodesic" "$o/bench_geodesic.c.o" \
    "$o/geodesic_cpu.c.o" $core $libs
  $NVCC -arch=sm_90 -o "$o/test_proj" "$o/test_proj.o" $core -lproj $libs
  "$o/test_proj" --write-ref "$dir/geod_ref.bin"
  cp -L /lib/x86_64-linux-gnu/libnettle.so.8 "$dir/lib/"
  rm -rf "$o"
  ls -la "$dir"
  ;;
run)
  out=${OUT:-$dir}
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version \
    --format=csv > "$out/gpu.txt" 2>&1 || true
  rc=0
  timeout 150 "$dir/test_geodesic_gpu" --ref "$dir/geod_ref.bin" \
    > "$out/test.log" 2>&1 || rc=$?
  echo "test rc=$rc" >> "$out/test.log"
  timeout 300 "$dir/bench_geodesic" --no-cpu \
    --gpu-sizes 1000,5000,20000,50000 --variants 20000 --e2e 20000 \
    --e2e-dir /tmp > "$out/bench.log" 2>&1 || echo "bench failed" >> "$out/bench.log"
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)
  if [ -n "$cs" ]; then
    timeout 100 "$cs" --tool memcheck --error-exitcode 9 \
      "$dir/test_geodesic_gpu" --quick --ref "$dir/geod_ref.bin" \
      > "$out/sanitizer.log" 2>&1 || echo "sanitizer failed" >> "$out/sanitizer.log"
  fi
  grep -v "CHECK failed" "$out/test.log" | tail -n 60
  cat "$out/bench.log"
  tail -n 3 "$out/sanitizer.log" 2>/dev/null || true
  exit $rc
  ;;
*)
  echo "usage: $0 build|run DIR" >&2
  exit 2
  ;;
esac
