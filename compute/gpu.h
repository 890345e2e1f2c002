/* gpu.h — the C face of the CUDA backend (the .cu files in compute/cuda/).
 *
 * The rest of Tessel sees only these functions, never CUDA types or <<<>>>.
 * They exist in every build: without a CUDA Toolkit at build time
 * compute/gpu_none.c provides them and they report "CUDA not built";
 * without a usable GPU at run time gpu_init records why and gpu_count()
 * is 0. Every CUDA error becomes a terr (T_EDEVICE, or T_ENOMEM for out of
 * device memory) for the job; the process never exits on one.
 *
 * Threads: gpu_init once at start, before workers. Per-device entry points
 * are called from that device's worker thread (one per GPU) and, for
 * "compare", from a CPU worker holding the device's lock via gpu_lock.
 */
#ifndef TESSEL_COMPUTE_GPU_H
#define TESSEL_COMPUTE_GPU_H

#include <jansson.h>
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

/* Health: a device that fails GPU_FAIL_LIMIT jobs in a row with device errors
 * is marked unhealthy; auto then leaves it alone. */
#define GPU_FAIL_LIMIT 3
int gpu_healthy(int dev);
void gpu_note_result(int dev, int rc);

/* Serialise use of a device between its worker and compare runs. */
void gpu_lock(int dev);
void gpu_unlock(int dev);

#endif
