/* jarray.c — nested JSON arrays <-> tarray.
 *
 * Reading: the shape is taken from the first element at each depth
 * ([[1,2,3],[4,5,6]] -> [2, 3]; an empty array ends the descent), capped at
 * T_MAXDIM levels. Then one iterative walk (an explicit stack of at most
 * T_MAXDIM indices, no recursion) visits every element in C order, checks
 * that each sub-array has its dimension's length and each leaf is a number,
 * and (when building) stores it. Errors are T_EINVAL, "<field>: ragged
 * array at [1, 0]" or "<field>: element [0, 2] is a string, not a number",
 * with position = the flat (C-order) index of the first element concerned.
 * The element count is capped by max_elems (T_ETOOLARGE). Read as float32,
 * a number beyond float32's range becomes +-inf (NumPy's astype rounding,
 * the same as an uploaded float64 .npy converted for a float32 job), so a
 * job's inline inputs never fail at run time for what the check accepted.
 *
 * Writing: jarray_to_json builds a json_t (small results); jarray_write
 * streams the same text through a 64 KiB buffer (big results), floats as the
 * shortest text that reads back exactly, int64 results as integers (tnum_fmt), NaN
 * and Inf as null.
 *
 * Ownership: *out and jarray_to_json's result are the caller's. No shared
 * state; any thread.
 */
#include "compute/array/tarray.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "a number";
  }
}

/* "[1, 0]" from the first n indices. */
static void path_str(const size_t *idx, int n, char *buf, size_t len) {
  int64_t s[T_MAXDIM];
  for (int i = 0; i < n; i++) s[i] = (int64_t)idx[i];
  tshape_str(n, s, buf, len);
}

/* The walk shared by jarray_shape and jarray_parse; `out` NULL: check only. */
static int jarray_walk(const json_t *v, int64_t max_elems, const char *field,
                       int *ndim_out, int64_t *shape, tarray *out,
                       tdtype dt, terr *e) {
  char path[T_MAXDIM * 22];
  int ndim = 0;
  const json_t *cur = v;
  /* 1. Shape from the first elements. */
  while (json_is_array(cur)) {
    if (ndim == T_MAXDIM)
      return terr_set(e, T_EINVAL, field, 0,
                      "nested deeper than %d levels", T_MAXDIM);
    shape[ndim++] = (int64_t)json_array_size(cur);
    if (json_array_size(cur) == 0) break;
    cur = json_array_get(cur, 0);
  }
  if (ndim == 0 && !json_is_number(v))
    return terr_set(e, T_EINVAL, field, 0, "expected a number or an array, "
                    "not %s", json_kind(v));
  int64_t n = tshape_size(ndim, shape, INT64_MAX);
  if (n < 0 || n > max_elems)
    return terr_set(e, T_ETOOLARGE, field, -1,
                    "more than %lld elements", (long long)max_elems);
  *ndim_out = ndim;
  if (ndim == 0) {
    if (out) tarray_set(out, 0, json_number_value(v));
    return 0;
  }
  /* 2. Walk every element in C order. */
  const json_t *node[T_MAXDIM];
  size_t idx[T_MAXDIM];
  int64_t flat = 0;
  int d = 0;
  node[0] = v;
  idx[0] = 0;
  while (d >= 0) {
    if (idx[d] == (size_t)shape[d]) {
      if (--d >= 0) idx[d]++;
      continue;
    }
    const json_t *c = json_array_get(node[d], idx[d]);
    if (d == ndim - 1) {
      if (!json_is_number(c)) {
        path_str(idx, d + 1, path, sizeof path);
        if (json_is_array(c))
          return terr_set(e, T_EINVAL, field, flat, "ragged array at %s",
                          path);
        return terr_set(e, T_EINVAL, field, flat,
                        "element %s is %s, not a number", path, json_kind(c));
      }
      /* float32: a value beyond its range becomes +-inf, as NumPy's
       * astype (and an uploaded float64 .npy used as float32) gives */
      if (out) tarray_set(out, flat, json_number_value(c));
      flat++;
      idx[d]++;
    } else {
      if (!json_is_array(c) || json_array_size(c) != (size_t)shape[d + 1]) {
        path_str(idx, d + 1, path, sizeof path);
        if (json_is_array(c) || json_is_number(c))
          return terr_set(e, T_EINVAL, field, flat,
                          "ragged array at %s: %s where an array of %lld "
                          "was expected",
                          path, json_is_array(c) ? "a different length"
                                                 : "a number",
                          (long long)shape[d + 1]);
        return terr_set(e, T_EINVAL, field, flat,
                        "element %s is %s, not a number", path, json_kind(c));
      }
      d++;
      node[d] = c;
      idx[d] = 0;
    }
  }
  return 0;
}

int jarray_shape(const json_t *v, int64_t max_elems, const char *field,
                 int *ndim, int64_t *shape, terr *e) {
  return jarray_walk(v, max_elems, field, ndim, shape, NULL, T_F64, e);
}

int jarray_parse(const json_t *v, tdtype dt, int64_t max_elems,
                 const char *field, tarray **out, terr *e) {
  *out = NULL;
  int ndim;
  int64_t shape[T_MAXDIM];
  int rc = jarray_walk(v, max_elems, field, &ndim, shape, NULL, dt, e);
  if (rc) return rc;
  tarray *a = tarray_new(dt, ndim, shape);
  if (!a) return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  rc = jarray_walk(v, max_elems, field, &ndim, shape, a, dt, e);
  if (rc) {
    tarray_free(a);
    return rc;
  }
  *out = a;
  return 0;
}

/* ---- writing ------------------------------------------------------------- */

static json_t *num_json(const tarray *a, int64_t i) {
  if (a->dtype == T_I64)
    return json_integer((json_int_t)((const int64_t *)a->data)[i]);
  double x = tarray_get(a, i);
  return isfinite(x) ? json_real(x) : json_null();
}

/* Depth is at most T_MAXDIM, so this recursion is bounded. */
static json_t *build(const tarray *a, int d, int64_t *flat) {
  json_t *arr = json_array();
  if (!arr) return NULL;
  for (int64_t i = 0; i < a->shape[d]; i++) {
    json_t *c = d + 1 == a->ndim ? num_json(a, (*flat)++)
                                 : build(a, d + 1, flat);
    if (!c || json_array_append_new(arr, c) != 0) {
      json_decref(arr);
      return NULL;
    }
  }
  return arr;
}

json_t *jarray_to_json(const tarray *a) {
  if (a->ndim == 0) return num_json(a, 0);
  int64_t flat = 0;
  return build(a, 0, &flat);
}

typedef struct jbuf {
  FILE *f;
  size_t n;
  int err;
  char b[65536];
} jbuf;

static void jb_flush(jbuf *o) {
  if (o->n && fwrite(o->b, 1, o->n, o->f) != o->n) o->err = 1;
  o->n = 0;
}

static void jb_put(jbuf *o, const char *s, size_t n) {
  if (sizeof o->b - o->n < n) jb_flush(o);
  memcpy(o->b + o->n, s, n);
  o->n += n;
}

static void jb_num(jbuf *o, const tarray *a, int64_t i) {
  if (sizeof o->b - o->n < TNUM_FMT_MAX) jb_flush(o);
  o->n += tnum_fmt(o->b + o->n, TNUM_FMT_MAX, a->dtype,
                   (const char *)a->data + (size_t)i * tdtype_size(a->dtype), 1);
}

/* Elements of the first nd dimensions in C order: before the first, one
 * '[' per dimension; after each, one ']' per dimension that ends there, then
 * ',' and as many '[' again unless it was the last. Each element is a number,
 * or "[]" when the array has a zero dimension right below (empty_leaf). */
static void jb_walk(jbuf *o, const tarray *a, int nd, int empty_leaf) {
  int64_t count = 1, idx[T_MAXDIM] = {0};
  for (int d = 0; d < nd; d++) count *= a->shape[d];
  for (int d = 0; d < nd; d++) jb_put(o, "[", 1);
  for (int64_t i = 0; i < count; i++) {
    if (empty_leaf)
      jb_put(o, "[]", 2);
    else
      jb_num(o, a, i);
    int d = nd - 1, closes = 0;
    while (d >= 0 && ++idx[d] == a->shape[d]) {
      idx[d] = 0;
      closes++;
      d--;
    }
    for (int c = 0; c < closes; c++) jb_put(o, "]", 1);
    if (d >= 0) {
      jb_put(o, ",", 1);
      for (int c = 0; c < closes; c++) jb_put(o, "[", 1);
    }
  }
}

int jarray_write(FILE *f, const tarray *a, terr *e) {
  jbuf *o = malloc(sizeof *o);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "json: out of memory");
  o->f = f;
  o->n = 0;
  o->err = 0;
  if (a->ndim == 0) {
    jb_num(o, a, 0);
  } else if (a->size == 0) {
    int z = 0; /* the first zero dimension: [2, 0, 5] -> [[],[]] */
    while (a->shape[z] != 0) z++;
    if (z == 0)
      jb_put(o, "[]", 2);
    else
      jb_walk(o, a, z, 1);
  } else {
    jb_walk(o, a, a->ndim, 0);
  }
  jb_flush(o);
  int err = o->err || ferror(f);
  free(o);
  if (err)
    return terr_set(e, T_EIO, "", -1, "json: write failed: %s",
                    strerror(errno));
  return 0;
}
