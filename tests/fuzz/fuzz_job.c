/* fuzz_job.c — libFuzzer target for job validation.
 *
 * The bytes are a job's params as JSON; every kind's `check` (what the API
 * runs at submit) validates them under an environment that refuses every
 * array id and caps arrays at 2^14 elements. Whatever a kind accepts must
 * also pass its `prepare` (what a worker runs later from the stored params)
 * and, for small outputs, run serially to a result of exactly the shape
 * the check estimated. Any crash, leak or disagreement is a bug: check and
 * prepare must agree on what a valid job is.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds.h"

static int refuse_meta(void *ud, const char *owner, const char *id,
                       tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  return terr_set(e, T_ENOTFOUND, "", -1, "refused");
}

static int refuse_load(void *ud, const char *owner, const char *id,
                       tarray **out, terr *e) {
  *out = NULL;
  return terr_set(e, T_ENOTFOUND, "", -1, "refused");
}

static int heap_result(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                       tarray **out, terr *e) {
  *out = tarray_new(dt, ndim, shape);
  return *out ? T_OK : terr_set(e, T_ENOMEM, "", -1, "out of memory");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *params = json_loadb((const char *)data, size, 0, NULL);
  if (!params) return 0;
  if (!json_is_object(params)) {
    json_decref(params);
    return 0;
  }
  const tenv env = {.owner = "", .array_meta = refuse_meta,
                    .array_load = refuse_load, .max_elems = 1 << 14};
  for (int k = 0; k < K__COUNT; k++) {
    const kind_ops *ops = kind_get((tkind)k);
    job_estimate est;
    memset(&est, 0, sizeof est);
    terr e;
    terr_clear(&e);
    if (ops->check(params, &env, &est, &e) != 0) {
      if (e.message[0] == 0) __builtin_trap(); /* errors must say why */
      continue;
    }
    void *plan = NULL;
    if (ops->prepare(params, &env, &plan, &e) != 0) __builtin_trap();
    int64_t n = tshape_size(est.out_ndim, est.out_shape, INT64_MAX);
    if (n >= 0 && n <= (1 << 12) && est.work < 1e6) {
      atomic_int stop = 0;
      job_ctx ctx;
      memset(&ctx, 0, sizeof ctx);
      ctx.threads = 1;
      ctx.stop = &stop;
      ctx.result_alloc = heap_result;
      tarray *out = NULL;
      if (ops->run(plan, B_SERIAL, &ctx, &out, &e) == 0) {
        if (!out || out->ndim != est.out_ndim) __builtin_trap();
        for (int d = 0; d < out->ndim; d++)
          if (out->shape[d] != est.out_shape[d]) __builtin_trap();
      }
      tarray_free(out);
    }
    ops->release(plan);
  }
  json_decref(params);
  return 0;
}
