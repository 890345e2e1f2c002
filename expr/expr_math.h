/* expr/expr_math.h — the scalar meaning of the expression language's operations
 * that are not one C operator or one libm call, for double and float.
 *
 * Shared by constant folding (expr/compile.c) and the VM loops
 * (expr/vm_tmpl.h) so that a folded constant and a computed element agree
 * bit for bit. NumPy semantics:
 *   remainder  np.remainder: fmod, then moved to the divisor's sign; a zero
 *              result takes the divisor's sign; b == 0 gives NaN
 *   min / max  np.minimum / np.maximum: NaN in either operand gives NaN
 *   round      np.round: half to even (rint in the default rounding mode)
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

/* Written so that compilers turn them into vector compare/blend. */
#define XM_MIN(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) < (b) ? (a) : (b))
#define XM_MAX(a, b) ((a) != (a) || (b) != (b) ? (a) + (b) : (a) > (b) ? (a) : (b))

static inline double xm_min(double a, double b) { return XM_MIN(a, b); }
static inline double xm_max(double a, double b) { return XM_MAX(a, b); }

#endif
