/* gpu_test_util.h — shared helpers of the GPU tests (tests/gpu/): random
 * non-zero arrays, NaN-poisoned outputs, a job context, relative error.
 * Each test program includes it once (static functions). */
#ifndef TESSEL_TESTS_GPU_UTIL_H
#define TESSEL_TESTS_GPU_UTIL_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/kinds.h"
#include "compute/array/tarray.h"

/* SplitMix64: reproducible streams without global state. */
static inline uint64_t tu_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi), never exactly 0. */
static inline double tu_uniform(uint64_t *s, double lo, double hi) {
  for (;;) {
    double u = (double)(tu_next(s) >> 11) * 0x1.0p-53;
    double v = lo + (hi - lo) * u;
    if (v != 0.0) return v;
  }
}

static inline tarray *tu_random(tdtype dt, int ndim, const int64_t *shape,
                         uint64_t seed, double lo, double hi) {
  tarray *a = tarray_new(dt, ndim, shape);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (int64_t i = 0; a && i < a->size; i++)
    tarray_set(a, i, tu_uniform(&s, lo, hi));
  return a;
}

/* Every element NaN, so that an unwritten element cannot pass. */
static inline tarray *tu_poisoned(tdtype dt, int ndim, const int64_t *shape) {
  tarray *a = tarray_new(dt, ndim, shape);
  for (int64_t i = 0; a && i < a->size; i++) tarray_set(a, i, NAN);
  return a;
}

typedef struct tu_job {
  job_ctx ctx;
  atomic_int stop;
} tu_job;

/* A job_ctx.result_alloc for tests: the parts poisoned (NaN, -7 in an
 * int64 part) so that an element nobody wrote shows. */
static inline int tu_alloc_poison(job_ctx *ctx, tdtype dt, int ndim,
                                  const int64_t *shape, tarray **out,
                                  terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  for (int64_t i = 0; i < (*out)->size; i++)
    tarray_set(*out, i, dt == T_I64 ? -7 : NAN);
  return 0;
}

static inline void tu_job_init(tu_job *j, int dev) {
  memset(j, 0, sizeof *j);
  atomic_init(&j->stop, 0);
  j->ctx.job_id = "j_test";
  j->ctx.device = dev;
  j->ctx.threads = 1;
  j->ctx.stop = &j->stop;
}

/* max |a-b| / max(|b|, floor) over all elements; NaN anywhere in a where b
 * is not NaN gives +inf. */
static inline double tu_max_rel(const tarray *a, const tarray *b, double floor) {
  double worst = 0;
  if (!a || !b || a->size != b->size) return INFINITY;
  for (int64_t i = 0; i < a->size; i++) {
    double x = tarray_get(a, i), y = tarray_get(b, i);
    if (isnan(y) && isnan(x)) continue;
    if (isnan(x) != isnan(y)) return INFINITY;
    if (isinf(y) || isinf(x)) {
      if (x != y) return INFINITY;
      continue;
    }
    double d = fabs(x - y) / fmax(fabs(y), floor);
    if (d > worst) worst = d;
  }
  return worst;
}

#endif
