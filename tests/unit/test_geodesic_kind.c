/* test_geodesic_kind.c — the geodesic job kind through its kind_ops: params
 * validation (T_EINVAL with field and row), the estimate, every layout and
 * option, serial against the pool, cancellation between tiles, Vincenty's
 * non-convergence count, and the GPU entry without a GPU.
 *
 * The references are the core's own functions (compute/kinds/geodesic/geodesic.h), whose
 * accuracy test_geodesic_accuracy.c establishes; here the question is
 * whether the kind puts every pair in the right place, in the right unit
 * and type. CPU results are compared bit for bit: the tiles call the same
 * inline functions with the same flags.
 */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/geodesic/kind.h"
#include "util/pool.h"
#include "util/util.h"

static pool *g_pool;

/* ---- a job context whose results live on the heap ------------------- */

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  /* Poison: every element must be written by the kind. */
  for (int64_t i = 0; i < (*out)->size; i++) tarray_set(*out, i, -12345.0);
  return 0;
}

static atomic_int g_stop;

static void ctx_init(job_ctx *c) {
  memset(c, 0, sizeof *c);
  c->job_id = "j_test";
  c->pool = g_pool;
  c->threads = 2;
  c->stop = &g_stop;
  c->result_alloc = heap_alloc;
  atomic_store(&g_stop, 0);
}

/* ---- an environment with two uploaded arrays ------------------------- */

static tarray *g_up_ok, *g_up_nan;

static tarray *upload_for(const char *id) {
  if (strcmp(id, "a_0000000000000000000000000a") == 0) return g_up_ok;
  if (strcmp(id, "a_0000000000000000000000000b") == 0) return g_up_nan;
  return NULL;
}

static int env_meta(void *ud, const char *owner, const char *id, tdtype *dt,
                    int *ndim, int64_t *shape, terr *e) {
  (void)ud, (void)owner;
  tarray *a = upload_for(id);
  if (!a) return terr_set(e, T_ENOTFOUND, "", -1, "array %s not found", id);
  *dt = a->dtype;
  *ndim = a->ndim;
  for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
  return 0;
}

static int env_load(void *ud, const char *owner, const char *id, tarray **out,
                    terr *e) {
  (void)ud, (void)owner;
  tarray *a = upload_for(id);
  if (!a) return terr_set(e, T_ENOTFOUND, "", -1, "array %s not found", id);
  *out = tarray_clone(a);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static const tenv g_env = {.owner = "", .array_meta = env_meta,
                           .array_load = env_load, .max_elems = 100000000};

/* ---- helpers ----------------------------------------------------------- */

static json_t *parse(const char *text) {
  json_error_t je;
  json_t *v = json_loads(text, 0, &je);
  if (!v) fprintf(stderr, "bad test JSON: %s: %s\n", text, je.text);
  return v;
}

/* Check params and expect code/field/position (and a message fragment). */
static void expect_err(const char *params, int code, const char *field,
                       int64_t pos, const char *fragment) {
  json_t *p = parse(params);
  job_estimate est;
  terr e;
  terr_clear(&e);
  int rc = kind_geodesic_ops.check(p, &g_env, &est, &e);
  CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", params, rc, code,
            e.message);
  CHECK_MSG(strcmp(e.field, field) == 0, "%s: field '%s', want '%s'", params,
            e.field, field);
  CHECK_MSG(e.position == pos, "%s: position %lld, want %lld", params,
            (long long)e.position, (long long)pos);
  CHECK_MSG(!fragment || strstr(e.message, fragment), "%s: message '%s'",
            params, e.message);
  /* prepare (run time) must refuse the same params the same way. */
  void *plan = NULL;
  terr e2;
  terr_clear(&e2);
  int rc2 = kind_geodesic_ops.prepare(p, &g_env, &plan, &e2);
  CHECK_MSG(rc2 == code && e2.position == pos, "%s: prepare rc %d pos %lld",
            params, rc2, (long long)e2.position);
  kind_geodesic_ops.release(plan);
  json_decref(p);
}

/* Build params from JSON text, prepare, run on backend b. */
static int run_json(const char *params, tbackend b, job_ctx *ctx,
                    tarray **out, terr *e) {
  json_t *p = parse(params);
  void *plan = NULL;
  *out = NULL;
  int rc = kind_geodesic_ops.prepare(p, &g_env, &plan, e);
  if (!rc) rc = kind_geodesic_ops.run(plan, b, ctx, out, e);
  kind_geodesic_ops.release(plan);
  json_decref(p);
  return rc;
}

/* Random points as JSON text "[[lat, lon], ...]" (%.17g round-trips). */
static char *points_json(int n, uint64_t seed, double *lat, double *lon) {
  size_t cap = (size_t)n * 64 + 16, off = 0;
  char *s = malloc(cap);
  uint64_t z = seed;
  off += (size_t)snprintf(s + off, cap - off, "[");
  for (int i = 0; i < n; i++) {
    z += 0x9E3779B97F4A7C15ULL;
    double u = (double)((z * 0xBF58476D1CE4E5B9ULL) >> 11) * 0x1p-53;
    double v = (double)((z * 0x94D049BB133111EBULL) >> 11) * 0x1p-53;
    lat[i] = asin(2 * u - 1) / GEOD_DEG;
    lon[i] = 360 * v - 180;
    if (i % 17 == 5) lat[i] = -lat[i - 1], lon[i] = lon[i - 1] + 179.9; /* near-antipodal */
    if (i % 23 == 7) lat[i] = 90;                                      /* a pole */
    off += (size_t)snprintf(s + off, cap - off, "%s[%.17g, %.17g]",
                            i ? ", " : "", lat[i], lon[i]);
  }
  snprintf(s + off, cap - off, "]");
  return s;
}

/* ---- validation ----------------------------------------------------------- */

TEST(test_validation) {
  expect_err("{\"points\": [[0, 0], [10, 10], [20, 20], [91, 0]]}", T_EINVAL,
             "params.points", 3, "latitude 91 out of [-90, 90] at row 3");
  expect_err("{\"points\": [[0, 0], [-90.5, 10]]}", T_EINVAL, "params.points",
             1, "latitude -90.5 out of [-90, 90] at row 1");
  expect_err("{\"points\": [[0, 0, 1], [1, 1, 1]]}", T_EINVAL,
             "params.points", 1, "expected 2 columns");
  expect_err("{\"points\": [0, 1, 2, 3]}", T_EINVAL, "params.points", -1,
             "n x 2");
  expect_err("{\"points\": {\"range\": {\"stop\": 10}}}", T_EINVAL,
             "params.points", -1, "got shape [10]");
  expect_err("{\"points\": {\"array\": \"a_0000000000000000000000000b\"}}",
             T_EINVAL, "params.points", 2, "longitude is not finite");
  expect_err("{\"points\": [[0, 0]], \"targets\": [[1, 1], [100, 2]]}",
             T_EINVAL, "params.targets", 1, "latitude 100");
  expect_err("{\"points\": [[0, 0]], \"targets\": [[1, 1, 1]]}", T_EINVAL,
             "params.targets", 1, NULL);
  expect_err("{\"points\": {\"random\": {\"shape\": [5, 2], \"dist\": "
             "\"normal\", \"mean\": 0, \"std\": 1000, \"seed\": 1}}}",
             T_EINVAL, "params.points", 0, "out of [-90, 90]");
  expect_err("{\"targets\": [[0, 0]]}", T_EINVAL, "params.points", -1,
             "required");
  expect_err("{\"points\": [[0, 0]], \"method\": \"andoyer\"}", T_EINVAL,
             "params.method", -1, "unknown method");
  expect_err("{\"points\": [[0, 0]], \"units\": \"mi\"}", T_EINVAL,
             "params.units", -1, NULL);
  expect_err("{\"points\": [[0, 0]], \"layout\": \"tri\"}", T_EINVAL,
             "params.layout", -1, NULL);
  expect_err("{\"points\": [[0, 0]], \"dtype\": \"int8\"}", T_EINVAL,
             "params.dtype", -1, NULL);
  expect_err("{\"points\": [[0, 0]], \"ellipsoid\": \"Clarke1866\"}",
             T_EINVAL, "params.ellipsoid", -1, "unknown ellipsoid");
  expect_err("{\"points\": [[0, 0]], \"ellipsoid\": {\"a\": 6378137, "
             "\"f\": 0.03}}",
             T_EINVAL, "params.ellipsoid.f", -1, "out of [-1/50, 1/50]");
  expect_err("{\"points\": [[0, 0]], \"ellipsoid\": {\"a\": -1, \"f\": 0}}",
             T_EINVAL, "params.ellipsoid.a", -1, NULL);
  /* the user's numbers come back as written, not as %g's -6.378137e+06 */
  expect_err("{\"points\": [[0, 0]], \"ellipsoid\": {\"a\": -6378137, "
             "\"f\": 0}}",
             T_EINVAL, "params.ellipsoid.a", -1,
             "equatorial radius -6378137 must be positive");
  expect_err("{\"points\": [[0, 0]], \"radius_m\": -2000000}", T_EINVAL,
             "params.radius_m", -1, "radius -2000000 must be positive");
  expect_err("{\"points\": [[0, 0]], \"query\": {\"radius\": {\"r\": "
             "-2500000.5}}}",
             T_EINVAL, "params.query.radius.r", -1,
             "radius -2500000.5 must be >= 0");
  expect_err("{\"points\": [[0, 0]], \"ellipsoid\": {\"a\": 1, \"b\": 0}}",
             T_EINVAL, "params.ellipsoid", -1, "unknown key 'b'");
  expect_err("{\"points\": [[0, 0]], \"radius_m\": 0}", T_EINVAL,
             "params.radius_m", -1, NULL);
  expect_err("{\"points\": [[0, 0]], \"targets\": [[1, 1]], \"layout\": "
             "\"condensed\"}",
             T_EINVAL, "params.layout", -1, NULL);
  expect_err("{\"points\": [[0, 0]], \"target\": [[1, 1]]}", T_EINVAL,
             "params", -1, "unknown parameter 'target'");
  expect_err("[1, 2]", T_EINVAL, "params", -1, NULL);
}

TEST(test_estimate) {
  job_estimate est;
  terr e;
  json_t *p = parse("{\"points\": {\"random\": {\"shape\": [1000, 2], "
                    "\"low\": -90, \"high\": 90, \"seed\": 7}}}");
  CHECK(kind_geodesic_ops.check(p, &g_env, &est, &e) == 0);
  CHECK(est.out_ndim == 2 && est.out_shape[0] == 1000 &&
        est.out_shape[1] == 1000);
  CHECK(est.out_bytes == 8000000 && est.out_dtype == T_F64);
  CHECK(est.work == 1000.0 * 999 / 2 && est.size == 1000);
  json_decref(p);
  p = parse("{\"points\": {\"random\": {\"shape\": [1000, 2], \"low\": -90, "
            "\"high\": 90}}, \"layout\": \"condensed\", \"dtype\": "
            "\"float32\", \"method\": \"haversine\"}");
  CHECK(kind_geodesic_ops.check(p, &g_env, &est, &e) == 0);
  CHECK(est.out_ndim == 1 && est.out_shape[0] == 499500);
  CHECK(est.out_bytes == 499500 * 4 && est.out_dtype == T_F32);
  CHECK(est.ops_per_elem == GEOD_COST_HAVERSINE_NS);
  json_decref(p);
  /* Big jobs are refused without building anything: a result is an array,
   * so over the element cap (--max-elements) it is a 413 at submit. */
  p = parse("{\"points\": {\"random\": {\"shape\": [3000000, 2], \"low\": "
            "-90, \"high\": 90}}, \"targets\": {\"random\": {\"shape\": "
            "[2000000, 2], \"low\": -90, \"high\": 90}}}");
  CHECK(kind_geodesic_ops.check(p, &g_env, &est, &e) == T_ETOOLARGE);
  CHECK_STR(e.field, "params");
  CHECK(strstr(e.message, "6000000000000 elements") != NULL);
  /* under a cap that allows it, the estimate is the size */
  tenv big = g_env;
  big.max_elems = (int64_t)1 << 50;
  CHECK(kind_geodesic_ops.check(p, &big, &est, &e) == 0);
  CHECK(est.out_bytes == (int64_t)3000000 * 2000000 * 8);
  json_decref(p);
  /* no point at all: an empty result, not an error */
  p = parse("{\"points\": {\"range\": {\"stop\": 0}}}");
  json_decref(p);
}

/* ---- results ------------------------------------------------------------- */

#define NP 300
static double g_lat[NP], g_lon[NP];
static char *g_pts; /* JSON of the NP points */

static const char *method_names[] = {"karney", "vincenty", "haversine"};

TEST(test_square_and_condensed) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  for (int mi = 0; mi < 3; mi++) {
    size_t cap = strlen(g_pts) + 256;
    char *params = malloc(cap), *cparams = malloc(cap);
    snprintf(params, cap, "{\"points\": %s, \"method\": \"%s\"}", g_pts,
             method_names[mi]);
    snprintf(cparams, cap,
             "{\"points\": %s, \"method\": \"%s\", \"layout\": "
             "\"condensed\"}",
             g_pts, method_names[mi]);
    job_ctx ctx;
    terr e;
    tarray *sq = NULL, *cd = NULL, *ser = NULL;
    ctx_init(&ctx);
    CHECK(run_json(params, B_CPU, &ctx, &sq, &e) == 0);
    CHECK(atomic_load(&ctx.progress_done) == atomic_load(&ctx.progress_total));
    CHECK(atomic_load(&ctx.progress_total) >= (mi == 2 ? 1 : 6)); /* tiles */
    int64_t nc_cpu = ctx.nonconverged;
    ctx_init(&ctx);
    CHECK(run_json(params, B_SERIAL, &ctx, &ser, &e) == 0);
    CHECK(ctx.nonconverged == nc_cpu);
    ctx_init(&ctx);
    CHECK(run_json(cparams, B_CPU, &ctx, &cd, &e) == 0);
    if (!sq || !cd || !ser) return;
    CHECK(sq->ndim == 2 && sq->shape[0] == NP && sq->shape[1] == NP);
    CHECK(cd->ndim == 1 && cd->shape[0] == NP * (NP - 1) / 2);
    /* serial == cpu, bit for bit (NaNs included). */
    CHECK(memcmp(sq->data, ser->data, (size_t)sq->size * 8) == 0);
    const double *S = sq->data, *C = cd->data;
    int64_t k = 0, bad = 0, nans = 0;
    for (int i = 0; i < NP; i++) {
      CHECK(S[i * NP + i] == 0);
      for (int j = 0; j < NP; j++) {
        double s = S[i * NP + j], t = S[j * NP + i];
        if (!(memcmp(&s, &t, 8) == 0)) bad++; /* symmetric */
        if (s == -12345.0) bad++;              /* written */
      }
      for (int j = i + 1; j < NP; j++, k++) { /* SciPy pdist order */
        double ref;
        geod_point p, q;
        long long nc = 0;
        if (mi == 2) {
          geod_point_prep_sphere(g_lat[i], g_lon[i], &p);
          geod_point_prep_sphere(g_lat[j], g_lon[j], &q);
          ref = geod_inverse_haversine_pp(&p, &q, 6371008.8);
        } else {
          geod_point_prep(&g, g_lat[i], g_lon[i], &p);
          geod_point_prep(&g, g_lat[j], g_lon[j], &q);
          ref = mi == 0 ? geod_inverse_karney_pp(&g, &p, &q)
                        : geod_inverse_vincenty_pp(&g, &p, &q, &nc);
        }
        nans += isnan(ref);
        if (memcmp(&C[k], &ref, 8) != 0 || memcmp(&S[i * NP + j], &ref, 8))
          bad++;
      }
    }
    CHECK(k == cd->size);
    CHECK_MSG(bad == 0, "%s: %lld misplaced", method_names[mi], (long long)bad);
    if (mi == 1) { /* the near-antipodal rows make Vincenty fail */
      CHECK(nans > 0 && nc_cpu == nans);
    } else {
      CHECK(nans == 0 && nc_cpu == 0);
    }
    tarray_free(sq);
    tarray_free(cd);
    tarray_free(ser);
    free(params);
    free(cparams);
  }
}

TEST(test_targets_units_dtype) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, 6378137, 1.0 / 50);
  size_t len = strlen(g_pts) * 2 + 512;
  char *params = malloc(len);
  /* points = the first 40 of the set (an inline slice), targets = all NP */
  int n = 40;
  size_t hcap = strlen(g_pts) + 8, off = 0;
  char *head = malloc(hcap);
  off += (size_t)snprintf(head, hcap, "[");
  for (int i = 0; i < n; i++)
    off += (size_t)snprintf(head + off, hcap - off, "%s[%.17g, %.17g]",
                            i ? ", " : "", g_lat[i], g_lon[i]);
  snprintf(head + off, hcap - off, "]");
  snprintf(params, len,
           "{\"points\": %s, \"targets\": %s, \"units\": \"km\", "
           "\"ellipsoid\": {\"a\": 6378137, \"f\": 0.02}, \"dtype\": "
           "\"float32\"}",
           head, g_pts);
  job_ctx ctx;
  terr e;
  tarray *r = NULL;
  ctx_init(&ctx);
  CHECK(run_json(params, B_CPU, &ctx, &r, &e) == 0);
  if (r) {
    CHECK(r->dtype == T_F32 && r->ndim == 2 && r->shape[0] == n &&
          r->shape[1] == NP);
    const float *R = r->data;
    int64_t bad = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < NP; j++) {
        float want = (float)(geod_inverse_karney(&g, g_lat[i], g_lon[i],
                                                 g_lat[j], g_lon[j]) /
                             1000);
        if (R[i * NP + j] != want) bad++;
      }
    CHECK(bad == 0);
  }
  tarray_free(r);
  free(params);
  free(head);
}

TEST(test_array_forms) {
  /* An upload (float32, as a .npy upload may be), and random points. */
  job_ctx ctx;
  terr e;
  tarray *r = NULL;
  ctx_init(&ctx);
  CHECK(run_json("{\"points\": {\"array\": \"a_0000000000000000000000000a\"},"
                 " \"method\": \"haversine\", \"radius_m\": 1000}",
                 B_SERIAL, &ctx, &r, &e) == 0);
  if (r) {
    /* (0, 0) to (0, 90) on a sphere of 1 km: a quarter circle. */
    CHECK_NEAR(((double *)r->data)[1], GEOD_PI / 2 * 1000, 1e-9);
    CHECK(((double *)r->data)[2] == ((double *)r->data)[1]);
    CHECK(((double *)r->data)[0] == 0 && ((double *)r->data)[3] == 0);
  }
  tarray_free(r);
  ctx_init(&ctx);
  CHECK(run_json("{\"points\": {\"random\": {\"shape\": [50, 2], \"low\": "
                 "-90, \"high\": 90, \"seed\": 3}}, \"layout\": "
                 "\"condensed\"}",
                 B_CPU, &ctx, &r, &e) == 0);
  if (r) {
    CHECK(r->size == 50 * 49 / 2);
    for (int64_t i = 0; i < r->size; i++)
      CHECK(((double *)r->data)[i] > 0 && ((double *)r->data)[i] < 2.01e7);
  }
  tarray_free(r);
  ctx_init(&ctx); /* one point: an empty condensed result */
  CHECK(run_json("{\"points\": [[1, 2]], \"layout\": \"condensed\"}", B_CPU,
                 &ctx, &r, &e) == 0);
  CHECK(r && r->size == 0);
  tarray_free(r);
}

/* Runs the job on another thread; the test stops it once a tile is done. */
typedef struct canc {
  job_ctx ctx;
  int rc;
  terr e;
  tarray *r;
} canc;

static void *cancel_main(void *arg) {
  canc *c = arg;
  size_t cap = strlen(g_pts) * 8 + 256;
  char *params = malloc(cap);
  /* 8 copies of the points: 2400 points, ~2.9 million pairs. */
  size_t off = (size_t)snprintf(params, cap, "{\"points\": [");
  for (int k = 0; k < 8; k++)
    off += (size_t)snprintf(params + off, cap - off, "%s%.*s", k ? ", " : "",
                            (int)strlen(g_pts) - 2, g_pts + 1);
  snprintf(params + off, cap - off, "]}");
  c->rc = run_json(params, B_CPU, &c->ctx, &c->r, &c->e);
  free(params);
  return NULL;
}

TEST(test_cancel_between_tiles) {
  for (int code = 1; code <= 2; code++) {
    canc c;
    memset(&c, 0, sizeof c);
    ctx_init(&c.ctx);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, cancel_main, &c) == 0);
    for (int k = 0; k < 20000 && atomic_load(&c.ctx.progress_done) < 1; k++)
      usleep(100);
    atomic_store(&g_stop, code); /* 1 canceled, 2 timed out */
    pthread_join(th, NULL);
    CHECK(c.rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT));
    CHECK(c.r == NULL);
    int64_t done = atomic_load(&c.ctx.progress_done);
    int64_t total = atomic_load(&c.ctx.progress_total);
    printf("stop %d after %lld of %lld tiles\n", code, (long long)done,
           (long long)total);
    CHECK(done >= 1 && done < total);
  }
}

/* Prepare builds its points by chunks on the run's pool: the same plan,
 * bit for bit, on 1 or 3 threads, and none once the job's stop flag is set
 * (a cancel during a long prepare; issue 15). */
TEST(test_prepare_chunks_and_stop) {
  int64_t n = (1 << 18) * 3 + 11; /* several of plan.c's chunks, a ragged end */
  double *pts = malloc((size_t)n * 2 * sizeof *pts);
  for (int64_t i = 0; i < n; i++) {
    pts[2 * i] = arrayval_uniform(3, (uint64_t)(2 * i), -90, 90);
    pts[2 * i + 1] = arrayval_uniform(3, (uint64_t)(2 * i + 1), -180, 180);
  }
  pool *p3 = pool_create(3, NULL, NULL);
  for (int m = 0; m < 2; m++) {
    geod_method meth = m ? GEOD_HAVERSINE : GEOD_KARNEY;
    geod_plan *a = NULL, *b = NULL;
    terr e;
    CHECK(geod_plan_build(meth, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1, 0,
                          T_F64, pts, n, pts, n / 2, &a, &e) == 0);
    CHECK(geod_plan_build_on(meth, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                             0, T_F64, pts, n, pts, n / 2, p3, 3, NULL, &b,
                             &e) == 0);
    CHECK(a && b && memcmp(a->p, b->p, (size_t)n * sizeof *a->p) == 0 &&
          memcmp(a->q, b->q, (size_t)(n / 2) * sizeof *a->q) == 0);
    geod_plan_free(a);
    geod_plan_free(b);
  }
  /* stopped: 1 canceled, 2 timed out; on the pool and on one thread */
  for (int code = 1; code <= 2; code++)
    for (int w = 1; w <= 3; w += 2) {
      atomic_int st;
      atomic_init(&st, code);
      geod_plan *pl = NULL;
      terr e;
      terr_clear(&e);
      int rc = geod_plan_build_on(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 0,
                                  1, 0, T_F64, pts, n, NULL, 0, p3, w, &st,
                                  &pl, &e);
      CHECK_MSG(rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT),
                "stop %d width %d: rc %d", code, w, rc);
      CHECK(pl == NULL && strcmp(e.field, "params.points") == 0);
    }
  /* the points' check and the whole prepare see the flag too */
  tarray *t = tarray_new(T_F64, 2, (int64_t[]){n, 2});
  memcpy(t->data, pts, (size_t)n * 2 * sizeof *pts);
  atomic_int st;
  atomic_init(&st, 1);
  tenv env = g_env;
  env.stop = &st;
  terr e;
  CHECK(geod_points_validate(t, "params.points", &g_env, &e) == 0);
  CHECK(geod_points_validate(t, "params.points", &env, &e) == T_ECANCELED);
  json_t *params = parse("{\"points\": {\"random\": {\"shape\": [1000, 2], "
                         "\"low\": -50, \"high\": 50}}}");
  void *plan = NULL;
  CHECK(kind_geodesic_ops.prepare(params, &env, &plan, &e) == T_ECANCELED);
  CHECK(plan == NULL);
  atomic_store(&st, 0);
  env.pool = p3, env.width = 3;
  CHECK(kind_geodesic_ops.prepare(params, &env, &plan, &e) == 0 && plan);
  kind_geodesic_ops.release(plan);
  json_decref(params);
  tarray_free(t);
  pool_destroy(p3);
  free(pts);
}

/* prepare checks --max-result (and --max-elements) against the points it
 * read, not only the submit's check: 10 points give an 800-byte matrix. */
TEST(test_prepare_enforces_the_limits) {
  json_t *params = parse("{\"points\": {\"random\": {\"shape\": [10, 2], "
                         "\"low\": -50, \"high\": 50}}}");
  tenv env = g_env;
  void *plan = NULL;
  terr e;
  env.max_result_bytes = 799;
  CHECK(kind_geodesic_ops.prepare(params, &env, &plan, &e) == T_ETOOLARGE);
  CHECK(plan == NULL && strcmp(e.field, "params") == 0);
  env.max_result_bytes = 800;
  env.max_elems = 99;
  CHECK(kind_geodesic_ops.prepare(params, &env, &plan, &e) == T_ETOOLARGE);
  CHECK(plan == NULL);
  env.max_elems = 100;
  CHECK(kind_geodesic_ops.prepare(params, &env, &plan, &e) == 0 && plan);
  kind_geodesic_ops.release(plan);
  json_decref(params);
}

TEST(test_gpu_entry_without_gpu) {
  job_ctx ctx;
  terr e;
  tarray *r = NULL;
  ctx_init(&ctx);
  int rc = run_json("{\"points\": [[0, 0], [1, 1]]}", B_CUDA, &ctx, &r, &e);
  if (rc == 0) { /* a GPU is there: then it must agree */
    CHECK(r && fabs(((double *)r->data)[1] - 156899.568) < 1e-3);
  } else {
    CHECK_MSG(rc == T_EUNAVAIL, "rc %d: %s", rc, e.message);
    CHECK(r == NULL);
  }
  tarray_free(r);
}

int main(void) {
  t_log_level = T_LOG_ERROR; /* Vincenty's NaN warnings are expected here */
  g_pool = pool_create(2, NULL, NULL);
  if (!g_pool) {
    fprintf(stderr, "pool_create failed\n");
    return 1;
  }
  int64_t sh[2] = {2, 2};
  g_up_ok = tarray_new(T_F32, 2, sh);
  float *f = g_up_ok->data;
  f[0] = 0, f[1] = 0, f[2] = 0, f[3] = 90;
  int64_t sh3[2] = {3, 2};
  g_up_nan = tarray_zeros(T_F64, 2, sh3);
  ((double *)g_up_nan->data)[5] = NAN;
  g_pts = points_json(NP, 42, g_lat, g_lon);

  RUN(test_validation);
  RUN(test_estimate);
  RUN(test_square_and_condensed);
  RUN(test_targets_units_dtype);
  RUN(test_array_forms);
  RUN(test_cancel_between_tiles);
  RUN(test_prepare_chunks_and_stop);
  RUN(test_prepare_enforces_the_limits);
  RUN(test_gpu_entry_without_gpu);

  free(g_pts);
  tarray_free(g_up_ok);
  tarray_free(g_up_nan);
  pool_destroy(g_pool);
  return check_summary();
}
