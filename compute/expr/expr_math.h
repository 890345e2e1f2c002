/* compute/expr/expr_math.h — the scalar meaning of the expression language's operations
 * that are not one C operator or one libm call, for double and float.
 *
 * Shared by constant folding (compute/expr/compile.c) and the VM loops
 * (compute/expr/vm_tmpl.h) so that a folded constant and a computed element agree
 * bit for bit. NumPy semantics:
 *   remainder  np.remainder: fmod, then moved to the divisor's sign; a zero
 *              result takes the divisor's sign; b == 0 gives NaN
 *   min / max  np.minimum / np.maximum: NaN in either operand gives NaN
 *   round      np.round: half to even (rint in the default rounding mode)
 *   a // b     np.floor_divide: b == 0 gives a / b (±inf, or NaN for 0 or
 *              NaN over 0); else q = (a - fmod(a, b)) / b, one less when
 *              the remainder's sign is not the divisor's, then the floor
 *              of q, one more when q was above it by more than a half (q is
 *              then an integer but for rounding); a zero quotient takes the
 *              sign of a / b. As Python's float // and NumPy's npy_divmod
 *              compute it, so a // b and a % b agree with divmod(a, b)
 *   sign       np.sign: 1, -1, 0 for ±0 (always +0), NaN for NaN
 * Truth: non-zero (NaN included) is true, as bool(nan) in Python.
 */
#ifndef TESSEL_EXPR_EXPR_MATH_H
#define TESSEL_EXPR_EXPR_MATH_H

#include <math.h>

static inline double xm_remainder(double a, double b) {
  double m = fmod(a, b);
  if (b == 0) return m;
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = copysign(0.0, b);
  }
  return m;
}
static inline float xm_remainderf(float a, float b) {
  float m = fmodf(a, b);
  if (b == 0) return m;
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = copysignf(0.0f, b);
  }
  return m;
}

static inline double xm_floordiv(double a, double b) {
  if (b == 0) return a / b;
  double m = fmod(a, b), q = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0)) q -= 1.0;
  if (q == 0) return copysign(0.0, a / b);
  double f = floor(q);
  return q - f > 0.5 ? f + 1.0 : f;
}
static inline float xm_floordivf(float a, float b) {
  if (b == 0) return a / b;
  float m = fmodf(a, b), q = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0)) q -= 1.0f;
  if (q == 0) return copysignf(0.0f, a / b);
  float f = floorf(q);
  return q - f > 0.5f ? f + 1.0f : f;
}

/* Written so that compilers turn them into vector compare/blend. */
#define XM_MIN(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) < (b) ? (a) : (b))
#define XM_MAX(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) > (b) ? (a) : (b))

#define XM_SIGN(a) ((a) > 0 ? 1 : (a) < 0 ? -1 : (a) == 0 ? 0 : (a))

static inline double xm_min(double a, double b) { return XM_MIN(a, b); }
static inline double xm_max(double a, double b) { return XM_MAX(a, b); }

#endif
