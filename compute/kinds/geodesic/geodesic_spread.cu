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
fail:
  gg_spread_release(lane, nl, rc);
  free(lane);
  free(S.band);
  return rc;
}
