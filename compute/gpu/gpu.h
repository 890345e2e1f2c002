/* gpu.h — the C face of the CUDA backend (the .cu files of compute/gpu/ and of compute/kinds/).
 *
 * The rest of Tessel sees only these functions, never CUDA types or <<<>>>.
 * They exist in every build: without a CUDA Toolkit at build time
 * compute/gpu/gpu_none.c provides them and they report "CUDA not built";
 * without a usable GPU at run time gpu_init records why and gpu_count()
 * is 0. Every CUDA error becomes a terr (T_EDEVICE, or T_ENOMEM for out of
 * device memory) for the job; the process never exits on one.
 *
 * Threads: gpu_init once at start, before workers. Per-device entry points
 * are called from that device's worker thread (one per GPU) and, for
 * "compare", from a CPU worker holding the device's lock via gpu_lock.
 */
#ifndef TESSEL_GPU_GPU_H
#define TESSEL_GPU_GPU_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define GPU_MAX_DEVICES 16

/* Discover devices and set up per-device state (streams, memory pool,
 * pinned staging buffers). Returns 0 even when no GPU is found. */
int gpu_init(void);
void gpu_shutdown(void);
/* Usable devices (0 when CUDA is absent or unusable). */
int gpu_count(void);
/* Why there is no usable GPU ("CUDA support not built", "no CUDA device
 * found: ...", driver errors); "" when gpu_count() > 0. */
const char *gpu_unavailable_reason(void);
/* {"available": bool, "reason": ..., "driver_version": "13.0",
 *  "runtime_version": "13.0", "devices": [{"index", "name",
 *  "compute_capability": "9.0", "multiprocessors", "memory_total",
 *  "memory_free", "healthy"}]}. New reference. */
json_t *gpu_devices_json(void);
/* compute/gpu/nvml.c: NVML (libnvidia-ml.so.1, dlopen()ed on first use): adds to
 * each device of a gpu_devices_json answer's "devices" (cuda: that object,
 * borrowed, changed in place) "utilization": {"gpu_percent", "memory_used",
 * "memory_total"} or null with "utilization_unavailable": why. */
void gpu_nvml_annotate(json_t *cuda);
/* Why NVML cannot be used ("" when it can). Static; valid for the process. */
const char *gpu_nvml_unavailable_reason(void);
/* Tests: the library to open instead (before first use; borrowed). */
void gpu_nvml_set_library(const char *name);

/* Health: a device that fails GPU_FAIL_LIMIT jobs in a row with device errors
 * is marked unhealthy; auto then leaves it alone. */
#define GPU_FAIL_LIMIT 3
int gpu_healthy(int dev);
void gpu_note_result(int dev, int rc);

/* Serialise use of a device between its worker and compare runs. The lock
 * is recursive: the entry points of gpu_kernels.h take it themselves too. */
void gpu_lock(int dev);
void gpu_unlock(int dev);
/* The lock if nobody holds it now: 0 (then gpu_unlock it, from the same
 * thread), else -1 without waiting (held by another thread, or no such
 * device). Recursive like gpu_lock: the thread that holds it gets it again,
 * so a caller excludes the devices it holds itself (the scheduler's
 * borrowed GPUs, compute/sched/run.c). */
int gpu_trylock(int dev);

/* Each device's pinned staging slots allocated ahead, on a thread of its
 * own started after gpu_init (devices last to first, each under its lock):
 * a device's first job, or the first job a GPU is lent to (the lanes of
 * compute/kinds/mgpu.h), would otherwise pay the cudaHostAlloc of its slots
 * (up to 1 GiB a device) itself. TESSEL_GPU_WARM=0 in the environment: not
 * started. gpu_warm_wait: joins it; the devices whose slots are there, -1
 * when it was not started. gpu_shutdown joins it too. */
void gpu_warm_start(void);
int gpu_warm_wait(void);

/* ---- additions by the CUDA backend (additive; see compute/gpu/) -------- */
/* Settings read by gpu_init; call before it (NULL or zero fields: defaults).
 * data_dir: compiled kernels are cached under <data_dir>/kernels.
 * resident_fraction: share of each device's memory that uploaded arrays may
 * keep resident (default 0.5). staging_bytes: pinned host staging per
 * device (default 128 MiB, split into slots). */
typedef struct gpu_config {
  const char *data_dir;
  double resident_fraction;
  int64_t staging_bytes;
} gpu_config;
void gpu_configure(const gpu_config *cfg);

/* Forget uploaded array `id` on every device (its memory is freed); called
 * when the array is deleted. Unknown ids are a no-op. Never blocks on a
 * running job: a busy device drops it when its job ends. */
void gpu_resident_drop(const char *id);
/* Bit d set: device d holds (id, dtype, bytes) in its resident cache now
 * (an uploaded array or a chained job's result; it may be evicted before a
 * job runs, so this is for estimates). Any thread; never waits for a job. */
uint32_t gpu_resident_mask(const char *id, int dtype, size_t bytes);

/* Rates measured on device `dev` in a few milliseconds, for the router's
 * cost model. Bandwidths in bytes/s (d2d counts bytes read + written),
 * launch_s the fixed cost of a job's first launch + sync. */
typedef struct gpu_rates {
  double h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, d2d;
  double launch_s;
  int stage_threads; /* host threads that stage this device's copies */
} gpu_rates;
int gpu_measure_rates(int dev, gpu_rates *r, terr *e);

/* A registered region's mapping (compute/array/region.h) page-locked for
 * every device once, at registration (compute/gpu/hostreg.cu:
 * cudaHostRegister, portable), so that copies to and from it run at pinned
 * speed with no staging copy. 0; T_EUNAVAIL when no GPU is usable (the
 * region then works unpinned); T_EDEVICE with CUDA's reason otherwise.
 * gpu_host_unregister undoes it (before the munmap; no-op for a range
 * never registered). Any thread. */
int gpu_host_register(void *p, size_t n, terr *e);
void gpu_host_unregister(void *p);

#endif
