/* compute/kinds/geodesic/gpu.c — gpu_geodesic in a CUDA build: wraps the job_ctx (C11
 * atomics, unreadable from C++) into the callbacks of geod_gpu_job —
 * stop, progress, and the scheduler's gpu_borrow / gpu_return, through
 * which the matrix spreads over the host's GPUs — and calls
 * compute/kinds/geodesic/geodesic.cu. Empty without CUDA (compute/kinds/geodesic/gpu_none.c
 * answers then). Runs on the calling (GPU worker) thread; so do all the
 * callbacks. */
#include "compute/kinds/geodesic/gpu.h"

#if TESSEL_HAVE_CUDA

#include "compute/kinds/geodesic/geodesic_cuda.h"

int geod_cb_stopped(void *c) {
  job_ctx *ctx = c;
  return job_ctx_stopped(ctx) ? job_ctx_stop_code(ctx) : 0;
}

void geod_cb_progress(void *c, int64_t add) { job_ctx_progress(c, add); }

void geod_cb_progress_total(void *c, int64_t add) {
  job_ctx *ctx = c;
  atomic_fetch_add(&ctx->progress_total, add);
}

int geod_cb_borrow(void *c, int dev) {
  job_ctx *ctx = c;
  return ctx->gpu_borrow(ctx, dev);
}

void geod_cb_give_back(void *c, int dev) {
  job_ctx *ctx = c;
  if (ctx->gpu_return) ctx->gpu_return(ctx, dev);
}

int gpu_geodesic(int dev, const geod_plan *pl, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e) {
  geod_gpu_job job = {ctx,
                      geod_cb_stopped,
                      geod_cb_progress,
                      geod_cb_progress_total,
                      &ctx->t_h2d,
                      &ctx->t_compute,
                      &ctx->t_d2h,
                      ctx->ngpu,
                      ctx->gpu_borrow ? geod_cb_borrow : NULL,
                      geod_cb_give_back,
                      0,
                      NULL};
  return cuda_geodesic(dev, pl, out, &job, nonconv, e);
}

#endif
