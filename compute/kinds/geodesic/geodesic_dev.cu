/* geodesic_dev.cu — the pieces of the geodesic host driver that its two
 * paths share: the band events, taking a device, the kernel arguments, the
 * band split, the points copied up, the memory budget, the drain into the
 * result and the stop check; and the probe (cuda_geodesic_probe). geodesic.cu (one device) and geodesic_spread.cu
 * (a job spread over several) both build on these; this file calls neither,
 * so the two stay a one-way pair (geodesic.cu -> geodesic_spread.cu).
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/geodesic_int.h"
#include "util/vec.h"

/* ---- on the device runtime -------------------------------------------------
 * Everything per device — the lock, streams, timing events, memory pool,
 * pinned staging slots and the host copy gang — is the device runtime's
 * (compute/gpu/devctx.h): dev_begin / dev_end, CU_TRY, devmem_alloc, d->slot[].
 * What only this pipeline needs beyond it are the events that pace the
 * bands, made per call (a geodesic job is long; an event costs
 * microseconds). */

int gg_events_create(gg_events *ev, terr *e) {
  int rc = 0;
  memset(ev, 0, sizeof *ev);
  for (int i = 0; i < GG_LOOK + 1; i++)
    CU_TRY(cudaEventCreateWithFlags(&ev->band[i], cudaEventDisableTiming));
  for (int i = 0; i < GG_NSLOT; i++)
    CU_TRY(cudaEventCreateWithFlags(&ev->slot[i], cudaEventDisableTiming));
fail:
  return rc;
}

void gg_events_destroy(gg_events *ev) {
  for (int i = 0; i < GG_LOOK + 1; i++)
    if (ev->band[i]) (void)cudaEventDestroy(ev->band[i]);
  for (int i = 0; i < GG_NSLOT; i++)
    if (ev->slot[i]) (void)cudaEventDestroy(ev->slot[i]);
}

/* Take Tessel device `dev` for a call: T_EUNAVAIL when there is no usable
 * device at all, T_EDEVICE when `dev` is not one of them; else
 * dev_begin's answer (the device locked and current). */
int gg_begin(int dev, devctx **d, terr *e) {
  *d = NULL;
  int n = gpu_count();
  if (n == 0)
    return terr_set(e, T_EUNAVAIL, "backend", -1, "no CUDA device: %s",
                    gpu_unavailable_reason());
  if (dev < 0 || dev >= n)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, n);
  return dev_begin(dev, d, e);
}

/* The kernel arguments every launch of a plan shares (the band fields are
 * the caller's). */
void gg_args_init(gg_args *a, const geod_plan *pl, const geod_point *dp,
                  const geod_point *dq, unsigned long long *dnc) {
  memset(a, 0, sizeof *a);
  a->g = pl->ell;
  a->p = dp;
  a->q = dq;
  a->radius = pl->radius_m;
  a->unit = pl->unit;
  a->n = pl->n;
  a->m = pl->m;
  a->nonconv = dnc;
  a->upper = pl->has_targets && pl->upper;
}

/* ---- host side ---------------------------------------------------------- */

/* Cut the output into bands of at most `cap` bytes (SYM: rows a multiple
 * of the tile). Returns the band count, or -1 (no memory, or one row does
 * not fit). Caller frees *out. */
int64_t gg_bands(const geod_plan *pl, int mode, size_t es, size_t cap,
                 gg_band **out) {
  int64_t n = pl->n, cols = pl->m, cnt = 0;
  size_t alloc = 0;
  gg_band *b = NULL;
  if (tvec_grow(&b, &alloc, sizeof *b, 64, 0)) return -1;
  size_t row_bytes = (size_t)cols * es;
  if (mode != GG_COND && row_bytes > cap) {
    free(b);
    return -1;
  }
  int64_t r, rend; /* a band (a tile of a split job): its rows only */
  geod_plan_band(pl, &r, &rend);
  size_t off = 0;
  while (r < rend) {
    int64_t r1;
    if (mode == GG_COND) {
      size_t acc = 0;
      r1 = r;
      while (r1 < rend && acc + (size_t)(n - r1 - 1) * es <= cap) {
        acc += (size_t)(n - r1 - 1) * es;
        r1++;
      }
      if (r1 == r) {
        free(b);
        return -1;
      }
    } else {
      int64_t rows = (int64_t)(cap / row_bytes);
      if (mode == GG_SYM || rows >= GG_TILE) {
        rows = rows / GG_TILE * GG_TILE;
        if (rows < GG_TILE) rows = GG_TILE;
      }
      r1 = r + rows < rend ? r + rows : rend;
    }
    if (tvec_grow(&b, &alloc, sizeof *b, (size_t)cnt + 1, 0)) {
      free(b);
      return -1;
    }
    gg_band *x = &b[cnt++];
    x->r0 = r;
    x->r1 = r1;
    x->off = off;
    if (mode == GG_COND) {
      x->base0 = r < n - 1 ? geod_condensed_index(n, r, r + 1) : n * (n - 1) / 2;
      int64_t e1 = r1 < n ? (r1 < n - 1 ? geod_condensed_index(n, r1, r1 + 1)
                                        : n * (n - 1) / 2)
                          : n * (n - 1) / 2;
      x->bytes = (size_t)(e1 - x->base0) * es;
    } else {
      x->bytes = (size_t)(r1 - r) * row_bytes;
    }
    off += x->bytes;
    r = r1;
  }
  *out = b;
  return cnt;
}

/* The plan's points (p holds n, or max(n, m) when the targets are p
 * itself; targets apart) up to device d, small and pageable, and the
 * Vincenty counter zeroed, on d's compute stream; returns once they are
 * there. bq stays empty when the targets are the points. The caller
 * frees the buffers (on failure too). */
int gg_points_up(devctx *d, const geod_plan *pl, devbuf *bp, devbuf *bq,
                 devbuf *bnc, terr *e) {
  int rc = 0;
  size_t np = (size_t)(pl->q == pl->p && pl->m > pl->n ? pl->m : pl->n);
  T_TRY(devmem_alloc(d, np * sizeof(geod_point), bp, e));
  CU_TRY(cudaMemcpyAsync(bp->ptr, pl->p, np * sizeof(geod_point),
                         cudaMemcpyHostToDevice, d->s_comp));
  if (pl->q != pl->p) {
    T_TRY(devmem_alloc(d, (size_t)pl->m * sizeof(geod_point), bq, e));
    CU_TRY(cudaMemcpyAsync(bq->ptr, pl->q, (size_t)pl->m * sizeof(geod_point),
                           cudaMemcpyHostToDevice, d->s_comp));
  }
  T_TRY(devmem_alloc(d, sizeof(unsigned long long), bnc, e));
  CU_TRY(cudaMemsetAsync(bnc->ptr, 0, sizeof(unsigned long long), d->s_comp));
  CU_TRY(cudaStreamSynchronize(d->s_comp));
fail:
  return rc;
}

/* Device bytes a call may take on the current device: 90% of what is
 * free, at most the plan's gpu_mem_limit. */
int gg_budget(const geod_plan *pl, size_t *budget, terr *e) {
  int rc = 0;
  size_t free_b = 0, total_b = 0;
  *budget = 0;
  CU_TRY(cudaMemGetInfo(&free_b, &total_b));
  *budget = (size_t)((double)free_b * 0.9);
  if (pl->gpu_mem_limit > 0 && (size_t)pl->gpu_mem_limit < *budget)
    *budget = (size_t)pl->gpu_mem_limit;
fail:
  return rc;
}

/* 0 when Tessel device `dev` can run the geodesic kernels. The device
 * runtime is started here when nothing started it (tests, benchmarks). */
extern "C" int cuda_geodesic_probe(int dev, char *name, size_t name_len,
                                   terr *e) {
  if (gpu_count() == 0) gpu_init();
  devctx *d = NULL;
  int rc = gg_begin(dev, &d, e);
  if (rc) {
    if (e && e->code == T_EDEVICE) e->code = T_EUNAVAIL;
    return rc;
  }
  cudaFuncAttributes attr;
  if (name)
    snprintf(name, name_len, "%s (sm_%d%d)", d->name, d->cc_major,
             d->cc_minor);
  /* Fails when the binary has no code for this architecture. */
  CU_TRY(gg_kernel_attributes(&attr));
fail:
  dev_end(d, rc);
  if (rc && e && e->code == T_EDEVICE) e->code = T_EUNAVAIL;
  return rc;
}

/* Copy a chunk from its pinned slot into the result, on the device's gang
 * (the pages of a mapped result fault in parallel). */
void gg_drain(devctx *d, char *dst, const void *src, size_t len) {
  gang_item it = {dst, src, len};
  gang_copy(d->gang, &it, 1);
}

/* 0, or the job's stop code with e set (canceled, timed out). */
int gg_stopped(const geod_gpu_job *job, terr *e) {
  int rc;
  if (!job || !job->stopped || (rc = job->stopped(job->ctx)) == 0) return 0;
  return terr_set(e, (terr_code)rc, "", -1, "%s",
                  rc == T_ETIMEOUT ? "the job ran past its timeout"
                                   : "the job was canceled");
}
