/* compute/kinds/geodesic/gpu.c — gpu_geodesic in a CUDA build: wraps the job_ctx (C11
 * atomics, unreadable from C++) into the callbacks of geod_gpu_job —
 * stop, progress, and the scheduler's gpu_borrow / gpu_return, through
 * which the matrix spreads over the host's GPUs — and calls
 * compute/kinds/geodesic/geodesic.cu. Empty without CUDA (compute/kinds/geodesic/gpu_none.c
 * answers then), but for which runs take geod_mgpu. Runs on the calling
 * (GPU worker) thread; so do all the callbacks — except geod_mgpu's,
 * which run on the lanes' threads (compute/kinds/mgpu.h): each lane is a
 * session on its device (geodesic_spread.cu: points up once, two block
 * buffers, the device's pinned slots) opened by gm_lane_begin; every
 * lane launches its first blocks (GEOD_MGPU_PRIME at most, what its
 * device holds) and prefaults its share of a fresh result mapping on its
 * device's gang while they compute, before any lane writes (gm_prepare);
 * then it launches block k + 1's kernel before it copies block k into
 * its place in the result (gm_launch, gm_block), and gm_lane_end closes
 * it. Vincenty's
 * non-converged pairs are summed atomically, a block's once it is
 * written; the phase times are each lane's, the slowest lane's added to
 * the job's. */
#include "compute/kinds/geodesic/gpu.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a matrix over every lent GPU (gpu.h, issue 27) -------------------- */
/* TESSEL_GPU_LANES: "0" never, "1" whenever geod_mgpu_wants' other
 * conditions hold, unset (or anything else): GEOD_MGPU_DEFAULT. History:
 * on a 2xH200 machine (2026-11-28) the first lanes made the n = 40,000
 * float32 square matrix 3.2x SLOWER than one GPU (2,531 ms against 799;
 * d2h 2,118 against 648): every block was a whole cuda_geodesic call
 * (points up, device buffers, its own staging, each lane prefaulting its
 * block while others copied) and nothing overlapped. Now each lane keeps
 * its session across its blocks, the mapping is prefaulted before any
 * copy by every lane's gang while the first blocks compute, and block
 * k + 1 computes while block k is copied off. On two H200s (32 cores,
 * ext4, 2026-11-29, tests/bench/bench_mgpu.sh, n = 40,000 float32
 * submit->stored, four runs a daemon) the lanes against one GPU: 303 and
 * 297 ms against 358 and 361 with a result spare ready, 619 against 648
 * without one; bench_lanes (a prefaulted file, no daemon) 673 against
 * 684. The first run of a daemon pays the lent device's first use (its
 * pinned slots, its kernels: 1,268 against 641). So they are on. */
#define GEOD_MGPU_DEFAULT 1

int geod_mgpu_switch(void) {
  const char *v = getenv("TESSEL_GPU_LANES");
  if (v && strcmp(v, "0") == 0) return 0;
  if (v && strcmp(v, "1") == 0) return 1;
  return GEOD_MGPU_DEFAULT;
}

int geod_mgpu_wants(const geod_plan *pl, const job_ctx *ctx) {
  if (!geod_mgpu_switch()) return 0;
  int64_t bytes = pl->shape[0] * (pl->ndim == 2 ? pl->shape[1] : 1) *
                  (int64_t)tdtype_size(pl->dtype);
  return ctx->ngpu > 1 && ctx->gpu_borrow && ctx->gpu_return &&
         pl->row1 == 0 && !pl->upper && bytes >= GEOD_MGPU_MIN;
}

int64_t geod_mgpu_block_rows(const geod_plan *pl) {
  int64_t es = (int64_t)tdtype_size(pl->dtype);
  int64_t row = (pl->condensed ? (pl->n + 1) / 2 : pl->m) * es; /* mean */
  int64_t total = pl->n * (row > 0 ? row : 1), want = total / 16;
  if (want < GEOD_MGPU_BLOCK_MIN) want = GEOD_MGPU_BLOCK_MIN;
  if (want > GEOD_MGPU_BLOCK_MAX) want = GEOD_MGPU_BLOCK_MAX;
  int64_t rows = row > 0 ? want / row : pl->n;
  return rows < 1 ? 1 : rows;
}

#if TESSEL_HAVE_CUDA

#include "compute/kinds/geodesic/geodesic_cuda.h"

int geod_cb_stopped(void *c) {
  job_ctx *ctx = c;
  return job_ctx_stopped(ctx) ? job_ctx_stop_code(ctx) : 0;
}

void geod_cb_progress(void *c, int64_t add) { job_ctx_progress(c, add); }

void geod_cb_progress_total(void *c, int64_t add) {
  job_ctx *ctx = c;
  atomic_fetch_add(&ctx->progress_total, add);
}

int geod_cb_borrow(void *c, int dev) {
  job_ctx *ctx = c;
  return ctx->gpu_borrow(ctx, dev);
}

void geod_cb_give_back(void *c, int dev) {
  job_ctx *ctx = c;
  if (ctx->gpu_return) ctx->gpu_return(ctx, dev);
}

void geod_cb_lanes(void *c, int n, const int *dev, const int64_t *rows,
                   const int64_t *blocks) {
  job_ctx *ctx = c;
  int m = n < 32 ? n : 32;
  memset(&ctx->lanes, 0, sizeof ctx->lanes);
  ctx->lanes.n = m;
  for (int k = 0; k < m; k++) {
    ctx->lanes.lane[k].dev = dev[k];
    ctx->lanes.lane[k].rows = rows[k];
    ctx->lanes.lane[k].blocks = blocks[k];
  }
}

int gpu_geodesic(int dev, const geod_plan *pl, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e) {
  geod_gpu_job job = {ctx,
                      geod_cb_stopped,
                      geod_cb_progress,
                      geod_cb_progress_total,
                      &ctx->t_h2d,
                      &ctx->t_compute,
                      &ctx->t_d2h,
                      ctx->ngpu,
                      ctx->gpu_borrow ? geod_cb_borrow : NULL,
                      geod_cb_give_back,
                      0,
                      NULL,
                      geod_cb_lanes};
  return cuda_geodesic(dev, pl, out, &job, nonconv, e);
}

/* ---- the lanes' sessions (geod_mgpu) ---------------------------------- */

typedef struct gm_run {
  const geod_plan *pl;
  tarray *out;
  const mgpu_lend *lend;
  size_t cap; /* bytes of the largest block */
  geod_lane *lane[MGPU_MAX];
  _Atomic int64_t nonconv;
  lane_times t[MGPU_MAX]; /* each lane's */
} gm_run;

static int gm_stopped(void *c) {
  const mgpu_lend *l = c;
  return l->stopped ? l->stopped(l->ctx) : 0;
}

_Static_assert(GEOD_LANE_BUF_MAX >= MGPU_PRIME_MAX,
               "a lane session holds every block its lane primes");

/* The session; *prime lowered to the buffers the device holds. A lent
 * device without the memory for two blocks is no lane (a device error:
 * the others go on), where the run's own device fails the job. */
static int gm_lane_begin(void *u, int lane, int dev, int *prime, terr *e) {
  gm_run *G = u;
  int rc = cuda_geod_lane_open(dev, G->pl, G->out, G->cap, prime, gm_stopped,
                               (void *)G->lend, &G->lane[lane], e);
  return mgpu_open_rc(rc, lane, e);
}

/* The lane's share of a fresh result mapping, before anybody writes. */
static void gm_prepare(void *u, int lane, int dev, int rank, int nlive) {
  gm_run *G = u;
  (void)dev;
  cuda_geod_lane_prefault(G->lane[lane], rank, nlive, &G->t[lane].d2h);
}

static int gm_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  gm_run *G = u;
  (void)dev;
  return cuda_geod_lane_launch(G->lane[lane], r0, r1, e);
}

static int gm_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  gm_run *G = u;
  int64_t nc = 0;
  (void)dev;
  int rc = cuda_geod_lane_finish(G->lane[lane], r0, r1, &nc, e);
  if (rc == 0) atomic_fetch_add(&G->nonconv, nc);
  return rc;
}

static void gm_lane_end(void *u, int lane, int dev, int rc) {
  gm_run *G = u;
  (void)dev;
  cuda_geod_lane_close(G->lane[lane], rc, &G->t[lane].h2d, &G->t[lane].compute,
                       &G->t[lane].d2h);
  G->lane[lane] = NULL;
}

int geod_mgpu_run(int own, const geod_plan *pl, tarray *out,
                  const mgpu_lend *lend, int64_t block_rows,
                  mgpu_report *rep, double *t_h2d, double *t_compute,
                  double *t_d2h, int64_t *nonconv, terr *e) {
  gm_run *G = calloc(1, sizeof *G);
  if (!G) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  G->pl = pl;
  G->out = out;
  G->lend = lend;
  mgpu_ops ops = {G,          gm_block,  gm_lane_end,    gm_lane_begin,
                  gm_prepare, gm_launch, GEOD_MGPU_PRIME,
                  cuda_geod_lane_folds(pl, out)};
  if (block_rows <= 0) block_rows = geod_mgpu_block_rows(pl);
  /* blocks shrink along a condensed matrix: the first is the largest */
  G->cap = cuda_geod_lane_bytes(pl, out, 0,
                                block_rows < pl->n ? block_rows : pl->n);
  int rc = mgpu_run(own, pl->n, block_rows, 0, lend, &ops, rep, e);
  out->map_prefault = 0; /* every lane did its share */
  *nonconv = atomic_load(&G->nonconv);
  lane_times T; /* the slowest lane's, phase by phase */
  mgpu_slowest(G->t, MGPU_MAX, &T);
  if (t_h2d) *t_h2d += T.h2d;
  if (t_compute) *t_compute += T.compute;
  if (t_d2h) *t_d2h += T.d2h;
  free(G);
  return rc;
}

int geod_mgpu(const geod_plan *pl, tarray *out, job_ctx *ctx,
              int64_t *nonconv, terr *e) {
  /* No other device free now: the one-device path (a square matrix that
   * fits is computed once a pair there, where bands compute both halves). */
  int any = 0;
  for (int d = 0; d < ctx->ngpu && !any; d++)
    if (d != ctx->device && ctx->gpu_borrow(ctx, d) == 0) {
      ctx->gpu_return(ctx, d);
      any = 1;
    }
  if (!any) return gpu_geodesic(ctx->device, pl, out, ctx, nonconv, e);
  mgpu_lend lend;
  mgpu_report rep;
  mgpu_lend_of(ctx, &lend);
  atomic_fetch_add(&ctx->progress_total, pl->n);
  int rc = geod_mgpu_run(ctx->device, pl, out, &lend, 0, &rep, &ctx->t_h2d,
                         &ctx->t_compute, &ctx->t_d2h, nonconv, e);
  mgpu_note(&rep, ctx);
  return rc;
}

#endif
