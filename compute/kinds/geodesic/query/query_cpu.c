/* compute/kinds/geodesic/query/query_cpu.c — the CPU engine of the geodesic queries (knn,
 * radius, rowwise; compute/kinds/geodesic/query/query.h says what each computes), serial
 * or over the pool, without ever building the n x m matrix.
 *
 * The index: a k-d tree over the candidates' Earth-centred Cartesian
 * coordinates — the targets q, or the points p themselves without targets —
 * on the surface the method measures on: the ellipsoid (a, f) for karney
 * and vincenty, X = (N cos(lat) cos(lon), N cos(lat) sin(lon), N (1 - e2)
 * sin(lat)) with N = a / sqrt(1 - e2 sin^2(lat)), e2 = f (2 - f) (negative
 * for a prolate ellipsoid), or the sphere of radius_m for haversine. The
 * tree's items are the candidates' distinct locations (the same bytes of
 * the prepared geod_point, found with a hash table in O(m)), each with
 * its candidates in increasing j: a pile of copies is one item, so it
 * costs one pair per side of i instead of one per copy (without that, the
 * chord bound is 0 inside a pile and 40,000 copies with k = 10 evaluated
 * every pair). The tree is implicit: node k (1-based, children 2k and
 * 2k + 1) covers items [lo, hi) of one array in tree order and splits it
 * at the middle by count along the widest axis of its bounding box (a
 * quickselect on the key (coordinate, smallest index), which is distinct for
 * every item), so the depth is log2(ng / GEOQ_LEAF) whatever the data.
 * Building is O(m + ng log ng) expected; each node keeps its box.
 *
 * A location's candidates: with targets d(i, j) is the solver on (p[i],
 * q[j]), the same inputs for every j of the location; without targets
 * those j < i are (p[j], p[i]) and those j > i are (p[i], p[j]) — two
 * sides, i itself left out. One evaluation per side gives every one of
 * them its value bit for bit (a deterministic function of the same
 * bytes). knn offers a side's candidates in increasing j and stops at the
 * first refused: every later one has the same d and a larger j, so it
 * would be refused too (ties by the smaller index hold); the range search
 * takes the whole side or none of it.
 *
 * Pruning (the argument is in compute/kinds/geodesic/query/query.h): the chord |X_i - X_j|
 * never exceeds the geodesic d(i, j) in metres, and the distance from X_i
 * to a node's box never exceeds the chord to any point in it. A box, or a
 * candidate, is discarded only when its chord exceeds the bound B (output
 * units) widened to B * unit * (1 + GEOQ_PRUNE_REL) + GEOQ_PRUNE_ABS_M
 * metres, so a candidate that could have d <= B (after rounding to the
 * dtype) is always evaluated. Every survivor's d(i, j) is the matrix
 * element itself: geod_row_compute (compute/kinds/geodesic/cpu.c, the function the
 * matrix tiles call) on (p[i], q[j]), or on (p[min(i, j)], p[max(i, j)])
 * without targets, then rounded to float32 when the dtype is.
 *
 *   knn      depth-first, nearer child first; the k best (d, j) so far in a
 *            heap (util/heap.h) whose worst sets B once it holds k (no bound
 *            while that worst is NaN: NaN ranks last). Points that are not
 *            copies but lie within GEOQ_PRUNE_ABS_M (1 mm) of each other
 *            are not pruned among themselves: thousands of distinct points
 *            inside one millimetre still cost a pair each.
 *   radius   range search with B = r; each row's hits sorted by j, each
 *            tile's rows in order into the tile's buffer, the buffers
 *            concatenated in tile order: (i, j) order. A shared count stops
 *            every tile once it passes max_pairs. Memory: the pairs found.
 *   rowwise  min/argmin: knn with k = 1 (B starts at `within` when set);
 *            the other ops with `within`: the range search; without it:
 *            every candidate in increasing j (no bound prunes a max or a
 *            sum), through the matrix's own row loop where the row is
 *            contiguous. Sums add in increasing j in double.
 *
 * Tiles are blocks of consecutive rows i (fewer rows when each row visits
 * every candidate). Threads: geoq_cpu_run runs on the job's worker, which
 * builds the tree and allocates the parts with ctx->result_alloc (knn,
 * rowwise before the loop; radius after it, once the count is known);
 * pool_for hands tiles to any worker, each with its slot's scratch (heap,
 * hit buffer, Vincenty's non-convergence count, summed at the end). Tiles
 * write disjoint rows of the parts, or their own buffer, so nothing is
 * locked; the pair count is an atomic. Progress is one per tile; a stop
 * request is honoured between tiles.
 *
 * A band (plan.h: rows [row0, row1) of a plan without targets, a tile of a
 * split job) runs those rows only and writes row i at i - row0; the tree
 * holds every candidate as for the whole run, so each row comes out as the
 * whole run has it. A radius query has no band (its parts are not rows).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/geodesic/kind.h"
#include "util/heap.h"
#include "util/pool.h"
#include "util/vec.h"
#include "util/util.h"

#define GEOQ_LEAF 16       /* items in a leaf, at most */
#define GEOQ_TILE_ROWS 64  /* rows per tile for the pruned searches */
#define GEOQ_ROW_CHUNK 512 /* pairs per geod_row_compute call, full rows */

/* ---- the k-d tree ------------------------------------------------------ */

typedef struct kd_item {
  double x[3];
  int64_t j; /* the location's smallest candidate index */
  int64_t g; /* -1: j is its only candidate; else js[gs[g] .. gs[g + 1]) */
} kd_item;

typedef struct kd_box {
  double lo[3], hi[3];
} kd_box;

typedef struct kdtree {
  int64_t m;     /* candidates */
  int64_t ng;    /* distinct locations: the items of the tree */
  kd_item *it;   /* ng, tree order */
  kd_box *box;   /* node k at box[k], k >= 1 */
  int64_t nbox;
  int64_t *gs;   /* ng + 1: where each location's candidates start in js */
  int64_t *js;   /* m: the candidates, by location, each in increasing j */
} kdtree;

/* Earth-centred coordinates of a prepared point (its lat, lon degrees). */
static void xyz_of(const geod_plan *pl, const geod_point *p, double x[3]) {
  double sphi, cphi, slam, clam;
  geod__sincosd(p->lat, &sphi, &cphi);
  geod__sincosd(p->lon, &slam, &clam);
  if (pl->method == GEOD_HAVERSINE) {
    double r = pl->radius_m;
    x[0] = r * cphi * clam;
    x[1] = r * cphi * slam;
    x[2] = r * sphi;
    return;
  }
  double e2 = pl->ell.f * (2 - pl->ell.f);
  double nu = pl->ell.a / sqrt(1 - e2 * sphi * sphi);
  x[0] = nu * cphi * clam;
  x[1] = nu * cphi * slam;
  x[2] = nu * (1 - e2) * sphi;
}

static int item_less(const kd_item *a, const kd_item *b, int ax) {
  return a->x[ax] < b->x[ax] || (a->x[ax] == b->x[ax] && a->j < b->j);
}

static void item_swap(kd_item *a, kd_item *b) {
  kd_item t = *a;
  *a = *b;
  *b = t;
}

/* Rearrange it[lo, hi) so that it[k] is the item of rank k - lo along ax,
 * smaller ones before it, larger after (quickselect, median of three; the
 * keys are distinct, so no run of equal values can stall it). */
static void kd_select(kd_item *it, int64_t lo, int64_t hi, int64_t k, int ax) {
  while (hi - lo > 2) {
    int64_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (item_less(&it[mid], &it[lo], ax)) item_swap(&it[mid], &it[lo]);
    if (item_less(&it[last], &it[lo], ax)) item_swap(&it[last], &it[lo]);
    if (item_less(&it[last], &it[mid], ax)) item_swap(&it[last], &it[mid]);
    item_swap(&it[mid], &it[last - 1]); /* pivot at last - 1 */
    kd_item piv = it[last - 1];
    int64_t a = lo, b = last - 1;
    for (;;) {
      while (item_less(&it[++a], &piv, ax)) {}
      while (item_less(&piv, &it[--b], ax)) {}
      if (a >= b) break;
      item_swap(&it[a], &it[b]);
    }
    item_swap(&it[a], &it[last - 1]); /* pivot to its rank a */
    if (k == a) return;
    if (k < a)
      hi = a;
    else
      lo = a + 1;
  }
  if (hi - lo == 2 && item_less(&it[lo + 1], &it[lo], ax))
    item_swap(&it[lo], &it[lo + 1]);
}

static void kd_build_node(kdtree *t, int64_t node, int64_t lo, int64_t hi) {
  kd_box *b = &t->box[node];
  for (int a = 0; a < 3; a++) b->lo[a] = INFINITY, b->hi[a] = -INFINITY;
  for (int64_t s = lo; s < hi; s++)
    for (int a = 0; a < 3; a++) {
      if (t->it[s].x[a] < b->lo[a]) b->lo[a] = t->it[s].x[a];
      if (t->it[s].x[a] > b->hi[a]) b->hi[a] = t->it[s].x[a];
    }
  if (hi - lo <= GEOQ_LEAF) return;
  int ax = 0;
  for (int a = 1; a < 3; a++)
    if (b->hi[a] - b->lo[a] > b->hi[ax] - b->lo[ax]) ax = a;
  int64_t mid = lo + (hi - lo) / 2;
  kd_select(t->it, lo, hi, mid, ax);
  kd_build_node(t, 2 * node, lo, mid);
  kd_build_node(t, 2 * node + 1, mid, hi);
}

static void kd_free(kdtree *t) {
  free(t->it);
  free(t->box);
  free(t->gs);
  free(t->js);
  memset(t, 0, sizeof *t);
}

/* The prepared point is five doubles, all derived from the input: two
 * candidates with the same bytes give every solver the same inputs. */
_Static_assert(sizeof(geod_point) == 5 * sizeof(double),
               "geod_point is compared and hashed as five doubles");

static uint64_t pt_hash(const geod_point *p) {
  uint64_t w[5], h = 0x9E3779B97F4A7C15ULL;
  memcpy(w, p, sizeof w);
  for (int c = 0; c < 5; c++) {
    h = (h ^ w[c]) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  return h;
}

/* Group the m candidates q by location (the same bytes of geod_point: -0
 * and 0 are two locations, which only costs a pair more): gs, js and ng of
 * t, each group's candidates in increasing j, groups numbered by their
 * smallest j. An open-addressing table of the groups' first candidates;
 * O(m) expected. */
static int kd_group(const geod_point *q, kdtree *t) {
  int64_t m = t->m;
  size_t cap = 16;
  while (cap < 2 * (size_t)m) cap <<= 1;
  int64_t *tab = malloc(cap * sizeof *tab);
  int64_t *gid = malloc((size_t)(m > 0 ? m : 1) * sizeof *gid);
  t->gs = calloc((size_t)m + 2, sizeof *t->gs);
  t->js = malloc((size_t)(m > 0 ? m : 1) * sizeof *t->js);
  if (!tab || !gid || !t->gs || !t->js) {
    free(tab);
    free(gid);
    return -1;
  }
  for (size_t c = 0; c < cap; c++) tab[c] = -1;
  t->ng = 0;
  for (int64_t j = 0; j < m; j++) {
    size_t h = (size_t)pt_hash(&q[j]) & (cap - 1);
    for (;; h = (h + 1) & (cap - 1)) {
      if (tab[h] < 0) {
        tab[h] = j;
        gid[j] = t->ng++;
        break;
      }
      if (memcmp(&q[tab[h]], &q[j], sizeof q[j]) == 0) {
        gid[j] = gid[tab[h]];
        break;
      }
    }
  }
  for (int64_t j = 0; j < m; j++) t->gs[gid[j] + 1]++;
  for (int64_t g = 0; g < t->ng; g++) t->gs[g + 1] += t->gs[g];
  for (int64_t g = 0; g < t->ng; g++) tab[g] = t->gs[g]; /* cursors */
  for (int64_t j = 0; j < m; j++) t->js[tab[gid[j]]++] = j;
  free(tab);
  free(gid);
  return 0;
}

static int kd_build(const geod_plan *pl, kdtree *t, terr *e) {
  const geod_point *q = pl->has_targets ? pl->q : pl->p;
  memset(t, 0, sizeof *t);
  t->m = pl->has_targets ? pl->m : pl->n;
  if (kd_group(q, t)) {
    kd_free(t);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the index of %lld "
                    "points", (long long)t->m);
  }
  /* Leaves sit at the depth D where ng / 2^D first fits a leaf. */
  int64_t span = t->ng, nodes = 1;
  while (span > GEOQ_LEAF) span = (span + 1) / 2, nodes *= 2;
  t->nbox = 2 * nodes;
  t->it = malloc((size_t)(t->ng > 0 ? t->ng : 1) * sizeof *t->it);
  t->box = malloc((size_t)t->nbox * sizeof *t->box);
  if (!t->it || !t->box) {
    kd_free(t);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the index of %lld "
                    "points", (long long)t->m);
  }
  for (int64_t g = 0; g < t->ng; g++) { /* singletons skip gs and js */
    t->it[g].j = t->js[t->gs[g]];
    t->it[g].g = t->gs[g + 1] - t->gs[g] > 1 ? g : -1;
    xyz_of(pl, &q[t->it[g].j], t->it[g].x);
  }
  if (t->ng > 0) kd_build_node(t, 1, 0, t->ng);
  return 0;
}

static double box_d2(const kd_box *b, const double x[3]) {
  double s = 0;
  for (int a = 0; a < 3; a++) {
    double d = b->lo[a] - x[a];
    if (d < 0) d = x[a] - b->hi[a];
    if (d > 0) s += d * d;
  }
  return s;
}

static double pt_d2(const double y[3], const double x[3]) {
  double d0 = y[0] - x[0], d1 = y[1] - x[1], d2 = y[2] - x[2];
  return d0 * d0 + d1 * d1 + d2 * d2;
}

/* ---- the run's state ----------------------------------------------------- */

typedef struct geoq_hit {
  double d;
  int64_t j;
} geoq_hit;

typedef struct geoq_pair {
  int64_t i, j;
  double d;
} geoq_pair;

typedef TVEC(geoq_pair) pair_vec;

/* Per pool slot. */
typedef struct geoq_slot {
  theap heap;        /* knn: pointers into ent, worst on top */
  geoq_hit *ent;     /* k entries */
  TVEC(geoq_hit) hits; /* range search: one row's hits */
  long long nonconv;
  int err;           /* T_ENOMEM */
} geoq_slot;

typedef struct geoq_run {
  const geod_plan *pl;
  const geoq *q;
  job_ctx *ctx;
  kdtree t;
  int64_t r0, r1;    /* the rows computed (a band: plan.h), out row i - r0 */
  int64_t rows;      /* per tile */
  int64_t ntiles;
  int64_t k;         /* knn (k_eff), or 1 for rowwise min/argmin */
  geoq_slot *slot;
  tarray *a0, *a1;   /* knn: distance, index; rowwise: the value */
  pair_vec *tile;    /* radius: one buffer per tile */
  _Atomic int64_t npairs;
  atomic_int over;   /* radius: more than max_pairs found */
} geoq_run;

/* One search from point i: its coordinates, the bound (chord^2 in m^2). */
typedef struct geoq_search {
  geoq_run *r;
  geoq_slot *s;
  int64_t i;
  double x[3];
  double prune2;
  double limit;      /* range: keep d <= limit (output units) */
  int skip_le_i;     /* radius without targets: j > i only */
} geoq_search;

/* The widened bound of the argument in query.h, squared (metres^2). */
static double prune2_of(const geod_plan *pl, double b) {
  if (isnan(b) || isinf(b)) return INFINITY;
  double t = b * pl->unit * (1 + GEOQ_PRUNE_REL) + GEOQ_PRUNE_ABS_M;
  return t * t;
}

/* d(i, j): the matrix element, rounded to the dtype. */
static double pair_d(const geod_plan *pl, int64_t i, int64_t j,
                     long long *nc) {
  double d;
  if (pl->has_targets)
    geod_row_compute(pl, &pl->p[i], &pl->q[j], 1, &d, nc);
  else if (i < j)
    geod_row_compute(pl, &pl->p[i], &pl->p[j], 1, &d, nc);
  else
    geod_row_compute(pl, &pl->p[j], &pl->p[i], 1, &d, nc);
  return pl->dtype == T_F32 ? (double)(float)d : d;
}

/* (d, j) order, NaN after every number. */
static int hit_before(const geoq_hit *a, const geoq_hit *b) {
  int an = isnan(a->d), bn = isnan(b->d);
  if (an != bn) return bn;
  if (!an && a->d != b->d) return a->d < b->d;
  return a->j < b->j;
}

/* theap order: the worst hit on top. */
static int hit_worse(const void *a, const void *b) {
  return hit_before(b, a);
}

/* ---- knn ----------------------------------------------------------------- */

/* Offer h to the k best; 0 when the heap is full and h does not beat its
 * worst (then no (d, j') with j' > j can either). */
static int knn_take(geoq_search *s, geoq_hit h) {
  geoq_run *r = s->r;
  geoq_slot *sl = s->s;
  if ((int64_t)sl->heap.n < r->k) {
    geoq_hit *slot = &sl->ent[sl->heap.n];
    *slot = h;
    if (theap_push(&sl->heap, slot)) { /* cannot happen: reserved */
      sl->err = T_ENOMEM;
      return 0;
    }
  } else {
    geoq_hit *top = theap_top(&sl->heap);
    if (!hit_before(&h, top)) return 0;
    theap_pop(&sl->heap);
    *top = h;
    theap_push(&sl->heap, top); /* room: one was just taken out */
  }
  if ((int64_t)sl->heap.n == r->k) {
    double p2 = prune2_of(r->pl, ((geoq_hit *)theap_top(&sl->heap))->d);
    if (p2 < s->prune2) s->prune2 = p2;
  }
  return 1;
}

/* Candidates js[a .. b) of one location, increasing j, all on one side of
 * i: the same solver inputs, so one d(i, j) is every one's value, bit for
 * bit; offered in increasing j until the first one refused. */
static void knn_side(geoq_search *s, const int64_t *a, const int64_t *b) {
  if (a == b) return;
  double d = pair_d(s->r->pl, s->i, *a, &s->s->nonconv);
  for (; a < b; a++)
    if (!knn_take(s, (geoq_hit){d, *a})) return;
}

/* The first of js[a .. b) (increasing) that is >= i. */
static const int64_t *split_at(const int64_t *a, const int64_t *b,
                               int64_t i) {
  while (a < b) {
    const int64_t *mid = a + (b - a) / 2;
    if (*mid < i)
      a = mid + 1;
    else
      b = mid;
  }
  return a;
}

/* One location's candidates: without targets those before i (d from
 * p[j], p[i]) and those after it (d from p[i], p[j]) are two sides; i
 * itself is never its own candidate. */
static void knn_group(geoq_search *s, int64_t g) {
  const kdtree *t = &s->r->t;
  const int64_t *a = t->js + t->gs[g], *b = t->js + t->gs[g + 1];
  if (s->r->pl->has_targets) {
    knn_side(s, a, b);
    return;
  }
  const int64_t *mid = split_at(a, b, s->i);
  knn_side(s, a, mid);
  if (mid < b && *mid == s->i) mid++;
  knn_side(s, mid, b);
}

static void knn_node(geoq_search *s, int64_t node, int64_t lo, int64_t hi) {
  const kdtree *t = &s->r->t;
  if (hi - lo <= GEOQ_LEAF) {
    for (int64_t a = lo; a < hi; a++) {
      const kd_item *it = &t->it[a];
      if (pt_d2(it->x, s->x) > s->prune2) continue;
      if (it->g >= 0)
        knn_group(s, it->g);
      else if (s->r->pl->has_targets || it->j != s->i)
        knn_side(s, &it->j, &it->j + 1);
    }
    return;
  }
  int64_t mid = lo + (hi - lo) / 2;
  double dl = box_d2(&t->box[2 * node], s->x);
  double dr = box_d2(&t->box[2 * node + 1], s->x);
  if (dl <= dr) {
    if (dl <= s->prune2) knn_node(s, 2 * node, lo, mid);
    if (dr <= s->prune2) knn_node(s, 2 * node + 1, mid, hi);
  } else {
    if (dr <= s->prune2) knn_node(s, 2 * node + 1, mid, hi);
    if (dl <= s->prune2) knn_node(s, 2 * node, lo, mid);
  }
}

/* The k best of row i, best first, into best[0 .. heap size); returns the
 * count. cap: only d <= cap can matter (INFINITY: none). */
static int64_t knn_row(geoq_run *r, geoq_slot *sl, int64_t i, double cap,
                       geoq_hit *best) {
  geoq_search s = {.r = r, .s = sl, .i = i, .prune2 = prune2_of(r->pl, cap)};
  xyz_of(r->pl, &r->pl->p[i], s.x);
  if (r->t.ng > 0 && box_d2(&r->t.box[1], s.x) <= s.prune2)
    knn_node(&s, 1, 0, r->t.ng);
  int64_t cnt = (int64_t)sl->heap.n;
  for (int64_t c = cnt - 1; c >= 0; c--)
    best[c] = *(geoq_hit *)theap_pop(&sl->heap);
  return cnt;
}

/* ---- range --------------------------------------------------------------- */

/* Candidates js[a .. b) of one location on one side of i (knn_side):
 * one d(i, j), every one of them within or none. */
static void range_side(geoq_search *s, const int64_t *a, const int64_t *b) {
  if (a == b) return;
  geoq_slot *sl = s->s;
  double d = pair_d(s->r->pl, s->i, *a, &sl->nonconv);
  if (!(d <= s->limit)) return; /* NaN is never within */
  if (tvec_reserve(&sl->hits, sl->hits.n + (size_t)(b - a))) {
    sl->err = T_ENOMEM;
    return;
  }
  for (; a < b; a++) sl->hits.v[sl->hits.n++] = (geoq_hit){d, *a};
}

static void range_group(geoq_search *s, int64_t g) {
  const kdtree *t = &s->r->t;
  const int64_t *a = t->js + t->gs[g], *b = t->js + t->gs[g + 1];
  if (s->r->pl->has_targets) {
    range_side(s, a, b);
    return;
  }
  const int64_t *mid = split_at(a, b, s->i);
  if (!s->skip_le_i) range_side(s, a, mid);
  if (mid < b && *mid == s->i) mid++;
  range_side(s, mid, b);
}

static void range_node(geoq_search *s, int64_t node, int64_t lo, int64_t hi) {
  const kdtree *t = &s->r->t;
  if (box_d2(&t->box[node], s->x) > s->prune2) return;
  if (hi - lo > GEOQ_LEAF) {
    int64_t mid = lo + (hi - lo) / 2;
    range_node(s, 2 * node, lo, mid);
    range_node(s, 2 * node + 1, mid, hi);
    return;
  }
  for (int64_t a = lo; a < hi && !s->s->err; a++) {
    const kd_item *it = &t->it[a];
    if (pt_d2(it->x, s->x) > s->prune2) continue;
    if (it->g >= 0)
      range_group(s, it->g);
    else if (s->r->pl->has_targets ||
             (it->j != s->i && (!s->skip_le_i || it->j > s->i)))
      range_side(s, &it->j, &it->j + 1);
  }
}

static int hit_by_j(const void *a, const void *b) {
  const geoq_hit *x = a, *y = b;
  return (x->j > y->j) - (x->j < y->j);
}

/* Row i's candidates with d <= limit into sl->hits, in increasing j. */
static void range_row(geoq_run *r, geoq_slot *sl, int64_t i, double limit,
                      int skip_le_i) {
  geoq_search s = {.r = r, .s = sl, .i = i, .limit = limit,
                   .skip_le_i = skip_le_i,
                   .prune2 = prune2_of(r->pl, limit)};
  xyz_of(r->pl, &r->pl->p[i], s.x);
  sl->hits.n = 0;
  if (r->t.ng > 0) range_node(&s, 1, 0, r->t.ng);
  if (sl->hits.n > 1)
    qsort(sl->hits.v, sl->hits.n, sizeof *sl->hits.v, hit_by_j);
}

/* ---- rowwise reductions --------------------------------------------------- */

typedef struct geoq_acc {
  double sum, best;
  int64_t count, arg;
} geoq_acc;

/* One value of the row, in increasing j (NaN left out). */
static void acc_add(geoq_acc *a, geoq_op op, double d, int64_t j) {
  if (isnan(d)) return;
  a->count++;
  a->sum += d;
  if (a->arg < 0 || (op == GEOQ_MAX || op == GEOQ_ARGMAX ? d > a->best
                                                         : d < a->best)) {
    a->best = d;
    a->arg = j;
  }
}

static void acc_store(const geoq_run *r, int64_t i, const geoq_acc *a) {
  const geod_plan *pl = r->pl;
  double v;
  i -= r->r0;
  switch (r->q->op) {
    case GEOQ_ARGMIN:
    case GEOQ_ARGMAX:
      ((int64_t *)r->a0->data)[i] = a->arg;
      return;
    case GEOQ_COUNT:
      ((int64_t *)r->a0->data)[i] = a->count;
      return;
    case GEOQ_SUM: v = a->sum; break;
    case GEOQ_MEAN: v = a->count ? a->sum / (double)a->count : NAN; break;
    default: v = a->arg >= 0 ? a->best : NAN; break;
  }
  if (pl->dtype == T_F32)
    ((float *)r->a0->data)[i] = (float)v;
  else
    ((double *)r->a0->data)[i] = v;
}

/* Every candidate of row i, in increasing j: the matrix's row loop where
 * the row is contiguous (p[i] first), one pair at a time where it is the
 * mirror (j < i without targets). */
static void full_row(geoq_run *r, geoq_slot *sl, int64_t i, geoq_acc *acc) {
  const geod_plan *pl = r->pl;
  double buf[GEOQ_ROW_CHUNK];
  int f32 = pl->dtype == T_F32;
  int64_t j = 0;
  if (!pl->has_targets)
    for (; j < i; j++) acc_add(acc, r->q->op, pair_d(pl, i, j, &sl->nonconv), j);
  if (!pl->has_targets) j = i + 1;
  const geod_point *q = pl->has_targets ? pl->q : pl->p;
  while (j < pl->m) {
    int64_t len = pl->m - j < GEOQ_ROW_CHUNK ? pl->m - j : GEOQ_ROW_CHUNK;
    geod_row_compute(pl, &pl->p[i], &q[j], len, buf, &sl->nonconv);
    for (int64_t c = 0; c < len; c++)
      acc_add(acc, r->q->op, f32 ? (double)(float)buf[c] : buf[c], j + c);
    j += len;
  }
}

/* ---- tiles ----------------------------------------------------------------- */

static void tile_knn(geoq_run *r, geoq_slot *sl, int64_t i) {
  int64_t k = r->k;
  geoq_hit best[GEOQ_MAX_K];
  int64_t cnt = knn_row(r, sl, i, INFINITY, best);
  int64_t o = i - r->r0;
  int64_t *ix = (int64_t *)r->a1->data + o * k;
  for (int64_t c = 0; c < k; c++) {
    /* cnt < k only if the search lost candidates: never (no bound until
     * the heap is full); -1 / NaN keep such a bug visible. */
    double d = c < cnt ? best[c].d : NAN;
    ix[c] = c < cnt ? best[c].j : -1;
    if (r->pl->dtype == T_F32)
      ((float *)r->a0->data)[o * k + c] = (float)d;
    else
      ((double *)r->a0->data)[o * k + c] = d;
  }
}

static void tile_radius(geoq_run *r, geoq_slot *sl, int64_t tile, int64_t i) {
  range_row(r, sl, i, r->q->r, 1);
  if (sl->err || !sl->hits.n) return;
  int64_t tot = atomic_fetch_add(&r->npairs, (int64_t)sl->hits.n) +
                (int64_t)sl->hits.n;
  if (tot > r->q->max_pairs) {
    atomic_store(&r->over, 1);
    return;
  }
  pair_vec *v = &r->tile[tile];
  if (tvec_reserve(v, v->n + sl->hits.n)) {
    sl->err = T_ENOMEM;
    return;
  }
  for (size_t h = 0; h < sl->hits.n; h++)
    v->v[v->n++] = (geoq_pair){i, sl->hits.v[h].j, sl->hits.v[h].d};
}

static void tile_rowwise(geoq_run *r, geoq_slot *sl, int64_t i) {
  const geoq *q = r->q;
  geoq_acc acc = {0, 0, 0, -1};
  if (q->op == GEOQ_MIN || q->op == GEOQ_ARGMIN) {
    geoq_hit best[1];
    if (knn_row(r, sl, i, q->has_within ? q->within : INFINITY, best) == 1 &&
        (!q->has_within || best[0].d <= q->within))
      acc_add(&acc, q->op, best[0].d, best[0].j); /* NaN: none */
  } else if (q->has_within) {
    range_row(r, sl, i, q->within, 0);
    for (size_t h = 0; h < sl->hits.n; h++)
      acc_add(&acc, q->op, sl->hits.v[h].d, sl->hits.v[h].j);
  } else {
    full_row(r, sl, i, &acc);
  }
  acc_store(r, i, &acc);
}

/* pool_chunk_fn: rows [tile * rows, ...). */
static void tile_run(void *arg, int64_t tile, int slot) {
  geoq_run *r = arg;
  geoq_slot *sl = &r->slot[slot];
  int64_t i0 = r->r0 + tile * r->rows, i1 = i0 + r->rows;
  if (i1 > r->r1) i1 = r->r1;
  for (int64_t i = i0; i < i1 && !sl->err && !atomic_load(&r->over); i++) {
    switch (r->q->type) {
      case GEOQ_KNN: tile_knn(r, sl, i); break;
      case GEOQ_RADIUS: tile_radius(r, sl, tile, i); break;
      default: tile_rowwise(r, sl, i); break;
    }
  }
  job_ctx_progress(r->ctx, 1);
}

/* ---- the entry -------------------------------------------------------------- */

static void out_free(geoq_out *out) {
  for (int p = 0; p < out->nparts; p++) tarray_free(out->part[p]);
  memset(out, 0, sizeof *out);
}

static int out_add(job_ctx *ctx, geoq_out *out, const char *name, tdtype dt,
                   int ndim, const int64_t *shape, terr *e) {
  tarray *a = NULL;
  int rc = ctx->result_alloc(ctx, dt, ndim, shape, &a, e);
  if (rc) return rc;
  out->part[out->nparts] = a;
  out->name[out->nparts++] = name;
  return 0;
}

/* radius: the tiles' buffers, in order, into the parts i, j, distance. */
static int radius_parts(geoq_run *r, geoq_out *out, terr *e) {
  int64_t P = 0;
  for (int64_t t = 0; t < r->ntiles; t++) P += (int64_t)r->tile[t].n;
  int rc = out_add(r->ctx, out, "i", T_I64, 1, &P, e);
  if (!rc) rc = out_add(r->ctx, out, "j", T_I64, 1, &P, e);
  if (!rc) rc = out_add(r->ctx, out, "distance", r->pl->dtype, 1, &P, e);
  if (rc) return rc;
  int64_t *oi = out->part[0]->data, *oj = out->part[1]->data, at = 0;
  for (int64_t t = 0; t < r->ntiles; t++) {
    pair_vec *v = &r->tile[t];
    for (size_t c = 0; c < v->n; c++, at++) {
      oi[at] = v->v[c].i;
      oj[at] = v->v[c].j;
      if (r->pl->dtype == T_F32)
        ((float *)out->part[2]->data)[at] = (float)v->v[c].d;
      else
        ((double *)out->part[2]->data)[at] = v->v[c].d;
    }
    free(v->v);
    memset(v, 0, sizeof *v);
  }
  return 0;
}

static void run_free(geoq_run *r, int width) {
  if (r->slot)
    for (int s = 0; s < width; s++) {
      theap_free(&r->slot[s].heap);
      free(r->slot[s].ent);
      free(r->slot[s].hits.v);
    }
  free(r->slot);
  if (r->tile)
    for (int64_t t = 0; t < r->ntiles; t++) free(r->tile[t].v);
  free(r->tile);
  kd_free(&r->t);
}

int geoq_cpu_run(const geod_plan *pl, const geoq *q, int width, job_ctx *ctx,
                 geoq_out *out, int64_t *nonconv, terr *e) {
  geoq_run r;
  int rc = 0;
  memset(&r, 0, sizeof r);
  memset(out, 0, sizeof *out);
  *nonconv = 0;
  if (width < 1 || !ctx->pool) width = 1;
  r.pl = pl;
  r.q = q;
  r.ctx = ctx;
  atomic_init(&r.npairs, 0);
  atomic_init(&r.over, 0);
  int full = q->type == GEOQ_ROWWISE && !q->has_within &&
             q->op != GEOQ_MIN && q->op != GEOQ_ARGMIN;
  r.rows = GEOQ_TILE_ROWS;
  if (full) {
    r.rows = pl->m > 0 ? ((int64_t)1 << 16) / pl->m : GEOQ_TILE_ROWS;
    if (r.rows < 1) r.rows = 1;
    if (r.rows > GEOQ_TILE_ROWS) r.rows = GEOQ_TILE_ROWS;
  }
  geod_plan_band(pl, &r.r0, &r.r1);
  int64_t nrows = r.r1 - r.r0;
  r.ntiles = (nrows + r.rows - 1) / r.rows;
  r.k = q->type == GEOQ_KNN ? geoq_knn_k(pl, q) : 1;
  /* The parts whose shape is known now. */
  if (q->type == GEOQ_RADIUS && pl->row1 > 0) {
    rc = terr_set(e, T_EINTERNAL, "params.query", -1,
                  "a radius query has no band of rows");
  } else if (q->type == GEOQ_KNN) {
    int64_t sh[2] = {nrows, r.k};
    rc = out_add(ctx, out, "distance", pl->dtype, 2, sh, e);
    if (!rc) rc = out_add(ctx, out, "index", T_I64, 2, sh, e);
    if (!rc) r.a0 = out->part[0], r.a1 = out->part[1];
  } else if (q->type == GEOQ_ROWWISE) {
    rc = out_add(ctx, out, NULL, geoq_rowwise_dtype(pl, q->op), 1, &nrows, e);
    if (!rc) r.a0 = out->part[0];
  } else if (q->type == GEOQ_RADIUS) {
    r.tile = calloc((size_t)(r.ntiles > 0 ? r.ntiles : 1), sizeof *r.tile);
    if (!r.tile) rc = terr_set(e, T_ENOMEM, "", -1, "no memory");
  } else {
    rc = terr_set(e, T_EINTERNAL, "params.query", -1, "no query");
  }
  if (rc) goto done;
  if (q->type == GEOQ_KNN && r.k == 0) goto done; /* [n, 0]: nothing */
  r.slot = calloc((size_t)width, sizeof *r.slot);
  if (!r.slot) {
    rc = terr_set(e, T_ENOMEM, "", -1, "no memory for %d slots", width);
    goto done;
  }
  for (int s = 0; s < width; s++) {
    geoq_slot *sl = &r.slot[s];
    theap_init(&sl->heap, hit_worse, NULL);
    sl->ent = malloc((size_t)r.k * sizeof *sl->ent);
    if (!sl->ent || tvec_grow(&sl->heap.v, &sl->heap.cap, sizeof(void *),
                              (size_t)r.k, 0)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "no memory for %d slots", width);
      goto done;
    }
  }
  if ((rc = kd_build(pl, &r.t, e))) goto done;
  atomic_fetch_add(&ctx->progress_total, r.ntiles);
  if (width == 1) {
    for (int64_t t = 0; t < r.ntiles && !r.slot[0].err &&
                        !atomic_load(&r.over);
         t++) {
      if (job_ctx_stopped(ctx)) {
        rc = job_ctx_stop_code(ctx);
        break;
      }
      tile_run(&r, t, 0);
    }
  } else if (pool_for(ctx->pool, width, r.ntiles, tile_run, &r, ctx->stop)) {
    rc = job_ctx_stop_code(ctx);
  }
  for (int s = 0; s < width; s++) {
    *nonconv += r.slot[s].nonconv;
    if (!rc && r.slot[s].err) rc = r.slot[s].err;
  }
  if (rc == T_ENOMEM) {
    terr_set(e, rc, "", -1, "no memory for the query's buffers");
  } else if (rc) {
    terr_set(e, rc, "", -1, "%s",
             rc == T_ETIMEOUT ? "the job ran past its timeout"
                              : "the job was canceled");
  } else if (atomic_load(&r.over)) {
    rc = terr_set(e, T_ENOSPACE, "params.query.radius.max_pairs", -1,
                  "more than %lld pairs within r = %s (%lld found before "
                  "stopping); raise max_pairs or lower r",
                  (long long)q->max_pairs, t_num(q->r).s,
                  (long long)atomic_load(&r.npairs));
  } else if (q->type == GEOQ_RADIUS) {
    rc = radius_parts(&r, out, e);
  }
done:
  run_free(&r, width);
  if (rc) out_free(out);
  return rc;
}
