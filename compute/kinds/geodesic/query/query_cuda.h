/* compute/kinds/geodesic/query/query_cuda.h — the C interface between
 * compute/kinds/geodesic/query/query_gpu.c (C) and compute/kinds/geodesic/query/query.cu (C++): the
 * job context as plain callbacks, since C++ cannot read job_ctx's C11
 * atomics (the same arrangement as geodesic_cuda.h for the matrix).
 */
#ifndef TESSEL_KINDS_GEODESIC_QUERY_CUDA_H
#define TESSEL_KINDS_GEODESIC_QUERY_CUDA_H

#include "compute/kinds/geodesic/query/query.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct geoq_gpu_job {
  void *ctx;                                /* passed back to the callbacks */
  int (*stopped)(void *ctx);                /* 0, or the terr code to stop with */
  void (*progress)(void *ctx, int64_t add); /* query chunks done */
  void (*progress_total)(void *ctx, int64_t add);
  double *t_h2d, *t_compute, *t_d2h;        /* ms to add to; NULL ok */
  /* ctx->result_alloc (required). */
  int (*alloc)(void *ctx, tdtype dt, int ndim, const int64_t *shape,
               tarray **out, terr *e);
  /* ctx->gpu_borrow / gpu_return; borrow NULL: the run's device only. */
  int ngpu;
  int (*borrow)(void *ctx, int dev);
  void (*give_back)(void *ctx, int dev);
  /* Benchmarks (NULL ok): ms of the kernels, summed over chunks and
   * devices, and of building the index on the host. */
  double *t_kernel, *t_index;
  /* The job's CPU pool as a parallel for, for the host index
   * (query_index.cu): par(ctx, nt, fn, arg) calls fn(arg, t) for every t
   * in [0, nt), on at most par_width threads (the caller among them), and
   * returns once all are done (query_gpu.c: pool_for over ctx->pool,
   * ctx->threads wide). NULL: the calling thread runs them in order. The
   * index is the same whatever the width (query_index.cu says why). */
  void (*par)(void *ctx, int64_t nt, void (*fn)(void *arg, int64_t t),
              void *arg);
  int par_width;
  /* The devices' shares, for the job's record (NULL ok): once, after a
   * call that succeeded, every device it used (the run's first) with the
   * queries (rows) and chunks each computed (radius: in its fill pass). */
  void (*lanes)(void *ctx, int n, const int *dev, const int64_t *rows,
                const int64_t *chunks);
} geoq_gpu_job;

/* See gpu_geoq (compute/kinds/geodesic/query/query_gpu.h). Every device borrowed is
 * given back before it returns. */
int cuda_geoq(int dev, const geod_plan *pl, const geoq *q,
              const geoq_gpu_job *job, geoq_out *out, int64_t *nonconv,
              terr *e);

#ifdef __cplusplus
}
#endif

#endif
