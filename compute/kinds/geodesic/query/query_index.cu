/* compute/kinds/geodesic/query/query_index.cu — the host index of the CUDA
 * query engine (query.cu's design paragraph, "The index"): every point
 * and target gets its Earth-centred X on the solver's surface and the 3-D
 * Morton code of X (21 bits an axis); each side is sorted by code (an LSD
 * radix sort, stable), the targets cut into tiles of GQ_TILE with their
 * bounding boxes, every query given its home (its place in the targets'
 * order), and, for knn and rowwise, each sorted query its output slot in
 * its chunk (gq_slots) so that results come back in original row order.
 *
 * Plain host code (in a .cu file for the shared C++ types of
 * query_int.h); it runs on cuda_geoq's thread before any device is
 * taken, and allocates only with malloc (T_ENOMEM on failure, nothing
 * left allocated by the failing call).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "compute/kinds/geodesic/query/query_int.h"

/* Spread the low 21 bits of v to every third bit. */
static uint64_t gq_spread3(uint64_t v) {
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

/* Earth-centred X of a prepared point on the plan's surface (query.h). */
static void gq_xyz(const geod_plan *pl, const geod_point *p, double *x) {
  if (pl->method == GEOD_HAVERSINE) {
    x[0] = pl->radius_m * p->sbet;
    x[1] = pl->radius_m * p->cbet;
    x[2] = pl->radius_m * p->dn;
  } else {
    double sl, cl;
    geod__sincosd(p->lon, &sl, &cl);
    x[0] = pl->ell.a * p->cbet * cl;
    x[1] = pl->ell.a * p->cbet * sl;
    x[2] = pl->ell.b * p->sbet;
  }
}

typedef struct gq_key {
  uint64_t code;
  int64_t idx;
} gq_key;

/* Sort keys by code, stably (equal codes keep increasing idx): LSD radix,
 * 8 bits a pass, passes where every key has the same byte skipped. *k may
 * be swapped for the scratch buffer. -1 when out of memory. */
static int gq_radix_sort(gq_key **k, int64_t n) {
  gq_key *a = *k, *b = (gq_key *)malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
  if (!b) return -1;
  for (int sh = 0; sh < 64; sh += 8) {
    int64_t cnt[257];
    memset(cnt, 0, sizeof cnt);
    for (int64_t i = 0; i < n; i++) cnt[((a[i].code >> sh) & 255) + 1]++;
    int one = 0;
    for (int v = 1; v <= 256; v++) one |= cnt[v] == n;
    if (one || n == 0) continue;
    for (int v = 0; v < 256; v++) cnt[v + 1] += cnt[v];
    for (int64_t i = 0; i < n; i++) b[cnt[(a[i].code >> sh) & 255]++] = a[i];
    gq_key *t = a;
    a = b;
    b = t;
  }
  free(b);
  *k = a;
  return 0;
}

void gq_side_free(gq_side *s) {
  free(s->x);
  free(s->p);
  free(s->idx);
  free(s->code);
  memset(s, 0, sizeof *s);
}

int gq_side_build(const geod_plan *pl, const geod_point *pts, int64_t n,
                         gq_side *s, terr *e) {
  double R = pl->method == GEOD_HAVERSINE
                 ? pl->radius_m
                 : (pl->ell.a > pl->ell.b ? pl->ell.a : pl->ell.b);
  R *= 1.001;
  size_t nn = n > 0 ? (size_t)n : 1;
  gq_key *k = (gq_key *)malloc(nn * sizeof *k);
  double *xs = (double *)malloc(nn * 3 * sizeof(double));
  s->n = n;
  s->x = (double *)malloc(nn * 3 * sizeof(double));
  s->p = (geod_point *)malloc(nn * sizeof(geod_point));
  s->idx = (long long *)malloc(nn * sizeof(long long));
  s->code = (uint64_t *)malloc(nn * sizeof(uint64_t));
  if (!k || !xs || !s->x || !s->p || !s->idx || !s->code) {
    free(k);
    free(xs);
    gq_side_free(s);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  const double scale = (double)(1 << 21) / (2 * R);
  for (int64_t i = 0; i < n; i++) {
    double *x = xs + 3 * i;
    gq_xyz(pl, &pts[i], x);
    uint64_t c = 0;
    for (int a = 0; a < 3; a++) {
      double u = (x[a] + R) * scale;
      uint64_t v = u <= 0 ? 0 : u >= (1 << 21) - 1 ? (1 << 21) - 1 : (uint64_t)u;
      c |= gq_spread3(v) << a;
    }
    k[i].code = c;
    k[i].idx = i;
  }
  if (gq_radix_sort(&k, n)) {
    free(k);
    free(xs);
    gq_side_free(s);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  for (int64_t r = 0; r < n; r++) {
    int64_t i = k[r].idx;
    /* Sorted by code: the homes' binary search and the tiles rely on it. */
    T_ASSERT(r == 0 || k[r - 1].code <= k[r].code);
    T_ASSERT(i >= 0 && i < n);
    memcpy(s->x + 3 * r, xs + 3 * i, 3 * sizeof(double));
    s->p[r] = pts[i];
    s->idx[r] = i;
    s->code[r] = k[r].code;
  }
  free(k);
  free(xs);
  return 0;
}

/* The boxes of the tiles of sorted X (n points). */
double *gq_boxes(const double *x, int64_t n, int64_t *nt) {
  *nt = (n + GQ_TILE - 1) / GQ_TILE;
  double *b = (double *)malloc((size_t)(*nt > 0 ? *nt : 1) * 6 * sizeof(double));
  if (!b) return NULL;
  for (int64_t t = 0; t < *nt; t++) {
    double *o = b + 6 * t;
    for (int c = 0; c < 3; c++) o[c] = INFINITY, o[3 + c] = -INFINITY;
    int64_t e1 = (t + 1) * GQ_TILE < n ? (t + 1) * GQ_TILE : n;
    for (int64_t i = t * GQ_TILE; i < e1; i++)
      for (int c = 0; c < 3; c++) {
        double v = x[3 * i + c];
        if (v < o[c]) o[c] = v;
        if (v > o[3 + c]) o[3 + c] = v;
      }
  }
  return b;
}

void gq_homes(gq_run *r) {
  const geod_plan *pl = r->pl;
  for (int64_t s = 0; s < pl->n; s++)
    r->home[s] = pl->has_targets
                     ? (long long)(std::lower_bound(r->T.code,
                                                    r->T.code + r->T.n,
                                                    r->Q.code[s]) -
                                   r->T.code)
                     : s;
  /* A home is a place in the targets' order (m itself: after the last). */
  T_ASSERT(pl->n == 0 || (r->home[0] >= 0 && r->home[pl->n - 1] <= r->T.n));
}

/* slot and ord for chunks of r->cq sorted queries (see gq_run), in O(n). */
int gq_slots(gq_run *r, terr *e) {
  int64_t n = r->Q.n, nch = (n + r->cq - 1) / r->cq;
  size_t nn = (size_t)(n > 0 ? n : 1);
  long long *inv = (long long *)malloc(nn * 8);
  int64_t *fill = (int64_t *)calloc((size_t)(nch > 0 ? nch : 1), 8);
  r->slot = (long long *)malloc(nn * 8);
  r->ord = (long long *)malloc(nn * 8);
  if (!inv || !fill || !r->slot || !r->ord) {
    free(inv);
    free(fill);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  for (int64_t s = 0; s < n; s++) {
    T_ASSERT(r->Q.idx[s] >= 0 && r->Q.idx[s] < n); /* a permutation */
    inv[r->Q.idx[s]] = s;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t s = inv[i], c = s / r->cq, u = fill[c]++;
    T_ASSERT(u < r->cq); /* chunk c holds sorted queries [c cq, (c+1) cq) */
    r->slot[s] = u;
    r->ord[c * r->cq + u] = i;
  }
  free(inv);
  free(fill);
  return 0;
}

