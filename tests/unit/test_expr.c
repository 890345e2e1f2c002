/* test_expr.c — the expression language: tokens, precedence, every function
 * and constant, logic, where, errors with exact positions and limits, the
 * canonical text and the C emitter (which is also compiled with the system
 * C compiler, when there is one, and checked against the VM).
 *
 * Scalar expressions are evaluated through the real VM on 0-d inputs, in
 * float64 and float32, and compared with the C library's value: float64
 * within 1 ulp (the expected values are folded by the C compiler, correctly
 * rounded; glibc's functions are within 1 ulp), float32 within 2^-22
 * relative (float libm vs double libm rounded to float). sin, cos, exp and
 * log are the exception (compute/expr/expr.h's contract: within 4 ulp of the
 * correctly rounded value, as the VM may use glibc's libmvec): they are
 * checked within 4 ulp of a long double reference, in the table and over
 * ~100k random arrays (test_mvec_accuracy, which also checks NaN/Inf/
 * overflow/underflow against libm). The emitted C is compared with the VM
 * bit for bit, except expressions using those four: within 4 ulp per use.
 * test_no_contraction: a*b + c is rounded twice (never contracted into an
 * FMA, as on the GPU and in NumPy) and fma(a, b, c) once.
 */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compute/expr/expr.h"
#include "compute/expr/expr_int.h"

/* Evaluate src with inputs named x, y, z (0-d) in float64 or float32. */
static double ev_dt(const char *src, double x, double y, double z, tdtype dt) {
  expr *ex = NULL;
  terr e;
  if (expr_compile(src, &ex, &e)) {
    fprintf(stderr, "compile failed for %s: %s\n", src, e.message);
    return -12345.678;
  }
  tarray *in[EXPR_MAX_INPUTS] = {0};
  double res = -12345.678;
  int ok = 1;
  for (int i = 0; i < expr_ninputs(ex); i++) {
    const char *n = expr_input_name(ex, i);
    double v = strcmp(n, "x") == 0 ? x : strcmp(n, "y") == 0 ? y
             : strcmp(n, "z") == 0 ? z : NAN;
    if (strcmp(n, "x") && strcmp(n, "y") && strcmp(n, "z")) ok = 0;
    in[i] = tarray_new(dt, 0, NULL);
    tarray_set(in[i], 0, v);
  }
  size_t ss = (expr_scratch_size(ex) + 63) & ~(size_t)63;
  void *scratch = aligned_alloc(64, ss);
  tarray *out = tarray_new(dt, 0, NULL);
  if (ok && scratch && out) {
    expr_eval(ex, (const tarray *const *)in, out, 0, 1, scratch);
    res = tarray_get(out, 0);
  }
  tarray_free(out);
  free(scratch);
  for (int i = 0; i < EXPR_MAX_INPUTS; i++) tarray_free(in[i]);
  expr_free(ex);
  return res;
}
static double ev(const char *src, double x, double y, double z) {
  return ev_dt(src, x, y, z, T_F64);
}
/* Exact equality, NaN equal to NaN, -0 distinct from +0. */
static int same(double a, double b) {
  if (isnan(a) && isnan(b)) return 1;
  return memcmp(&a, &b, sizeof a) == 0;
}

TEST(test_lex_tokens) {
  expr_tok *t;
  int n;
  terr e;
  CHECK(expr_lex(" x**2 <= 3.5e1 and not y != .5", &t, &n, &e) == 0);
  expr_tok_kind want[] = {TK_NAME, TK_POW, TK_NUM, TK_LE, TK_NUM, TK_AND,
                          TK_NOT,  TK_NAME, TK_NE, TK_NUM, TK_END};
  int pos[] = {1, 2, 4, 6, 9, 15, 19, 23, 25, 28, 30};
  CHECK(n == 11);
  for (int i = 0; i < n && i < 11; i++) {
    CHECK_MSG(t[i].kind == want[i], "token %d kind %d", i, t[i].kind);
    CHECK_MSG(t[i].pos == pos[i], "token %d pos %d", i, t[i].pos);
  }
  CHECK(t[2].num == 2.0 && t[4].num == 35.0 && t[9].num == 0.5);
  free(t);
  CHECK(expr_lex("5. + 1E-3 + 2e+2", &t, &n, &e) == 0);
  CHECK(n == 6 && t[0].num == 5.0 && t[2].num == 1e-3 && t[4].num == 200);
  free(t);
}

TEST(test_precedence) {
  CHECK(ev("-x**2", 3, 0, 0) == -9);
  CHECK(ev("2**-1", 0, 0, 0) == 0.5);
  CHECK(ev("2**3**2", 0, 0, 0) == 512);      /* right-associative */
  CHECK(ev("(2**3)**2", 0, 0, 0) == 64);
  CHECK(ev("-2**2", 0, 0, 0) == -4);
  CHECK(ev("(-2)**2", 0, 0, 0) == 4);
  CHECK(ev("x**-y", 2, 2, 0) == 0.25);
  CHECK(ev("1 + 2*3", 0, 0, 0) == 7);
  CHECK(ev("(1 + 2)*3", 0, 0, 0) == 9);
  CHECK(ev("10 - 4 - 3", 0, 0, 0) == 3);     /* left-associative */
  CHECK(ev("64 / 4 / 2", 0, 0, 0) == 8);
  CHECK(ev("2*7 % 4", 0, 0, 0) == 2);        /* (2*7) % 4 */
  CHECK(ev("- -x", 5, 0, 0) == 5);
  CHECK(ev("+x", 5, 0, 0) == 5);
  CHECK(ev("1 + 2 < 4", 0, 0, 0) == 1);      /* arithmetic before compare */
  CHECK(ev("not x == 1", 1, 0, 0) == 0);     /* not (x == 1) */
  CHECK(ev("0 and 1 or 1", 0, 0, 0) == 1);   /* (0 and 1) or 1 */
  CHECK(ev("1 or 0 and 0", 0, 0, 0) == 1);   /* 1 or (0 and 0) */
  CHECK(ev("not 0 and 0", 0, 0, 0) == 0);    /* (not 0) and 0 */
  CHECK(ev("x*x", 1.5, 0, 0) == 2.25);
  CHECK(ev("x**2 + 2*x + 1", 3, 0, 0) == 16);
  CHECK(ev("-y/x", 4, 2, 0) == -0.5);
}

TEST(test_remainder_and_round) {
  /* NumPy: np.remainder takes the divisor's sign; fmod the dividend's. */
  CHECK(ev("x % y", -7, 3, 0) == 2);
  CHECK(ev("x % y", 7, -3, 0) == -2);
  CHECK(ev("x % y", -7, -3, 0) == -1);
  CHECK(ev("x % y", 5.5, 2, 0) == 1.5);
  CHECK(same(ev("x % y", 6, -3, 0), -0.0));
  CHECK(same(ev("x % y", -6, 3, 0), 0.0));
  CHECK(isnan(ev("x % y", 1, 0, 0)));
  CHECK(ev("fmod(x, y)", -7, 3, 0) == -1);
  CHECK(ev("round(x)", 2.5, 0, 0) == 2);
  CHECK(ev("round(x)", 3.5, 0, 0) == 4);
  CHECK(ev("round(x)", -2.5, 0, 0) == -2);
  CHECK(same(ev("round(x)", -0.5, 0, 0), -0.0));
  CHECK(ev("round(x)", 2.5000001, 0, 0) == 3);
  CHECK(ev_dt("round(x)", 2.5, 0, 0, T_F32) == 2);
  CHECK(ev_dt("x % y", -7, 3, 0, T_F32) == 2);
}

/* sin/cos/exp/log: the 4-ulp functions of expr.h's contract. */
static int is_vec_fn(const char *src) {
  return strncmp(src, "sin(", 4) == 0 || strncmp(src, "cos(", 4) == 0 ||
         strncmp(src, "exp(", 4) == 0 || strncmp(src, "log(", 4) == 0;
}

/* Uses of sin( cos( exp( log( in src as whole names (not asin, exp2...). */
static int count_vec_fns(const char *src) {
  int k = 0;
  for (const char *p = src; *p; p++)
    if ((p == src || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
        is_vec_fn(p))
      k++;
  return k;
}

/* |got - ref| in units of the ulp of ref (ulp of a type with `mant`
 * significand bits and least normal exponent `emin`; subnormals have the
 * ulp of the least normal binade). Both infinite/NaN: 0 when equal. */
static double ulp_err(long double got, long double ref, int mant, int emin) {
  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got) ? 0 : 1e30;
  long double top = mant == 53 ? DBL_MAX : FLT_MAX; /* beyond: rounds to inf */
  if (isinf(got) && !isinf(ref) && fabsl(ref) > top)
    return (got > 0) == (ref > 0) ? 0 : 1e30;
  if (isinf(ref) || isinf(got)) return got == ref ? 0 : 1e30;
  int ex;
  frexpl(ref, &ex);
  if (ref == 0 || ex < emin) ex = emin;
  long double ulp = ldexpl(1.0L, ex - mant);
  return (double)(fabsl(got - ref) / ulp);
}

typedef struct fcase {
  const char *src;
  double x, y;
  double want;
} fcase;

TEST(test_every_function) {
  const fcase c[] = {
      {"abs(x)", -2.5, 0, 2.5},       {"sqrt(x)", 2, 0, sqrt(2)},
      {"cbrt(x)", -27, 0, -3},        {"exp(x)", 0.7, 0, exp(0.7)},
      {"exp2(x)", 3.5, 0, exp2(3.5)}, {"expm1(x)", 1e-10, 0, expm1(1e-10)},
      {"log(x)", 3, 0, log(3)},       {"log2(x)", 10, 0, log2(10)},
      {"log10(x)", 7, 0, log10(7)},   {"log1p(x)", 1e-12, 0, log1p(1e-12)},
      {"sin(x)", 0.3, 0, sin(0.3)},   {"cos(x)", 0.3, 0, cos(0.3)},
      {"tan(x)", 0.3, 0, tan(0.3)},   {"asin(x)", 0.3, 0, asin(0.3)},
      {"acos(x)", 0.3, 0, acos(0.3)}, {"atan(x)", 3, 0, atan(3)},
      {"atan2(x, y)", 1, -2, atan2(1, -2)},
      {"sinh(x)", 0.5, 0, sinh(0.5)}, {"cosh(x)", 0.5, 0, cosh(0.5)},
      {"tanh(x)", 0.5, 0, tanh(0.5)}, {"asinh(x)", 2, 0, asinh(2)},
      {"acosh(x)", 2, 0, acosh(2)},   {"atanh(x)", 0.5, 0, atanh(0.5)},
      {"floor(x)", -1.5, 0, -2},      {"ceil(x)", -1.5, 0, -1},
      {"round(x)", 1.5, 0, 2},        {"trunc(x)", -1.7, 0, -1},
      {"min(x, y)", 3, -4, -4},       {"max(x, y)", 3, -4, 3},
      {"pow(x, y)", 2, 0.5, pow(2, 0.5)},
      {"x ** y", 1.7, 3.3, pow(1.7, 3.3)},
      {"hypot(x, y)", 3, 4, 5},       {"fmod(x, y)", 5.5, 2, 1.5},
      {"where(x, y, 7)", 1, 3, 3},    {"where(x, y, 7)", 0, 3, 7},
      {"fma(x, y, 1)", 3, 0.5, 2.5},
      {"sign(x)", -0.25, 0, -1},      {"isnan(x)", NAN, 0, 1},
      {"isinf(x)", -INFINITY, 0, 1},  {"isfinite(x)", 1e30, 0, 1},
      {"signbit(x)", -0.0, 0, 1},     {"copysign(x, y)", 2, -0.0, -2},
      {"nextafter(x, y)", 1, 2, 1 + 0x1p-52},
      {"ones_like(x)", NAN, 0, 1},
      {"pi", 0, 0, M_PI},             {"e", 0, 0, M_E},
      {"2*pi*x", 0.25, 0, 2 * M_PI * 0.25},
      {"x**3", 1.1, 0, pow(1.1, 3)},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    double got = ev(c[i].src, c[i].x, c[i].y, 0);
    /* want is folded by the C compiler (correctly rounded); glibc's
     * functions are within 1 ulp of it */
    if (is_vec_fn(c[i].src)) {
      /* the 4-ulp contract, against a long double reference */
      long double x = c[i].x;
      long double r = strncmp(c[i].src, "sin", 3) == 0   ? sinl(x)
                      : strncmp(c[i].src, "cos", 3) == 0 ? cosl(x)
                      : strncmp(c[i].src, "exp", 3) == 0 ? expl(x)
                                                         : logl(x);
      CHECK_MSG(ulp_err(got, r, 53, -1021) <= 4, "%s: got %.17g want %.17Lg",
                c[i].src, got, r);
      float g32 = (float)ev_dt(c[i].src, c[i].x, c[i].y, 0, T_F32);
      long double r32 = strncmp(c[i].src, "sin", 3) == 0   ? sinl((float)x)
                        : strncmp(c[i].src, "cos", 3) == 0 ? cosl((float)x)
                        : strncmp(c[i].src, "exp", 3) == 0 ? expl((float)x)
                                                           : logl((float)x);
      CHECK_MSG(ulp_err(g32, r32, 24, -125) <= 4,
                "float32 %s: got %.9g want %.9Lg", c[i].src, g32, r32);
      continue;
    }
    double ulp = nextafter(fabs(c[i].want), INFINITY) - fabs(c[i].want);
    CHECK_MSG(fabs(got - c[i].want) <= ulp, "%s: got %.17g want %.17g",
              c[i].src, got, c[i].want);
    double g32 = ev_dt(c[i].src, c[i].x, c[i].y, 0, T_F32);
    double w32 = (float)c[i].want;
    CHECK_MSG(fabs(g32 - w32) <= ldexp(fabs(w32), -22) + 1e-30,
              "float32 %s: got %.9g want %.9g", c[i].src, g32, w32);
  }
  /* every function of the language is in the table above */
  for (int op = 0; op < EO__COUNT; op++)
    if (expr_ops[op].is_func) {
      int found = 0;
      for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        if (strncmp(c[i].src, expr_ops[op].name,
                    strlen(expr_ops[op].name)) == 0 &&
            c[i].src[strlen(expr_ops[op].name)] == '(')
          found = 1;
      CHECK_MSG(found, "function %s untested", expr_ops[op].name);
    }
}

TEST(test_compare_logic_nan) {
  const char *cmp[] = {"x < y", "x <= y", "x > y", "x >= y", "x == y",
                       "x != y"};
  double pairs[][2] = {{1, 2}, {2, 2}, {3, 2}, {NAN, 1}, {-0.0, 0.0}};
  for (int k = 0; k < 6; k++)
    for (int p = 0; p < 5; p++) {
      double a = pairs[p][0], b = pairs[p][1];
      double want = k == 0 ? a < b : k == 1 ? a <= b : k == 2 ? a > b
                  : k == 3 ? a >= b : k == 4 ? a == b : a != b;
      CHECK_MSG(ev(cmp[k], a, b, 0) == want, "%s with %g, %g", cmp[k], a, b);
      CHECK(ev_dt(cmp[k], a, b, 0, T_F32) == want);
    }
  CHECK(ev("x and y", 2, -1, 0) == 1);
  CHECK(ev("x and y", 2, 0, 0) == 0);
  CHECK(ev("x or y", 0, 0, 0) == 0);
  CHECK(ev("x or y", 0, 0.1, 0) == 1);
  CHECK(ev("not x", 0, 0, 0) == 1);
  CHECK(ev("not x", NAN, 0, 0) == 0); /* NaN is true, as bool(nan) */
  CHECK(ev("x and y", NAN, 1, 0) == 1);
  CHECK(isnan(ev("min(x, y)", NAN, 1, 0)));  /* np.minimum propagates */
  CHECK(isnan(ev("max(x, y)", 1, NAN, 0)));
  CHECK(isnan(ev_dt("max(x, y)", 1, NAN, 0, T_F32)));
  CHECK(ev("where(x > 0, x, -x)", -3, 0, 0) == 3);
  CHECK(ev("where(x > 0 and y > 0, 1, 2)", 1, -1, 0) == 2);
  CHECK(ev("where(x, y, z)", NAN, 5, 6) == 5);
  CHECK(isinf(ev("1/x", 0, 0, 0)));
  CHECK(isnan(ev("sqrt(x)", -1, 0, 0)));
}

TEST(test_inputs_and_folding) {
  expr *x = NULL;
  terr e;
  CHECK(expr_compile("y*2 + x - y + zeta", &x, &e) == 0);
  CHECK(expr_ninputs(x) == 3);
  CHECK_STR(expr_input_name(x, 0), "y");
  CHECK_STR(expr_input_name(x, 1), "x");
  CHECK_STR(expr_input_name(x, 2), "zeta");
  CHECK(expr_input_pos(x, 0) == 0 && expr_input_pos(x, 1) == 6 &&
        expr_input_pos(x, 2) == 14);
  CHECK(expr_input_index(x, "zeta") == 2 && expr_input_index(x, "q") == -1);
  CHECK(expr_input_name(x, 3) == NULL && expr_input_pos(x, -1) == -1);
  expr_free(x);
  /* constants fold to one number; pi and e are not inputs */
  CHECK(expr_compile("2*pi + e**2 - sqrt(16)", &x, &e) == 0);
  CHECK(expr_ninputs(x) == 0);
  double want = 2 * M_PI + pow(M_E, 2) - 4;
  char buf[64];
  snprintf(buf, sizeof buf, "%.17g", want);
  CHECK_STR(expr_canonical(x), buf);
  expr_free(x);
  CHECK(expr_compile("x * (3 - 1) / 4", &x, &e) == 0);
  CHECK_STR(expr_canonical(x), "((in0*2)/4)");
  expr_free(x);
  CHECK(expr_compile("where(1 > 2, x, y)", &x, &e) == 0);
  CHECK_STR(expr_canonical(x), "in1");
  CHECK(expr_bare_input(x) == 1 && expr_program_length(x) == 1);
  expr_free(x);
  const char *bare[] = {"x", "(x)", "+x", "x+1", "2", "-x"};
  const int want_bare[] = {0, 0, 0, -1, -1, -1};
  for (int i = 0; i < 6; i++) {
    CHECK(expr_compile(bare[i], &x, &e) == 0);
    CHECK_MSG(x && expr_bare_input(x) == want_bare[i], "%s", bare[i]);
    expr_free(x);
  }
  CHECK(expr_compile("x**2 + 2*x + 1", &x, &e) == 0);
  CHECK(expr_program_length(x) == 4); /* square, mul, add, add */
  expr_free(x);
  expr_free(NULL);
}

TEST(test_canonical) {
  const char *same_a[] = {"x**2+2*x+1", "  x ** 2 + 2 * x + 1 ",
                          "(x**2) + (2*x) + 1", "pow(x, 2)+2*x+(1)",
                          "x**2+2.0*x+1e0"};
  const char *want = "((pow(in0,2)+(2*in0))+1)";
  for (int i = 0; i < 5; i++) {
    expr *x = NULL;
    terr e;
    CHECK(expr_compile(same_a[i], &x, &e) == 0);
    if (x) CHECK_STR(expr_canonical(x), want);
    expr_free(x);
  }
  expr *a = NULL, *b = NULL;
  terr e;
  /* names do not matter, order of first use does */
  CHECK(expr_compile("-b/a", &a, &e) == 0);
  CHECK(expr_compile("-q / p", &b, &e) == 0);
  CHECK_STR(expr_canonical(a), "((-in0)/in1)");
  CHECK_STR(expr_canonical(a), expr_canonical(b));
  expr_free(a);
  expr_free(b);
  CHECK(expr_compile("x + y", &a, &e) == 0);
  CHECK(expr_compile("x - y", &b, &e) == 0);
  CHECK(strcmp(expr_canonical(a), expr_canonical(b)) != 0);
  expr_free(a);
  expr_free(b);
  CHECK(expr_compile("not x < 1 and where(y, 0.1, -3) % 2", &a, &e) == 0);
  CHECK_STR(expr_canonical(a),
            "((not (in0<1)) and (where(in1,0.10000000000000001,-3)%2))");
  expr_free(a);
}

typedef struct ecase {
  const char *src;
  const char *msg;
  int pos;
} ecase;

TEST(test_errors) {
  const ecase c[] = {
      {"foo(x)", "unknown function 'foo' at 0", 0},
      {"x + foo(1)", "unknown function 'foo' at 4", 4},
      {"x $ 2", "unexpected character '$' at 2", 2},
      {"x = 2", "unexpected character '=' at 2", 2},
      {"x\xc3\xa9", "unexpected character 0xc3 at 1", 1},
      {"(x + 1", "expected ')' at 6", 6},
      {"sin(x", "expected ')' at 5", 5},
      {"x + 1)", "unexpected ')' at 5", 5},
      {"((x)))", "unexpected ')' at 5", 5},
      {"where(x, 1)", "expected 3 arguments to where, got 2 at 0", 0},
      {"2 * sin(x, y)", "expected 1 argument to sin, got 2 at 4", 4},
      {"sin()", "expected 1 argument to sin, got 0 at 0", 0},
      {"atan2(x)", "expected 2 arguments to atan2, got 1 at 0", 0},
      {"", "empty expression at 0", 0},
      {"   ", "empty expression at 3", 3},
      {"x +", "unexpected end of expression at 3", 3},
      {"x y", "unexpected name 'y' at 2", 2},
      {"x 2", "unexpected number '2' at 2", 2},
      {"1e", "bad number '1e' at 0", 0},
      {"1.5.2", "bad number '1.5.' at 0", 0},
      {"0x10", "bad number '0x' at 0", 0},
      {"sin + 1", "function 'sin' needs arguments: expected '(' at 3", 3},
      {"a < b < c", "unexpected '<' at 6", 6},
      {"== 1", "unexpected '==' at 0", 0},
      {"x * * 2", "unexpected '*' at 4", 4},
      {"(,)", "unexpected ',' at 1", 1},
      {"x ** ", "unexpected end of expression at 5", 5},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    expr *x = (expr *)&c; /* must be reset to NULL on failure */
    terr e;
    terr_clear(&e);
    int rc = expr_compile(c[i].src, &x, &e);
    CHECK_MSG(rc == T_EINVAL, "%s compiled", c[i].src);
    CHECK(x == NULL);
    CHECK_MSG(strcmp(e.message, c[i].msg) == 0, "%s: got \"%s\" want \"%s\"",
              c[i].src, e.message, c[i].msg);
    CHECK_MSG(e.position == c[i].pos, "%s: pos %lld", c[i].src,
              (long long)e.position);
    /* the caller names the field */
    terr_prefix(&e, "params.expr");
    CHECK(strncmp(e.message, "params.expr: ", 13) == 0);
    CHECK_STR(e.field, "params.expr");
  }
}

TEST(test_limits) {
  char *s = malloc(EXPR_MAX_SRC + 2);
  terr e;
  expr *x = NULL;
  /* exactly 4096 bytes compiles; 4097 does not */
  memset(s, ' ', EXPR_MAX_SRC);
  s[0] = 'x';
  s[EXPR_MAX_SRC] = 0;
  CHECK(expr_compile(s, &x, &e) == 0);
  expr_free(x);
  s[EXPR_MAX_SRC] = ' ';
  s[EXPR_MAX_SRC + 1] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK_STR(e.message, "expression too long: 4097 bytes (max 4096) at 4096");
  /* nesting: 64 levels of parentheses are fine, 65 are not */
  int k = 0;
  for (int i = 0; i < 64; i++) s[k++] = '(';
  s[k++] = 'x';
  for (int i = 0; i < 64; i++) s[k++] = ')';
  s[k] = 0;
  CHECK(expr_compile(s, &x, &e) == 0);
  expr_free(x);
  k = 0;
  for (int i = 0; i < 65; i++) s[k++] = '(';
  s[k++] = 'x';
  for (int i = 0; i < 65; i++) s[k++] = ')';
  s[k] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK_STR(e.message, "expression nested too deeply (max 64) at 65");
  k = 0;
  for (int i = 0; i < 100; i++) s[k++] = '-';
  s[k++] = 'x';
  s[k] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK(e.position == 65);
  /* deep right-associative powers count as nesting too */
  k = 0;
  for (int i = 0; i < 80; i++) s[k++] = 'x', s[k++] = '*', s[k++] = '*';
  s[k++] = 'x';
  s[k] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK(strstr(e.message, "nested too deeply") != NULL);
  /* nodes: 512 terms = 1023 nodes fit, 513 do not */
  k = 0;
  for (int i = 0; i < 512; i++) s[k++] = 'x', s[k++] = '+';
  s[k - 1] = 0;
  CHECK(expr_compile(s, &x, &e) == 0);
  CHECK(x && expr_ninputs(x) == 1);
  expr_free(x);
  s[k - 1] = '+';
  s[k++] = 'x';
  s[k] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK(strstr(e.message, "too large (max 1024 nodes)") != NULL);
  /* 16 inputs fine, 17th named */
  k = 0;
  for (int i = 0; i < 17; i++)
    k += snprintf(s + k, 64, "%sa%d", i ? "+" : "", i);
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK_STR(e.message, "too many inputs (max 16) at 54");
  s[54 - 1] = 0; /* drop "+a16" */
  CHECK(expr_compile(s, &x, &e) == 0);
  CHECK(x && expr_ninputs(x) == 16);
  expr_free(x);
  /* a name of 64 bytes is fine, 65 is not */
  memset(s, 'n', 65);
  s[65] = 0;
  CHECK(expr_compile(s, &x, &e) == T_EINVAL);
  CHECK_STR(e.message, "name too long (max 64 characters) at 0");
  s[64] = 0;
  CHECK(expr_compile(s, &x, &e) == 0);
  expr_free(x);
  /* a wide balanced tree still fits the registers */
  k = 0;
  for (int i = 0; i < 6; i++) s[k++] = '(';
  s[k] = 0;
  CHECK(expr_compile("((x+y)*(x-y))/((x*y)+(y/x)) - ((x+1)*(y+2))", &x, &e) ==
        0);
  expr_free(x);
  free(s);
}

TEST(test_emit_c_text) {
  expr *x = NULL;
  terr e;
  char buf[512];
  CHECK(expr_compile("-b/a", &x, &e) == 0);
  int n = expr_emit_c(x, "double", "tx_", buf, sizeof buf);
  CHECK_STR(buf, "((-v0) / v1)");
  CHECK(n == (int)strlen(buf));
  CHECK(expr_emit_c(x, "double", "tx_", buf, 5) == -1);
  CHECK(expr_emit_c(x, "double", "tx_", buf, (size_t)n) == -1);
  CHECK(expr_emit_c(x, "double", "tx_", buf, (size_t)n + 1) == n);
  expr_free(x);
  CHECK(expr_compile("x % 2 + x**0.5 - round(x) * (x < 1) + where(x, 1, -x)",
                     &x, &e) == 0);
  expr_emit_c(x, "float", "tx_", buf, sizeof buf);
  CHECK_STR(buf,
            "(((tx_remainder(v0, ((float)2.0)) + tx_pow(v0, ((float)0.5))) - "
            "(tx_round(v0) * ((float)(v0 < ((float)1.0))))) + "
            "tx_where(v0, ((float)1.0), (-v0)))");
  expr_free(x);
  CHECK(expr_compile("x and not y or 1/0 + x", &x, &e) == 0);
  expr_emit_c(x, "double", "g_", buf, sizeof buf);
  CHECK_STR(buf,
            "((double)((((double)((v0) != 0 && (((double)(v1 == 0))) != 0))) "
            "!= 0 || ((((double)(1.0/0.0)) + v0)) != 0))");
  expr_free(x);
}

/* Compile the emitted C with the semantics of compute/expr/expr_math.h and compare with
 * the VM at a few points. Skipped when no C compiler is installed. */
TEST(test_emit_c_compiles) {
  if (system("cc --version >/dev/null 2>&1") != 0)
    SKIP_TEST("no cc: emitted C not compiled (Debian's build-essential)");
  const char *exprs[] = {
      "x**2 + 2*x + 1", "sin(x)*exp(-x)", "-y/x", "x % y + fmod(x, y)",
      "where(x > y and not (x == 0), hypot(x, y), atan2(y, x))",
      "round(x*3) + floor(y) - ceil(x) + trunc(y) + min(x, y) * max(x, y)",
      "abs(x) + sqrt(abs(y)) + cbrt(x) + exp2(y) + expm1(x) + log(abs(x)) "
      "+ log2(abs(y)) + log10(abs(x)) + log1p(abs(y)) + cos(x) + tan(y) "
      "+ asin(x/10) + acos(y/10) + atan(x) + sinh(y) + cosh(x) + tanh(y) "
      "+ asinh(x) + acosh(abs(y)+1) + atanh(x/10) + pow(abs(x), y) + pi + e"};
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char cpath[256], bpath[256], cmd[700];
  snprintf(cpath, sizeof cpath, "%s/tessel_emit_%d.c", dir, (int)getpid());
  snprintf(bpath, sizeof bpath, "%s/tessel_emit_%d", dir, (int)getpid());
  FILE *f = fopen(cpath, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "#include <math.h>\n#include <stdio.h>\n"
             "static double tx_remainder(double a, double b) {"
             " double m = fmod(a, b); if (b == 0) return m;"
             " if (m != 0) { if ((b < 0) != (m < 0)) m += b; }"
             " else m = copysign(0.0, b); return m; }\n"
             "static double tx_where(double c, double a, double b)"
             " { return c != 0 ? a : b; }\n"
             "static double tx_round(double a) { return rint(a); }\n"
             "static double tx_min(double a, double b)"
             " { return a != a || b != b ? a + b : a < b ? a : b; }\n"
             "static double tx_max(double a, double b)"
             " { return a != a || b != b ? a + b : a > b ? a : b; }\n"
             "static double tx_abs(double a) { return fabs(a); }\n");
  const char *plain[] = {"sqrt", "cbrt", "exp", "exp2", "expm1", "log",
                         "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
                         "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                         "acosh", "atanh", "floor", "ceil", "trunc"};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
    fprintf(f, "static double tx_%s(double a) { return %s(a); }\n", plain[i],
            plain[i]);
  fprintf(f, "static double tx_pow(double a, double b) { return pow(a, b); }\n"
             "static double tx_atan2(double a, double b) { return atan2(a, b); }\n"
             "static double tx_hypot(double a, double b) { return hypot(a, b); }\n"
             "static double tx_fmod(double a, double b) { return fmod(a, b); }\n"
             "int main(void) {\n"
             "  static const double pts[][2] = {{0.3, 1.7}, {-2.5, 0.25},"
             " {3.0, -1.5}, {7.25, 2.0}};\n"
             "  for (int i = 0; i < 4; i++) {\n"
             "    double v0 = pts[i][0], v1 = pts[i][1];\n"
             "    (void)v1;\n");
  char buf[4096];
  for (size_t k = 0; k < sizeof exprs / sizeof *exprs; k++) {
    expr *x = NULL;
    terr e;
    CHECK(expr_compile(exprs[k], &x, &e) == 0);
    if (!x) continue;
    CHECK(expr_emit_c(x, "double", "tx_", buf, sizeof buf) > 0);
    /* v0 is the first input used; map names to the points' columns */
    const char *n0 = expr_input_name(x, 0);
    int swap = n0 && strcmp(n0, "y") == 0;
    fprintf(f, "    { double w0 = %s, w1 = %s; (void)w1;\n", swap ? "v1" : "v0",
            swap ? "v0" : "v1");
    fprintf(f, "      { double v0 = w0, v1 = w1; (void)v1;"
               " printf(\"%%a\\n\", %s); } }\n", buf);
    expr_free(x);
  }
  fprintf(f, "  }\n  return 0;\n}\n");
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "cc -std=c11 -O1 -ffp-contract=off -Wall -Werror -o %s %s -lm 2>&1", bpath, cpath);
  int rc = system(cmd);
  CHECK_MSG(rc == 0, "emitted C did not compile: %s", cpath);
  if (rc != 0) return;
  FILE *p = popen(bpath, "r");
  CHECK(p != NULL);
  if (!p) return;
  double pts[4][2] = {{0.3, 1.7}, {-2.5, 0.25}, {3.0, -1.5}, {7.25, 2.0}};
  char line[128];
  for (int i = 0; i < 4; i++)
    for (size_t k = 0; k < sizeof exprs / sizeof *exprs; k++) {
      if (!fgets(line, sizeof line, p)) {
        CHECK(0);
        break;
      }
      double got = strtod(line, NULL);
      double want = ev(exprs[k], pts[i][0], pts[i][1], 0);
      int nv = count_vec_fns(exprs[k]);
      if (nv == 0) {
        CHECK_MSG(same(got, want), "%s at %d: C %.17g VM %.17g", exprs[k], i,
                  got, want);
      } else {
        /* libm (C) vs libmvec (VM): each of the nv uses is within 4 ulp of
         * the correctly rounded value, the rest is the same arithmetic
         * (one more rounding); terms here are of magnitude <= max(|r|,1) */
        double tol = (4.0 * nv + 4) * ldexp(fmax(fabs(want), 1), -52);
        CHECK_MSG(fabs(got - want) <= tol, "%s at %d: C %.17g VM %.17g",
                  exprs[k], i, got, want);
      }
    }
  pclose(p);
  remove(cpath);
  remove(bpath);
}

/* ---- sin/cos/exp/log accuracy (the 4-ulp contract) -------------------- */

/* out[i] = src(x = in[i]) over a 1-d array of n elements, through the VM
 * in dtype dt, in blocks of 1000 (so chunk starts and tails vary). */
static void ev_arr(const char *src, tdtype dt, const double *in, int n,
                   double *out) {
  expr *ex = NULL;
  terr e;
  CHECK(expr_compile(src, &ex, &e) == 0);
  if (!ex) return;
  int64_t sh = n;
  tarray *a = tarray_new(dt, 1, &sh), *o = tarray_new(dt, 1, &sh);
  size_t ss = (expr_scratch_size(ex) + 63) & ~(size_t)63;
  void *scratch = aligned_alloc(64, ss);
  CHECK(a && o && scratch);
  if (a && o && scratch) {
    for (int i = 0; i < n; i++) tarray_set(a, i, in[i]);
    const tarray *ins[1] = {a};
    for (int64_t s0 = 0; s0 < n; s0 += 1000)
      expr_eval(ex, ins, o, s0, n - s0 < 1000 ? n - s0 : 1000, scratch);
    for (int i = 0; i < n; i++) out[i] = tarray_get(o, i);
  }
  free(scratch);
  tarray_free(a);
  tarray_free(o);
  expr_free(ex);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static double rng_unit(void) { /* [0, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * 0x1p-53;
}

typedef struct vrange {
  const char *fn;
  double lo, hi;
  int logscale, sign; /* log-uniform |x| in [lo, hi]; random sign */
} vrange;

static long double ref_fn(const char *fn, long double x) {
  return fn[0] == 's' ? sinl(x) : fn[0] == 'c' ? cosl(x)
       : fn[0] == 'e' ? expl(x) : logl(x);
}

TEST(test_mvec_accuracy) {
  enum { N = 8191 };
  static double in[N], out[N];
  const vrange r64[] = {
      {"sin", -10, 10, 0, 0},     {"sin", 1e-300, 1e6, 1, 1},
      {"sin", 1e6, 1e300, 1, 1},  {"cos", -10, 10, 0, 0},
      {"cos", 1e-300, 1e6, 1, 1}, {"cos", 1e6, 1e300, 1, 1},
      {"exp", -745, 710, 0, 0},   {"exp", -1, 1, 0, 0},
      {"exp", 700, 709.78, 0, 0}, {"exp", -745.1, -708, 0, 0},
      {"log", 1e-300, 4, 0, 0},   {"log", 4.9e-324, 1.7e308, 1, 0},
  };
  const vrange r32[] = {
      {"sin", -100, 100, 0, 0},     {"cos", -100, 100, 0, 0},
      {"exp", -103, 88.7, 0, 0},    {"log", 1.5e-45, 3.4e38, 1, 0},
  };
  double worst[2][4] = {{0}};
  for (int t = 0; t < 2; t++) {
    const vrange *rs = t == 0 ? r64 : r32;
    size_t nr = t == 0 ? sizeof r64 / sizeof *r64 : sizeof r32 / sizeof *r32;
    for (size_t k = 0; k < nr; k++) {
      for (int i = 0; i < N; i++) {
        double u = rng_unit(), x;
        if (rs[k].logscale)
          x = exp(log(rs[k].lo) + u * (log(rs[k].hi) - log(rs[k].lo)));
        else
          x = rs[k].lo + u * (rs[k].hi - rs[k].lo);
        if (rs[k].sign && rng_unit() < 0.5) x = -x;
        in[i] = t == 0 ? x : (double)(float)x;
      }
      char src[16];
      snprintf(src, sizeof src, "%s(x)", rs[k].fn);
      ev_arr(src, t == 0 ? T_F64 : T_F32, in, N, out);
      int f = rs[k].fn[0] == 's' ? 0 : rs[k].fn[0] == 'c' ? 1
            : rs[k].fn[0] == 'e' ? 2 : 3;
      for (int i = 0; i < N; i++) {
        long double r = ref_fn(rs[k].fn, in[i]);
        double u = t == 0 ? ulp_err(out[i], r, 53, -1021)
                          : ulp_err((float)out[i], r, 24, -125);
        if (u > worst[t][f]) worst[t][f] = u;
        if (u > 4) {
          CHECK_MSG(0, "%s%s(%.17g) = %.17g, want %.17Lg (%.2f ulp)",
                    rs[k].fn, t ? "f" : "", in[i], out[i], r, u);
          break;
        }
      }
    }
  }
  printf("     max ulp: sin %.2f cos %.2f exp %.2f log %.2f | "
         "sinf %.2f cosf %.2f expf %.2f logf %.2f\n",
         worst[0][0], worst[0][1], worst[0][2], worst[0][3], worst[1][0],
         worst[1][1], worst[1][2], worst[1][3]);
  for (int t = 0; t < 2; t++)
    for (int f = 0; f < 4; f++) CHECK(worst[t][f] <= 4);

  /* special values: exactly libm's (NaN sign aside) */
  const double sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0,
                       1000, -1000, 709.79, -745.2, 88.8, -104, 4.9e-324,
                       DBL_MAX, -DBL_MAX, 1e22, 3};
  const int ns = (int)(sizeof sp / sizeof *sp);
  const char *fns[] = {"sin", "cos", "exp", "log"};
  for (int f = 0; f < 4; f++) {
    char src[16];
    snprintf(src, sizeof src, "%s(x)", fns[f]);
    ev_arr(src, T_F64, sp, ns, out);
    for (int i = 0; i < ns; i++) {
      double w = f == 0 ? sin(sp[i]) : f == 1 ? cos(sp[i])
               : f == 2 ? exp(sp[i]) : log(sp[i]);
      if (isnan(w) || isinf(w) || w == 0 || fabs(w) < DBL_MIN ||
          isnan(out[i]) || isinf(out[i]))
        CHECK_MSG(same(out[i], w) || (fabs(w) < DBL_MIN && w != 0 &&
                                      ulp_err(out[i], w, 53, -1021) <= 4),
                  "%s(%.17g) = %.17g, libm %.17g", fns[f], sp[i], out[i], w);
    }
    ev_arr(src, T_F32, sp, ns, out);
    for (int i = 0; i < ns; i++) {
      float xf = (float)sp[i];
      float w = f == 0 ? sinf(xf) : f == 1 ? cosf(xf)
              : f == 2 ? expf(xf) : logf(xf);
      float g = (float)out[i];
      if (isnan(w) || isinf(w) || w == 0 || fabsf(w) < FLT_MIN ||
          isnan(g) || isinf(g))
        CHECK_MSG(same(g, w) || (fabsf(w) < FLT_MIN && w != 0 &&
                                 ulp_err(g, w, 24, -125) <= 4),
                  "%sf(%.9g) = %.9g, libm %.9g", fns[f], xf, g, w);
    }
  }
}

/* out = src over arrays x, y, z of dtype dt (n elements each). */
static tarray *ev_arrays(const char *src, tarray *const *xyz, tdtype dt) {
  expr *ex = NULL;
  terr e;
  CHECK_MSG(expr_compile(src, &ex, &e) == 0, "%s: %s", src, e.message);
  if (!ex) return NULL;
  const tarray *in[3];
  for (int i = 0; i < expr_ninputs(ex); i++)
    in[i] = xyz[expr_input_name(ex, i)[0] - 'x'];
  tarray *out = tarray_new(dt, 1, xyz[0]->shape);
  void *scratch = aligned_alloc(64, (expr_scratch_size(ex) + 63) & ~(size_t)63);
  expr_eval(ex, in, out, 0, out->size, scratch);
  free(scratch);
  expr_free(ex);
  return out;
}

/* a*b + c is two roundings and fma(a, b, c) one, as in NumPy and on the GPU
 * (issue 23, case 10). With a = 1 + h, b = 1 - h, c = -1: a*b = 1 - h*h
 * rounds to 1, so a*b + c is 0, where a contracted multiply-add gives
 * -h*h (h = 2^-30 in float64, 2^-13 in float32, scaled by 2^k per
 * element). Arrays (the vector loops), 0-d inputs and folded constants. */
TEST(test_no_contraction) {
  for (int t = 0; t < 2; t++) {
    tdtype dt = t ? T_F32 : T_F64;
    double h = t ? 0x1p-13 : 0x1p-30;
    int64_t n = 1001;
    tarray *xyz[3];
    for (int i = 0; i < 3; i++) xyz[i] = tarray_new(dt, 1, &n);
    for (int64_t i = 0; i < n; i++) {
      double s = ldexp(1, (int)(i % 41) - 20);
      tarray_set(xyz[0], i, (1 + h) * s);
      tarray_set(xyz[1], i, 1 - h);
      tarray_set(xyz[2], i, -s);
    }
    static const char *const zero[] = {"x*y + z", "z + x*y", "x*y - (-z)",
                                       "-(x*y) - z", "x*y*1 + z"};
    for (size_t k = 0; k < sizeof zero / sizeof *zero; k++) {
      tarray *o = ev_arrays(zero[k], xyz, dt);
      int64_t bad = 0;
      for (int64_t i = 0; o && i < n; i++) bad += tarray_get(o, i) != 0;
      CHECK_MSG(o && bad == 0, "%s (%s): %lld elements not 0 (contracted?)",
                zero[k], tdtype_name(dt), (long long)bad);
      tarray_free(o);
    }
    tarray *f = ev_arrays("fma(x, y, z)", xyz, dt);
    int64_t bad = 0;
    for (int64_t i = 0; f && i < n; i++) {
      double s = ldexp(1, (int)(i % 41) - 20);
      bad += tarray_get(f, i) != -h * h * s;
    }
    CHECK_MSG(f && bad == 0, "fma (%s): %lld elements not the fused value",
              tdtype_name(dt), (long long)bad);
    tarray_free(f);
    for (int i = 0; i < 3; i++) tarray_free(xyz[i]);
    /* 0-d inputs: the scalar paths */
    CHECK(ev_dt("x*y + z", 1 + h, 1 - h, -1, dt) == 0);
    CHECK(ev_dt("fma(x, y, z)", 1 + h, 1 - h, -1, dt) == -h * h);
    CHECK(ev_dt("fma(x, 2, 1)", 3, 0, 0, dt) == 7);
  }
  /* folding (in float64) */
  CHECK(ev("(1 + 2**-30) * (1 - 2**-30) - 1", 0, 0, 0) == 0);
  CHECK(ev("fma(1 + 2**-30, 1 - 2**-30, -1)", 0, 0, 0) == -0x1p-60);
  /* the emitted text calls tx_fma; a wrong arity is an error */
  expr *x = NULL;
  terr e;
  CHECK(expr_compile("fma(a, b, c)", &x, &e) == 0);
  if (x) {
    char buf[256];
    CHECK(expr_emit_c(x, "double", "tx_", buf, sizeof buf) > 0);
    CHECK_STR(buf, "tx_fma(v0, v1, v2)");
    CHECK_STR(expr_canonical(x), "fma(in0,in1,in2)");
    expr_free(x);
  }
  CHECK(expr_compile("fma(a, b)", &x, &e) != 0);
  CHECK_STR(e.message, "expected 3 arguments to fma, got 2 at 0");
}

int main(void) {
  RUN(test_lex_tokens);
  RUN(test_precedence);
  RUN(test_remainder_and_round);
  RUN(test_every_function);
  RUN(test_compare_logic_nan);
  RUN(test_inputs_and_folding);
  RUN(test_canonical);
  RUN(test_errors);
  RUN(test_limits);
  RUN(test_emit_c_text);
  RUN(test_emit_c_compiles);
  RUN(test_mvec_accuracy);
  RUN(test_no_contraction);
  return check_summary();
}
