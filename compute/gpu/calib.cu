/* calib.cu — the GPU half of the router's self-benchmark: copy rates and the
 * fixed cost of a launch, measured on one device in a few tens of
 * milliseconds (gpu_measure_rates). The router caches the figures in the
 * data dir, so a restart does not measure again.
 *
 * Each rate is the median of three timed copies of CALIB_BYTES after one
 * warm-up, timed with CUDA events on the copy stream: host->device and
 * device->host from the pinned staging slot and from ordinary (pageable)
 * heap memory, and device->device (counting bytes read plus bytes
 * written, as the copy bandwidth that kernels are compared with).
 *
 * Threads: takes the device's lock for the whole measurement.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/devctx.h"
#include "util/util.h"

#define CALIB_BYTES ((size_t)32 << 20)
#define CALIB_REPS 3

__global__ void calib_empty_kernel(int *p) {
  if (p && threadIdx.x == 1024) *p = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median rate in bytes/s of `reps` copies (count: bytes counted per copy). */
static int time_copy(devctx *d, void *dst, const void *src, size_t bytes,
                     cudaMemcpyKind kind, double count, double *rate,
                     terr *e) {
  int rc = 0;
  double ms[CALIB_REPS];
  CU_TRY(cudaMemcpyAsync(dst, src, bytes, kind, d->s_h2d)); /* warm-up */
  for (int i = 0; i < CALIB_REPS; i++) {
    CU_TRY(cudaEventRecord(d->ev_a, d->s_h2d));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, kind, d->s_h2d));
    CU_TRY(cudaEventRecord(d->ev_b, d->s_h2d));
    CU_TRY(cudaEventSynchronize(d->ev_b));
    ms[i] = dev_event_ms(d->ev_a, d->ev_b);
  }
  qsort(ms, CALIB_REPS, sizeof ms[0], cmp_double);
  *rate = ms[CALIB_REPS / 2] > 0 ? count / (ms[CALIB_REPS / 2] * 1e-3) : 0;
fail:
  return rc;
}

int gpu_measure_rates(int dev, gpu_rates *r, terr *e) {
  memset(r, 0, sizeof *r);
  devctx *d = NULL;
  int rc = dev_begin(dev, &d, e);
  if (rc) return rc;
  devbuf a = {NULL, 0}, b = {NULL, 0};
  unsigned char *pageable = NULL;
  size_t n = CALIB_BYTES;
  r->stage_threads = gang_size(d->gang);
  T_TRY(stage_ensure(d, e));
  if (n > d->slot[0].bytes) n = d->slot[0].bytes;
  T_TRY(devmem_alloc(d, n, &a, e));
  T_TRY(devmem_alloc(d, n, &b, e));
  pageable = (unsigned char *)malloc(n);
  if (!pageable) {
    rc = terr_set(e, T_ENOMEM, "", -1, "no host memory for calibration");
    goto fail;
  }
  /* Touch every page and give the data something other than zeros. */
  for (size_t i = 0; i < n; i++) pageable[i] = (unsigned char)(i * 131u + 7u);
  memcpy(d->slot[0].host, pageable, n);
  T_TRY(time_copy(d, a.ptr, d->slot[0].host, n, cudaMemcpyHostToDevice,
                  (double)n, &r->h2d_pinned, e));
  T_TRY(time_copy(d, d->slot[0].host, a.ptr, n, cudaMemcpyDeviceToHost,
                  (double)n, &r->d2h_pinned, e));
  T_TRY(time_copy(d, a.ptr, pageable, n, cudaMemcpyHostToDevice, (double)n,
                  &r->h2d_pageable, e));
  T_TRY(time_copy(d, pageable, a.ptr, n, cudaMemcpyDeviceToHost, (double)n,
                  &r->d2h_pageable, e));
  T_TRY(time_copy(d, b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice, 2.0 * (double)n,
                  &r->d2d, e));
  {
    double t[5];
    for (int i = 0; i < 5; i++) {
      double t0 = t_now_ms();
      calib_empty_kernel<<<1, 32, 0, d->s_comp>>>(NULL);
      CU_TRY(cudaGetLastError());
      CU_TRY(cudaStreamSynchronize(d->s_comp));
      t[i] = t_now_ms() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_double);
    r->launch_s = t[2] * 1e-3;
  }
fail:
  free(pageable);
  devmem_free(d, &a);
  devmem_free(d, &b);
  dev_end(d, rc);
  return rc;
}
