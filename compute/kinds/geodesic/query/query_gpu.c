/* compute/kinds/geodesic/query/query_gpu.c — gpu_geoq in a CUDA build: wraps the job_ctx
 * (C11 atomics, unreadable from C++) into the callbacks of geoq_gpu_job
 * (those of compute/kinds/geodesic/gpu.c, and the result allocation)
 * and calls compute/kinds/geodesic/query/query.cu. Empty without CUDA
 * (compute/kinds/geodesic/query/query_gpu_none.c answers then). Runs on the calling (GPU
 * worker) thread; so do all the callbacks but geoq_pool_par's shares,
 * which run on the job's CPU pool (util/pool.h's pool_for, ctx->threads
 * wide, the calling thread among them): the host index of the query. */
#include "compute/kinds/geodesic/query/query_gpu.h"

#if TESSEL_HAVE_CUDA

#include "compute/kinds/geodesic/gpu.h" /* the job_ctx callbacks, shared */
#include "compute/kinds/geodesic/query/query_cuda.h"
#include "util/pool.h"

typedef struct par_loop {
  void (*fn)(void *arg, int64_t t);
  void *arg;
} par_loop;

static void par_chunk(void *p, int64_t chunk, int slot) {
  const par_loop *L = p;
  (void)slot;
  L->fn(L->arg, chunk);
}

void geoq_pool_par(void *c, int64_t nt, void (*fn)(void *arg, int64_t t),
                   void *arg) {
  job_ctx *ctx = c;
  par_loop L = {fn, arg};
  /* every share runs (no stop: a part of an index is no index) */
  pool_for(ctx->pool, ctx->threads, nt, par_chunk, &L, NULL);
}

static int cb_alloc(void *c, tdtype dt, int ndim, const int64_t *shape,
                    tarray **out, terr *e) {
  job_ctx *ctx = c;
  return ctx->result_alloc(ctx, dt, ndim, shape, out, e);
}

int gpu_geoq(int dev, const geod_plan *pl, const geoq *q, job_ctx *ctx,
             geoq_out *out, int64_t *nonconv, terr *e) {
  geoq_gpu_job job = {ctx,
                      geod_cb_stopped,
                      geod_cb_progress,
                      geod_cb_progress_total,
                      &ctx->t_h2d,
                      &ctx->t_compute,
                      &ctx->t_d2h,
                      cb_alloc,
                      ctx->ngpu,
                      ctx->gpu_borrow ? geod_cb_borrow : NULL,
                      geod_cb_give_back,
                      NULL,
                      NULL,
                      geoq_pool_par,
                      ctx->threads,
                      geod_cb_lanes};
  out->nparts = 0;
  *nonconv = 0;
  if (!ctx->result_alloc)
    return terr_set(e, T_EINVAL, "", -1, "gpu_geoq: no result_alloc");
  return cuda_geoq(dev, pl, q, &job, out, nonconv, e);
}

#endif
