/* compute/kinds/map/lanes.c — a big map over every lent GPU (lanes.h): the
 * switch, the block cut, the decision, and the glue of a lane session
 * (map_lane_fns) onto mgpu_run's ops.
 *
 * The glue: lane_begin opens the lane's session (a lent device that
 * cannot hold two blocks is a device error there, so the others go on;
 * the run's own device failing so fails the job) and keeps one block
 * primed; prepare prefaults the lane's share of a fresh result mapping
 * while its first block's copies and kernel run (as the geodesic matrix
 * does; TESSEL_MAP_PREFAULT=0 leaves the pages to each block's drain, as
 * matmul measured better: the A/B for two GPUs); launch / block are the
 * session's launch / finish; lane_end closes it and keeps its times. The
 * job's times are the slowest lane's. Threads: map_lanes_run on the
 * worker; the callbacks on the lanes' threads, each touching only its own
 * lane's entries of the run's arrays.
 */
#include "compute/kinds/map/lanes.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"

int map_lanes_switch(void) {
  const char *v = getenv("TESSEL_GPU_LANES");
  if (v && strcmp(v, "0") == 0) return 0;
  if (v && strcmp(v, "1") == 0) return 1;
  return MAP_LANES_DEFAULT;
}

int64_t map_lanes_per_elem(const expr *x, const tarray *const *inputs,
                           const tarray *out) {
  int64_t b = (int64_t)tdtype_size(out->dtype);
  int nin = expr_ninputs(x);
  for (int i = 0; i < nin; i++)
    if (inputs[i]->size == out->size && out->size > 1)
      b += (int64_t)tdtype_size(inputs[i]->dtype);
  return b;
}

int64_t map_lanes_block(int64_t n, int64_t per_elem) {
  if (per_elem < 1) per_elem = 1;
  int64_t want = n / MAP_LANES_SPLIT * per_elem;
  if (want < MAP_LANES_BLOCK_MIN) want = MAP_LANES_BLOCK_MIN;
  if (want > MAP_LANES_BLOCK_MAX) want = MAP_LANES_BLOCK_MAX;
  int64_t b = want / per_elem / MAP_LANES_ALIGN * MAP_LANES_ALIGN;
  if (b < MAP_LANES_ALIGN) b = MAP_LANES_ALIGN;
  return b < n ? b : (n > 0 ? n : 1);
}

int map_lanes_wants(const expr *x, const tarray *const *inputs,
                    const tarray *out, const job_ctx *ctx) {
  if (!map_lanes_switch()) return 0;
  if (ctx->ngpu < 2 || !ctx->gpu_borrow || !ctx->gpu_return) return 0;
  if (!out->data || out->sink || out->size <= 0) return 0;
  int64_t per = map_lanes_per_elem(x, inputs, out);
  if (out->size > INT64_MAX / per || out->size * per < MAP_LANES_MIN) return 0;
  return map_lanes_block(out->size, per) < out->size;
}

/* ---- the glue ------------------------------------------------------------ */

typedef struct ml_run {
  const map_lanes_job *J;
  const map_lane_fns *f;
  int prefault; /* TESSEL_MAP_PREFAULT: "0" leaves the pages to the drains */
  map_lane *lane[MGPU_MAX];
  map_lane_times t[MGPU_MAX];
} ml_run;

static int ml_begin(void *u, int lane, int dev, int *prime, terr *e) {
  ml_run *R = u;
  int rc = R->f->open(R->J, dev, &R->lane[lane], e);
  rc = mgpu_open_rc(rc, lane, e);
  *prime = 1; /* two buffers: one primed, then one launched ahead */
  return rc;
}

static void ml_prepare(void *u, int lane, int dev, int rank, int nlive) {
  ml_run *R = u;
  (void)dev;
  if (R->prefault && R->f->prefault) R->f->prefault(R->lane[lane], rank, nlive);
}

static int ml_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  ml_run *R = u;
  (void)dev;
  return R->f->launch(R->lane[lane], r0, r1, e);
}

static int ml_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  ml_run *R = u;
  (void)dev;
  return R->f->finish(R->lane[lane], r0, r1, e);
}

static void ml_end(void *u, int lane, int dev, int rc) {
  ml_run *R = u;
  (void)dev;
  if (R->lane[lane]) R->f->close(R->lane[lane], rc, &R->t[lane]);
  R->lane[lane] = NULL;
}

int map_lanes_run(int own, const map_lanes_job *J, int64_t block,
                  const mgpu_lend *lend, const map_lane_fns *fns,
                  mgpu_report *rep, map_lane_times *T, terr *e) {
  ml_run *R = calloc(1, sizeof *R);
  if (!R) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  const char *pf = getenv("TESSEL_MAP_PREFAULT");
  R->J = J;
  R->f = fns;
  R->prefault = !(pf && strcmp(pf, "0") == 0);
  mgpu_ops ops = {R, ml_block, ml_end, ml_begin, ml_prepare, ml_launch, 1, 0};
  int rc = mgpu_run(own, J->out->size, block, 0, lend, &ops, rep, e);
  J->out->map_prefault = 0; /* every lane did its share */
  if (T) mgpu_slowest(R->t, MGPU_MAX, T);
  free(R);
  return rc;
}

/* ---- the CUDA build's entry ------------------------------------------------ */

#if TESSEL_HAVE_CUDA
static const map_lane_fns ml_cuda = {cuda_map_lane_open, cuda_map_lane_prefault,
                                     cuda_map_lane_launch, cuda_map_lane_finish,
                                     cuda_map_lane_close};

/* Another device free now (tried and given back at once). */
static int ml_any_free(job_ctx *ctx) {
  for (int d = 0; d < ctx->ngpu; d++)
    if (d != ctx->device && ctx->gpu_borrow(ctx, d) == 0) {
      ctx->gpu_return(ctx, d);
      return 1;
    }
  return 0;
}

int map_lanes_gpu(const expr *x, const tarray *const *inputs,
                  const char *const *ids, tarray *out, job_ctx *ctx,
                  terr *e) {
  if (!map_lanes_wants(x, inputs, out, ctx) || !ml_any_free(ctx))
    return gpu_map(ctx->device, x, inputs, ids, out, ctx, e);
  int64_t block = map_lanes_block(out->size, map_lanes_per_elem(x, inputs, out));
  map_lanes_job J = {x, inputs, ids, out, ctx->device, block, mgpu_stopped, ctx};
  mgpu_lend lend;
  mgpu_report rep;
  map_lane_times T;
  mgpu_lend_of(ctx, &lend);
  atomic_store(&ctx->progress_done, 0);
  atomic_store(&ctx->progress_total, out->size);
  int rc = map_lanes_run(ctx->device, &J, block, &lend, &ml_cuda, &rep, &T, e);
  mgpu_note_times(&T, ctx);
  mgpu_note(&rep, ctx);
  return rc;
}
#else
int map_lanes_gpu(const expr *x, const tarray *const *inputs,
                  const char *const *ids, tarray *out, job_ctx *ctx,
                  terr *e) {
  return gpu_map(ctx->device, x, inputs, ids, out, ctx, e);
}
#endif
