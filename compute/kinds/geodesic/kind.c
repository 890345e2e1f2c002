/* compute/kinds/geodesic/kind.c — the geodesic job kind (API.md): its kind_ops.
 *
 * check and prepare are compute/kinds/geodesic/params.c (params -> estimate, params ->
 * plan: a geod_job, the pair plan and the query); run allocates the result
 * with ctx->result_alloc and fills it on the CPU (compute/kinds/geodesic/cpu.c:
 * tiles over the pool, or one thread for serial) or on a GPU
 * (gpu_geodesic); release frees the plan. Vincenty's non-converged pairs
 * (NaN in the result) are counted into ctx->nonconverged and logged.
 *
 * With params.query (compute/kinds/geodesic/query/query.h) there is no matrix: run hands
 * the query to compute/kinds/geodesic/query/query_cpu.c (serial, cpu) or gpu_geoq (cuda)
 * and returns the first part as the result, naming every part with
 * ctx->result_part (0, then 1, 2, ...). A context without result_part can
 * take a one-part query (rowwise) only: more parts fail T_EINTERNAL.
 *
 * A tile of a split job (ctx->row1 > 0) runs geod_plan_rows's plan for
 * rows [row0, row1) instead of the whole one (plan.h): with targets the
 * rows' points against every target, without a band that keeps the whole
 * matrix's pair order; the result is those rows of the whole result, bit
 * for bit, on every backend — except a query without targets on CUDA (the
 * query engine takes no band yet): refused, and never split so. A square
 * matrix without targets computes only its rows' upper part
 * (geod_plan_upper: columns row0 .. n - 1), which the split job's join
 * mirrors into the whole matrix.
 *
 * A big matrix on cuda with other GPUs in the process runs over every one
 * the scheduler lends, a lane (thread) each, by blocks of rows
 * (geod_mgpu, compute/kinds/geodesic/gpu.h); ctx->spread then names them.
 *
 * Threads: check on an HTTP thread; prepare, run, release on a scheduler
 * worker (run may be called once per backend on the same plan, "compare").
 */
#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/geodesic/kind.h"
#include "compute/kinds/geodesic/query/query_gpu.h"
#include "util/util.h"

/* ---- kind_ops -------------------------------------------------------- */

static int geod_check(const json_t *params, const tenv *env, job_estimate *est,
                      terr *e) {
  return geod_params_check(params, env, est, e);
}

static int geod_prepare(const json_t *params, const tenv *env, void **plan,
                        terr *e) {
  *plan = NULL;
  geod_job *job = calloc(1, sizeof *job);
  if (!job) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  int rc = geod_params_prepare(params, env, &job->pl, &job->q, e);
  if (rc) {
    free(job);
    return rc;
  }
  *plan = job;
  return 0;
}

/* A query's run: the engine's parts, the first as *result and all named
 * through ctx->result_part. */
static int geoq_run(const geod_job *job, const geod_plan *pl, tbackend b,
                    job_ctx *ctx, tarray **result, terr *e) {
  geoq_out out;
  int64_t nonconv = 0;
  int rc;
  memset(&out, 0, sizeof out);
  double t0 = t_now_ms();
  if (b == B_CUDA && pl->row1 > 0) {
    /* The CUDA query engine takes no band yet (compute/sched/split.c splits such
     * a query only on serial and cpu): never a wrong row. */
    return terr_set(e, T_EUNAVAIL, "backend", -1,
                    "a query without targets cannot run as a tile on CUDA");
  } else if (b == B_CUDA) {
    rc = gpu_geoq(ctx->device, pl, &job->q, ctx, &out, &nonconv, e);
  } else {
    int width = b == B_SERIAL ? 1 : ctx->threads;
    rc = geoq_cpu_run(pl, &job->q, width, ctx, &out, &nonconv, e);
    ctx->t_compute += t_now_ms() - t0;
  }
  ctx->nonconverged = nonconv;
  if (!rc && out.nparts > 1 && !ctx->result_part)
    rc = terr_set(e, T_EINTERNAL, "params.query", -1,
                  "this service cannot store a result of %d parts",
                  out.nparts);
  int p = 0;
  if (!rc && ctx->result_part && out.name[0])
    for (; p < out.nparts && !rc; p++)
      rc = ctx->result_part(ctx, p, out.name[p], out.part[p], e);
  if (rc) {
    /* parts handed to result_part (1 ..) are the scheduler's now */
    tarray_free(out.part[0]);
    for (int q = p > 1 ? p : 1; q < out.nparts; q++) tarray_free(out.part[q]);
    return rc;
  }
  if (nonconv > 0)
    log_warn("job %s: vincenty did not converge for %lld pair(s) (NaN)",
             ctx->job_id ? ctx->job_id : "?", (long long)nonconv);
  *result = out.part[0];
  return 0;
}

static int geod_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                    terr *e) {
  const geod_job *job = plan;
  const geod_plan *pl = job->pl;
  geod_plan band;
  *result = NULL;
  if (ctx->row1 > 0) { /* a tile of a split job */
    if (job->q.type == GEOQ_RADIUS)
      return terr_set(e, T_EINVAL, "params.query", -1,
                      "a radius query cannot be split into rows");
    /* a square matrix without targets: the rows' upper part only (its
     * join mirrors the rest, compute/sched/split.c); else the rows themselves */
    int upper = job->q.type == GEOQ_NONE && !pl->has_targets && !pl->condensed;
    int rc = upper ? geod_plan_upper(job->pl, ctx->row0, ctx->row1, &band, e)
                   : geod_plan_rows(job->pl, ctx->row0, ctx->row1, &band, e);
    if (rc) return rc;
    pl = &band;
  }
  if (job->q.type != GEOQ_NONE) return geoq_run(job, pl, b, ctx, result, e);
  tarray *out = NULL;
  int64_t nonconv = 0;
  int rc = ctx->result_alloc(ctx, pl->dtype, pl->ndim, pl->shape, &out, e);
  if (rc) return rc;
  double t0 = t_now_ms();
  if (out->size == 0) {
    /* no pair: nothing to compute on any backend */
  } else if (b == B_CUDA && geod_mgpu_wants(pl, ctx)) {
    rc = geod_mgpu(pl, out, ctx, &nonconv, e); /* every lent GPU's lane */
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

static void geod_release(void *plan) {
  geod_job *job = plan;
  if (!job) return;
  geod_plan_free(job->pl);
  free(job);
}

/* A matrix of the points against themselves (no targets) is symmetric: it
 * is stored as params.layout asks ("square" by default) and may be sent in
 * the other layout. Pairs, cross matrices, queries: one layout. */
static const char *geod_result_layout(const json_t *params) {
  json_t *query = json_object_get(params, "query");
  if (query && !json_is_null(query)) return NULL; /* parts, no matrix */
  json_t *targets = json_object_get(params, "targets");
  if (targets && !json_is_null(targets)) return NULL;
  const char *l = json_string_value(json_object_get(params, "layout"));
  return l && strcmp(l, "condensed") == 0 ? "condensed" : "square";
}

/* A knn's "distance" and "index", a radius query's "i", "j", "distance"
 * (query/query.h). */
static const char *const geod_parts[] = {"distance", "index", "i", "j", NULL};

const kind_ops kind_geodesic_ops = {
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
    .cost = &kind_geodesic_cost,
    .split = geod_split,
    .parts = geod_parts,
};
