/* compute/kinds/geodesic/geodesic_kernel.cu — the geodesic matrix kernel
 * (geodesic.cu's opening comment: a block of 32 x 8 threads owns a 32 x 32
 * tile of pairs; modes SYM, ROWS, SQR, COND, and SYMB: a square matrix's
 * block of rows, each pair once, geodesic_int.h) and its launchers.
 *
 * The method, the mode, the output type and the block shape are template
 * parameters, so no branch on them runs per pair; gg_launch picks the
 * instance at run time, gg_launch_variant the tuning shapes of the
 * benchmark (cuda_geodesic_bench), gg_kernel_attributes answers the probe.
 * An element is geod_pair_dev (pair_dev.cuh), the device function the
 * query kernels share, so both compute the same bits. Nothing here
 * allocates, locks or waits: the host files own buffers and streams.
 */
#include <cuda_runtime.h>

#include "compute/kinds/geodesic/geodesic_int.h"
#include "compute/kinds/geodesic/pair_dev.cuh"

/* One element: the shared device function (compute/kinds/geodesic/pair_dev.cuh),
 * so that the query kernels (query/query_kernel.cu) compute the same bits. */
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
  if ((MODE == GG_SYM || MODE == GG_COND || MODE == GG_SYMB) &&
      j0 + GG_TILE - 1 < i0)
    return;
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
    } else if (MODE == GG_SYMB) {
      if (need)
        out[(i - a.r0) * a.bw + (j - a.c0)] = (T)d;
      else if (ok && i == j)
        out[(i - a.r0) * a.bw + (i - a.c0)] = (T)0;
      tile[ir][tx] = d;
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
  if (MODE == GG_SYMB) { /* (jj, ii): the band's row jj, or the strip's */
    __syncthreads();
    const int64_t ii = i0 + tx;
    T *strip = (T *)a.out2;
#pragma unroll
    for (int k = 0; k < GG_TILE / BY; k++) {
      const int64_t jj = j0 + ty + BY * k;
      if (jj < a.m && ii < a.r1 && jj > ii) {
        const T v = (T)tile[tx][ty + BY * k];
        if (jj < a.r1)
          out[(jj - a.r0) * a.bw + (ii - a.c0)] = v;
        else
          strip[(jj - a.r1) * a.sw + (ii - a.r0)] = v;
      }
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
    case GG_SYMB: return gg_launch_t<METHOD, GG_SYMB>(grid, s, a, f32);
    default: return gg_launch_t<METHOD, GG_COND>(grid, s, a, f32);
  }
}

cudaError_t gg_launch(int method, int mode, dim3 grid, cudaStream_t s,
                      const gg_args &a, int f32) {
  switch (method) {
    case GEOD_VINCENTY: return gg_launch_m<GEOD_VINCENTY>(mode, grid, s, a, f32);
    case GEOD_HAVERSINE:
      return gg_launch_m<GEOD_HAVERSINE>(mode, grid, s, a, f32);
    default: return gg_launch_m<GEOD_KARNEY>(mode, grid, s, a, f32);
  }
}

/* The tuning variants (karney, float64, SYM or ROWS): 0 is the default. */
static const char *const gg_variant_names[GG_NVARIANT] = {
    "32x8 threads, 3 blocks/SM (default)", "32x8 threads, 1 block/SM",
    "32x8 threads, 2 blocks/SM", "32x4 threads, 4 blocks/SM",
    "32x8 threads, 4 blocks/SM"};

const char *gg_variant_name(int variant) {
  return variant >= 0 && variant < GG_NVARIANT ? gg_variant_names[variant]
                                               : NULL;
}

template <int MODE>
static cudaError_t gg_launch_variant_t(int variant, dim3 grid, cudaStream_t s,
                                       const gg_args &a) {
  switch (variant) {
    case 1: return gg_go<GEOD_KARNEY, MODE, double, 8, 1>(grid, s, a);
    case 2: return gg_go<GEOD_KARNEY, MODE, double, 8, 2>(grid, s, a);
    case 3: return gg_go<GEOD_KARNEY, MODE, double, 4, 4>(grid, s, a);
    case 4: return gg_go<GEOD_KARNEY, MODE, double, 8, 4>(grid, s, a);
    default: return gg_go<GEOD_KARNEY, MODE, double, GG_BY, GG_MINB>(grid, s, a);
  }
}

cudaError_t gg_launch_variant(int variant, int mode, dim3 grid, cudaStream_t s,
                              const gg_args &a) {
  T_ASSERT(mode == GG_SYM || mode == GG_ROWS); /* the shapes tuned */
  if (mode == GG_SYM) return gg_launch_variant_t<GG_SYM>(variant, grid, s, a);
  return gg_launch_variant_t<GG_ROWS>(variant, grid, s, a);
}

cudaError_t gg_kernel_attributes(cudaFuncAttributes *attr) {
  return cudaFuncGetAttributes(
      attr, gg_kernel<GEOD_KARNEY, GG_SYM, double, GG_BY, GG_MINB>);
}
