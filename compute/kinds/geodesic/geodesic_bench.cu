/* compute/kinds/geodesic/geodesic_bench.cu — the benchmark entry points
 * of the CUDA geodesic matrix (geodesic_cuda.h): cuda_geodesic_bench
 * times the kernel alone over the whole matrix (the default shape or a
 * tuning variant, median of `reps` runs after a warm-up), and
 * cuda_copy_baseline times the copy-out path alone (device to pinned
 * slots to a file descriptor), the bound the pipeline is measured
 * against. Neither runs in a job: each takes the device (gg_begin) for
 * the call and gives it back; every CUDA status through CU_TRY.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/kinds/geodesic/geodesic_int.h"

static int gg_cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

extern "C" const char *cuda_geodesic_variant_name(int variant) {
  return gg_variant_name(variant);
}

extern "C" int cuda_geodesic_bench(int dev, const geod_plan *pl, int variant,
                                   int reps, double *ms_median, double *pairs,
                                   terr *e) {
  int rc = 0, mode, f32 = pl->dtype == T_F32;
  devctx *d = NULL;
  devbuf bp = {NULL, 0}, bq = {NULL, 0}, bnc = {NULL, 0}, bout = {NULL, 0};
  geod_point *dp = NULL, *dq = NULL;
  size_t es = tdtype_size(pl->dtype), total;
  size_t np = (size_t)(pl->q == pl->p && pl->m > pl->n ? pl->m : pl->n);
  double ms[64];
  float t = 0;
  gg_args a;
  dim3 grid;

  *ms_median = 0;
  mode = pl->has_targets ? GG_ROWS : pl->condensed ? GG_COND : GG_SYM;
  *pairs = geod_plan_pairs(pl);
  if (reps < 1) reps = 1;
  if (reps > 64) reps = 64;
  if (variant < 0 || variant >= GG_NVARIANT ||
      (variant && (pl->method != GEOD_KARNEY || f32 || mode == GG_COND)))
    return terr_set(e, T_EINVAL, "", -1, "no kernel variant %d for this plan",
                    variant);
  total = (size_t)(pl->condensed ? pl->shape[0] : pl->n * pl->m) * es;
  rc = gg_begin(dev, &d, e);
  if (rc) return rc;
  T_TRY(devmem_alloc(d, np * sizeof(geod_point), &bp, e));
  dp = (geod_point *)bp.ptr;
  CU_TRY(cudaMemcpy(dp, pl->p, np * sizeof(geod_point),
                    cudaMemcpyHostToDevice));
  dq = dp;
  if (pl->q != pl->p) {
    T_TRY(devmem_alloc(d, (size_t)pl->m * sizeof(geod_point), &bq, e));
    dq = (geod_point *)bq.ptr;
    CU_TRY(cudaMemcpy(dq, pl->q, (size_t)pl->m * sizeof(geod_point),
                      cudaMemcpyHostToDevice));
  }
  T_TRY(devmem_alloc(d, sizeof(unsigned long long), &bnc, e));
  T_TRY(devmem_alloc(d, total ? total : 1, &bout, e));
  gg_args_init(&a, pl, dp, dq, (unsigned long long *)bnc.ptr);
  a.r0 = 0;
  a.r1 = pl->n;
  a.c0 = 0;
  a.out = bout.ptr;
  grid = dim3((unsigned)((pl->m + GG_TILE - 1) / GG_TILE),
              (unsigned)((pl->n + GG_TILE - 1) / GG_TILE));
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
    CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
    if (variant == 0)
      CU_TRY(gg_launch(pl->method, mode, grid, d->s_comp, a, f32));
    else
      CU_TRY(gg_launch_variant(variant, mode == GG_SYM ? GG_SYM : GG_ROWS,
                               grid, d->s_comp, a));
    CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
    CU_TRY(cudaEventSynchronize(d->ev_b));
    CU_TRY(cudaEventElapsedTime(&t, d->ev_a, d->ev_b));
    if (r >= 0) ms[r] = t;
  }
  qsort(ms, (size_t)reps, sizeof ms[0], gg_cmp_double);
  *ms_median = ms[reps / 2];
fail:
  (void)cudaStreamSynchronize(d->s_comp);
  devmem_free(d, &bout);
  devmem_free(d, &bq);
  devmem_free(d, &bp);
  devmem_free(d, &bnc);
  if (rc) (void)cudaGetLastError();
  dev_end(d, rc);
  return rc;
}

extern "C" int cuda_copy_baseline(int dev, size_t bytes, size_t chunk, int fd,
                                  double *ms, terr *e) {
  int rc = 0;
  devctx *d = NULL;
  devbuf buf = {NULL, 0};
  char *dbuf;
  int64_t nchunk, c;
  double t0;
  *ms = 0;
  rc = gg_begin(dev, &d, e);
  if (rc) return rc;
  T_TRY(stage_ensure(d, e));
  if (chunk == 0 || chunk > d->slot[0].bytes) chunk = d->slot[0].bytes;
  T_TRY(devmem_alloc(d, bytes, &buf, e));
  dbuf = (char *)buf.ptr;
  CU_TRY(cudaMemsetAsync(dbuf, 0x5a, bytes, d->s_d2h));
  CU_TRY(cudaStreamSynchronize(d->s_d2h));
  nchunk = (int64_t)((bytes + chunk - 1) / chunk);
  t0 = t_now_ms();
  /* DMA of chunk c + 1 overlaps the write of chunk c. */
  for (c = 0; c <= nchunk; c++) {
    if (c < nchunk) {
      size_t o = (size_t)c * chunk, len = bytes - o < chunk ? bytes - o : chunk;
      stage_slot *s = &d->slot[c % GG_NSTAGE];
      CU_TRY(cudaMemcpyAsync(s->host, dbuf + o, len, cudaMemcpyDeviceToHost,
                             d->s_d2h));
      CU_TRY(cudaEventRecord(s->d2h_done, d->s_d2h));
    }
    if (c > 0) {
      int64_t p = c - 1;
      size_t o = (size_t)p * chunk, len = bytes - o < chunk ? bytes - o : chunk;
      stage_slot *s = &d->slot[p % GG_NSTAGE];
      T_ASSERT(len <= s->bytes); /* chunk was cut to a slot */
      CU_TRY(cudaEventSynchronize(s->d2h_done));
      const char *src = (const char *)s->host;
      while (len > 0) {
        ssize_t w = write(fd, src, len);
        if (w <= 0) {
          rc = terr_set(e, T_EIO, "", -1, "write failed");
          goto fail;
        }
        src += w;
        len -= (size_t)w;
      }
    }
  }
  *ms = t_now_ms() - t0;
fail:
  (void)cudaStreamSynchronize(d->s_d2h);
  devmem_free(d, &buf);
  if (rc) (void)cudaGetLastError();
  dev_end(d, rc);
  return rc;
}
