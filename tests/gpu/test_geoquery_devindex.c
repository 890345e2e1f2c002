/* test_geoquery_devindex.c — the CUDA query engine's index built on the
 * devices (compute/kinds/geodesic/query/query_devindex.cu, the default)
 * against the same index built on the host (query_index.cu,
 * TESSEL_GEOQ_HOST_INDEX=1), run on the device machine.
 *
 * Exits 77 ("SKIPPED: ...") without CUDA in the build or a device at run
 * time. Both indexes compute X and the Morton codes with the same
 * functions (query_int.h: gq_sincosd, gq_xyz, gq_code), so the index, and
 * with it every answer — including rowwise sum and mean, whose order of
 * addition follows the targets' order — must be the same bytes. For each
 * point set (uniform and clustered with copies, n not a multiple of 32
 * nor of the chunk size; 40,000 copies of one point; queries over
 * separate targets; a small gpu_mem_limit: many chunks; a tinier one: the
 * device cannot hold the build and falls back to the host index) and each
 * query (knn k = 10, radius, rowwise min / argmin / max / argmax / mean /
 * sum / count within a bound, argmin without one), it runs the host index
 * on one device as the reference, then the device index on one device,
 * the device index on every device (gpu_borrow lends device 1 when there
 * is one) and the host index on every device, and asserts every part
 * equal to the reference's (memcmp). The small sets' knn is also checked
 * against brute force over the GPU matrix of the same plan (distances
 * bit for bit, indices the first k of each row by (d, j), self left out).
 *
 * Run alone on the GPU machine:
 *   LD_LIBRARY_PATH=lib ./gpu_test_geoquery_devindex
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "compute/kinds/geodesic/kind.h"
#include "compute/kinds/geodesic/plan.h"
#include "compute/kinds/geodesic/query/query_gpu.h"
#include "util/util.h"

#if TESSEL_HAVE_CUDA
#include "gpu_test_util.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"

#define WGS (1 / 298.257223563)

static int g_ngpu, g_cases;

enum { P_UNIFORM, P_CLUSTER, P_COPIES };

/* n points (lat, lon): uniform on the sphere, 8 clusters of +-0.01 deg
 * with a fifth of them copies of earlier points, or one point n times. */
static double *points(int kind, int64_t n, uint64_t seed) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof(double));
  uint64_t s = seed * 7919 + 17;
  double clat[8], clon[8];
  for (int c = 0; c < 8; c++)
    clat[c] = asin(tu_uniform(&s, -0.95, 0.95)) / GEOD_DEG,
    clon[c] = tu_uniform(&s, -180, 180);
  for (int64_t i = 0; i < n; i++) {
    double lat = -33.865, lon = 151.2094; /* P_COPIES */
    if (kind == P_UNIFORM) {
      lat = asin(tu_uniform(&s, -1, 1)) / GEOD_DEG;
      lon = tu_uniform(&s, -180, 180);
    } else if (kind == P_CLUSTER) {
      int c = (int)(tu_next(&s) % 8);
      if (i > 0 && tu_next(&s) % 5 == 0) {
        int64_t k = (int64_t)(tu_next(&s) % (uint64_t)i);
        lat = p[2 * k], lon = p[2 * k + 1];
      } else {
        lat = clat[c] + tu_uniform(&s, -0.01, 0.01);
        lon = clon[c] + tu_uniform(&s, -0.01, 0.01);
      }
    }
    p[2 * i] = lat;
    p[2 * i + 1] = lon;
  }
  return p;
}

typedef struct dcase {
  const char *what;
  int kind, tkind; /* tkind < 0: no targets */
  int64_t n, m;
  int64_t mem_limit;
  double r, within; /* radius (r < 0: none), rowwise bound (metres) */
  int brute;        /* knn against brute force too */
} dcase;

static geod_plan *plan_of(const dcase *c) {
  double *p = points(c->kind, c->n, 1);
  double *t = c->tkind >= 0 ? points(c->tkind, c->m, 2) : NULL;
  geod_plan *pl = NULL;
  terr e;
  terr_clear(&e);
  if (geod_plan_build(GEOD_KARNEY, 6378137, WGS, 6371008.8, 1, 0, T_F64, p,
                      c->n, t, t ? c->m : 0, &pl, &e) != 0)
    fprintf(stderr, "plan: %s\n", e.message);
  free(p);
  free(t);
  if (pl) pl->gpu_mem_limit = c->mem_limit;
  return pl;
}

static int lend(job_ctx *ctx, int dev) {
  (void)ctx;
  return dev == 1 && g_ngpu > 1 ? 0 : -1;
}
static void give_back(job_ctx *ctx, int dev) { (void)ctx, (void)dev; }

/* One query with the host or the device index, on one device or every
 * one; 0 and the parts in *o, or the engine's status. */
static int run(const geod_plan *pl, const geoq *q, int host, int all,
               geoq_out *o) {
  tu_job j;
  terr e;
  int64_t nc = 0;
  tu_job_init(&j, 0);
  j.ctx.ngpu = all ? g_ngpu : 1;
  j.ctx.gpu_borrow = all ? lend : NULL;
  j.ctx.gpu_return = give_back;
  j.ctx.result_alloc = tu_alloc_poison;
  terr_clear(&e);
  memset(o, 0, sizeof *o);
  if (host) setenv("TESSEL_GEOQ_HOST_INDEX", "1", 1);
  int rc = gpu_geoq(0, pl, q, &j.ctx, o, &nc, &e);
  unsetenv("TESSEL_GEOQ_HOST_INDEX");
  if (rc) fprintf(stderr, "gpu_geoq: rc %d: %s\n", rc, e.message);
  return rc;
}

static void out_free(geoq_out *o) {
  for (int k = 0; k < o->nparts; k++) tarray_free(o->part[k]);
  o->nparts = 0;
}

static int same_parts(const geoq_out *a, const geoq_out *b) {
  if (a->nparts != b->nparts) return 0;
  for (int k = 0; k < a->nparts; k++) {
    const tarray *x = a->part[k], *y = b->part[k];
    if (x->size != y->size || x->dtype != y->dtype ||
        memcmp(x->data, y->data, (size_t)x->size * tdtype_size(x->dtype)) != 0)
      return 0;
  }
  return 1;
}

/* knn against brute force over the plan's GPU matrix: row i's k_eff
 * smallest (d, j), j != i without targets; distances the same bits. */
static int knn_brute_ok(const geod_plan *pl, const geoq_out *o, int64_t k) {
  geod_plan p = *pl;
  p.gpu_mem_limit = 0;
  int64_t sh[2] = {p.n, p.m}, nc, K = geoq_knn_k(pl, &(geoq){.k = k});
  tarray *M = tu_poisoned(p.dtype, 2, sh);
  terr e;
  terr_clear(&e);
  int ok = M && cuda_geodesic(0, &p, M, NULL, &nc, &e) == 0;
  const double *D = ok ? (const double *)M->data : NULL;
  for (int64_t i = 0; ok && i < p.n; i++) {
    const double *od = (const double *)o->part[0]->data + i * K;
    const int64_t *oj = (const int64_t *)o->part[1]->data + i * K;
    double lastd = -1;
    int64_t lastj = -1;
    for (int64_t u = 0; u < K && ok; u++) {
      int64_t j = oj[u];
      ok = j >= 0 && j < p.m && (pl->has_targets || j != i) &&
           memcmp(&od[u], &D[i * p.m + j], 8) == 0 &&
           (u == 0 || od[u] > lastd || (od[u] == lastd && j > lastj));
      lastd = od[u], lastj = j;
    }
    /* nothing left out ranks before the k-th */
    for (int64_t j = 0; j < p.m && ok && K > 0; j++) {
      if (!pl->has_targets && j == i) continue;
      double d = D[i * p.m + j];
      int in = 0;
      for (int64_t u = 0; u < K; u++) in |= oj[u] == j;
      ok = in || d > lastd || (d == lastd && j > lastj);
    }
  }
  tarray_free(M);
  return ok;
}

/* The queries of a case: knn, radius, rowwise (within), argmin. */
static int queries(const dcase *c, geoq *qs) {
  int nq = 0;
  qs[nq++] = (geoq){.type = GEOQ_KNN, .k = 10};
  if (c->r >= 0)
    qs[nq++] = (geoq){.type = GEOQ_RADIUS, .r = c->r, .max_pairs = INT64_MAX};
  for (int op = GEOQ_MIN; op <= GEOQ_COUNT && c->within >= 0; op++)
    qs[nq++] = (geoq){.type = GEOQ_ROWWISE, .op = (geoq_op)op,
                      .has_within = 1, .within = c->within};
  qs[nq++] = (geoq){.type = GEOQ_ROWWISE, .op = GEOQ_ARGMIN};
  return nq;
}

static void run_case(const dcase *c) {
  geod_plan *pl = plan_of(c);
  CHECK(pl != NULL);
  if (!pl) return;
  int before = check_failed_now;
  geoq qs[12];
  int nq = queries(c, qs);
  for (int qi = 0; qi < nq; qi++) {
    geoq_out ref, o;
    if (run(pl, &qs[qi], 1, 0, &ref) != 0) { /* the host index, one device */
      CHECK_MSG(0, "%s, query %d: the host index failed", c->what, qi);
      continue;
    }
    CHECK(ref.nparts > 0);
    if (qi == 0 && c->brute)
      CHECK_MSG(knn_brute_ok(pl, &ref, qs[0].k), "%s: knn differs from brute force",
                c->what);
    static const char *const how[3] = {"device index, one device",
                                       "device index, every device",
                                       "host index, every device"};
    for (int v = 0; v < 3; v++) {
      if (v > 0 && g_ngpu < 2) break; /* every device = one device */
      int rc = run(pl, &qs[qi], v == 2, v > 0, &o);
      CHECK_MSG(rc == 0 && same_parts(&ref, &o),
                "%s, query %d (type %d op %d): %s differs from the host index",
                c->what, qi, (int)qs[qi].type, (int)qs[qi].op, how[v]);
      if (rc == 0 && v == 0 && qi == 0 && c->brute)
        CHECK_MSG(knn_brute_ok(pl, &o, qs[0].k), "%s: device index knn differs "
                  "from brute force", c->what);
      out_free(&o);
    }
    out_free(&ref);
  }
  printf("%-46s %s\n", c->what, check_failed_now == before ? "ok" : "FAILED");
  g_cases++;
  geod_plan_free(pl);
}

TEST(test_devindex_small_vs_brute) {
  dcase cs[] = {
      {"small uniform n=777", P_UNIFORM, -1, 777, 0, 0, 500e3, 800e3, 1},
      {"small clusters n=1001", P_CLUSTER, -1, 1001, 0, 0, 300, 500, 1},
      {"small clusters over uniform targets", P_CLUSTER, P_UNIFORM, 523, 611, 0, 900e3, 1e6, 1},
      {"small uniform over clustered targets", P_UNIFORM, P_CLUSTER, 650, 333, 0, 2e6, 3e6, 1},
      {"one point", P_UNIFORM, -1, 1, 0, 0, 1, 1, 0},
      {"33 points", P_UNIFORM, -1, 33, 0, 0, 3e6, 5e6, 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

TEST(test_devindex_vs_host_index) {
  dcase cs[] = {
      {"uniform n=100003", P_UNIFORM, -1, 100003, 0, 0, 20e3, 60e3, 0},
      {"clusters+copies n=70001", P_CLUSTER, -1, 70001, 0, 0, 30, 60, 0},
      {"40000 copies of one point", P_COPIES, -1, 40000, 0, 0, -1, -1, 0},
      {"uniform n=50001 over clusters m=30011", P_UNIFORM, P_CLUSTER, 50001, 30011, 0, 200e3, 400e3, 0},
      {"clusters n=30011 over uniform m=50001", P_CLUSTER, P_UNIFORM, 30011, 50001, 0, 30e3, 60e3, 0},
      {"clusters n=20011, 8 MB (many chunks)", P_CLUSTER, -1, 20011, 0, 8 << 20, 30, 60, 0},
      {"uniform over clusters, 10 MB (many chunks)", P_UNIFORM, P_CLUSTER, 20011, 9973, 10 << 20, 200e3, 400e3, 0},
      {"clusters n=20011, 2.5 MB (host fallback)", P_CLUSTER, -1, 20011, 0, 5 << 19, 30, 60, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

int main(void) {
  char name[256];
  terr e;
  terr_clear(&e);
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0)
    SKIP_ALL_NO_GPU("%s", e.message);
  g_ngpu = gpu_count();
  printf("device 0: %s; %d GPU(s)%s\n", name, g_ngpu,
         g_ngpu < 2 ? " (the every-device runs are skipped)" : "");
  RUN(test_devindex_small_vs_brute);
  RUN(test_devindex_vs_host_index);
  printf("%d cases\n", g_cases);
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA */

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
