/* compute/kinds/geodesic/plan.c — building and freeing a geod_plan (compute/kinds/geodesic/plan.h):
 * the ellipsoid's coefficients once, every point prepared once (reduced
 * latitude and its sine and cosine, or the unit vector for haversine).
 *
 * Kept apart from the params (compute/kinds/geodesic/params.c, which needs the array
 * value forms) so that the GPU test and the benchmarks can build plans from
 * plain arrays without the rest of the service.
 *
 * Ownership: geod_plan_build's *out is the caller's (geod_plan_free).
 * Threads: any; a finished plan is read-only.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/plan.h"

#include "util/pool.h"
#include "util/util.h"

static int plan_init(geod_plan *pl, geod_method method, double a, double f,
                     double radius_m, double unit, int condensed, tdtype dt,
                     int64_t n, int64_t m, int has_targets, terr *e) {
  memset(pl, 0, sizeof *pl);
  pl->method = method;
  if (geod_ellipsoid_init(&pl->ell, a, f) != 0)
    return terr_set(e, T_EINVAL, "params.ellipsoid", -1,
                    "a = %s, f = %s is not an ellipsoid with |f| <= 1/50",
                    t_num(a).s, t_num(f).s);
  pl->radius_m = radius_m;
  pl->unit = unit;
  pl->condensed = condensed;
  pl->has_targets = has_targets;
  pl->dtype = dt;
  pl->n = n;
  pl->m = has_targets ? m : n;
  if (condensed) {
    pl->ndim = 1;
    pl->shape[0] = n * (n - 1) / 2;
  } else {
    pl->ndim = 2;
    pl->shape[0] = n;
    pl->shape[1] = pl->m;
  }
  return 0;
}

/* Points are prepared by chunks of PREP_CHUNK (~5-50 ms of one core). */
#define PREP_CHUNK ((int64_t)1 << 18)

typedef struct prep_job {
  const geod_plan *pl;
  const double *rows; /* (lat, lon), row-major */
  int64_t k;
  geod_point *p;
} prep_job;

static void prep_chunk(void *arg, int64_t c, int slot) {
  (void)slot;
  const prep_job *j = arg;
  int64_t lo = c * PREP_CHUNK, hi = lo + PREP_CHUNK < j->k ? lo + PREP_CHUNK : j->k;
  for (int64_t i = lo; i < hi; i++) {
    if (j->pl->method == GEOD_HAVERSINE)
      geod_point_prep_sphere(j->rows[2 * i], j->rows[2 * i + 1], &j->p[i]);
    else
      geod_point_prep(&j->pl->ell, j->rows[2 * i], j->rows[2 * i + 1],
                      &j->p[i]);
  }
}

/* k points into *out (malloc'd; NULL and T_ENOMEM when out of memory);
 * the stop flag's value when it stopped the work (*out NULL then). */
static int prep_points(const geod_plan *pl, const double *rows, int64_t k,
                       struct pool *workers, int width, atomic_int *stop,
                       geod_point **out) {
  *out = NULL;
  geod_point *p = malloc((size_t)(k ? k : 1) * sizeof *p);
  if (!p) return -1;
  prep_job j = {.pl = pl, .rows = rows, .k = k, .p = p};
  int64_t nch = (k + PREP_CHUNK - 1) / PREP_CHUNK;
  int st = 0;
  if (workers && width > 1 && nch > 1) {
    st = pool_for(workers, width, nch, prep_chunk, &j, stop);
  } else {
    for (int64_t c = 0; c < nch; c++) {
      if (stop && (st = atomic_load_explicit(stop, memory_order_relaxed)))
        break;
      prep_chunk(&j, c, 0);
    }
  }
  if (st) {
    free(p);
    return st;
  }
  *out = p;
  return 0;
}

int geod_plan_build(geod_method method, double a, double f, double radius_m,
                    double unit, int condensed, tdtype dt, const double *pts,
                    int64_t n, const double *tgt, int64_t m, geod_plan **out,
                    terr *e) {
  return geod_plan_build_on(method, a, f, radius_m, unit, condensed, dt, pts,
                            n, tgt, m, NULL, 1, NULL, out, e);
}

int geod_plan_build_on(geod_method method, double a, double f,
                       double radius_m, double unit, int condensed, tdtype dt,
                       const double *pts, int64_t n, const double *tgt,
                       int64_t m, struct pool *workers, int width,
                       atomic_int *stop, geod_plan **out, terr *e) {
  *out = NULL;
  if (n < 1 || (tgt && m < 1) || (tgt && condensed))
    return terr_set(e, T_EINVAL, "params.points", -1,
                    "bad plan: n = %lld, m = %lld%s", (long long)n,
                    (long long)m, tgt && condensed ? ", condensed" : "");
  geod_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return terr_set(e, T_ENOMEM, "", -1, "no memory for the plan");
  int rc = plan_init(pl, method, a, f, radius_m, unit, condensed, dt, n, m,
                     tgt != NULL, e);
  if (rc) {
    free(pl);
    return rc;
  }
  int st = prep_points(pl, pts, n, workers, width, stop, &pl->p);
  if (!st) {
    if (tgt)
      st = prep_points(pl, tgt, m, workers, width, stop, &pl->q);
    else
      pl->q = pl->p;
  }
  if (st > 0) {
    geod_plan_free(pl);
    return st == 2 ? terr_set(e, T_ETIMEOUT, "params.points", -1,
                              "the job ran past its timeout while its "
                              "points were prepared")
                   : terr_set(e, T_ECANCELED, "params.points", -1,
                              "stopped while its points were prepared");
  }
  if (st || !pl->p || !pl->q) {
    geod_plan_free(pl);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for %lld points",
                    (long long)(n + m));
  }
  *out = pl;
  return 0;
}

int geod_plan_rows(const geod_plan *pl, int64_t r0, int64_t r1,
                   geod_plan *sub, terr *e) {
  if (r0 < 0 || r1 <= r0 || r1 > pl->n || pl->row1 > 0)
    return terr_set(e, T_EINVAL, "row", -1,
                    "rows [%lld, %lld) are not a band of %lld rows",
                    (long long)r0, (long long)r1, (long long)pl->n);
  *sub = *pl;
  if (pl->has_targets) {
    sub->p = pl->p + r0;
    sub->n = r1 - r0;
    sub->shape[0] = r1 - r0;
    return 0;
  }
  sub->row0 = r0;
  sub->row1 = r1;
  if (pl->condensed) /* row r's pairs start at geod_condensed_index(n, r, r+1) */
    sub->shape[0] = geod_condensed_index(pl->n, r1, r1 + 1) -
                    geod_condensed_index(pl->n, r0, r0 + 1);
  else
    sub->shape[0] = r1 - r0;
  return 0;
}

int geod_plan_upper(const geod_plan *pl, int64_t r0, int64_t r1,
                    geod_plan *sub, terr *e) {
  if (r0 < 0 || r1 <= r0 || r1 > pl->n || pl->row1 > 0 || pl->has_targets ||
      pl->condensed)
    return terr_set(e, T_EINVAL, "row", -1,
                    "rows [%lld, %lld) are not an upper band of a square "
                    "matrix of %lld points", (long long)r0, (long long)r1,
                    (long long)pl->n);
  *sub = *pl;
  /* points r0 .. r1 - 1 against targets r0 .. n - 1: the same prepared
   * points, so pair (p[i], p[j]) as the whole matrix computes it for
   * j > i, and only those (upper); the GPU uploads the targets once
   * (q == p, m > n) */
  sub->p = pl->p + r0;
  sub->q = pl->p + r0;
  sub->n = r1 - r0;
  sub->m = pl->n - r0;
  sub->has_targets = 1;
  sub->upper = 1;
  sub->ndim = 2;
  sub->shape[0] = r1 - r0;
  sub->shape[1] = pl->n - r0;
  sub->row0 = sub->row1 = 0;
  return 0;
}

void geod_plan_free(geod_plan *pl) {
  if (!pl) return;
  if (pl->q && pl->q != pl->p) free(pl->q);
  free(pl->p);
  free(pl);
}
