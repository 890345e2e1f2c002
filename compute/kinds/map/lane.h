/* lane.h — one device's share of a map over every lent GPU (lanes.h):
 * the session's interface, C and C++ alike (map.cu implements it in a
 * CUDA build; tests/unit/test_map_lanes.c fakes it on the CPU). Who calls
 * what and on which thread: lanes.h.
 */
#ifndef TESSEL_KINDS_MAP_LANE_H
#define TESSEL_KINDS_MAP_LANE_H

#ifdef __cplusplus
extern "C" {
#endif
#include <stdint.h>

#include "compute/array/tarray.h"
#include "compute/expr/expr.h"
#include "compute/kinds/lane_times.h"
#include "util/err.h"

/* What every lane reads: the job (read-only during the run). */
typedef struct map_lanes_job {
  const expr *x;
  const tarray *const *inputs;
  const char *const *ids; /* NULL entries: inline inputs */
  tarray *out;
  int own;                /* the run's own device (its lane caches uploads) */
  int64_t cap;            /* elements of the largest block */
  int (*stopped)(void *ctx); /* NULL ok */
  void *ctx;
} map_lanes_job;

typedef struct map_lane map_lane;

/* Phase times of one lane (ms): what its thread spent staging and
 * queueing inputs up, its kernels' device time, what it spent copying
 * results off and into place. */
typedef lane_times map_lane_times;

/* A lane session, on the lane's thread (which holds dev).
 *   open      *L set whenever it returns with a session to close (also
 *             on an error); T_ENOMEM: the device cannot hold two blocks.
 *   prefault  the lane's share (rank of nlive) of a fresh result mapping.
 *   launch    block [r0, r1) taken (at most two launched and not
 *             finished): its inputs and kernel queued now, or, behind an
 *             unfinished block, by that block's finish.
 *   finish    the oldest launched block, [r0, r1), copied into its place
 *             (and the next one's inputs sent up meanwhile).
 *   close     every path; rc the lane's last result. */
typedef struct map_lane_fns {
  int (*open)(const map_lanes_job *J, int dev, map_lane **L, terr *e);
  void (*prefault)(map_lane *L, int rank, int nlive);
  int (*launch)(map_lane *L, int64_t r0, int64_t r1, terr *e);
  int (*finish)(map_lane *L, int64_t r0, int64_t r1, terr *e);
  void (*close)(map_lane *L, int rc, map_lane_times *t);
} map_lane_fns;

#if TESSEL_HAVE_CUDA
/* map_lane.cu's session (lanes.c's ml_cuda table lists them). */
int cuda_map_lane_open(const map_lanes_job *J, int dev, map_lane **L,
                       terr *e);
void cuda_map_lane_prefault(map_lane *L, int rank, int nlive);
int cuda_map_lane_launch(map_lane *L, int64_t r0, int64_t r1, terr *e);
int cuda_map_lane_finish(map_lane *L, int64_t r0, int64_t r1, terr *e);
void cuda_map_lane_close(map_lane *L, int rc, map_lane_times *t);
#endif

#ifdef __cplusplus
}
#endif

#endif
