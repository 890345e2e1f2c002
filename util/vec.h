/* vec.h — the one vector idiom (after h2o's H2O_VECTOR and
 * h2o_vector_reserve): an array that grows by doubling, through one
 * overflow-checked growth routine.
 *
 *   TVEC(job *) jobs = {0};
 *   if (tvec_push(&jobs, j)) ... T_ENOMEM ...
 *   for (size_t i = 0; i < jobs.n; i++) ... jobs.v[i] ...
 *   free(jobs.v);
 *
 * A struct of its own ({T *v; size_t n, cap;}) may use tvec_reserve too,
 * as long as its fields have those names and types.
 *
 * Ownership: the vector owns v (free it); elements are the caller's
 * business. Threads: a vector is used by one thread at a time (or under its
 * owner's lock).
 */
#ifndef TESSEL_UTIL_VEC_H
#define TESSEL_UTIL_VEC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TVEC(T) \
  struct {      \
    T *v;       \
    size_t n, cap; \
  }

/* Room for `need` elements of `elem` bytes in *(T **)pv, whose capacity is
 * *cap: the capacity doubles (from 16, or `need` when larger) up to `max`
 * elements (0: only what size_t can count). 0, or T_ENOMEM / T_ETOOLARGE
 * (util/err.h) with *pv and *cap unchanged. */
int tvec_grow(void *pv, size_t *cap, size_t elem, size_t need, size_t max);

#define tvec_reserve(vec, need) \
  tvec_grow(&(vec)->v, &(vec)->cap, sizeof *(vec)->v, (need), 0)
/* Append x: 0, or T_ENOMEM (the vector unchanged). */
#define tvec_push(vec, x)                                   \
  (tvec_reserve((vec), (vec)->n + 1) ? T_ENOMEM             \
                                     : ((vec)->v[(vec)->n++] = (x), 0))

#ifdef __cplusplus
}
#endif

#endif
