/* compute/kinds/geodesic/query/query_gpu_none.c — the geodesic queries' GPU entry in a
 * build without CUDA: "unavailable" (the scheduler answers 503 for cuda
 * jobs before they get here; auto never routes to a missing GPU). Empty
 * when CUDA is built (compute/kinds/geodesic/query/query_gpu.c then holds the real one). */
#include "compute/kinds/geodesic/query/query_gpu.h"

#if !TESSEL_HAVE_CUDA

int gpu_geoq(int dev, const geod_plan *pl, const geoq *q, job_ctx *ctx,
             geoq_out *out, int64_t *nonconv, terr *e) {
  (void)dev, (void)pl, (void)q, (void)ctx;
  out->nparts = 0;
  *nonconv = 0;
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

#endif
