/* gpu_kernels_none.c — the array kinds' GPU entry points in a build without
 * CUDA: they answer "unavailable". Empty when CUDA is built. */
#include "compute/kinds/gpu_kernels.h"

#if !TESSEL_HAVE_CUDA

int gpu_map(int dev, const expr *x, const tarray *const *inputs,
            const char *const *ids, tarray *out, job_ctx *ctx, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

int gpu_reduce(int dev, reduce_op op, const expr *x,
               const tarray *const *inputs, const char *const *ids, int axis,
               tarray *out, job_ctx *ctx, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

int gpu_reduce_rows(int dev, reduce_op op, const expr *x,
                    const tarray *const *stacked, tarray *out, job_ctx *ctx,
                    terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

int gpu_matmul(int dev, const tarray *a, const tarray *b, const tarray *bias,
               int transpose_a, int transpose_b, const char *const ids[3],
               tarray *out, job_ctx *ctx, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA support not built");
}

#endif
