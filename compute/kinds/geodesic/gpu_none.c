/* compute/kinds/geodesic/gpu_none.c — the geodesic kind's GPU entry in a build without
 * CUDA: it answers "unavailable" (the scheduler answers 503 for cuda jobs
 * before they get here; auto never routes to a missing GPU). Empty when
 * CUDA is built (compute/kinds/geodesic/gpu.c then holds the real one). */
#include "compute/kinds/geodesic/gpu.h"

#if !TESSEL_HAVE_CUDA

int gpu_geodesic(int dev, const geod_plan *pl, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e) {
  *nonconv = 0;
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

/* The matrix over every lent GPU: none without CUDA. */

int geod_mgpu_run(int own, const geod_plan *pl, tarray *out,
                  const mgpu_lend *lend, int64_t block_rows,
                  mgpu_report *rep, double *t_h2d, double *t_compute,
                  double *t_d2h, int64_t *nonconv, terr *e) {
  (void)own, (void)pl, (void)out, (void)lend, (void)block_rows, (void)rep;
  (void)t_h2d, (void)t_compute, (void)t_d2h;
  *nonconv = 0;
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

int geod_mgpu(const geod_plan *pl, tarray *out, job_ctx *ctx,
              int64_t *nonconv, terr *e) {
  (void)pl, (void)out, (void)ctx;
  *nonconv = 0;
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

#endif
