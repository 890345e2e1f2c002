/* compute/kinds/matmul/matmul.c — the "matmul" job kind: out = op(a) @ op(b) + bias.
 *
 * Params {"a", "b", "bias", "transpose_a", "transpose_b", "dtype"}; a, b and
 * bias are array values (arrayval.h). Shapes follow numpy.matmul for 1-D and
 * 2-D operands: a 2-D [m, k] (or its transpose), b 2-D [k, n] (or its
 * transpose) gives [m, n]; a 1-D b of length k is a column and the result is
 * [m] (numpy's matrix @ vector); a 1-D a is a row and the result is [n];
 * both 1-D give a 0-d dot product. transpose_* on a 1-D operand is a no-op,
 * as .T is in NumPy. bias broadcasts to the output by NumPy's rules without
 * adding dimensions: scalar, row [n] or [1, n], column [m, 1], or full
 * [m, n] (for an [m] result: scalar, [1] or [m]). It is added after the
 * product, i.e. (a @ b) + bias rounded as NumPy rounds it. Without
 * "dtype" the job's dtype is NumPy's promotion of the operands
 * (kexpr_infer_dtype: float32 @ float32 is float32, any float64 or int64
 * operand makes it float64; a bare-number bias takes the others').
 *
 * Internally every operand is a row-major 2-D view: op(A) [M, K], op(B)
 * [K, N], C [M, N] with lda/ldb/ldc, and bias as (row stride, col stride)
 * into its data (0 where broadcast).
 *
 * Backends. OpenBLAS is told once to use one thread (its own threads would
 * fight the pool's); parallelism is ours:
 *   B_SERIAL  on the calling worker, in the panels below for one thread
 *             (one gemm up to ~4 GFLOP): a gemm cannot be stopped once
 *             called, so the panels are where a cancel or a timeout stops
 *             it (issue 15: within about a second; a 4 GFLOP panel took
 *             0.6-1.1 s on the loaded 2-core VM, a 16 GFLOP one 2.6 s);
 *   B_CPU     the output split into panels of rows (of columns when it is
 *             wider than tall), spread with pool_for over ctx->threads;
 *             each panel is one gemm plus its bias, counts one unit of
 *             progress, and no panel starts once the job is stopped;
 *   B_CUDA    gpu_matmul (compute/kinds/gpu_kernels.h) on 2-D views; a
 *             product of MM_LANES_MIN bytes and more in row blocks over
 *             the run's GPU and every GPU the scheduler lends
 *             (compute/kinds/matmul/lanes.h).
 *
 * Compare tolerance (kind_ops.tolerance): the summation order differs
 * between backends, and |fl(c_ij) - c_ij| <= k u (|a|.|b|)_ij. So results
 * agree when |x - y| <= atol + rtol |y| with rtol = 4 (k + 2) u and atol =
 * 4 (k + 2) u (max_i sum_l |op(a)_il| * max |op(b)| + max |bias|), u = 2^-53
 * for float64 and 2^-24 for float32 — about 1e-12 of the scale of |a|.|b|
 * for k = 1000 in float64. Static fallback: rtol 1e-6, atol 1e-9.
 *
 * Threads: check on an HTTP thread; prepare/run/release on a scheduler
 * worker; panel_run on pool threads (they write disjoint panels of C and
 * read the plan, which nobody writes while run is going).
 * Ownership: the plan owns its three arrays and id copies; *result is the
 * caller's.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/gpu.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/kinds.h"
#include "compute/kinds/matmul/lanes.h"
#include "util/pool.h"
#include "util/util.h"

typedef struct mm_spec {
  arrayval_info ia, ib, ic; /* a, b, bias */
  int has_bias, ta, tb;
  tdtype dt;
  int64_t m, n, k;            /* op(a) [m, k], op(b) [k, n] */
  int out_ndim;
  int64_t out_shape[2];
  int64_t bias_rs, bias_cs;   /* strides of bias in the [m, n] view */
} mm_spec;

typedef struct mm_plan {
  mm_spec s;
  tarray *a, *b, *bias;
  char *ids[3];
} mm_plan;

/* ---- params ---------------------------------------------------------------- */

static int mm_bool(const json_t *p, const char *key, int *out, terr *e) {
  const json_t *v = json_object_get(p, key);
  *out = 0;
  if (!v || json_is_null(v)) return 0;
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "params.%s", key);
  if (!json_is_boolean(v))
    return terr_set(e, T_EINVAL, f, -1, "must be true or false");
  *out = json_is_true(v);
  return 0;
}

/* Validate params and work out every shape; nothing big is built. */
static int mm_parse(const json_t *p, const tenv *env, mm_spec *s, terr *e) {
  static const char *const keys[] = {"a",           "b",           "bias",
                                     "transpose_a", "transpose_b", "dtype",
                                     NULL};
  char sa[96], sb[96], sc[96];
  int rc;
  memset(s, 0, sizeof *s);
  if (!json_is_object(p))
    return terr_set(e, T_EINVAL, "params", -1, "must be an object");
  const char *key = kind_params_unknown_key(p, keys);
  if (key) {
    char f[TERR_FIELD_MAX];
    snprintf(f, sizeof f, "params.%.40s", key);
    return terr_set(e, T_EINVAL, f, -1,
                    "unknown key '%.40s' (expected a, b, bias, "
                    "transpose_a, transpose_b, dtype)", key);
  }
  const json_t *dt = json_object_get(p, "dtype");
  s->dt = T_F64;
  if (dt && !json_is_null(dt) &&
      tdtype_parse(json_string_value(dt), &s->dt) != 0)
    return terr_set(e, T_EINVAL, "params.dtype", -1,
                    "must be \"float64\" or \"float32\"");
  if ((rc = mm_bool(p, "transpose_a", &s->ta, e)) ||
      (rc = mm_bool(p, "transpose_b", &s->tb, e)))
    return rc;
  if ((rc = arrayval_check(env, json_object_get(p, "a"), "params.a", &s->ia, e)) ||
      (rc = arrayval_check(env, json_object_get(p, "b"), "params.b", &s->ib, e)))
    return rc;
  const json_t *bias = json_object_get(p, "bias");
  s->has_bias = bias && !json_is_null(bias);
  if (s->has_bias &&
      (rc = arrayval_check(env, bias, "params.bias", &s->ic, e)))
    return rc;
  if (!dt || json_is_null(dt)) { /* NumPy's: float32 @ float32 is float32 */
    arrayval_info in[3] = {s->ia, s->ib, s->ic};
    s->dt = kexpr_infer_dtype(s->has_bias ? 3 : 2, in);
  }
  const arrayval_info *a = &s->ia, *b = &s->ib;
  tshape_str(a->ndim, a->shape, sa, sizeof sa);
  tshape_str(b->ndim, b->shape, sb, sizeof sb);
  if (a->ndim < 1 || a->ndim > 2)
    return terr_set(e, T_EINVAL, "params.a", -1,
                    "must be 1-D or 2-D, not of shape %s", sa);
  if (b->ndim < 1 || b->ndim > 2)
    return terr_set(e, T_EINVAL, "params.b", -1,
                    "must be 1-D or 2-D, not of shape %s", sb);
  int64_t ka, kb;
  if (a->ndim == 2) {
    s->m = s->ta ? a->shape[1] : a->shape[0];
    ka = s->ta ? a->shape[0] : a->shape[1];
  } else {
    s->m = 1;
    ka = a->shape[0];
    s->ta = 0;
  }
  if (b->ndim == 2) {
    kb = s->tb ? b->shape[1] : b->shape[0];
    s->n = s->tb ? b->shape[0] : b->shape[1];
  } else {
    kb = b->shape[0];
    s->n = 1;
    s->tb = 0;
  }
  if (ka != kb)
    return terr_set(e, T_EINVAL, "params.b", -1,
                    "shape %s%s does not match params.a %s%s: inner "
                    "dimensions %lld and %lld differ",
                    sb, s->tb ? " (transposed)" : "", sa,
                    s->ta ? " (transposed)" : "", (long long)kb,
                    (long long)ka);
  s->k = ka;
  if (s->m > INT32_MAX || s->n > INT32_MAX || s->k > INT32_MAX)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "a dimension of a %s @ b %s is over 2^31 - 1 (the BLAS "
                    "index limit)", sa, sb);
  /* output: logical dims, and which of them is the view's row / column */
  int rowdim = -1, coldim = -1;
  if (a->ndim == 2) s->out_shape[s->out_ndim++] = s->m, rowdim = 0;
  if (b->ndim == 2) coldim = s->out_ndim, s->out_shape[s->out_ndim++] = s->n;
  if (s->has_bias) {
    const arrayval_info *c = &s->ic;
    tshape_str(c->ndim, c->shape, sc, sizeof sc);
    char so[64];
    tshape_str(s->out_ndim, s->out_shape, so, sizeof so);
    if (c->ndim > s->out_ndim)
      return terr_set(e, T_EINVAL, "params.bias", -1,
                      "shape %s does not broadcast to the output %s "
                      "(a %s @ b %s)", sc, so, sa, sb);
    int64_t stride = 1;
    for (int j = c->ndim - 1; j >= 0; j--) {
      int od = s->out_ndim - c->ndim + j;
      int64_t bd = c->shape[j], want = s->out_shape[od];
      if (bd != want && bd != 1)
        return terr_set(e, T_EINVAL, "params.bias", -1,
                        "shape %s does not broadcast to the output %s "
                        "(a %s @ b %s)", sc, so, sa, sb);
      if (bd == want && bd != 1) {
        if (od == rowdim) s->bias_rs = stride;
        if (od == coldim) s->bias_cs = stride;
      }
      stride *= bd;
    }
  }
  return 0;
}

static int64_t add_sat(int64_t x, int64_t y) {
  return x > INT64_MAX - y ? INT64_MAX : x + y;
}

/* The id a GPU may keep an input resident under: an uploaded array's or a
 * job result's (both name their bytes for good); NULL for other forms. */
#define MM_KEEPS(f) ((f) == AV_ARRAY || (f) == AV_RESULT)
static const char *upload_id_of(const json_t *v) {
  const char *id = json_string_value(json_object_get(v, "array"));
  return id ? id : json_string_value(json_object_get(v, "result"));
}

static int mm_check(const json_t *params, const tenv *env, job_estimate *est,
                    terr *e) {
  mm_spec s;
  int rc = mm_parse(params, env, &s, e);
  if (rc) return rc;
  memset(est, 0, sizeof *est);
  int64_t isz = (int64_t)tdtype_size(s.dt);
  est->out_dtype = s.dt;
  est->out_ndim = s.out_ndim;
  for (int i = 0; i < s.out_ndim; i++) est->out_shape[i] = s.out_shape[i];
  if ((rc = kind_result_check(env, est, e))) return rc;
  int64_t in = add_sat(s.ia.size, s.ib.size);
  if (s.has_bias) in = add_sat(in, s.ic.size);
  est->in_bytes = in > INT64_MAX / isz ? INT64_MAX : in * isz;
  const arrayval_info *iv[3] = {&s.ia, &s.ib, s.has_bias ? &s.ic : NULL};
  const json_t *vals[3] = {json_object_get(params, "a"),
                           json_object_get(params, "b"),
                           json_object_get(params, "bias")};
  for (int i = 0; i < 3 && iv[i]; i++) {
    int64_t b = iv[i]->size > INT64_MAX / isz ? INT64_MAX : iv[i]->size * isz;
    int n0 = est->ninputs, stored = MM_KEEPS(iv[i]->form);
    job_estimate_input(est, b, stored);
    if (est->ninputs > n0 && stored) /* on a GPU already? (mm_prepare's ids) */
      est->inputs[n0].resident = gpu_resident_mask(upload_id_of(vals[i]),
                                                   (int)s.dt, (size_t)b);
  }
  est->mem_bytes = add_sat(est->in_bytes, est->out_bytes);
  est->work = 2.0 * (double)s.m * (double)s.n * (double)s.k;
  double sz = (double)s.m * (double)s.n * (double)s.k;
  est->size = sz > 9e18 ? INT64_MAX : (int64_t)sz;
  return 0;
}

/* ---- plan ------------------------------------------------------------------ */

static void mm_release(void *plan) {
  mm_plan *p = plan;
  if (!p) return;
  tarray_free(p->a);
  tarray_free(p->b);
  tarray_free(p->bias);
  for (int i = 0; i < 3; i++) free(p->ids[i]);
  free(p);
}

static char *upload_id(const json_t *v) {
  const char *id = upload_id_of(v);
  return id ? strdup(id) : NULL;
}

static int mm_prepare(const json_t *params, const tenv *env, void **plan,
                      terr *e) {
  *plan = NULL;
  mm_plan *p = calloc(1, sizeof *p);
  if (!p) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  int rc = mm_parse(params, env, &p->s, e);
  if (rc) goto fail;
  const json_t *va = json_object_get(params, "a"),
               *vb = json_object_get(params, "b"),
               *vc = json_object_get(params, "bias");
  if ((rc = arrayval_resolve(env, va, "params.a", p->s.dt, &p->a, e)) ||
      (rc = arrayval_resolve(env, vb, "params.b", p->s.dt, &p->b, e)))
    goto fail;
  if (p->s.has_bias &&
      (rc = arrayval_resolve(env, vc, "params.bias", p->s.dt, &p->bias, e)))
    goto fail;
  /* a {"file"} may have changed since its check (its pin says so first,
   * compute/array/localfile.h): nothing of another shape is read */
  if ((rc = arrayval_as_planned(&p->s.ia, p->a, "params.a", e)) ||
      (rc = arrayval_as_planned(&p->s.ib, p->b, "params.b", e)) ||
      (p->bias && (rc = arrayval_as_planned(&p->s.ic, p->bias, "params.bias",
                                            e))))
    goto fail;
  p->ids[0] = MM_KEEPS(p->s.ia.form) ? upload_id(va) : NULL;
  p->ids[1] = MM_KEEPS(p->s.ib.form) ? upload_id(vb) : NULL;
  p->ids[2] = p->s.has_bias && MM_KEEPS(p->s.ic.form) ? upload_id(vc) : NULL;
  *plan = p;
  return 0;
fail:
  mm_release(p);
  return rc;
}

/* ---- the tolerance --------------------------------------------------------- */

static double max_abs(const tarray *t) {
  double m = 0;
  for (int64_t i = 0; t && i < t->size; i++) {
    double x = fabs(tarray_get(t, i));
    if (!(x <= m)) m = x; /* NaN propagates */
  }
  return m;
}

static void mm_tolerance(const void *plan, double *rtol, double *atol) {
  const mm_plan *p = plan;
  const mm_spec *s = &p->s;
  double u = s->dt == T_F32 ? 0x1p-24 : 0x1p-53;
  /* max over rows of op(a) of sum |a_il| */
  double rowmax = 0;
  for (int64_t i = 0; i < s->m; i++) {
    double r = 0;
    for (int64_t l = 0; l < s->k; l++)
      r += fabs(tarray_get(p->a, s->ta ? l * s->m + i : i * s->k + l));
    if (!(r <= rowmax)) rowmax = r;
  }
  double scale = rowmax * max_abs(p->b) + max_abs(p->bias);
  *rtol = 4.0 * ((double)s->k + 2) * u;
  *atol = isfinite(scale) ? *rtol * scale : 0;
}

/* ---- run ------------------------------------------------------------------- */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }

typedef struct mm_task {
  const mm_plan *p;
  tarray *out;
  int by_cols;         /* panels of columns instead of rows */
  int64_t per, npanel; /* rows (or columns) per panel */
  job_ctx *ctx;
} mm_task;

/* C[r0:r1, c0:c1] = op(A)[r0:r1, :] @ op(B)[:, c0:c1] + bias. */
static void mm_block(const mm_plan *p, tarray *out, int64_t r0, int64_t r1,
                     int64_t c0, int64_t c1) {
  const mm_spec *s = &p->s;
  int64_t M = r1 - r0, N = c1 - c0, K = s->k;
  int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n, ldc = s->n;
  size_t aoff = (size_t)(s->ta ? r0 : r0 * lda);
  size_t boff = (size_t)(s->tb ? c0 * ldb : c0);
  size_t coff = (size_t)(r0 * ldc + c0);
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    for (int64_t i = r0; i < r1; i++)
      for (int64_t j = c0; j < c1; j++) tarray_set(out, i * ldc + j, 0);
  } else if (s->dt == T_F64) {
    cblas_dgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N,
                (blasint)K, 1.0, (const double *)p->a->data + aoff,
                (blasint)lda, (const double *)p->b->data + boff, (blasint)ldb,
                0.0, (double *)out->data + coff, (blasint)ldc);
  } else {
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N,
                (blasint)K, 1.0f, (const float *)p->a->data + aoff,
                (blasint)lda, (const float *)p->b->data + boff, (blasint)ldb,
                0.0f, (float *)out->data + coff, (blasint)ldc);
  }
  if (!p->bias) return;
  int64_t rs = s->bias_rs, cs = s->bias_cs;
  if (s->dt == T_F64) {
    const double *bv = p->bias->data;
    double *c = out->data;
    for (int64_t i = r0; i < r1; i++)
      for (int64_t j = c0; j < c1; j++) c[i * ldc + j] += bv[i * rs + j * cs];
  } else {
    const float *bv = p->bias->data;
    float *c = out->data;
    for (int64_t i = r0; i < r1; i++)
      for (int64_t j = c0; j < c1; j++) c[i * ldc + j] += bv[i * rs + j * cs];
  }
}

static void mm_panel(void *arg, int64_t chunk, int slot) {
  mm_task *t = arg;
  const mm_spec *s = &t->p->s;
  if (job_ctx_stopped(t->ctx)) return;
  int64_t lo = chunk * t->per, hi = lo + t->per;
  if (t->by_cols) {
    if (hi > s->n) hi = s->n;
    mm_block(t->p, t->out, 0, s->m, lo, hi);
  } else {
    if (hi > s->m) hi = s->m;
    mm_block(t->p, t->out, lo, hi, 0, s->n);
  }
  job_ctx_progress(t->ctx, 1);
}

/* Panels. Each panel's gemm packs the whole of op(B) (row panels) again,
 * so fewer panels cost less: one per thread while each stays under ~4
 * GFLOP (~0.1 s on a core), else enough of that size, rounded up to a
 * multiple of the thread count for balance, at least 32 rows each. */
static void mm_panels(const mm_spec *s, int threads, mm_task *t) {
  t->by_cols = s->n > s->m;
  int64_t len = t->by_cols ? s->n : s->m;
  double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
  double want = ceil(flops / 4e9);
  want = threads * ceil(fmax(want, threads) / threads);
  int64_t np = want > (double)len ? len : (int64_t)want;
  int64_t per = np > 0 ? (len + np - 1) / np : 1;
  if (per < 32) per = 32;
  t->per = per;
  t->npanel = len > 0 ? (len + per - 1) / per : 0;
}

static int alloc_out(job_ctx *ctx, const mm_spec *s, tarray **out, terr *e) {
  if (ctx->result_alloc)
    return ctx->result_alloc(ctx, s->dt, s->out_ndim, s->out_shape, out, e);
  *out = tarray_new(s->dt, s->out_ndim, s->out_shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "out of memory");
}

/* A 2-D view of a (never freed: data belongs to t). */
static tarray view2(const tarray *t, int64_t rows, int64_t cols) {
  tarray v = *t;
  v.ndim = 2;
  v.shape[0] = rows;
  v.shape[1] = cols;
  v.map_base = NULL;
  v.map_len = 0;
  v.map_prefault = 0;
  v.map_warm = 0;
  v.sink = NULL;
  return v;
}

/* The result's view keeps its mapping and prefault mark, so that
 * cuda_matmul populates a fresh result file's pages before the copy back
 * (compute/gpu/stage.cu): without them the gang's copies took every page
 * fault, 2.2 GB/s on an H200 host against ~40 GB/s into populated pages.
 * The view never unmaps: out owns the mapping. */
static tarray view2_out(const tarray *t, int64_t rows, int64_t cols) {
  tarray v = view2(t, rows, cols);
  v.map_base = t->map_base;
  v.map_len = t->map_len;
  v.map_prefault = t->map_prefault;
  /* A spare's pages (map_warm) are prefaulted anyway: here the prefault
   * runs while the GEMM computes, and the copy back then lands in mapped
   * pages (on the H200 host, 16384^2: d2h 62-78 ms prefaulted, 93-158 ms
   * taking its own faults after the GEMM). */
  v.map_warm = 0;
  return v;
}

static int mm_run_cuda(mm_plan *p, job_ctx *ctx, tarray *out, terr *e) {
  const mm_spec *s = &p->s;
  int64_t ka = s->ta ? s->m : s->k, kb = s->tb ? s->k : s->n;
  tarray va = view2(p->a, p->a->ndim == 2 ? p->a->shape[0] : 1, ka);
  tarray vb = view2(p->b, p->b->ndim == 2 ? p->b->shape[0] : s->k,
                    p->b->ndim == 2 ? kb : 1);
  tarray vo = view2_out(out, s->m, s->n), vc;
  if (p->bias)
    vc = view2(p->bias, s->bias_rs ? s->m : 1, s->bias_cs ? s->n : 1);
  const char *ids[3] = {p->ids[0], p->ids[1], p->ids[2]};
  if (mm_lanes_wanted(s->m, s->n, tdtype_size(s->dt)))
    return mm_lanes_run(ctx, &va, &vb, p->bias ? &vc : NULL, s->ta, s->tb, ids,
                        &vo, e);
  return gpu_matmul(ctx->device, &va, &vb, p->bias ? &vc : NULL, s->ta, s->tb,
                    ids, &vo, ctx, e);
}

static int mm_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                  terr *e) {
  mm_plan *p = plan;
  const mm_spec *s = &p->s;
  tarray *out = NULL;
  *result = NULL;
  pthread_once(&blas_once, blas_single);
  if (job_ctx_stopped(ctx)) return job_ctx_stop_code(ctx);
  int rc = alloc_out(ctx, s, &out, e);
  if (rc) return rc;
  atomic_store(&ctx->progress_done, 0);
  if (b == B_CUDA && (s->m == 0 || s->n == 0 || s->k == 0)) {
    /* zero-size: no GPU work (k = 0 is zeros + bias, on the host) */
    atomic_store(&ctx->progress_total, 1);
    mm_block(p, out, 0, s->m, 0, s->n);
    job_ctx_progress(ctx, 1);
  } else if (b == B_CUDA) {
    atomic_store(&ctx->progress_total, 1);
    rc = mm_run_cuda(p, ctx, out, e);
    if (rc == 0) atomic_store(&ctx->progress_done, 1);
  } else if (b == B_SERIAL || b == B_CPU) {
    mm_task t = {.p = p, .out = out, .ctx = ctx};
    mm_panels(s, b == B_SERIAL ? 1 : ctx->threads > 0 ? ctx->threads : 1, &t);
    atomic_store(&ctx->progress_total, t.npanel);
    double t0 = t_now_ms();
    if (ctx->pool && b == B_CPU) {
      pool_for(ctx->pool, ctx->threads > 0 ? ctx->threads : 1, t.npanel,
               mm_panel, &t, ctx->stop);
    } else {
      for (int64_t c = 0; c < t.npanel && !job_ctx_stopped(ctx); c++)
        mm_panel(&t, c, 0);
    }
    ctx->t_compute += t_now_ms() - t0;
    if (job_ctx_stopped(ctx)) rc = job_ctx_stop_code(ctx);
  } else {
    rc = terr_set(e, T_EINTERNAL, "backend", -1,
                  "matmul runs on serial, cpu or cuda, not backend %d", (int)b);
  }
  if (rc) {
    tarray_free(out);
    return rc;
  }
  *result = out;
  return 0;
}

extern const kind_cost kind_matmul_cost; /* cost.c */

const kind_ops kind_matmul_ops = {
    .name = "matmul",
    .rtol = 1e-6,
    .atol = 1e-9,
    .tolerance_doc =
        "|x - y| <= t (|y| + S), t = 4 (k + 2) u, S = max_i sum_l |a_il| * "
        "max |b| + max |bias|, u = 2^-53 (float64) or 2^-24 (float32): the "
        "rounding bound of a length-k dot product, for two summation orders",
    .check = mm_check,
    .prepare = mm_prepare,
    .run = mm_run,
    .release = mm_release,
    .tolerance = mm_tolerance,
    .cost = &kind_matmul_cost,
    .resident_result = 1,
};
