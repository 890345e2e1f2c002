/* test_fusegen.c — the fused-kernel generator (compute/kinds/fusegen.cu),
 * checked without a GPU: for expressions that use every operator and
 * function of the language, the generated map and reduce kernels (float64
 * and float32, full/scalar/broadcast inputs, every reduce op, rows and
 * columns layouts) must compile with NVRTC for Hopper; cache keys must be
 * equal for expressions that parse to the same tree and differ when the
 * signature differs; broadcast classification must give NumPy's strides.
 * Skipped (77) in a build without CUDA. */
#include "check.h"

#if TESSEL_HAVE_CUDA
#include "compute/kinds/fuse.h"

static char g_src[1 << 18];

static int compiles(fuse_sig *s) {
  int n = s->reduce ? fuse_gen_reduce(s, g_src, sizeof g_src)
                    : fuse_gen_map(s, g_src, sizeof g_src);
  if (n < 0) return 0;
  terr e;
  terr_clear(&e);
  double ms = 0;
  int rc = kcache_compile_check(g_src, 90, &ms, &e);
  if (rc) fprintf(stderr, "compile failed: %s\n--- source:\n%s\n", e.message, g_src);
  return rc == 0;
}

static expr *comp(const char *src) {
  expr *x = NULL;
  terr e;
  terr_clear(&e);
  if (expr_compile(src, &x, &e)) fprintf(stderr, "%s: %s\n", src, e.message);
  return x;
}

static const char *const exprs[] = {
    "x**2 + 2*x + 1",
    "w*x + b",
    "-b / a",
    "sqrt(abs(x)) + cbrt(y) + exp(x) + exp2(y) + expm1(x) + log(abs(x)+1) + "
    "log2(abs(y)+1) + log10(abs(x)+1) + log1p(abs(y))",
    "sin(x) + cos(y) + tan(x) + asin(x/4) + acos(y/4) + atan(x) + atan2(x, y) "
    "+ sinh(x) + cosh(y) + tanh(x) + asinh(x) + acosh(abs(y)+1) + atanh(x/4)",
    "floor(x) + ceil(y) + round(x) + trunc(y) + min(x, y) + max(x, y) + "
    "pow(x, y) + hypot(x, y) + fmod(x, y) + x % y",
    "where(x > y and not (x == 0), x, y) + (x <= y or x != y) + (x >= 1) + (x < pi*e)",
    /* NumPy's names and the functions added for them (issue 28) */
    "x // y + sign(x) + isnan(y) + isinf(x) + isfinite(y) + signbit(x) + "
    "copysign(x, y) + nextafter(x, y) + ones_like(y) + arcsin(x/4) + "
    "minimum(x, y) + maximum(x, y) + floor_divide(y, x) + conj(x)",
};

TEST(map_kernels_compile) {
  for (size_t k = 0; k < sizeof exprs / sizeof exprs[0]; k++) {
    expr *x = comp(exprs[k]);
    CHECK(x != NULL);
    if (!x) continue;
    /* float32 where the float overloads matter (the function lists). */
    for (int dt = 0; dt < (k >= 3 ? 2 : 1); dt++) {
      fuse_sig s;
      memset(&s, 0, sizeof s);
      s.x = x;
      s.nin = expr_ninputs(x);
      s.ct = s.out_dt = dt ? T_F32 : T_F64;
      s.vec4 = 1;
      /* input 0 full, input 1 scalar or broadcast, others full; mixed dtypes */
      for (int i = 0; i < s.nin && i < FUSE_MAX_IN; i++) {
        s.mode[i] = i == 1 ? (dt ? FM_BCAST : FM_SCALAR) : FM_FULL;
        s.in_dt[i] = (i % 2) ? T_F32 : T_F64;
      }
      s.ndim = dt ? 2 : 0;
      /* the kernel shapes: 1, 2 or 4 groups, streaming hints or not */
      s.groups = k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 4;
      s.stream_hint = (int)(k % 2);
      CHECK_MSG(compiles(&s), "map %s dtype %d", exprs[k], dt);
    }
    expr_free(x);
  }
}

TEST(reduce_kernels_compile) {
  expr *x = comp("x * y + 1");
  /* Every op once, alternating layouts, and sum in both. */
  for (int k = 0; k <= R__COUNT; k++) {
    int op = k < R__COUNT ? k : R_SUM, cols = k < R__COUNT ? k % 2 : 1;
    fuse_sig s;
    memset(&s, 0, sizeof s);
    s.x = x;
    s.nin = 2;
    s.reduce = 1;
    s.op = (reduce_op)op;
    s.ct = T_F64;
    int arg = op == R_ARGMIN || op == R_ARGMAX; /* int64 indices, as reduce.c's */
    s.out_dt = arg ? T_I64 : op % 2 ? T_F64 : T_F32;
    s.columns = cols;
    s.mode[0] = FM_FULL;
    s.mode[1] = cols ? FM_BCAST : FM_SCALAR;
    s.in_dt[0] = T_F32;
    s.in_dt[1] = T_F64;
    s.ndim = cols ? 2 : 0;
    CHECK_MSG(compiles(&s), "reduce op %d cols %d", op, cols);
    if (arg) /* the indices are stored as int64, not as a float */
      CHECK_MSG(strstr(g_src, "((long long *)a.out)") != NULL,
                "reduce op %d: no int64 store", op);
  }
  expr_free(x);
}

TEST(keys) {
  expr *a = comp("x*x + 1"), *b = comp("(x * x) + 1.0"), *c = comp("x*x + 2");
  fuse_sig s;
  memset(&s, 0, sizeof s);
  s.nin = 1;
  s.ct = s.out_dt = T_F64;
  s.mode[0] = FM_FULL;
  s.in_dt[0] = T_F64;
  char ka[4096], kb[4096], kc[4096], kd[4096];
  s.x = a;
  CHECK(fuse_key(&s, ka, sizeof ka) > 0);
  s.x = b;
  CHECK(fuse_key(&s, kb, sizeof kb) > 0);
  s.x = c;
  CHECK(fuse_key(&s, kc, sizeof kc) > 0);
  s.x = a;
  s.in_dt[0] = T_F32;
  CHECK(fuse_key(&s, kd, sizeof kd) > 0);
  CHECK_STR(ka, kb);
  CHECK(strcmp(ka, kc) != 0);
  CHECK(strcmp(ka, kd) != 0);
  CHECK(fuse_key(&s, ka, 8) == -1); /* bounded */
  expr_free(a);
  expr_free(b);
  expr_free(c);
}

TEST(classify) {
  int64_t out[3] = {4, 5, 6}, st[3];
  int64_t s1[1] = {6}, s2[3] = {4, 1, 6}, s3[3] = {4, 5, 6}, s0[1] = {1};
  tarray *a = tarray_new(T_F64, 1, s1), *b = tarray_new(T_F64, 3, s2),
         *c = tarray_new(T_F32, 3, s3), *d = tarray_new(T_F64, 1, s0);
  CHECK(fuse_classify(a, 3, out, st) == FM_BCAST);
  CHECK(st[0] == 0 && st[1] == 0 && st[2] == 1);
  CHECK(fuse_classify(b, 3, out, st) == FM_BCAST);
  CHECK(st[0] == 6 && st[1] == 0 && st[2] == 1);
  CHECK(fuse_classify(c, 3, out, st) == FM_FULL);
  CHECK(st[0] == 30 && st[1] == 6 && st[2] == 1);
  CHECK(fuse_classify(d, 3, out, st) == FM_SCALAR);
  tarray_free(a);
  tarray_free(b);
  tarray_free(c);
  tarray_free(d);
}

int main(void) {
  RUN(keys);
  RUN(classify);
  RUN(map_kernels_compile);
  RUN(reduce_kernels_compile);
  return check_summary();
}
#else
int main(void) { SKIP_ALL("CUDA support not built"); }
#endif
