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
#include "compute/kinds/mgpu.h"

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
/* The devices a run used, for its record (job_ctx.lanes): n devices, the
 * run's own first, each with the rows and blocks (chunks) it computed. */
void geod_cb_lanes(void *c, int n, const int *dev, const int64_t *rows,
                   const int64_t *blocks);

/* ---- over every lent GPU (issue 27) -------------------------------------
 * A geodesic matrix over every GPU the scheduler lends, through
 * compute/kinds/mgpu.h (geod_mgpu; defined in gpu.c, gpu_none.c without
 * CUDA).
 *
 * The matrix (square, condensed, or points x targets) is cut into blocks of
 * rows that depend on the job alone (geod_mgpu_block_rows); each lane is a
 * session on its device (cuda_geod_lane_*, geodesic_cuda.h: points up
 * once, a ring of block buffers, the device's pinned slots) that runs a
 * block's rows with the kernel the bands over several devices use (SQR,
 * ROWS or COND: each element from the same pair as on one GPU) and
 * copies them straight into their place in the result: every lane drains
 * its own pinned slots into its own rows, on its own thread, at the same
 * time as the others, while its device computes its next block. Every
 * lane's gang prefaults its share of a fresh result mapping before any
 * lane writes, while the lanes' first blocks compute. Same kernels, same
 * pairs: the same bytes as one GPU (tests/gpu/test_geodesic_mgpu.c).
 *
 * geod_mgpu_wants says when a cuda run takes this path: more than one
 * device in the process, a scheduler that lends, no band (a split job's
 * tile stays on its device) and a result of at least GEOD_MGPU_MIN bytes.
 * Without CUDA in the build geod_mgpu answers T_EUNAVAIL.
 */
#define GEOD_MGPU_MIN ((int64_t)128 << 20) /* result bytes */
#define GEOD_MGPU_BLOCK_MIN ((int64_t)32 << 20)
#define GEOD_MGPU_BLOCK_MAX ((int64_t)256 << 20)
/* Blocks a lane launches before the lanes prefault the result (their
 * kernels run meanwhile; at most its fair share; a device buffer each). */
#define GEOD_MGPU_PRIME 8

int geod_mgpu_wants(const geod_plan *pl, const job_ctx *ctx);

/* The switch: TESSEL_GPU_LANES=0 never takes this path, =1 takes it
 * whenever the rest of geod_mgpu_wants holds, unset (or any other value)
 * the built-in default (off today: gpu.c says why). */
int geod_mgpu_switch(void);

/* Rows a block: about total/16 bytes, within [BLOCK_MIN, BLOCK_MAX], at
 * least one row. From the plan alone, never from the devices. */
int64_t geod_mgpu_block_rows(const geod_plan *pl);

/* The whole matrix of pl into out (allocated as gpu_geodesic's) over own
 * and what lend lends; block_rows 0: geod_mgpu_block_rows. Phase times
 * (the slowest lane's) added to *t_h2d, *t_compute, *t_d2h (NULL ok);
 * rep (NULL ok) says who wrote what. */
int geod_mgpu_run(int own, const geod_plan *pl, tarray *out,
                  const mgpu_lend *lend, int64_t block_rows,
                  mgpu_report *rep, double *t_h2d, double *t_compute,
                  double *t_d2h, int64_t *nonconv, terr *e);

/* The run's matrix through the scheduler's hooks: the lanes, the
 * progress (rows), the phase times; ctx->spread names the devices. */
int geod_mgpu(const geod_plan *pl, tarray *out, job_ctx *ctx,
              int64_t *nonconv, terr *e);


#endif
