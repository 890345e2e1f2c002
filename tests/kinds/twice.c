/* twice.c — the test kind "twice" (twice.h): params {"n": rows (1 ..
 * 10^7), "scale": a number (default 1)}; the result is float64 [n, 2],
 * row i = (i scale, 2 i scale), the same bits on every backend.
 *
 * Its contract, each part through kind_ops: check (unknown keys and bad
 * values refused naming the field; the estimate: n rows, 2n cells of work,
 * 16n bytes out), prepare/run/release on serial and cpu (a pool of
 * threads over row blocks) and cuda (it has no device code: the run on
 * the host, so that auto and compare on a GPU node see it run on every
 * backend as the built-in kinds do), an exact
 * tolerance for compare, a cost (cells at its own calibrated rate
 * "twice_rows_1", which its calibrate sets to TWICE_RATE), and a split
 * into row tiles joined by concatenation (a tile computes rows [row0,
 * row1) of the whole, bit for bit).
 *
 * Threads as kinds.h says: check on an HTTP thread, the rest on a worker,
 * the row blocks on the pool's threads (each writes its own rows).
 */
#include "kinds/twice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/pool.h"

typedef struct twice_plan {
  int64_t n;
  double scale;
} twice_plan;

static int twice_parse(const json_t *params, twice_plan *p, terr *e) {
  static const char *const keys[] = {"n", "scale", NULL};
  if (!json_is_object(params))
    return terr_set(e, T_EINVAL, "params", -1, "must be an object");
  const char *bad = kind_params_unknown_key(params, keys);
  if (bad) return terr_set(e, T_EINVAL, "params", -1, "unknown key '%s'", bad);
  json_t *n = json_object_get(params, "n"),
         *s = json_object_get(params, "scale");
  if (!json_is_integer(n) || json_integer_value(n) < 1 ||
      json_integer_value(n) > 10000000)
    return terr_set(e, T_EINVAL, "params.n", -1,
                    "required: an integer from 1 to 10000000");
  if (s && !json_is_number(s))
    return terr_set(e, T_EINVAL, "params.scale", -1, "must be a number");
  p->n = json_integer_value(n);
  p->scale = s ? json_number_value(s) : 1.0;
  return 0;
}

static int twice_check(const json_t *params, const tenv *env, job_estimate *est,
                       terr *e) {
  twice_plan p;
  int rc = twice_parse(params, &p, e);
  if (rc) return rc;
  est->out_dtype = T_F64;
  est->out_ndim = 2;
  est->out_shape[0] = p.n;
  est->out_shape[1] = 2;
  est->work = 2.0 * (double)p.n;
  est->size = p.n;
  rc = kind_result_check(env, est, e);
  est->mem_bytes = est->out_bytes;
  return rc;
}

static int twice_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  twice_plan p, *q;
  *plan = NULL;
  int rc = twice_parse(params, &p, e);
  if (rc) return rc;
  if (!(q = malloc(sizeof *q)))
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  *q = p;
  *plan = q;
  return 0;
}

#define TWICE_BLOCK 4096 /* rows a pool chunk fills */

typedef struct twice_fill {
  const twice_plan *p;
  int64_t row0, rows;
  double *out;
} twice_fill;

/* Rows [chunk x TWICE_BLOCK, ...) of the run's result. */
static void fill_rows(void *ud, int64_t chunk, int slot) {
  const twice_fill *f = ud;
  int64_t lo = chunk * TWICE_BLOCK, hi = lo + TWICE_BLOCK;
  if (hi > f->rows) hi = f->rows;
  for (int64_t i = lo; i < hi; i++) {
    double r = (double)(f->row0 + i);
    f->out[2 * i] = r * f->p->scale;
    f->out[2 * i + 1] = 2 * r * f->p->scale;
  }
}

static int twice_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                     terr *e) {
  const twice_plan *p = plan;
  *result = NULL;
  if (b != B_SERIAL && b != B_CPU && b != B_CUDA)
    return terr_set(e, T_EINVAL, "backend", -1,
                    "kind twice runs on serial, cpu or cuda, not backend %d",
                    (int)b);
  int64_t r0 = ctx->row1 > 0 ? ctx->row0 : 0,
          r1 = ctx->row1 > 0 ? ctx->row1 : p->n;
  int64_t shape[2] = {r1 - r0, 2};
  tarray *out = NULL;
  int rc = ctx->result_alloc(ctx, T_F64, 2, shape, &out, e);
  if (rc) return rc;
  twice_fill f = {p, r0, shape[0], out->data};
  int64_t chunks = (shape[0] + TWICE_BLOCK - 1) / TWICE_BLOCK;
  ctx->progress_total = 1;
  if (b == B_CPU && ctx->pool && ctx->threads > 1)
    pool_for(ctx->pool, ctx->threads, chunks, fill_rows, &f, ctx->stop);
  else
    for (int64_t c = 0; c < chunks && !job_ctx_stopped(ctx); c++)
      fill_rows(&f, c, 0);
  if (job_ctx_stopped(ctx)) {
    tarray_free(out);
    return job_ctx_stop_code(ctx);
  }
  job_ctx_progress(ctx, 1);
  *result = out;
  return 0;
}

static void twice_release(void *plan) {
  free(plan);
}

/* ---- its cost: cells at its own rate ----------------------------------- */

static double twice_cpu_s(const job_estimate *est, int all,
                          const kind_machine *m) {
  double per = m->rate[0];
  double par = per * (m->threads > 0 ? m->threads : 1) * m->par_eff;
  return (est->work > 0 ? est->work : 0) / kind_rate_or_tiny(all ? par : per);
}

static double twice_gpu_s(const job_estimate *est, double bytes, double out,
                          const kind_machine *m) {
  return bytes / kind_rate_or_tiny(m->dev_bw);
}

static void twice_calibrate(double *rate, int threads, int gpus) {
  rate[0] = TWICE_RATE;
}

static const kind_rate twice_rates[] = {{"twice_rows_1", 0}};

static const kind_cost twice_cost = {
    .unit = "cells",
    .size_words = "rows",
    .unit_ns = 2.0,
    .cpu_s = twice_cpu_s,
    .gpu_s = twice_gpu_s,
    .rates = twice_rates,
    .nrates = 1,
    .calibrate = twice_calibrate,
};

/* ---- its split: rows, concatenated ------------------------------------- */

static int twice_split(const json_t *params, const job_estimate *est,
                       kind_split *sp) {
  memset(sp, 0, sizeof *sp);
  sp->cols = 2;
  sp->join = KIND_JOIN_ROWS;
  return 1;
}

const kind_ops test_kind_twice = {
    .name = "twice",
    .rtol = 0,
    .atol = 0,
    .tolerance_doc = "exact: every backend computes the same products",
    .check = twice_check,
    .prepare = twice_prepare,
    .run = twice_run,
    .release = twice_release,
    .cost = &twice_cost,
    .split = twice_split,
};
