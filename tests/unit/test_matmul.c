/* test_matmul.c — the matmul kind against a naive long double reference.
 *
 * Every case goes through the kind's own check -> prepare -> run, on
 * B_SERIAL and on B_CPU (2 threads through the pool, panels), and each
 * element must lie within the rounding bound of a length-k dot product:
 *   |x - ref| <= 4 (k + 2) u (|a|.|b|)_ij + |bias_ij|) + u |ref|
 * with u = 2^-53 (float64) or 2^-24 (float32, against a reference built from
 * the float32-rounded inputs). Covered: transposes, 1-D operands (numpy's
 * matrix @ vector), every bias form, empty dimensions, float32, shape and
 * param errors naming the field and both shapes, the estimate, the
 * per-plan tolerance, stopping, serial vs cpu agreement, and the CUDA entry
 * answering cleanly where there is no GPU.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/kinds.h"
#include "compute/kinds/matmul/lanes.h"
#include "util/pool.h"

static pool *the_pool;

/* ---- running one job -------------------------------------------------------- */

static int alloc_heap(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static atomic_int stop_flag;
static int stop_after_alloc;
static int alloc_then_stop(job_ctx *ctx, tdtype dt, int ndim,
                           const int64_t *shape, tarray **out, terr *e) {
  atomic_store(&stop_flag, stop_after_alloc);
  return alloc_heap(ctx, dt, ndim, shape, out, e);
}

static const tenv env = {.owner = "", .max_elems = 10000000};

/* Run params text on backend b; NULL on error (e filled, *rc set). */
static tarray *run_text(const char *text, tbackend b, int *rc, terr *e) {
  json_t *p = json_loads(text, 0, NULL);
  tarray *out = NULL;
  void *plan = NULL;
  terr_clear(e);
  *rc = -1;
  if (!p) return NULL;
  job_estimate est;
  *rc = kind_matmul_ops.check(p, &env, &est, e);
  if (*rc == 0) *rc = kind_matmul_ops.prepare(p, &env, &plan, e);
  if (*rc == 0) {
    job_ctx ctx = {.pool = the_pool, .threads = b == B_CPU ? 2 : 1,
                   .stop = &stop_flag, .result_alloc = alloc_heap};
    atomic_store(&stop_flag, 0);
    *rc = kind_matmul_ops.run(plan, b, &ctx, &out, e);
    if (*rc == 0 && atomic_load(&ctx.progress_done) != atomic_load(&ctx.progress_total))
      *rc = -2;
  }
  kind_matmul_ops.release(plan);
  json_decref(p);
  return out;
}

/* ---- the reference ---------------------------------------------------------- */

typedef struct mat {
  int64_t r, c;
  double *v;
} mat;

static uint64_t rng = 0x1234567;
static double rnd(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) * 0x1p-53 * 2 - 1;
}

static mat mk(int64_t r, int64_t c, int f32) {
  mat m = {r, c, malloc((size_t)(r * c > 0 ? r * c : 1) * sizeof(double))};
  for (int64_t i = 0; i < r * c; i++) {
    m.v[i] = rnd() * 10;
    if (f32) m.v[i] = (float)m.v[i];
  }
  return m;
}

/* JSON text of m as nested arrays (1-D when r < 0: c elements). */
static char *mat_json(const mat *m, int one_d) {
  size_t cap = (size_t)(m->r * m->c) * 28 + 16 + (size_t)m->r * 4, n = 0;
  char *s = malloc(cap);
  if (!one_d) s[n++] = '[';
  for (int64_t i = 0; i < (one_d ? 1 : m->r); i++) {
    if (i) s[n++] = ',';
    s[n++] = '[';
    for (int64_t j = 0; j < m->c; j++)
      n += (size_t)snprintf(s + n, cap - n, "%s%.17g", j ? "," : "", m->v[i * m->c + j]);
    s[n++] = ']';
  }
  if (!one_d) s[n++] = ']';
  s[n] = 0;
  return s;
}

/* Check out against op(A) op(B) + bias (bias given as a full m x n matrix
 * or NULL). */
static void check_against(const tarray *out, const mat *A, int ta,
                          const mat *B, int tb, const double *bias, int f32,
                          double *maxerr) {
  int64_t m = ta ? A->c : A->r, k = ta ? A->r : A->c, n = tb ? B->r : B->c;
  double u = f32 ? 0x1p-24 : 0x1p-53;
  CHECK(out && out->size == m * n);
  if (!out || out->size != m * n) return;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      long double s = 0, sabs = 0;
      for (int64_t l = 0; l < k; l++) {
        double a = ta ? A->v[l * A->c + i] : A->v[i * A->c + l];
        double b = tb ? B->v[j * B->c + l] : B->v[l * B->c + j];
        s += (long double)a * b;
        sabs += fabsl((long double)a * b);
      }
      double bb = bias ? bias[i * n + j] : 0;
      if (f32) bb = (float)bb;
      double ref = (double)(s + bb);
      double tol = 4.0 * ((double)k + 2) * u * ((double)sabs + fabs(bb)) + u * fabs(ref);
      double got = tarray_get(out, i * n + j), err = fabs(got - ref);
      if (maxerr && sabs > 0 && err / (double)sabs > *maxerr) *maxerr = err / (double)sabs;
      CHECK_MSG(err <= tol, "[%lld,%lld] got %.17g ref %.17g tol %g",
                (long long)i, (long long)j, got, ref, tol);
    }
}

/* ---- tests ------------------------------------------------------------------ */

static void one_case(int64_t m, int64_t k, int64_t n, int ta, int tb, int f32) {
  mat A = ta ? mk(k, m, f32) : mk(m, k, f32), B = tb ? mk(n, k, f32) : mk(k, n, f32);
  char *ja = mat_json(&A, 0), *jb = mat_json(&B, 0);
  size_t cap = strlen(ja) + strlen(jb) + 200;
  char *text = malloc(cap);
  snprintf(text, cap, "{\"a\": %s, \"b\": %s, \"transpose_a\": %s, \"transpose_b\": %s, \"dtype\": \"%s\"}",
           ja, jb, ta ? "true" : "false", tb ? "true" : "false", f32 ? "float32" : "float64");
  for (int b = B_SERIAL; b <= B_CPU; b++) {
    int rc;
    terr e;
    tarray *out = run_text(text, (tbackend)b, &rc, &e);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, e.message);
    CHECK(out && out->dtype == (f32 ? T_F32 : T_F64) && out->ndim == 2 &&
          out->shape[0] == m && out->shape[1] == n);
    check_against(out, &A, ta, &B, tb, NULL, f32, NULL);
    tarray_free(out);
  }
  free(text); free(ja); free(jb); free(A.v); free(B.v);
}

TEST(shapes_and_transposes) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      one_case(37, 53, 29, ta, tb, 0);
      one_case(5, 300, 170, ta, tb, 0); /* wider than tall: column panels */
      one_case(1, 7, 1, ta, tb, 0);
    }
  one_case(257, 64, 3, 0, 0, 0);
}

TEST(float32) {
  one_case(61, 200, 47, 0, 0, 1);
  one_case(61, 200, 47, 1, 1, 1);
}

TEST(bias_forms) {
  int64_t m = 6, k = 5, n = 4;
  mat A = mk(m, k, 0), B = mk(k, n, 0), F = mk(m, n, 0);
  char *ja = mat_json(&A, 0), *jb = mat_json(&B, 0);
  double full[24];
  struct { const char *bias; } forms[] = {
      {"2.5"}, {"[1, 2, 3, 4]"}, {"[[1, 2, 3, 4]]"}, {"[[1], [2], [3], [4], [5], [6]]"},
      {"FULL"}, {"[[7]]"}, {"[9]"}};
  for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        full[i * n + j] = f == 0 ? 2.5 : f == 1 || f == 2 ? (double)(j + 1)
                        : f == 3 ? (double)(i + 1) : f == 4 ? F.v[i * n + j]
                        : f == 5 ? 7 : 9;
    char *jf = mat_json(&F, 0);
    char text[8192];
    snprintf(text, sizeof text, "{\"a\": %s, \"b\": %s, \"bias\": %s}", ja, jb,
             f == 4 ? jf : forms[f].bias);
    free(jf);
    for (int b = B_SERIAL; b <= B_CPU; b++) {
      int rc;
      terr e;
      tarray *out = run_text(text, (tbackend)b, &rc, &e);
      CHECK_MSG(rc == 0, "form %zu: %s", f, e.message);
      check_against(out, &A, 0, &B, 0, full, 0, NULL);
      tarray_free(out);
    }
  }
  /* forms that do not broadcast: the message names bias and all shapes */
  const char *bad[] = {"[1, 2, 3]", "[[1], [2]]", "[[[1]]]", "[[1, 2, 3, 4], [1, 2, 3, 4]]"};
  for (size_t i = 0; i < 4; i++) {
    char text[8192];
    snprintf(text, sizeof text, "{\"a\": %s, \"b\": %s, \"bias\": %s}", ja, jb, bad[i]);
    int rc;
    terr e;
    CHECK(run_text(text, B_SERIAL, &rc, &e) == NULL && rc == T_EINVAL);
    CHECK_STR(e.field, "params.bias");
    CHECK_MSG(strstr(e.message, "does not broadcast to the output [6, 4] (a [6, 5] @ b [5, 4])"),
              "%s", e.message);
  }
  free(ja); free(jb); free(A.v); free(B.v); free(F.v);
}

TEST(vectors) {
  int rc;
  terr e;
  /* matrix @ vector: b is a column, the result is [m] (numpy's matmul) */
  tarray *o = run_text("{\"a\": [[1, 2, 3], [4, 5, 6]], \"b\": [1, 0, -1], \"bias\": [10, 20]}",
                       B_SERIAL, &rc, &e);
  CHECK(o && o->ndim == 1 && o->shape[0] == 2 && tarray_get(o, 0) == 8 && tarray_get(o, 1) == 18);
  tarray_free(o);
  o = run_text("{\"a\": [[1, 2, 3], [4, 5, 6]], \"b\": [1, 0, -1], \"transpose_b\": true}", B_CPU, &rc, &e);
  CHECK(o && o->ndim == 1 && tarray_get(o, 0) == -2 && tarray_get(o, 1) == -2);
  tarray_free(o);
  /* vector @ matrix: a is a row, the result is [n] */
  o = run_text("{\"a\": [1, 1], \"b\": [[1, 2, 3], [4, 5, 6]], \"bias\": 0.5}", B_CPU, &rc, &e);
  CHECK(o && o->ndim == 1 && o->shape[0] == 3 && tarray_get(o, 2) == 9.5);
  tarray_free(o);
  o = run_text("{\"a\": [1, 2], \"b\": [[1, 2], [3, 4], [5, 6]], \"transpose_b\": true, \"bias\": [1, 1, 1]}",
               B_SERIAL, &rc, &e);
  CHECK(o && o->ndim == 1 && o->shape[0] == 3 && tarray_get(o, 0) == 6 && tarray_get(o, 2) == 18);
  tarray_free(o);
  /* vector @ vector: 0-d */
  o = run_text("{\"a\": [1, 2, 3], \"b\": [4, 5, 6], \"bias\": 1}", B_CPU, &rc, &e);
  CHECK(o && o->ndim == 0 && tarray_get(o, 0) == 33);
  tarray_free(o);
  /* [m] output: the bias [m] is a column, [n]-shaped ones are refused */
  o = run_text("{\"a\": [[1, 2], [3, 4], [5, 6]], \"b\": [1, 1], \"bias\": [1, 2]}", B_SERIAL, &rc, &e);
  CHECK(!o && rc == T_EINVAL && strstr(e.message, "output [3]"));
}

TEST(empty_dims) {
  int rc;
  terr e;
  /* k = 0: the sum is empty, out = bias */
  tarray *o = run_text("{\"a\": {\"random\": {\"shape\": [3, 1]}}, \"b\": [[1, 2]], \"bias\": 1}", B_SERIAL, &rc, &e);
  CHECK(o && o->size == 6);
  tarray_free(o);
  for (int b = B_SERIAL; b <= B_CPU; b++) {
    o = run_text("{\"a\": [[], [], []], \"b\": [], \"bias\": 2}", (tbackend)b, &rc, &e);
    CHECK_MSG(rc == 0, "%s", e.message);
    CHECK(o && o->ndim == 1 && o->shape[0] == 3 && tarray_get(o, 0) == 2 && tarray_get(o, 2) == 2);
    tarray_free(o);
  }
  o = run_text("{\"a\": [], \"b\": []}", B_CPU, &rc, &e);
  CHECK(rc == 0 && o && o->ndim == 0 && tarray_get(o, 0) == 0);
  tarray_free(o);
}

TEST(errors) {
  struct { const char *text; int rc; const char *field; const char *msg; } bad[] = {
      {"{\"a\": [[1, 2, 3]], \"b\": [[1, 2]]}", T_EINVAL, "params.b",
       "shape [1, 2] does not match params.a [1, 3]: inner dimensions 1 and 3 differ"},
      {"{\"a\": [[1, 2, 3]], \"b\": [[1, 2, 3], [4, 5, 6]], \"transpose_a\": true}", T_EINVAL, "params.b",
       "shape [2, 3] does not match params.a [1, 3] (transposed): inner dimensions 2 and 1 differ"},
      {"{\"a\": [[1, 2, 3]], \"b\": [[1, 2], [3, 4]], \"transpose_b\": true}", T_EINVAL, "params.b",
       "shape [2, 2] (transposed) does not match params.a [1, 3]"},
      {"{\"a\": [[[1]]], \"b\": [[1]]}", T_EINVAL, "params.a", "1-D or 2-D, not of shape [1, 1, 1]"},
      {"{\"a\": 3, \"b\": [[1]]}", T_EINVAL, "params.a", "1-D or 2-D, not of shape []"},
      {"{\"a\": [[1]], \"b\": [[1]], \"bais\": 1}", T_EINVAL, "params.bais", "unknown key 'bais'"},
      {"{\"a\": [[1]], \"b\": [[1]], \"dtype\": \"int8\"}", T_EINVAL, "params.dtype", "float64"},
      {"{\"a\": [[1]], \"b\": [[1]], \"transpose_a\": 1}", T_EINVAL, "params.transpose_a", "true or false"},
      {"{\"b\": [[1]]}", T_EINVAL, "params.a", "is required"},
      {"{\"a\": [[1]], \"b\": [[1], 2]}", T_EINVAL, "params.b", "ragged"},
      {"{\"a\": [[1]], \"b\": {\"array\": \"a_0123456789abcdefghjkmnpqrs\"}}", T_ENOTFOUND, "params.b",
       "array a_0123456789abcdefghjkmnpqrs not found"},
      {"{\"a\": {\"random\": {\"shape\": [4000, 4000]}}, \"b\": [[1]]}", T_ETOOLARGE, "params.a.random.shape", "more than"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc;
    terr e;
    CHECK(run_text(bad[i].text, B_SERIAL, &rc, &e) == NULL);
    CHECK_MSG(rc == bad[i].rc, "case %zu: rc %d (%s)", i, rc, e.message);
    CHECK_STR(e.field, bad[i].field);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i,
              e.message, bad[i].msg);
  }
  json_t *p = json_loads("[1]", 0, NULL);
  job_estimate est;
  terr e;
  CHECK(kind_matmul_ops.check(p, &env, &est, &e) == T_EINVAL);
  json_decref(p);
  /* BLAS takes 32-bit dimensions: a longer one is refused at check */
  tenv big = env;
  big.max_elems = INT64_MAX;
  p = json_loads("{\"a\": {\"random\": {\"shape\": [1, 2147483648]}}, "
                 "\"b\": {\"random\": {\"shape\": [2147483648]}}}", 0, NULL);
  CHECK(kind_matmul_ops.check(p, &big, &est, &e) == T_ETOOLARGE);
  CHECK(strstr(e.message, "2^31 - 1") != NULL);
  json_decref(p);
}

TEST(estimate_and_tolerance) {
  json_t *p = json_loads("{\"a\": {\"random\": {\"shape\": [300, 200]}}, "
                         "\"b\": {\"random\": {\"shape\": [200, 100], \"low\": -1}}, "
                         "\"bias\": [[1], [2], [3]], \"dtype\": \"float32\"}", 0, NULL);
  job_estimate est;
  terr e;
  /* [3, 1] bias against [300, 100] does not broadcast */
  CHECK(kind_matmul_ops.check(p, &env, &est, &e) == T_EINVAL);
  json_object_set_new(p, "bias", json_real(0.5));
  CHECK(kind_matmul_ops.check(p, &env, &est, &e) == 0);
  CHECK(est.out_dtype == T_F32 && est.out_ndim == 2 && est.out_shape[0] == 300 &&
        est.out_shape[1] == 100 && est.out_bytes == 300 * 100 * 4);
  CHECK(est.work == 2.0 * 300 * 200 * 100 && est.size == 300 * 200 * 100);
  CHECK(est.in_bytes == (300 * 200 + 200 * 100 + 1) * 4 &&
        est.mem_bytes == est.in_bytes + est.out_bytes);
  void *plan = NULL;
  CHECK(kind_matmul_ops.prepare(p, &env, &plan, &e) == 0);
  double rtol, atol;
  kind_matmul_ops.tolerance(plan, &rtol, &atol);
  /* What it lets through: a float32 sum of 200 products may be off by
   * about 200 roundings (2^-24 each), and not by a wrong digit in the
   * third place. */
  CHECK_MSG(rtol >= 200 * 0x1p-24 && rtol < 1e-3, "rtol %g", rtol);
  /* rows of |a| (uniform [0, 1)) sum to about 100, max |b| about 1 */
  CHECK(atol > rtol * 80 && atol < rtol * 130);
  kind_matmul_ops.release(plan);
  /* A longer sum (inner dimension 2000) is allowed more. */
  json_t *p2 = json_loads("{\"a\": {\"random\": {\"shape\": [30, 2000]}}, "
                          "\"b\": {\"random\": {\"shape\": [2000, 10]}}, "
                          "\"dtype\": \"float32\"}", 0, NULL);
  void *plan2 = NULL;
  double rtol2 = 0, atol2 = 0;
  CHECK(kind_matmul_ops.prepare(p2, &env, &plan2, &e) == 0);
  if (plan2) kind_matmul_ops.tolerance(plan2, &rtol2, &atol2);
  CHECK_MSG(rtol2 > 5 * rtol, "inner 2000: rtol %g, inner 200: %g", rtol2, rtol);
  kind_matmul_ops.release(plan2);
  json_decref(p2);
  kind_matmul_ops.release(NULL);
  json_decref(p);
}

TEST(serial_vs_cpu) {
  const char *text = "{\"a\": {\"random\": {\"shape\": [400, 300], \"dist\": \"normal\", \"seed\": 1}}, "
                     "\"b\": {\"random\": {\"shape\": [300, 350], \"dist\": \"normal\", \"seed\": 2}}, "
                     "\"bias\": {\"random\": {\"shape\": [350], \"seed\": 3}}}";
  int rc;
  terr e;
  tarray *s = run_text(text, B_SERIAL, &rc, &e), *c = run_text(text, B_CPU, &rc, &e);
  CHECK(s && c && s->size == c->size);
  json_t *p = json_loads(text, 0, NULL);
  void *plan = NULL;
  CHECK(kind_matmul_ops.prepare(p, &env, &plan, &e) == 0);
  double rtol, atol, maxd = 0;
  kind_matmul_ops.tolerance(plan, &rtol, &atol);
  int64_t bad = 0;
  for (int64_t i = 0; s && c && i < s->size; i++) {
    double d = fabs(tarray_get(s, i) - tarray_get(c, i));
    if (d > maxd) maxd = d;
    bad += !(d <= atol + rtol * fabs(tarray_get(s, i)));
  }
  printf("  serial vs cpu: max |diff| %.3g (tolerance atol %.3g)\n", maxd, atol);
  CHECK(bad == 0);
  kind_matmul_ops.release(plan);
  json_decref(p);
  tarray_free(s);
  tarray_free(c);
}

TEST(stop_and_cuda) {
  const char *text = "{\"a\": {\"random\": {\"shape\": [200, 100]}}, \"b\": {\"random\": {\"shape\": [100, 90]}}}";
  json_t *p = json_loads(text, 0, NULL);
  void *plan = NULL;
  terr e;
  CHECK(kind_matmul_ops.prepare(p, &env, &plan, &e) == 0);
  for (int code = 1; code <= 2; code++)
    for (int b = B_SERIAL; b <= B_CPU; b++) {
      /* stopped before anything: no result */
      job_ctx ctx = {.pool = the_pool, .threads = 2, .stop = &stop_flag,
                     .result_alloc = alloc_heap};
      atomic_store(&stop_flag, code);
      tarray *out = NULL;
      int rc = kind_matmul_ops.run(plan, (tbackend)b, &ctx, &out, &e);
      CHECK(rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT) && !out);
    }
  /* stopped once the result exists (cpu): no panel runs, result freed */
  job_ctx ctx = {.pool = the_pool, .threads = 2, .stop = &stop_flag,
                 .result_alloc = alloc_then_stop};
  atomic_store(&stop_flag, 0);
  stop_after_alloc = 1;
  tarray *out = NULL;
  CHECK(kind_matmul_ops.run(plan, B_CPU, &ctx, &out, &e) == T_ECANCELED && !out);
  CHECK(atomic_load(&ctx.progress_done) == 0 && atomic_load(&ctx.progress_total) > 1);
  /* CUDA: a clean error where no GPU (or no CUDA build) */
  job_ctx cctx = {.threads = 1, .stop = &stop_flag, .result_alloc = alloc_heap};
  atomic_store(&stop_flag, 0);
  int rc = kind_matmul_ops.run(plan, B_CUDA, &cctx, &out, &e);
  if (rc == 0) {
    tarray *ref = NULL;
    job_ctx sctx = {.threads = 1, .stop = &stop_flag, .result_alloc = alloc_heap};
    CHECK(kind_matmul_ops.run(plan, B_SERIAL, &sctx, &ref, &e) == 0);
    double rtol, atol;
    kind_matmul_ops.tolerance(plan, &rtol, &atol);
    for (int64_t i = 0; ref && out && i < ref->size; i++)
      CHECK(fabs(tarray_get(out, i) - tarray_get(ref, i)) <= atol + rtol * fabs(tarray_get(ref, i)));
    tarray_free(ref);
  } else {
    CHECK(!out && (rc == T_EUNAVAIL || rc == T_EDEVICE));
  }
  tarray_free(out);
  CHECK(kind_matmul_ops.run(plan, B_AUTO, &cctx, &out, &e) == T_EINTERNAL && !out);
  kind_matmul_ops.release(plan);
  json_decref(p);
}

/* The cut of a product's rows over GPUs (compute/kinds/matmul/lanes.h):
 * a function of the product alone; none under MM_LANES_MIN bytes of C or
 * when one block would hold it all; else at most MM_BLOCKS_MAX blocks,
 * more than one, rows a multiple of MM_ROW_ALIGN (when not fewer), no
 * block far over MM_BLOCK_BYTES unless the block count forces it, and no
 * overflow for extreme shapes. */
TEST(lanes_cut) {
  CHECK(mm_block_rows(16384, 16384, 8) == 1024); /* 16 blocks of 128 MiB */
  CHECK(mm_block_rows(16384, 16384, 4) == 2048); /* 8 blocks */
  CHECK(mm_block_rows(4096, 4096, 8) == 0);      /* 128 MiB: one GEMM */
  CHECK(mm_block_rows(0, 16384, 8) == 0 && mm_block_rows(16384, 0, 8) == 0);
  CHECK(mm_block_rows(1, (int64_t)1 << 30, 8) == 0); /* one row: no cut */
  CHECK(mm_block_rows(INT32_MAX, INT32_MAX, 8) > 0);
  CHECK(mm_block_rows(3, INT64_MAX / 2, 8) == 0); /* no overflow */
  CHECK(mm_block_rows_of(16384, 16384, 8, (int64_t)64 << 20, 32) == 512);
  CHECK(mm_block_rows_of(16384, 16384, 8, 0, 32) == 0);
  CHECK(mm_block_rows_of(16384, 16384, 8, (int64_t)64 << 20, 8) == 2048);
  struct { int64_t m, n; size_t es; } c[] = {
      {16384, 16384, 8}, {100000, 1000, 8}, {40000, 40000, 4},
      {1 << 24, 16, 8},  {5000, 8192, 8},   {70000, 1024, 4},
      {INT32_MAX, 3, 8}, {1000, 1 << 20, 8}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    int64_t m = c[i].m, n = c[i].n, br = mm_block_rows(m, n, c[i].es);
    int64_t row = n * (int64_t)c[i].es;
    double bytes = (double)m * (double)row;
    if (bytes < (double)MM_LANES_MIN) {
      CHECK_MSG(br == 0, "%lld x %lld: cut under the minimum", (long long)m,
                (long long)n);
      continue;
    }
    CHECK_MSG(br > 0 && br < m, "%lld x %lld: br %lld", (long long)m,
              (long long)n, (long long)br);
    int64_t nb = (m + br - 1) / br;
    CHECK_MSG(nb >= 2 && nb <= MM_BLOCKS_MAX, "%lld x %lld: %lld blocks",
              (long long)m, (long long)n, (long long)nb);
    CHECK(br < MM_ROW_ALIGN || br % MM_ROW_ALIGN == 0);
    CHECK((double)(br - MM_ROW_ALIGN) * row <= (double)MM_BLOCK_BYTES ||
          br <= (m + MM_BLOCKS_MAX - 1) / MM_BLOCKS_MAX + MM_ROW_ALIGN);
    CHECK(mm_block_rows(m, n, c[i].es) == br); /* the job alone decides */
  }
}

int main(void) {
  the_pool = pool_create(2, NULL, NULL);
  if (!the_pool) return 1;
  RUN(shapes_and_transposes);
  RUN(float32);
  RUN(bias_forms);
  RUN(vectors);
  RUN(empty_dims);
  RUN(errors);
  RUN(estimate_and_tolerance);
  RUN(serial_vs_cpu);
  RUN(stop_and_cuda);
  RUN(lanes_cut);
  pool_destroy(the_pool);
  return check_summary();
}
