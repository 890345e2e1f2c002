/* compute/kinds/geodesic/query/query_devindex.cu — the index of the CUDA
 * query engine built on every device (query.cu's design paragraph, "The
 * index"), instead of on the host (query_index.cu, kept behind
 * TESSEL_GEOQ_HOST_INDEX=1 and as the fallback when a device's memory
 * cannot hold the build). On an H200 host the host index of 10^7 points
 * took ~270-330 ms that no number of GPUs shrank (about 40 % of it page
 * faults on its fresh GB; tests/bench/results/knn-2gpu-2026-11-29.md);
 * here each device receives the plan's prepared points (400 MB for 10^7,
 * every device at once: query_devs.cu's gq_uploads) and builds the
 * index itself, and only what the host needs comes back: ord, each
 * chunk's rows in order, for the scatter (knn, rowwise), or the sorted
 * queries' original index (radius: the host counts and places pairs by
 * row).
 *
 * The steps, each a kernel on the device's compute stream: X and the
 * Morton code of every point (gq_xyz, gq_code: the same bits as the
 * host's, query_int.h says why), CUB's radix sort of (code, original
 * index) pairs — stable, so equal codes keep increasing index, the host's
 * order — the gather of X and the points into sorted order, the tiles'
 * boxes, the homes (lower bound of each query's code in the targets'),
 * and for knn and rowwise the output slots: inv[idx[s]] = s, every
 * original row keyed by its chunk of the plain cut (gq_cut, made on the
 * host before), a stable radix sort of (chunk, row) pairs gives ord, and
 * slot[s] = its place in its chunk's ord. Every device builds the same
 * index (the same kernels over the same points), identical to the host
 * index.
 *
 * Memory: the persistent buffers (the sorted queries with targets, homes,
 * slots) and the build's scratch (one block carved by gq_ix_layout, the
 * sides' codes) are allocated by gq_dev_index_alloc on cuda_geoq's thread,
 * which holds every device; gq_dev_index runs on a helper thread for
 * devices beyond the first (gq_uploads) and allocates nothing; cuda_geoq's
 * thread gives the scratch back (gq_dev_index_free) once every device is
 * done, before the chunk buffers take its place.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "compute/kinds/geodesic/query/query_int.h"

#define GQ_IX_THREADS 256
#define GQ_IX_ALIGN 256

/* ---- the kernels (a thread an item) -------------------------------------- */

__global__ void gq_k_codes(gq_surf S, const geod_point *p, int64_t n,
                           double *xs, unsigned long long *code,
                           long long *iota) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double x[3];
  gq_xyz(&S, &p[i], x);
  xs[3 * i] = x[0];
  xs[3 * i + 1] = x[1];
  xs[3 * i + 2] = x[2];
  code[i] = (unsigned long long)gq_code(&S, x);
  iota[i] = i;
}

__global__ void gq_k_gather(const long long *idx, int64_t n, const double *xs,
                            const geod_point *p, double *x, geod_point *ps) {
  int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  long long i = idx[r];
  x[3 * r] = xs[3 * i];
  x[3 * r + 1] = xs[3 * i + 1];
  x[3 * r + 2] = xs[3 * i + 2];
  ps[r] = p[i];
}

/* A tile's box: the same comparisons in the same order as the host's
 * (query_index.cu, gq_box_share), so the same bits. */
__global__ void gq_k_boxes(const double *x, int64_t n, int64_t nt, double *b) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nt) return;
  double o[6];
  for (int c = 0; c < 3; c++) o[c] = INFINITY, o[3 + c] = -INFINITY;
  int64_t e1 = (t + 1) * GQ_TILE < n ? (t + 1) * GQ_TILE : n;
  for (int64_t i = t * GQ_TILE; i < e1; i++)
    for (int c = 0; c < 3; c++) {
      double v = x[3 * i + c];
      if (v < o[c]) o[c] = v;
      if (v > o[3 + c]) o[3 + c] = v;
    }
  for (int c = 0; c < 6; c++) b[6 * t + c] = o[c];
}

/* home[s]: the lower bound of query s's code in the targets' (self: s). */
__global__ void gq_k_homes(const unsigned long long *tc, int64_t m,
                           const unsigned long long *qc, int64_t n, int self,
                           long long *home) {
  int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  if (self) {
    home[s] = s;
    return;
  }
  unsigned long long key = qc[s];
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (tc[mid] < key) lo = mid + 1; else hi = mid;
  }
  home[s] = lo;
}

__global__ void gq_k_inv(const long long *qi, int64_t n, long long *inv) {
  int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (s < n) inv[qi[s]] = s;
}

/* Original row i keyed by the chunk of its sorted place (the last chunk
 * c with cut0[c] <= inv[i]). */
__global__ void gq_k_chunk_key(const long long *inv, int64_t n,
                               const long long *cut0, int64_t nch,
                               unsigned *key, long long *iota) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long s = inv[i];
  int64_t lo = 0, hi = nch - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (cut0[mid] <= s) lo = mid; else hi = mid - 1;
  }
  key[i] = (unsigned)lo;
  iota[i] = i;
}

__global__ void gq_k_slots(const long long *ord, const unsigned *key,
                           const long long *inv, const long long *cut0,
                           int64_t n, long long *slot) {
  int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p < n) slot[inv[ord[p]]] = p - cut0[key[p]];
}

/* ---- sizes and the scratch's layout ------------------------------------- */

static size_t gq_al(size_t b) {
  return (b + GQ_IX_ALIGN - 1) / GQ_IX_ALIGN * GQ_IX_ALIGN;
}

static unsigned gq_grid(int64_t n) {
  return (unsigned)((n + GQ_IX_THREADS - 1) / GQ_IX_THREADS);
}

/* Bits of the chunk keys for nch chunks (at least 1). */
static int gq_key_bits(int64_t nch) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) < nch) b++;
  return b;
}

/* CUB's scratch for a sort of n (K, long long) pairs on bits [0, bits):
 * asked of CUB (no device work), 0 for no items. */
template <typename K>
static size_t gq_sort_tmp(int64_t n, int bits) {
  size_t b = 0;
  if (n > 0)
    (void)cub::DeviceRadixSort::SortPairs(
        (void *)NULL, b, (const K *)NULL, (K *)NULL, (const long long *)NULL,
        (long long *)NULL, n, 0, bits);
  return b;
}

/* Offsets in the scratch block: a side's phase (raw points, X unsorted,
 * codes and indices in, the sort's scratch; sized for the larger side),
 * then — the same bytes again — the slots' phase, and the cut's starts
 * after the larger of the two. */
typedef struct gq_ix_lay {
  size_t raw, xs, kin, vin, tmp, tmp_b;
  size_t inv, key, keyo, sin, ord, stmp, stmp_b;
  size_t cut0, total;
  int bits;
} gq_ix_lay;

static void gq_ix_layout(const gq_run *r, int64_t nch, gq_ix_lay *L) {
  const geod_plan *pl = r->pl;
  int64_t n = pl->n, m = r->T.n, N = pl->has_targets && n > m ? n : m;
  size_t o = 0, side, slots = 0;
  memset(L, 0, sizeof *L);
  L->tmp_b = gq_sort_tmp<unsigned long long>(m, GQ_CODE_BITS);
  if (pl->has_targets) {
    size_t b = gq_sort_tmp<unsigned long long>(n, GQ_CODE_BITS);
    if (b > L->tmp_b) L->tmp_b = b;
  }
  L->raw = o; o += gq_al((size_t)N * sizeof(geod_point));
  L->xs = o; o += gq_al((size_t)N * 3 * sizeof(double));
  L->kin = o; o += gq_al((size_t)N * 8);
  L->vin = o; o += gq_al((size_t)N * 8);
  L->tmp = o; o += gq_al(L->tmp_b);
  side = o;
  if (r->slotted) {
    L->bits = gq_key_bits(nch);
    L->stmp_b = gq_sort_tmp<unsigned>(n, L->bits);
    o = 0;
    L->inv = o; o += gq_al((size_t)n * 8);
    L->key = o; o += gq_al((size_t)n * 4);
    L->keyo = o; o += gq_al((size_t)n * 4);
    L->sin = o; o += gq_al((size_t)n * 8);
    L->ord = o; o += gq_al((size_t)n * 8);
    L->stmp = o; o += gq_al(L->stmp_b);
    slots = o;
  }
  L->cut0 = side > slots ? side : slots;
  L->total = L->cut0 + gq_al((size_t)(r->slotted ? nch + 1 : 1) * 8);
}

void gq_dev_index_bytes(const gq_run *r, size_t *keep, size_t *build) {
  const geod_plan *pl = r->pl;
  size_t n = (size_t)pl->n, m = (size_t)r->T.n;
  gq_ix_lay L;
  *keep = (pl->has_targets ? n * (3 * sizeof(double) + sizeof(geod_point) + 8) : 0) +
          n * 8 + (r->slotted ? n * 8 : 0);
  gq_ix_layout(r, pl->n / 32 + 2, &L); /* the cut is not made yet: at most */
  *build = L.total + (m + (pl->has_targets ? n : 0)) * 8;
}

static int gq_ix_alloc(devctx *d, size_t bytes, devbuf *b, terr *e) {
  return devmem_alloc(d, bytes ? bytes : 8, b, e);
}

int gq_dev_index_alloc(const gq_run *r, gq_dev *x, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  size_t n = (size_t)pl->n, m = (size_t)r->T.n;
  gq_ix_lay L;
  CU_TRY(cudaSetDevice(x->d->ordinal));
  gq_ix_layout(r, r->slot_nch, &L);
  if (pl->has_targets) {
    T_TRY(gq_ix_alloc(x->d, n * 3 * sizeof(double), &x->ax, e));
    T_TRY(gq_ix_alloc(x->d, n * sizeof(geod_point), &x->ap, e));
    T_TRY(gq_ix_alloc(x->d, n * 8, &x->ai, e));
  }
  T_TRY(gq_ix_alloc(x->d, n * 8, &x->ah, e));
  if (r->slotted) T_TRY(gq_ix_alloc(x->d, n * 8, &x->as, e));
  T_TRY(gq_ix_alloc(x->d, L.total, &x->ix, e));
  T_TRY(gq_ix_alloc(x->d, (m + (pl->has_targets ? n : 0)) * 8, &x->codes, e));
fail:
  return rc;
}

int gq_dev_index_prep(gq_run *r, terr *e) {
  int rc = 0;
  int64_t n = r->Q.n, nch = 0;
  size_t nn = (size_t)(n > 0 ? n : 1);
  gq_chunk *ch = NULL;
  if (r->slotted) {
    T_TRY(gq_cut(r, 0, &ch, &nch, e));
    r->cut0 = (long long *)malloc((size_t)(nch + 1) * 8);
    r->ord = (long long *)malloc(nn * 8);
    if (!r->cut0 || !r->ord) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
      goto fail;
    }
    for (int64_t c = 0; c < nch; c++) r->cut0[c] = ch[c].s0;
    r->cut0[nch] = n;
    r->slot_nch = nch; /* what the pass will cut again (gq_run_pass) */
    r->slot_last = nch > 0 ? ch[nch - 1].s0 : 0;
  } else { /* radius: the host counts and places pairs by original row */
    r->Q.idx = (long long *)malloc(nn * 8);
    if (!r->Q.idx)
      return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
    if (!r->pl->has_targets) r->T.idx = r->Q.idx; /* freed once, as T's */
  }
fail:
  free(ch);
  return rc;
}

void gq_dev_index_free(gq_dev *x) {
  devmem_free(x->d, &x->ix);
  devmem_free(x->d, &x->codes);
}

/* ---- the build ------------------------------------------------------------ */

/* One side of N prepared points up and sorted into x, p, idx (device),
 * its sorted codes into code. */
static int gq_side_dev(gq_dev *x, const gq_surf *S, const gq_ix_lay *L,
                       const geod_point *pts, int64_t N, double *dx,
                       geod_point *dp, long long *di, unsigned long long *code,
                       double *up_ms, terr *e) {
  int rc = 0;
  char *ix = (char *)x->ix.ptr;
  cudaStream_t st = x->d->s_comp;
  geod_point *raw = (geod_point *)(ix + L->raw);
  double *xs = (double *)(ix + L->xs);
  unsigned long long *kin = (unsigned long long *)(ix + L->kin);
  long long *vin = (long long *)(ix + L->vin);
  size_t tb = L->tmp_b;
  double t0;
  if (N <= 0) return 0;
  CU_TRY(cudaStreamSynchronize(st)); /* the scratch's last readers done */
  t0 = t_now_ms();
  T_TRY(stage_upload(x->d, raw, pts, (size_t)N * sizeof(geod_point), e));
  *up_ms += t_now_ms() - t0;
  gq_k_codes<<<gq_grid(N), GQ_IX_THREADS, 0, st>>>(*S, raw, N, xs, kin, vin);
  CU_TRY(cudaGetLastError());
  CU_TRY(cub::DeviceRadixSort::SortPairs(ix + L->tmp, tb, kin, code, vin, di,
                                         N, 0, GQ_CODE_BITS, st));
  gq_k_gather<<<gq_grid(N), GQ_IX_THREADS, 0, st>>>(di, N, xs, raw, dx, dp);
  CU_TRY(cudaGetLastError());
fail:
  return rc;
}

/* slot and ord of the plain cut (r->cut0) from the sorted queries'
 * original index qi. */
static int gq_slots_dev(const gq_run *r, gq_dev *x, const gq_ix_lay *L,
                        const long long *qi, terr *e) {
  int rc = 0;
  int64_t n = r->Q.n, nch = r->slot_nch;
  char *ix = (char *)x->ix.ptr;
  cudaStream_t st = x->d->s_comp;
  long long *inv = (long long *)(ix + L->inv), *sin = (long long *)(ix + L->sin),
            *ord = (long long *)(ix + L->ord), *cut0 = (long long *)(ix + L->cut0);
  unsigned *key = (unsigned *)(ix + L->key), *keyo = (unsigned *)(ix + L->keyo);
  size_t tb = L->stmp_b;
  if (n <= 0) return 0;
  CU_TRY(cudaMemcpyAsync(cut0, r->cut0, (size_t)(nch + 1) * 8,
                         cudaMemcpyHostToDevice, st));
  gq_k_inv<<<gq_grid(n), GQ_IX_THREADS, 0, st>>>(qi, n, inv);
  CU_TRY(cudaGetLastError());
  gq_k_chunk_key<<<gq_grid(n), GQ_IX_THREADS, 0, st>>>(inv, n, cut0, nch, key,
                                                        sin);
  CU_TRY(cudaGetLastError());
  CU_TRY(cub::DeviceRadixSort::SortPairs(ix + L->stmp, tb, key, keyo, sin, ord,
                                         n, 0, L->bits, st));
  gq_k_slots<<<gq_grid(n), GQ_IX_THREADS, 0, st>>>(ord, keyo, inv, cut0, n,
                                                    (long long *)x->as.ptr);
  CU_TRY(cudaGetLastError());
fail:
  return rc;
}

int gq_dev_index(const gq_run *r, gq_dev *x, int lead, double ms[3],
                 terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  int64_t n = pl->n, m = r->T.n;
  int tg = pl->has_targets;
  cudaStream_t st = x->d->s_comp;
  unsigned long long *codes = (unsigned long long *)x->codes.ptr;
  const long long *qi = (const long long *)(tg ? x->ai.ptr : x->tj.ptr);
  gq_surf S = gq_surface(pl);
  gq_ix_lay L;
  double t0 = t_now_ms();
  ms[0] = ms[1] = ms[2] = 0;
  CU_TRY(cudaSetDevice(x->d->ordinal));
  gq_ix_layout(r, r->slot_nch, &L);
  T_ASSERT(x->ix.ptr && x->ix.bytes >= L.total); /* gq_dev_index_alloc's */
  T_TRY(gq_side_dev(x, &S, &L, pl->q, m, (double *)x->tx.ptr,
                    (geod_point *)x->tp.ptr, (long long *)x->tj.ptr, codes,
                    &ms[0], e));
  if (r->nt > 0) {
    gq_k_boxes<<<gq_grid(r->nt), GQ_IX_THREADS, 0, st>>>(
        (const double *)x->tx.ptr, m, r->nt, (double *)x->box.ptr);
    CU_TRY(cudaGetLastError());
  }
  if (tg)
    T_TRY(gq_side_dev(x, &S, &L, pl->p, n, (double *)x->ax.ptr,
                      (geod_point *)x->ap.ptr, (long long *)x->ai.ptr,
                      codes + m, &ms[0], e));
  if (n > 0) {
    gq_k_homes<<<gq_grid(n), GQ_IX_THREADS, 0, st>>>(codes, m, codes + m, n,
                                                      !tg, (long long *)x->ah.ptr);
    CU_TRY(cudaGetLastError());
  }
  if (r->slotted) T_TRY(gq_slots_dev(r, x, &L, qi, e));
  CU_TRY(cudaMemsetAsync(x->nc.ptr, 0, sizeof(unsigned long long), st));
  CU_TRY(cudaStreamSynchronize(st));
  ms[1] = t_now_ms() - t0 - ms[0];
  if (lead && n > 0) { /* what the host needs, from the first device */
    double t1 = t_now_ms();
    if (r->slotted)
      T_TRY(stage_download(x->d, r->ord, (char *)x->ix.ptr + L.ord,
                           (size_t)n * 8, e));
    else
      T_TRY(stage_download(x->d, r->Q.idx, qi, (size_t)n * 8, e));
    ms[2] = t_now_ms() - t1;
  }
fail:
  return rc;
}
