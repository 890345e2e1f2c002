/* compute/kinds/geodesic/query/query.cu — the geodesic queries (compute/kinds/geodesic/query/query.h:
 * knn, radius, rowwise) on CUDA GPUs, exact, without the n x m matrix, on
 * the run's device and every device the scheduler lends (job gpu_borrow).
 *
 * Design.
 *  - The index (host, once per call): every point and target gets its
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
 *    — and several per device for balance); devices take the next chunk
 *    when they finish one (one host thread drives them all, polling
 *    events); each chunk's rows come back to a host buffer and are
 *    scattered into the result parts at their original rows. Progress and
 *    the stop check are per chunk; radius fill chunks are cut again by
 *    their pair counts.
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
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cub/device/device_segmented_sort.cuh>

#include "compute/gpu/devctx.h"
#include "compute/kinds/geodesic/geodesic_cuda.h" /* geod_gpu_lend */
#include "compute/kinds/geodesic/pair_dev.cuh"
#include "compute/kinds/geodesic/query/query_cuda.h"

#define GQ_TILE 32      /* targets a tile (= warp width) */
#define GQ_WARPS 4      /* warps a block */
#define GQ_MAX_DEV GPU_MAX_DEVICES
#define GQ_CHUNK_MIN 16384 /* queries: the smallest chunk when not short */
#define GQ_FULL 0xffffffffu

enum { GQ_KNN = 0, GQ_MIN, GQ_ROW, GQ_RCOUNT, GQ_RFILL };

/* ---- the kernel --------------------------------------------------------- */

typedef struct gq_args {
  geod_ellipsoid g;
  double radius, unit;
  int self;            /* no targets: targets are the points */
  int op;              /* rowwise op */
  int K;               /* knn: k_eff */
  int64_t hw;          /* home window (knn, min): targets */
  double bound0;       /* the fixed bound in output units (r, within; inf) */
  int64_t m, nt;       /* targets, tiles */
  const double *tx;    /* 3 m: sorted targets' X */
  const geod_point *tp;
  const long long *tj; /* original index of sorted target */
  const double *box;   /* 6 nt: lo xyz, hi xyz */
  int64_t nq;          /* queries of the chunk */
  const double *qx;
  const geod_point *qp;
  const long long *qi, *qhome;
  const long long *qslot; /* knn, rowwise: the output row of each query in
                           * the chunk (its rank by original index) */
  double *hd;          /* knn heap, [nq/32][K][32] */
  long long *hj;
  void *od;            /* values out (plan dtype; fill: double) */
  long long *oj;       /* indices / counts out */
  const long long *coff; /* fill: the chunk's row offsets */
  unsigned long long *nonconv;
} gq_args;

/* (da, ja) < (db, jb): by value, NaN after every number, then by index. */
__device__ __forceinline__ bool gq_less(double da, long long ja, double db,
                                        long long jb) {
  bool an = isnan(da), bn = isnan(db);
  if (an != bn) return bn;
  if (!an && da != db) return da < db;
  return ja < jb;
}

/* Chord bound in metres from a bound in output units (inf stays inf;
 * NaN: none). */
__device__ __forceinline__ double gq_chord_bound(const gq_args &a, double u) {
  if (isnan(u)) return INFINITY;
  return u * a.unit * (1 + GEOQ_PRUNE_REL) + GEOQ_PRUNE_ABS_M;
}

/* Squared distance from a point to a box (0 inside). */
__device__ __forceinline__ double gq_pbox2(double x, double y, double z,
                                           const double *b) {
  double dx = fmax(fmax(b[0] - x, x - b[3]), 0.0);
  double dy = fmax(fmax(b[1] - y, y - b[4]), 0.0);
  double dz = fmax(fmax(b[2] - z, z - b[5]), 0.0);
  return dx * dx + dy * dy + dz * dz;
}

/* Max-heap of (d, j) with stride 32 (one lane's slots of a warp's block). */
__device__ __forceinline__ void gq_heap_up(double *hd, long long *hj, int e,
                                           double d, long long j) {
  while (e > 0) {
    int p = (e - 1) / 2;
    double pd = hd[p * 32];
    long long pj = hj[p * 32];
    if (!gq_less(pd, pj, d, j)) break;
    hd[e * 32] = pd;
    hj[e * 32] = pj;
    e = p;
  }
  hd[e * 32] = d;
  hj[e * 32] = j;
}

__device__ __forceinline__ void gq_heap_down(double *hd, long long *hj, int c,
                                             double d, long long j) {
  int e = 0;
  for (;;) {
    int l = 2 * e + 1;
    if (l >= c) break;
    int b = l;
    if (l + 1 < c &&
        gq_less(hd[l * 32], hj[l * 32], hd[(l + 1) * 32], hj[(l + 1) * 32]))
      b = l + 1;
    if (!gq_less(d, j, hd[b * 32], hj[b * 32])) break;
    hd[e * 32] = hd[b * 32];
    hj[e * 32] = hj[b * 32];
    e = b;
  }
  hd[e * 32] = d;
  hj[e * 32] = j;
}

/* One lane's state over its candidates. */
struct gq_state {
  double bound;  /* current bound, output units (inf: none) */
  double bd;     /* knn: heap top; min/max: best; sum */
  long long bj;  /* best's index */
  long long cnt; /* knn: heap size; count; radius pairs */
  int found;
  double *hd;
  long long *hj;
  long long pos; /* fill: next slot */
};

template <int METHOD, bool F32>
__device__ __forceinline__ double gq_eval(const gq_args &a,
                                          const geod_point *me, long long io,
                                          const geod_point *t, long long jo,
                                          long long *nc) {
  double d = (a.self && jo < io)
                 ? geod_pair_dev<METHOD>(&a.g, t, me, a.radius, a.unit, nc)
                 : geod_pair_dev<METHOD>(&a.g, me, t, a.radius, a.unit, nc);
  if (F32) d = (double)(float)d;
  return d;
}

/* Offer candidate (d, j) to the lane's state. */
template <int MODE>
__device__ __forceinline__ void gq_offer(const gq_args &a, gq_state &st,
                                         double d, long long j) {
  if (MODE == GQ_KNN) {
    if (st.cnt < a.K) {
      gq_heap_up(st.hd, st.hj, (int)st.cnt, d, j);
      st.cnt++;
      if (st.cnt == a.K) {
        st.bd = st.hd[0];
        st.bj = st.hj[0];
        st.bound = isnan(st.bd) ? INFINITY : st.bd;
      }
    } else if (gq_less(d, j, st.bd, st.bj)) {
      gq_heap_down(st.hd, st.hj, a.K, d, j);
      st.bd = st.hd[0];
      st.bj = st.hj[0];
      st.bound = isnan(st.bd) ? INFINITY : st.bd;
    }
  } else if (MODE == GQ_MIN) {
    if (isnan(d) || !(d <= a.bound0)) return;
    if (!st.found || gq_less(d, j, st.bd, st.bj)) {
      st.found = 1;
      st.bd = d;
      st.bj = j;
      st.bound = d;
    }
  } else if (MODE == GQ_ROW) {
    if (isnan(d) || !(d <= a.bound0)) return;
    st.cnt++;
    if (a.op == GEOQ_MAX || a.op == GEOQ_ARGMAX) {
      if (!st.found || d > st.bd || (d == st.bd && j < st.bj)) {
        st.bd = d;
        st.bj = j;
      }
    } else {
      st.bd += d;
    }
    st.found = 1;
  } else if (MODE == GQ_RCOUNT) {
    if (d <= a.bound0) st.cnt++;
  } else { /* GQ_RFILL */
    if (d <= a.bound0) {
      ((double *)a.od)[st.pos] = d;
      a.oj[st.pos] = j;
      st.pos++;
    }
  }
}

template <int METHOD, int MODE, bool F32>
__global__ void __launch_bounds__(32 * GQ_WARPS)
    gq_kernel(const __grid_constant__ gq_args a) {
  const int lane = threadIdx.x & 31;
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const long long s = w * 32 + lane;
  if (w * 32 >= a.nq) return; /* the whole warp */
  const bool valid = s < a.nq;
  geod_point me = {0, 0, 0, 0, 0};
  double x = 0, y = 0, z = 0;
  long long io = -1, home = 0;
  if (valid) {
    me = a.qp[s];
    x = a.qx[3 * s];
    y = a.qx[3 * s + 1];
    z = a.qx[3 * s + 2];
    io = a.qi[s];
    home = a.qhome[s];
  }
  /* The warp's box of queries. */
  double lo[3] = {valid ? x : INFINITY, valid ? y : INFINITY,
                  valid ? z : INFINITY};
  double hi[3] = {valid ? x : -INFINITY, valid ? y : -INFINITY,
                  valid ? z : -INFINITY};
#pragma unroll
  for (int o = 16; o; o >>= 1)
#pragma unroll
    for (int c = 0; c < 3; c++) {
      lo[c] = fmin(lo[c], __shfl_xor_sync(GQ_FULL, lo[c], o));
      hi[c] = fmax(hi[c], __shfl_xor_sync(GQ_FULL, hi[c], o));
    }

  gq_state st;
  st.bound = a.bound0;
  st.bd = 0;
  st.bj = -1;
  st.cnt = 0;
  st.found = 0;
  st.pos = MODE == GQ_RFILL && valid ? a.coff[s] : 0;
  st.hd = NULL;
  st.hj = NULL;
  if (MODE == GQ_KNN) {
    size_t base = (size_t)w * (size_t)a.K * 32 + lane;
    st.hd = a.hd + base;
    st.hj = a.hj + base;
  }
  long long nc = 0;

  /* The home window: the Morton neighbours, no pruning. */
  long long wlo = 0, whi = 0;
  if (MODE == GQ_KNN || MODE == GQ_MIN) {
    long long hw = a.hw;
    wlo = home - hw / 2;
    if (wlo > a.m - hw) wlo = a.m - hw;
    if (wlo < 0) wlo = 0;
    whi = wlo + hw;
    if (valid)
      for (long long t = wlo; t < whi; t++) {
        long long jo = a.tj[t];
        if (a.self && jo == io) continue;
        geod_point tp = a.tp[t];
        gq_offer<MODE>(a, st, gq_eval<METHOD, F32>(a, &me, io, &tp, jo, &nc),
                       jo);
      }
  }

  /* The tiles. */
  for (long long tb = 0; tb < a.nt; tb += 32) {
    double mb = valid ? gq_chord_bound(a, st.bound) : -1;
    double gb = mb;
#pragma unroll
    for (int o = 16; o; o >>= 1) gb = fmax(gb, __shfl_xor_sync(GQ_FULL, gb, o));
    const long long t = tb + lane;
    bool need = false;
    if (t < a.nt) {
      const double *b = a.box + 6 * t;
      double dx = fmax(fmax(b[0] - hi[0], lo[0] - b[3]), 0.0);
      double dy = fmax(fmax(b[1] - hi[1], lo[1] - b[4]), 0.0);
      double dz = fmax(fmax(b[2] - hi[2], lo[2] - b[5]), 0.0);
      need = dx * dx + dy * dy + dz * dz <= gb * gb;
    }
    unsigned mask = __ballot_sync(GQ_FULL, need);
    while (mask) {
      const int bit = __ffs(mask) - 1;
      mask &= mask - 1;
      const long long tt = tb + bit;
      mb = valid ? gq_chord_bound(a, st.bound) : -1;
      bool mine = valid && gq_pbox2(x, y, z, a.box + 6 * tt) <= mb * mb;
      if (!__any_sync(GQ_FULL, mine)) continue;
      const long long e0 = tt * GQ_TILE;
      const long long e1 = e0 + GQ_TILE < a.m ? e0 + GQ_TILE : a.m;
      for (long long ts = e0; ts < e1; ts++) {
        const double tx = a.tx[3 * ts], ty = a.tx[3 * ts + 1],
                     tz = a.tx[3 * ts + 2];
        const long long jo = a.tj[ts];
        if (!mine) continue;
        if (a.self && (MODE == GQ_RCOUNT || MODE == GQ_RFILL ? jo <= io
                                                            : jo == io))
          continue;
        if ((MODE == GQ_KNN || MODE == GQ_MIN) && ts >= wlo && ts < whi)
          continue;
        mb = gq_chord_bound(a, st.bound);
        double cx = tx - x, cy = ty - y, cz = tz - z;
        if (cx * cx + cy * cy + cz * cz > mb * mb) continue;
        geod_point tp = a.tp[ts];
        gq_offer<MODE>(a, st, gq_eval<METHOD, F32>(a, &me, io, &tp, jo, &nc),
                       jo);
      }
    }
  }

  if (METHOD == GEOD_VINCENTY && nc)
    atomicAdd(a.nonconv, (unsigned long long)nc);
  if (!valid) return;
  const long long os = a.qslot ? a.qslot[s] : s;
  if (MODE == GQ_KNN) {
    /* Heapsort in place: ascending (d, j). */
    for (int c = a.K - 1; c > 0; c--) {
      double d = st.hd[c * 32];
      long long j = st.hj[c * 32];
      double td = st.hd[0];
      long long tj = st.hj[0];
      gq_heap_down(st.hd, st.hj, c, d, j);
      st.hd[c * 32] = td;
      st.hj[c * 32] = tj;
    }
    for (int e = 0; e < a.K; e++) {
      size_t o = (size_t)os * a.K + e;
      if (F32)
        ((float *)a.od)[o] = (float)st.hd[e * 32];
      else
        ((double *)a.od)[o] = st.hd[e * 32];
      a.oj[o] = st.hj[e * 32];
    }
  } else if (MODE == GQ_MIN || MODE == GQ_ROW) {
    double v;
    long long iv;
    switch (a.op) {
      case GEOQ_ARGMIN:
      case GEOQ_ARGMAX: iv = st.found ? st.bj : -1; break;
      case GEOQ_COUNT: iv = MODE == GQ_ROW ? st.cnt : 0; break;
      default: iv = 0; break;
    }
    switch (a.op) {
      case GEOQ_SUM: v = st.found ? st.bd : 0; break;
      case GEOQ_MEAN: v = st.found ? st.bd / (double)st.cnt : NAN; break;
      default: v = st.found ? st.bd : NAN; break;
    }
    if (a.op == GEOQ_ARGMIN || a.op == GEOQ_ARGMAX || a.op == GEOQ_COUNT)
      a.oj[os] = iv;
    else if (F32)
      ((float *)a.od)[os] = (float)v;
    else
      ((double *)a.od)[os] = v;
  } else if (MODE == GQ_RCOUNT) {
    a.oj[s] = st.cnt;
  }
}

template <int METHOD, int MODE, bool F32>
static cudaError_t gq_go(int64_t nq, cudaStream_t s, const gq_args &a) {
  if (nq <= 0) return cudaSuccess;
  long long warps = (nq + 31) / 32;
  unsigned blocks = (unsigned)((warps + GQ_WARPS - 1) / GQ_WARPS);
  gq_kernel<METHOD, MODE, F32><<<blocks, 32 * GQ_WARPS, 0, s>>>(a);
  return cudaGetLastError();
}

template <int METHOD, int MODE>
static cudaError_t gq_launch_f(int64_t nq, cudaStream_t s, const gq_args &a,
                               int f32) {
  return f32 ? gq_go<METHOD, MODE, true>(nq, s, a)
             : gq_go<METHOD, MODE, false>(nq, s, a);
}

template <int METHOD>
static cudaError_t gq_launch_m(int mode, int64_t nq, cudaStream_t s,
                               const gq_args &a, int f32) {
  switch (mode) {
    case GQ_KNN: return gq_launch_f<METHOD, GQ_KNN>(nq, s, a, f32);
    case GQ_MIN: return gq_launch_f<METHOD, GQ_MIN>(nq, s, a, f32);
    case GQ_ROW: return gq_launch_f<METHOD, GQ_ROW>(nq, s, a, f32);
    case GQ_RCOUNT: return gq_launch_f<METHOD, GQ_RCOUNT>(nq, s, a, f32);
    default: return gq_launch_f<METHOD, GQ_RFILL>(nq, s, a, f32);
  }
}

static cudaError_t gq_launch(int method, int mode, int64_t nq, cudaStream_t s,
                             const gq_args &a, int f32) {
  switch (method) {
    case GEOD_VINCENTY: return gq_launch_m<GEOD_VINCENTY>(mode, nq, s, a, f32);
    case GEOD_HAVERSINE:
      return gq_launch_m<GEOD_HAVERSINE>(mode, nq, s, a, f32);
    default: return gq_launch_m<GEOD_KARNEY>(mode, nq, s, a, f32);
  }
}

/* ---- the index (host) ---------------------------------------------------- */

/* Spread the low 21 bits of v to every third bit. */
static uint64_t gq_spread3(uint64_t v) {
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

/* Earth-centred X of a prepared point on the plan's surface (query.h). */
static void gq_xyz(const geod_plan *pl, const geod_point *p, double *x) {
  if (pl->method == GEOD_HAVERSINE) {
    x[0] = pl->radius_m * p->sbet;
    x[1] = pl->radius_m * p->cbet;
    x[2] = pl->radius_m * p->dn;
  } else {
    double sl, cl;
    geod__sincosd(p->lon, &sl, &cl);
    x[0] = pl->ell.a * p->cbet * cl;
    x[1] = pl->ell.a * p->cbet * sl;
    x[2] = pl->ell.b * p->sbet;
  }
}

typedef struct gq_key {
  uint64_t code;
  int64_t idx;
} gq_key;

/* Sort keys by code, stably (equal codes keep increasing idx): LSD radix,
 * 8 bits a pass, passes where every key has the same byte skipped. *k may
 * be swapped for the scratch buffer. -1 when out of memory. */
static int gq_radix_sort(gq_key **k, int64_t n) {
  gq_key *a = *k, *b = (gq_key *)malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
  if (!b) return -1;
  for (int sh = 0; sh < 64; sh += 8) {
    int64_t cnt[257];
    memset(cnt, 0, sizeof cnt);
    for (int64_t i = 0; i < n; i++) cnt[((a[i].code >> sh) & 255) + 1]++;
    int one = 0;
    for (int v = 1; v <= 256; v++) one |= cnt[v] == n;
    if (one || n == 0) continue;
    for (int v = 0; v < 256; v++) cnt[v + 1] += cnt[v];
    for (int64_t i = 0; i < n; i++) b[cnt[(a[i].code >> sh) & 255]++] = a[i];
    gq_key *t = a;
    a = b;
    b = t;
  }
  free(b);
  *k = a;
  return 0;
}

/* Sorted points: X (3 a point), the points, their original index. */
typedef struct gq_side {
  int64_t n;
  double *x;
  geod_point *p;
  long long *idx;
  uint64_t *code;
} gq_side;

static void gq_side_free(gq_side *s) {
  free(s->x);
  free(s->p);
  free(s->idx);
  free(s->code);
  memset(s, 0, sizeof *s);
}

static int gq_side_build(const geod_plan *pl, const geod_point *pts, int64_t n,
                         gq_side *s, terr *e) {
  double R = pl->method == GEOD_HAVERSINE
                 ? pl->radius_m
                 : (pl->ell.a > pl->ell.b ? pl->ell.a : pl->ell.b);
  R *= 1.001;
  size_t nn = n > 0 ? (size_t)n : 1;
  gq_key *k = (gq_key *)malloc(nn * sizeof *k);
  double *xs = (double *)malloc(nn * 3 * sizeof(double));
  s->n = n;
  s->x = (double *)malloc(nn * 3 * sizeof(double));
  s->p = (geod_point *)malloc(nn * sizeof(geod_point));
  s->idx = (long long *)malloc(nn * sizeof(long long));
  s->code = (uint64_t *)malloc(nn * sizeof(uint64_t));
  if (!k || !xs || !s->x || !s->p || !s->idx || !s->code) {
    free(k);
    free(xs);
    gq_side_free(s);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  const double scale = (double)(1 << 21) / (2 * R);
  for (int64_t i = 0; i < n; i++) {
    double *x = xs + 3 * i;
    gq_xyz(pl, &pts[i], x);
    uint64_t c = 0;
    for (int a = 0; a < 3; a++) {
      double u = (x[a] + R) * scale;
      uint64_t v = u <= 0 ? 0 : u >= (1 << 21) - 1 ? (1 << 21) - 1 : (uint64_t)u;
      c |= gq_spread3(v) << a;
    }
    k[i].code = c;
    k[i].idx = i;
  }
  if (gq_radix_sort(&k, n)) {
    free(k);
    free(xs);
    gq_side_free(s);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  for (int64_t r = 0; r < n; r++) {
    int64_t i = k[r].idx;
    memcpy(s->x + 3 * r, xs + 3 * i, 3 * sizeof(double));
    s->p[r] = pts[i];
    s->idx[r] = i;
    s->code[r] = k[r].code;
  }
  free(k);
  free(xs);
  return 0;
}

/* The boxes of the tiles of sorted X (n points). */
static double *gq_boxes(const double *x, int64_t n, int64_t *nt) {
  *nt = (n + GQ_TILE - 1) / GQ_TILE;
  double *b = (double *)malloc((size_t)(*nt > 0 ? *nt : 1) * 6 * sizeof(double));
  if (!b) return NULL;
  for (int64_t t = 0; t < *nt; t++) {
    double *o = b + 6 * t;
    for (int c = 0; c < 3; c++) o[c] = INFINITY, o[3 + c] = -INFINITY;
    int64_t e1 = (t + 1) * GQ_TILE < n ? (t + 1) * GQ_TILE : n;
    for (int64_t i = t * GQ_TILE; i < e1; i++)
      for (int c = 0; c < 3; c++) {
        double v = x[3 * i + c];
        if (v < o[c]) o[c] = v;
        if (v > o[3 + c]) o[3 + c] = v;
      }
  }
  return b;
}

/* ---- devices ------------------------------------------------------------- */

/* One device's share: its context, the targets' index, the chunk buffers
 * and the chunk in flight. */
typedef struct gq_dev {
  int dev, borrowed;
  devctx *d;
  devbuf tx, tp, tj, box, nc;
  devbuf qx, qp, qi, qh, qs, hd, hj, od, oj, coff, sk, sv, tmp;
  size_t tmp_bytes;
  cudaEvent_t start, done; /* around a chunk's kernels */
  int64_t chunk; /* in flight, or -1 */
  unsigned long long nonconv;
} gq_dev;

/* A chunk of sorted queries [s0, s1); fill chunks: pairs [p0, p1). */
typedef struct gq_chunk {
  int64_t s0, s1, p0, p1;
} gq_chunk;

/* Everything a call shares. */
typedef struct gq_run {
  const geod_plan *pl;
  const geoq *q;
  const geoq_gpu_job *job;
  int mode, f32, K;
  size_t es;
  gq_side T, Q; /* targets, queries (Q aliases T without targets) */
  long long *home; /* per sorted query */
  /* knn, rowwise: slot[s], the row of sorted query s in its chunk's output
   * (chunks are [c cq, (c + 1) cq)), and ord, each chunk's rows in order:
   * the output comes back in increasing original row, scattered forward. */
  long long *slot, *ord;
  double *box;
  int64_t nt;
  int ndev;
  gq_dev dv[GQ_MAX_DEV];
  int64_t cq;  /* queries a chunk holds */
  int64_t pcap; /* pairs a fill chunk holds */
  /* host staging of a chunk's results */
  void *hod;
  long long *hoj;
  size_t hod_bytes, hoj_bytes;
  long long *cnt;  /* radius: pairs per original row */
  int64_t *off;    /* radius: first pair of each original row */
  long long *coff; /* radius fill: per sorted query, pairs before it */
  tarray *part[GEOQ_MAX_PARTS];
  int nparts;
  double t_up, t_down, t_kern;
} gq_run;

static int gq_stop(gq_run *r, terr *e) {
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

static void gq_dev_free(gq_dev *x) {
  devbuf *all[] = {&x->tx, &x->tp, &x->tj, &x->box, &x->nc,  &x->qx,
                   &x->qp, &x->qi, &x->qh,  &x->qs,  &x->hd,  &x->hj,
                   &x->od, &x->oj, &x->coff, &x->sk, &x->sv, &x->tmp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    devmem_free(x->d, all[i]);
}

/* Device bytes a chunk of cq queries takes (radius fill: plus pcap pairs). */
static size_t gq_chunk_bytes(const gq_run *r, int64_t cq) {
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

/* Take the device, upload the targets' index, size and allocate the chunk
 * buffers within the budget. */
static int gq_dev_setup(gq_run *r, gq_dev *x, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  size_t free_b = 0, total_b = 0, fixed, budget;
  int64_t m = r->T.n;
  double t0;
  T_TRY(dev_begin(x->dev, &x->d, e));
  CU_TRY(cudaSetDevice(x->d->ordinal));
  CU_TRY(cudaEventCreate(&x->start));
  CU_TRY(cudaEventCreate(&x->done));
  x->chunk = -1;
  fixed = (size_t)m * (3 * sizeof(double) + sizeof(geod_point) + 8) +
          (size_t)r->nt * 6 * sizeof(double);
  CU_TRY(cudaMemGetInfo(&free_b, &total_b));
  budget = (size_t)((double)free_b * 0.8);
  if (pl->gpu_mem_limit > 0 && (size_t)pl->gpu_mem_limit < budget)
    budget = (size_t)pl->gpu_mem_limit;
  if (fixed + gq_chunk_bytes(r, 32) > budget)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold the "
                    "targets' index (%zu bytes) and a chunk of queries",
                    budget, fixed);
  /* The chunk size: what memory holds, at most the common cut. */
  {
    size_t room = budget - fixed;
    int64_t cq = r->cq;
    /* radius: half of it, the rest for the fill pass's pairs */
    if (r->mode == GQ_RCOUNT) room /= 2;
    while (cq > 32 && gq_chunk_bytes(r, cq) > room)
      cq = (cq / 2 + 31) / 32 * 32;
    if (cq < r->cq) r->cq = cq; /* one cut for every device: the smallest */
  }
  t0 = t_now_ms();
  T_TRY(gq_alloc(x->d, (size_t)m * 3 * sizeof(double), &x->tx, e));
  T_TRY(gq_alloc(x->d, (size_t)m * sizeof(geod_point), &x->tp, e));
  T_TRY(gq_alloc(x->d, (size_t)m * 8, &x->tj, e));
  T_TRY(gq_alloc(x->d, (size_t)r->nt * 6 * sizeof(double), &x->box, e));
  T_TRY(gq_alloc(x->d, sizeof(unsigned long long), &x->nc, e));
  if (m) {
    CU_TRY(cudaMemcpy(x->tx.ptr, r->T.x, (size_t)m * 3 * sizeof(double),
                      cudaMemcpyHostToDevice));
    CU_TRY(cudaMemcpy(x->tp.ptr, r->T.p, (size_t)m * sizeof(geod_point),
                      cudaMemcpyHostToDevice));
    CU_TRY(cudaMemcpy(x->tj.ptr, r->T.idx, (size_t)m * 8,
                      cudaMemcpyHostToDevice));
    CU_TRY(cudaMemcpy(x->box.ptr, r->box, (size_t)r->nt * 6 * sizeof(double),
                      cudaMemcpyHostToDevice));
  }
  CU_TRY(cudaMemset(x->nc.ptr, 0, sizeof(unsigned long long)));
  r->t_up += t_now_ms() - t0;
fail:
  return rc;
}

/* The chunk buffers, once r->cq (and r->pcap) are final. */
static int gq_dev_buffers(gq_run *r, gq_dev *x, terr *e) {
  int rc = 0;
  size_t cq = (size_t)r->cq, K = (size_t)r->K;
  CU_TRY(cudaSetDevice(x->d->ordinal));
  T_TRY(gq_alloc(x->d, cq * 3 * sizeof(double), &x->qx, e));
  T_TRY(gq_alloc(x->d, cq * sizeof(geod_point), &x->qp, e));
  T_TRY(gq_alloc(x->d, cq * 8, &x->qi, e));
  T_TRY(gq_alloc(x->d, cq * 8, &x->qh, e));
  if (r->slot) T_TRY(gq_alloc(x->d, cq * 8, &x->qs, e));
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

/* Start chunk c on device x: its queries up, the kernel, the event. */
static int gq_submit(gq_run *r, gq_dev *x, const gq_chunk *c, int64_t ci,
                     terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  int64_t s0 = c->s0, nq = c->s1 - c->s0;
  cudaStream_t st = x->d->s_comp;
  gq_args a;
  double t0 = t_now_ms();
  CU_TRY(cudaSetDevice(x->d->ordinal));
  CU_TRY(cudaMemcpyAsync(x->qx.ptr, r->Q.x + 3 * s0, (size_t)nq * 24,
                         cudaMemcpyHostToDevice, st));
  CU_TRY(cudaMemcpyAsync(x->qp.ptr, r->Q.p + s0, (size_t)nq * sizeof(geod_point),
                         cudaMemcpyHostToDevice, st));
  CU_TRY(cudaMemcpyAsync(x->qi.ptr, r->Q.idx + s0, (size_t)nq * 8,
                         cudaMemcpyHostToDevice, st));
  CU_TRY(cudaMemcpyAsync(x->qh.ptr, r->home + s0, (size_t)nq * 8,
                         cudaMemcpyHostToDevice, st));
  if (r->slot && r->mode != GQ_RFILL)
    CU_TRY(cudaMemcpyAsync(x->qs.ptr, r->slot + s0, (size_t)nq * 8,
                           cudaMemcpyHostToDevice, st));
  if (r->mode == GQ_RFILL) {
    /* Offsets relative to the chunk's first pair, nq + 1 of them. */
    for (int64_t k = 0; k <= nq; k++) r->hoj[k] = r->coff[s0 + k] - c->p0;
    CU_TRY(cudaMemcpyAsync(x->coff.ptr, r->hoj, (size_t)(nq + 1) * 8,
                           cudaMemcpyHostToDevice, st));
  }
  r->t_up += t_now_ms() - t0;
  memset(&a, 0, sizeof a);
  a.g = pl->ell;
  a.radius = pl->radius_m;
  a.unit = pl->unit;
  a.self = !pl->has_targets;
  a.op = r->q->op;
  a.K = r->K;
  a.bound0 = INFINITY;
  if (r->mode == GQ_RCOUNT || r->mode == GQ_RFILL) a.bound0 = r->q->r;
  if ((r->mode == GQ_MIN || r->mode == GQ_ROW) && r->q->has_within)
    a.bound0 = r->q->within;
  a.m = r->T.n;
  a.nt = r->nt;
  if (r->mode == GQ_KNN)
    a.hw = std::max<int64_t>(r->K + (a.self ? 1 : 0), 32);
  else
    a.hw = 32;
  if (a.hw > a.m) a.hw = a.m;
  a.tx = (const double *)x->tx.ptr;
  a.tp = (const geod_point *)x->tp.ptr;
  a.tj = (const long long *)x->tj.ptr;
  a.box = (const double *)x->box.ptr;
  a.nq = nq;
  a.qx = (const double *)x->qx.ptr;
  a.qp = (const geod_point *)x->qp.ptr;
  a.qi = (const long long *)x->qi.ptr;
  a.qhome = (const long long *)x->qh.ptr;
  a.qslot = r->slot && r->mode != GQ_RFILL ? (const long long *)x->qs.ptr
                                            : NULL;
  a.hd = (double *)x->hd.ptr;
  a.hj = (long long *)x->hj.ptr;
  a.od = x->od.ptr;
  a.oj = (long long *)x->oj.ptr;
  a.coff = (const long long *)x->coff.ptr;
  a.nonconv = (unsigned long long *)x->nc.ptr;
  CU_TRY(cudaEventRecord(x->start, st));
  CU_TRY(gq_launch(pl->method, r->mode, nq, st, a, r->f32));
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

/* Chunk c on device x is done: its results down, scattered to their rows. */
static int gq_finish(gq_run *r, gq_dev *x, const gq_chunk *c, terr *e) {
  int rc = 0;
  int64_t s0 = c->s0, nq = c->s1 - c->s0;
  const long long *qi = r->Q.idx + s0;
  double t0 = t_now_ms();
  float kms = 0;
  CU_TRY(cudaSetDevice(x->d->ordinal));
  CU_TRY(cudaEventElapsedTime(&kms, x->start, x->done));
  r->t_kern += kms;
  switch (r->mode) {
    case GQ_KNN: {
      size_t K = (size_t)r->K, es = r->es;
      CU_TRY(cudaMemcpy(r->hod, x->od.ptr, (size_t)nq * K * es,
                        cudaMemcpyDeviceToHost));
      CU_TRY(cudaMemcpy(r->hoj, x->oj.ptr, (size_t)nq * K * 8,
                        cudaMemcpyDeviceToHost));
      char *dd = (char *)r->part[0]->data;
      char *dj = (char *)r->part[1]->data;
      const long long *ord = r->ord + s0;
      for (int64_t k = 0, k1; k < nq; k = k1) { /* runs of consecutive rows */
        for (k1 = k + 1; k1 < nq && ord[k1] == ord[k1 - 1] + 1; k1++) {
        }
        size_t row = (size_t)ord[k], len = (size_t)(k1 - k) * K;
        memcpy(dd + row * K * es, (char *)r->hod + (size_t)k * K * es, len * es);
        memcpy(dj + row * K * 8, r->hoj + (size_t)k * K, len * 8);
      }
      break;
    }
    case GQ_RCOUNT:
      CU_TRY(cudaMemcpy(r->hoj, x->oj.ptr, (size_t)nq * 8,
                        cudaMemcpyDeviceToHost));
      for (int64_t k = 0; k < nq; k++) r->cnt[qi[k]] = r->hoj[k];
      break;
    case GQ_RFILL: {
      size_t np = (size_t)(c->p1 - c->p0);
      if (np == 0) break;
      CU_TRY(cudaMemcpy(r->hod, x->sv.ptr, np * 8, cudaMemcpyDeviceToHost));
      CU_TRY(cudaMemcpy(r->hoj, x->sk.ptr, np * 8, cudaMemcpyDeviceToHost));
      long long *pi = (long long *)r->part[0]->data;
      long long *pj = (long long *)r->part[1]->data;
      const double *hd = (const double *)r->hod;
      for (int64_t k = 0; k < nq; k++) {
        int64_t i = qi[k], o = r->off[i];
        int64_t a0 = r->coff[s0 + k] - c->p0, n1 = r->cnt[i];
        for (int64_t u = 0; u < n1; u++) pi[o + u] = i;
        memcpy(pj + o, r->hoj + a0, (size_t)n1 * 8);
        if (r->f32) {
          float *pd = (float *)r->part[2]->data;
          for (int64_t u = 0; u < n1; u++) pd[o + u] = (float)hd[a0 + u];
        } else {
          memcpy((double *)r->part[2]->data + o, hd + a0, (size_t)n1 * 8);
        }
      }
      break;
    }
    default: {
      int ints = r->q->op == GEOQ_ARGMIN || r->q->op == GEOQ_ARGMAX ||
                 r->q->op == GEOQ_COUNT;
      size_t es = ints ? 8 : r->es;
      CU_TRY(cudaMemcpy(r->hod, ints ? x->oj.ptr : x->od.ptr, (size_t)nq * es,
                        cudaMemcpyDeviceToHost));
      char *dst = (char *)r->part[0]->data;
      const long long *ord = r->ord + s0;
      for (int64_t k = 0, k1; k < nq; k = k1) {
        for (k1 = k + 1; k1 < nq && ord[k1] == ord[k1 - 1] + 1; k1++) {
        }
        memcpy(dst + (size_t)ord[k] * es, (char *)r->hod + (size_t)k * es,
               (size_t)(k1 - k) * es);
      }
      break;
    }
  }
  r->t_down += t_now_ms() - t0;
  x->chunk = -1;
  if (r->job && r->job->progress) r->job->progress(r->job->ctx, 1);
fail:
  return rc;
}

/* One pass over the chunks: each device takes the next chunk when its last
 * is done. */
static int gq_pass(gq_run *r, const gq_chunk *ch, int64_t nch, terr *e) {
  int rc = 0;
  int64_t next = 0;
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
      T_TRY(gq_finish(r, x, &ch[x->chunk], e));
      moved = 1;
    }
    if (!busy && next >= nch) break;
    if (!moved) usleep(100);
  }
fail:
  return rc;
}

/* Cut sorted queries [0, n) into chunks of at most cq (radius fill: and at
 * most pcap pairs). *out freed by the caller. */
static int gq_cut(gq_run *r, int fill, gq_chunk **out, int64_t *nch,
                  terr *e) {
  int64_t n = r->Q.n, cap = n / r->cq + 2, cnt = 0;
  gq_chunk *c = (gq_chunk *)malloc((size_t)cap * sizeof *c);
  size_t alloc = (size_t)cap;
  if (!c) return terr_set(e, T_ENOMEM, "", -1, "no memory for the chunks");
  for (int64_t s = 0; s < n;) {
    int64_t s1 = s + r->cq < n ? s + r->cq : n;
    if (fill) {
      int64_t lim = r->coff[s] + r->pcap;
      if (r->coff[s + 1] > lim) {
        free(c);
        return terr_set(e, T_ENOMEM, "", -1,
                        "CUDA: one point has %lld pairs within r, more than "
                        "the device memory budget holds (%lld)",
                        (long long)(r->coff[s + 1] - r->coff[s]),
                        (long long)r->pcap);
      }
      int64_t lo = s + 1, hi = s1; /* the largest s1 with coff[s1] <= lim */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (r->coff[mid] <= lim) lo = mid; else hi = mid - 1;
      }
      s1 = lo;
    }
    if ((size_t)cnt == alloc) {
      gq_chunk *g = (gq_chunk *)realloc(c, alloc * 2 * sizeof *c);
      if (!g) {
        free(c);
        return terr_set(e, T_ENOMEM, "", -1, "no memory for the chunks");
      }
      c = g;
      alloc *= 2;
    }
    c[cnt].s0 = s;
    c[cnt].s1 = s1;
    c[cnt].p0 = fill ? r->coff[s] : 0;
    c[cnt].p1 = fill ? r->coff[s1] : 0;
    cnt++;
    s = s1;
  }
  *out = c;
  *nch = cnt;
  return 0;
}

/* Host staging for a chunk's results. */
static int gq_host_stage(gq_run *r, terr *e) {
  size_t cq = (size_t)r->cq, K = (size_t)(r->K > 0 ? r->K : 1);
  size_t bo = cq * K * 8, bj = (cq + 1) * K * 8;
  if (r->mode == GQ_RFILL) {
    bo = (size_t)r->pcap * 8;
    bj = ((size_t)r->pcap > cq + 1 ? (size_t)r->pcap : cq + 1) * 8;
  }
  free(r->hod);
  free(r->hoj);
  r->hod = malloc(bo ? bo : 8);
  r->hoj = (long long *)malloc(bj ? bj : 8);
  if (!r->hod || !r->hoj)
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the result staging");
  return 0;
}

/* slot and ord for chunks of r->cq sorted queries (see gq_run), in O(n). */
static int gq_slots(gq_run *r, terr *e) {
  int64_t n = r->Q.n, nch = (n + r->cq - 1) / r->cq;
  size_t nn = (size_t)(n > 0 ? n : 1);
  long long *inv = (long long *)malloc(nn * 8);
  int64_t *fill = (int64_t *)calloc((size_t)(nch > 0 ? nch : 1), 8);
  r->slot = (long long *)malloc(nn * 8);
  r->ord = (long long *)malloc(nn * 8);
  if (!inv || !fill || !r->slot || !r->ord) {
    free(inv);
    free(fill);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  for (int64_t s = 0; s < n; s++) inv[r->Q.idx[s]] = s;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = inv[i], c = s / r->cq, u = fill[c]++;
    r->slot[s] = u;
    r->ord[c * r->cq + u] = i;
  }
  free(inv);
  free(fill);
  return 0;
}

static int gq_new_part(gq_run *r, tdtype dt, int ndim, const int64_t *shape,
                       terr *e) {
  tarray *a = NULL;
  int rc = r->job->alloc(r->job->ctx, dt, ndim, shape, &a, e);
  if (rc) return rc;
  r->part[r->nparts++] = a;
  return 0;
}

extern "C" int cuda_geoq(int dev, const geod_plan *pl, const geoq *q,
                         const geoq_gpu_job *job, geoq_out *out,
                         int64_t *nonconv, terr *e) {
  int rc = 0, ng;
  gq_run run;
  gq_run *r = &run;
  gq_chunk *ch = NULL;
  int64_t nch = 0, n = pl->n;
  double t0 = t_now_ms(), t_ix = t0;
  unsigned long long hnc;

  memset(r, 0, sizeof *r);
  out->nparts = 0;
  *nonconv = 0;
  r->pl = pl;
  r->q = q;
  r->job = job;
  r->f32 = pl->dtype == T_F32;
  r->es = tdtype_size(pl->dtype);
  switch (q->type) {
    case GEOQ_KNN: r->mode = GQ_KNN; break;
    case GEOQ_RADIUS: r->mode = GQ_RCOUNT; break;
    case GEOQ_ROWWISE:
      r->mode = q->op == GEOQ_MIN || q->op == GEOQ_ARGMIN ? GQ_MIN : GQ_ROW;
      break;
    default:
      return terr_set(e, T_EINVAL, "params.query", -1, "no query to run");
  }
  ng = gpu_count();
  if (ng == 0)
    return terr_set(e, T_EUNAVAIL, "backend", -1, "no CUDA device: %s",
                    gpu_unavailable_reason());
  if (dev < 0 || dev >= ng)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, ng);

  /* The parts whose shape is known now. */
  if (r->mode == GQ_KNN) {
    r->K = (int)geoq_knn_k(pl, q);
    int64_t sh[2] = {n, r->K};
    T_TRY(gq_new_part(r, pl->dtype, 2, sh, e));
    T_TRY(gq_new_part(r, T_I64, 2, sh, e));
  } else if (r->mode != GQ_RCOUNT) {
    int64_t sh[1] = {n};
    T_TRY(gq_new_part(r, geoq_rowwise_dtype(pl, q->op), 1, sh, e));
  }

  /* The index. */
  t_ix = t_now_ms();
  T_TRY(gq_side_build(pl, pl->q, pl->m, &r->T, e));
  if (pl->has_targets) {
    T_TRY(gq_side_build(pl, pl->p, n, &r->Q, e));
  } else {
    r->Q = r->T;
  }
  r->home = (long long *)malloc((size_t)(n > 0 ? n : 1) * 8);
  r->box = gq_boxes(r->T.x, r->T.n, &r->nt);
  if (!r->home || !r->box) {
    rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
    goto fail;
  }
  for (int64_t s = 0; s < n; s++)
    r->home[s] = pl->has_targets
                     ? (long long)(std::lower_bound(r->T.code,
                                                    r->T.code + r->T.n,
                                                    r->Q.code[s]) -
                                   r->T.code)
                     : s;
  if (job && job->t_index) *job->t_index += t_now_ms() - t_ix;

  /* The devices: the run's, then every one the scheduler lends. */
  {
    int devs[GQ_MAX_DEV];
    r->ndev = geod_gpu_lend(dev, job ? job->ngpu : 0, ng,
                            job && n >= 64 ? job->borrow : NULL,
                            job ? job->ctx : NULL, devs, GQ_MAX_DEV);
    for (int k = 0; k < r->ndev; k++) {
      r->dv[k].dev = devs[k];
      r->dv[k].borrowed = k > 0;
    }
  }
  /* Chunks: several per device for balance, at least GQ_CHUNK_MIN. */
  r->cq = (n + 4 * r->ndev - 1) / (4 * r->ndev);
  if (r->ndev == 1 && r->cq < GQ_CHUNK_MIN) r->cq = GQ_CHUNK_MIN;
  if (r->cq < 32) r->cq = 32;
  r->cq = (r->cq + 31) / 32 * 32;
  for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_setup(r, &r->dv[k], e));
  if (r->mode == GQ_KNN || r->mode == GQ_MIN || r->mode == GQ_ROW)
    T_TRY(gq_slots(r, e));
  for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_buffers(r, &r->dv[k], e));
  T_TRY(gq_host_stage(r, e));

  if (r->mode == GQ_RCOUNT) {
    r->cnt = (long long *)calloc((size_t)(n > 0 ? n : 1), 8);
    r->off = (int64_t *)malloc((size_t)(n + 1) * 8);
    r->coff = (long long *)malloc((size_t)(n + 1) * 8);
    if (!r->cnt || !r->off || !r->coff) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the pair counts");
      goto fail;
    }
  }
  T_TRY(gq_cut(r, 0, &ch, &nch, e));
  if (job && job->progress_total)
    job->progress_total(job->ctx, nch);
  T_TRY(gq_pass(r, ch, nch, e));

  if (r->mode == GQ_RCOUNT) {
    /* The cap before anything is allocated. */
    int64_t P = 0;
    for (int64_t i = 0; i < n; i++) {
      r->off[i] = P;
      P += r->cnt[i];
    }
    r->off[n] = P;
    if (P > q->max_pairs) {
      rc = terr_set(e, T_ENOSPACE, "params.query.radius.max_pairs", -1,
                    "%lld pairs within r, more than max_pairs (%lld)",
                    (long long)P, (long long)q->max_pairs);
      goto fail;
    }
    int64_t sh[1] = {P};
    T_TRY(gq_new_part(r, T_I64, 1, sh, e));
    T_TRY(gq_new_part(r, T_I64, 1, sh, e));
    T_TRY(gq_new_part(r, pl->dtype, 1, sh, e));
    r->coff[0] = 0;
    for (int64_t s = 0; s < n; s++) r->coff[s + 1] = r->coff[s] + r->cnt[r->Q.idx[s]];
    /* The fill pass: buffers sized by pairs. */
    r->mode = GQ_RFILL;
    for (int k = 0; k < r->ndev; k++) {
      gq_dev *x = &r->dv[k];
      CU_TRY(cudaSetDevice(x->d->ordinal));
      devbuf *b[] = {&x->qx, &x->qp, &x->qi, &x->qh, &x->oj, &x->od};
      for (size_t u = 0; u < sizeof b / sizeof b[0]; u++) devmem_free(x->d, b[u]);
    }
    {
      /* Recompute the budget split for the fill buffers. */
      size_t free_b = 0, total_b = 0;
      r->pcap = 0;
      for (int k = 0; k < r->ndev; k++) {
        gq_dev *x = &r->dv[k];
        CU_TRY(cudaSetDevice(x->d->ordinal));
        CU_TRY(cudaMemGetInfo(&free_b, &total_b));
        size_t budget = (size_t)((double)free_b * 0.8);
        size_t fixed = (size_t)r->T.n * (3 * sizeof(double) + sizeof(geod_point) + 8) +
                       (size_t)r->nt * 48;
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
    }
    for (int k = 0; k < r->ndev; k++) T_TRY(gq_dev_buffers(r, &r->dv[k], e));
    T_TRY(gq_host_stage(r, e));
    free(ch);
    ch = NULL;
    if (P > 0) {
      T_TRY(gq_cut(r, 1, &ch, &nch, e));
      if (job && job->progress_total) job->progress_total(job->ctx, nch);
      T_TRY(gq_pass(r, ch, nch, e));
    }
  }

  for (int k = 0; k < r->ndev; k++) {
    gq_dev *x = &r->dv[k];
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
  if (q->type == GEOQ_KNN) {
    out->name[0] = "distance";
    out->name[1] = "index";
  } else if (q->type == GEOQ_RADIUS) {
    out->name[0] = "i";
    out->name[1] = "j";
    out->name[2] = "distance";
  } else {
    out->name[0] = NULL;
  }

fail:
  for (int k = 0; k < r->ndev; k++) {
    gq_dev *x = &r->dv[k];
    if (x->d) {
      (void)cudaSetDevice(x->d->ordinal);
      (void)cudaStreamSynchronize(x->d->s_comp);
      gq_dev_free(x);
      if (x->done) (void)cudaEventDestroy(x->done);
      if (x->start) (void)cudaEventDestroy(x->start);
      if (rc) (void)cudaGetLastError();
      dev_end(x->d, rc);
    }
    if (x->borrowed && job && job->give_back) job->give_back(job->ctx, x->dev);
  }
  /* The run's device current again for its caller. */
  if (r->dv[0].d) (void)cudaSetDevice(r->dv[0].d->ordinal);
  for (int k = 0; k < GEOQ_MAX_PARTS; k++) tarray_free(r->part[k]);
  if (pl->has_targets) gq_side_free(&r->Q);
  gq_side_free(&r->T);
  free(r->home);
  free(r->slot);
  free(r->ord);
  free(r->box);
  free(r->hod);
  free(r->hoj);
  free(r->cnt);
  free(r->off);
  free(r->coff);
  free(ch);
  return rc;
}
