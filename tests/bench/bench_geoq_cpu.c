/* bench_geoq_cpu.c — the CPU engine of the geodesic queries
 * (compute/kinds/geodesic/query/query_cpu.c) against the brute force it replaces, on this
 * machine's cores: knn (k nearest) of n uniform points, serial and on the
 * pool, against the square matrix the kind computes (and a selection per
 * row, which is not timed: the matrix alone is the lower bound of brute
 * force); radius r on n clustered points; and knn on C copies of one
 * point (the case that was quadratic before the index grouped candidates
 * by location: every chord is 0 in a pile of copies, so no bound pruned).
 * WGS84, Karney, float64.
 *
 *   bench_geoq_cpu [--n 100000] [--k 10] [--r 1000] [--threads T]
 *                  [--band ROWS] [--copies C (0: none)] [--no-radius 1]
 *
 * The matrix is too big to compute at n = 10^5 in a benchmark (5x10^9
 * pairs): it is timed on a band of ROWS rows against all n points (the
 * kind's own tiles, as a plan with targets) and extrapolated to the
 * n (n - 1) / 2 pairs the square matrix evaluates; the row says so. The
 * engine's own time includes building its index. Pairs evaluated by the
 * engine are not counted by it; the speed-up is against the brute force
 * on the same threads.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/kinds/geodesic/kind.h"
#include "util/pool.h"
#include "util/util.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static double urand(void) {
  g_rng += 0x9E3779B97F4A7C15ULL;
  uint64_t z = g_rng;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static void ctx_init(job_ctx *c, pool *p, int threads, atomic_int *stop) {
  memset(c, 0, sizeof *c);
  c->job_id = "bench";
  c->pool = p;
  c->threads = threads;
  c->stop = stop;
  c->result_alloc = heap_alloc;
}

static geod_plan *plan_of(const double *pts, int64_t n, const double *tgt,
                          int64_t m) {
  geod_plan *pl = NULL;
  terr e;
  terr_clear(&e);
  if (geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 0, 1, 0, T_F64,
                      pts, n, tgt, m, &pl, &e)) {
    fprintf(stderr, "plan: %s\n", e.message);
    exit(1);
  }
  return pl;
}

/* Seconds for one query run on `width` threads. */
static double time_query(const geod_plan *pl, const geoq *q, pool *p,
                         int width, int64_t *count) {
  atomic_int stop = 0;
  job_ctx ctx;
  ctx_init(&ctx, p, width, &stop);
  geoq_out out;
  int64_t nc;
  terr e;
  terr_clear(&e);
  double t0 = t_now_ms();
  int rc = geoq_cpu_run(pl, q, width, &ctx, &out, &nc, &e);
  double t = (t_now_ms() - t0) / 1000;
  if (rc) {
    fprintf(stderr, "query: %s\n", e.message);
    exit(1);
  }
  *count = out.part[0]->shape[0];
  for (int i = 0; i < out.nparts; i++) tarray_free(out.part[i]);
  return t;
}

int main(int argc, char **argv) {
  int64_t n = 100000, k = 10, band = 200, copies = 40000;
  int radius = 1;
  double r = 1000;
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) n = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--k")) k = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--r")) r = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--band")) band = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--copies")) copies = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--no-radius")) radius = !atoi(argv[i + 1]);
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  pool *p = pool_create(threads, NULL, NULL);
  double *pts = malloc((size_t)n * 2 * sizeof *pts);
  for (int64_t i = 0; i < n; i++) {
    pts[2 * i] = asin(2 * urand() - 1) / GEOD_DEG;
    pts[2 * i + 1] = 360 * urand() - 180;
  }
  printf("geodesic queries on the CPU, WGS84 karney float64, %d thread(s)\n",
         threads);
  printf("%-44s %10s %12s %9s\n", "run", "seconds", "rows/s", "vs brute");
  geod_plan *pl = plan_of(pts, n, NULL, 0);
  geoq q = {.type = GEOQ_KNN, .k = k};
  /* brute force: the matrix on a band, extrapolated */
  if (band > n) band = n;
  geod_plan *bp = plan_of(pts, band, pts, n);
  tarray *mat = tarray_new(T_F64, 2, (int64_t[]){band, n});
  atomic_int stop = 0;
  job_ctx ctx;
  double brute[2];
  for (int w = 0; w < 2; w++) {
    int width = w ? threads : 1;
    ctx_init(&ctx, p, width, &stop);
    int64_t nc;
    terr e;
    double t0 = t_now_ms();
    geod_cpu_run(bp, width, mat, &ctx, &nc, &e);
    double t = (t_now_ms() - t0) / 1000;
    brute[w] = t / ((double)band * (double)n) * ((double)n * (double)(n - 1) / 2);
  }
  tarray_free(mat);
  geod_plan_free(bp);
  int64_t cnt;
  char label[96];
  for (int w = 0; w < 2; w++) {
    int width = w ? threads : 1;
    snprintf(label, sizeof label, "knn k=%lld n=%lld %s", (long long)k,
             (long long)n, w ? "cpu (pool)" : "serial");
    double t = time_query(pl, &q, p, width, &cnt);
    printf("%-44s %10.2f %12.0f %8.0fx\n", label, t, (double)n / t,
           brute[w] / t);
    snprintf(label, sizeof label, "matrix n=%lld %s (band %lld rows, extrap.)",
             (long long)n, w ? "cpu" : "serial", (long long)band);
    printf("%-44s %10.1f %12.0f %8s\n", label, brute[w], (double)n / brute[w],
           "1x");
  }
  geod_plan_free(pl);
  if (copies > 0) { /* knn on copies of one point */
    double *cp = malloc((size_t)copies * 2 * sizeof *cp);
    for (int64_t i = 0; i < copies; i++) cp[2 * i] = -33.865, cp[2 * i + 1] = 151.2094;
    geod_plan *cpl = plan_of(cp, copies, NULL, 0);
    for (int w = 0; w < 2; w++) {
      int width = w ? threads : 1;
      double t = time_query(cpl, &q, p, width, &cnt);
      snprintf(label, sizeof label, "knn k=%lld %lld copies of 1 point %s",
               (long long)k, (long long)copies, w ? "cpu" : "serial");
      printf("%-44s %10.2f %12.0f %9s\n", label, t, (double)copies / t, "-");
    }
    geod_plan_free(cpl);
    free(cp);
  }
  if (!radius) {
    free(pts);
    pool_destroy(p);
    return 0;
  }
  /* radius on clustered points: cities of 500 points within a few km */
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i / 500;
    uint64_t save = g_rng;
    g_rng = 0x1234567ULL + (uint64_t)c * 0x9E3779B97F4A7C15ULL;
    double la = asin(2 * urand() - 1) / GEOD_DEG * 0.8, lo = 360 * urand() - 180;
    g_rng = save;
    pts[2 * i] = la + 0.03 * (urand() - 0.5);
    pts[2 * i + 1] = lo + 0.03 * (urand() - 0.5);
  }
  pl = plan_of(pts, n, NULL, 0);
  q = (geoq){.type = GEOQ_RADIUS, .r = r, .max_pairs = INT64_MAX / 32};
  for (int w = 0; w < 2; w++) {
    int width = w ? threads : 1;
    double t = time_query(pl, &q, p, width, &cnt);
    snprintf(label, sizeof label, "radius r=%gm n=%lld clustered %s", r,
             (long long)n, w ? "cpu" : "serial");
    printf("%-44s %10.2f %12.0f %8.0fx  (%lld pairs)\n", label, t,
           (double)n / t, brute[w] / t, (long long)cnt);
  }
  geod_plan_free(pl);
  free(pts);
  pool_destroy(p);
  return 0;
}
