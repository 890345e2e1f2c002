/* test_shapes.c — zero-size and overflowing shapes below the HTTP layer
 * (issue 9, items 1 and 11).
 *
 *   tshape_extent / tshape_size follow NumPy's "array is too big": zeros do
 *     not excuse the other dimensions;
 *   an uploaded array whose stored shape is too big is refused by every
 *     kind's check (400 naming the input), and a result over the element
 *     cap is a 413 at submit, for map (broadcast), reduce (a (0, 2^31)
 *     upload over axis 0), matmul and geodesic;
 *   reduce_cpu_run on every zero-size layout (rows, columns, pieces; one
 *     thread and a pool) writes NumPy's empty values and counts progress
 *     0 of 0, where main divided by a zero block width.
 */
#include <stdatomic.h>

#include "check.h"
#include "compute/kinds/exprkind.h"
#include "util/pool.h"

static pool *P;

/* ---- tshape ----------------------------------------------------------------- */
TEST(test_tshape) {
  const int64_t big62 = (int64_t)1 << 62, big60 = (int64_t)1 << 60;
  struct {
    int nd;
    int64_t s[4];
    int64_t extent, size;
  } c[] = {
      {0, {0}, 1, 1},
      {1, {0}, 1, 0},
      {2, {2, 0}, 2, 0},
      {2, {0, big60 - 1}, big60 - 1, 0},
      {2, {0, big60}, -1, -1}, /* 2^63 bytes: NumPy refuses it too */
      {2, {0, big62}, -1, -1},
      {2, {0, INT64_MAX}, -1, -1},
      {3, {0, (int64_t)1 << 32, (int64_t)1 << 32}, -1, -1},
      {3, {(int64_t)1 << 30, 0, (int64_t)1 << 31}, -1, -1},
      {3, {(int64_t)1 << 30, 0, (int64_t)1 << 29}, big60 / 2, 0},
      {2, {3, -1}, -1, -1},
      {2, {big60 / 2, 1}, big60 / 2, big60 / 2},
      {2, {big60 / 2, 2}, -1, -1},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    CHECK_MSG(tshape_extent(c[i].nd, c[i].s) == c[i].extent, "case %zu: %lld",
              i, (long long)tshape_extent(c[i].nd, c[i].s));
    CHECK_MSG(tshape_size(c[i].nd, c[i].s, INT64_MAX) == c[i].size,
              "case %zu: %lld", i,
              (long long)tshape_size(c[i].nd, c[i].s, INT64_MAX));
  }
  int64_t s[2] = {3, 4};
  CHECK(tshape_size(2, s, 12) == 12 && tshape_size(2, s, 11) == -1);
  /* tarray_new refuses what tshape refuses, and makes empty arrays */
  int64_t z[2] = {0, big62};
  CHECK(tarray_new(T_F64, 2, z) == NULL);
  z[1] = 5;
  tarray *a = tarray_new(T_F32, 2, z);
  CHECK(a && a->size == 0 && a->data);
  tarray_free(a);
}

/* ---- kinds' checks ------------------------------------------------------------ */
/* Fake uploads: the id's third character picks the shape. */
static const int64_t SHAPES[][3] = {
    {0, (int64_t)1 << 62, 0},          /* 'a_0': too big */
    {0, (int64_t)1 << 31, 0},          /* 'a_1': fine, empty */
    {0, 1, (int64_t)1 << 31},          /* 'a_2' */
    {0, (int64_t)1 << 31, 1},          /* 'a_3' */
    {0, 2, 0},                         /* 'a_4': (0, 2) points */
};
static const int NDIMS[] = {2, 2, 3, 3, 2};

static int meta(void *ud, const char *owner, const char *id, tdtype *dt,
                int *ndim, int64_t *shape, terr *e) {
  int k = id[2] - '0';
  if (k < 0 || k > 4) return terr_set(e, T_ENOTFOUND, "", -1, "not found");
  *dt = T_F64;
  *ndim = NDIMS[k];
  for (int d = 0; d < *ndim; d++) shape[d] = SHAPES[k][d];
  return 0;
}

static const tenv ENV = {.owner = "", .array_meta = meta, .max_elems = 2000000000};

static int check_job(const kind_ops *k, const char *params, terr *e) {
  json_t *p = json_loads(params, 0, NULL);
  job_estimate est;
  terr_clear(e);
  int rc = k->check(p, &ENV, &est, e);
  json_decref(p);
  return rc;
}

#define ID(c) "{\"array\":\"a_" c "0000000000000000000000000\"}"

TEST(test_kind_checks) {
  terr e;
  /* a stored shape NumPy refuses: 400 naming the input, in every kind */
  CHECK(check_job(&kind_map_ops, "{\"expr\":\"x\",\"inputs\":{\"x\":" ID("0")
                  "}}", &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs.x");
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"sum\",\"inputs\":{\"x\":" ID("0")
                  "},\"axis\":0}", &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs.x");
  CHECK(check_job(&kind_matmul_ops, "{\"a\":" ID("0") ",\"b\":[1]}", &e) ==
        T_EINVAL);
  CHECK_STR(e.field, "params.a");
  /* (0, 2^31): fine in, but over axis 0 it is 2^31 outputs */
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"sum\",\"inputs\":{\"x\":" ID("1")
                  "},\"axis\":0}", &e) == T_ETOOLARGE);
  CHECK_STR(e.field, "params");
  CHECK(strstr(e.message, "2147483648 elements") != NULL);
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"sum\",\"inputs\":{\"x\":" ID("1")
                  "},\"axis\":1}", &e) == 0);
  CHECK(check_job(&kind_map_ops, "{\"expr\":\"x*2\",\"inputs\":{\"x\":" ID("1")
                  "}}", &e) == 0);
  /* (0,1,2^31) + (0,2^31,1): each fine, the broadcast too big */
  CHECK(check_job(&kind_map_ops, "{\"expr\":\"x+y\",\"inputs\":{\"x\":" ID("2")
                  ",\"y\":" ID("3") "}}", &e) == T_ETOOLARGE);
  CHECK_STR(e.field, "params.inputs");
  /* matmul whose result passes the element cap: [2^31 x 1] @ [1 x 2] */
  CHECK(check_job(&kind_matmul_ops,
                  "{\"a\":{\"random\":{\"shape\":[1500000000,1]}},\"b\":[[1,2]]}",
                  &e) == T_ETOOLARGE);
  CHECK_STR(e.field, "params");
  /* geodesic: no point is a 400 naming the field */
  CHECK(check_job(&kind_geodesic_ops, "{\"points\":" ID("4") "}", &e) ==
        T_EINVAL);
  CHECK_STR(e.field, "params.points");
  /* min of an empty axis: NumPy raises, here a 400 at submit */
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"max\",\"inputs\":{\"x\":" ID("4")
                  "},\"axis\":0}", &e) == T_EINVAL);
  CHECK_STR(e.field, "params.axis");
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"argmin\",\"inputs\":{\"x\":"
                  "[[],[]]}}", &e) == T_EINVAL);
  CHECK_STR(e.field, "params.inputs");
  CHECK(check_job(&kind_reduce_ops, "{\"op\":\"argmax\",\"inputs\":{\"x\":"
                  ID("4") "},\"axis\":1}", &e) == 0); /* empty result */
}

/* ---- reduce_cpu_run on zero-size work ------------------------------------------ */
static double empty_value(reduce_op op) {
  switch (op) {
    case R_SUM: case R_NORM: return 0;
    case R_PROD: return 1;
    default: return NAN;
  }
}

TEST(test_reduce_cpu_zero_size) {
  static const struct {
    int nd;
    int64_t s[3];
  } shapes[] = {{1, {0}},       {2, {2, 0}},    {2, {0, 3}},
                {3, {2, 0, 3}}, {3, {3, 2, 0}}, {2, {0, 0}},
                {2, {1, 0}},    {2, {70000, 0}}, {2, {0, 70000}},
                {3, {0, 1, 5}}};
  int cases = 0, bad = 0;
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    tarray *x = tarray_new(T_F64, shapes[k].nd, shapes[k].s);
    const tarray *in[1] = {x};
    expr *ex = NULL;
    terr e;
    CHECK(expr_compile("x*2 + 1", &ex, &e) == 0);
    for (int axis = -1; axis < shapes[k].nd; axis++)
      for (int op = 0; op < R__COUNT; op++)
        for (int width = 1; width <= 3; width += 2) {
          if (op == R_MIN || op == R_MAX || op == R_ARGMIN || op == R_ARGMAX)
            continue; /* refused at submit when the axis is empty */
          reduce_spec r = {.x = ex, .inputs = in, .ndim = shapes[k].nd,
                           .shape = shapes[k].s, .op = (reduce_op)op,
                           .axis = axis, .ddof = op == R_VAR ? 1 : 0};
          int ond;
          int64_t osh[T_MAXDIM];
          reduce_out_shape(&r, &ond, osh);
          tarray *out = tarray_new(T_F64, ond, osh);
          for (int64_t i = 0; i < out->size; i++) tarray_set(out, i, -7);
          atomic_int stop = 0;
          job_ctx ctx;
          memset(&ctx, 0, sizeof ctx);
          ctx.pool = width > 1 ? P : NULL;
          ctx.threads = width;
          ctx.stop = &stop;
          int rc = reduce_cpu_run(&r, out, &ctx, width, &e);
          int ok = rc == 0 && reduce_cpu_chunks(&r) == 0 &&
                   atomic_load(&ctx.progress_done) ==
                       atomic_load(&ctx.progress_total);
          double want = empty_value((reduce_op)op);
          for (int64_t i = 0; ok && i < out->size; i++) {
            double v = tarray_get(out, i);
            ok = isnan(want) ? isnan(v) : v == want;
          }
          if (!ok && bad < 10)
            fprintf(stderr, "shape %zu axis %d op %s width %d: rc %d\n", k,
                    axis, reduce_op_name((reduce_op)op), width, rc);
          bad += !ok;
          cases++;
          tarray_free(out);
        }
    expr_free(ex);
    tarray_free(x);
  }
  CHECK_MSG(bad == 0, "%d of %d wrong", bad, cases);
}

int main(void) {
  P = pool_create(3, NULL, NULL);
  RUN(test_tshape);
  RUN(test_kind_checks);
  RUN(test_reduce_cpu_zero_size);
  pool_destroy(P);
  return check_summary();
}
