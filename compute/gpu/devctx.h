/* devctx.h — private to the CUDA side: the per-device context every .cu file
 * of the CUDA backend works with.
 *
 * One devctx per usable GPU (device.cu fills the table at gpu_init). It
 * holds the device's streams (copy-in, compute, copy-out), a device memory
 * pool (devmem.cu: size-rounded free list over cudaMalloc, trimmed and
 * retried when cudaMalloc runs out), pinned host staging slots reused by
 * every job (stage.cu), a small gang of host threads that fill and drain the
 * staging slots in parallel (stage.cu), the resident-array cache
 * (resident.cu), the loaded kernel modules (kcache.cu) and the cuBLAS handle
 * (compute/kinds/matmul/matmul.cu).
 *
 * Errors: every CUDA runtime / driver / NVRTC / cuBLAS status goes through
 * dev_fail* which fills the terr with "what failed (file:line): CUDA text"
 * and returns T_ENOMEM for out-of-memory and T_EDEVICE otherwise. Nothing
 * here ever exits. The CU_TRY family jumps to the caller's `fail:` label
 * with `rc` set, so every function keeps one cleanup path.
 *
 * Threads and locks: a devctx is used by one thread at a time, the one that
 * holds its recursive mutex (dev_begin takes it, dev_end releases it; the
 * public gpu_lock/gpu_unlock take the same mutex), always through
 * dev_lock / dev_unlock, which record the holder: the functions whose
 * state the lock guards (the pool, the staging slots, the resident cache,
 * the loaded modules, the cuBLAS handle) assert it (DEV_ASSERT_HELD). The health counters are
 * accessed with __atomic builtins, without the lock. The kernel cache's in-memory cubin
 * table (kcache.cu) is shared by all devices under its own mutex; it is
 * never held while a device lock is being taken.
 */
#ifndef TESSEL_GPU_DEVCTX_H
#define TESSEL_GPU_DEVCTX_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Tessel's headers are C without extern "C" guards of their own. */
#ifdef __cplusplus
extern "C" {
#endif
#include "compute/gpu/gpu.h"
#include "compute/array/tarray.h"
#include "util/err.h"
#include "util/tassert.h"
#include "util/util.h"

#define DEV_STAGE_SLOTS 4             /* pipeline depth of chunked jobs */
#define DEV_STAGE_DEFAULT (128 << 20) /* pinned bytes per device, all slots */
/* On a host of DEV_STAGE_BIG_RAM or more: a geodesic matrix's d2h goes in
 * chunks of a whole slot, and 256 MiB chunks drain into the result faster
 * than 32 MiB ones (n = 30,000 float64 on an H200 host, a spare ready:
 * 455-471 ms with 128 MiB of staging, 402-431 with 512, 379-383 with
 * 1 GiB). Every other chunked path keeps DEV_CHUNK_MAX (stage_chunk). */
#define DEV_STAGE_BIG ((int64_t)1 << 30)
#define DEV_STAGE_BIG_RAM ((int64_t)64 << 30)
#define DEV_CHUNK_MAX ((size_t)32 << 20) /* stage_chunk's cap */
#define DEV_GANG_MAX 16               /* host copy threads per device */

/* ---- device memory ----------------------------------------------------- */
/* A block from the pool. bytes is the rounded size actually held. */
typedef struct devbuf {
  void *ptr;
  size_t bytes;
} devbuf;

struct devctx; /* the evict hook's argument (below) */

typedef struct devpool {
  devbuf *free;        /* cached free blocks, unsorted */
  int nfree;
  size_t capfree;
  size_t cached_bytes; /* sum of free[].bytes */
  size_t live_bytes;   /* handed out and not yet returned */
  size_t cache_cap;    /* cached beyond this are given back at once */
  /* Set at start (device.cu: resident_evict): frees at least `bytes` of
   * device memory not in use if it can, returning what it freed. */
  size_t (*evict)(struct devctx *d, size_t bytes);
} devpool;

/* ---- host copy gang ---------------------------------------------------- */
typedef struct gang_item {
  void *dst;
  const void *src;
  size_t bytes;
} gang_item;
typedef struct gang gang;

/* ---- staging slot ------------------------------------------------------ */
/* One stage of the copy-in / compute / copy-out pipeline: a pinned host
 * region and the events that say where the slot's last chunk is. */
typedef struct stage_slot {
  unsigned char *host; /* pinned, `bytes` long */
  size_t bytes;
  cudaEvent_t h2d_start, h2d_done, comp_start, comp_done, d2h_start, d2h_done;
  int busy; /* a chunk is in flight in this slot */
} stage_slot;

struct resident;  /* resident.cu */
struct kmodules;  /* kcache.cu */

typedef struct devctx {
  int index;   /* Tessel's index (0..gpu_count-1) */
  int ordinal; /* CUDA device ordinal */
  char name[256];
  int cc_major, cc_minor, sms, l2_bytes, max_threads_per_sm;
  char pci_bus_id[32]; /* "0000:65:00.0"; "" when unknown (compute/gpu/nvml.c
                          matches NVML's devices by it) */
  size_t mem_total;

  pthread_mutex_t lock; /* recursive; guards everything below */
  /* Who holds `lock` and how deep (dev_lock / dev_unlock keep them; every
   * build has the fields, so that C and CUDA files agree on the layout).
   * holder is read without the lock (atomic): only the holder's own answer
   * to "do I hold it?" is meaningful. */
  unsigned long holder; /* pthread_self() of the holder; 0: free */
  int hold_depth;       /* recursive takes by the holder */
  int ready;            /* streams, events and pool set up (dev_setup) */
  cudaStream_t s_h2d, s_comp, s_d2h;
  cudaEvent_t ev_a, ev_b; /* scratch events for timing single regions */
  devpool pool;
  stage_slot slot[DEV_STAGE_SLOTS];
  size_t stage_total; /* configured pinned bytes (allocated lazily) */
  gang *gang;
  struct resident *res;
  struct kmodules *mods;
  void *cublas; /* cublasHandle_t, created on first matmul */
  void *cublas_ws; size_t cublas_ws_bytes;

  /* Read and written with __atomic builtins, without the lock. */
  int fails_in_row; /* consecutive device-error jobs */
  int healthy;      /* 0 after GPU_FAIL_LIMIT fails in a row */
} devctx;

/* ---- device.cu --------------------------------------------------------- */
/* The driver API functions the backend uses (module loading and launching
 * run-time compiled kernels), looked up at gpu_init through the runtime, so
 * that the binary does not link libcuda (absent on machines without a
 * driver). Valid once gpu_count() > 0. */
typedef struct dev_driver {
  CUresult (*ModuleLoadData)(CUmodule *m, const void *image);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                           unsigned bx, unsigned by, unsigned bz,
                           unsigned shmem, CUstream s, void **params,
                           void **extra);
  CUresult (*GetErrorString)(CUresult err, const char **s);
  CUresult (*GetErrorName)(CUresult err, const char **s);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *n, CUfunction f,
                                                         int threads,
                                                         size_t smem);
} dev_driver;
extern dev_driver dev_drv;
/* The table of usable devices (devtab.cu; filled by gpu_init, emptied by
 * gpu_shutdown, in device.cu): Tessel devices 0..g_ndev-1. */
extern devctx g_dev[GPU_MAX_DEVICES];
extern int g_ndev;
/* Blocks of `threads` threads of fn that the whole device runs at once
 * (multiprocessors x resident blocks each): a grid of this size, or less,
 * runs in one wave. 8 per multiprocessor when the driver cannot say. */
int64_t dev_wave_blocks(devctx *d, CUfunction fn, int threads);

/* The context of Tessel device `dev`, or NULL when out of range. */
devctx *dev_get(int dev);

/* The device lock, with its holder recorded so that "the caller holds the
 * device" is checked, not only written (DEV_ASSERT_HELD, on where asserts
 * are: every build but Release). Every take of d->lock goes through these. */
static inline void dev_lock(devctx *d) {
  pthread_mutex_lock(&d->lock);
  if (d->hold_depth++ == 0)
    __atomic_store_n(&d->holder, (unsigned long)pthread_self(),
                     __ATOMIC_RELAXED);
}
static inline int dev_trylock(devctx *d) {
  if (pthread_mutex_trylock(&d->lock) != 0) return -1;
  if (d->hold_depth++ == 0)
    __atomic_store_n(&d->holder, (unsigned long)pthread_self(),
                     __ATOMIC_RELAXED);
  return 0;
}
static inline int dev_held(devctx *d) {
  return __atomic_load_n(&d->holder, __ATOMIC_RELAXED) ==
         (unsigned long)pthread_self();
}
static inline void dev_unlock(devctx *d) {
  T_ASSERT(dev_held(d) && d->hold_depth > 0); /* unlock by the holder only */
  if (--d->hold_depth == 0)
    __atomic_store_n(&d->holder, 0UL, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&d->lock);
}
#define DEV_ASSERT_HELD(d) T_ASSERT(dev_held(d))
/* Take the device for a job: lock, make it current on this thread, set up
 * streams/pool on first use. On failure the lock is not held. */
int dev_begin(int dev, devctx **out, terr *e);
/* Release the job's resident entries and unlock. (Health is noted by the
 * scheduler with gpu_note_result, once per job.) */
void dev_end(devctx *d, int rc);
/* Settings given to gpu_configure (data_dir may be ""). */
const char *dev_data_dir(void);
double dev_resident_fraction(void);
/* Pinned staging bytes per device (gpu_configure's, else DEV_STAGE_DEFAULT). */
int64_t dev_staging_bytes(void);

/* Fill e from a CUDA status: T_ENOMEM for out-of-memory, else T_EDEVICE.
 * The runtime's sticky error state is cleared where it can be. */
int dev_fail(terr *e, cudaError_t err, const char *what, const char *file,
             int line);
int dev_fail_cu(terr *e, CUresult err, const char *what, const char *file,
                int line);

/* Jump to `fail` with rc set when a CUDA call fails. */
#define CU_TRY(call)                                                     \
  do {                                                                   \
    cudaError_t cu_err_ = (call);                                        \
    if (cu_err_ != cudaSuccess) {                                        \
      rc = dev_fail(e, cu_err_, #call, __FILE__, __LINE__);              \
      goto fail;                                                         \
    }                                                                    \
  } while (0)
#define CU_TRY_DRV(call)                                                 \
  do {                                                                   \
    CUresult cu_res_ = (call);                                           \
    if (cu_res_ != CUDA_SUCCESS) {                                       \
      rc = dev_fail_cu(e, cu_res_, #call, __FILE__, __LINE__);           \
      goto fail;                                                         \
    }                                                                    \
  } while (0)
/* Jump to fail when a Tessel call fails (rc already set by it). */
#define T_TRY(call)                                                      \
  do {                                                                   \
    rc = (call);                                                         \
    if (rc) goto fail;                                                   \
  } while (0)

/* ---- devmem.cu --------------------------------------------------------- */
void devpool_init(devpool *p, size_t cache_cap);
/* A block of at least `bytes` (rounded up). On cudaMalloc failing for lack
 * of memory: give back the cached blocks, then evict resident arrays not in
 * use, then retry; only then T_ENOMEM naming the size. */
int devmem_alloc(devctx *d, size_t bytes, devbuf *out, terr *e);
/* Return a block to the pool (kept for reuse up to cache_cap). b->ptr NULL
 * is a no-op; *b is zeroed. */
void devmem_free(devctx *d, devbuf *b);
/* Give every cached block back to CUDA. */
void devpool_trim(devctx *d);
void devpool_destroy(devctx *d);

/* ---- stage.cu ---------------------------------------------------------- */
/* Allocate the pinned slots on first use (cudaHostAlloc). */
int stage_ensure(devctx *d, terr *e);
void stage_destroy(devctx *d);
/* A gang of n-1 helper threads (the caller is the n-th). NULL on failure,
 * in which case gang_copy copies on the caller alone. */
gang *gang_create(int n);
void gang_destroy(gang *g);
int gang_size(const gang *g); /* threads, the caller included */
/* Copy every item, split across the gang; returns when all are done. An
 * item whose src is NULL has its dst pages prefaulted instead (made present
 * and writable: see stage.cu's opening). */
void gang_copy(gang *g, const gang_item *items, int n);
/* Run fn(arg, k, n) on every participant k of the n (the caller is k = 0);
 * returns when all have returned. For host work that is not one copy (a
 * scatter of rows to their places). */
void gang_run(gang *g, void (*fn)(void *arg, int k, int n), void *arg);
/* Prefault a result mapping that asks for it (out->map_prefault, set by
 * compute/array/codec/npyfile.c), on the gang, and clear the flag; the time is added to
 * *ms (the job's d2h: it is the cost of storing the result). Call before
 * the first byte of the result comes down. Nothing to do for heap or sink
 * results. */
void stage_prefault(devctx *d, tarray *out, double *ms);
/* A lane's share of the same (a run over several devices, compute/kinds/
 * mgpu.h: each lane prefaults its part on its own device's gang before any
 * lane writes): share rank of nlive, whole pages, the last one to the
 * mapping's end; nothing when the mapping does not ask for it
 * (!map_prefault) or nlive < 1. The flag is left for the run to clear once
 * every lane did its share; a warm mapping (map_warm) is the caller's to
 * skip or not. The time is added to *ms (NULL ok). */
void stage_prefault_share(devctx *d, tarray *out, int rank, int nlive,
                          double *ms);
/* The chunk of the staged paths (map, reduce, queries, stage_upload /
 * download): a slot, at most DEV_CHUNK_MAX bytes. */
size_t stage_chunk(const devctx *d);

/* 1 when every byte of [p, p + bytes) is page-locked host memory the DMA
 * engines reach directly (cudaHostAlloc'd, or cudaHostRegister'ed: a
 * registered shared-memory region), so that copies need no staging slot;
 * 0 for pageable memory, device memory, NULL or bytes 0. Both ends are
 * asked (cudaPointerGetAttributes: cudaMemoryTypeHost); a range over two
 * registrations with a hole between would pass, and its DMA then fails
 * the job with CUDA's error (never a wrong result). */
int stage_pinned(const void *p, size_t bytes);

/* Copy a whole host buffer to the device / back. Page-locked host memory
 * (stage_pinned) goes by one DMA, no staging copy; pageable memory goes
 * through the pinned slots (host copies by the gang overlapped with the
 * DMA). On the copy streams; return after the copy is complete. Not for use
 * while a chunked pipeline holds the slots. */
int stage_upload(devctx *d, void *dst, const void *src, size_t bytes, terr *e);
int stage_download(devctx *d, void *dst, const void *src, size_t bytes,
                   terr *e);

/* A device buffer of out->size elements into out: stage_download when
 * out has data, else (a result sink: compute/array/codec/npyfile.c)
 * through the slots, each chunk written into the file by tarray_write
 * (pwrite) while the next chunk's DMA runs. */
int stage_download_array(devctx *d, tarray *out, const void *src, terr *e);

/* Milliseconds between two completed events (0 when unavailable). */
double dev_event_ms(cudaEvent_t a, cudaEvent_t b);

/* ---- resident.cu ------------------------------------------------------- */
/* An uploaded array on the device: look it up by id (and dtype, size); on a
 * miss upload it (counting the copy into *h2d_ms) when it fits under the
 * resident budget. *ptr NULL (and 0 returned) when it is not resident and
 * would not fit: the caller streams it instead. The entry is pinned against
 * eviction until resident_release_all(d). */
int resident_acquire(devctx *d, const char *id, const void *host, size_t bytes,
                     int dtype, const void **ptr, double *h2d_ms, terr *e);
void resident_release_all(devctx *d);
/* Keep a job's result, already in device memory, under its job id so that
 * a chained job ({"result": id}) finds it like an uploaded array. Takes
 * *buf (zeroed) and returns 1 when it fits the budget (LRU entries that no
 * job holds make room); else 0 and *buf stays the caller's. bytes is the
 * result's exact size. */
int resident_adopt(devctx *d, const char *id, int dtype, size_t bytes,
                   devbuf *buf);
/* Evict unpinned entries, least recently used first, until `bytes` are
 * freed or none is left; returns bytes freed. */
size_t resident_evict(devctx *d, size_t bytes);
size_t resident_bytes(devctx *d);
void resident_drop_id(devctx *d, const char *id);
/* Do the drops gpu_resident_drop queued while the device was busy. */
void resident_drop_pending(devctx *d);
void resident_destroy(devctx *d);

/* ---- kcache.cu --------------------------------------------------------- */
/* The kernel `entry` of the CUDA C++ source that gen(arg, buf, len) writes
 * (returns its length, or -1 when buf is too small), compiled with NVRTC
 * for this device's architecture. `key` names the source (the cache key:
 * it must determine the source exactly). Looked up in the device's loaded
 * modules, then the in-memory cubin table, then <data_dir>/kernels/; only
 * on a full miss is gen called and NVRTC run. *compile_ms gets the time
 * spent compiling (0 on a hit). */
typedef int (*kcache_gen_fn)(void *arg, char *buf, size_t len);
int kcache_get(devctx *d, const char *key, kcache_gen_fn gen, void *arg,
               const char *entry, CUfunction *fn, double *compile_ms, terr *e);
void kcache_unload(devctx *d);
/* Compile `src` for sm_<arch> with the options kcache uses and throw the
 * result away (needs no GPU: tests use it to check generated kernels). */
int kcache_compile_check(const char *src, int arch, double *ms, terr *e);
/* Load NVRTC in the background (a tiny compile on a detached thread), so
 * that the first job's compile does not pay its cold start. gpu_init. */
void kcache_warm_async(int arch);
/* Counters for tests and the benchmark. */
typedef struct kcache_stats {
  int64_t compiles, mem_hits, disk_hits, module_hits;
} kcache_stats;
void kcache_get_stats(kcache_stats *s);
/* Forget the in-memory cubin table and every device's loaded modules (tests
 * use it to exercise the disk cache). */
void kcache_reset_memory(void);

/* ---- matmul.cu --------------------------------------------------------- */
void matmul_destroy(devctx *d);

#ifdef __cplusplus
}
#endif

#endif
