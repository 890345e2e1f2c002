/* fusegen.cu — writes the CUDA C++ text of fused map and reduce kernels.
 *
 * The text is a fixed template (this file) around the one expression that
 * expr_emit_c writes from the parsed tree. The template defines the
 * functions the emitted expression calls (tx_sin, tx_pow, tx_remainder,
 * tx_where, tx_fma, ... for double and float, with NumPy's meaning as in
 * compute/expr/expr_math.h: remainder takes the divisor's sign, floordiv is
 * np.floor_divide, min/max propagate NaN, round is half-to-even, sign and
 * the classifications (isnan isinf isfinite signbit) give 1/0 in the
 * result's type; + - * / are the C operators,
 * which compute/gpu/kcache.cu compiles without FMA contraction, so that they round
 * as the CPU does), the argument block (FUSE_ARGS_DECL,
 * the same declaration the host compiles) and the kernel:
 *
 *   map     tx_map: a grid-stride loop; each thread reads two groups of 4
 *           elements of every full-size input per step (16-byte streaming
 *           vector loads when vec4: two groups keep enough bytes in flight
 *           to reach the memory's rate with one input), keeps scalar inputs
 *           in registers, computes 8 outputs and stores them with 16-byte
 *           streaming stores — every input read once, the output written
 *           once, nothing else touches memory.
 *   reduce  tx_rows (the reduced elements of an output are contiguous:
 *           blocks own parts of one output; each thread keeps 4 independent
 *           states, one per load in flight, so that the float64 folds do
 *           not wait on each other; then a warp-shuffle + shared-memory
 *           tree), tx_cols (the reduced axis has a stride: one thread per
 *           output column and part, coalesced across columns) and
 *           tx_combine (folds an output's parts in order, with the running
 *           state of earlier chunks, and writes the final value). States
 *           accumulate in float64 whatever the dtype: Neumaier sums,
 *           Welford/Chan for var/std, dnrm2-style scaling for norm (values
 *           in [1e-100, 1e100] take a plain sum of squares, the rest the
 *           scaled pair), first-index rules for argmin/argmax and NaN.
 *
 * Writers are bounded: a buffer too small gives -1 (kcache grows it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compute/kinds/fuse.h"

#define XSTR_(...) #__VA_ARGS__
#define XSTR(...) XSTR_(__VA_ARGS__)

typedef struct sbuf {
  char *p;
  size_t len, off;
  int over;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->over) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->off, b->len - b->off, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= b->len - b->off) {
    b->over = 1;
    return;
  }
  b->off += (size_t)n;
}

/* The C type of a dtype: the compute type is float or double; an output
 * may also be int64 (a reduction's argmin/argmax indices, which st_final
 * gives as a double holding an integer below 2^53: the cast is exact). */
static const char *ctype_name(tdtype t) {
  return t == T_F64 ? "double" : t == T_I64 ? "long long" : "float";
}

/* ---- the shared prelude ------------------------------------------------ */

static const char prelude[] =
    "#define TXF static __device__ __forceinline__\n"
    "#define TX1(name, fd, ff) \\\n"
    "  TXF double tx_##name(double a) { return fd(a); } \\\n"
    "  TXF float tx_##name(float a) { return ff(a); }\n"
    "#define TX2(name, fd, ff) \\\n"
    "  TXF double tx_##name(double a, double b) { return fd(a, b); } \\\n"
    "  TXF float tx_##name(float a, float b) { return ff(a, b); }\n"
    "TX1(abs, fabs, fabsf) TX1(sqrt, sqrt, sqrtf) TX1(cbrt, cbrt, cbrtf)\n"
    "TX1(exp, exp, expf) TX1(exp2, exp2, exp2f) TX1(expm1, expm1, expm1f)\n"
    "TX1(log, log, logf) TX1(log2, log2, log2f) TX1(log10, log10, log10f)\n"
    "TX1(log1p, log1p, log1pf) TX1(sin, sin, sinf) TX1(cos, cos, cosf)\n"
    "TX1(tan, tan, tanf) TX1(asin, asin, asinf) TX1(acos, acos, acosf)\n"
    "TX1(atan, atan, atanf) TX1(sinh, sinh, sinhf) TX1(cosh, cosh, coshf)\n"
    "TX1(tanh, tanh, tanhf) TX1(asinh, asinh, asinhf)\n"
    "TX1(acosh, acosh, acoshf) TX1(atanh, atanh, atanhf)\n"
    "TX1(floor, floor, floorf) TX1(ceil, ceil, ceilf)\n"
    "TX1(round, rint, rintf) TX1(trunc, trunc, truncf)\n"
    "TX2(atan2, atan2, atan2f) TX2(hypot, hypot, hypotf)\n"
    "TX2(fmod, fmod, fmodf) TX2(copysign, copysign, copysignf)\n"
    "TX2(nextafter, nextafter, nextafterf)\n"
    /* sign, the classifications and ones_like: 1/0 in the result's type */
    "template <typename T> TXF T tx_sign(T a) {\n"
    "  return a > 0 ? T(1) : a < 0 ? T(-1) : a == 0 ? T(0) : a; }\n"
    "template <typename T> TXF T tx_isnan(T a) { return T(a != a); }\n"
    "template <typename T> TXF T tx_isinf(T a) { return T(isinf(a) != 0); }\n"
    "template <typename T> TXF T tx_isfinite(T a) { return T(isfinite(a) != 0); }\n"
    "template <typename T> TXF T tx_signbit(T a) { return T(signbit(a) != 0); }\n"
    "template <typename T> TXF T tx_ones_like(T a) { (void)a; return T(1); }\n"
    "TXF double tx_fma(double a, double b, double c) { return fma(a, b, c); }\n"
    "TXF float tx_fma(float a, float b, float c) { return fmaf(a, b, c); }\n"
    /* x**2 is exactly x*x (both correctly rounded); pow otherwise. */
    "TXF double tx_pow(double a, double b) { return b == 2.0 ? a * a : pow(a, b); }\n"
    "TXF float tx_pow(float a, float b) { return b == 2.0f ? a * a : powf(a, b); }\n"
    "template <typename T> TXF T tx_min(T a, T b) {\n"
    "  return (a != a || b != b) ? a + b : (a < b ? a : b); }\n"
    "template <typename T> TXF T tx_max(T a, T b) {\n"
    "  return (a != a || b != b) ? a + b : (a > b ? a : b); }\n"
    "template <typename T> TXF T tx_where(T c, T a, T b) { return c != 0 ? a : b; }\n"
    "TXF double tx_remainder(double a, double b) {\n"
    "  double m = fmod(a, b); if (b == 0) return m;\n"
    "  if (m != 0) { if ((b < 0) != (m < 0)) m += b; } else { m = copysign(0.0, b); }\n"
    "  return m; }\n"
    "TXF float tx_remainder(float a, float b) {\n"
    "  float m = fmodf(a, b); if (b == 0) return m;\n"
    "  if (m != 0) { if ((b < 0) != (m < 0)) m += b; } else { m = copysignf(0.0f, b); }\n"
    "  return m; }\n"
    /* np.floor_divide as compute/expr/expr_math.h's xm_floordiv */
    "TXF double tx_floordiv(double a, double b) {\n"
    "  if (b == 0) return a / b;\n"
    "  double m = fmod(a, b), q = (a - m) / b;\n"
    "  if (m != 0 && (b < 0) != (m < 0)) q -= 1.0;\n"
    "  if (q == 0) return copysign(0.0, a / b);\n"
    "  double f = floor(q); return q - f > 0.5 ? f + 1.0 : f; }\n"
    "TXF float tx_floordiv(float a, float b) {\n"
    "  if (b == 0) return a / b;\n"
    "  float m = fmodf(a, b), q = (a - m) / b;\n"
    "  if (m != 0 && (b < 0) != (m < 0)) q -= 1.0f;\n"
    "  if (q == 0) return copysignf(0.0f, a / b);\n"
    "  float f = floorf(q); return q - f > 0.5f ? f + 1.0f : f; }\n"
    "#if TX_CS\n"
    "#define TX_LD(p) __ldcs(p)\n#define TX_ST(p, v) __stcs(p, v)\n"
    "#else\n"
    "#define TX_LD(p) (*(p))\n#define TX_ST(p, v) (*(p) = (v))\n"
    "#endif\n"
    "TXF void tx_ld4(const double *p, double *v) {\n"
    "  double2 u = TX_LD((const double2 *)p), w = TX_LD((const double2 *)(p + 2));\n"
    "  v[0] = u.x; v[1] = u.y; v[2] = w.x; v[3] = w.y; }\n"
    "TXF void tx_ld4(const float *p, float *v) {\n"
    "  float4 u = TX_LD((const float4 *)p); v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w; }\n"
    "TXF void tx_st4(double *p, const double *v) {\n"
    "  TX_ST((double2 *)p, make_double2(v[0], v[1]));\n"
    "  TX_ST((double2 *)(p + 2), make_double2(v[2], v[3])); }\n"
    "TXF void tx_st4(float *p, const float *v) {\n"
    "  TX_ST((float4 *)p, make_float4(v[0], v[1], v[2], v[3])); }\n"
    XSTR(FUSE_ARGS_DECL(tx_args)) ";\n";

/* ---- keys and classification ------------------------------------------- */

int fuse_key(const fuse_sig *s, char *buf, size_t len) {
  sbuf b = {buf, len, 0, 0};
  put(&b, "%s|ct=%s|out=%s|vec=%d|g=%d|cs=%d|nd=%d|op=%d|cols=%d|in=",
      s->reduce ? "reduce2" : "map2", tdtype_name(s->ct),
      tdtype_name(s->out_dt), s->vec4, s->groups, s->stream_hint, s->ndim,
      s->reduce ? (int)s->op : -1, s->columns);
  for (int i = 0; i < s->nin; i++)
    put(&b, "%c%s", s->mode[i], s->in_dt[i] == T_F64 ? "8" : "4");
  put(&b, "|%s", expr_canonical(s->x));
  return b.over ? -1 : (int)b.off;
}

fuse_mode fuse_classify(const tarray *in, int ndim, const int64_t *shape,
                        int64_t *stride) {
  int64_t size = 1;
  for (int d = 0; d < ndim; d++) size *= shape[d];
  int64_t s = 1;
  for (int d = ndim - 1, k = in->ndim - 1; d >= 0; d--, k--) {
    int64_t n = k >= 0 ? in->shape[k] : 1;
    stride[d] = (n == 1) ? 0 : s;
    s *= n;
  }
  if (in->size == 1) return FM_SCALAR;
  if (in->size == size) return FM_FULL;
  return FM_BCAST;
}

/* ---- shared pieces of the kernel text ---------------------------------- */

/* `TX j` -> each input's value at flat output index expression `j`, into
 * variables named <name><i><suffix>, for inputs whose mode is in `modes`. */
static void emit_loads(sbuf *b, const fuse_sig *s, const char *modes,
                       const char *j, const char *suffix, const char *indent) {
  int nb = 0;
  for (int i = 0; i < s->nin; i++) nb += s->mode[i] == FM_BCAST;
  if (nb && strchr(modes, FM_BCAST)) {
    /* One pass over the dimensions gives every broadcast input's offset. */
    put(b, "%s{ long long jj_ = %s;", indent, j);
    for (int i = 0; i < s->nin; i++)
      if (s->mode[i] == FM_BCAST) put(b, " long long b%d_ = 0;", i);
    put(b, "\n%s#pragma unroll\n%sfor (int d_ = %d; d_ >= 0; d_--) {"
           " long long q_ = jj_ / a.shape[d_], c_ = jj_ - q_ * a.shape[d_];",
        indent, indent, s->ndim - 1);
    for (int i = 0; i < s->nin; i++)
      if (s->mode[i] == FM_BCAST) put(b, " b%d_ += c_ * a.stride[%d][d_];", i, i);
    put(b, " jj_ = q_; }\n");
    for (int i = 0; i < s->nin; i++)
      if (s->mode[i] == FM_BCAST)
        put(b, "%s  v%d%s = (TC)p%d[b%d_];\n", indent, i, suffix, i, i);
    put(b, "%s}\n", indent);
  }
  for (int i = 0; i < s->nin; i++) {
    if (!strchr(modes, s->mode[i])) continue;
    if (s->mode[i] == FM_FULL)
      put(b, "%sv%d%s = (TC)p%d[(%s) - a.off[%d]];\n", indent, i, suffix, i, j, i);
    else if (s->mode[i] == FM_SCALAR)
      put(b, "%sv%d%s = s%d;\n", indent, i, suffix, i);
  }
}

/* Input pointers, hoisted scalars and the expression function tx_f. */
static void emit_common(sbuf *b, const fuse_sig *s) {
  put(b, "typedef %s TC;\n", ctype_name(s->ct));
  put(b, "TXF TC tx_f(");
  for (int i = 0; i < s->nin; i++) put(b, "%sTC v%d", i ? ", " : "", i);
  put(b, ") { return ");
  /* The expression: built from the parsed tree only. */
  int n = expr_emit_c(s->x, ctype_name(s->ct), "tx_", b->p + b->off,
                      b->len - b->off);
  if (n < 0) {
    b->over = 1;
    return;
  }
  b->off += (size_t)n;
  put(b, "; }\n");
}

static void emit_pointers(sbuf *b, const fuse_sig *s) {
  for (int i = 0; i < s->nin; i++) {
    const char *it = ctype_name(s->in_dt[i]);
    put(b, "  const %s *__restrict__ p%d = (const %s *)a.in[%d];\n", it, i, it, i);
    if (s->mode[i] == FM_SCALAR) put(b, "  const TC s%d = (TC)p%d[0];\n", i, i);
  }
}

static void emit_call(sbuf *b, const fuse_sig *s, const char *suffix) {
  put(b, "tx_f(");
  for (int i = 0; i < s->nin; i++) put(b, "%sv%d%s", i ? ", " : "", i, suffix);
  put(b, ")");
}

/* ---- map --------------------------------------------------------------- */

int fuse_gen_map(void *arg, char *buf, size_t len) {
  const fuse_sig *s = (const fuse_sig *)arg;
  sbuf b = {buf, len, 0, 0};
  put(&b, "#define TX_CS %d\n%s", s->stream_hint ? 1 : 0, prelude);
  emit_common(&b, s);
  put(&b, "extern \"C\" __global__ void __launch_bounds__(256) tx_map(const tx_args a) {\n");
  emit_pointers(&b, s);
  put(&b, "  TC *__restrict__ o = (TC *)a.out;\n"
          "  const long long n = a.count;\n"
          "  const long long nthr = (long long)gridDim.x * blockDim.x;\n"
          "  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  long long tail = 0;\n");
  if (s->vec4) {
    /* G groups of 4 per thread per step (group g nthr groups after group
     * g-1, so each stays coalesced): G x 16..32 bytes of every input in
     * flight per thread. */
    int G = s->groups == 1 || s->groups == 4 ? s->groups : 2;
    put(&b, "  const long long n4 = n >> 2;\n"
            "  for (long long q0 = t; q0 < n4; q0 += %d * nthr) {\n", G);
    for (int i = 0; i < s->nin; i++) put(&b, "    TC v%d[%d];\n", i, 4 * G);
    put(&b, "    #pragma unroll\n    for (int g = 0; g < %d; g++) {\n"
            "      if (q0 + g * nthr >= n4) break;\n"
            "      const long long j = a.start + ((q0 + g * nthr) << 2);\n", G);
    for (int i = 0; i < s->nin; i++) {
      if (s->mode[i] == FM_FULL) {
        put(&b, "      { %s w[4]; tx_ld4(p%d + (j - a.off[%d]), w);"
                " for (int u = 0; u < 4; u++) v%d[4 * g + u] = (TC)w[u]; }\n",
            ctype_name(s->in_dt[i]), i, i, i);
      } else if (s->mode[i] == FM_SCALAR) {
        put(&b, "      for (int u = 0; u < 4; u++) v%d[4 * g + u] = s%d;\n", i, i);
      }
    }
    put(&b, "      #pragma unroll\n      for (int u = 0; u < 4; u++) {\n");
    emit_loads(&b, s, "B", "j + u", "[4 * g + u]", "        ");
    put(&b, "      }\n    }\n    TC y[%d];\n    #pragma unroll\n"
            "    for (int u = 0; u < %d; u++) y[u] = ", 4 * G, 4 * G);
    emit_call(&b, s, "[u]");
    put(&b, ";\n    #pragma unroll\n    for (int g = 0; g < %d; g++)\n"
            "      if (q0 + g * nthr < n4) tx_st4(o + ((q0 + g * nthr) << 2), y + 4 * g);\n"
            "  }\n  tail = n4 << 2;\n", G);
  }
  /* Scalar loop (the whole range, or the vec4 loop's last < 4 elements),
   * 4 independent elements per thread per step. */
  put(&b, "  for (long long r0 = tail + t; r0 < n; r0 += 4 * nthr) {\n");
  for (int i = 0; i < s->nin; i++) put(&b, "    TC v%d[4];\n", i);
  put(&b, "    #pragma unroll\n    for (int u = 0; u < 4; u++) {\n"
          "      const long long r = r0 + u * nthr;\n"
          "      if (r < n) {\n        const long long j = a.start + r;\n");
  emit_loads(&b, s, "FSB", "j", "[u]", "        ");
  put(&b, "      }\n    }\n    #pragma unroll\n    for (int u = 0; u < 4; u++) {\n"
          "      const long long r = r0 + u * nthr;\n"
          "      if (r < n) o[r] = ");
  emit_call(&b, s, "[u]");
  put(&b, ";\n    }\n  }\n}\n");
  return b.over ? -1 : (int)b.off;
}

/* ---- reduce ------------------------------------------------------------ */

/* The state functions for one op (see fuse.h for the fields). */
static const char red_state[] =
    "struct tx_st { double a, b, c; long long i; };\n"
    "TXF void tx_neu(double &s, double &c, double v) {\n"
    "  double t = s + v;\n"
    "  if (!isfinite(t)) { s = t; return; }\n"
    "  if (fabs(s) >= fabs(v)) c += (s - t) + v; else c += (v - t) + s;\n"
    "  s = t; }\n"
    "TXF void tx_norm_merge(double &scale, double &ssq, double s2, double q2) {\n"
    "  if (isnan(scale) || isnan(s2)) { scale = __longlong_as_double(0x7ff8000000000000LL); }\n"
    "  else if (isinf(scale) || isinf(s2)) { scale = __longlong_as_double(0x7ff0000000000000LL); }\n"
    "  else if (s2 == 0) { }\n"
    "  else if (scale < s2) { double r = scale / s2; ssq = ssq * r * r + q2; scale = s2; }\n"
    "  else { double r = s2 / scale; ssq += q2 * r * r; } }\n"
    "TXF void st_init(tx_st &s) {\n"
    "  s.a = (OP == R_PROD) ? 1.0 : 0.0; s.b = 0; s.c = 0; s.i = -1; }\n"
    "TXF void st_add(tx_st &s, double x, long long l) {\n"
    "  if (OP == R_SUM || OP == R_MEAN) { tx_neu(s.a, s.b, x); }\n"
    "  else if (OP == R_PROD) { s.a *= x; }\n"
    "  else if (OP == R_VAR || OP == R_STD) {\n"
    "    s.a += 1.0; double d = x - s.b; s.b += d / s.a; s.c += d * (x - s.b); }\n"
    "  else if (OP == R_NORM) {\n"
    "    double ax = fabs(x);\n"
    "    if (ax >= 1e-100 && ax <= 1e100) s.c += ax * ax;\n"
    "    else if (ax != 0) tx_norm_merge(s.a, s.b, ax, 1.0); }\n"
    "  else {\n"
    "    if (s.i >= 0 && s.a != s.a) return;\n"
    "    if (x != x || s.i < 0 || (IS_MAX ? x > s.a : x < s.a)) { s.a = x; s.i = l; } } }\n"
    "TXF void st_merge(tx_st &s, const tx_st &o) {\n"
    "  if (OP == R_SUM || OP == R_MEAN) { tx_neu(s.a, s.b, o.a); tx_neu(s.a, s.b, o.b); }\n"
    "  else if (OP == R_PROD) { s.a *= o.a; }\n"
    "  else if (OP == R_VAR || OP == R_STD) {\n"
    "    if (o.a == 0) return;\n"
    "    double n = s.a + o.a, d = o.b - s.b;\n"
    "    s.b += d * (o.a / n); s.c += o.c + d * d * (s.a * o.a / n); s.a = n; }\n"
    "  else if (OP == R_NORM) { s.c += o.c; tx_norm_merge(s.a, s.b, o.a, o.b); }\n"
    "  else {\n"
    "    if (o.i < 0) return;\n"
    "    if (s.i < 0) { s = o; return; }\n"
    "    bool sn = s.a != s.a, on = o.a != o.a;\n"
    "    if (sn || on) { if (on && (!sn || o.i < s.i)) s = o; return; }\n"
    "    if (IS_MAX ? o.a > s.a : o.a < s.a) s = o;\n"
    "    else if (o.a == s.a && o.i < s.i) s = o; } }\n"
    "TXF double st_final(tx_st s, long long n) {\n"
    "  const double qnan = __longlong_as_double(0x7ff8000000000000LL);\n"
    "  if (OP == R_SUM) return isfinite(s.a) ? s.a + s.b : s.a;\n"
    "  if (OP == R_MEAN) return n ? (isfinite(s.a) ? s.a + s.b : s.a) / (double)n : qnan;\n"
    "  if (OP == R_PROD) return s.a;\n"
    "  if (OP == R_MIN || OP == R_MAX) return s.i >= 0 ? s.a : qnan;\n"
    "  if (OP == R_ARGMIN || OP == R_ARGMAX) return (double)s.i;\n"
    "  if (OP == R_VAR || OP == R_STD) {\n"
    "    if (s.a == 0) return qnan;\n"
    "    double v = s.c / s.a; return OP == R_STD ? sqrt(v) : v; }\n"
    "  if (s.c > 0) tx_norm_merge(s.a, s.b, 1.0, s.c);\n"
    "  return (s.a == 0 || !isfinite(s.a)) ? s.a : s.a * sqrt(s.b); }\n"
    "TXF tx_st st_down(const tx_st &s, int d) {\n"
    "  tx_st o; o.a = __shfl_down_sync(0xffffffffu, s.a, d);\n"
    "  o.b = __shfl_down_sync(0xffffffffu, s.b, d);\n"
    "  o.c = __shfl_down_sync(0xffffffffu, s.c, d);\n"
    "  o.i = __shfl_down_sync(0xffffffffu, s.i, d); return o; }\n";

int fuse_gen_reduce(void *arg, char *buf, size_t len) {
  const fuse_sig *s = (const fuse_sig *)arg;
  sbuf b = {buf, len, 0, 0};
  put(&b, "#define TX_CS 0\n%s", prelude);
  put(&b, "enum { R_SUM = %d, R_MEAN = %d, R_MIN = %d, R_MAX = %d, R_PROD = %d,"
          " R_VAR = %d, R_STD = %d, R_ARGMIN = %d, R_ARGMAX = %d, R_NORM = %d };\n",
      R_SUM, R_MEAN, R_MIN, R_MAX, R_PROD, R_VAR, R_STD, R_ARGMIN, R_ARGMAX,
      R_NORM);
  put(&b, "#define OP %d\n#define IS_MAX %d\n", (int)s->op,
      s->op == R_MAX || s->op == R_ARGMAX);
  put(&b, "%s", red_state);
  emit_common(&b, s);
  /* The value of flat element j (of the broadcast shape). */
  put(&b, "TXF TC tx_val(const tx_args &a, long long j) {\n");
  emit_pointers(&b, s);
  for (int i = 0; i < s->nin; i++) put(&b, "  TC v%d;\n", i);
  emit_loads(&b, s, "FSB", "j", "", "  ");
  put(&b, "  return ");
  emit_call(&b, s, "");
  put(&b, "; }\n");
  if (!s->columns) {
    /* Rows: block b owns part p of output o; 4 loads in flight per thread. */
    put(&b, "%s",
        "extern \"C\" __global__ void __launch_bounds__(256) tx_rows(const tx_args a) {\n"
        "  __shared__ tx_st sh[32];\n"
        "  const long long P = a.parts, nb = a.no * P;\n"
        "  for (long long blk = blockIdx.x; blk < nb; blk += gridDim.x) {\n"
        "    const long long o = blk / P, p = blk - o * P;\n"
        "    const long long lb = a.l0 + p * a.nl / P, le = a.l0 + (p + 1) * a.nl / P;\n"
        "    const long long base = (a.o0 + o) * a.L;\n"
        "    tx_st s, q[4];\n"
        "    #pragma unroll\n"
        "    for (int u = 0; u < 4; u++) st_init(q[u]);\n"
        "    for (long long l = lb + threadIdx.x; l < le; l += 4 * blockDim.x) {\n"
        "      double x[4];\n"
        "      #pragma unroll\n"
        "      for (int u = 0; u < 4; u++) { long long ll = l + u * blockDim.x;\n"
        "        x[u] = ll < le ? (double)tx_val(a, base + ll) : 0.0; }\n"
        "      #pragma unroll\n"
        "      for (int u = 0; u < 4; u++) { long long ll = l + u * blockDim.x;\n"
        "        if (ll < le) st_add(q[u], x[u], ll); }\n"
        "    }\n"
        "    s = q[0]; st_merge(s, q[1]); st_merge(s, q[2]); st_merge(s, q[3]);\n"
        "    for (int d = 16; d > 0; d >>= 1) { tx_st t = st_down(s, d); st_merge(s, t); }\n"
        "    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
        "    if (lane == 0) sh[w] = s;\n"
        "    __syncthreads();\n"
        "    if (w == 0) {\n"
        "      if (lane < (int)(blockDim.x >> 5)) s = sh[lane]; else st_init(s);\n"
        "      for (int d = 16; d > 0; d >>= 1) { tx_st t = st_down(s, d); st_merge(s, t); }\n"
        "      if (lane == 0) ((tx_st *)a.part)[o * P + p] = s;\n"
        "    }\n"
        "    __syncthreads();\n"
        "  }\n}\n");
  } else {
    /* Columns: thread (o, p, c) walks its part of the axis at stride inner. */
    put(&b, "%s",
        "extern \"C\" __global__ void __launch_bounds__(256) tx_cols(const tx_args a) {\n"
        "  const long long P = a.parts, inner = a.inner, total = a.no * P * inner;\n"
        "  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;\n"
        "       t += (long long)gridDim.x * blockDim.x) {\n"
        "    const long long c = t % inner, rest = t / inner, p = rest % P, o = rest / P;\n"
        "    const long long lb = a.l0 + p * a.nl / P, le = a.l0 + (p + 1) * a.nl / P;\n"
        "    const long long base = (a.o0 + o) * a.L;\n"
        "    tx_st s, q[4];\n"
        "    #pragma unroll\n"
        "    for (int u = 0; u < 4; u++) st_init(q[u]);\n"
        "    for (long long l = lb; l < le; l += 4) {\n"
        "      double x[4];\n"
        "      #pragma unroll\n"
        "      for (int u = 0; u < 4; u++)\n"
        "        x[u] = l + u < le ? (double)tx_val(a, (base + l + u) * inner + c) : 0.0;\n"
        "      #pragma unroll\n"
        "      for (int u = 0; u < 4; u++) if (l + u < le) st_add(q[u], x[u], l + u);\n"
        "    }\n"
        "    s = q[0]; st_merge(s, q[1]); st_merge(s, q[2]); st_merge(s, q[3]);\n"
        "    ((tx_st *)a.part)[(o * inner + c) * P + p] = s;\n"
        "  }\n}\n");
  }
  /* Fold each output's parts in order, after the earlier chunks' state. */
  put(&b,
      "extern \"C\" __global__ void __launch_bounds__(256) tx_combine(const tx_args a) {\n"
      "  const long long P = a.parts, inner = a.inner, nout = a.no * inner;\n"
      "  const tx_st *part = (const tx_st *)a.part;\n"
      "  tx_st *acc = (tx_st *)a.acc;\n"
      "  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < nout;\n"
      "       t += (long long)gridDim.x * blockDim.x) {\n"
      "    const long long o = t / inner, c = t - o * inner;\n"
      "    tx_st s;\n"
      "    if (a.l0 > 0) s = acc[c]; else st_init(s);\n"
      "    for (long long p = 0; p < P; p++) st_merge(s, part[t * P + p]);\n"
      "    if (a.last) ((%s *)a.out)[(a.o0 + o) * inner + c] = (%s)st_final(s, a.L);\n"
      "    else acc[c] = s;\n"
      "  }\n}\n",
      ctype_name(s->out_dt), ctype_name(s->out_dt));
  /* The same fold with a block per output, for many parts (a whole-array
   * reduction has ~8 per multiprocessor): threads fold strided parts in
   * order, then the tree; thread 0 adds the earlier chunks' state first. */
  put(&b,
      "extern \"C\" __global__ void __launch_bounds__(256) tx_combine_tree(const tx_args a) {\n"
      "  __shared__ tx_st sh[32];\n"
      "  const long long P = a.parts, inner = a.inner, nout = a.no * inner;\n"
      "  const tx_st *part = (const tx_st *)a.part;\n"
      "  tx_st *acc = (tx_st *)a.acc;\n"
      "  for (long long t = blockIdx.x; t < nout; t += gridDim.x) {\n"
      "    tx_st s; st_init(s);\n"
      "    for (long long p = threadIdx.x; p < P; p += blockDim.x) st_merge(s, part[t * P + p]);\n"
      "    for (int d = 16; d > 0; d >>= 1) { tx_st q = st_down(s, d); st_merge(s, q); }\n"
      "    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
      "    if (lane == 0) sh[w] = s;\n"
      "    __syncthreads();\n"
      "    if (w == 0) {\n"
      "      if (lane < (int)(blockDim.x >> 5)) s = sh[lane]; else st_init(s);\n"
      "      for (int d = 16; d > 0; d >>= 1) { tx_st q = st_down(s, d); st_merge(s, q); }\n"
      "      if (lane == 0) {\n"
      "        const long long o = t / inner, c = t - o * inner;\n"
      "        tx_st f;\n"
      "        if (a.l0 > 0) f = acc[c]; else st_init(f);\n"
      "        st_merge(f, s);\n"
      "        if (a.last) ((%s *)a.out)[(a.o0 + o) * inner + c] = (%s)st_final(f, a.L);\n"
      "        else acc[c] = f;\n"
      "      }\n"
      "    }\n"
      "    __syncthreads();\n"
      "  }\n}\n",
      ctype_name(s->out_dt), ctype_name(s->out_dt));
  return b.over ? -1 : (int)b.off;
}
