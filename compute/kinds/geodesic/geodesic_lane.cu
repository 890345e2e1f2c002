/* geodesic_lane.cu — a lane session: one device's share of a geodesic
 * matrix over every lent GPU (geod_mgpu, compute/kinds/geodesic/gpu.c),
 * kept on the device across the lane's blocks (geodesic_cuda.h declares
 * the C side, cuda_geod_lane_*).
 *
 * A lane (a thread of compute/kinds/mgpu.h holding its device) opens a
 * session once: the device taken (dev_begin, on the lane's thread: the
 * lock the lane borrowed), its pinned slots made, the points copied up
 * once, and two device block buffers of the plan's largest block. Then,
 * block after block, launch enqueues a block's kernel into the buffer
 * not in use (on the device's compute stream, after that buffer's copies
 * are done: an event), and finish copies the oldest launched block down
 * through the device's pinned slots on the copy-out stream (after the
 * block's kernel: an event), draining chunk c - 1 into the result on the
 * device's gang while chunk c is in flight. The engine launches block
 * k + 1 before it finishes block k, so the kernel of k + 1 runs while k
 * is copied off and drained: a lane costs about max(compute, d2h +
 * drain), not their sum. prefault populates the lane's share of a fresh
 * result mapping on its device's gang, before any lane writes (stage.cu
 * says why the whole mapping first, nobody copying yet); each lane's gang
 * does its share at the same time, so every device's copy threads fault
 * pages in. close ends the session on every path (streams synchronised
 * before the buffers are freed) and gives the lane's counters.
 *
 * The kernel is geodesic_kernel.cu's, in the mode of the whole plan's
 * bands over several devices: SQR (square: element (i, j) from the pair
 * (min, max), both halves computed), ROWS (targets) or COND (condensed);
 * a block is launched in pieces of at most GL_PIECE rows (the grid's y
 * limit). The same kernel on the same rows: the same bits as one GPU.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/geodesic_int.h"

#define GL_PIECE ((int64_t)1 << 20) /* rows a launch: 32768 tiles high */

struct geod_lane {
  devctx *d;
  const geod_plan *pl;
  tarray *out;
  geod_gpu_job job; /* its stop check only */
  int mode, f32, have_ev;
  devbuf bp, bq, bnc, bout, bnc2; /* bnc2: a Vincenty counter a buffer */
  unsigned long long hnc;         /* the finished block's count */
  size_t cap, chunk; /* bytes a block buffer; a copy */
  gg_args a;
  gg_events ev;         /* band[k]: buffer k's kernel done; slot[k]: freed */
  cudaEvent_t t0, t1;   /* first kernel queued, last kernel done */
  int64_t r0[2], r1[2]; /* the block in each buffer */
  int64_t nl, nf;       /* blocks launched; blocks finished */
  int64_t chunk_no;
  double h2d, d2h;
};

/* The first element of row r (COND: its condensed index; the end of the
 * matrix past its last row). */
static int64_t gl_first(const geod_plan *pl, int64_t r) {
  if (!pl->condensed) return r * pl->m;
  return r < pl->n - 1 ? geod_condensed_index(pl->n, r, r + 1)
                       : pl->n * (pl->n - 1) / 2;
}

extern "C" size_t cuda_geod_lane_bytes(const geod_plan *pl, int64_t r0,
                                       int64_t r1) {
  return (size_t)(gl_first(pl, r1) - gl_first(pl, r0)) *
         tdtype_size(pl->dtype);
}

/* Device side of an open: points, counter, events, the two buffers. */
static int gl_setup(geod_lane *L, terr *e) {
  int rc = 0;
  size_t budget = 0;
  double t0 = t_now_ms();
  T_TRY(stage_ensure(L->d, e));
  T_TRY(gg_events_create(&L->ev, e));
  L->have_ev = 1;
  CU_TRY(cudaEventCreateWithFlags(&L->t0, cudaEventDefault));
  CU_TRY(cudaEventCreateWithFlags(&L->t1, cudaEventDefault));
  T_TRY(gg_points_up(L->d, L->pl, &L->bp, &L->bq, &L->bnc, e));
  L->h2d += t_now_ms() - t0;
  T_TRY(gg_budget(L->pl, &budget, e));
  if (2 * L->cap > budget)
    return terr_set(e, T_ENOMEM, "", -1,
                    "CUDA: %zu bytes of device memory cannot hold two "
                    "blocks of %zu bytes",
                    budget, L->cap);
  if (L->cap > 0) T_TRY(devmem_alloc(L->d, 2 * L->cap, &L->bout, e));
  T_TRY(devmem_alloc(L->d, 2 * sizeof(unsigned long long), &L->bnc2, e));
  CU_TRY(cudaMemsetAsync(L->bnc2.ptr, 0, 2 * sizeof(unsigned long long),
                         L->d->s_comp));
  CU_TRY(cudaStreamSynchronize(L->d->s_comp));
  gg_args_init(&L->a, L->pl, (const geod_point *)L->bp.ptr,
               L->bq.ptr ? (const geod_point *)L->bq.ptr
                         : (const geod_point *)L->bp.ptr,
               (unsigned long long *)L->bnc.ptr);
  L->chunk = L->d->slot[0].bytes;
  if (L->pl->gpu_chunk_bytes > 0 && (size_t)L->pl->gpu_chunk_bytes < L->chunk)
    L->chunk = (size_t)L->pl->gpu_chunk_bytes;
fail:
  return rc;
}

extern "C" int cuda_geod_lane_open(int dev, const geod_plan *pl, tarray *out,
                                   size_t cap, int (*stopped)(void *ctx),
                                   void *ctx, geod_lane **lane, terr *e) {
  *lane = NULL;
  geod_lane *L = (geod_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  L->pl = pl;
  L->out = out;
  L->cap = cap;
  L->job.ctx = ctx;
  L->job.stopped = stopped;
  L->f32 = pl->dtype == T_F32;
  L->mode = pl->condensed ? GG_COND : pl->has_targets ? GG_ROWS : GG_SQR;
  int rc = gg_begin(dev, &L->d, e);
  if (rc) {
    free(L);
    return rc;
  }
  *lane = L; /* from here on, close ends it on every path */
  return gl_setup(L, e);
}

extern "C" void cuda_geod_lane_prefault(geod_lane *L, int rank, int nlive,
                                        double *ms) {
  tarray *out = L->out;
  if (!out->map_base || !out->map_prefault || nlive < 1) return;
  double t0 = t_now_ms();
  size_t per = (out->map_len / (size_t)nlive + 4095) & ~(size_t)4095;
  size_t lo = per * (size_t)rank, hi = lo + per;
  if (hi > out->map_len) hi = out->map_len;
  if (lo < hi) {
    gang_item it = {(char *)out->map_base + lo, NULL, hi - lo};
    gang_copy(L->d->gang, &it, 1);
  }
  if (ms) *ms += t_now_ms() - t0;
}

extern "C" int cuda_geod_lane_launch(geod_lane *L, int64_t r0, int64_t r1,
                                     terr *e) {
  int rc = 0;
  devctx *d = L->d;
  gg_args *a = &L->a;
  int k = (int)(L->nl % 2);
  size_t bytes = cuda_geod_lane_bytes(L->pl, r0, r1);
  T_ASSERT(L->nl - L->nf < 2 && bytes <= L->cap); /* a free buffer fits it */
  CU_TRY(cudaSetDevice(d->ordinal));
  if (L->nl >= 2) /* the buffer's last block is copied off */
    CU_TRY(cudaStreamWaitEvent(d->s_comp, L->ev.slot[k], 0));
  if (L->nl == 0) CU_TRY(cudaEventRecord(L->t0, d->s_comp));
  a->nonconv = (unsigned long long *)L->bnc2.ptr + k; /* zeroed by finish */
  for (int64_t p0 = r0; p0 < r1 && bytes > 0; p0 += GL_PIECE) {
    int64_t p1 = p0 + GL_PIECE < r1 ? p0 + GL_PIECE : r1;
    a->r0 = p0;
    a->r1 = p1;
    a->c0 = L->mode == GG_COND ? p0 : 0;
    a->base0 = L->mode == GG_COND ? gl_first(L->pl, p0) : 0;
    a->out = (char *)L->bout.ptr + (size_t)k * L->cap +
             cuda_geod_lane_bytes(L->pl, r0, p0);
    int64_t cols = L->pl->m - a->c0;
    if (cols <= 0) continue; /* the condensed matrix's last row */
    dim3 grid((unsigned)((cols + GG_TILE - 1) / GG_TILE),
              (unsigned)((p1 - p0 + GG_TILE - 1) / GG_TILE));
    CU_TRY(gg_launch(L->pl->method, L->mode, grid, d->s_comp, *a, L->f32));
  }
  CU_TRY(cudaEventRecord(L->ev.band[k], d->s_comp));
  CU_TRY(cudaEventRecord(L->t1, d->s_comp));
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->nl++;
fail:
  return rc;
}

/* Chunk c of the finishing block drained: its copy awaited, then the
 * gang moves it from its slot into the result. */
static int gl_drain(geod_lane *L, int s, size_t off, size_t len, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  CU_TRY(cudaEventSynchronize(d->slot[s].d2h_done));
  gg_drain(d, (char *)L->out->data + off, d->slot[s].host, len);
fail:
  return rc;
}

extern "C" int cuda_geod_lane_finish(geod_lane *L, int64_t r0, int64_t r1,
                                     int64_t *nonconv, terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int k = (int)(L->nf % 2), ps = -1;
  size_t es = tdtype_size(L->pl->dtype), pend_off = 0, pend_len = 0;
  size_t base = (size_t)gl_first(L->pl, r0) * es;
  size_t bytes = cuda_geod_lane_bytes(L->pl, r0, r1);
  const char *src = (const char *)L->bout.ptr + (size_t)k * L->cap;
  double t0 = t_now_ms();
  /* the oldest launched block, and only it */
  T_ASSERT(L->nf < L->nl && L->r0[k] == r0 && L->r1[k] == r1);
  CU_TRY(cudaSetDevice(d->ordinal));
  CU_TRY(cudaStreamWaitEvent(d->s_d2h, L->ev.band[k], 0));
  for (size_t o = 0; o < bytes; o += L->chunk) {
    size_t len = bytes - o < L->chunk ? bytes - o : L->chunk;
    int s = (int)(L->chunk_no++ % GG_NSTAGE);
    T_ASSERT(len <= d->slot[s].bytes);
    CU_TRY(cudaMemcpyAsync(d->slot[s].host, src + o, len,
                           cudaMemcpyDeviceToHost, d->s_d2h));
    CU_TRY(cudaEventRecord(d->slot[s].d2h_done, d->s_d2h));
    if (ps >= 0) T_TRY(gl_drain(L, ps, pend_off, pend_len, e));
    ps = s;
    pend_off = base + o;
    pend_len = len;
    T_TRY(gg_stopped(&L->job, e));
  }
  /* the block's Vincenty count read and zeroed, and every copy of buffer k
   * queued: a later launch into it waits for them */
  CU_TRY(cudaMemcpyAsync(&L->hnc, (unsigned long long *)L->bnc2.ptr + k,
                         sizeof L->hnc, cudaMemcpyDeviceToHost, d->s_d2h));
  CU_TRY(cudaMemsetAsync((unsigned long long *)L->bnc2.ptr + k, 0,
                         sizeof L->hnc, d->s_d2h));
  CU_TRY(cudaEventRecord(L->ev.slot[k], d->s_d2h));
  if (ps >= 0) T_TRY(gl_drain(L, ps, pend_off, pend_len, e));
  CU_TRY(cudaEventSynchronize(L->ev.slot[k]));
  if (nonconv) *nonconv += (int64_t)L->hnc;
  L->nf++;
fail:
  L->d2h += t_now_ms() - t0;
  return rc;
}

extern "C" void cuda_geod_lane_close(geod_lane *L, int rc, double *t_h2d,
                                     double *t_compute, double *t_d2h) {
  if (!L) return;
  devctx *d = L->d;
  (void)cudaSetDevice(d->ordinal);
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
  if (rc == 0 && L->nl > 0 && t_compute)
    *t_compute += dev_event_ms(L->t0, L->t1);
  if (t_h2d) *t_h2d += L->h2d;
  if (t_d2h) *t_d2h += L->d2h;
  devmem_free(d, &L->bout);
  devmem_free(d, &L->bq);
  devmem_free(d, &L->bp);
  devmem_free(d, &L->bnc);
  devmem_free(d, &L->bnc2);
  if (L->have_ev) gg_events_destroy(&L->ev);
  if (L->t0) (void)cudaEventDestroy(L->t0);
  if (L->t1) (void)cudaEventDestroy(L->t1);
  (void)cudaGetLastError();
  dev_end(d, rc);
  free(L);
}
