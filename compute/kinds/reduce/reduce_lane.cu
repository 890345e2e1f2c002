/* reduce_lane.cu — one device's share of a reduce by blocks (whole-array,
 * or along the last axis) over every lent GPU (cuda_reduce_lane_*, lane.h;
 * the run, its glue and why blocks: lanes.h, lanes.c).
 *
 * A lane (a thread of compute/kinds/mgpu.h holding its device) opens a
 * session once: the device taken (dev_begin on the lane's thread: the lock
 * the lane borrowed, or the run's own), its pinned slots made, the fused
 * reduce kernels (tx_rows, tx_combine, tx_combine_tree) fetched from this
 * device's cache with reduce.cu's signature (reduce_sig_init: same key,
 * same code; one lane at a time, so that one compiles and the others load
 * its cubin), scalars and broadcast inputs uploaded once, and the uploaded
 * arrays read from the device's resident cache: on the run's own device as
 * a one-GPU run reads them, on a lent one only when its cache holds them
 * already (else streamed like inline inputs, never uploaded whole into a
 * borrowed device; the plan and the inputs' way up are lane_inputs.h's,
 * shared with the map's lanes). Then two device buffers, each a block's streamed
 * inputs, its parts' states and its own state.
 *
 * launch (block [r0, r1) into buffer nl % 2; the engine finished the block
 * that used it before): its streamed inputs up on the device's copy-in
 * stream, page-locked ones by DMA from where they lie, the rest through
 * the pinned slots in turn (the gang copies a slot's piece in, the copy-in
 * stream moves it up; a slot is filled again once its last copy is done:
 * an event a slot); then, on the compute stream after them, tx_rows folds
 * the block in red_lanes_parts(r1 - r0) parts and tx_combine (under
 * RED_TREE_PARTS parts) or tx_combine_tree merges those into the block's
 * state (the combine's l0 = 0 and last = 0: from st_init, into acc, never
 * a final value). So block k + 1's inputs go up while block k is folded.
 * finish (the oldest launched): the copy-out stream waits for its kernels
 * and brings its 32-byte state into J->states[r0 / block]. A rows job
 * (lane.h) the same way by whole rows: tx_rows folds each row of the
 * block in red_lanes_parts(L) parts, the combine merges each row's parts
 * and writes its value (last = 1) into the block's outputs, which finish
 * copies into their place in the result. close ends
 * the session on every path (streams synchronised before any buffer is
 * freed).
 *
 * Times: h2d is the lane thread's time staging and queueing inputs,
 * compute its kernels' device time (events), d2h the wait for a block's
 * state in finish. Threads: the lane's only.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/reduce/reduce_int.h" /* first: C headers in extern "C" */
#include "compute/kinds/lane_inputs.h"
#include "compute/kinds/reduce/lane.h"

#define RL_NBUF LANE_NBUF

static_assert(sizeof(red_state) == sizeof(fuse_state),
              "a block's state as the kernels write it");

static pthread_mutex_t rl_kernel_mu = PTHREAD_MUTEX_INITIALIZER;

struct red_lane {
  devctx *d;
  const red_lanes_job *J;
  int nin;
  CUfunction part_fn, comb_fn, tree_fn;
  int64_t wave;
  fuse_sig sig;
  fuse_args args; /* placed inputs; a launch sets the streamed ones */
  lane_in_job ij;               /* the job's inputs, as lane_inputs.h takes them */
  lane_inputs in;               /* placed; their regions, C */
  size_t parts_reg, state_reg; /* the parts' states; the block's state
                                  (whole) or its rows' values (rows) */
  devbuf buf[RL_NBUF];
  lane_events ev;
  int64_t r0[RL_NBUF], r1[RL_NBUF]; /* units: elements, or rows */
  int64_t e0[RL_NBUF], e1[RL_NBUF]; /* the elements they read */
  int rows;                         /* a rows job (J->outer > 1) */
  size_t oes;                       /* a rows job's result element */
  int64_t nl, nf, up_no;
  red_lane_times t;
};

/* The three kernels of the signature, one lane at a time: the first
 * compiles (when no cache has it), the others find its cubin in the
 * process's table. */
static int rl_kernels(red_lane *L, terr *e) {
  int rc = 0;
  double ms = 0;
  char *key = (char *)malloc(RED_KEY_MAX);
  if (!key || fuse_key(&L->sig, key, RED_KEY_MAX) < 0) {
    free(key);
    return terr_set(e, T_ENOMEM, "", -1, "kernel key");
  }
  pthread_mutex_lock(&rl_kernel_mu);
  rc = kcache_get(L->d, key, fuse_gen_reduce, &L->sig, "tx_rows", &L->part_fn,
                  &ms, e);
  if (!rc)
    rc = kcache_get(L->d, key, fuse_gen_reduce, &L->sig, "tx_combine",
                    &L->comb_fn, &ms, e);
  if (!rc)
    rc = kcache_get(L->d, key, fuse_gen_reduce, &L->sig, "tx_combine_tree",
                    &L->tree_fn, &ms, e);
  pthread_mutex_unlock(&rl_kernel_mu);
  free(key);
  if (!rc) L->wave = dev_wave_blocks(L->d, L->part_fn, RED_THREADS);
  return rc;
}

/* The signature, the kernels, the inputs placed, the regions, the two
 * buffers. */
static int rl_setup(red_lane *L, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  const red_lanes_job *J = L->J;
  int64_t oli[3], bshape[T_MAXDIM];
  int nd = 0;
  size_t per_dev = 0;
  int64_t cap = L->rows ? J->block * J->L : J->block; /* elements a block */
  gpu_job job;
  memset(&job, 0, sizeof job);
  job.t_h2d = &L->t.h2d;
  T_TRY(stage_ensure(d, e));
  T_TRY(lane_events_create(&L->ev, e));
  /* the job's result dtype, as the one-GPU path's key has it (the type of
   * the final values a rows lane writes; a whole job's lanes write none) */
  T_TRY(reduce_sig_init(J->op, J->x, L->nin, J->inputs, J->axis, J->out_dt,
                        &L->sig, &L->args, L->in.m, oli, &nd, bshape, e));
  T_ASSERT(oli[0] == J->outer && oli[1] == J->L && oli[2] == 1 &&
           J->outer * J->L == J->n);
  T_TRY(rl_kernels(L, e));
  /* uploaded arrays read where a one-GPU run reads them, or streamed
   * (lane_inputs.h); the parts and the state after the inputs */
  T_TRY(lane_inputs_plan(d, &L->ij, &L->sig, &L->args, &job, cap, &L->in,
                         &per_dev, e));
  L->parts_reg = per_dev;
  if (L->rows) {
    per_dev += (size_t)(J->block * red_lanes_parts(J->L)) * sizeof(fuse_state);
    L->state_reg = per_dev;
    per_dev += ((size_t)J->block * L->oes + 15) & ~(size_t)15;
  } else {
    per_dev += (size_t)red_lanes_parts(J->block) * sizeof(fuse_state);
    L->state_reg = per_dev;
    per_dev += sizeof(fuse_state);
  }
  for (int k = 0; k < RL_NBUF; k++)
    T_TRY(devmem_alloc(d, per_dev, &L->buf[k], e));
fail:
  return rc;
}

extern "C" int cuda_reduce_lane_open(const red_lanes_job *J, int dev,
                                     red_lane **lane, terr *e) {
  *lane = NULL;
  int rc = lane_device_ok(dev, e);
  if (rc) return rc;
  int nin = expr_ninputs(J->x);
  if (nin < 1 || nin > FUSE_MAX_IN || J->block < 1 || J->n < 1 ||
      J->outer < 1 || J->outer * J->L != J->n || (J->outer > 1 && !J->out))
    return terr_set(e, T_EINVAL, "params.inputs", -1, "%d inputs", nin);
  red_lane *L = (red_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  L->J = J;
  L->nin = nin;
  L->ij = (lane_in_job){nin, J->inputs, J->ids, J->own};
  L->rows = J->outer > 1;
  L->oes = tdtype_size(J->out_dt);
  rc = dev_begin(dev, &L->d, e);
  if (rc) {
    free(L);
    return rc;
  }
  *lane = L; /* from here on, close ends it on every path */
  return rl_setup(L, e);
}

/* Block kb's page-locked inputs queued up (DMA from where they lie). */
static int rl_up_pinned(red_lane *L, int kb, terr *e) {
  return lane_up_pinned(L->d, &L->ij, &L->in, (char *)L->buf[kb].ptr,
                        L->e0[kb], L->e1[kb], e);
}

/* One slot of block kb's other streamed inputs, from element *o, through
 * the next slot in turn (lane_up_chunk); *o advanced. */
static int rl_up_chunk(red_lane *L, int kb, int64_t *o, terr *e) {
  int s = (int)(L->up_no++ % DEV_STAGE_SLOTS);
  return lane_up_chunk(L->d, &L->ij, &L->in, (char *)L->buf[kb].ptr,
                       L->e0[kb], L->e1[kb], s, L->ev.slot_ev[s], o, e);
}

static unsigned rl_grid(int64_t work, int64_t cap) {
  if (work > cap) work = cap;
  return (unsigned)(work < 1 ? 1 : work);
}

/* Block kb's fold on the compute stream after its inputs are up. Whole:
 * its parts (tx_rows over [r0, r1) of the one output), then their merge
 * into the block's state (from st_init: l0 = 0; into acc: last = 0).
 * Rows: rows [r0, r1), each in red_lanes_parts(L) parts, then each row's
 * parts merged and its value written (last = 1) into the block's
 * outputs (o0 = 0 for the combine: the outputs are the block's own). */
static int rl_kernels_of(red_lane *L, int kb, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  const red_lanes_job *J = L->J;
  char *b = (char *)L->buf[kb].ptr;
  fuse_args a = L->args, c;
  int64_t r0 = L->r0[kb], r1 = L->r1[kb];
  int64_t P = red_lanes_parts(L->rows ? J->L : r1 - r0);
  int64_t nout = L->rows ? r1 - r0 : 1;
  CU_TRY(cudaEventRecord(L->ev.up[kb], d->s_h2d));
  CU_TRY(cudaStreamWaitEvent(d->s_comp, L->ev.up[kb], 0));
  for (int i = 0; i < L->nin; i++)
    if (L->in.m[i].streamed) {
      a.in[i] = b + L->in.dreg[i];
      a.off[i] = L->e0[kb];
    }
  a.part = b + L->parts_reg;
  a.acc = b + L->state_reg;
  a.out = NULL;
  a.o0 = L->rows ? r0 : 0;
  a.no = nout;
  a.l0 = L->rows ? 0 : r0;
  a.nl = L->rows ? J->L : r1 - r0;
  a.parts = P;
  a.last = 0;
  c = a;
  c.l0 = 0; /* the combine starts from st_init, not from acc */
  if (L->rows) {
    c.o0 = 0;
    c.out = b + L->state_reg;
    c.acc = NULL;
    c.last = 1;
  }
  CU_TRY(cudaEventRecord(L->ev.kbeg[kb], d->s_comp));
  {
    void *pa[] = {&a}, *pc[] = {&c};
    CU_TRY_DRV(dev_drv.LaunchKernel(L->part_fn, rl_grid(nout * P, L->wave), 1,
                                    1, RED_THREADS, 1, 1, 0, d->s_comp, pa,
                                    NULL));
    if (P >= RED_TREE_PARTS)
      CU_TRY_DRV(dev_drv.LaunchKernel(
          L->tree_fn, rl_grid(nout, (int64_t)d->sms * 16), 1, 1, RED_THREADS,
          1, 1, 0, d->s_comp, pc, NULL));
    else
      CU_TRY_DRV(dev_drv.LaunchKernel(
          L->comb_fn,
          rl_grid((nout + RED_THREADS - 1) / RED_THREADS, (int64_t)d->sms * 8),
          1, 1, RED_THREADS, 1, 1, 0, d->s_comp, pc, NULL));
  }
  CU_TRY(cudaEventRecord(L->ev.done[kb], d->s_comp));
fail:
  return rc;
}

extern "C" int cuda_reduce_lane_launch(red_lane *L, int64_t r0, int64_t r1,
                                       terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nl % RL_NBUF);
  int64_t o = r0;
  double t0 = t_now_ms();
  /* a free buffer, and the block fits it */
  T_ASSERT(L->nl - L->nf < RL_NBUF && r0 >= 0 && r0 < r1 &&
           r1 - r0 <= L->J->block &&
           r1 <= (L->rows ? L->J->outer : L->J->n));
  T_TRY(lane_stopped(L->J->stopped, L->J->ctx, r0, e));
  CU_TRY(cudaSetDevice(d->ordinal));
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->e0[k] = L->rows ? r0 * L->J->L : r0;
  L->e1[k] = L->rows ? r1 * L->J->L : r1;
  o = L->e0[k];
  L->nl++;
  T_TRY(rl_up_pinned(L, k, e));
  while (L->in.C > 0 && o < L->e1[k]) T_TRY(rl_up_chunk(L, k, &o, e));
  T_TRY(rl_kernels_of(L, k, e));
fail:
  L->t.h2d += t_now_ms() - t0;
  return rc;
}

extern "C" int cuda_reduce_lane_finish(red_lane *L, int64_t r0, int64_t r1,
                                       terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nf % RL_NBUF);
  double t0 = t_now_ms();
  /* the oldest launched block, and only it */
  T_ASSERT(L->nf < L->nl && L->r0[k] == r0 && L->r1[k] == r1 &&
           r0 % L->J->block == 0);
  CU_TRY(cudaSetDevice(d->ordinal));
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, L->ev.done[k], 0));
  if (L->rows) /* the rows' values into their place */
    CU_TRY(cudaMemcpyAsync((char *)L->J->out->data + (size_t)r0 * L->oes,
                           (const char *)L->buf[k].ptr + L->state_reg,
                           (size_t)(r1 - r0) * L->oes, cudaMemcpyDeviceToHost,
                           d->s_d2h));
  else
    CU_TRY(cudaMemcpyAsync(&L->J->states[r0 / L->J->block],
                           (const char *)L->buf[k].ptr + L->state_reg,
                           sizeof(fuse_state), cudaMemcpyDeviceToHost,
                           d->s_d2h));
  CU_TRY(cudaStreamSynchronize(d->s_d2h));
  L->t.compute += dev_event_ms(L->ev.kbeg[k], L->ev.done[k]);
  L->nf++;
fail:
  L->t.d2h += t_now_ms() - t0;
  return rc;
}

extern "C" void cuda_reduce_lane_close(red_lane *L, int rc,
                                       red_lane_times *t) {
  if (!L) return;
  lane_quiesce(L->d);
  if (t) *t = L->t;
  lane_release(L->d, L->buf, &L->ev, L->nin, &L->in, rc);
  free(L);
}
