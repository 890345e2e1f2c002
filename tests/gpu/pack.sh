#!/bin/sh
# pack.sh — build the GPU-side binaries here and pack them, with the few
# libraries the GPU machine (Ubuntu 24.04, CUDA 13) lacks, into DIR for the
# device tool to carry:   sh tests/gpu/pack.sh .dev-final
# then on the device:     sh tests/gpu/device_run.sh .dev-final
set -eu
dir=${1:-.dev-final}
build=${BUILD:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -rf "$dir"
mkdir -p "$dir/lib"
cp "$build"/tesseld "$build"/gpu_test_* "$build"/integ_test_* "$build"/bench_gpu \
   "$build"/bench_geodesic "$build"/bench_e2e "$build"/bench_map "$dir"/
[ -x "$build"/bench_d2h_store ] && cp "$build"/bench_d2h_store "$dir"/
[ -x "$build"/bench_pipeline ] && cp "$build"/bench_pipeline "$dir"/
[ -x "$build"/bench_lanes ] && cp "$build"/bench_lanes "$dir"/
[ -x "$build"/bench_map_lanes ] && cp "$build"/bench_map_lanes "$dir"/
[ -x "$build"/bench_reduce_lanes ] && cp "$build"/bench_reduce_lanes "$dir"/
cp -r web "$dir"/
# Not there: libmicrohttpd, libxxhash, OpenBLAS (+ gfortran), PROJ (+ its image libs).
# Not carried on purpose: libnettle/libhogweed (that machine's GnuTLS needs
# its own newer ones), CUDA libraries (that machine has CUDA 13).
for l in libmicrohttpd.so.12 libxxhash.so.0 libgfortran.so.5 libquadmath.so.0 libproj.so.25 \
         libtiff.so.6 libLerc.so.4 libjbig.so.0 libjpeg.so.62 libwebp.so.7 \
         libdeflate.so.0 libpq.so.5 libldap-2.5.so.0 liblber-2.5.so.0 libsasl2.so.2; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$dir/lib/"
done
cp -L /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 "$dir/lib/"
strip "$dir"/tesseld "$dir"/gpu_test_* "$dir"/integ_test_* "$dir"/bench_* 2>/dev/null || true
# PostgreSQL for device_run.sh's cluster step (that machine has none)
if [ -x /usr/lib/postgresql/15/bin/postgres ]; then sh tests/cluster/pack_pg.sh "$dir"; fi
du -sh "$dir"
