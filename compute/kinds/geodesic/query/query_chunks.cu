/* compute/kinds/geodesic/query/query_chunks.cu — the devices' side of the
 * CUDA query engine (query.cu's design paragraph, "Chunks"): each device
 * taken (gq_dev_setup) and given the targets' index, every device at once
 * (gq_uploads: the host's index sent up, or with r->devix the prepared
 * points sent up and the index built there, query_devindex.cu; a device
 * whose budget cannot hold that build sends the call back to the host
 * index), the chunk size cut to what every device's memory budget
 * holds, the chunk buffers (gq_dev_buffers) and the host staging
 * (gq_host_stage); the sorted queries cut into chunks (gq_cut, in
 * query_index.cu beside the slots it lays out: the full size, then
 * shrinking at the end so that the devices end together and little runs
 * after their last kernels; radius fill chunks by their pair counts too);
 * and one pass over the chunks (gq_pass): a device takes the
 * next chunk when its last is done — its queries up, the kernel, for
 * radius fill the segmented sort of each row by j (gq_submit) — and a
 * finished chunk's results come down and are scattered to their original
 * rows (gq_finish). The pass keeps the times query.cu's trace prints
 * (gq_run's tr_*: per lane, kernels, the end of its last one, the host's
 * copies and scatters).
 *
 * A device is idle (chunk -1) or holds one chunk in flight; the host
 * staging holds one chunk's results, sized for the largest chunk: both
 * are asserted where they are used. Every CUDA status through CU_TRY;
 * nothing here frees what query.cu's cleanup frees. Runs on cuda_geoq's
 * thread, every device taken (dev_begin) for the whole call; only the
 * targets' uploads to devices beyond the first run on threads of their
 * own (gq_uploads), while this one waits for them.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cub/device/device_segmented_sort.cuh>

#include "compute/kinds/geodesic/query/query_int.h"

int gq_stop(gq_run *r, terr *e) {
  const geoq_gpu_job *job = r->job;
  int rc;
  if (job && job->stopped && (rc = job->stopped(job->ctx)) != 0)
    return terr_set(e, (terr_code)rc, "", -1, "%s",
                    rc == T_ETIMEOUT ? "the job ran past its timeout"
                                     : "the job was canceled");
  return 0;
}

static int gq_alloc(devctx *d, size_t bytes, devbuf *b, terr *e) {
  return devmem_alloc(d, bytes ? bytes : 8, b, e);
}

void gq_dev_free(gq_dev *x) {
  devbuf *all[] = {&x->tx,  &x->tp,  &x->tj,    &x->box, &x->nc, &x->ax,
                   &x->ap,  &x->ai,  &x->ah,    &x->as,  &x->ix, &x->codes,
                   &x->qx,  &x->qp,  &x->qi,    &x->qh,  &x->qs, &x->hd,
                   &x->hj,  &x->od,  &x->oj,    &x->coff, &x->sk, &x->sv,
                   &x->tmp};
  /* a twin's first ten are its device lane's (ix, codes: none) */
  for (size_t i = x->twin ? 10 : 0; i < sizeof all / sizeof all[0]; i++)
    devmem_free(x->d, all[i]);
}

int gq_twins(gq_run *r, terr *e) {
  int rc = 0;
  T_ASSERT(r->ndev == r->nreal && 2 * r->nreal <= 2 * GQ_MAX_DEV);
  for (int k = 0; k < r->nreal; k++) {
    const gq_dev *a = &r->dv[k];
    gq_dev *x = &r->dv[r->nreal + k];
    memset(x, 0, sizeof *x);
    x->dev = a->dev;
    x->d = a->d;
    x->twin = 1;
    x->tx = a->tx;
    x->tp = a->tp;
    x->tj = a->tj;
    x->box = a->box;
    x->nc = a->nc;
    x->ax = a->ax; /* the index on the device (r->devix) */
    x->ap = a->ap;
    x->ai = a->ai;
    x->ah = a->ah;
    x->as = a->as;
    x->chunk = -1;
    r->ndev++; /* counted now: gq_release frees what it has */
    CU_TRY(cudaSetDevice(x->d->ordinal));
    CU_TRY(cudaEventCreate(&x->start));
    CU_TRY(cudaEventCreate(&x->done));
    CU_TRY(cudaEventCreateWithFlags(&x->up, cudaEventDisableTiming));
  }
fail:
  return rc;
}

size_t gq_fixed_bytes(const gq_run *r) {
  size_t keep = 0, build = 0;
  if (r->devix) gq_dev_index_bytes(r, &keep, &build);
  return (size_t)r->T.n * (3 * sizeof(double) + sizeof(geod_point) + 8) +
         (size_t)r->nt * 6 * sizeof(double) + keep;
}

/* Device bytes a chunk of cq queries takes (radius fill: plus pcap pairs). */
size_t gq_chunk_bytes(const gq_run *r, int64_t cq) {
  size_t b = (size_t)cq * (3 * sizeof(double) + sizeof(geod_point) +
                           3 * sizeof(long long));
  switch (r->mode) {
    case GQ_KNN:
      b += (size_t)cq * (size_t)r->K * (2 * sizeof(double) + r->es + 8);
      break;
    case GQ_RCOUNT:
    case GQ_RFILL: b += (size_t)(cq + 1) * 8 * 2; break;
    default: b += (size_t)cq * 16; break;
  }
  return b;
}

/* Take the device, size the chunk within the budget, allocate the
 * targets' index (gq_dev_upload fills it). */
int gq_dev_setup(gq_run *r, gq_dev *x, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  size_t free_b = 0, total_b = 0, fixed, budget;
  int64_t m = r->T.n;
  T_TRY(dev_begin(x->dev, &x->d, e));
  CU_TRY(cudaSetDevice(x->d->ordinal));
  CU_TRY(cudaEventCreate(&x->start));
  CU_TRY(cudaEventCreate(&x->done));
  CU_TRY(cudaEventCreateWithFlags(&x->up, cudaEventDisableTiming));
  CU_TRY(cudaEventCreate(&x->pass0));
  x->chunk = -1;
  fixed = gq_fixed_bytes(r);
  CU_TRY(cudaMemGetInfo(&free_b, &total_b));
  budget = (size_t)((double)free_b * 0.8);
  if (pl->gpu_mem_limit > 0 && (size_t)pl->gpu_mem_limit < budget)
    budget = (size_t)pl->gpu_mem_limit;
  if (r->devix) { /* the build's scratch must fit beside it, or the host's */
    size_t keep = 0, build = 0;
    gq_dev_index_bytes(r, &keep, &build);
    if (fixed + build + 2 * gq_chunk_bytes(r, 32) > budget) {
      log_debug("geoq: device %d cannot hold the index's build (%zu bytes "
                "beside %zu): the index on the host", x->dev, build, fixed);
      r->devix = 0;
      fixed = gq_fixed_bytes(r);
    }
  }
  if (fixed + gq_chunk_bytes(r, 32) > budget)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold the "
                    "targets' index (%zu bytes) and a chunk of queries",
                    budget, fixed);
  /* The chunk size: what memory holds, at most the common cut. */
  {
    size_t room = budget - fixed;
    int64_t cq = r->cq;
    /* radius: half of it, the rest for the fill pass's pairs; knn and
     * rowwise: half for each of the device's two lanes (gq_twins) */
    room /= 2;
    while (cq > 32 && gq_chunk_bytes(r, cq) > room)
      cq = (cq / 2 + 31) / 32 * 32;
    if (cq < r->cq) r->cq = cq; /* one cut for every device: the smallest */
  }
  /* Whole warps: the kernel gives a warp 32 consecutive queries. */
  T_ASSERT(r->cq >= 32 && r->cq % 32 == 0);
  T_TRY(gq_alloc(x->d, (size_t)m * 3 * sizeof(double), &x->tx, e));
  T_TRY(gq_alloc(x->d, (size_t)m * sizeof(geod_point), &x->tp, e));
  T_TRY(gq_alloc(x->d, (size_t)m * 8, &x->tj, e));
  T_TRY(gq_alloc(x->d, (size_t)r->nt * 6 * sizeof(double), &x->box, e));
  T_TRY(gq_alloc(x->d, sizeof(unsigned long long), &x->nc, e));
fail:
  return rc;
}

/* The targets' index up to device x (gq_dev_setup allocated it); *ms:
 * the time it took. Reads r only: gq_uploads runs one a device at once. */
static int gq_dev_upload(const gq_run *r, gq_dev *x, double *ms, double dix[3],
                         terr *e) {
  int rc = 0;
  int64_t m = r->T.n;
  double t0 = t_now_ms();
  if (r->devix) { /* the points up and the index built there */
    rc = gq_dev_index(r, x, x == &r->dv[0], dix, e);
    *ms = t_now_ms() - t0;
    return rc;
  }
  CU_TRY(cudaSetDevice(x->d->ordinal));
  if (m) { /* through the pinned slots and the gang (stage.cu), not pageable */
    T_TRY(stage_upload(x->d, x->tx.ptr, r->T.x, (size_t)m * 3 * sizeof(double), e));
    T_TRY(stage_upload(x->d, x->tp.ptr, r->T.p, (size_t)m * sizeof(geod_point), e));
    T_TRY(stage_upload(x->d, x->tj.ptr, r->T.idx, (size_t)m * 8, e));
    CU_TRY(cudaMemcpy(x->box.ptr, r->box, (size_t)r->nt * 6 * sizeof(double),
                      cudaMemcpyHostToDevice));
  }
  CU_TRY(cudaMemset(x->nc.ptr, 0, sizeof(unsigned long long)));
  /* all of it done before the kernels (on s_comp, a non-blocking stream
   * that does not wait on this thread's default stream) read it */
  CU_TRY(cudaDeviceSynchronize());
fail:
  *ms = t_now_ms() - t0;
  return rc;
}

typedef struct gq_up_job {
  const gq_run *r;
  gq_dev *x;
  pthread_t th;
  int started, rc;
  double ms, dix[3];
  terr e;
} gq_up_job;

static void *gq_up_main(void *p) {
  gq_up_job *j = (gq_up_job *)p;
  j->rc = gq_dev_upload(j->r, j->x, &j->ms, j->dix, &j->e);
  return NULL;
}

/* The targets' index up to every device at once: device k > 0 on a
 * thread of its own, the first on this one (each through its own pinned
 * slots, gang and copy stream: stage.cu). One after the other they took
 * ~40 ms a device for 10^7 targets on an H200 host, the second's added
 * to the job. This thread holds every device's lock (dev_begin) and waits
 * for the helpers, so no one else uses a device meanwhile. A helper that
 * cannot start leaves its device to this thread; r->even (the
 * benchmarks' before) keeps them in turn. The first error is returned. */
int gq_uploads(gq_run *r, terr *e) {
  int rc = 0;
  double t0 = t_now_ms();
  gq_up_job j[GQ_MAX_DEV];
  memset(j, 0, sizeof j);
  for (int k = 0; k < r->nreal; k++) {
    j[k].r = r;
    j[k].x = &r->dv[k];
    terr_clear(&j[k].e);
    if (k > 0 && !r->even &&
        pthread_create(&j[k].th, NULL, gq_up_main, &j[k]) == 0)
      j[k].started = 1;
  }
  for (int k = 0; k < r->nreal; k++)
    if (!j[k].started) gq_up_main(&j[k]);
  double up = 0; /* the device index: the points' uploads (h2d) */
  for (int k = 0; k < r->nreal; k++) {
    if (j[k].started) (void)pthread_join(j[k].th, NULL);
    r->tr_setup[k] += j[k].ms;
    memcpy(r->tr_dix[k], j[k].dix, sizeof j[k].dix);
    if (j[k].dix[0] > up) up = j[k].dix[0];
    if (j[k].rc && !rc) {
      rc = j[k].rc;
      *e = j[k].e;
    }
  }
  for (int k = 0; k < r->nreal && r->devix; k++) gq_dev_index_free(&r->dv[k]);
  /* h2d: the span, this thread waited; with the index on the devices the
   * points' uploads, and the rest is the index's (job->t_index) */
  {
    double span = t_now_ms() - t0;
    if (!r->devix) up = span;
    r->t_up += up;
    if (r->job && r->job->t_index) *r->job->t_index += span - up;
  }
  (void)cudaSetDevice(r->dv[0].d->ordinal);
  return rc;
}

/* The chunk buffers, once r->cq (and r->pcap) are final. */
int gq_dev_buffers(gq_run *r, gq_dev *x, terr *e) {
  int rc = 0;
  size_t cq = (size_t)r->cq, K = (size_t)r->K;
  CU_TRY(cudaSetDevice(x->d->ordinal));
  if (!r->devix) { /* else the whole sides are on the device (ax, ah, as) */
    T_TRY(gq_alloc(x->d, cq * 3 * sizeof(double), &x->qx, e));
    T_TRY(gq_alloc(x->d, cq * sizeof(geod_point), &x->qp, e));
    T_TRY(gq_alloc(x->d, cq * 8, &x->qi, e));
    T_TRY(gq_alloc(x->d, cq * 8, &x->qh, e));
    if (r->slotted) T_TRY(gq_alloc(x->d, cq * 8, &x->qs, e));
  }
  switch (r->mode) {
    case GQ_KNN:
      T_TRY(gq_alloc(x->d, cq * K * 8, &x->hd, e));
      T_TRY(gq_alloc(x->d, cq * K * 8, &x->hj, e));
      T_TRY(gq_alloc(x->d, cq * K * r->es, &x->od, e));
      T_TRY(gq_alloc(x->d, cq * K * 8, &x->oj, e));
      break;
    case GQ_RCOUNT: T_TRY(gq_alloc(x->d, cq * 8, &x->oj, e)); break;
    case GQ_RFILL: {
      size_t pc = (size_t)r->pcap;
      T_TRY(gq_alloc(x->d, (cq + 1) * 8, &x->coff, e));
      T_TRY(gq_alloc(x->d, pc * 8, &x->od, e));
      T_TRY(gq_alloc(x->d, pc * 8, &x->oj, e));
      T_TRY(gq_alloc(x->d, pc * 8, &x->sk, e));
      T_TRY(gq_alloc(x->d, pc * 8, &x->sv, e));
      x->tmp_bytes = 0;
      CU_TRY(cub::DeviceSegmentedSort::StableSortPairs(
          (void *)NULL, x->tmp_bytes, (const long long *)NULL,
          (long long *)NULL, (const double *)NULL, (double *)NULL,
          (int64_t)pc, (int64_t)cq, (const long long *)NULL,
          (const long long *)NULL));
      T_TRY(gq_alloc(x->d, x->tmp_bytes, &x->tmp, e));
      break;
    }
    default:
      T_TRY(gq_alloc(x->d, cq * 8, &x->od, e));
      T_TRY(gq_alloc(x->d, cq * 8, &x->oj, e));
      break;
  }
fail:
  return rc;
}

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

/* Host staging for a chunk's results. */
int gq_host_stage(gq_run *r, terr *e) {
  size_t cq = (size_t)r->cq, K = (size_t)(r->K > 0 ? r->K : 1);
  size_t bo = cq * K * 8, bj = (cq + 1) * K * 8;
  if (r->mode != GQ_RCOUNT && r->mode != GQ_RFILL) /* gq_down_scatter's */
    bo = bj = 8;
  if (r->mode == GQ_RFILL) {
    bo = (size_t)r->pcap * 8;
    bj = ((size_t)r->pcap > cq + 1 ? (size_t)r->pcap : cq + 1) * 8;
  }
  free(r->hod);
  free(r->hoj);
  r->hod_bytes = bo ? bo : 8;
  r->hoj_bytes = bj ? bj : 8;
  r->hod = malloc(r->hod_bytes);
  r->hoj = (long long *)malloc(r->hoj_bytes);
  if (!r->hod || !r->hoj)
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the result staging");
  return 0;
}

