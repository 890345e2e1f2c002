/* compute/kinds/exprkind.c — the params shared by the map and reduce kinds: "expr",
 * "inputs" and "dtype" (see compute/kinds/exprkind.h for the rules and their errors).
 *
 * Also the pieces of check/release the two kinds share: the input side of
 * the estimate (kexpr_estimate) and freeing a plan's inputs (kexpr_release).
 *
 * Runs on an HTTP thread (check, estimate) and on a scheduler worker
 * (resolve, release); keeps no state of its own.
 */
#include "compute/kinds/exprkind.h"

#include <stdlib.h>
#include <string.h>

#include "compute/gpu/gpu.h"
#include "util/util.h"

static int key_allowed(const char *key, const char *const *extra) {
  if (!strcmp(key, "expr") || !strcmp(key, "inputs") || !strcmp(key, "dtype"))
    return 1;
  for (int i = 0; extra && extra[i]; i++)
    if (!strcmp(key, extra[i])) return 1;
  return 0;
}

static void input_field(char *buf, size_t len, const char *name) {
  static const char pre[] = "params.inputs.";
  if (len < sizeof pre) {
    if (len) buf[0] = 0;
    return;
  }
  memcpy(buf, pre, sizeof pre - 1);
  t_scopy(buf + sizeof pre - 1, len - (sizeof pre - 1), name);
}

int kexpr_check(const json_t *params, const tenv *env,
                const char *const *extra, int default_single, kexpr *k,
                terr *e) {
  memset(k, 0, sizeof *k);
  int rc;
  char field[TERR_FIELD_MAX];
  if (!json_is_object(params))
    return terr_set(e, T_EINVAL, "params", -1, "must be an object");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)params, key, v) {
    if (!key_allowed(key, extra)) {
      snprintf(field, sizeof field, "params.%s", key);
      return terr_set(e, T_EINVAL, field, -1, "unknown field");
    }
  }
  /* dtype: given, or NumPy's promotion of the inputs (kexpr_infer_dtype) */
  k->dt = T_F64;
  json_t *jd = json_object_get(params, "dtype");
  if (jd && json_is_null(jd)) jd = NULL;
  if (jd &&
      (!json_is_string(jd) || tdtype_parse(json_string_value(jd), &k->dt)))
    return terr_set(e, T_EINVAL, "params.dtype", -1,
                    "must be \"float64\" or \"float32\"");
  /* inputs */
  json_t *inputs = json_object_get(params, "inputs");
  if (inputs && !json_is_null(inputs) && !json_is_object(inputs))
    return terr_set(e, T_EINVAL, "params.inputs", -1, "must be an object");
  if (inputs && json_is_null(inputs)) inputs = NULL;
  size_t nsupplied = inputs ? json_object_size(inputs) : 0;
  if (nsupplied > EXPR_MAX_INPUTS)
    return terr_set(e, T_EINVAL, "params.inputs", -1,
                    "too many inputs (%zu, max %d)", nsupplied,
                    EXPR_MAX_INPUTS);
  /* expr */
  json_t *jx = json_object_get(params, "expr");
  const char *src = NULL;
  if (!jx || json_is_null(jx)) {
    if (!default_single)
      return terr_set(e, T_EINVAL, "params.expr", -1, "required");
    if (nsupplied != 1)
      return terr_set(e, T_EINVAL, "params.expr", -1,
                      "required unless there is exactly one input");
    void *it = json_object_iter(inputs);
    src = json_object_iter_key(it);
  } else if (!json_is_string(jx)) {
    return terr_set(e, T_EINVAL, "params.expr", -1, "must be a string");
  } else {
    src = json_string_value(jx);
  }
  if ((rc = expr_compile(src, &k->x, e))) {
    terr_prefix(e, "params.expr");
    return rc;
  }
  k->nin = expr_ninputs(k->x);
  /* every name used is supplied ... */
  for (int i = 0; i < k->nin; i++) {
    const char *name = expr_input_name(k->x, i);
    k->val[i] = inputs ? json_object_get(inputs, name) : NULL;
    if (!k->val[i]) {
      int pos = expr_input_pos(k->x, i);
      rc = terr_set(e, T_EINVAL, "params.expr", pos, "unknown name '%s' at %d",
                    name, pos);
      goto fail;
    }
  }
  /* ... and every input supplied is used */
  if (inputs) {
    json_object_foreach(inputs, key, v) {
      if (expr_input_index(k->x, key) < 0) {
        input_field(field, sizeof field, key);
        rc = terr_set(e, T_EINVAL, field, -1, "not used by the expression");
        goto fail;
      }
    }
  }
  int nds[EXPR_MAX_INPUTS];
  const int64_t *shs[EXPR_MAX_INPUTS];
  char names[EXPR_MAX_INPUTS][TERR_FIELD_MAX];
  const char *np[EXPR_MAX_INPUTS];
  for (int i = 0; i < k->nin; i++) {
    input_field(names[i], sizeof names[i], expr_input_name(k->x, i));
    np[i] = names[i];
    if ((rc = arrayval_check(env, k->val[i], names[i], &k->info[i], e)))
      goto fail;
    nds[i] = k->info[i].ndim;
    shs[i] = k->info[i].shape;
    if (k->info[i].size > k->largest) k->largest = k->info[i].size;
  }
  if ((rc = expr_broadcast(k->nin, nds, shs, np, &k->ndim, k->shape, e)))
    goto fail;
  if (!jd) k->dt = kexpr_infer_dtype(k->nin, k->info);
  k->size = tshape_size(k->ndim, k->shape, INT64_MAX);
  if (k->size < 0) {
    char sh[T_MAXDIM * 22];
    rc = terr_set(e, T_ETOOLARGE, "params.inputs", -1,
                  "the broadcast shape %s is too big",
                  tshape_str(k->ndim, k->shape, sh, sizeof sh));
    goto fail;
  }
  return 0;
fail:
  expr_free(k->x);
  k->x = NULL;
  return rc;
}

/* NumPy's promotion, for the float dtypes Tessel computes in: a bare
 * number is a Python scalar (weak: it takes the arrays' dtype, NEP 50);
 * every other form is an array of its dtype: an upload, a result or a
 * same-host file its own, an inline list, range or random float64 (as
 * np.array([1.5]) and np.arange are). float32 only when every array is
 * float32; an int64 array (a result's indices) with float32 is float64,
 * as in NumPy; numbers alone are float64. */
tdtype kexpr_infer_dtype(int n, const arrayval_info *info) {
  int arrays = 0;
  for (int i = 0; i < n; i++) {
    if (info[i].form == AV_INLINE && info[i].ndim == 0) continue;
    if (info[i].dtype != T_F32) return T_F64;
    arrays++;
  }
  return arrays ? T_F32 : T_F64;
}

void kexpr_free(kexpr *k) {
  if (!k) return;
  expr_free(k->x);
  k->x = NULL;
}

int kexpr_resolve(const kexpr *k, const tenv *env, tarray **in, char **ids,
                  terr *e) {
  int rc = 0, i;
  char field[TERR_FIELD_MAX];
  for (i = 0; i < k->nin; i++) in[i] = NULL, ids[i] = NULL;
  for (i = 0; i < k->nin; i++) {
    input_field(field, sizeof field, expr_input_name(k->x, i));
    /* The plan was checked for the shape found at submit (a {"file"} may
     * have changed since, compute/array/localfile.h "Pins"): nothing else is read. */
    if ((rc = arrayval_resolve(env, k->val[i], field, k->dt, &in[i], e)) ||
        (rc = arrayval_as_planned(&k->info[i], in[i], field, e)))
      goto fail;
    /* A GPU may keep an uploaded array or a job's result resident by id;
     * only when the data it holds is the array as stored (not converted). */
    if ((k->info[i].form == AV_ARRAY || k->info[i].form == AV_RESULT) &&
        k->info[i].dtype == k->dt) {
      const char *id = json_string_value(json_object_get(
          k->val[i], k->info[i].form == AV_ARRAY ? "array" : "result"));
      if (id && !(ids[i] = strdup(id))) {
        rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
        goto fail;
      }
    }
  }
  return 0;
fail:
  for (i = 0; i < k->nin; i++) {
    tarray_free(in[i]);
    free(ids[i]);
    in[i] = NULL;
    ids[i] = NULL;
  }
  return rc;
}

void kexpr_release(kexpr *k, tarray **in, char **ids) {
  for (int i = 0; i < EXPR_MAX_INPUTS; i++) {
    tarray_free(in[i]);
    free(ids[i]);
    in[i] = NULL;
    ids[i] = NULL;
  }
  kexpr_free(k);
}

void kexpr_estimate(const kexpr *k, double ops_per_elem, job_estimate *est) {
  size_t dsz = tdtype_size(k->dt);
  /* each size is under T_EXTENT_MAX, so one product fits; the sums
   * saturate (a cap of --max-elements 2^60 and 16 inputs would not) */
  est->in_bytes = 0;
  est->ninputs = 0;
  for (int i = 0; i < k->nin; i++) {
    int64_t b = k->info[i].size * (int64_t)dsz;
    est->in_bytes = est->in_bytes > INT64_MAX - b ? INT64_MAX
                                                  : est->in_bytes + b;
    int n0 = est->ninputs, stored = k->info[i].form == AV_ARRAY ||
                                    k->info[i].form == AV_RESULT;
    job_estimate_input(est, b, stored);
    /* On a GPU already? Under the id the run would give it (kexpr_resolve:
     * only an array as stored, not converted). */
    if (est->ninputs > n0 && stored && k->info[i].dtype == k->dt)
      est->inputs[n0].resident = gpu_resident_mask(
          json_string_value(json_object_get(
              k->val[i], k->info[i].form == AV_ARRAY ? "array" : "result")),
          (int)k->dt, (size_t)b);
  }
  est->mem_bytes = est->in_bytes > INT64_MAX - est->out_bytes
                       ? INT64_MAX
                       : est->in_bytes + est->out_bytes;
  est->ops_per_elem = ops_per_elem;
  est->work = (double)k->size * est->ops_per_elem;
  est->size = k->largest;
}

int kexpr_keep(kexpr *k, void **checked, terr *e) {
  if (!checked) {
    kexpr_free(k);
    return T_OK;
  }
  kexpr *h = malloc(sizeof *h);
  if (!h) {
    kexpr_free(k);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  *h = *k; /* the expr moves with it */
  k->x = NULL;
  *checked = h;
  return T_OK;
}

int kexpr_take(const json_t *params, const tenv *env, const char *const *extra,
               int default_single, void *checked, kexpr *k, terr *e) {
  if (!checked) return kexpr_check(params, env, extra, default_single, k, e);
  kexpr *h = checked;
  *k = *h;
  free(h);
  return T_OK;
}

void kexpr_checked_free(void *checked) {
  kexpr *h = checked;
  if (!h) return;
  kexpr_free(h);
  free(h);
}
