/* kinds/geodesic/query_gpu.c — gpu_geoq in a CUDA build: wraps the job_ctx
 * into plain callbacks for kinds/geodesic/query.cu (C++). Until the CUDA
 * engine lands it answers T_EUNAVAIL like the build without CUDA. Empty
 * without CUDA (kinds/geodesic/query_gpu_none.c answers then). */
#include "kinds/geodesic/query_gpu.h"

#if TESSEL_HAVE_CUDA

int gpu_geoq(int dev, const geod_plan *pl, const geoq *q, job_ctx *ctx,
             geoq_out *out, int64_t *nonconv, terr *e) {
  (void)dev, (void)pl, (void)q, (void)ctx;
  out->nparts = 0;
  *nonconv = 0;
  return terr_set(e, T_EUNAVAIL, "backend", -1,
                  "geodesic queries on the GPU are not built yet");
}

#endif
