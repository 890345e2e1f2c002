/* gpujob.h — the C interface between compute/kinds/gpu_glue.c and the .cu files.
 *
 * The CUDA sources are C++, which cannot read the C11 atomics of job_ctx
 * (kinds.h). So the array kinds' entry points (gpu_kernels.h) live in
 * compute/kinds/gpu_glue.c, a C file, which wraps the job context into a gpu_job
 * — plain pointers and callbacks — and calls the cuda_* functions below.
 * Who owns what and which thread runs what: as in gpu_kernels.h.
 */
#ifndef TESSEL_KINDS_GPUJOB_H
#define TESSEL_KINDS_GPUJOB_H

/* Tessel's headers are C without extern "C" guards of their own. */
#ifdef __cplusplus
extern "C" {
#endif
#include "compute/array/tarray.h"
#include "compute/expr/expr.h"
#include "compute/kinds/ops.h"
#include "util/err.h"

typedef struct gpu_job {
  void *ctx;                         /* the job_ctx, for the callbacks */
  int (*stopped)(void *ctx);         /* 0 run on; else the terr code to stop with */
  /* Progress in elements: set the total once, then add as chunks end. */
  void (*progress_total)(void *ctx, int64_t total);
  void (*progress)(void *ctx, int64_t add);
  double *t_h2d, *t_compute, *t_d2h; /* phase times to add to (ms) */
  /* Non-NULL: the job's id, when its result may stay on the device for the
   * next job of a chain (the whole result was on the device and is the
   * job's, not a compare run's): resident_adopt keeps it under this id. */
  const char *keep_as;
  /* 1: a gang of tiny reduce jobs stacked as the rows of one array
   * (gpu_reduce_rows): each row is folded in as many parts as that row
   * alone would be (a single job's chunk of one output), whatever the
   * number of rows, so that every row's value is bit for bit the one its
   * job alone gives. 0 for every other call. */
  int rows_alone;
} gpu_job;

int cuda_map(int dev, const expr *x, const tarray *const *inputs,
             const char *const *ids, tarray *out, const gpu_job *job, terr *e);
int cuda_reduce(int dev, reduce_op op, const expr *x,
                const tarray *const *inputs, const char *const *ids, int axis,
                tarray *out, const gpu_job *job, terr *e);
int cuda_matmul(int dev, const tarray *a, const tarray *b, const tarray *bias,
                int transpose_a, int transpose_b, const char *const ids[3],
                tarray *out, const gpu_job *job, terr *e);

#ifdef __cplusplus
}
#endif

#endif
