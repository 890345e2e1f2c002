/* gpu_glue.c — the array kinds' GPU entry points (gpu_kernels.h) in a build
 * with CUDA: they turn the job context into a gpu_job (compute/kinds/
 * gpujob.h) and call the CUDA implementation. This file exists because the
 * .cu files are C++, which cannot read job_ctx's C11 atomics. Empty in a
 * build without CUDA (compute/kinds/gpu_kernels_none.c answers there).
 * Threads: whatever thread calls the entry point; the callbacks run on it.
 */
#include "compute/kinds/gpu_kernels.h"

#if TESSEL_HAVE_CUDA
#include "compute/kinds/gpujob.h"

static int glue_stopped(void *c) {
  job_ctx *ctx = c;
  return job_ctx_stopped(ctx) ? job_ctx_stop_code(ctx) : 0;
}

static void glue_progress(void *c, int64_t add) { job_ctx_progress(c, add); }

static void glue_total(void *c, int64_t total) {
  job_ctx *ctx = c;
  atomic_store(&ctx->progress_done, 0);
  atomic_store(&ctx->progress_total, total);
}

static void glue_job(job_ctx *ctx, gpu_job *j) {
  j->ctx = ctx;
  j->stopped = glue_stopped;
  j->progress = glue_progress;
  j->progress_total = glue_total;
  j->t_h2d = &ctx->t_h2d;
  j->t_compute = &ctx->t_compute;
  j->t_d2h = &ctx->t_d2h;
  j->keep_as = ctx->result_is_final ? ctx->job_id : NULL;
  j->rows_alone = 0;
}

int gpu_map(int dev, const expr *x, const tarray *const *inputs,
            const char *const *ids, tarray *out, job_ctx *ctx, terr *e) {
  gpu_job j;
  glue_job(ctx, &j);
  return cuda_map(dev, x, inputs, ids, out, &j, e);
}

int gpu_reduce(int dev, reduce_op op, const expr *x,
               const tarray *const *inputs, const char *const *ids, int axis,
               tarray *out, job_ctx *ctx, terr *e) {
  gpu_job j;
  glue_job(ctx, &j);
  return cuda_reduce(dev, op, x, inputs, ids, axis, out, &j, e);
}

int gpu_reduce_rows(int dev, reduce_op op, const expr *x,
                    const tarray *const *stacked, tarray *out, job_ctx *ctx,
                    terr *e) {
  gpu_job j;
  glue_job(ctx, &j);
  j.keep_as = NULL; /* out is the gang's, no job's result */
  j.rows_alone = 1;
  return cuda_reduce(dev, op, x, stacked, NULL, 1, out, &j, e);
}

int gpu_matmul(int dev, const tarray *a, const tarray *b, const tarray *bias,
               int transpose_a, int transpose_b, const char *const ids[3],
               tarray *out, job_ctx *ctx, terr *e) {
  gpu_job j;
  glue_job(ctx, &j);
  return cuda_matmul(dev, a, b, bias, transpose_a, transpose_b, ids, out, &j,
                     e);
}

#endif
