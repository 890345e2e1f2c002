/* compute/kinds/geodesic/query/query_chunks.cu — one pass of the CUDA
 * query engine over its chunks (query.cu's design paragraph, "Chunks"),
 * once query_devs.cu has set the devices up: the sorted queries cut into
 * chunks (gq_cut, in query_index.cu beside the slots it lays out: the full
 * size, then shrinking at the end so that the devices end together and
 * little runs after their last kernels; radius fill chunks by their pair
 * counts too); a device takes the next chunk when its last is done — its
 * queries up, the kernel, for radius fill the segmented sort of each row
 * by j (gq_submit) — and a finished chunk's results come down and are
 * scattered to their original rows (gq_finish). The pass keeps the times
 * query.cu's trace prints (gq_run's tr_*: per lane, kernels, the end of
 * its last one, the host's copies and scatters).
 *
 * A device is idle (chunk -1) or holds one chunk in flight; the host
 * staging holds one chunk's results, sized for the largest chunk: both
 * are asserted where they are used. Every CUDA status through CU_TRY;
 * nothing here frees what query.cu's cleanup frees. Runs on cuda_geoq's
 * thread, every device taken (dev_begin) for the whole call.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cub/device/device_segmented_sort.cuh>

#include "compute/kinds/geodesic/query/query_int.h"

/* The kernel's arguments for a chunk of nq queries on device x. */
static void gq_args_fill(const gq_run *r, const gq_dev *x, int64_t s0,
                         int64_t nq, gq_args *a) {
  const geod_plan *pl = r->pl;
  memset(a, 0, sizeof *a);
  a->g = pl->ell;
  a->radius = pl->radius_m;
  a->unit = pl->unit;
  a->self = !pl->has_targets;
  a->op = r->q->op;
  a->K = r->K;
  a->bound0 = INFINITY;
  if (r->mode == GQ_RCOUNT || r->mode == GQ_RFILL) a->bound0 = r->q->r;
  if ((r->mode == GQ_MIN || r->mode == GQ_ROW) && r->q->has_within)
    a->bound0 = r->q->within;
  a->m = r->T.n;
  a->nt = r->nt;
  if (r->mode == GQ_KNN)
    a->hw = std::max<int64_t>(r->K + (a->self ? 1 : 0), 32);
  else
    a->hw = 32;
  if (a->hw > a->m) a->hw = a->m;
  a->tx = (const double *)x->tx.ptr;
  a->tp = (const geod_point *)x->tp.ptr;
  a->tj = (const long long *)x->tj.ptr;
  a->box = (const double *)x->box.ptr;
  a->nq = nq;
  if (pl->has_targets && r->devix) { /* the sorted queries on the device */
    a->qx = (const double *)x->ax.ptr + 3 * s0;
    a->qp = (const geod_point *)x->ap.ptr + s0;
    a->qi = (const long long *)x->ai.ptr + s0;
  } else if (pl->has_targets) { /* the chunk's, sent up (gq_chunk_up) */
    a->qx = (const double *)x->qx.ptr;
    a->qp = (const geod_point *)x->qp.ptr;
    a->qi = (const long long *)x->qi.ptr;
  } else { /* the queries are the targets, on the device already */
    a->qx = (const double *)x->tx.ptr + 3 * s0;
    a->qp = (const geod_point *)x->tp.ptr + s0;
    a->qi = (const long long *)x->tj.ptr + s0;
  }
  a->qhome = r->devix ? (const long long *)x->ah.ptr + s0
                      : (const long long *)x->qh.ptr;
  a->qslot = !r->slotted || r->mode == GQ_RFILL ? NULL
             : r->devix ? (const long long *)x->as.ptr + s0
                        : (const long long *)x->qs.ptr;
  a->hd = (double *)x->hd.ptr;
  a->hj = (long long *)x->hj.ptr;
  a->od = x->od.ptr;
  a->oj = (long long *)x->oj.ptr;
  a->coff = (const long long *)x->coff.ptr;
  a->nonconv = (unsigned long long *)x->nc.ptr;
}

/* Chunk c's queries up to device x on its compute stream (radius fill:
 * and its row offsets, relative to the chunk's first pair). */
static int gq_chunk_up(gq_run *r, gq_dev *x, const gq_chunk *c, terr *e) {
  int rc = 0;
  int64_t s0 = c->s0, nq = c->s1 - c->s0;
  /* On the copy stream, the kernel waiting on x->up: with two lanes a
   * device, the other lane's kernel holds the compute stream, and copies
   * queued behind it would hold this thread too. */
  cudaStream_t st = x->d->s_h2d;
  double t0 = t_now_ms();
  /* the queries themselves: the kernel reads them in the targets' without
   * targets, in the device index's sides with it (r->devix) */
  if (r->pl->has_targets && !r->devix) {
    CU_TRY(cudaMemcpyAsync(x->qx.ptr, r->Q.x + 3 * s0, (size_t)nq * 24,
                           cudaMemcpyHostToDevice, st));
    CU_TRY(cudaMemcpyAsync(x->qp.ptr, r->Q.p + s0,
                           (size_t)nq * sizeof(geod_point),
                           cudaMemcpyHostToDevice, st));
    CU_TRY(cudaMemcpyAsync(x->qi.ptr, r->Q.idx + s0, (size_t)nq * 8,
                           cudaMemcpyHostToDevice, st));
  }
  if (!r->devix)
    CU_TRY(cudaMemcpyAsync(x->qh.ptr, r->home + s0, (size_t)nq * 8,
                           cudaMemcpyHostToDevice, st));
  if (!r->devix && r->slotted && r->mode != GQ_RFILL)
    CU_TRY(cudaMemcpyAsync(x->qs.ptr, r->slot + s0, (size_t)nq * 8,
                           cudaMemcpyHostToDevice, st));
  if (r->mode == GQ_RFILL) {
    /* Offsets relative to the chunk's first pair, nq + 1 of them. */
    T_ASSERT((size_t)(nq + 1) * 8 <= r->hoj_bytes);
    for (int64_t k = 0; k <= nq; k++) r->hoj[k] = r->coff[s0 + k] - c->p0;
    CU_TRY(cudaMemcpyAsync(x->coff.ptr, r->hoj, (size_t)(nq + 1) * 8,
                           cudaMemcpyHostToDevice, st));
  }
  CU_TRY(cudaEventRecord(x->up, st));
  CU_TRY(cudaStreamWaitEvent(x->d->s_comp, x->up, 0));
  r->t_up += t_now_ms() - t0;
fail:
  return rc;
}

/* Start chunk c on device x: its queries up, the kernel, the event. */
static int gq_submit(gq_run *r, gq_dev *x, const gq_chunk *c, int64_t ci,
                     terr *e) {
  int rc = 0;
  int64_t nq = c->s1 - c->s0;
  cudaStream_t st = x->d->s_comp;
  gq_args a;
  /* An idle device; a chunk its buffers hold (sized for r->cq queries,
   * fill: r->pcap pairs). */
  T_ASSERT(x->chunk < 0);
  T_ASSERT(nq > 0 && nq <= r->cq);
  T_ASSERT(r->mode != GQ_RFILL || (c->p1 - c->p0 >= 0 &&
                                   c->p1 - c->p0 <= r->pcap));
  CU_TRY(cudaSetDevice(x->d->ordinal));
  T_TRY(gq_chunk_up(r, x, c, e));
  gq_args_fill(r, x, c->s0, nq, &a);
  CU_TRY(cudaEventRecord(x->start, st));
  CU_TRY(gq_launch(r->pl->method, r->mode, nq, st, a, r->f32));
  if (r->mode == GQ_RFILL && c->p1 > c->p0) {
    size_t tb = x->tmp_bytes;
    const long long *co = (const long long *)x->coff.ptr;
    CU_TRY(cub::DeviceSegmentedSort::StableSortPairs(
        x->tmp.ptr, tb, (const long long *)x->oj.ptr, (long long *)x->sk.ptr,
        (const double *)x->od.ptr, (double *)x->sv.ptr, c->p1 - c->p0, nq, co,
        co + 1, st));
  }
  CU_TRY(cudaEventRecord(x->done, st));
  x->chunk = ci;
fail:
  return rc;
}

/* Rows of rb bytes from src (nq of them, in the chunk's order) to their
 * rows ord[] of dst, a run of consecutive rows in one copy. */
static void gq_scatter_runs(char *dst, const char *src, const long long *ord,
                            int64_t nq, size_t rb) {
  for (int64_t k = 0, k1; k < nq; k = k1) { /* runs of consecutive rows */
    for (k1 = k + 1; k1 < nq && ord[k1] == ord[k1 - 1] + 1; k1++) {
    }
    memcpy(dst + (size_t)ord[k] * rb, src + (size_t)k * rb,
           (size_t)(k1 - k) * rb);
  }
}

/* gq_scatter_runs over the device gang: participant k of n takes rows
 * [nq k / n, nq (k + 1) / n) of the chunk. The rows land at random places
 * of the parts (the queries are in Morton order), so a lone thread spends
 * a cache and TLB miss per row: ~1 GB/s for the 1.6 GB of a kNN of 10^7
 * points, k = 10, on an H200 host. Small chunks stay on the caller. */
typedef struct {
  char *dst;
  const char *src;
  const long long *ord;
  int64_t nq;
  size_t rb;
} gq_scatter_job;

static void gq_scatter_share(void *p, int k, int n) {
  const gq_scatter_job *j = (const gq_scatter_job *)p;
  int64_t a = j->nq * k / n, b = j->nq * (k + 1) / n;
  if (b > a)
    gq_scatter_runs(j->dst, j->src + (size_t)a * j->rb, j->ord + a, b - a, j->rb);
}

static void gq_scatter(gq_run *r, char *dst, const char *src,
                       const long long *ord, int64_t nq, size_t rb) {
  gq_scatter_job j = {dst, src, ord, nq, rb};
  if ((size_t)nq * rb < ((size_t)4 << 20))
    gq_scatter_share(&j, 0, 1);
  else
    gang_run(r->dv[0].d->gang, gq_scatter_share, &j);
}

/* nq rows of rb bytes at src on device x down through the device's pinned
 * slots (stage.cu) and scattered to their rows ord[] of dst by the gang,
 * a slot's worth at a time: piece p + 1's DMA runs while piece p is
 * scattered. Pageable copies into a host buffer ran at ~1-3 GB/s here (a
 * kNN of 10^6 points spent 130 ms bringing down 160 MB). */
static int gq_down_scatter(gq_run *r, gq_dev *x, char *dst, const char *src,
                           const long long *ord, int64_t nq, size_t rb,
                           terr *e) {
  int rc = 0;
  devctx *d = x->d;
  if (nq <= 0 || rb == 0) return 0; /* k = 0: a single point has no neighbour */
  T_TRY(stage_ensure(d, e));
  {
    int64_t per = (int64_t)(stage_chunk(d) / rb);
    T_ASSERT(per > 0 && DEV_STAGE_SLOTS >= 2);
    int64_t np = (nq + per - 1) / per;
    for (int64_t p = 0; p <= np; p++) {
      if (p < np) {
        stage_slot *s = &d->slot[p % 2];
        int64_t a = p * per, n = nq - a < per ? nq - a : per;
        CU_TRY(cudaMemcpyAsync(s->host, src + (size_t)a * rb, (size_t)n * rb,
                               cudaMemcpyDeviceToHost, d->s_d2h));
        CU_TRY(cudaEventRecord(s->d2h_done, d->s_d2h));
      }
      if (p > 0) {
        stage_slot *s = &d->slot[(p - 1) % 2];
        int64_t a = (p - 1) * per, n = nq - a < per ? nq - a : per;
        CU_TRY(cudaEventSynchronize(s->d2h_done));
        gq_scatter(r, dst, (const char *)s->host, ord + a, n, rb);
      }
    }
  }
fail:
  if (rc) { /* no DMA may still be writing a slot the next user fills */
    (void)cudaStreamSynchronize(d->s_d2h);
    (void)cudaGetLastError();
  }
  return rc;
}

/* Radius fill: each query's pairs (sorted by j on the device) to its
 * original row's place in the parts i, j, distance. */
static void gq_scatter_pairs(gq_run *r, const gq_chunk *c) {
  int64_t s0 = c->s0, nq = c->s1 - c->s0;
  const long long *qi = r->Q.idx + s0;
  long long *pi = (long long *)r->part[0]->data;
  long long *pj = (long long *)r->part[1]->data;
  const double *hd = (const double *)r->hod;
  for (int64_t k = 0; k < nq; k++) {
    int64_t i = qi[k], o = r->off[i];
    int64_t a0 = r->coff[s0 + k] - c->p0, n1 = r->cnt[i];
    /* The query's pairs lie in the chunk's and in its row's. */
    T_ASSERT(a0 >= 0 && a0 + n1 <= c->p1 - c->p0);
    for (int64_t u = 0; u < n1; u++) pi[o + u] = i;
    memcpy(pj + o, r->hoj + a0, (size_t)n1 * 8);
    if (r->f32) {
      float *pd = (float *)r->part[2]->data;
      for (int64_t u = 0; u < n1; u++) pd[o + u] = (float)hd[a0 + u];
    } else {
      memcpy((double *)r->part[2]->data + o, hd + a0, (size_t)n1 * 8);
    }
  }
}

/* Chunk c on device x is done: its results down, scattered to their rows. */
static int gq_finish(gq_run *r, gq_dev *x, const gq_chunk *c, terr *e) {
  int rc = 0;
  int64_t s0 = c->s0, nq = c->s1 - c->s0;
  const long long *qi = r->Q.idx + s0;
  double t0 = t_now_ms();
  float kms = 0;
  int lane = (int)(x - r->dv);
  float kend = 0;
  T_ASSERT(x->chunk >= 0); /* a chunk in flight on x */
  T_ASSERT(lane >= 0 && lane < r->ndev && (!x->twin || lane >= r->nreal));
  CU_TRY(cudaSetDevice(x->d->ordinal));
  CU_TRY(cudaEventElapsedTime(&kms, x->start, x->done));
  r->t_kern += kms;
  r->tr_kern[lane] += kms;
  /* its device's pass0: a twin's device lane is dv[lane - nreal] */
  CU_TRY(cudaEventElapsedTime(
      &kend, r->dv[x->twin ? lane - r->nreal : lane].pass0, x->done));
  if (kend > r->tr_kend[lane]) r->tr_kend[lane] = kend;
  switch (r->mode) {
    case GQ_KNN: {
      size_t K = (size_t)r->K, es = r->es;
      T_TRY(gq_down_scatter(r, x, (char *)r->part[0]->data,
                            (const char *)x->od.ptr, r->ord + s0, nq, K * es, e));
      T_TRY(gq_down_scatter(r, x, (char *)r->part[1]->data,
                            (const char *)x->oj.ptr, r->ord + s0, nq, K * 8, e));
      break;
    }
    case GQ_RCOUNT:
      T_ASSERT((size_t)nq * 8 <= r->hoj_bytes);
      CU_TRY(cudaMemcpy(r->hoj, x->oj.ptr, (size_t)nq * 8,
                        cudaMemcpyDeviceToHost));
      for (int64_t k = 0; k < nq; k++) r->cnt[qi[k]] = r->hoj[k];
      break;
    case GQ_RFILL: {
      size_t np = (size_t)(c->p1 - c->p0);
      if (np == 0) break;
      T_ASSERT(np * 8 <= r->hod_bytes && np * 8 <= r->hoj_bytes);
      CU_TRY(cudaMemcpy(r->hod, x->sv.ptr, np * 8, cudaMemcpyDeviceToHost));
      CU_TRY(cudaMemcpy(r->hoj, x->sk.ptr, np * 8, cudaMemcpyDeviceToHost));
      gq_scatter_pairs(r, c);
      break;
    }
    default: {
      int ints = r->q->op == GEOQ_ARGMIN || r->q->op == GEOQ_ARGMAX ||
                 r->q->op == GEOQ_COUNT;
      size_t es = ints ? 8 : r->es;
      T_TRY(gq_down_scatter(r, x, (char *)r->part[0]->data,
                            (const char *)(ints ? x->oj.ptr : x->od.ptr),
                            r->ord + s0, nq, es, e));
      break;
    }
  }
  r->t_down += t_now_ms() - t0;
  r->tr_fin[lane] += t_now_ms() - t0;
  x->chunk = -1;
  if (r->job && r->job->progress) r->job->progress(r->job->ctx, 1);
fail:
  return rc;
}

/* The parts' pages in (compute/gpu/stage.cu), by the first device's gang,
 * once, while the devices run their first chunks: without it every row
 * gq_finish scatters into a fresh result mapping faulted its page
 * (~1 GB/s for a kNN of 10^7 points on an H200 host). What the prefault
 * takes is counted in the download time (t_down). */
static void gq_prefault_parts(gq_run *r) {
  double t = 0;
  for (int k = 0; k < r->nparts; k++)
    if (r->part[k]) stage_prefault(r->dv[0].d, r->part[k], &t);
  r->t_down += t;
  r->tr_prefault += t;
}

/* One pass over the chunks: each device takes the next chunk when its last
 * is done. */
int gq_pass(gq_run *r, const gq_chunk *ch, int64_t nch, terr *e) {
  int rc = 0;
  int64_t next = 0, first = 1;
  double t0 = t_now_ms();
  memset(r->lrows, 0, sizeof r->lrows); /* the last pass's (radius: fill) */
  memset(r->lchunks, 0, sizeof r->lchunks);
  memset(r->tr_kern, 0, sizeof r->tr_kern);
  memset(r->tr_kend, 0, sizeof r->tr_kend);
  memset(r->tr_fin, 0, sizeof r->tr_fin);
  r->tr_prefault = 0;
  for (int k = 0; k < r->nreal; k++) { /* the devices' clocks start */
    CU_TRY(cudaSetDevice(r->dv[k].d->ordinal));
    CU_TRY(cudaEventRecord(r->dv[k].pass0, r->dv[k].d->s_comp));
  }
  for (;;) {
    int busy = 0, moved = 0;
    for (int k = 0; k < r->ndev; k++) {
      gq_dev *x = &r->dv[k];
      if (x->chunk < 0 && next < nch) {
        T_TRY(gq_stop(r, e));
        T_TRY(gq_submit(r, x, &ch[next], next, e));
        next++;
        moved = 1;
      }
      if (x->chunk < 0) continue;
      busy = 1;
      CU_TRY(cudaSetDevice(x->d->ordinal));
      cudaError_t q = cudaEventQuery(x->done);
      if (q == cudaErrorNotReady) continue;
      CU_TRY(q);
      const gq_chunk *c = &ch[x->chunk];
      T_TRY(gq_finish(r, x, c, e));
      r->lrows[k] += c->s1 - c->s0;
      r->lchunks[k]++;
      moved = 1;
    }
    if (!busy && next >= nch) break;
    if (first) { /* every device has a chunk: their kernels run meanwhile */
      first = 0;
      gq_prefault_parts(r);
      continue;
    }
    if (!moved) usleep(100);
  }
  r->tr_pass = t_now_ms() - t0;
fail:
  return rc;
}
