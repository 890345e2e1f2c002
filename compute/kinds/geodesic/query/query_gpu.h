/* compute/kinds/geodesic/query/query_gpu.h — the GPU entry point of the geodesic queries
 * (compute/kinds/geodesic/query/query.h says what they compute), C side.
 *
 * gpu_geoq runs query q of plan pl on CUDA device `dev` (held by the
 * scheduler for this run) and, when the hooks let it, on the host's other
 * free GPUs (ctx->gpu_borrow / gpu_return), allocating the parts with
 * ctx->result_alloc into *out. compute/kinds/geodesic/query/query.cu behind the thin C
 * wrapper compute/kinds/geodesic/query/query_gpu.c (job_ctx's C11 atomics are unreadable
 * from C++); without CUDA in the build compute/kinds/geodesic/query/query_gpu_none.c
 * answers T_EUNAVAIL. Adds its phase times to ctx->t_h2d / t_compute /
 * t_d2h, reports progress by tile, stops between tiles, and turns every
 * CUDA error into a terr (T_EDEVICE, or T_ENOMEM when memory runs out).
 */
#ifndef TESSEL_KINDS_GEODESIC_QUERY_GPU_H
#define TESSEL_KINDS_GEODESIC_QUERY_GPU_H

#include "compute/kinds/geodesic/query/query.h"
#include "compute/kinds/kinds.h"

int gpu_geoq(int dev, const geod_plan *pl, const geoq *q, job_ctx *ctx,
             geoq_out *out, int64_t *nonconv, terr *e);

/* geoq_gpu_job.par (query_cuda.h) over a job's CPU pool: ctx is its
 * job_ctx, the shares go to pool_for over ctx->pool, ctx->threads wide (no
 * pool, or one thread: in order on the caller). CUDA builds only. */
void geoq_pool_par(void *ctx, int64_t nt, void (*fn)(void *arg, int64_t t),
                   void *arg);

#endif
