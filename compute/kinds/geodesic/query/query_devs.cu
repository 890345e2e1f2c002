/* compute/kinds/geodesic/query/query_devs.cu — the devices of a CUDA
 * query call (query.cu's design paragraph, "Chunks"), before its passes:
 * each device taken (gq_dev_setup) with its budget and a second lane on
 * the same device (gq_twins), the targets' index given to every device at
 * once (gq_uploads: the host's index sent up, or with r->devix the
 * prepared points sent up and the index built there, query_devindex.cu; a
 * device whose budget cannot hold that build sends the call back to the
 * host index), the bytes a chunk needs (gq_fixed_bytes, gq_chunk_bytes)
 * from which query.cu cuts the chunk size to what every device's budget
 * holds, the chunk buffers (gq_dev_buffers) and the host staging
 * (gq_host_stage). The passes over the chunks are query_chunks.cu's.
 *
 * Every CUDA status through CU_TRY; nothing here frees what query.cu's
 * cleanup frees. Runs on cuda_geoq's thread, every device taken
 * (dev_begin) for the whole call; only the targets' uploads to devices
 * beyond the first run on threads of their own (gq_uploads), while this
 * one waits for them.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
