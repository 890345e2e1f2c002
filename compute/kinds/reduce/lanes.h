/* lanes.h — one big reduce (whole-array, or along the last axis) over
 * every GPU the scheduler lends
 * (issue 27), through the engine of compute/kinds/mgpu.h.
 *
 * The reduced elements are cut into blocks whose size depends on the job
 * alone (red_lanes_block: the element count and the bytes an element
 * reads), never on how many devices run it. Each lane is a session on its
 * device (red_lane_fns, lane.h; in a CUDA build reduce_lane.cu's
 * cuda_reduce_lane_*): the fused reduce kernels of the one-GPU path
 * (reduce.cu's signature, same key, same code), scalar and broadcast
 * inputs placed once, uploaded arrays read from the device's resident
 * cache (on the run's own device as a one-GPU run does, on a lent one only
 * where it holds them already), every other full-size input streamed up
 * block by block, two device buffers so that block k + 1's inputs go up
 * while block k is folded. A block [l0, l0 + nl) is folded as reduce.cu
 * folds one chunk of one output: tx_rows in red_lanes_parts(nl) parts (a
 * count from the block's length alone, where the one-GPU path takes one
 * wave of its device), then those parts merged by tx_combine(_tree) into
 * the block's state (fuse_state), which comes down (32 bytes). The host
 * merges the blocks' states in block order (red_state_merge, the same
 * merge as the kernels', fusegen.cu's st_merge) and writes the value
 * (red_state_final). So the bits depend on the job alone: one device or
 * eight, which lane took which block, a lane that failed and gave its
 * blocks back — the same states merged in the same order.
 *
 * Which one-GPU path a big job takes (the brief's choice): the one-GPU
 * cuda_reduce folds in parts counted from its device's wave
 * (dev_wave_blocks: SMs times the kernel's occupancy) and chunks sized by
 * its staging buffers (stage_chunk), carrying one running state from
 * chunk to chunk. That order is not the blocks' order, and depends on the
 * device, so it cannot be proven equal. Therefore, when the switch is on,
 * every job that red_lanes_wants goes by the blocks, on one GPU too: the
 * engine with the own device only (when no other device is free now, the
 * node has one GPU, or the inputs all sit in the own device's cache and
 * nowhere else — there the own device reads them from its memory at
 * ~4 TB/s while a lent one would stream them over PCIe at ~50 GB/s, and
 * the blocks cost ~16 launches and 32-byte copies, tens of microseconds).
 * The job then gives the same bits on one GPU as on eight.
 *
 * A reduce along the last axis (outer rows of L elements each) goes by
 * blocks of whole rows the same way: each row is folded on one device, in
 * red_lanes_parts(L) parts (from the row's length alone) merged by the
 * combine kernel, which writes the row's value into the block's outputs,
 * copied into their place in the result; nothing is merged on the host,
 * and a row's bits do not depend on which device folded it, nor on the
 * rows beside it (the one-GPU path's parts per row depend on its wave and
 * on how many rows share a chunk). A job under the threshold, along
 * another axis, with rows bigger than a block, or with the switch off,
 * runs as it always did (gpu_reduce).
 *
 * red_lanes_run is the glue of a session onto mgpu_run and takes the
 * session as a function table, so that tests drive it with CPU fakes
 * (tests/unit/test_reduce_lanes.c); red_lanes_gpu is the CUDA build's
 * entry from reduce.c. No CUDA here.
 */
#ifndef TESSEL_KINDS_REDUCE_LANES_H
#define TESSEL_KINDS_REDUCE_LANES_H

#include <stdint.h>

#include "compute/array/tarray.h"
#include "compute/expr/expr.h"
#include "compute/kinds/mgpu.h"
#include "compute/kinds/reduce/lane.h"
#include "util/err.h"

/* Bytes read (every full-size input) below which a reduce
 * stays on gpu_reduce. A reduce moves no result: its time is its inputs'
 * h2d, ~10 ms a 512 MiB over one H200's pinned PCIe (40-55 GB/s), against
 * a lent lane's borrow, thread, buffers and kernel fetch (a few ms warm):
 * below a few hundred MB the second link's gain is eaten by that — the
 * map's threshold (map/lanes.h), for the same link and the same costs. */
#define RED_LANES_MIN ((int64_t)512 << 20)
/* A block's bytes read: total / RED_LANES_SPLIT, within these bounds (16
 * blocks or more keep the tail short and let a faster link take more;
 * 256 MiB is ~5 ms of PCIe, far above a launch's microseconds). */
#define RED_LANES_SPLIT 16
#define RED_LANES_BLOCK_MIN ((int64_t)64 << 20)
#define RED_LANES_BLOCK_MAX ((int64_t)256 << 20)
#define RED_LANES_ALIGN 4096 /* elements: block starts stay 16-byte aligned */
/* TESSEL_GPU_LANES (the map's and the geodesic matrix's switch too): "0"
 * never, "1" whenever red_lanes_wants' other conditions hold, else this
 * default: off until two H200s measured it (tests/bench/bench_mgpu.sh's
 * reduce row). */
#define RED_LANES_DEFAULT 0

int red_lanes_switch(void);

/* Bytes an element reads: every input whose size is the job's n (a scalar
 * or a smaller broadcast input goes up once). */
int64_t red_lanes_per_elem(const expr *x, const tarray *const *inputs,
                           int64_t n);

/* Elements a block: a multiple of RED_LANES_ALIGN (or n when that is
 * fewer), from n and per_elem only. */
int64_t red_lanes_block(int64_t n, int64_t per_elem);

/* Rows a block of a rows job (outer rows of L elements): as many whole
 * rows as red_lanes_block's elements hold, at least 1. */
int64_t red_lanes_rows(int64_t outer, int64_t L, int64_t per_elem);

/* A job's cut: n elements as [outer, L] around the reduced axis, blocks
 * of `block` units (elements when outer is 1, rows else). */
typedef struct red_lanes_cut {
  int64_t n, outer, L, block;
} red_lanes_cut;

/* 1 when the job goes by blocks (*cut then set): the switch on, inputs in
 * memory, at least RED_LANES_MIN bytes read, two blocks or more, and
 * either a whole-array reduce (axis null, or every other axis of length
 * 1) or one along the last axis of rows no bigger than a block's bytes
 * (RED_LANES_BLOCK_MAX); ndim / shape: the inputs' broadcast shape.
 * Nothing about devices: the same job gives the same answer on every
 * node (see above). */
int red_lanes_wants(reduce_op op, const expr *x, const tarray *const *inputs,
                    int axis, int ndim, const int64_t *shape,
                    red_lanes_cut *cut);

/* The host's side of the fold: the kernels' st_init / st_merge /
 * st_final (fusegen.cu) for op, bit for bit the same arithmetic. */
void red_state_init(reduce_op op, red_state *s);
void red_state_merge(reduce_op op, red_state *s, const red_state *o);
double red_state_final(reduce_op op, red_state s, int64_t n);

/* The job's units in blocks of J->block over the own device and every
 * device lend lends, at most max_lanes (0: all); a whole job's blocks'
 * states then merged in block order into out[0] (a 0-d result; for a rows
 * job out is J->out, written by the lanes). T (NULL ok) gets the slowest
 * lane's times; rep: as mgpu_run's. */
int red_lanes_run(int own, const red_lanes_job *J, int max_lanes,
                  const mgpu_lend *lend, const red_lane_fns *fns,
                  tarray *out, mgpu_report *rep, red_lane_times *T, terr *e);

/* The CUDA build's reduce on the GPU (ndim / shape: the inputs' broadcast
 * shape): by blocks when red_lanes_wants (ctx->lanes / ctx->spread then
 * name the devices, mgpu_note), else gpu_reduce on ctx->device. */
int red_lanes_gpu(reduce_op op, const expr *x, const tarray *const *inputs,
                  const char *const *ids, int axis, int ndim,
                  const int64_t *shape, tarray *out, job_ctx *ctx, terr *e);

#endif
