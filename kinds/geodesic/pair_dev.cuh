/* kinds/geodesic/pair_dev.cuh — the one device function that computes a
 * geodesic element on the GPU, shared by the matrix kernel
 * (kinds/geodesic/geodesic.cu) and the query kernels
 * (kinds/geodesic/query.cu).
 *
 * Why a function of its own, and __noinline__: the queries promise
 * distances bit-identical to the matrix's (kinds/geodesic/query.h). Inlined
 * into two different kernels, the same solver text can come out with its
 * multiply-adds fused differently (nvcc contracts a*b + c where the code
 * around it allows, and the surroundings differ), which changes last bits.
 * Compiled once per file with no caller around it, under the same flags,
 * it is the same machine code in both kernels. The cost is one call per
 * pair, small beside a Karney solve. Template on the method so that no
 * branch on it runs per pair.
 */
#ifndef TESSEL_KINDS_GEODESIC_PAIR_DEV_CUH
#define TESSEL_KINDS_GEODESIC_PAIR_DEV_CUH

#include "kinds/geodesic/plan.h"

/* Distance in output units (metres / unit), before any rounding to the
 * result dtype. nc: Vincenty's non-converged counter (may be NULL for the
 * other methods). */
template <int METHOD>
__device__ __noinline__ double geod_pair_dev(const geod_ellipsoid *g,
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
