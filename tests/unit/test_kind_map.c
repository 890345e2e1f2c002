/* test_kind_map.c — the map and reduce kinds end to end below the
 * scheduler: params checking (every error names its field and position),
 * the estimate, prepare (inline, range, random and uploaded inputs), and
 * run on serial and cpu (2 threads through the real pool) — equal
 * bits, equal to a direct computation — plus cancel, cuda without a GPU
 * build, and the per-dtype compare tolerances.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/kinds.h"
#include "util/pool.h"
#include "util/util.h"

/* ---- a fake store with one uploaded float32 array [4] ------------------- */
static char up_id[T_ID_MAX];
static const float up_data[4] = {1.5f, -2.0f, 3.25f, 0.5f};

static int fake_meta(void *ud, const char *owner, const char *id, tdtype *dt,
                     int *ndim, int64_t *shape, terr *e) {
  (void)ud, (void)owner;
  if (strcmp(id, up_id) != 0)
    return terr_set(e, T_ENOTFOUND, "", -1, "array %s not found", id);
  *dt = T_F32, *ndim = 1, shape[0] = 4;
  return 0;
}
static int fake_load(void *ud, const char *owner, const char *id, tarray **out,
                     terr *e) {
  (void)ud, (void)owner;
  if (strcmp(id, up_id) != 0)
    return terr_set(e, T_ENOTFOUND, "", -1, "array %s not found", id);
  int64_t n = 4;
  *out = tarray_new(T_F32, 1, &n);
  memcpy((*out)->data, up_data, sizeof up_data);
  return 0;
}
static tenv env = {.owner = "", .array_meta = fake_meta,
                   .array_load = fake_load, .max_elems = 100000000};

static int res_alloc(job_ctx *c, tdtype dt, int nd, const int64_t *sh,
                     tarray **out, terr *e) {
  (void)c;
  *out = tarray_new(dt, nd, sh);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static pool *g_pool; /* the real pool, 2 workers, made in main */
static atomic_int g_stop;

static void ctx_init(job_ctx *c, int threads) {
  memset(c, 0, sizeof *c);
  c->pool = g_pool;
  c->threads = threads;
  c->stop = &g_stop;
  c->result_alloc = res_alloc;
}

static json_t *js(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!j) fprintf(stderr, "bad test json: %s\n", text);
  return j;
}

/* check must fail with this code, field, message and position. */
static void want_err(const kind_ops *k, const char *params, int code,
                     const char *field, const char *msg, int pos) {
  json_t *p = js(params);
  job_estimate est;
  terr e;
  terr_clear(&e);
  int rc = k->check(p, &env, &est, &e);
  CHECK_MSG(rc == code, "%s: rc %d (%s)", params, rc, e.message);
  CHECK_MSG(strcmp(e.field, field) == 0, "%s: field %s", params, e.field);
  CHECK_MSG(strcmp(e.message, msg) == 0, "%s: message \"%s\"", params,
            e.message);
  CHECK_MSG(e.position == pos, "%s: position %lld", params,
            (long long)e.position);
  json_decref(p);
}

TEST(test_map_check_errors) {
  const kind_ops *k = &kind_map_ops;
  want_err(k, "[]", T_EINVAL, "params", "params: must be an object", -1);
  want_err(k, "{\"inputs\": {}}", T_EINVAL, "params.expr",
           "params.expr: required", -1);
  want_err(k, "{\"expr\": 5}", T_EINVAL, "params.expr",
           "params.expr: must be a string", -1);
  want_err(k, "{\"expr\": \"x + foo(1)\", \"inputs\": {\"x\": 1}}", T_EINVAL,
           "params.expr", "params.expr: unknown function 'foo' at 4", 4);
  want_err(k, "{\"expr\": \"x + y\", \"inputs\": {\"x\": 1}}", T_EINVAL,
           "params.expr", "params.expr: unknown name 'y' at 4", 4);
  want_err(k, "{\"expr\": \"2 * (x\", \"inputs\": {\"x\": 1}}", T_EINVAL,
           "params.expr", "params.expr: expected ')' at 6", 6);
  want_err(k, "{\"expr\": \"x\", \"inputs\": {\"x\": 1, \"z\": 2}}", T_EINVAL,
           "params.inputs.z", "params.inputs.z: not used by the expression",
           -1);
  want_err(k, "{\"expr\": \"x\", \"inputs\": {\"x\": 1}, \"dtype\": \"int8\"}",
           T_EINVAL, "params.dtype",
           "params.dtype: must be \"float64\" or \"float32\"", -1);
  want_err(k, "{\"expr\": \"x\", \"inputs\": {\"x\": 1}, \"axis\": 0}",
           T_EINVAL, "params.axis", "params.axis: unknown field", -1);
  want_err(k, "{\"expr\": \"x\", \"inputs\": [1]}", T_EINVAL, "params.inputs",
           "params.inputs: must be an object", -1);
  want_err(k,
           "{\"expr\": \"a + b\", \"inputs\": {\"a\": [1, 2, 3], "
           "\"b\": [1, 2, 3, 4]}}",
           T_EINVAL, "params.inputs.b",
           "params.inputs.b: shapes [3] and [4] do not broadcast", -1);
  /* the input's own check names it */
  json_t *p = js("{\"expr\": \"a\", \"inputs\": {\"a\": [[1, 2], [3]]}}");
  job_estimate est;
  terr e;
  CHECK(k->check(p, &env, &est, &e) == T_EINVAL);
  CHECK(strncmp(e.field, "params.inputs.a", 15) == 0);
  json_decref(p);
  p = js("{\"expr\": \"a\", \"inputs\": {\"a\": {\"array\": \"a_00000000000000000000000000\"}}}");
  CHECK(k->check(p, &env, &est, &e) == T_ENOTFOUND);
  json_decref(p);
}

TEST(test_map_estimate) {
  json_t *p = js("{\"expr\": \"x**2 + 2*x + 1 + y\", \"dtype\": \"float32\", "
                 "\"inputs\": {\"x\": {\"random\": {\"shape\": [1000, 1], "
                 "\"seed\": 1}}, \"y\": {\"range\": {\"start\": 0, "
                 "\"stop\": 300, \"step\": 1}}}}");
  job_estimate est;
  terr e;
  CHECK(kind_map_ops.check(p, &env, &est, &e) == 0);
  CHECK(est.out_dtype == T_F32 && est.out_ndim == 2 &&
        est.out_shape[0] == 1000 && est.out_shape[1] == 300);
  CHECK(est.out_bytes == 1000 * 300 * 4);
  CHECK(est.in_bytes == (1000 + 300) * 4);
  CHECK(est.mem_bytes == est.in_bytes + est.out_bytes);
  CHECK(est.ops_per_elem == 5 && est.work == 5.0 * 300000);
  CHECK(est.size == 1000);
  json_decref(p);
}

/* prepare + run on a backend; the result (caller frees) or NULL. */
static tarray *run_kind(const kind_ops *k, const char *params, tbackend b,
                        int *rc_out) {
  json_t *p = js(params);
  void *plan = NULL;
  terr e;
  tarray *res = NULL;
  int rc = k->prepare(p, &env, &plan, &e);
  if (!rc) {
    job_ctx c;
    ctx_init(&c, 2);
    rc = k->run(plan, b, &c, &res, &e);
    if (!rc && atomic_load(&c.progress_done) != atomic_load(&c.progress_total))
      rc = -1;
  }
  if (rc && rc_out == NULL) fprintf(stderr, "%s: %s\n", params, e.message);
  if (rc_out) *rc_out = rc;
  k->release(plan);
  json_decref(p);
  return res;
}

TEST(test_map_run) {
  /* inline, broadcast: [[1],[2]] * [10, 20, 30] - uploaded-free */
  tarray *r = run_kind(&kind_map_ops,
                       "{\"expr\": \"a * b - 1\", \"inputs\": {\"a\": [[1], [2]],"
                       " \"b\": [10, 20, 30]}}",
                       B_SERIAL, NULL);
  CHECK(r && r->ndim == 2 && r->shape[0] == 2 && r->shape[1] == 3);
  double want[6] = {9, 19, 29, 19, 39, 59};
  for (int i = 0; r && i < 6; i++) CHECK(tarray_get(r, i) == want[i]);
  tarray_free(r);
  /* a million random values: serial and cpu equal, and equal to the
   * formula on the same generator */
  const char *big = "{\"expr\": \"sin(x)*exp(-x) + y %% 3\", \"inputs\": {\"x\": "
                    "{\"random\": {\"shape\": [1000, 1000], \"seed\": 42, "
                    "\"dist\": \"normal\"}}, \"y\": {\"range\": {\"start\": 0, "
                    "\"stop\": 1000, \"step\": 1}}}, \"dtype\": \"%s\"}";
  for (int f = 0; f < 2; f++) {
    char params[512];
    snprintf(params, sizeof params, big, f ? "float32" : "float64");
    tarray *s = run_kind(&kind_map_ops, params, B_SERIAL, NULL);
    tarray *c = run_kind(&kind_map_ops, params, B_CPU, NULL);
    CHECK(s && c && s->size == 1000000 && s->dtype == (f ? T_F32 : T_F64));
    if (s && c) {
      CHECK(memcmp(s->data, c->data, (size_t)s->size * tdtype_size(s->dtype)) == 0);
      int bad = 0;
      for (int64_t i = 0; i < s->size; i += 997) {
        double x = arrayval_normal(42, (uint64_t)i, 0, 1), y = (double)(i % 1000);
        double w = f ? (double)(sinf((float)x) * expf(-(float)x) + fmodf((float)y, 3))
                     : sin(x) * exp(-x) + fmod(y, 3);
        if (fabs(tarray_get(s, i) - w) > (f ? 1e-6 : 1e-15) * (1 + fabs(w))) bad++;
      }
      CHECK_MSG(bad == 0, "%d elements off", bad);
    }
    tarray_free(s);
    tarray_free(c);
  }
  /* an uploaded float32 array in a float64 job */
  char params[256];
  snprintf(params, sizeof params,
           "{\"expr\": \"u * 2\", \"inputs\": {\"u\": {\"array\": \"%s\"}}}",
           up_id);
  r = run_kind(&kind_map_ops, params, B_CPU, NULL);
  CHECK(r && r->size == 4 && tarray_get(r, 2) == 6.5);
  tarray_free(r);
  /* cuda without a CUDA build: unavailable, nothing leaked */
  int rc = 0;
  r = run_kind(&kind_map_ops, params, B_CUDA, &rc);
  CHECK(!r && (rc == T_EUNAVAIL || TESSEL_HAVE_CUDA));
  tarray_free(r);
}

TEST(test_map_cancel) {
  atomic_store(&g_stop, 1);
  int rc = 0;
  tarray *r = run_kind(&kind_map_ops,
                       "{\"expr\": \"x + 1\", \"inputs\": {\"x\": {\"random\": "
                       "{\"shape\": [300000], \"seed\": 1}}}}",
                       B_CPU, &rc);
  CHECK(r == NULL && rc == T_ECANCELED);
  atomic_store(&g_stop, 2);
  r = run_kind(&kind_map_ops,
               "{\"expr\": \"x + 1\", \"inputs\": {\"x\": {\"random\": "
               "{\"shape\": [300000], \"seed\": 1}}}}",
               B_SERIAL, &rc);
  CHECK(r == NULL && rc == T_ETIMEOUT);
  atomic_store(&g_stop, 0);
}

TEST(test_reduce_kind) {
  const kind_ops *k = &kind_reduce_ops;
  want_err(k, "{\"op\": \"median\", \"inputs\": {\"x\": [1]}}", T_EINVAL,
           "params.op",
           "params.op: must be one of sum, mean, min, max, prod, var, std, "
           "argmin, argmax, norm",
           -1);
  want_err(k, "{\"op\": \"sum\", \"inputs\": {\"x\": [1], \"y\": [2]}}",
           T_EINVAL, "params.expr",
           "params.expr: required unless there is exactly one input", -1);
  want_err(k, "{\"op\": \"sum\", \"inputs\": {\"x\": [[1, 2]]}, \"axis\": 2}",
           T_EINVAL, "params.axis",
           "params.axis: axis 2 is out of range for 2 dimensions", -1);
  want_err(k, "{\"op\": \"sum\", \"inputs\": {\"x\": [1]}, \"axis\": \"0\"}",
           T_EINVAL, "params.axis", "params.axis: must be null or an integer",
           -1);
  want_err(k, "{\"op\": \"var\", \"inputs\": {\"x\": [1]}, \"ddof\": -1}",
           T_EINVAL, "params.ddof", "params.ddof: must be a number >= 0", -1);
  want_err(k, "{\"op\": \"argmax\", \"inputs\": {\"x\": []}}", T_EINVAL,
           "params.inputs",
           "params.inputs: the inputs' shape [0] holds no element, and argmax "
           "of nothing is undefined (NumPy: zero-size array to reduction "
           "operation which has no identity)", -1);
  /* NumPy raises for an empty reduced axis even when there is no output
   * (np.zeros((0, 0)).min(axis=0)), and not for an empty non-reduced one */
  want_err(k, "{\"op\": \"min\", \"inputs\": {\"x\": []}, \"axis\": 0}",
           T_EINVAL, "params.axis",
           "params.axis: axis 0 of the inputs' shape [0] has length 0, and "
           "min of nothing is undefined (NumPy: zero-size array to reduction "
           "operation which has no identity)", -1);
  /* default expression, axis -1, sums exact on a range */
  tarray *r = run_kind(k,
                       "{\"op\": \"sum\", \"inputs\": {\"x\": {\"range\": "
                       "{\"start\": 0, \"stop\": 1000000, \"step\": 1}}}}",
                       B_CPU, NULL);
  CHECK(r && r->ndim == 0 && tarray_get(r, 0) == 499999500000.0);
  tarray_free(r);
  r = run_kind(k,
               "{\"op\": \"argmax\", \"expr\": \"-(x - 3)**2\", \"inputs\": "
               "{\"x\": [[0, 1, 2, 3, 4], [5, 3, 3, 1, 0]]}, \"axis\": -1}",
               B_SERIAL, NULL);
  CHECK(r && r->ndim == 1 && r->shape[0] == 2 && r->dtype == T_I64 &&
        tarray_get(r, 0) == 3 && tarray_get(r, 1) == 1); /* int64, as NumPy */
  tarray_free(r);
  r = run_kind(k,
               "{\"op\": \"std\", \"inputs\": {\"x\": [2, 4, 4, 4, 5, 5, 7, 9]},"
               " \"ddof\": 1, \"dtype\": \"float32\"}",
               B_CPU, NULL);
  CHECK(r && r->dtype == T_F32 &&
        fabs(tarray_get(r, 0) - sqrt(32.0 / 7)) < 1e-6);
  tarray_free(r);
  /* [100, 10000] per-row and per-column sums: serial == cpu */
  for (int axis = 0; axis < 2; axis++) {
    char params[256];
    snprintf(params, sizeof params,
             "{\"op\": \"mean\", \"expr\": \"x**2\", \"inputs\": {\"x\": "
             "{\"random\": {\"shape\": [100, 10000], \"seed\": 3}}}, "
             "\"axis\": %d}", axis);
    tarray *s = run_kind(k, params, B_SERIAL, NULL);
    tarray *c = run_kind(k, params, B_CPU, NULL);
    CHECK(s && c && s->size == (axis ? 100 : 10000));
    if (s && c) {
      CHECK(memcmp(s->data, c->data, (size_t)s->size * 8) == 0);
      /* E[u^2] = 1/3 for u uniform [0, 1) */
      CHECK(fabs(tarray_get(s, 7) - 1.0 / 3) < (axis ? 0.02 : 0.2));
    }
    tarray_free(s);
    tarray_free(c);
  }
  json_t *p = js("{\"op\": \"sum\", \"inputs\": {\"x\": {\"random\": "
                 "{\"shape\": [100, 10000], \"seed\": 3}}}, \"axis\": 0}");
  job_estimate est;
  terr e;
  CHECK(k->check(p, &env, &est, &e) == 0);
  CHECK(est.out_ndim == 1 && est.out_shape[0] == 10000 &&
        est.out_bytes == 80000 && est.size == 1000000);
  json_decref(p);
}

/* What the tolerances let through, not their values: a float64 map
 * accepts a few float64 roundings but not a float32 rounding (a backend
 * that computed in float32 is caught); a float32 map accepts a few float32
 * roundings; neither accepts a wrong digit in the fourth place. */
TEST(test_tolerances) {
  const char *ps[] = {
      "{\"expr\": \"x\", \"inputs\": {\"x\": [1]}}",
      "{\"expr\": \"x\", \"inputs\": {\"x\": [1]}, \"dtype\": \"float32\"}"};
  double rts[2] = {0, 0};
  for (int f = 0; f < 2; f++) {
    json_t *p = js(ps[f]);
    void *plan = NULL;
    terr e;
    CHECK(kind_map_ops.prepare(p, &env, &plan, &e) == 0);
    double rt = 0, at = 0;
    kind_map_ops.tolerance(plan, &rt, &at);
    rts[f] = rt;
    CHECK(at >= 0);
    kind_map_ops.release(plan);
    json_decref(p);
  }
  CHECK_MSG(rts[0] >= 4 * 0x1p-52 && rts[0] < 0x1p-24, "float64 rtol %g", rts[0]);
  CHECK_MSG(rts[1] >= 4 * 0x1p-23 && rts[1] < 1e-4, "float32 rtol %g", rts[1]);
}

int main(void) {
  g_pool = pool_create(2, NULL, NULL);
  if (!g_pool) return 1;
  t_id_new('a', up_id);
  RUN(test_map_check_errors);
  RUN(test_map_estimate);
  RUN(test_map_run);
  RUN(test_map_cancel);
  RUN(test_reduce_kind);
  RUN(test_tolerances);
  return check_summary();
}
