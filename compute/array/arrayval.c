/* arrayval.c — the array value forms of API.md: inline JSON,
 * {"array": id}, {"result": job id} (with "part": name, a part of a result
 * of several arrays), {"file": path}, {"range": ...} and {"random": ...}.
 * A {"file"} is checked (header read, no mapping) and mapped by
 * compute/array/localfile.c under the env's --local-dir directories, each time
 * against its pin in env->local_pins (recorded by the check at submit,
 * compared at run: a file changed in between is T_ECONFLICT naming the
 * input, before a byte of it is read).
 *
 * Both entry points share one parser (av_parse) that validates the form
 * strictly (unknown keys, wrong types and bad values are T_EINVAL naming the
 * field, e.g. "params.inputs.x.range.step: must not be 0") and computes the
 * shape without building anything; arrayval_resolve then builds the data.
 *
 * range follows numpy.arange exactly: length = ceil((stop - start) / step)
 * clamped at 0 (with NumPy's special case when the division underflows to
 * 0), values v[0] = start, v[1] = start + step, and v[i] = start + i * d with
 * d = v[1] - v[0] (NumPy's DOUBLE_fill), so that elements are bit-equal.
 *
 * random is counter-based (see arrayval.h): element i depends only on
 * (seed, i), never on threads or backends.
 *
 * A run builds range, random and converted values (a float32 upload read
 * as float64, a {"file"}, a result of another dtype: an int64 result, a
 * geodesic query's indices, is always converted, to float64 as NumPy
 * promotes it, exact up to 2^53 and rounded to nearest beyond) by chunks
 * of TENV_CHUNK elements on the env's pool (tenv_for), each element a
 * function of its index alone, so the bytes are the same on any number of
 * threads; it looks at the job's stop flag between chunks (a cancel during
 * a long prepare).
 *
 * Ownership: *out is the caller's. env's callbacks are the API's (they run
 * on the calling thread). No shared state; any thread.
 */
#include "compute/array/arrayval.h"
#include "compute/array/parts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/localfile.h"
#include "compute/array/region.h"
#include "util/pool.h"
#include "util/util.h"

#define AV_SEED_MAX 9007199254740992.0 /* 2^53 */

/* A parsed non-inline form. */
typedef struct av_form {
  double start, stop, step;         /* range */
  int normal;                       /* random: 0 uniform, 1 normal */
  double low, high, mean, std;      /* random */
  uint64_t seed;                    /* random */
  const char *id;                   /* array, result */
  const char *part;                 /* result: "part", or NULL */
  const char *path;                 /* file */
  int64_t offset;                   /* region (id: its id) */
} av_form;

/* ---- the generator ------------------------------------------------------- */

#define SM_GAMMA 0x9E3779B97F4A7C15ULL

static inline uint64_t sm_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Output i of a SplitMix64 stream whose state starts at key. */
static inline double sm_u53(uint64_t key, uint64_t i) {
  return (double)(sm_mix(key + (i + 1) * SM_GAMMA) >> 11) * 0x1p-53;
}

static inline uint64_t sm_key(uint64_t seed) { return sm_mix(seed + SM_GAMMA); }

double arrayval_uniform(uint64_t seed, uint64_t i, double low, double high) {
  return low + (high - low) * sm_u53(sm_key(seed), i);
}

static inline double normal_at(uint64_t key, uint64_t i) {
  uint64_t p = i & ~(uint64_t)1;
  double u1 = sm_u53(key, p), u2 = sm_u53(key, p + 1);
  double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 in (0, 1] */
  double t = 6.283185307179586 * u2;
  return (i & 1) ? r * sin(t) : r * cos(t);
}

double arrayval_normal(uint64_t seed, uint64_t i, double mean, double std) {
  return mean + std * normal_at(sm_key(seed), i);
}

/* ---- parsing ------------------------------------------------------------- */

static int num_of(const json_t *o, const char *key, const char *field,
                  double dflt, double *out, terr *e) {
  const json_t *v = json_object_get(o, key);
  if (!v) {
    *out = dflt;
    return 0;
  }
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.%s", field, key);
  if (!json_is_number(v))
    return terr_set(e, T_EINVAL, f, -1, "must be a number");
  *out = json_number_value(v);
  if (!isfinite(*out)) return terr_set(e, T_EINVAL, f, -1, "must be finite");
  return 0;
}

/* Every key of o must be in the NULL-terminated list. */
static int keys_only(const json_t *o, const char *field,
                     const char *const *allowed, const char *expect, terr *e) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    int ok = 0;
    for (int i = 0; allowed[i]; i++)
      if (strcmp(k, allowed[i]) == 0) ok = 1;
    if (!ok) {
      char f[TERR_FIELD_MAX];
      snprintf(f, sizeof f, "%s.%.40s", field, k);
      return terr_set(e, T_EINVAL, f, -1, "unknown key '%.40s' (expected %s)",
                      k, expect);
    }
  }
  return 0;
}

/* NumPy's length rule; -1 when it is not finite. */
static double range_len(double start, double stop, double step) {
  double delta = stop - start, t = delta / step;
  if (t == 0.0 && delta != 0.0) return signbit(t) ? 0 : 1;
  if (!isfinite(t)) return -1;
  t = ceil(t);
  return t < 0 ? 0 : t;
}

static int parse_range(const json_t *r, const char *field, int64_t max_elems,
                       av_form *f, arrayval_info *info, terr *e) {
  static const char *const keys[] = {"start", "stop", "step", NULL};
  char fr[TERR_FIELD_MAX];
  snprintf(fr, sizeof fr, "%s.range", field);
  int rc;
  if (!json_is_object(r))
    return terr_set(e, T_EINVAL, fr, -1,
                    "must be an object {\"start\", \"stop\", \"step\"}");
  if ((rc = keys_only(r, fr, keys, "start, stop, step", e))) return rc;
  if (!json_object_get(r, "stop"))
    return terr_set(e, T_EINVAL, fr, -1, "\"stop\" is required");
  if ((rc = num_of(r, "start", fr, 0, &f->start, e)) ||
      (rc = num_of(r, "stop", fr, 0, &f->stop, e)) ||
      (rc = num_of(r, "step", fr, 1, &f->step, e)))
    return rc;
  if (f->step == 0)
    return terr_set(e, T_EINVAL, fr, -1, "step must not be 0");
  double n = range_len(f->start, f->stop, f->step);
  if (n < 0)
    return terr_set(e, T_EINVAL, fr, -1, "length is not finite");
  if (n > (double)max_elems)
    return terr_set(e, T_ETOOLARGE, fr, -1,
                    "%.0f elements is over the limit of %lld", n,
                    (long long)max_elems);
  info->ndim = 1;
  info->shape[0] = (int64_t)n;
  return 0;
}

static int parse_random(const json_t *r, const char *field, int64_t max_elems,
                        av_form *f, arrayval_info *info, terr *e) {
  static const char *const keys[] = {"shape", "dist", "low", "high", "mean",
                                     "std", "seed", NULL};
  char fr[TERR_FIELD_MAX], ff[TERR_FIELD_MAX];
  snprintf(fr, sizeof fr, "%s.random", field);
  int rc;
  if (!json_is_object(r))
    return terr_set(e, T_EINVAL, fr, -1, "must be an object");
  if ((rc = keys_only(r, fr, keys, "shape, dist, low, high, mean, std, seed",
                      e)))
    return rc;
  /* shape */
  const json_t *sh = json_object_get(r, "shape");
  snprintf(ff, sizeof ff, "%s.shape", fr);
  if (!sh) return terr_set(e, T_EINVAL, ff, -1, "is required");
  if (!json_is_array(sh) || json_array_size(sh) > T_MAXDIM)
    return terr_set(e, T_EINVAL, ff, -1,
                    "must be a list of at most %d positive integers",
                    T_MAXDIM);
  info->ndim = (int)json_array_size(sh);
  for (int d = 0; d < info->ndim; d++) {
    const json_t *x = json_array_get(sh, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) <= 0)
      return terr_set(e, T_EINVAL, ff, d,
                      "element %d must be a positive integer", d);
    info->shape[d] = json_integer_value(x);
  }
  if (tshape_size(info->ndim, info->shape, max_elems) < 0)
    return terr_set(e, T_ETOOLARGE, ff, -1,
                    "more than %lld elements", (long long)max_elems);
  /* dist and its parameters */
  const json_t *dist = json_object_get(r, "dist");
  snprintf(ff, sizeof ff, "%s.dist", fr);
  f->normal = 0;
  if (dist) {
    const char *s = json_string_value(dist);
    if (s && strcmp(s, "normal") == 0)
      f->normal = 1;
    else if (!s || strcmp(s, "uniform") != 0)
      return terr_set(e, T_EINVAL, ff, -1, "must be \"uniform\" or \"normal\"");
  }
  const char *other[2] = {f->normal ? "low" : "mean", f->normal ? "high" : "std"};
  for (int i = 0; i < 2; i++)
    if (json_object_get(r, other[i])) {
      snprintf(ff, sizeof ff, "%s.%s", fr, other[i]);
      return terr_set(e, T_EINVAL, ff, -1, "only for dist \"%s\"",
                      f->normal ? "uniform" : "normal");
    }
  if ((rc = num_of(r, "low", fr, 0, &f->low, e)) ||
      (rc = num_of(r, "high", fr, 1, &f->high, e)) ||
      (rc = num_of(r, "mean", fr, 0, &f->mean, e)) ||
      (rc = num_of(r, "std", fr, 1, &f->std, e)))
    return rc;
  if (!f->normal && !(f->low <= f->high && isfinite(f->high - f->low))) {
    snprintf(ff, sizeof ff, "%s.high", fr);
    return terr_set(e, T_EINVAL, ff, -1,
                    "must be >= low (and high - low finite)");
  }
  if (f->normal && f->std < 0) {
    snprintf(ff, sizeof ff, "%s.std", fr);
    return terr_set(e, T_EINVAL, ff, -1, "must be >= 0");
  }
  /* seed: an integer in [0, 2^53]; 0 when absent */
  const json_t *sd = json_object_get(r, "seed");
  snprintf(ff, sizeof ff, "%s.seed", fr);
  f->seed = 0;
  if (sd) {
    double s = json_is_number(sd) ? json_number_value(sd) : -1;
    if (!json_is_number(sd) || !(s >= 0 && s <= AV_SEED_MAX) || floor(s) != s)
      return terr_set(e, T_EINVAL, ff, -1,
                      "must be an integer from 0 to 2^53");
    f->seed = json_is_integer(sd) ? (uint64_t)json_integer_value(sd)
                                  : (uint64_t)s;
  }
  return 0;
}

/* A stored source named by id: an uploaded array ("array": "a_...") or a
 * finished job's result ("result": "j_..."): the two differ only in the id's
 * prefix, the noun in messages and the env's callbacks. */
typedef struct ref_kind {
  const char *key, *noun;
  char prefix;
} ref_kind;
static const ref_kind REF_ARRAY = {"array", "array", 'a'};
static const ref_kind REF_RESULT = {"result", "job", 'j'};

static int parse_ref(const tenv *env, const ref_kind *k, const json_t *idv,
                     const char *field, av_form *f, arrayval_info *info,
                     terr *e) {
  char fa[TERR_FIELD_MAX];
  snprintf(fa, sizeof fa, "%s.%s", field, k->key);
  const char *id = json_string_value(idv);
  if (!id || !t_id_valid(k->prefix, id))
    return terr_set(e, T_EINVAL, fa, -1, "must be %s %s id \"%c_...\"",
                    k->prefix == 'a' ? "an" : "a", k->noun, k->prefix);
  f->id = id;
  int has = env && (k == &REF_ARRAY ? env->array_meta != NULL
                                    : env->result_meta != NULL);
  if (!has) return terr_set(e, T_ENOTFOUND, field, -1, "%s %s not found", k->noun, id);
  terr sub;
  terr_clear(&sub);
  const char *owner = env->owner ? env->owner : "";
  int rc = k == &REF_ARRAY
               ? env->array_meta(env->ud, owner, id, &info->dtype, &info->ndim,
                                 info->shape, &sub)
               : env->result_meta(env->ud, owner, id, f->part, &info->dtype,
                                  &info->ndim, info->shape, &sub);
  if (rc == T_ENOTFOUND)
    return terr_set(e, T_ENOTFOUND, field, -1, "%s %s not found", k->noun, id);
  if (rc == T_ECONFLICT) /* a job that has not succeeded: say it here */
    return terr_set(e, T_ECONFLICT, field, -1, "%s", sub.message);
  if (rc == T_EINVAL && f->part) { /* no such part */
    snprintf(fa, sizeof fa, "%s.part", field);
    return terr_set(e, T_EINVAL, fa, -1, "%s", sub.message);
  }
  if (rc) {
    if (e) *e = sub;
    return rc;
  }
  if (info->ndim < 0 || info->ndim > T_MAXDIM)
    return terr_set(e, T_EINTERNAL, field, -1, "%s %s has a bad shape", k->noun, id);
  if (tshape_extent(info->ndim, info->shape) < 0) /* stored before the rule */
    return terr_set(e, T_EINVAL, field, -1,
                    "%s %s: its shape is too big (non-zero dimensions "
                    "multiply to 2^60 or more)", k->noun, id);
  if (tshape_size(info->ndim, info->shape, env->max_elems) < 0)
    return terr_set(e, T_ETOOLARGE, field, -1,
                    "%s %s: more than %lld elements", k->noun, id,
                    (long long)env->max_elems);
  return 0;
}

/* {"file": "/abs/path.npy"}: a string with no NUL, its .npy header read
 * (compute/array/localfile.h: 403 outside the allowed directories). */
static int parse_file(const tenv *env, const json_t *pv, const char *field,
                      int64_t max_elems, av_form *f, arrayval_info *info,
                      terr *e) {
  char ff[TERR_FIELD_MAX];
  snprintf(ff, sizeof ff, "%s.file", field);
  const char *p = json_string_value(pv);
  if (!p || strlen(p) != json_string_length(pv))
    return terr_set(e, T_EINVAL, ff, -1,
                    "must be an absolute path (a string with no NUL)");
  if (json_string_length(pv) > TLOCAL_PATH_MAX)
    return terr_set(e, T_EINVAL, ff, -1, "path is over %d bytes",
                    TLOCAL_PATH_MAX);
  f->path = p;
  return tlocal_npy_meta(env ? env->local : NULL, env ? env->owner : "", p,
                         ff, max_elems, env ? env->local_pins : NULL,
                         &info->dtype, &info->ndim, info->shape, e);
}

/* {"region": id, "offset": bytes, "dtype": "float64", "shape": [n, ...]}:
 * a range of a registered region (compute/array/region.h), checked against
 * its size now (400 naming field.offset past its end) and read in place at
 * run time. offset defaults to 0; dtype and shape are required. */
static int parse_region(const tenv *env, const json_t *v, const char *field,
                        int64_t max_elems, av_form *f, arrayval_info *info,
                        terr *e) {
  static const char *const keys[] = {"region", "offset", "dtype", "shape",
                                     NULL};
  char ff[TERR_FIELD_MAX];
  int rc = keys_only(v, field, keys, "region, offset, dtype, shape", e);
  if (rc) return rc;
  const json_t *x = json_object_get(v, "region");
  snprintf(ff, sizeof ff, "%s.region", field);
  if (!json_is_string(x) || json_string_length(x) < 1 ||
      json_string_length(x) >= REGION_ID_MAX)
    return terr_set(e, T_EINVAL, ff, -1, "must be a region's id (\"r_...\")");
  f->id = json_string_value(x);
  snprintf(ff, sizeof ff, "%s.offset", field);
  x = json_object_get(v, "offset");
  if (x && (!json_is_integer(x) || json_integer_value(x) < 0))
    return terr_set(e, T_EINVAL, ff, -1,
                    "must be a byte offset (an integer >= 0)");
  f->offset = x ? json_integer_value(x) : 0;
  snprintf(ff, sizeof ff, "%s.dtype", field);
  x = json_object_get(v, "dtype");
  if (!json_is_string(x) || tdtype_parse(json_string_value(x), &info->dtype))
    return terr_set(e, T_EINVAL, ff, -1, "required: float64 or float32");
  snprintf(ff, sizeof ff, "%s.shape", field);
  x = json_object_get(v, "shape");
  if (!json_is_array(x) || json_array_size(x) > T_MAXDIM)
    return terr_set(e, T_EINVAL, ff, -1,
                    "required: a list of at most %d integers >= 0", T_MAXDIM);
  info->ndim = (int)json_array_size(x);
  for (int d = 0; d < info->ndim; d++) {
    const json_t *n = json_array_get(x, (size_t)d);
    if (!json_is_integer(n) || json_integer_value(n) < 0)
      return terr_set(e, T_EINVAL, ff, d, "element %d must be an integer >= 0",
                      d);
    info->shape[d] = json_integer_value(n);
  }
  int64_t size = tshape_size(info->ndim, info->shape, max_elems);
  if (size < 0)
    return terr_set(e, T_ETOOLARGE, ff, -1, "more than %lld elements",
                    (long long)max_elems);
  int64_t isz = (int64_t)tdtype_size(info->dtype);
  return region_check_range(env && env->owner ? env->owner : "", f->id,
                            f->offset, size * isz, isz, field, e);
}

/* Validate v and fill info (and f for the object forms). */
static int av_parse(const tenv *env, const json_t *v, const char *field,
                    arrayval_info *info, av_form *f, terr *e) {
  int64_t max_elems = env && env->max_elems > 0 ? env->max_elems : INT64_MAX;
  if (!field) field = "";
  memset(info, 0, sizeof *info);
  memset(f, 0, sizeof *f);
  info->dtype = T_F64;
  int rc;
  if (!v) return terr_set(e, T_EINVAL, field, -1, "is required");
  if (json_is_number(v) || json_is_array(v)) {
    info->form = AV_INLINE;
    rc = jarray_shape(v, max_elems, field, &info->ndim, info->shape, e);
  } else if (json_is_object(v) && json_object_get(v, "region")) {
    info->form = AV_REGION;
    rc = parse_region(env, v, field, max_elems, f, info, e);
  } else if (json_is_object(v)) {
    static const char *const keys[] = {"array", "result", "file", "range",
                                       "random", "region", NULL};
    /* {"result": id, "part": name}: a part of a result of several arrays */
    const json_t *pv = json_object_get(v, "part");
    char fp[TERR_FIELD_MAX];
    snprintf(fp, sizeof fp, "%s.part", field);
    if (pv && !json_object_get(v, "result"))
      return terr_set(e, T_EINVAL, fp, -1, "only with \"result\"");
    if (pv && json_object_size(v) == 2) {
      if (!tpart_name_valid(json_string_value(pv)))
        return terr_set(e, T_EINVAL, fp, -1,
                        "must be a result part's name ([a-z][a-z0-9_]{0,30})");
      f->part = json_string_value(pv);
      info->form = AV_RESULT;
      rc = parse_ref(env, &REF_RESULT, json_object_get(v, "result"), field, f,
                     info, e);
      goto parsed;
    }
    if (json_object_size(v) != 1) {
      static const char *const keys_part[] = {"array", "result", "file",
                                              "range", "random", "part", NULL};
      if ((rc = keys_only(v, field, pv ? keys_part : keys,
                          "array, result (and part), file, range, random or "
                          "region",
                          e)))
        return rc;
      return terr_set(e, T_EINVAL, field, -1,
                      "exactly one of \"array\", \"result\", \"file\", "
                      "\"range\", \"random\"");
    }
    const json_t *x;
    if ((x = json_object_get(v, "array"))) {
      info->form = AV_ARRAY;
      rc = parse_ref(env, &REF_ARRAY, x, field, f, info, e);
    } else if ((x = json_object_get(v, "result"))) {
      info->form = AV_RESULT;
      rc = parse_ref(env, &REF_RESULT, x, field, f, info, e);
    } else if ((x = json_object_get(v, "file"))) {
      info->form = AV_FILE;
      rc = parse_file(env, x, field, max_elems, f, info, e);
    } else if ((x = json_object_get(v, "range"))) {
      info->form = AV_RANGE;
      rc = parse_range(x, field, max_elems, f, info, e);
    } else if ((x = json_object_get(v, "random"))) {
      info->form = AV_RANDOM;
      rc = parse_random(x, field, max_elems, f, info, e);
    } else {
      return keys_only(v, field, keys,
                       "array, result, file, range, random or region", e);
    }
  } else {
    return terr_set(e, T_EINVAL, field, -1,
                    "expected a number, a nested array, or an object with "
                    "\"array\", \"result\", \"file\", \"range\" or "
                    "\"random\"; not %s",
                    json_is_string(v)   ? "a string"
                    : json_is_null(v)   ? "null"
                                        : "a boolean");
  }
parsed:
  if (rc) return rc;
  info->size = tshape_size(info->ndim, info->shape, INT64_MAX);
  return 0;
}

int arrayval_check(const tenv *env, const json_t *v, const char *field,
                   arrayval_info *info, terr *e) {
  av_form f;
  return av_parse(env, v, field, info, &f, e);
}

/* ---- building ------------------------------------------------------------ */

int tenv_stop_error(int st, const char *field, terr *e) {
  if (st == 2)
    return terr_set(e, T_ETIMEOUT, field ? field : "", -1,
                    "the job ran past its timeout while its input was built");
  return terr_set(e, T_ECANCELED, field ? field : "", -1,
                  "stopped while its input was built");
}

int tenv_for(const tenv *env, int64_t nchunks, tenv_chunk_fn fn, void *arg,
             const char *field, terr *e) {
  int st = 0;
  if (env && env->pool && env->width > 1 && nchunks > 1) {
    st = pool_for(env->pool, env->width, nchunks, fn, arg, env->stop);
  } else {
    for (int64_t c = 0; c < nchunks && !(st = tenv_stopped(env)); c++)
      fn(arg, c, 0);
  }
  return st ? tenv_stop_error(st, field, e) : 0;
}

/* One build of an array by chunks of TENV_CHUNK elements: [lo, hi) of
 * chunk c (any thread, any order: every element depends only on its index
 * and the source). */
typedef struct av_build {
  tarray *a;
  const av_form *f;
  const tarray *src; /* a conversion's source */
} av_build;

static void chunk_bounds(const tarray *a, int64_t c, int64_t *lo, int64_t *hi) {
  *lo = c * TENV_CHUNK;
  *hi = *lo + TENV_CHUNK < a->size ? *lo + TENV_CHUNK : a->size;
}

static void fill_range(void *arg, int64_t c, int slot) {
  (void)slot;
  const av_build *b = arg;
  tarray *a = b->a;
  const av_form *f = b->f;
  int64_t lo, hi;
  chunk_bounds(a, c, &lo, &hi);
  double v0 = f->start, v1 = f->start + f->step, d = v1 - v0;
  if (a->dtype == T_F64) {
    double *p = a->data;
    for (int64_t i = lo; i < hi; i++) p[i] = v0 + (double)i * d;
    /* v[0], v[1] are start and start + step as given (NumPy's DOUBLE_fill) */
    if (lo == 0) p[0] = v0;
    if (lo <= 1 && 1 < hi) p[1] = v1;
  } else {
    float *p = a->data;
    for (int64_t i = lo; i < hi; i++) p[i] = (float)(v0 + (double)i * d);
    if (lo == 0) p[0] = (float)v0;
    if (lo <= 1 && 1 < hi) p[1] = (float)v1;
  }
}

/* Normal values come in Box-Muller pairs (2p, 2p + 1): one log, sqrt, cos
 * and sin per pair, the same expressions as normal_at, so bit-equal. A
 * chunk starts at an even index (TENV_CHUNK is even). */
static void fill_random(void *arg, int64_t c, int slot) {
  (void)slot;
  const av_build *b = arg;
  tarray *a = b->a;
  const av_form *f = b->f;
  uint64_t key = sm_key(f->seed);
  int64_t lo, hi;
  chunk_bounds(a, c, &lo, &hi);
  if (!f->normal) {
    for (int64_t i = lo; i < hi; i++)
      tarray_set(a, i, f->low + (f->high - f->low) * sm_u53(key, (uint64_t)i));
    return;
  }
  for (int64_t i = lo; i < hi; i += 2) {
    double u1 = sm_u53(key, (uint64_t)i), u2 = sm_u53(key, (uint64_t)i + 1);
    double r = sqrt(-2.0 * log(1.0 - u1)), t = 6.283185307179586 * u2;
    tarray_set(a, i, f->mean + f->std * (r * cos(t)));
    if (i + 1 < hi) tarray_set(a, i + 1, f->mean + f->std * (r * sin(t)));
  }
}

/* The same values as tarray_convert, by chunks. */
static void convert_chunk(void *arg, int64_t c, int slot) {
  (void)slot;
  const av_build *b = arg;
  tarray *a = b->a;
  const tarray *s = b->src;
  int64_t lo, hi;
  chunk_bounds(a, c, &lo, &hi);
  if (a->dtype == T_F32 && s->dtype == T_F64) {
    const double *x = s->data;
    float *y = a->data;
    for (int64_t i = lo; i < hi; i++) y[i] = (float)x[i];
  } else if (a->dtype == T_F64 && s->dtype == T_F32) {
    const float *x = s->data;
    double *y = a->data;
    for (int64_t i = lo; i < hi; i++) y[i] = x[i];
  } else if (a->dtype == T_F64 && s->dtype == T_I64) {
    const int64_t *x = s->data;
    double *y = a->data;
    for (int64_t i = lo; i < hi; i++) y[i] = (double)x[i];
  } else {
    for (int64_t i = lo; i < hi; i++) tarray_set(a, i, tarray_get(s, i));
  }
}

static int64_t nchunks(int64_t size) {
  return (size + TENV_CHUNK - 1) / TENV_CHUNK;
}

/* *a converted to dt in place of *a (the source is let go: a mapping is
 * unmapped), by chunks on env's pool, stopping at its flag. */
static int av_convert(const tenv *env, tarray **a, tdtype dt,
                      const char *field, terr *e) {
  tarray *c = tarray_new(dt, (*a)->ndim, (*a)->shape);
  if (!c) return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  av_build b = {.a = c, .src = *a};
  int rc = tenv_for(env, nchunks(c->size), convert_chunk, &b, field, e);
  tarray_free(*a);
  *a = NULL;
  if (rc) {
    tarray_free(c);
    return rc;
  }
  *a = c;
  return 0;
}

int arrayval_resolve(const tenv *env, const json_t *v, const char *field,
                     tdtype dt, tarray **out, terr *e) {
  *out = NULL;
  arrayval_info info;
  av_form f;
  int rc = av_parse(env, v, field, &info, &f, e);
  if (rc) return rc;
  if (!field) field = "";
  int64_t max_elems = env && env->max_elems > 0 ? env->max_elems : INT64_MAX;
  tarray *a = NULL;
  switch (info.form) {
    case AV_INLINE:
      return jarray_parse(v, dt, max_elems, field, out, e);
    case AV_ARRAY:
    case AV_RESULT: {
      const ref_kind *k = info.form == AV_ARRAY ? &REF_ARRAY : &REF_RESULT;
      if (info.form == AV_ARRAY ? !env->array_load : !env->result_load)
        return terr_set(e, T_ENOTFOUND, field, -1, "%s %s not found", k->noun, f.id);
      terr sub;
      terr_clear(&sub);
      const char *owner = env->owner ? env->owner : "";
      rc = info.form == AV_ARRAY
               ? env->array_load(env->ud, owner, f.id, &a, &sub)
               : env->result_load(env->ud, owner, f.id, f.part, &a, &sub);
      if (rc == T_ENOTFOUND)
        return terr_set(e, T_ENOTFOUND, field, -1, "%s %s not found", k->noun, f.id);
      if (rc == T_ECONFLICT)
        return terr_set(e, T_ECONFLICT, field, -1, "%s", sub.message);
      if (rc) {
        if (e) *e = sub;
        return rc;
      }
      if (a->dtype != dt && (rc = av_convert(env, &a, dt, field, e)))
        return rc;
      *out = a;
      return 0;
    }
    case AV_FILE: {
      char ff[TERR_FIELD_MAX];
      snprintf(ff, sizeof ff, "%s.file", field);
      rc = tlocal_map(env->local, env->owner, f.path, ff, max_elems,
                      env->local_pins, env->local_log, &a, e);
      if (rc) return rc;
      /* a converted copy: the mapping is let go */
      if (a->dtype != dt && (rc = av_convert(env, &a, dt, field, e)))
        return rc;
      *out = a;
      return 0;
    }
    case AV_REGION: {
      /* borrowed in place: the mapping is read, never copied */
      rc = region_input(env->owner ? env->owner : "", f.id, f.offset,
                        info.dtype, info.ndim, info.shape, field,
                        env->local_log, &a, e);
      if (rc) return rc;
      if (a->dtype != dt && (rc = av_convert(env, &a, dt, field, e)))
        return rc;
      *out = a;
      return 0;
    }
    case AV_RANGE:
    case AV_RANDOM: {
      a = tarray_new(dt, info.ndim, info.shape);
      if (!a) return terr_set(e, T_ENOMEM, field, -1, "out of memory");
      av_build b = {.a = a, .f = &f};
      rc = tenv_for(env, nchunks(a->size),
                    info.form == AV_RANGE ? fill_range : fill_random, &b,
                    field, e);
      if (rc) {
        tarray_free(a);
        return rc;
      }
      *out = a;
      return 0;
    }
  }
  return terr_set(e, T_EINTERNAL, field, -1, "unknown array form");
}

int arrayval_as_planned(const arrayval_info *planned, const tarray *a,
                        const char *field, terr *e) {
  int same = a && a->ndim == planned->ndim;
  for (int d = 0; same && d < a->ndim; d++)
    same = a->shape[d] == planned->shape[d];
  if (same) return 0;
  char was[T_MAXDIM * 22], now[T_MAXDIM * 22];
  return terr_set(e, T_ECONFLICT, field ? field : "", -1,
                  "the input is %s now; the job was accepted for %s",
                  a ? tshape_str(a->ndim, a->shape, now, sizeof now) : "gone",
                  tshape_str(planned->ndim, planned->shape, was, sizeof was));
}
