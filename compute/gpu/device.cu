/* device.cu — the CUDA backend's devices: discovery at start (it fills the
 * table of devtab.cu), the /v1/devices answer, health and locks.
 *
 * gpu_init asks the runtime for the driver and runtime versions and the
 * devices, then for each device makes its primary context current, runs a
 * one-thread probe kernel (which catches a binary built without code for
 * this architecture, or a device that cannot launch at all) and sets up the
 * device's streams, events, memory pool and copy gang. Devices that pass
 * become Tessel devices 0..n-1 (in CUDA ordinal order); the others are
 * listed in /v1/devices with why they are not used. With no driver or no
 * device, gpu_init records the reason and returns 0: the service runs on
 * the CPU.
 *
 * Health: the scheduler notes each GPU job's outcome (gpu_note_result);
 * GPU_FAIL_LIMIT device errors in a row mark the device unhealthy, and the
 * router's auto choice then leaves it alone. A success resets the count.
 *
 * Threads: gpu_init / gpu_shutdown run once, before the workers start and
 * after they stop. Everything else may be called from any thread: the
 * table is immutable between them; a device's mutable state is guarded by
 * its recursive mutex (devctx.lock); health counters are atomics.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"

#define DEV_REASON_MAX 512
#define DEV_INFO_MAX 32

/* What discovery learned of a device that is NOT used (for /v1/devices). */
typedef struct dev_skipped {
  int ordinal;
  char name[256];
  char why[256];
} dev_skipped;

static dev_skipped g_skipped[DEV_INFO_MAX];
static int g_nskipped;
static char g_reason[DEV_REASON_MAX] = "gpu_init has not run";
static int g_driver_version, g_runtime_version;

/* Look the driver functions up; -1 (why filled) when one is missing. */
static int load_driver_api(char *why, size_t len) {
  static const struct {
    const char *name;
    size_t off;
  } fns[] = {
      {"cuModuleLoadData", offsetof(dev_driver, ModuleLoadData)},
      {"cuModuleUnload", offsetof(dev_driver, ModuleUnload)},
      {"cuModuleGetFunction", offsetof(dev_driver, ModuleGetFunction)},
      {"cuLaunchKernel", offsetof(dev_driver, LaunchKernel)},
      {"cuGetErrorString", offsetof(dev_driver, GetErrorString)},
      {"cuGetErrorName", offsetof(dev_driver, GetErrorName)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
       offsetof(dev_driver, OccupancyMaxActiveBlocksPerMultiprocessor)},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t err = cudaGetDriverEntryPointByVersion(
        fns[i].name, &p, 12000, cudaEnableDefault, &q);
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
      (void)cudaGetLastError();
      snprintf(why, len, "driver function %s not found", fns[i].name);
      return -1;
    }
    memcpy((char *)&dev_drv + fns[i].off, &p, sizeof p);
  }
  return 0;
}

/* ---- discovery --------------------------------------------------------- */

__global__ void dev_probe_kernel(int *p) { *p = 0x7e55e1; }

/* Launch the probe on the current device: 0 when it ran and wrote. */
static int probe_device(char *why, size_t len) {
  int *dp = NULL, host = 0;
  cudaError_t err = cudaMalloc(&dp, sizeof(int));
  if (err == cudaSuccess) {
    dev_probe_kernel<<<1, 1>>>(dp);
    err = cudaGetLastError();
    if (err == cudaSuccess)
      err = cudaMemcpy(&host, dp, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(dp);
  }
  if (err != cudaSuccess) {
    snprintf(why, len, "probe kernel failed: %s", cudaGetErrorString(err));
    (void)cudaGetLastError();
    return -1;
  }
  if (host != 0x7e55e1) {
    snprintf(why, len, "probe kernel wrote a wrong value");
    return -1;
  }
  return 0;
}

/* Streams, events, pool and gang of a device that passed the probe. */
static int setup_device(devctx *d, int gang_threads, terr *e) {
  int rc = 0;
  CU_TRY(cudaStreamCreateWithFlags(&d->s_h2d, cudaStreamNonBlocking));
  CU_TRY(cudaStreamCreateWithFlags(&d->s_comp, cudaStreamNonBlocking));
  CU_TRY(cudaStreamCreateWithFlags(&d->s_d2h, cudaStreamNonBlocking));
  CU_TRY(cudaEventCreate(&d->ev_a));
  CU_TRY(cudaEventCreate(&d->ev_b));
  for (int i = 0; i < DEV_STAGE_SLOTS; i++) {
    stage_slot *s = &d->slot[i];
    CU_TRY(cudaEventCreate(&s->h2d_start));
    CU_TRY(cudaEventCreate(&s->h2d_done));
    CU_TRY(cudaEventCreate(&s->comp_start));
    CU_TRY(cudaEventCreate(&s->comp_done));
    CU_TRY(cudaEventCreate(&s->d2h_start));
    CU_TRY(cudaEventCreate(&s->d2h_done));
  }
  /* Freed blocks stay cached up to an eighth of the device. */
  devpool_init(&d->pool, d->mem_total / 8);
  /* The pool's last resort when cudaMalloc runs out (a hook, so that the
   * pool does not call up into the resident cache that allocates from it). */
  d->pool.evict = resident_evict;
  d->stage_total = (size_t)dev_staging_bytes();
  d->gang = gang_create(gang_threads);
  d->ready = 1;
  return 0;
fail:
  return rc;
}

static void set_reason(const char *fmt, const char *a, const char *b) {
  snprintf(g_reason, sizeof g_reason, fmt, a, b);
}

int gpu_init(void) {
  g_ndev = 0;
  g_nskipped = 0;
  g_driver_version = g_runtime_version = 0;
  cudaError_t err = cudaDriverGetVersion(&g_driver_version);
  if (err != cudaSuccess || g_driver_version == 0) {
    set_reason("no CUDA driver found (%s)%s",
               err != cudaSuccess ? cudaGetErrorString(err)
                                  : "driver version 0: libcuda not loaded",
               "");
    (void)cudaGetLastError();
    log_info("gpu: %s", g_reason);
    return 0;
  }
  cudaRuntimeGetVersion(&g_runtime_version);
  int n = 0;
  err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    set_reason("no CUDA device found: %s%s",
               err != cudaSuccess ? cudaGetErrorString(err) : "device count 0",
               "");
    (void)cudaGetLastError();
    log_info("gpu: %s", g_reason);
    return 0;
  }
  char dwhy[128];
  if (load_driver_api(dwhy, sizeof dwhy) != 0) {
    set_reason("the CUDA driver is unusable: %s%s", dwhy, "");
    log_warn("gpu: %s", g_reason);
    return 0;
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  for (int ord = 0; ord < n && g_ndev < GPU_MAX_DEVICES; ord++) {
    devctx *d = &g_dev[g_ndev];
    memset(d, 0, sizeof *d);
    cudaDeviceProp p;
    char why[256] = "";
    err = cudaGetDeviceProperties(&p, ord);
    if (err == cudaSuccess) err = cudaSetDevice(ord);
    if (err == cudaSuccess) err = cudaFree(0); /* create the primary context */
    if (err != cudaSuccess) {
      snprintf(why, sizeof why, "%s", cudaGetErrorString(err));
      (void)cudaGetLastError();
    } else if (probe_device(why, sizeof why) == 0) {
      d->index = g_ndev;
      d->ordinal = ord;
      snprintf(d->name, sizeof d->name, "%s", p.name);
      d->cc_major = p.major;
      d->cc_minor = p.minor;
      d->sms = p.multiProcessorCount;
      d->l2_bytes = p.l2CacheSize;
      if (cudaDeviceGetPCIBusId(d->pci_bus_id, (int)sizeof d->pci_bus_id, ord) !=
          cudaSuccess) {
        d->pci_bus_id[0] = 0;
        (void)cudaGetLastError();
      }
      d->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
      d->mem_total = p.totalGlobalMem;
      pthread_mutexattr_t ma;
      pthread_mutexattr_init(&ma);
      pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
      pthread_mutex_init(&d->lock, &ma);
      pthread_mutexattr_destroy(&ma);
      d->holder = 0;
      d->hold_depth = 0;
      __atomic_store_n(&d->healthy, 1, __ATOMIC_SEQ_CST);
      __atomic_store_n(&d->fails_in_row, 0, __ATOMIC_SEQ_CST);
      /* The staging copies are bound by memory and page faults; they run
       * only while the device's job waits on them, so each device gets
       * its share of the cores (2..DEV_GANG_MAX). */
      long per = ncpu / (n > 0 ? n : 1);
      int gang_n = (int)(per < 2 ? 2 : per > DEV_GANG_MAX ? DEV_GANG_MAX : per);
      terr e;
      terr_clear(&e);
      if (setup_device(d, gang_n, &e) == 0) {
        log_info("gpu %d: %s (cc %d.%d, %d SMs, %.1f GiB)", g_ndev, d->name,
                 d->cc_major, d->cc_minor, d->sms,
                 (double)d->mem_total / (1 << 30));
        g_ndev++;
        continue;
      }
      snprintf(why, sizeof why, "%.200s", e.message);
      pthread_mutex_destroy(&d->lock);
    }
    if (g_nskipped < DEV_INFO_MAX) {
      dev_skipped *s = &g_skipped[g_nskipped++];
      s->ordinal = ord;
      snprintf(s->name, sizeof s->name, "%s", err == cudaSuccess ? p.name : "?");
      snprintf(s->why, sizeof s->why, "%s", why);
    }
    log_warn("gpu: CUDA device %d not used: %s", ord, why);
  }
  if (g_ndev == 0)
    set_reason("no usable CUDA device: %s%s",
               g_nskipped ? g_skipped[0].why : "none found", "");
  else {
    g_reason[0] = 0;
    kcache_warm_async(10 * g_dev[0].cc_major + g_dev[0].cc_minor);
  }
  return 0;
}

/* ---- the warm-up (gpu.h: gpu_warm_start) ------------------------------ */

static pthread_t g_warm_th;
static int g_warm_on, g_warm_ready;

static void *warm_main(void *arg) {
  (void)arg;
  for (int i = g_ndev - 1; i >= 0; i--) {
    devctx *d = NULL;
    terr e;
    terr_clear(&e);
    double t0 = t_now_ms();
    if (dev_begin(i, &d, &e) != 0) continue;
    int rc = stage_ensure(d, &e);
    dev_end(d, rc);
    if (rc == 0) {
      __atomic_add_fetch(&g_warm_ready, 1, __ATOMIC_SEQ_CST);
      log_info("gpu %d: pinned staging ready (%.0f MiB) in %.0f ms", i,
               (double)d->stage_total / (1 << 20), t_now_ms() - t0);
    } else {
      log_warn("gpu %d: pinned staging not made ahead: %s", i, e.message);
    }
  }
  return NULL;
}

void gpu_warm_start(void) {
  const char *v = getenv("TESSEL_GPU_WARM");
  if (g_warm_on || g_ndev == 0 || (v && strcmp(v, "0") == 0)) return;
  if (pthread_create(&g_warm_th, NULL, warm_main, NULL) == 0) g_warm_on = 1;
}

int gpu_warm_wait(void) {
  if (!g_warm_on) return -1;
  pthread_join(g_warm_th, NULL);
  g_warm_on = 0;
  return __atomic_load_n(&g_warm_ready, __ATOMIC_SEQ_CST);
}

void gpu_shutdown(void) {
  if (g_warm_on) (void)gpu_warm_wait();
  for (int i = 0; i < g_ndev; i++) {
    devctx *d = &g_dev[i];
    dev_lock(d);
    cudaSetDevice(d->ordinal);
    cudaDeviceSynchronize();
    resident_destroy(d);
    kcache_unload(d);
    matmul_destroy(d);
    stage_destroy(d);
    devpool_destroy(d);
    for (int k = 0; k < DEV_STAGE_SLOTS; k++) {
      stage_slot *s = &d->slot[k];
      cudaEventDestroy(s->h2d_start);
      cudaEventDestroy(s->h2d_done);
      cudaEventDestroy(s->comp_start);
      cudaEventDestroy(s->comp_done);
      cudaEventDestroy(s->d2h_start);
      cudaEventDestroy(s->d2h_done);
    }
    cudaEventDestroy(d->ev_a);
    cudaEventDestroy(d->ev_b);
    cudaStreamDestroy(d->s_h2d);
    cudaStreamDestroy(d->s_comp);
    cudaStreamDestroy(d->s_d2h);
    gang_destroy(d->gang);
    d->gang = NULL;
    d->ready = 0;
    dev_unlock(d);
    pthread_mutex_destroy(&d->lock);
  }
  g_ndev = 0;
  snprintf(g_reason, sizeof g_reason, "the CUDA backend was shut down");
}

int gpu_count(void) { return g_ndev; }
const char *gpu_unavailable_reason(void) { return g_ndev ? "" : g_reason; }

/* ---- the /v1/devices answer -------------------------------------------- */

static json_t *version_json(int v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d.%d", v / 1000, (v % 1000) / 10);
  return json_string(buf);
}

json_t *gpu_devices_json(void) {
  json_t *root = json_object();
  json_t *devs = json_array();
  json_object_set_new(root, "available", json_boolean(g_ndev > 0));
  json_object_set_new(root, "reason", json_string(gpu_unavailable_reason()));
  if (g_driver_version)
    json_object_set_new(root, "driver_version", version_json(g_driver_version));
  else
    json_object_set_new(root, "driver_version", json_null());
  json_object_set_new(root, "runtime_version",
                      g_runtime_version ? version_json(g_runtime_version)
                                        : json_null());
  for (int i = 0; i < g_ndev; i++) {
    devctx *d = &g_dev[i];
    size_t free_b = 0, total_b = d->mem_total;
    if (cudaSetDevice(d->ordinal) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      free_b = 0;
    }
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(i));
    json_object_set_new(o, "cuda_ordinal", json_integer(d->ordinal));
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "compute_capability", json_string(cc));
    json_object_set_new(o, "multiprocessors", json_integer(d->sms));
    json_object_set_new(o, "memory_total", json_integer((json_int_t)total_b));
    json_object_set_new(o, "memory_free", json_integer((json_int_t)free_b));
    json_object_set_new(o, "l2_bytes", json_integer(d->l2_bytes));
    if (d->pci_bus_id[0])
      json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
    json_object_set_new(o, "healthy", json_boolean(gpu_healthy(i)));
    json_object_set_new(o, "failures_in_row",
                        json_integer(__atomic_load_n(&d->fails_in_row, __ATOMIC_RELAXED)));
    dev_lock(d);
    json_object_set_new(o, "resident_bytes",
                        json_integer((json_int_t)resident_bytes(d)));
    dev_unlock(d);
    json_array_append_new(devs, o);
  }
  json_object_set_new(root, "devices", devs);
  if (g_nskipped) {
    json_t *sk = json_array();
    for (int i = 0; i < g_nskipped; i++)
      json_array_append_new(
          sk, json_pack("{s:i, s:s, s:s}", "cuda_ordinal", g_skipped[i].ordinal,
                        "name", g_skipped[i].name, "reason", g_skipped[i].why));
    json_object_set_new(root, "unusable", sk);
  }
  return root;
}

/* ---- health and locks -------------------------------------------------- */

int gpu_healthy(int dev) {
  devctx *d = dev_get(dev);
  return d && __atomic_load_n(&d->healthy, __ATOMIC_ACQUIRE);
}

void gpu_note_result(int dev, int rc) {
  devctx *d = dev_get(dev);
  if (!d) return;
  if (rc == T_EDEVICE) {
    int n = __atomic_add_fetch(&d->fails_in_row, 1, __ATOMIC_SEQ_CST);
    if (n >= GPU_FAIL_LIMIT &&
        __atomic_exchange_n(&d->healthy, 0, __ATOMIC_SEQ_CST))
      log_warn("gpu %d: %d device errors in a row; marked unhealthy", dev, n);
  } else if (rc == 0) {
    __atomic_store_n(&d->fails_in_row, 0, __ATOMIC_SEQ_CST);
  }
}

void gpu_lock(int dev) {
  devctx *d = dev_get(dev);
  if (d) dev_lock(d);
}

void gpu_unlock(int dev) {
  devctx *d = dev_get(dev);
  if (d) dev_unlock(d);
}

int gpu_trylock(int dev) {
  devctx *d = dev_get(dev);
  return d && dev_trylock(d) == 0 ? 0 : -1;
}

int dev_begin(int dev, devctx **out, terr *e) {
  *out = NULL;
  devctx *d = dev_get(dev);
  if (!d)
    return terr_set(e, T_EUNAVAIL, "backend", -1,
                    "no CUDA device %d (%d usable)%s%s", dev, g_ndev,
                    g_ndev ? "" : ": ", g_ndev ? "" : g_reason);
  dev_lock(d);
  int rc = 0;
  if (!d->ready) {
    rc = terr_set(e, T_EUNAVAIL, "backend", -1, "CUDA device %d is shut down",
                  dev);
    goto fail;
  }
  CU_TRY(cudaSetDevice(d->ordinal));
  *out = d;
  return 0;
fail:
  dev_unlock(d);
  return rc;
}

void dev_end(devctx *d, int rc) {
  (void)rc; /* the scheduler notes health (gpu_note_result) */
  if (!d) return;
  resident_release_all(d);
  resident_drop_pending(d);
  dev_unlock(d);
}

int64_t dev_wave_blocks(devctx *d, CUfunction fn, int threads) {
  int n = 0;
  if (!dev_drv.OccupancyMaxActiveBlocksPerMultiprocessor ||
      dev_drv.OccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, 0) !=
          CUDA_SUCCESS ||
      n < 1)
    n = 8;
  return (int64_t)d->sms * n;
}

double dev_event_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return ms;
}
