/* hostreg.cu — a registered region's host memory page-locked for the
 * devices (gpu.h: gpu_host_register, gpu_host_unregister).
 *
 * A region (compute/array/region.h) is a file mapping that lives as long
 * as the region, so it is registered with CUDA once, when the client
 * registers it, and every later job's copies to or from it are pinned
 * copies (no staging through compute/gpu/stage.cu's slots, no page faults
 * on the DMA path). cudaHostRegisterPortable makes it pinned for every
 * device, not only the current one. Without a usable GPU (gpu_count() 0)
 * nothing is asked of the driver: T_EUNAVAIL, and the region works
 * unpinned. A registration that fails (the locked-memory limit, a
 * mapping CUDA refuses) is reported, not fatal: the caller keeps the region
 * unpinned. Threads: any; CUDA's registration is thread-safe.
 */
#include <cuda_runtime.h>

/* Tessel's headers are C without extern "C" guards of their own. */
extern "C" {
#include "compute/gpu/gpu.h"
}

extern "C" int gpu_host_register(void *p, size_t n, terr *e) {
  if (!p || n == 0 || gpu_count() <= 0)
    return terr_set(e, T_EUNAVAIL, "", -1, "no usable GPU: the region is "
                    "not pinned");
  cudaError_t rc = cudaHostRegister(p, n, cudaHostRegisterPortable);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError(); /* clear it: it is not the next call's */
    return terr_set(e, T_EDEVICE, "", -1, "cudaHostRegister of %zu bytes: %s",
                    n, cudaGetErrorString(rc));
  }
  return 0;
}

extern "C" void gpu_host_unregister(void *p) {
  if (!p || gpu_count() <= 0) return;
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}
