/* matmul_cuda.h — a product's rows over several devices: the lane session
 * of compute/kinds/matmul/matmul.cu, driven by compute/kinds/matmul/lanes.c
 * through the engine of compute/kinds/mgpu.h (issue 27).
 *
 * A lane is one device's share of C = op(A) @ op(B) + bias (2-D views, as
 * compute/kinds/matmul/matmul.c hands them to gpu_matmul). It opens once:
 * A, B and the bias go up whole (from the resident cache when they are
 * uploaded arrays: a product's rows read every row of B, and whichever
 * lane takes a block reads that block's rows of A), and C gets a device
 * buffer of its whole size, so that a block of rows [r0, r1) is one GEMM
 * on rows r0.. of op(A) into rows r0.. of C — the same call, the same
 * cuBLAS kernel and the same bits whichever device runs it. launch
 * enqueues a block's bias fill and GEMM on the device's compute stream;
 * finish waits for that GEMM and copies its rows straight into their place
 * in the result (stage_download: the device's pinned slots and gang), while
 * the GEMM launched behind it runs. close frees it all; a lane that wrote
 * every row of C keeps it on its device for a chained job (keep_as).
 *
 * C linkage; every call of one lane on the thread that opened it (the
 * thread that holds the device: compute/kinds/mgpu.h). No CUDA types here.
 */
#ifndef TESSEL_KINDS_MATMUL_CUDA_H
#define TESSEL_KINDS_MATMUL_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif
#include <stdint.h>

#include "compute/array/tarray.h"
#include "util/err.h"

/* Blocks one lane may hold launched and unwritten (compute/kinds/mgpu.h's
 * MGPU_PRIME_MAX primed, plus two: lanes.c asserts it). */
#define MM_LANE_HOLD 10

typedef struct mm_lane mm_lane;

typedef struct mm_lane_args {
  const tarray *a, *b, *bias; /* 2-D views; bias NULL for none */
  int ta, tb;                 /* transposes */
  const char *ids[3];         /* uploaded arrays' ids (resident), or NULL */
  tarray *out;                /* the result, [m, n], host memory */
  const char *keep_as;        /* a chained job's id, or NULL */
} mm_lane_args;

/* Open the lane on device dev (taken with dev_begin). T_ETOOLARGE when
 * A, B and C do not fit in 90 % of the device's memory. On error *L may
 * be set: close it. */
int cuda_mm_lane_open(int dev, const mm_lane_args *x, mm_lane **L, terr *e);
/* Prefault share rank of nlive of a fresh result mapping on the device's
 * gang (nothing for a heap result or one already prefaulted); its time is
 * the lane's d2h. */
void cuda_mm_lane_prefault(mm_lane *L, int rank, int nlive);
/* Enqueue rows [r0, r1): bias fill and GEMM. */
int cuda_mm_lane_launch(mm_lane *L, int64_t r0, int64_t r1, terr *e);
/* Wait for the oldest launched block (which must be [r0, r1)) and copy its
 * rows into the result. */
int cuda_mm_lane_finish(mm_lane *L, int64_t r0, int64_t r1, terr *e);
/* End the lane (NULL ok): streams synchronised, buffers freed (C kept for
 * keep_as when rc is 0 and the lane wrote every row), dev_end. Adds its
 * times (ms) to the three counters. */
void cuda_mm_lane_close(mm_lane *L, int rc, double *t_h2d, double *t_compute,
                        double *t_d2h);

#ifdef __cplusplus
}
#endif

#endif
