/* geodesic.h — the geodesic core: one set of inverse-problem solvers that
 * compile both as host C (the CPU tiles of compute/kinds/geodesic/kind.c, the tests) and
 * as CUDA device code (compute/kinds/geodesic/geodesic.cu).
 *
 * Everything here is a `static inline` function marked TESSEL_HD, which is
 * `__host__ __device__` under nvcc and nothing under a C compiler; there is
 * no global state and no static table, so the same text runs on both sides.
 *
 * Three methods, all returning the distance in metres:
 *   karney     Karney (2013), "Algorithms for geodesics", J. Geodesy 87,
 *              43-55: series in the third flattening n and in eps to sixth
 *              order, Newton's method on the auxiliary sphere with a
 *              bisection fallback, the astroid starting guess for nearly
 *              antipodal points, and the special cases of meridional,
 *              equatorial, coincident and very short lines. Valid for any
 *              ellipsoid with |f| <= 1/50 (oblate and prolate). The code is
 *              in compute/kinds/geodesic/karney.h, included at the end of this file.
 *   vincenty   Vincenty (1975)'s inverse iteration on the auxiliary sphere.
 *              A pair whose iteration does not converge within
 *              GEOD_VINCENTY_MAXIT steps (nearly antipodal points) gives NaN
 *              and bumps a caller-owned counter: never a hang.
 *   haversine  great-circle distance on a sphere of radius R, evaluated as
 *              R * atan2(|u1 x u2|, u1 . u2) on per-point unit vectors: the
 *              same function as the haversine formula, but well conditioned
 *              for every separation (the haversine's asin loses half the
 *              digits near antipodes).
 *
 * A distance matrix touches each point n times, so everything that depends
 * on one point only is done once per point (geod_point_prep: the reduced
 * latitude, its sine and cosine, the longitude reduced to [-180, 180]) and
 * everything that depends on the ellipsoid only is done once per job
 * (geod_ellipsoid_init: the polynomial coefficients of A3 and C3 in eps,
 * whose coefficients depend on n). The per-pair functions take two prepared
 * points.
 *
 * Angles are handled in degrees with exact reductions (remquo by 90, the
 * error-free sum of the two longitudes) so that special values (poles,
 * multiples of 90 degrees, equal or opposite points) are exact, as in the
 * paper. Every function is a pure function of its arguments: the same
 * inputs give the same bits on the same compiler and flags; the CPU and GPU
 * differ in the last bits of libm results and fused multiply-adds only.
 */
#ifndef TESSEL_KINDS_GEODESIC_GEODESIC_H
#define TESSEL_KINDS_GEODESIC_GEODESIC_H

#include <float.h>
#include <math.h>

#if defined(__CUDACC__)
#define TESSEL_HD __host__ __device__
#else
#define TESSEL_HD
#endif

#define GEOD_PI 3.14159265358979323846
#define GEOD_DEG (GEOD_PI / 180.0)
/* sqrt(DBL_MIN): the smallest value whose square is still normal. */
#define GEOD_TINY 1.4916681462400413e-154
#define GEOD_VINCENTY_MAXIT 200
#define GEOD_VINCENTY_TOL 1e-12

/* WGS84 and GRS80 (they differ in the 10th digit of f). */
#define GEOD_WGS84_A 6378137.0
#define GEOD_WGS84_F (1.0 / 298.257223563)
#define GEOD_GRS80_A 6378137.0
#define GEOD_GRS80_F (1.0 / 298.257222100882711243)
#define GEOD_MAX_ABS_F (1.0 / 50.0)

/* An ellipsoid and what the Karney and Vincenty solvers derive from it.
 * Filled on the host by geod_ellipsoid_init; plain data, copied by value to
 * the GPU (it is a kernel argument there). */
typedef struct geod_ellipsoid {
  double a, f;      /* equatorial radius (m), flattening */
  double f1;        /* 1 - f */
  double b;         /* polar semi-axis a (1 - f) */
  double e2, ep2;   /* first and second eccentricity squared */
  double n;         /* third flattening f / (2 - f) */
  double etol2;     /* short-line threshold of the starting guess */
  double A3x[6];    /* A3(eps) = sum A3x[k] eps^k */
  double C3x[15];   /* C3_l(eps) = eps^l sum_k C3x[o_l + k] eps^k, l = 1..5 */
} geod_ellipsoid;

/* One point, prepared once (geod_point_prep / geod_point_prep_sphere). */
typedef struct geod_point {
  double lat;  /* degrees, in [-90, 90], tiny values rounded (geod__anground) */
  double lon;  /* degrees, reduced to [-180, 180] */
  /* Ellipsoid methods: sine and cosine of the reduced latitude beta,
   * tan(beta) = (1 - f) tan(lat), cbet >= GEOD_TINY; dn = sqrt(1 + ep2
   * sbet^2). Sphere (haversine): the unit vector (x, y, z) = (sbet, cbet,
   * dn). */
  double sbet, cbet, dn;
} geod_point;

/* ---- small helpers -------------------------------------------------- */

TESSEL_HD static inline double geod__sq(double x) { return x * x; }

/* One call for both (CUDA and glibc's sincos with _GNU_SOURCE, which
 * Tessel's build defines; else two calls). */
TESSEL_HD static inline void geod__sincos(double x, double *s, double *c) {
#if defined(__CUDACC__) || defined(_GNU_SOURCE)
  sincos(x, s, c);
#else
  *s = sin(x);
  *c = cos(x);
#endif
}

/* a * b, never fused into a multiply-add with a neighbouring term (nvcc
 * fuses by default; x86-64 C builds without -mfma cannot): for differences
 * of products that must come out exactly zero when the operands are equal,
 * e.g. sin(sigma2 - sigma1) of two equal points. */
TESSEL_HD static inline double geod__mulx(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/* Scale (s, c) to unit length. The fast path is a plain square root; when
 * both components are so small that their squares underflow, hypot. */
TESSEL_HD static inline void geod__norm2(double *s, double *c) {
  double r2 = *s * *s + *c * *c;
  double r = r2 >= DBL_MIN ? sqrt(r2) : hypot(*s, *c);
  *s /= r;
  *c /= r;
}

TESSEL_HD static inline double geod__hypot(double x, double y) {
  double r2 = x * x + y * y;
  return r2 >= DBL_MIN ? sqrt(r2) : hypot(x, y);
}

/* Round an angle under 1/16 degree to a multiple of 2^-57 degrees (about
 * 7e-18 degrees, a nanometre is 1e-14 degrees), keeping its sign, so that
 * tiny nonzero differences cannot underflow in the solver; larger angles
 * are unchanged. */
TESSEL_HD static inline double geod__anground(double x) {
  const double z = 1.0 / 16.0;
  double y = fabs(x);
  y = y < z ? z - (z - y) : y; /* no -ffast-math: not folded to y */
  return copysign(y, x);
}

/* sin and cos of x degrees, with exact reduction to [-45, 45] so that
 * multiples of 90 give exact 0 and +-1. */
TESSEL_HD static inline void geod__sincosd(double x, double *sinx,
                                           double *cosx) {
  int q = 0;
  double r = remquo(x, 90.0, &q);
  double s, c;
  geod__sincos(r * GEOD_DEG, &s, &c);
  switch ((unsigned)q & 3u) {
    case 0u: *sinx = s; *cosx = c; break;
    case 1u: *sinx = c; *cosx = -s; break;
    case 2u: *sinx = -s; *cosx = -c; break;
    default: *sinx = -c; *cosx = s; break;
  }
  *cosx += 0.0; /* -0 -> +0 */
  if (x == 0) *sinx = x;
}

/* sin and cos of x degrees for x in [0, 90] (the longitude difference and
 * its complement): reduces by 90 - x, which is exact, instead of remquo. */
TESSEL_HD static inline void geod__sincosd90(double x, double *s, double *c) {
  if (x <= 45.0) {
    geod__sincos(x * GEOD_DEG, s, c);
  } else {
    geod__sincos((90.0 - x) * GEOD_DEG, c, s);
  }
}

/* Error-free sum: s + t == u + v exactly (Knuth's TwoSum). */
TESSEL_HD static inline double geod__sum(double u, double v, double *t) {
  double s = u + v;
  double up = s - v;
  double vpp = s - up;
  up -= u;
  vpp -= v;
  *t = -(up + vpp);
  return s;
}

/* lon2 - lon1 for longitudes already in [-180, 180], reduced to
 * [-180, 180], as a rounded value d plus the rounding error *e (the exact
 * difference is d + *e). Antisymmetric: swapping the points negates both,
 * so a distance matrix built from the upper triangle is exactly
 * symmetric. */
TESSEL_HD static inline double geod__londiff(double lon1, double lon2,
                                             double *e) {
  double t;
  double d = geod__sum(lon2, -lon1, &t); /* |d| <= 360 */
  /* d - 360 (d + 360) is exact for d in [180, 360] (Sterbenz). */
  if (d > 180.0 || (d == 180.0 && t > 0)) {
    d = geod__sum(d - 360.0, t, &t);
  } else if (d < -180.0 || (d == -180.0 && t < 0)) {
    d = geod__sum(d + 360.0, t, &t);
  }
  *e = t;
  return d;
}

/* ---- the ellipsoid ---------------------------------------------------- */

/* Fill g for equatorial radius a (m) and flattening f. Returns 0, or -1
 * when a is not positive and finite or |f| > 1/50 (the series are to sixth
 * order and lose accuracy beyond that). Host only. */
static inline int geod_ellipsoid_init(geod_ellipsoid *g, double a, double f) {
  if (!(a > 0) || !isfinite(a) || !(fabs(f) <= GEOD_MAX_ABS_F)) return -1;
  g->a = a;
  g->f = f;
  g->f1 = 1 - f;
  g->b = a * g->f1;
  g->e2 = f * (2 - f);
  g->ep2 = g->e2 / geod__sq(g->f1);
  g->n = f / (2 - f);
  double n = g->n, n2 = n * n;
  /* Threshold below which a short line is solved on the sphere of radius
   * b * dnm directly (section 4 of the paper): tol2 = sqrt(DBL_EPSILON)
   * scaled by the flattening. */
  double tol2 = sqrt(DBL_EPSILON);
  g->etol2 = 0.1 * tol2 /
             sqrt(fmax(0.001, fabs(f)) * fmin(1.0, 1 - f / 2) / 2);
  /* A3 = 1 - (1/2 - n/2) eps - (1/4 + n/8 - 3n^2/8) eps^2
   *        - (1/16 + 3n/16 + n^2/16) eps^3 - (3/64 + n/32) eps^4
   *        - 3/128 eps^5                                  (paper eq. 24) */
  g->A3x[0] = 1;
  g->A3x[1] = -(0.5 - n / 2);
  g->A3x[2] = -(0.25 + n / 8 - 3 * n2 / 8);
  g->A3x[3] = -(1.0 / 16 + 3 * n / 16 + n2 / 16);
  g->A3x[4] = -(3.0 / 64 + n / 32);
  g->A3x[5] = -3.0 / 128;
  /* C3_l, eq. 25; stored per l as coefficients of eps^l, eps^(l+1), ... */
  double *c = g->C3x;
  /* l = 1 */
  c[0] = 0.25 - n / 4;
  c[1] = 1.0 / 8 - n2 / 8;
  c[2] = 3.0 / 64 + 3 * n / 64 - n2 / 64;
  c[3] = 5.0 / 128 + n / 64;
  c[4] = 3.0 / 128;
  /* l = 2 */
  c[5] = 1.0 / 16 - 3 * n / 32 + n2 / 32;
  c[6] = 3.0 / 64 - n / 32 - 3 * n2 / 64;
  c[7] = 3.0 / 128 + n / 128;
  c[8] = 5.0 / 256;
  /* l = 3 */
  c[9] = 5.0 / 192 - 3 * n / 64 + 5 * n2 / 192;
  c[10] = 3.0 / 128 - 5 * n / 192;
  c[11] = 7.0 / 512;
  /* l = 4 */
  c[12] = 7.0 / 512 - 7 * n / 256;
  c[13] = 7.0 / 512;
  /* l = 5 */
  c[14] = 21.0 / 2560;
  return 0;
}

/* ---- points ----------------------------------------------------------- */

/* Prepare a point for karney and vincenty. lat must be in [-90, 90] and
 * lon finite (callers validate; see compute/kinds/geodesic/kind.c). */
TESSEL_HD static inline void geod_point_prep(const geod_ellipsoid *g,
                                             double lat, double lon,
                                             geod_point *p) {
  double sphi, cphi;
  p->lat = geod__anground(lat);
  p->lon = remainder(lon, 360.0);
  if (p->lon == -180.0) p->lon = 180.0;
  geod__sincosd(p->lat, &sphi, &cphi);
  double sbet = g->f1 * sphi, cbet = cphi;
  geod__norm2(&sbet, &cbet);
  p->sbet = sbet;
  p->cbet = fmax(GEOD_TINY, cbet); /* a pole: keep cos(beta) positive */
  p->dn = sqrt(1 + g->ep2 * geod__sq(sbet));
}

/* Prepare a point for haversine: the unit vector of (lat, lon). */
TESSEL_HD static inline void geod_point_prep_sphere(double lat, double lon,
                                                    geod_point *p) {
  double sphi, cphi, slam, clam;
  p->lat = lat;
  p->lon = remainder(lon, 360.0);
  geod__sincosd(lat, &sphi, &cphi);
  geod__sincosd(p->lon, &slam, &clam);
  p->sbet = cphi * clam;
  p->cbet = cphi * slam;
  p->dn = sphi;
}

/* ---- haversine -------------------------------------------------------- */

/* Great-circle distance on a sphere of radius r (m) between two points
 * prepared by geod_point_prep_sphere. */
TESSEL_HD static inline double geod_inverse_haversine_pp(const geod_point *p,
                                                         const geod_point *q,
                                                         double r) {
  double x1 = p->sbet, y1 = p->cbet, z1 = p->dn;
  double x2 = q->sbet, y2 = q->cbet, z2 = q->dn;
  double cx = y1 * z2 - z1 * y2;
  double cy = z1 * x2 - x1 * z2;
  double cz = x1 * y2 - y1 * x2;
  double dot = x1 * x2 + y1 * y2 + z1 * z2;
  return r * atan2(sqrt(cx * cx + cy * cy + cz * cz), dot);
}

/* ---- Vincenty --------------------------------------------------------- */

/* Vincenty's inverse on ellipsoid g between two prepared points. Returns
 * the distance (m), or NaN when the iteration on lambda does not converge
 * to GEOD_VINCENTY_TOL radians within GEOD_VINCENTY_MAXIT steps (nearly
 * antipodal points), or when sigma's sine is exactly 0 at opposite points
 * (a pole and the other pole: taken for coincident points, 0 m, before;
 * the queries' chord bound relies on no distance being shorter than the
 * chord); then *nonconv is incremented (the caller's counter, one per
 * thread). */
TESSEL_HD static inline double geod_inverse_vincenty_pp(
    const geod_ellipsoid *g, const geod_point *p, const geod_point *q,
    long long *nonconv) {
  double e;
  double L = geod__londiff(p->lon, q->lon, &e);
  L = (L + e) * GEOD_DEG;
  double sU1 = p->sbet, cU1 = p->cbet, sU2 = q->sbet, cU2 = q->cbet;
  double f = g->f;
  double lam = L, slam = 0, clam = 1;
  double ssig = 0, csig = 1, sig = 0, c2alp = 1, c2sigm = 0;
  int it;
  for (it = 0; it < GEOD_VINCENTY_MAXIT; it++) {
    geod__sincos(lam, &slam, &clam);
    double t1 = cU2 * slam;
    double t2 = cU1 * sU2 - sU1 * cU2 * clam;
    ssig = sqrt(t1 * t1 + t2 * t2);
    csig = sU1 * sU2 + cU1 * cU2 * clam;
    if (ssig == 0) { /* coincident, or exactly antipodal (poles) */
      if (csig > 0) return 0.0;
      it = GEOD_VINCENTY_MAXIT; /* antipodal: Vincenty has no answer */
      break;
    }
    sig = atan2(ssig, csig);
    double salp = cU1 * cU2 * slam / ssig;
    c2alp = 1 - salp * salp;
    c2sigm = c2alp != 0 ? csig - 2 * sU1 * sU2 / c2alp : 0; /* equatorial */
    double C = f / 16 * c2alp * (4 + f * (4 - 3 * c2alp));
    double lamp = lam;
    lam = L + (1 - C) * f * salp *
                  (sig + C * ssig *
                             (c2sigm + C * csig * (-1 + 2 * c2sigm * c2sigm)));
    if (fabs(lam - lamp) <= GEOD_VINCENTY_TOL) break;
    if (!(fabs(lam) <= 2 * GEOD_PI)) { /* diverging (or NaN) */
      it = GEOD_VINCENTY_MAXIT;
      break;
    }
  }
  if (it >= GEOD_VINCENTY_MAXIT) {
    if (nonconv) ++*nonconv;
    return NAN;
  }
  /* The last lambda update changed it by under the tolerance; the sigma
   * terms below are those of the previous lambda, as in Vincenty. */
  double u2 = c2alp * g->ep2;
  double A = 1 + u2 / 16384 * (4096 + u2 * (-768 + u2 * (320 - 175 * u2)));
  double B = u2 / 1024 * (256 + u2 * (-128 + u2 * (74 - 47 * u2)));
  double c2 = c2sigm * c2sigm;
  double dsig =
      B * ssig *
      (c2sigm + B / 4 *
                    (csig * (-1 + 2 * c2) -
                     B / 6 * c2sigm * (-3 + 4 * ssig * ssig) * (-3 + 4 * c2)));
  return g->b * A * (sig - dsig);
}

#include "compute/kinds/geodesic/karney.h"

#endif
