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
 * borrowed device). Then two device buffers, each a block's streamed
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
#include "compute/kinds/reduce/lane.h"

#define RL_NBUF 2

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
  fuse_input m[FUSE_MAX_IN];
  size_t dreg[FUSE_MAX_IN]; /* streamed input i in a device buffer */
  size_t hreg[FUSE_MAX_IN]; /* non-pinned streamed input i in a slot */
  size_t parts_reg, state_reg; /* the parts' states; the block's state
                                  (whole) or its rows' values (rows) */
  int64_t C;                   /* elements a slot carries up (0: none) */
  devbuf buf[RL_NBUF];
  cudaEvent_t up[RL_NBUF], kbeg[RL_NBUF], done[RL_NBUF];
  cudaEvent_t slot_ev[DEV_STAGE_SLOTS]; /* the slot's last copy done */
  int64_t r0[RL_NBUF], r1[RL_NBUF]; /* units: elements, or rows */
  int64_t e0[RL_NBUF], e1[RL_NBUF]; /* the elements they read */
  int rows;                         /* a rows job (J->outer > 1) */
  size_t oes;                       /* a rows job's result element */
  int64_t nl, nf, up_no;
  red_lane_times t;
};

static int rl_events(red_lane *L, terr *e) {
  int rc = 0;
  for (int k = 0; k < RL_NBUF; k++) {
    CU_TRY(cudaEventCreateWithFlags(&L->up[k], cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&L->kbeg[k], cudaEventDefault));
    CU_TRY(cudaEventCreateWithFlags(&L->done[k], cudaEventDefault));
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++)
    CU_TRY(cudaEventCreateWithFlags(&L->slot_ev[s], cudaEventDisableTiming));
fail:
  return rc;
}

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
  const char *ids[FUSE_MAX_IN];
  int64_t oli[3], bshape[T_MAXDIM];
  int nd = 0;
  size_t per_dev = 0, per_slot = 0;
  /* regions of whole 256-element groups: every one 16-byte aligned */
  int64_t cap = L->rows ? J->block * J->L : J->block;
  size_t capr = ((size_t)cap + 255) & ~(size_t)255;
  gpu_job job;
  memset(&job, 0, sizeof job);
  job.t_h2d = &L->t.h2d;
  T_TRY(stage_ensure(d, e));
  T_TRY(rl_events(L, e));
  /* the job's result dtype, as the one-GPU path's key has it (the type of
   * the final values a rows lane writes; a whole job's lanes write none) */
  T_TRY(reduce_sig_init(J->op, J->x, L->nin, J->inputs, J->axis, J->out_dt,
                        &L->sig, &L->args, L->m, oli, &nd, bshape, e));
  T_ASSERT(oli[0] == J->outer && oli[1] == J->L && oli[2] == 1 &&
           J->outer * J->L == J->n);
  T_TRY(rl_kernels(L, e));
  for (int i = 0; i < L->nin; i++) {
    const tarray *in = J->inputs[i];
    size_t bytes = (size_t)in->size * L->m[i].es;
    int here = J->ids && J->ids[i] &&
               (d->index == J->own ||
                (gpu_resident_mask(J->ids[i], (int)in->dtype, bytes) >>
                 d->index) & 1u);
    ids[i] = here ? J->ids[i] : NULL;
  }
  T_TRY(fuse_place_inputs(d, L->nin, J->inputs, ids, &L->sig, L->m, &L->args,
                          &job, e));
  for (int i = 0; i < L->nin; i++)
    if (L->m[i].streamed) {
      L->dreg[i] = per_dev;
      per_dev += capr * L->m[i].es;
      if (!L->m[i].pinned) {
        L->hreg[i] = per_slot; /* times C, once C is known */
        per_slot += L->m[i].es;
      }
    }
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
  if (per_slot > 0) {
    L->C = (int64_t)(d->slot[0].bytes / per_slot) & ~(int64_t)255;
    if (L->C < 256) {
      rc = terr_set(e, T_ETOOLARGE, "params.inputs", -1,
                    "too many inputs for the GPU staging buffers");
      goto fail;
    }
    for (int i = 0; i < L->nin; i++)
      if (L->m[i].streamed && !L->m[i].pinned)
        L->hreg[i] *= (size_t)L->C; /* bytes an element before it, times C */
  }
  for (int k = 0; k < RL_NBUF; k++)
    T_TRY(devmem_alloc(d, per_dev, &L->buf[k], e));
fail:
  return rc;
}

extern "C" int cuda_reduce_lane_open(const red_lanes_job *J, int dev,
                                     red_lane **lane, terr *e) {
  *lane = NULL;
  int n = gpu_count();
  if (dev < 0 || dev >= n)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, n);
  int nin = expr_ninputs(J->x);
  if (nin < 1 || nin > FUSE_MAX_IN || J->block < 1 || J->n < 1 ||
      J->outer < 1 || J->outer * J->L != J->n || (J->outer > 1 && !J->out))
    return terr_set(e, T_EINVAL, "params.inputs", -1, "%d inputs", nin);
  red_lane *L = (red_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  L->J = J;
  L->nin = nin;
  L->rows = J->outer > 1;
  L->oes = tdtype_size(J->out_dt);
  int rc = dev_begin(dev, &L->d, e);
  if (rc) {
    free(L);
    return rc;
  }
  *lane = L; /* from here on, close ends it on every path */
  return rl_setup(L, e);
}

/* Block kb's page-locked inputs queued up (DMA from where they lie). */
static int rl_up_pinned(red_lane *L, int kb, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  char *b = (char *)L->buf[kb].ptr;
  int64_t r0 = L->e0[kb], n = L->e1[kb] - r0;
  for (int i = 0; i < L->nin; i++)
    if (L->m[i].streamed && L->m[i].pinned) {
      size_t es = L->m[i].es;
      CU_TRY(cudaMemcpyAsync(
          b + L->dreg[i],
          (const char *)L->J->inputs[i]->data + (size_t)r0 * es,
          (size_t)n * es, cudaMemcpyHostToDevice, d->s_h2d));
    }
fail:
  return rc;
}

/* One slot of block kb's other streamed inputs, from element *o: the gang
 * fills the next slot (once its last copy is done), the copy-in stream
 * moves it into buffer kb; *o advanced. */
static int rl_up_chunk(red_lane *L, int kb, int64_t *o, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  const tarray *const *in = L->J->inputs;
  char *b = (char *)L->buf[kb].ptr;
  int64_t r0 = L->e0[kb], r1 = L->e1[kb];
  int64_t cnt = r1 - *o < L->C ? r1 - *o : L->C;
  int s = (int)(L->up_no++ % DEV_STAGE_SLOTS), ni = 0;
  gang_item items[FUSE_MAX_IN];
  T_ASSERT(L->C > 0 && *o >= r0 && *o < r1);
  CU_TRY(cudaEventSynchronize(L->slot_ev[s]));
  for (int i = 0; i < L->nin; i++)
    if (L->m[i].streamed && !L->m[i].pinned) {
      size_t es = L->m[i].es;
      T_ASSERT(L->hreg[i] + (size_t)cnt * es <= d->slot[s].bytes);
      items[ni++] = (gang_item){d->slot[s].host + L->hreg[i],
                                (const char *)in[i]->data + (size_t)*o * es,
                                (size_t)cnt * es};
    }
  gang_copy(d->gang, items, ni);
  for (int i = 0; i < L->nin; i++)
    if (L->m[i].streamed && !L->m[i].pinned) {
      size_t es = L->m[i].es;
      CU_TRY(cudaMemcpyAsync(b + L->dreg[i] + (size_t)(*o - r0) * es,
                             d->slot[s].host + L->hreg[i], (size_t)cnt * es,
                             cudaMemcpyHostToDevice, d->s_h2d));
    }
  CU_TRY(cudaEventRecord(L->slot_ev[s], d->s_h2d));
  *o += cnt;
fail:
  return rc;
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
  CU_TRY(cudaEventRecord(L->up[kb], d->s_h2d));
  CU_TRY(cudaStreamWaitEvent(d->s_comp, L->up[kb], 0));
  for (int i = 0; i < L->nin; i++)
    if (L->m[i].streamed) {
      a.in[i] = b + L->dreg[i];
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
  CU_TRY(cudaEventRecord(L->kbeg[kb], d->s_comp));
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
  CU_TRY(cudaEventRecord(L->done[kb], d->s_comp));
fail:
  return rc;
}

extern "C" int cuda_reduce_lane_launch(red_lane *L, int64_t r0, int64_t r1,
                                       terr *e) {
  int rc = 0, st;
  devctx *d = L->d;
  int k = (int)(L->nl % RL_NBUF);
  int64_t o = r0;
  double t0 = t_now_ms();
  /* a free buffer, and the block fits it */
  T_ASSERT(L->nl - L->nf < RL_NBUF && r0 >= 0 && r0 < r1 &&
           r1 - r0 <= L->J->block &&
           r1 <= (L->rows ? L->J->outer : L->J->n));
  if (L->J->stopped && (st = L->J->stopped(L->J->ctx)) != 0) {
    rc = terr_set(e, (terr_code)st, "", -1, "stopped at element %lld",
                  (long long)r0);
    goto fail;
  }
  CU_TRY(cudaSetDevice(d->ordinal));
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->e0[k] = L->rows ? r0 * L->J->L : r0;
  L->e1[k] = L->rows ? r1 * L->J->L : r1;
  o = L->e0[k];
  L->nl++;
  T_TRY(rl_up_pinned(L, k, e));
  while (L->C > 0 && o < L->e1[k]) T_TRY(rl_up_chunk(L, k, &o, e));
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
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, L->done[k], 0));
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
  L->t.compute += dev_event_ms(L->kbeg[k], L->done[k]);
  L->nf++;
fail:
  L->t.d2h += t_now_ms() - t0;
  return rc;
}

extern "C" void cuda_reduce_lane_close(red_lane *L, int rc,
                                       red_lane_times *t) {
  if (!L) return;
  devctx *d = L->d;
  (void)cudaSetDevice(d->ordinal);
  (void)cudaStreamSynchronize(d->s_h2d);
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
  if (t) *t = L->t;
  for (int k = 0; k < RL_NBUF; k++) {
    devmem_free(d, &L->buf[k]);
    if (L->up[k]) (void)cudaEventDestroy(L->up[k]);
    if (L->kbeg[k]) (void)cudaEventDestroy(L->kbeg[k]);
    if (L->done[k]) (void)cudaEventDestroy(L->done[k]);
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++)
    if (L->slot_ev[s]) (void)cudaEventDestroy(L->slot_ev[s]);
  for (int i = 0; i < L->nin && i < FUSE_MAX_IN; i++)
    devmem_free(d, &L->m[i].tmp);
  (void)cudaGetLastError();
  dev_end(d, rc);
  free(L);
}
