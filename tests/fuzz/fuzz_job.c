/* fuzz_job.c — libFuzzer target for the job path: check, prepare and run.
 *
 * The bytes are a job's params as JSON; every kind's `check` (what the API
 * runs at submit) validates them under an environment that caps arrays at
 * 2^14 elements. Whatever a kind accepts must also pass its `prepare` (what
 * a worker runs later from the stored params) and, for small outputs, run
 * on the serial and the cpu backend to a result of exactly the shape the
 * check estimated. Any crash, leak, undefined behaviour or disagreement is
 * a bug: check and prepare must agree on what a valid job is, and a job
 * that was accepted must not take the process down.
 *
 * Shapes: inline JSON cannot write a zero-size array with a leading zero
 * ([0, 3]) nor a huge one, so uploaded arrays stand in for them. An array
 * id "a_<c><d>..." (28 characters, Crockford base 32) names one of the
 * shapes in `fake_shapes` by its third character and a dtype by its fourth
 * ('0'..'f' float64, others float32): empty dims leading, in the middle and
 * trailing, dims of 1 that broadcast against 0, and shapes whose element
 * count overflows int64 once the zero is ignored ((0, 2^62), ...), which
 * NumPy refuses and so must the check. The data of a loaded fake array is
 * a fixed function of the flat index with a NaN and an inf in it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/kinds.h"
#include "util/pool.h"

#define FZ_BIG62 ((int64_t)1 << 62)
#define FZ_BIG32 ((int64_t)1 << 32)
#define FZ_BIG31 ((int64_t)1 << 31)

static const struct {
  int ndim;
  int64_t shape[4];
} fake_shapes[32] = {
    {1, {0}},           {2, {2, 0}},          {2, {0, 3}},
    {3, {2, 0, 3}},     {3, {3, 2, 0}},       {2, {0, 0}},
    {2, {1, 0}},        {2, {0, 1}},          {1, {4}},
    {2, {2, 3}},        {2, {3, 1}},          {2, {1, 3}},
    {3, {2, 3, 4}},     {2, {0, FZ_BIG62}},   {2, {0, INT64_MAX}},
    {3, {0, FZ_BIG32, FZ_BIG32}}, {2, {0, FZ_BIG31}}, {2, {FZ_BIG31, 0}},
    {2, {3, 2}},        {2, {0, 2}},          {2, {5, 2}},
    {1, {1}},           {0, {0}},             {3, {2, 1, 0}},
    {3, {0, 1, 3}},     {1, {3}},             {2, {1, 1}},
    {4, {2, 0, 1, 3}},  {2, {2, FZ_BIG62}},   {3, {1, 0, FZ_BIG62}},
    {2, {4, 2}},        {1, {2}},
};

static int b32_val(char c) {
  static const char b32[] = "0123456789abcdefghjkmnpqrstvwxyz";
  const char *p = c ? strchr(b32, c) : NULL;
  return p ? (int)(p - b32) : 0;
}

static int fake_meta(void *ud, const char *owner, const char *id, tdtype *dt,
                     int *ndim, int64_t *shape, terr *e) {
  if (!id || strlen(id) < 4)
    return terr_set(e, T_ENOTFOUND, "", -1, "not found");
  int k = b32_val(id[2]);
  *ndim = fake_shapes[k].ndim;
  for (int d = 0; d < *ndim; d++) shape[d] = fake_shapes[k].shape[d];
  *dt = b32_val(id[3]) < 16 ? T_F64 : T_F32;
  return 0;
}

static int fake_load(void *ud, const char *owner, const char *id,
                     tarray **out, terr *e) {
  tdtype dt;
  int ndim;
  int64_t shape[T_MAXDIM];
  *out = NULL;
  int rc = fake_meta(ud, owner, id, &dt, &ndim, shape, e);
  if (rc) return rc;
  tarray *a = tarray_new(dt, ndim, shape);
  if (!a) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  for (int64_t i = 0; i < a->size; i++)
    tarray_set(a, i, i == 5 ? NAN : i == 7 ? INFINITY : (double)(i % 7) - 2);
  *out = a;
  return 0;
}

static int heap_result(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                       tarray **out, terr *e) {
  *out = tarray_new(dt, ndim, shape);
  return *out ? T_OK : terr_set(e, T_ENOMEM, "", -1, "out of memory");
}

static pool *fz_pool;

/* Run plan on backend b; the result's shape must be the estimate's. */
static void run_one(const kind_ops *ops, void *plan, tbackend b,
                    const job_estimate *est) {
  atomic_int stop = 0;
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.pool = b == B_CPU ? fz_pool : NULL;
  ctx.threads = b == B_CPU ? 2 : 1;
  ctx.stop = &stop;
  ctx.result_alloc = heap_result;
  tarray *out = NULL;
  terr e;
  terr_clear(&e);
  if (ops->run(plan, b, &ctx, &out, &e) == 0) {
    if (!out || out->ndim != est->out_ndim) __builtin_trap();
    for (int d = 0; d < out->ndim; d++)
      if (out->shape[d] != est->out_shape[d]) __builtin_trap();
  } else if (e.message[0] == 0) {
    __builtin_trap();
  }
  tarray_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fz_pool) fz_pool = pool_create(2, NULL, NULL);
  json_t *params = json_loadb((const char *)data, size, 0, NULL);
  if (!params) return 0;
  if (!json_is_object(params)) {
    json_decref(params);
    return 0;
  }
  const tenv env = {.owner = "", .array_meta = fake_meta,
                    .array_load = fake_load, .max_elems = 1 << 14};
  for (int k = 0; k < kind_count(); k++) {
    const kind_ops *ops = kind_at(k);
    job_estimate est;
    memset(&est, 0, sizeof est);
    terr e;
    terr_clear(&e);
    if (ops->check(params, &env, &est, &e) != 0) {
      if (e.message[0] == 0) __builtin_trap(); /* errors must say why */
      continue;
    }
    /* what was accepted has a result no bigger than the caps say */
    int64_t n = tshape_size(est.out_ndim, est.out_shape, INT64_MAX);
    if (n < 0 || n > env.max_elems || est.out_bytes < 0) __builtin_trap();
    void *plan = NULL;
    if (ops->prepare(params, &env, &plan, &e) != 0) __builtin_trap();
    if (n <= (1 << 12) && est.work < 1e6) {
      run_one(ops, plan, B_SERIAL, &est);
      run_one(ops, plan, B_CPU, &est);
    }
    ops->release(plan);
  }
  json_decref(params);
  return 0;
}
