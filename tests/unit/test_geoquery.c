/* test_geoquery.c — the CPU engine of the geodesic queries
 * (compute/kinds/geodesic/query/query_cpu.c) against brute force over the matrix, and
 * params.query through the kind (400s naming the field, the estimate, the
 * parts named through result_part).
 *
 * The reference for every query is the square matrix the CPU matrix code
 * computes for the same plan (geod_cpu_run): each row sorted by (value,
 * index) with NaN last (knn), thresholded (radius), reduced in increasing
 * j (rowwise). Equality is exact: distances bit for bit in the plan's dtype
 * (float64 and float32), indices and counts equal. A pruning bound that
 * dropped a true neighbour, a tie broken the wrong way, a distance
 * evaluated in the other orientation (Karney is symmetric only to
 * round-off) or rounded differently fails here.
 *
 * The points are built to be hard: uniform on the sphere, a cluster of
 * hundreds of points within a few metres, exact duplicates, both poles at
 * several longitudes, the antimeridian from both sides, nearly antipodal
 * pairs (where Vincenty fails: NaN, which must rank last and never be
 * within r); on WGS84, f = 1/50 and f = -1/50, with karney, vincenty and
 * haversine, in m and km, float64 and float32, with and without targets,
 * serial and on the pool; and a single point, k >= n, r = 0, the max_pairs
 * cap and a stop request. Piles of copies (the engine evaluates one pair
 * per location and side of i, and offers the copies in increasing j): a
 * few locations repeated hundreds of times in interleaved order, at the
 * poles and on the antimeridian, against brute force; and 40,000 copies of
 * one point with k = 10, whose answer is known without the matrix (it was
 * quadratic before the grouping: the test asserts the result, not the
 * time).
 */
#include <stdint.h>

#include "check.h"
#include "compute/kinds/geodesic/kind.h"
#include "util/pool.h"

static pool *g_pool;
static atomic_int g_stop;

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  memset((*out)->data, 0xA5, (size_t)((*out)->size * tdtype_size(dt)));
  return 0;
}

static void ctx_init(job_ctx *c) {
  memset(c, 0, sizeof *c);
  c->job_id = "j_test";
  c->pool = g_pool;
  c->threads = 2;
  c->stop = &g_stop;
  c->result_alloc = heap_alloc;
  atomic_store(&g_stop, 0);
}

/* ---- point sets -------------------------------------------------------- */

static uint64_t g_rng = 0x243F6A8885A308D3ULL;
static double urand(void) {
  g_rng += 0x9E3779B97F4A7C15ULL;
  uint64_t z = g_rng;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

typedef struct pts {
  double *v; /* n x 2 */
  int64_t n, cap;
} pts;

static void add(pts *p, double lat, double lon) {
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    p->v = realloc(p->v, (size_t)p->cap * 2 * sizeof *p->v);
  }
  p->v[2 * p->n] = lat;
  p->v[2 * p->n + 1] = lon;
  p->n++;
}

static void add_uniform(pts *p, int k) {
  for (int c = 0; c < k; c++)
    add(p, asin(2 * urand() - 1) / GEOD_DEG, 360 * urand() - 180);
}

/* k points within about `metres` of (lat, lon), some of them repeated. */
static void add_cluster(pts *p, int k, double lat, double lon, double metres) {
  double s = metres / 111000.0;
  for (int c = 0; c < k; c++) {
    if (c % 7 == 3 && p->n > 0) { /* an exact duplicate of the last one */
      add(p, p->v[2 * (p->n - 1)], p->v[2 * (p->n - 1) + 1]);
      continue;
    }
    double la = lat + s * (urand() - 0.5);
    if (la > 90) la = 90;
    if (la < -90) la = -90;
    add(p, la, lon + s * (urand() - 0.5));
  }
}

/* The hard set: every case of the opening comment, in a mixed order. */
static void add_hard(pts *p, int uniform) {
  add_uniform(p, uniform);
  add_cluster(p, 60, 48.85, 2.35, 5);
  for (int c = 0; c < 6; c++) { /* both poles at several longitudes */
    add(p, 90, -180 + 60 * c);
    add(p, -90, -170 + 55 * c);
  }
  add(p, 89.99999, 10);
  add(p, -89.99999, -100);
  double am[] = {180, -180, 179.999, -179.999, 179.9999999, -179.9999999};
  for (int c = 0; c < 6; c++) add(p, 10 * urand() - 5, am[c]);
  for (int c = 0; c < 10; c++) { /* nearly antipodal pairs */
    double la = 40 * urand() - 20, lo = 340 * urand() - 170;
    add(p, la, lo);
    add(p, -la + 1e-3 * urand(), lo + 180 - 1e-3 * urand() - 360 * (lo > 0));
  }
  for (int c = 0; c < 5; c++) { /* duplicates of random earlier points */
    int64_t src = (int64_t)(urand() * (double)p->n);
    add(p, p->v[2 * src], p->v[2 * src + 1]);
    add(p, p->v[2 * src], p->v[2 * src + 1]);
  }
  add_uniform(p, uniform / 4);
}

/* ---- the reference -------------------------------------------------------- */

typedef struct cfg {
  const char *name;
  geod_method method;
  double a, f, unit;
  tdtype dt;
  int targets;
} cfg;

typedef struct ref {
  geod_plan *pl;
  tarray *mat; /* n x m, the matrix (float64 or float32) */
  int64_t n, m;
} ref;

static double M(const ref *r, int64_t i, int64_t j) {
  return tarray_get(r->mat, i * r->m + j);
}

/* Same value, bit for bit, in the dtype (two NaN are the same). */
static int same(tdtype dt, double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (dt == T_F32) {
    float fa = (float)a, fb = (float)b;
    return memcmp(&fa, &fb, sizeof fa) == 0;
  }
  return memcmp(&a, &b, sizeof a) == 0;
}

typedef struct hit {
  double d;
  int64_t j;
} hit;

static int hit_cmp(const void *pa, const void *pb) {
  const hit *a = pa, *b = pb;
  int an = isnan(a->d), bn = isnan(b->d);
  if (an != bn) return an - bn;
  if (!an && a->d != b->d) return a->d < b->d ? -1 : 1;
  return (a->j > b->j) - (a->j < b->j);
}

static int build(const cfg *c, const pts *p, const pts *t, ref *r) {
  terr e;
  terr_clear(&e);
  memset(r, 0, sizeof *r);
  int rc = geod_plan_build(c->method, c->a, c->f, 6371008.8, c->unit, 0, c->dt,
                           p->v, p->n, t ? t->v : NULL, t ? t->n : 0, &r->pl,
                           &e);
  CHECK_MSG(rc == 0, "%s: plan: %s", c->name, e.message);
  if (rc) return rc;
  r->n = r->pl->n;
  r->m = r->pl->m;
  int64_t sh[2] = {r->n, r->m};
  r->mat = tarray_new(c->dt, 2, sh);
  job_ctx ctx;
  ctx_init(&ctx);
  int64_t nc = 0;
  rc = geod_cpu_run(r->pl, 2, r->mat, &ctx, &nc, &e);
  CHECK_MSG(rc == 0, "%s: matrix: %s", c->name, e.message);
  return rc;
}

static void ref_free(ref *r) {
  geod_plan_free(r->pl);
  tarray_free(r->mat);
}

/* Row i's candidates (j != i without targets) sorted by (d, j), NaN last. */
static int64_t ref_row(const ref *r, int64_t i, hit *h) {
  int64_t c = 0;
  for (int64_t j = 0; j < r->m; j++) {
    if (!r->pl->has_targets && j == i) continue;
    h[c++] = (hit){M(r, i, j), j};
  }
  qsort(h, (size_t)c, sizeof *h, hit_cmp);
  return c;
}

static int run_q(const ref *r, const geoq *q, int width, geoq_out *out,
                 int64_t *nc, terr *e) {
  job_ctx ctx;
  ctx_init(&ctx);
  terr_clear(e);
  int rc = geoq_cpu_run(r->pl, q, width, &ctx, out, nc, e);
  if (!rc) {
    CHECK(atomic_load(&ctx.progress_done) == atomic_load(&ctx.progress_total));
  }
  return rc;
}

/* ---- the comparisons ------------------------------------------------------- */

static void check_knn(const char *name, const ref *r, int64_t k, int width) {
  geoq q = {.type = GEOQ_KNN, .k = k};
  geoq_out out;
  int64_t nc;
  terr e;
  int rc = run_q(r, &q, width, &out, &nc, &e);
  CHECK_MSG(rc == 0, "%s knn: %s", name, e.message);
  if (rc) return;
  int64_t ke = geoq_knn_k(r->pl, &q);
  CHECK(out.nparts == 2 && strcmp(out.name[0], "distance") == 0 &&
        strcmp(out.name[1], "index") == 0);
  CHECK(out.part[0]->dtype == r->pl->dtype && out.part[1]->dtype == T_I64);
  CHECK(out.part[0]->ndim == 2 && out.part[0]->shape[0] == r->n &&
        out.part[0]->shape[1] == ke && out.part[1]->shape[1] == ke);
  hit *h = malloc((size_t)(r->m + 1) * sizeof *h);
  int bad = 0;
  for (int64_t i = 0; i < r->n && !bad; i++) {
    int64_t c = ref_row(r, i, h);
    CHECK(c >= ke);
    for (int64_t s = 0; s < ke && !bad; s++) {
      double d = tarray_get(out.part[0], i * ke + s);
      int64_t j = ((int64_t *)out.part[1]->data)[i * ke + s];
      if (j != h[s].j || !same(r->pl->dtype, d, h[s].d)) {
        CHECK_MSG(0, "%s knn k=%lld width %d: row %lld rank %lld: got (%.17g, "
                  "%lld), want (%.17g, %lld)", name, (long long)k, width,
                  (long long)i, (long long)s, d, (long long)j, h[s].d,
                  (long long)h[s].j);
        bad = 1;
      }
    }
  }
  free(h);
  for (int p = 0; p < out.nparts; p++) tarray_free(out.part[p]);
}

static void check_radius(const char *name, const ref *r, double rad,
                         int width) {
  geoq q = {.type = GEOQ_RADIUS, .r = rad, .max_pairs = INT64_MAX / 32};
  geoq_out out;
  int64_t nc;
  terr e;
  int rc = run_q(r, &q, width, &out, &nc, &e);
  CHECK_MSG(rc == 0, "%s radius: %s", name, e.message);
  if (rc) return;
  CHECK(out.nparts == 3 && strcmp(out.name[0], "i") == 0 &&
        strcmp(out.name[1], "j") == 0 && strcmp(out.name[2], "distance") == 0);
  int64_t P = out.part[0]->shape[0], at = 0;
  const int64_t *oi = out.part[0]->data, *oj = out.part[1]->data;
  int bad = 0;
  for (int64_t i = 0; i < r->n && !bad; i++)
    for (int64_t j = r->pl->has_targets ? 0 : i + 1; j < r->m && !bad; j++) {
      double d = M(r, i, j);
      if (!(d <= rad)) continue;
      if (at >= P || oi[at] != i || oj[at] != j ||
          !same(r->pl->dtype, tarray_get(out.part[2], at), d)) {
        CHECK_MSG(0, "%s radius r=%g width %d: pair %lld: want (%lld, %lld, "
                  "%.17g)", name, rad, width, (long long)at, (long long)i,
                  (long long)j, d);
        bad = 1;
      }
      at++;
    }
  CHECK_MSG(bad || at == P, "%s radius r=%g: %lld pairs, want %lld", name, rad,
            (long long)P, (long long)at);
  for (int p = 0; p < out.nparts; p++) tarray_free(out.part[p]);
}

static const char *const op_name[] = {"min",  "argmin", "max",  "argmax",
                                      "mean", "sum",    "count"};

static void check_rowwise(const char *name, const ref *r, geoq_op op,
                          int has_within, double within, int width) {
  geoq q = {.type = GEOQ_ROWWISE, .op = op, .has_within = has_within,
            .within = within};
  geoq_out out;
  int64_t nc;
  terr e;
  int rc = run_q(r, &q, width, &out, &nc, &e);
  CHECK_MSG(rc == 0, "%s rowwise: %s", name, e.message);
  if (rc) return;
  CHECK(out.nparts == 1 && out.name[0] == NULL);
  tarray *a = out.part[0];
  CHECK(a->dtype == geoq_rowwise_dtype(r->pl, op) && a->ndim == 1 &&
        a->shape[0] == r->n);
  int bad = 0;
  for (int64_t i = 0; i < r->n && !bad; i++) {
    double sum = 0, best = NAN;
    int64_t cnt = 0, arg = -1;
    for (int64_t j = 0; j < r->m; j++) {
      if (!r->pl->has_targets && j == i) continue;
      double d = M(r, i, j);
      if (isnan(d) || (has_within && !(d <= within))) continue;
      cnt++;
      sum += d;
      int better = op == GEOQ_MAX || op == GEOQ_ARGMAX ? d > best : d < best;
      if (arg < 0 || better) best = d, arg = j;
    }
    double want, got;
    if (a->dtype == T_I64) {
      want = (double)(op == GEOQ_COUNT ? cnt : arg);
      got = (double)((int64_t *)a->data)[i];
    } else {
      want = op == GEOQ_SUM ? sum
             : op == GEOQ_MEAN ? (cnt ? sum / (double)cnt : NAN)
                               : best;
      if (r->pl->dtype == T_F32) want = (double)(float)want;
      got = tarray_get(a, i);
    }
    if (!same(a->dtype == T_I64 ? T_F64 : a->dtype, got, want)) {
      CHECK_MSG(0, "%s rowwise %s within %s%g width %d: row %lld: got %.17g, "
                "want %.17g", name, op_name[op], has_within ? "" : "none ",
                within, width, (long long)i, got, want);
      bad = 1;
    }
  }
  tarray_free(a);
}

/* Every query on one configuration; `full` picks which of the every-pair
 * rowwise ops run (they cost a matrix each). */
static void check_all(const cfg *c, const pts *p, const pts *t, int full) {
  ref r;
  if (build(c, p, t, &r)) {
    ref_free(&r);
    return;
  }
  int64_t nan = 0;
  for (int64_t x = 0; x < r.mat->size; x++) nan += isnan(tarray_get(r.mat, x));
  if (c->method == GEOD_VINCENTY && !c->targets) {
    CHECK_MSG(nan > 0, "%s: the set has no Vincenty NaN to rank", c->name);
    /* a full-row op evaluates every ordered pair once: the non-converged
     * count is the matrix's NaN count (each pair twice, as mirrored) */
    geoq q = {.type = GEOQ_ROWWISE, .op = GEOQ_COUNT};
    geoq_out out;
    int64_t nc = -1;
    terr e;
    CHECK(run_q(&r, &q, 2, &out, &nc, &e) == 0 && nc == nan);
    if (out.nparts) tarray_free(out.part[0]);
  }
  double km = 1000 / c->unit; /* one kilometre in output units */
  for (int w = 1; w <= 2; w++) {
    check_knn(c->name, &r, 1, w);
    check_knn(c->name, &r, w == 1 ? 7 : 16, w);
    check_radius(c->name, &r, w == 1 ? 0 : 2 * km, w);
    check_rowwise(c->name, &r, GEOQ_MIN, 0, 0, w);
    check_rowwise(c->name, &r, GEOQ_ARGMIN, 1, 0.003 * km, w);
    check_rowwise(c->name, &r, (geoq_op)(w == 1 ? GEOQ_COUNT : GEOQ_SUM), 1,
                  500 * km, w);
    check_rowwise(c->name, &r, (geoq_op)(w == 1 ? GEOQ_ARGMAX : GEOQ_MEAN), 1,
                  3000 * km, w);
  }
  check_knn(c->name, &r, GEOQ_MAX_K, 2); /* k >= n: every candidate */
  check_radius(c->name, &r, 21000 * km, 1); /* nearly every pair */
  static const geoq_op fulls[] = {GEOQ_MAX, GEOQ_ARGMAX, GEOQ_SUM, GEOQ_MEAN,
                                  GEOQ_COUNT};
  for (int o = 0; o < 5; o++)
    if (full & (1 << o)) check_rowwise(c->name, &r, fulls[o], 0, 0, 1 + (o & 1));
  ref_free(&r);
}

#define WGS_A GEOD_WGS84_A
#define WGS_F GEOD_WGS84_F

TEST(hard_sets_equal_brute_force) {
  pts p = {0}, t = {0};
  add_hard(&p, 160);
  add_uniform(&t, 40);
  add_cluster(&t, 40, 48.85, 2.35, 5); /* targets inside the points' cluster */
  add(&t, 90, 0);
  add(&t, -90, 33);
  add(&t, 0, 180);
  add(&t, 0, -179.999);
  const cfg cs[] = {
      {"karney wgs84 m f64", GEOD_KARNEY, WGS_A, WGS_F, 1, T_F64, 0},
      {"karney wgs84 km f32 targets", GEOD_KARNEY, WGS_A, WGS_F, 1000, T_F32, 1},
      {"karney f=1/50 m f32", GEOD_KARNEY, WGS_A, 1.0 / 50, 1, T_F32, 0},
      {"karney f=-1/50 km f64 targets", GEOD_KARNEY, WGS_A, -1.0 / 50, 1000,
       T_F64, 1},
      {"karney f=-1/50 m f64", GEOD_KARNEY, WGS_A, -1.0 / 50, 1, T_F64, 0},
      {"vincenty wgs84 m f64", GEOD_VINCENTY, WGS_A, WGS_F, 1, T_F64, 0},
      {"vincenty f=1/50 km f32", GEOD_VINCENTY, WGS_A, 1.0 / 50, 1000, T_F32, 0},
      {"vincenty wgs84 m f64 targets", GEOD_VINCENTY, WGS_A, WGS_F, 1, T_F64, 1},
      {"haversine km f64", GEOD_HAVERSINE, WGS_A, WGS_F, 1000, T_F64, 0},
      {"haversine m f32 targets", GEOD_HAVERSINE, WGS_A, WGS_F, 1, T_F32, 1},
  };
  int n = (int)(sizeof cs / sizeof cs[0]);
  for (int c = 0; c < n; c++) {
    /* the every-pair ops spread over the configurations, each seen on
     * karney, vincenty and haversine at least once */
    int full = c < 5 ? 1 << c : (c < 8 ? 0x1f : 1 << (c - 8) * 3);
    check_all(&cs[c], &p, cs[c].targets ? &t : NULL, full);
  }
  free(p.v);
  free(t.v);
}

/* A dense cluster: thousands of points within metres (haversine, to keep
 * the reference matrix cheap), and hundreds on the ellipsoid. */
TEST(dense_clusters) {
  pts p = {0};
  add_cluster(&p, 1500, -33.9, 151.2, 3);
  add_cluster(&p, 500, -33.9, 151.2001, 1);
  cfg hv = {"haversine cluster", GEOD_HAVERSINE, WGS_A, WGS_F, 1, T_F64, 0};
  ref r;
  if (!build(&hv, &p, NULL, &r)) {
    check_knn(hv.name, &r, 10, 2);
    check_knn(hv.name, &r, 1, 1);
    check_radius(hv.name, &r, 0, 2);
    check_radius(hv.name, &r, 0.5, 2);
    check_rowwise(hv.name, &r, GEOQ_COUNT, 1, 1.0, 2);
  }
  ref_free(&r);
  pts s = {0};
  add_cluster(&s, 500, 0.0, 179.99995, 2); /* across the antimeridian */
  cfg ka = {"karney cluster f32", GEOD_KARNEY, WGS_A, WGS_F, 1, T_F32, 0};
  if (!build(&ka, &s, NULL, &r)) {
    check_knn(ka.name, &r, 10, 2);
    check_radius(ka.name, &r, 1.0, 1);
    check_rowwise(ka.name, &r, GEOQ_ARGMIN, 0, 0, 2);
  }
  ref_free(&r);
  free(p.v);
  free(s.v);
}

/* Piles: six locations (two at the poles, two on the antimeridian from
 * both sides) repeated in interleaved order, a cluster within 1 m with
 * its own copies, and targets from the same piles: every tie of equal
 * distances broken by the smaller index, r = 0 catching exactly the
 * copies, k >= n. */
TEST(piles_of_copies) {
  static const double loc[6][2] = {{12.5, -43.25}, {90, 0},     {-90, 45},
                                   {0, 180},       {0, -180},   {48.85, 2.35}};
  pts p = {0}, t = {0};
  for (int c = 0; c < 200; c++) {
    int l = (int)(urand() * 6);
    add(&p, loc[l][0], loc[l][1]);
  }
  add_cluster(&p, 60, 48.85, 2.35, 1);
  for (int c = 0; c < 60; c++) {
    int l = (int)(urand() * 6);
    add(&t, loc[l][0], loc[l][1]);
  }
  const cfg cs[] = {
      {"piles karney m f64", GEOD_KARNEY, WGS_A, WGS_F, 1, T_F64, 0},
      {"piles karney km f32 targets", GEOD_KARNEY, WGS_A, WGS_F, 1000, T_F32, 1},
      {"piles vincenty m f64", GEOD_VINCENTY, WGS_A, WGS_F, 1, T_F64, 0},
      {"piles haversine m f32", GEOD_HAVERSINE, WGS_A, WGS_F, 1, T_F32, 0},
  };
  for (int c = 0; c < 4; c++) {
    ref r;
    if (!build(&cs[c], &p, cs[c].targets ? &t : NULL, &r)) {
      double m1 = 1 / cs[c].unit; /* one metre in output units */
      check_knn(cs[c].name, &r, 1, 1);
      check_knn(cs[c].name, &r, 10, 2);
      check_knn(cs[c].name, &r, 40, 1);
      check_knn(cs[c].name, &r, GEOQ_MAX_K, 2); /* k > n */
      check_radius(cs[c].name, &r, 0, 2);
      check_radius(cs[c].name, &r, m1, 1);
      check_rowwise(cs[c].name, &r, GEOQ_ARGMIN, 1, 0.5 * m1, 2);
      check_rowwise(cs[c].name, &r, GEOQ_COUNT, 1, 0, 1);
    }
    ref_free(&r);
  }
  free(p.v);
  free(t.v);
}

/* 40,000 copies of one point, k = 10: row i's neighbours are the ten
 * smallest j != i, each at the distance the solver gives the pair in the
 * matrix's orientation (p[min], p[max]) — no matrix needed. */
TEST(forty_thousand_copies) {
  enum { N = 40000, K = 10 };
  pts p = {0};
  for (int c = 0; c < N; c++) add(&p, -33.865, 151.2094);
  cfg kc = {"copies", GEOD_KARNEY, WGS_A, WGS_F, 1, T_F64, 0};
  geod_plan *pl = NULL;
  terr e;
  terr_clear(&e);
  int rc = geod_plan_build(kc.method, kc.a, kc.f, 6371008.8, 1, 0, T_F64,
                           p.v, N, NULL, 0, &pl, &e);
  CHECK_MSG(rc == 0, "plan: %s", e.message);
  if (rc) {
    free(p.v);
    return;
  }
  double want;
  long long nc0 = 0;
  geod_row_compute(pl, &pl->p[0], &pl->p[1], 1, &want, &nc0);
  geoq q = {.type = GEOQ_KNN, .k = K};
  geoq_out out;
  int64_t nc;
  job_ctx ctx;
  ctx_init(&ctx);
  terr_clear(&e);
  rc = geoq_cpu_run(pl, &q, 2, &ctx, &out, &nc, &e);
  CHECK_MSG(rc == 0, "copies knn: %s", e.message);
  if (!rc) {
    CHECK(out.part[0]->shape[0] == N && out.part[0]->shape[1] == K);
    const double *d = out.part[0]->data;
    const int64_t *ix = out.part[1]->data;
    int bad = 0;
    for (int64_t i = 0; i < N && !bad; i++)
      for (int64_t s = 0; s < K && !bad; s++) {
        int64_t wj = s < i ? s : s + 1; /* the K smallest j != i */
        if (ix[i * K + s] != wj || !same(T_F64, d[i * K + s], want)) {
          CHECK_MSG(0, "row %lld rank %lld: got (%.17g, %lld), want (%.17g, "
                    "%lld)", (long long)i, (long long)s, d[i * K + s],
                    (long long)ix[i * K + s], want, (long long)wj);
          bad = 1;
        }
      }
    for (int c = 0; c < out.nparts; c++) tarray_free(out.part[c]);
  }
  geod_plan_free(pl);
  free(p.v);
}

/* One point: no candidate without targets; one with a target. */
TEST(single_point) {
  pts p = {0}, t = {0};
  add(&p, 12, 34);
  add(&t, 12, 34.5);
  cfg c = {"one point", GEOD_KARNEY, WGS_A, WGS_F, 1, T_F64, 0};
  ref r;
  if (!build(&c, &p, NULL, &r)) {
    geoq q = {.type = GEOQ_KNN, .k = 5};
    geoq_out out;
    int64_t nc;
    terr e;
    CHECK(run_q(&r, &q, 2, &out, &nc, &e) == 0);
    CHECK(out.nparts == 2 && out.part[0]->shape[0] == 1 &&
          out.part[0]->shape[1] == 0 && out.part[1]->shape[1] == 0);
    for (int k = 0; k < out.nparts; k++) tarray_free(out.part[k]);
    check_radius(c.name, &r, 1e7, 1);
    for (int op = GEOQ_MIN; op <= GEOQ_COUNT; op++)
      check_rowwise(c.name, &r, (geoq_op)op, op & 1, 1e7, 1);
  }
  ref_free(&r);
  c.targets = 1;
  if (!build(&c, &p, &t, &r)) {
    check_knn("one point, one target", &r, 5, 1);
    check_radius("one point, one target", &r, 1e5, 2);
    check_rowwise("one point, one target", &r, GEOQ_MEAN, 0, 0, 1);
  }
  ref_free(&r);
  free(p.v);
  free(t.v);
}

/* More pairs than max_pairs: T_ENOSPACE naming the field, with the count
 * reached; nothing left allocated (ASan). A stop request: canceled. */
TEST(cap_and_stop) {
  pts p = {0};
  add_uniform(&p, 300);
  cfg c = {"cap", GEOD_HAVERSINE, WGS_A, WGS_F, 1000, T_F64, 0};
  ref r;
  if (!build(&c, &p, NULL, &r)) {
    for (int w = 1; w <= 2; w++) {
      geoq q = {.type = GEOQ_RADIUS, .r = 20000, .max_pairs = 100};
      geoq_out out;
      int64_t nc;
      terr e;
      int rc = run_q(&r, &q, w, &out, &nc, &e);
      CHECK(rc == T_ENOSPACE && out.nparts == 0);
      CHECK_STR(e.field, "params.query.radius.max_pairs");
      long long reached = 0;
      const char *at = strstr(e.message, "(");
      CHECK(at && sscanf(at, "(%lld found", &reached) == 1 && reached > 100);
      /* exactly max_pairs pairs fit */
      q.r = 1e9;
      q.max_pairs = 300 * 299 / 2;
      CHECK(run_q(&r, &q, w, &out, &nc, &e) == 0 &&
            out.part[0]->shape[0] == q.max_pairs);
      for (int k = 0; k < out.nparts; k++) tarray_free(out.part[k]);
      q.max_pairs--;
      CHECK(run_q(&r, &q, w, &out, &nc, &e) == T_ENOSPACE);
    }
    job_ctx ctx;
    ctx_init(&ctx);
    atomic_store(&g_stop, 1);
    geoq q = {.type = GEOQ_KNN, .k = 3};
    geoq_out out;
    int64_t nc;
    terr e;
    CHECK(geoq_cpu_run(r.pl, &q, 1, &ctx, &out, &nc, &e) == T_ECANCELED);
    CHECK(out.nparts == 0);
    atomic_store(&g_stop, 2);
    CHECK(geoq_cpu_run(r.pl, &q, 2, &ctx, &out, &nc, &e) == T_ETIMEOUT);
    atomic_store(&g_stop, 0);
  }
  ref_free(&r);
  free(p.v);
}

/* ---- params.query through the kind ----------------------------------------- */

static const tenv g_env = {.owner = "", .max_elems = 2000000000};

static json_t *parse(const char *text) {
  json_error_t je;
  json_t *v = json_loads(text, 0, &je);
  if (!v) fprintf(stderr, "bad test JSON: %s: %s\n", text, je.text);
  return v;
}

#define PTS "\"points\": [[0, 0], [0, 1], [1, 1], [1, 0.5]]"

static void expect_400(const char *query, const char *field) {
  char buf[512];
  snprintf(buf, sizeof buf, "{" PTS ", %s}", query);
  json_t *p = parse(buf);
  job_estimate est;
  terr e;
  terr_clear(&e);
  int rc = kind_geodesic_ops.check(p, &g_env, &est, &e);
  CHECK_MSG(rc == T_EINVAL && strcmp(e.field, field) == 0,
            "%s: rc %d field '%s' (%s), want '%s'", query, rc, e.field,
            e.message, field);
  void *plan = NULL;
  terr_clear(&e);
  rc = kind_geodesic_ops.prepare(p, &g_env, &plan, &e);
  CHECK_MSG(rc == T_EINVAL && strcmp(e.field, field) == 0 && !plan,
            "%s: prepare rc %d field '%s'", query, rc, e.field);
  kind_geodesic_ops.release(plan);
  json_decref(p);
}

TEST(params_refused) {
  expect_400("\"query\": {\"knn\": {\"k\": 0}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {\"k\": -3}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {\"k\": 1025}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {\"k\": 2.5}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {\"k\": \"3\"}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {}}", "params.query.knn.k");
  expect_400("\"query\": {\"knn\": {\"k\": 3, \"kk\": 1}}", "params.query.knn");
  expect_400("\"query\": {\"knn\": 3}", "params.query.knn");
  expect_400("\"query\": {\"radius\": {\"r\": -1}}", "params.query.radius.r");
  expect_400("\"query\": {\"radius\": {}}", "params.query.radius.r");
  expect_400("\"query\": {\"radius\": {\"r\": \"5\"}}", "params.query.radius.r");
  expect_400("\"query\": {\"radius\": {\"r\": 5, \"max_pairs\": 0}}",
             "params.query.radius.max_pairs");
  expect_400("\"query\": {\"radius\": {\"r\": 5, \"max_pairs\": 1.5}}",
             "params.query.radius.max_pairs");
  expect_400("\"query\": {\"radius\": {\"r\": 5, \"rr\": 1}}",
             "params.query.radius");
  expect_400("\"query\": {\"rowwise\": {\"op\": \"median\"}}",
             "params.query.rowwise.op");
  expect_400("\"query\": {\"rowwise\": {\"op\": 3}}", "params.query.rowwise.op");
  expect_400("\"query\": {\"rowwise\": {}}", "params.query.rowwise.op");
  expect_400("\"query\": {\"rowwise\": {\"op\": \"min\", \"within\": -1}}",
             "params.query.rowwise.within");
  expect_400("\"query\": {\"rowwise\": {\"op\": \"min\", \"within\": null}}",
             "params.query.rowwise.within");
  expect_400("\"query\": {\"rowwise\": {\"op\": \"min\", \"x\": 1}}",
             "params.query.rowwise");
  expect_400("\"query\": {\"nearest\": {\"k\": 3}}", "params.query");
  expect_400("\"query\": {\"knn\": {\"k\": 3}, \"radius\": {\"r\": 1}}",
             "params.query");
  expect_400("\"query\": {}", "params.query");
  expect_400("\"query\": [1]", "params.query");
  expect_400("\"query\": {\"knn\": {\"k\": 3}}, \"layout\": \"square\"",
             "params.layout");
  expect_400("\"query\": {\"knn\": {\"k\": 3}}, \"layout\": \"condensed\"",
             "params.layout");
}

static int estimate(const char *text, const tenv *env, job_estimate *est,
                    terr *e) {
  json_t *p = parse(text);
  terr_clear(e);
  int rc = kind_geodesic_ops.check(p, env, est, e);
  json_decref(p);
  return rc;
}

TEST(estimates) {
  job_estimate est;
  terr e;
  CHECK(estimate("{" PTS ", \"query\": {\"knn\": {\"k\": 2}}}", &g_env, &est,
                 &e) == 0);
  CHECK(est.out_dtype == T_F64 && est.out_ndim == 2 && est.out_shape[0] == 4 &&
        est.out_shape[1] == 2 && est.out_bytes == 4 * 2 * 16 && est.size == 4);
  CHECK(est.work > 0 && est.work < 4.0 * 3 * 100);
  /* k beyond the candidates: k_eff = n - 1 */
  CHECK(estimate("{" PTS ", \"dtype\": \"float32\", \"query\": {\"knn\": "
                 "{\"k\": 1024}}}", &g_env, &est, &e) == 0);
  CHECK(est.out_dtype == T_F32 && est.out_shape[1] == 3 &&
        est.out_bytes == 4 * 3 * (4 + 8));
  /* radius: the default cap follows --max-result and fits it exactly */
  tenv env = g_env;
  env.max_result_bytes = 2400;
  CHECK(estimate("{" PTS ", \"query\": {\"radius\": {\"r\": 5}}}", &env, &est,
                 &e) == 0);
  CHECK(est.out_dtype == T_I64 && est.out_ndim == 1 &&
        est.out_shape[0] == 100 && est.out_bytes == 2400);
  CHECK(estimate("{" PTS ", \"query\": {\"radius\": {\"r\": 5}}}", &g_env,
                 &est, &e) == 0);
  /* with the default 20 GiB result limit: GEOQ_DEFAULT_MAX_PAIRS, 2.4 GB,
   * which the memory budget of an ordinary machine admits */
  CHECK(est.out_shape[0] == GEOQ_DEFAULT_MAX_PAIRS &&
        est.out_bytes == GEOQ_DEFAULT_MAX_PAIRS * 24);
  CHECK(estimate("{" PTS ", \"query\": {\"radius\": {\"r\": 5, \"max_pairs\": "
                 "7}}}", &env, &est, &e) == 0);
  CHECK(est.out_shape[0] == 7 && est.out_bytes == 7 * 24);
  /* more pairs than any array may hold: 413 */
  CHECK(estimate("{" PTS ", \"query\": {\"radius\": {\"r\": 5, \"max_pairs\": "
                 "2000000001}}}", &env, &est, &e) == T_ETOOLARGE);
  /* rowwise: one value per point; every pair for the full ops */
  CHECK(estimate("{" PTS ", \"query\": {\"rowwise\": {\"op\": \"argmax\"}}}",
                 &g_env, &est, &e) == 0);
  CHECK(est.out_dtype == T_I64 && est.out_ndim == 1 && est.out_shape[0] == 4 &&
        est.out_bytes == 32 && est.work == 4.0 * 3);
  CHECK(estimate("{" PTS ", \"dtype\": \"float32\", \"query\": {\"rowwise\": "
                 "{\"op\": \"mean\", \"within\": 0}}}", &g_env, &est, &e) == 0);
  CHECK(est.out_dtype == T_F32 && est.out_bytes == 16);
  /* a query's layout: none */
  json_t *p = parse("{" PTS ", \"query\": {\"knn\": {\"k\": 2}}}");
  CHECK(kind_geodesic_ops.result_layout(p) == NULL);
  json_decref(p);
}

/* ---- the kind's run: parts through result_part -------------------------------- */

typedef struct parts_seen {
  int n;
  int index[JOB_MAX_PARTS];
  const char *name[JOB_MAX_PARTS];
  tarray *a[JOB_MAX_PARTS];
} parts_seen;

static int record_part(job_ctx *ctx, int index, const char *name, tarray *a,
                       terr *e) {
  parts_seen *s = ctx->ud;
  (void)e;
  s->index[s->n] = index;
  s->name[s->n] = name;
  s->a[s->n++] = a;
  return 0;
}

static int fail_part(job_ctx *ctx, int index, const char *name, tarray *a,
                     terr *e) {
  if (index == 0) return 0;
  tarray_free(a); /* the scheduler's once handed over, even on failure */
  (void)ctx, (void)name;
  return terr_set(e, T_EIO, "", -1, "disk");
}

static int run_json(const char *text, tbackend b, job_ctx *ctx, tarray **out,
                    terr *e) {
  json_t *p = parse(text);
  void *plan = NULL;
  *out = NULL;
  terr_clear(e);
  int rc = kind_geodesic_ops.prepare(p, &g_env, &plan, e);
  if (!rc) rc = kind_geodesic_ops.run(plan, b, ctx, out, e);
  kind_geodesic_ops.release(plan);
  json_decref(p);
  return rc;
}

TEST(kind_run_parts) {
  job_ctx ctx;
  parts_seen seen;
  tarray *res = NULL;
  terr e;
  const char *knn = "{" PTS ", \"query\": {\"knn\": {\"k\": 2}}}";
  /* no result_part: knn (two parts) cannot be stored */
  ctx_init(&ctx);
  CHECK(run_json(knn, B_CPU, &ctx, &res, &e) == T_EINTERNAL && !res);
  /* with it: part 0 returned and named, part 1 handed over */
  for (int b = B_SERIAL; b <= B_CPU; b++) {
    ctx_init(&ctx);
    memset(&seen, 0, sizeof seen);
    ctx.ud = &seen;
    ctx.result_part = record_part;
    CHECK(run_json(knn, (tbackend)b, &ctx, &res, &e) == 0);
    CHECK(seen.n == 2 && seen.index[0] == 0 && seen.index[1] == 1);
    CHECK(seen.n == 2 && seen.a[0] == res && strcmp(seen.name[0], "distance") == 0 &&
          strcmp(seen.name[1], "index") == 0);
    /* points 0 (0,0) and 1 (0,1): 0's nearest is 3 (1, 0.5)? no: 1 deg
     * of longitude on the equator is 111.3 km, (1, 0.5) is ~124 km */
    CHECK(seen.n == 2 && ((int64_t *)seen.a[1]->data)[0] == 1);
    tarray_free(res);
    if (seen.n == 2) tarray_free(seen.a[1]);
  }
  /* a part refused: the run fails, nothing leaks */
  ctx_init(&ctx);
  ctx.result_part = fail_part;
  CHECK(run_json("{" PTS ", \"query\": {\"radius\": {\"r\": 1e6}}}", B_CPU,
                 &ctx, &res, &e) == T_EIO && !res);
  /* rowwise: one unnamed part, no result_part needed */
  ctx_init(&ctx);
  CHECK(run_json("{" PTS ", \"query\": {\"rowwise\": {\"op\": \"count\", "
                 "\"within\": 120000}}}", B_SERIAL, &ctx, &res, &e) == 0);
  CHECK(res && res->dtype == T_I64 && res->shape[0] == 4);
  if (res) {
    const int64_t *c = res->data;
    /* (0,0)-(0,1) 111 km; (0,1)-(1,1) 110.6 km; (1,1)-(1,0.5) 55.7 km;
     * (0,0)-(1,0.5) 123.6 km; (0,1)-(1,0.5) 123.6 km; (0,0)-(1,1) 157 km */
    CHECK(c[0] == 1 && c[1] == 2 && c[2] == 2 && c[3] == 1);
  }
  tarray_free(res);
#if !TESSEL_HAVE_CUDA
  /* cuda without CUDA: unavailable, cleanly */
  ctx_init(&ctx);
  ctx.result_part = record_part;
  memset(&seen, 0, sizeof seen);
  ctx.ud = &seen;
  int rc = run_json(knn, B_CUDA, &ctx, &res, &e);
  CHECK(rc != 0 && !res && seen.n == 0);
#endif
}

int main(void) {
  g_pool = pool_create(2, NULL, NULL);
  RUN(params_refused);
  RUN(estimates);
  RUN(kind_run_parts);
  RUN(single_point);
  RUN(cap_and_stop);
  RUN(dense_clusters);
  RUN(hard_sets_equal_brute_force);
  RUN(piles_of_copies);
  RUN(forty_thousand_copies);
  pool_destroy(g_pool);
  return check_summary();
}
