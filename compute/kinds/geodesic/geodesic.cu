/* geodesic.cu — the geodesic kind on a CUDA GPU: the core of
 * compute/kinds/geodesic/geodesic.h in a kernel over 2-D tiles, float64 arithmetic, and a
 * pipeline that brings the matrix back through pinned buffers while the
 * next rows are computed.
 *
 * Kernel: a block of 32 x 8 threads owns a 32 x 32 tile of pairs; thread
 * (x, y) takes column j = j0 + x and rows i0 + y + 8k, k = 0..3, so each
 * warp writes 32 consecutive elements of a row. Three store modes:
 *   SYM   square, the whole matrix resident in device memory: only pairs
 *         with j > i are computed; a tile writes them to (i, j) and, through
 *         a shared-memory transpose (coalesced too), to (j, i); the
 *         diagonal is zero. Half the work of the full matrix.
 *   ROWS  a band of full rows of a matrix with targets (n x m); of an
 *         upper band (plan.h upper: a square matrix's tile of a split job)
 *         the pairs j > i only, j <= i written zero.
 *   SQR   a band of full rows of a square matrix (too large for device
 *         memory, or spread over devices): element (i, j) is the pair
 *         (p[min(i, j)], p[max(i, j)]), the diagonal zero — the arguments
 *         SYM gives it, so the same bits; Vincenty's non-converged pairs
 *         are counted at j > i only, once a pair as in SYM.
 *   COND  a band of rows of the condensed (pdist) layout: j > i only, each
 *         row contiguous.
 * A plan that is itself a band (plan.h row0/row1: a tile of a split job,
 * no targets) is SQR or COND over its rows only (gg_bands starts at row0,
 * offsets from 0 in its result), never SYM: the same kernels, so the same
 * bits as those rows of the whole matrix.
 * The method (karney / vincenty / haversine) and the output type
 * (float64 / float32) are template parameters, so no branch on them runs
 * per pair. The ellipsoid and the band come in one __grid_constant__
 * argument (read from the constant bank, no local copy).
 *
 * Pipeline (one host thread, the device's compute and copy-out streams):
 * the output is cut into bands of rows. Bands are computed in order on the
 * compute stream, a few ahead of the copies; each band is copied to the
 * host in chunks of at most one pinned staging slot of the device runtime
 * (compute/gpu/stage.cu) on the copy-out stream (after the band's "done" event),
 * and the device's copy gang moves chunk c - 1 from its slot into the
 * result while chunk c is in flight. In SYM mode the matrix stays on the device (the transposed
 * writes of a band land in later bands); otherwise (targets, condensed, or
 * a square matrix larger than the memory budget: "passes") bands go
 * through a ring of GG_NSLOT device buffers, each reused once its copies
 * are enqueued.
 *
 * Several devices (the run's and every one the scheduler lends through
 * job->borrow, when the result holds at least GG_LEND_CHUNKS chunks):
 * the bands (SQR, ROWS or COND; never SYM, whose mirrored writes cross
 * bands) go to "lanes", one a device, each with its points, its ring of
 * band buffers, its share of the device's pinned slots and its events.
 * One host thread drives them all (gg_spread): a lane takes the next
 * band when one of its buffers is free, queues the copies of its oldest
 * band into its free slots (stream-ordered after the band's kernel), and
 * drains into the result each chunk whose copy is done; when no lane
 * can move, the thread waits on the oldest chunk in flight. Progress
 * and the stop check per chunk, as with one device; every lane ended and
 * every borrowed device given back before the call returns. One device
 * (nothing lent) keeps the single-lane pipeline above unchanged. Tests
 * may run several lanes on one device (job->lanes): they then share its
 * streams (every wait is on an event recorded earlier by the same
 * thread, so no cycle), split its pinned slots and its memory budget.
 *
 * One device runtime: the device, its lock, streams, timing events, memory
 * pool, pinned staging and copy gang are compute/gpu/devctx.h's (dev_begin /
 * dev_end, devmem_alloc, d->slot[]); these files add only the kernels and
 * the events that pace their bands.
 *
 * Files (geodesic_int.h declares what they share): this one holds the
 * one-device pipeline, cuda_geodesic, in steps (gg_one_layout,
 * gg_one_run over the bands, gg_one_release on every path);
 * geodesic_dev.cu the host helpers both pipelines share (events, bands,
 * points, budget) and the probe; geodesic_spread.cu the lanes over several devices
 * (gg_spread);
 * geodesic_kernel.cu the kernel and its launchers; geodesic_bench.cu the
 * benchmark entry points. geodesic_spread.cu also holds a lane session,
 * one device's share of a matrix run by the lanes of compute/kinds/mgpu.h
 * (geod_mgpu, gpu.c: a thread a device, instead of gg_spread's one).
 *
 * Errors: every CUDA status goes through CU_TRY (launches too, with
 * cudaGetLastError): T_EDEVICE, or T_ENOMEM for out of memory, with the
 * call and the CUDA text in the message; the function unwinds through one
 * cleanup path (streams synchronised before any buffer is freed). Nothing
 * here exits.
 *
 * Threads and locks: cuda_geodesic runs on its caller's thread (the
 * device's worker) and holds the device (dev_begin's recursive lock, the
 * one gpu_lock takes) for the whole call, so calls for one device run one
 * at a time, and never beside another kind's job on it.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/geodesic_int.h"
#include "util/vec.h"

/* ---- one device ----------------------------------------------------------
 * The single-lane pipeline of the opening comment: bands computed `look`
 * ahead on the compute stream, each copied down in chunks through the
 * device's pinned slots on the copy-out stream, chunk c - 1 drained into
 * the result while chunk c is in flight. */

typedef struct gg_one {
  devctx *d;
  const geod_plan *pl;
  tarray *out;
  const geod_gpu_job *job;
  int mode, f32, have_ev, timed;
  devbuf bp, bq, bnc, bout;
  char *dout;       /* SYM: the matrix; passes: GG_NSLOT band buffers */
  gg_band *band;
  int64_t nb, next; /* bands; the next band to launch */
  int64_t look;     /* bands launched ahead of the copies */
  int64_t chunk_no; /* chunks queued */
  size_t chunk, slot_bytes;
  gg_events ev;
  gg_args a;
  int64_t pend_c; /* the chunk whose host copy is pending (-1: none) */
  int pend_s;     /* its slot */
  size_t pend_off, pend_len;
  double t_wait;
} gg_one;

/* Resident (SYM) when the square matrix fits the budget — or passes when
 * the allocation fails after all — else passes through GG_NSLOT band
 * buffers; the bands cut to match. */
static int gg_one_layout(gg_one *S, size_t budget, size_t total, terr *e) {
  int rc = 0;
  const geod_plan *pl = S->pl;
  size_t es = tdtype_size(pl->dtype);
  terr e2;
  S->mode = GG_ROWS;
  if (!pl->has_targets && !pl->condensed && pl->row1 == 0 && total <= budget &&
      devmem_alloc(S->d, total, &S->bout, &e2) == 0) {
    S->dout = (char *)S->bout.ptr;
    S->mode = GG_SYM;
    size_t cap = (size_t)pl->m * es * GG_TILE;
    S->nb = gg_bands(pl, S->mode, es, S->chunk > cap ? S->chunk : cap,
                     &S->band);
    if (S->nb < 0)
      return terr_set(e, T_ENOMEM, "", -1, "no memory for the band table");
    S->look = GG_LOOK;
    return 0;
  }
  S->mode = pl->condensed ? GG_COND : pl->has_targets ? GG_ROWS : GG_SQR;
  S->slot_bytes = budget / GG_NSLOT;
  if (S->slot_bytes > GG_SLOT_MAX) S->slot_bytes = GG_SLOT_MAX;
  S->nb = gg_bands(pl, S->mode, es, S->slot_bytes, &S->band);
  if (S->nb < 0)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold a row of "
                    "the result in %d buffers",
                    budget, GG_NSLOT);
  S->slot_bytes = 0;
  for (int64_t b = 0; b < S->nb; b++)
    if (S->band[b].bytes > S->slot_bytes) S->slot_bytes = S->band[b].bytes;
  T_TRY(devmem_alloc(S->d, S->slot_bytes * GG_NSLOT, &S->bout, e));
  S->dout = (char *)S->bout.ptr;
  S->look = GG_NSLOT;
fail:
  return rc;
}

/* Keep `look` bands computed or queued ahead of the copies of band b. */
static int gg_one_launch_ahead(gg_one *S, int64_t b, terr *e) {
  int rc = 0;
  devctx *d = S->d;
  gg_args *a = &S->a;
  while (S->next < S->nb && S->next <= b + S->look - 1) {
    const gg_band *x = &S->band[S->next];
    a->r0 = x->r0;
    a->r1 = x->r1;
    a->c0 = S->mode == GG_ROWS || S->mode == GG_SQR ? 0 : x->r0;
    a->base0 = x->base0;
    if (S->mode == GG_SYM) {
      a->out = S->dout;
    } else {
      T_ASSERT(x->bytes <= S->slot_bytes); /* the band fits its buffer */
      a->out = S->dout + (size_t)(S->next % GG_NSLOT) * S->slot_bytes;
      if (S->next >= GG_NSLOT) /* its slot's copies are queued */
        CU_TRY(cudaStreamWaitEvent(d->s_comp, S->ev.slot[S->next % GG_NSLOT],
                                   0));
    }
    int64_t cols = S->pl->m - a->c0;
    dim3 grid((unsigned)((cols + GG_TILE - 1) / GG_TILE),
              (unsigned)((x->r1 - x->r0 + GG_TILE - 1) / GG_TILE));
    CU_TRY(gg_launch(S->pl->method, S->mode, grid, d->s_comp, *a, S->f32));
    CU_TRY(cudaEventRecord(S->ev.band[S->next % (GG_LOOK + 1)], d->s_comp));
    S->next++;
  }
  /* The ring of GG_LOOK + 1 band events is never reused in flight. */
  T_ASSERT(S->look <= GG_LOOK && S->next - b <= S->look);
fail:
  return rc;
}

/* The pending chunk: wait for its copy, drain it into the result. */
static int gg_one_drain(gg_one *S, terr *e) {
  int rc = 0;
  devctx *d = S->d;
  const geod_gpu_job *job = S->job;
  double t0 = t_now_ms();
  T_ASSERT(S->pend_c >= 0 && S->pend_len <= d->slot[S->pend_s].bytes);
  CU_TRY(cudaEventSynchronize(d->slot[S->pend_s].d2h_done));
  gg_drain(d, (char *)S->out->data + S->pend_off, d->slot[S->pend_s].host,
           S->pend_len);
  S->t_wait += t_now_ms() - t0;
  if (job && job->progress) job->progress(job->ctx, 1);
fail:
  return rc;
}

/* Band b down in chunks, each into the next pinned slot after the band's
 * kernel; the chunk before each drained while it is in flight. */
static int gg_one_copy_band(gg_one *S, int64_t b, terr *e) {
  int rc = 0;
  devctx *d = S->d;
  const gg_band *bd = &S->band[b];
  const char *src = S->mode == GG_SYM
                        ? S->dout + bd->off
                        : S->dout + (size_t)(b % GG_NSLOT) * S->slot_bytes;
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, S->ev.band[b % (GG_LOOK + 1)], 0));
  for (size_t o = 0; o < bd->bytes; o += S->chunk) {
    size_t len = bd->bytes - o < S->chunk ? bd->bytes - o : S->chunk;
    int s = (int)(S->chunk_no % GG_NSTAGE);
    CU_TRY(cudaMemcpyAsync(d->slot[s].host, src + o, len,
                           cudaMemcpyDeviceToHost, d->s_d2h));
    CU_TRY(cudaEventRecord(d->slot[s].d2h_done, d->s_d2h));
    if (S->pend_c >= 0) T_TRY(gg_one_drain(S, e)); /* chunk c - 1 */
    S->pend_c = S->chunk_no++;
    S->pend_s = s;
    S->pend_off = bd->off + o;
    S->pend_len = len;
    T_TRY(gg_stopped(S->job, e));
  }
  if (S->mode != GG_SYM)
    CU_TRY(cudaEventRecord(S->ev.slot[b % GG_NSLOT], d->s_d2h));
fail:
  return rc;
}

/* Every band launched and copied; the last chunk drained; the kernels'
 * time and Vincenty's counter. */
static int gg_one_run(gg_one *S, int64_t *nonconv, terr *e) {
  int rc = 0;
  devctx *d = S->d;
  const geod_gpu_job *job = S->job;
  unsigned long long hnc = 0;
  float ms = 0;
  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  for (int64_t b = 0; b < S->nb; b++) {
    T_TRY(gg_one_launch_ahead(S, b, e));
    /* The result's pages in (stage.cu) while the first bands compute, not
     * in front of them: the gang is idle until band 0 comes down. (d2h
     * counts it, so that phase overlaps compute by up to that much.) */
    if (b == 0) stage_prefault(d, S->out, job ? job->t_d2h : NULL);
    if (S->next == S->nb && !S->timed) {
      CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
      S->timed = 1;
    }
    T_TRY(gg_one_copy_band(S, b, e));
  }
  if (S->pend_c >= 0) {
    T_TRY(gg_one_drain(S, e));
    S->pend_c = -1;
  }
  CU_TRY(cudaEventSynchronize(d->ev_b));
  CU_TRY(cudaEventElapsedTime(&ms, d->ev_a, d->ev_b));
  if (job && job->t_compute) *job->t_compute += ms;
  if (job && job->t_d2h) *job->t_d2h += S->t_wait;
  CU_TRY(cudaMemcpy(&hnc, S->bnc.ptr, sizeof hnc, cudaMemcpyDeviceToHost));
  *nonconv = (int64_t)hnc;
fail:
  return rc;
}

/* Nothing may still write into what is freed. */
static void gg_one_release(gg_one *S) {
  devctx *d = S->d;
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
  devmem_free(d, &S->bout);
  devmem_free(d, &S->bq);
  devmem_free(d, &S->bp);
  devmem_free(d, &S->bnc);
  if (S->have_ev) gg_events_destroy(&S->ev);
  free(S->band);
}

/* Other devices, when the result is worth spreading: then the lanes
 * (gg_spread), each device's lanes consecutive. *spread set when it ran
 * (its answer in the return); devs[0..*ndev) the devices, devs[0] dev. */
static int gg_try_spread(devctx *d, int dev, const geod_plan *pl, tarray *out,
                         const geod_gpu_job *job, size_t total, size_t chunk,
                         int *devs, int *ndev, int *spread, int64_t *nonconv,
                         terr *e) {
  *spread = 0;
  *ndev = 1;
  devs[0] = dev;
  if (job && job->borrow && total >= (size_t)GG_LEND_CHUNKS * chunk)
    *ndev = geod_gpu_lend(dev, job->ngpu, gpu_count(), job->borrow, job->ctx,
                          devs, GPU_MAX_DEVICES);
  int per = job && job->lanes > 1 ? job->lanes : 1;
  if (per > DEV_STAGE_SLOTS) per = DEV_STAGE_SLOTS;
  if (job && job->nlanes) *job->nlanes = *ndev * per;
  if (*ndev * per <= 1) return 0;
  int ldev[GG_LANE_MAX], nl = 0;
  T_ASSERT(*ndev * per <= GG_LANE_MAX);
  for (int k = 0; k < *ndev; k++)
    for (int u = 0; u < per; u++) ldev[nl++] = devs[k];
  *spread = 1;
  stage_prefault(d, out, job ? job->t_d2h : NULL); /* before any lane writes */
  return gg_spread(ldev, nl, pl, out, job, chunk, nonconv, e);
}

extern "C" int cuda_geodesic(int dev, const geod_plan *pl, tarray *out,
                             const geod_gpu_job *job, int64_t *nonconv,
                             terr *e) {
  int rc = 0, spread = 0;
  int devs[GPU_MAX_DEVICES] = {dev}, ndev = 1; /* devs[0]: own device, borrowed or not */
  size_t es = tdtype_size(pl->dtype), total, budget = 0;
  gg_one one, *S = &one;
  double t0;

  memset(S, 0, sizeof *S);
  S->pl = pl;
  S->out = out;
  S->job = job;
  S->f32 = pl->dtype == T_F32;
  S->pend_c = -1;
  *nonconv = 0;
  total = (size_t)out->size * es;
  rc = gg_begin(dev, &S->d, e);
  if (rc) return rc;
  if (total == 0) goto fail; /* nothing to compute: rc 0 */
  T_TRY(stage_ensure(S->d, e));
  /* Chunks are the device's pinned slots (or smaller, when asked). */
  S->chunk = S->d->slot[0].bytes;
  if (pl->gpu_chunk_bytes > 0 && (size_t)pl->gpu_chunk_bytes < S->chunk)
    S->chunk = (size_t)pl->gpu_chunk_bytes;
  rc = gg_try_spread(S->d, dev, pl, out, job, total, S->chunk, devs, &ndev, &spread,
                     nonconv, e);
  if (spread) {
    (void)cudaSetDevice(S->d->ordinal); /* the run's device current again */
    goto fail;
  }
  T_TRY(gg_events_create(&S->ev, e));
  S->have_ev = 1;
  /* Points up (small; pageable is fine), the Vincenty counter zeroed. */
  t0 = t_now_ms();
  T_TRY(gg_points_up(S->d, pl, &S->bp, &S->bq, &S->bnc, e));
  if (job && job->t_h2d) *job->t_h2d += t_now_ms() - t0;
  T_TRY(gg_budget(pl, &budget, e));
  T_TRY(gg_one_layout(S, budget, total, e));
  {
    int64_t chunks_total = 0;
    for (int64_t b = 0; b < S->nb; b++)
      chunks_total += (int64_t)((S->band[b].bytes + S->chunk - 1) / S->chunk);
    if (job && job->progress_total) job->progress_total(job->ctx, chunks_total);
  }
  gg_args_init(&S->a, pl, (const geod_point *)S->bp.ptr,
               S->bq.ptr ? (const geod_point *)S->bq.ptr
                         : (const geod_point *)S->bp.ptr,
               (unsigned long long *)S->bnc.ptr);
  T_TRY(gg_one_run(S, nonconv, e));
fail:
  gg_one_release(S);
  if (rc) (void)cudaGetLastError();
  for (int k = 1; k < ndev; k++) /* borrowed: given back on every path */
    if (job->give_back) job->give_back(job->ctx, devs[k]);
  dev_end(S->d, rc);
  return rc;
}
