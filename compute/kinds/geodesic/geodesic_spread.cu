/* compute/kinds/geodesic/geodesic_spread.cu — the geodesic matrix over
 * several devices (geodesic.cu's opening comment, "Several devices"):
 * the bands (SQR, ROWS or COND; never SYM) go to lanes, one a device (or
 * several on one device, for tests), each with its points, its ring of
 * GG_NSLOT band buffers, its share of the device's pinned slots and its
 * events. One host thread drives them all: gg_lane_step moves a lane as
 * far as it goes without waiting (launch bands into free buffers, queue
 * the copies of its oldest band into free slots, drain the chunks whose
 * copy is done); when no lane can move, the thread waits on the oldest
 * chunk in flight (gg_spread_wait).
 *
 * gg_spread runs in steps: the lanes taken (gg_spread_lanes), the bands
 * cut and the band buffers allocated (gg_spread_bands), the loop, the
 * counters and times gathered (gg_spread_gather); gg_spread_release ends
 * every lane on every path, its streams synchronised before any buffer is
 * freed. A lane's counters only grow and keep their order (drained <=
 * queued chunks, copied <= launched bands, at most GG_NSLOT bands ahead):
 * asserted where they move.
 *
 * The second half of the file is the other way over several devices: a
 * lane session (cuda_geod_lane_*), one device's share of a matrix run by
 * the lane threads of compute/kinds/mgpu.h (geod_mgpu) — a thread a
 * device instead of one for all; its own comment below.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/geodesic_int.h"

/* ---- several devices ------------------------------------------------------
 * See the opening comment. A lane is one device's share of the call; its
 * bands are held in a ring of GG_NSLOT device buffers (its k-th band in
 * buffer k % GG_NSLOT), its chunks in flight in its nslot pinned slots
 * d->slot[slot0 ..] (its c-th chunk in slot0 + c % nslot). */

typedef struct gg_fly {
  size_t off, len; /* where the chunk goes in the result */
  int64_t seq;     /* call-wide order of queueing */
} gg_fly;

typedef struct gg_lane {
  int dev;
  devctx *d;
  devbuf bp, bq, bnc, bout;
  gg_args a;
  gg_events ev;
  int have_ev;
  cudaEvent_t t0, t1; /* first kernel queued, last kernel done */
  int slot0, nslot;
  size_t budget;
  int64_t bid[GG_NSLOT]; /* the band in each buffer */
  int64_t nl, nq;        /* bands launched; bands whose copies are queued */
  size_t copy_o;         /* bytes of band nq queued */
  gg_fly fly[DEV_STAGE_SLOTS];
  int64_t cq, cd; /* chunks queued; chunks drained */
  int64_t rows;   /* rows of the bands it launched */
} gg_lane;

/* What the lanes share. */
typedef struct gg_spread_run {
  const geod_plan *pl;
  tarray *out;
  const geod_gpu_job *job;
  int mode, f32;
  gg_band *band;
  int64_t nb, next; /* bands; the next band to take */
  size_t chunk, slot_bytes;
  int64_t seq;      /* chunks queued, all lanes */
  double t_wait;    /* ms waiting for and draining chunks */
} gg_spread_run;

/* Take the lane's device, its points, its events, its memory budget. */
static int gg_lane_setup(gg_spread_run *S, gg_lane *x, int share, terr *e) {
  int rc = 0;
  T_TRY(dev_begin(x->dev, &x->d, e));
  T_TRY(stage_ensure(x->d, e));
  T_TRY(gg_events_create(&x->ev, e));
  x->have_ev = 1;
  CU_TRY(cudaEventCreateWithFlags(&x->t0, cudaEventDefault));
  CU_TRY(cudaEventCreateWithFlags(&x->t1, cudaEventDefault));
  T_TRY(gg_points_up(x->d, S->pl, &x->bp, &x->bq, &x->bnc, e));
  gg_args_init(&x->a, S->pl, (const geod_point *)x->bp.ptr,
               x->bq.ptr ? (const geod_point *)x->bq.ptr
                         : (const geod_point *)x->bp.ptr,
               (unsigned long long *)x->bnc.ptr);
  T_TRY(gg_budget(S->pl, &x->budget, e));
  x->budget /= (size_t)share;
fail:
  return rc;
}

/* Move lane x as far as it goes without waiting: launch bands into its
 * free buffers, queue copies of its oldest band into its free slots,
 * drain the chunks whose copy is done. *moved set when anything moved. */
static int gg_lane_step(gg_spread_run *S, gg_lane *x, int *moved, terr *e) {
  int rc = 0;
  devctx *d = x->d;
  const geod_gpu_job *job = S->job;
  CU_TRY(cudaSetDevice(d->ordinal));
  while (x->nl - x->nq < GG_NSLOT && S->next < S->nb) {
    int64_t b = S->next++;
    int k = (int)(x->nl % GG_NSLOT);
    const gg_band *bd = &S->band[b];
    T_ASSERT(bd->bytes <= S->slot_bytes); /* the band fits its buffer */
    x->a.r0 = bd->r0;
    x->a.r1 = bd->r1;
    x->a.c0 = S->mode == GG_COND ? bd->r0 : 0;
    x->a.base0 = bd->base0;
    x->a.out = (char *)x->bout.ptr + (size_t)k * S->slot_bytes;
    if (x->nl >= GG_NSLOT) /* the buffer's last band is queued for copy */
      CU_TRY(cudaStreamWaitEvent(d->s_comp, x->ev.slot[k], 0));
    int64_t cols = S->pl->m - x->a.c0;
    dim3 grid((unsigned)((cols + GG_TILE - 1) / GG_TILE),
              (unsigned)((bd->r1 - bd->r0 + GG_TILE - 1) / GG_TILE));
    if (x->nl == 0) CU_TRY(cudaEventRecord(x->t0, d->s_comp));
    CU_TRY(gg_launch(S->pl->method, S->mode, grid, d->s_comp, x->a, S->f32));
    CU_TRY(cudaEventRecord(x->ev.band[k], d->s_comp));
    CU_TRY(cudaEventRecord(x->t1, d->s_comp));
    x->bid[k] = b;
    x->nl++;
    x->rows += bd->r1 - bd->r0;
    *moved = 1;
  }
  while (x->nq < x->nl && x->cq - x->cd < x->nslot) {
    int k = (int)(x->nq % GG_NSLOT);
    const gg_band *bd = &S->band[x->bid[k]];
    if (x->copy_o == 0 && bd->bytes > 0)
      CU_TRY(cudaStreamWaitEvent(d->s_d2h, x->ev.band[k], 0));
    if (bd->bytes > 0) {
      size_t len = bd->bytes - x->copy_o < S->chunk ? bd->bytes - x->copy_o
                                                    : S->chunk;
      int u = (int)(x->cq % x->nslot);
      stage_slot *st = &d->slot[x->slot0 + u];
      CU_TRY(cudaMemcpyAsync(st->host,
                             (char *)x->bout.ptr + (size_t)k * S->slot_bytes +
                                 x->copy_o,
                             len, cudaMemcpyDeviceToHost, d->s_d2h));
      CU_TRY(cudaEventRecord(st->d2h_done, d->s_d2h));
      x->fly[u].off = bd->off + x->copy_o;
      x->fly[u].len = len;
      x->fly[u].seq = S->seq++;
      x->cq++;
      x->copy_o += len;
    }
    T_ASSERT(x->copy_o <= bd->bytes);
    if (x->copy_o == bd->bytes) { /* the buffer may take a band again */
      CU_TRY(cudaEventRecord(x->ev.slot[k], d->s_d2h));
      x->nq++;
      x->copy_o = 0;
    }
    *moved = 1;
  }
  /* At most GG_NSLOT bands ahead of their copies, nslot chunks in flight. */
  T_ASSERT(x->nq <= x->nl && x->nl - x->nq <= GG_NSLOT);
  T_ASSERT(x->cd <= x->cq && x->cq - x->cd <= x->nslot);
  while (x->cd < x->cq) {
    int u = (int)(x->cd % x->nslot);
    stage_slot *st = &d->slot[x->slot0 + u];
    cudaError_t q = cudaEventQuery(st->d2h_done);
    if (q == cudaErrorNotReady) break;
    CU_TRY(q);
    double t0 = t_now_ms();
    gg_drain(d, (char *)S->out->data + x->fly[u].off, st->host,
             x->fly[u].len);
    S->t_wait += t_now_ms() - t0;
    x->cd++;
    *moved = 1;
    if (job && job->progress) job->progress(job->ctx, 1);
    T_TRY(gg_stopped(job, e));
  }
fail:
  return rc;
}

/* Take every lane: a device's lanes (consecutive in ldev) split its
 * pinned slots and its budget; S->chunk cut to the smallest slot. */
static int gg_spread_lanes(gg_spread_run *S, gg_lane *lane, const int *ldev,
                           int nl, terr *e) {
  int rc = 0;
  double t0 = t_now_ms();
  for (int k = 0, k1; k < nl; k = k1) {
    for (k1 = k + 1; k1 < nl && ldev[k1] == ldev[k]; k1++) {
    }
    int share = k1 - k;
    for (int u = k; u < k1; u++) {
      gg_lane *x = &lane[u];
      x->dev = ldev[u];
      x->nslot = DEV_STAGE_SLOTS / share;
      x->slot0 = (u - k) * x->nslot;
      /* The lanes of a device share its slots without overlap. */
      T_ASSERT(x->nslot >= 1 && x->slot0 + x->nslot <= DEV_STAGE_SLOTS);
      T_TRY(gg_lane_setup(S, x, share, e));
      if (x->d->slot[0].bytes < S->chunk) S->chunk = x->d->slot[0].bytes;
    }
  }
  if (S->job && S->job->t_h2d) *S->job->t_h2d += t_now_ms() - t0;
fail:
  return rc;
}

/* Bands: at most a third of the smallest lane budget, at least GG_BAL a
 * lane for balance (but a whole row); then each lane's ring of band
 * buffers. *chunks_total: the copies the result takes. */
static int gg_spread_bands(gg_spread_run *S, gg_lane *lane, int nl,
                           int64_t *chunks_total, terr *e) {
  int rc = 0;
  const geod_plan *pl = S->pl;
  size_t es = tdtype_size(pl->dtype), total = (size_t)S->out->size * es;
  size_t cap = lane[0].budget, rowmax, bal;
  for (int k = 1; k < nl; k++)
    if (lane[k].budget < cap) cap = lane[k].budget;
  cap /= GG_NSLOT;
  if (cap > GG_SLOT_MAX) cap = GG_SLOT_MAX;
  rowmax = (size_t)(S->mode == GG_COND ? pl->n - 1 : pl->m) * es;
  bal = total / ((size_t)GG_BAL * (size_t)nl);
  if (bal < rowmax) bal = rowmax;
  if (bal < cap) cap = bal;
  S->nb = gg_bands(pl, S->mode, es, cap, &S->band);
  if (S->nb < 0)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold a row of "
                    "the result in %d buffers",
                    cap * GG_NSLOT, GG_NSLOT);
  for (int64_t b = 0; b < S->nb; b++) {
    if (S->band[b].bytes > S->slot_bytes) S->slot_bytes = S->band[b].bytes;
    *chunks_total += (int64_t)((S->band[b].bytes + S->chunk - 1) / S->chunk);
  }
  for (int k = 0; k < nl; k++) {
    CU_TRY(cudaSetDevice(lane[k].d->ordinal));
    T_TRY(devmem_alloc(lane[k].d, S->slot_bytes * GG_NSLOT, &lane[k].bout, e));
  }
fail:
  return rc;
}

/* Nothing can move: wait for the oldest chunk in flight, any lane. */
static int gg_spread_wait(gg_spread_run *S, gg_lane *lane, int nl, terr *e) {
  int rc = 0;
  gg_lane *w = NULL;
  for (int k = 0; k < nl; k++) {
    gg_lane *x = &lane[k];
    if (x->cd < x->cq &&
        (!w || x->fly[x->cd % x->nslot].seq < w->fly[w->cd % w->nslot].seq))
      w = x;
  }
  if (!w) return terr_set(e, T_EINTERNAL, "", -1, "geodesic lanes stalled");
  double t0 = t_now_ms();
  CU_TRY(cudaSetDevice(w->d->ordinal));
  CU_TRY(cudaEventSynchronize(
      w->d->slot[w->slot0 + (int)(w->cd % w->nslot)].d2h_done));
  S->t_wait += t_now_ms() - t0;
fail:
  return rc;
}

/* Every lane done: Vincenty's counters summed, the compute time (the
 * slowest lane's first-to-last kernel) and the copy time noted. */
static int gg_spread_gather(gg_spread_run *S, gg_lane *lane, int nl,
                            int64_t *nonconv, terr *e) {
  int rc = 0;
  double comp_ms = 0;
  unsigned long long hnc;
  for (int k = 0; k < nl; k++) {
    gg_lane *x = &lane[k];
    T_ASSERT(x->nq == x->nl && x->cd == x->cq); /* nothing left in flight */
    CU_TRY(cudaSetDevice(x->d->ordinal));
    CU_TRY(cudaMemcpy(&hnc, x->bnc.ptr, sizeof hnc, cudaMemcpyDeviceToHost));
    *nonconv += (int64_t)hnc;
    if (x->nl > 0) {
      CU_TRY(cudaEventSynchronize(x->t1));
      double ms = dev_event_ms(x->t0, x->t1);
      if (ms > comp_ms) comp_ms = ms;
    }
  }
  if (S->job && S->job->t_compute) *S->job->t_compute += comp_ms;
  if (S->job && S->job->t_d2h) *S->job->t_d2h += S->t_wait;
fail:
  return rc;
}

/* End every lane taken, last first: nothing may still write into what is
 * freed. */
static void gg_spread_release(gg_lane *lane, int nl, int rc) {
  for (int k = nl - 1; k >= 0; k--) {
    gg_lane *x = &lane[k];
    if (!x->d) continue;
    (void)cudaSetDevice(x->d->ordinal);
    (void)cudaStreamSynchronize(x->d->s_comp);
    (void)cudaStreamSynchronize(x->d->s_d2h);
    devmem_free(x->d, &x->bout);
    devmem_free(x->d, &x->bq);
    devmem_free(x->d, &x->bp);
    devmem_free(x->d, &x->bnc);
    if (x->have_ev) gg_events_destroy(&x->ev);
    if (x->t0) (void)cudaEventDestroy(x->t0);
    if (x->t1) (void)cudaEventDestroy(x->t1);
    if (rc) (void)cudaGetLastError();
    dev_end(x->d, rc);
  }
}

/* What each device computed (the lanes of one device summed), for the
 * job's record (job->lanes): the devices in lane order, the run's first. */
static void gg_spread_report(const gg_lane *lane, int nl,
                             const geod_gpu_job *job) {
  if (!job || !job->report) return;
  int dev[GG_LANE_MAX], n = 0;
  int64_t rows[GG_LANE_MAX] = {0}, bands[GG_LANE_MAX] = {0};
  for (int k = 0; k < nl; k++) {
    int d = 0;
    while (d < n && dev[d] != lane[k].dev) d++;
    if (d == n) dev[n++] = lane[k].dev;
    rows[d] += lane[k].rows;
    bands[d] += lane[k].nl;
  }
  job->report(job->ctx, n, dev, rows, bands);
}

int gg_spread(const int *ldev, int nl, const geod_plan *pl, tarray *out,
              const geod_gpu_job *job, size_t chunk, int64_t *nonconv,
              terr *e) {
  int rc = 0;
  gg_lane *lane = NULL;
  gg_spread_run S;
  int64_t chunks_total = 0;

  T_ASSERT(nl >= 1 && nl <= GG_LANE_MAX);
  memset(&S, 0, sizeof S);
  S.pl = pl;
  S.out = out;
  S.job = job;
  S.f32 = pl->dtype == T_F32;
  S.mode = pl->condensed ? GG_COND : pl->has_targets ? GG_ROWS : GG_SQR;
  S.chunk = chunk;
  lane = (gg_lane *)calloc((size_t)nl, sizeof *lane);
  if (!lane) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");

  T_TRY(gg_spread_lanes(&S, lane, ldev, nl, e));
  T_TRY(gg_spread_bands(&S, lane, nl, &chunks_total, e));
  if (job && job->progress_total) job->progress_total(job->ctx, chunks_total);
  for (;;) {
    int moved = 0, done = S.next == S.nb;
    for (int k = 0; k < nl; k++) {
      T_TRY(gg_lane_step(&S, &lane[k], &moved, e));
      done = done && lane[k].nq == lane[k].nl && lane[k].cd == lane[k].cq;
    }
    if (done) break;
    if (!moved) T_TRY(gg_spread_wait(&S, lane, nl, e));
  }
  T_TRY(gg_spread_gather(&S, lane, nl, nonconv, e));
  gg_spread_report(lane, nl, job);
fail:
  gg_spread_release(lane, nl, rc);
  free(lane);
  free(S.band);
  return rc;
}

/* ---- a lane session ------------------------------------------------------
 * One device's share of a geodesic matrix over every lent GPU (geod_mgpu,
 * compute/kinds/geodesic/gpu.c), kept on the device across the lane's
 * blocks (geodesic_cuda.h declares the C side, cuda_geod_lane_*).
 *
 * A lane (a thread of compute/kinds/mgpu.h holding its device) opens a
 * session once: the device taken (dev_begin, on the lane's thread: the
 * lock the lane borrowed), its pinned slots made, the points copied up
 * once, and a ring of device block buffers of the plan's largest block
 * (as many as asked, GEOD_LANE_BUF_MAX at most, as fit the device's
 * budget, two at least). Then, block after block, launch enqueues a
 * block's kernel into the next buffer of the ring (on the device's
 * compute stream, after that buffer's copies are done: an event), and
 * finish copies the oldest launched block down
 * through the device's pinned slots on the copy-out stream (after the
 * block's kernel: an event), draining chunk c - 1 into the result on the
 * device's gang while chunk c is in flight. The engine launches block
 * k + 1 before it finishes block k, so the kernel of k + 1 runs while k
 * is copied off and drained: a lane costs about max(compute, d2h +
 * drain), not their sum; and it launches its first blocks (one a buffer)
 * before the lanes prefault, so their kernels run meanwhile. prefault
 * populates the lane's share of a fresh
 * result mapping on its device's gang, before any lane writes (stage.cu
 * says why the whole mapping first, nobody copying yet); each lane's gang
 * does its share at the same time, so every device's copy threads fault
 * pages in. close ends the session on every path (streams synchronised
 * before the buffers are freed) and gives the lane's counters.
 *
 * The kernel is geodesic_kernel.cu's: ROWS (targets) or COND (condensed),
 * as the plan's bands over several devices, and for a square matrix SYMB
 * (geodesic_int.h): a block computes each of its pairs once, j > i, and
 * writes its band (its rows from column r0 on) and, mirrored, its strip
 * (the later rows' columns [r0, r1)), so the devices together compute the
 * matrix's pairs once, as one GPU's SYM does, instead of both halves each
 * (SQR: element (i, j) from the pair (min, max)). A block's buffer holds
 * its band then its strip.
 *
 * Where a block goes. Into a result the devices can reach (pinned: a
 * registered region, stage_pinned) each block is copied straight into its
 * place by DMA (gl_copy_direct: SYMB's band and strip as two 2-D copies),
 * no slot, no gang: the devices' compute bounds the lanes, so SYMB, each
 * pair once, is the mode there. Into anything else (a result file's page
 * cache) the block goes through the device's pinned slots and its gang,
 * and the host's drain bounds the lanes whatever the devices do: there
 * SQR's whole rows drain faster than SYMB's strips (2xH200, 2026-11-29,
 * tests/bench/bench_big_matrix.py, n = 30,000 float64 over both GPUs:
 * stored 304-337 ms SQR against 370-395 SYMB; into a pinned region through
 * the slots 213 against 200), so SQR is the mode there.
 * TESSEL_GEOD_LANES_MODE=sqr|symb forces one (A/B runs, tests).
 * Through the slots, SYMB's chunks drain row by row (gl_items).
 * Element (i, j), i < j, is the pair (p[i], p[j]) in every mode: the same
 * bits as one GPU. ROWS and COND blocks are launched in pieces of at most
 * GL_PIECE rows (the grid's y limit); a SYMB block in one.
 */
#define GL_PIECE ((int64_t)1 << 20) /* rows a launch: 32768 tiles high */

struct geod_lane {
  devctx *d;
  const geod_plan *pl;
  tarray *out;
  geod_gpu_job job; /* its stop check only */
  int mode, f32, nbuf;
  devbuf bp, bq, bnc, bout, bnc2; /* bnc2: a Vincenty counter a buffer */
  unsigned long long hnc;         /* the finished block's count */
  size_t cap, chunk; /* bytes a block buffer; a copy */
  gg_args a;
  cudaEvent_t done[GEOD_LANE_BUF_MAX];  /* buffer k's kernel done */
  cudaEvent_t freed[GEOD_LANE_BUF_MAX]; /* buffer k's copies done */
  cudaEvent_t t0, t1;   /* first kernel queued, last kernel done */
  int64_t r0[GEOD_LANE_BUF_MAX], r1[GEOD_LANE_BUF_MAX]; /* buffer k's block */
  int64_t nl, nf;       /* blocks launched; blocks finished */
  int64_t chunk_no;
  double h2d, d2h;
  gang_item *items; /* SYMB through the slots: a chunk's rows (n + 2) */
  int direct;       /* the result is pinned: blocks go straight in */
};

/* The result is pinned (every device's DMA reaches it). */
static int gl_direct(const tarray *out) {
  return out && out->data &&
         stage_pinned(out->data, (size_t)out->size * tdtype_size(out->dtype));
}

/* The lane mode (the opening comment: SYMB where blocks go straight into
 * the result, SQR through the slots; TESSEL_GEOD_LANES_MODE forces). */
static int gl_mode(const geod_plan *pl, const tarray *out) {
  if (pl->condensed) return GG_COND;
  if (pl->has_targets) return GG_ROWS;
  const char *v = getenv("TESSEL_GEOD_LANES_MODE");
  if (v && strcmp(v, "sqr") == 0) return GG_SQR;
  if (v && strcmp(v, "symb") == 0) return GG_SYMB;
  return gl_direct(out) ? GG_SYMB : GG_SQR;
}

/* The first element of row r (COND: its condensed index; the end of the
 * matrix past its last row). */
static int64_t gl_first(const geod_plan *pl, int64_t r) {
  if (!pl->condensed) return r * pl->m;
  return r < pl->n - 1 ? geod_condensed_index(pl->n, r, r + 1)
                       : pl->n * (pl->n - 1) / 2;
}

/* The bytes of block [r0, r1)'s buffer in lane mode `mode`. */
static size_t gl_bytes(const geod_plan *pl, int mode, int64_t r0, int64_t r1) {
  size_t es = tdtype_size(pl->dtype);
  if (mode == GG_SYMB) /* band, then strip */
    return (size_t)(r1 - r0) * (size_t)((pl->m - r0) + (pl->n - r1)) * es;
  return (size_t)(gl_first(pl, r1) - gl_first(pl, r0)) * es;
}

extern "C" size_t cuda_geod_lane_bytes(const geod_plan *pl,
                                       const tarray *out, int64_t r0,
                                       int64_t r1) {
  return gl_bytes(pl, gl_mode(pl, out), r0, r1);
}

extern "C" int cuda_geod_lane_folds(const geod_plan *pl, const tarray *out) {
  return gl_mode(pl, out) == GG_SYMB;
}

/* SYMB: the rows of bytes [o, o + len) of block [r0, r1)'s buffer (its
 * band's rows, then its strip's), each an item from the slot at src to its
 * place in the result. Returns the item count (at most the rows touched:
 * n + 2 for any chunk). */
static int gl_items(const geod_lane *L, int64_t r0, int64_t r1, size_t o,
                    size_t len, const char *src, gang_item *it) {
  const geod_plan *pl = L->pl;
  size_t es = tdtype_size(pl->dtype), m = (size_t)pl->m;
  size_t rb = (size_t)(pl->m - r0) * es, rs = (size_t)(r1 - r0) * es;
  size_t band = (size_t)(r1 - r0) * rb, end = o + len;
  char *res = (char *)L->out->data;
  int k = 0;
  for (size_t pos = o; pos < end; k++) {
    size_t row, in, rowlen, host;
    if (pos < band) {
      row = pos / rb, in = pos % rb, rowlen = rb;
      host = ((size_t)r0 + row) * m * es + (size_t)r0 * es + in;
    } else {
      row = (pos - band) / rs, in = (pos - band) % rs, rowlen = rs;
      host = ((size_t)r1 + row) * m * es + (size_t)r0 * es + in;
    }
    size_t take = rowlen - in < end - pos ? rowlen - in : end - pos;
    it[k].dst = res + host;
    it[k].src = src + (pos - o);
    it[k].bytes = take;
    pos += take;
  }
  return k;
}

/* Device side of an open: points, counters, events, the ring of *nbuf
 * buffers (lowered to what the budget holds; two at least). */
static int gl_setup(geod_lane *L, int *nbuf, terr *e) {
  int rc = 0;
  size_t budget = 0;
  double t0 = t_now_ms();
  int want = *nbuf < 2 ? 2 : *nbuf > GEOD_LANE_BUF_MAX ? GEOD_LANE_BUF_MAX
                                                         : *nbuf;
  T_TRY(stage_ensure(L->d, e));
  for (int k = 0; k < GEOD_LANE_BUF_MAX; k++) {
    CU_TRY(cudaEventCreateWithFlags(&L->done[k], cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&L->freed[k], cudaEventDisableTiming));
  }
  CU_TRY(cudaEventCreateWithFlags(&L->t0, cudaEventDefault));
  CU_TRY(cudaEventCreateWithFlags(&L->t1, cudaEventDefault));
  T_TRY(gg_points_up(L->d, L->pl, &L->bp, &L->bq, &L->bnc, e));
  L->h2d += t_now_ms() - t0;
  T_TRY(gg_budget(L->pl, &budget, e));
  if (L->cap > 0 && (size_t)want * L->cap > budget)
    want = (int)(budget / L->cap);
  if (want < 2)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold two "
                    "blocks of %zu bytes",
                    budget, L->cap);
  L->nbuf = *nbuf = want;
  if (L->cap > 0) T_TRY(devmem_alloc(L->d, want * L->cap, &L->bout, e));
  T_TRY(devmem_alloc(L->d, want * sizeof(unsigned long long), &L->bnc2, e));
  CU_TRY(cudaMemsetAsync(L->bnc2.ptr, 0, want * sizeof(unsigned long long),
                         L->d->s_comp));
  CU_TRY(cudaStreamSynchronize(L->d->s_comp));
  gg_args_init(&L->a, L->pl, (const geod_point *)L->bp.ptr,
               L->bq.ptr ? (const geod_point *)L->bq.ptr
                         : (const geod_point *)L->bp.ptr,
               (unsigned long long *)L->bnc.ptr);
  L->chunk = L->d->slot[0].bytes;
  if (L->pl->gpu_chunk_bytes > 0 && (size_t)L->pl->gpu_chunk_bytes < L->chunk)
    L->chunk = (size_t)L->pl->gpu_chunk_bytes;
fail:
  return rc;
}

extern "C" int cuda_geod_lane_open(int dev, const geod_plan *pl, tarray *out,
                                   size_t cap, int *nbuf,
                                   int (*stopped)(void *ctx), void *ctx,
                                   geod_lane **lane, terr *e) {
  *lane = NULL;
  geod_lane *L = (geod_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  L->pl = pl;
  L->out = out;
  L->cap = cap;
  L->job.ctx = ctx;
  L->job.stopped = stopped;
  L->f32 = pl->dtype == T_F32;
  L->mode = gl_mode(pl, out);
  L->direct = gl_direct(out);
  if (L->mode == GG_SYMB && !L->direct &&
      !(L->items = (gang_item *)calloc((size_t)pl->n + 2, sizeof *L->items))) {
    free(L);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  }
  int rc = gg_begin(dev, &L->d, e);
  if (rc) {
    free(L->items);
    free(L);
    return rc;
  }
  *lane = L; /* from here on, close ends it on every path */
  return gl_setup(L, nbuf, e);
}

extern "C" void cuda_geod_lane_prefault(geod_lane *L, int rank, int nlive,
                                        double *ms) {
  if (L->out->map_warm) return; /* its pages are in already */
  stage_prefault_share(L->d, L->out, rank, nlive, ms);
}

extern "C" int cuda_geod_lane_launch(geod_lane *L, int64_t r0, int64_t r1,
                                     terr *e) {
  int rc = 0;
  devctx *d = L->d;
  gg_args *a = &L->a;
  int k = (int)(L->nl % L->nbuf);
  size_t bytes = gl_bytes(L->pl, L->mode, r0, r1);
  /* a free buffer, and the block fits it */
  T_ASSERT(L->nl - L->nf < L->nbuf && bytes <= L->cap);
  CU_TRY(cudaSetDevice(d->ordinal));
  if (L->nl >= L->nbuf) /* the buffer's last block is copied off */
    CU_TRY(cudaStreamWaitEvent(d->s_comp, L->freed[k], 0));
  if (L->nl == 0) CU_TRY(cudaEventRecord(L->t0, d->s_comp));
  a->nonconv = (unsigned long long *)L->bnc2.ptr + k; /* zeroed by finish */
  if (L->mode == GG_SYMB && r1 > r0) { /* one piece: its band and strip */
    T_ASSERT(r1 - r0 <= GL_PIECE);
    a->r0 = r0;
    a->r1 = r1;
    a->c0 = r0;
    a->bw = L->pl->m - r0;
    a->sw = r1 - r0;
    a->out = (char *)L->bout.ptr + (size_t)k * L->cap;
    a->out2 = (char *)a->out +
              (size_t)(r1 - r0) * (size_t)a->bw * tdtype_size(L->pl->dtype);
    dim3 grid((unsigned)((a->bw + GG_TILE - 1) / GG_TILE),
              (unsigned)((r1 - r0 + GG_TILE - 1) / GG_TILE));
    CU_TRY(gg_launch(L->pl->method, GG_SYMB, grid, d->s_comp, *a, L->f32));
  }
  for (int64_t p0 = r0; p0 < r1 && bytes > 0 && L->mode != GG_SYMB;
       p0 += GL_PIECE) {
    int64_t p1 = p0 + GL_PIECE < r1 ? p0 + GL_PIECE : r1;
    a->r0 = p0;
    a->r1 = p1;
    a->c0 = L->mode == GG_COND ? p0 : 0;
    a->base0 = L->mode == GG_COND ? gl_first(L->pl, p0) : 0;
    a->out = (char *)L->bout.ptr + (size_t)k * L->cap +
             gl_bytes(L->pl, L->mode, r0, p0);
    int64_t cols = L->pl->m - a->c0;
    if (cols <= 0) continue; /* the condensed matrix's last row */
    dim3 grid((unsigned)((cols + GG_TILE - 1) / GG_TILE),
              (unsigned)((p1 - p0 + GG_TILE - 1) / GG_TILE));
    CU_TRY(gg_launch(L->pl->method, L->mode, grid, d->s_comp, *a, L->f32));
  }
  CU_TRY(cudaEventRecord(L->done[k], d->s_comp));
  CU_TRY(cudaEventRecord(L->t1, d->s_comp));
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->nl++;
fail:
  return rc;
}

/* Chunk c of the finishing block [r0, r1) drained: its copy awaited, then
 * the gang moves it from its slot into the result: bytes [o, o + len) of
 * the block's buffer, which starts at byte `base` of the result (SYMB:
 * row by row, each to its place). */
static int gl_drain(geod_lane *L, int64_t r0, int64_t r1, int s, size_t base,
                    size_t o, size_t len, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  CU_TRY(cudaEventSynchronize(d->slot[s].d2h_done));
  if (L->mode == GG_SYMB)
    gang_copy(d->gang, L->items,
              gl_items(L, r0, r1, o, len, (const char *)d->slot[s].host,
                       L->items));
  else
    gg_drain(d, (char *)L->out->data + base + o, d->slot[s].host, len);
fail:
  return rc;
}

/* A pinned result: block [r0, r1)'s buffer src copied straight into its
 * place on the copy-out stream (SYMB: the band's rows and the strip's,
 * each a 2-D copy with the result's pitch). */
static int gl_copy_direct(geod_lane *L, int64_t r0, int64_t r1,
                          const char *src, size_t base, size_t bytes,
                          terr *e) {
  int rc = 0;
  devctx *d = L->d;
  char *res = (char *)L->out->data;
  if (L->mode != GG_SYMB) {
    CU_TRY(cudaMemcpyAsync(res + base, src, bytes, cudaMemcpyDeviceToHost,
                           d->s_d2h));
    return 0;
  }
  {
    size_t es = tdtype_size(L->pl->dtype), pitch = (size_t)L->pl->m * es;
    size_t bw = (size_t)(L->pl->m - r0) * es, sw = (size_t)(r1 - r0) * es;
    CU_TRY(cudaMemcpy2DAsync(res + (size_t)r0 * pitch + (size_t)r0 * es,
                             pitch, src, bw, bw, (size_t)(r1 - r0),
                             cudaMemcpyDeviceToHost, d->s_d2h));
    if (L->pl->n > r1)
      CU_TRY(cudaMemcpy2DAsync(res + (size_t)r1 * pitch + (size_t)r0 * es,
                               pitch, src + (size_t)(r1 - r0) * bw, sw, sw,
                               (size_t)(L->pl->n - r1),
                               cudaMemcpyDeviceToHost, d->s_d2h));
  }
fail:
  return rc;
}

extern "C" int cuda_geod_lane_finish(geod_lane *L, int64_t r0, int64_t r1,
                                     int64_t *nonconv, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nf % L->nbuf), ps = -1;
  size_t es = tdtype_size(L->pl->dtype), pend_off = 0, pend_len = 0;
  size_t base = (size_t)gl_first(L->pl, r0) * es;
  size_t bytes = gl_bytes(L->pl, L->mode, r0, r1);
  const char *src = (const char *)L->bout.ptr + (size_t)k * L->cap;
  double t0 = t_now_ms();
  /* the oldest launched block, and only it */
  T_ASSERT(L->nf < L->nl && L->r0[k] == r0 && L->r1[k] == r1);
  CU_TRY(cudaSetDevice(d->ordinal));
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, L->done[k], 0));
  if (L->direct) {
    T_TRY(gl_copy_direct(L, r0, r1, src, base, bytes, e));
    T_TRY(gg_stopped(&L->job, e));
  }
  for (size_t o = 0; o < bytes && !L->direct; o += L->chunk) {
    size_t len = bytes - o < L->chunk ? bytes - o : L->chunk;
    int s = (int)(L->chunk_no++ % GG_NSTAGE);
    T_ASSERT(len <= d->slot[s].bytes);
    CU_TRY(cudaMemcpyAsync(d->slot[s].host, src + o, len,
                           cudaMemcpyDeviceToHost, d->s_d2h));
    CU_TRY(cudaEventRecord(d->slot[s].d2h_done, d->s_d2h));
    if (ps >= 0) T_TRY(gl_drain(L, r0, r1, ps, base, pend_off, pend_len, e));
    ps = s;
    pend_off = o;
    pend_len = len;
    T_TRY(gg_stopped(&L->job, e));
  }
  /* the block's Vincenty count read and zeroed, and every copy of buffer k
   * queued: a later launch into it waits for them */
  CU_TRY(cudaMemcpyAsync(&L->hnc, (unsigned long long *)L->bnc2.ptr + k,
                         sizeof L->hnc, cudaMemcpyDeviceToHost, d->s_d2h));
  CU_TRY(cudaMemsetAsync((unsigned long long *)L->bnc2.ptr + k, 0,
                         sizeof L->hnc, d->s_d2h));
  CU_TRY(cudaEventRecord(L->freed[k], d->s_d2h));
  if (ps >= 0) T_TRY(gl_drain(L, r0, r1, ps, base, pend_off, pend_len, e));
  CU_TRY(cudaEventSynchronize(L->freed[k]));
  if (nonconv) *nonconv += (int64_t)L->hnc;
  L->nf++;
fail:
  L->d2h += t_now_ms() - t0;
  return rc;
}

extern "C" void cuda_geod_lane_close(geod_lane *L, int rc, double *t_h2d,
                                     double *t_compute, double *t_d2h) {
  if (!L) return;
  devctx *d = L->d;
  (void)cudaSetDevice(d->ordinal);
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
  if (rc == 0 && L->nl > 0 && t_compute)
    *t_compute += dev_event_ms(L->t0, L->t1);
  if (t_h2d) *t_h2d += L->h2d;
  if (t_d2h) *t_d2h += L->d2h;
  devmem_free(d, &L->bout);
  devmem_free(d, &L->bq);
  devmem_free(d, &L->bp);
  devmem_free(d, &L->bnc);
  devmem_free(d, &L->bnc2);
  for (int k = 0; k < GEOD_LANE_BUF_MAX; k++) {
    if (L->done[k]) (void)cudaEventDestroy(L->done[k]);
    if (L->freed[k]) (void)cudaEventDestroy(L->freed[k]);
  }
  if (L->t0) (void)cudaEventDestroy(L->t0);
  if (L->t1) (void)cudaEventDestroy(L->t1);
  (void)cudaGetLastError();
  dev_end(d, rc);
  free(L->items);
  free(L);
}
