/* geodesic_cuda.h — the C interface between compute/kinds/geodesic/gpu.c (C) and
 * compute/kinds/geodesic/geodesic.cu (C++): the job context as plain callbacks,
 * since C++ cannot read job_ctx's C11 atomics; and geod_gpu_lend, the one
 * loop that takes the devices the scheduler lends, shared by the matrix
 * (geodesic.cu) and the query engine (query/query.cu).
 */
#ifndef TESSEL_KINDS_GEODESIC_GEODESIC_CUDA_H
#define TESSEL_KINDS_GEODESIC_GEODESIC_CUDA_H

#include "compute/kinds/geodesic/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct geod_gpu_job {
  void *ctx;                                /* passed back to the callbacks */
  int (*stopped)(void *ctx);                /* 0, or the terr code to stop with */
  void (*progress)(void *ctx, int64_t add); /* output chunks done */
  void (*progress_total)(void *ctx, int64_t add);
  double *t_h2d, *t_compute, *t_d2h;        /* ms to add to; NULL ok */
  /* ctx->gpu_borrow / gpu_return (compute/kinds/kinds.h); borrow NULL: the run's
   * device only. ngpu: the devices the process has. */
  int ngpu;
  int (*borrow)(void *ctx, int dev);
  void (*give_back)(void *ctx, int dev);
  /* Tests: drive each device as this many lanes (0 or 1: one; at most
   * DEV_STAGE_SLOTS), so that the spread over devices runs on one GPU. */
  int lanes;
  int *nlanes; /* tests (NULL ok): set to the lanes the call drove */
  /* The devices' shares of a run spread over several (gg_spread), for the
   * job's record (NULL ok): once, after it succeeded, every device (the
   * run's first) with the rows and bands it computed. Not called for a
   * run on one device. */
  void (*report)(void *ctx, int n, const int *dev, const int64_t *rows,
                 const int64_t *bands);
} geod_gpu_job;

/* The devices of a run spread over the host: devs[0] = own, then every
 * device k < min(ngpu, usable), k != own, that borrow(ctx, k) lends, at
 * most max in all. Returns the count (1 when borrow is NULL or refuses
 * all). The caller gives devs[1..] back (give_back) before it returns,
 * on every path. Runs on the run's thread (borrow's rule). */
static inline int geod_gpu_lend(int own, int ngpu, int usable,
                                int (*borrow)(void *ctx, int dev), void *ctx,
                                int *devs, int max) {
  int n = 1;
  devs[0] = own;
  if (!borrow) return n;
  for (int k = 0; k < ngpu && k < usable && n < max; k++)
    if (k != own && borrow(ctx, k) == 0) devs[n++] = k;
  return n;
}

/* See gpu_geodesic (compute/kinds/geodesic/gpu.h). job may be NULL (no stop, no
 * progress, no timings, no other devices). With devices lent, the output's
 * bands of rows are spread over them (geodesic.cu); every one is given
 * back before it returns. */
int cuda_geodesic(int dev, const geod_plan *pl, tarray *out,
                  const geod_gpu_job *job, int64_t *nonconv, terr *e);

/* ---- a lane session (geodesic_spread.cu) ----------------------------------
 * One device's share of a matrix over every lent GPU (geod_mgpu), kept on
 * the device across the lane's blocks; every call on the lane's thread,
 * which holds dev (borrowed, or the run's own). The plan is the whole
 * matrix (no band: row1 0, not upper); a block is rows [r0, r1) of it.
 *   open      the device taken, its pinned slots, the points up once, a
 *             ring of *nbuf block buffers of cap bytes each
 *             (cuda_geod_lane_bytes of the largest block): *nbuf comes in
 *             as the blocks the lane wants launched at once (2 ..
 *             GEOD_LANE_BUF_MAX) and goes out as what the device's budget
 *             holds (two at least, else T_ENOMEM). On failure *lane may
 *             be set: close it.
 *   prefault  share rank of nlive of a fresh result mapping marked
 *             map_prefault, on the device's copy gang (the caller clears
 *             the flag once every lane did its share); ms added to *ms.
 *   launch    block [r0, r1)'s kernel into the ring's next buffer (at
 *             most *nbuf launched and not finished).
 *   finish    the oldest launched block (it must be [r0, r1)) copied down
 *             and drained into its place in the result; returns once its
 *             rows are there; adds the block's Vincenty non-converged
 *             pairs to *nonconv (a counter a buffer, so exact per block:
 *             a block a failed lane wrote is counted once, by whoever
 *             writes it whole). Checks the stop (stopped, ctx) each chunk.
 *   close     streams synchronised, buffers freed, the device ended with
 *             rc; adds the lane's times (points up and prefault to t_h2d
 *             and t_d2h; first to last kernel when rc is 0; time in
 *             finish) to the pointers (NULL ok). */
#define GEOD_LANE_BUF_MAX 8
typedef struct geod_lane geod_lane;
/* The bytes of block [r0, r1)'s device buffer for result out (its mode
 * depends on whether out is pinned: geodesic_spread.cu). */
size_t cuda_geod_lane_bytes(const geod_plan *pl, const tarray *out,
                            int64_t r0, int64_t r1);
/* 1 when the plan's lane blocks into out cost less along the rows (a
 * square matrix's SYMB blocks: mgpu_ops.fold), else 0. */
int cuda_geod_lane_folds(const geod_plan *pl, const tarray *out);
int cuda_geod_lane_open(int dev, const geod_plan *pl, tarray *out, size_t cap,
                        int *nbuf, int (*stopped)(void *ctx), void *ctx,
                        geod_lane **lane, terr *e);
void cuda_geod_lane_prefault(geod_lane *lane, int rank, int nlive,
                             double *ms);
int cuda_geod_lane_launch(geod_lane *lane, int64_t r0, int64_t r1, terr *e);
int cuda_geod_lane_finish(geod_lane *lane, int64_t r0, int64_t r1,
                          int64_t *nonconv, terr *e);
void cuda_geod_lane_close(geod_lane *lane, int rc, double *t_h2d,
                          double *t_compute, double *t_d2h);

/* 0 when Tessel device `dev` exists and can run the geodesic kernels; else
 * T_EUNAVAIL with the reason in e. Starts the device runtime (gpu_init)
 * when nothing has: tests and benchmarks call it first. */
int cuda_geodesic_probe(int dev, char *name, size_t name_len, terr *e);

/* Benchmark: compute the plan's whole matrix into device memory (no copy
 * back) reps times after a warm-up, and give the median kernel time in ms
 * and the pairs evaluated (n (n - 1) / 2, or n m). variant 0 is the
 * production kernel; 1 .. (see cuda_geodesic_variant_name, NULL past the
 * last) other block shapes, for karney float64 only. The matrix must fit in
 * device memory. */
int cuda_geodesic_bench(int dev, const geod_plan *pl, int variant, int reps,
                        double *ms_median, double *pairs, terr *e);
const char *cuda_geodesic_variant_name(int variant);

/* Benchmark peer: "just copy the result to the host and write it": a
 * device buffer of `bytes` copied back through the same pinned staging in
 * `chunk` pieces (0 or more than a staging slot: a slot), each written to
 * fd while the next is in flight. *ms: the
 * wall time of the copies and writes (the caller adds any fsync). */
int cuda_copy_baseline(int dev, size_t bytes, size_t chunk, int fd,
                       double *ms, terr *e);

#ifdef __cplusplus
}
#endif

#endif
