/* compute/kinds/geodesic/gpu.c — gpu_geodesic in a CUDA build: wraps the job_ctx (C11
 * atomics, unreadable from C++) into the callbacks of geod_gpu_job —
 * stop, progress, and the scheduler's gpu_borrow / gpu_return, through
 * which the matrix spreads over the host's GPUs — and calls
 * compute/kinds/geodesic/geodesic.cu. Empty without CUDA (compute/kinds/geodesic/gpu_none.c
 * answers then), but for which runs take geod_mgpu. Runs on the calling
 * (GPU worker) thread; so do all the callbacks — except geod_mgpu's
 * blocks, which run on the lanes' threads (compute/kinds/mgpu.h): a block
 * computes its band of rows with cuda_geodesic on its lane's device,
 * borrowing nothing, into a view of the result at the band's first
 * element (a fresh result mapping prefaulted a block at a time by the
 * lane's own gang: gm_prefault); Vincenty's non-converged pairs
 * are summed atomically; the phase times are each lane's, the slowest
 * lane's added to the job's. */
#include "compute/kinds/geodesic/gpu.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a matrix over every lent GPU (gpu.h, issue 27) -------------------- */
/* Off unless TESSEL_GPU_LANES=1: on a 2xH200 machine (2026-11-28) the
 * lanes made the n = 40,000 float32 square matrix 3.2x SLOWER than one GPU
 * (2,531 ms against 799; d2h 2,118 ms against 648): every block is a whole
 * cuda_geodesic call (points up, device buffers, its own staging) and a
 * one-GPU run computes each pair once where bands compute both halves.
 * The lanes stay (bit-identical, tested) for the A/B until each lane keeps
 * its device's buffers and staging across its blocks. */
static int geod_lanes_on(void) {
  const char *v = getenv("TESSEL_GPU_LANES");
  return v && strcmp(v, "1") == 0;
}

int geod_mgpu_wants(const geod_plan *pl, const job_ctx *ctx) {
  if (!geod_lanes_on()) return 0;
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
                      NULL};
  return cuda_geodesic(dev, pl, out, &job, nonconv, e);
}

/* ---- the lanes' blocks (geod_mgpu) ------------------------------------ */

typedef struct gm_run {
  const geod_plan *pl;
  tarray *out;
  const mgpu_lend *lend;
  _Atomic int64_t nonconv;
  double h2d[MGPU_MAX], comp[MGPU_MAX], d2h[MGPU_MAX];
} gm_run;

static int gm_stopped(void *c) {
  const mgpu_lend *l = c;
  return l->stopped ? l->stopped(l->ctx) : 0;
}

/* The first element of row r in the whole result. */
static int64_t gm_first(const geod_plan *pl, int64_t r) {
  return pl->condensed ? geod_condensed_index(pl->n, r, r + 1) : r * pl->m;
}

/* A fresh result mapping marked for prefault (stage.cu says why): the
 * whole pages inside the block's bytes are populated by the lane's device
 * gang before its copies (cuda_geodesic's stage_prefault), each lane its
 * own and at the same time; an edge page shared with the next block is
 * left to fault on write, so that no lane ever touches another's bytes. */
static void gm_prefault(const tarray *out, tarray *view) {
  const uintptr_t pg = 4096;
  if (!out->map_base || !out->map_prefault) return;
  uintptr_t s = (uintptr_t)view->data,
            t = s + (uintptr_t)view->size * tdtype_size(view->dtype);
  uintptr_t a = (s + pg - 1) & ~(pg - 1), b = t & ~(pg - 1);
  if (b <= a) return;
  view->map_base = (void *)a;
  view->map_len = b - a;
  view->map_prefault = 1;
}

static int gm_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  gm_run *G = u;
  geod_plan band;
  int rc = geod_plan_rows(G->pl, r0, r1, &band, e);
  if (rc) return rc;
  tarray view;
  memset(&view, 0, sizeof view);
  view.dtype = band.dtype;
  view.ndim = band.ndim;
  view.shape[0] = band.shape[0];
  view.shape[1] = band.ndim == 2 ? band.shape[1] : 0;
  view.size = band.shape[0] * (band.ndim == 2 ? band.shape[1] : 1);
  view.data = (char *)G->out->data +
              gm_first(G->pl, r0) * (int64_t)tdtype_size(band.dtype);
  if (view.size == 0) return 0; /* the last row of a condensed matrix */
  gm_prefault(G->out, &view);
  geod_gpu_job job;
  memset(&job, 0, sizeof job);
  job.ctx = (void *)G->lend;
  job.stopped = gm_stopped;
  job.t_h2d = &G->h2d[lane];
  job.t_compute = &G->comp[lane];
  job.t_d2h = &G->d2h[lane];
  int64_t nc = 0;
  rc = cuda_geodesic(dev, &band, &view, &job, &nc, e);
  atomic_fetch_add(&G->nonconv, nc);
  return rc;
}

static double gm_max(const double *v) {
  double m = 0;
  for (int k = 0; k < MGPU_MAX; k++)
    if (v[k] > m) m = v[k];
  return m;
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
  mgpu_ops ops = {G, gm_block, NULL};
  if (block_rows <= 0) block_rows = geod_mgpu_block_rows(pl);
  int rc = mgpu_run(own, pl->n, block_rows, 0, lend, &ops, rep, e);
  *nonconv = atomic_load(&G->nonconv);
  if (t_h2d) *t_h2d += gm_max(G->h2d);
  if (t_compute) *t_compute += gm_max(G->comp);
  if (t_d2h) *t_d2h += gm_max(G->d2h);
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
  if (rep.lanes > 1) mgpu_describe(&rep, ctx->spread, sizeof ctx->spread);
  return rc;
}

#endif
