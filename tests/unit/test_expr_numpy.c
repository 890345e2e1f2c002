/* test_expr_numpy.c — NumPy's names and functions in the expression
 * language (issue 28): `//` (np.floor_divide), sign, isnan, isinf,
 * isfinite, signbit, copysign, nextafter, ones_like, and NumPy's spellings
 * of the C names (arcsin ... arctanh, minimum, maximum, absolute, power,
 * rint, remainder, floor_divide, copy, conj).
 *
 * Values: every case below was printed by NumPy 1.24.2 (Debian 12's
 * python3-numpy, np.errstate(all='ignore')) and is compared bit for bit —
 * the sign of a zero included, NaN as NaN — through the VM in float64 and
 * in float32 (the float32 column is NumPy's float32 result; it differs
 * where the inputs round: 0.3 // 0.1 is 2 in float64 and 3 in float32).
 * Folding (all-constant operands) must give the VM's float64 bits.
 * Parsing: each NumPy name gives the canonical text of its C name, `//`
 * binds as `*` `/` `%` do (left to right, below unary minus and `**`),
 * `/ /` and `///` are errors with their position, a function name without
 * a call is an error, arities are checked; the emitted C calls
 * tx_floordiv and the C names. The live comparison with NumPy
 * over a grid and random inputs, and numexpr's own test table, are in
 * clients/python/tests/test_numpy_names.py (through tesseld).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/expr/expr.h"

/* src over 0-d inputs x, y in dtype dt; a compile error fails the test. */
static double ev(const char *src, double x, double y, tdtype dt) {
  expr *ex = NULL;
  terr e;
  if (expr_compile(src, &ex, &e)) {
    CHECK_MSG(0, "compile failed for %s: %s", src, e.message);
    return -12345.678;
  }
  tarray *in[EXPR_MAX_INPUTS] = {0};
  for (int i = 0; i < expr_ninputs(ex); i++) {
    in[i] = tarray_new(dt, 0, NULL);
    tarray_set(in[i], 0, strcmp(expr_input_name(ex, i), "x") == 0 ? x : y);
  }
  size_t ss = (expr_scratch_size(ex) + 63) & ~(size_t)63;
  void *scratch = aligned_alloc(64, ss);
  tarray *out = tarray_new(dt, 0, NULL);
  expr_eval(ex, (const tarray *const *)in, out, 0, 1, scratch);
  double r = tarray_get(out, 0);
  tarray_free(out);
  free(scratch);
  for (int i = 0; i < EXPR_MAX_INPUTS; i++) tarray_free(in[i]);
  expr_free(ex);
  return r;
}

/* Bit equality (-0 != +0), any NaN equal to any NaN. */
static int same(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return memcmp(&a, &b, sizeof a) == 0;
}

typedef struct ncase {
  const char *src;
  double x, y;
  double want64, want32;
} ncase;

#define INF INFINITY
static const ncase cases[] = {
    /* floor division: signs, zeros, b == 0, infinities, NaN, rounding */
    {"x // y", 5.5, 2, 2, 2},           {"x // y", -5.5, 2, -3, -3},
    {"x // y", 5.5, -2, -3, -3},        {"x // y", -5.5, -2, 2, 2},
    {"x // y", 0.0, 3, 0.0, 0.0},       {"x // y", -0.0, 3, -0.0, -0.0},
    {"x // y", 0.0, -3, -0.0, -0.0},    {"x // y", -0.0, -3, 0.0, 0.0},
    {"x // y", 1, 0.0, INF, INF},       {"x // y", -1, 0.0, -INF, -INF},
    {"x // y", 1, -0.0, -INF, -INF},    {"x // y", 0.0, 0.0, NAN, NAN},
    {"x // y", NAN, 0.0, NAN, NAN},     {"x // y", INF, 2, NAN, NAN},
    {"x // y", 2, INF, 0.0, 0.0},       {"x // y", -2, INF, -1, -1},
    {"x // y", 2, -INF, -1, -1},        {"x // y", -2, -INF, 0.0, 0.0},
    {"x // y", 0.3, 0.1, 2, 3},         {"x // y", 1e308, 1e-308, INF, INF},
    {"x // y", NAN, 1, NAN, NAN},       {"x // y", 1, NAN, NAN, NAN},
    {"x // y", -1e-300, 1e300, -1, -0.0}, {"x // y", 6, 3, 2, 2},
    {"x // y", -6, 3, -2, -2},          {"x // y", 6, -3, -2, -2},
    {"floor_divide(x, y)", -5.5, 2, -3, -3},
    /* the remainder that goes with it (np.remainder) */
    {"x % y", -5.5, 2, 0.5, 0.5},       {"remainder(x, y)", 6, -3, -0.0, -0.0},
    {"x % y", 2, -INF, -INF, -INF},     {"x % y", 1, 0.0, NAN, NAN},
    /* sign: ±0 give +0, NaN gives NaN */
    {"sign(x)", -0.0, 0, 0.0, 0.0},     {"sign(x)", 0.0, 0, 0.0, 0.0},
    {"sign(x)", NAN, 0, NAN, NAN},      {"sign(x)", -INF, 0, -1, -1},
    {"sign(x)", 5e-324, 0, 1, 0.0},     {"sign(x)", -2, 0, -1, -1},
    /* classifications: 1.0 / 0.0 in the result's dtype */
    {"isnan(x)", NAN, 0, 1, 1},         {"isnan(x)", INF, 0, 0, 0},
    {"isinf(x)", -INF, 0, 1, 1},        {"isinf(x)", 1e300, 0, 0, 1},
    {"isinf(x)", NAN, 0, 0, 0},         {"isfinite(x)", 1e300, 0, 1, 0},
    {"isfinite(x)", NAN, 0, 0, 0},      {"isfinite(x)", -0.0, 0, 1, 1},
    {"signbit(x)", -0.0, 0, 1, 1},      {"signbit(x)", 0.0, 0, 0, 0},
    {"signbit(x)", -NAN, 0, 1, 1},      {"signbit(x)", -1e-320, 0, 1, 1},
    /* copysign, nextafter */
    {"copysign(x, y)", 3, -0.0, -3, -3}, {"copysign(x, y)", -3, 0.0, 3, 3},
    {"copysign(x, y)", 3, -NAN, -3, -3}, {"copysign(x, y)", INF, -1, -INF, -INF},
    {"nextafter(x, y)", 0.0, -1, -5e-324, -0x1p-149},
    {"nextafter(x, y)", 1, 0, 1 - 0x1p-53, 1 - 0x1p-24},
    {"nextafter(x, y)", 1, 1, 1, 1},    {"nextafter(x, y)", NAN, 1, NAN, NAN},
    /* minimum/maximum are min/max: NaN in either gives NaN (np.minimum) */
    {"minimum(x, y)", NAN, 1, NAN, NAN}, {"maximum(x, y)", 1, NAN, NAN, NAN},
    {"minimum(x, y)", -1, 2, -1, -1},   {"maximum(x, y)", -1, 2, 2, 2},
    {"ones_like(x)", NAN, 0, 1, 1},     {"ones_like(x)", -INF, 0, 1, 1},
    /* NumPy's spellings run the C functions */
    {"arctan2(x, y)", 1, -1, 2.356194490192345, 2.3561945f},
    {"absolute(x)", -0.0, 0, 0.0, 0.0}, {"power(x, y)", 2, 10, 1024, 1024},
    {"rint(x)", 2.5, 0, 2, 2},          {"copy(x) + conj(y)", 1, 2, 3, 3},
};

TEST(test_values_like_numpy) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const ncase *c = &cases[i];
    double g64 = ev(c->src, c->x, c->y, T_F64);
    double g32 = ev(c->src, c->x, c->y, T_F32);
    CHECK_MSG(same(g64, c->want64), "%s at (%.17g, %.17g): float64 %.17g, NumPy %.17g",
              c->src, c->x, c->y, g64, c->want64);
    CHECK_MSG(same(g32, (double)(float)c->want32),
              "%s at (%.9g, %.9g): float32 %.9g, NumPy %.9g", c->src, c->x, c->y,
              g32, c->want32);
  }
}

/* Constants fold to the VM's float64 bits: "<x> // <y>" written out. */
TEST(test_folding_like_the_vm) {
  static const double v[] = {5.5, -5.5, 0.0, -0.0, 3, -3, 0.1, 0.3, 1e-300};
  const char *fns[] = {"%s // %s", "sign(%s) + 0*%s", "copysign(%s, %s)",
                       "nextafter(%s, %s)", "signbit(%s) + isnan(%s)"};
  for (size_t f = 0; f < sizeof fns / sizeof *fns; f++)
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
      for (size_t j = 0; j < sizeof v / sizeof *v; j++) {
        char lit[2][40], src[160], vsrc[160];
        snprintf(lit[0], sizeof lit[0], "(%s%.17g)", signbit(v[i]) ? "-" : "", fabs(v[i]));
        snprintf(lit[1], sizeof lit[1], "(%s%.17g)", signbit(v[j]) ? "-" : "", fabs(v[j]));
        snprintf(src, sizeof src, fns[f], lit[0], lit[1]);
        snprintf(vsrc, sizeof vsrc, fns[f], "x", "y");
        double folded = ev(src, 0, 0, T_F64), run = ev(vsrc, v[i], v[j], T_F64);
        CHECK_MSG(same(folded, run), "%s folds to %.17g, runs to %.17g", src,
                  folded, run);
      }
}

static char *canon_of(const char *src) {
  expr *x = NULL;
  terr e;
  if (expr_compile(src, &x, &e)) {
    fprintf(stderr, "%s: %s\n", src, e.message);
    return strdup("(error)");
  }
  char *c = strdup(expr_canonical(x));
  expr_free(x);
  return c;
}

TEST(test_names_and_precedence) {
  static const char *const same_tree[][2] = {
      {"arcsin(x)", "asin(x)"},       {"arccos(x)", "acos(x)"},
      {"arctan(x)", "atan(x)"},       {"arctan2(x, y)", "atan2(x, y)"},
      {"arcsinh(x)", "asinh(x)"},     {"arccosh(x)", "acosh(x)"},
      {"arctanh(x)", "atanh(x)"},     {"minimum(x, y)", "min(x, y)"},
      {"maximum(x, y)", "max(x, y)"}, {"absolute(x)", "abs(x)"},
      {"power(x, y)", "x ** y"},      {"rint(x)", "round(x)"},
      {"remainder(x, y)", "x % y"},   {"floor_divide(x, y)", "x // y"},
      {"copy(x) * conj(y)", "x * y"},
      /* // is a *-level operator, left to right */
      {"x // y * x", "(x // y) * x"}, {"x * y // x", "(x * y) // x"},
      {"x + y // x", "x + (y // x)"}, {"x // y // x", "(x // y) // x"},
      {"x ** y // x", "(x ** y) // x"}, {"-x // y", "(-x) // y"},
      {"x // -y", "x // (-y)"},       {"x % y // x", "(x % y) // x"},
      {"x//y", "x // y"},
  };
  for (size_t i = 0; i < sizeof same_tree / sizeof *same_tree; i++) {
    char *a = canon_of(same_tree[i][0]), *b = canon_of(same_tree[i][1]);
    CHECK_MSG(strcmp(a, b) == 0, "%s -> %s but %s -> %s", same_tree[i][0], a,
              same_tree[i][1], b);
    free(a);
    free(b);
  }
  char *c = canon_of("floor_divide(x, 2) + sign(x) * isfinite(x)");
  CHECK_STR(c, "((in0//2)+(sign(in0)*isfinite(in0)))");
  free(c);
  c = canon_of("-7 // 2 + isnan(0/0) + nextafter(1, 2)");
  char want[64];
  snprintf(want, sizeof want, "%.17g", -4 + 1 + nextafter(1, 2));
  CHECK_STR(c, want);
  free(c);
}

TEST(test_errors) {
  static const struct {
    const char *src, *msg;
  } bad[] = {
      {"x / / y", "unexpected '/' at 4"},
      {"x /// y", "unexpected '/' at 4"},
      {"x // ", "unexpected end of expression at 5"},
      {"// x", "unexpected '//' at 0"},
      {"arcsin + 1", "function 'arcsin' needs arguments: expected '(' at 6"},
      {"sign", "function 'sign' needs arguments: expected '(' at 4"},
      {"copysign(x)", "expected 2 arguments to copysign, got 1 at 0"},
      {"nextafter(x, y, x)", "expected 2 arguments to nextafter, got 3 at 0"},
      {"isnan()", "expected 1 argument to isnan, got 0 at 0"},
      {"copy(x, y)", "expected 1 argument to copy, got 2 at 0"},
      {"floor_divide(x)", "expected 2 arguments to floor_divide, got 1 at 0"},
      {"arcsinn(x)", "unknown function 'arcsinn' at 0"},
      {"x.real", "unexpected character '.' at 1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    expr *x = NULL;
    terr e;
    terr_clear(&e);
    CHECK_MSG(expr_compile(bad[i].src, &x, &e) != 0, "%s compiled", bad[i].src);
    CHECK_MSG(strcmp(e.message, bad[i].msg) == 0, "%s: '%s', want '%s'",
              bad[i].src, e.message, bad[i].msg);
    expr_free(x);
  }
}

/* The GPU kernels call tx_floordiv and the C names (compute/kinds/fusegen.cu's
 * prelude defines them; test_fusegen compiles them with NVRTC). */
TEST(test_emit_c) {
  expr *x = NULL;
  terr e;
  char buf[512];
  CHECK(expr_compile("x // 2 + sign(y) * arcsin(x) - minimum(x, y) + "
                     "nextafter(x, y) * isfinite(copy(y))", &x, &e) == 0);
  if (!x) return;
  CHECK(expr_emit_c(x, "float", "tx_", buf, sizeof buf) > 0);
  CHECK_STR(buf, "(((tx_floordiv(v0, ((float)2.0)) + (tx_sign(v1) * tx_asin(v0))) - "
                 "tx_min(v0, v1)) + (tx_nextafter(v0, v1) * tx_isfinite(v1)))");
  expr_free(x);
}

int main(void) {
  RUN(test_values_like_numpy);
  RUN(test_folding_like_the_vm);
  RUN(test_names_and_precedence);
  RUN(test_errors);
  RUN(test_emit_c);
  return check_summary();
}
