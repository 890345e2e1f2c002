/* test_split_join.c — the join of a square split job without targets
 * (compute/sched/split.c, sched_split_join_square): its tiles' results as the
 * geodesic kind computes them now (each the upper part of its rows,
 * geod_plan_upper, bands of equal pairs) join into the whole matrix, the
 * same bytes as the job run whole; and so do tiles that the version before
 * upper bands finished (a parent resumed across the upgrade): their rows
 * whole, [r1 - r0, n], in bands of equal rows as that version cut them,
 * made here from the whole matrix's rows, the bits that version's band
 * path computed (pairs j < i as (p[j], p[i]), the diagonal zero). Every
 * mix of old and new tiles whose rows cover the matrix joins (every tile
 * old too); one that leaves rows in no tile (an old tile after a new one:
 * equal-pair bands end before equal-row ones) fails saying which rows,
 * as the coverage computed here independently predicts. Into the row's
 * buffer and into a file, on a pool of 2; float64, float32, and Vincenty
 * with non-converged NaN pairs, counted once a pair as the whole job
 * counts them. A tile of any other shape (a column short, a row more, a
 * column more, new rows whole, flat), another dtype or missing fails with
 * T_EIO naming the tile, and nothing is written.
 *
 * White-box (compute/sched/sched_int.h): a bare sched with only what the join
 * reads (its pool, row_max, tmp_counter).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compute/array/parts.h"
#include "compute/kinds/kinds.h"
#include "compute/sched/sched_int.h"
#include "util/pool.h"

#define TILES 4

static pool *g_pool;
static atomic_int g_stop;
static char g_dir[64] = "/tmp/tessel_join_XXXXXX";

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  memset((*out)->data, 0xA5, (size_t)(*out)->size * tdtype_size(dt));
  return 0;
}

/* A square matrix has no other part. */
static int no_part(job_ctx *ctx, int index, const char *name, tarray *a,
                   terr *e) {
  (void)ctx, (void)index, (void)name;
  tarray_free(a);
  return terr_set(e, T_EINTERNAL, "", -1, "a part of a square matrix");
}

/* The geodesic kind on params for rows [r0, r1) (r1 = 0: the whole job),
 * on the cpu backend with a pool of 2, as a worker runs a tile. */
static tarray *run(const char *params, int64_t r0, int64_t r1,
                   int64_t *nonconv, terr *e) {
  json_t *p = json_loads(params, 0, NULL);
  tenv env;
  memset(&env, 0, sizeof env);
  env.max_elems = INT64_MAX;
  void *plan = NULL;
  int rc = p ? kind_geodesic_ops.prepare(p, &env, &plan, e)
             : terr_set(e, T_EINVAL, "", -1, "bad params");
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.job_id = "j_join";
  ctx.pool = g_pool;
  ctx.threads = 2;
  ctx.stop = &g_stop;
  ctx.result_alloc = heap_alloc;
  ctx.result_part = no_part;
  ctx.row0 = r0;
  ctx.row1 = r1;
  tarray *res = NULL;
  if (!rc) rc = kind_geodesic_ops.run(plan, B_CPU, &ctx, &res, e);
  if (rc) {
    tarray_free(res);
    res = NULL;
  }
  *nonconv = ctx.nonconverged;
  if (plan) kind_geodesic_ops.release(plan);
  json_decref(p);
  return res;
}

/* Join a[] on a bare sched: into a buffer (row_max big) or a file. The
 * joined matrix, or NULL with rc / e set. */
static tarray *join(tarray **a, int64_t n, int to_file, int64_t *nonconv,
                    int *rc, terr *e) {
  sched *s = calloc(1, sizeof *s);
  char path[128];
  snprintf(path, sizeof path, "%s/j.npy", g_dir);
  unlink(path);
  if (!s) return NULL;
  s->pool = g_pool;
  s->row_max = to_file ? 0 : (int64_t)1 << 30;
  void *npy = NULL;
  size_t len = 0;
  tpart info;
  memset(&info, 0, sizeof info);
  *nonconv = -1;
  terr_clear(e);
  *rc = sched_split_join_square(s, a, TILES, n, path, &npy, &len, &info,
                                nonconv, e);
  tarray *m = NULL;
  if (*rc) {
    CHECK_MSG(!npy && access(path, F_OK) != 0, "a failed join wrote %s",
              npy ? "a buffer" : path);
  } else if (to_file) {
    CHECK_MSG(!npy, "a file join gave a buffer");
    CHECK(tarray_map_npy(path, &m, e) == 0);
  } else {
    CHECK_MSG(npy && access(path, F_OK) != 0, "a buffer join wrote a file");
    CHECK(npy && npy_parse_result(npy, len, INT64_MAX, &m, e) == 0);
  }
  if (m)
    CHECK(info.ndim == 2 && info.shape[0] == n && info.shape[1] == n &&
          info.dtype == m->dtype &&
          info.bytes == n * n * (int64_t)tdtype_size(m->dtype));
  free(npy);
  unlink(path);
  free(s);
  return m;
}

/* Rows [r0, r1) of the whole matrix w, whole: the previous version's tile
 * (its bands cut by equal rows, sched_split_rows with tri 0). */
static tarray *old_tile(const tarray *w, int64_t r0, int64_t r1) {
  int64_t n = w->shape[0], sh[2] = {r1 - r0, n};
  tarray *a = tarray_new(w->dtype, 2, sh);
  size_t es = tdtype_size(w->dtype);
  if (a) memcpy(a->data, (char *)w->data + (size_t)(r0 * n) * es,
                (size_t)((r1 - r0) * n) * es);
  return a;
}

static void check_join(const char *what, const char *params, int64_t n,
                       int want_nan) {
  terr e;
  CHECK(n <= 1024);
  int64_t ncw = 0;
  tarray *w = run(params, 0, 0, &ncw, &e);
  CHECK_MSG(w && w->ndim == 2 && w->shape[0] == n && w->shape[1] == n,
            "%s: whole: %s", what, w ? "shape" : e.message);
  if (!w) return;
  CHECK_MSG(!want_nan || ncw > 0, "%s: no non-converged pair to count", what);
  tarray *up[TILES] = {0}, *old[TILES] = {0};
  int64_t E[TILES + 1], Q[TILES + 1]; /* equal pairs (now), equal rows */
  for (int t = 0; t < TILES; t++) {
    int64_t nc;
    sched_split_rows(n, t, TILES, 1, &E[t], &E[t + 1]);
    sched_split_rows(n, t, TILES, 0, &Q[t], &Q[t + 1]);
    up[t] = run(params, E[t], E[t + 1], &nc, &e);
    old[t] = old_tile(w, Q[t], Q[t + 1]);
    CHECK_MSG(up[t] && up[t]->shape[1] == n - E[t] && old[t],
              "%s: tile %d: %s", what, t, up[t] ? "shape" : e.message);
    if (!up[t] || !old[t]) goto done;
  }
  CHECK_MSG(E[1] != Q[1] && E[2] != Q[2], "%s: the two cuts are one", what);
  /* every mix: bit t set, tile t is the previous version's */
  size_t es = tdtype_size(w->dtype);
  int joined_old = 0, gaps = 0;
  for (int mix = 0; mix < 1 << TILES; mix++)
    for (int f = 0; f < 2; f++) {
      tarray *a[TILES];
      char in[1024] = {0}; /* row i is in some tile */
      for (int t = 0; t < TILES; t++) {
        int old_t = mix >> t & 1;
        a[t] = old_t ? old[t] : up[t];
        int64_t r0 = old_t ? Q[t] : E[t], r1 = old_t ? Q[t + 1] : E[t + 1];
        for (int64_t i = r0; i < r1 && i < 1024; i++) in[i] = 1;
      }
      int64_t covered = 0; /* rows [0, covered) are */
      while (covered < n && in[covered]) covered++;
      int64_t nc;
      int rc;
      tarray *m = join(a, n, f, &nc, &rc, &e);
      if (covered < n) { /* rows no tile has: a clear refusal */
        gaps++;
        CHECK_MSG(rc == T_EIO && !m && strstr(e.message, "in no tile"),
                  "%s, old tiles %#x: rows [%lld, ...) in no tile: rc %d %s",
                  what, mix, (long long)covered, rc, e.message);
        tarray_free(m);
        continue;
      }
      joined_old += mix != 0;
      CHECK_MSG(rc == 0 && m, "%s, old tiles %#x, %s: rc %d %s", what, mix,
                f ? "file" : "buffer", rc, e.message);
      CHECK_MSG(m && m->dtype == w->dtype && m->size == n * n &&
                    memcmp(m->data, w->data, (size_t)(n * n) * es) == 0,
                "%s, old tiles %#x, %s: not the whole matrix's bytes", what,
                mix, f ? "file" : "buffer");
      CHECK_MSG(nc == ncw, "%s, old tiles %#x: %lld NaN pairs, whole %lld",
                what, mix, (long long)nc, (long long)ncw);
      tarray_free(m);
    }
  CHECK_MSG(joined_old >= 2 * 4 && gaps > 0, "%s: %d old joins, %d gaps",
            what, joined_old, gaps);
  if (getenv("TEST_VERBOSE"))
    printf("%s: %d joins with old tiles, %d mixes with a gap\n", what,
           joined_old / 2, gaps / 2);
  /* Tile 2 of a shape that is neither form, of another dtype, or missing:
   * T_EIO naming it, nothing written (join checks). */
  int64_t h = E[3] - E[2], hq = Q[3] - Q[2];
  struct {
    int ndim;
    int64_t sh[2];
    int other_dtype;
    const char *says;
  } bad[] = {
      {2, {h, n - E[2] - 1}, 0, "is not the upper part of rows"},
      {2, {hq + 1, n}, 0, "is not the upper part of rows"},
      {2, {hq, n + 1}, 0, "is not the upper part of rows"},
      {2, {h - 1, n - E[2]}, 0, "is not the upper part of rows"},
      {2, {h, n}, 0, "is not the upper part of rows"}, /* h != hq */
      {1, {h * (n - E[2])}, 0, "is not the upper part of rows"},
      {2, {h, n - E[2]}, 1, "of another dtype"},
      {0, {0}, 0, "is missing"},
  };
  CHECK(h != hq);
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    tdtype dt = bad[k].other_dtype ? (w->dtype == T_F64 ? T_F32 : T_F64)
                                   : w->dtype;
    tarray *x = bad[k].ndim ? tarray_zeros(dt, bad[k].ndim, bad[k].sh) : NULL;
    tarray *a[TILES] = {up[0], up[1], x, up[3]};
    int64_t nc;
    int rc;
    tarray *m = join(a, n, (int)(k & 1), &nc, &rc, &e);
    CHECK_MSG(rc == T_EIO && !m, "%s, bad tile %zu: rc %d", what, k, rc);
    CHECK_MSG(strstr(e.message, "tile 2") && strstr(e.message, bad[k].says),
              "%s, bad tile %zu: %s", what, k, e.message);
    tarray_free(m);
    tarray_free(x);
  }
done:
  for (int t = 0; t < TILES; t++) {
    tarray_free(up[t]);
    tarray_free(old[t]);
  }
  tarray_free(w);
}

#define PTS(n, s)                                                           \
  "{\"points\":{\"random\":{\"shape\":[" #n ",2],\"low\":-80,\"high\":80," \
  "\"seed\":" #s "}}"

TEST(old_tiles_join_as_whole_rows) {
  check_join("float64", PTS(203, 1) "}", 203, 0);
  check_join("float32", PTS(157, 2) ",\"dtype\":\"float32\"}", 157, 0);
  /* pairs of nearly antipodal points: Vincenty's NaNs, counted once a pair */
  char buf[8192];
  size_t off = (size_t)snprintf(buf, sizeof buf,
                                "{\"method\":\"vincenty\",\"points\":[");
  for (int i = 0; i < 120; i++) {
    double lat = (i % 2 ? -1 : 1) * (0.3 + 0.001 * i);
    double lon = (i % 2 ? 179.7 : 0) + 0.0001 * i;
    off += (size_t)snprintf(buf + off, sizeof buf - off, "%s[%.6f,%.6f]",
                            i ? "," : "", lat, lon);
  }
  snprintf(buf + off, sizeof buf - off, "]}");
  check_join("vincenty", buf, 120, 1);
}

/* Pairs j > i of rows [r0, r1) of n points, one row at a time. */
static int64_t pairs_of(int64_t n, int64_t r0, int64_t r1) {
  int64_t p = 0;
  for (int64_t i = r0; i < r1; i++) p += n - 1 - i;
  return p;
}

/* A condensed split job's tiles concatenate; sched_split_condensed_check
 * says when that is the matrix: every tile cut as this version cuts
 * (equal pairs) or as the one before (equal rows), in any mix whose rows
 * follow on from 0 to n (predicted here from the two cuts' row ranges),
 * and nothing else: a pair more or less, a tile in the other cut's place,
 * a negative length. */
TEST(condensed_tiles_must_cut_the_matrix) {
  const int64_t sizes[] = {7, 1000, 4099};
  for (int si = 0; si < 3; si++) {
    int64_t n = sizes[si];
    for (int tiles = 1; tiles <= 4; tiles++) {
      int64_t r0[2][4], r1[2][4];
      for (int t = 0; t < tiles; t++)
        for (int f = 0; f < 2; f++)
          sched_split_rows(n, t, tiles, !f, &r0[f][t], &r1[f][t]);
      for (int mix = 0; mix < (1 << tiles); mix++) { /* bit t: tile t old */
        int64_t len[4], cur = 0;
        int contiguous = 1;
        for (int t = 0; t < tiles; t++) {
          int f = (mix >> t) & 1;
          len[t] = pairs_of(n, r0[f][t], r1[f][t]);
          contiguous &= r0[f][t] == cur;
          cur = r1[f][t];
        }
        contiguous &= cur == n;
        terr e = {0};
        int rc = sched_split_condensed_check(len, tiles, n, &e);
        CHECK_MSG((rc == T_OK) == contiguous, "n %lld, %d tiles, mix %d: "
                  "rc %d (%s), contiguous %d", (long long)n, tiles, mix, rc,
                  e.message, contiguous);
        if (!contiguous) CHECK(rc == T_EIO && strstr(e.message, "again"));
        if (!contiguous || n < 1000) continue;
        for (int t = 0; t < tiles; t++) { /* one pair more, one less */
          for (int d = -1; d <= 1; d += 2) {
            len[t] += d;
            terr e2 = {0};
            CHECK(sched_split_condensed_check(len, tiles, n, &e2) == T_EIO);
            len[t] -= d;
          }
        }
        len[0] = -1;
        terr e3 = {0};
        CHECK(sched_split_condensed_check(len, tiles, n, &e3) == T_EIO);
      }
    }
  }
}

int main(void) {
  t_log_level = T_LOG_ERROR; /* Vincenty's NaNs are warned of, and wanted */
  if (!mkdtemp(g_dir)) SKIP_ALL("cannot create a temp dir");
  g_pool = pool_create(2, NULL, NULL);
  RUN(old_tiles_join_as_whole_rows);
  RUN(condensed_tiles_must_cut_the_matrix);
  pool_destroy(g_pool);
  rmdir(g_dir);
  return check_summary();
}
