/* kcache.cu — kernels generated at run time, compiled with NVRTC, cached.
 *
 * map and reduce fuse the job's expression into one kernel, whose CUDA C++
 * text is generated from the parsed tree (expr_emit_c; never from the
 * user's text). Compiling costs tens of milliseconds, so each compiled
 * kernel is kept at three levels, looked up in order:
 *   1. the device's loaded modules (CUmodule per key; per device, because a
 *      module belongs to a context);
 *   2. the process-wide table of cubins (per architecture);
 *   3. files <data_dir>/kernels/<sha256>.cubin, so a restart does not pay
 *      the compile again. The file name hashes the key, the architecture,
 *      the NVRTC version and the floating-point options (KC_FP_OPTS: no
 *      FMA contraction, IEEE division and sqrt, no flush to zero, so that
 *      a map gives the CPU's bits); the file starts with the key, checked
 *      on load, so a hash collision or a stale file cannot load the wrong
 *      code. Files are written to a temporary name and renamed.
 * The key must determine the source exactly (callers build it from the
 * expression's canonical form, the dtypes and the broadcast pattern).
 *
 * The code is compiled for the device's own architecture (cubin). When
 * this NVRTC is older than the device, it compiles PTX for the newest
 * architecture it knows and the driver finishes the job.
 *
 * Threads: the cubin table has its own mutex (g_mu), never held while
 * compiling; the per-device module list is guarded by the device lock.
 */
#include <errno.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"
#include "util/vec.h"

/* IEEE arithmetic, as the CPU's VM and NumPy: no a*b + c contracted into
 * an FMA (an expression asks for one with fma()), correctly rounded
 * division and square root, subnormals kept (NVRTC's defaults for the last
 * three, stated so that no one flips them unseen). Part of the disk
 * cache's file name, so a cubin built with other options is never loaded. */
#define KC_FP_OPTS "--fmad=false", "--prec-div=true", "--prec-sqrt=true", \
                   "--ftz=false"
#define KC_FP_SIG "fmad=false prec-div=true prec-sqrt=true ftz=false"
#define KC_SRC_MAX (1 << 20)
#define KC_FILE_MAX (64 << 20)
static const char kc_magic[8] = {'T', 'X', 'K', 'C', 'U', 'B', '1', 0};

typedef struct kc_bin {
  char *key;
  int arch; /* 10*major+minor of the device it was built for */
  int is_ptx;
  void *code;
  size_t len;
} kc_bin;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kc_bin *g_bins;
static int g_nbins;
static size_t g_capbins;
static kcache_stats g_stats;

typedef struct kc_mod {
  char *key;
  CUmodule mod;
} kc_mod;

struct kmodules {
  kc_mod *m;
  int n;
  size_t cap;
};

void kcache_get_stats(kcache_stats *s) {
  pthread_mutex_lock(&g_mu);
  *s = g_stats;
  pthread_mutex_unlock(&g_mu);
}

/* ---- the process-wide table -------------------------------------------- */

static int bin_find(const char *key, int arch, void **code, size_t *len,
                    int *is_ptx) {
  int found = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nbins; i++)
    if (g_bins[i].arch == arch && strcmp(g_bins[i].key, key) == 0) {
      *code = g_bins[i].code;
      *len = g_bins[i].len;
      *is_ptx = g_bins[i].is_ptx;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  return found;
}

/* Takes ownership of code. Entries are never removed while the process
 * runs (except kcache_reset_memory), so pointers handed out stay valid. */
static void bin_add(const char *key, int arch, void *code, size_t len,
                    int is_ptx) {
  pthread_mutex_lock(&g_mu);
  if (tvec_grow(&g_bins, &g_capbins, sizeof *g_bins, (size_t)g_nbins + 1, 0)) {
    pthread_mutex_unlock(&g_mu);
    free(code);
    return;
  }
  kc_bin *b = &g_bins[g_nbins];
  b->key = strdup(key);
  if (!b->key) {
    pthread_mutex_unlock(&g_mu);
    free(code);
    return;
  }
  b->arch = arch;
  b->is_ptx = is_ptx;
  b->code = code;
  b->len = len;
  g_nbins++;
  pthread_mutex_unlock(&g_mu);
}

/* ---- the disk cache ---------------------------------------------------- */

static int disk_path(const char *key, int arch, char *path, size_t len) {
  const char *dir = dev_data_dir();
  if (!dir || !dir[0]) return -1;
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  char hex[65];
  size_t kl = strlen(key);
  char *buf = (char *)malloc(kl + 128);
  if (!buf) return -1;
  int n = snprintf(buf, kl + 128, "%s|sm_%d|nvrtc %d.%d|%s", key, arch, maj,
                   min, KC_FP_SIG);
  t_sha256_hex(buf, (size_t)n, hex);
  free(buf);
  snprintf(path, len, "%s/kernels/%s.cubin", dir, hex);
  return 0;
}

static int disk_load(const char *key, int arch, void **code, size_t *len,
                     int *is_ptx) {
  char path[1200];
  if (disk_path(key, arch, path, sizeof path)) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  int ok = 0;
  char magic[8];
  uint32_t kl = 0, ptx = 0;
  uint64_t cl = 0;
  char *k = NULL;
  void *c = NULL;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, kc_magic, 8) != 0) goto done;
  if (fread(&kl, 4, 1, f) != 1 || kl > KC_SRC_MAX) goto done;
  k = (char *)malloc(kl + 1);
  if (!k || fread(k, 1, kl, f) != kl) goto done;
  k[kl] = 0;
  if (strcmp(k, key) != 0) goto done;
  if (fread(&ptx, 4, 1, f) != 1 || fread(&cl, 8, 1, f) != 1) goto done;
  if (cl == 0 || cl > KC_FILE_MAX) goto done;
  c = malloc(cl);
  if (!c || fread(c, 1, cl, f) != cl) goto done;
  *code = c;
  *len = cl;
  *is_ptx = ptx != 0;
  c = NULL;
  ok = 1;
done:
  free(k);
  free(c);
  fclose(f);
  return ok;
}

static void disk_store(const char *key, int arch, const void *code, size_t len,
                       int is_ptx) {
  char path[1200], tmp[1300], dir[1100];
  if (disk_path(key, arch, path, sizeof path)) return;
  snprintf(dir, sizeof dir, "%s/kernels", dev_data_dir());
  if (t_mkdirs(dir) != 0) {
    log_warn("kernel cache: cannot create %s: %s", dir, strerror(errno));
    return;
  }
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  uint32_t kl = (uint32_t)strlen(key), ptx = (uint32_t)is_ptx;
  uint64_t cl = len;
  int ok = fwrite(kc_magic, 1, 8, f) == 8 && fwrite(&kl, 4, 1, f) == 1 &&
           fwrite(key, 1, kl, f) == kl && fwrite(&ptx, 4, 1, f) == 1 &&
           fwrite(&cl, 8, 1, f) == 1 && fwrite(code, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* ---- NVRTC ------------------------------------------------------------- */

/* The newest architecture NVRTC can target that is <= arch; *exact says
 * whether it is arch itself (cubin) or older (PTX, finished by the driver). */
static int nvrtc_arch(int arch, int *exact) {
  int n = 0, best = 0;
  *exact = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256)
    return arch;
  int archs[256];
  if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) return arch;
  for (int i = 0; i < n; i++) {
    if (archs[i] == arch) *exact = 1;
    if (archs[i] <= arch && archs[i] > best) best = archs[i];
  }
  return *exact ? arch : best;
}

static int nvrtc_compile(const char *src, int arch, void **code, size_t *len,
                         int *is_ptx, terr *e) {
  int exact = 0, target = nvrtc_arch(arch, &exact);
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s_%d",
           exact ? "sm" : "compute", target);
  const char *opts[] = {archopt, "--std=c++17", KC_FP_OPTS,
                        "--extra-device-vectorization"};
  nvrtcProgram prog = NULL;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, "tessel_fused.cu", 0, NULL,
                                     NULL);
  if (r != NVRTC_SUCCESS)
    return terr_set(e, T_EDEVICE, "", -1, "nvrtcCreateProgram: %s",
                    nvrtcGetErrorString(r));
  int rc = 0;
  size_t n = 0;
  void *out = NULL;
  r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
  if (r != NVRTC_SUCCESS) {
    size_t ln = 0;
    char logbuf[TERR_MSG_MAX] = "";
    if (nvrtcGetProgramLogSize(prog, &ln) == NVRTC_SUCCESS && ln > 1) {
      char *full = (char *)malloc(ln);
      if (full && nvrtcGetProgramLog(prog, full) == NVRTC_SUCCESS) {
        snprintf(logbuf, sizeof logbuf, "%s", full);
        log_error("NVRTC failed on generated kernel:\n%s\n--- log:\n%s", src,
                  full);
      }
      free(full);
    }
    /* The source is ours, built from a parsed tree: a failure is a bug. */
    rc = terr_set(e, T_EINTERNAL, "", -1, "kernel compile failed (%s): %.200s",
                  nvrtcGetErrorString(r), logbuf);
    goto done;
  }
  r = exact ? nvrtcGetCUBINSize(prog, &n) : nvrtcGetPTXSize(prog, &n);
  if (r == NVRTC_SUCCESS && n > 0 && (out = malloc(n)) != NULL)
    r = exact ? nvrtcGetCUBIN(prog, (char *)out) : nvrtcGetPTX(prog, (char *)out);
  if (r != NVRTC_SUCCESS || !out) {
    free(out);
    out = NULL;
    rc = terr_set(e, T_EDEVICE, "", -1, "NVRTC output: %s",
                  nvrtcGetErrorString(r));
    goto done;
  }
  *code = out;
  *len = n;
  *is_ptx = !exact;
done:
  nvrtcDestroyProgram(&prog);
  return rc;
}

int kcache_compile_check(const char *src, int arch, double *ms, terr *e) {
  void *code = NULL;
  size_t len = 0;
  int is_ptx = 0;
  double t0 = t_now_ms();
  int rc = nvrtc_compile(src, arch, &code, &len, &is_ptx, e);
  if (ms) *ms = t_now_ms() - t0;
  free(code);
  return rc;
}

/* NVRTC's first compile in a process loads its builtins library from disk:
 * on a machine whose file cache is cold that took ~170 ms more than the
 * ~25 ms of a compile (issue 25: the "compute 163 ms" of a first cuda map
 * on an H200). gpu_init starts this once, on its own detached thread, so
 * that the first job finds NVRTC loaded; a failure here is only a missed
 * warm-up (the job's own compile reports any real error). */
static void *warm_main(void *arg) {
  int arch = (int)(intptr_t)arg;
  terr e;
  terr_clear(&e);
  (void)kcache_compile_check("extern \"C\" __global__ void tx_warm(double *p) "
                             "{ if (p) p[threadIdx.x] += 1.0; }\n",
                             arch, NULL, &e);
  return NULL;
}

void kcache_warm_async(int arch) {
  pthread_t th;
  pthread_attr_t at;
  if (getenv("TESSEL_NO_NVRTC_WARM")) return;
  if (pthread_attr_init(&at) != 0) return;
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  (void)pthread_create(&th, &at, warm_main, (void *)(intptr_t)arch);
  pthread_attr_destroy(&at);
}

/* ---- the entry point --------------------------------------------------- */

static kc_mod *mod_find(devctx *d, const char *key) {
  struct kmodules *m = d->mods;
  for (int i = 0; m && i < m->n; i++)
    if (strcmp(m->m[i].key, key) == 0) return &m->m[i];
  return NULL;
}

static int mod_add(devctx *d, const char *key, CUmodule mod, terr *e) {
  if (!d->mods) d->mods = (struct kmodules *)calloc(1, sizeof *d->mods);
  struct kmodules *m = d->mods;
  if (!m) goto oom;
  if (tvec_grow(&m->m, &m->cap, sizeof *m->m, (size_t)m->n + 1, 0)) goto oom;
  m->m[m->n].key = strdup(key);
  if (!m->m[m->n].key) goto oom;
  m->m[m->n].mod = mod;
  m->n++;
  return 0;
oom:
  dev_drv.ModuleUnload(mod);
  return terr_set(e, T_ENOMEM, "", -1, "no memory for the kernel table");
}

int kcache_get(devctx *d, const char *key, kcache_gen_fn gen, void *arg,
               const char *entry, CUfunction *fn, double *compile_ms,
               terr *e) {
  int rc = 0;
  DEV_ASSERT_HELD(d); /* d->mods is guarded by the device lock */
  int arch = d->cc_major * 10 + d->cc_minor;
  void *code = NULL;
  size_t len = 0;
  int is_ptx = 0;
  char *src = NULL;
  CUmodule mod = NULL;
  if (compile_ms) *compile_ms = 0;
  kc_mod *km = mod_find(d, key);
  if (km) {
    pthread_mutex_lock(&g_mu);
    g_stats.module_hits++;
    pthread_mutex_unlock(&g_mu);
    CU_TRY_DRV(dev_drv.ModuleGetFunction(fn, km->mod, entry));
    return 0;
  }
  if (bin_find(key, arch, &code, &len, &is_ptx)) {
    pthread_mutex_lock(&g_mu);
    g_stats.mem_hits++;
    pthread_mutex_unlock(&g_mu);
  } else if (disk_load(key, arch, &code, &len, &is_ptx)) {
    pthread_mutex_lock(&g_mu);
    g_stats.disk_hits++;
    pthread_mutex_unlock(&g_mu);
    bin_add(key, arch, code, len, is_ptx);
    if (!bin_find(key, arch, &code, &len, &is_ptx)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the kernel table");
      goto fail;
    }
  } else {
    double t0 = t_now_ms();
    size_t cap = 16384;
    int n = -1;
    while (cap <= KC_SRC_MAX) {
      free(src);
      src = (char *)malloc(cap);
      if (!src) break;
      n = gen(arg, src, cap);
      if (n >= 0) break;
      cap *= 4;
    }
    if (n < 0) {
      rc = terr_set(e, T_ETOOLARGE, "params.expr", -1,
                    "the generated kernel would exceed %d bytes", KC_SRC_MAX);
      goto fail;
    }
    void *fresh = NULL;
    T_TRY(nvrtc_compile(src, arch, &fresh, &len, &is_ptx, e));
    disk_store(key, arch, fresh, len, is_ptx);
    bin_add(key, arch, fresh, len, is_ptx);
    if (!bin_find(key, arch, &code, &len, &is_ptx)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the kernel table");
      goto fail;
    }
    pthread_mutex_lock(&g_mu);
    g_stats.compiles++;
    pthread_mutex_unlock(&g_mu);
    if (compile_ms) *compile_ms = t_now_ms() - t0;
  }
  CU_TRY_DRV(dev_drv.ModuleLoadData(&mod, code));
  T_TRY(mod_add(d, key, mod, e));
  CU_TRY_DRV(dev_drv.ModuleGetFunction(fn, mod, entry));
  free(src);
  return 0;
fail:
  free(src);
  return rc;
}

void kcache_unload(devctx *d) {
  struct kmodules *m = d->mods;
  if (!m) return;
  for (int i = 0; i < m->n; i++) {
    dev_drv.ModuleUnload(m->m[i].mod);
    free(m->m[i].key);
  }
  free(m->m);
  free(m);
  d->mods = NULL;
}

void kcache_reset_memory(void) {
  for (int i = 0; i < gpu_count(); i++) {
    devctx *d = dev_get(i);
    dev_lock(d);
    if (cudaSetDevice(d->ordinal) == cudaSuccess) kcache_unload(d);
    dev_unlock(d);
  }
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nbins; i++) {
    free(g_bins[i].key);
    free(g_bins[i].code);
  }
  g_nbins = 0;
  pthread_mutex_unlock(&g_mu);
}
