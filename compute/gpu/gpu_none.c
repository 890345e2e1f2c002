/* gpu_none.c — the GPU facade in a build without CUDA: no devices, and the
 * reason says so. Compiled in every build; empty when CUDA is built (the
 * real functions live in the .cu files of compute/gpu/). */
#include "compute/gpu/gpu.h"

#if !TESSEL_HAVE_CUDA

int gpu_init(void) { return 0; }
void gpu_shutdown(void) {}
int gpu_count(void) { return 0; }
const char *gpu_unavailable_reason(void) {
  return "CUDA support not built (no CUDA Toolkit at build time)";
}
json_t *gpu_devices_json(void) {
  return json_pack("{s:b, s:s, s:[]}", "available", 0, "reason",
                   gpu_unavailable_reason(), "devices");
}
int gpu_healthy(int dev) { return 0; }
void gpu_note_result(int dev, int rc) {}
void gpu_lock(int dev) {}
void gpu_unlock(int dev) {}
int gpu_trylock(int dev) { return -1; }
void gpu_warm_start(void) {}
int gpu_warm_wait(void) { return -1; }
void gpu_configure(const gpu_config *cfg) {}
void gpu_resident_drop(const char *id) {}
uint32_t gpu_resident_mask(const char *id, int dtype, size_t bytes) {
  (void)id, (void)dtype, (void)bytes;
  return 0;
}
int gpu_measure_rates(int dev, gpu_rates *r, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "%s", gpu_unavailable_reason());
}

int gpu_host_register(void *p, size_t n, terr *e) {
  (void)p, (void)n;
  return terr_set(e, T_EUNAVAIL, "", -1, "%s", gpu_unavailable_reason());
}
void gpu_host_unregister(void *p) { (void)p; }

#endif
