/* map_lane.cu — one device's share of a map over every lent GPU
 * (cuda_map_lane_*, lane.h; the run and its glue: lanes.h, lanes.c).
 *
 * A lane (a thread of compute/kinds/mgpu.h holding its device) opens a
 * session once: the device taken (dev_begin on the lane's thread: the
 * lock the lane borrowed, or the run's own), its pinned slots made, the
 * fused kernel fetched from this device's cache (the signature built as
 * the one-GPU run builds it, map_sig_init: same key, same code, same
 * bits; one lane at a time, so that one compiles and the others load its
 * cubin), scalars and broadcast inputs uploaded once, and the uploaded
 * arrays read from the device's resident cache: on the run's own device as
 * a one-GPU run reads them (cached whole there when they fit), on a lent
 * one only when its cache holds them already (gpu_resident_mask; else they
 * are streamed like inline inputs, never uploaded whole into a borrowed
 * device; the plan and the inputs' way up are lane_inputs.h's, shared
 * with the reduce's lanes). Then two device buffers, each a block's streamed inputs and
 * its result.
 *
 * launch (block [r0, r1) into buffer nl % 2): with no older block in
 * hand (the lane's first, primed before the lanes prepare; or after it ran
 * dry) the block is queued at once: its streamed inputs up on the device's
 * copy-in stream, page-locked ones by DMA from where they lie, the rest
 * through the two up slots (the gang copies a slot's piece in, the copy-in
 * stream moves it up; a slot is filled again once its last copy is done:
 * an event a slot), then its kernel on the compute stream after them. A
 * block launched behind an unfinished one is queued by that one's finish.
 * finish (the oldest launched, always queued): the copy-out stream waits
 * for its kernel and moves its result down, into the result itself when
 * that is page-locked, else through the two down slots, chunk c - 1
 * drained into its place by the gang while chunk c is in flight; between
 * the chunks the next block's inputs go up a slot at a time, and its
 * kernel is queued at the end. So a lane's two PCIe directions work at
 * once (block k down while block k + 1 goes up), and each block's result
 * goes straight into its place in the result.
 * prefault populates the lane's share of a fresh result mapping on its
 * device's gang before any lane writes. close ends the session on every
 * path (streams synchronised before any buffer is freed).
 *
 * Times: h2d is the lane thread's time staging and queueing inputs (in
 * launch, and between a finish's chunks), d2h the rest of finish (the
 * waits for the copies down and the drains), compute its kernels' device
 * time (events). Threads: the lane's only.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/map/map_int.h" /* first: C headers in extern "C" */
#include "compute/kinds/lane_inputs.h"
#include "compute/kinds/map/lane.h"

#define ML_NBUF LANE_NBUF

static pthread_mutex_t ml_kernel_mu = PTHREAD_MUTEX_INITIALIZER;

struct map_lane {
  devctx *d;
  const map_lanes_job *J;
  int nin, out_pinned;
  CUfunction fn;
  fuse_sig sig;
  fuse_args args; /* placed inputs; a launch sets the streamed ones */
  lane_in_job ij;   /* the job's inputs, as lane_inputs.h takes them */
  lane_inputs in;   /* placed; their regions, C */
  size_t out_reg;   /* the block's result in a device buffer */
  devbuf buf[ML_NBUF];
  lane_events ev;
  int64_t r0[ML_NBUF], r1[ML_NBUF];
  int queued[ML_NBUF]; /* buffer k's inputs and kernel are queued */
  int64_t nl, nf, up_no, down_no;
  map_lane_times t;
};

/* The kernel, the inputs placed, the regions, the two buffers. */
static int ml_setup(map_lane *L, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  const map_lanes_job *J = L->J;
  const tarray *out = J->out;
  char *key = NULL;
  size_t key_len = MAP_KEY_MAX + EXPR_MAX_SRC * 8, per_dev = 0;
  /* regions of whole 256-element groups: every one 16-byte aligned, as
   * the kernel's vector accesses want (sig.vec4) */
  size_t capr = ((size_t)J->cap + 255) & ~(size_t)255;
  double ignore_ms = 0;
  gpu_job job;
  memset(&job, 0, sizeof job);
  job.t_h2d = &L->t.h2d;
  T_TRY(stage_ensure(d, e));
  T_TRY(lane_events_create(&L->ev, e));
  map_sig_init(J->x, L->nin, J->inputs, out, &L->sig, &L->args, L->in.m);
  key = (char *)malloc(key_len);
  if (!key || fuse_key(&L->sig, key, key_len) < 0) {
    rc = terr_set(e, T_ENOMEM, "", -1, "kernel key");
    goto fail;
  }
  /* one lane at a time: the first compiles (when no cache has it), the
   * others find its cubin in the process's table, instead of every lane
   * compiling the same source at once */
  pthread_mutex_lock(&ml_kernel_mu);
  rc = kcache_get(d, key, fuse_gen_map, &L->sig, "tx_map", &L->fn, &ignore_ms,
                  e);
  pthread_mutex_unlock(&ml_kernel_mu);
  if (rc) goto fail;
  /* uploaded arrays read where a one-GPU run reads them, or streamed
   * (lane_inputs.h); the block's result after the inputs */
  T_TRY(lane_inputs_plan(d, &L->ij, &L->sig, &L->args, &job, J->cap, &L->in,
                         &per_dev, e));
  L->out_reg = per_dev;
  per_dev += capr * tdtype_size(out->dtype);
  for (int k = 0; k < ML_NBUF; k++) T_TRY(devmem_alloc(d, per_dev, &L->buf[k], e));
  L->out_pinned =
      stage_pinned(out->data, (size_t)out->size * tdtype_size(out->dtype));
fail:
  free(key);
  return rc;
}

extern "C" int cuda_map_lane_open(const map_lanes_job *J, int dev,
                                  map_lane **lane, terr *e) {
  *lane = NULL;
  int rc = lane_device_ok(dev, e);
  if (rc) return rc;
  int nin = expr_ninputs(J->x);
  if (nin < 0 || nin > FUSE_MAX_IN || J->out->ndim > 8 || J->cap < 1)
    return terr_set(e, T_EINVAL, "params.inputs", -1, "%d inputs", nin);
  map_lane *L = (map_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  L->J = J;
  L->nin = nin;
  L->ij = (lane_in_job){nin, J->inputs, J->ids, J->own};
  rc = dev_begin(dev, &L->d, e);
  if (rc) {
    free(L);
    return rc;
  }
  *lane = L; /* from here on, close ends it on every path */
  return ml_setup(L, e);
}

extern "C" void cuda_map_lane_prefault(map_lane *L, int rank, int nlive) {
  if (L->J->out->map_warm) return; /* its pages are in already */
  stage_prefault_share(L->d, L->J->out, rank, nlive, &L->t.d2h);
}

/* ---- a block's inputs up and its kernel ---------------------------------
 * Slots 0 and 1 carry inputs up, slots 2 and 3 results down (ML_UP,
 * ML_DOWN): each direction double-buffered, so a block's inputs can be
 * staged while the block before it is copied off without either waiting
 * for a slot the other holds. */
#define ML_UP 0
#define ML_DOWN 2
static_assert(DEV_STAGE_SLOTS >= 4, "two slots up and two down");

/* Block kb's page-locked inputs queued up (DMA from where they lie). */
static int ml_up_pinned(map_lane *L, int kb, terr *e) {
  return lane_up_pinned(L->d, &L->ij, &L->in, (char *)L->buf[kb].ptr,
                        L->r0[kb], L->r1[kb], e);
}

/* One slot of block kb's other streamed inputs, from element *o, through
 * the next of the two up slots (lane_up_chunk); *o advanced. */
static int ml_up_chunk(map_lane *L, int kb, int64_t *o, terr *e) {
  int s = ML_UP + (int)(L->up_no++ % 2);
  return lane_up_chunk(L->d, &L->ij, &L->in, (char *)L->buf[kb].ptr,
                       L->r0[kb], L->r1[kb], s, L->ev.slot_ev[s], o, e);
}

/* Block kb's kernel, on the compute stream after its inputs are up. */
static int ml_kernel(map_lane *L, int kb, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  char *b = (char *)L->buf[kb].ptr;
  fuse_args a = L->args;
  int64_t r0 = L->r0[kb], r1 = L->r1[kb];
  CU_TRY(cudaEventRecord(L->ev.up[kb], d->s_h2d));
  CU_TRY(cudaStreamWaitEvent(d->s_comp, L->ev.up[kb], 0));
  for (int i = 0; i < L->nin; i++)
    if (L->in.m[i].streamed) {
      a.in[i] = b + L->in.dreg[i];
      a.off[i] = r0;
    }
  a.out = b + L->out_reg;
  a.start = r0;
  a.count = r1 - r0;
  CU_TRY(cudaEventRecord(L->ev.kbeg[kb], d->s_comp));
  T_TRY(map_launch(d, L->fn, &a, r1 - r0, L->sig.groups, e));
  CU_TRY(cudaEventRecord(L->ev.done[kb], d->s_comp));
  L->queued[kb] = 1;
fail:
  return rc;
}

/* A launch with nothing older in hand (the lane's first, or after it ran
 * dry) queues the block at once, so that it computes while the lanes
 * prepare; one launched behind an unfinished block is queued by that
 * block's finish, its inputs going up while that block comes down. */
extern "C" int cuda_map_lane_launch(map_lane *L, int64_t r0, int64_t r1,
                                    terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nl % ML_NBUF);
  double t0 = t_now_ms();
  /* a free buffer, and the block fits it */
  T_ASSERT(L->nl - L->nf < ML_NBUF && r0 >= 0 && r0 < r1 &&
           r1 - r0 <= L->J->cap && r1 <= L->J->out->size);
  T_TRY(lane_stopped(L->J->stopped, L->J->ctx, r0, e));
  CU_TRY(cudaSetDevice(d->ordinal));
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->queued[k] = 0;
  L->nl++;
  if (L->nl - 1 == L->nf) {
    int64_t o = r0;
    T_TRY(ml_up_pinned(L, k, e));
    while (L->in.C > 0 && o < r1) T_TRY(ml_up_chunk(L, k, &o, e));
    T_TRY(ml_kernel(L, k, e));
  }
fail:
  L->t.h2d += t_now_ms() - t0;
  return rc;
}

/* Chunk c drained: its copy awaited, then the gang moves it into place. */
static int ml_drain(map_lane *L, int s, char *dst, size_t len, terr *e) {
  int rc = 0;
  CU_TRY(cudaEventSynchronize(L->ev.slot_ev[s]));
  {
    gang_item it = {dst, L->d->slot[s].host, len};
    gang_copy(L->d->gang, &it, 1);
  }
fail:
  return rc;
}

/* Block k's result down into its place: straight into a page-locked
 * result, else through the down slots, chunk c - 1 drained while chunk c
 * is in flight; between the chunks, the next block's (kn, when it waits
 * to be queued: *o < its end) inputs go up a slot at a time. */
static int ml_down(map_lane *L, int k, int kn, int64_t *o, double *up_ms,
                   terr *e) {
  int rc = 0, ps = -1;
  devctx *d = L->d;
  size_t es = tdtype_size(L->J->out->dtype), len = 0, pend_len = 0;
  size_t bytes = (size_t)(L->r1[k] - L->r0[k]) * es, chunk = d->slot[0].bytes;
  char *dst = (char *)L->J->out->data + (size_t)L->r0[k] * es, *pend = NULL;
  const char *src = (const char *)L->buf[k].ptr + L->out_reg;
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, L->ev.done[k], 0));
  if (L->out_pinned) { /* the DMA writes the result itself */
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                           d->s_d2h));
    CU_TRY(cudaEventRecord(L->ev.slot_ev[ML_DOWN], d->s_d2h));
    goto fail; /* the caller stages the rest and waits */
  }
  for (size_t off = 0; off < bytes; off += len) {
    int s = ML_DOWN + (int)(L->down_no++ % 2);
    len = bytes - off < chunk ? bytes - off : chunk;
    CU_TRY(cudaEventSynchronize(L->ev.slot_ev[s])); /* drained: see below */
    CU_TRY(cudaMemcpyAsync(d->slot[s].host, src + off, len,
                           cudaMemcpyDeviceToHost, d->s_d2h));
    CU_TRY(cudaEventRecord(L->ev.slot_ev[s], d->s_d2h));
    if (kn >= 0 && L->in.C > 0 && *o < L->r1[kn]) {
      double t0 = t_now_ms();
      T_TRY(ml_up_chunk(L, kn, o, e));
      *up_ms += t_now_ms() - t0;
    }
    /* the other down slot's chunk into place before it is filled again */
    if (ps >= 0) T_TRY(ml_drain(L, ps, pend, pend_len, e));
    ps = s;
    pend = dst + off;
    pend_len = len;
  }
  if (ps >= 0) T_TRY(ml_drain(L, ps, pend, pend_len, e));
fail:
  return rc;
}

extern "C" int cuda_map_lane_finish(map_lane *L, int64_t r0, int64_t r1,
                                    terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nf % ML_NBUF), kn = -1;
  int64_t o = 0;
  double t0 = t_now_ms(), up_ms = 0;
  /* the oldest launched block, and only it, queued */
  T_ASSERT(L->nf < L->nl && L->r0[k] == r0 && L->r1[k] == r1 &&
           L->queued[k]);
  CU_TRY(cudaSetDevice(d->ordinal));
  if (L->nl > L->nf + 1 && !L->queued[(L->nf + 1) % ML_NBUF]) {
    kn = (int)((L->nf + 1) % ML_NBUF); /* launched behind it: goes up now */
    o = L->r0[kn];
    T_TRY(ml_up_pinned(L, kn, e));
    if (L->in.C == 0) { /* nothing through the slots: its kernel now */
      T_TRY(ml_kernel(L, kn, e));
      kn = -1;
    }
  }
  T_TRY(ml_down(L, k, kn, &o, &up_ms, e));
  if (kn >= 0) {
    double t1 = t_now_ms();
    while (L->in.C > 0 && o < L->r1[kn]) T_TRY(ml_up_chunk(L, kn, &o, e));
    T_TRY(ml_kernel(L, kn, e));
    up_ms += t_now_ms() - t1;
  }
  if (L->out_pinned) CU_TRY(cudaEventSynchronize(L->ev.slot_ev[ML_DOWN]));
  L->t.compute += dev_event_ms(L->ev.kbeg[k], L->ev.done[k]);
  L->nf++;
fail:
  L->t.h2d += up_ms;
  L->t.d2h += t_now_ms() - t0 - up_ms;
  return rc;
}

extern "C" void cuda_map_lane_close(map_lane *L, int rc, map_lane_times *t) {
  if (!L) return;
  lane_quiesce(L->d);
  if (t) *t = L->t;
  lane_release(L->d, L->buf, &L->ev, L->nin, &L->in, rc);
  free(L);
}
