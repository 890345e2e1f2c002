/* kinds/geodesic/params.c — the params of a geodesic job (API.md), checked at
 * submit and turned into a geod_plan at run time.
 *
 *   {"points": n x 2 [lat, lon] degrees (any array value form),
 *    "targets": m x 2 (optional), "method": "karney" | "vincenty" |
 *    "haversine", "ellipsoid": "WGS84" | "GRS80" | {"a": m, "f": f},
 *    "radius_m": 6371008.8 (haversine), "units": "m" | "km",
 *    "layout": "square" | "condensed", "dtype": "float64" | "float32"}
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
 * from the store after a restart) and builds the plan (kinds/geodesic/plan.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kinds/geodesic/kind.h"

#define GEOD_CHECK_VALUES_MAX ((int64_t)1 << 21)
#define GEOD_DEFAULT_RADIUS 6371008.8 /* mean Earth radius (IUGG) */

/* The options, parsed; the array values are borrowed from params. */
typedef struct geod_spec {
  geod_method method;
  double a, f, radius_m, unit;
  int condensed;
  tdtype dtype;
  const json_t *points, *targets;
} geod_spec;

static const char *const known_keys[] = {
    "points", "targets", "method", "ellipsoid", "radius_m",
    "units",  "layout",  "dtype",  NULL};

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
                    "equatorial radius %g must be positive", s->a);
  if (!(fabs(s->f) <= GEOD_MAX_ABS_F))
    return terr_set(e, T_EINVAL, "params.ellipsoid.f", -1,
                    "flattening %g out of [-1/50, 1/50] (the sixth-order "
                    "series lose accuracy beyond)",
                    s->f);
  return 0;
}

static int spec_parse(const json_t *params, geod_spec *s, terr *e) {
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
                      "radius %g must be positive", s->radius_m);
  }
  s->points = json_object_get(params, "points");
  if (!s->points)
    return terr_set(e, T_EINVAL, "params.points", -1, "is required");
  s->targets = json_object_get(params, "targets");
  if (s->targets && json_is_null(s->targets)) s->targets = NULL;
  if (s->targets && s->condensed)
    return terr_set(e, T_EINVAL, "params.layout", -1,
                    "\"condensed\" is for points alone (no targets)");
  return 0;
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

int geod_points_validate(const tarray *a, const char *field, terr *e) {
  int rc = shape_check(a->ndim, a->shape, field, e);
  if (rc) return rc;
  for (int64_t r = 0; r < a->shape[0]; r++) {
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
                      "latitude %.17g out of [-90, 90] at row %lld", lat,
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

int geod_params_check(const json_t *params, const tenv *env,
                      job_estimate *est, terr *e) {
  geod_spec s;
  arrayval_info pi, ti;
  tarray *a = NULL;
  int rc = spec_parse(params, &s, e);
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
  int ndim = 0;
  int64_t shape[2] = {0, 0}, elems = 0;
  rc = out_shape(&s, n, m, &ndim, shape, &elems, e);
  if (rc) return rc;
  int64_t npts = n + (s.targets ? m : 0);
  memset(est, 0, sizeof *est);
  est->out_dtype = s.dtype;
  est->out_ndim = ndim;
  est->out_shape[0] = shape[0];
  est->out_shape[1] = ndim > 1 ? shape[1] : 0;
  if ((rc = kind_result_check(env, est, e))) return rc;
  est->in_bytes = npts * (int64_t)sizeof(geod_point);
  est->mem_bytes = est->out_bytes + npts * (int64_t)(16 + sizeof(geod_point));
  est->work = s.targets ? (double)n * (double)m : (double)n * (double)(n - 1) / 2;
  est->ops_per_elem = geod_method_cost_ns(s.method);
  est->size = n;
  /* Values: checked now when cheap, always again at prepare. */
  if (npts * 2 <= GEOD_CHECK_VALUES_MAX) {
    rc = arrayval_resolve(env, s.points, "params.points", T_F64, &a, e);
    if (!rc) rc = geod_points_validate(a, "params.points", e);
    tarray_free(a);
    a = NULL;
    if (!rc && s.targets) {
      rc = arrayval_resolve(env, s.targets, "params.targets", T_F64, &a, e);
      if (!rc) rc = geod_points_validate(a, "params.targets", e);
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
                        geod_plan **out, terr *e) {
  geod_spec s;
  tarray *pa = NULL, *ta = NULL;
  geod_plan *pl = NULL;
  *out = NULL;
  int rc = spec_parse(params, &s, e);
  if (rc) goto fail;
  rc = arrayval_resolve(env, s.points, "params.points", T_F64, &pa, e);
  if (!rc) rc = geod_points_validate(pa, "params.points", e);
  if (rc) goto fail;
  if (s.targets) {
    rc = arrayval_resolve(env, s.targets, "params.targets", T_F64, &ta, e);
    if (!rc) rc = geod_points_validate(ta, "params.targets", e);
    if (rc) goto fail;
  }
  int ndim = 0;
  int64_t shape[2] = {0, 0}, elems = 0;
  rc = out_shape(&s, pa->shape[0], ta ? ta->shape[0] : pa->shape[0], &ndim,
                 shape, &elems, e);
  if (!rc)
    rc = geod_plan_build(s.method, s.a, s.f, s.radius_m, s.unit, s.condensed,
                         s.dtype, pa->data, pa->shape[0],
                         ta ? ta->data : NULL, ta ? ta->shape[0] : 0, &pl, e);
  if (rc) goto fail;
  *out = pl;
  pl = NULL;
fail:
  geod_plan_free(pl);
  tarray_free(pa);
  tarray_free(ta);
  return rc;
}

