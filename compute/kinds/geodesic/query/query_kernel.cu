/* compute/kinds/geodesic/query/query_kernel.cu — the query kernel of the
 * CUDA query engine (query.cu says how the engine works) and its one
 * launcher, gq_launch.
 *
 * A warp takes 32 consecutive sorted queries, a lane one query; the
 * kernel is four steps, each a device function inlined into it (so the
 * same machine code as one body): the warp's box of queries
 * (gq_warp_box), the home window of Morton neighbours for knn and
 * min/argmin (gq_home_window), the scan of the target tiles with the
 * warp's and then each lane's bound (gq_scan_tiles), and the lane's row
 * of output (gq_write_row). Candidates go through gq_offer, which keeps
 * each mode's state: a max-heap of (d, j) in global memory for knn, a
 * best for min/argmin, a fold for the other rowwise ops, a count or the
 * pairs themselves for radius. A pair is evaluated by geod_pair_dev
 * (pair_dev.cuh), the matrix kernel's own device function.
 *
 * The method (karney / vincenty / haversine), the mode and the output
 * type are template parameters; gq_launch picks the instance at run time,
 * so the host files never see <<<>>>. Nothing here allocates, locks or
 * waits: the caller (query_chunks.cu) owns the buffers and the stream.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "compute/kinds/geodesic/pair_dev.cuh"
#include "compute/kinds/geodesic/query/query_int.h"

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

/* The warp's box of queries: lo/hi over its valid lanes (every lane gets
 * the same box). */
__device__ __forceinline__ void gq_warp_box(bool valid, double x, double y,
                                            double z, double lo[3],
                                            double hi[3]) {
  lo[0] = valid ? x : INFINITY;
  lo[1] = valid ? y : INFINITY;
  lo[2] = valid ? z : INFINITY;
  hi[0] = valid ? x : -INFINITY;
  hi[1] = valid ? y : -INFINITY;
  hi[2] = valid ? z : -INFINITY;
#pragma unroll
  for (int o = 16; o; o >>= 1)
#pragma unroll
    for (int c = 0; c < 3; c++) {
      lo[c] = fmin(lo[c], __shfl_xor_sync(GQ_FULL, lo[c], o));
      hi[c] = fmax(hi[c], __shfl_xor_sync(GQ_FULL, hi[c], o));
    }
}

/* The home window (knn, min): the hw Morton neighbours around the query's
 * home, offered without pruning; [*wlo, *whi) is skipped by the tile scan. */
template <int METHOD, int MODE, bool F32>
__device__ __forceinline__ void gq_home_window(const gq_args &a, gq_state &st,
                                               bool valid,
                                               const geod_point *me,
                                               long long io, long long home,
                                               long long *wlo, long long *whi,
                                               long long *nc) {
  long long hw = a.hw;
  long long lo = home - hw / 2;
  if (lo > a.m - hw) lo = a.m - hw;
  if (lo < 0) lo = 0;
  *wlo = lo;
  *whi = lo + hw;
  if (!valid) return;
  for (long long t = lo; t < lo + hw; t++) {
    long long jo = a.tj[t];
    if (a.self && jo == io) continue;
    geod_point tp = a.tp[t];
    gq_offer<MODE>(a, st, gq_eval<METHOD, F32>(a, me, io, &tp, jo, nc), jo);
  }
}

/* The tiles, 32 at a time: lane t tests tile t's box against the warp's
 * box with the warp's loosest bound; for each tile left, each lane tests
 * it against its own query and bound, and the warp walks its targets
 * together. */
template <int METHOD, int MODE, bool F32>
__device__ __forceinline__ void gq_scan_tiles(
    const gq_args &a, gq_state &st, bool valid, const geod_point *me,
    long long io, double x, double y, double z, const double lo[3],
    const double hi[3], long long wlo, long long whi, long long *nc) {
  const int lane = threadIdx.x & 31;
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
        gq_offer<MODE>(a, st, gq_eval<METHOD, F32>(a, me, io, &tp, jo, nc),
                       jo);
      }
    }
  }
}

/* The lane's output row os (knn: its heap sorted in place, ascending
 * (d, j); rowwise: the op's value or index; radius count: the count at
 * the query's place s in the chunk). */
template <int MODE, bool F32>
__device__ __forceinline__ void gq_write_row(const gq_args &a, gq_state &st,
                                             long long s, long long os) {
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
  double lo[3], hi[3];
  gq_warp_box(valid, x, y, z, lo, hi);

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

  long long wlo = 0, whi = 0;
  if (MODE == GQ_KNN || MODE == GQ_MIN)
    gq_home_window<METHOD, MODE, F32>(a, st, valid, &me, io, home, &wlo, &whi,
                                      &nc);
  gq_scan_tiles<METHOD, MODE, F32>(a, st, valid, &me, io, x, y, z, lo, hi, wlo,
                                   whi, &nc);

  if (METHOD == GEOD_VINCENTY && nc)
    atomicAdd(a.nonconv, (unsigned long long)nc);
  if (!valid) return;
  gq_write_row<MODE, F32>(a, st, s, a.qslot ? a.qslot[s] : s);
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

cudaError_t gq_launch(int method, int mode, int64_t nq, cudaStream_t s,
                      const gq_args &a, int f32) {
  switch (method) {
    case GEOD_VINCENTY: return gq_launch_m<GEOD_VINCENTY>(mode, nq, s, a, f32);
    case GEOD_HAVERSINE:
      return gq_launch_m<GEOD_HAVERSINE>(mode, nq, s, a, f32);
    default: return gq_launch_m<GEOD_KARNEY>(mode, nq, s, a, f32);
  }
}

