/* stage.cu — pinned host staging and the host copy gang.
 *
 * Job data lives in pageable host memory (heap arrays, mapped .npy files).
 * DMA from pageable memory runs at a fraction of the PCIe rate (the driver
 * stages it through its own small pinned buffers), so every chunked job
 * copies through DEV_STAGE_SLOTS pinned slots allocated once per device
 * (cudaHostAlloc) and reused by every job. The copies between the job's
 * memory and a slot are done by a gang of host threads (one host thread
 * copies at ~10 GB/s; PCIe moves ~55 GB/s), while the DMA engines work on
 * other slots.
 *
 * The gang: n-1 helper threads plus the caller. gang_copy splits the total
 * bytes of its items evenly (64-byte aligned cuts) among the n, wakes the
 * helpers, does its own share and waits for theirs. Small copies (under
 * 1 MiB) are done by the caller alone.
 *
 * Results in files (issue 11, "results at memory speed"). A result bigger
 * than the inline cap is a fresh MAP_SHARED mapping of its fallocated .npy
 * (compute/array/codec/npyfile.c), and the gang's copies out of the slots are the first
 * writes to its pages: every 4 KiB page faults (page-cache allocation and
 * zeroing, ext4_page_mkwrite with a journal handle), and faults taken by
 * threads that are also copying scale badly. Measured with
 * tests/bench/bench_d2h_store.cu on the GPU machine (one H100, 16 cores,
 * kernel 6.18, ext4; 800 MB already in device memory until it is in the
 * result file's page cache, median of 5):
 *
 *   d2h into one pinned buffer (the PCIe ceiling, no file)   14.5 ms  55 GB/s
 *   slots -> mapped file, gang memcpy (the old way)          407-432 ms  1.9 GB/s
 *   slots -> pwrite by 1, 4 or 16 threads (a sink)           160-172 ms  4.8 GB/s
 *   pinned -> file, pwrite by 1..16 threads (no GPU)         149-177 ms  5.3 GB/s
 *   whole mapping prefaulted by the gang, then slots + gang  116-127 ms  6.6 GB/s
 *   each thread prefaulting its share of a chunk, then copy  284-423 ms
 *   cudaHostRegister of the file mapping (d2h straight in)   refused (EINVAL)
 *
 * pwrite is held to one copy stream by the file's inode lock; prefaulting
 * the whole mapping first (MADV_POPULATE_WRITE, each gang thread over its
 * share, nobody copying yet) is the fastest way into an ext4 page cache, so
 * stage_prefault does that for a mapping marked map_prefault, before the
 * first chunk comes down (stage_prefault_share: one lane's share of it, in
 * a run over several devices, each lane on its own device's gang). On tmpfs (/dev/shm) the order flips — the old way
 * 50 ms (16 GB/s), prefaulted 158 ms — so npyfile.c marks only mappings on
 * other file systems. Registering a mapping with the GPU instead
 * (cudaHostRegister, so that DMA reaches the file's pages directly) is
 * refused for ext4 files, and for a /dev/shm file it costs more than it
 * saves: register + d2h + unregister 170-219 ms for 800 MB (pinning every
 * page) against 50 ms through the slots; so same-host files (--local-dir)
 * go through the slots and the gang like any host array.
 * A kernel without MADV_POPULATE_WRITE (before 5.14)
 * gets each page touched instead (a read and a write of the same byte: the
 * file is new and nobody else writes it).
 *
 * Populating ahead was tried and lost (2026-11-29, H200 host, map of 10^8
 * float64 from an uploaded array): filler threads populating the result
 * while the gang staged the input up made the h2d 147 ms instead of 26 and
 * the job 356 ms instead of 177 — faults on the input's and the result's
 * mappings, and two gangs of 16 on 16 cores, fight. The prefault stays in
 * front; matmul runs it while the GEMM computes, when the gang is idle.
 *
 * Page-locked inputs and outputs (issue 25). Memory the DMA engines reach
 * directly — a buffer from cudaHostAlloc, or a shared-memory region the
 * service registered with cudaHostRegister — needs none of the above:
 * stage_pinned says so (cudaPointerGetAttributes, both ends of the range),
 * and stage_upload / stage_download, and the chunked map and reduce
 * (fuse_stage_chunk, map.cu), then move its bytes by DMA from / into it
 * with no slot and no gang copy, at the PCIe rate (55 GB/s each way on an
 * H200, h2d and d2h of different chunks at once). Pageable memory keeps the
 * slots: the gang's copy of chunk k+1 overlaps the DMA and kernel of chunk
 * k, so it costs what the host copy costs, not that plus the transfer.
 *
 * Results below KIND_GPU_SINK_MAX (compute/kinds/kinds.h) are not mapped
 * at all: map writes them into a sink, a pwrite from each slot
 * (stage_download_array), because on ext4 the prefault of a fresh mapping
 * does not shrink with it — measured on an H200 for x+1 results of 80, 240
 * and 800 MB: prefault + run 38, 79, 113 ms; sink 19, 59, 205 ms.
 *
 * Threads: stage_* run under the device lock. A gang serves one caller at a
 * time (the device lock holder); its mutex guards gen/pending/items.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#include "compute/gpu/devctx.h"
#include "util/util.h"

size_t stage_chunk(const devctx *d) {
  return d->slot[0].bytes < DEV_CHUNK_MAX ? d->slot[0].bytes : DEV_CHUNK_MAX;
}

int stage_ensure(devctx *d, terr *e) {
  int rc = 0;
  DEV_ASSERT_HELD(d); /* the slots are the device's, one job at a time */
  size_t per = d->stage_total / DEV_STAGE_SLOTS;
  per &= ~(size_t)4095;
  for (int i = 0; i < DEV_STAGE_SLOTS; i++) {
    stage_slot *s = &d->slot[i];
    if (s->host) continue;
    CU_TRY(cudaHostAlloc((void **)&s->host, per, cudaHostAllocPortable));
    s->bytes = per;
    s->busy = 0;
  }
  return 0;
fail:
  /* cudaHostAlloc failing for lack of memory is a host-memory shortage. */
  if (rc == T_ENOMEM || rc == T_EDEVICE)
    terr_prefix(e, "pinned staging");
  return rc;
}

void stage_destroy(devctx *d) {
  for (int i = 0; i < DEV_STAGE_SLOTS; i++) {
    if (d->slot[i].host) cudaFreeHost(d->slot[i].host);
    d->slot[i].host = NULL;
    d->slot[i].bytes = 0;
  }
  (void)cudaGetLastError();
}

/* ---- the gang ---------------------------------------------------------- */

typedef struct gang_arg {
  gang *g;
  int k;
} gang_arg;

struct gang {
  int n; /* participants, the caller included */
  int started;
  pthread_t th[DEV_GANG_MAX];
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;
  int pending, quit;
  const gang_item *items;
  int nitems;
  size_t total;
  void (*fn)(void *arg, int k, int n); /* gang_run's work, else NULL */
  void *fn_arg;
  gang_arg arg[DEV_GANG_MAX];
};

/* Make the pages of [p, p + len) present and writable: MADV_POPULATE_WRITE
 * over the whole pages it touches (a neighbour populating the same edge page
 * is harmless), else touch each page. */
static void populate(char *p, size_t len) {
  static const size_t pg = 4096;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1),
            b = ((uintptr_t)p + len + pg - 1) & ~(uintptr_t)(pg - 1);
  if (len == 0) return;
  if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0) return;
  if (errno != EINVAL) return; /* a shortage: the copy will fault as before */
  for (uintptr_t q = (uintptr_t)p; q < (uintptr_t)p + len;
       q = (q & ~(uintptr_t)(pg - 1)) + pg) {
    volatile char *c = (volatile char *)q;
    *c = *c;
  }
}

/* Copy bytes [lo, hi) of the concatenation of the items (populate the
 * destination of an item whose src is NULL). */
static void copy_share(const gang_item *it, int n, size_t lo, size_t hi) {
  size_t off = 0;
  for (int i = 0; i < n && off < hi; i++) {
    size_t a = off, b = off + it[i].bytes;
    off = b;
    if (b <= lo) continue;
    size_t s = lo > a ? lo : a, t = hi < b ? hi : b;
    if (s < t && !it[i].src)
      populate((char *)it[i].dst + (s - a), t - s);
    else if (s < t)
      memcpy((char *)it[i].dst + (s - a), (const char *)it[i].src + (s - a),
             t - s);
  }
}

static void share_bounds(const gang *g, int k, size_t *lo, size_t *hi) {
  size_t per = (g->total / (size_t)g->n + 63) & ~(size_t)63;
  *lo = per * (size_t)k;
  *hi = *lo + per;
  if (*lo > g->total) *lo = g->total;
  if (*hi > g->total || k == g->n - 1) *hi = g->total;
}

static void *gang_main(void *p) {
  gang_arg *a = (gang_arg *)p;
  gang *g = a->g;
  uint64_t seen = 0;
  pthread_mutex_lock(&g->mu);
  for (;;) {
    while (!g->quit && g->gen == seen) pthread_cond_wait(&g->go, &g->mu);
    if (g->quit) break;
    seen = g->gen;
    size_t lo, hi;
    share_bounds(g, a->k, &lo, &hi);
    const gang_item *items = g->items;
    int nitems = g->nitems;
    void (*fn)(void *, int, int) = g->fn;
    void *fn_arg = g->fn_arg;
    pthread_mutex_unlock(&g->mu);
    if (fn)
      fn(fn_arg, a->k, g->n);
    else
      copy_share(items, nitems, lo, hi);
    pthread_mutex_lock(&g->mu);
    if (--g->pending == 0) pthread_cond_signal(&g->done);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

gang *gang_create(int n) {
  if (n < 1) n = 1;
  if (n > DEV_GANG_MAX) n = DEV_GANG_MAX;
  gang *g = (gang *)calloc(1, sizeof *g);
  if (!g) return NULL;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->go, NULL);
  pthread_cond_init(&g->done, NULL);
  g->n = 1;
  for (int k = 1; k < n; k++) {
    gang_arg *a = &g->arg[k];
    a->g = g;
    a->k = k;
    if (pthread_create(&g->th[k], NULL, gang_main, a) != 0) break;
    g->started = k;
    g->n = k + 1;
  }
  return g;
}

int gang_size(const gang *g) { return g ? g->n : 1; }

void gang_destroy(gang *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->quit = 1;
  pthread_cond_broadcast(&g->go);
  pthread_mutex_unlock(&g->mu);
  for (int k = 1; k <= g->started; k++) pthread_join(g->th[k], NULL);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->go);
  pthread_cond_destroy(&g->done);
  free(g);
}

void gang_copy(gang *g, const gang_item *items, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += items[i].bytes;
  if (!g || g->n == 1 || total < ((size_t)1 << 20)) {
    copy_share(items, n, 0, total);
    return;
  }
  pthread_mutex_lock(&g->mu);
  g->items = items;
  g->nitems = n;
  g->total = total;
  g->fn = NULL;
  g->pending = g->n - 1;
  g->gen++;
  pthread_cond_broadcast(&g->go);
  pthread_mutex_unlock(&g->mu);
  size_t lo, hi;
  share_bounds(g, 0, &lo, &hi);
  copy_share(items, n, lo, hi);
  pthread_mutex_lock(&g->mu);
  while (g->pending > 0) pthread_cond_wait(&g->done, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

void gang_run(gang *g, void (*fn)(void *arg, int k, int n), void *arg) {
  if (!g || g->n == 1) {
    fn(arg, 0, 1);
    return;
  }
  pthread_mutex_lock(&g->mu);
  g->fn = fn;
  g->fn_arg = arg;
  g->pending = g->n - 1;
  g->gen++;
  pthread_cond_broadcast(&g->go);
  pthread_mutex_unlock(&g->mu);
  fn(arg, 0, g->n);
  pthread_mutex_lock(&g->mu);
  while (g->pending > 0) pthread_cond_wait(&g->done, &g->mu);
  g->fn = NULL;
  pthread_mutex_unlock(&g->mu);
}

void stage_prefault(devctx *d, tarray *out, double *ms) {
  if (!out || !out->map_base || !out->map_prefault || out->map_warm) return;
  double t0 = t_now_ms();
  gang_item it = {out->map_base, NULL, out->map_len};
  gang_copy(d->gang, &it, 1);
  out->map_prefault = 0; /* done: its pages are in */
  double t = t_now_ms() - t0;
  log_debug("gpu %d: prefault %.1f MB by %d threads in %.1f ms (%.1f GB/s)",
            d->index, out->map_len / 1e6, gang_size(d->gang), t,
            t > 0 ? out->map_len / t / 1e6 : 0.0);
  if (ms) *ms += t;
}

void stage_prefault_share(devctx *d, tarray *out, int rank, int nlive,
                          double *ms) {
  if (!out || !out->map_base || !out->map_prefault || nlive < 1) return;
  double t0 = t_now_ms();
  size_t per = (out->map_len / (size_t)nlive + 4095) & ~(size_t)4095;
  size_t lo = per * (size_t)rank, hi = lo + per;
  if (hi > out->map_len) hi = out->map_len;
  if (lo < hi) {
    gang_item it = {(char *)out->map_base + lo, NULL, hi - lo};
    gang_copy(d->gang, &it, 1);
  }
  if (ms) *ms += t_now_ms() - t0;
}

/* ---- page-locked host memory ------------------------------------------- */

static int pinned_at(const void *p) {
  cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky; keep it from the next check */
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}

int stage_pinned(const void *p, size_t bytes) {
  if (!p || bytes == 0) return 0;
  return pinned_at(p) && pinned_at((const char *)p + bytes - 1);
}

/* ---- whole-buffer transfers -------------------------------------------- */

int stage_upload(devctx *d, void *dst, const void *src, size_t bytes,
                 terr *e) {
  int rc = 0;
  if (bytes < ((size_t)1 << 20) || stage_pinned(src, bytes)) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->s_h2d));
    CU_TRY(cudaStreamSynchronize(d->s_h2d));
    return 0;
  }
  T_TRY(stage_ensure(d, e));
  {
    size_t per = stage_chunk(d), off = 0;
    T_ASSERT(per > 0); /* stage_ensure made the slots: else no progress */
    for (int64_t k = 0; off < bytes; k++) {
      stage_slot *s = &d->slot[k % DEV_STAGE_SLOTS];
      size_t n = bytes - off < per ? bytes - off : per;
      T_ASSERT(n <= s->bytes); /* the slots are of one size */
      if (s->busy) CU_TRY(cudaEventSynchronize(s->h2d_done));
      gang_item it = {s->host, (const char *)src + off, n};
      gang_copy(d->gang, &it, 1);
      CU_TRY(cudaMemcpyAsync((char *)dst + off, s->host, n,
                             cudaMemcpyHostToDevice, d->s_h2d));
      CU_TRY(cudaEventRecord(s->h2d_done, d->s_h2d));
      s->busy = 1;
      off += n;
    }
    CU_TRY(cudaStreamSynchronize(d->s_h2d));
  }
fail:
  for (int i = 0; i < DEV_STAGE_SLOTS; i++) d->slot[i].busy = 0;
  return rc;
}

int stage_download(devctx *d, void *dst, const void *src, size_t bytes,
                   terr *e) {
  int rc = 0;
  double t0 = t_now_ms(), drain = 0;
  if (bytes < ((size_t)1 << 20) || stage_pinned(dst, bytes)) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->s_d2h));
    CU_TRY(cudaStreamSynchronize(d->s_d2h));
    return 0;
  }
  T_TRY(stage_ensure(d, e));
  {
    size_t per = stage_chunk(d);
    int64_t nchunks = (int64_t)((bytes + per - 1) / per);
    /* Issue chunk k's DMA, then drain chunk k-1 while it runs. */
    for (int64_t k = 0; k <= nchunks; k++) {
      if (k < nchunks) {
        stage_slot *s = &d->slot[k % DEV_STAGE_SLOTS];
        size_t off = (size_t)k * per, n = bytes - off < per ? bytes - off : per;
        T_ASSERT(n <= s->bytes); /* the slots are of one size */
        CU_TRY(cudaMemcpyAsync(s->host, (const char *)src + off, n,
                               cudaMemcpyDeviceToHost, d->s_d2h));
        CU_TRY(cudaEventRecord(s->d2h_done, d->s_d2h));
      }
      if (k > 0) {
        int64_t j = k - 1;
        stage_slot *s = &d->slot[j % DEV_STAGE_SLOTS];
        size_t off = (size_t)j * per, n = bytes - off < per ? bytes - off : per;
        CU_TRY(cudaEventSynchronize(s->d2h_done));
        gang_item it = {(char *)dst + off, s->host, n};
        double t1 = t_now_ms();
        gang_copy(d->gang, &it, 1);
        drain += t_now_ms() - t1;
      }
    }
  }
  {
    double t = t_now_ms() - t0;
    log_debug("gpu %d: d2h %.1f MB through the slots in %.1f ms (%.1f GB/s), "
              "%.1f ms of it the gang's copies", d->index, bytes / 1e6, t,
              t > 0 ? bytes / t / 1e6 : 0.0, drain);
  }
fail:
  return rc;
}

int stage_download_array(devctx *d, tarray *out, const void *src, terr *e) {
  int rc = 0;
  size_t es = tdtype_size(out->dtype), bytes = (size_t)out->size * es;
  if (!out->sink) return stage_download(d, out->data, src, bytes, e);
  T_TRY(stage_ensure(d, e));
  {
    /* Whole elements a slot; chunk k's DMA runs while chunk k-1 is written
     * (pwrite from the pinned slot into the page cache: one copy). */
    int64_t per = (int64_t)(stage_chunk(d) / es);
    int64_t nchunks = (out->size + per - 1) / per;
    T_ASSERT(per > 0);
    for (int64_t k = 0; k <= nchunks; k++) {
      if (k < nchunks) {
        stage_slot *s = &d->slot[k % DEV_STAGE_SLOTS];
        int64_t start = k * per, n = out->size - start < per ? out->size - start : per;
        CU_TRY(cudaMemcpyAsync(s->host, (const char *)src + (size_t)start * es,
                               (size_t)n * es, cudaMemcpyDeviceToHost, d->s_d2h));
        CU_TRY(cudaEventRecord(s->d2h_done, d->s_d2h));
      }
      if (k > 0) {
        int64_t j = k - 1, start = j * per;
        int64_t n = out->size - start < per ? out->size - start : per;
        stage_slot *s = &d->slot[j % DEV_STAGE_SLOTS];
        CU_TRY(cudaEventSynchronize(s->d2h_done));
        T_TRY(tarray_write(out, start, n, s->host, e));
      }
    }
  }
fail:
  if (rc) { /* no DMA may still be writing a slot the next job fills */
    cudaStreamSynchronize(d->s_d2h);
    (void)cudaGetLastError();
  }
  return rc;
}
