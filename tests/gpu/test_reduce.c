/* test_reduce.c — gpu_reduce on a real GPU against the CPU backend.
 *
 * The reference is the CPU backend's own reduction (reduce_cpu_run, what
 * kind_reduce runs on the CPU), on random non-zero inputs; outputs are
 * NaN-poisoned. Agreement within the reduce kind's compare tolerance
 * (|gpu - cpu| <= 1e-12 + 1e-9*|cpu| for float64 results, 1e-6 + 1e-5*|cpu|
 * for float32), and argmin/argmax exactly. Cases: every op over the whole
 * array, the last axis (rows layout) and a middle/first axis (columns
 * layout); float32 inputs; broadcast and scalar inputs; NaN inputs (min,
 * max, argmin propagate the first NaN like NumPy); empty reductions (sum 0,
 * mean NaN); zero-size work of every layout (answered on the host, no
 * launch); inputs bigger than the pinned slots: whole slabs, slabs split
 * along the axis (rows and columns), and every GPU; resident uploads (the
 * second run's h2d is 0); cancellation mid-job.
 * Exits 77 ("SKIPPED: no CUDA device") without a GPU.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "compute/expr/expr.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/exprkind.h"
#include "gpu_test_util.h"

static const char *opname(int op) { return reduce_op_name((reduce_op)op); }

/* argmin/argmax: int64 indices, as the reduce kind stores them */
static tdtype out_dt(int op, tdtype dt) {
  return (op == R_ARGMIN || op == R_ARGMAX) ? T_I64 : dt;
}

/* Run op over `axis` on GPU dev and CPU; compare. Returns the job's h2d. */
static double check_reduce(int dev, const char *src, int op, int axis,
                           tdtype dt, int nin, const int *nds,
                           const int64_t (*shapes)[4], const char *const *ids,
                           uint64_t seed, double lo, double hi, int nan_at) {
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK_MSG(expr_compile(src, &x, &e) == 0, "%s", e.message);
  if (!x) return -1;
  tarray *in[4];
  int bnd = 0;
  int64_t bsh[T_MAXDIM];
  for (int i = 0; i < nin; i++) {
    in[i] = tu_random(dt, nds[i], shapes[i], seed + (uint64_t)i, lo, hi);
    if (nds[i] > bnd) bnd = nds[i];
  }
  if (nan_at >= 0 && nan_at < in[0]->size) tarray_set(in[0], nan_at, NAN);
  for (int d = 0; d < bnd; d++) bsh[d] = 1;
  for (int i = 0; i < nin; i++)
    for (int k = 0; k < nds[i]; k++)
      if (shapes[i][k] != 1) bsh[bnd - nds[i] + k] = shapes[i][k];
  reduce_spec r = {.x = x, .inputs = (const tarray *const *)in, .ndim = bnd,
                   .shape = bsh, .op = (reduce_op)op, .axis = axis, .ddof = 0};
  int ond;
  int64_t osh[T_MAXDIM];
  reduce_out_shape(&r, &ond, osh);
  tdtype odt = out_dt(op, dt);
  tarray *ref = tu_poisoned(odt, ond, osh), *out = tu_poisoned(odt, ond, osh);
  tu_job jc, j;
  tu_job_init(&jc, dev);
  CHECK_MSG(reduce_cpu_run(&r, ref, &jc.ctx, 1, &e) == 0, "%s", e.message);
  tu_job_init(&j, dev);
  int rc = gpu_reduce(dev, (reduce_op)op, x, (const tarray *const *)in, ids,
                      axis, out, &j.ctx, &e);
  CHECK_MSG(rc == 0, "%s %s axis %d: %s", opname(op), src, axis, e.message);
  double rtol = odt == T_F64 ? 1e-9 : 1e-5, atol = odt == T_F64 ? 1e-12 : 1e-6;
  if (op == R_ARGMIN || op == R_ARGMAX) rtol = atol = 0;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < ref->size; i++) {
    double a = tarray_get(out, i), b = tarray_get(ref, i);
    int ok = (isnan(a) && isnan(b)) || a == b || fabs(a - b) <= atol + rtol * fabs(b);
    if (!ok && bad++ == 0) first = i;
  }
  CHECK_MSG(bad == 0,
            "dev %d %s(%s) axis %d %s: %lld bad of %lld, first [%lld] gpu %.17g "
            "cpu %.17g",
            dev, opname(op), src, axis, tdtype_name(dt), (long long)bad,
            (long long)ref->size, (long long)first,
            first >= 0 ? tarray_get(out, first) : 0.0,
            first >= 0 ? tarray_get(ref, first) : 0.0);
  double h2d = j.ctx.t_h2d;
  for (int i = 0; i < nin; i++) tarray_free(in[i]);
  tarray_free(ref);
  tarray_free(out);
  expr_free(x);
  return h2d;
}

TEST(every_op_every_layout) {
  /* [37, 1001, 13]: whole, axis 2 (rows, inner 1), axis 1 and 0 (columns). */
  const int64_t s[4][4] = {{37, 1001, 13}};
  const int nd[1] = {3};
  const int axes[4] = {-1, 2, 1, 0};
  for (int op = 0; op < R__COUNT; op++)
    for (int a = 0; a < 4; a++)
      check_reduce(0, "x*x - x", op, axes[a], T_F64, 1, nd, s, NULL,
                   100 + (uint64_t)op, -2, 2, -1);
}

TEST(float32_and_broadcast) {
  const int64_t s[4][4] = {{100, 10000}, {10000}, {1}};
  const int nd[3] = {2, 1, 1};
  for (int op = 0; op < R__COUNT; op++) {
    check_reduce(0, "x*w + c", op, 1, T_F32, 3, nd, s, NULL, 200, 0.1, 2, -1);
    check_reduce(0, "x*w + c", op, 0, T_F32, 3, nd, s, NULL, 201, -2, 2, -1);
  }
  check_reduce(0, "x*w + c", R_SUM, -1, T_F64, 3, nd, s, NULL, 202, -2, 2, -1);
}

TEST(nan_and_empty) {
  const int64_t s[4][4] = {{50, 400}};
  const int nd[1] = {2};
  const int ops[5] = {R_MIN, R_MAX, R_ARGMIN, R_ARGMAX, R_SUM};
  for (int k = 0; k < 5; k++) {
    check_reduce(0, "x", ops[k], -1, T_F64, 1, nd, s, NULL, 300, -2, 2, 777);
    check_reduce(0, "x", ops[k], 1, T_F64, 1, nd, s, NULL, 301, -2, 2, 777);
    check_reduce(0, "x", ops[k], 0, T_F64, 1, nd, s, NULL, 302, -2, 2, 777);
  }
  const int64_t z[4][4] = {{0, 5}};
  const int zops[5] = {R_SUM, R_MEAN, R_PROD, R_VAR, R_NORM};
  for (int k = 0; k < 5; k++) {
    check_reduce(0, "x", zops[k], -1, T_F64, 1, nd, z, NULL, 303, -2, 2, -1);
    check_reduce(0, "x", zops[k], 0, T_F64, 1, nd, z, NULL, 304, -2, 2, -1);
  }
}

/* Zero-size work on every layout: a 0 leading, in the middle, trailing,
 * on the reduced axis or not, and an empty input broadcast against
 * another (issue 9 item 1). gpu_reduce must answer on the host (no launch
 * of 0 blocks) with NumPy's values, the CPU's, and leave the GPU healthy.
 * min/max/argmin/argmax over an empty axis are refused at submit, so they
 * are run only where the reduced axis is not empty. */
TEST(zero_size) {
  static const struct {
    int nin, nd[2];
    int64_t s[2][4];
  } shapes[] = {
      {1, {2, 0}, {{2, 0}}},       {1, {2, 0}, {{0, 3}}},
      {1, {3, 0}, {{2, 0, 3}}},    {1, {3, 0}, {{3, 2, 0}}},
      {1, {2, 0}, {{1, 0}}},       {1, {1, 0}, {{0}}},
      {2, {1, 2}, {{0}, {3, 1}}},  {2, {3, 2}, {{2, 0, 3}, {0, 1}}},
  };
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    int nd = shapes[k].nd[0] > shapes[k].nd[1] ? shapes[k].nd[0]
                                                : shapes[k].nd[1];
    int64_t bsh[4] = {1, 1, 1, 1};
    for (int i = 0; i < shapes[k].nin; i++)
      for (int d = 0; d < shapes[k].nd[i]; d++)
        if (shapes[k].s[i][d] != 1)
          bsh[nd - shapes[k].nd[i] + d] = shapes[k].s[i][d];
    for (int axis = -1; axis < nd; axis++) {
      int64_t len = 1;
      for (int d = 0; d < nd; d++)
        if (axis < 0 || d == axis) len *= bsh[d];
      for (int op = 0; op < R__COUNT; op++) {
        int noid = op == R_MIN || op == R_MAX || op == R_ARGMIN ||
                   op == R_ARGMAX;
        if (noid && len == 0) continue;
        check_reduce(0, shapes[k].nin == 1 ? "x*2" : "x + y", op, axis,
                     (k % 2) ? T_F32 : T_F64, shapes[k].nin, shapes[k].nd,
                     shapes[k].s, NULL, 400 + k, -2, 2, -1);
      }
    }
  }
  CHECK(gpu_healthy(0));
}

TEST(streamed_big) {
  /* More than a pinned slot (4 M float64): whole slabs; slabs split along
   * the axis in the rows layout and in the columns layout. */
  const int64_t a[4][4] = {{9000001}};
  const int nda[1] = {1};
  check_reduce(0, "x*x + 1", R_SUM, -1, T_F64, 1, nda, a, NULL, 400, -2, 2, -1);
  check_reduce(0, "x", R_VAR, -1, T_F64, 1, nda, a, NULL, 401, -2, 2, -1);
  check_reduce(0, "x", R_ARGMAX, -1, T_F64, 1, nda, a, NULL, 402, -2, 2, -1);
  const int64_t b[4][4] = {{3, 5000000}};
  const int ndb[1] = {2};
  check_reduce(0, "x", R_MEAN, 1, T_F64, 1, ndb, b, NULL, 403, -2, 2, -1);
  check_reduce(0, "x", R_NORM, 1, T_F32, 1, ndb, b, NULL, 404, -2, 2, -1);
  const int64_t c[4][4] = {{3000000, 3}};
  check_reduce(0, "x", R_STD, 0, T_F64, 1, ndb, c, NULL, 405, -2, 2, -1);
  check_reduce(0, "x", R_ARGMIN, 0, T_F64, 1, ndb, c, NULL, 406, -2, 2, -1);
  const int64_t d[4][4] = {{200, 50000}};
  check_reduce(0, "x", R_MAX, 1, T_F64, 1, ndb, d, NULL, 407, -2, 2, -1);
  /* too wide to split (inner > a slot): uploaded whole instead */
  const int64_t w[4][4] = {{3, 5000000}};
  check_reduce(0, "x", R_SUM, 0, T_F64, 1, ndb, w, NULL, 408, -2, 2, -1);
  for (int dev = 1; dev < gpu_count(); dev++)
    check_reduce(dev, "x*x", R_SUM, -1, T_F64, 1, nda, a, NULL, 409, -2, 2, -1);
}

TEST(resident) {
  const int64_t a[4][4] = {{6000000}};
  const int nda[1] = {1};
  const char *ids[1] = {"a_TESTREDUCERESIDENT"};
  double h1 = check_reduce(0, "x", R_SUM, -1, T_F64, 1, nda, a, ids, 500, -2, 2, -1);
  double h2 = check_reduce(0, "x", R_SUM, -1, T_F64, 1, nda, a, ids, 500, -2, 2, -1);
  CHECK(h1 > 0);
  CHECK_MSG(h2 == 0, "second run h2d %.3f ms", h2);
  gpu_resident_drop(ids[0]);
}

static void *canceller(void *p) {
  tu_job *j = p;
  for (int i = 0; i < 200000; i++) {
    if (atomic_load(&j->ctx.progress_done) > 0) break;
    usleep(50);
  }
  atomic_store(&j->stop, 1);
  return NULL;
}

TEST(cancel_mid_job) {
  int64_t n = 100000000;
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK(expr_compile("x*x", &x, &e) == 0);
  tarray *in = tu_random(T_F64, 1, &n, 600, -1, 1);
  tarray *out = tu_poisoned(T_F64, 0, NULL);
  tu_job j;
  tu_job_init(&j, 0);
  pthread_t th;
  pthread_create(&th, NULL, canceller, &j);
  const tarray *ins[1] = {in};
  int rc = gpu_reduce(0, R_SUM, x, ins, NULL, -1, out, &j.ctx, &e);
  pthread_join(th, NULL);
  CHECK_MSG(rc == T_ECANCELED, "rc %d: %s", rc, e.message);
  int64_t done = atomic_load(&j.ctx.progress_done);
  CHECK_MSG(done < n, "done %lld of %lld", (long long)done, (long long)n);
  CHECK(gpu_healthy(0));
  tarray_free(in);
  tarray_free(out);
  expr_free(x);
}

int main(void) {
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(every_op_every_layout);
  RUN(float32_and_broadcast);
  RUN(nan_and_empty);
  RUN(zero_size);
  RUN(streamed_big);
  RUN(resident);
  RUN(cancel_mid_job);
  gpu_shutdown();
  return check_summary();
}
