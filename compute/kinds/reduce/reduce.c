/* compute/kinds/reduce/reduce.c — the "reduce" job kind (API.md).
 *
 *   params {"op": "sum|mean|min|max|prod|var|std|argmin|argmax|norm",
 *           "expr": "x**2" (default: the single input's name),
 *           "inputs": {...}, "axis": null | int (negative counts from the
 *           end), "dtype": "float64" | "float32", "ddof": 0 (var/std)}
 *
 * The expression is evaluated block by block and folded into accumulators
 * (reduce_cpu.c); arithmetic and accumulation are float64 whatever the
 * dtype, and the result is stored in the job's dtype (argmin/argmax:
 * int64 indices, flat for axis null, along the axis otherwise). Without
 * "dtype" the job's dtype is NumPy's promotion of the inputs
 * (kexpr_infer_dtype: np.sum of a float32 array is float32). B_CUDA
 * hands the job to red_lanes_gpu (lanes.h: a big reduce, whole-array or
 * along the last axis, by blocks over every lent GPU, behind
 * TESSEL_GPU_LANES; else gpu_reduce); ddof other than 0 is applied to its var/std
 * afterwards (var * n / (n - ddof)), since the GPU entry point computes the
 * population form. Zero-size work (no output, or outputs over an empty
 * axis) is answered by the CPU code on every backend: sum 0, prod 1, norm
 * 0, mean/var/std NaN (NumPy's values); min/max/argmin/argmax over an
 * empty axis are refused at submit (400 naming params.axis, or
 * params.inputs for axis null), as NumPy raises for them.
 *
 * Gangs (kind_ops.gang_*, below): tiny cuda reductions of one expression,
 * op, dtypes and size share one launch, each bit for bit its own.
 *
 * Threads: check on an HTTP thread; prepare/run/release on a scheduler
 * worker; chunks on pool threads (see reduce_cpu.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/reduce/lanes.h"
#include "util/util.h"

typedef struct reduce_plan {
  kexpr k;
  reduce_op op;
  int axis; /* normalised; -1: all */
  double ddof;
  tarray *in[EXPR_MAX_INPUTS];
  char *ids[EXPR_MAX_INPUTS];
} reduce_plan;

static const char *const reduce_keys[] = {"op", "axis", "ddof", NULL};

/* The reduce-only params, after kexpr_check succeeded. */
static int reduce_params(const json_t *params, const kexpr *k, reduce_op *op,
                         int *axis, double *ddof, terr *e) {
  json_t *jo = json_object_get(params, "op");
  int o = json_is_string(jo) ? reduce_op_parse(json_string_value(jo)) : -1;
  if (o < 0)
    return terr_set(e, T_EINVAL, "params.op", -1,
                    "must be one of sum, mean, min, max, prod, var, std, "
                    "argmin, argmax, norm");
  *op = (reduce_op)o;
  json_t *ja = json_object_get(params, "axis");
  *axis = -1;
  if (ja && !json_is_null(ja)) {
    if (!json_is_integer(ja))
      return terr_set(e, T_EINVAL, "params.axis", -1,
                      "must be null or an integer");
    json_int_t a = json_integer_value(ja);
    if (a < -k->ndim || a >= k->ndim)
      return terr_set(e, T_EINVAL, "params.axis", -1,
                      "axis %lld is out of range for %d dimension%s",
                      (long long)a, k->ndim, k->ndim == 1 ? "" : "s");
    *axis = (int)(a < 0 ? a + k->ndim : a);
  }
  json_t *jd = json_object_get(params, "ddof");
  *ddof = 0;
  if (jd && !json_is_null(jd)) {
    if (!json_is_number(jd) || !(json_number_value(jd) >= 0) ||
        !isfinite(json_number_value(jd)))
      return terr_set(e, T_EINVAL, "params.ddof", -1,
                      "must be a number >= 0");
    *ddof = json_number_value(jd);
  }
  /* NumPy refuses an empty min/max/argmin/argmax (no identity), also
   * when there is no output at all: np.zeros((0, 0)).min(axis=0) raises.
   * (The products are of a checked shape's dims: see T_EXTENT_MAX.) */
  int64_t len = 1;
  for (int d = 0; d < k->ndim; d++)
    if (*axis < 0 || d == *axis) len *= k->shape[d];
  if (len == 0 &&
      (*op == R_MIN || *op == R_MAX || *op == R_ARGMIN || *op == R_ARGMAX)) {
    char sh[T_MAXDIM * 22];
    tshape_str(k->ndim, k->shape, sh, sizeof sh);
    if (*axis >= 0)
      return terr_set(e, T_EINVAL, "params.axis", -1,
                      "axis %d of the inputs' shape %s has length 0, and %s "
                      "of nothing is undefined (NumPy: zero-size array to "
                      "reduction operation which has no identity)",
                      *axis, sh, reduce_op_name(*op));
    return terr_set(e, T_EINVAL, "params.inputs", -1,
                    "the inputs' shape %s holds no element, and %s of "
                    "nothing is undefined (NumPy: zero-size array to "
                    "reduction operation which has no identity)",
                    sh, reduce_op_name(*op));
  }
  return 0;
}

/* argmin/argmax are indices: int64, as NumPy's np.argmax (and the
 * geodesic row-wise argmin) give; every other op the job's dtype. */
static tdtype out_dtype(reduce_op op, tdtype dt) {
  return op == R_ARGMIN || op == R_ARGMAX ? T_I64 : dt;
}

static int reduce_check_keep(const json_t *params, const tenv *env,
                             job_estimate *est, void **checked, terr *e) {
  if (checked) *checked = NULL;
  kexpr k;
  reduce_op op;
  int axis;
  double ddof;
  int rc = kexpr_check(params, env, reduce_keys, 1, &k, e);
  if (rc) return rc;
  if ((rc = reduce_params(params, &k, &op, &axis, &ddof, e))) {
    kexpr_free(&k);
    return rc;
  }
  memset(est, 0, sizeof *est);
  reduce_spec r = {.x = k.x, .ndim = k.ndim, .shape = k.shape, .op = op,
                   .axis = axis, .ddof = ddof};
  est->out_dtype = out_dtype(op, k.dt);
  reduce_out_shape(&r, &est->out_ndim, est->out_shape);
  if ((rc = kind_result_check(env, est, e))) {
    kexpr_free(&k);
    return rc;
  }
  kexpr_estimate(&k, (double)expr_program_length(k.x) + 1 /* + the fold */,
                 est);
  return kexpr_keep(&k, checked, e);
}

static int reduce_check(const json_t *params, const tenv *env,
                        job_estimate *est, terr *e) {
  return reduce_check_keep(params, env, est, NULL, e);
}

static void reduce_release(void *plan) {
  reduce_plan *p = plan;
  if (!p) return;
  kexpr_release(&p->k, p->in, p->ids);
  free(p);
}

static int reduce_prepare_checked(const json_t *params, const tenv *env,
                                  void *checked, void **plan, terr *e) {
  *plan = NULL;
  reduce_plan *p = calloc(1, sizeof *p);
  if (!p) {
    kexpr_checked_free(checked);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  int rc = kexpr_take(params, env, reduce_keys, 1, checked, &p->k, e);
  if (!rc) rc = reduce_params(params, &p->k, &p->op, &p->axis, &p->ddof, e);
  if (!rc) rc = kexpr_resolve(&p->k, env, p->in, p->ids, e);
  if (rc) {
    reduce_release(p);
    return rc;
  }
  *plan = p;
  return 0;
}

static int reduce_prepare(const json_t *params, const tenv *env, void **plan,
                          terr *e) {
  return reduce_prepare_checked(params, env, NULL, plan, e);
}

/* gpu_reduce gives var/std with divisor n; make it n - ddof. */
static void ddof_fix(const reduce_plan *p, tarray *out) {
  if ((p->op != R_VAR && p->op != R_STD) || p->ddof == 0) return;
  int64_t n = 1;
  for (int d = 0; d < p->k.ndim; d++)
    if (p->axis < 0 || d == p->axis) n *= p->k.shape[d];
  double dof = (double)n - p->ddof;
  double f = dof > 0 ? (double)n / dof : INFINITY;
  if (p->op == R_STD) f = sqrt(f);
  for (int64_t i = 0; i < out->size; i++)
    tarray_set(out, i, tarray_get(out, i) * f);
}

static int reduce_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                      terr *e) {
  *result = NULL;
  reduce_plan *p = plan;
  reduce_spec r = {.x = p->k.x, .inputs = (const tarray *const *)p->in,
                   .ndim = p->k.ndim, .shape = p->k.shape, .op = p->op,
                   .axis = p->axis, .ddof = p->ddof};
  int ond;
  int64_t osh[T_MAXDIM];
  reduce_out_shape(&r, &ond, osh);
  tarray *out = NULL;
  int rc = ctx->result_alloc(ctx, out_dtype(p->op, p->k.dt), ond, osh, &out, e);
  if (rc) return rc;
  int64_t len = 1; /* values per output */
  for (int d = 0; d < p->k.ndim; d++)
    if (p->axis < 0 || d == p->axis) len *= p->k.shape[d];
  /* zero-size work never goes to a GPU (no launch has 0 blocks): the CPU
   * path writes the ops' empty values without evaluating anything */
  if (b == B_CUDA && out->size > 0 && len > 0) {
    rc = red_lanes_gpu(p->op, p->k.x, r.inputs, (const char *const *)p->ids,
                       p->axis, p->k.ndim, p->k.shape, out, ctx, e);
    if (!rc) ddof_fix(p, out);
  } else {
    double t0 = t_now_ms();
    rc = reduce_cpu_run(&r, out, ctx, b == B_SERIAL ? 1 : ctx->threads, e);
    ctx->t_compute += t_now_ms() - t0;
  }
  if (rc) {
    tarray_free(out);
    return rc;
  }
  *result = out;
  return 0;
}

/* ---- a gang of tiny jobs (kind_ops.gang_*; issue 26) ---------------------
 * Tiny cuda reductions of the same expression, op, dtypes and size, each
 * over everything, share one launch: their inputs stacked as the rows of
 * [G, L] arrays, reduced along the rows by gpu_reduce_rows (one staging,
 * one part and one combine launch per staging chunk, one d2h), each row
 * folded in the parts its job alone would be, so each value is bit for bit
 * the job's own. Not ganged: an axis, argmin/argmax (int64 indices), an
 * input that broadcasts or is one element, a same-host file (guarded
 * mapping) or a sink. */
/* Elements per job, at most. Measured on an H200 (tests/gpu/test_gang.c,
 * 2026-11-29; tests/bench/results/gang-h200-2026-11-29.md): 50 jobs of
 * 2-4,097 elements took 0.06-0.7 ms as one gang against ~2 ms one by one,
 * 16 of 65,536 2.07 ms against 1.74, 16 of 2^20 46.8 against 14.3 (the
 * stacking copy and the pageable staging of big rows cost more than the
 * launches they save): the gang ends below 2^16. */
#define REDUCE_GANG_MAX ((int64_t)1 << 15)

static int reduce_gang_key(const void *plan, char *key, size_t cap) {
  const reduce_plan *p = plan;
  if (p->axis >= 0 || p->op == R_ARGMIN || p->op == R_ARGMAX ||
      p->k.size < 2 || p->k.size > REDUCE_GANG_MAX || p->k.nin < 1)
    return 0;
  int n = snprintf(key, cap, "%d|%d|%lld|%s|", (int)p->op, (int)p->k.dt,
                   (long long)p->k.size, expr_canonical(p->k.x));
  for (int i = 0; i < p->k.nin; i++) {
    const tarray *a = p->in[i];
    if (!a || !a->data || a->guard > 0 || a->size != p->k.size) return 0;
    if (n >= 0 && (size_t)n < cap)
      n += snprintf(key + n, cap - (size_t)n, "%d,", (int)a->dtype);
  }
  return n >= 0 && (size_t)n < cap;
}

/* The stacked inputs of the members still in (live[g]), and their
 * launch; 0 or the launch's error (every member's). */
static int reduce_gang_launch(void *const *plans, int n, const int *live,
                              int G, job_ctx *gctx, tarray *out, terr *e) {
  const reduce_plan *p0 = plans[0];
  tarray *st[EXPR_MAX_INPUTS] = {0};
  int rc = 0;
  for (int i = 0; i < p0->k.nin && !rc; i++) {
    int64_t sh[2] = {G, p0->k.size};
    size_t row = (size_t)p0->k.size * tdtype_size(p0->in[i]->dtype);
    if (!(st[i] = tarray_new(p0->in[i]->dtype, 2, sh))) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory to stack a gang");
      break;
    }
    for (int g = 0, r = 0; g < n; g++)
      if (live[g]) {
        const reduce_plan *p = plans[g];
        memcpy((char *)st[i]->data + (size_t)r++ * row, p->in[i]->data, row);
      }
  }
  if (!rc)
    rc = gpu_reduce_rows(gctx->device, p0->op, p0->k.x,
                         (const tarray *const *)st, out, gctx, e);
  for (int i = 0; i < p0->k.nin; i++) tarray_free(st[i]);
  return rc;
}

static void reduce_gang_run(void *const *plans, int n, job_ctx *const *ctx,
                            tarray **results, int *rc, terr *e) {
  const reduce_plan *p0 = plans[0];
  int *live = calloc((size_t)n, sizeof *live), G = 0;
  int64_t none[1] = {0};
  for (int g = 0; g < n; g++) {
    results[g] = NULL;
    rc[g] = live ? ctx[g]->result_alloc(ctx[g], out_dtype(p0->op, p0->k.dt),
                                        0, none, &results[g], &e[g])
                 : terr_set(&e[g], T_ENOMEM, "", -1, "out of memory");
    if (!rc[g] && job_ctx_stopped(ctx[g])) /* canceled: out of the launch */
      rc[g] = terr_set(&e[g], (terr_code)job_ctx_stop_code(ctx[g]), "", -1,
                       "stopped before its launch");
    if (live) G += live[g] = rc[g] == 0;
  }
  if (G > 0) {
    int64_t osh[1] = {G};
    tarray *out = tarray_new(out_dtype(p0->op, p0->k.dt), 1, osh);
    job_ctx gctx;
    memset(&gctx, 0, sizeof gctx); /* no stop: one member stops no other */
    gctx.device = ctx[0]->device;
    gctx.job_id = ctx[0]->job_id;
    terr le;
    terr_clear(&le);
    int lrc = out ? reduce_gang_launch(plans, n, live, G, &gctx, out, &le)
                  : terr_set(&le, T_ENOMEM, "", -1, "out of memory");
    for (int g = 0, r = 0; g < n; g++) {
      if (!live[g]) continue;
      if (lrc) {
        rc[g] = lrc;
        e[g] = le;
        continue;
      }
      tarray_set(results[g], 0, tarray_get(out, r++));
      ddof_fix(plans[g], results[g]);
      ctx[g]->t_h2d += gctx.t_h2d / G; /* each its share */
      ctx[g]->t_compute += gctx.t_compute / G;
      ctx[g]->t_d2h += gctx.t_d2h / G;
      atomic_store(&ctx[g]->progress_total, p0->k.size);
      atomic_store(&ctx[g]->progress_done, p0->k.size);
    }
    tarray_free(out);
  }
  free(live); /* a failed member's result, if allocated, the caller drops */
}

/* float32 results get float32 tolerances (see tolerance_doc). */
static void reduce_tolerance(const void *plan, double *rtol, double *atol) {
  const reduce_plan *p = plan;
  int f32 = p->k.dt == T_F32 && p->op != R_ARGMIN && p->op != R_ARGMAX;
  *rtol = f32 ? 1e-5 : 1e-9;
  *atol = f32 ? 1e-6 : 1e-12;
}

/* Why these tolerances: serial and cpu agree bit for bit (fixed chunks,
 * merged in order). A GPU sums in another order (tree reductions); with
 * careful summation on both sides the difference is a few ulp of the sum
 * of magnitudes, which is the result's own size unless the terms cancel. */
const kind_ops kind_reduce_ops = {
    .name = "reduce",
    .rtol = 1e-9,
    .atol = 1e-12,
    .tolerance_doc =
        "float64: |a-b| <= 1e-12 + 1e-9*|b|; float32 results: |a-b| <= 1e-6 "
        "+ 1e-5*|b|. CPU backends agree bit for bit; a GPU adds in another "
        "order, which moves a sum by a few ulp of the sum of |terms| (more "
        "than rtol only when the terms cancel by a factor above ~1e6). "
        "argmin/argmax agree exactly unless two values tie within that.",
    .check = reduce_check,
    .prepare = reduce_prepare,
    .check_keep = reduce_check_keep,
    .prepare_checked = reduce_prepare_checked,
    .checked_free = kexpr_checked_free,
    .run = reduce_run,
    .release = reduce_release,
    .tolerance = reduce_tolerance,
    .cost = &kind_cost_vm,
    .gang_max = REDUCE_GANG_MAX,
    .gang_key = reduce_gang_key,
    .gang_run = reduce_gang_run,
};
