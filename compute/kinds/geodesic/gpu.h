/* compute/kinds/geodesic/gpu.h — the GPU entry point of the geodesic kind (C side).
 *
 * gpu_geodesic computes the plan's matrix on CUDA device `dev` into `out`
 * (allocated by the caller with the plan's dtype and shape; host memory,
 * possibly a mapped .npy file). It is compute/kinds/geodesic/geodesic.cu behind a thin
 * C wrapper (compute/kinds/geodesic/gpu.c) that turns the job_ctx into callbacks, since
 * the CUDA sources are C++ and cannot read job_ctx's C11 atomics. Without
 * CUDA in the build, compute/kinds/geodesic/gpu_none.c answers T_EUNAVAIL.
 *
 * Adds its phase times to ctx->t_h2d / t_compute / t_d2h, reports progress
 * by output chunk, checks for a stop between chunks, and turns every CUDA
 * error into a terr (T_EDEVICE, or T_ENOMEM when device or pinned memory
 * runs out): the job fails, the process goes on. Runs on the device's
 * worker thread; concurrent calls for the same device are serialised.
 * Large results spread over every GPU ctx->gpu_borrow lends (each given
 * back with ctx->gpu_return before it returns), with the same bits.
 */
#ifndef TESSEL_KINDS_GEODESIC_GPU_H
#define TESSEL_KINDS_GEODESIC_GPU_H

#include "compute/kinds/geodesic/plan.h"
#include "compute/kinds/kinds.h"

int gpu_geodesic(int dev, const geod_plan *pl, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e);

/* The job_ctx as the plain callbacks of the C++ drivers (the matrix's
 * geod_gpu_job, the queries' geoq_gpu_job): c is the job_ctx. Defined in
 * compute/kinds/geodesic/gpu.c (CUDA builds only), shared by both wrappers. */
int geod_cb_stopped(void *c);
void geod_cb_progress(void *c, int64_t add);
void geod_cb_progress_total(void *c, int64_t add);
int geod_cb_borrow(void *c, int dev);
void geod_cb_give_back(void *c, int dev);

#endif
