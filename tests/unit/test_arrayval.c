/* test_arrayval.c — the four array value forms.
 *
 * range: lengths and values bit-equal to numpy.arange for tricky float
 * steps (NumPy run at test time through /usr/bin/python3 when present,
 * else a fixed table of NumPy 1.24's answers). random: the generator equals
 * an independent sequential SplitMix64, is reproducible by (seed, index)
 * whatever the shape, and its uniform/normal moments and histogram lie
 * within 5-sigma statistical bounds. array: a fake store (meta + load, one
 * float32 array) and a store that refuses every id. Every refusal: code,
 * field and message. An int64 result (given as stored by result_load) is
 * converted to float64 by chunks: the bytes of a plain conversion for
 * sizes that are not a multiple of the chunk, on one thread or three, and
 * a stop flag set before or during the conversion ends it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include "check.h"
#include "compute/array/arrayval.h"
#include "util/pool.h"

#define GOOD_ID "a_0123456789abcdefghjkmnpqrs"
#define BIG_ID "a_bbbbbbbbbbbbbbbbbbbbbbbbbb"
/* A float32 upload of several build chunks and a ragged end. */
#define BIG_N (TENV_CHUNK * 3 + 5)
static tarray *g_big;

static int fake_meta(void *ud, const char *owner, const char *id, tdtype *dt,
                     int *ndim, int64_t *shape, terr *e) {
  if (g_big && strcmp(id, BIG_ID) == 0) {
    *dt = T_F32;
    *ndim = 1;
    shape[0] = BIG_N;
    return 0;
  }
  if (strcmp(id, GOOD_ID) != 0 || strcmp(owner, "alice") != 0)
    return terr_set(e, T_ENOTFOUND, "", -1, "no such array");
  *dt = T_F32;
  *ndim = 2;
  shape[0] = 2;
  shape[1] = 3;
  return 0;
}

static int fake_load(void *ud, const char *owner, const char *id, tarray **out,
                     terr *e) {
  int64_t sh[2] = {2, 3};
  if (g_big && strcmp(id, BIG_ID) == 0) {
    *out = tarray_clone(g_big);
    return 0;
  }
  if (strcmp(id, GOOD_ID) != 0)
    return terr_set(e, T_ENOTFOUND, "", -1, "no such array");
  tarray *a = tarray_new(T_F32, 2, sh);
  for (int i = 0; i < 6; i++) tarray_set(a, i, i + 0.5);
  *out = a;
  return 0;
}

static const tenv env = {.owner = "alice", .array_meta = fake_meta,
                         .array_load = fake_load, .max_elems = 1000000};

static int check_text(const char *text, arrayval_info *info, terr *e) {
  json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
  terr_clear(e);
  if (!v) return -1;
  int rc = arrayval_check(&env, v, "params.inputs.x", info, e);
  json_decref(v);
  return rc;
}

static tarray *resolve_text(const char *text, tdtype dt, terr *e) {
  json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
  tarray *a = NULL;
  terr_clear(e);
  if (v) arrayval_resolve(&env, v, "params.inputs.x", dt, &a, e);
  json_decref(v);
  return a;
}

/* ---- range ---------------------------------------------------------------- */

static const double range_cases[][3] = {
    {0, 0.3, 0.1}, {1, 1.3, 0.1}, {0, 1, 0.1}, {-1, 1, 0.2}, {10, 0, -0.3},
    {0, 1e-300, 1e300}, {0, -1e-300, 1e300}, {1, 1, 1}, {5, 1, 1}, {0, 5, 1},
    {0.5, 100.5, 0.7}, {1e16, 1e16 + 10, 1}, {0.1, 0.7, 0.1}, {-0.3, 0.6, 0.3},
    {2.0, 2.3, 0.1}, {0, 10, 1.0 / 3}, {-5, 5, 0.01}};
/* NumPy 1.24's lengths, for when it cannot be run */
static const int64_t range_known[] = {3, 4, 10, 10, 34, 1, 0, 0, 0, 5,
                                      143, 10, 6, 3, 3, 30, 1000};
#define NRANGE (sizeof range_known / sizeof range_known[0])

TEST(range_matches_numpy) {
  char path[] = "/tmp/tessel_arange_XXXXXX";
  int fd = mkstemp(path);
  FILE *np = NULL;
  if (fd >= 0 && access("/usr/bin/python3", X_OK) == 0) {
    close(fd);
    char cmd[4096];
    int off = snprintf(cmd, sizeof cmd,
                       "/usr/bin/python3 -c \"import numpy as np\nfor c in [");
    for (size_t i = 0; i < NRANGE; i++)
      off += snprintf(cmd + off, sizeof cmd - (size_t)off, "(%.17g,%.17g,%.17g),",
                      range_cases[i][0], range_cases[i][1], range_cases[i][2]);
    snprintf(cmd + off, sizeof cmd - (size_t)off,
             "]:\n a=np.arange(*c, dtype=np.float64); print(len(a), "
             "' '.join(x.hex() for x in a.tolist()))\" > %s 2>/dev/null", path);
    if (system(cmd) == 0) np = fopen(path, "r");
  } else if (fd >= 0) {
    close(fd);
  }
  printf("  (reference: %s)\n", np ? "numpy at test time" : "fixed table");
  for (size_t i = 0; i < NRANGE; i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"range\": {\"start\": %.17g, \"stop\": %.17g, \"step\": %.17g}}",
             range_cases[i][0], range_cases[i][1], range_cases[i][2]);
    terr e;
    arrayval_info info;
    CHECK(check_text(text, &info, &e) == 0);
    CHECK(info.form == AV_RANGE && info.ndim == 1 && info.dtype == T_F64);
    tarray *a = resolve_text(text, T_F64, &e);
    CHECK(a && a->size == info.size);
    if (!np) {
      CHECK_MSG(info.shape[0] == range_known[i], "case %zu: %lld vs %lld", i,
                (long long)info.shape[0], (long long)range_known[i]);
    } else {
      long long n;
      CHECK(fscanf(np, "%lld", &n) == 1);
      CHECK_MSG(info.shape[0] == n, "case %zu: %lld vs numpy %lld", i,
                (long long)info.shape[0], n);
      for (long long k = 0; k < n; k++) {
        char hex[64];
        CHECK(fscanf(np, "%63s", hex) == 1);
        double want = strtod(hex, NULL);
        CHECK_MSG(a && k < a->size && tarray_get(a, k) == want,
                  "case %zu element %lld: %.17g vs numpy %.17g", i, k,
                  a && k < a->size ? tarray_get(a, k) : NAN, want);
      }
    }
    tarray_free(a);
  }
  if (np) fclose(np);
  unlink(path);
  /* defaults: start 0, step 1; float32 output */
  terr e;
  tarray *a = resolve_text("{\"range\": {\"stop\": 4}}", T_F32, &e);
  CHECK(a && a->dtype == T_F32 && a->size == 4 && tarray_get(a, 3) == 3);
  tarray_free(a);
}

TEST(range_errors) {
  struct { const char *text; int rc; const char *field; const char *msg; } bad[] = {
      {"{\"range\": {\"start\": 0, \"stop\": 1, \"step\": 0}}", T_EINVAL, "params.inputs.x.range", "step must not be 0"},
      {"{\"range\": {\"start\": 0, \"stop\": 1, \"stpe\": 1}}", T_EINVAL, "params.inputs.x.range.stpe", "unknown key 'stpe'"},
      {"{\"range\": {\"start\": 0}}", T_EINVAL, "params.inputs.x.range", "\"stop\" is required"},
      {"{\"range\": {\"stop\": \"5\"}}", T_EINVAL, "params.inputs.x.range.stop", "must be a number"},
      {"{\"range\": {\"stop\": 5, \"step\": null}}", T_EINVAL, "params.inputs.x.range.step", "must be a number"},
      {"{\"range\": [0, 5]}", T_EINVAL, "params.inputs.x.range", "must be an object"},
      {"{\"range\": {\"start\": -1e308, \"stop\": 1e308, \"step\": 1}}", T_EINVAL, "params.inputs.x.range", "not finite"},
      {"{\"range\": {\"stop\": 1e7}}", T_ETOOLARGE, "params.inputs.x.range", "over the limit"},
      {"{\"rnge\": {\"stop\": 1}}", T_EINVAL, "params.inputs.x.rnge", "unknown key 'rnge'"},
      {"{\"range\": {\"stop\": 1}, \"random\": {}}", T_EINVAL, "params.inputs.x", "exactly one"},
      {"{\"range\": {\"stop\": 1}, \"x\": 1}", T_EINVAL, "params.inputs.x.x", "unknown key 'x'"},
      {"{}", T_EINVAL, "params.inputs.x", "exactly one"},
      {"\"a_0123456789abcdefghjkmnpqrs\"", T_EINVAL, "params.inputs.x", "not a string"},
      {"true", T_EINVAL, "params.inputs.x", "not a boolean"},
      {"null", T_EINVAL, "params.inputs.x", "not null"},
      {"[[1, 2], [3]]", T_EINVAL, "params.inputs.x", "ragged array at [1]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    terr e;
    arrayval_info info;
    int rc = check_text(bad[i].text, &info, &e);
    CHECK_MSG(rc == bad[i].rc, "case %zu: rc %d (%s)", i, rc, e.message);
    CHECK_STR(e.field, bad[i].field);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'",
              i, e.message, bad[i].msg);
    CHECK(resolve_text(bad[i].text, T_F64, &e) == NULL);
  }
}

/* ---- random --------------------------------------------------------------- */

/* An independent sequential SplitMix64 (Vigna's reference code). */
static uint64_t sm_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

TEST(random_definition) {
  uint64_t seeds[] = {0, 1, 42, 9007199254740992ULL};
  for (int s = 0; s < 4; s++) {
    uint64_t st = seeds[s];
    uint64_t key = sm_next(&st);
    uint64_t st2 = key;
    double u[64];
    for (int i = 0; i < 64; i++) {
      u[i] = (double)(sm_next(&st2) >> 11) * 0x1p-53;
      CHECK(arrayval_uniform(seeds[s], (uint64_t)i, 0, 1) == u[i]);
      CHECK(arrayval_uniform(seeds[s], (uint64_t)i, -2, 6) == -2 + 8 * u[i]);
    }
    for (int i = 0; i < 64; i += 2) {
      double r = sqrt(-2 * log(1 - u[i])), t = 2 * M_PI * u[i + 1];
      CHECK_NEAR(arrayval_normal(seeds[s], (uint64_t)i, 0, 1), r * cos(t), 1e-15);
      CHECK_NEAR(arrayval_normal(seeds[s], (uint64_t)i + 1, 3, 2), 3 + 2 * r * sin(t), 1e-14);
    }
  }
}

TEST(random_reproducible) {
  terr e;
  const char *t1 = "{\"random\": {\"shape\": [10, 100], \"seed\": 7}}";
  const char *t2 = "{\"random\": {\"shape\": [1000], \"seed\": 7, \"dist\": \"uniform\", \"low\": 0, \"high\": 1}}";
  const char *t3 = "{\"random\": {\"shape\": [1000], \"seed\": 8}}";
  tarray *a = resolve_text(t1, T_F64, &e), *b = resolve_text(t1, T_F64, &e),
         *c = resolve_text(t2, T_F64, &e), *d = resolve_text(t3, T_F64, &e);
  CHECK(a && b && c && d);
  if (a && b && c && d) {
    CHECK(memcmp(a->data, b->data, 8000) == 0);
    CHECK(memcmp(a->data, c->data, 8000) == 0); /* same (seed, i), other shape */
    int same = 0;
    for (int i = 0; i < 1000; i++) same += tarray_get(a, i) == tarray_get(d, i);
    CHECK(same < 5);
    for (int i = 0; i < 1000; i += 97)
      CHECK(tarray_get(a, i) == arrayval_uniform(7, (uint64_t)i, 0, 1));
  }
  tarray_free(a); tarray_free(b); tarray_free(c); tarray_free(d);
  /* normal: element i from (seed, i) alone, any shape; float32 is its cast */
  a = resolve_text("{\"random\": {\"shape\": [5, 7], \"dist\": \"normal\", \"mean\": 1, \"std\": 3, \"seed\": 99}}", T_F64, &e);
  b = resolve_text("{\"random\": {\"shape\": [35], \"dist\": \"normal\", \"mean\": 1, \"std\": 3, \"seed\": 99}}", T_F32, &e);
  CHECK(a && b && b->dtype == T_F32);
  for (int i = 0; a && b && i < 35; i++) {
    CHECK(tarray_get(a, i) == arrayval_normal(99, (uint64_t)i, 1, 3));
    CHECK((float)tarray_get(a, i) == (float)tarray_get(b, i));
  }
  tarray_free(a); tarray_free(b);
  /* the default seed is 0 */
  a = resolve_text("{\"random\": {\"shape\": [3]}}", T_F64, &e);
  CHECK(a && tarray_get(a, 2) == arrayval_uniform(0, 2, 0, 1));
  tarray_free(a);
}

TEST(random_statistics) {
  terr e;
  int64_t n = 400000;
  tarray *a = resolve_text("{\"random\": {\"shape\": [400000], \"low\": -3, \"high\": 5, \"seed\": 123}}", T_F64, &e);
  CHECK(a && a->size == n);
  if (a) {
    double sum = 0, sq = 0, lag = 0;
    int64_t bins[16] = {0};
    int inside = 1;
    for (int64_t i = 0; i < n; i++) {
      double x = tarray_get(a, i);
      if (!(x >= -3 && x < 5)) inside = 0;
      sum += x;
      sq += (x - 1) * (x - 1);
      if (i) lag += (x - 1) * (tarray_get(a, i - 1) - 1);
      bins[(int)((x + 3) * 2)]++;
    }
    CHECK(inside);
    double mean = sum / (double)n, var = sq / (double)n;
    /* U(-3, 5): mean 1, variance 64/12, sd of the mean sqrt(64/12/n) */
    CHECK_NEAR(mean, 1, 5 * sqrt(64.0 / 12 / (double)n));
    CHECK_NEAR(var, 64.0 / 12, 5 * sqrt(64.0 / 180 * 64 / (double)n));
    CHECK_NEAR(lag / (double)n / var, 0, 5 / sqrt((double)n));
    double p = 1.0 / 16, want = (double)n * p, sd = sqrt((double)n * p * (1 - p));
    for (int b = 0; b < 16; b++) CHECK_NEAR((double)bins[b], want, 5 * sd);
  }
  tarray_free(a);
  a = resolve_text("{\"random\": {\"shape\": [400000], \"dist\": \"normal\", \"mean\": 2, \"std\": 0.5, \"seed\": 5}}", T_F64, &e);
  CHECK(a);
  if (a) {
    double sum = 0, sq = 0, m4 = 0;
    int64_t within1 = 0;
    for (int64_t i = 0; i < n; i++) {
      double z = (tarray_get(a, i) - 2) / 0.5;
      sum += z;
      sq += z * z;
      m4 += z * z * z * z;
      within1 += fabs(z) < 1;
    }
    CHECK_NEAR(sum / (double)n, 0, 5 / sqrt((double)n));
    CHECK_NEAR(sq / (double)n, 1, 5 * sqrt(2.0 / (double)n));
    CHECK_NEAR(m4 / (double)n, 3, 5 * sqrt(96.0 / (double)n));
    double p = 0.682689492137086;
    CHECK_NEAR((double)within1, (double)n * p, 5 * sqrt((double)n * p * (1 - p)));
  }
  tarray_free(a);
}

TEST(random_errors) {
  struct { const char *body; int rc; const char *field; const char *msg; } bad[] = {
      {"{}", T_EINVAL, "params.inputs.x.random.shape", "is required"},
      {"{\"shape\": [0]}", T_EINVAL, "params.inputs.x.random.shape", "positive integer"},
      {"{\"shape\": [-3]}", T_EINVAL, "params.inputs.x.random.shape", "positive integer"},
      {"{\"shape\": [2.5]}", T_EINVAL, "params.inputs.x.random.shape", "positive integer"},
      {"{\"shape\": 5}", T_EINVAL, "params.inputs.x.random.shape", "list"},
      {"{\"shape\": [1,1,1,1,1,1,1,1,1]}", T_EINVAL, "params.inputs.x.random.shape", "at most 8"},
      {"{\"shape\": [1000, 1001]}", T_ETOOLARGE, "params.inputs.x.random.shape", "more than 1000000"},
      {"{\"shape\": [4611686018427387904, 4]}", T_ETOOLARGE, "params.inputs.x.random.shape", "more than"},
      {"{\"shape\": [3], \"dist\": \"gauss\"}", T_EINVAL, "params.inputs.x.random.dist", "uniform"},
      {"{\"shape\": [3], \"mean\": 1}", T_EINVAL, "params.inputs.x.random.mean", "only for dist \"normal\""},
      {"{\"shape\": [3], \"dist\": \"normal\", \"low\": 1}", T_EINVAL, "params.inputs.x.random.low", "only for dist \"uniform\""},
      {"{\"shape\": [3], \"low\": 2, \"high\": 1}", T_EINVAL, "params.inputs.x.random.high", ">= low"},
      {"{\"shape\": [3], \"low\": -1.5e308, \"high\": 1.5e308}", T_EINVAL, "params.inputs.x.random.high", "finite"},
      {"{\"shape\": [3], \"dist\": \"normal\", \"std\": -1}", T_EINVAL, "params.inputs.x.random.std", ">= 0"},
      {"{\"shape\": [3], \"seed\": -1}", T_EINVAL, "params.inputs.x.random.seed", "integer from 0 to 2^53"},
      {"{\"shape\": [3], \"seed\": 9007199254740994}", T_EINVAL, "params.inputs.x.random.seed", "2^53"},
      {"{\"shape\": [3], \"seed\": 1.5}", T_EINVAL, "params.inputs.x.random.seed", "integer"},
      {"{\"shape\": [3], \"seed\": \"1\"}", T_EINVAL, "params.inputs.x.random.seed", "integer"},
      {"{\"shape\": [3], \"sed\": 1}", T_EINVAL, "params.inputs.x.random.sed", "unknown key 'sed'"},
      {"[3]", T_EINVAL, "params.inputs.x.random", "must be an object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, "{\"random\": %s}", bad[i].body);
    terr e;
    arrayval_info info;
    int rc = check_text(text, &info, &e);
    CHECK_MSG(rc == bad[i].rc, "case %zu: rc %d (%s)", i, rc, e.message);
    CHECK_STR(e.field, bad[i].field);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'",
              i, e.message, bad[i].msg);
  }
  /* the largest seed and a 0-d random are fine */
  terr e;
  arrayval_info info;
  CHECK(check_text("{\"random\": {\"shape\": [], \"seed\": 9007199254740992}}", &info, &e) == 0);
  CHECK(info.ndim == 0 && info.size == 1 && info.form == AV_RANDOM);
}

/* ---- array and inline ----------------------------------------------------- */

static int refuse_meta(void *ud, const char *owner, const char *id,
                       tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  return terr_set(e, T_ENOTFOUND, "", -1, "no");
}

TEST(array_form) {
  terr e;
  arrayval_info info;
  CHECK(check_text("{\"array\": \"" GOOD_ID "\"}", &info, &e) == 0);
  CHECK(info.form == AV_ARRAY && info.dtype == T_F32 && info.ndim == 2 &&
        info.shape[1] == 3 && info.size == 6);
  tarray *a = resolve_text("{\"array\": \"" GOOD_ID "\"}", T_F64, &e);
  CHECK(a && a->dtype == T_F64 && a->size == 6 && tarray_get(a, 5) == 5.5);
  tarray_free(a);
  a = resolve_text("{\"array\": \"" GOOD_ID "\"}", T_F32, &e);
  CHECK(a && a->dtype == T_F32 && tarray_get(a, 1) == 1.5);
  tarray_free(a);
  CHECK(check_text("{\"array\": \"a_0123456789abcdefghjkmnpqrt\"}", &info, &e) == T_ENOTFOUND);
  CHECK_STR(e.message, "params.inputs.x: array a_0123456789abcdefghjkmnpqrt not found");
  CHECK(check_text("{\"array\": \"a_nope\"}", &info, &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs.x.array");
  CHECK(check_text("{\"array\": \"j_0123456789abcdefghjkmnpqrs\"}", &info, &e) == T_EINVAL);
  CHECK(check_text("{\"array\": 5}", &info, &e) == T_EINVAL);
  /* another owner's array is "not found" (the store says so) */
  tenv other = env;
  other.owner = "bob";
  json_t *v = json_loads("{\"array\": \"" GOOD_ID "\"}", 0, NULL);
  CHECK(arrayval_check(&other, v, "params.a", &info, &e) == T_ENOTFOUND);
  CHECK_STR(e.message, "params.a: array " GOOD_ID " not found");
  /* env refusing every id, and no env at all */
  tenv none = {.owner = "", .array_meta = refuse_meta, .max_elems = 10};
  CHECK(arrayval_check(&none, v, "params.a", &info, &e) == T_ENOTFOUND);
  CHECK(arrayval_check(NULL, v, "params.a", &info, &e) == T_ENOTFOUND);
  /* the size cap applies to uploads too */
  tenv small = env;
  small.max_elems = 5;
  CHECK(arrayval_check(&small, v, "params.a", &info, &e) == T_ETOOLARGE);
  json_decref(v);
}

/* {"result": "j_..."}: the env's result callbacks, their refusals named
 * at the input's field. */
#define DONE_JOB "j_0123456789abcdefghjkmnpqrs"
#define RUNNING_JOB "j_0123456789abcdefghjkmnpqrt"
static int fake_result_meta(void *ud, const char *owner, const char *id,
                            const char *part, tdtype *dt, int *ndim,
                            int64_t *shape, terr *e) {
  (void)ud;
  (void)owner;
  if (part && strcmp(part, "index") != 0)
    return terr_set(e, T_EINVAL, "", -1, "no part '%s'", part);
  if (strcmp(id, RUNNING_JOB) == 0)
    return terr_set(e, T_ECONFLICT, "", -1, "job %s is running", id);
  if (strcmp(id, DONE_JOB) != 0)
    return terr_set(e, T_ENOTFOUND, "", -1, "no such job");
  *dt = T_F64;
  *ndim = 1;
  shape[0] = 4;
  return 0;
}
static int fake_result_load(void *ud, const char *owner, const char *id,
                            const char *part, tarray **out, terr *e) {
  int64_t sh[1] = {4};
  if (fake_result_meta(ud, owner, id, part, &(tdtype){T_F64}, &(int){0}, sh,
                       e))
    return e->code;
  tarray *a = tarray_new(T_F64, 1, sh);
  for (int i = 0; i < 4; i++) tarray_set(a, i, 10 + i);
  *out = a;
  return 0;
}

TEST(result_form) {
  terr e;
  arrayval_info info;
  tenv r = env;
  r.result_meta = fake_result_meta;
  r.result_load = fake_result_load;
  json_t *v = json_loads("{\"result\": \"" DONE_JOB "\"}", 0, NULL);
  CHECK(arrayval_check(&r, v, "params.inputs.x", &info, &e) == 0 &&
        info.form == AV_RESULT && info.ndim == 1 && info.shape[0] == 4);
  tarray *a = NULL;
  CHECK(arrayval_resolve(&r, v, "params.inputs.x", T_F32, &a, &e) == 0 && a &&
        a->dtype == T_F32 && tarray_get(a, 3) == 13);
  tarray_free(a);
  /* without result callbacks (the env of a test, or none) it is not found */
  CHECK(arrayval_check(&env, v, "params.inputs.x", &info, &e) == T_ENOTFOUND);
  CHECK_STR(e.message, "params.inputs.x: job " DONE_JOB " not found");
  json_decref(v);
  v = json_loads("{\"result\": \"" RUNNING_JOB "\"}", 0, NULL);
  CHECK(arrayval_check(&r, v, "params.inputs.x", &info, &e) == T_ECONFLICT);
  CHECK_STR(e.field, "params.inputs.x");
  CHECK(strstr(e.message, "is running") != NULL);
  CHECK(arrayval_resolve(&r, v, "params.inputs.x", T_F64, &a, &e) == T_ECONFLICT &&
        a == NULL);
  json_decref(v);
  v = json_loads("{\"result\": \"" GOOD_ID "\"}", 0, NULL); /* an array id */
  CHECK(arrayval_check(&r, v, "params.inputs.x", &info, &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs.x.result");
  json_decref(v);
  /* {"result", "part"}: a part of a result of several arrays. */
  v = json_loads("{\"result\": \"" DONE_JOB "\", \"part\": \"index\"}", 0, NULL);
  CHECK(arrayval_check(&r, v, "params.inputs.x", &info, &e) == 0 &&
        info.form == AV_RESULT && info.shape[0] == 4);
  CHECK(arrayval_resolve(&r, v, "params.inputs.x", T_F64, &a, &e) == 0 && a &&
        tarray_get(a, 0) == 10);
  tarray_free(a);
  json_decref(v);
  static const char *const bad_parts[] = {
      "{\"result\": \"" DONE_JOB "\", \"part\": \"nope\"}",     /* none such */
      "{\"result\": \"" DONE_JOB "\", \"part\": \"Bad-1\"}",    /* no name */
      "{\"result\": \"" DONE_JOB "\", \"part\": 3}",             /* no string */
      "{\"array\": \"" GOOD_ID "\", \"part\": \"index\"}",       /* no result */
      "{\"part\": \"index\"}",
  };
  for (size_t i = 0; i < sizeof bad_parts / sizeof bad_parts[0]; i++) {
    v = json_loads(bad_parts[i], 0, NULL);
    CHECK_MSG(arrayval_check(&r, v, "params.inputs.x", &info, &e) == T_EINVAL,
              "%s", bad_parts[i]);
    CHECK_MSG(!strcmp(e.field, "params.inputs.x.part"), "%s: %s", bad_parts[i],
              e.field);
    json_decref(v);
  }
  v = json_loads("{\"result\": \"" DONE_JOB "\", \"part\": \"index\", \"x\": 1}",
                 0, NULL);
  CHECK(arrayval_check(&r, v, "params.inputs.x", &info, &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs.x.x");
  json_decref(v);
}

TEST(inline_form) {
  terr e;
  arrayval_info info;
  CHECK(check_text("2.5", &info, &e) == 0 && info.form == AV_INLINE && info.ndim == 0 && info.size == 1);
  CHECK(check_text("[[1,2,3],[4,5,6]]", &info, &e) == 0 && info.ndim == 2 &&
        info.shape[0] == 2 && info.size == 6 && info.dtype == T_F64);
  tarray *a = resolve_text("[[1,2,3],[4,5,6]]", T_F32, &e);
  CHECK(a && a->dtype == T_F32 && tarray_get(a, 5) == 6);
  tarray_free(a);
  json_t *v = json_loads("[1,2,3,4,5,6]", 0, NULL);
  tenv small = env;
  small.max_elems = 5;
  CHECK(arrayval_check(&small, v, "params.b", &info, &e) == T_ETOOLARGE);
  CHECK(arrayval_check(&small, NULL, "params.b", &info, &e) == T_EINVAL);
  json_decref(v);
}

/* ---- building by chunks (a run's prepare) ----------------------------------- */

static tarray *resolve_env(const tenv *en, const char *text, tdtype dt,
                           int *rc, terr *e) {
  json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
  tarray *a = NULL;
  terr_clear(e);
  *rc = v ? arrayval_resolve(en, v, "params.inputs.x", dt, &a, e) : -1;
  json_decref(v);
  return a;
}

/* A run builds its inputs by chunks on its pool: the same bytes on one
 * thread or three (element i depends only on i), and nothing once its
 * stop flag is set (a cancel or a timeout during a long prepare). */
TEST(build_by_chunks) {
  pool *p3 = pool_create(3, NULL, NULL);
  g_big = tarray_new(T_F32, 1, (int64_t[]){BIG_N});
  for (int64_t i = 0; i < BIG_N; i++) tarray_set(g_big, i, (double)i * 0.37 - 1e5);
  tenv one = env, par = env;
  one.max_elems = par.max_elems = 100000000;
  par.pool = p3, par.width = 3;
  char texts[4][200];
  snprintf(texts[0], sizeof texts[0],
           "{\"random\": {\"shape\": [%lld], \"seed\": 5}}", (long long)BIG_N);
  snprintf(texts[1], sizeof texts[1],
           "{\"random\": {\"shape\": [%lld], \"dist\": \"normal\", "
           "\"mean\": 2, \"std\": 3, \"seed\": 6}}", (long long)BIG_N);
  snprintf(texts[2], sizeof texts[2],
           "{\"range\": {\"start\": 0.1, \"stop\": %.17g, \"step\": 0.3}}",
           0.1 + 0.3 * (double)BIG_N - 0.15);
  snprintf(texts[3], sizeof texts[3], "{\"array\": \"%s\"}", BIG_ID);
  for (int t = 0; t < 4; t++)
    for (int d = 0; d < 2; d++) {
      tdtype dt = d ? T_F32 : T_F64;
      terr e;
      int rc1, rc2;
      tarray *a = resolve_env(&one, texts[t], dt, &rc1, &e),
             *b = resolve_env(&par, texts[t], dt, &rc2, &e);
      CHECK_MSG(rc1 == 0 && rc2 == 0 && a && b, "%s: %d %d %s", texts[t], rc1,
                rc2, e.message);
      if (!a || !b) goto next;
      CHECK(a->size == BIG_N && b->size == BIG_N && a->dtype == dt);
      CHECK_MSG(memcmp(a->data, b->data, (size_t)BIG_N * tdtype_size(dt)) == 0,
                "%s as %s: 1 and 3 threads differ", texts[t], tdtype_name(dt));
      /* elements across chunk edges, from the definitions */
      int64_t at[] = {0, 1, 2, TENV_CHUNK - 1, TENV_CHUNK, TENV_CHUNK + 1,
                      2 * TENV_CHUNK, BIG_N - 2, BIG_N - 1};
      for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        uint64_t i = (uint64_t)at[k];
        double want = t == 0   ? arrayval_uniform(5, i, 0, 1)
                      : t == 1 ? arrayval_normal(6, i, 2, 3)
                      : t == 2 ? (i == 0   ? 0.1
                                  : i == 1 ? 0.1 + 0.3
                                           : 0.1 + (double)i * ((0.1 + 0.3) - 0.1))
                               : (double)(float)((double)i * 0.37 - 1e5);
        if (dt == T_F32) want = (float)want;
        CHECK_MSG(tarray_get(b, (int64_t)i) == want, "%s as %s: [%llu] %.17g, want %.17g",
                  texts[t], tdtype_name(dt), (unsigned long long)i,
                  tarray_get(b, (int64_t)i), want);
      }
    next:
      tarray_free(a);
      tarray_free(b);
    }
  /* a stop flag set: T_ECANCELED (1) or T_ETIMEOUT (2), nothing built, on
   * one thread and on the pool; the float32 upload read as float64 (a
   * conversion) too */
  for (int code = 1; code <= 2; code++)
    for (int t = 0; t < 4; t++) {
      atomic_int st;
      atomic_init(&st, code);
      tenv s1 = one, s3 = par;
      s1.stop = s3.stop = &st;
      terr e;
      int rc;
      tarray *a = resolve_env(t % 2 ? &s3 : &s1, texts[t], T_F64, &rc, &e);
      CHECK_MSG(rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT) && !a,
                "%s stopped %d: rc %d", texts[t], code, rc);
      CHECK(strcmp(e.field, "params.inputs.x") == 0);
      tarray_free(a);
    }
  pool_destroy(p3);
  tarray_free(g_big);
  g_big = NULL;
}

/* A stop during the build ends it: 2^25 normal values take seconds on one
 * thread; the flag is set 20 ms in. */
static void *stop_soon(void *arg) {
  usleep(20000);
  atomic_store((atomic_int *)arg, 1);
  return NULL;
}

TEST(build_stops_midway) {
  atomic_int st;
  atomic_init(&st, 0);
  tenv s1 = env;
  s1.max_elems = 100000000;
  s1.stop = &st;
  pthread_t th;
  CHECK(pthread_create(&th, NULL, stop_soon, &st) == 0);
  terr e;
  int rc;
  tarray *a = resolve_env(&s1,
                          "{\"random\": {\"shape\": [33554432], "
                          "\"dist\": \"normal\", \"seed\": 1}}",
                          T_F64, &rc, &e);
  pthread_join(th, NULL);
  CHECK_MSG(rc == T_ECANCELED && !a, "rc %d", rc);
  tarray_free(a);
}

/* ---- an int64 result read as float64 (a knn index part as an input) ---- */

#define I64_JOB "j_0123456789abcdefghjkmnpqrv"
static tarray *g_i64;        /* what the next load gives (handed over) */
static atomic_int *g_stop_at_load; /* set by a thread once the load is done */
static pthread_t g_stopper;
static int g_stopper_started;

static void *stop_now(void *arg) {
  atomic_store((atomic_int *)arg, 1);
  return NULL;
}

static int i64_meta(void *ud, const char *owner, const char *id,
                    const char *part, tdtype *dt, int *ndim, int64_t *shape,
                    terr *e) {
  (void)ud, (void)owner, (void)part;
  if (strcmp(id, I64_JOB) != 0 || !g_i64)
    return terr_set(e, T_ENOTFOUND, "", -1, "no such job");
  *dt = T_F64; /* what a job reads of it, as store_source says */
  *ndim = 1;
  shape[0] = g_i64->size;
  return 0;
}
static int i64_load(void *ud, const char *owner, const char *id,
                    const char *part, tarray **out, terr *e) {
  (void)ud, (void)owner, (void)part;
  if (strcmp(id, I64_JOB) != 0 || !g_i64)
    return terr_set(e, T_ENOTFOUND, "", -1, "no such job");
  *out = g_i64; /* as stored: T_I64 */
  g_i64 = NULL;
  if (g_stop_at_load)
    g_stopper_started =
        pthread_create(&g_stopper, NULL, stop_now, g_stop_at_load) == 0;
  return 0;
}

/* Small, negative, and past 2^53 (where float64 rounds). */
static tarray *i64_source(int64_t n) {
  tarray *a = tarray_new(T_I64, 1, &n);
  if (!a) return NULL;
  int64_t *v = a->data;
  for (int64_t i = 0; i < n; i++)
    v[i] = i % 3 == 0   ? i
           : i % 3 == 1 ? -i * 7
                        : (int64_t)(((uint64_t)i * 0x9E3779B97F4A7C15ULL) >> 1);
  return a;
}

TEST(int64_result_by_chunks) {
  pool *p3 = pool_create(3, NULL, NULL);
  tenv one = env;
  one.max_elems = 100000000;
  one.result_meta = i64_meta;
  one.result_load = i64_load;
  tenv par = one;
  par.pool = p3, par.width = 3;
  const char *text = "{\"result\": \"" I64_JOB "\"}";
  const int64_t sizes[] = {5, TENV_CHUNK - 1, TENV_CHUNK + 1,
                           3 * TENV_CHUNK + 7};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (int w = 0; w < 2; w++)
      for (int d = 0; d < 2; d++) {
        int64_t n = sizes[k];
        tdtype dt = d ? T_F32 : T_F64;
        tarray *src = i64_source(n), *want = tarray_new(dt, 1, &n);
        CHECK(src && want);
        if (!src || !want) {
          tarray_free(src);
          tarray_free(want);
          continue;
        }
        /* the reference: one plain loop, as numpy's astype */
        const int64_t *v = src->data;
        for (int64_t i = 0; i < n; i++) {
          if (dt == T_F64)
            ((double *)want->data)[i] = (double)v[i];
          else
            ((float *)want->data)[i] = (float)(double)v[i];
        }
        g_i64 = src;
        terr e;
        int rc;
        tarray *a = resolve_env(w ? &par : &one, text, dt, &rc, &e);
        CHECK_MSG(rc == 0 && a && a->dtype == dt && a->size == n,
                  "n %lld width %d %s: rc %d %s", (long long)n, w ? 3 : 1,
                  tdtype_name(dt), rc, e.message);
        CHECK_MSG(a && memcmp(a->data, want->data,
                              (size_t)n * tdtype_size(dt)) == 0,
                  "n %lld width %d %s: not the plain conversion's bytes",
                  (long long)n, w ? 3 : 1, tdtype_name(dt));
        tarray_free(a);
        tarray_free(want);
        tarray_free(g_i64); /* not loaded when it failed */
        g_i64 = NULL;
      }
  /* a stop flag set before: nothing converted, the stop's code */
  for (int code = 1; code <= 2; code++)
    for (int w = 0; w < 2; w++) {
      atomic_int st;
      atomic_init(&st, code);
      tenv s = w ? par : one;
      s.stop = &st;
      g_i64 = i64_source(TENV_CHUNK * 2 + 1);
      terr e;
      int rc;
      tarray *a = resolve_env(&s, text, T_F64, &rc, &e);
      CHECK_MSG(rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT) && !a,
                "stop %d width %d: rc %d", code, w ? 3 : 1, rc);
      CHECK_STR(e.field, "params.inputs.x");
      tarray_free(a);
      tarray_free(g_i64);
      g_i64 = NULL;
    }
  pool_destroy(p3);
}

/* A stop during the conversion ends it: 2^24 + 1 elements (17 chunks,
 * tens of ms on one thread); the flag is set by a thread started once the
 * load has handed the int64 array over, so while it is converted. */
TEST(int64_result_stops_midway) {
  atomic_int st;
  atomic_init(&st, 0);
  tenv s1 = env;
  s1.max_elems = 100000000;
  s1.result_meta = i64_meta;
  s1.result_load = i64_load;
  s1.stop = &st;
  g_i64 = i64_source(((int64_t)1 << 24) + 1);
  CHECK(g_i64 != NULL);
  g_stop_at_load = &st;
  g_stopper_started = 0;
  terr e;
  int rc;
  tarray *a = resolve_env(&s1, "{\"result\": \"" I64_JOB "\"}", T_F64, &rc,
                          &e);
  if (g_stopper_started) pthread_join(g_stopper, NULL);
  CHECK(g_stopper_started);
  g_stop_at_load = NULL;
  CHECK_MSG(rc == T_ECANCELED && !a, "rc %d", rc);
  CHECK(strstr(e.message, "stopped while its input was built") != NULL);
  tarray_free(a);
  tarray_free(g_i64);
  g_i64 = NULL;
}

/* A built array against the shape its check found: a changed input
 * (a {"file"} replaced since) is T_ECONFLICT naming the field. */
TEST(as_planned) {
  arrayval_info planned;
  memset(&planned, 0, sizeof planned);
  planned.ndim = 1;
  planned.shape[0] = 4000;
  int64_t s500[1] = {500}, s4000[1] = {4000}, s2d[2] = {4000, 1};
  tarray *a = tarray_new(T_F64, 1, s500), *b = tarray_new(T_F64, 1, s4000),
         *c = tarray_new(T_F64, 2, s2d);
  terr e;
  CHECK(arrayval_as_planned(&planned, b, "params.inputs.x", &e) == 0);
  CHECK(arrayval_as_planned(&planned, a, "params.inputs.x", &e) == T_ECONFLICT);
  CHECK(strcmp(e.field, "params.inputs.x") == 0 && strstr(e.message, "[500]"));
  CHECK(arrayval_as_planned(&planned, c, "params.inputs.x", &e) == T_ECONFLICT);
  tarray_free(a);
  tarray_free(b);
  tarray_free(c);
}

int main(void) {
  RUN(range_matches_numpy);
  RUN(range_errors);
  RUN(random_definition);
  RUN(random_reproducible);
  RUN(random_statistics);
  RUN(random_errors);
  RUN(array_form);
  RUN(result_form);
  RUN(inline_form);
  RUN(build_by_chunks);
  RUN(build_stops_midway);
  RUN(int64_result_by_chunks);
  RUN(int64_result_stops_midway);
  RUN(as_planned);
  return check_summary();
}
