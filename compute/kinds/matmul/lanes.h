/* lanes.h — a product over every GPU the scheduler lends (issue 27): the
 * cut of C's rows into blocks and the run of those blocks as lanes of
 * compute/kinds/mgpu.h, each a session of compute/kinds/matmul/matmul.cu
 * (matmul_cuda.h says what a lane holds and does).
 *
 * The cut depends on the product alone — never on how many devices run it
 * — so that a product's rows come from the same GEMM calls, and are the
 * same bits, on one device or on eight. A product whose C is under
 * MM_LANES_MIN bytes, or that cuts into one block, runs as one GEMM as it
 * always did (gpu_matmul).
 *
 * Policy: every product of MM_LANES_MIN bytes and more runs in blocks, on
 * one device too: the blocks' copies back then overlap the next blocks'
 * GEMMs (one GEMM then one copy of the whole C was ~60 ms of 16384^2
 * float64's ~210 on an H200). Blocks of about MM_BLOCK_BYTES of C, at most
 * MM_BLOCKS_MAX of them (the GEMMs stay large), their rows a multiple of
 * MM_ROW_ALIGN (cuBLAS's tiles). TESSEL_MM_LANES=0 turns blocks and lanes
 * off (one GEMM, for A/B runs).
 *
 * A fresh result file's pages: each block's copy takes its own page
 * faults (on the gang of the device that computed it, while the next
 * GEMMs run), rather than the lanes prefaulting their shares of the
 * mapping before any block is written (geodesic's way;
 * TESSEL_MM_PREFAULT=1). Measured on two H200s (32 cores, ext4, 2026-11-29,
 * tests/bench/bench_mgpu.sh, 16384^2 float64, best of reps 2-4): one GPU
 * 164 ms faulting against 175 prefaulting (one GEMM: 225), two GPUs 111
 * against 118. A prefault before the first copy waits for the pages the
 * GEMMs would have hidden.
 */
#ifndef TESSEL_KINDS_MATMUL_LANES_H
#define TESSEL_KINDS_MATMUL_LANES_H

#include <stddef.h>
#include <stdint.h>

#include "compute/kinds/kinds.h"
#include "util/err.h"

#define MM_LANES_MIN ((int64_t)256 << 20)
#define MM_BLOCK_BYTES ((int64_t)128 << 20)
#define MM_BLOCKS_MAX 16
#define MM_ROW_ALIGN 64

/* Rows a block of an m x n product of es-byte elements; 0: one GEMM. */
int64_t mm_block_rows(int64_t m, int64_t n, size_t es);
/* The same for blocks of about `block` bytes, at most `most` of them
 * (mm_block_rows: MM_BLOCK_BYTES, MM_BLOCKS_MAX; TESSEL_MM_BLOCK_MIB sets
 * another size for A/B runs). */
int64_t mm_block_rows_of(int64_t m, int64_t n, size_t es, int64_t block,
                         int64_t most);

/* 1 when the run should go by blocks (mm_block_rows > 0 and not turned
 * off by TESSEL_MM_LANES=0). */
int mm_lanes_wanted(int64_t m, int64_t n, size_t es);

/* C = op(a) @ op(b) + bias in blocks over the run's device and every GPU
 * the scheduler lends (ctx->gpu_borrow); the record names the lanes
 * (mgpu_note). 2-D views as gpu_matmul takes them. T_EUNAVAIL without
 * CUDA. */
int mm_lanes_run(job_ctx *ctx, const tarray *a, const tarray *b,
                 const tarray *bias, int ta, int tb, const char *const ids[3],
                 tarray *out, terr *e);

#if TESSEL_HAVE_CUDA
#include "compute/kinds/matmul/matmul_cuda.h"
#include "compute/kinds/mgpu.h"
/* mm_lanes_run's core, for the GPU tests: x's product in blocks of
 * block_rows over own and what lend lends; rep (NULL ok) says who wrote
 * what; the lanes' times (the slowest lane's) added to the counters. */
int mm_lanes_exec(int own, const mm_lane_args *x, const mgpu_lend *lend,
                  int64_t block_rows, mgpu_report *rep, double *t_h2d,
                  double *t_compute, double *t_d2h, terr *e);
#endif

#endif
