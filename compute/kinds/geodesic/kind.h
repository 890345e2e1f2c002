/* compute/kinds/geodesic/kind.h — private to the geodesic kind: the functions shared by
 * compute/kinds/geodesic/params.c (params -> plan), compute/kinds/geodesic/kind.c (the kind_ops and the
 * CPU tiles), compute/kinds/geodesic/gpu.c (the GPU entry) and their tests.
 *
 * Threads: check runs on an HTTP thread; prepare, run and release on a
 * scheduler worker; geod_cpu_run spreads tiles over the pool (see
 * compute/kinds/geodesic/kind.c). A plan is read-only once built.
 */
#ifndef TESSEL_KINDS_GEODESIC_KIND_H
#define TESSEL_KINDS_GEODESIC_KIND_H

#include "compute/kinds/geodesic/plan.h"
#include "compute/kinds/geodesic/query/query.h"
#include "compute/kinds/kinds.h"

/* The kind's plan (what prepare returns and run, release take): the pair
 * plan, shared with the GPU code and free of any query, and the query
 * (type GEOQ_NONE: the matrix). */
typedef struct geod_job {
  geod_plan *pl;
  geoq q;
} geod_job;

/* Nominal single-thread cost of one pair, in nanoseconds (2-core EPYC
 * build host, Release), reported as job_estimate.ops_per_elem so that the
 * router can weigh `work` (pairs) by method. */
#define GEOD_COST_KARNEY_NS 630.0
#define GEOD_COST_VINCENTY_NS 310.0
#define GEOD_COST_HAVERSINE_NS 27.0
double geod_method_cost_ns(geod_method m);

/* The kind's cost-model terms and its split (compute/kinds/geodesic/cost.c). */
extern const kind_cost kind_geodesic_cost;
int geod_split(const json_t *params, const job_estimate *est, kind_split *sp);

/* Submit-time check: options, shapes, the estimate; values when the
 * inputs are small (see compute/kinds/geodesic/params.c). */
int geod_params_check(const json_t *params, const tenv *env,
                      job_estimate *est, terr *e);
/* Run-time: resolve, validate every value, prepare. *out owned by the
 * caller (geod_plan_free); *q the query (GEOQ_NONE without one). */
int geod_params_prepare(const json_t *params, const tenv *env,
                        geod_plan **out, geoq *q, terr *e);
/* An n x 2 array of finite (lat, lon) with lat in [-90, 90]: 0, or
 * T_EINVAL naming `field` and the row (position); tenv_stop_error's code
 * once env's stop flag is set (env may be NULL). */
int geod_points_validate(const tarray *a, const char *field, const tenv *env,
                         terr *e);

/* Fill `out` (shape and dtype of the plan) on `width` CPU threads of
 * ctx->pool (width 1, or no pool: the calling thread alone), tile by tile.
 * Progress: adds the tile count to ctx->progress_total and one per finished
 * tile to progress_done. Stops between tiles when ctx->stop is set
 * (returns job_ctx_stop_code). *nonconv: Vincenty pairs that did not
 * converge. */
int geod_cpu_run(const geod_plan *pl, int width, tarray *out, job_ctx *ctx,
                 int64_t *nonconv, terr *e);
/* Distances from p to q[0 .. len) in output units into buf (float64, not
 * yet rounded to the dtype): the matrix tiles' inner loop, which the
 * queries call too so that their distances are the matrix's to the bit. */
void geod_row_compute(const geod_plan *pl, const geod_point *p,
                      const geod_point *q, int64_t len, double *buf,
                      long long *nonconv);

/* Query q of plan pl on `width` CPU threads of ctx->pool (width 1, or no
 * pool: the calling thread alone), without the matrix
 * (compute/kinds/geodesic/query/query_cpu.c; compute/kinds/geodesic/query/query.h says what each
 * query computes). The parts into *out (ctx->result_alloc; the caller's on
 * 0, freed on failure). Progress by tile (adds to ctx->progress_total);
 * stops between tiles (job_ctx_stop_code); radius beyond max_pairs:
 * T_ENOSPACE naming params.query.radius.max_pairs. *nonconv: the
 * evaluated Vincenty pairs that did not converge. */
int geoq_cpu_run(const geod_plan *pl, const geoq *q, int width, job_ctx *ctx,
                 geoq_out *out, int64_t *nonconv, terr *e);

#endif
