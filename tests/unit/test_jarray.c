/* test_jarray.c — nested JSON arrays <-> tarray.
 *
 * Shapes (0-d, empty dimensions, 8 levels), ragged arrays and non-numbers
 * with their path and flat index, the depth and element caps, float32
 * range, and both writers (json_t and streamed text) parsed back by Jansson
 * and compared bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/array/tarray.h"

static int parse_text(const char *text, tdtype dt, int64_t cap, tarray **out,
                      terr *e) {
  json_error_t je;
  json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
  *out = NULL;
  terr_clear(e);
  if (!v) return -1;
  int rc = jarray_parse(v, dt, cap, "params.inputs.x", out, e);
  json_decref(v);
  return rc;
}

TEST(shapes) {
  tarray *a;
  terr e;
  CHECK(parse_text("3.5", T_F64, 10, &a, &e) == 0 && a && a->ndim == 0 &&
        a->size == 1 && tarray_get(a, 0) == 3.5);
  tarray_free(a);
  CHECK(parse_text("[[1,2,3],[4,5,6]]", T_F64, 10, &a, &e) == 0 && a &&
        a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && tarray_get(a, 4) == 5);
  tarray_free(a);
  CHECK(parse_text("[]", T_F64, 10, &a, &e) == 0 && a && a->ndim == 1 && a->size == 0);
  tarray_free(a);
  CHECK(parse_text("[[],[]]", T_F32, 10, &a, &e) == 0 && a && a->ndim == 2 &&
        a->shape[0] == 2 && a->shape[1] == 0 && a->dtype == T_F32);
  tarray_free(a);
  CHECK(parse_text("[[[[[[[[7]]]]]]]]", T_F64, 10, &a, &e) == 0 && a && a->ndim == 8);
  tarray_free(a);
  /* integers, big and negative, are converted */
  CHECK(parse_text("[-9007199254740993, 12]", T_F64, 10, &a, &e) == 0 && a &&
        tarray_get(a, 0) == -9007199254740992.0 && tarray_get(a, 1) == 12);
  tarray_free(a);
  int nd;
  int64_t sh[T_MAXDIM];
  json_t *v = json_loads("[[1,2],[3,4],[5,6]]", 0, NULL);
  CHECK(jarray_shape(v, 100, "x", &nd, sh, &e) == 0 && nd == 2 && sh[0] == 3 && sh[1] == 2);
  CHECK(jarray_shape(v, 5, "x", &nd, sh, &e) == T_ETOOLARGE);
  json_decref(v);
}

TEST(refusals) {
  struct { const char *text; int rc; const char *msg; int64_t pos; } bad[] = {
      {"[1,2,3,[4]]", T_EINVAL, "params.inputs.x: ragged array at [3]", 3},
      {"[[1,2],[3]]", T_EINVAL, "ragged array at [1]", 2},
      {"[[1,2],[3,4,5]]", T_EINVAL, "ragged array at [1]", 2},
      {"[[1,2],3]", T_EINVAL, "ragged array at [1]", 2},
      {"[[[1],[2]],[[3],[4,5]]]", T_EINVAL, "ragged array at [1, 1]", 3},
      {"[[1,2],[3,\"4\"]]", T_EINVAL, "element [1, 1] is a string, not a number", 3},
      {"[true]", T_EINVAL, "element [0] is a boolean", 0},
      {"[1,null]", T_EINVAL, "element [1] is null", 1},
      {"[[1],[{}]]", T_EINVAL, "element [1, 0] is an object", 1},
      {"[[1],{}]", T_EINVAL, "element [1] is an object", 1},
      {"\"x\"", T_EINVAL, "not a string", 0},
      {"true", T_EINVAL, "not a boolean", 0},
      {"null", T_EINVAL, "not null", 0},
      {"[[[[[[[[[1]]]]]]]]]", T_EINVAL, "deeper than 8", 0},
      {"[1,2,3,4,5,6]", T_ETOOLARGE, "more than 5", -1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tarray *a;
    terr e;
    int rc = parse_text(bad[i].text, T_F64, 5, &a, &e);
    CHECK_MSG(rc == bad[i].rc && !a, "case %zu rc %d", i, rc);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'",
              i, e.message, bad[i].msg);
    CHECK_MSG(e.position == bad[i].pos, "case %zu: position %lld, want %lld", i,
              (long long)e.position, (long long)bad[i].pos);
    CHECK_STR(e.field, "params.inputs.x");
  }
  /* float32 beyond its range becomes +-inf, as NumPy's astype (and an
   * uploaded float64 .npy used by a float32 job) gives: never a run-time
   * failure of what the submit check accepted */
  {
    tarray *a = NULL;
    terr e;
    CHECK(parse_text("[1e300, -1e39, 3.5e38, 1e-50, 2]", T_F32, 5, &a, &e) == 0);
    if (a) {
      CHECK(a->dtype == T_F32 && a->size == 5);
      CHECK(isinf(tarray_get(a, 0)) && tarray_get(a, 0) > 0);
      CHECK(isinf(tarray_get(a, 1)) && tarray_get(a, 1) < 0);
      CHECK(isinf(tarray_get(a, 2)) && tarray_get(a, 2) > 0);
      CHECK(tarray_get(a, 3) == 0 && tarray_get(a, 4) == 2);
      tarray_free(a);
    }
    CHECK(parse_text("1e39", T_F32, 5, &a, &e) == 0);
    if (a) {
      CHECK(a->ndim == 0 && isinf(tarray_get(a, 0)));
      tarray_free(a);
    }
  }
  /* a deep hostile nesting costs nothing: the depth cap stops the descent */
  size_t depth = 100000;
  char *deep = malloc(2 * depth + 2);
  memset(deep, '[', depth);
  memset(deep + depth, ']', depth);
  deep[2 * depth] = 0;
  json_t *v = json_loads(deep, 0, NULL); /* Jansson itself caps depth */
  if (v) {
    tarray *a;
    terr e;
    CHECK(jarray_parse(v, T_F64, 100, "x", &a, &e) == T_EINVAL);
    json_decref(v);
  }
  free(deep);
}

static char *stream_text(const tarray *a) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  terr e;
  int rc = jarray_write(f, a, &e);
  fclose(f);
  if (rc) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* Both writers, parsed back, against the array. */
static void check_writers(const tarray *a) {
  json_t *j = jarray_to_json(a);
  char *t1 = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  char *t2 = stream_text(a);
  CHECK(j && t1 && t2);
  json_decref(j);
  const char *texts[2] = {t1, t2};
  for (int k = 0; k < 2 && t1 && t2; k++) {
    json_t *v = json_loads(texts[k], JSON_DECODE_ANY, NULL);
    CHECK_MSG(v != NULL, "writer %d gave bad JSON: %.200s", k, texts[k]);
    if (!v) continue;
    int nd;
    int64_t sh[T_MAXDIM];
    terr e;
    /* non-finite values are null, which the parser refuses by design */
    int finite = 1;
    for (int64_t i = 0; i < a->size; i++)
      if (!isfinite(tarray_get(a, i))) finite = 0;
    if (!finite) {
      json_decref(v);
      continue;
    }
    /* An all-empty array loses the dims below its first 0, as in NumPy's
     * tolist(); compare the shape down to it. */
    CHECK(jarray_shape(v, INT64_MAX, "x", &nd, sh, &e) == 0);
    for (int d = 0; d < nd && d < a->ndim; d++) CHECK(sh[d] == a->shape[d]);
    if (a->size) {
      CHECK(nd == a->ndim);
      tarray *b = NULL;
      CHECK(jarray_parse(v, a->dtype, INT64_MAX, "x", &b, &e) == 0);
      for (int64_t i = 0; b && i < a->size; i++)
        CHECK(tarray_get(b, i) == tarray_get(a, i));
      tarray_free(b);
    }
    json_decref(v);
  }
  free(t1);
  free(t2);
}

TEST(writers) {
  int64_t shapes[][T_MAXDIM] = {{0}, {0}, {5}, {2, 3}, {2, 0, 3}, {2, 3, 0},
                                {1, 1, 1, 1, 1, 1, 1, 2}, {3, 2, 2}};
  int ndims[] = {0, 1, 1, 2, 3, 3, 8, 3};
  for (int dt = 0; dt < 2; dt++)
    for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
      tarray *a = tarray_new((tdtype)dt, ndims[s], shapes[s]);
      for (int64_t i = 0; i < a->size; i++)
        tarray_set(a, i, (i % 2 ? -1 : 1) * (0.1 + (double)i / 3) * (dt ? pow(10, (double)(i % 7) * 10 - 30)
                                                      : pow(10, (double)(i % 7) * 40 - 120)));
      check_writers(a);
      tarray_free(a);
    }
  /* exact text for a small case, and NaN/Inf as null */
  int64_t sh[2] = {2, 2};
  tarray *a = tarray_new(T_F64, 2, sh);
  double v[4] = {1, NAN, -INFINITY, 0.5};
  memcpy(a->data, v, sizeof v);
  char *t = stream_text(a);
  CHECK_STR(t, "[[1,null],[null,0.5]]");
  free(t);
  json_t *j = jarray_to_json(a);
  t = json_dumps(j, JSON_COMPACT);
  CHECK_STR(t, "[[1.0,null],[null,0.5]]");
  CHECK(json_is_null(json_array_get(json_array_get(j, 0), 1)));
  CHECK(json_real_value(json_array_get(json_array_get(j, 1), 1)) == 0.5);
  free(t);
  json_decref(j);
  check_writers(a);
  tarray_free(a);
  int64_t sh3[3] = {2, 0, 5};
  a = tarray_new(T_F64, 3, sh3);
  t = stream_text(a);
  CHECK_STR(t, "[[],[]]");
  free(t);
  tarray_free(a);
}

/* An int64 result as JSON, from both writers: integers, exact beyond
 * 2^53. */
TEST(write_int64) {
  int64_t sh[2] = {2, 2};
  tarray *a = tarray_new(T_I64, 2, sh);
  int64_t v[4] = {42, -7, ((int64_t)1 << 60) + 3, INT64_MIN};
  memcpy(a->data, v, sizeof v);
  char *t = stream_text(a);
  CHECK_STR(t, "[[42,-7],[1152921504606846979,-9223372036854775808]]");
  free(t);
  json_t *j = jarray_to_json(a);
  json_t *x = json_array_get(json_array_get(j, 1), 0);
  CHECK(json_is_integer(x) && json_integer_value(x) == ((int64_t)1 << 60) + 3);
  json_decref(j);
  tarray_free(a);
}

int main(void) {
  RUN(shapes);
  RUN(refusals);
  RUN(writers);
  RUN(write_int64);
  return check_summary();
}
