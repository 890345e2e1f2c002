/* geodesic.cu — the geodesic kind on a CUDA GPU: the core of
 * kinds/geodesic/geodesic.h in a kernel over 2-D tiles, float64 arithmetic, and a
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
 * (gpu/stage.cu) on the copy-out stream (after the band's "done" event),
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
 * pool, pinned staging and copy gang are gpu/devctx.h's (dev_begin /
 * dev_end, devmem_alloc, d->slot[]); this file adds only the kernels and
 * the events that pace its bands.
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/devctx.h"
#include "kinds/geodesic/geodesic_cuda.h"
#include "kinds/geodesic/pair_dev.cuh"
#include "util/vec.h"

#define GG_NSTAGE DEV_STAGE_SLOTS         /* the device's pinned slots */
#define GG_NSLOT 3                       /* device band buffers (passes) */
#define GG_SLOT_MAX ((size_t)256 << 20)
#define GG_LOOK 4                        /* bands computed ahead (SYM) */
#define GG_TILE 32
#define GG_LEND_CHUNKS 4 /* borrow devices for results of this many chunks */
#define GG_BAL 4         /* bands per lane at least, for balance */
#define GG_LANE_MAX (GPU_MAX_DEVICES * DEV_STAGE_SLOTS)

enum { GG_SYM = 0, GG_ROWS = 1, GG_COND = 2, GG_SQR = 3 };

/* ---- on the device runtime ------------------------------------------------
 * Everything per device — the lock, streams, timing events, memory pool,
 * pinned staging slots and the host copy gang — is the device runtime's
 * (gpu/devctx.h): dev_begin / dev_end, CU_TRY, devmem_alloc, d->slot[].
 * What only this pipeline needs beyond it are the events that pace the
 * bands, made per call (a geodesic job is long; an event costs
 * microseconds). */

typedef struct gg_events {
  cudaEvent_t band[GG_LOOK + 1]; /* a band's kernel is done */
  cudaEvent_t slot[GG_NSLOT];    /* a band buffer's copies are queued */
} gg_events;

static int gg_events_create(gg_events *ev, terr *e) {
  int rc = 0;
  memset(ev, 0, sizeof *ev);
  for (int i = 0; i < GG_LOOK + 1; i++)
    CU_TRY(cudaEventCreateWithFlags(&ev->band[i], cudaEventDisableTiming));
  for (int i = 0; i < GG_NSLOT; i++)
    CU_TRY(cudaEventCreateWithFlags(&ev->slot[i], cudaEventDisableTiming));
fail:
  return rc;
}

static void gg_events_destroy(gg_events *ev) {
  for (int i = 0; i < GG_LOOK + 1; i++)
    if (ev->band[i]) (void)cudaEventDestroy(ev->band[i]);
  for (int i = 0; i < GG_NSLOT; i++)
    if (ev->slot[i]) (void)cudaEventDestroy(ev->slot[i]);
}

/* Take Tessel device `dev` for a call: T_EUNAVAIL when there is no usable
 * device at all, T_EDEVICE when `dev` is not one of them; else
 * dev_begin's answer (the device locked and current). */
static int gg_begin(int dev, devctx **d, terr *e) {
  *d = NULL;
  int n = gpu_count();
  if (n == 0)
    return terr_set(e, T_EUNAVAIL, "backend", -1, "no CUDA device: %s",
                    gpu_unavailable_reason());
  if (dev < 0 || dev >= n)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, n);
  return dev_begin(dev, d, e);
}

/* ---- the kernel --------------------------------------------------------- */

typedef struct gg_args {
  geod_ellipsoid g;
  const geod_point *p, *q;
  double radius, unit;
  int64_t n, m;   /* rows, columns of the whole result (m = n if square) */
  int64_t r0, r1; /* the band's rows */
  int64_t c0;     /* first column of the grid */
  int64_t base0;  /* COND: condensed index of the band's first element */
  void *out;      /* SYM: the whole matrix; ROWS/COND: the band */
  unsigned long long *nonconv;
  int upper;      /* ROWS: pairs j > i only, j <= i written zero (plan.h) */
} gg_args;

/* The kernel arguments every launch of a plan shares (the band fields are
 * the caller's). */
static void gg_args_init(gg_args *a, const geod_plan *pl, const geod_point *dp,
                         const geod_point *dq, unsigned long long *dnc) {
  memset(a, 0, sizeof *a);
  a->g = pl->ell;
  a->p = dp;
  a->q = dq;
  a->radius = pl->radius_m;
  a->unit = pl->unit;
  a->n = pl->n;
  a->m = pl->m;
  a->nonconv = dnc;
  a->upper = pl->has_targets && pl->upper;
}

/* One element: the shared device function (kinds/geodesic/pair_dev.cuh),
 * so that the query kernels (query.cu) compute the same bits. */
template <int METHOD>
__device__ __forceinline__ double gg_pair(const gg_args &a,
                                          const geod_point *pi,
                                          const geod_point *qj,
                                          long long *nc) {
  return geod_pair_dev<METHOD>(&a.g, pi, qj, a.radius, a.unit, nc);
}

/* Kernel shapes: BY thread rows per 32-wide tile (each thread takes 32/BY
 * rows), MINB the blocks per multiprocessor asked of the register
 * allocator. GG_BY/GG_MINB are the default; the others exist for the
 * benchmark's tuning run (cuda_geodesic_bench, karney, float64). */
#define GG_BY 8
#define GG_MINB 3

template <int METHOD, int MODE, typename T, int BY, int MINB>
__global__ void __launch_bounds__(GG_TILE *BY, MINB)
    gg_kernel(const __grid_constant__ gg_args a) {
  __shared__ double tile[GG_TILE][GG_TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = a.r0 + (int64_t)blockIdx.y * GG_TILE;
  const int64_t j0 = a.c0 + (int64_t)blockIdx.x * GG_TILE;
  /* Every pair of the tile on or below the diagonal: nothing to do. */
  if ((MODE == GG_SYM || MODE == GG_COND) && j0 + GG_TILE - 1 < i0) return;
  T *out = (T *)a.out;
  const int64_t j = j0 + tx;
  const bool jok = j < a.m;
  geod_point qj = {0, 0, 0, 0, 0};
  if (jok) qj = a.q[j];
  long long nc = 0;
#pragma unroll 1
  for (int k = 0; k < GG_TILE / BY; k++) {
    const int ir = ty + BY * k;
    const int64_t i = i0 + ir;
    const bool ok = jok && i < a.r1;
    const bool need =
        ok && (MODE == GG_ROWS ? (!a.upper || j > i)
                               : (MODE == GG_SQR ? j != i : j > i));
    double d = 0;
    if (need) {
      geod_point pi = a.p[i];
      if (MODE == GG_SQR && j < i) {
        long long nc_once = 0; /* counted at (j, i) */
        d = gg_pair<METHOD>(a, &qj, &pi, &nc_once);
      } else {
        d = gg_pair<METHOD>(a, &pi, &qj, &nc);
      }
    }
    if (MODE == GG_ROWS || MODE == GG_SQR) {
      if (ok) out[(i - a.r0) * a.m + j] = (T)d;
    } else if (MODE == GG_COND) {
      if (need) out[geod_condensed_index(a.n, i, j) - a.base0] = (T)d;
    } else {
      if (need)
        out[i * a.m + j] = (T)d;
      else if (ok && i == j)
        out[i * a.m + i] = (T)0;
      tile[ir][tx] = d;
    }
  }
  if (MODE == GG_SYM) {
    __syncthreads();
    const int64_t ii = i0 + tx; /* the pair (ii, jj) goes to (jj, ii) */
#pragma unroll
    for (int k = 0; k < GG_TILE / BY; k++) {
      const int64_t jj = j0 + ty + BY * k;
      if (jj < a.m && ii < a.r1 && jj > ii)
        out[jj * a.m + ii] = (T)tile[tx][ty + BY * k];
    }
  }
  if (METHOD == GEOD_VINCENTY && nc)
    atomicAdd(a.nonconv, (unsigned long long)nc);
}

template <int METHOD, int MODE, typename T, int BY, int MINB>
static cudaError_t gg_go(dim3 grid, cudaStream_t s, const gg_args &a) {
  gg_kernel<METHOD, MODE, T, BY, MINB><<<grid, dim3(GG_TILE, BY), 0, s>>>(a);
  return cudaGetLastError();
}

template <int METHOD, int MODE>
static cudaError_t gg_launch_t(dim3 grid, cudaStream_t s, const gg_args &a,
                               int f32) {
  if (f32) return gg_go<METHOD, MODE, float, GG_BY, GG_MINB>(grid, s, a);
  return gg_go<METHOD, MODE, double, GG_BY, GG_MINB>(grid, s, a);
}

template <int METHOD>
static cudaError_t gg_launch_m(int mode, dim3 grid, cudaStream_t s,
                               const gg_args &a, int f32) {
  switch (mode) {
    case GG_SYM: return gg_launch_t<METHOD, GG_SYM>(grid, s, a, f32);
    case GG_ROWS: return gg_launch_t<METHOD, GG_ROWS>(grid, s, a, f32);
    case GG_SQR: return gg_launch_t<METHOD, GG_SQR>(grid, s, a, f32);
    default: return gg_launch_t<METHOD, GG_COND>(grid, s, a, f32);
  }
}

static cudaError_t gg_launch(int method, int mode, dim3 grid, cudaStream_t s,
                             const gg_args &a, int f32) {
  switch (method) {
    case GEOD_VINCENTY: return gg_launch_m<GEOD_VINCENTY>(mode, grid, s, a, f32);
    case GEOD_HAVERSINE:
      return gg_launch_m<GEOD_HAVERSINE>(mode, grid, s, a, f32);
    default: return gg_launch_m<GEOD_KARNEY>(mode, grid, s, a, f32);
  }
}

/* The tuning variants (karney, float64, SYM or ROWS): 0 is the default. */
#define GG_NVARIANT 5
static const char *const gg_variant_names[GG_NVARIANT] = {
    "32x8 threads, 3 blocks/SM (default)", "32x8 threads, 1 block/SM",
    "32x8 threads, 2 blocks/SM", "32x4 threads, 4 blocks/SM",
    "32x8 threads, 4 blocks/SM"};

template <int MODE>
static cudaError_t gg_launch_variant(int variant, dim3 grid, cudaStream_t s,
                                     const gg_args &a) {
  switch (variant) {
    case 1: return gg_go<GEOD_KARNEY, MODE, double, 8, 1>(grid, s, a);
    case 2: return gg_go<GEOD_KARNEY, MODE, double, 8, 2>(grid, s, a);
    case 3: return gg_go<GEOD_KARNEY, MODE, double, 4, 4>(grid, s, a);
    case 4: return gg_go<GEOD_KARNEY, MODE, double, 8, 4>(grid, s, a);
    default: return gg_go<GEOD_KARNEY, MODE, double, GG_BY, GG_MINB>(grid, s, a);
  }
}

/* ---- host side ---------------------------------------------------------- */

/* A band of output rows [r0, r1): `bytes` at byte `off` of the result. */
typedef struct gg_band {
  int64_t r0, r1;
  size_t off, bytes;
  int64_t base0; /* COND: condensed index of the first element */
} gg_band;

/* Cut the output into bands of at most `cap` bytes (SYM: rows a multiple
 * of the tile). Returns the band count, or -1 (no memory, or one row does
 * not fit). Caller frees *out. */
static int64_t gg_bands(const geod_plan *pl, int mode, size_t es, size_t cap,
                        gg_band **out) {
  int64_t n = pl->n, cols = pl->m, cnt = 0;
  size_t alloc = 0;
  gg_band *b = NULL;
  if (tvec_grow(&b, &alloc, sizeof *b, 64, 0)) return -1;
  size_t row_bytes = (size_t)cols * es;
  if (mode != GG_COND && row_bytes > cap) {
    free(b);
    return -1;
  }
  int64_t r, rend; /* a band (a tile of a split job): its rows only */
  geod_plan_band(pl, &r, &rend);
  size_t off = 0;
  while (r < rend) {
    int64_t r1;
    if (mode == GG_COND) {
      size_t acc = 0;
      r1 = r;
      while (r1 < rend && acc + (size_t)(n - r1 - 1) * es <= cap) {
        acc += (size_t)(n - r1 - 1) * es;
        r1++;
      }
      if (r1 == r) {
        free(b);
        return -1;
      }
    } else {
      int64_t rows = (int64_t)(cap / row_bytes);
      if (mode == GG_SYM || rows >= GG_TILE) {
        rows = rows / GG_TILE * GG_TILE;
        if (rows < GG_TILE) rows = GG_TILE;
      }
      r1 = r + rows < rend ? r + rows : rend;
    }
    if (tvec_grow(&b, &alloc, sizeof *b, (size_t)cnt + 1, 0)) {
      free(b);
      return -1;
    }
    gg_band *x = &b[cnt++];
    x->r0 = r;
    x->r1 = r1;
    x->off = off;
    if (mode == GG_COND) {
      x->base0 = r < n - 1 ? geod_condensed_index(n, r, r + 1) : n * (n - 1) / 2;
      int64_t e1 = r1 < n ? (r1 < n - 1 ? geod_condensed_index(n, r1, r1 + 1)
                                        : n * (n - 1) / 2)
                          : n * (n - 1) / 2;
      x->bytes = (size_t)(e1 - x->base0) * es;
    } else {
      x->bytes = (size_t)(r1 - r) * row_bytes;
    }
    off += x->bytes;
    r = r1;
  }
  *out = b;
  return cnt;
}

/* The plan's points (p holds n, or max(n, m) when the targets are p
 * itself; targets apart) up to device d, small and pageable, and the
 * Vincenty counter zeroed, on d's compute stream; returns once they are
 * there. bq stays empty when the targets are the points. The caller
 * frees the buffers (on failure too). */
static int gg_points_up(devctx *d, const geod_plan *pl, devbuf *bp,
                        devbuf *bq, devbuf *bnc, terr *e) {
  int rc = 0;
  size_t np = (size_t)(pl->q == pl->p && pl->m > pl->n ? pl->m : pl->n);
  T_TRY(devmem_alloc(d, np * sizeof(geod_point), bp, e));
  CU_TRY(cudaMemcpyAsync(bp->ptr, pl->p, np * sizeof(geod_point),
                         cudaMemcpyHostToDevice, d->s_comp));
  if (pl->q != pl->p) {
    T_TRY(devmem_alloc(d, (size_t)pl->m * sizeof(geod_point), bq, e));
    CU_TRY(cudaMemcpyAsync(bq->ptr, pl->q, (size_t)pl->m * sizeof(geod_point),
                           cudaMemcpyHostToDevice, d->s_comp));
  }
  T_TRY(devmem_alloc(d, sizeof(unsigned long long), bnc, e));
  CU_TRY(cudaMemsetAsync(bnc->ptr, 0, sizeof(unsigned long long), d->s_comp));
  CU_TRY(cudaStreamSynchronize(d->s_comp));
fail:
  return rc;
}

/* Device bytes a call may take on the current device: 90% of what is
 * free, at most the plan's gpu_mem_limit. */
static int gg_budget(const geod_plan *pl, size_t *budget, terr *e) {
  int rc = 0;
  size_t free_b = 0, total_b = 0;
  *budget = 0;
  CU_TRY(cudaMemGetInfo(&free_b, &total_b));
  *budget = (size_t)((double)free_b * 0.9);
  if (pl->gpu_mem_limit > 0 && (size_t)pl->gpu_mem_limit < *budget)
    *budget = (size_t)pl->gpu_mem_limit;
fail:
  return rc;
}

/* 0 when Tessel device `dev` can run the geodesic kernels. The device
 * runtime is started here when nothing started it (tests, benchmarks). */
extern "C" int cuda_geodesic_probe(int dev, char *name, size_t name_len,
                                   terr *e) {
  if (gpu_count() == 0) gpu_init();
  devctx *d = NULL;
  int rc = gg_begin(dev, &d, e);
  if (rc) {
    if (e && e->code == T_EDEVICE) e->code = T_EUNAVAIL;
    return rc;
  }
  cudaFuncAttributes attr;
  if (name)
    snprintf(name, name_len, "%s (sm_%d%d)", d->name, d->cc_major,
             d->cc_minor);
  /* Fails when the binary has no code for this architecture. */
  CU_TRY(cudaFuncGetAttributes(
      &attr, gg_kernel<GEOD_KARNEY, GG_SYM, double, GG_BY, GG_MINB>));
fail:
  dev_end(d, rc);
  if (rc && e && e->code == T_EDEVICE) e->code = T_EUNAVAIL;
  return rc;
}

/* Copy a chunk from its pinned slot into the result, on the device's gang
 * (the pages of a mapped result fault in parallel). */
static void gg_drain(devctx *d, char *dst, const void *src, size_t len) {
  gang_item it = {dst, src, len};
  gang_copy(d->gang, &it, 1);
}

/* 0, or the job's stop code with e set (canceled, timed out). */
static int gg_stopped(const geod_gpu_job *job, terr *e) {
  int rc;
  if (!job || !job->stopped || (rc = job->stopped(job->ctx)) == 0) return 0;
  return terr_set(e, (terr_code)rc, "", -1, "%s",
                  rc == T_ETIMEOUT ? "the job ran past its timeout"
                                   : "the job was canceled");
}

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
    if (x->copy_o == bd->bytes) { /* the buffer may take a band again */
      CU_TRY(cudaEventRecord(x->ev.slot[k], d->s_d2h));
      x->nq++;
      x->copy_o = 0;
    }
    *moved = 1;
  }
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

/* The matrix over nl lanes on devices ldev[] (a device may repeat: its
 * lanes are consecutive). Every lane's device is taken here and ended
 * before returning; the caller gives borrowed devices back. chunk: the
 * copy size (at most a pinned slot of any lane's device). */
static int gg_spread(const int *ldev, int nl, const geod_plan *pl,
                     tarray *out, const geod_gpu_job *job, size_t chunk,
                     int64_t *nonconv, terr *e) {
  int rc = 0;
  gg_lane *lane = NULL;
  gg_spread_run S;
  size_t es = tdtype_size(pl->dtype), total = (size_t)out->size * es;
  size_t cap, rowmax, bal;
  int64_t chunks_total = 0;
  double t0, comp_ms = 0;
  unsigned long long hnc;

  memset(&S, 0, sizeof S);
  S.pl = pl;
  S.out = out;
  S.job = job;
  S.f32 = pl->dtype == T_F32;
  S.mode = pl->condensed ? GG_COND : pl->has_targets ? GG_ROWS : GG_SQR;
  S.chunk = chunk;
  lane = (gg_lane *)calloc((size_t)nl, sizeof *lane);
  if (!lane) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");

  /* Lanes: a device's lanes split its pinned slots and its budget. */
  t0 = t_now_ms();
  for (int k = 0, k1; k < nl; k = k1) {
    for (k1 = k + 1; k1 < nl && ldev[k1] == ldev[k]; k1++) {
    }
    int share = k1 - k;
    for (int u = k; u < k1; u++) {
      gg_lane *x = &lane[u];
      x->dev = ldev[u];
      x->nslot = DEV_STAGE_SLOTS / share;
      x->slot0 = (u - k) * x->nslot;
      T_TRY(gg_lane_setup(&S, x, share, e));
      if (x->d->slot[0].bytes < S.chunk) S.chunk = x->d->slot[0].bytes;
    }
  }
  if (job && job->t_h2d) *job->t_h2d += t_now_ms() - t0;

  /* Bands: at most a third of the smallest lane budget, at least
   * GG_BAL a lane for balance (but a whole row). */
  cap = lane[0].budget;
  for (int k = 1; k < nl; k++)
    if (lane[k].budget < cap) cap = lane[k].budget;
  cap /= GG_NSLOT;
  if (cap > GG_SLOT_MAX) cap = GG_SLOT_MAX;
  rowmax = (size_t)(S.mode == GG_COND ? pl->n - 1 : pl->m) * es;
  bal = total / ((size_t)GG_BAL * (size_t)nl);
  if (bal < rowmax) bal = rowmax;
  if (bal < cap) cap = bal;
  S.nb = gg_bands(pl, S.mode, es, cap, &S.band);
  if (S.nb < 0) {
    rc = terr_set(e, T_ENOMEM, "", -1,
                  "CUDA: %zu bytes of device memory cannot hold a row of "
                  "the result in %d buffers",
                  cap * GG_NSLOT, GG_NSLOT);
    goto fail;
  }
  for (int64_t b = 0; b < S.nb; b++) {
    if (S.band[b].bytes > S.slot_bytes) S.slot_bytes = S.band[b].bytes;
    chunks_total += (int64_t)((S.band[b].bytes + S.chunk - 1) / S.chunk);
  }
  for (int k = 0; k < nl; k++) {
    CU_TRY(cudaSetDevice(lane[k].d->ordinal));
    T_TRY(devmem_alloc(lane[k].d, S.slot_bytes * GG_NSLOT, &lane[k].bout, e));
  }
  if (job && job->progress_total) job->progress_total(job->ctx, chunks_total);

  for (;;) {
    int moved = 0, done = S.next == S.nb;
    for (int k = 0; k < nl; k++) {
      T_TRY(gg_lane_step(&S, &lane[k], &moved, e));
      done = done && lane[k].nq == lane[k].nl && lane[k].cd == lane[k].cq;
    }
    if (done) break;
    if (moved) continue;
    /* Nothing can move: wait for the oldest chunk in flight. */
    gg_lane *w = NULL;
    for (int k = 0; k < nl; k++) {
      gg_lane *x = &lane[k];
      if (x->cd < x->cq &&
          (!w || x->fly[x->cd % x->nslot].seq < w->fly[w->cd % w->nslot].seq))
        w = x;
    }
    if (!w) {
      rc = terr_set(e, T_EINTERNAL, "", -1, "geodesic lanes stalled");
      goto fail;
    }
    t0 = t_now_ms();
    CU_TRY(cudaSetDevice(w->d->ordinal));
    CU_TRY(cudaEventSynchronize(
        w->d->slot[w->slot0 + (int)(w->cd % w->nslot)].d2h_done));
    S.t_wait += t_now_ms() - t0;
  }

  for (int k = 0; k < nl; k++) {
    gg_lane *x = &lane[k];
    CU_TRY(cudaSetDevice(x->d->ordinal));
    CU_TRY(cudaMemcpy(&hnc, x->bnc.ptr, sizeof hnc, cudaMemcpyDeviceToHost));
    *nonconv += (int64_t)hnc;
    if (x->nl > 0) {
      CU_TRY(cudaEventSynchronize(x->t1));
      double ms = dev_event_ms(x->t0, x->t1);
      if (ms > comp_ms) comp_ms = ms;
    }
  }
  if (job && job->t_compute) *job->t_compute += comp_ms;
  if (job && job->t_d2h) *job->t_d2h += S.t_wait;

fail:
  /* Nothing may still write into what is freed. */
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
  free(lane);
  free(S.band);
  return rc;
}

extern "C" int cuda_geodesic(int dev, const geod_plan *pl, tarray *out,
                             const geod_gpu_job *job, int64_t *nonconv,
                             terr *e) {
  int rc = 0, mode, f32 = pl->dtype == T_F32, have_ev = 0;
  devctx *d = NULL;
  devbuf bp = {NULL, 0}, bq = {NULL, 0}, bnc = {NULL, 0}, bout = {NULL, 0};
  geod_point *dp = NULL, *dq = NULL;
  unsigned long long *dnc = NULL, hnc = 0;
  char *dout = NULL;
  gg_band *band = NULL;
  gg_events ev;
  int64_t nb = 0, next = 0, look = 0, chunks_total = 0, chunk_no = 0;
  size_t es = tdtype_size(pl->dtype), total, chunk, slot_bytes = 0;
  size_t budget = 0;
  /* devs[0] is the run's own device also when nothing is borrowed
   * (job->borrow NULL): the lanes of a test's spread over one GPU read it
   * (uninitialised, it named a random device: gpu_test_geodesic_band
   * failed one run in three on the H200). */
  int devs[GPU_MAX_DEVICES] = {dev}, ndev = 1;
  int64_t pend_c = -1; /* chunk whose host copy is pending, its stage */
  size_t pend_off = 0, pend_len = 0;
  int pend_s = 0, timed = 0;
  double t0, t_wait = 0;
  float ms = 0;
  gg_args a;
  terr e2;

  *nonconv = 0;
  total = (size_t)out->size * es;
  rc = gg_begin(dev, &d, e);
  if (rc) return rc;
  if (total == 0) goto fail; /* nothing to compute: rc 0 */
  T_TRY(stage_ensure(d, e));
  /* Result pages in before the first byte comes down (stage.cu). */
  stage_prefault(d, out, job ? job->t_d2h : NULL);

  /* Chunks are the device's pinned slots (or smaller, when asked). */
  chunk = d->slot[0].bytes;
  if (pl->gpu_chunk_bytes > 0 && (size_t)pl->gpu_chunk_bytes < chunk)
    chunk = (size_t)pl->gpu_chunk_bytes;

  /* Other devices, when the result is worth spreading: then the lanes
   * (gg_spread), each device's lanes consecutive. */
  if (job && job->borrow && total >= (size_t)GG_LEND_CHUNKS * chunk)
    ndev = geod_gpu_lend(dev, job->ngpu, gpu_count(), job->borrow, job->ctx,
                         devs, GPU_MAX_DEVICES);
  {
    int per = job && job->lanes > 1 ? job->lanes : 1;
    if (per > DEV_STAGE_SLOTS) per = DEV_STAGE_SLOTS;
    if (job && job->nlanes) *job->nlanes = ndev * per;
    if (ndev * per > 1) {
      int ldev[GG_LANE_MAX], nl = 0;
      for (int k = 0; k < ndev; k++)
        for (int u = 0; u < per; u++) ldev[nl++] = devs[k];
      rc = gg_spread(ldev, nl, pl, out, job, chunk, nonconv, e);
      (void)cudaSetDevice(d->ordinal); /* the run's device current again */
      goto fail;
    }
  }

  T_TRY(gg_events_create(&ev, e));
  have_ev = 1;

  /* Points up (small; pageable is fine), the Vincenty counter zeroed. */
  t0 = t_now_ms();
  T_TRY(gg_points_up(d, pl, &bp, &bq, &bnc, e));
  dp = (geod_point *)bp.ptr;
  dq = bq.ptr ? (geod_point *)bq.ptr : dp;
  dnc = (unsigned long long *)bnc.ptr;
  if (job && job->t_h2d) *job->t_h2d += t_now_ms() - t0;

  /* Resident (SYM) when the square matrix fits the budget, else passes. */
  T_TRY(gg_budget(pl, &budget, e));
  mode = GG_ROWS;
  if (!pl->has_targets && !pl->condensed && pl->row1 == 0 && total <= budget) {
    /* Resident; if the allocation fails after all, passes. */
    if (devmem_alloc(d, total, &bout, &e2) == 0) {
      dout = (char *)bout.ptr;
      mode = GG_SYM;
      size_t cap = (size_t)pl->m * es * GG_TILE;
      nb = gg_bands(pl, mode, es, chunk > cap ? chunk : cap, &band);
      if (nb < 0) {
        rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the band table");
        goto fail;
      }
      look = GG_LOOK;
    }
  }
  if (mode != GG_SYM) {
    mode = pl->condensed ? GG_COND : pl->has_targets ? GG_ROWS : GG_SQR;
    slot_bytes = budget / GG_NSLOT;
    if (slot_bytes > GG_SLOT_MAX) slot_bytes = GG_SLOT_MAX;
    nb = gg_bands(pl, mode, es, slot_bytes, &band);
    if (nb < 0) {
      rc = terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold a row of "
                    "the result in %d buffers",
                    budget, GG_NSLOT);
      goto fail;
    }
    slot_bytes = 0;
    for (int64_t b = 0; b < nb; b++)
      if (band[b].bytes > slot_bytes) slot_bytes = band[b].bytes;
    T_TRY(devmem_alloc(d, slot_bytes * GG_NSLOT, &bout, e));
    dout = (char *)bout.ptr;
    look = GG_NSLOT;
  }
  for (int64_t b = 0; b < nb; b++)
    chunks_total += (int64_t)((band[b].bytes + chunk - 1) / chunk);
  if (job && job->progress_total) job->progress_total(job->ctx, chunks_total);

  gg_args_init(&a, pl, dp, dq, dnc);

  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  for (int64_t b = 0; b < nb; b++) {
    /* Keep `look` bands computed or queued ahead of the copies. */
    while (next < nb && next <= b + look - 1) {
      const gg_band *x = &band[next];
      a.r0 = x->r0;
      a.r1 = x->r1;
      a.c0 = mode == GG_ROWS || mode == GG_SQR ? 0 : x->r0;
      a.base0 = x->base0;
      if (mode == GG_SYM) {
        a.out = dout;
      } else {
        a.out = dout + (size_t)(next % GG_NSLOT) * slot_bytes;
        if (next >= GG_NSLOT) /* its slot's copies are queued */
          CU_TRY(cudaStreamWaitEvent(d->s_comp, ev.slot[next % GG_NSLOT], 0));
      }
      int64_t cols = pl->m - a.c0;
      dim3 grid((unsigned)((cols + GG_TILE - 1) / GG_TILE),
                (unsigned)((x->r1 - x->r0 + GG_TILE - 1) / GG_TILE));
      CU_TRY(gg_launch(pl->method, mode, grid, d->s_comp, a, f32));
      CU_TRY(cudaEventRecord(ev.band[next % (GG_LOOK + 1)], d->s_comp));
      next++;
    }
    if (next == nb && !timed) {
      CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
      timed = 1;
    }
    const char *src = mode == GG_SYM
                          ? dout + band[b].off
                          : dout + (size_t)(b % GG_NSLOT) * slot_bytes;
    CU_TRY(cudaStreamWaitEvent(d->s_d2h, ev.band[b % (GG_LOOK + 1)], 0));
    for (size_t o = 0; o < band[b].bytes; o += chunk) {
      size_t len = band[b].bytes - o < chunk ? band[b].bytes - o : chunk;
      int s = (int)(chunk_no % GG_NSTAGE);
      CU_TRY(cudaMemcpyAsync(d->slot[s].host, src + o, len,
                             cudaMemcpyDeviceToHost, d->s_d2h));
      CU_TRY(cudaEventRecord(d->slot[s].d2h_done, d->s_d2h));
      if (pend_c >= 0) { /* chunk c - 1: wait for it, copy it out */
        t0 = t_now_ms();
        CU_TRY(cudaEventSynchronize(d->slot[pend_s].d2h_done));
        gg_drain(d, (char *)out->data + pend_off, d->slot[pend_s].host,
                 pend_len);
        t_wait += t_now_ms() - t0;
        if (job && job->progress) job->progress(job->ctx, 1);
      }
      pend_c = chunk_no++;
      pend_s = s;
      pend_off = band[b].off + o;
      pend_len = len;
      T_TRY(gg_stopped(job, e));
    }
    if (mode != GG_SYM)
      CU_TRY(cudaEventRecord(ev.slot[b % GG_NSLOT], d->s_d2h));
  }
  if (pend_c >= 0) {
    t0 = t_now_ms();
    CU_TRY(cudaEventSynchronize(d->slot[pend_s].d2h_done));
    gg_drain(d, (char *)out->data + pend_off, d->slot[pend_s].host, pend_len);
    t_wait += t_now_ms() - t0;
    if (job && job->progress) job->progress(job->ctx, 1);
    pend_c = -1;
  }
  CU_TRY(cudaEventSynchronize(d->ev_b));
  CU_TRY(cudaEventElapsedTime(&ms, d->ev_a, d->ev_b));
  if (job && job->t_compute) *job->t_compute += ms;
  if (job && job->t_d2h) *job->t_d2h += t_wait;
  CU_TRY(cudaMemcpy(&hnc, dnc, sizeof hnc, cudaMemcpyDeviceToHost));
  *nonconv = (int64_t)hnc;

fail:
  /* Nothing may still write into what is freed. */
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
  devmem_free(d, &bout);
  devmem_free(d, &bq);
  devmem_free(d, &bp);
  devmem_free(d, &bnc);
  if (have_ev) gg_events_destroy(&ev);
  free(band);
  if (rc) (void)cudaGetLastError();
  for (int k = 1; k < ndev; k++) /* borrowed: given back on every path */
    if (job->give_back) job->give_back(job->ctx, devs[k]);
  dev_end(d, rc);
  return rc;
}

static int gg_cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

extern "C" const char *cuda_geodesic_variant_name(int variant) {
  return variant >= 0 && variant < GG_NVARIANT ? gg_variant_names[variant]
                                               : NULL;
}

extern "C" int cuda_geodesic_bench(int dev, const geod_plan *pl, int variant,
                                   int reps, double *ms_median, double *pairs,
                                   terr *e) {
  int rc = 0, mode, f32 = pl->dtype == T_F32;
  devctx *d = NULL;
  devbuf bp = {NULL, 0}, bq = {NULL, 0}, bnc = {NULL, 0}, bout = {NULL, 0};
  geod_point *dp = NULL, *dq = NULL;
  size_t es = tdtype_size(pl->dtype), total;
  size_t np = (size_t)(pl->q == pl->p && pl->m > pl->n ? pl->m : pl->n);
  double ms[64];
  float t = 0;
  gg_args a;
  dim3 grid;

  *ms_median = 0;
  mode = pl->has_targets ? GG_ROWS : pl->condensed ? GG_COND : GG_SYM;
  *pairs = geod_plan_pairs(pl);
  if (reps < 1) reps = 1;
  if (reps > 64) reps = 64;
  if (variant < 0 || variant >= GG_NVARIANT ||
      (variant && (pl->method != GEOD_KARNEY || f32 || mode == GG_COND)))
    return terr_set(e, T_EINVAL, "", -1, "no kernel variant %d for this plan",
                    variant);
  total = (size_t)(pl->condensed ? pl->shape[0] : pl->n * pl->m) * es;
  rc = gg_begin(dev, &d, e);
  if (rc) return rc;
  T_TRY(devmem_alloc(d, np * sizeof(geod_point), &bp, e));
  dp = (geod_point *)bp.ptr;
  CU_TRY(cudaMemcpy(dp, pl->p, np * sizeof(geod_point),
                    cudaMemcpyHostToDevice));
  dq = dp;
  if (pl->q != pl->p) {
    T_TRY(devmem_alloc(d, (size_t)pl->m * sizeof(geod_point), &bq, e));
    dq = (geod_point *)bq.ptr;
    CU_TRY(cudaMemcpy(dq, pl->q, (size_t)pl->m * sizeof(geod_point),
                      cudaMemcpyHostToDevice));
  }
  T_TRY(devmem_alloc(d, sizeof(unsigned long long), &bnc, e));
  T_TRY(devmem_alloc(d, total ? total : 1, &bout, e));
  gg_args_init(&a, pl, dp, dq, (unsigned long long *)bnc.ptr);
  a.r0 = 0;
  a.r1 = pl->n;
  a.c0 = 0;
  a.out = bout.ptr;
  grid = dim3((unsigned)((pl->m + GG_TILE - 1) / GG_TILE),
              (unsigned)((pl->n + GG_TILE - 1) / GG_TILE));
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
    CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
    if (variant == 0)
      CU_TRY(gg_launch(pl->method, mode, grid, d->s_comp, a, f32));
    else if (mode == GG_SYM)
      CU_TRY(gg_launch_variant<GG_SYM>(variant, grid, d->s_comp, a));
    else
      CU_TRY(gg_launch_variant<GG_ROWS>(variant, grid, d->s_comp, a));
    CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
    CU_TRY(cudaEventSynchronize(d->ev_b));
    CU_TRY(cudaEventElapsedTime(&t, d->ev_a, d->ev_b));
    if (r >= 0) ms[r] = t;
  }
  qsort(ms, (size_t)reps, sizeof ms[0], gg_cmp_double);
  *ms_median = ms[reps / 2];
fail:
  (void)cudaStreamSynchronize(d->s_comp);
  devmem_free(d, &bout);
  devmem_free(d, &bq);
  devmem_free(d, &bp);
  devmem_free(d, &bnc);
  if (rc) (void)cudaGetLastError();
  dev_end(d, rc);
  return rc;
}

extern "C" int cuda_copy_baseline(int dev, size_t bytes, size_t chunk, int fd,
                                  double *ms, terr *e) {
  int rc = 0;
  devctx *d = NULL;
  devbuf buf = {NULL, 0};
  char *dbuf;
  int64_t nchunk, c;
  double t0;
  *ms = 0;
  rc = gg_begin(dev, &d, e);
  if (rc) return rc;
  T_TRY(stage_ensure(d, e));
  if (chunk == 0 || chunk > d->slot[0].bytes) chunk = d->slot[0].bytes;
  T_TRY(devmem_alloc(d, bytes, &buf, e));
  dbuf = (char *)buf.ptr;
  CU_TRY(cudaMemsetAsync(dbuf, 0x5a, bytes, d->s_d2h));
  CU_TRY(cudaStreamSynchronize(d->s_d2h));
  nchunk = (int64_t)((bytes + chunk - 1) / chunk);
  t0 = t_now_ms();
  /* DMA of chunk c + 1 overlaps the write of chunk c. */
  for (c = 0; c <= nchunk; c++) {
    if (c < nchunk) {
      size_t o = (size_t)c * chunk, len = bytes - o < chunk ? bytes - o : chunk;
      stage_slot *s = &d->slot[c % GG_NSTAGE];
      CU_TRY(cudaMemcpyAsync(s->host, dbuf + o, len, cudaMemcpyDeviceToHost,
                             d->s_d2h));
      CU_TRY(cudaEventRecord(s->d2h_done, d->s_d2h));
    }
    if (c > 0) {
      int64_t p = c - 1;
      size_t o = (size_t)p * chunk, len = bytes - o < chunk ? bytes - o : chunk;
      stage_slot *s = &d->slot[p % GG_NSTAGE];
      CU_TRY(cudaEventSynchronize(s->d2h_done));
      const char *src = (const char *)s->host;
      while (len > 0) {
        ssize_t w = write(fd, src, len);
        if (w <= 0) {
          rc = terr_set(e, T_EIO, "", -1, "write failed");
          goto fail;
        }
        src += w;
        len -= (size_t)w;
      }
    }
  }
  *ms = t_now_ms() - t0;
fail:
  (void)cudaStreamSynchronize(d->s_d2h);
  devmem_free(d, &buf);
  if (rc) (void)cudaGetLastError();
  dev_end(d, rc);
  return rc;
}
