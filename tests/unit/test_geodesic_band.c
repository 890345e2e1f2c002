/* test_geodesic_band.c — the tiles of a split job on the CPU: the geodesic
 * kind run with job_ctx row0/row1 (compute/kinds/geodesic/kind.c, geod_plan_rows)
 * gives exactly those rows of the whole job's result, every part, bit for
 * bit.
 *
 * Through the kind's prepare/run (as the scheduler calls it), serial and
 * cpu (a pool of 2): a square matrix (a tile is its rows' upper part,
 * columns [r0, n): its pairs j > i are the whole's, bit for bit, j <= i
 * zero, and the bands' non-converged counts and NaNs the whole's), condensed, with targets, float32,
 * vincenty (with non-converged NaNs, counted once a pair: the bands' counts
 * add up to the whole's), haversine (larger CPU tiles), knn with and without targets
 * (indices global), rowwise sum / argmin / max / count within; bands cut as
 * a split job cuts them (T = 3 and 7) and an odd one; poisoned outputs.
 * A radius query and a bad band are refused.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/kinds.h"
#include "util/pool.h"

static pool *g_pool;
static atomic_int g_stop;

typedef struct parts {
  int n;
  tarray *a[JOB_MAX_PARTS];
} parts;

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  memset((*out)->data, 0xA5, (size_t)(*out)->size * tdtype_size(dt));
  return 0;
}

static int keep_part(job_ctx *ctx, int index, const char *name, tarray *a,
                     terr *e) {
  (void)name, (void)e;
  parts *p = ctx->ud;
  if (index > 0) p->a[index] = a; /* part 0 is the run's result */
  if (index + 1 > p->n) p->n = index + 1;
  return 0;
}

static void parts_free(parts *p) {
  for (int i = 0; i < JOB_MAX_PARTS; i++) tarray_free(p->a[i]);
  memset(p, 0, sizeof *p);
}

/* Run params on b for rows [r0, r1) (r1 = 0: all) into *out (parts). */
static int run(const char *params, tbackend b, int64_t r0, int64_t r1,
               parts *out, int64_t *nonconv, terr *e) {
  json_error_t je;
  json_t *p = json_loads(params, 0, &je);
  tenv env;
  memset(&env, 0, sizeof env);
  env.max_elems = INT64_MAX;
  void *plan = NULL;
  memset(out, 0, sizeof *out);
  int rc = kind_geodesic_ops.prepare(p, &env, &plan, e);
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.job_id = "j_band";
  ctx.pool = g_pool;
  ctx.threads = b == B_SERIAL ? 1 : 2;
  ctx.stop = &g_stop;
  ctx.result_alloc = heap_alloc;
  ctx.result_part = keep_part;
  ctx.ud = out;
  ctx.row0 = r0;
  ctx.row1 = r1;
  tarray *res = NULL;
  if (!rc) rc = kind_geodesic_ops.run(plan, b, &ctx, &res, e);
  if (!rc) {
    out->a[0] = res;
    if (out->n == 0) out->n = 1;
  } else {
    parts_free(out);
  }
  *nonconv = ctx.nonconverged;
  kind_geodesic_ops.release(plan);
  json_decref(p);
  return rc;
}

/* Elements of part k before row r: a part's rows are its first axis, a
 * condensed matrix's row r starts at its pdist index. */
static int64_t row_at(const tarray *whole, int condensed, int64_t n,
                      int64_t r) {
  if (condensed) return r * n - r * (r + 1) / 2;
  return r * (whole->ndim > 1 ? whole->shape[1] : 1);
}

static void check(const char *what, const char *params, int condensed,
                  int64_t n) {
  tbackend bs[] = {B_SERIAL, B_CPU};
  /* a square matrix without targets: a tile is its rows' upper part
   * (geod_plan_upper), which the split job's join mirrors */
  int upper = !condensed && !strstr(params, "targets") && !strstr(params, "query");
  for (int bi = 0; bi < 2; bi++) {
    parts whole;
    int64_t ncw = 0;
    terr e;
    int rc = run(params, bs[bi], 0, 0, &whole, &ncw, &e);
    CHECK_MSG(rc == 0, "%s: whole: %s", what, e.message);
    if (rc) continue;
    int cuts[] = {3, 7, 2};
    for (int v = 0; v < 3; v++) {
      int T = cuts[v];
      int64_t ncs = 0, nan_upper = 0;
      for (int t = 0; t < T; t++) {
        int64_t r0 = n * t / T, r1 = n * (t + 1) / T;
        if (v == 2) r0 = t == 0 ? 1 : 130, r1 = t == 0 ? 130 : n - 1;
        parts b;
        int64_t nc = 0;
        rc = run(params, bs[bi], r0, r1, &b, &nc, &e);
        CHECK_MSG(rc == 0, "%s: band [%lld, %lld): %s", what, (long long)r0,
                  (long long)r1, e.message);
        if (rc) continue;
        ncs += nc;
        CHECK_MSG(b.n == whole.n, "%s: %d parts, whole %d", what, b.n, whole.n);
        if (upper) { /* rows x columns [r0, n): the pairs j > i are the whole's */
          const tarray *w = whole.a[0], *u = b.a[0];
          size_t es = tdtype_size(w->dtype);
          int64_t wd = n - r0, bad = 0;
          CHECK_MSG(u && u->ndim == 2 && u->shape[0] == r1 - r0 &&
                        u->shape[1] == wd && u->dtype == w->dtype,
                    "%s: upper band [%lld, %lld): shape", what, (long long)r0,
                    (long long)r1);
          for (int64_t i = r0; u && u->size == (r1 - r0) * wd && i < r1; i++) {
            const char *x = (const char *)u->data + (size_t)((i - r0) * wd + i + 1 - r0) * es;
            bad += memcmp(x, (char *)w->data + (size_t)(i * n + i + 1) * es,
                          (size_t)(n - i - 1) * es) != 0;
            for (int64_t j = i + 1; j < n; j++) { /* the join's count */
              double d = tarray_get(u, (i - r0) * wd + j - r0);
              nan_upper += d != d;
            }
            for (int64_t j = r0; j <= i; j++) /* j <= i: zero */
              bad += tarray_get(u, (i - r0) * wd + j - r0) != 0.0;
          }
          CHECK_MSG(bad == 0, "%s (%s): upper band [%lld, %lld): %lld rows are "
                    "not the whole's", what, tbackend_name(bs[bi]),
                    (long long)r0, (long long)r1, (long long)bad);
          parts_free(&b);
          continue;
        }
        for (int k = 0; k < whole.n && k < b.n; k++) {
          const tarray *w = whole.a[k];
          size_t es = tdtype_size(w->dtype);
          int64_t at = row_at(w, condensed, n, r0);
          int64_t len = row_at(w, condensed, n, r1) - at;
          CHECK_MSG(b.a[k] && b.a[k]->dtype == w->dtype && b.a[k]->size == len &&
                        memcmp(b.a[k]->data, (char *)w->data + (size_t)at * es,
                               (size_t)len * es) == 0,
                    "%s (%s): part %d of band [%lld, %lld) is not the whole's",
                    what, tbackend_name(bs[bi]), k, (long long)r0,
                    (long long)r1);
        }
        parts_free(&b);
      }
      /* a matrix counts each pair once, in its own row's band (a square
       * one's upper bands: at j > i, where their NaNs are) */
      if (v < 2 && !strstr(params, "query"))
        CHECK_MSG(ncs == ncw && (!upper || nan_upper == ncw),
                  "%s: non-converged %lld (NaN at j > i: %lld), whole %lld",
                  what, (long long)ncs, (long long)nan_upper, (long long)ncw);
    }
    parts_free(&whole);
  }
}

#define PTS(n, s) \
  "{\"points\":{\"random\":{\"shape\":[" #n ",2],\"low\":-80,\"high\":80,\"seed\":" #s "}}"
#define TGT ",\"targets\":{\"random\":{\"shape\":[90,2],\"low\":-60,\"high\":60,\"seed\":77}}"

TEST(test_matrix_bands) {
  check("square", PTS(300, 1) "}", 0, 300);
  check("condensed", PTS(300, 2) ",\"layout\":\"condensed\"}", 1, 300);
  check("targets", PTS(300, 3) TGT "}", 0, 300);
  check("float32", PTS(300, 4) ",\"dtype\":\"float32\"}", 0, 300);
  check("haversine", PTS(1100, 5) ",\"method\":\"haversine\"}", 0, 1100);
  check("haversine condensed f32",
        PTS(1100, 6) ",\"method\":\"haversine\",\"layout\":\"condensed\","
                     "\"dtype\":\"float32\"}", 1, 1100);
}

TEST(test_vincenty_nonconverged) {
  /* pairs of nearly antipodal points: Vincenty gives NaN and counts them */
  char buf[8192];
  size_t off = (size_t)snprintf(buf, sizeof buf, "{\"method\":\"vincenty\",\"points\":[");
  for (int i = 0; i < 200; i++) {
    double lat = (i % 2 ? -1 : 1) * (0.3 + 0.001 * i);
    double lon = (i % 2 ? 179.7 : 0) + 0.0001 * i;
    off += (size_t)snprintf(buf + off, sizeof buf - off, "%s[%.6f,%.6f]",
                            i ? "," : "", lat, lon);
  }
  snprintf(buf + off, sizeof buf - off, "]}");
  check("vincenty", buf, 0, 200);
}

TEST(test_query_bands) {
  check("knn", PTS(300, 7) ",\"query\":{\"knn\":{\"k\":6}}}", 0, 300);
  check("knn targets", PTS(300, 8) TGT ",\"query\":{\"knn\":{\"k\":4}}}", 0, 300);
  check("rowwise sum", PTS(300, 9) ",\"query\":{\"rowwise\":{\"op\":\"sum\"}}}", 0, 300);
  check("rowwise argmin", PTS(300, 10) ",\"query\":{\"rowwise\":{\"op\":\"argmin\"}}}", 0, 300);
  check("rowwise max targets",
        PTS(300, 11) TGT ",\"query\":{\"rowwise\":{\"op\":\"max\"}}}", 0, 300);
  check("rowwise count within",
        PTS(300, 12) ",\"query\":{\"rowwise\":{\"op\":\"count\",\"within\":2000000}}}",
        0, 300);
}

TEST(test_refused) {
  parts p;
  int64_t nc;
  terr e;
  CHECK(run(PTS(50, 1) ",\"query\":{\"radius\":{\"r\":1000}}}", B_CPU, 0, 10,
            &p, &nc, &e) == T_EINVAL);
  CHECK(strcmp(e.field, "params.query") == 0);
  CHECK(run(PTS(50, 1) "}", B_CPU, 10, 60, &p, &nc, &e) == T_EINVAL);
  CHECK(strcmp(e.field, "row") == 0);
  CHECK(run(PTS(50, 1) "}", B_CPU, 10, 10, &p, &nc, &e) == T_EINVAL); /* empty */
  CHECK(run(PTS(50, 1) "}", B_CPU, 20, 10, &p, &nc, &e) == T_EINVAL);
}

int main(void) {
  g_pool = pool_create(2, NULL, NULL);
  if (!g_pool) {
    fprintf(stderr, "pool_create failed\n");
    return 1;
  }
  RUN(test_matrix_bands);
  RUN(test_vincenty_nonconverged);
  RUN(test_query_bands);
  RUN(test_refused);
  pool_destroy(g_pool);
  return check_summary();
}
