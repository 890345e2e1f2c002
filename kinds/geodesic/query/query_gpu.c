/* kinds/geodesic/query/query_gpu.c — gpu_geoq in a CUDA build: wraps the job_ctx
 * (C11 atomics, unreadable from C++) into the callbacks of geoq_gpu_job
 * and calls kinds/geodesic/query/query.cu. Empty without CUDA
 * (kinds/geodesic/query/query_gpu_none.c answers then). Runs on the calling (GPU
 * worker) thread; so do all the callbacks. */
#include "kinds/geodesic/query/query_gpu.h"

#if TESSEL_HAVE_CUDA

#include "kinds/geodesic/query/query_cuda.h"

static int cb_stopped(void *c) {
  job_ctx *ctx = c;
  return job_ctx_stopped(ctx) ? job_ctx_stop_code(ctx) : 0;
}

static void cb_progress(void *c, int64_t add) { job_ctx_progress(c, add); }

static void cb_progress_total(void *c, int64_t add) {
  job_ctx *ctx = c;
  atomic_fetch_add(&ctx->progress_total, add);
}

static int cb_alloc(void *c, tdtype dt, int ndim, const int64_t *shape,
                    tarray **out, terr *e) {
  job_ctx *ctx = c;
  return ctx->result_alloc(ctx, dt, ndim, shape, out, e);
}

static int cb_borrow(void *c, int dev) {
  job_ctx *ctx = c;
  return ctx->gpu_borrow(ctx, dev);
}

static void cb_give_back(void *c, int dev) {
  job_ctx *ctx = c;
  if (ctx->gpu_return) ctx->gpu_return(ctx, dev);
}

int gpu_geoq(int dev, const geod_plan *pl, const geoq *q, job_ctx *ctx,
             geoq_out *out, int64_t *nonconv, terr *e) {
  geoq_gpu_job job = {ctx,
                      cb_stopped,
                      cb_progress,
                      cb_progress_total,
                      &ctx->t_h2d,
                      &ctx->t_compute,
                      &ctx->t_d2h,
                      cb_alloc,
                      ctx->ngpu,
                      ctx->gpu_borrow ? cb_borrow : NULL,
                      cb_give_back,
                      NULL,
                      NULL};
  out->nparts = 0;
  *nonconv = 0;
  if (!ctx->result_alloc)
    return terr_set(e, T_EINVAL, "", -1, "gpu_geoq: no result_alloc");
  return cuda_geoq(dev, pl, q, &job, out, nonconv, e);
}

#endif
