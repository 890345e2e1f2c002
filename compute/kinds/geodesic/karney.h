/* compute/kinds/geodesic/karney.h — Karney's inverse solution, distances only (included by
 * compute/kinds/geodesic/geodesic.h; host C and CUDA device code alike).
 *
 * The method, from Karney (2013), "Algorithms for geodesics", J. Geodesy
 * 87:43-55 (sections 3-5; equation numbers below are the paper's):
 *
 *  - The geodesic is mapped to a great circle on the auxiliary sphere
 *    (reduced latitude beta, spherical longitude omega, arc length sigma).
 *    Distance s = b I1(sigma) and longitude lambda = omega - f sin(alpha0)
 *    I3(sigma) are integrals expanded as Fourier series in sigma whose
 *    coefficients are series in eps = (sqrt(1+k^2) - 1)/(sqrt(1+k^2) + 1),
 *    k = e' cos(alpha0), truncated at sixth order (eqs. 15-25); the A3/C3
 *    coefficients also depend on n and come from geod_ellipsoid_init.
 *  - Given the two latitudes and the longitude difference lambda12, the
 *    unknown is the azimuth alpha1 at the first point: Newton's method on
 *    lambda12(alpha1) (eq. 46), whose derivative is the reduced length m12
 *    (eq. 38-40) over a cos(alpha2) cos(beta2). Each step keeps a bracket of
 *    alpha1; a step that leaves it, or a derivative that is not positive,
 *    falls back to bisection, so the iteration always ends.
 *  - The starting alpha1 (section 5): the great circle on a sphere of radius
 *    b * dnm for short lines (solved outright when short enough, eq. 48);
 *    for nearly antipodal points on an oblate ellipsoid the solution of the
 *    astroid equation (eq. 55-57; the prolate variant scales by the
 *    reduced length of the meridian instead); otherwise the spherical guess.
 *  - Special cases: meridional lines (lambda12 = 0 or 180, or a pole) are
 *    solved with alpha1 = lambda12 directly, unless on a prolate ellipsoid
 *    the meridian is not the shortest path (m12 < 0); equatorial lines
 *    (both points on the equator, not nearly antipodal on an oblate
 *    ellipsoid) give s = a lambda12; coincident points give 0.
 *  - The points are put in canonical order first (|lat1| >= |lat2|, lat1 <=
 *    0, lambda12 >= 0): the distance does not change, and swapping the two
 *    points gives the same bits.
 *
 * Only the distance is computed: no azimuths, no area, and the reduced
 * length only where the algorithm needs it (the Newton derivative, the
 * meridian test, the prolate astroid), which is what makes it cheaper per
 * pair than a general-purpose inverse.
 */
#ifndef TESSEL_KINDS_GEODESIC_KARNEY_H
#define TESSEL_KINDS_GEODESIC_KARNEY_H

#include "compute/kinds/geodesic/geodesic.h"

/* Rare paths (the antipodal start, meridians) are kept out of line on the
 * GPU so that their registers do not count against the hot Newton loop. */
#if defined(__CUDA_ARCH__)
#define GEOD_COLD __noinline__
#else
#define GEOD_COLD
#endif

#define GEOD_MAXIT1 20 /* Newton steps before bisection only */
#define GEOD_MAXIT2 (GEOD_MAXIT1 + DBL_MANT_DIG + 10)
#define GEOD_TOL0 DBL_EPSILON
#define GEOD_TOL1 (200 * DBL_EPSILON)
#define GEOD_TOL2 1.4901161193847656e-08 /* sqrt(DBL_EPSILON) */
#define GEOD_TOLB (DBL_EPSILON * GEOD_TOL2)
#define GEOD_XTHRESH (1000 * GEOD_TOL2)

/* sum_{l=1..nk} k[l-1] sin(2 l sigma), given sin and cos of sigma, by
 * Clenshaw summation with cos(2 sigma) = (c - s)(c + s). */
TESSEL_HD static inline double geod__sinseries(double s, double c,
                                               const double *k, int nk) {
  double ar = 2 * (c - s) * (c + s);
  double b1 = 0, b2 = 0;
  for (int i = nk - 1; i >= 0; i--) {
    double t = k[i] + ar * b1 - b2;
    b2 = b1;
    b1 = t;
  }
  return 2 * s * c * b1;
}

/* A1 - 1 and C1_l (eqs. 17-18): I1 = A1 (sigma + sum C1_l sin 2l sigma). */
TESSEL_HD static inline double geod__a1m1(double eps) {
  double e2 = eps * eps;
  double t = e2 * (e2 * (e2 + 4) + 64) / 256;
  return (t + eps) / (1 - eps);
}
TESSEL_HD static inline void geod__c1(double eps, double *c) {
  double e2 = eps * eps, d = eps;
  c[0] = d * (-0.5 + e2 * (3.0 / 16 - e2 / 32));
  d *= eps;
  c[1] = d * (-1.0 / 16 + e2 * (1.0 / 32 - e2 * 9 / 2048));
  d *= eps;
  c[2] = d * (-1.0 / 48 + e2 * 3 / 256);
  d *= eps;
  c[3] = d * (-5.0 / 512 + e2 * 3 / 512);
  d *= eps;
  c[4] = d * (-7.0 / 1280);
  d *= eps;
  c[5] = d * (-7.0 / 2048);
}

/* A2 - 1 and C2_l (eqs. 42-43): I2 = A2 (sigma + sum C2_l sin 2l sigma),
 * A2 = (1 - eps)(1 + eps^2/4 + 9 eps^4/64 + 25 eps^6/256). */
TESSEL_HD static inline double geod__a2m1(double eps) {
  double e2 = eps * eps;
  double t = e2 * (0.25 + e2 * (9.0 / 64 + e2 * 25 / 256));
  return t * (1 - eps) - eps;
}
/* c[l] = a1 c[l] - a2 C2_l(eps): turns the C1 coefficients in c into
 * those of the combined series A1 I1 - A2 I2 in place (one array, fewer
 * registers on the GPU). */
TESSEL_HD static inline void geod__c12(double eps, double a1, double a2,
                                       double *c) {
  double e2 = eps * eps, d = eps;
  c[0] = a1 * c[0] - a2 * (d * (0.5 + e2 * (1.0 / 16 + e2 / 32)));
  d *= eps;
  c[1] = a1 * c[1] - a2 * (d * (3.0 / 16 + e2 * (1.0 / 32 + e2 * 35 / 2048)));
  d *= eps;
  c[2] = a1 * c[2] - a2 * (d * (5.0 / 48 + e2 * 5 / 256));
  d *= eps;
  c[3] = a1 * c[3] - a2 * (d * (35.0 / 512 + e2 * 7 / 512));
  d *= eps;
  c[4] = a1 * c[4] - a2 * (d * (63.0 / 1280));
  d *= eps;
  c[5] = a1 * c[5] - a2 * (d * (77.0 / 2048));
}

/* A3 and C3_l (eqs. 24-25) from the ellipsoid's coefficients. */
TESSEL_HD static inline double geod__a3(const geod_ellipsoid *g, double eps) {
  const double *a = g->A3x;
  return a[0] +
         eps * (a[1] + eps * (a[2] + eps * (a[3] + eps * (a[4] + eps * a[5]))));
}
TESSEL_HD static inline void geod__c3(const geod_ellipsoid *g, double eps,
                                      double *c) {
  const double *x = g->C3x;
  double d = eps;
  c[0] = d * (x[0] + eps * (x[1] + eps * (x[2] + eps * (x[3] + eps * x[4]))));
  d *= eps;
  c[1] = d * (x[5] + eps * (x[6] + eps * (x[7] + eps * x[8])));
  d *= eps;
  c[2] = d * (x[9] + eps * (x[10] + eps * x[11]));
  d *= eps;
  c[3] = d * (x[12] + eps * x[13]);
  d *= eps;
  c[4] = d * x[14];
}

/* Distance from sigma1 to sigma2 in units of b: A1 (sig12 + B1(2) - B1(1))
 * (eq. 7 with 15). */
TESSEL_HD static inline double geod__s12b(double eps, double sig12,
                                          double ssig1, double csig1,
                                          double ssig2, double csig2) {
  double c1[6];
  geod__c1(eps, c1);
  double b1 = geod__sinseries(ssig2, csig2, c1, 6) -
              geod__sinseries(ssig1, csig1, c1, 6);
  return (1 + geod__a1m1(eps)) * (sig12 + b1);
}

/* Reduced length m12 in units of b (eqs. 38-41): with J12 = I1 - I2
 * between the ends, m12 = dn2 cos s1 sin s2 - dn1 sin s1 cos s2
 * - cos s1 cos s2 J12. *m0 = A1 - A2 (the prolate astroid scale). The two
 * series are evaluated as one, with coefficients A1 C1_l - A2 C2_l. */
TESSEL_HD static inline double geod__m12b(double eps, double sig12,
                                          double ssig1, double csig1,
                                          double dn1, double ssig2,
                                          double csig2, double dn2,
                                          double *m0) {
  double c[6];
  geod__c1(eps, c);
  double a1m1 = geod__a1m1(eps), a2m1 = geod__a2m1(eps);
  geod__c12(eps, 1 + a1m1, 1 + a2m1, c);
  *m0 = a1m1 - a2m1;
  double j12 = *m0 * sig12 + (geod__sinseries(ssig2, csig2, c, 6) -
                              geod__sinseries(ssig1, csig1, c, 6));
  return dn2 * (csig1 * ssig2) - dn1 * (ssig1 * csig2) - csig1 * csig2 * j12;
}

/* The positive root k of k^4 + 2 k^3 - (x^2 + y^2 - 1) k^2 - 2 y^2 k - y^2
 * = 0 (eq. 55), 0 when x^2 + y^2 <= 1 and y = 0. Solved as a resolvent
 * cubic in closed form, arranged to avoid cancellation. */
TESSEL_HD static inline double geod__astroid(double x, double y) {
  double p = geod__sq(x), q = geod__sq(y), r = (p + q - 1) / 6;
  if (q == 0 && r <= 0) return 0;
  double S = p * q / 4, r2 = geod__sq(r), r3 = r * r2;
  double disc = S * (S + 2 * r3); /* discriminant of the cubic */
  double u = r;
  if (disc >= 0) {
    double t3 = S + r3;
    t3 += t3 < 0 ? -sqrt(disc) : sqrt(disc); /* no cancellation */
    double t = cbrt(t3);
    u += t + (t != 0 ? r2 / t : 0);
  } else {
    double ang = atan2(sqrt(-disc), -(S + r3)); /* three real roots */
    u += 2 * r * cos(ang / 3);
  }
  double v = sqrt(geod__sq(u) + q);
  double uv = u < 0 ? q / (v - u) : u + v; /* u + v, no cancellation */
  double w = (uv - q) / (2 * v);
  return uv / (sqrt(uv + geod__sq(w)) + w);
}

/* The starting guess for nearly antipodal points (section 5, eqs. 53-57):
 * scale to the astroid problem and solve it. */
TESSEL_HD static inline GEOD_COLD void geod__start_antipodal(
    const geod_ellipsoid *g, double sbet1, double cbet1, double dn1,
    double sbet2, double cbet2, double dn2, double slam12, double clam12,
    double sbet12a, double *psalp1, double *pcalp1) {
  double salp1, calp1, somg12, comg12;
  /* Nearly antipodal: scale to the astroid problem (eq. 53-54). */
  double lam12x = atan2(-slam12, -clam12); /* lambda12 - pi */
  double x, y, lamscale, betscale;
  if (g->f >= 0) {
    double k2 = geod__sq(sbet1) * g->ep2;
    double eps = k2 / (2 * (1 + sqrt(1 + k2)) + k2);
    lamscale = g->f * cbet1 * geod__a3(g, eps) * GEOD_PI;
    betscale = lamscale * cbet1;
    x = lam12x / lamscale;
    y = sbet12a / betscale;
  } else {
    double cbet12a = cbet2 * cbet1 - sbet2 * sbet1;
    double bet12a = atan2(sbet12a, cbet12a);
    double m0;
    double m12b = geod__m12b(g->n, GEOD_PI + bet12a, sbet1, -cbet1, dn1,
                             sbet2, cbet2, dn2, &m0);
    x = -1 + m12b / (cbet1 * cbet2 * m0 * GEOD_PI);
    betscale = x < -0.01 ? sbet12a / x : -g->f * geod__sq(cbet1) * GEOD_PI;
    lamscale = betscale / cbet1;
    y = lam12x / lamscale;
  }
  if (y > -GEOD_TOL1 && x > -1 - GEOD_XTHRESH) {
    /* On the cut (y ~ 0): the astroid degenerates; alpha1 from x. */
    if (g->f >= 0) {
      salp1 = fmin(1.0, -x);
      calp1 = -sqrt(1 - geod__sq(salp1));
    } else {
      calp1 = fmax(x > -GEOD_TOL1 ? 0.0 : -1.0, x);
      salp1 = sqrt(1 - geod__sq(calp1));
    }
  } else {
    double k = geod__astroid(x, y);
    double omg12a =
        lamscale * (g->f >= 0 ? -x * k / (1 + k) : -y * (1 + k) / k);
    geod__sincos(omg12a, &somg12, &comg12);
    comg12 = -comg12;
    salp1 = cbet2 * somg12; /* eq. 56 with omega12 near pi */
    calp1 = sbet12a - cbet2 * sbet1 * geod__sq(somg12) / (1 - comg12);
  }
  *psalp1 = salp1;
  *pcalp1 = calp1;
}

/* The starting azimuth alpha1 (section 5). Returns sig12 >= 0 when the
 * line is short enough to be solved on the sphere of radius b * *dnm (the
 * distance is then b dnm sig12), else -1 with (*salp1, *calp1). */
TESSEL_HD static inline double geod__start(const geod_ellipsoid *g,
                                           double sbet1, double cbet1,
                                           double dn1, double sbet2,
                                           double cbet2, double dn2,
                                           double lam12, double slam12,
                                           double clam12, double *psalp1,
                                           double *pcalp1, double *dnm) {
  double sbet12 = sbet2 * cbet1 - cbet2 * sbet1;  /* sin(bet2 - bet1) */
  double cbet12 = cbet2 * cbet1 + sbet2 * sbet1;
  double sbet12a = sbet2 * cbet1 + cbet2 * sbet1; /* sin(bet2 + bet1) */
  int shortline = cbet12 >= 0 && sbet12 < 0.5 && cbet2 * lam12 < 0.5;
  double somg12, comg12;
  if (shortline) {
    /* Scale lambda to omega with the radius at the mean latitude. */
    double sbetm2 = geod__sq(sbet1 + sbet2);
    sbetm2 /= sbetm2 + geod__sq(cbet1 + cbet2);
    *dnm = sqrt(1 + g->ep2 * sbetm2);
    geod__sincos(lam12 / (g->f1 * *dnm), &somg12, &comg12);
  } else {
    somg12 = slam12;
    comg12 = clam12;
  }
  /* The great circle through the two points on the sphere (eq. 49-50). */
  double salp1 = cbet2 * somg12;
  double calp1 =
      comg12 >= 0
          ? sbet12 + cbet2 * sbet1 * geod__sq(somg12) / (1 + comg12)
          : sbet12a - cbet2 * sbet1 * geod__sq(somg12) / (1 - comg12);
  double ssig12 = geod__hypot(salp1, calp1);
  double csig12 = sbet1 * sbet2 + cbet1 * cbet2 * comg12;
  if (shortline && ssig12 < g->etol2) return atan2(ssig12, csig12);

  if (!(fabs(g->n) > 0.1 || csig12 >= 0 ||
        ssig12 >= 6 * fabs(g->n) * GEOD_PI * geod__sq(cbet1)))
    geod__start_antipodal(g, sbet1, cbet1, dn1, sbet2, cbet2, dn2, slam12,
                          clam12, sbet12a, &salp1, &calp1);
  if (!(salp1 <= 0)) {
    geod__norm2(&salp1, &calp1);
  } else {
    salp1 = 1;
    calp1 = 0;
  }
  *psalp1 = salp1;
  *pcalp1 = calp1;
  return -1;
}

/* The state of one evaluation of lambda12(alpha1), kept for the derivative
 * and for the distance once converged. */
typedef struct geod__line {
  double sig12, ssig1, csig1, ssig2, csig2, calp2, eps;
} geod__line;

/* lambda12(alpha1) - lambda12 (eq. 46 with 8 and 23): the longitude
 * difference reached by the geodesic leaving point 1 at alpha1, minus the
 * target, computed as eta = omega12 - lambda12 (one atan2, no
 * cancellation) plus the ellipsoidal correction. */
TESSEL_HD static inline double geod__lambda12(const geod_ellipsoid *g,
                                              double sbet1, double cbet1,
                                              double sbet2, double cbet2,
                                              double salp1, double calp1,
                                              double slam120, double clam120,
                                              geod__line *L) {
  if (sbet1 == 0 && calp1 == 0) calp1 = -GEOD_TINY; /* equator, due east */
  double salp0 = salp1 * cbet1; /* Clairaut: sin(alpha0), eq. 5 */
  double calp0 = geod__hypot(calp1, salp1 * sbet1);
  /* sigma and omega at point 1 (eq. 11-12) */
  double ssig1 = sbet1, somg1 = salp0 * sbet1;
  double csig1 = calp1 * cbet1, comg1 = csig1;
  geod__norm2(&ssig1, &csig1);
  /* cos(alpha2) >= 0 from Clairaut, written to avoid cancellation (eq.
   * 45); equal |beta| keeps |calp1| exactly */
  double calp2 =
      (cbet2 != cbet1 || fabs(sbet2) != -sbet1)
          ? sqrt(geod__sq(calp1 * cbet1) +
                 (cbet1 < -sbet1 ? (cbet2 - cbet1) * (cbet1 + cbet2)
                                 : (sbet1 - sbet2) * (sbet1 + sbet2))) /
                cbet2
          : fabs(calp1);
  double ssig2 = sbet2, somg2 = salp0 * sbet2;
  double csig2 = calp2 * cbet2, comg2 = csig2;
  geod__norm2(&ssig2, &csig2);
  double sig12 = atan2(fmax(0.0, csig1 * ssig2 - ssig1 * csig2),
                       csig1 * csig2 + ssig1 * ssig2);
  double somg12 = fmax(0.0, comg1 * somg2 - somg1 * comg2);
  double comg12 = comg1 * comg2 + somg1 * somg2;
  double eta = atan2(somg12 * clam120 - comg12 * slam120,
                     comg12 * clam120 + somg12 * slam120);
  double k2 = geod__sq(calp0) * g->ep2;
  double eps = k2 / (2 * (1 + sqrt(1 + k2)) + k2);
  double c3[5];
  geod__c3(g, eps, c3);
  double b312 = geod__sinseries(ssig2, csig2, c3, 5) -
                geod__sinseries(ssig1, csig1, c3, 5);
  double domg12 = -g->f * geod__a3(g, eps) * salp0 * (sig12 + b312);
  L->sig12 = sig12;
  L->ssig1 = ssig1;
  L->csig1 = csig1;
  L->ssig2 = ssig2;
  L->csig2 = csig2;
  L->calp2 = calp2;
  L->eps = eps;
  return eta + domg12;
}

/* d lambda12 / d alpha1 at the state L (eq. 46): m12 / (a cos(alpha2)
 * cos(beta2)), or its limit when alpha2 = 90 degrees. */
TESSEL_HD static inline double geod__dlambda12(const geod_ellipsoid *g,
                                               double sbet1, double cbet2,
                                               double dn1, double dn2,
                                               const geod__line *L) {
  if (L->calp2 == 0) return -2 * g->f1 * dn1 / sbet1;
  double m0;
  double m12b = geod__m12b(L->eps, L->sig12, L->ssig1, L->csig1, dn1,
                           L->ssig2, L->csig2, dn2, &m0);
  return m12b * g->f1 / (L->calp2 * cbet2);
}

/* A meridional line (lambda12 = 0 or 180 degrees, or point 1 at a pole):
 * alpha1 = lambda12, alpha2 = 0. Returns 1 with the distance in *s12, or 0
 * when the meridian is not the shortest path (prolate, sig12 > pi/2 with
 * m12 < 0), which the general method then solves. */
TESSEL_HD static inline GEOD_COLD int geod__meridian(
    const geod_ellipsoid *g, double sbet1, double cbet1, double dn1,
    double sbet2, double cbet2, double dn2, double clam12, double *s12) {
  double ssig1 = sbet1, csig1 = clam12 * cbet1;
  double ssig2 = sbet2, csig2 = cbet2;
  /* Unfused products: equal points give exactly sig12 = 0 (and s = 0). */
  double sig12 = atan2(fmax(0.0, geod__mulx(csig1, ssig2) -
                                     geod__mulx(ssig1, csig2)),
                       csig1 * csig2 + ssig1 * ssig2);
  double m0;
  double s12b = geod__s12b(g->n, sig12, ssig1, csig1, ssig2, csig2);
  double m12b =
      geod__m12b(g->n, sig12, ssig1, csig1, dn1, ssig2, csig2, dn2, &m0);
  if (!(sig12 < 1 || m12b >= 0)) return 0;
  if (sig12 < 3 * GEOD_TINY || (sig12 < GEOD_TOL0 && (s12b < 0 || m12b < 0)))
    s12b = 0; /* coincident, or a round-off-negative short line */
  *s12 = 0.0 + g->b * s12b;
  return 1;
}

/* The geodesic distance (m) between two points prepared by
 * geod_point_prep on g. Symmetric to the last bit in its arguments. */
TESSEL_HD static inline double geod_inverse_karney_pp(const geod_ellipsoid *g,
                                                      const geod_point *P,
                                                      const geod_point *Q) {
  /* lambda12 >= 0, with its rounding error, and its complement 180 -
   * lambda12 computed exactly (used near 180). */
  double e12;
  double lon12 = geod__londiff(P->lon, Q->lon, &e12);
  if (copysign(1.0, lon12) < 0) {
    lon12 = -lon12;
    e12 = -e12;
  }
  lon12 = geod__anground(lon12);
  double lon12s = geod__anground((180 - lon12) - e12);
  double lam12 = lon12 * GEOD_DEG, slam12, clam12;
  if (lon12 > 90) {
    geod__sincosd90(lon12s, &slam12, &clam12);
    clam12 = -clam12;
  } else {
    geod__sincosd90(lon12, &slam12, &clam12);
  }

  /* Canonical order: |lat1| >= |lat2| and lat1 <= 0. */
  const geod_point *p1 = P, *p2 = Q;
  if (fabs(p1->lat) < fabs(p2->lat)) {
    p1 = Q;
    p2 = P;
  }
  double latsign = p1->lat > 0 ? -1.0 : 1.0;
  double lat1 = latsign * p1->lat;
  double sbet1 = latsign * p1->sbet, cbet1 = p1->cbet, dn1 = p1->dn;
  double sbet2 = latsign * p2->sbet, cbet2 = p2->cbet, dn2 = p2->dn;
  /* Keep |beta1| == |beta2| exact when the latitudes are equal in size. */
  if (cbet1 < -sbet1) {
    if (cbet2 == cbet1) sbet2 = copysign(sbet1, sbet2);
  } else if (fabs(sbet2) == -sbet1) {
    cbet2 = cbet1;
  }

  double s12;
  if ((lat1 == -90 || slam12 == 0) &&
      geod__meridian(g, sbet1, cbet1, dn1, sbet2, cbet2, dn2, clam12, &s12))
    return s12;

  if (sbet1 == 0 && (g->f <= 0 || lon12s >= g->f * 180)) {
    /* Equatorial, and not close enough to antipodal for the geodesic to
     * leave the equator (oblate case). */
    return 0.0 + g->a * lam12;
  }

  double salp1 = 0, calp1 = 0, dnm = 1;
  double sig12 = geod__start(g, sbet1, cbet1, dn1, sbet2, cbet2, dn2, lam12,
                             slam12, clam12, &salp1, &calp1, &dnm);
  if (sig12 >= 0) return 0.0 + sig12 * g->b * dnm; /* short line, solved */

  /* Newton on alpha1 in the bracket (alpha1a, alpha1b), bisection when a
   * step fails; tripn: |v| is already at round-off (one more step to be
   * sure); tripb: the bracket has collapsed. */
  double salp1a = GEOD_TINY, calp1a = 1, salp1b = GEOD_TINY, calp1b = -1;
  int tripn = 0, tripb = 0;
  geod__line L;
  for (int numit = 0;; numit++) {
    double v = geod__lambda12(g, sbet1, cbet1, sbet2, cbet2, salp1, calp1,
                              slam12, clam12, &L);
    if (tripb || !(fabs(v) >= (tripn ? 8 : 1) * GEOD_TOL0) ||
        numit == GEOD_MAXIT2)
      break;
    /* Shrink the bracket: v > 0 means alpha1 is too large. */
    if (v > 0 && (numit > GEOD_MAXIT1 || calp1 / salp1 > calp1b / salp1b)) {
      salp1b = salp1;
      calp1b = calp1;
    } else if (v < 0 &&
               (numit > GEOD_MAXIT1 || calp1 / salp1 < calp1a / salp1a)) {
      salp1a = salp1;
      calp1a = calp1;
    }
    if (numit < GEOD_MAXIT1) {
      double dv = geod__dlambda12(g, sbet1, cbet2, dn1, dn2, &L);
      if (dv > 0) {
        double dalp1 = -v / dv;
        if (fabs(dalp1) < GEOD_PI) {
          double sdalp1, cdalp1;
          geod__sincos(dalp1, &sdalp1, &cdalp1);
          double nsalp1 = salp1 * cdalp1 + calp1 * sdalp1;
          if (nsalp1 > 0) {
            calp1 = calp1 * cdalp1 - salp1 * sdalp1;
            salp1 = nsalp1;
            geod__norm2(&salp1, &calp1);
            tripn = fabs(v) <= 16 * GEOD_TOL0;
            continue;
          }
        }
      }
    }
    /* Bisection (also after the Newton budget is spent). */
    salp1 = (salp1a + salp1b) / 2;
    calp1 = (calp1a + calp1b) / 2;
    geod__norm2(&salp1, &calp1);
    tripn = 0;
    tripb = (fabs(salp1a - salp1) + (calp1a - calp1) < GEOD_TOLB ||
             fabs(salp1 - salp1b) + (calp1 - calp1b) < GEOD_TOLB);
  }
  return 0.0 + g->b * geod__s12b(L.eps, L.sig12, L.ssig1, L.csig1, L.ssig2,
                                 L.csig2);
}

/* Convenience: the same from degrees (prepares both points). */
TESSEL_HD static inline double geod_inverse_karney(const geod_ellipsoid *g,
                                                   double lat1, double lon1,
                                                   double lat2, double lon2) {
  geod_point p, q;
  geod_point_prep(g, lat1, lon1, &p);
  geod_point_prep(g, lat2, lon2, &q);
  return geod_inverse_karney_pp(g, &p, &q);
}

#endif
