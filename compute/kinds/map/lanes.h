/* lanes.h — one big map job over every GPU the scheduler lends (issue 27),
 * through the engine of compute/kinds/mgpu.h.
 *
 * The elements are cut into blocks whose size depends on the job alone
 * (map_lanes_block: the element count and the bytes an element moves),
 * never on how many devices run it. Each lane is a session on its device
 * (map_lane_fns, lane.h; in a CUDA build map_lane.cu's cuda_map_lane_*):
 * the kernel, the scalar and broadcast inputs placed once, uploaded arrays
 * read from the device's resident cache (compute/gpu/resident.cu: on the
 * run's own device as a one-GPU run does, on a lent one only where it
 * holds them already) and every other full-size input streamed up block
 * by block through the device's pinned slots, two device buffers so that
 * block k + 1's inputs go up while block k's result comes down, and each
 * block's result copied straight into its place in the result (no gather
 * through one GPU). Same fused kernel, same elements, so the same bits as one
 * GPU's whole run. No device holds such a result whole, so none keeps it
 * for a chained job (gpu_job.keep_as is the one-GPU path's only).
 *
 * map_lanes_run is the glue of a session onto mgpu_run and takes the
 * session as a function table, so that tests drive it with CPU fakes
 * (tests/unit/test_map_lanes.c); map_lanes_gpu is the CUDA build's entry
 * from map.c (the one-GPU gpu_map when lanes are off, the job too small,
 * or no other device free now). No CUDA here.
 */
#ifndef TESSEL_KINDS_MAP_LANES_H
#define TESSEL_KINDS_MAP_LANES_H

#include <stdint.h>

#include "compute/array/tarray.h"
#include "compute/expr/expr.h"
#include "compute/kinds/map/lane.h"
#include "compute/kinds/mgpu.h"
#include "util/err.h"

/* Bytes moved (the result and every full-size input) below which a map
 * stays on one GPU. One H200 moves 512 MiB over PCIe in 10-13 ms (40-55
 * GB/s pinned); a lent lane costs its borrow, a thread, its device's
 * buffers and (once a device) its pinned slots and kernel, a few ms warm:
 * below a few hundred MB the second link's gain is eaten by that. */
#define MAP_LANES_MIN ((int64_t)512 << 20)
/* A block's bytes moved: total / MAP_LANES_SPLIT, within these bounds.
 * 16 blocks or more keep the tail short (a lane waits at most one block
 * for the others) and let a faster link take more; 256 MiB is ~5 ms of
 * PCIe, far above a launch's and an event's microseconds. */
#define MAP_LANES_SPLIT 16
#define MAP_LANES_BLOCK_MIN ((int64_t)64 << 20)
#define MAP_LANES_BLOCK_MAX ((int64_t)256 << 20)
#define MAP_LANES_ALIGN 4096 /* elements: block starts stay 16-byte aligned */
/* TESSEL_GPU_LANES (the geodesic matrix's switch too): "0" never, "1"
 * whenever map_lanes_wants' other conditions hold, else this default. */
#define MAP_LANES_DEFAULT 0

int map_lanes_switch(void);

/* Bytes an element moves: the result's and every input's whose size is
 * the result's (a scalar or a smaller broadcast input goes up once). */
int64_t map_lanes_per_elem(const expr *x, const tarray *const *inputs,
                           const tarray *out);

/* Elements a block: a multiple of MAP_LANES_ALIGN (or n when that is
 * fewer), from n and per_elem only. */
int64_t map_lanes_block(int64_t n, int64_t per_elem);

/* 1 when the job is worth lanes: the switch on, more than one device and
 * the scheduler's borrow hooks (ctx), a result in memory (not a sink),
 * at least MAP_LANES_MIN bytes moved and two blocks. */
int map_lanes_wants(const expr *x, const tarray *const *inputs,
                    const tarray *out, const job_ctx *ctx);

/* The job's elements in blocks of block over the own device and every
 * device lend lends; T (NULL ok) gets the slowest lane's times. rep: as
 * mgpu_run's. The result mapping's prefault is done by the lanes, each
 * its share before anybody writes (TESSEL_MAP_PREFAULT=0: by none, the
 * drains fault the pages in); out->map_prefault cleared. */
int map_lanes_run(int own, const map_lanes_job *J, int64_t block,
                  const mgpu_lend *lend, const map_lane_fns *fns,
                  mgpu_report *rep, map_lane_times *T, terr *e);

/* The CUDA build's map on the GPU: lanes when map_lanes_wants and another
 * device is free now (ctx->lanes / ctx->spread then name the devices,
 * mgpu_note), else gpu_map on ctx->device. */
int map_lanes_gpu(const expr *x, const tarray *const *inputs,
                  const char *const *ids, tarray *out, job_ctx *ctx,
                  terr *e);



#endif
