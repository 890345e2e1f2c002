/* compute/sched/split_join.c — the join of a split job: its tiles'
 * results, each a band of the parent's rows (sched_split_rows), read
 * (mapped or parsed) and written into the parent's result as its kind says
 * (kind_split.join): rows concatenated, a square mirrored from its upper
 * bands, or condensed pairs; a result of several parts joined part by
 * part. The coordinator (split.c) calls sched_split_join_result once every
 * tile succeeded; the work is chunked over the scheduler's pool. The cut
 * of the rows lives here too (sched_split_form, sched_split_tri,
 * sched_split_rows), read by the coordinator and a run, so that the join
 * calls nothing of split.c (no file circle). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/array/parts.h"
#include "compute/sched/sched_int.h"
#include "compute/sched/split.h"
#include "util/util.h"
#include "compute/sched/cluster.h"

/* ---- the result -------------------------------------------------------- */

/* Part `index` of a succeeded tile's result, mapped or parsed. */
static int tile_part(store *st, const store_job *c, int index,
                     const tparts *tp, tarray **out, terr *e) {
  *out = NULL;
  if (index > 0) return tarray_map_npy(tp->p[index].path, out, e);
  if (c->result_path) return tarray_map_npy(c->result_path, out, e);
  void *npy = NULL;
  size_t len = 0;
  int rc = store_job_result_npy(st, c->id, NULL, &npy, &len, e);
  if (rc == T_OK) rc = npy_parse_result(npy, len, INT64_MAX, out, e);
  free(npy);
  return rc;
}

/* ---- the join: the tiles' rows into the job's result -------------------
 *
 * Both joins write row blocks of the result in parallel on the node's pool
 * (the tiles are done; the coordinator takes part in its own loop): into a
 * buffer when the result fits the job's row (row_max), else with pwrite
 * into a temporary file sized (and its blocks reserved) first, renamed
 * over the result when whole. A concatenation (every part of every other
 * kind of split job) writes each block straight from the tiles' mapped
 * rows; a square matrix's mirror (join_square) builds each block in a
 * buffer of its slot first. */

typedef struct jwork {
  int mirror;      /* square: tiles hold their rows' upper parts (or,
                      C below, their rows whole) */
  int tiles;
  tarray **a;      /* by tile index */
  const int64_t *E;/* concatenation: tile t: result rows [E[t], E[t+1]) */
  /* mirror (square_form): tile t holds rows [R0[t], ...) x columns
   * [C[t], n), C[t] = R0[t] (an upper part) or 0 (rows whole, a tile of the
   * version before upper bands); result row i is taken from tile own[i] */
  const int64_t *R0, *C;
  const int *own;
  int64_t rows;    /* of the result */
  int64_t rowel;   /* elements in a result row */
  size_t es;       /* element size */
  int64_t block;   /* rows a chunk writes */
  char *mem;       /* the result's data in a buffer, or NULL: */
  int fd;          /*   written with pwrite at off + its offset */
  size_t off;
  char **buf;      /* mirror into a file: a block buffer per slot */
  atomic_int err;  /* the first errno */
  _Atomic int64_t nan;
} jwork;

static void jw_fail(jwork *w, int err) {
  int zero = 0;
  atomic_compare_exchange_strong(&w->err, &zero, err ? err : EIO);
}

/* Write len bytes of the result at byte `at` of its data. */
static void jw_put(jwork *w, const void *p, size_t len, size_t at) {
  if (w->mem) {
    memcpy(w->mem + at, p, len);
    return;
  }
  const char *c = p;
  while (len > 0 && !atomic_load(&w->err)) {
    ssize_t k = pwrite(w->fd, c, len, (off_t)(w->off + at));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      jw_fail(w, k < 0 ? errno : EIO);
      return;
    }
    c += k, at += (size_t)k, len -= (size_t)k;
  }
}

/* Square rows [i0, i1) (all taken from one tile, t) into dst (B x n): row
 * i is element (j, i) of row j's tile for j < i, zero on the diagonal, its
 * own tile's for j > i (whose NaNs are counted: Vincenty's non-converged
 * pairs). A tile that holds its rows whole (C[t] < R0[t]: the version
 * before upper bands computed them so, j < i as the pair (p[j], p[i]) and
 * the diagonal zero, the whole matrix's bits) gives them as they are. */
static void mirror_rows(jwork *w, int t, int64_t i0, int64_t i1, char *dst) {
  const int64_t n = w->rows, *R0 = w->R0, *C = w->C;
  const size_t es = w->es;
  const int whole = C[t] < R0[t];
  int64_t nan = 0;
  for (int64_t i = i0; i < i1; i++) { /* j >= i: its own row */
    char *row = dst + (size_t)((i - i0) * n) * es;
    const char *src = (const char *)w->a[t]->data +
                      (size_t)((i - R0[t]) * (n - C[t]) + (i - C[t])) * es;
    if (whole) {
      memcpy(row, src - (size_t)i * es, (size_t)n * es);
    } else {
      memcpy(row + (size_t)i * es, src, (size_t)(n - i) * es);
      memset(row + (size_t)i * es, 0, es); /* the diagonal */
    }
    if (es == 8) {
      const double *d = (const double *)(row + (size_t)i * es);
      for (int64_t j = 1; j < n - i; j++) nan += d[j] != d[j];
    } else {
      const float *f = (const float *)(row + (size_t)i * es);
      for (int64_t j = 1; j < n - i; j++) nan += f[j] != f[j];
    }
  }
  for (int64_t j = 0; !whole && j + 1 < i1; j++) { /* j < i: (j, i) */
    int tj = w->own[j]; /* C[tj] <= j < i */
    int64_t wj = n - C[tj], from = j + 1 > i0 ? j + 1 : i0;
    const char *srow =
        (const char *)w->a[tj]->data + (size_t)((j - R0[tj]) * wj) * es;
    if (es == 8) {
      const uint64_t *x = (const uint64_t *)srow;
      uint64_t *y = (uint64_t *)dst;
      for (int64_t i = from; i < i1; i++) y[(i - i0) * n + j] = x[i - C[tj]];
    } else {
      const uint32_t *x = (const uint32_t *)srow;
      uint32_t *y = (uint32_t *)dst;
      for (int64_t i = from; i < i1; i++) y[(i - i0) * n + j] = x[i - C[tj]];
    }
  }
  atomic_fetch_add(&w->nan, nan);
}

/* pool_chunk_fn: result rows [c B, (c + 1) B), cut at tile edges. */
static void jw_chunk(void *arg, int64_t c, int slot) {
  jwork *w = arg;
  int64_t r0 = c * w->block, r1 = r0 + w->block < w->rows ? r0 + w->block
                                                         : w->rows;
  size_t rowb = (size_t)w->rowel * w->es;
  int t = 0;
  while (r0 < r1 && !atomic_load(&w->err)) {
    int64_t e = r0 + 1; /* rows [r0, e) within tile t */
    if (w->mirror) {
      t = w->own[r0];
      while (e < r1 && w->own[e] == t) e++;
    } else {
      while (r0 >= w->E[t + 1]) t++;
      e = r1 < w->E[t + 1] ? r1 : w->E[t + 1];
    }
    if (!w->mirror) {
      const char *src = (const char *)w->a[t]->data + (size_t)(r0 - w->E[t]) * rowb;
      jw_put(w, src, (size_t)(e - r0) * rowb, (size_t)r0 * rowb);
    } else if (w->mem) {
      mirror_rows(w, t, r0, e, w->mem + (size_t)r0 * rowb);
    } else {
      mirror_rows(w, t, r0, e, w->buf[slot]);
      jw_put(w, w->buf[slot], (size_t)(e - r0) * rowb, (size_t)r0 * rowb);
    }
    r0 = e;
  }
}

/* Write the result (header hdr, then w's rows) to path or, when it fits
 * row_max and npy is not NULL, into *npy; on the node's pool. */
static int jw_run(sched *s, jwork *w, const char *hdr, size_t hl,
                  int64_t bytes, const char *path, void **npy,
                  size_t *npy_len, terr *e) {
  int width = s->pool ? pool_threads(s->pool) : 1;
  char tmp[SPLIT_PATH_MAX] = "";
  char *mem = NULL;
  int rc = T_OK;
  w->fd = -1;
  /* rows a chunk writes: a mirror's buffer ~4 MiB (8 to 64 rows) */
  w->block = 256;
  if (w->mirror) {
    w->block = (int64_t)(((size_t)4 << 20) / ((size_t)w->rowel * w->es + 1));
    if (w->block < 8) w->block = 8;
    if (w->block > 64) w->block = 64;
  }
  if (npy && s->row_max > 0 && bytes + NPY_HEADER_MAX <= s->row_max) {
    if (!(mem = malloc(hl + (size_t)bytes + 1)))
      return terr_set(e, T_ENOMEM, "", -1, "out of memory");
    memcpy(mem, hdr, hl);
    w->mem = mem + hl;
  } else {
    snprintf(tmp, sizeof tmp, "%s.tmp%u", path,
             atomic_fetch_add(&s->tmp_counter, 1));
    w->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    w->off = hl;
    int err = w->fd < 0 ? errno : 0;
    if (!err && pwrite(w->fd, hdr, hl, 0) != (ssize_t)hl) err = errno ? errno : EIO;
    /* the blocks reserved now: a full disk fails here, not mid-write */
    if (!err && bytes > 0) {
      int fe = posix_fallocate(w->fd, 0, (off_t)(hl + (size_t)bytes));
      if (fe && fe != EOPNOTSUPP && fe != EINVAL) err = fe;
    }
    if (err) jw_fail(w, err);
    if (!err && w->mirror &&
        !(w->buf = calloc((size_t)width, sizeof *w->buf)))
      rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    for (int k = 0; !rc && !err && w->mirror && k < width; k++)
      if (!(w->buf[k] = malloc((size_t)w->block * (size_t)w->rowel * w->es)))
        rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  if (!rc && !atomic_load(&w->err)) {
    int64_t nch = (w->rows + w->block - 1) / w->block;
    if (s->pool && width > 1 && nch > 1)
      pool_for(s->pool, width, nch, jw_chunk, w, NULL);
    else
      for (int64_t c = 0; c < nch; c++) jw_chunk(w, c, 0);
  }
  if (w->fd >= 0) {
    if (close(w->fd) != 0) jw_fail(w, errno);
    w->fd = -1;
    if (!rc && !atomic_load(&w->err) && rename(tmp, path) != 0)
      jw_fail(w, errno);
  }
  for (int k = 0; w->buf && k < width; k++) free(w->buf[k]);
  free(w->buf);
  w->buf = NULL;
  int err = atomic_load(&w->err);
  if (!rc && err) {
    rc = terr_set(e, T_EIO, "", -1, "cannot write %s: %s", path, strerror(err));
    rc = terr_nospace(e, rc, err);
  }
  if (rc) {
    if (tmp[0]) unlink(tmp);
    free(mem);
    return rc;
  }
  if (mem) {
    *npy = mem;
    *npy_len = hl + (size_t)bytes;
  }
  return T_OK;
}

/* Pairs j > i of rows [r0, r1) of a condensed matrix of n points. */
static unsigned __int128 cond_pairs(int64_t n, int64_t r0, int64_t r1) {
  return tri_cum(n - 1, r1) - tri_cum(n - 1, r0);
}

int sched_split_condensed_check(const int64_t *len, int tiles, int64_t n,
                                terr *e) {
  int64_t cur = 0;
  for (int t = 0; t < tiles; t++) {
    int64_t r0[2], r1[2];
    sched_split_rows(n, t, tiles, 1, &r0[0], &r1[0]);
    sched_split_rows(n, t, tiles, 0, &r0[1], &r1[1]);
    int f = 0;
    while (f < 2 && !(r0[f] == cur && len[t] >= 0 &&
                      cond_pairs(n, r0[f], r1[f]) ==
                          (unsigned __int128)len[t]))
      f++;
    if (f == 2)
      return terr_set(e, T_EIO, "", -1,
                      "tile %d's result (%lld pairs) is not the pairs of rows "
                      "[%lld, %lld) (%lld) nor, as the version before equal-"
                      "pair bands cut them, of rows [%lld, %lld) (%lld) after "
                      "the rows before it ended at %lld: submit the job again",
                      t, (long long)len[t], (long long)r0[0], (long long)r1[0],
                      (long long)cond_pairs(n, r0[0], r1[0]), (long long)r0[1],
                      (long long)r1[1], (long long)cond_pairs(n, r0[1], r1[1]),
                      (long long)cur);
    cur = r1[f];
  }
  if (cur != n)
    return terr_set(e, T_EIO, "", -1, "the tiles' rows end at %lld of %lld: "
                    "submit the job again", (long long)cur, (long long)n);
  return T_OK;
}

/* Concatenate part `index` of every tile into `path` (a temporary renamed
 * over it) or, for part 0 when it fits row_max, into *npy. Fills *info.
 * cond_n > 0: a condensed matrix of cond_n points, whose tiles' lengths
 * must cut it (sched_split_condensed_check). */
static int join_part(sched *s, const store_job *kids, int nk, int index,
                     const tparts *tps, int64_t cond_n, const char *path,
                     void **npy, size_t *npy_len, tpart *info, terr *e) {
  tarray **a = calloc((size_t)nk, sizeof *a);
  int64_t *E = calloc((size_t)nk + 1, sizeof *E);
  int rc = a && E ? T_OK : terr_set(e, T_ENOMEM, "", -1, "out of memory");
  int64_t shape[T_MAXDIM];
  /* in tile order (kids are: store_job_children), each its own rows */
  for (int i = 0; !rc && i < nk; i++) {
    rc = tile_part(s->cfg.st, &kids[i], index, &tps[i], &a[i], e);
    if (rc) break;
    if (i == 0) {
      memcpy(shape, a[0]->shape, sizeof shape);
      shape[0] = 0;
    } else if (a[i]->dtype != a[0]->dtype || a[i]->ndim != a[0]->ndim ||
               (a[0]->ndim > 1 &&
                memcmp(a[i]->shape + 1, a[0]->shape + 1,
                       (size_t)(a[0]->ndim - 1) * sizeof(int64_t)) != 0)) {
      rc = terr_set(e, T_EIO, "", -1, "tile %d's result does not match "
                    "tile 0's", i);
    }
    if (!rc) {
      shape[0] += a[i]->shape[0];
      E[i + 1] = shape[0];
    }
  }
  if (!rc && cond_n > 0) { /* kids in tile order, every tile there */
    int64_t *len = malloc((size_t)nk * sizeof *len);
    if (!len)
      rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    else if (a[0]->ndim != 1)
      rc = terr_set(e, T_EIO, "", -1, "a condensed matrix's tile of %d "
                    "dimensions", a[0]->ndim);
    for (int i = 0; !rc && i < nk; i++)
      if (kids[i].tile != i)
        rc = terr_set(e, T_EIO, "", -1, "tile %d is out of place",
                      kids[i].tile);
      else
        len[i] = E[i + 1] - E[i];
    if (!rc) rc = sched_split_condensed_check(len, nk, cond_n, e);
    free(len);
  }
  if (!rc) {
    tdtype dt = a[0]->dtype;
    int ndim = a[0]->ndim;
    char hdr[NPY_HEADER_MAX];
    size_t hl = npy_header(dt, ndim, shape, hdr);
    int64_t bytes = tshape_size(ndim, shape, INT64_MAX) * (int64_t)tdtype_size(dt);
    info->dtype = dt;
    info->ndim = ndim;
    memcpy(info->shape, shape, sizeof info->shape);
    info->bytes = bytes;
    jwork w;
    memset(&w, 0, sizeof w);
    w.tiles = nk;
    w.a = a;
    w.E = E;
    w.rows = shape[0];
    w.rowel = shape[0] ? tshape_size(ndim, shape, INT64_MAX) / shape[0] : 0;
    w.es = tdtype_size(dt);
    rc = jw_run(s, &w, hdr, hl, bytes, path, npy, npy_len, e); /* 0 rows: the header */
  }
  for (int i = 0; a && i < nk; i++) tarray_free(a[i]);
  free(a);
  free(E);
  return rc;
}

/* Which form tile t's result a has, of tiles cutting an n x n matrix:
 * the upper part of its rows as this version cuts them (sched_split_rows
 * with tri, bands of equal pairs: [r1 - r0, n - r0], columns [r0, n),
 * compute/kinds/geodesic geod_plan_upper), or its rows whole as the version before
 * upper bands cut and computed them (bands of equal rows: [r1 - r0, n]),
 * a tile finished before an upgrade and joined after it. *r0 and *c its
 * first row and column (c = r0: an upper part; c = 0 < r0: rows whole;
 * tile 0's two forms, both from column 0, are joined alike); *r1 its row
 * end. -1 when it is neither, or not float64 / float32: the store records
 * no other difference (a tile's params are its parent's). */
static int tile_form(const tarray *a, int64_t n, int t, int tiles,
                     int64_t *r0, int64_t *r1, int64_t *c) {
  if (a->ndim != 2 || (a->dtype != T_F64 && a->dtype != T_F32)) return -1;
  sched_split_rows(n, t, tiles, 1, r0, r1);
  if (a->shape[0] == *r1 - *r0 && a->shape[1] == n - *r0) {
    *c = *r0;
    return 0;
  }
  sched_split_rows(n, t, tiles, 0, r0, r1);
  if (a->shape[0] == *r1 - *r0 && a->shape[1] == n) {
    *c = 0;
    return 0;
  }
  return -1;
}

/* The rows and columns of each tile (tile_form), and which tile each
 * result row is taken from (own[i]: the first tile in tile order holding
 * row i; after an upgrade an old tile's rows and a new tile's may
 * overlap). T_EIO when a tile has neither form or another dtype, is
 * missing, or rows lie in no tile. */
static int square_form(tarray **a, int tiles, int64_t n, int64_t *R0,
                       int64_t *C, int *own, terr *e) {
  int64_t r1 = 0;
  for (int t = 0; t < tiles; t++) {
    if (!a[t] || a[t]->dtype != a[0]->dtype) /* every tile, one dtype */
      return terr_set(e, T_EIO, "", -1, "tile %d is missing or of another "
                      "dtype", t);
    if (tile_form(a[t], n, t, tiles, &R0[t], &r1, &C[t]) == 0) {
      for (int64_t i = R0[t]; i < r1; i++)
        if (own[i] < 0) own[i] = t;
      continue;
    }
    int64_t u0, u1, w0, w1;
    sched_split_rows(n, t, tiles, 1, &u0, &u1);
    sched_split_rows(n, t, tiles, 0, &w0, &w1);
    char sh[96] = "";
    for (int d = 0, o = 0; d < a[t]->ndim && o < (int)sizeof sh - 24; d++)
      o += snprintf(sh + o, sizeof sh - (size_t)o, "%s%lld", d ? ", " : "",
                    (long long)a[t]->shape[d]);
    return terr_set(e, T_EIO, "", -1,
                    "tile %d's result (%s [%s]) is not the upper part of "
                    "rows [%lld, %lld) ([%lld, %lld]) nor rows [%lld, %lld) "
                    "whole ([%lld, %lld], a tile of the version before upper "
                    "bands)", t, tdtype_name(a[t]->dtype), sh, (long long)u0,
                    (long long)u1, (long long)(u1 - u0), (long long)(n - u0),
                    (long long)w0, (long long)w1, (long long)(w1 - w0),
                    (long long)n);
  }
  for (int64_t i = 0; i < n; i++) {
    if (own[i] >= 0) continue;
    int64_t j = i;
    while (j < n && own[j] < 0) j++;
    return terr_set(e, T_EIO, "", -1,
                    "rows [%lld, %lld) are in no tile's result: tiles that "
                    "the version before upper bands finished (rows whole, "
                    "bands of equal rows) and tiles of this version (bands "
                    "of equal pairs) leave them out; submit the job again",
                    (long long)i, (long long)j);
  }
  return T_OK;
}

/* The whole square matrix (n x n) from its tiles (sched_int.h). Row i is:
 * columns j < i element (j, i) of row j's tile (the pair (p[j], p[i]) that
 * the whole matrix mirrors there), zero on the diagonal, columns j > i its
 * own tile's; or, taken from a tile of the version before upper bands, the
 * row as that tile holds it (the same bits). */
int sched_split_join_square(sched *s, tarray **a, int tiles, int64_t n,
                            const char *path, void **npy, size_t *npy_len,
                            struct tpart *info, int64_t *nonconv, terr *e) {
  if (tiles < 1 || n < 1)
    return terr_set(e, T_EIO, "", -1, "%d tiles of a square matrix of %lld "
                    "points", tiles, (long long)n);
  int64_t *R0 = calloc((size_t)tiles, sizeof *R0);
  int64_t *C = calloc((size_t)tiles, sizeof *C);
  int *own = malloc((size_t)n * sizeof *own);
  int rc = R0 && C && own ? T_OK
                          : terr_set(e, T_ENOMEM, "", -1, "out of memory");
  if (!rc) {
    for (int64_t i = 0; i < n; i++) own[i] = -1;
    rc = square_form(a, tiles, n, R0, C, own, e);
  }
  if (!rc) {
    tdtype dt = a[0]->dtype;
    int64_t shape[T_MAXDIM] = {n, n};
    char hdr[NPY_HEADER_MAX];
    size_t hl = npy_header(dt, 2, shape, hdr);
    int64_t bytes = n * n * (int64_t)tdtype_size(dt);
    info->dtype = dt;
    info->ndim = 2;
    memcpy(info->shape, shape, sizeof info->shape);
    info->bytes = bytes;
    jwork w;
    memset(&w, 0, sizeof w);
    w.mirror = 1;
    w.tiles = tiles;
    w.a = a;
    w.R0 = R0;
    w.C = C;
    w.own = own;
    w.rows = n;
    w.rowel = n;
    w.es = tdtype_size(dt);
    rc = jw_run(s, &w, hdr, hl, bytes, path, npy, npy_len, e);
    *nonconv = atomic_load(&w.nan);
  }
  free(R0);
  free(C);
  free(own);
  return rc;
}

/* The square join of a parent's tiles as the store has them: each in its
 * place (tile index), then sched_split_join_square. */
static int join_square(sched *s, const store_job *kids, int nk, int tiles,
                       int64_t n, const char *path, void **npy,
                       size_t *npy_len, tpart *info, int64_t *nonconv,
                       terr *e) {
  tarray **a = calloc((size_t)(tiles > 0 ? tiles : 1), sizeof *a);
  int rc = a ? T_OK : terr_set(e, T_ENOMEM, "", -1, "out of memory");
  if (!rc && nk != tiles)
    rc = terr_set(e, T_EIO, "", -1, "%d of %d tiles", nk, tiles);
  for (int i = 0; !rc && i < nk; i++) {
    int t = kids[i].tile;
    if (t < 0 || t >= tiles || a[t]) {
      rc = terr_set(e, T_EIO, "", -1, "tile %d is out of place", t);
      break;
    }
    rc = tile_part(s->cfg.st, &kids[i], 0, NULL, &a[t], e);
  }
  if (!rc)
    rc = sched_split_join_square(s, a, tiles, n, path, npy, npy_len, info,
                                 nonconv, e);
  for (int t = 0; a && t < tiles; t++) tarray_free(a[t]);
  free(a);
  return rc;
}

/* Every part of the tiles joined into the parent's result; the end record
 * filled (its strings and buffers the caller's: *final, *doc, *npy). */
int sched_split_join_result(split_run *r, const store_job *kids, int nk,
                       store_job_end *end, char *final, char **doc,
                       void **npy, terr *e) {
  sched *s = r->s;
  tparts *tps = calloc((size_t)nk, sizeof *tps);
  tparts out;
  memset(&out, 0, sizeof out);
  int rc = tps ? T_OK : terr_set(e, T_ENOMEM, "", -1, "out of memory");
  for (int i = 0; !rc && i < nk; i++)
    rc = tparts_parse(kids[i].result_parts, &tps[i], e);
  for (int i = 1; !rc && i < nk; i++)
    if (tps[i].n != tps[0].n)
      rc = terr_set(e, T_EIO, "", -1, "tile %d has %d parts, tile 0 %d", i,
                    tps[i].n, tps[0].n);
  int nparts = tps && tps[0].n > 0 ? tps[0].n : 1;
  size_t npy_len = 0;
  /* How the kind joins part 0: a square matrix's tiles computed only
   * their rows' upper part (compute/kinds/geodesic geod_plan_upper), which
   * join_square mirrors (a tile finished before upper bands, its rows
   * whole, is told apart by its shape: tile_form); a condensed one's
   * pieces concatenate, their lengths checked. */
  json_t *params = r->p.params ? json_loads(r->p.params, 0, NULL) : NULL;
  kind_split sp;
  int joins = sched_split_form(s->cfg.kind_lookup(r->p.kind), params, &sp);
  int upper = joins && sp.join == KIND_JOIN_SQUARE;
  int cond = joins && sp.join == KIND_JOIN_CONDENSED;
  json_decref(params);
  int64_t n = 0, nonconv = -1;
  if (upper || cond) {
    json_t *est = r->p.estimate ? json_loads(r->p.estimate, 0, NULL) : NULL;
    n = (int64_t)json_integer_value(json_object_get(est, "size"));
    json_decref(est);
    if (nparts != 1 || n < 1 || (cond && nk != r->p.tiles))
      rc = terr_set(e, T_EIO, "", -1, "a %s matrix of %lld points in %d "
                    "parts, %d of %d tiles", upper ? "square" : "condensed",
                    (long long)n, nparts, nk, r->p.tiles);
  }
  char stem[T_ID_MAX + 16];
  if (s->cluster)
    snprintf(stem, sizeof stem, "%s.r%d", r->p.id, r->p.attempts);
  else
    snprintf(stem, sizeof stem, "%s", r->p.id);
  snprintf(final, SPLIT_PATH_MAX, "%s/%s.npy", s->results_dir, stem);
  for (int k = 0; !rc && k < nparts; k++) {
    tpart *t = &out.p[k];
    out.n = k + 1;
    if (tps[0].n > 0) snprintf(t->name, sizeof t->name, "%s", tps[0].p[k].name);
    char path[SPLIT_PATH_MAX];
    if (k > 0) {
      snprintf(path, sizeof path, "%s/%s.%s.npy", s->results_dir, stem,
               t->name);
      if (!(t->path = strdup(path))) {
        rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
        break;
      }
    }
    if (upper && k == 0)
      rc = join_square(s, kids, nk, r->p.tiles, n, final, npy, &npy_len, t,
                       &nonconv, e);
    else
      rc = join_part(s, kids, nk, k, tps, cond ? n : 0, k ? path : final,
                     k ? NULL : npy,
                     &npy_len, t, e);
  }
  if (!rc) {
    tpart *t0 = &out.p[0];
    snprintf(end->result.dtype, sizeof end->result.dtype, "%s",
             tdtype_name(t0->dtype));
    end->result.ndim = t0->ndim;
    for (int d = 0; d < t0->ndim && d < STORE_MAXDIM; d++)
      end->result.shape[d] = t0->shape[d];
    end->result.bytes = t0->bytes;
    if (nonconv >= 0) /* counted by join_square */
      end->result.nonconverged = nonconv;
    else
      for (int i = 0; i < nk; i++)
        end->result.nonconverged += kids[i].result.nonconverged;
    if (*npy) {
      end->result_npy = *npy;
      end->result_npy_len = npy_len;
      final[0] = 0;
    }
    end->result_path = final[0] ? final : NULL;
    if (nparts > 1 && !(*doc = tparts_text(&out)))
      rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    end->result_parts = *doc;
  }
  if (rc) { /* nothing half-kept */
    for (int k = 1; k < out.n; k++)
      if (out.p[k].path) unlink(out.p[k].path);
    if (final[0]) unlink(final);
  }
  tparts_clear(&out);
  for (int i = 0; tps && i < nk; i++) tparts_clear(&tps[i]);
  free(tps);
  return rc;
}

/* ---- the coordinator --------------------------------------------------- */

/* ---- the cut of the rows (the coordinator, the join and a run read it) ---- */

/* How k splits a job with these params, as far as params alone say (tri
 * and the join); 0 when it does not split. */
int sched_split_form(const kind_ops *k, const json_t *params, kind_split *sp) {
  job_estimate none;
  memset(&none, 0, sizeof none);
  memset(sp, 0, sizeof *sp);
  return k && k->split && params && k->split(params, &none, sp);
}

int sched_split_tri(const kind_ops *k, const json_t *params) {
  kind_split sp;
  return sched_split_form(k, params, &sp) && sp.tri;
}

/* The first row of band k of a triangle cut into `tiles` bands of equal
 * pairs: the smallest r with tri_cum(r) * tiles >= k * tri_cum(n), at least
 * k and at most n - (tiles - k) so that no band is empty (tiles <= n). */
static int64_t tri_edge(int64_t n, int k, int tiles) {
  if (k <= 0) return 0;
  if (k >= tiles) return n;
  unsigned __int128 want = (unsigned __int128)k * tri_cum(n, n);
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (tri_cum(n, mid) * (unsigned __int128)tiles >= want)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo < k) lo = k;
  if (lo > n - (tiles - k)) lo = n - (tiles - k);
  return lo;
}

void sched_split_rows(int64_t n, int tile, int tiles, int tri, int64_t *r0,
                      int64_t *r1) {
  if (tri && n >= tiles) {
    *r0 = tri_edge(n, tile, tiles);
    *r1 = tri_edge(n, tile + 1, tiles);
    return;
  }
  *r0 = n * tile / tiles;
  *r1 = n * (tile + 1) / tiles;
}
