/* test_geoquery_gpu.c — the geodesic queries on CUDA GPUs
 * (compute/kinds/geodesic/query/query.cu behind gpu_geoq), run on the device machine.
 *
 * Exits 77 ("SKIPPED: ...") without CUDA in the build or a device at run
 * time. The reference is brute force over the GPU matrix of the same plan
 * (cuda_geodesic into a host array, the resident square path: each pair
 * computed once from (p[min], p[max]) and mirrored; with targets every
 * (p[i], q[j])), ranked on the host by query.h's rules. Every case asserts:
 *  - knn: distances bit-identical (memcmp) and indices equal to the first
 *    k_eff of each row sorted by (d, j), NaN last, self left out;
 *  - radius: the same pairs (i, j) in (i, j) order with bit-identical
 *    distances (without targets i < j);
 *  - rowwise: min, max, argmin, argmax and count exact, sum and mean within
 *    1e-12 relative, with and without `within`;
 *  - progress complete (done == total > 0), every borrowed GPU returned.
 * The cases: every pair of full rows (knn with k = n - 1) for every method,
 * f = 1/50 and -1/50 and dtype, so that the query and matrix kernels agree
 * bit for bit everywhere, not only near; point sets built to be hard
 * (uniform on the sphere, dense clusters with duplicates, both poles, the
 * antimeridian, nearly antipodal pairs) for WGS84 and f = 1/50, karney /
 * vincenty / haversine, float64 and float32, with and without targets,
 * k >= n, r = 0, a single point, k = 1024, a small gpu_mem_limit (many
 * chunks), and — when the host has 2 GPUs — a job_ctx whose gpu_borrow
 * lends device 1. Parts come from a result_alloc that poisons them with
 * NaN / -7, so an unwritten element fails. Errors: a radius over
 * max_pairs fails with T_ENOSPACE naming params.query.radius.max_pairs and
 * hands out no part; a cancel before the first chunk and one after the
 * first of 12 fail with T_ECANCELED; a missing device with T_EDEVICE; the
 * next call works.
 * Piles against the CPU engine (geoq_cpu_run, itself checked against brute
 * force in tests/unit/test_geoquery.c): a few locations repeated in
 * interleaved order (poles, antimeridian), a cluster within 1 m with
 * copies, and 40,000 copies of one point with k = 10 (no matrix at that
 * size): knn indices equal and distances bit-identical to the CPU's, with
 * and without targets, float64 and float32.
 * The host index on the job's CPU pool (geoq_gpu_job.par, pool_for):
 * 270,000 clustered points (copies included) with and without targets,
 * knn k = 10 and rowwise argmin on one thread and on pools 3 and 4 wide,
 * every part bit-identical (memcmp) to the one-thread run's.
 * --time adds the timing case (printed, never asserted): n = 10^6 uniform
 * and clustered, knn k = 10 karney WGS84, radius r = 1 km clustered,
 * beside the matrix kernel's rate (cuda_geodesic_bench).
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "compute/kinds/geodesic/kind.h"
#include "compute/kinds/geodesic/plan.h"
#include "compute/kinds/geodesic/query/query_gpu.h"
#include "util/pool.h"
#include "util/util.h"

#if TESSEL_HAVE_CUDA
#include "gpu_test_util.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"
#include "compute/kinds/geodesic/query/query_cuda.h"

static int g_ngpu;
static int g_cases;

/* ---- point sets --------------------------------------------------------- */

enum { S_UNIFORM = 0, S_CLUSTER, S_POLES, S_ANTIMERIDIAN, S_ANTIPODAL, S_NSET,
       /* outside test_query_sets' loop: */
       S_PILES = S_NSET, S_TIGHT, S_COPIES };
static const char *const set_names[S_NSET] = {"uniform", "clusters+dups",
                                              "poles", "antimeridian",
                                              "antipodal"};

static double clampd(double x, double lo, double hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* n points (lat, lon) of set `set`. */
static double *make_set(int set, int64_t n, uint64_t seed) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof(double));
  uint64_t s = seed * 7919 + 17;
  double clat[8], clon[8];
  for (int c = 0; c < 8; c++)
    clat[c] = asin(tu_uniform(&s, -1, 1)) / GEOD_DEG,
    clon[c] = tu_uniform(&s, -180, 180);
  for (int64_t i = 0; i < n; i++) {
    double lat, lon;
    switch (set) {
      case S_PILES: { /* six locations, interleaved */
        static const double loc[6][2] = {{12.5, -43.25}, {90, 0}, {-90, 45},
                                         {0, 180}, {0, -180}, {48.85, 2.35}};
        int l = (int)(tu_next(&s) % 6);
        lat = loc[l][0], lon = loc[l][1];
        break;
      }
      case S_TIGHT: /* within 1 m, a third of them copies */
        if (i > 0 && tu_next(&s) % 3 == 0) {
          int64_t k = (int64_t)(tu_next(&s) % (uint64_t)i);
          lat = p[2 * k], lon = p[2 * k + 1];
          break;
        }
        lat = 48.85 + tu_uniform(&s, -4.5e-6, 4.5e-6);
        lon = 2.35 + tu_uniform(&s, -6.5e-6, 6.5e-6);
        break;
      case S_COPIES:
        lat = -33.865, lon = 151.2094;
        break;
      case S_CLUSTER: {
        int c = (int)(tu_next(&s) % 8);
        if (i > 0 && tu_next(&s) % 5 == 0) { /* a duplicate */
          int64_t k = (int64_t)(tu_next(&s) % (uint64_t)i);
          lat = p[2 * k], lon = p[2 * k + 1];
          break;
        }
        lat = clampd(clat[c] + tu_uniform(&s, -0.01, 0.01), -90, 90);
        lon = clon[c] + tu_uniform(&s, -0.01, 0.01);
        break;
      }
      case S_POLES: {
        int north = tu_next(&s) % 2;
        double d = tu_next(&s) % 7 == 0 ? 0 : tu_uniform(&s, 0, 2);
        lat = north ? 90 - d : -90 + d;
        lon = tu_uniform(&s, -180, 180);
        break;
      }
      case S_ANTIMERIDIAN:
        lat = tu_uniform(&s, -60, 60);
        lon = (tu_next(&s) % 2 ? 180 : -180) + tu_uniform(&s, -0.5, 0.5);
        if (tu_next(&s) % 9 == 0) lon = tu_next(&s) % 2 ? 180 : -180;
        break;
      case S_ANTIPODAL:
        if (i % 2 == 1) { /* near the antipode of the previous point */
          lat = clampd(-p[2 * (i - 1)] + tu_uniform(&s, -1e-3, 1e-3), -90, 90);
          lon = p[2 * (i - 1) + 1] + 180 + tu_uniform(&s, -1e-3, 1e-3);
        } else {
          lat = tu_uniform(&s, -3, 3); /* equatorial: the hard ones */
          lon = tu_uniform(&s, -180, 180);
        }
        break;
      default:
        lat = asin(tu_uniform(&s, -1, 1)) / GEOD_DEG;
        lon = tu_uniform(&s, -180, 180);
        break;
    }
    p[2 * i] = lat;
    p[2 * i + 1] = lon;
  }
  return p;
}

/* ---- the job context ---------------------------------------------------- */

typedef struct qjob {
  tu_job j;
  int borrowed, returned, lend; /* lend: device 1 may be lent */
  int cancel_at;                /* >0: stop once progress reaches it */
  int done, total;              /* progress seen by the callbacks below */
} qjob;

static int lend(job_ctx *ctx, int dev) {
  qjob *q = (qjob *)ctx;
  if (!q->lend || dev != 1) return -1;
  q->borrowed++;
  return 0;
}
static void give_back(job_ctx *ctx, int dev) {
  qjob *q = (qjob *)ctx;
  if (dev == 1) q->returned++;
}

/* geoq_gpu_job callbacks for cuda_geoq called directly (ctx: a qjob). */
static int cb_stopped(void *c) {
  qjob *q = c;
  return q->cancel_at > 0 && q->done >= q->cancel_at ? T_ECANCELED : 0;
}
static void cb_progress(void *c, int64_t add) { ((qjob *)c)->done += (int)add; }
static void cb_total(void *c, int64_t add) { ((qjob *)c)->total += (int)add; }
static int tj_alloc(void *c, tdtype dt, int ndim, const int64_t *shape,
                    tarray **out, terr *e) {
  (void)c;
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}
static int tj_borrow(void *c, int dev) { return lend(c, dev); }
static void tj_give_back(void *c, int dev) { give_back(c, dev); }

static void qjob_init(qjob *q, int lend2) {
  memset(q, 0, sizeof *q);
  tu_job_init(&q->j, 0);
  q->j.ctx.result_alloc = tu_alloc_poison;
  q->j.ctx.ngpu = g_ngpu;
  q->lend = lend2 && g_ngpu > 1;
  q->j.ctx.gpu_borrow = lend;
  q->j.ctx.gpu_return = give_back;
}

static void out_free(geoq_out *o) {
  for (int k = 0; k < o->nparts; k++) tarray_free(o->part[k]);
  o->nparts = 0;
}

/* ---- the reference ------------------------------------------------------ */

/* The GPU matrix of the plan, on the resident path (no memory knob). */
static tarray *matrix(const geod_plan *pl) {
  geod_plan p = *pl;
  p.gpu_mem_limit = 0;
  p.gpu_chunk_bytes = 0;
  int64_t sh[2] = {p.n, p.m};
  tarray *a = tu_poisoned(p.dtype, 2, sh);
  int64_t nc;
  terr e;
  terr_clear(&e);
  if (cuda_geodesic(0, &p, a, NULL, &nc, &e) != 0) {
    fprintf(stderr, "matrix: %s\n", e.message);
    tarray_free(a);
    return NULL;
  }
  return a;
}

static int rank_less(double da, int64_t ja, double db, int64_t jb) {
  int an = isnan(da), bn = isnan(db);
  if (an != bn) return bn;
  if (!an && da != db) return da < db;
  return ja < jb;
}

typedef struct cand {
  double d;
  int64_t j;
} cand;
static int cand_cmp(const void *x, const void *y) {
  const cand *a = x, *b = y;
  return rank_less(a->d, a->j, b->d, b->j) ? -1
         : rank_less(b->d, b->j, a->d, a->j) ? 1
                                             : 0;
}

/* Bitwise equality of element i of two arrays of one dtype. */
static int same_bits(const tarray *a, int64_t i, const tarray *b, int64_t k) {
  size_t es = tdtype_size(a->dtype);
  return a->dtype == b->dtype &&
         memcmp((char *)a->data + (size_t)i * es,
                (char *)b->data + (size_t)k * es, es) == 0;
}

static int check_knn(const geod_plan *pl, const tarray *M, const geoq_out *o,
                     int64_t k) {
  int64_t n = pl->n, m = pl->m, K = geoq_knn_k(pl, &(geoq){.k = k});
  int bad = 0;
  cand *c = malloc((size_t)(m > 0 ? m : 1) * sizeof *c);
  if (o->nparts != 2 || o->part[0]->shape[1] != K || o->part[1]->dtype != T_I64)
    return 1;
  for (int64_t i = 0; i < n && bad < 5; i++) {
    int64_t nc = 0;
    for (int64_t j = 0; j < m; j++) {
      if (!pl->has_targets && j == i) continue;
      c[nc].d = tarray_get(M, i * m + j);
      c[nc++].j = j;
    }
    qsort(c, (size_t)nc, sizeof *c, cand_cmp);
    for (int64_t e = 0; e < K; e++) {
      int64_t got = ((int64_t *)o->part[1]->data)[i * K + e];
      if (got != c[e].j || !same_bits(o->part[0], i * K + e, M, i * m + c[e].j)) {
        if (bad++ < 5)
          fprintf(stderr, "  knn row %lld rank %lld: got j %lld d %.17g, want j %lld d %.17g\n",
                  (long long)i, (long long)e, (long long)got,
                  tarray_get(o->part[0], i * K + e), (long long)c[e].j, c[e].d);
        break;
      }
    }
  }
  free(c);
  return bad;
}

static int check_radius(const geod_plan *pl, const tarray *M, const geoq_out *o,
                        double r) {
  int64_t n = pl->n, m = pl->m, P = 0, bad = 0;
  if (o->nparts != 3) return 1;
  int64_t got = o->part[0]->size;
  const int64_t *pi = o->part[0]->data, *pj = o->part[1]->data;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = pl->has_targets ? 0 : i + 1; j < m; j++) {
      double d = tarray_get(M, i * m + j);
      if (!(d <= r)) continue;
      if (P < got && (pi[P] != i || pj[P] != j ||
                      !same_bits(o->part[2], P, M, i * m + j))) {
        if (bad++ < 5)
          fprintf(stderr, "  radius pair %lld: got (%lld, %lld), want (%lld, %lld)\n",
                  (long long)P, (long long)pi[P], (long long)pj[P], (long long)i,
                  (long long)j);
      }
      P++;
    }
  if (P != got) {
    fprintf(stderr, "  radius: %lld pairs, want %lld\n", (long long)got,
            (long long)P);
    bad++;
  }
  return (int)bad;
}

static int check_rowwise(const geod_plan *pl, const tarray *M, const geoq *q,
                         const geoq_out *o) {
  int64_t n = pl->n, m = pl->m;
  int bad = 0;
  if (o->nparts != 1 || o->part[0]->size != n) return 1;
  for (int64_t i = 0; i < n && bad < 5; i++) {
    double best = NAN, sum = 0;
    int64_t bj = -1, cnt = 0;
    for (int64_t j = 0; j < m; j++) {
      if (!pl->has_targets && j == i) continue;
      double d = tarray_get(M, i * m + j);
      if (isnan(d) || (q->has_within && !(d <= q->within))) continue;
      cnt++;
      sum += d;
      int better = bj < 0 ||
                   (q->op == GEOQ_MIN || q->op == GEOQ_ARGMIN ? d < best : d > best);
      if (better) best = d, bj = j;
    }
    double want, g = tarray_get(o->part[0], i);
    int ok;
    switch (q->op) {
      case GEOQ_ARGMIN:
      case GEOQ_ARGMAX: ok = (int64_t)g == bj; want = (double)bj; break;
      case GEOQ_COUNT: ok = (int64_t)g == cnt; want = (double)cnt; break;
      case GEOQ_SUM:
      case GEOQ_MEAN:
        want = q->op == GEOQ_SUM ? sum : cnt ? sum / (double)cnt : NAN;
        if (pl->dtype == T_F32) want = (float)want;
        ok = (isnan(want) && isnan(g)) ||
             fabs(g - want) <= 1e-12 * fabs(want) + (pl->dtype == T_F32 ? 1e-6 * fabs(want) : 0);
        break;
      default:
        want = best;
        ok = (isnan(want) && isnan(g)) || g == want;
        break;
    }
    if (!ok && bad++ < 5)
      fprintf(stderr, "  rowwise op %d row %lld: got %.17g want %.17g\n", q->op,
              (long long)i, g, want);
  }
  return bad;
}

/* ---- one case ----------------------------------------------------------- */

typedef struct qcase {
  const char *what;
  geod_method method;
  double f;
  tdtype dt;
  int set, tset;      /* tset < 0: no targets */
  int64_t n, m;
  int64_t mem_limit;  /* plan's gpu_mem_limit */
  int lend2;
  int64_t k;          /* knn; 0 skips */
  double r;           /* radius (units m); < 0 skips */
  double within;      /* rowwise within; < 0: none */
  int knn_only;       /* no rowwise ops */
} qcase;

static geod_plan *plan_of(const qcase *c) {
  double *p = make_set(c->set, c->n, (uint64_t)c->set + 1);
  double *t = c->tset >= 0 ? make_set(c->tset, c->m, (uint64_t)c->tset + 101) : NULL;
  geod_plan *pl = NULL;
  terr e;
  terr_clear(&e);
  if (geod_plan_build(c->method, 6378137, c->f, 6371008.8, 1, 0, c->dt, p,
                      c->n, t, c->tset >= 0 ? c->m : 0, &pl, &e) != 0)
    fprintf(stderr, "plan: %s\n", e.message);
  free(p);
  free(t);
  if (pl) pl->gpu_mem_limit = c->mem_limit;
  return pl;
}

static int run_q(const geod_plan *pl, const geoq *q, int lend2, geoq_out *o,
                 int64_t *nc, qjob *jb) {
  terr e;
  terr_clear(&e);
  qjob_init(jb, lend2);
  memset(o, 0, sizeof *o);
  int rc = gpu_geoq(0, pl, q, &jb->j.ctx, o, nc, &e);
  if (rc) fprintf(stderr, "gpu_geoq: rc %d: %s\n", rc, e.message);
  CHECK(jb->borrowed == jb->returned);
  if (rc == 0) { /* progress by chunk, complete */
    int64_t done = atomic_load(&jb->j.ctx.progress_done),
            total = atomic_load(&jb->j.ctx.progress_total);
    CHECK(total > 0 && done == total);
  }
  if (lend2 && g_ngpu > 1 && pl->n >= 64) CHECK(jb->borrowed == 1);
  return rc;
}

static void run_case(const qcase *c) {
  geod_plan *pl = plan_of(c);
  CHECK(pl != NULL);
  if (!pl) return;
  tarray *M = matrix(pl);
  CHECK(M != NULL);
  if (!M) {
    geod_plan_free(pl);
    return;
  }
  int before = check_failed_now;
  geoq_out o;
  int64_t nc;
  qjob jb;
  if (c->k > 0) {
    geoq q = {.type = GEOQ_KNN, .k = c->k};
    if (run_q(pl, &q, c->lend2, &o, &nc, &jb) == 0)
      CHECK_MSG(check_knn(pl, M, &o, c->k) == 0, "%s: knn k=%lld", c->what,
                (long long)c->k);
    else
      CHECK(0);
    out_free(&o);
  }
  if (c->r >= 0) {
    geoq q = {.type = GEOQ_RADIUS, .r = c->r, .max_pairs = INT64_MAX};
    if (run_q(pl, &q, c->lend2, &o, &nc, &jb) == 0)
      CHECK_MSG(check_radius(pl, M, &o, c->r) == 0, "%s: radius r=%g", c->what,
                c->r);
    else
      CHECK(0);
    out_free(&o);
  }
  for (int op = GEOQ_MIN; op <= GEOQ_COUNT && !c->knn_only; op++)
    for (int w = 0; w < 2; w++) {
      if (w && c->within < 0) continue;
      geoq q = {.type = GEOQ_ROWWISE, .op = (geoq_op)op, .has_within = w,
                .within = c->within};
      if (run_q(pl, &q, c->lend2, &o, &nc, &jb) == 0)
        CHECK_MSG(check_rowwise(pl, M, &q, &o) == 0, "%s: rowwise op %d within %d",
                  c->what, op, w);
      else
        CHECK(0);
      out_free(&o);
    }
  printf("%-44s %s\n", c->what, check_failed_now == before ? "ok" : "FAILED");
  g_cases++;
  tarray_free(M);
  geod_plan_free(pl);
}

#define WGS (1 / 298.257223563)

TEST(test_query_sets) {
  /* Every set, karney WGS84 float64, no targets. */
  static const double rr[S_NSET] = {400e3, 300, 50e3, 100e3, 20e3};
  static const double ww[S_NSET] = {2000e3, 500, 100e3, 300e3, 1e6};
  for (int s = 0; s < S_NSET; s++) {
    char what[64];
    snprintf(what, sizeof what, "karney WGS84 f64 %s", set_names[s]);
    qcase c = {what, GEOD_KARNEY, WGS, T_F64, s, -1, 1500, 0, 0, 0, 10, rr[s], ww[s], 0};
    run_case(&c);
    c.k = 1;
    c.r = -1;
    c.within = -1;
    snprintf(what, sizeof what, "karney WGS84 f64 %s k=1", set_names[s]);
    run_case(&c);
  }
}

TEST(test_query_methods) {
  qcase cs[] = {
      {"karney f=1/50 clusters", GEOD_KARNEY, 1.0 / 50, T_F64, S_CLUSTER, -1, 1200, 0, 0, 0, 7, 300, 800, 0},
      {"karney f=1/50 antipodal", GEOD_KARNEY, 1.0 / 50, T_F64, S_ANTIPODAL, -1, 1200, 0, 0, 0, 5, 30e3, 1e6, 0},
      {"vincenty WGS84 antipodal (NaN)", GEOD_VINCENTY, WGS, T_F64, S_ANTIPODAL, -1, 1200, 0, 0, 0, 6, 20e3, 2e7, 0},
      {"vincenty f=1/50 uniform", GEOD_VINCENTY, 1.0 / 50, T_F64, S_UNIFORM, -1, 1200, 0, 0, 0, 6, 400e3, 1e6, 0},
      {"haversine poles", GEOD_HAVERSINE, 0, T_F64, S_POLES, -1, 1200, 0, 0, 0, 8, 50e3, 1e5, 0},
      {"haversine antimeridian f32", GEOD_HAVERSINE, 0, T_F32, S_ANTIMERIDIAN, -1, 1200, 0, 0, 0, 8, 100e3, 1e5, 0},
      {"karney WGS84 f32 clusters", GEOD_KARNEY, WGS, T_F32, S_CLUSTER, -1, 1500, 0, 0, 0, 12, 300, 600, 0},
      {"karney WGS84 f32 uniform", GEOD_KARNEY, WGS, T_F32, S_UNIFORM, -1, 1500, 0, 0, 0, 4, 300e3, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

/* Every pair of the matrix through knn with k = all candidates: the
 * query kernel's distances equal the matrix kernel's bit for bit for every
 * method, flattening (oblate and prolate) and dtype, not only near ones. */
TEST(test_query_bitwise_sweep) {
  qcase cs[] = {
      {"all pairs: karney WGS84 uniform", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: karney WGS84 antipodal", GEOD_KARNEY, WGS, T_F64, S_ANTIPODAL, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: karney WGS84 poles", GEOD_KARNEY, WGS, T_F64, S_POLES, -1, 500, 0, 0, 0, 499, -1, -1, 1},
      {"all pairs: karney f=1/50 antipodal", GEOD_KARNEY, 1.0 / 50, T_F64, S_ANTIPODAL, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: karney f=-1/50 uniform", GEOD_KARNEY, -1.0 / 50, T_F64, S_UNIFORM, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: karney f=-1/50 antipodal", GEOD_KARNEY, -1.0 / 50, T_F64, S_ANTIPODAL, -1, 600, 0, 0, 0, 599, -1, -1, 1},
      {"all pairs: vincenty WGS84 antipodal", GEOD_VINCENTY, WGS, T_F64, S_ANTIPODAL, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: vincenty f=1/50 uniform", GEOD_VINCENTY, 1.0 / 50, T_F64, S_UNIFORM, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: haversine uniform", GEOD_HAVERSINE, 0, T_F64, S_UNIFORM, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: haversine antipodal", GEOD_HAVERSINE, 0, T_F64, S_ANTIPODAL, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: karney WGS84 f32 clusters", GEOD_KARNEY, WGS, T_F32, S_CLUSTER, -1, 700, 0, 0, 0, 699, -1, -1, 1},
      {"all pairs: targets karney WGS84", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, S_ANTIPODAL, 500, 600, 0, 0, 600, -1, -1, 1},
      {"all pairs: targets vincenty f=1/50", GEOD_VINCENTY, 1.0 / 50, T_F64, S_ANTIPODAL, S_UNIFORM, 500, 600, 0, 0, 600, -1, -1, 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

TEST(test_query_targets) {
  qcase cs[] = {
      {"targets: clusters -> uniform", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, S_UNIFORM, 1300, 700, 0, 0, 10, 500e3, 1e6, 0},
      {"targets: uniform -> clusters", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, S_CLUSTER, 900, 1100, 0, 0, 10, 2e6, 5e6, 0},
      {"targets: poles -> poles f32", GEOD_KARNEY, WGS, T_F32, S_POLES, S_POLES, 800, 600, 0, 0, 3, 20e3, -1, 0},
      {"targets: antipodal vincenty", GEOD_VINCENTY, WGS, T_F64, S_ANTIPODAL, S_ANTIPODAL, 600, 600, 0, 0, 4, 1e5, -1, 0},
      {"targets: k >= m (k=50, m=40)", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, S_CLUSTER, 500, 40, 0, 0, 50, -1, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

TEST(test_query_edges) {
  qcase cs[] = {
      {"k >= n (k=2000, n=300)", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 300, 0, 0, 0, 2000, 0, -1, 0},
      {"r = 0 with duplicates", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 1000, 0, 0, 0, 3, 0, 0, 0},
      {"a single point", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 1, 0, 0, 0, 5, 1e7, 1e7, 0},
      {"two points", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 2, 0, 0, 0, 5, 2e7, -1, 0},
      {"k = 1024", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 1500, 0, 0, 0, 1024, -1, -1, 0},
      {"small gpu_mem_limit (chunks) clusters", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 1500, 0, 200000, 0, 10, 500, 400, 0},
      {"small gpu_mem_limit targets", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, S_UNIFORM, 1500, 800, 200000, 0, 10, 300e3, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

/* GPU knn against the CPU engine on the same plan. The two engines'
 * solvers are the same formulas on different math libraries (CUDA's sin,
 * atan2... against glibc's libm), so a distance may differ in its last
 * bits (1e-10 m seen between points 1 cm apart): each engine is held bit
 * for bit to its own brute force elsewhere ("piles vs brute force" here,
 * tests/unit/test_geoquery.c for the CPU). Across engines: every distance
 * within 1e-9 m + 1e-12 relative (float32: + one float32 step), so an
 * index may differ only where the two distances there are such a near
 * tie. */
static void vs_cpu(const char *what, const qcase *c) {
  geod_plan *pl = plan_of(c);
  CHECK(pl != NULL);
  if (!pl) return;
  geoq q = {.type = GEOQ_KNN, .k = c->k};
  geoq_out g, h;
  int64_t nc;
  qjob jb;
  int bad = 0;
  memset(&h, 0, sizeof h);
  if (run_q(pl, &q, 0, &g, &nc, &jb) != 0) {
    CHECK_MSG(0, "%s: gpu knn failed", what);
    geod_plan_free(pl);
    return;
  }
  tu_job cj;
  tu_job_init(&cj, 0);
  cj.ctx.result_alloc = tu_alloc_poison;
  terr e;
  terr_clear(&e);
  int rc = geoq_cpu_run(pl, &q, 1, &cj.ctx, &h, &nc, &e);
  CHECK_MSG(rc == 0, "%s: cpu knn: %s", what, e.message);
  if (!rc) {
    CHECK(g.nparts == 2 && h.nparts == 2);
    bad = g.nparts != 2 || h.nparts != 2 || g.part[1]->size != h.part[1]->size ||
          g.part[0]->dtype != h.part[0]->dtype;
    for (int64_t x = 0; !bad && x < h.part[1]->size; x++) {
      double dg = tarray_get(g.part[0], x), dh = tarray_get(h.part[0], x);
      int64_t ig = ((int64_t *)g.part[1]->data)[x],
              ih = ((int64_t *)h.part[1]->data)[x];
      /* float32 results: one float32 rounding step apart at most */
      double tol = 1e-9 + (g.part[0]->dtype == T_F32 ? 0x1p-23 : 1e-12) * fabs(dh);
      int near = (isnan(dg) && isnan(dh)) || fabs(dg - dh) <= tol;
      if (!near) { /* indices may differ only at such a near tie */
        fprintf(stderr, "  %s: element %lld: gpu (%.17g, %lld), cpu (%.17g, "
                "%lld)\n", what, (long long)x, dg, (long long)ig, dh,
                (long long)ih);
        bad = 1;
      }
    }
    CHECK_MSG(!bad, "%s: gpu knn differs from the cpu's", what);
  }
  printf("%-44s %s\n", what, bad || rc ? "FAILED" : "ok");
  g_cases++;
  out_free(&g);
  out_free(&h);
  geod_plan_free(pl);
}

TEST(test_query_piles_vs_cpu) {
  qcase cs[] = {
      {"piles vs cpu", GEOD_KARNEY, WGS, T_F64, S_PILES, -1, 3000, 0, 0, 0, 10, -1, -1, 1},
      {"piles vs cpu k=1024", GEOD_KARNEY, WGS, T_F64, S_PILES, -1, 3000, 0, 0, 0, 1024, -1, -1, 1},
      {"piles vs cpu targets f32", GEOD_KARNEY, WGS, T_F32, S_UNIFORM, S_PILES, 2000, 3000, 0, 0, 10, -1, -1, 1},
      {"piles vs cpu vincenty", GEOD_VINCENTY, WGS, T_F64, S_PILES, -1, 2000, 0, 0, 0, 10, -1, -1, 1},
      {"1 m cluster vs cpu", GEOD_KARNEY, WGS, T_F64, S_TIGHT, -1, 5000, 0, 0, 0, 10, -1, -1, 1},
      {"1 m cluster vs cpu f32", GEOD_KARNEY, WGS, T_F32, S_TIGHT, -1, 5000, 0, 0, 0, 16, -1, -1, 1},
      {"40000 copies k=10 vs cpu", GEOD_KARNEY, WGS, T_F64, S_COPIES, -1, 40000, 0, 0, 0, 10, -1, -1, 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) vs_cpu(cs[i].what, &cs[i]);
  /* and the piles against brute force over the GPU matrix */
  qcase bf = {"piles vs brute force", GEOD_KARNEY, WGS, T_F64, S_PILES, -1, 1500, 0, 0, 0, 10, 0, 1, 0};
  run_case(&bf);
}

TEST(test_query_two_devices) {
  if (g_ngpu < 2) {
    printf("one GPU: the 2-device cases run on device 0 alone\n");
  }
  qcase cs[] = {
      {"2 devices uniform", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 3000, 0, 0, 1, 10, 300e3, 1e6, 0},
      {"2 devices clusters targets", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, S_CLUSTER, 2000, 1500, 0, 1, 10, 300, -1, 0},
      {"2 devices small memory", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 2000, 0, 200000, 1, 8, 300, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

/* The guided cut (query_chunks.cu, gq_plain_size: the last chunks shrink)
 * against the even one (TESSEL_GEOQ_EVEN, every chunk the full size), on
 * one device and, with two GPUs, on both: every part the same bytes
 * (memcmp) as one device's guided run, knn k = 10 and rowwise argmin,
 * without and with targets; and the guided cut cut more chunks (the
 * progress total) than the even one. Sizes where the cut shrinks (chunks
 * of more than GQ_TAIL_MIN queries): 10^6 points; 600,000 queries over
 * 100,000 targets. */
static void cut_run(const geod_plan *pl, const geoq *q, int even, int lend2,
                    geoq_out *o, int64_t *chunks) {
  qjob jb;
  int64_t nc;
  if (even) setenv("TESSEL_GEOQ_EVEN", "1", 1);
  else unsetenv("TESSEL_GEOQ_EVEN");
  int rc = run_q(pl, q, lend2, o, &nc, &jb);
  unsetenv("TESSEL_GEOQ_EVEN");
  CHECK(rc == 0);
  *chunks = atomic_load(&jb.j.ctx.progress_total);
}

TEST(test_query_guided_cut) {
  qcase cs[] = {
      {"cut", GEOD_KARNEY, WGS, T_F64, S_UNIFORM, -1, 1000000, 0, 0, 1, 10, -1, -1, 0},
      {"cut targets", GEOD_KARNEY, WGS, T_F32, S_CLUSTER, S_UNIFORM, 600000, 100000, 0, 1, 10, -1, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    geod_plan *pl = plan_of(&cs[i]);
    CHECK(pl != NULL);
    if (!pl) continue;
    geoq qs[2] = {{.type = GEOQ_KNN, .k = 10},
                  {.type = GEOQ_ROWWISE, .op = GEOQ_ARGMIN}};
    for (int qi = 0; qi < 2; qi++) {
      geoq_out ref, o;
      int64_t cref = 0, ch = 0;
      cut_run(pl, &qs[qi], 0, 0, &ref, &cref);
      for (int run = 1; run < 4 && ref.nparts > 0; run++) {
        int even = run & 1, two = run >= 2;
        if (two && g_ngpu < 2) break;
        cut_run(pl, &qs[qi], even, two, &o, &ch);
        printf("%s, query %d: %s cut, %d device(s): %lld chunks (guided on "
               "one: %lld)\n", cs[i].what, qi, even ? "even" : "guided",
               two ? 2 : 1, (long long)ch, (long long)cref);
        if (run == 1) CHECK(cref > ch); /* the tail was cut finer */
        CHECK(o.nparts == ref.nparts);
        for (int k = 0; k < ref.nparts && k < o.nparts; k++) {
          const tarray *a = ref.part[k], *b = o.part[k];
          size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
          CHECK_MSG(a->size == b->size && a->dtype == b->dtype &&
                        memcmp(a->data, b->data, bytes) == 0,
                    "%s, query %d, part %d: %s cut on %d device(s) differs",
                    cs[i].what, qi, k, even ? "even" : "guided", two ? 2 : 1);
        }
        out_free(&o);
      }
      out_free(&ref);
      g_cases++;
    }
    geod_plan_free(pl);
  }
}

TEST(test_query_errors) {
  qcase c = {"", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 1500, 0, 0, 0, 0, 0, 0, 0};
  geod_plan *pl = plan_of(&c);
  if (!pl) return;
  geoq_out o;
  int64_t nc;
  terr e;
  qjob jb;
  /* Over the cap: T_ENOSPACE naming the field, nothing handed out. */
  geoq q = {.type = GEOQ_RADIUS, .r = 1000, .max_pairs = 10};
  qjob_init(&jb, 0);
  terr_clear(&e);
  memset(&o, 0, sizeof o);
  int rc = gpu_geoq(0, pl, &q, &jb.j.ctx, &o, &nc, &e);
  printf("over max_pairs: rc %d field %s: %s\n", rc, e.field, e.message);
  CHECK(rc == T_ENOSPACE && o.nparts == 0);
  CHECK(strcmp(e.field, "params.query.radius.max_pairs") == 0);
  /* A cancel. */
  geoq k = {.type = GEOQ_KNN, .k = 5};
  qjob_init(&jb, 0);
  atomic_store(&jb.j.stop, 1);
  terr_clear(&e);
  rc = gpu_geoq(0, pl, &k, &jb.j.ctx, &o, &nc, &e);
  CHECK(rc == T_ECANCELED && o.nparts == 0);
  /* A cancel after the first of many chunks (a small memory budget). */
  {
    geod_plan p2 = *pl;
    p2.gpu_mem_limit = 150000;
    qjob_init(&jb, 0);
    jb.cancel_at = 1;
    double h = 0;
    geoq_gpu_job job = {&jb, cb_stopped, cb_progress, cb_total, &h, &h, &h,
                        tj_alloc, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL};
    terr_clear(&e);
    rc = cuda_geoq(0, &p2, &k, &job, &o, &nc, &e);
    printf("canceled after %d of %d chunks: rc %d\n", jb.done, jb.total, rc);
    CHECK(rc == T_ECANCELED && o.nparts == 0);
    CHECK(jb.done >= 1 && jb.done < jb.total);
  }
  /* A device that does not exist. */
  qjob_init(&jb, 0);
  terr_clear(&e);
  rc = gpu_geoq(99, pl, &k, &jb.j.ctx, &o, &nc, &e);
  CHECK(rc == T_EDEVICE && o.nparts == 0);
  /* The device works afterwards. */
  qjob_init(&jb, 0);
  terr_clear(&e);
  CHECK(gpu_geoq(0, pl, &k, &jb.j.ctx, &o, &nc, &e) == 0 && o.nparts == 2);
  out_free(&o);
  geod_plan_free(pl);
}

/* The host index (TESSEL_GEOQ_HOST_INDEX; the devices build theirs
 * otherwise: test_geoquery_devindex.c) on the job's pool (query_index.cu
 * through geoq_pool_par): every part the same bytes whatever the pool's
 * width.
 * n = 270,000 cuts the queries' loops into 3 shares on a pool 3 wide and
 * 4 on one 4 wide (GQ_PAR_MIN items a share at least), against 1. */
static pool *g_pool;
static int pooled(const geod_plan *pl, const geoq *q, int width,
                  geoq_out *o) {
  qjob jb;
  int64_t nc;
  terr e;
  terr_clear(&e);
  qjob_init(&jb, 0);
  jb.j.ctx.pool = width > 1 ? g_pool : NULL;
  jb.j.ctx.threads = width;
  memset(o, 0, sizeof *o);
  setenv("TESSEL_GEOQ_HOST_INDEX", "1", 1); /* the pool builds the host's */
  int rc = gpu_geoq(0, pl, q, &jb.j.ctx, o, &nc, &e);
  unsetenv("TESSEL_GEOQ_HOST_INDEX");
  if (rc) fprintf(stderr, "gpu_geoq (width %d): %s\n", width, e.message);
  return rc;
}

TEST(test_query_index_on_the_pool) {
  CHECK(g_pool != NULL);
  if (!g_pool) return;
  qcase cs[] = {
      {"pool", GEOD_KARNEY, WGS, T_F64, S_CLUSTER, -1, 270000, 0, 0, 0, 10, -1, -1, 0},
      {"pool targets", GEOD_KARNEY, WGS, T_F32, S_CLUSTER, S_UNIFORM, 270000, 150000, 0, 0, 10, -1, -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    geod_plan *pl = plan_of(&cs[i]);
    CHECK(pl != NULL);
    if (!pl) continue;
    geoq qs[2] = {{.type = GEOQ_KNN, .k = 10},
                  {.type = GEOQ_ROWWISE, .op = GEOQ_ARGMIN}};
    for (int qi = 0; qi < 2; qi++) {
      geoq_out one, many;
      if (pooled(pl, &qs[qi], 1, &one) != 0) {
        CHECK(0);
        continue;
      }
      for (int w = 3; w <= 4; w++) {
        if (pooled(pl, &qs[qi], w, &many) != 0) {
          CHECK(0);
          continue;
        }
        CHECK(many.nparts == one.nparts);
        for (int k = 0; k < one.nparts && k < many.nparts; k++) {
          const tarray *a = one.part[k], *b = many.part[k];
          size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
          CHECK_MSG(a->size == b->size && a->dtype == b->dtype &&
                        memcmp(a->data, b->data, bytes) == 0,
                    "%s, query %d, part %d: width %d differs from one thread",
                    cs[i].what, qi, k, w);
        }
        out_free(&many);
      }
      out_free(&one);
      g_cases++;
    }
    geod_plan_free(pl);
  }
}

/* ---- timing (printed, never asserted) ----------------------------------- */

static double *big_set(int clustered, int64_t n) {
  double *p = malloc((size_t)n * 2 * sizeof(double));
  uint64_t s = 12345;
  int64_t nclu = n / 1000 > 0 ? n / 1000 : 1;
  for (int64_t i = 0; i < n; i++) {
    if (!clustered) {
      p[2 * i] = asin(tu_uniform(&s, -1, 1)) / GEOD_DEG;
      p[2 * i + 1] = tu_uniform(&s, -180, 180);
    } else { /* 1000 points a cluster, +-0.05 deg (about 5 km) */
      int64_t c = i % nclu;
      uint64_t cs = (uint64_t)c * 0x9e3779b97f4a7c15ull + 7;
      double la = asin(tu_uniform(&cs, -0.95, 0.95)) / GEOD_DEG;
      double lo = tu_uniform(&cs, -180, 180);
      p[2 * i] = clampd(la + tu_uniform(&s, -0.05, 0.05), -90, 90);
      p[2 * i + 1] = lo + tu_uniform(&s, -0.05, 0.05);
    }
  }
  return p;
}

/* One timed call through cuda_geoq (for the kernel and index times). */
static void time_one(const char *what, const geod_plan *pl, const geoq *q,
                     int lend2) {
  qjob jb;
  geoq_out o;
  int64_t nc;
  terr e;
  double h2d = 0, comp = 0, d2h = 0, kern = 0, idx = 0;
  qjob_init(&jb, lend2);
  jb.j.ctx.pool = g_pool; /* the index on a pool, as a job's is */
  jb.j.ctx.threads = g_pool ? pool_threads(g_pool) : 1;
  geoq_gpu_job job = {&jb.j.ctx, NULL, NULL, NULL, &h2d, &comp, &d2h,
                      tj_alloc, g_ngpu, tj_borrow, tj_give_back, &kern, &idx,
                      geoq_pool_par, jb.j.ctx.threads, NULL};
  terr_clear(&e);
  memset(&o, 0, sizeof o);
  double t0 = t_now_ms();
  int rc = cuda_geoq(0, pl, q, &job, &o, &nc, &e);
  double t = t_now_ms() - t0;
  int64_t P = rc == 0 && q->type == GEOQ_RADIUS ? o.part[0]->size : -1;
  printf("%-34s GPUs %d: call %6.1f ms = index %5.1f + h2d %5.1f + "
         "rest of compute %5.1f + d2h/scatter %5.1f; kernels %6.1f ms%s%s",
         what, 1 + jb.borrowed, t, idx, h2d, comp - idx, d2h, kern,
         rc ? " FAILED: " : "", rc ? e.message : "");
  if (P >= 0) printf("; pairs %lld", (long long)P);
  printf("\n");
  out_free(&o);
}

static void timing(void) {
  terr e;
  terr_clear(&e);
  int64_t n = 1000000;
  printf("\n-- timing (not asserted): n = %lld, WGS84 karney float64 --\n",
         (long long)n);
  /* The brute force it replaces: the matrix kernel's rate. */
  double *b = big_set(0, 32768);
  geod_plan *bp = NULL;
  if (geod_plan_build(GEOD_KARNEY, 6378137, WGS, 0, 1, 0, T_F64, b, 32768, NULL,
                      0, &bp, &e) == 0) {
    double ms, pairs;
    if (cuda_geodesic_bench(0, bp, 0, 3, &ms, &pairs, &e) == 0)
      printf("matrix kernel (brute force), n = 32768 square: %.1f ms, %.3g pairs/s; "
             "n = 1e6 knn by brute force would take %.1f s\n",
             ms, pairs / ms * 1e3, (double)n * (double)(n - 1) / 2 / (pairs / ms * 1e3));
    geod_plan_free(bp);
  }
  free(b);
  for (int cl = 0; cl < 2; cl++) {
    double *p = big_set(cl, n);
    geod_plan *pl = NULL;
    double t0 = t_now_ms();
    if (geod_plan_build(GEOD_KARNEY, 6378137, WGS, 0, 1, 0, T_F64, p, n, NULL,
                        0, &pl, &e) != 0) {
      printf("plan: %s\n", e.message);
      free(p);
      continue;
    }
    printf("%s: plan build (host) %.1f ms\n", cl ? "clustered" : "uniform",
           t_now_ms() - t0);
    geoq k10 = {.type = GEOQ_KNN, .k = 10};
    time_one(cl ? "knn k=10 clustered" : "knn k=10 uniform", pl, &k10, 0);
    time_one(cl ? "knn k=10 clustered, again" : "knn k=10 uniform, again", pl, &k10, 0);
    if (g_ngpu > 1) time_one(cl ? "knn k=10 clustered, all GPUs" : "knn k=10 uniform, all GPUs", pl, &k10, 1);
    geoq k100 = {.type = GEOQ_KNN, .k = 100};
    if (!cl) time_one("knn k=100 uniform", pl, &k100, 0);
    if (cl) {
      geoq rq = {.type = GEOQ_RADIUS, .r = 1000, .max_pairs = INT64_MAX};
      time_one("radius r=1 km clustered", pl, &rq, 0);
      if (g_ngpu > 1) time_one("radius r=1 km clustered, all GPUs", pl, &rq, 1);
      geoq mn = {.type = GEOQ_ROWWISE, .op = GEOQ_ARGMIN};
      time_one("rowwise argmin clustered", pl, &mn, 0);
    }
    geod_plan_free(pl);
    free(p);
  }
}

/* --time-1e7: issue 27's kNN, 10^7 uniform points k = 10, one GPU and
 * every GPU, the index on the host (TESSEL_GEOQ_HOST_INDEX=1, before) and
 * on the devices (the default), twice each, in turns;
 * with TESSEL_GPU_TRACE set each call also logs its "geoq trace:" line
 * (query.cu's gq_trace: where the time went). Printed, never asserted. */
static void timing_big(void) {
  terr e;
  terr_clear(&e);
  int64_t n = 10000000;
  double *p = big_set(0, n);
  geod_plan *pl = NULL;
  double t0 = t_now_ms();
  if (geod_plan_build(GEOD_KARNEY, 6378137, WGS, 0, 1, 0, T_F64, p, n, NULL, 0,
                      &pl, &e) != 0) {
    printf("plan: %s\n", e.message);
    free(p);
    return;
  }
  printf("\n-- timing (not asserted): knn k=10, n = 10^7 uniform, WGS84 karney "
         "float64; plan build (host) %.1f ms --\n", t_now_ms() - t0);
  geoq k10 = {.type = GEOQ_KNN, .k = 10};
  for (int rep = 0; rep < 2; rep++)
    for (int all = 0; all < 1 + (g_ngpu > 1); all++)
      for (int host = 1; host >= 0; host--) {
        char what[64];
        snprintf(what, sizeof what, "knn 1e7 %s index, %s",
                 host ? "host" : "device", all ? "all GPUs" : "one GPU");
        if (host) setenv("TESSEL_GEOQ_HOST_INDEX", "1", 1);
        time_one(what, pl, &k10, all);
        unsetenv("TESSEL_GEOQ_HOST_INDEX");
      }
  geod_plan_free(pl);
  free(p);
}

int main(int argc, char **argv) {
  int time_it = 0, time_big = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--time") == 0) time_it = 1;
    if (strcmp(argv[i], "--time-1e7") == 0) time_big = 1;
  }
  char name[256];
  terr e;
  terr_clear(&e);
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0)
    SKIP_ALL_NO_GPU("%s", e.message);
  g_ngpu = gpu_count();
  printf("device 0: %s; %d GPU(s)\n", name, g_ngpu);
  long cores = sysconf(_SC_NPROCESSORS_ONLN); /* a pool as tesseld's */
  g_pool = pool_create(cores > 4 ? (int)cores : 4, NULL, NULL);
  RUN(test_query_sets);
  RUN(test_query_methods);
  RUN(test_query_bitwise_sweep);
  RUN(test_query_targets);
  RUN(test_query_edges);
  RUN(test_query_piles_vs_cpu);
  RUN(test_query_two_devices);
  RUN(test_query_guided_cut);
  RUN(test_query_errors);
  RUN(test_query_index_on_the_pool);
  printf("%d cases\n", g_cases);
  if (time_it) timing();
  if (time_big) timing_big();
  pool_destroy(g_pool);
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA */

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
