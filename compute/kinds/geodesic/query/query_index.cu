/* compute/kinds/geodesic/query/query_index.cu — the host index of the CUDA
 * query engine (query.cu's design paragraph, "The index"; the devices
 * build the same one by default, query_devindex.cu, and this one serves
 * TESSEL_GEOQ_HOST_INDEX=1 and the calls whose device cannot hold the
 * build): every point
 * and target gets its Earth-centred X on the solver's surface and the 3-D
 * Morton code of X (21 bits an axis); each side is sorted by code (an LSD
 * radix sort, stable), the targets cut into tiles of GQ_TILE with their
 * bounding boxes, every query given its home (its place in the targets'
 * order), and, for knn and rowwise, each sorted query its output slot in
 * its chunk (gq_slots, for the cut gq_cut makes: chunks of several sizes,
 * each starting at a multiple of 32) so that results come back in
 * original row order.
 *
 * Plain host code (in a .cu file for the shared C++ types of
 * query_int.h); it runs on cuda_geoq's thread (gq_slots once the devices
 * are taken and the chunk size known, the rest before), and allocates only with malloc (T_ENOMEM on failure, nothing
 * left allocated by the failing call).
 *
 * In parallel on the job's CPU pool (gq_par through geoq_gpu_job.par:
 * query_gpu.c hands it to util/pool.c's pool_for, so the index takes the
 * job's threads instead of threads of its own; up to GQ_PAR_MAX shares,
 * one per GQ_PAR_MIN items at least): on an H200 host (16 cores) the index
 * of 10^7 points took 2.4-2.6 s on one thread against 1.95 s of kernels,
 * and 160-207 ms of a 10^6 kNN whose kernels take 73 ms. Every loop cuts
 * its items into T contiguous shares (share t: [n t / T, n (t+1) / T),
 * whichever thread runs it), and the radix sort stays stable (each pass:
 * per-share counts of its range, offsets by digit then share, each share
 * scattering its range in order), so the index is the same whatever the
 * share count and whichever threads run them.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "compute/kinds/geodesic/query/query_int.h"

#define GQ_PAR_MAX 32
#define GQ_PAR_MIN ((int64_t)1 << 16)

/* ---- freeing the index off the call's path -------------------------------
 * free() of a fresh GB of index (munmap of its pages) took 125-255 ms on
 * the 2-core VM for 10^7 points; a detached thread takes it instead.
 * Transparent huge pages for these buffers (madvise MADV_HUGEPAGE) were
 * tried there and dropped: 1 GiB touched in 200 ms against 790-875, but
 * also in 1.4-2.1 s when the kernel compacted memory to find the pages. */

static int gq_old_ways(void) { /* TESSEL_GEOQ_EVEN: the benchmarks' before */
  const char *v = getenv("TESSEL_GEOQ_EVEN");
  return v && *v && strcmp(v, "0") != 0;
}

typedef struct gq_frees {
  int n;
  void *p[GQ_FREE_MAX];
} gq_frees;

static void *gq_free_main(void *a) {
  gq_frees *f = (gq_frees *)a;
  for (int k = 0; k < f->n; k++) free(f->p[k]);
  free(f);
  return NULL;
}

void gq_free_later(void *const *p, int n, int64_t items) {
  gq_frees *f = items >= GQ_FREE_ASYNC ? (gq_frees *)malloc(sizeof *f) : NULL;
  pthread_attr_t at;
  pthread_t th;
  int ok = 0;
  T_ASSERT(n >= 0 && n <= GQ_FREE_MAX);
  if (f && !gq_old_ways() && pthread_attr_init(&at) == 0) {
    f->n = n;
    memcpy(f->p, p, (size_t)n * sizeof *p);
    (void)pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&th, &at, gq_free_main, f) == 0;
    (void)pthread_attr_destroy(&at);
  }
  if (ok) return;
  free(f); /* no thread: here and now */
  for (int k = 0; k < n; k++) free(p[k]);
}

typedef void (*gq_par_fn)(void *arg, int t, int64_t lo, int64_t hi);

/* A loop over n items in T shares on the job's pool: share t is
 * [n t / T, n (t+1) / T), whichever thread runs it. */
typedef struct gq_loop {
  gq_par_fn fn;
  void *arg;
  int T;
  int64_t n;
} gq_loop;

static void gq_loop_share(void *p, int64_t t) {
  const gq_loop *L = (const gq_loop *)p;
  L->fn(L->arg, (int)t, L->n * t / L->T, L->n * (t + 1) / L->T);
}

/* Shares for n items: 1 below 2 GQ_PAR_MIN, else up to the threads the
 * job's pool lends (job->par_width; none without job->par). */
static int gq_par_threads(const geoq_gpu_job *job, int64_t n) {
  int64_t t = n / GQ_PAR_MIN, w = job && job->par ? job->par_width : 1;
  if (t > w) t = w;
  if (t > GQ_PAR_MAX) t = GQ_PAR_MAX;
  return t < 1 ? 1 : (int)t;
}

/* fn(arg, t, lo, hi) for every share t of T, through job->par (the
 * pool; the calling thread in order without it). Returns when every
 * share is done. */
static void gq_par(const geoq_gpu_job *job, int T, int64_t n, gq_par_fn fn,
                   void *arg) {
  if (T < 1) T = 1;
  gq_loop L = {fn, arg, T, n};
  if (job && job->par && T > 1) {
    job->par(job->ctx, T, gq_loop_share, &L);
    return;
  }
  for (int t = 0; t < T; t++) gq_loop_share(&L, t);
}

gq_surf gq_surface(const geod_plan *pl) {
  gq_surf S;
  memset(&S, 0, sizeof S);
  S.sphere = pl->method == GEOD_HAVERSINE;
  S.a = pl->ell.a;
  S.b = pl->ell.b;
  S.radius = pl->radius_m;
  S.R = S.sphere ? pl->radius_m : (pl->ell.a > pl->ell.b ? pl->ell.a : pl->ell.b);
  S.R *= 1.001;
  S.scale = (double)(1 << 21) / (2 * S.R);
  return S;
}

typedef struct gq_key {
  uint64_t code;
  int64_t idx;
} gq_key;

/* One pass of the radix sort: T shares, share t's range of a counted
 * (count) or scattered into b at its offsets (scatter). */
typedef struct gq_sort_pass {
  const gq_key *a;
  gq_key *b;
  int sh, scatter;
  int64_t (*cnt)[256]; /* [T][256]: counts, then each thread's offsets */
} gq_sort_pass;

static void gq_sort_share(void *p, int t, int64_t lo, int64_t hi) {
  gq_sort_pass *P = (gq_sort_pass *)p;
  int64_t *c = P->cnt[t];
  if (!P->scatter) {
    memset(c, 0, 256 * sizeof *c);
    for (int64_t i = lo; i < hi; i++) c[(P->a[i].code >> P->sh) & 255]++;
  } else {
    for (int64_t i = lo; i < hi; i++) P->b[c[(P->a[i].code >> P->sh) & 255]++] = P->a[i];
  }
}

/* Sort keys by code, stably (equal codes keep increasing idx): LSD radix,
 * 8 bits a pass, passes where every key has the same byte skipped; T
 * threads (see the head of this file). *k may be swapped for the scratch
 * buffer. -1 when out of memory. */
static int gq_radix_sort(const geoq_gpu_job *job, gq_key **k, int64_t n,
                         int T) {
  gq_key *a = *k, *b = (gq_key *)malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
  int64_t(*cnt)[256] = (int64_t(*)[256])malloc((size_t)T * sizeof *cnt);
  if (!b || !cnt) {
    free(b);
    free(cnt);
    return -1;
  }
  for (int sh = 0; sh < 64 && n > 0; sh += 8) {
    gq_sort_pass P = {a, b, sh, 0, cnt};
    gq_par(job, T, n, gq_sort_share, &P);
    int one = 0;
    for (int v = 0; v < 256 && !one; v++) {
      int64_t tot = 0;
      for (int t = 0; t < T; t++) tot += cnt[t][v];
      one = tot == n;
    }
    if (one) continue; /* every key has this byte: the order stands */
    int64_t off = 0; /* digit by digit, thread by thread: stable */
    for (int v = 0; v < 256; v++)
      for (int t = 0; t < T; t++) {
        int64_t c = cnt[t][v];
        cnt[t][v] = off;
        off += c;
      }
    P.scatter = 1;
    gq_par(job, T, n, gq_sort_share, &P);
    gq_key *x = a;
    a = b;
    b = x;
  }
  gq_free_later((void *const *)&b, 1, n);
  free(cnt);
  *k = a;
  return 0;
}

void gq_side_free(gq_side *s) {
  void *p[4] = {s->x, s->p, s->idx, s->code};
  gq_free_later(p, 4, s->n);
  memset(s, 0, sizeof *s);
}

/* A side being built: the codes of points [lo, hi), then their gather
 * into sorted order. */
typedef struct gq_build {
  gq_surf S;
  const geod_point *pts;
  int64_t n;
  double *xs;
  gq_key *k;
  gq_side *s;
} gq_build;

static void gq_codes_share(void *p, int t, int64_t lo, int64_t hi) {
  const gq_build *B = (const gq_build *)p;
  (void)t;
  for (int64_t i = lo; i < hi; i++) {
    double *x = B->xs + 3 * i;
    gq_xyz(&B->S, &B->pts[i], x);
    B->k[i].code = gq_code(&B->S, x);
    B->k[i].idx = i;
  }
}

static void gq_gather_share(void *p, int t, int64_t lo, int64_t hi) {
  const gq_build *B = (const gq_build *)p;
  gq_side *s = B->s;
  (void)t;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = B->k[r].idx;
    /* Sorted by code: the homes' binary search and the tiles rely on it. */
    T_ASSERT(r == 0 || B->k[r - 1].code <= B->k[r].code);
    T_ASSERT(i >= 0 && i < B->n);
    memcpy(s->x + 3 * r, B->xs + 3 * i, 3 * sizeof(double));
    s->p[r] = B->pts[i];
    s->idx[r] = i;
    s->code[r] = B->k[r].code;
  }
}

int gq_side_build(const geoq_gpu_job *job, const geod_plan *pl,
                  const geod_point *pts, int64_t n, gq_side *s, terr *e) {
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
  int T = gq_par_threads(job, n);
  gq_build B = {gq_surface(pl), pts, n, xs, k, s};
  double t0 = t_now_ms();
  gq_par(job, T, n, gq_codes_share, &B);
  s->t_codes = t_now_ms() - t0;
  if (gq_radix_sort(job, &k, n, T)) {
    free(k);
    free(xs);
    gq_side_free(s);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  B.k = k;
  s->t_sort = t_now_ms() - t0 - s->t_codes;
  gq_par(job, T, n, gq_gather_share, &B);
  s->t_gather = t_now_ms() - t0 - s->t_codes - s->t_sort;
  {
    void *p[2] = {k, xs};
    gq_free_later(p, 2, n);
  }
  return 0;
}

typedef struct gq_box_job {
  const double *x;
  int64_t n;
  double *b;
} gq_box_job;

static void gq_box_share(void *p, int th, int64_t lo, int64_t hi) {
  const gq_box_job *J = (const gq_box_job *)p;
  (void)th;
  for (int64_t t = lo; t < hi; t++) {
    double *o = J->b + 6 * t;
    for (int c = 0; c < 3; c++) o[c] = INFINITY, o[3 + c] = -INFINITY;
    int64_t e1 = (t + 1) * GQ_TILE < J->n ? (t + 1) * GQ_TILE : J->n;
    for (int64_t i = t * GQ_TILE; i < e1; i++)
      for (int c = 0; c < 3; c++) {
        double v = J->x[3 * i + c];
        if (v < o[c]) o[c] = v;
        if (v > o[3 + c]) o[3 + c] = v;
      }
  }
}

/* The boxes of the tiles of sorted X (n points). */
double *gq_boxes(const geoq_gpu_job *job, const double *x, int64_t n,
                 int64_t *nt) {
  *nt = (n + GQ_TILE - 1) / GQ_TILE;
  double *b = (double *)malloc((size_t)(*nt > 0 ? *nt : 1) * 6 * sizeof(double));
  if (!b) return NULL;
  gq_box_job J = {x, n, b};
  gq_par(job, gq_par_threads(job, n), *nt, gq_box_share, &J);
  return b;
}

static void gq_home_share(void *p, int t, int64_t lo, int64_t hi) {
  gq_run *r = (gq_run *)p;
  (void)t;
  for (int64_t s = lo; s < hi; s++)
    r->home[s] = r->pl->has_targets
                     ? (long long)(std::lower_bound(r->T.code,
                                                    r->T.code + r->T.n,
                                                    r->Q.code[s]) -
                                   r->T.code)
                     : s;
}

void gq_homes(gq_run *r) {
  const geod_plan *pl = r->pl;
  gq_par(r->job, gq_par_threads(r->job, pl->n), pl->n, gq_home_share, r);
  /* A home is a place in the targets' order (m itself: after the last). */
  T_ASSERT(pl->n == 0 || (r->home[0] >= 0 && r->home[pl->n - 1] <= r->T.n));
}

int gq_host_index(gq_run *r, terr *e) {
  int rc = 0;
  const geod_plan *pl = r->pl;
  const geoq_gpu_job *job = r->job;
  int64_t n = pl->n;
  double t_ix = t_now_ms();
  T_TRY(gq_side_build(job, pl, pl->q, pl->m, &r->T, e));
  if (pl->has_targets) {
    T_TRY(gq_side_build(job, pl, pl->p, n, &r->Q, e));
  } else {
    r->Q = r->T;
  }
  r->tr_sides = t_now_ms() - t_ix;
  r->tr_sort3[0] = r->T.t_codes + (pl->has_targets ? r->Q.t_codes : 0);
  r->tr_sort3[1] = r->T.t_sort + (pl->has_targets ? r->Q.t_sort : 0);
  r->tr_sort3[2] = r->T.t_gather + (pl->has_targets ? r->Q.t_gather : 0);
  r->home = (long long *)malloc((size_t)(n > 0 ? n : 1) * 8);
  r->box = gq_boxes(job, r->T.x, r->T.n, &r->nt);
  if (!r->home || !r->box)
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  r->tr_boxes = t_now_ms() - t_ix - r->tr_sides;
  gq_homes(r);
  r->tr_homes = t_now_ms() - t_ix - r->tr_sides - r->tr_boxes;
  if (job && job->t_index) *job->t_index += t_now_ms() - t_ix;
fail:
  return rc;
}

/* gq_slots' passes over original rows [lo, hi) (share t): inv, then
 * each chunk's count of them (fill[t][c]), then, from each share's
 * offsets, the slots — rows in increasing order within a chunk, as one
 * share would give them. grp: the chunk of each 32 sorted queries (every
 * chunk starts at a multiple of 32: gq_cut). */
typedef struct gq_slot_job {
  gq_run *r;
  long long *inv;
  int64_t *fill; /* [T][nch] */
  int64_t nch;
  const gq_chunk *ch;
  const int32_t *grp;
  int pass;
} gq_slot_job;

static void gq_slot_share(void *p, int t, int64_t lo, int64_t hi) {
  gq_slot_job *J = (gq_slot_job *)p;
  gq_run *r = J->r;
  int64_t *f = J->fill + (size_t)t * (size_t)J->nch;
  if (J->pass == 0) {
    for (int64_t s = lo; s < hi; s++) {
      T_ASSERT(r->Q.idx[s] >= 0 && r->Q.idx[s] < r->Q.n); /* a permutation */
      J->inv[r->Q.idx[s]] = s;
    }
  } else if (J->pass == 1) {
    memset(f, 0, (size_t)J->nch * sizeof *f);
    for (int64_t i = lo; i < hi; i++) f[J->grp[J->inv[i] >> 5]]++;
  } else {
    for (int64_t i = lo; i < hi; i++) {
      int64_t s = J->inv[i], c = J->grp[s >> 5], u = f[c]++;
      const gq_chunk *k = &J->ch[c];
      T_ASSERT(s >= k->s0 && s < k->s1 && u < k->s1 - k->s0); /* in chunk c */
      r->slot[s] = u;
      r->ord[k->s0 + u] = i;
    }
  }
}

/* slot and ord for the plain cut of the sorted queries (gq_cut, see
 * gq_run), in O(n). */
int gq_slots(gq_run *r, terr *e) {
  int rc = 0;
  int64_t n = r->Q.n, nch = 0, ng = (n + 31) / 32;
  int T = gq_par_threads(r->job, n);
  size_t nn = (size_t)(n > 0 ? n : 1);
  gq_chunk *ch = NULL;
  rc = gq_cut(r, 0, &ch, &nch, e);
  if (rc) return rc;
  long long *inv = (long long *)malloc(nn * 8);
  int64_t *fill = (int64_t *)malloc((size_t)T * (size_t)(nch > 0 ? nch : 1) * 8);
  int32_t *grp = (int32_t *)malloc((size_t)(ng > 0 ? ng : 1) * sizeof *grp);
  r->slot = (long long *)malloc(nn * 8);
  r->ord = (long long *)malloc(nn * 8);
  if (!inv || !fill || !grp || !r->slot || !r->ord) {
    free(inv);
    free(fill);
    free(grp);
    free(ch);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the query index");
  }
  for (int64_t c = 0; c < nch; c++)
    for (int64_t g = ch[c].s0 / 32; g < ng && g * 32 < ch[c].s1; g++)
      grp[g] = (int32_t)c;
  /* what the pass will cut again: gq_run_pass checks it is this cut */
  r->slot_nch = nch;
  r->slot_last = nch > 0 ? ch[nch - 1].s0 : 0;
  gq_slot_job J = {r, inv, fill, nch, ch, grp, 0};
  gq_par(r->job, T, n, gq_slot_share, &J);
  J.pass = 1;
  gq_par(r->job, T, n, gq_slot_share, &J);
  for (int64_t c = 0; c < nch; c++) /* share t starts after shares < t */
    for (int64_t t = 0, off = 0; t < T; t++) {
      int64_t k = fill[t * nch + c];
      fill[t * nch + c] = off;
      off += k;
    }
  J.pass = 2;
  gq_par(r->job, T, n, gq_slot_share, &J);
  gq_free_later((void *const *)&inv, 1, n);
  free(fill);
  free(grp);
  free(ch);
  return 0;
}

/* ---- the cut of the sorted queries into chunks --------------------------
 * Here, beside gq_slots, which lays the slots out for it: the pass
 * (query_chunks.cu) and the device index (query_devindex.cu) cut with it
 * too. */

/* The queries of the next plain chunk when R sorted queries are left.
 * The full cut (r->cq) while each lane of every device still has one
 * ahead; then half a device's share of what is left (guided): the last
 * chunks shrink, down to cq / GQ_TAIL_DIV or GQ_TAIL_MIN, so that what
 * runs after a device's last kernel (that chunk's rows down and scattered, on the one
 * host thread, device after device) is short, and the devices end
 * together to within one small chunk's kernels. r->even (the benchmarks'
 * TESSEL_GEOQ_EVEN): every chunk cq, as before. A multiple of 32. */
static int64_t gq_plain_size(const gq_run *r, int64_t R) {
  if (r->even) return r->cq;
  int64_t lanes = 2 * (int64_t)(r->nreal > 0 ? r->nreal : 1);
  int64_t lo = (r->cq / GQ_TAIL_DIV + 31) / 32 * 32;
  int64_t g = ((R + lanes - 1) / lanes + 31) / 32 * 32;
  if (lo < GQ_TAIL_MIN) lo = GQ_TAIL_MIN; /* (cq below it: no shrinking) */
  if (g < lo) g = lo;
  return g < r->cq ? g : r->cq;
}

/* Cut sorted queries [0, n) into chunks of at most cq (plain: shrinking
 * at the end, gq_plain_size; radius fill: cq, and at most pcap pairs).
 * Every plain chunk starts at a multiple of 32 (gq_slots relies on it). The
 * same r gives the same cut (gq_slots cuts first, the pass again). *out
 * freed by the caller. */
int gq_cut(gq_run *r, int fill, gq_chunk **out, int64_t *nch,
                  terr *e) {
  int64_t n = r->Q.n, cap = n / r->cq + 2, cnt = 0;
  gq_chunk *c = (gq_chunk *)malloc((size_t)cap * sizeof *c);
  size_t alloc = (size_t)cap;
  if (!c) return terr_set(e, T_ENOMEM, "", -1, "no memory for the chunks");
  for (int64_t s = 0; s < n;) {
    int64_t g = fill ? r->cq : gq_plain_size(r, n - s);
    int64_t s1 = s + g < n ? s + g : n;
    if (fill) {
      int64_t lim = r->coff[s] + r->pcap;
      if (r->coff[s + 1] > lim) {
        free(c);
        return terr_set(e, T_ENOMEM, "", -1,
                        "CUDA: one point has %lld pairs within r, more than "
                        "the device memory budget holds (%lld)",
                        (long long)(r->coff[s + 1] - r->coff[s]),
                        (long long)r->pcap);
      }
      int64_t lo = s + 1, hi = s1; /* the largest s1 with coff[s1] <= lim */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (r->coff[mid] <= lim) lo = mid; else hi = mid - 1;
      }
      s1 = lo;
    }
    if ((size_t)cnt == alloc) {
      gq_chunk *g = (gq_chunk *)realloc(c, alloc * 2 * sizeof *c);
      if (!g) {
        free(c);
        return terr_set(e, T_ENOMEM, "", -1, "no memory for the chunks");
      }
      c = g;
      alloc *= 2;
    }
    /* Each chunk moves on and fits the buffers (cq queries, pcap pairs). */
    T_ASSERT(s1 > s && s1 - s <= r->cq && (fill || s % 32 == 0));
    T_ASSERT(!fill || r->coff[s1] - r->coff[s] <= r->pcap);
    c[cnt].s0 = s;
    c[cnt].s1 = s1;
    c[cnt].p0 = fill ? r->coff[s] : 0;
    c[cnt].p1 = fill ? r->coff[s1] : 0;
    cnt++;
    s = s1;
  }
  *out = c;
  *nch = cnt;
  return 0;
}
