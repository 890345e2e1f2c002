/* mgpu.h — one job's rows over every GPU the scheduler lends (issue 27).
 *
 * A kind whose result is made of independent rows (a geodesic matrix, a
 * query's rows, a product's rows, a map's elements: map/lanes.h, a
 * reduce's elements or rows: reduce/lanes.h) cuts them
 * into blocks of a fixed size —
 * the cut depends on the job alone, never on how many devices run it — and
 * hands them to mgpu_run with one call, `block`, that computes rows
 * [r0, r1) on a device and copies them straight into their place in the
 * result. mgpu_run drives one lane per device: lane 0 is the run's own
 * device on the calling thread; every other lane is a thread of its own
 * that first borrows its device (the lock is then that thread's,
 * job_ctx.gpu_borrow) and gives it back on the same thread. Each lane
 * takes the next block from a shared counter, so a faster device takes
 * more, and each drains its own copies: no block goes through another
 * device or another lane's thread. Same kernel, same rows, same bits as a
 * run on one device.
 *
 * The scheduler's policy (compute/sched/README.md, "Lent GPUs"): a lent
 * lane asks `wanted` before every block, and when a queued single-GPU job
 * waits for its device it stops taking blocks and gives the device back —
 * a waiting job waits at most one block (a two-deep lane hands the blocks
 * it launched ahead back unwritten). A lane whose block fails with a
 * device error (T_EDEVICE) stops; its blocks go back to the others (the
 * rows are recomputed whole, never half-written twice: a block writes
 * only its own rows), and the job fails only when no lane is left. Any
 * other error (stop, no memory, a bad plan) ends every lane and is the
 * job's error.
 *
 * No CUDA here: the device work is behind `block`, so the lending, the
 * split, the take-back and the failures are tested with fake devices
 * (tests/unit/test_mgpu.c, tests/unit/test_sched_mgpu.c).
 */
#ifndef TESSEL_KINDS_MGPU_H
#define TESSEL_KINDS_MGPU_H

#include <stdint.h>

#include "compute/kinds/kinds.h"
#include "compute/kinds/lane_times.h"
#include "util/err.h"

#define MGPU_MAX 32 /* devices one job may use (the scheduler's bit mask) */
#define MGPU_PRIME_MAX 8 /* blocks a lane may launch before anybody writes */

/* The scheduler's side, from the run's job_ctx (mgpu_lend_of). borrow and
 * give_back are called on the lane's own thread; borrow NULL: the own
 * device only. wanted NULL: never taken back. stopped: 0, or the terr
 * code to stop with. */
typedef struct mgpu_lend {
  void *ctx;
  int ngpu;
  int (*borrow)(void *ctx, int dev);
  void (*give_back)(void *ctx, int dev);
  int (*wanted)(void *ctx, int dev);
  int (*stopped)(void *ctx);
  void (*progress)(void *ctx, int64_t rows); /* NULL ok */
} mgpu_lend;

/* The kind's side. block: rows [r0, r1) on device dev, written into their
 * place in the result; called on lane `lane`'s thread, which holds dev.
 * lane_end (NULL ok): after a lane's last block, on its thread, to free
 * what the lane kept on its device (rc: the lane's last result); called
 * for every lane that borrowed its device, lane_begin failed or not.
 *
 * The lane session (all NULL ok, then a lane only calls block):
 *   lane_begin  once every borrow was tried and before any block: opens
 *               what the lane keeps on its device across its blocks. rc
 *               T_EDEVICE: that lane takes no block (reported failed);
 *               any other error is the job's. *prime comes in as
 *               ops.prime and may be lowered (what the device holds).
 *   prepare     after every lane's lane_begin and before any lane's
 *               first block call: rank 0..nlive-1 among the lanes that
 *               opened, for work shared by them all before anybody writes
 *               (the geodesic matrix prefaults its share of the result).
 *               A two-deep lane has launched its first `prime` blocks
 *               (at most its fair share, rows / lanes), whose kernels
 *               run while the lanes prepare.
 *   launch      two deep: enqueue the compute of rows [r0, r1); block
 *               then writes them. A lane launches its next block before
 *               it calls block for the one in hand, so that the device
 *               computes block k + 1 while block k is copied off; once
 *               its primed blocks are written a lane holds at most two.
 *               A device error gives every block it holds back to the
 *               others.
 *   prime       blocks a two-deep lane launches before prepare (0 or 1:
 *               one; at most MGPU_PRIME_MAX).
 *   fold        1: blocks are taken from both ends in turn (0, last, 1,
 *               last - 1, ...; mgpu_fold), for a kind whose blocks cost
 *               less along the rows (the geodesic matrix's SYMB blocks:
 *               each pair once), so that lanes priming several blocks
 *               each get as much work, and the last blocks taken are
 *               middling, not the largest. 0: in order. */
typedef struct mgpu_ops {
  void *u;
  int (*block)(void *u, int lane, int dev, int64_t r0, int64_t r1, terr *e);
  void (*lane_end)(void *u, int lane, int dev, int rc);
  int (*lane_begin)(void *u, int lane, int dev, int *prime, terr *e);
  void (*prepare)(void *u, int lane, int dev, int rank, int nlive);
  int (*launch)(void *u, int lane, int dev, int64_t r0, int64_t r1, terr *e);
  int prime;
  int fold;
} mgpu_ops;

/* The block taken t-th of nblocks under ops.fold: 0, nblocks - 1, 1,
 * nblocks - 2, ... (a permutation of 0..nblocks-1). */
int64_t mgpu_fold(int64_t t, int64_t nblocks);

/* What ran where: for the job's record and the log (mgpu_describe). */
typedef struct mgpu_report {
  int lanes;                /* lanes that ran (own device included) */
  int dev[MGPU_MAX];        /* lane k's device */
  int64_t rows[MGPU_MAX];   /* rows lane k wrote */
  int64_t blocks[MGPU_MAX]; /* blocks lane k wrote */
  int failed[MGPU_MAX];     /* 1: lane k stopped on a device error */
  int taken_back[MGPU_MAX]; /* 1: lane k gave its device to a waiting job */
  int64_t block_rows, nblocks, retried;
  int depth; /* blocks a lane holds at once: 2 with ops.launch, else 1 */
  int prime; /* blocks a lane launched before anybody wrote (ops.prime) */
} mgpu_report;

/* Rows [0, rows) in blocks of block_rows (the last may be shorter) over the
 * own device and every device lend lends, at most max_lanes in all (0:
 * MGPU_MAX). 0 when every block was written; else the error (e). rep
 * (NULL ok) says who wrote what. Every borrowed device is given back
 * before it returns, on every path. */
int mgpu_run(int own, int64_t rows, int64_t block_rows, int max_lanes,
             const mgpu_lend *lend, const mgpu_ops *ops, mgpu_report *rep,
             terr *e);

/* The scheduler's hooks of a run (job_ctx.gpu_borrow, gpu_return,
 * gpu_wanted, its stop flag and progress) as an mgpu_lend. */
void mgpu_lend_of(job_ctx *ctx, mgpu_lend *out);

/* "cuda:0+1+3 rows 0:5000,1:4000,3:3000 blocks of 100, 2 deep, 8 primed" and the
 * take-backs and failures: for the job's record (job_ctx.spread) and the
 * log. */
void mgpu_describe(const mgpu_report *rep, char *buf, size_t len);

/* The run's record of rep: ctx->lanes (every lane that ran, one or more)
 * and, over more than one lane, ctx->spread (mgpu_describe). */
void mgpu_note(const mgpu_report *rep, job_ctx *ctx);

/* The glue of a kind whose lanes are sessions (map/lanes.c, reduce/lanes.c;
 * geodesic/gpu.c takes mgpu_open_rc and mgpu_slowest, matmul/lanes.c
 * mgpu_slowest):
 *   mgpu_open_rc   a session's open result as lane_begin's: a lent device
 *                  (lane > 0) that cannot hold the lane's buffers
 *                  (T_ENOMEM) is a device error, so the other lanes go on;
 *                  the run's own device failing so fails the job.
 *   mgpu_slowest   the job's times from n lanes' (each phase the slowest
 *                  lane's).
 *   mgpu_stopped   a job's stop code from its job_ctx (0: go on), for a
 *                  lanes job's stopped callback.
 *   mgpu_note_times  the job's times added to ctx's t_h2d, t_compute,
 *                  t_d2h. */
int mgpu_open_rc(int rc, int lane, terr *e);
void mgpu_slowest(const lane_times *t, int n, lane_times *T);
int mgpu_stopped(void *ctx);
void mgpu_note_times(const lane_times *T, job_ctx *ctx);

#endif
