/* test_map_ref.c — accuracy of the VM against an independent reference.
 *
 * Each case is an expression, a reference written directly in C with long
 * double libm calls (sinl, expl, ...), and a "scale": the sum of the
 * magnitudes of the terms that are rounded on the way (the usual
 * forward-error bound of a sum is proportional to it, not to the result,
 * which may cancel). Inputs are pseudo-random, non-trivial, and broadcast
 * ([61, 173] against [173], [61, 1], a scalar and the full shape), the
 * output is evaluated in uneven chunks like the map kind does, and the
 * reference reads the inputs exactly as the VM got them (rounded to
 * float32 first when the output is float32).
 *
 * Tolerances (stated, asserted):
 *   float64: |got - ref| <= 4 * 2^-52 * scale   (4 ulp of the scale)
 *   float32: |got - ref| <= 2^-20 * scale       (16 float32 ulp)
 * plus NaN exactly where the reference is NaN.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/expr/expr.h"

typedef long double ld;

typedef struct mcase {
  const char *src;
  ld (*ref)(ld x, ld y);
  ld (*scale)(ld x, ld y);
  double xlo, xhi, ylo, yhi;
} mcase;

static ld r_sq(ld x, ld y) { (void)y; return x * x; }
static ld s_sq(ld x, ld y) { (void)y; return x * x; }
static ld r_poly(ld x, ld y) { (void)y; return x * x + 2 * x + 1; }
static ld s_poly(ld x, ld y) { (void)y; return x * x + 2 * fabsl(x) + 1; }
static ld r_negdiv(ld x, ld y) { return -y / x; }
static ld s_negdiv(ld x, ld y) { return fabsl(y / x); }
static ld r_sinexp(ld x, ld y) { (void)y; return sinl(x) * expl(-x); }
static ld s_sinexp(ld x, ld y) {
  (void)y; /* exp amplifies its argument's error by |x|; sin's is 1 ulp */
  return fabsl(sinl(x) * expl(-x)) * 2 + 1e-300L;
}
static ld r_hyp(ld x, ld y) { return sqrtl(x * x + y * y); }
static ld s_hyp(ld x, ld y) { return sqrtl(x * x + y * y); }
static ld r_absdiff(ld x, ld y) { return fabsl(x - y); }
static ld s_absdiff(ld x, ld y) { return fabsl(x) + fabsl(y); }
static ld r_rem(ld x, ld y) {
  ld m = fmodl(x, y);
  if (m != 0 && ((y < 0) != (m < 0))) m += y;
  return m;
}
static ld s_rem(ld x, ld y) { return fabsl(y) + fabsl(x) * 0; }
static ld r_gauss(ld x, ld y) {
  (void)y;
  return expl(-x * x / 2) / sqrtl(2 * 3.14159265358979323846264338327950288L);
}
static ld s_gauss(ld x, ld y) { (void)y; return r_gauss(x, y) * (4 + x * x); }
static ld r_mix(ld x, ld y) { return log1pl(fabsl(x)) + atan2l(y, x); }
static ld s_mix(ld x, ld y) {
  return fabsl(log1pl(fabsl(x))) + fabsl(atan2l(y, x)) + 1e-300L;
}
static ld r_hyper(ld x, ld y) { return tanhl(x) * coshl(y) - sinhl(y); }
static ld s_hyper(ld x, ld y) {
  return 2 * (fabsl(tanhl(x) * coshl(y)) + fabsl(sinhl(y)));
}
static ld r_piece(ld x, ld y) {
  (void)y;
  return (x < 0.5L) * x + (x >= 0.5L) * (1 - x);
}
static ld s_piece(ld x, ld y) { (void)y; return 1 + fabsl(x); }
static ld r_minmax(ld x, ld y) { return fmaxl(x, y) - fminl(x, y); }
static ld s_minmax(ld x, ld y) { return fabsl(x) + fabsl(y); }
static ld r_roots(ld x, ld y) {
  return cbrtl(x) + exp2l(y) + log2l(fabsl(x) + 1);
}
static ld s_roots(ld x, ld y) {
  return 2 * (fabsl(cbrtl(x)) + exp2l(y) * (1 + fabsl(y)) +
              log2l(fabsl(x) + 1) + 1);
}
static ld r_cubic(ld x, ld y) { return x * x * x - 3 * x * y * y; }
static ld s_cubic(ld x, ld y) {
  return 2 * (fabsl(x * x * x) + 3 * fabsl(x * y * y));
}
static ld r_floor(ld x, ld y) {
  return fmodl(x, 0.7L) + floorl(y) * ceill(x) - truncl(x);
}
static ld s_floor(ld x, ld y) { return 1 + fabsl(floorl(y) * ceill(x)) + 1; }
static ld r_where(ld x, ld y) {
  return (x > 0 && y > 0) || !(x < y) ? sqrtl(fabsl(x * y)) : powl(fabsl(y), 0.3L);
}
static ld s_where(ld x, ld y) { return 2 * (1 + fabsl(r_where(x, y))); }
static ld r_trig(ld x, ld y) {
  return asinl(x / 4) + acosl(y / 4) * atanl(x) + tanl(y / 3);
}
static ld s_trig(ld x, ld y) {
  return 3 * (fabsl(asinl(x / 4)) + fabsl(acosl(y / 4) * atanl(x)) +
              fabsl(tanl(y / 3)) * (1 + y * y));
}

static const mcase cases[] = {
    {"x*x", r_sq, s_sq, -3, 3, 0, 1},
    {"x**2 + 2*x + 1", r_poly, s_poly, -5, 5, 0, 1},
    {"-y/x", r_negdiv, s_negdiv, 0.1, 7, -9, 9},
    {"sin(x)*exp(-x)", r_sinexp, s_sinexp, -4, 12, 0, 1},
    {"sqrt(x*x + y*y)", r_hyp, s_hyp, -6, 6, -6, 6},
    {"where(x > y, x - y, y - x)", r_absdiff, s_absdiff, -2, 2, -2, 2},
    {"x % y", r_rem, s_rem, -20, 20, -3, 3},
    {"exp(-x**2/2)/sqrt(2*pi)", r_gauss, s_gauss, -4, 4, 0, 1},
    {"log1p(abs(x)) + atan2(y, x)", r_mix, s_mix, -5, 5, -5, 5},
    {"tanh(x)*cosh(y) - sinh(y)", r_hyper, s_hyper, -3, 3, -3, 3},
    {"(x < 0.5)*x + (x >= 0.5)*(1 - x)", r_piece, s_piece, -1, 2, 0, 1},
    {"max(x, y) - min(x, y)", r_minmax, s_minmax, -9, 9, -9, 9},
    {"cbrt(x) + exp2(y) + log2(abs(x) + 1)", r_roots, s_roots, -8, 8, -4, 4},
    {"x**3 - 3*x*y**2", r_cubic, s_cubic, -3, 3, -3, 3},
    {"fmod(x, 0.7) + floor(y)*ceil(x) - trunc(x)", r_floor, s_floor, -5, 5,
     -5, 5},
    {"where(x > 0 and y > 0 or not x < y, sqrt(abs(x*y)), abs(y)**0.3)",
     r_where, s_where, -3, 3, -3, 3},
    {"asin(x/4) + acos(y/4)*atan(x) + tan(y/3)", r_trig, s_trig, -3.9, 3.9,
     -3.9, 3.9},
};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(double lo, double hi) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * (double)(z >> 11) * 0x1.0p-53;
}

enum { R = 61, C = 173 };

/* y layouts: 0 full [R, C], 1 [C], 2 [R, 1], 3 scalar (0-d). */
static int64_t y_index(int lay, int64_t r, int64_t c) {
  switch (lay) {
    case 0: return r * C + c;
    case 1: return c;
    case 2: return r;
    default: return 0;
  }
}

static double run_case(const mcase *m, tdtype odt, tdtype idt, int lay,
                       int *nan_bad) {
  expr *ex = NULL;
  terr e;
  if (expr_compile(m->src, &ex, &e)) {
    fprintf(stderr, "%s: %s\n", m->src, e.message);
    *nan_bad = 1;
    return INFINITY;
  }
  int64_t xs[2] = {R, C}, ys[4][2] = {{R, C}, {C, 0}, {R, 1}, {0, 0}};
  int ynd[4] = {2, 1, 2, 0};
  tarray *x = tarray_new(idt, 2, xs), *y = tarray_new(idt, ynd[lay], ys[lay]);
  for (int64_t i = 0; i < x->size; i++)
    tarray_set(x, i, urand(m->xlo, m->xhi));
  for (int64_t i = 0; i < y->size; i++)
    tarray_set(y, i, urand(m->ylo, m->yhi));
  tarray *in[2] = {NULL, NULL};
  for (int i = 0; i < expr_ninputs(ex); i++)
    in[i] = strcmp(expr_input_name(ex, i), "x") == 0 ? x : y;
  tarray *out = tarray_new(odt, 2, xs);
  void *scratch = aligned_alloc(64, (expr_scratch_size(ex) + 63) & ~63ul);
  for (int64_t s = 0, n = 1; s < out->size; s += n, n = n * 2 + 7) {
    if (n > out->size - s) n = out->size - s;
    expr_eval(ex, (const tarray *const *)in, out, s, n, scratch);
  }
  double worst = 0;
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < C; c++) {
      ld xv = tarray_get(x, r * C + c), yv = tarray_get(y, y_index(lay, r, c));
      if (odt == T_F32) xv = (float)xv, yv = (float)yv;
      ld want = m->ref(xv, yv), sc = m->scale(xv, yv);
      double got = tarray_get(out, r * C + c);
      if (isnan(want) || isnan(got)) {
        if (isnan(want) != isnan(got)) (*nan_bad)++;
        continue;
      }
      double unit = odt == T_F64 ? 0x1p-52 : 0x1p-20;
      double err = (double)(fabsl((ld)got - want) / (sc * unit));
      if (err > worst) worst = err;
    }
  free(scratch);
  tarray_free(out);
  tarray_free(x);
  tarray_free(y);
  expr_free(ex);
  return worst;
}

TEST(test_map_accuracy) {
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    for (int o = 0; o < 2; o++)
      for (int lay = 0; lay < 4; lay++) {
        tdtype odt = o ? T_F32 : T_F64;
        /* float64 output from float32 inputs too, and the reverse */
        tdtype idt = lay == 1 ? (o ? T_F64 : T_F32) : odt;
        int nan_bad = 0;
        double w = run_case(&cases[k], odt, idt, lay, &nan_bad);
        double lim = o ? 1.0 : 4.0; /* in units of the stated tolerance */
        if (getenv("SHOWERR")) printf("%-40s %s %d %.3g\n", cases[k].src, tdtype_name(odt), lay, w);
        CHECK_MSG(w <= lim && !nan_bad,
                  "%s (%s, y layout %d): worst %.3g of tolerance, %d NaN "
                  "mismatches",
                  cases[k].src, tdtype_name(odt), lay, w, nan_bad);
      }
}

/* The first instruction reads, the last writes: a long program must keep
 * intermediate registers apart. 40 terms, each checked. */
TEST(test_long_program) {
  char src[2048];
  int k = 0;
  for (int i = 1; i <= 40; i++)
    k += snprintf(src + k, sizeof src - (size_t)k, "%s(x*%d - y/%d)",
                  i > 1 ? (i % 3 ? " + " : " - ") : "", i, i);
  expr *ex = NULL;
  terr e;
  CHECK(expr_compile(src, &ex, &e) == 0);
  if (!ex) return;
  int64_t n = 10000;
  tarray *x = tarray_new(T_F64, 1, &n), *y = tarray_new(T_F64, 1, &n),
         *out = tarray_new(T_F64, 1, &n);
  for (int64_t i = 0; i < n; i++) {
    tarray_set(x, i, urand(-1, 1));
    tarray_set(y, i, urand(-1, 1));
  }
  const tarray *in[] = {x, y};
  void *scratch = aligned_alloc(64, (expr_scratch_size(ex) + 63) & ~63ul);
  expr_eval(ex, in, out, 0, n, scratch);
  double worst = 0;
  for (int64_t j = 0; j < n; j++) {
    ld xv = tarray_get(x, j), yv = tarray_get(y, j), acc = 0, sc = 0;
    for (int i = 1; i <= 40; i++) {
      ld t = xv * i - yv / i;
      acc += (i > 1 && i % 3 == 0) ? -t : t;
      sc += fabsl(xv * i) + fabsl(yv / i);
    }
    double err = (double)(fabsl(((double *)out->data)[j] - acc) / sc);
    if (err > worst) worst = err;
  }
  CHECK_MSG(worst <= 64 * 0x1p-52, "worst %g", worst);
  free(scratch);
  tarray_free(x);
  tarray_free(y);
  tarray_free(out);
  expr_free(ex);
}

int main(void) {
  RUN(test_map_accuracy);
  RUN(test_long_program);
  return check_summary();
}
