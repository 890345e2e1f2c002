/* compute/kinds/geodesic/plan.h — a geodesic job, checked and ready to run: what
 * compute/kinds/geodesic/params.c builds from the job's params and what the CPU tiles
 * (compute/kinds/geodesic/kind.c) and the GPU (compute/kinds/geodesic/geodesic.cu) compute from.
 *
 * Plain C data with no C11-only types, so that the CUDA sources (C++) can
 * read it. A plan is built once (prepare) and is immutable afterwards: the
 * scheduler may run it several times (backend "compare") and from any
 * thread.
 *
 * The result: without targets, an n x n matrix (symmetric, zero diagonal)
 * or, with layout "condensed", the n (n - 1) / 2 upper-triangle entries in
 * SciPy pdist order (row i holds (i, i+1) ... (i, n-1)); with targets, an
 * n x m matrix (row i: point i to every target). Distances are in metres
 * or kilometres (divided by 1000, the same division on CPU and GPU).
 */
#ifndef TESSEL_KINDS_GEODESIC_PLAN_H
#define TESSEL_KINDS_GEODESIC_PLAN_H

#ifndef __cplusplus
#include <stdatomic.h>
#endif
#include <stdint.h>

#include "compute/kinds/geodesic/geodesic.h"

/* Tessel's C headers have no extern "C" guards of their own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "compute/array/tarray.h"
#include "util/err.h"

typedef enum { GEOD_KARNEY = 0, GEOD_VINCENTY, GEOD_HAVERSINE } geod_method;

typedef struct geod_plan {
  geod_method method;
  geod_ellipsoid ell; /* karney, vincenty */
  double radius_m;    /* haversine */
  double unit;        /* metres per output unit: 1 (m) or 1000 (km) */
  int condensed;      /* 1: pdist order (no targets) */
  int has_targets;
  tdtype dtype;       /* of the result */
  int64_t n;          /* points (rows) */
  int64_t m;          /* columns: targets, or n */
  int ndim;           /* of the result: 2, or 1 when condensed */
  int64_t shape[2];   /* of the result (of rows [row0, row1) with a band) */
  /* A band of rows of a matrix without targets (a tile of a split job,
   * geod_plan_rows): this run computes rows [row0, row1) of the whole
   * result only, each element as the whole matrix has it (pair (p[min(i,
   * j)], p[max(i, j)]), zero diagonal; condensed: row i's pairs j > i).
   * row1 = 0: no band, every row. */
  int64_t row0, row1;
  /* An upper band (geod_plan_upper): targets that are the points
   * themselves from the same first row (q == p, m >= n), of which only the
   * pairs j > i are computed; elements j <= i are zero. 0: every element. */
  int upper;
  /* Prepared points (geod_point_prep, or _sphere for haversine): p has n,
   * q has m; q == p when there are no targets. Owned by the plan. */
  geod_point *p, *q;
  /* GPU knobs for tests (0: automatic): the most device memory the job may
   * take, and the pinned staging chunk in bytes. */
  int64_t gpu_mem_limit, gpu_chunk_bytes;
} geod_plan;

/* Number of distinct pairs the plan evaluates: n (n - 1) / 2 without
 * targets, n m with. */
static inline double geod_plan_pairs(const geod_plan *pl) {
  return pl->has_targets ? (double)pl->n * (double)pl->m
                         : (double)pl->n * (double)(pl->n - 1) / 2;
}

/* Offset of pair (i, j), i < j, in the condensed layout of n points. */
TESSEL_HD static inline int64_t geod_condensed_index(int64_t n, int64_t i,
                                                     int64_t j) {
  return i * n - i * (i + 1) / 2 + (j - i - 1);
}

/* One pair by the plan's method, in output units. *nonconv counts Vincenty
 * pairs that did not converge (NaN). */
TESSEL_HD static inline double geod_plan_pair(const geod_plan *pl,
                                              const geod_point *a,
                                              const geod_point *b,
                                              long long *nonconv) {
  double s;
  switch (pl->method) {
    case GEOD_VINCENTY:
      s = geod_inverse_vincenty_pp(&pl->ell, a, b, nonconv);
      break;
    case GEOD_HAVERSINE:
      s = geod_inverse_haversine_pp(a, b, pl->radius_m);
      break;
    default:
      s = geod_inverse_karney_pp(&pl->ell, a, b);
      break;
  }
  return s / pl->unit;
}

/* Build a plan directly from host arrays of latitudes/longitudes (tests,
 * benchmarks): pts is n x 2 (lat, lon) row-major, tgt m x 2 or NULL.
 * method/ellipsoid/units as in the params; no value checks beyond the
 * ellipsoid (callers pass valid points). Caller frees with
 * geod_plan_free. */
int geod_plan_build(geod_method method, double a, double f, double radius_m,
                    double unit, int condensed, tdtype dt, const double *pts,
                    int64_t n, const double *tgt, int64_t m, geod_plan **out,
                    terr *e);
/* The same, the points prepared by chunks on pool at width threads (pool
 * NULL or width 1: on the calling thread), no chunk started once *stop
 * (may be NULL) is non-zero: then T_ECANCELED (T_ETIMEOUT when it is 2)
 * and no plan. The scheduler's run (a job's stop flag and pool). */
#ifndef __cplusplus /* the .cu files build no plans */
struct pool;
int geod_plan_build_on(geod_method method, double a, double f,
                       double radius_m, double unit, int condensed, tdtype dt,
                       const double *pts, int64_t n, const double *tgt,
                       int64_t m, struct pool *workers, int width,
                       atomic_int *stop, geod_plan **out, terr *e);
#endif
void geod_plan_free(geod_plan *pl); /* NULL is a no-op */

/* The first row and one past the last that a run of pl computes. */
static inline void geod_plan_band(const geod_plan *pl, int64_t *r0,
                                  int64_t *r1) {
  *r0 = pl->row1 > 0 ? pl->row0 : 0;
  *r1 = pl->row1 > 0 ? pl->row1 : pl->n;
}

/* *sub = rows [r0, r1) of pl's result (a tile of a split job: its result is
 * exactly those rows of pl's, bit for bit). A shallow copy that shares pl's
 * points (valid while pl is; not to be freed): with targets the rows are
 * just the points p[r0 .. r1) against every target (an ordinary plan);
 * without, a band (row0, row1 above) whose shape is [r1 - r0, n] (a
 * query's; a square matrix's tile is an upper band, geod_plan_upper, and
 * the CPU refuses a square band), or the condensed entries of those rows. T_EINVAL (field "row") unless
 * 0 <= r0 < r1 <= n (and pl is not a band itself). */
int geod_plan_rows(const geod_plan *pl, int64_t r0, int64_t r1,
                   geod_plan *sub, terr *e);
/* *sub = the upper part of rows [r0, r1) of a square matrix without
 * targets (a tile of a split job, compute/sched/split.c): rows [r0, r1) x columns
 * [r0, n), shape [r1 - r0, n - r0], as points p[r0 .. r1) against targets
 * p[r0 .. n) with `upper` set — a plan with targets sharing pl's points,
 * of which only the pairs j > i are computed. Element (i, j), j > i, is
 * the whole matrix's (i, j) bit for bit (pair (p[i], p[j]) on every
 * backend); the diagonal and the block's lower part (j <= i) are zero: the
 * split job's join takes (i, j), j < i, from row j's tile as (j, i).
 * Vincenty's non-converged pairs are counted at j > i, so the tiles'
 * counts add up to the whole matrix's. The tiles compute n (n - 1) / 2
 * pairs in all, as the whole job does, where full rows took n^2. T_EINVAL
 * (field "row") unless 0 <= r0 < r1 <= n and pl is square, without
 * targets, and not a band. */
int geod_plan_upper(const geod_plan *pl, int64_t r0, int64_t r1,
                    geod_plan *sub, terr *e);

#ifdef __cplusplus
}
#endif

#endif
