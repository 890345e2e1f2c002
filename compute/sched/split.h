/* compute/sched/split.h — what the split service's own files share
 * (split.c: which jobs split, the coordinator; split_join.c: the join of
 * the tiles' results). Nothing outside the split service includes it;
 * what the rest of the scheduler calls is in sched_int.h. */
#ifndef TESSEL_SCHED_SPLIT_H
#define TESSEL_SCHED_SPLIT_H

#include "compute/sched/sched_int.h"

#define SPLIT_PATH_MAX 4200

/* Pairs of rows [0, r) of a triangle whose row i has n - i: r n - r (r -
 * 1) / 2, times the tiles (no overflow: n < 2^62 / ... in 128 bits). */
static inline unsigned __int128 tri_cum(int64_t n, int64_t r) {
  return (unsigned __int128)r * (unsigned __int128)n -
         (unsigned __int128)r * (unsigned __int128)(r - 1) / 2;
}

/* A parent job this node's coordinator runs. */
typedef struct split_run {
  sched *s;
  store_job p; /* the parent's row (owned copy of the fields used) */
  struct split_run *next; /* [mu] s->splits */
} split_run;

/* How k splits a job with these params, as far as params alone say (tri
 * and the join); 0 when it does not split. */
int sched_split_form(const kind_ops *k, const json_t *params, kind_split *sp);

/* Every part of the tiles joined into the parent's result; the end record
 * filled (its strings and buffers the caller's: *final, *doc, *npy). */
int sched_split_join_result(split_run *r, const store_job *kids, int nk,
                            store_job_end *end, char *final, char **doc,
                            void **npy, terr *e);

#endif
