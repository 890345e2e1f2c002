/* fold.h — the two host-side folds every reduce path shares: a
 * Neumaier-compensated add (sum and mean) and the merge of two scaled sums
 * of squares (norm, as LAPACK's dnrm2 keeps them). reduce_cpu.c folds its
 * parts with them; lanes.c merges the GPU lanes' partials with them, so
 * both round the same way. Static inline: no state, any thread.
 */
#ifndef TESSEL_KINDS_REDUCE_FOLD_H
#define TESSEL_KINDS_REDUCE_FOLD_H

#include <math.h>

/* s + v with its rounding error kept in c. */
static inline void fold_neumaier_add(double *s, double *c, double v) {
  double t = *s + v;
  if (!isfinite(t)) { /* Inf/NaN: keep the compensation finite */
    *s = t;
    return;
  }
  if (fabs(*s) >= fabs(v))
    *c += (*s - t) + v;
  else
    *c += (v - t) + *s;
  *s = t;
}

/* (scale, ssq) += (s2, q2): sums of squares scaled by their largest |x|. */
static inline void fold_norm_merge(double *scale, double *ssq, double s2,
                                   double q2) {
  if (isnan(*scale) || isnan(s2)) {
    *scale = NAN;
  } else if (isinf(*scale) || isinf(s2)) {
    *scale = INFINITY;
  } else if (s2 == 0) {
    /* nothing to add */
  } else if (*scale < s2) {
    double r = *scale / s2;
    *ssq = *ssq * r * r + q2;
    *scale = s2;
  } else {
    double r = s2 / *scale;
    *ssq += q2 * r * r;
  }
}

#endif
