/* nvml.c — GPU utilisation and memory in use through NVML, the driver's
 * management library, loaded at run time.
 *
 * libnvidia-ml.so.1 ships with the NVIDIA driver, not the CUDA Toolkit, so
 * it is opened with dlopen on first use (no build dependency: a build
 * without CUDA, or a machine without the driver, runs the same code and
 * reports why there is no figure). The library and nvmlInit_v2 are tried
 * once per process (pthread_once); the outcome — the function pointers or
 * the reason — is kept for the process's life (nvmlShutdown is never
 * called: the library stays loaded until exit).
 *
 * gpu_nvml_annotate adds to each device of /v1/devices' cuda.devices
 * "utilization": {"gpu_percent", "memory_used", "memory_total"} (NVML's
 * utilisation over its last sample period, 1/6 s to 1 s by product, and
 * the device's memory in use by every process) or null with
 * "utilization_unavailable" saying why. A device is found in NVML by its
 * "pci_bus_id" when the device object has one, else by position — right
 * only when CUDA numbers devices in PCI order as NVML does: one visible GPU,
 * or CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES; otherwise
 * the reason says so rather than show another GPU's figure.
 *
 * Threads: any thread; NVML's calls are thread-safe, the state here is
 * written once under pthread_once and read-only after.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/gpu.h"

/* The few NVML types used, as nvml.h declares them (ABI-stable). */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
  unsigned int gpu, memory;
} nvml_utilization;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory;
#define NVML_SUCCESS 0

static struct {
  const char *lib; /* the library's name; tests may change it first */
  void *dl;
  int (*init)(void);
  int (*count)(unsigned int *);
  int (*by_index)(unsigned int, nvmlDevice_t *);
  int (*by_pci)(const char *, nvmlDevice_t *);
  int (*util)(nvmlDevice_t, nvml_utilization *);
  int (*mem)(nvmlDevice_t, nvml_memory *);
  const char *(*errstr)(int);
  char why[256]; /* "" when loaded and initialised */
} N = {.lib = "libnvidia-ml.so.1"};
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

void gpu_nvml_set_library(const char *name) { N.lib = name; }

static void nvml_load(void) {
  N.dl = dlopen(N.lib, RTLD_NOW | RTLD_LOCAL);
  if (!N.dl) {
    const char *err = dlerror();
    snprintf(N.why, sizeof N.why, "NVML not loaded (%s): %s", N.lib,
             err ? err : "dlopen failed");
    return;
  }
  *(void **)&N.init = dlsym(N.dl, "nvmlInit_v2");
  *(void **)&N.count = dlsym(N.dl, "nvmlDeviceGetCount_v2");
  *(void **)&N.by_index = dlsym(N.dl, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&N.by_pci = dlsym(N.dl, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&N.util = dlsym(N.dl, "nvmlDeviceGetUtilizationRates");
  *(void **)&N.mem = dlsym(N.dl, "nvmlDeviceGetMemoryInfo");
  *(void **)&N.errstr = dlsym(N.dl, "nvmlErrorString");
  if (!N.init || !N.count || !N.by_index || !N.by_pci || !N.util || !N.mem) {
    snprintf(N.why, sizeof N.why, "NVML (%s) lacks a function Tessel uses", N.lib);
    return;
  }
  int rc = N.init();
  if (rc != NVML_SUCCESS)
    snprintf(N.why, sizeof N.why, "nvmlInit failed: %s",
             N.errstr ? N.errstr(rc) : "error");
}

const char *gpu_nvml_unavailable_reason(void) {
  pthread_once(&nvml_once, nvml_load);
  return N.why;
}

/* 1 when CUDA's device i is NVML's device i (see the opening comment). */
static int same_order(unsigned int nvml_count, size_t ncuda) {
  const char *order = getenv("CUDA_DEVICE_ORDER");
  const char *visible = getenv("CUDA_VISIBLE_DEVICES");
  if (nvml_count == 1 && ncuda == 1) return 1;
  return order && strcmp(order, "PCI_BUS_ID") == 0 && (!visible || !*visible) &&
         nvml_count == ncuda;
}

static json_t *device_util(nvmlDevice_t d, char *why, size_t cap) {
  nvml_utilization u;
  nvml_memory m;
  int rc = N.util(d, &u);
  if (rc == NVML_SUCCESS) rc = N.mem(d, &m);
  if (rc != NVML_SUCCESS) {
    snprintf(why, cap, "NVML: %s", N.errstr ? N.errstr(rc) : "error");
    return NULL;
  }
  return json_pack("{s:i, s:I, s:I}", "gpu_percent", (int)u.gpu, "memory_used",
                   (json_int_t)m.used, "memory_total", (json_int_t)m.total);
}

void gpu_nvml_annotate(json_t *cuda) {
  json_t *devs = json_object_get(cuda, "devices");
  size_t n = json_array_size(devs);
  if (n == 0) return;
  const char *base = gpu_nvml_unavailable_reason();
  unsigned int count = 0;
  if (!*base && N.count(&count) != NVML_SUCCESS) count = 0;
  int by_pos = !*base && same_order(count, n);
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(devs, i);
    char why[256];
    snprintf(why, sizeof why, "%s", base);
    json_t *u = NULL;
    if (!*why) {
      nvmlDevice_t d = NULL;
      const char *bus = json_string_value(json_object_get(o, "pci_bus_id"));
      int rc = -1;
      if (bus)
        rc = N.by_pci(bus, &d);
      else if (by_pos)
        rc = N.by_index((unsigned int)i, &d);
      if (rc == NVML_SUCCESS)
        u = device_util(d, why, sizeof why);
      else if (bus)
        snprintf(why, sizeof why, "NVML has no device at PCI %s", bus);
      else
        snprintf(why, sizeof why,
                 "cannot match CUDA's devices to NVML's: set "
                 "CUDA_DEVICE_ORDER=PCI_BUS_ID without CUDA_VISIBLE_DEVICES");
    }
    json_object_set_new(o, "utilization", u ? u : json_null());
    if (!u) json_object_set_new(o, "utilization_unavailable", json_string(why));
  }
}
