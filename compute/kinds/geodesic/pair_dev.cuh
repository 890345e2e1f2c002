/* compute/kinds/geodesic/pair_dev.cuh — the one device function that computes a
 * geodesic element on the GPU, shared by the matrix kernel
 * (compute/kinds/geodesic/geodesic_kernel.cu) and the query kernel
 * (compute/kinds/geodesic/query/query_kernel.cu), which promise distances bit-identical to the
 * matrix's (compute/kinds/geodesic/query/query.h).
 *
 * Why __noinline__: nvcc fuses multiply-adds where the surrounding code
 * allows, so the same solver inlined into two kernels can come out with
 * different last bits. Measured (2 x H100, 2026-11-25): inlined, the query
 * kernels agreed with the matrix where they evaluate pairs at one place
 * (radius; rowwise max, sum, mean, count) but not in the knn and min
 * kernels, whose second call site (the home window) changed the code of
 * the first (e.g. 1121873.100820774 against the matrix's
 * 1121873.1008207742 m): tests/gpu/test_geoquery_gpu.c failed. Compiled
 * once per file with no caller around it, under the same flags, it is the
 * same machine code in every kernel, and every test passes bit for bit.
 * The price is the matrix kernel's speed: 2.98e9 Karney pairs/s against
 * 4.11e9 inlined (n = 32768 square, bench_geodesic, same run, H100). In
 * the query kernel the call is cheaper than two inlined copies (knn
 * kernels 72 ms against 148 ms, n = 10^6, k = 10). -DGEOD_PAIR_INLINE in
 * the CUDA flags inlines it again (for measuring; the bitwise tests then
 * fail). Template on the method so that no branch on it runs per pair.
 */
#ifndef TESSEL_KINDS_GEODESIC_PAIR_DEV_CUH
#define TESSEL_KINDS_GEODESIC_PAIR_DEV_CUH

#include "compute/kinds/geodesic/plan.h"

#ifdef GEOD_PAIR_INLINE
#define GEOD_PAIR_CALL __forceinline__
#else
#define GEOD_PAIR_CALL __noinline__
#endif

/* Distance in output units (metres / unit), before any rounding to the
 * result dtype. nc: Vincenty's non-converged counter (may be NULL for the
 * other methods). */
template <int METHOD>
__device__ GEOD_PAIR_CALL double geod_pair_dev(const geod_ellipsoid *g,
                                            const geod_point *p,
                                            const geod_point *q,
                                            double radius, double unit,
                                            long long *nc) {
  double s;
  if (METHOD == GEOD_KARNEY)
    s = geod_inverse_karney_pp(g, p, q);
  else if (METHOD == GEOD_VINCENTY)
    s = geod_inverse_vincenty_pp(g, p, q, nc);
  else
    s = geod_inverse_haversine_pp(p, q, radius);
  return s / unit;
}

#endif
