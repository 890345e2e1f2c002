/* test_reduce.c — reductions (reduce_cpu.c) against a long double
 * reference, for every op and axis None/0/1/-1, both layouts (rows and
 * columns), outputs split into pieces, NaN, ties, empty inputs, extreme
 * magnitudes for norm, float32 results, bitwise agreement between one and
 * several threads, and cancellation sums where naive summation fails.
 *
 * Tolerances (eps = 2^-52), with S = sum of |values| of one output:
 *   sum 8*eps*S; mean 8*eps*S/n; prod 4*n*eps relative; min/max within one
 *   ulp (the reference rounds once, the VM twice); argmin/argmax exact;
 *   var 1e-13*(var + mean^2); std its square root's; norm 1e-14 relative.
 *
 * Threads: the tests run chunks through the small pthread pool_for of
 * the real pool (util/pool.h), which hands chunks out in any order; results must
 * not change.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/exprkind.h"
#include "util/pool.h"

#include "util/pool.h"

static pool *test_pool; /* the real pool, 3 workers, made in main */
#define TEST_POOL test_pool

/* ---- helpers ---------------------------------------------------------------- */
typedef long double ld;

static uint64_t rs = 12345;
static double urand(double lo, double hi) {
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1.0p-53;
}

static tarray *rand_arr(int nd, const int64_t *sh, double lo, double hi) {
  tarray *a = tarray_new(T_F64, nd, sh);
  for (int64_t i = 0; i < a->size; i++) tarray_set(a, i, urand(lo, hi));
  return a;
}


/* Reduce src over inputs; out allocated here (caller frees). */
static tarray *run_red(const char *src, const tarray *const *in, int ndim,
                       const int64_t *shape, reduce_op op, int axis,
                       double ddof, tdtype odt, int width) {
  expr *x = NULL;
  terr e;
  if (expr_compile(src, &x, &e)) return NULL;
  reduce_spec r = {.x = x, .inputs = in, .ndim = ndim, .shape = shape,
                   .op = op, .axis = axis, .ddof = ddof};
  int ond;
  int64_t osh[T_MAXDIM];
  reduce_out_shape(&r, &ond, osh);
  tarray *out = tarray_new(odt, ond, osh);
  atomic_int stop = 0;
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.pool = width > 1 ? TEST_POOL : NULL;
  ctx.threads = width;
  ctx.stop = &stop;
  int rc = reduce_cpu_run(&r, out, &ctx, width, &e);
  if (rc) {
    tarray_free(out);
    out = NULL;
  } else if (atomic_load(&ctx.progress_done) != atomic_load(&ctx.progress_total)) {
    fprintf(stderr, "progress %lld of %lld\n",
            (long long)atomic_load(&ctx.progress_done),
            (long long)atomic_load(&ctx.progress_total));
    tarray_free(out);
    out = NULL;
  }
  expr_free(x);
  return out;
}

/* Reference of one output from its values. */
static int check_one(reduce_op op, const ld *v, int64_t n, double ddof,
                     double got, const char *what) {
  ld s = 0, sa = 0, p = 1, mn = INFINITY, mx = -INFINITY, ss = 0;
  int64_t imn = 0, imx = 0;
  for (int64_t i = 0; i < n; i++) {
    s += v[i];
    sa += fabsl(v[i]);
    p *= v[i];
    ss += v[i] * v[i];
    if (v[i] < mn) mn = v[i], imn = i;
    if (v[i] > mx) mx = v[i], imx = i;
  }
  ld mean = s / n, m2 = 0;
  for (int64_t i = 0; i < n; i++) m2 += (v[i] - mean) * (v[i] - mean);
  ld var = m2 / (n - ddof);
  double eps = 0x1p-52;
  ld want, tol;
  switch (op) {
    case R_SUM: want = s, tol = 8 * eps * sa; break;
    case R_MEAN: want = mean, tol = 8 * eps * sa / n; break;
    case R_PROD: want = p, tol = 4.0L * n * eps * fabsl(p); break;
    case R_MIN: want = mn, tol = 2 * eps * fabsl(mn); break;
    case R_MAX: want = mx, tol = 2 * eps * fabsl(mx); break;
    case R_ARGMIN: want = imn, tol = 0; break;
    case R_ARGMAX: want = imx, tol = 0; break;
    case R_VAR: want = var, tol = 1e-13L * (var + mean * mean); break;
    case R_STD: want = sqrtl(var), tol = 1e-13L * sqrtl(var + mean * mean); break;
    default: want = sqrtl(ss), tol = 1e-14L * sqrtl(ss); break;
  }
  if (fabsl((ld)got - want) <= tol) return 1;
  fprintf(stderr, "%s %s: got %.17g want %.17Lg (tol %.3Lg)\n", what,
          reduce_op_name(op), got, want, tol);
  return 0;
}

/* Check every output of a reduction over shape [A, B, C] (C order), values
 * v (long double, full shape), along axis (-1 all). */
static int check_all(reduce_op op, const tarray *out, const ld *v, int nd,
                     const int64_t *sh, int axis, double ddof) {
  int64_t outer = 1, len = 1, inner = 1;
  for (int d = 0; d < nd; d++) {
    if (axis < 0 || d == axis) len *= sh[d];
    else if (d < axis) outer *= sh[d];
    else inner *= sh[d];
  }
  ld *seg = malloc((size_t)len * sizeof *seg);
  int ok = 1;
  char what[64];
  for (int64_t o = 0; o < outer && ok; o++)
    for (int64_t i = 0; i < inner && ok; i++) {
      for (int64_t j = 0; j < len; j++) seg[j] = v[(o * len + j) * inner + i];
      snprintf(what, sizeof what, "axis %d out %lld", axis,
               (long long)(o * inner + i));
      ok = check_one(op, seg, len, ddof, tarray_get(out, o * inner + i), what);
    }
  free(seg);
  return ok;
}

/* ---- tests --------------------------------------------------------------- */
TEST(test_every_op_every_axis) {
  int64_t xs[2] = {37, 5003}, ys[1] = {5003};
  tarray *x = rand_arr(2, xs, -2, 3), *y = rand_arr(1, ys, 0.5, 1.5);
  const tarray *in[] = {x, y};
  int64_t n = xs[0] * xs[1];
  ld *v = malloc((size_t)n * sizeof *v), *vp = malloc((size_t)n * sizeof *vp);
  for (int64_t i = 0; i < n; i++) {
    double xv = tarray_get(x, i), yv = tarray_get(y, i % xs[1]);
    v[i] = (ld)xv * yv - 0.5L;
    vp[i] = 1 + (ld)xv * yv * 1e-3L;
  }
  int axes[] = {-1, 0, 1, -1};
  for (int op = 0; op < R__COUNT; op++)
    for (int k = 0; k < 3; k++) {
      int axis = axes[k];
      const char *src = op == R_PROD ? "1 + x*y*1e-3" : "x*y - 0.5";
      double ddof = op == R_VAR || op == R_STD ? (k == 1 ? 1 : 0) : 0;
      tarray *o1 = run_red(src, in, 2, xs, (reduce_op)op, axis, ddof, T_F64, 1);
      tarray *o2 = run_red(src, in, 2, xs, (reduce_op)op, axis, ddof, T_F64, 2);
      tarray *o3 = run_red(src, in, 2, xs, (reduce_op)op, axis, ddof, T_F64, 3);
      CHECK(o1 && o2 && o3);
      if (!o1 || !o2 || !o3) continue;
      CHECK_MSG(check_all((reduce_op)op, o1, op == R_PROD ? vp : v, 2, xs,
                          axis, ddof),
                "%s axis %d", reduce_op_name((reduce_op)op), axis);
      /* one, two or three threads: the same bits */
      CHECK(o1->size == o2->size &&
            memcmp(o1->data, o2->data, (size_t)o1->size * 8) == 0 &&
            memcmp(o1->data, o3->data, (size_t)o1->size * 8) == 0);
      tarray_free(o1);
      tarray_free(o2);
      tarray_free(o3);
    }
  /* axis -1 is axis 1 */
  tarray *a = run_red("x*y - 0.5", in, 2, xs, R_SUM, 1, 0, T_F64, 1);
  CHECK(a && a->ndim == 1 && a->shape[0] == 37);
  tarray_free(a);
  free(v);
  free(vp);
  tarray_free(x);
  tarray_free(y);
}

TEST(test_three_dims_and_pieces) {
  /* [6, 7, 3001] over the middle axis: columns layout with outer > 1 */
  int64_t s3[3] = {6, 7, 3001};
  tarray *x = rand_arr(3, s3, -1, 1);
  const tarray *in[] = {x};
  ld *v = malloc((size_t)x->size * sizeof *v);
  ld *vp = malloc((size_t)x->size * sizeof *vp);
  for (int64_t i = 0; i < x->size; i++) {
    v[i] = tarray_get(x, i);
    vp[i] = 1 + (ld)tarray_get(x, i) * 1e-3L;
  }
  for (int op = 0; op < R__COUNT; op++)
    for (int axis = 0; axis < 3; axis++) {
      int pr = op == R_PROD; /* keep products away from underflow */
      tarray *o = run_red(pr ? "1 + x*1e-3" : "x", in, 3, s3, (reduce_op)op,
                          axis, 0, T_F64, 2);
      CHECK(o != NULL);
      if (o) CHECK_MSG(check_all((reduce_op)op, o, pr ? vp : v, 3, s3, axis, 0),
                       "%s axis %d", reduce_op_name((reduce_op)op), axis);
      tarray_free(o);
    }
  free(v);
  free(vp);
  tarray_free(x);
  /* [3, 150000] over the last axis: each output in 3 pieces */
  int64_t s2[2] = {3, 150000};
  x = rand_arr(2, s2, -1, 1);
  in[0] = x;
  v = malloc((size_t)x->size * sizeof *v);
  for (int64_t i = 0; i < x->size; i++) v[i] = tarray_get(x, i);
  for (int op = 0; op < R__COUNT; op++) {
    if (op == R_PROD) continue; /* underflows to 0 */
    tarray *o = run_red("x", in, 2, s2, (reduce_op)op, 1, 0, T_F64, 2);
    CHECK(o && check_all((reduce_op)op, o, v, 2, s2, 1, 0));
    tarray *o1 = run_red("x", in, 2, s2, (reduce_op)op, 1, 0, T_F64, 1);
    CHECK(o && o1 && memcmp(o->data, o1->data, 24) == 0);
    tarray_free(o);
    tarray_free(o1);
  }
  free(v);
  tarray_free(x);
}

/* Cancellation: where naive left-to-right summation fails, the careful sum
 * does not. */
TEST(test_careful_summation) {
  /* 1 followed by a million values of 1e-16: each is below half an ulp of
   * 1, so a naive sum never moves from 1; the true sum is 1 + 1e-10. */
  int64_t n = 1000001;
  tarray *x = tarray_new(T_F64, 1, &n);
  double *d = x->data;
  d[0] = 1;
  for (int64_t i = 1; i < n; i++) d[i] = 1e-16;
  const tarray *in[] = {x};
  double naive = 0;
  for (int64_t i = 0; i < n; i++) naive += d[i];
  ld exact = 1 + 1e-16L * (n - 1);
  tarray *o = run_red("x", in, 1, &n, R_SUM, -1, 0, T_F64, 2);
  CHECK(o != NULL);
  if (o) {
    double got = tarray_get(o, 0);
    double e_ours = (double)fabsl(got - exact), e_naive = (double)fabsl(naive - exact);
    CHECK_MSG(e_naive > 9e-11, "naive error %g", e_naive);
    CHECK_MSG(e_ours < 1e-14, "careful error %g", e_ours);
  }
  tarray_free(o);
  /* 0.1 two million times: naive drifts by ~1e-6 relative */
  n = 2000000;
  tarray *y = tarray_new(T_F64, 1, &n);
  for (int64_t i = 0; i < n; i++) ((double *)y->data)[i] = 0.1;
  in[0] = y;
  naive = 0;
  for (int64_t i = 0; i < n; i++) naive += 0.1;
  exact = 0.1L * n; /* of the double 0.1: */
  exact = (ld)0.1 * n;
  o = run_red("x", in, 1, &n, R_SUM, -1, 0, T_F64, 1);
  CHECK(o != NULL);
  if (o) {
    double rel_ours = (double)(fabsl(tarray_get(o, 0) - exact) / exact);
    double rel_naive = (double)(fabsl(naive - exact) / exact);
    CHECK_MSG(rel_naive > 1e-12, "naive rel %g", rel_naive);
    CHECK_MSG(rel_ours < 2e-16, "careful rel %g", rel_ours);
  }
  tarray_free(o);
  /* mean and var of values 1e9 + small: var is tiny against mean^2 */
  for (int64_t i = 0; i < n; i++)
    ((double *)y->data)[i] = 1e9 + (double)(i % 7) * 0.25;
  o = run_red("x", in, 1, &n, R_VAR, -1, 0, T_F64, 2);
  ld m = 0, m2 = 0;
  for (int64_t i = 0; i < n; i++) m += ((double *)y->data)[i];
  m /= n;
  for (int64_t i = 0; i < n; i++) {
    ld t = ((double *)y->data)[i] - m;
    m2 += t * t;
  }
  CHECK(o && fabsl(tarray_get(o, 0) - m2 / n) < 1e-9L * (m2 / n));
  tarray_free(o);
  tarray_free(x);
  tarray_free(y);
}

TEST(test_nan_ties_empty_extremes) {
  int64_t n = 200000;
  tarray *x = rand_arr(1, &n, 0, 1);
  double *d = x->data;
  d[1000] = -5;
  d[150000] = -5; /* tie: argmin is the first */
  d[7] = 9;
  d[190000] = 9;
  const tarray *in[] = {x};
  tarray *o = run_red("x", in, 1, &n, R_ARGMIN, -1, 0, T_F64, 2);
  CHECK(o && tarray_get(o, 0) == 1000);
  tarray_free(o);
  o = run_red("x", in, 1, &n, R_ARGMAX, -1, 0, T_F64, 2);
  CHECK(o && tarray_get(o, 0) == 7);
  tarray_free(o);
  d[120000] = NAN;
  d[160000] = NAN;
  for (int op = 0; op < R__COUNT; op++) {
    o = run_red("x", in, 1, &n, (reduce_op)op, -1, 0, T_F64, 2);
    CHECK(o != NULL);
    if (!o) continue;
    if (op == R_ARGMIN || op == R_ARGMAX)
      CHECK_MSG(tarray_get(o, 0) == 120000, "%s", reduce_op_name((reduce_op)op));
    else
      CHECK_MSG(isnan(tarray_get(o, 0)), "%s", reduce_op_name((reduce_op)op));
    tarray_free(o);
  }
  /* NaN along the columns layout */
  int64_t s2[2] = {50, 300};
  tarray *z = rand_arr(2, s2, 0, 1);
  ((double *)z->data)[10 * 300 + 4] = NAN;
  in[0] = z;
  o = run_red("x", in, 2, s2, R_ARGMAX, 0, 0, T_F64, 2);
  CHECK(o && tarray_get(o, 4) == 10 && tarray_get(o, 5) != 10);
  tarray_free(o);
  o = run_red("x", in, 2, s2, R_SUM, 0, 0, T_F64, 2);
  CHECK(o && isnan(tarray_get(o, 4)) && !isnan(tarray_get(o, 3)));
  tarray_free(o);
  ((double *)z->data)[10 * 300 + 4] = INFINITY;
  ((double *)z->data)[10 * 300 + 5] = -INFINITY;
  o = run_red("x", in, 2, s2, R_SUM, 0, 0, T_F64, 1);
  CHECK(o && isinf(tarray_get(o, 4)) && tarray_get(o, 4) > 0);
  CHECK(o && isinf(tarray_get(o, 5)) && tarray_get(o, 5) < 0);
  tarray_free(o);
  o = run_red("x", in, 2, s2, R_NORM, 0, 0, T_F64, 1);
  CHECK(o && isinf(tarray_get(o, 5)) && isfinite(tarray_get(o, 6)));
  tarray_free(o);
  tarray_free(z);
  /* inf: sum inf, not NaN from the compensation */
  d[120000] = INFINITY;
  d[160000] = 1;
  in[0] = x;
  o = run_red("x", in, 1, &n, R_SUM, -1, 0, T_F64, 1);
  CHECK(o && isinf(tarray_get(o, 0)) && tarray_get(o, 0) > 0);
  tarray_free(o);
  tarray_free(x);
  /* norm of huge and tiny values: no overflow, no underflow */
  int64_t m = 100000;
  tarray *h = tarray_new(T_F64, 1, &m);
  for (int64_t i = 0; i < m; i++) ((double *)h->data)[i] = (i % 2 ? 3e200 : 4e200);
  in[0] = h;
  o = run_red("x", in, 1, &m, R_NORM, -1, 0, T_F64, 2);
  double want = sqrt(m / 2.0) * 5e200;
  CHECK(o && fabs(tarray_get(o, 0) - want) <= 1e-14 * want);
  tarray_free(o);
  o = run_red("x*1e-400", in, 1, &m, R_NORM, -1, 0, T_F64, 1); /* all 0 */
  CHECK(o && tarray_get(o, 0) == 0);
  tarray_free(o);
  o = run_red("x*1e-195*1e-195", in, 1, &m, R_NORM, -1, 0, T_F64, 1);
  want = sqrt(m / 2.0) * 5e-190;
  CHECK(o && fabs(tarray_get(o, 0) - want) <= 1e-13 * want);
  tarray_free(o);
  tarray_free(h);
  /* empty */
  int64_t zero = 0;
  tarray *em = tarray_new(T_F64, 1, &zero);
  in[0] = em;
  o = run_red("x", in, 1, &zero, R_SUM, -1, 0, T_F64, 1);
  CHECK(o && tarray_get(o, 0) == 0);
  tarray_free(o);
  o = run_red("x", in, 1, &zero, R_PROD, -1, 0, T_F64, 1);
  CHECK(o && tarray_get(o, 0) == 1);
  tarray_free(o);
  o = run_red("x", in, 1, &zero, R_MEAN, -1, 0, T_F64, 1);
  CHECK(o && isnan(tarray_get(o, 0)));
  tarray_free(o);
  o = run_red("x", in, 1, &zero, R_NORM, -1, 0, T_F64, 1);
  CHECK(o && tarray_get(o, 0) == 0);
  tarray_free(o);
  tarray_free(em);
}

TEST(test_float32_and_scalar_inputs) {
  int64_t s2[2] = {40, 1000};
  tarray *x = rand_arr(2, s2, 1, 2);
  tarray *x32 = tarray_convert(x, T_F32);
  int64_t one = 1;
  tarray *c = tarray_new(T_F32, 0, &one);
  tarray_set(c, 0, 0.5);
  const tarray *in[] = {x32, c};
  tarray *o = run_red("x*c", in, 2, s2, R_MEAN, 1, 0, T_F32, 2);
  CHECK(o && o->dtype == T_F32 && o->ndim == 1 && o->shape[0] == 40);
  for (int64_t r = 0; o && r < 40; r++) {
    ld s = 0;
    for (int64_t j = 0; j < 1000; j++) s += (ld)tarray_get(x32, r * 1000 + j) * 0.5L;
    float want = (float)(s / 1000);
    CHECK(fabs(tarray_get(o, r) - want) <= 0x1p-23 * fabs(want));
  }
  tarray_free(o);
  o = run_red("x*c", in, 2, s2, R_ARGMAX, 0, 0, T_F64, 2);
  CHECK(o && o->dtype == T_F64 && o->shape[0] == 1000);
  tarray_free(o);
  tarray_free(x);
  tarray_free(x32);
  tarray_free(c);
}

TEST(test_stop) {
  int64_t n = 1000000;
  tarray *x = rand_arr(1, &n, 0, 1);
  expr *ex = NULL;
  terr e;
  CHECK(expr_compile("x", &ex, &e) == 0);
  const tarray *in[] = {x};
  reduce_spec r = {.x = ex, .inputs = in, .ndim = 1, .shape = &n,
                   .op = R_SUM, .axis = -1};
  tarray *out = tarray_new(T_F64, 0, NULL);
  atomic_int stop = 2;
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.stop = &stop;
  CHECK(reduce_cpu_run(&r, out, &ctx, 1, &e) == T_ETIMEOUT);
  stop = 1;
  ctx.pool = TEST_POOL;
  CHECK(reduce_cpu_run(&r, out, &ctx, 2, &e) == T_ECANCELED);
  CHECK(atomic_load(&ctx.progress_done) == 0);
  tarray_free(out);
  tarray_free(x);
  expr_free(ex);
}

int main(void) {
  test_pool = pool_create(3, NULL, NULL);
  if (!test_pool) return 1;
  RUN(test_every_op_every_axis);
  RUN(test_three_dims_and_pieces);
  RUN(test_careful_summation);
  RUN(test_nan_ties_empty_extremes);
  RUN(test_float32_and_scalar_inputs);
  RUN(test_stop);
  return check_summary();
}
