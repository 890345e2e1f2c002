/* gpu_kernels.h — the GPU entry points of the array kinds (map, reduce,
 * matmul), called from the kinds' B_CUDA branch on the device's worker.
 *
 * Implemented in the kinds' .cu files when CUDA is built; otherwise
 * compute/kinds/gpu_kernels_none.c answers T_EUNAVAIL. Each takes host arrays,
 * moves what is not already resident on the device (inputs[i] with a
 * non-NULL ids[i] is an uploaded array that may stay cached in GPU memory),
 * computes, and writes `out` (allocated by the caller with
 * ctx->result_alloc, shape and dtype already set). Each adds its phase times
 * to ctx->t_h2d / t_compute / t_d2h, checks job_ctx_stopped between chunks,
 * and turns every CUDA error into a terr (T_EDEVICE, T_ENOMEM).
 */
#ifndef TESSEL_KINDS_GPU_KERNELS_H
#define TESSEL_KINDS_GPU_KERNELS_H

#include "compute/expr/expr.h"
#include "compute/kinds/kinds.h"
#include "compute/kinds/ops.h"

int gpu_map(int dev, const expr *x, const tarray *const *inputs,
            const char *const *ids, tarray *out, job_ctx *ctx, terr *e);

/* axis: -1 reduces everything (out is 0-d); else the axis of the broadcast
 * shape (out has that axis removed). argmin/argmax give float64 indices. */
int gpu_reduce(int dev, reduce_op op, const expr *x,
               const tarray *const *inputs, const char *const *ids, int axis,
               tarray *out, job_ctx *ctx, terr *e);

/* A gang of tiny reduce jobs in one launch (issue 26): `stacked` holds
 * their inputs as the rows of [G, L] arrays (input i of job g at row g;
 * every job's inputs the same shape, L elements, no broadcasting), and
 * out[g] gets job g's reduction over everything, bit for bit the value
 * gpu_reduce gives for that job alone (each row folded in the parts a
 * single job's output would be). One staging of the stacked inputs (one
 * h2d per staging chunk), one part and one combine launch per chunk, one
 * d2h. ctx: the gang's (its phase times are the whole launch's). */
int gpu_reduce_rows(int dev, reduce_op op, const expr *x,
                    const tarray *const *stacked, tarray *out, job_ctx *ctx,
                    terr *e);

/* out = op(a) @ op(b) + bias; bias NULL or broadcastable to out. ids[3]:
 * a, b, bias (NULL entries for inline data). */
int gpu_matmul(int dev, const tarray *a, const tarray *b, const tarray *bias,
               int transpose_a, int transpose_b, const char *const ids[3],
               tarray *out, job_ctx *ctx, terr *e);

#endif
