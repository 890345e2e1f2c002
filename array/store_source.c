/* array/store_source.c — tenv callbacks backed by the store (see array/store_source.h).
 *
 * array_meta reads the array's row (dtype name, shape as JSON text) and
 * parses it; array_load maps the row's .npy file read-only (no copy: pages
 * come in as the job reads them) and checks that the file still says what
 * the row says, so a replaced or truncated file is an I/O error, never
 * silently different data. The element cap (env->max_elems) is applied by
 * arrayval to the shape that array_meta reports.
 */
#include "array/store_source.h"

#include <jansson.h>
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

void tenv_from_store(tenv *env, store *st, const char *owner,
                     int64_t max_elems) {
  memset(env, 0, sizeof *env);
  env->ud = st;
  env->owner = owner ? owner : "";
  env->array_meta = env_array_meta;
  env->array_load = env_array_load;
  env->max_elems = max_elems > 0 ? max_elems : INT64_MAX;
}
