/* compute/kinds/geodesic/query/query.h — geodesic queries without the n x m matrix: the k
 * nearest neighbours of each point, every pair within a radius, and one
 * value per point over all targets (API.md, "params.query"). The interface
 * between the params (compute/kinds/geodesic/params.c), the kind's run
 * (compute/kinds/geodesic/kind.c) and the two engines: the CPU one
 * (compute/kinds/geodesic/query/query_cpu.c, tiles over the pool) and the CUDA one
 * (compute/kinds/geodesic/query/query.cu behind compute/kinds/geodesic/query/query_gpu.c).
 *
 * The contract both engines keep — results identical to brute force over
 * the matrix the same plan and backend would compute:
 *   d(i, j) is the matrix element: with targets geod_plan_pair(p[i], q[j]);
 *   without targets geod_plan_pair(p[min(i,j)], p[max(i,j)]) (the matrix is
 *   built from its upper triangle and mirrored), then rounded to the plan's
 *   dtype (float32 results rank and compare by the rounded values). A
 *   point is never its own neighbour (j != i without targets); a duplicate
 *   at distance 0 is. NaN (Vincenty's non-converged pairs, counted in
 *   *nonconv) ranks after every number and is never "within" r.
 *   knn      for each point i, the k_eff = min(k, candidates) candidates j
 *            with the smallest (d(i, j), j): parts "distance" [n, k_eff]
 *            (plan dtype) and "index" [n, k_eff] (int64), row i ascending.
 *            candidates = m with targets, n - 1 without.
 *   radius   every pair with d(i, j) <= r: without targets i < j, each
 *            pair once; sorted by (i, j): parts "i", "j" (int64, [P]) and
 *            "distance" (plan dtype, [P]). More than max_pairs pairs:
 *            T_ENOSPACE ("resource_exhausted") naming params.query.radius
 *            .max_pairs with the count reached (at least max_pairs + 1).
 *   rowwise  one value per point over its candidates (those with
 *            d(i, j) <= within when within is set), NaN pairs left out:
 *            min, max (plan dtype; NaN when there is none), argmin, argmax
 *            (int64, the smallest j among equal values; -1 when none), sum
 *            (plan dtype; 0 when none), mean (plan dtype; NaN when none),
 *            count (int64). sum and mean add the dtype-rounded values in
 *            double, in increasing j on the CPU (bit-identical to a
 *            sequential sum of the matrix row), in a tree on the GPU (equal
 *            to round-off: compare's tolerance), and round once to dtype.
 *            One part, unnamed (the job's result as for a matrix).
 *
 * Pruning (the argument, stated once here and relied on by both engines):
 * every method's distance is the length of a curve on a surface in space
 * (the ellipsoid (a, f), or the sphere of radius_m for haversine), and no
 * curve between two points is shorter than the straight segment between
 * them, so chord(i, j) = |X_i - X_j| (Earth-centred Cartesian coordinates
 * on that surface) <= d(i, j) in metres. A candidate, or a box of
 * candidates whose nearest point to X_i is farther than a bound B (metres)
 * in chord, cannot have d <= B. Floating point bends both sides a little —
 * the chord's rounding (~1e-9 m), the solvers' error (Karney ~15 nm;
 * Vincenty truncates its series, worst at |f| = 1/50), float32 rounding
 * (6e-8 relative) — so the engines discard only when
 *     chord > B * (1 + GEOQ_PRUNE_REL) + GEOQ_PRUNE_ABS_M,
 * which costs a few extra candidates and never drops a true one.
 *
 * Threads: the engines run on the scheduler worker that runs the job (the
 * CPU one spreads over ctx->pool), allocate their parts with
 * ctx->result_alloc (from the calling thread only), stop between tiles
 * when job_ctx_stopped(ctx) and report progress by tile.
 */
#ifndef TESSEL_KINDS_GEODESIC_QUERY_H
#define TESSEL_KINDS_GEODESIC_QUERY_H

#include <stdint.h>

#include "compute/kinds/geodesic/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GEOQ_PRUNE_REL 1e-4
#define GEOQ_PRUNE_ABS_M 1e-3
/* A radius query's max_pairs when the job gives none: at most this (2.4 GB
 * of parts), and no more than --max-result allows. */
#define GEOQ_DEFAULT_MAX_PAIRS ((int64_t)100000000)
/* The largest k a knn query takes (params.query.knn.k). */
#define GEOQ_MAX_K 1024

typedef enum { GEOQ_NONE = 0, GEOQ_KNN, GEOQ_RADIUS, GEOQ_ROWWISE } geoq_type;

typedef enum {
  GEOQ_MIN = 0,
  GEOQ_ARGMIN,
  GEOQ_MAX,
  GEOQ_ARGMAX,
  GEOQ_MEAN,
  GEOQ_SUM,
  GEOQ_COUNT
} geoq_op;

/* A query, checked (params.c). Immutable once built. */
typedef struct geoq {
  geoq_type type;
  int64_t k;         /* knn: 1 .. GEOQ_MAX_K (k_eff may be smaller) */
  double r;          /* radius: r >= 0, in output units */
  int64_t max_pairs; /* radius: the cap on P */
  geoq_op op;        /* rowwise */
  int has_within;    /* rowwise: only candidates with d <= within */
  double within;     /* rowwise: >= 0, in output units */
} geoq;

/* What a query run produced: its parts in order (knn: distance, index;
 * radius: i, j, distance; rowwise: one, name NULL), each allocated with
 * ctx->result_alloc and owned by the caller once the run returns 0 (freed
 * by the engine on failure). */
#define GEOQ_MAX_PARTS 3
typedef struct geoq_out {
  int nparts;
  tarray *part[GEOQ_MAX_PARTS];
  const char *name[GEOQ_MAX_PARTS]; /* static strings */
} geoq_out;

/* Candidates per point: m with targets, n - 1 without (0 when n <= 1). */
static inline int64_t geoq_candidates(const geod_plan *pl) {
  return pl->has_targets ? pl->m : (pl->n > 1 ? pl->n - 1 : 0);
}
static inline int64_t geoq_knn_k(const geod_plan *pl, const geoq *q) {
  int64_t c = geoq_candidates(pl);
  return q->k < c ? q->k : c;
}
/* The dtype of a rowwise op's result. */
static inline tdtype geoq_rowwise_dtype(const geod_plan *pl, geoq_op op) {
  return op == GEOQ_ARGMIN || op == GEOQ_ARGMAX || op == GEOQ_COUNT ? T_I64
                                                                     : pl->dtype;
}

#ifdef __cplusplus
}
#endif

#endif
