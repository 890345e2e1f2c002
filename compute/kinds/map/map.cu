/* map.cu — cuda_map (gpu_map): an elementwise expression on the GPU.
 *
 * The expression runs as one fused kernel generated from its parsed tree
 * (fusegen.cu, compiled by NVRTC and cached by kcache.cu): each element is
 * read once and written once, at the memory's pace. Why fused NVRTC code
 * rather than an interpreter kernel: an interpreter walks the program per
 * element and keeps its registers in local memory, so every instruction
 * costs memory traffic and a dispatch branch; the fused kernel is as fast as
 * a hand-written one, and its compile cost (tens of ms) is paid once per
 * expression shape (memory and disk cache). The benchmark measures both
 * sides of that trade (compile ms vs. kernel ms).
 *
 * Inputs are placed by kind (fuse.h): scalars are copied once; inputs that
 * broadcast are uploaded whole; full-size inputs are taken from the
 * resident cache when they are uploaded arrays (resident.cu), else they are
 * streamed. Then one of two paths:
 *   whole     nothing to stream and the output fits on the device: one
 *             kernel over everything, then the output goes down through the
 *             pinned slots (h2d 0 when every input was resident).
 *   chunked   the output is cut into chunks that fit a pinned slot; chunk k
 *             uses slot k % DEV_STAGE_SLOTS: the gang copies its inputs into
 *             the slot, the copy-in stream moves them up, the compute stream
 *             waits for that and runs the kernel, the copy-out stream waits
 *             for the kernel and moves the result down; before a slot is
 *             reused the host waits for its copy-out and the gang copies the
 *             result into `out`. So up to four chunks are in flight, and
 *             copy-in, compute and copy-out of different chunks overlap.
 *             The stop flag is checked before every chunk.
 * Page-locked host memory (issue 25): a streamed input that is pinned
 * (stage_pinned: a cudaHostAlloc'd buffer or a registered shared-memory
 * region) goes up by DMA from where it lies, and a pinned output is the
 * copy-out's destination itself, so neither passes through a slot or the
 * gang; the slot's pinned part is then unused for it, and the chunking,
 * streams and events are as above. Measured on an H200 (bench_pipeline):
 * 10^8 float64 `x**2 + 2*x + 1` pinned -> pinned in 16.7 ms, h2d and d2h of
 * different chunks at once (the two copies back to back take 28.9 ms).
 * A result sink (a file written by slices: kind_gpu_sink picks it for
 * results below KIND_GPU_SINK_MAX, where a fresh mapping's prefault costs
 * more than it saves) is written by tarray_write (pwrite) from the slot.
 * TESSEL_GPU_TRACE (set to anything) logs each run's own marks (device
 * lock, prefault, kernel cache, inputs, the run) at info level: how the
 * breakdown of tests/bench/results/h200-2026-11-28-pipeline.md was taken.
 * Timings: h2d / compute / d2h add the copy and kernel times of every chunk
 * (CUDA events) plus the host staging copies; in the chunked path they
 * overlap, so their sum can exceed the wall time.
 *
 * Threads: runs under the device's lock on the caller's thread; the gang
 * helps with the staging copies.
 *
 * A big job over every lent GPU (compute/kinds/map/lanes.h) runs a lane
 * session a device instead (map_lane.cu), with the signature and launch
 * of this file (map_sig_init, map_launch; map_int.h): the same kernel.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/map/map_int.h"

#define MAP_THREADS 256

/* The kernel's shape: groups of 4 elements per thread per step and
 * streaming (evict-first) accesses. The defaults are the fastest measured
 * (tests/bench/bench_gpu.c prints the variants); TESSEL_GPU_MAP_GROUPS
 * (1, 2, 4) and TESSEL_GPU_MAP_STREAMING (0, 1) override them. */
static void map_variant(int *groups, int *streaming) {
  int64_t v;
  const char *g = getenv("TESSEL_GPU_MAP_GROUPS"),
             *c = getenv("TESSEL_GPU_MAP_STREAMING");
  *groups = 2;    /* measured on an H200: 82% of copy bandwidth with one */
  *streaming = 0; /* input, 94% with three; 1 or 4 groups, or streaming */
                  /* hints, were 59-82% and 89-96% (bench_gpu) */
  if (g && t_parse_i64(g, &v) == 0 && (v == 1 || v == 2 || v == 4)) *groups = (int)v;
  if (c && t_parse_i64(c, &v) == 0 && (v == 0 || v == 1)) *streaming = (int)v;
}

/* One wave of as many blocks as the device holds at once (grid-stride
 * loops then never leave a partial last wave), fewer for small counts. */
static unsigned map_grid(devctx *d, CUfunction fn, int64_t count, int groups) {
  int64_t per = (int64_t)MAP_THREADS * 4 * groups;
  int64_t g = (count + per - 1) / per;
  int64_t cap = dev_wave_blocks(d, fn, MAP_THREADS);
  if (g > cap) g = cap;
  return (unsigned)(g < 1 ? 1 : g);
}

int map_launch(devctx *d, CUfunction fn, fuse_args *args, int64_t count,
               int groups, terr *e) {
  int rc = 0;
  void *params[] = {args};
  CU_TRY_DRV(dev_drv.LaunchKernel(fn, map_grid(d, fn, count, groups), 1, 1,
                                  MAP_THREADS, 1, 1, 0, d->s_comp, params, NULL));
fail:
  return rc;
}

/* The kernel's signature and the arguments every launch shares, from the
 * inputs' shapes against the output's (m[i].es set too). The one-GPU run
 * and every lane of a run over several (map_lane.cu) build it alike: the
 * same key, the same kernel, the same bits. */
void map_sig_init(const expr *x, int nin, const tarray *const *inputs,
                  const tarray *out, fuse_sig *sig, fuse_args *args,
                  fuse_input *m) {
  sig->x = x;
  sig->nin = nin;
  sig->ct = sig->out_dt = out->dtype;
  sig->vec4 = 1; /* slot regions, pool blocks and chunk starts are 16-aligned */
  map_variant(&sig->groups, &sig->stream_hint);
  args->ndim = out->ndim;
  for (int dd = 0; dd < out->ndim; dd++) args->shape[dd] = out->shape[dd];
  for (int i = 0; i < nin; i++) {
    int64_t st[T_MAXDIM];
    sig->mode[i] = (char)fuse_classify(inputs[i], out->ndim, out->shape, st);
    for (int dd = 0; dd < out->ndim; dd++) args->stride[i][dd] = st[dd];
    sig->in_dt[i] = inputs[i]->dtype;
    m[i].es = tdtype_size(inputs[i]->dtype);
    if (sig->mode[i] == FM_BCAST) sig->ndim = out->ndim;
  }
}

int fuse_place_inputs(devctx *d, int nin, const tarray *const *inputs,
                        const char *const *ids, const fuse_sig *sig,
                        fuse_input *m, fuse_args *args, const gpu_job *job,
                        terr *e) {
  int rc = 0;
  for (int i = 0; i < nin; i++) {
    const tarray *in = inputs[i];
    size_t bytes = (size_t)in->size * m[i].es;
    if (sig->mode[i] == FM_SCALAR) {
      T_TRY(devmem_alloc(d, m[i].es, &m[i].tmp, e));
      CU_TRY(cudaMemcpy(m[i].tmp.ptr, in->data, m[i].es, cudaMemcpyHostToDevice));
      m[i].dptr = m[i].tmp.ptr;
      continue;
    }
    if (ids && ids[i])
      T_TRY(resident_acquire(d, ids[i], in->data, bytes, (int)in->dtype,
                             &m[i].dptr, job->t_h2d, e));
    if (m[i].dptr) continue;
    if (sig->mode[i] == FM_BCAST) {
      T_TRY(devmem_alloc(d, bytes, &m[i].tmp, e));
      double t0 = t_now_ms();
      T_TRY(stage_upload(d, m[i].tmp.ptr, in->data, bytes, e));
      *job->t_h2d += t_now_ms() - t0;
      m[i].dptr = m[i].tmp.ptr;
    } else {
      m[i].streamed = 1;
      m[i].pinned = stage_pinned(in->data, bytes);
    }
  }
  for (int i = 0; i < nin; i++) {
    args->in[i] = m[i].dptr;
    args->off[i] = 0;
  }
fail:
  return rc;
}

int fuse_stage_chunk(devctx *d, int nin, const tarray *const *inputs,
                     const fuse_input *m, stage_slot *sl, void *dev_slot,
                     int64_t start, int64_t cnt, fuse_args *args,
                     double *t_h2d, terr *e) {
  int rc = 0;
  gang_item items[FUSE_MAX_IN];
  int ni = 0;
  T_ASSERT(nin >= 0 && nin <= FUSE_MAX_IN && start >= 0 && cnt >= 0);
  for (int i = 0; i < nin; i++)
    if (m[i].streamed && !m[i].pinned) {
      /* The chunk of each streamed input fits its region of the slot. */
      T_ASSERT(m[i].region + (size_t)cnt * m[i].es <= sl->bytes);
      items[ni++] = (gang_item){sl->host + m[i].region,
                                (const char *)inputs[i]->data +
                                    (size_t)start * m[i].es,
                                (size_t)cnt * m[i].es};
    }
  double t0 = t_now_ms();
  gang_copy(d->gang, items, ni);
  *t_h2d += t_now_ms() - t0;
  CU_TRY(cudaEventRecord(sl->h2d_start, d->s_h2d));
  for (int i = 0; i < nin; i++)
    if (m[i].streamed) {
      /* Page-locked inputs go up from where they are; the rest from the
       * slot the gang just filled. */
      const char *src = m[i].pinned ? (const char *)inputs[i]->data +
                                          (size_t)start * m[i].es
                                    : (const char *)sl->host + m[i].region;
      CU_TRY(cudaMemcpyAsync((char *)dev_slot + m[i].region, src,
                             (size_t)cnt * m[i].es, cudaMemcpyHostToDevice,
                             d->s_h2d));
      args->in[i] = (char *)dev_slot + m[i].region;
      args->off[i] = start;
    }
  CU_TRY(cudaEventRecord(sl->h2d_done, d->s_h2d));
  CU_TRY(cudaStreamWaitEvent(d->s_comp, sl->h2d_done, 0));
fail:
  return rc;
}

/* Everything on the device: one launch, then the output goes down. */
static int map_whole(devctx *d, CUfunction fn, int groups, fuse_args *args,
                     tarray *out, devbuf *obuf, const gpu_job *job, terr *e) {
  int rc = 0;
  size_t es = tdtype_size(out->dtype);
  args->out = obuf->ptr;
  args->start = 0;
  args->count = out->size;
  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  T_TRY(map_launch(d, fn, args, out->size, groups, e));
  CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
  CU_TRY(cudaEventSynchronize(d->ev_b));
  *job->t_compute += dev_event_ms(d->ev_a, d->ev_b);
  {
    double t0 = t_now_ms();
    T_TRY(stage_download_array(d, out, obuf->ptr, e));
    *job->t_d2h += t_now_ms() - t0;
  }
  if (job->keep_as) /* for a chained job: stays on the device (resident.cu) */
    resident_adopt(d, job->keep_as, (int)out->dtype,
                   (size_t)out->size * es, obuf);
  job->progress(job->ctx, out->size);
fail:
  return rc;
}

typedef struct chunk_rec {
  int64_t start, count;
} chunk_rec;

/* Wait for slot s's chunk and copy its result into out. */
static int slot_finish(devctx *d, int s, const chunk_rec *c, size_t out_region,
                       int out_pinned, tarray *out, const gpu_job *job,
                       terr *e) {
  int rc = 0;
  stage_slot *sl = &d->slot[s];
  size_t es = tdtype_size(out->dtype);
  T_ASSERT(sl->busy); /* a chunk in flight in the slot: its copies queued */
  CU_TRY(cudaEventSynchronize(sl->d2h_done));
  *job->t_h2d += dev_event_ms(sl->h2d_start, sl->h2d_done);
  *job->t_compute += dev_event_ms(sl->comp_start, sl->comp_done);
  *job->t_d2h += dev_event_ms(sl->d2h_start, sl->d2h_done);
  if (out->sink) { /* a result file written by slices: pwrite the slot */
    double t0 = t_now_ms();
    T_TRY(tarray_write(out, c->start, c->count, sl->host + out_region, e));
    *job->t_d2h += t_now_ms() - t0;
  } else if (!out_pinned) { /* else the DMA wrote into out itself */
    double t0 = t_now_ms();
    gang_item it = {(char *)out->data + (size_t)c->start * es,
                    sl->host + out_region, (size_t)c->count * es};
    gang_copy(d->gang, &it, 1);
    *job->t_d2h += t_now_ms() - t0;
  }
  sl->busy = 0;
  job->progress(job->ctx, c->count);
fail:
  return rc;
}

static int map_chunked(devctx *d, CUfunction fn, int groups, fuse_args *args,
                       int nin,
                       const tarray *const *inputs, fuse_input *m, tarray *out,
                       const gpu_job *job, terr *e) {
  int rc = 0;
  size_t es_out = tdtype_size(out->dtype), per_elem = es_out;
  devbuf dslot[DEV_STAGE_SLOTS];
  chunk_rec rec[DEV_STAGE_SLOTS];
  memset(dslot, 0, sizeof dslot);
  memset(rec, 0, sizeof rec);
  int64_t n = out->size, C = 0, k = 0, nchunks = 0;
  size_t out_region = 0;
  /* A page-locked result (a registered region) is written by the DMA. */
  int out_pinned = stage_pinned(out->data, (size_t)n * es_out);
  T_TRY(stage_ensure(d, e));
  for (int i = 0; i < nin; i++)
    if (m[i].streamed) per_elem += m[i].es;
  C = (int64_t)(stage_chunk(d) / per_elem) & ~(int64_t)255;
  if (C < 256) {
    rc = terr_set(e, T_ETOOLARGE, "params.inputs", -1,
                  "too many inputs for the GPU staging buffers");
    goto fail;
  }
  {
    size_t off = 0;
    for (int i = 0; i < nin; i++)
      if (m[i].streamed) {
        m[i].region = off;
        off += (size_t)C * m[i].es;
      }
    out_region = off;
    /* A chunk's inputs and its output fit one pinned slot. */
    T_ASSERT(out_region + (size_t)C * es_out <= d->slot[0].bytes);
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++)
    T_TRY(devmem_alloc(d, (size_t)C * per_elem, &dslot[s], e));
  nchunks = (n + C - 1) / C;
  for (k = 0; k < nchunks; k++) {
    int s = (int)(k % DEV_STAGE_SLOTS);
    stage_slot *sl = &d->slot[s];
    if (sl->busy) T_TRY(slot_finish(d, s, &rec[s], out_region, out_pinned, out, job, e));
    T_ASSERT(!sl->busy); /* the slot is free before it is staged again */
    if ((rc = job->stopped(job->ctx)) != 0) {
      terr_set(e, (terr_code)rc, "", -1, "stopped after %lld of %lld elements",
               (long long)(k * C), (long long)n);
      goto fail;
    }
    int64_t start = k * C, cnt = n - start < C ? n - start : C;
    rec[s].start = start;
    rec[s].count = cnt;
    /* The chunk's inputs: host -> pinned slot -> device, ordered by events. */
    T_TRY(fuse_stage_chunk(d, nin, inputs, m, sl, dslot[s].ptr, start, cnt,
                           args, job->t_h2d, e));
    CU_TRY(cudaEventRecord(sl->comp_start, d->s_comp));
    args->out = (char *)dslot[s].ptr + out_region;
    args->start = start;
    args->count = cnt;
    T_TRY(map_launch(d, fn, args, cnt, groups, e));
    CU_TRY(cudaEventRecord(sl->comp_done, d->s_comp));
    CU_TRY(cudaStreamWaitEvent(d->s_d2h, sl->comp_done, 0));
    CU_TRY(cudaEventRecord(sl->d2h_start, d->s_d2h));
    CU_TRY(cudaMemcpyAsync(out_pinned ? (char *)out->data + (size_t)start * es_out
                                      : (char *)sl->host + out_region,
                           (char *)dslot[s].ptr + out_region,
                           (size_t)cnt * es_out, cudaMemcpyDeviceToHost,
                           d->s_d2h));
    CU_TRY(cudaEventRecord(sl->d2h_done, d->s_d2h));
    sl->busy = 1;
  }
  /* Drain, oldest chunk first. */
  for (k = nchunks - DEV_STAGE_SLOTS; k < nchunks; k++) {
    if (k < 0) continue;
    int s = (int)(k % DEV_STAGE_SLOTS);
    if (d->slot[s].busy)
      T_TRY(slot_finish(d, s, &rec[s], out_region, out_pinned, out, job, e));
  }
fail:
  if (rc) { /* let in-flight copies finish before their buffers go */
    cudaStreamSynchronize(d->s_h2d);
    cudaStreamSynchronize(d->s_comp);
    cudaStreamSynchronize(d->s_d2h);
    (void)cudaGetLastError();
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++) {
    d->slot[s].busy = 0;
    devmem_free(d, &dslot[s]);
  }
  return rc;
}

int cuda_map(int dev, const expr *x, const tarray *const *inputs,
             const char *const *ids, tarray *out, const gpu_job *job,
             terr *e) {
  devctx *d = NULL;
  double tr[6] = {t_now_ms(), 0, 0, 0, 0, 0}; /* TESSEL_GPU_TRACE's marks */
  int rc = dev_begin(dev, &d, e);
  if (rc) return rc;
  tr[1] = t_now_ms();
  /* Result pages in before the first byte comes down (stage.cu). */
  stage_prefault(d, out, job ? job->t_d2h : NULL);
  tr[2] = t_now_ms();
  int nin = expr_ninputs(x), nstream = 0;
  fuse_input m[FUSE_MAX_IN];
  fuse_sig sig;
  fuse_args args;
  devbuf obuf = {NULL, 0};
  CUfunction fn = NULL;
  char *key = NULL;
  memset(m, 0, sizeof m);
  memset(&sig, 0, sizeof sig);
  memset(&args, 0, sizeof args);
  if (nin < 0 || nin > FUSE_MAX_IN || out->ndim > 8) {
    rc = terr_set(e, T_EINVAL, "params.inputs", -1, "%d inputs", nin);
    goto fail;
  }
  map_sig_init(x, nin, inputs, out, &sig, &args, m);
  job->progress_total(job->ctx, out->size);
  if (out->size == 0) goto done;
  if ((rc = job->stopped(job->ctx)) != 0) {
    terr_set(e, (terr_code)rc, "", -1, "stopped before start");
    goto fail;
  }
  key = (char *)malloc(MAP_KEY_MAX + EXPR_MAX_SRC * 8);
  if (!key || fuse_key(&sig, key, MAP_KEY_MAX + EXPR_MAX_SRC * 8) < 0) {
    rc = terr_set(e, T_ENOMEM, "", -1, "kernel key");
    goto fail;
  }
  {
    double cms = 0;
    T_TRY(kcache_get(d, key, fuse_gen_map, &sig, "tx_map", &fn, &cms, e));
    *job->t_compute += cms;
  }
  tr[3] = t_now_ms();
  T_TRY(fuse_place_inputs(d, nin, inputs, ids, &sig, m, &args, job, e));
  tr[4] = t_now_ms();
  for (int i = 0; i < nin; i++) nstream += m[i].streamed;
  if (nstream == 0) {
    /* Whole path when the output fits (beside what is resident). */
    size_t ob = (size_t)out->size * tdtype_size(out->dtype);
    terr ignore;
    if (ob <= d->mem_total / 2 && devmem_alloc(d, ob, &obuf, &ignore) == 0) {
      T_TRY(map_whole(d, fn, sig.groups, &args, out, &obuf, job, e));
      goto done;
    }
  }
  T_TRY(map_chunked(d, fn, sig.groups, &args, nin, inputs, m, out, job, e));
done:
fail:
  tr[5] = t_now_ms();
  if (getenv("TESSEL_GPU_TRACE"))
    log_info("gpu map trace: begin %.1f prefault %.1f kernel-cache %.1f "
             "inputs %.1f run %.1f ms (%s)", tr[1] - tr[0], tr[2] - tr[1],
             tr[3] ? tr[3] - tr[2] : 0, tr[4] ? tr[4] - tr[3] : 0,
             tr[4] ? tr[5] - tr[4] : 0, nstream ? "chunked" : "whole");
  free(key);
  devmem_free(d, &obuf);
  for (int i = 0; i < nin && i < FUSE_MAX_IN; i++) devmem_free(d, &m[i].tmp);
  dev_end(d, rc);
  return rc;
}
