/* test_geodesic_band.c — the tiles of a split job on CUDA: a band of rows
 * (geod_plan_rows, compute/kinds/geodesic/plan.h) computed by cuda_geodesic is
 * exactly those rows of the whole matrix computed on the same device.
 *
 * Exits 77 without CUDA in the build or a device. For square (whose whole
 * matrix is the resident, mirrored SYM path while its bands are SQR),
 * condensed and with targets; float64 and float32; karney, vincenty and
 * haversine; bands cut as a split job cuts them (T = 2, 3, 7) and one of
 * odd edges; also forced into passes (a small device-memory budget) and
 * over two lanes of device 0: every band's bytes equal the whole result's
 * rows (the condensed entries of its rows), its non-converged count adds up
 * to the whole one's, and a poisoned output is fully written. A square
 * matrix's tiles as split jobs now run them (geod_plan_upper: the rows'
 * upper part as a plan with targets) equal the whole's pairs j > i.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/geodesic/plan.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static double urand(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static tarray *poisoned(const geod_plan *pl) {
  tarray *t = tarray_new(pl->dtype, pl->ndim, pl->shape);
  if (t) memset(t->data, 0xA5, (size_t)t->size * tdtype_size(t->dtype));
  return t;
}

static int cb_stopped(void *c) {
  (void)c;
  return 0;
}
static void cb_progress(void *c, int64_t add) { (void)c, (void)add; }

static int run(const geod_plan *pl, int lanes, tarray **out, int64_t *nc,
               terr *e) {
  int nl = 0;
  geod_gpu_job job = {NULL, cb_stopped, cb_progress, cb_progress, NULL, NULL,
                      NULL, 0,          NULL,        NULL,        lanes, &nl,
                      NULL};
  *out = poisoned(pl);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  int rc = cuda_geodesic(0, pl, *out, &job, nc, e);
  if (rc) {
    tarray_free(*out);
    *out = NULL;
  }
  return rc;
}

/* Offset (elements) of row r's first element in the whole result. */
static int64_t row_at(const geod_plan *pl, int64_t r) {
  return pl->condensed ? geod_condensed_index(pl->n, r, r + 1) : r * pl->m;
}

static void check_bands(const geod_plan *pl, const char *what) {
  terr e;
  tarray *whole = NULL;
  int64_t ncw = 0;
  int rc = run(pl, 1, &whole, &ncw, &e);
  CHECK_MSG(rc == 0, "%s: whole: %s", what, e.message);
  if (rc) return;
  size_t es = tdtype_size(pl->dtype);
  int cuts[] = {2, 3, 7};
  for (int v = 0; v < 4; v++) {
    int T = v < 3 ? cuts[v] : 2;
    int64_t nc_sum = 0, nc_up = 0;
    for (int t = 0; t < T; t++) {
      int64_t r0 = pl->n * t / T, r1 = pl->n * (t + 1) / T;
      if (v == 3) r0 = t == 0 ? 1 : 77, r1 = t == 0 ? 77 : pl->n - 1;
      geod_plan band;
      CHECK(geod_plan_rows(pl, r0, r1, &band, &e) == 0);
      if (v == 3) { /* forced into passes over two lanes */
        band.gpu_mem_limit = 1 << 20;
        band.gpu_chunk_bytes = 64 << 10;
      }
      tarray *b = NULL;
      int64_t nc = 0;
      rc = run(&band, v == 3 ? 2 : 1, &b, &nc, &e);
      CHECK_MSG(rc == 0, "%s T=%d tile %d: %s", what, T, t, e.message);
      if (rc) continue;
      int64_t at = row_at(pl, r0), len = row_at(pl, r1) - at;
      CHECK_MSG(b->size == len, "%s T=%d tile %d: %lld elements, want %lld",
                what, T, t, (long long)b->size, (long long)len);
      CHECK_MSG(b->size == len &&
                    memcmp(b->data, (char *)whole->data + (size_t)at * es,
                           (size_t)len * es) == 0,
                "%s T=%d tile %d [%lld, %lld): not the whole's rows", what, T,
                t, (long long)r0, (long long)r1);
      nc_sum += nc;
      tarray_free(b);
      if (pl->condensed || pl->has_targets) continue;
      /* a square matrix's tile as a split job runs it: the rows' upper
       * part (geod_plan_upper, an ordinary plan with targets on the GPU):
       * every pair j > i is the whole matrix's, bit for bit */
      CHECK(geod_plan_upper(pl, r0, r1, &band, &e) == 0);
      if (v == 3) band.gpu_mem_limit = 1 << 20, band.gpu_chunk_bytes = 64 << 10;
      rc = run(&band, v == 3 ? 2 : 1, &b, &nc, &e);
      CHECK_MSG(rc == 0, "%s T=%d upper tile %d: %s", what, T, t, e.message);
      if (rc) continue;
      int64_t w = pl->n - r0, bad = 0;
      CHECK(b->ndim == 2 && b->shape[0] == r1 - r0 && b->shape[1] == w);
      for (int64_t i = r0; i < r1 && b->size == (r1 - r0) * w; i++) {
        bad += memcmp((char *)b->data + (size_t)((i - r0) * w + (i + 1 - r0)) * es,
                      (char *)whole->data + (size_t)(i * pl->m + i + 1) * es,
                      (size_t)(pl->n - i - 1) * es) != 0;
        for (int64_t j = r0; j <= i; j++) /* j <= i: written zero */
          bad += tarray_get(b, (i - r0) * w + j - r0) != 0.0;
      }
      nc_up += nc;
      CHECK_MSG(bad == 0, "%s T=%d upper tile %d [%lld, %lld): %lld rows "
                "differ from the whole's", what, T, t, (long long)r0,
                (long long)r1, (long long)bad);
      tarray_free(b);
    }
    if (v < 3)
      CHECK_MSG(nc_sum == ncw, "%s T=%d: non-converged %lld, whole %lld", what,
                T, (long long)nc_sum, (long long)ncw);
    if (v < 3 && !pl->condensed && !pl->has_targets) /* upper bands too */
      CHECK_MSG(nc_up == ncw, "%s T=%d: upper non-converged %lld, whole %lld",
                what, T, (long long)nc_up, (long long)ncw);
  }
  tarray_free(whole);
}

TEST(test_gpu_bands) {
  enum { N = 700, M = 230 };
  static double pts[N * 2], tgt[M * 2];
  for (int i = 0; i < N; i++) {
    pts[2 * i] = asin(2 * urand() - 1) / GEOD_DEG;
    pts[2 * i + 1] = 360 * urand() - 180;
  }
  /* a few nearly antipodal pairs: Vincenty's NaNs */
  pts[2] = 0, pts[3] = 0, pts[4] = 0.5, pts[5] = 179.7;
  for (int i = 0; i < M; i++) {
    tgt[2 * i] = 180 * urand() - 90;
    tgt[2 * i + 1] = 360 * urand() - 180;
  }
  struct {
    geod_method m;
    int condensed, targets;
    tdtype dt;
    const char *what;
  } c[] = {
      {GEOD_KARNEY, 0, 0, T_F64, "karney square f64"},
      {GEOD_KARNEY, 0, 0, T_F32, "karney square f32"},
      {GEOD_KARNEY, 1, 0, T_F64, "karney condensed f64"},
      {GEOD_KARNEY, 1, 0, T_F32, "karney condensed f32"},
      {GEOD_KARNEY, 0, 1, T_F64, "karney targets f64"},
      {GEOD_VINCENTY, 0, 0, T_F64, "vincenty square f64"},
      {GEOD_VINCENTY, 1, 0, T_F64, "vincenty condensed f64"},
      {GEOD_HAVERSINE, 0, 0, T_F32, "haversine square f32"},
      {GEOD_HAVERSINE, 0, 1, T_F64, "haversine targets f64"},
  };
  for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
    geod_plan *pl = NULL;
    terr e;
    int rc = geod_plan_build(c[k].m, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                             c[k].condensed, c[k].dt, pts, N,
                             c[k].targets ? tgt : NULL, c[k].targets ? M : 0,
                             &pl, &e);
    CHECK_MSG(rc == 0, "%s: %s", c[k].what, e.message);
    if (rc) continue;
    check_bands(pl, c[k].what);
    geod_plan_free(pl);
  }
}

int main(void) {
  char name[256];
  terr e;
  terr_clear(&e);
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0)
    SKIP_ALL_NO_GPU("%s", e.message);
  printf("device 0: %s\n", name);
  RUN(test_gpu_bands);
  return check_summary();
}

#else

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
