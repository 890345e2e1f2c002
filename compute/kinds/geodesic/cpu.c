/* compute/kinds/geodesic/cpu.c — the geodesic kind's CPU backends (serial and the
 * thread pool) over tiles of the distance matrix.
 *
 * The matrix is cut into square tiles of GEOD_TILE_* points a side (sized
 * so that one tile is a few milliseconds of work for its method). Without
 * targets only the tiles on or above the diagonal are computed; each tile
 * writes its pairs (i, j), i < j, to row i and mirrors them into column i
 * of rows j (square layout), or writes them straight to their pdist
 * positions (condensed layout, where row i's pairs are contiguous). The
 * diagonal is written as zeros. With targets every tile is computed.
 *
 * Within a tile, each row's run of pairs is computed into a small buffer of
 * doubles and then stored (converted to float32 if asked, divided into
 * kilometres by the pair function), so the pair loops stay free of layout
 * and dtype branches.
 *
 * An upper band (plan.h upper: a square matrix's tile as a split job runs
 * it, the rows' points against the points from the same first row) is a
 * grid of tiles on or above its diagonal i == j, each computing the pairs
 * j > i only, as the whole matrix's row loop does; j <= i are zeroed first.
 *
 * A band (a tile of a split job: pl->row1 > 0, no targets; plan.h) is a
 * condensed matrix's rows [r0, r1): a grid of tiles over those rows, pairs
 * j > i as the matrix's row loop computes them, written from the band's
 * first condensed index. (A square matrix's tile is an upper band; a
 * square band is refused.)
 *
 * Threads: geod_cpu_run hands tile indices to pool_for; any worker may run
 * any tile. Tiles write disjoint elements (a pair (i, j) belongs to exactly
 * one tile, and its mirror (j, i) to no other tile), so no lock guards the
 * output. Vincenty's non-convergence counts are per pool slot and summed
 * after the loop. Progress is an atomic add per tile; a stop request is
 * honoured between tiles (pool_for starts no further tile).
 */
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/kind.h"
#include "util/pool.h"

/* Tile edges: karney/vincenty ~ 128^2 pairs (several ms), haversine more. */
#define GEOD_TILE_SLOW 128
#define GEOD_TILE_FAST 512
#define GEOD_TILE_MAX GEOD_TILE_FAST

typedef struct geod_cpu {
  const geod_plan *pl;
  tarray *out;
  job_ctx *ctx;
  int64_t tile;     /* edge */
  int64_t ntr, ntc; /* tile rows and columns */
  int64_t ntiles;
  int tri;             /* upper triangle of tiles (no targets) */
  int up;              /* an upper band (plan.h upper): the tiles on or
                          above the diagonal i == j, pairs j > i only */
  int band;            /* rows [r0, r1) of a matrix without targets */
  int64_t r0, r1;
  int64_t base;        /* band, condensed: index of row r0's first pair */
  long long *nonconv;  /* one per slot */
} geod_cpu;

/* Tile k -> (ti, tj). Upper-triangle order: row ti holds tiles ti..ntr-1,
 * and starts at index ti ntr - ti (ti - 1) / 2. */
static void tile_of(const geod_cpu *c, int64_t k, int64_t *ti, int64_t *tj) {
  if (!c->tri && !c->up) {
    *ti = k / c->ntc;
    *tj = k % c->ntc;
    return;
  }
  /* row ti holds tiles ti .. ntc - 1 (ntc = ntr for tri) */
  int64_t lo = 0, hi = c->ntr - 1, n = c->ntc;
  while (lo < hi) { /* the last row whose start is <= k */
    int64_t mid = (lo + hi + 1) / 2;
    if (mid * n - mid * (mid - 1) / 2 <= k)
      lo = mid;
    else
      hi = mid - 1;
  }
  *ti = lo;
  *tj = lo + (k - (lo * n - lo * (lo - 1) / 2));
}

/* Distances from point p to q[0..len) in output units, into buf (kind.h).
 * The method switch sits outside the loops; the ellipsoid is copied to a
 * local so that stores to buf cannot be taken as changing it. The queries
 * (compute/kinds/geodesic/query/query_cpu.c) call it too, so that their distances are
 * the matrix's to the bit. */
void geod_row_compute(const geod_plan *pl, const geod_point *p,
                      const geod_point *q, int64_t len, double *buf,
                      long long *nonconv) {
  const geod_ellipsoid g = pl->ell;
  const double unit = pl->unit;
  switch (pl->method) {
    case GEOD_KARNEY:
      for (int64_t k = 0; k < len; k++)
        buf[k] = geod_inverse_karney_pp(&g, p, &q[k]) / unit;
      break;
    case GEOD_VINCENTY:
      for (int64_t k = 0; k < len; k++)
        buf[k] = geod_inverse_vincenty_pp(&g, p, &q[k], nonconv) / unit;
      break;
    case GEOD_HAVERSINE: {
      const double r = pl->radius_m;
      for (int64_t k = 0; k < len; k++)
        buf[k] = geod_inverse_haversine_pp(p, &q[k], r) / unit;
      break;
    }
  }
}

/* Store buf[0..len) = pairs (i, j0 .. j0+len) into the output layout. */
static void row_store(const geod_cpu *c, int64_t i, int64_t j0, int64_t len,
                      const double *buf) {
  const geod_plan *pl = c->pl;
  int64_t m = pl->m;
  int f32 = pl->dtype == T_F32;
  if (pl->condensed) {
    int64_t at = geod_condensed_index(pl->n, i, j0);
    if (f32) {
      float *o = (float *)c->out->data + at;
      for (int64_t k = 0; k < len; k++) o[k] = (float)buf[k];
    } else {
      memcpy((double *)c->out->data + at, buf, (size_t)len * sizeof *buf);
    }
    return;
  }
  if (f32) {
    float *o = c->out->data;
    for (int64_t k = 0; k < len; k++) o[i * m + j0 + k] = (float)buf[k];
    if (c->tri)
      for (int64_t k = 0; k < len; k++) o[(j0 + k) * m + i] = (float)buf[k];
  } else {
    double *o = c->out->data;
    memcpy(o + i * m + j0, buf, (size_t)len * sizeof *buf);
    if (c->tri)
      for (int64_t k = 0; k < len; k++) o[(j0 + k) * m + i] = buf[k];
  }
}

/* A band's buf[0..len) = its pairs (i, j0 .. j0+len) into the output at
 * their condensed index, less the band's first (base). */
static void band_store(const geod_cpu *c, int64_t i, int64_t j0, int64_t len,
                       const double *buf) {
  const geod_plan *pl = c->pl;
  int64_t at = geod_condensed_index(pl->n, i, j0) - c->base;
  if (pl->dtype == T_F32) {
    float *o = (float *)c->out->data + at;
    for (int64_t k = 0; k < len; k++) o[k] = (float)buf[k];
  } else {
    memcpy((double *)c->out->data + at, buf, (size_t)len * sizeof *buf);
  }
}

/* One tile of a band: rows i0.. and columns j0.. of the grid. */
static void band_tile(geod_cpu *c, int64_t ti, int64_t tj, long long *nc) {
  const geod_plan *pl = c->pl;
  double buf[GEOD_TILE_MAX];
  int64_t i0 = c->r0 + ti * c->tile, i1 = i0 + c->tile;
  int64_t j0 = tj * c->tile, j1 = j0 + c->tile;
  if (i1 > c->r1) i1 = c->r1;
  if (j1 > pl->m) j1 = pl->m;
  for (int64_t i = i0; i < i1; i++) {
    int64_t js = j0 > i + 1 ? j0 : i + 1;
    if (js < j1) {
      geod_row_compute(pl, &pl->p[i], &pl->p[js], j1 - js, buf, nc);
      band_store(c, i, js, j1 - js, buf);
    }
  }
}

/* pool_chunk_fn: one tile. */
static void tile_run(void *arg, int64_t k, int slot) {
  geod_cpu *c = arg;
  const geod_plan *pl = c->pl;
  double buf[GEOD_TILE_MAX];
  long long nc = 0;
  int64_t ti, tj;
  tile_of(c, k, &ti, &tj);
  if (c->band) {
    band_tile(c, ti, tj, &nc);
    c->nonconv[slot] += nc;
    job_ctx_progress(c->ctx, 1);
    return;
  }
  int64_t i0 = ti * c->tile, i1 = i0 + c->tile;
  int64_t j0 = tj * c->tile, j1 = j0 + c->tile;
  if (i1 > pl->n) i1 = pl->n;
  if (j1 > pl->m) j1 = pl->m;
  for (int64_t i = i0; i < i1; i++) {
    int64_t js = j0;
    if ((c->tri || c->up) && js < i + 1) js = i + 1; /* above the diagonal */
    if (js < j1) {
      geod_row_compute(pl, &pl->p[i], &pl->q[js], j1 - js, buf, &nc);
      row_store(c, i, js, j1 - js, buf);
    }
    if (c->tri && !pl->condensed && i >= j0 && i < j1)
      tarray_set(c->out, i * pl->m + i, 0.0); /* the diagonal */
  }
  c->nonconv[slot] += nc;
  job_ctx_progress(c->ctx, 1);
}

int geod_cpu_run(const geod_plan *pl, int width, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e) {
  geod_cpu c;
  int rc = 0;
  memset(&c, 0, sizeof c);
  *nonconv = 0;
  if (width < 1) width = 1;
  c.pl = pl;
  c.out = out;
  c.ctx = ctx;
  c.tile = pl->method == GEOD_HAVERSINE ? GEOD_TILE_FAST : GEOD_TILE_SLOW;
  c.band = !pl->has_targets && pl->row1 > 0;
  if (c.band && !pl->condensed)
    return terr_set(e, T_EINVAL, "row", -1,
                    "a square matrix's rows run as an upper band "
                    "(geod_plan_upper), not a band");
  c.tri = !pl->has_targets && !c.band;
  c.up = pl->has_targets && pl->upper;
  geod_plan_band(pl, &c.r0, &c.r1);
  if (c.band) c.base = geod_condensed_index(pl->n, c.r0, c.r0 + 1);
  c.ntr = (c.r1 - c.r0 + c.tile - 1) / c.tile;
  c.ntc = (pl->m + c.tile - 1) / c.tile;
  c.ntiles = c.tri || c.up ? c.ntr * c.ntc - c.ntr * (c.ntr - 1) / 2
                           : c.ntr * c.ntc;
  if (c.up) /* j <= i: zero (no tile writes them) */
    for (int64_t i = 0; i < pl->n; i++)
      memset((char *)out->data + (size_t)(i * pl->m) * tdtype_size(pl->dtype),
             0, (size_t)(i + 1) * tdtype_size(pl->dtype));
  if (pl->condensed && pl->n < 2) c.ntiles = 0; /* empty result */
  c.nonconv = calloc((size_t)width, sizeof *c.nonconv);
  if (!c.nonconv)
    return terr_set(e, T_ENOMEM, "", -1, "no memory for %d slots", width);
  atomic_fetch_add(&ctx->progress_total, c.ntiles);
  if (width == 1 || !ctx->pool) {
    for (int64_t k = 0; k < c.ntiles; k++) {
      if (job_ctx_stopped(ctx)) {
        rc = job_ctx_stop_code(ctx);
        break;
      }
      tile_run(&c, k, 0);
    }
  } else if (pool_for(ctx->pool, width, c.ntiles, tile_run, &c, ctx->stop)) {
    rc = job_ctx_stop_code(ctx);
  }
  for (int s = 0; s < width; s++) *nonconv += c.nonconv[s];
  free(c.nonconv);
  if (rc)
    terr_set(e, rc, "", -1, "%s",
             rc == T_ETIMEOUT ? "the job ran past its timeout"
                              : "the job was canceled");
  return rc;
}

