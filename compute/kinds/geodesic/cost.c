/* compute/kinds/geodesic/cost.c — the geodesic kind's part of the cost
 * model and of the split service (kinds.h: kind_cost, kind_split).
 *
 * Cost. Work is point pairs; the check gives a pair's cost in ns on its
 * build host (job_estimate.ops_per_elem: Karney 630, Vincenty 310,
 * haversine 27; kind.h), where one thread runs the expression VM at about
 * GEOD_REF_VM instructions/s (the calibration's figure there: 1.8-2.6e9).
 * So on this machine a pair costs ops_per_elem * GEOD_REF_VM * 1e-9 VM
 * instructions' time (Karney: ~1450), on the pool that over the threads
 * as well as the VM's work scales (kind_machine.par_eff); on a GPU
 * GEOD_GPU_OPS fused-kernel operations for Karney, in proportion for the
 * others, plus the result's bytes through device memory. The cost
 * model's corrections from recorded timings absorb the rest.
 *
 * Split. A matrix, or a query knn / rowwise (a radius query's parts are
 * not rows), runs as row tiles (compute/sched/split.c): rows are the
 * points (est.size), a row costs the targets' count for a matrix with
 * targets, else n (a query's targets are not in the estimate); a matrix
 * without targets cuts bands of equal pairs of its upper triangle (tri)
 * and joins by mirroring (square) or concatenating (condensed) the tiles'
 * upper parts (geod_plan_upper); a query without targets runs its bands
 * on the CPU only (the CUDA query engine takes no band).
 *
 * Pure functions, any thread.
 */
#include <math.h>
#include <string.h>

#include "compute/kinds/geodesic/kind.h"

#define GEOD_REF_VM 2.3e9
#define GEOD_GPU_OPS 2000.0

/* A pair's ns on the build host; Karney's when the estimate gives none. */
static double pair_ns(const job_estimate *est) {
  return est->ops_per_elem > 0 && isfinite(est->ops_per_elem)
             ? est->ops_per_elem
             : GEOD_COST_KARNEY_NS;
}

static double pairs(const job_estimate *est) {
  return est->work > 0 && isfinite(est->work) ? est->work : 0;
}

static double geod_cpu_s(const job_estimate *est, int all,
                         const kind_machine *m) {
  double per = m->vm_1 / (pair_ns(est) * GEOD_REF_VM * 1e-9);
  double par = per * (m->threads > 0 ? m->threads : 1) * m->par_eff;
  return pairs(est) / kind_rate_or_tiny(all ? par : per);
}

static double geod_gpu_s(const job_estimate *est, double bytes, double out,
                         const kind_machine *m) {
  return pairs(est) * GEOD_GPU_OPS * (pair_ns(est) / GEOD_COST_KARNEY_NS) /
             kind_rate_or_tiny(m->gpu_ops) +
         out / kind_rate_or_tiny(m->dev_bw);
}

const kind_cost kind_geodesic_cost = {
    .unit = "pairs",
    .size_words = "points",
    .unit_ns = 400.0, /* a Karney inverse on one core */
    .cpu_s = geod_cpu_s,
    .gpu_s = geod_gpu_s,
};

int geod_split(const json_t *params, const job_estimate *est, kind_split *sp) {
  memset(sp, 0, sizeof *sp);
  json_t *t = json_object_get(params, "targets");
  int targets = t && !json_is_null(t);
  json_t *q = json_object_get(params, "query");
  int query = q && !json_is_null(q);
  if (query && !json_object_get(q, "knn") && !json_object_get(q, "rowwise"))
    return 0; /* radius: its parts are not rows */
  sp->cols = (double)est->size;
  if (!query && targets) sp->cols = (double)est->out_shape[1];
  sp->cpu_only = query && !targets;
  if (!query && !targets) {
    const char *l = json_string_value(json_object_get(params, "layout"));
    sp->tri = 1;
    sp->join = l && strcmp(l, "condensed") == 0 ? KIND_JOIN_CONDENSED
                                                : KIND_JOIN_SQUARE;
  }
  return 1;
}
