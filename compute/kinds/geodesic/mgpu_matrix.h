/* compute/kinds/geodesic/mgpu_matrix.h — a geodesic matrix over every GPU the
 * scheduler lends, through compute/kinds/mgpu.h (issue 27).
 *
 * The matrix (square, condensed, or points x targets) is cut into blocks of
 * rows that depend on the job alone (geod_mgpu_block_rows); each block is
 * the band plan geod_plan_rows gives — the plan a split job's tile runs,
 * whose rows are those of the whole matrix bit for bit — computed by
 * cuda_geodesic on the lane's device with no borrowing of its own, into a
 * view of the result at the block's first element: every lane drains its
 * own pinned slots into its own rows, on its own thread, at the same time
 * as the others. Same kernels, same per-row work: the same bytes as one
 * GPU (tests/gpu/test_geodesic_mgpu.c).
 *
 * geod_mgpu_wants says when a cuda run takes this path: more than one
 * device in the process, a scheduler that lends, no band (a split job's
 * tile stays on its device) and a result of at least GEOD_MGPU_MIN bytes.
 * Without CUDA in the build geod_mgpu answers T_EUNAVAIL.
 */
#ifndef TESSEL_KINDS_GEODESIC_MGPU_MATRIX_H
#define TESSEL_KINDS_GEODESIC_MGPU_MATRIX_H

#include "compute/kinds/geodesic/plan.h"
#include "compute/kinds/kinds.h"
#include "compute/kinds/mgpu.h"

#define GEOD_MGPU_MIN ((int64_t)128 << 20) /* result bytes */
#define GEOD_MGPU_BLOCK_MIN ((int64_t)32 << 20)
#define GEOD_MGPU_BLOCK_MAX ((int64_t)256 << 20)

int geod_mgpu_wants(const geod_plan *pl, const job_ctx *ctx);

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
