/* resident.cu — uploaded arrays and GPU results kept in GPU memory between
 * jobs.
 *
 * An uploaded array ({"array": "a_..."}) has an id derived from its bytes,
 * so the id names the content for good: a job that reads the same array
 * again finds it already on the device and skips the copy (its timings show
 * h2d 0). Entries are keyed by (id, dtype, bytes) — a float32 job converts
 * a float64 upload, which is another entry. A job's result never changes
 * either, so a result computed whole on the device (map, matmul) is kept
 * under its job id (resident_adopt) — the very buffer that was copied to
 * the result file, so it equals the stored result bit for bit — and the
 * next job of a chain ({"result": "j_..."}) reads it with h2d 0. A deleted
 * job's entry is dropped like a deleted array's; one that expires is left
 * to the LRU (no job can name it any more: the store refuses the id).
 *
 * The cache is bounded by dev_resident_fraction() of the device's memory.
 * To make room it evicts the least recently used entries that no running
 * job holds (each acquire pins its entry until the job ends:
 * resident_release_all). An array bigger than the budget is not cached: the
 * caller streams it. When the memory pool runs out it asks this cache to
 * give memory back (resident_evict), so resident arrays never make a job
 * fail for lack of memory.
 *
 * Memory comes from the device pool (devmem.cu) and goes back to it.
 * Threads: everything runs under the device's lock.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"
#include "util/vec.h"

typedef struct res_entry {
  char id[T_ID_MAX];
  int dtype;
  size_t bytes;
  devbuf buf;
  uint64_t used; /* LRU clock value of the last use */
  int pinned;    /* held by the running job */
} res_entry;

struct resident {
  res_entry *e;
  int n;
  size_t cap;
  size_t total; /* sum of buf.bytes */
  uint64_t clock;
};

static struct resident *res_of(devctx *d) {
  if (!d->res) d->res = (struct resident *)calloc(1, sizeof *d->res);
  return d->res;
}

static size_t budget(devctx *d) {
  return (size_t)((double)d->mem_total * dev_resident_fraction());
}

/* ---- the mirror: what is resident, readable without a device's lock ----
 * The router asks (gpu_resident_mask) while a device may be busy running a
 * job under its lock, so every entry is also listed here under a lock of
 * its own, held only for a scan. */
typedef struct mirror_ent {
  int dev, dtype;
  size_t bytes;
  char id[T_ID_MAX];
} mirror_ent;
static pthread_mutex_t g_mirror_mu = PTHREAD_MUTEX_INITIALIZER;
static mirror_ent *g_mirror;
static size_t g_mirror_n, g_mirror_cap;

static void mirror_add(int dev, const char *id, int dtype, size_t bytes) {
  pthread_mutex_lock(&g_mirror_mu);
  if (tvec_grow(&g_mirror, &g_mirror_cap, sizeof *g_mirror, g_mirror_n + 1, 0) == 0) {
    mirror_ent *m = &g_mirror[g_mirror_n++];
    m->dev = dev;
    m->dtype = dtype;
    m->bytes = bytes;
    snprintf(m->id, sizeof m->id, "%s", id);
  }
  pthread_mutex_unlock(&g_mirror_mu);
}

static void mirror_del(int dev, const char *id, int dtype, size_t bytes) {
  pthread_mutex_lock(&g_mirror_mu);
  for (size_t i = 0; i < g_mirror_n; i++) {
    mirror_ent *m = &g_mirror[i];
    if (m->dev == dev && m->dtype == dtype && m->bytes == bytes &&
        strcmp(m->id, id) == 0) {
      g_mirror[i] = g_mirror[--g_mirror_n];
      break;
    }
  }
  pthread_mutex_unlock(&g_mirror_mu);
}

uint32_t gpu_resident_mask(const char *id, int dtype, size_t bytes) {
  uint32_t mask = 0;
  if (!id) return 0;
  pthread_mutex_lock(&g_mirror_mu);
  for (size_t i = 0; i < g_mirror_n; i++) {
    const mirror_ent *m = &g_mirror[i];
    if (m->dtype == dtype && m->bytes == bytes && m->dev >= 0 && m->dev < 32 &&
        strcmp(m->id, id) == 0)
      mask |= 1u << m->dev;
  }
  pthread_mutex_unlock(&g_mirror_mu);
  return mask;
}

static void remove_at(devctx *d, int i) {
  struct resident *r = d->res;
  T_ASSERT(i >= 0 && i < r->n);
  T_ASSERT(r->total >= r->e[i].buf.bytes); /* total sums the entries */
  mirror_del(d->index, r->e[i].id, r->e[i].dtype, r->e[i].bytes);
  r->total -= r->e[i].buf.bytes;
  devmem_free(d, &r->e[i].buf);
  r->e[i] = r->e[--r->n];
}

/* The least recently used entry that no running job holds; -1 if none. */
static int lru_unpinned(const struct resident *r) {
  int lru = -1;
  for (int i = 0; i < r->n; i++)
    if (!r->e[i].pinned && (lru < 0 || r->e[i].used < r->e[lru].used))
      lru = i;
  return lru;
}

/* Evict LRU entries until `want` more bytes fit the budget, and make the
 * list hold one more entry: 1 when both are done; 0 when entries running
 * jobs hold (or the budget itself) leave too little. */
static int make_room(devctx *d, size_t want) {
  struct resident *r = d->res;
  size_t cap = budget(d);
  if (want > cap) return 0;
  while (r->total + want > cap) {
    int lru = lru_unpinned(r);
    if (lru < 0) return 0;
    remove_at(d, lru);
  }
  return tvec_grow(&r->e, &r->cap, sizeof *r->e, (size_t)r->n + 1, 0) == 0;
}

/* List buf under (id, dtype, bytes), used now (make_room first). */
static res_entry *entry_add(devctx *d, const char *id, int dtype,
                            size_t bytes, devbuf buf, int pinned) {
  struct resident *r = d->res;
  T_ASSERT((size_t)r->n < r->cap); /* make_room grew the list */
  res_entry *x = &r->e[r->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->id, sizeof x->id, "%s", id);
  x->dtype = dtype;
  x->bytes = bytes;
  x->buf = buf;
  x->used = ++r->clock;
  x->pinned = pinned;
  r->total += buf.bytes;
  mirror_add(d->index, x->id, x->dtype, x->bytes);
  return x;
}

size_t resident_evict(devctx *d, size_t bytes) {
  struct resident *r = d->res;
  size_t freed = 0;
  while (r && freed < bytes) {
    int lru = lru_unpinned(r);
    if (lru < 0) break;
    freed += r->e[lru].buf.bytes;
    remove_at(d, lru);
  }
  /* Evicted blocks went to the pool's cache; when evicting for a failed
   * cudaMalloc they must go back to CUDA. */
  if (freed) devpool_trim(d);
  return freed;
}

int resident_acquire(devctx *d, const char *id, const void *host, size_t bytes,
                     int dtype, const void **ptr, double *h2d_ms, terr *e) {
  *ptr = NULL;
  DEV_ASSERT_HELD(d); /* the cache is guarded by the device lock */
  struct resident *r = res_of(d);
  if (!r || !id || !id[0] || bytes == 0) return 0;
  for (int i = 0; i < r->n; i++) {
    res_entry *x = &r->e[i];
    if (x->dtype == dtype && x->bytes == bytes && strcmp(x->id, id) == 0) {
      x->used = ++r->clock;
      x->pinned = 1;
      *ptr = x->buf.ptr;
      return 0;
    }
  }
  /* Room under the budget, LRU first; stream when pinned entries (this
   * job's other inputs) leave too little. */
  if (!make_room(d, bytes)) return 0;
  devbuf b = {NULL, 0};
  terr ignore;
  if (devmem_alloc(d, bytes, &b, &ignore) != 0) return 0; /* stream instead */
  double t0 = t_now_ms();
  int rc = stage_upload(d, b.ptr, host, bytes, e);
  if (rc) {
    devmem_free(d, &b);
    return rc;
  }
  if (h2d_ms) *h2d_ms += t_now_ms() - t0;
  entry_add(d, id, dtype, bytes, b, 1);
  *ptr = b.ptr;
  return 0;
}

int resident_adopt(devctx *d, const char *id, int dtype, size_t bytes,
                   devbuf *buf) {
  DEV_ASSERT_HELD(d);
  struct resident *r = res_of(d);
  if (!r || !id || !id[0] || bytes == 0 || !buf->ptr) return 0;
  for (int i = 0; i < r->n; i++) /* a re-run: the newer bytes win */
    if (strcmp(r->e[i].id, id) == 0 && !r->e[i].pinned) {
      remove_at(d, i);
      break;
    }
  if (!make_room(d, buf->bytes)) return 0;
  entry_add(d, id, dtype, bytes, *buf, 0);
  buf->ptr = NULL;
  buf->bytes = 0;
  return 1;
}

void resident_release_all(devctx *d) {
  struct resident *r = d->res;
  if (!r) return;
  for (int i = 0; i < r->n; i++) r->e[i].pinned = 0;
}

size_t resident_bytes(devctx *d) { return d->res ? d->res->total : 0; }

void resident_drop_id(devctx *d, const char *id) {
  DEV_ASSERT_HELD(d); /* HTTP threads come through dev_trylock */
  struct resident *r = d->res;
  if (!r || !id) return;
  for (int i = 0; i < r->n;) {
    if (!r->e[i].pinned && strcmp(r->e[i].id, id) == 0)
      remove_at(d, i);
    else
      i++;
  }
}

void resident_destroy(devctx *d) {
  struct resident *r = d->res;
  if (!r) return;
  while (r->n) remove_at(d, r->n - 1);
  free(r->e);
  free(r);
  d->res = NULL;
}

/* Drops asked for while a device was busy, done by its next dev_end. An
 * id names its bytes for good, so a late drop is never wrong, only late;
 * when the list is full the entry is left to the LRU. */
#define RES_PENDING_MAX 64
static pthread_mutex_t g_pending_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_pending[GPU_MAX_DEVICES][RES_PENDING_MAX][T_ID_MAX];
static int g_npending[GPU_MAX_DEVICES];

void resident_drop_pending(devctx *d) {
  char ids[RES_PENDING_MAX][T_ID_MAX];
  int n;
  pthread_mutex_lock(&g_pending_mu);
  n = g_npending[d->index];
  memcpy(ids, g_pending[d->index], sizeof ids);
  g_npending[d->index] = 0;
  pthread_mutex_unlock(&g_pending_mu);
  for (int i = 0; i < n; i++) resident_drop_id(d, ids[i]);
}

/* Called on HTTP threads (array deletion): never waits for a running job. */
void gpu_resident_drop(const char *id) {
  if (!id) return;
  for (int i = 0; i < gpu_count(); i++) {
    devctx *d = dev_get(i);
    if (dev_trylock(d) == 0) {
      if (d->ready && cudaSetDevice(d->ordinal) == cudaSuccess)
        resident_drop_id(d, id);
      dev_unlock(d);
      continue;
    }
    pthread_mutex_lock(&g_pending_mu);
    if (g_npending[i] < RES_PENDING_MAX)
      snprintf(g_pending[i][g_npending[i]++], T_ID_MAX, "%s", id);
    pthread_mutex_unlock(&g_pending_mu);
  }
}
