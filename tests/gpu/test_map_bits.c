/* test_map_bits.c — map on the GPU gives the CPU's bits (issue 23, case 10),
 * and the ulp error of every transcendental on both backends.
 *
 * Bit identity: the same map run by gpu_map and by the CPU's evaluator
 * (expr_eval, what the serial and cpu backends run) must agree bit for bit
 * — ±0 included, NaN in the same positions (a NaN's payload and sign are
 * not compared: the GPU's default NaN is not x86's) — on every expression
 * made of + - * /, comparisons, logic, where, abs, floor/ceil/round/trunc,
 * sqrt, fmod, % and min/max, and NumPy's // (floor_divide), sign, isnan,
 * isinf, isfinite, signbit, copysign, nextafter, minimum/maximum and
 * ones_like, in float64 and float32 (and float32 out of
 * float64 inputs). The inputs are a grid of special values taken pairwise
 * (±0, ±inf, NaN, the smallest and largest subnormals and normals, ±1e308,
 * values whose products round, halfway cases of round) followed by random
 * blocks: [-1, 1], [-1e6, 1e6], magnitudes log-uniform over the whole
 * exponent range, raw bit patterns, and two built to cancel (c = -(a*b)
 * rounded, a*b - 1 with b = 1/a): there a contracted multiply-add gives the
 * rounding error of a*b instead of 0, which is how the GPU once differed
 * by 2.5e15 ulp. fma(a, b, c) must agree too (one rounding on both). A
 * reduce's max/min over rows of such an expression (order does not matter
 * for them) must agree bit for bit as well: the reduce kernel evaluates
 * the expression the same way.
 *
 * Accuracy: each transcendental over 2^19 random inputs per dtype, half
 * uniform over its usual range and half log-uniform in magnitude up to that
 * range's end, on both backends, against the long double libm value of the
 * same input, in ulps of the result's type; each must be within the bound
 * api/API.md states (--ulp prints the table without checking it). Before
 * the fix (kernels compiled with --fmad=true) 40 of the 52 map checks and
 * the 6 float64 reduce checks failed on an H200
 * (tests/bench/results/h200_map_bits-2026-11-28.md). Exits 77 without a
 * GPU.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#if TESSEL_HAVE_CUDA
#include "compute/expr/expr.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/gpu_kernels.h"
#include "gpu_test_util.h"

static int g_print_ulp;

static tarray *cpu_map(const expr *x, const tarray *const *in, tdtype dt,
                       int ndim, const int64_t *shape) {
  tarray *out = tarray_new(dt, ndim, shape);
  void *scratch = aligned_alloc(64, (expr_scratch_size(x) + 63) / 64 * 64);
  for (int64_t s = 0; s < out->size; s += EXPR_BLOCK) {
    int64_t n = out->size - s < EXPR_BLOCK ? out->size - s : EXPR_BLOCK;
    expr_eval(x, in, out, s, n, scratch);
  }
  free(scratch);
  return out;
}

static tarray *gpu_run(const expr *x, const tarray *const *in, tdtype dt,
                       int ndim, const int64_t *shape) {
  tarray *out = tu_poisoned(dt, ndim, shape);
  terr e;
  terr_clear(&e);
  tu_job j;
  tu_job_init(&j, 0);
  int rc = gpu_map(0, x, in, NULL, out, &j.ctx, &e);
  CHECK_MSG(rc == 0, "%s: %s", expr_canonical(x), e.message);
  if (rc) {
    tarray_free(out);
    return NULL;
  }
  return out;
}

/* ---- inputs ------------------------------------------------------------ */

#define GRID_MAX 64
static int grid(tdtype dt, double *g) {
  static const double common[] = {
      0.0, -0.0, INFINITY, -INFINITY, NAN,
      0x1p-1074, -0x1p-1074, 0x0.fffffffffffffp-1022, DBL_MIN, -DBL_MIN,
      1e-308, -1e-308, 1e-300, 1e-200, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5,
      3.0, -7.0, 0.1, -0.3, 1.0 / 3, 1 + 0x1p-52, 1 - 0x1p-53,
      67108865.0, 1e16, -1e16, 1.3407807929942596e154, 1e154, 1e300, -1e300,
      1e308, -1e308, DBL_MAX, -DBL_MAX, 4503599627370497.0,
      0.49999999999999994, 3.141592653589793};
  static const double f32[] = {
      0x1p-149, -0x1p-149, 0x0.fffffep-126, 0x1p-126, -0x1p-126, 1e-38,
      3.4028234663852886e38, -3.4028234663852886e38, 1e38, 16777217.0,
      1 + 0x1p-23, 1 - 0x1p-24, 0.4999999701976776, 4097.0};
  int n = 0;
  for (size_t i = 0; i < sizeof common / sizeof *common; i++) g[n++] = common[i];
  if (dt == T_F32)
    for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++) g[n++] = f32[i];
  return n;
}

/* Any finite or not value with a random sign and exponent (subnormals too). */
static double wide(uint64_t *s, tdtype dt) {
  int emin = dt == T_F64 ? -1074 : -149, emax = dt == T_F64 ? 1023 : 127;
  double m = 1 + (double)(tu_next(s) >> 11) * 0x1p-53;
  int ex = emin + (int)(tu_next(s) % (uint64_t)(emax - emin + 1));
  double v = ldexp(m, ex);
  return tu_next(s) & 1 ? -v : v;
}

static double raw_bits(uint64_t *s, tdtype dt) {
  uint64_t r = tu_next(s);
  if (dt == T_F64) {
    double v;
    memcpy(&v, &r, 8);
    return v;
  }
  uint32_t h = (uint32_t)(r >> 32);
  float f;
  memcpy(&f, &h, 4);
  return f;
}

#define BLOCK_N 32768
/* Three inputs of n elements: the grid pairwise, then six random blocks. */
static int64_t make_inputs(tdtype dt, tarray **in) {
  double g[GRID_MAX];
  int ng = grid(dt, g);
  int64_t n = (int64_t)ng * ng + 6 * BLOCK_N;
  for (int i = 0; i < 3; i++) in[i] = tarray_new(dt, 1, &n);
  int64_t k = 0;
  for (int i = 0; i < ng; i++)
    for (int j = 0; j < ng; j++, k++) {
      tarray_set(in[0], k, g[i]);
      tarray_set(in[1], k, g[j]);
      tarray_set(in[2], k, g[(i * 7 + j * 3 + 1) % ng]);
    }
  uint64_t s = 12345;
  double eps = dt == T_F64 ? 1e-6 : 1e-3;
  for (int blk = 0; blk < 6; blk++)
    for (int q = 0; q < BLOCK_N; q++, k++) {
      double a, b, c;
      switch (blk) {
        case 0: a = tu_uniform(&s, -1, 1); b = tu_uniform(&s, -1, 1);
                c = tu_uniform(&s, -1, 1); break;
        case 1: a = tu_uniform(&s, -1e6, 1e6); b = tu_uniform(&s, -1e6, 1e6);
                c = tu_uniform(&s, -1e6, 1e6); break;
        case 2: a = wide(&s, dt); b = wide(&s, dt); c = wide(&s, dt); break;
        case 3: a = raw_bits(&s, dt); b = raw_bits(&s, dt);
                c = raw_bits(&s, dt); break;
        case 4: /* a*b + c == 0 unless contracted; a near -1 for x**2+2x+1 */
          a = -1 + tu_uniform(&s, -eps, eps);
          b = tu_uniform(&s, -2, 2);
          if (dt == T_F64) c = -(a * b);
          else c = -(double)((float)a * (float)b);
          break;
        default: /* a*b - 1 with b = 1/a rounded */
          a = tu_uniform(&s, 1, 2);
          b = dt == T_F64 ? 1 / a : (double)(1 / (float)a);
          c = -1;
          break;
      }
      tarray_set(in[0], k, a);
      tarray_set(in[1], k, b);
      tarray_set(in[2], k, c);
    }
  return n;
}

/* ---- bit identity ------------------------------------------------------ */

static int same_bits(const tarray *g, const tarray *c, int64_t i) {
  if (g->dtype == T_F64) {
    double a = ((const double *)g->data)[i], b = ((const double *)c->data)[i];
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, 8) == 0;
  }
  float a = ((const float *)g->data)[i], b = ((const float *)c->data)[i];
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return memcmp(&a, &b, 4) == 0;
}

/* Distance in representable values (for the message only). */
static double ulp_dist(double a, double b, tdtype dt) {
  if (isnan(a) || isnan(b)) return INFINITY;
  if (dt == T_F64) {
    int64_t x, y;
    memcpy(&x, &a, 8);
    memcpy(&y, &b, 8);
    if (x < 0) x = INT64_MIN - x;
    if (y < 0) y = INT64_MIN - y;
    return fabs((double)x - (double)y);
  }
  float fa = (float)a, fb = (float)b;
  int32_t x, y;
  memcpy(&x, &fa, 4);
  memcpy(&y, &fb, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return fabs((double)x - (double)y);
}

static void check_bits(const char *src, tdtype out_dt, tarray *const *in) {
  terr e;
  expr *x = NULL;
  CHECK_MSG(expr_compile(src, &x, &e) == 0, "%s: %s", src, e.message);
  if (!x) return;
  const tarray *ins[3];
  int nin = expr_ninputs(x);
  for (int i = 0; i < nin; i++) {
    const char *nm = expr_input_name(x, i);
    ins[i] = in[nm[0] - 'a'];
  }
  tarray *ref = cpu_map(x, ins, out_dt, 1, in[0]->shape);
  tarray *out = gpu_run(x, ins, out_dt, 1, in[0]->shape);
  int64_t differ = 0, nanone = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; out && i < ref->size; i++) {
    if (same_bits(out, ref, i)) continue;
    double a = tarray_get(out, i), b = tarray_get(ref, i);
    if (isnan(a) != isnan(b)) nanone++;
    else differ++;
    double d = ulp_dist(a, b, out_dt);
    if (d > worst) worst = d;
    if (first < 0) first = i;
  }
  printf("     %-46s %s in %s: %lld differ, %lld NaN on one side, max %.3g ulp\n",
         src, tdtype_name(out_dt), tdtype_name(in[0]->dtype), (long long)differ,
         (long long)nanone, worst);
  CHECK_MSG(out && differ == 0 && nanone == 0,
            "%s (%s): first [%lld] a %.17g b %.17g c %.17g: gpu %.17g cpu %.17g",
            src, tdtype_name(out_dt), (long long)first,
            first >= 0 ? tarray_get(in[0], first) : 0.0,
            first >= 0 ? tarray_get(in[1], first) : 0.0,
            first >= 0 ? tarray_get(in[2], first) : 0.0,
            first >= 0 && out ? tarray_get(out, first) : 0.0,
            first >= 0 ? tarray_get(ref, first) : 0.0);
  tarray_free(ref);
  tarray_free(out);
  expr_free(x);
}

static const char *const exact_exprs[] = {
    "a*b + 1", "a**2 + 2*a + 1", "a*b + c", "a*b - c", "c - a*b",
    "-a*b + c", "a*b + b*c", "(a + b)*(a - b) + c", "a/b + c", "a*b/c - a",
    "a*a*a + b*b - c*c", "sqrt(abs(a*b + c))", "sqrt(a)*sqrt(b) + c",
    "fmod(a*b, c) + a", "a % b * c + a", "floor(a*b + c) + ceil(a*c - b)",
    "round(a*b + c) - trunc(a/c)", "where(a*b + c > 0, a*b + c, -(a*c) + b)",
    "(a < b)*a*b + (a >= c)*c", "abs(a*b + c)*(a != b) + (a == c)",
    "min(a*b, c) + max(a, b*c)", "not (a*b + c) or (a <= b and b > c)",
    "fma(a, b, c)", "fma(a, b, c) - a*b", "fma(a, a, 2*a) + 1",
    /* NumPy's functions (issue 28): exact on both sides */
    "a // b", "a*b // c + a % c", "floor_divide(a, c) - b",
    "sign(a*b - c)", "isnan(a*b) + 2*isinf(a + c) + 4*isfinite(a/b)",
    /* the sign of a NaN an operation made is the hardware's (x86 makes
     * -nan, an H200 +nan in float32: API.md), so signbit and copysign read
     * only signs of non-NaN values or of the inputs' own NaNs */
    "where(isnan(a*b + c), 0, signbit(a*b + c)) + signbit(a)",
    "copysign(a*b, where(isnan(c - a), b, c - a))",
    "nextafter(a, b)", "nextafter(a*b, c)", "minimum(a, b) - maximum(b, c)",
    "ones_like(a) + conj(b)",
};

TEST(map_bits_like_the_cpu) {
  for (int t = 0; t < 2; t++) {
    tdtype dt = t ? T_F32 : T_F64;
    tarray *in[3];
    int64_t n = make_inputs(dt, in);
    printf("     %s: %lld elements (grid pairs + 6 random blocks)\n",
           tdtype_name(dt), (long long)n);
    for (size_t k = 0; k < sizeof exact_exprs / sizeof *exact_exprs; k++)
      check_bits(exact_exprs[k], dt, in);
    if (dt == T_F64) { /* float32 results of float64 inputs */
      check_bits("a*b + c", T_F32, in);
      check_bits("a**2 + 2*a + 1", T_F32, in);
      check_bits("a // b", T_F32, in);
      check_bits("nextafter(a, b)", T_F32, in);
    }
    for (int i = 0; i < 3; i++) tarray_free(in[i]);
  }
}

/* The reduce kernel evaluates the expression as map does: max and min over
 * rows (the order of the fold does not matter for them) are bit for bit. */
TEST(reduce_bits_like_the_cpu) {
  static const char *const ex[] = {"a*b + c", "a**2 + 2*a + 1", "a*b - 1"};
  for (int t = 0; t < 2; t++) {
    tdtype dt = t ? T_F32 : T_F64;
    tarray *flat[3];
    int64_t n = make_inputs(dt, flat);
    int64_t cols = 64, rows = (2 * BLOCK_N) / cols, sh[2] = {rows, cols};
    tarray *in[3];
    for (int i = 0; i < 3; i++) { /* the two cancelling blocks */
      in[i] = tarray_new(dt, 2, sh);
      size_t es = tdtype_size(dt);
      memcpy(in[i]->data, (char *)flat[i]->data + (size_t)(n - 2 * BLOCK_N) * es,
             (size_t)(2 * BLOCK_N) * es);
      tarray_free(flat[i]);
    }
    for (size_t k = 0; k < sizeof ex / sizeof *ex; k++)
      for (int op = R_MIN; op <= R_MAX; op += R_MAX - R_MIN) {
        terr e;
        expr *x = NULL;
        CHECK(expr_compile(ex[k], &x, &e) == 0);
        if (!x) continue;
        const tarray *ins[3];
        for (int i = 0; i < expr_ninputs(x); i++)
          ins[i] = in[expr_input_name(x, i)[0] - 'a'];
        reduce_spec r = {.x = x, .inputs = ins, .ndim = 2, .shape = sh,
                         .op = (reduce_op)op, .axis = 1, .ddof = 0};
        tarray *ref = tu_poisoned(dt, 1, &rows), *out = tu_poisoned(dt, 1, &rows);
        tu_job jc, j;
        tu_job_init(&jc, 0);
        tu_job_init(&j, 0);
        CHECK_MSG(reduce_cpu_run(&r, ref, &jc.ctx, 1, &e) == 0, "%s", e.message);
        CHECK_MSG(gpu_reduce(0, (reduce_op)op, x, ins, NULL, 1, out, &j.ctx, &e) == 0,
                  "%s", e.message);
        int64_t bad = 0;
        for (int64_t i = 0; i < rows; i++) bad += !same_bits(out, ref, i);
        printf("     reduce %s(%s) %s axis 1: %lld of %lld rows differ\n",
               reduce_op_name((reduce_op)op), ex[k], tdtype_name(dt),
               (long long)bad, (long long)rows);
        CHECK_MSG(bad == 0, "reduce %s(%s) %s: %lld rows differ",
                  reduce_op_name((reduce_op)op), ex[k], tdtype_name(dt),
                  (long long)bad);
        tarray_free(ref);
        tarray_free(out);
        expr_free(x);
      }
    for (int i = 0; i < 3; i++) tarray_free(in[i]);
  }
}

/* ---- accuracy of the transcendentals ------------------------------------ */

typedef long double (*lfn1)(long double);
typedef long double (*lfn2)(long double, long double);
typedef struct ufn {
  const char *src;
  lfn1 f1;
  lfn2 f2;
  double lo, hi, lo32, hi32; /* x's range (y: [-ylim, ylim] or as x) */
  double bound64[2], bound32[2]; /* documented: cpu, cuda */
} ufn;

/* The bounds api/API.md states (cpu: glibc's libm, libmvec for sin, cos,
 * exp and log; cuda: the CUDA math library): the worst error measured here
 * (H200, CUDA 13.0, glibc 2.39; 2026-11-28) plus 1/4 ulp, rounded up. */
static const ufn ufns[] = {
    {"cbrt(x)", cbrtl, NULL, -1e300, 1e300, -1e38, 1e38, {4, 1}, {2, 2}},
    {"exp(x)", expl, NULL, -745, 709, -103, 88, {4, 2}, {3, 3}},
    {"exp2(x)", exp2l, NULL, -1074, 1023, -149, 127, {1, 2}, {1, 3}},
    {"expm1(x)", expm1l, NULL, -50, 709, -20, 88, {2, 2}, {1, 2}},
    {"log(x)", logl, NULL, 0, 1e308, 0, 3e38, {2, 1}, {4, 2}},
    {"log2(x)", log2l, NULL, 0, 1e308, 0, 3e38, {1, 2}, {1, 2}},
    {"log10(x)", log10l, NULL, 0, 1e308, 0, 3e38, {2, 2}, {2, 3}},
    {"log1p(x)", log1pl, NULL, -0.999999, 1e300, -0.999, 1e38, {2, 2}, {1, 2}},
    {"sin(x)", sinl, NULL, -1e6, 1e6, -1e5, 1e5, {4, 2}, {2, 2}},
    {"cos(x)", cosl, NULL, -1e6, 1e6, -1e5, 1e5, {4, 2}, {3, 2}},
    {"tan(x)", tanl, NULL, -1e6, 1e6, -1e5, 1e5, {1, 2}, {2, 3}},
    {"asin(x)", asinl, NULL, -1, 1, -1, 1, {1, 3}, {2, 2}},
    {"acos(x)", acosl, NULL, -1, 1, -1, 1, {1, 2}, {2, 2}},
    {"atan(x)", atanl, NULL, -1e10, 1e10, -1e10, 1e10, {1, 2}, {2, 2}},
    {"sinh(x)", sinhl, NULL, -710, 710, -89, 89, {2, 2}, {2, 3}},
    {"cosh(x)", coshl, NULL, -710, 710, -89, 89, {2, 2}, {2, 3}},
    {"tanh(x)", tanhl, NULL, -20, 20, -10, 10, {3, 2}, {3, 2}},
    {"asinh(x)", asinhl, NULL, -1e300, 1e300, -1e38, 1e38, {2, 3}, {2, 2}},
    {"acosh(x)", acoshl, NULL, 1, 1e300, 1, 1e38, {2, 2}, {2, 2}},
    {"atanh(x)", atanhl, NULL, -1, 1, -1, 1, {2, 3}, {2, 4}},
    {"atan2(x, y)", NULL, atan2l, -1e10, 1e10, -1e10, 1e10, {1, 2}, {2, 3}},
    {"hypot(x, y)", NULL, hypotl, -1e300, 1e300, -1e38, 1e38, {1, 2}, {1, 2}},
    {"pow(x, y)", NULL, powl, 0, 1e10, 0, 1e10, {1, 2}, {1, 2}},
};

/* |got - ref| in ulps of ref's type; NaN/Inf must match exactly (0 or inf). */
static double ulp_err(double got, long double ref, tdtype dt) {
  double rt = dt == T_F64 ? (double)ref : (double)(float)ref;
  if (isnan(got) || isnan(rt)) return isnan(got) && isnan(rt) ? 0 : INFINITY;
  if (isinf(got) || isinf(rt)) return got == rt ? 0 : INFINITY;
  int p = dt == T_F64 ? 53 : 24, emin = dt == T_F64 ? -1021 : -125;
  int ex = ref == 0 ? emin : ilogbl(ref) + 1;
  if (ex < emin) ex = emin;
  return (double)(fabsl((long double)got - ref) / ldexpl(1.0L, ex - p));
}

static double sample(uint64_t *s, double lo, double hi, tdtype dt, int wide_half) {
  if (!wide_half) return tu_uniform(s, lo, hi);
  double tiny = dt == T_F64 ? 1e-300 : 1e-37;
  int neg = lo < 0 && (tu_next(s) & 1);
  double mlo = neg || lo <= 0 ? tiny : lo, mhi = neg ? -lo : hi;
  if (mhi <= mlo) return tu_uniform(s, lo, hi);
  double m = exp(tu_uniform(s, log(mlo), log(mhi)));
  if (!neg && m < lo) m = lo;
  return neg ? -m : m;
}

/* Worst ulp error of cpu and cuda on one function and dtype. */
static void measure(const ufn *u, tdtype dt, double worst[2]) {
  int64_t n = 1 << 19;
  tarray *in[2] = {tarray_new(dt, 1, &n), tarray_new(dt, 1, &n)};
  uint64_t s = 777;
  double lo = dt == T_F64 ? u->lo : u->lo32, hi = dt == T_F64 ? u->hi : u->hi32;
  for (int64_t i = 0; i < n; i++) {
    int w = (int)(i & 1);
    tarray_set(in[0], i, sample(&s, lo, hi, dt, w));
    /* atan2's and hypot's y like x; pow's exponent in [-30, 30] */
    double y = u->f2 == powl ? tu_uniform(&s, -30, 30) : sample(&s, lo, hi, dt, w);
    tarray_set(in[1], i, y);
  }
  terr e;
  expr *x = NULL;
  CHECK(expr_compile(u->src, &x, &e) == 0);
  worst[0] = worst[1] = -1;
  if (!x) return;
  const tarray *ins[2] = {in[0], in[1]};
  tarray *c = cpu_map(x, ins, dt, 1, &n), *g = gpu_run(x, ins, dt, 1, &n);
  worst[0] = worst[1] = 0;
  for (int64_t i = 0; g && i < n; i++) {
    long double a = tarray_get(in[0], i), b = tarray_get(in[1], i);
    long double r = u->f1 ? u->f1(a) : u->f2(a, b);
    double ec = ulp_err(tarray_get(c, i), r, dt), eg = ulp_err(tarray_get(g, i), r, dt);
    if (ec > worst[0]) worst[0] = ec;
    if (eg > worst[1]) worst[1] = eg;
  }
  tarray_free(c);
  tarray_free(g);
  tarray_free(in[0]);
  tarray_free(in[1]);
  expr_free(x);
}

TEST(transcendental_ulps) {
  printf("     %-12s %10s %10s %10s %10s   (max ulp; documented bound)\n",
         "function", "cpu f64", "cuda f64", "cpu f32", "cuda f32");
  for (size_t k = 0; k < sizeof ufns / sizeof *ufns; k++) {
    const ufn *u = &ufns[k];
    double w64[2], w32[2];
    measure(u, T_F64, w64);
    measure(u, T_F32, w32);
    printf("     %-12s %4.2f (%g) %4.2f (%g) %4.2f (%g) %4.2f (%g)\n", u->src,
           w64[0], u->bound64[0], w64[1], u->bound64[1], w32[0], u->bound32[0],
           w32[1], u->bound32[1]);
    if (g_print_ulp) continue;
    CHECK_MSG(w64[0] <= u->bound64[0] && w64[1] <= u->bound64[1] &&
                  w32[0] <= u->bound32[0] && w32[1] <= u->bound32[1],
              "%s above its documented bound", u->src);
  }
}

int main(int argc, char **argv) {
  g_print_ulp = argc > 1 && strcmp(argv[1], "--ulp") == 0;
  char dir[] = "/tmp/tessel-gpu-bits-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  gpu_config cfg = {dir, 0.5, 0};
  gpu_configure(&cfg);
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(map_bits_like_the_cpu);
  RUN(reduce_bits_like_the_cpu);
  RUN(transcendental_ulps);
  gpu_shutdown();
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA */
#include "check.h"
int main(void) { SKIP_ALL("CUDA support not built"); }
#endif
