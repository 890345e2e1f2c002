/* devtab.cu — the device table, the settings of gpu_configure and the
 * CUDA-error -> terr helpers: what
 * every other .cu of compute/gpu/ (the pool, the resident cache, the kernel
 * cache, the kinds' drivers) needs of the runtime, in a file that calls none
 * of them, so that device.cu, which sets each device up and tears it down
 * through them, is the only file above them (no file circle).
 *
 * Threads: gpu_init fills g_dev / g_ndev and gpu_shutdown empties them
 * (device.cu), before the workers start and after they stop; between the
 * two the table is immutable and dev_get may be called from any thread.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"

devctx g_dev[GPU_MAX_DEVICES];
int g_ndev;
dev_driver dev_drv;
static char g_data_dir[1024];
static double g_resident_fraction = 0.5;
static int64_t g_staging_bytes = DEV_STAGE_DEFAULT;

devctx *dev_get(int dev) {
  return (dev >= 0 && dev < g_ndev) ? &g_dev[dev] : NULL;
}

/* ---- errors ------------------------------------------------------------ */

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

int dev_fail(terr *e, cudaError_t err, const char *what, const char *file,
             int line) {
  /* Clears the error unless it is sticky (the context is then unusable and
   * the device will be marked unhealthy by the failures that follow). */
  (void)cudaGetLastError();
  terr_code code = (err == cudaErrorMemoryAllocation) ? T_ENOMEM : T_EDEVICE;
  if (code == T_ENOMEM)
    return terr_set(e, T_ENOMEM, "", -1,
                    "out of GPU memory: %s (%s:%d): %s", what, base_name(file),
                    line, cudaGetErrorString(err));
  return terr_set(e, T_EDEVICE, "", -1, "CUDA error in %s (%s:%d): %s (%s)",
                  what, base_name(file), line, cudaGetErrorString(err),
                  cudaGetErrorName(err));
}

int dev_fail_cu(terr *e, CUresult err, const char *what, const char *file,
                int line) {
  const char *name = NULL, *text = NULL;
  if (dev_drv.GetErrorName) dev_drv.GetErrorName(err, &name);
  if (dev_drv.GetErrorString) dev_drv.GetErrorString(err, &text);
  terr_code code = (err == CUDA_ERROR_OUT_OF_MEMORY) ? T_ENOMEM : T_EDEVICE;
  return terr_set(e, code, "", -1, "CUDA driver error in %s (%s:%d): %s (%s)",
                  what, base_name(file), line, text ? text : "?",
                  name ? name : "?");
}

/* ---- configuration ----------------------------------------------------- */

void gpu_configure(const gpu_config *cfg) {
  if (!cfg) return;
  if (cfg->data_dir) snprintf(g_data_dir, sizeof g_data_dir, "%s", cfg->data_dir);
  if (cfg->resident_fraction > 0 && cfg->resident_fraction <= 0.95)
    g_resident_fraction = cfg->resident_fraction;
  if (cfg->staging_bytes >= (4 << 20)) g_staging_bytes = cfg->staging_bytes;
  /* TESSEL_GPU_STAGING_MB: the staging size for A/B runs (4 MiB .. 4 GiB);
   * a setting given in cfg wins. */
  const char *v = getenv("TESSEL_GPU_STAGING_MB");
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (cfg->staging_bytes < (4 << 20) && pages > 0 && psz > 0 &&
      (int64_t)pages * psz >= DEV_STAGE_BIG_RAM)
    g_staging_bytes = DEV_STAGE_BIG; /* devctx.h: geodesic d2h chunks */
  if (v && cfg->staging_bytes < (4 << 20)) {
    long mb = strtol(v, NULL, 10);
    if (mb >= 4 && mb <= 4096) g_staging_bytes = (int64_t)mb << 20;
  }
}

const char *dev_data_dir(void) { return g_data_dir; }
double dev_resident_fraction(void) { return g_resident_fraction; }
int64_t dev_staging_bytes(void) { return g_staging_bytes; }
