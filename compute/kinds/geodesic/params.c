/* compute/kinds/geodesic/params.c — the params of a geodesic job (API.md), checked at
 * submit and turned into a geod_plan at run time.
 *
 *   {"points": n x 2 [lat, lon] degrees (any array value form),
 *    "targets": m x 2 (optional), "method": "karney" | "vincenty" |
 *    "haversine", "ellipsoid": "WGS84" | "GRS80" | {"a": m, "f": f},
 *    "radius_m": 6371008.8 (haversine), "units": "m" | "km",
 *    "layout": "square" | "condensed", "dtype": "float64" | "float32",
 *    "query": {"knn": {"k": int}} | {"radius": {"r": number, "max_pairs":
 *             int}} | {"rowwise": {"op": "min" | ..., "within": number}}}
 *
 * A query (compute/kinds/geodesic/query/query.h) replaces the matrix by its parts: it
 * takes no layout, k in [1, GEOQ_MAX_K], r and within finite and >= 0,
 * max_pairs >= 1 (default: GEOQ_DEFAULT_MAX_PAIRS or --max-result / 24, 24 the bytes of one pair in
 * the parts i, j, distance, so that the default cap always passes the
 * result limit). Its estimate: the first part's shape and dtype, every
 * part's bytes (radius: max_pairs pairs, the worst case), and as work the
 * pairs the pruned search evaluates (GEOQ_KNN_VISITS per neighbour; n m
 * for the rowwise ops that visit every pair).
 *
 * Errors are T_EINVAL naming the field and, for array contents, the row:
 * "params.points: latitude 91 out of [-90, 90] at row 3" (position 3).
 * Unknown keys are refused, so a misspelt option never silently falls back
 * to a default.
 *
 * geod_params_check (submit, HTTP thread) checks the options and the
 * shapes, fills the estimate (result size for the 413 limit, pairs as the
 * work), and checks the values of inputs small enough to build cheaply
 * (GEOD_CHECK_VALUES_MAX elements); geod_params_prepare (scheduler worker)
 * resolves the arrays, checks every value (again: params may come back
 * from the store after a restart), checks the result limits (--max-elements,
 * --max-result) again against the points it read, and builds the plan
 * (compute/kinds/geodesic/plan.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compute/kinds/geodesic/kind.h"
#include "util/util.h"

#define GEOD_CHECK_VALUES_MAX ((int64_t)1 << 21)
#define GEOD_DEFAULT_RADIUS 6371008.8 /* mean Earth radius (IUGG) */
/* --max-result's default (app/main.c), when the env does not say. */
#define GEOD_DEFAULT_MAX_RESULT ((int64_t)20 << 30)
/* Bytes of one radius pair: i, j (int64) and a float64 distance. */
#define GEOQ_PAIR_BYTES 24
/* Pairs a knn search evaluates per neighbour asked, about (the estimate's
 * work only): 1.9 measured at k = 10 on 10^5 uniform points
 * (tests/bench/bench_geoq_cpu.c), more for small k. */
#define GEOQ_KNN_VISITS 3
/* Pairs a range search evaluates per point: the pairs it finds and a few
 * more (1.0002 per pair found, r = 1 km on clustered points), which
 * depends on r and the data: a neighbourhood's worth, a guess (the
 * estimate's work only). */
#define GEOQ_RANGE_VISITS 64

/* The options, parsed; the array values are borrowed from params. */
typedef struct geod_spec {
  geod_method method;
  double a, f, radius_m, unit;
  int condensed;
  tdtype dtype;
  const json_t *points, *targets;
  geoq q; /* type GEOQ_NONE: the matrix */
} geod_spec;

static const char *const known_keys[] = {
    "points", "targets", "method", "ellipsoid", "radius_m",
    "units",  "layout",  "dtype",  "query",  NULL};

static int get_string(const json_t *params, const char *key, const char *field,
                      const char **out, terr *e) {
  const json_t *v = json_object_get(params, key);
  if (!v) return 0; /* keep the default */
  if (!json_is_string(v))
    return terr_set(e, T_EINVAL, field, -1, "must be a string");
  *out = json_string_value(v);
  return 0;
}

static int get_number(const json_t *v, const char *field, double *out,
                      terr *e) {
  if (!json_is_number(v))
    return terr_set(e, T_EINVAL, field, -1, "must be a number");
  *out = json_number_value(v);
  if (!isfinite(*out)) return terr_set(e, T_EINVAL, field, -1, "must be finite");
  return 0;
}

static int parse_ellipsoid(const json_t *v, geod_spec *s, terr *e) {
  const char *field = "params.ellipsoid";
  if (!v) {
    s->a = GEOD_WGS84_A;
    s->f = GEOD_WGS84_F;
    return 0;
  }
  if (json_is_string(v)) {
    const char *name = json_string_value(v);
    if (strcasecmp(name, "WGS84") == 0 || strcasecmp(name, "WGS-84") == 0) {
      s->a = GEOD_WGS84_A;
      s->f = GEOD_WGS84_F;
    } else if (strcasecmp(name, "GRS80") == 0) {
      s->a = GEOD_GRS80_A;
      s->f = GEOD_GRS80_F;
    } else {
      return terr_set(e, T_EINVAL, field, -1,
                      "unknown ellipsoid '%.40s' (WGS84, GRS80 or "
                      "{\"a\": metres, \"f\": flattening})",
                      name);
    }
    return 0;
  }
  if (!json_is_object(v))
    return terr_set(e, T_EINVAL, field, -1,
                    "must be \"WGS84\", \"GRS80\" or {\"a\": ..., \"f\": ...}");
  const char *key;
  json_t *x;
  json_object_foreach((json_t *)v, key, x) {
    if (strcmp(key, "a") != 0 && strcmp(key, "f") != 0)
      return terr_set(e, T_EINVAL, field, -1,
                      "unknown key '%.40s' (expected a, f)", key);
  }
  const json_t *ja = json_object_get(v, "a"), *jf = json_object_get(v, "f");
  if (!ja) return terr_set(e, T_EINVAL, "params.ellipsoid.a", -1, "is required");
  if (!jf) return terr_set(e, T_EINVAL, "params.ellipsoid.f", -1, "is required");
  int rc = get_number(ja, "params.ellipsoid.a", &s->a, e);
  if (!rc) rc = get_number(jf, "params.ellipsoid.f", &s->f, e);
  if (rc) return rc;
  if (!(s->a > 0))
    return terr_set(e, T_EINVAL, "params.ellipsoid.a", -1,
                    "equatorial radius %s must be positive", t_num(s->a).s);
  if (!(fabs(s->f) <= GEOD_MAX_ABS_F))
    return terr_set(e, T_EINVAL, "params.ellipsoid.f", -1,
                    "flattening %s out of [-1/50, 1/50] (the sixth-order "
                    "series lose accuracy beyond)",
                    t_num(s->f).s);
  return 0;
}

/* An integer member `key` of query object o: 0 when absent (*out kept). */
static int get_int(const json_t *o, const char *key, const char *field,
                   int64_t *out, terr *e) {
  const json_t *v = json_object_get(o, key);
  if (!v) return 0;
  if (!json_is_integer(v))
    return terr_set(e, T_EINVAL, field, -1, "must be an integer");
  *out = (int64_t)json_integer_value(v);
  return 0;
}

/* The keys of query object o (field names it): all in keys. */
static int query_keys(const json_t *o, const char *field,
                      const char *const *keys, const char *expected, terr *e) {
  if (!json_is_object(o))
    return terr_set(e, T_EINVAL, field, -1, "must be an object {%s}",
                    expected);
  const char *key = kind_params_unknown_key(o, keys);
  if (key)
    return terr_set(e, T_EINVAL, field, -1, "unknown key '%.40s' (%s)", key,
                    expected);
  return 0;
}

static const char *const knn_keys[] = {"k", NULL};
static const char *const radius_keys[] = {"r", "max_pairs", NULL};
static const char *const rowwise_keys[] = {"op", "within", NULL};
static const char *const rowwise_ops[] = {"min",  "argmin", "max",   "argmax",
                                          "mean", "sum",    "count", NULL};
static const geoq_op rowwise_op_of[] = {GEOQ_MIN,  GEOQ_ARGMIN, GEOQ_MAX,
                                        GEOQ_ARGMAX, GEOQ_MEAN, GEOQ_SUM,
                                        GEOQ_COUNT};

/* params.query -> s->q (compute/kinds/geodesic/query/query.h). */
static int parse_query(const json_t *params, const tenv *env, geod_spec *s,
                       terr *e) {
  const json_t *v = json_object_get(params, "query");
  geoq *q = &s->q;
  memset(q, 0, sizeof *q);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v) || json_object_size(v) != 1)
    return terr_set(e, T_EINVAL, "params.query", -1,
                    "must be exactly one of {\"knn\": {...}}, "
                    "{\"radius\": {...}}, {\"rowwise\": {...}}");
  const json_t *o;
  int rc;
  if ((o = json_object_get(v, "knn"))) {
    q->type = GEOQ_KNN;
    if ((rc = query_keys(o, "params.query.knn", knn_keys, "k", e))) return rc;
    if (!json_object_get(o, "k"))
      return terr_set(e, T_EINVAL, "params.query.knn.k", -1, "is required");
    if ((rc = get_int(o, "k", "params.query.knn.k", &q->k, e))) return rc;
    if (q->k < 1 || q->k > GEOQ_MAX_K)
      return terr_set(e, T_EINVAL, "params.query.knn.k", -1,
                      "k = %lld out of [1, %d]", (long long)q->k, GEOQ_MAX_K);
  } else if ((o = json_object_get(v, "radius"))) {
    q->type = GEOQ_RADIUS;
    if ((rc = query_keys(o, "params.query.radius", radius_keys,
                         "r, max_pairs", e)))
      return rc;
    const json_t *r = json_object_get(o, "r");
    if (!r)
      return terr_set(e, T_EINVAL, "params.query.radius.r", -1, "is required");
    if ((rc = get_number(r, "params.query.radius.r", &q->r, e))) return rc;
    if (!(q->r >= 0))
      return terr_set(e, T_EINVAL, "params.query.radius.r", -1,
                      "radius %s must be >= 0", t_num(q->r).s);
    int64_t cap = env && env->max_result_bytes > 0 ? env->max_result_bytes
                                                   : GEOD_DEFAULT_MAX_RESULT;
    /* The default: what the result limit allows, at most
     * GEOQ_DEFAULT_MAX_PAIRS (the estimate reserves the worst case in the
     * memory budget: --max-result / 24 pairs, 20 GiB by default, would be
     * refused 413 on most machines before anything ran). */
    q->max_pairs = cap / GEOQ_PAIR_BYTES > 0 ? cap / GEOQ_PAIR_BYTES : 1;
    if (q->max_pairs > GEOQ_DEFAULT_MAX_PAIRS) q->max_pairs = GEOQ_DEFAULT_MAX_PAIRS;
    if ((rc = get_int(o, "max_pairs", "params.query.radius.max_pairs",
                      &q->max_pairs, e)))
      return rc;
    if (q->max_pairs < 1)
      return terr_set(e, T_EINVAL, "params.query.radius.max_pairs", -1,
                      "max_pairs = %lld must be >= 1",
                      (long long)q->max_pairs);
  } else if ((o = json_object_get(v, "rowwise"))) {
    q->type = GEOQ_ROWWISE;
    if ((rc = query_keys(o, "params.query.rowwise", rowwise_keys,
                         "op, within", e)))
      return rc;
    const json_t *op = json_object_get(o, "op");
    if (!op)
      return terr_set(e, T_EINVAL, "params.query.rowwise.op", -1,
                      "is required");
    const char *name = json_string_value(op);
    int k = 0;
    while (name && rowwise_ops[k] && strcmp(name, rowwise_ops[k]) != 0) k++;
    if (!name || !rowwise_ops[k])
      return terr_set(e, T_EINVAL, "params.query.rowwise.op", -1,
                      "must be one of min, argmin, max, argmax, mean, sum, "
                      "count");
    q->op = rowwise_op_of[k];
    const json_t *w = json_object_get(o, "within");
    if (w) {
      q->has_within = 1;
      if ((rc = get_number(w, "params.query.rowwise.within", &q->within, e)))
        return rc;
      if (!(q->within >= 0))
        return terr_set(e, T_EINVAL, "params.query.rowwise.within", -1,
                        "within %s must be >= 0", t_num(q->within).s);
    }
  } else {
    const char *key = kind_params_unknown_key(v, (const char *const[]){NULL});
    return terr_set(e, T_EINVAL, "params.query", -1,
                    "unknown query '%.40s' (knn, radius, rowwise)", key);
  }
  if (json_object_get(params, "layout"))
    return terr_set(e, T_EINVAL, "params.layout", -1,
                    "a query has no matrix layout (its results are its "
                    "parts)");
  return 0;
}

static int spec_parse(const json_t *params, const tenv *env, geod_spec *s,
                      terr *e) {
  memset(s, 0, sizeof *s);
  if (!json_is_object(params))
    return terr_set(e, T_EINVAL, "params", -1, "must be an object");
  const char *key = kind_params_unknown_key(params, known_keys);
  if (key)
    return terr_set(e, T_EINVAL, "params", -1,
                    "unknown parameter '%.40s' for kind geodesic", key);
  const char *method = "karney", *units = "m", *layout = "square",
             *dtype = "float64";
  int rc = get_string(params, "method", "params.method", &method, e);
  if (!rc) rc = get_string(params, "units", "params.units", &units, e);
  if (!rc) rc = get_string(params, "layout", "params.layout", &layout, e);
  if (!rc) rc = get_string(params, "dtype", "params.dtype", &dtype, e);
  if (rc) return rc;
  if (strcmp(method, "karney") == 0) s->method = GEOD_KARNEY;
  else if (strcmp(method, "vincenty") == 0) s->method = GEOD_VINCENTY;
  else if (strcmp(method, "haversine") == 0) s->method = GEOD_HAVERSINE;
  else
    return terr_set(e, T_EINVAL, "params.method", -1,
                    "unknown method '%.40s' (karney, vincenty, haversine)",
                    method);
  if (strcmp(units, "m") == 0) s->unit = 1;
  else if (strcmp(units, "km") == 0) s->unit = 1000;
  else
    return terr_set(e, T_EINVAL, "params.units", -1,
                    "unknown unit '%.40s' (m, km)", units);
  if (strcmp(layout, "square") == 0) s->condensed = 0;
  else if (strcmp(layout, "condensed") == 0) s->condensed = 1;
  else
    return terr_set(e, T_EINVAL, "params.layout", -1,
                    "unknown layout '%.40s' (square, condensed)", layout);
  if (tdtype_parse(dtype, &s->dtype) != 0)
    return terr_set(e, T_EINVAL, "params.dtype", -1,
                    "unknown dtype '%.40s' (float64, float32)", dtype);
  rc = parse_ellipsoid(json_object_get(params, "ellipsoid"), s, e);
  if (rc) return rc;
  s->radius_m = GEOD_DEFAULT_RADIUS;
  const json_t *r = json_object_get(params, "radius_m");
  if (r) {
    rc = get_number(r, "params.radius_m", &s->radius_m, e);
    if (rc) return rc;
    if (!(s->radius_m > 0))
      return terr_set(e, T_EINVAL, "params.radius_m", -1,
                      "radius %s must be positive", t_num(s->radius_m).s);
  }
  s->points = json_object_get(params, "points");
  if (!s->points)
    return terr_set(e, T_EINVAL, "params.points", -1, "is required");
  s->targets = json_object_get(params, "targets");
  if (s->targets && json_is_null(s->targets)) s->targets = NULL;
  if (s->targets && s->condensed)
    return terr_set(e, T_EINVAL, "params.layout", -1,
                    "\"condensed\" is for points alone (no targets)");
  return parse_query(params, env, s, e);
}

/* An n x 2 shape with n >= 1. */
static int shape_check(int ndim, const int64_t *shape, const char *field,
                       terr *e) {
  char buf[64];
  if (ndim != 2)
    return terr_set(e, T_EINVAL, field, -1,
                    "expected an n x 2 array of [lat, lon] rows, got shape %s",
                    tshape_str(ndim, shape, buf, sizeof buf));
  if (shape[1] != 2)
    return terr_set(e, T_EINVAL, field, 1,
                    "expected 2 columns [lat, lon], got shape %s",
                    tshape_str(ndim, shape, buf, sizeof buf));
  if (shape[0] < 1)
    return terr_set(e, T_EINVAL, field, 0, "needs at least one point");
  return 0;
}

int geod_points_validate(const tarray *a, const char *field, const tenv *env,
                         terr *e) {
  int rc = shape_check(a->ndim, a->shape, field, e);
  if (rc) return rc;
  for (int64_t r = 0; r < a->shape[0]; r++) {
    int st; /* a stop between chunks (the whole check of 10^9 points: ~3 s) */
    if ((r & (TENV_CHUNK - 1)) == 0 && (st = tenv_stopped(env)))
      return tenv_stop_error(st, field, e);
    double lat = tarray_get(a, 2 * r), lon = tarray_get(a, 2 * r + 1);
    if (!isfinite(lat))
      return terr_set(e, T_EINVAL, field, r,
                      "latitude is not finite (%g) at row %lld", lat,
                      (long long)r);
    if (!isfinite(lon))
      return terr_set(e, T_EINVAL, field, r,
                      "longitude is not finite (%g) at row %lld", lon,
                      (long long)r);
    if (lat < -90 || lat > 90)
      return terr_set(e, T_EINVAL, field, r,
                      "latitude %s out of [-90, 90] at row %lld", t_num(lat).s,
                      (long long)r);
  }
  return 0;
}

/* Result shape and size of the spec for n points and m targets (m = n
 * when none). T_ETOOLARGE when the element count overflows. */
static int out_shape(const geod_spec *s, int64_t n, int64_t m, int *ndim,
                     int64_t *shape, int64_t *elems, terr *e) {
  if (s->condensed) {
    *ndim = 1;
    if (n > 1 && (n - 1) > INT64_MAX / 8 / n) /* bytes must fit too */
      return terr_set(e, T_ETOOLARGE, "params.points", -1,
                      "%lld points: the result is too large", (long long)n);
    shape[0] = n * (n - 1) / 2;
    *elems = shape[0];
  } else {
    *ndim = 2;
    shape[0] = n;
    shape[1] = m;
    if (m > 0 && n > INT64_MAX / 8 / m)
      return terr_set(e, T_ETOOLARGE, "params.points", -1,
                      "%lld x %lld: the result is too large", (long long)n,
                      (long long)m);
    *elems = n * m;
  }
  return 0;
}

/* The estimate of a query (the file's opening says what it counts): n
 * points, m candidates' source (targets, or n). */
static int query_estimate(const geod_spec *s, const tenv *env, int64_t n,
                          int64_t m, job_estimate *est, terr *e) {
  const geoq *q = &s->q;
  int64_t cand = s->targets ? m : (n > 1 ? n - 1 : 0);
  int rc;
  est->out_ndim = 1;
  est->out_shape[0] = n;
  switch (q->type) {
    case GEOQ_KNN: {
      int64_t k = q->k < cand ? q->k : cand;
      est->out_dtype = s->dtype;
      est->out_ndim = 2;
      est->out_shape[1] = k;
      if ((rc = kind_result_check(env, est, e))) return rc;
      est->out_bytes += n * k * 8; /* index, int64 */
      est->work = (double)n * (double)(k > 0 ? k : 1) * GEOQ_KNN_VISITS;
      break;
    }
    case GEOQ_RADIUS:
      est->out_dtype = T_I64; /* i, then j and distance */
      est->out_shape[0] = q->max_pairs;
      if ((rc = kind_result_check(env, est, e))) return rc;
      est->out_bytes = q->max_pairs > INT64_MAX / GEOQ_PAIR_BYTES
                           ? INT64_MAX
                           : q->max_pairs * GEOQ_PAIR_BYTES;
      est->work = (double)n * GEOQ_RANGE_VISITS;
      break;
    default: {
      int arg = q->op == GEOQ_ARGMIN || q->op == GEOQ_ARGMAX ||
                q->op == GEOQ_COUNT;
      est->out_dtype = arg ? T_I64 : s->dtype;
      if ((rc = kind_result_check(env, est, e))) return rc;
      if (q->op == GEOQ_MIN || q->op == GEOQ_ARGMIN)
        est->work = (double)n * GEOQ_KNN_VISITS;
      else if (q->has_within)
        est->work = (double)n * GEOQ_RANGE_VISITS;
      else
        est->work = (double)n * (double)cand;
      break;
    }
  }
  return 0;
}

/* The estimate of a job of spec s over n points and m candidates (targets,
 * or n): the result checked against --max-elements (kind_result_check). */
static int geod_estimate(const geod_spec *s, const tenv *env, int64_t n,
                         int64_t m, job_estimate *est, terr *e) {
  int rc;
  int64_t npts = n + (s->targets ? m : 0);
  memset(est, 0, sizeof *est);
  if (s->q.type != GEOQ_NONE) {
    if ((rc = query_estimate(s, env, n, m, est, e))) return rc;
    /* the index: one 32-byte item per candidate and its boxes */
    est->mem_bytes = est->out_bytes + npts * (int64_t)(16 + sizeof(geod_point)) +
                     m * 96;
  } else {
    int ndim = 0;
    int64_t shape[2] = {0, 0}, elems = 0;
    rc = out_shape(s, n, m, &ndim, shape, &elems, e);
    if (rc) return rc;
    est->out_dtype = s->dtype;
    est->out_ndim = ndim;
    est->out_shape[0] = shape[0];
    est->out_shape[1] = ndim > 1 ? shape[1] : 0;
    if ((rc = kind_result_check(env, est, e))) return rc;
    est->mem_bytes = est->out_bytes + npts * (int64_t)(16 + sizeof(geod_point));
    est->work =
        s->targets ? (double)n * (double)m : (double)n * (double)(n - 1) / 2;
  }
  est->in_bytes = npts * (int64_t)sizeof(geod_point);
  est->ops_per_elem = geod_method_cost_ns(s->method);
  est->size = n;
  return 0;
}

int geod_params_check(const json_t *params, const tenv *env,
                      job_estimate *est, terr *e) {
  geod_spec s;
  arrayval_info pi, ti;
  tarray *a = NULL;
  int rc = spec_parse(params, env, &s, e);
  if (rc) return rc;
  rc = arrayval_check(env, s.points, "params.points", &pi, e);
  if (!rc) rc = shape_check(pi.ndim, pi.shape, "params.points", e);
  if (rc) return rc;
  int64_t n = pi.shape[0], m = n;
  if (s.targets) {
    rc = arrayval_check(env, s.targets, "params.targets", &ti, e);
    if (!rc) rc = shape_check(ti.ndim, ti.shape, "params.targets", e);
    if (rc) return rc;
    m = ti.shape[0];
  }
  if ((rc = geod_estimate(&s, env, n, m, est, e))) return rc;
  /* Values: checked now when cheap, always again at prepare. */
  if ((n + (s.targets ? m : 0)) * 2 <= GEOD_CHECK_VALUES_MAX) {
    rc = arrayval_resolve(env, s.points, "params.points", T_F64, &a, e);
    if (!rc) rc = geod_points_validate(a, "params.points", env, e);
    tarray_free(a);
    a = NULL;
    if (!rc && s.targets) {
      rc = arrayval_resolve(env, s.targets, "params.targets", T_F64, &a, e);
      if (!rc) rc = geod_points_validate(a, "params.targets", env, e);
      tarray_free(a);
    }
  }
  return rc;
}

double geod_method_cost_ns(geod_method m) {
  switch (m) {
    case GEOD_VINCENTY: return GEOD_COST_VINCENTY_NS;
    case GEOD_HAVERSINE: return GEOD_COST_HAVERSINE_NS;
    default: return GEOD_COST_KARNEY_NS;
  }
}

int geod_params_prepare(const json_t *params, const tenv *env,
                        geod_plan **out, geoq *q, terr *e) {
  geod_spec s;
  tarray *pa = NULL, *ta = NULL;
  geod_plan *pl = NULL;
  *out = NULL;
  memset(q, 0, sizeof *q);
  int rc = spec_parse(params, env, &s, e);
  if (rc) goto fail;
  rc = arrayval_resolve(env, s.points, "params.points", T_F64, &pa, e);
  if (!rc) rc = geod_points_validate(pa, "params.points", env, e);
  if (rc) goto fail;
  if (s.targets) {
    rc = arrayval_resolve(env, s.targets, "params.targets", T_F64, &ta, e);
    if (!rc) rc = geod_points_validate(ta, "params.targets", env, e);
    if (rc) goto fail;
  }
  /* The limits against the points read, not those accepted (a {"file"}
   * changed since fails on its pin first: compute/array/localfile.h). */
  job_estimate est;
  rc = geod_estimate(&s, env, pa->shape[0], ta ? ta->shape[0] : pa->shape[0],
                     &est, e);
  if (!rc && env && env->max_result_bytes > 0 &&
      est.out_bytes > env->max_result_bytes)
    rc = terr_set(e, T_ETOOLARGE, "params", -1,
                  "the result would take %lld bytes; the limit is %lld",
                  (long long)est.out_bytes, (long long)env->max_result_bytes);
  if (!rc)
    rc = geod_plan_build_on(s.method, s.a, s.f, s.radius_m, s.unit,
                            s.condensed, s.dtype, pa->data, pa->shape[0],
                            ta ? ta->data : NULL, ta ? ta->shape[0] : 0,
                            env ? env->pool : NULL, env ? env->width : 1,
                            env ? env->stop : NULL, &pl, e);
  if (rc) goto fail;
  *out = pl;
  *q = s.q;
  pl = NULL;
fail:
  geod_plan_free(pl);
  tarray_free(pa);
  tarray_free(ta);
  return rc;
}

