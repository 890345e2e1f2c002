/* devmem.cu — the per-device memory pool: cudaMalloc'd blocks kept for reuse
 * across jobs, so that a job's buffers cost no cudaMalloc/cudaFree (which
 * synchronise the whole device) once the service is warm.
 *
 * Sizes are rounded to classes: powers of two up to 1 MiB, then multiples
 * of 2 MiB (so a 8 GB buffer wastes at most 2 MiB, not 8 GB). A request is
 * served by the smallest cached block that holds it and is at most 1/8
 * larger (so that small requests do not pin big blocks); otherwise by
 * cudaMalloc. When cudaMalloc reports out of memory the pool gives its
 * cached blocks back, then asks the resident-array cache to evict arrays
 * no running job holds (through pool->evict, set at start: the cache
 * allocates from the pool, so the pool does not call it by name), and tries again before failing with T_ENOMEM.
 * Freed blocks are cached up to pool->cache_cap bytes; beyond that they go
 * straight back to CUDA.
 *
 * Threads: every function runs under the device's lock (devctx.lock).
 */
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"
#include "util/vec.h"

#define POOL_SMALL_MAX ((size_t)1 << 20)
#define POOL_LARGE_STEP ((size_t)2 << 20)

static size_t round_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= POOL_SMALL_MAX) {
    size_t c = 256;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + POOL_LARGE_STEP - 1) / POOL_LARGE_STEP * POOL_LARGE_STEP;
}

void devpool_init(devpool *p, size_t cache_cap) {
  memset(p, 0, sizeof *p);
  p->cache_cap = cache_cap;
}

/* Take the best cached block for `want` bytes, or -1. */
static int take_cached(devpool *p, size_t want) {
  int best = -1;
  for (int i = 0; i < p->nfree; i++) {
    size_t b = p->free[i].bytes;
    if (b < want || b - want > want / 8) continue;
    if (best < 0 || b < p->free[best].bytes) best = i;
  }
  return best;
}

int devmem_alloc(devctx *d, size_t bytes, devbuf *out, terr *e) {
  DEV_ASSERT_HELD(d); /* the pool is the device's: guarded by its lock */
  devpool *p = &d->pool;
  out->ptr = NULL;
  out->bytes = 0;
  size_t want = round_class(bytes);
  if (want < bytes) /* overflow of the rounding */
    return terr_set(e, T_ETOOLARGE, "", -1, "GPU buffer of %zu bytes", bytes);
  int i = take_cached(p, want);
  if (i >= 0) {
    *out = p->free[i];
    p->free[i] = p->free[--p->nfree];
    p->cached_bytes -= out->bytes;
    p->live_bytes += out->bytes;
    return 0;
  }
  void *ptr = NULL;
  cudaError_t err = cudaMalloc(&ptr, want);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    devpool_trim(d);
    err = cudaMalloc(&ptr, want);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t freed = p->evict ? p->evict(d, want) : 0;
      if (freed) err = cudaMalloc(&ptr, want);
    }
  }
  if (err != cudaSuccess) {
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t fr = 0, tot = 0;
      cudaMemGetInfo(&fr, &tot);
      return terr_set(e, T_ENOMEM, "", -1,
                      "out of GPU memory on device %d: %zu bytes asked, %zu "
                      "of %zu free",
                      d->index, want, fr, tot);
    }
    return dev_fail(e, err, "cudaMalloc", __FILE__, __LINE__);
  }
  out->ptr = ptr;
  out->bytes = want;
  p->live_bytes += want;
  return 0;
}

void devmem_free(devctx *d, devbuf *b) {
  if (!b || !b->ptr) return;
  DEV_ASSERT_HELD(d);
  devpool *p = &d->pool;
  p->live_bytes -= b->bytes;
  int keep = p->cached_bytes + b->bytes <= p->cache_cap;
  if (keep && tvec_grow(&p->free, &p->capfree, sizeof *p->free,
                        (size_t)p->nfree + 1, 0))
    keep = 0;
  if (keep) {
    p->free[p->nfree++] = *b;
    p->cached_bytes += b->bytes;
  } else {
    cudaFree(b->ptr);
    (void)cudaGetLastError();
  }
  b->ptr = NULL;
  b->bytes = 0;
}

void devpool_trim(devctx *d) {
  devpool *p = &d->pool;
  for (int i = 0; i < p->nfree; i++) cudaFree(p->free[i].ptr);
  (void)cudaGetLastError();
  p->nfree = 0;
  p->cached_bytes = 0;
}

void devpool_destroy(devctx *d) {
  devpool_trim(d);
  free(d->pool.free);
  d->pool.free = NULL;
  d->pool.capfree = 0;
}
