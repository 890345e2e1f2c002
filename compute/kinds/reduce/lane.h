/* lane.h — one device's share of a whole-array reduce over every lent GPU
 * (lanes.h): the session's interface, C and C++ alike (reduce_lane.cu
 * implements it in a CUDA build; tests/unit/test_reduce_lanes.c fakes it on
 * the CPU). Who calls what and on which thread: lanes.h.
 */
#ifndef TESSEL_KINDS_REDUCE_LANE_H
#define TESSEL_KINDS_REDUCE_LANE_H

#ifdef __cplusplus
extern "C" {
#endif
#include <stdint.h>

#include "compute/array/tarray.h"
#include "compute/expr/expr.h"
#include "compute/kinds/lane_times.h"
#include "compute/kinds/ops.h"
#include "util/err.h"

/* A block's partial: the reduce kernels' per-output state (the fields as
 * compute/kinds/fuse.h's fuse_state, which has the same layout: a, b, c,
 * i). */
typedef struct red_state {
  double a, b, c;
  long long i;
} red_state;

/* What every lane reads (read-only during the run), and where it writes.
 * Two shapes of job, [outer, L] around the reduced axis:
 *   whole  outer 1 (axis null, or the one axis): the unit of a block is an
 *          element; block k's partial state into states[k], nothing else
 *          (the host merges them, lanes.c);
 *   rows   outer > 1, the reduced axis the last: the unit of a block is
 *          an output row; each of its rows folded whole on the device and
 *          its final value written into its place in out (states unused).
 */
typedef struct red_lanes_job {
  reduce_op op;
  tdtype out_dt; /* the job's result dtype (part of the kernels' key) */
  const expr *x;
  const tarray *const *inputs;
  const char *const *ids; /* NULL entries: inline inputs */
  int axis;               /* the job's (-1: null), as reduce.cu takes it */
  int64_t n;              /* elements reduced (the broadcast size) */
  int64_t outer, L;       /* outputs, and the elements each folds */
  int64_t block;          /* units a block (the last may be fewer) */
  int own;                /* the run's own device (its lane caches uploads) */
  red_state *states;      /* whole: one a block, ceil(n / block) */
  tarray *out;            /* rows: the result (outer elements) */
  int (*stopped)(void *ctx); /* NULL ok */
  void *ctx;
} red_lanes_job;

typedef struct red_lane red_lane;

/* Parts a block is folded in, at most: about one wave of an H200 (132
 * SMs x 8 blocks of 256 threads), so that a block fills one device; and
 * at least 2048 elements a part (reduce.cu's floor). */
#define RED_LANES_PARTS 1024

/* Parts a block of nl elements (whole), or a row of nl (rows), is folded
 * in: min(RED_LANES_PARTS, nl / 2048), at least 1; from the job alone,
 * never from the device that folds it (reduce.cu's one-GPU path takes its
 * device's wave). */
static inline int64_t red_lanes_parts(int64_t nl) {
  int64_t p = nl / 2048;
  if (p > RED_LANES_PARTS) p = RED_LANES_PARTS;
  return p < 1 ? 1 : p;
}

/* Phase times of one lane (ms): its thread staging and queueing inputs
 * up, its kernels' device time, waiting for a block's partial. */
typedef lane_times red_lane_times;

/* A lane session, on the lane's thread (which holds dev).
 *   open    *L set whenever it returns with a session to close (also on an
 *           error); T_ENOMEM: the device cannot hold two blocks.
 *   launch  block [r0, r1) of units taken (at most two launched and not
 *           finished): its inputs up and its kernels queued.
 *   finish  the oldest launched block, [r0, r1): whole, its partial into
 *           J->states[r0 / J->block]; rows, its rows' values into
 *           J->out's elements [r0, r1).
 *   close   every path; rc the lane's last result. */
typedef struct red_lane_fns {
  int (*open)(const red_lanes_job *J, int dev, red_lane **L, terr *e);
  int (*launch)(red_lane *L, int64_t r0, int64_t r1, terr *e);
  int (*finish)(red_lane *L, int64_t r0, int64_t r1, terr *e);
  void (*close)(red_lane *L, int rc, red_lane_times *t);
} red_lane_fns;

#if TESSEL_HAVE_CUDA
/* reduce_lane.cu's session (lanes.c's rl_cuda table lists them). */
int cuda_reduce_lane_open(const red_lanes_job *J, int dev, red_lane **L,
                          terr *e);
int cuda_reduce_lane_launch(red_lane *L, int64_t r0, int64_t r1, terr *e);
int cuda_reduce_lane_finish(red_lane *L, int64_t r0, int64_t r1, terr *e);
void cuda_reduce_lane_close(red_lane *L, int rc, red_lane_times *t);
#endif

#ifdef __cplusplus
}
#endif

#endif
