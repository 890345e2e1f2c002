/* compute/kinds/geodesic/query/query.cu — the geodesic queries (compute/kinds/geodesic/query/query.h:
 * knn, radius, rowwise) on CUDA GPUs, exact, without the n x m matrix, on
 * the run's device and every device the scheduler lends (job gpu_borrow).
 *
 * Design.
 *  - The index (once per call, on every device, query_devindex.cu; on the
 *    host with TESSEL_GEOQ_HOST_INDEX=1 or when a device cannot hold the
 *    build, query_index.cu; the same bits either way): every point and target gets its
 *    Earth-centred coordinates X on the solver's surface (the ellipsoid:
 *    X = (a cos(beta) cos(lon), a cos(beta) sin(lon), b sin(beta)) from the
 *    prepared point's reduced latitude; haversine: radius_m times the unit
 *    vector) and the 3-D Morton code of X (21 bits an axis). Targets (the
 *    points themselves when there are none) are sorted by code and cut into
 *    tiles of GQ_TILE consecutive targets, each with its bounding box.
 *    Queries are sorted by code too (without targets: the same order), and
 *    each gets its "home", its position in the targets' order.
 *  - The kernel: a warp takes 32 consecutive sorted queries, a lane one
 *    query. knn and min/argmin first take a window of targets around the
 *    home (the query's Morton neighbours, at least k of them: an upper bound
 *    U on its k-th distance, usually nearly the final one), then scan the
 *    tiles: 32 tiles at a time, lane t tests tile t's box against the
 *    warp's box of queries with the warp's loosest bound; for each tile
 *    left, each lane tests the box against its own query and bound; the
 *    warp walks the tile's targets together (broadcast loads) and each lane
 *    whose chord to the target passes its bound evaluates the distance.
 *    knn keeps a max-heap of (d, j) per query in global memory (k up to
 *    GEOQ_MAX_K), its top the bound; radius uses r, rowwise `within` (and
 *    min/argmin their best so far).
 *  - Pruning: a target or a box is skipped only when its chord distance
 *    exceeds B (1 + GEOQ_PRUNE_REL) + GEOQ_PRUNE_ABS_M, B the bound in
 *    metres: query.h states why no true candidate is lost. Box distances
 *    are lower bounds of every chord to a point inside.
 *  - Exactness: a pair is evaluated by geod_pair_dev
 *    (compute/kinds/geodesic/pair_dev.cuh), the matrix kernel's own device function
 *    (not inlined, so the same machine code), with the arguments in the
 *    matrix's order (without targets (p[min(i,j)], p[max(i,j)])), rounded
 *    to the plan's dtype before ranking. Ranking is by (d, j), NaN after
 *    every number. radius: a count pass, the cap checked on the host
 *    before anything is allocated, then a fill pass into per-chunk offsets,
 *    each row sorted by j on the device (CUB's segmented sort).
 *  - Chunks: the sorted queries are cut into chunks (at most what the
 *    device memory budget holds — free memory or the plan's gpu_mem_limit
 *    — and several per device for balance; at the end, guided: each half
 *    a device's share of what is left, down to a sixteenth of the full
 *    size or GQ_TAIL_MIN queries, so that the devices end together and
 *    the last chunk's copy down and scatter after the last kernel is
 *    short); devices take the next chunk
 *    when they finish one (one host thread drives them all, polling
 *    events; the targets' index goes up to every device at once, a
 *    helper thread a device beyond the first); each chunk's rows come back to a host buffer and are
 *    scattered into the result parts at their original rows (by the
 *    device gang, into parts prefaulted while the first chunks run). A
 *    device has two lanes for knn and rowwise (gq_twins: two chunks in
 *    flight, each half the memory budget), so that one chunk is copied
 *    down and scattered while the next one's kernel runs; radius keeps one
 *    (its fill pass is sized by the free memory). Without targets a
 *    chunk's queries are read in the targets' device arrays, not sent up
 *    again. Progress and the stop check are per chunk; radius fill chunks
 *    are cut again by their pair counts.
 *
 * Measured on one H100 of a 2 x H100 host (2026-11-25; printed by
 * `gpu_test_geoquery_gpu --time`, the call with host arrays, no store):
 * n = 10^6 points, WGS84, Karney, float64, no targets:
 *   knn k = 10, uniform    0.58-0.65 s a call: kernels 72 ms, the host
 *                          index (x, Morton codes, sort, tiles) ~0.3 s,
 *                          results down and scattered ~0.13-0.16 s;
 *   knn k = 10, clustered  0.50-0.55 s (kernels 57 ms);
 *   radius r = 1 km, clustered (1000 clusters of 1000 points within
 *                          +-0.05 deg): 15,140,744 pairs, 0.78-0.84 s
 *                          (kernels 65 ms, pairs down, sorted and placed
 *                          ~0.4 s);
 *   rowwise argmin, clustered: 0.40 s (kernels 31 ms);
 * against the matrix kernel at 2.98e9 pairs/s (the same function,
 * pair_dev.cuh): brute force over the 5e11 pairs would take 168 s. Both
 * GPUs: 0.54-0.59 s — the host side dominates at this size. knn k = 100
 * is much slower (7.8 s of kernels, measured on a build with the pair
 * function inlined; the heaps live in global memory): the next thing to
 * speed up, with the index built on the device.
 *
 * Errors: every CUDA status through CU_TRY (T_EDEVICE, T_ENOMEM); the
 * parts allocated are freed on failure; devices synchronised before any
 * buffer is freed; every borrowed device given back. Nothing here exits.
 *
 * Threads and locks: cuda_geoq runs on its caller's thread (the device's
 * worker, which holds the run's device lock) and takes every device it
 * uses with dev_begin (recursive: the run's own is already held) for the
 * whole call; the callbacks (alloc, progress, borrow) run on that thread.
 * The targets' uploads to devices beyond the first run on short-lived
 * threads (query_devs.cu's gq_uploads) while it waits for them, holding
 * their locks.
 *
 * Where the time goes: gq_trace logs one line a call ("geoq trace:", at
 * info with TESSEL_GPU_TRACE, else debug): the host index's steps, each
 * device's setup and upload (with the device index: its points up, build
 * and download), the pass's prefault, the time after the
 * last kernel, how far apart the devices ended, and per device its
 * kernels, last kernel end and copies down. TESSEL_GEOQ_EVEN=1 (for
 * benchmarks) restores the even cut and the uploads in turn, so that one
 * binary measures before and after
 * (tests/bench/results/knn-2gpu-2026-11-29.md).
 *
 * Files (query_int.h declares what they share): this one drives a call,
 * in steps (gq_begin, gq_index, gq_devices, a pass over the chunks,
 * gq_radius_fill for radius, gq_collect; gq_release on every path);
 * query_devindex.cu builds the index on the devices, query_index.cu on the
 * host; query_devs.cu sizes the devices'
 * buffers and runs the passes; query_kernel.cu is the kernel.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/geodesic_cuda.h" /* geod_gpu_lend */
#include "compute/kinds/geodesic/query/query_int.h"

static int gq_new_part(gq_run *r, tdtype dt, int ndim, const int64_t *shape,
                       terr *e) {
  tarray *a = NULL;
  T_ASSERT(r->nparts < GEOQ_MAX_PARTS);
  int rc = r->job->alloc(r->job->ctx, dt, ndim, shape, &a, e);
  if (rc) return rc;
  r->part[r->nparts++] = a;
  return 0;
}

/* The call's state and mode; the run's device checked. Nothing is taken
 * yet: an error here needs no cleanup. *ng: the usable devices. */
static int gq_begin(gq_run *r, int dev, const geod_plan *pl, const geoq *q,
                    const geoq_gpu_job *job, int *ng, terr *e) {
  memset(r, 0, sizeof *r);
  r->pl = pl;
  r->q = q;
  r->job = job;
  r->f32 = pl->dtype == T_F32;
  r->es = tdtype_size(pl->dtype);
  {
    const char *ev = getenv("TESSEL_GEOQ_EVEN"); /* benchmarks: the old cut */
    r->even = ev && *ev && strcmp(ev, "0") != 0;
    ev = getenv("TESSEL_GEOQ_HOST_INDEX"); /* A/B: the index on the host */
    r->devix = !(ev && *ev && strcmp(ev, "0") != 0);
  }
  switch (q->type) {
    case GEOQ_KNN: r->mode = GQ_KNN; break;
    case GEOQ_RADIUS: r->mode = GQ_RCOUNT; break;
    case GEOQ_ROWWISE:
      r->mode = q->op == GEOQ_MIN || q->op == GEOQ_ARGMIN ? GQ_MIN : GQ_ROW;
      break;
    default:
      return terr_set(e, T_EINVAL, "params.query", -1, "no query to run");
  }
  r->slotted = r->mode != GQ_RCOUNT; /* output slots and ord (gq_run) */
  *ng = gpu_count();
  if (*ng == 0)
    return terr_set(e, T_EUNAVAIL, "backend", -1, "no CUDA device: %s",
                    gpu_unavailable_reason());
  if (dev < 0 || dev >= *ng)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, *ng);
  return 0;
}

/* The parts whose shape is known now (knn, rowwise; radius's wait for
 * the count pass), then, with the host index, the index: both sides
 * sorted, the tiles' boxes, the homes (the devices build theirs in
 * gq_devices). */
static int gq_index(gq_run *r, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  int64_t n = pl->n;
  if (r->mode == GQ_KNN) {
    r->K = (int)geoq_knn_k(pl, r->q);
    int64_t sh[2] = {n, r->K};
    T_TRY(gq_new_part(r, pl->dtype, 2, sh, e));
    T_TRY(gq_new_part(r, T_I64, 2, sh, e));
  } else if (r->mode != GQ_RCOUNT) {
    int64_t sh[1] = {n};
    T_TRY(gq_new_part(r, geoq_rowwise_dtype(pl, r->q->op), 1, sh, e));
  }
  r->T.n = pl->m; /* the sides' sizes; their arrays are the index's */
  r->Q.n = n;
  r->nt = (pl->m + GQ_TILE - 1) / GQ_TILE;
  if (!r->devix) T_TRY(gq_host_index(r, e));
fail:
  return rc;
}

/* The devices: the run's, then every one the scheduler lends; the chunk
 * size (several per device for balance, at least GQ_CHUNK_MIN, then cut
 * to every device's budget), the buffers and the host staging. */
static int gq_devices(gq_run *r, int dev, int ng, terr *e) {
  int rc = 0;
  const geoq_gpu_job *job = r->job;
  int64_t n = r->pl->n;
  int devs[GQ_MAX_DEV];
  r->ndev = geod_gpu_lend(dev, job ? job->ngpu : 0, ng,
                          job && n >= 64 ? job->borrow : NULL,
                          job ? job->ctx : NULL, devs, GQ_MAX_DEV);
  T_ASSERT(r->ndev >= 1 && r->ndev <= GQ_MAX_DEV && devs[0] == dev);
  for (int k = 0; k < r->ndev; k++) {
    r->dv[k].dev = devs[k];
    r->dv[k].borrowed = k > 0;
  }
  r->cq = (n + 4 * r->ndev - 1) / (4 * r->ndev);
  if (r->ndev == 1 && r->cq < GQ_CHUNK_MIN) r->cq = GQ_CHUNK_MIN;
  if (r->cq < 32) r->cq = 32;
  r->cq = (r->cq + 31) / 32 * 32;
  r->nreal = r->ndev;
  for (int k = 0; k < r->ndev; k++) {
    double t = t_now_ms();
    T_TRY(gq_dev_setup(r, &r->dv[k], e)); /* may fall back to the host index */
    r->tr_setup[k] = t_now_ms() - t;
  }
  if (!r->devix && !r->box) T_TRY(gq_host_index(r, e));
  if (r->devix) { /* the cut, the host's arrays, every device's buffers */
    T_TRY(gq_dev_index_prep(r, e));
    for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_index_alloc(r, &r->dv[k], e));
  }
  T_TRY(gq_uploads(r, e)); /* with r->devix: the index built there */
  if (r->slotted) {
    if (!r->devix) {
      double t = t_now_ms();
      T_TRY(gq_slots(r, e));
      r->tr_slots = t_now_ms() - t;
    }
    T_TRY(gq_twins(r, e)); /* radius sizes its fill pass by free memory */
  }
  for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_buffers(r, &r->dv[k], e));
  T_TRY(gq_host_stage(r, e));
  if (r->mode == GQ_RCOUNT) {
    r->cnt = (long long *)calloc((size_t)(n > 0 ? n : 1), 8);
    r->off = (int64_t *)malloc((size_t)(n + 1) * 8);
    r->coff = (long long *)malloc((size_t)(n + 1) * 8);
    if (!r->cnt || !r->off || !r->coff)
      return terr_set(e, T_ENOMEM, "", -1, "no memory for the pair counts");
  }
fail:
  return rc;
}

/* Cut the sorted queries into chunks and run one pass over them. *ch is
 * the caller's (freed by gq_release when it fails). */
static int gq_run_pass(gq_run *r, int fill, gq_chunk **ch, terr *e) {
  int rc = 0;
  int64_t nch = 0;
  const geoq_gpu_job *job = r->job;
  free(*ch);
  *ch = NULL;
  T_TRY(gq_cut(r, fill, ch, &nch, e));
  /* the cut the slots were laid out for (gq_slots) */
  T_ASSERT(fill || !r->slotted ||
           (nch == r->slot_nch && (nch == 0 || (*ch)[nch - 1].s0 == r->slot_last)));
  if (job && job->progress_total) job->progress_total(job->ctx, nch);
  T_TRY(gq_pass(r, *ch, nch, e));
fail:
  return rc;
}

/* Radius, after the count pass: each original row's first pair and the
 * total P, checked against max_pairs before anything is allocated; then
 * the three parts of P pairs and, per sorted query, the pairs before it. */
static int gq_radius_offsets(gq_run *r, int64_t *total, terr *e) {
  int rc = 0;
  int64_t n = r->pl->n, P = 0;
  for (int64_t i = 0; i < n; i++) {
    r->off[i] = P;
    P += r->cnt[i];
  }
  r->off[n] = P;
  *total = P;
  if (P > r->q->max_pairs)
    return terr_set(e, T_ENOSPACE, "params.query.radius.max_pairs", -1,
                    "%lld pairs within r, more than max_pairs (%lld)",
                    (long long)P, (long long)r->q->max_pairs);
  int64_t sh[1] = {P};
  T_TRY(gq_new_part(r, T_I64, 1, sh, e));
  T_TRY(gq_new_part(r, T_I64, 1, sh, e));
  T_TRY(gq_new_part(r, r->pl->dtype, 1, sh, e));
  r->coff[0] = 0;
  for (int64_t s = 0; s < n; s++)
    r->coff[s + 1] = r->coff[s] + r->cnt[r->Q.idx[s]];
  T_ASSERT(r->coff[n] == P); /* the same pairs, in sorted order */
fail:
  return rc;
}

/* The fill pass's pairs a chunk holds (r->pcap): what the smallest
 * device budget leaves beside a chunk's queries, 48 bytes a pair. */
static int gq_fill_budget(gq_run *r, int64_t P, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  size_t free_b = 0, total_b = 0;
  r->pcap = 0;
  for (int k = 0; k < r->ndev; k++) {
    gq_dev *x = &r->dv[k];
    CU_TRY(cudaSetDevice(x->d->ordinal));
    CU_TRY(cudaMemGetInfo(&free_b, &total_b));
    size_t budget = (size_t)((double)free_b * 0.8);
    size_t fixed = gq_fixed_bytes(r);
    if (pl->gpu_mem_limit > 0) {
      size_t lim = (size_t)pl->gpu_mem_limit > fixed
                       ? (size_t)pl->gpu_mem_limit - fixed : 0;
      if (lim < budget) budget = lim;
    }
    size_t qb = gq_chunk_bytes(r, r->cq);
    int64_t pc = budget > qb ? (int64_t)((budget - qb) / 48) : 0;
    if (k == 0 || pc < r->pcap) r->pcap = pc;
  }
  if (r->pcap < 1) r->pcap = 1;
  if (r->pcap > P && P > 0) r->pcap = P;
fail:
  return rc;
}

/* Radius after the count pass: offsets and parts, the count pass's
 * buffers given back, buffers sized by pairs, and the fill pass. */
static int gq_radius_fill(gq_run *r, gq_chunk **ch, terr *e) {
  int rc = 0;
  int64_t P = 0;
  T_ASSERT(r->mode == GQ_RCOUNT); /* count, then fill: once */
  T_TRY(gq_radius_offsets(r, &P, e));
  r->mode = GQ_RFILL;
  for (int k = 0; k < r->ndev; k++) {
    gq_dev *x = &r->dv[k];
    CU_TRY(cudaSetDevice(x->d->ordinal));
    devbuf *b[] = {&x->qx, &x->qp, &x->qi, &x->qh, &x->oj, &x->od};
    for (size_t u = 0; u < sizeof b / sizeof b[0]; u++) devmem_free(x->d, b[u]);
  }
  T_TRY(gq_fill_budget(r, P, e));
  for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_buffers(r, &r->dv[k], e));
  T_TRY(gq_host_stage(r, e));
  free(*ch);
  *ch = NULL;
  if (P > 0) T_TRY(gq_run_pass(r, 1, ch, e));
fail:
  return rc;
}

/* The results: Vincenty's non-converged pairs, the times, the parts
 * handed to *out with their names. */
static int gq_collect(gq_run *r, geoq_out *out, int64_t *nonconv, double t0,
                      terr *e) {
  int rc = 0;
  const geoq_gpu_job *job = r->job;
  unsigned long long hnc;
  for (int k = 0; k < r->ndev; k++) {
    gq_dev *x = &r->dv[k];
    T_ASSERT(x->chunk < 0); /* every chunk finished */
    if (x->twin) continue; /* its counter is its device lane's */
    CU_TRY(cudaSetDevice(x->d->ordinal));
    CU_TRY(cudaMemcpy(&hnc, x->nc.ptr, sizeof hnc, cudaMemcpyDeviceToHost));
    *nonconv += (int64_t)hnc;
  }
  if (job && job->t_h2d) *job->t_h2d += r->t_up;
  if (job && job->t_d2h) *job->t_d2h += r->t_down;
  if (job && job->t_compute)
    *job->t_compute += t_now_ms() - t0 - r->t_up - r->t_down;
  if (job && job->t_kernel) *job->t_kernel += r->t_kern;
  out->nparts = r->nparts;
  for (int k = 0; k < r->nparts; k++) {
    out->part[k] = r->part[k];
    r->part[k] = NULL;
  }
  if (r->q->type == GEOQ_KNN) {
    out->name[0] = "distance";
    out->name[1] = "index";
  } else if (r->q->type == GEOQ_RADIUS) {
    out->name[0] = "i";
    out->name[1] = "j";
    out->name[2] = "distance";
  } else {
    out->name[0] = NULL;
  }
fail:
  return rc;
}

/* Every device synchronised before its buffers go, ended, and given back
 * when borrowed; every host buffer and part not handed out freed. */
static void gq_release(gq_run *r, int rc, gq_chunk *ch) {
  const geoq_gpu_job *job = r->job;
  for (int k = r->ndev - 1; k >= 0; k--) { /* twins first: their device's lock */
    gq_dev *x = &r->dv[k];
    if (x->d) {
      (void)cudaSetDevice(x->d->ordinal);
      (void)cudaStreamSynchronize(x->d->s_comp);
      gq_dev_free(x);
      if (x->done) (void)cudaEventDestroy(x->done);
      if (x->up) (void)cudaEventDestroy(x->up);
      if (x->pass0) (void)cudaEventDestroy(x->pass0);
      if (x->start) (void)cudaEventDestroy(x->start);
      if (rc) (void)cudaGetLastError();
      if (!x->twin) dev_end(x->d, rc); /* a twin took nothing */
    }
    if (x->borrowed && job && job->give_back) job->give_back(job->ctx, x->dev);
  }
  /* The run's device current again for its caller. */
  if (r->dv[0].d) (void)cudaSetDevice(r->dv[0].d->ordinal);
  for (int k = 0; k < GEOQ_MAX_PARTS; k++) tarray_free(r->part[k]);
  if (r->pl->has_targets) gq_side_free(&r->Q);
  gq_side_free(&r->T);
  {
    void *p[4] = {r->home, r->slot, r->ord, r->box};
    gq_free_later(p, 4, r->pl->n);
  }
  free(r->hod);
  free(r->hoj);
  free(r->cnt);
  free(r->off);
  free(r->coff);
  free(r->cut0);
  free(ch);
}

/* What each device computed (a twin lane's share is its device's), for
 * the job's record (job->lanes). */
static void gq_report_lanes(const gq_run *r) {
  const geoq_gpu_job *job = r->job;
  if (!job || !job->lanes) return;
  int dev[GQ_MAX_DEV];
  int64_t rows[GQ_MAX_DEV] = {0}, chunks[GQ_MAX_DEV] = {0};
  for (int k = 0; k < r->nreal; k++) dev[k] = r->dv[k].dev;
  for (int k = 0; k < r->ndev; k++)
    for (int d = 0; d < r->nreal; d++)
      if (r->dv[d].dev == r->dv[k].dev) {
        rows[d] += r->lrows[k];
        chunks[d] += r->lchunks[k];
        break;
      }
  job->lanes(job->ctx, r->nreal, dev, rows, chunks);
}

#define GQ_TRACE_FMT \
  "geoq trace: %lld queries, %d device(s), %d lanes, %lld chunks (%s " \
  "cut, %lld a chunk at most; index on the %s%s): call %.1f ms = host " \
  "index %.1f (sides " \
  "%.1f: codes %.1f, sort %.1f, gather %.1f; boxes %.1f, homes %.1f) + devices %.1f (setup and targets up " \
  "%.1f + %.1f, slots %.1f) + passes %.1f (last pass %.1f: prefault " \
  "%.1f, after the last kernel %.1f, ends apart %.1f) + collect %.1f + " \
  "release %.1f; per device kernels/last end/down+scatter ms/chunks/rows:%s"

/* Where a call's time went (r->tr_*, gq_run): one line, at info with
 * TESSEL_GPU_TRACE set (the benchmarks: tests/bench/README.md), else at
 * debug. tm: the call's start, the index built, the devices set up, the
 * passes done, the results collected, released. Per device: its lanes'
 * kernels (device ms), the end of its last kernel after the pass began,
 * the host's time bringing its chunks down and scattering them (on the
 * one host thread), its chunks and rows. "after the last kernel": the
 * pass's span past the latest kernel end (the last chunks' copies and
 * scatters not overlapped, and the polling); "ends apart": the latest
 * device's last kernel end minus the earliest's. */
static void gq_trace(const gq_run *r, const double tm[6]) {
  char lanes[512], dix[256];
  size_t o = 0, od = 0;
  dix[0] = 0;
  for (int d = 0; d < r->nreal && r->devix; d++) /* within "devices" */
    if (od < sizeof dix)
      od += (size_t)snprintf(dix + od, sizeof dix - od, "%s gpu%d %.1f/%.1f/%.1f",
                             d ? "" : ", points up/build/down ms:", r->dv[d].dev,
                             r->tr_dix[d][0], r->tr_dix[d][1], r->tr_dix[d][2]);
  double kend[GQ_MAX_DEV] = {0}, hi = 0, lo = 0;
  int64_t nch = 0;
  for (int d = 0; d < r->nreal; d++) {
    double kern = 0, fin = 0;
    int64_t rows = 0, chunks = 0;
    for (int k = 0; k < r->ndev; k++) {
      if (r->dv[k].dev != r->dv[d].dev) continue;
      kern += r->tr_kern[k];
      fin += r->tr_fin[k];
      rows += r->lrows[k];
      chunks += r->lchunks[k];
      if (r->tr_kend[k] > kend[d]) kend[d] = r->tr_kend[k];
    }
    nch += chunks;
    if (d == 0 || kend[d] > hi) hi = kend[d];
    if (d == 0 || kend[d] < lo) lo = kend[d];
    if (o < sizeof lanes)
      o += (size_t)snprintf(lanes + o, sizeof lanes - o,
                            " gpu%d %.1f/%.1f/%.1f/%lld/%lld", r->dv[d].dev,
                            kern, kend[d], fin, (long long)chunks,
                            (long long)rows);
  }
  double su = 0;
  for (int d = 1; d < r->nreal; d++) su += r->tr_setup[d];
  if (getenv("TESSEL_GPU_TRACE"))
    log_info(GQ_TRACE_FMT, (long long)r->pl->n, r->nreal, r->ndev, (long long)nch,
             r->even ? "even" : "guided", (long long)r->cq,
             r->devix ? "devices" : "host", dix, tm[5] - tm[0],
             tm[1] - tm[0], r->tr_sides, r->tr_sort3[0], r->tr_sort3[1],
             r->tr_sort3[2], r->tr_boxes, r->tr_homes,
             tm[2] - tm[1], r->tr_setup[0], su, r->tr_slots, tm[3] - tm[2],
             r->tr_pass, r->tr_prefault, r->tr_pass - hi, hi - lo,
             tm[4] - tm[3], tm[5] - tm[4], lanes);
  else
    log_debug(GQ_TRACE_FMT, (long long)r->pl->n, r->nreal, r->ndev, (long long)nch,
              r->even ? "even" : "guided", (long long)r->cq,
             r->devix ? "devices" : "host", dix, tm[5] - tm[0],
              tm[1] - tm[0], r->tr_sides, r->tr_sort3[0], r->tr_sort3[1],
              r->tr_sort3[2], r->tr_boxes, r->tr_homes,
              tm[2] - tm[1], r->tr_setup[0], su, r->tr_slots, tm[3] - tm[2],
              r->tr_pass, r->tr_prefault, r->tr_pass - hi, hi - lo,
              tm[4] - tm[3], tm[5] - tm[4], lanes);
}

extern "C" int cuda_geoq(int dev, const geod_plan *pl, const geoq *q,
                         const geoq_gpu_job *job, geoq_out *out,
                         int64_t *nonconv, terr *e) {
  int rc = 0, ng = 0;
  gq_run run;
  gq_run *r = &run;
  gq_chunk *ch = NULL;
  double t0 = t_now_ms();

  out->nparts = 0;
  *nonconv = 0;
  double tm[6] = {t0, 0, 0, 0, 0, 0}; /* the steps' ends: gq_trace */
  rc = gq_begin(r, dev, pl, q, job, &ng, e);
  if (rc) return rc;
  T_TRY(gq_index(r, e));
  tm[1] = t_now_ms();
  T_TRY(gq_devices(r, dev, ng, e));
  tm[2] = t_now_ms();
  T_TRY(gq_run_pass(r, 0, &ch, e));
  if (r->mode == GQ_RCOUNT) T_TRY(gq_radius_fill(r, &ch, e));
  tm[3] = t_now_ms();
  T_TRY(gq_collect(r, out, nonconv, t0, e));
  gq_report_lanes(r);
  tm[4] = t_now_ms();
fail:
  gq_release(r, rc, ch);
  tm[5] = t_now_ms();
  if (rc == 0) gq_trace(r, tm);
  return rc;
}
