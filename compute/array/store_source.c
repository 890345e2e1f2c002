/* compute/array/store_source.c — tenv callbacks backed by the store (see compute/array/store_source.h).
 *
 * array_meta reads the array's row (dtype name, shape as JSON text) and
 * parses it; array_load maps the row's .npy file read-only (no copy: pages
 * come in as the job reads them) and checks that the file still says what
 * the row says, so a replaced or truncated file is an I/O error, never
 * silently different data. The element cap (env->max_elems) is applied by
 * arrayval to the shape that array_meta reports. result_meta / result_load
 * do the same for a finished job's result (a chained input): the job must
 * have succeeded (T_ECONFLICT saying its status otherwise). A job's input
 * is its result's first part, or the part it names ({"result", "part"}: a
 * result of several arrays, compute/array/parts.h; parts 1.. are always files).
 * An int64 result is read as float64 (NumPy's promotion; arrays are never
 * integers inside a job): result_meta says float64, and result_load gives
 * the int64 array as stored, which arrayval_resolve converts by chunks on
 * the job's pool, stopping at its flag (a conversion of 10^8 indices is
 * as cancelable as any other build of an input).
 */
#include "compute/array/store_source.h"
#include "compute/array/region.h"
#include "compute/array/parts.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Parse the row's dtype and shape JSON ("[100,10000]"). 0 or T_EIO. */
static int env_parse_meta(const store_array *a, tdtype *dt, int *ndim,
                          int64_t *shape, terr *e) {
  int rc = T_OK;
  json_t *v = NULL;
  if (tdtype_parse(a->dtype ? a->dtype : "", dt) != 0) {
    rc = terr_set(e, T_EIO, "", -1, "array %s: stored dtype '%s' is unknown",
                  a->id, a->dtype ? a->dtype : "");
    goto done;
  }
  json_error_t jerr;
  v = json_loads(a->shape ? a->shape : "", 0, &jerr);
  if (!json_is_array(v) || json_array_size(v) > T_MAXDIM) {
    rc = terr_set(e, T_EIO, "", -1, "array %s: stored shape '%s' is not valid",
                  a->id, a->shape ? a->shape : "");
    goto done;
  }
  *ndim = (int)json_array_size(v);
  for (int i = 0; i < *ndim; i++) {
    json_t *d = json_array_get(v, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 0) {
      rc = terr_set(e, T_EIO, "", i,
                    "array %s: stored shape '%s' has a bad dimension %d",
                    a->id, a->shape, i);
      goto done;
    }
    shape[i] = (int64_t)json_integer_value(d);
  }
done:
  json_decref(v);
  return rc;
}

static int env_array_meta(void *ud, const char *owner, const char *id,
                          tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  store_array a;
  memset(&a, 0, sizeof a);
  int rc = store_array_get(ud, id, owner, &a, e);
  if (rc == T_OK) rc = env_parse_meta(&a, dt, ndim, shape, e);
  store_array_clear(&a);
  return rc;
}

static int env_array_load(void *ud, const char *owner, const char *id,
                          tarray **out, terr *e) {
  *out = NULL;
  store_array a;
  memset(&a, 0, sizeof a);
  tarray *arr = NULL;
  tdtype dt;
  int ndim = 0;
  int64_t shape[T_MAXDIM];
  int rc = store_array_get(ud, id, owner, &a, e);
  if (rc) goto fail;
  if ((rc = env_parse_meta(&a, &dt, &ndim, shape, e))) goto fail;
  if (!a.path) {
    rc = terr_set(e, T_EIO, "", -1, "array %s has no data file", id);
    goto fail;
  }
  if ((rc = tarray_map_npy(a.path, &arr, e))) goto fail;
  int same = arr->dtype == dt && arr->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = arr->shape[i] == shape[i];
  if (!same) {
    rc = terr_set(e, T_EIO, "", -1,
                  "array %s: data file does not match the stored %s %s", id,
                  a.dtype, a.shape);
    goto fail;
  }
  store_array_clear(&a);
  *out = arr;
  return T_OK;

fail:
  tarray_free(arr);
  store_array_clear(&a);
  return rc;
}

/* ---- a finished job's result (chained jobs) -------------------------------- */

/* The job, which must have succeeded: T_ENOTFOUND, T_ECONFLICT saying its
 * status, or 0 with *j filled (store_job_clear). A tile of a split job is
 * not a job of the API (its parent's result holds its rows; expiry and
 * delete go by the parent): T_ECONFLICT naming the parent, as a job that
 * cannot be taken yet. */
static int env_result_job(void *ud, const char *owner, const char *id,
                          store_job *j, terr *e) {
  memset(j, 0, sizeof *j);
  int rc = store_job_get(ud, id, owner, j, e);
  if (rc) return rc;
  if (j->parent) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s is a tile of split job %s, not a job of its own: "
                  "take {\"result\": \"%s\"}", id, j->parent, j->parent);
    store_job_clear(j);
    return rc;
  }
  char rid[REGION_ID_MAX];
  int64_t roff;
  if (j->status == JOB_SUCCEEDED &&
      region_out_parse(j->output_file, rid, &roff)) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s wrote its result into region %s at offset %lld "
                  "and the service keeps no copy: take it as {\"region\": "
                  "...}", id, rid, (long long)roff);
    store_job_clear(j);
    return rc;
  }
  if (j->status == JOB_SUCCEEDED && j->output_file) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s wrote its result to %.200s (output.file) and the "
                  "service keeps no copy: take it as {\"file\": ...}", id,
                  j->output_file);
    store_job_clear(j);
    return rc;
  }
  if (j->status == JOB_SUCCEEDED) return T_OK;
  rc = terr_set(e, T_ECONFLICT, "", -1,
                j->status == JOB_QUEUED || j->status == JOB_RUNNING
                    ? "job %s is %s: submit the job that takes its result "
                      "once it has succeeded"
                    : "job %s %s: it has no result to take",
                id, job_status_name(j->status));
  store_job_clear(j);
  return rc;
}

/* What the job's row says of its result (its first part). 0 or T_EIO.
 * An int64 result (a geodesic query's indices) is T_I64 here; what a job
 * reads of it is float64 (env_result_meta; arrayval_resolve converts what
 * env_result_load gives). */
static int result_shape(const store_job *j, tdtype *dt, int *ndim,
                        int64_t *shape, terr *e) {
  int i64 = strcmp(j->result.dtype, "int64") == 0;
  if (!j->result.dtype[0]) /* a succeeded job always has one */
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its stored result is not an array", j->id);
  if (i64) *dt = T_I64;
  if ((!i64 && tdtype_parse(j->result.dtype, dt) != 0) || j->result.ndim < 0 ||
      j->result.ndim > T_MAXDIM)
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its stored result is not an array", j->id);
  *ndim = j->result.ndim;
  for (int i = 0; i < *ndim; i++) shape[i] = j->result.shape[i];
  return T_OK;
}

/* Which part of j's result `part` names (NULL: the first): 0, or > 0
 * with *path its file (new heap string) and dt/ndim/shape its record.
 * T_EINVAL (message only) when the result has no such part. */
static int result_part(const store_job *j, const char *part, int *index,
                       char **path, tdtype *dt, int *ndim, int64_t *shape,
                       terr *e) {
  *index = 0;
  *path = NULL;
  if (!part) return T_OK;
  tparts p;
  int rc = tparts_parse(j->result_parts, &p, e);
  if (rc) return rc;
  int i = tparts_find(&p, part);
  if (i < 0) {
    rc = terr_set(e, T_EINVAL, "", -1, "job %s's result has no part '%s'%s",
                  j->id, part, p.n ? "" : " (it is one array)");
  } else if (i > 0) {
    *index = i;
    *path = p.p[i].path;
    p.p[i].path = NULL;
    *dt = p.p[i].dtype;
    *ndim = p.p[i].ndim;
    memcpy(shape, p.p[i].shape, sizeof p.p[i].shape);
  }
  tparts_clear(&p);
  return rc;
}

static int env_result_meta(void *ud, const char *owner, const char *id,
                           const char *part, tdtype *dt, int *ndim,
                           int64_t *shape, terr *e) {
  store_job j;
  int rc = env_result_job(ud, owner, id, &j, e);
  if (rc) return rc;
  int index;
  char *path = NULL;
  rc = result_part(&j, part, &index, &path, dt, ndim, shape, e);
  free(path);
  if (rc == T_OK && index == 0) rc = result_shape(&j, dt, ndim, shape, e);
  if (rc == T_OK && *dt == T_I64) *dt = T_F64; /* read as float64 */
  store_job_clear(&j);
  return rc;
}

/* The result from its file (mapped, no copy) or, for a small one kept in
 * the job's row, parsed from the row's .npy bytes; either way checked
 * against what the row says, and given as stored: an int64 result stays
 * T_I64 here (arrayval_resolve converts it by chunks, stoppable). */
static int env_result_load(void *ud, const char *owner, const char *id,
                           const char *part, tarray **out, terr *e) {
  *out = NULL;
  tdtype dt;
  int ndim = 0, index = 0;
  int64_t shape[T_MAXDIM];
  store_job j;
  int rc = env_result_job(ud, owner, id, &j, e);
  if (rc) return rc;
  tarray *a = NULL;
  char *path = NULL;
  if ((rc = result_part(&j, part, &index, &path, &dt, &ndim, shape, e))) {
  } else if (index > 0) { /* a later part: always its own file */
    rc = tarray_map_npy(path, &a, e);
  } else if ((rc = result_shape(&j, &dt, &ndim, shape, e))) {
  } else if (j.result_path) {
    rc = tarray_map_npy(j.result_path, &a, e);
  } else {
    void *npy = NULL;
    size_t len = 0;
    rc = store_job_result_npy(ud, id, owner, &npy, &len, e);
    if (rc == T_OK) rc = npy_parse_result(npy, len, INT64_MAX, &a, e);
    free(npy);
  }
  store_job_clear(&j);
  free(path);
  if (rc) return rc;
  int same = a->dtype == dt && a->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = a->shape[i] == shape[i];
  if (!same) {
    tarray_free(a);
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its result file does not match its record", id);
  }
  *out = a;
  return T_OK;
}

void tenv_from_store(tenv *env, store *st, const char *owner,
                     int64_t max_elems) {
  memset(env, 0, sizeof *env);
  env->ud = st;
  env->owner = owner ? owner : "";
  env->array_meta = env_array_meta;
  env->array_load = env_array_load;
  env->result_meta = env_result_meta;
  env->result_load = env_result_load;
  env->max_elems = max_elems > 0 ? max_elems : INT64_MAX;
}
