/* kinds/geodesic/kind.c — the geodesic job kind (API.md): its kind_ops.
 *
 * check and prepare are kinds/geodesic/params.c (params -> estimate, params ->
 * plan); run allocates the result with ctx->result_alloc and fills it on
 * the CPU (kinds/geodesic/cpu.c: tiles over the pool, or one thread for serial)
 * or on a GPU (gpu_geodesic); release frees the plan. Vincenty's
 * non-converged pairs (NaN in the result) are counted into
 * ctx->nonconverged and logged.
 *
 * Threads: check on an HTTP thread; prepare, run, release on a scheduler
 * worker (run may be called once per backend on the same plan, "compare").
 */
#include "kinds/geodesic/gpu.h"
#include "kinds/geodesic/kind.h"
#include "util/util.h"

/* ---- kind_ops -------------------------------------------------------- */

static int geod_check(const json_t *params, const tenv *env, job_estimate *est,
                      terr *e) {
  return geod_params_check(params, env, est, e);
}

static int geod_prepare(const json_t *params, const tenv *env, void **plan,
                        terr *e) {
  geod_plan *pl = NULL;
  int rc = geod_params_prepare(params, env, &pl, e);
  *plan = pl;
  return rc;
}

static int geod_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                    terr *e) {
  const geod_plan *pl = plan;
  tarray *out = NULL;
  int64_t nonconv = 0;
  *result = NULL;
  int rc = ctx->result_alloc(ctx, pl->dtype, pl->ndim, pl->shape, &out, e);
  if (rc) return rc;
  double t0 = t_now_ms();
  if (out->size == 0) {
    /* no pair: nothing to compute on any backend */
  } else if (b == B_CUDA) {
    rc = gpu_geodesic(ctx->device, pl, out, ctx, &nonconv, e);
  } else {
    int width = b == B_SERIAL ? 1 : ctx->threads;
    rc = geod_cpu_run(pl, width, out, ctx, &nonconv, e);
    ctx->t_compute += t_now_ms() - t0;
  }
  ctx->nonconverged = nonconv;
  if (rc) {
    tarray_free(out);
    return rc;
  }
  if (nonconv > 0)
    log_warn("job %s: vincenty did not converge for %lld pair(s) (NaN)",
             ctx->job_id ? ctx->job_id : "?", (long long)nonconv);
  *result = out;
  return 0;
}

static void geod_release(void *plan) { geod_plan_free(plan); }

/* A matrix of the points against themselves (no targets) is symmetric: it
 * is stored as params.layout asks ("square" by default) and may be sent in
 * the other layout. Pairs, cross matrices: one layout. */
static const char *geod_result_layout(const json_t *params) {
  json_t *targets = json_object_get(params, "targets");
  if (targets && !json_is_null(targets)) return NULL;
  const char *l = json_string_value(json_object_get(params, "layout"));
  return l && strcmp(l, "condensed") == 0 ? "condensed" : "square";
}

const kind_ops kind_geodesic_ops = {
    .kind = K_GEODESIC,
    .name = "geodesic",
    /* CPU (no FMA) and GPU (FMA, CUDA libm) solve to round-off: float64
     * results agree to ~1e-15 relative; float32 results may round to
     * neighbouring floats (6e-8 relative), which sets rtol. Vincenty's NaNs
     * are equal NaNs. */
    .rtol = 2.5e-7,
    .atol = 1e-9,
    .tolerance_doc = "|a - b| <= 1e-9 + 2.5e-7 |b| in the output unit: "
                     "both backends solve to round-off; float32 output "
                     "rounds once",
    .check = geod_check,
    .prepare = geod_prepare,
    .run = geod_run,
    .release = geod_release,
    .result_layout = geod_result_layout,
};
