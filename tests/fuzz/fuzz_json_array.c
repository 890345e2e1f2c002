/* fuzz_json_array.c — libFuzzer target for array values in JSON.
 *
 * The bytes are parsed by Jansson (any value), then checked with
 * arrayval_check under an environment whose store refuses every id, and
 * read with jarray_parse. Whatever check accepts must resolve to an array
 * of exactly the shape it announced (inline, range and random; uploads are
 * all "not found", same-host files all "forbidden": no --local-dir). The element cap is small so that random/range stay
 * cheap per input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/arrayval.h"

static int refuse_meta(void *ud, const char *owner, const char *id,
                       tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  return terr_set(e, T_ENOTFOUND, "", -1, "refused");
}

static int refuse_load(void *ud, const char *owner, const char *id,
                       tarray **out, terr *e) {
  *out = NULL;
  return terr_set(e, T_ENOTFOUND, "", -1, "refused");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t je;
  json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
  if (!v) return 0;
  const tenv env = {.owner = "", .array_meta = refuse_meta,
                    .array_load = refuse_load, .max_elems = 1 << 14};
  arrayval_info info;
  terr e;
  int rc = arrayval_check(&env, v, "params.inputs.x", &info, &e);
  if (rc == 0) {
    if (info.form == AV_ARRAY) __builtin_trap(); /* every id is refused */
    tarray *a = NULL;
    if (arrayval_resolve(&env, v, "params.inputs.x", T_F32, &a, &e) == 0) {
      if (a->ndim != info.ndim || a->size != info.size) __builtin_trap();
      FILE *f = fopen("/dev/null", "w");
      if (f) {
        jarray_write(f, a, &e);
        fclose(f);
      }
      json_t *j = jarray_to_json(a);
      json_decref(j);
    } else if (a) {
      __builtin_trap();
    }
    tarray_free(a);
  } else if (rc != T_EINVAL && rc != T_ETOOLARGE && rc != T_ENOTFOUND &&
             rc != T_EFORBIDDEN) {
    /* 403: a {"file"} with no same-host directory allowed (this env has
     * none), as API.md answers it; anything else is a bug. */
    __builtin_trap();
  }
  tarray *b = NULL;
  if (jarray_parse(v, T_F64, 1 << 14, "x", &b, &e) == 0 && !b) __builtin_trap();
  tarray_free(b);
  json_decref(v);
  return 0;
}
