/* test_geodesic_accuracy.c — the geodesic core (compute/kinds/geodesic/geodesic.h) against
 * independent references.
 *
 * karney: 8 classes x GEOD_ACC_PER_CLASS pairs on each of four ellipsoids
 * (WGS84, a strongly flattened oblate one f = 1/50, a prolate one f =
 * -1/50, the sphere) against GeographicLib as Debian ships it in PROJ
 * (geodesic.h, geod_inverse). Classes: random (uniform on the sphere), very
 * short (under 1 m), nearly antipodal, meridional, equatorial, polar,
 * coincident, and near-pole/near-equator mixtures. Prints max and mean
 * error in nanometres per class; asserts the max <= 15 nm everywhere.
 *
 * vincenty: against a plain float64 textbook implementation of the same
 * iteration (written here from Vincenty 1975, with atan/tan and no
 * precomputation), and against karney where it converges (the formulas'
 * own truncation is well under a millimetre); nearly antipodal pairs that
 * do not converge give NaN and are counted, and return promptly.
 *
 * haversine: against the great-circle angle in long double from the
 * Vincenty special case of the sphere (atan2 of |cross| and dot).
 *
 * Also: exact symmetry (swapping the points gives the same bits), exact
 * zeros for coincident points, and the ellipsoid's range checks.
 */
#include <stdint.h>

#include "check.h"
#include "compute/kinds/geodesic/geodesic.h"

#if TESSEL_HAVE_PROJ
#include <geodesic.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define GEOD_ACC_PER_CLASS 2500 /* sanitizer builds: memory checks, not stats */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GEOD_ACC_PER_CLASS 2500
#endif
#endif
#ifndef GEOD_ACC_PER_CLASS
#define GEOD_ACC_PER_CLASS 15000 /* x 8 classes = 120,000 pairs per ellipsoid */
#endif
#define GEOD_ACC_MAX_NM 15.0

enum {
  C_RANDOM, C_SHORT, C_ANTIPODAL, C_MERIDIONAL, C_EQUATORIAL, C_POLAR,
  C_COINCIDENT, C_MIXED, C__COUNT
};
static const char *const class_names[C__COUNT] = {
    "random", "short<1m", "antipodal", "meridional", "equatorial", "polar",
    "coincident", "mixed"};

/* SplitMix64: a reproducible stream. */
static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static double urand(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}
static double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }
static double clamp_lat(double x) { return x > 90 ? 90 : x < -90 ? -90 : x; }
static double rand_lat(void) { /* uniform on the sphere */
  return asin(2 * urand() - 1) / GEOD_DEG;
}

/* One pair of class c. */
static void draw(int c, double *lat1, double *lon1, double *lat2,
                 double *lon2) {
  *lat1 = rand_lat();
  *lon1 = uni(-180, 180);
  switch (c) {
    case C_RANDOM:
      *lat2 = rand_lat();
      *lon2 = uni(-180, 180);
      break;
    case C_SHORT: { /* offsets of at most ~0.7 m */
      double k = pow(10, uni(-9, -5.2));
      *lat2 = clamp_lat(*lat1 + k * uni(-1, 1));
      *lon2 = *lon1 + k * uni(-1, 1) / fmax(cos(*lat1 * GEOD_DEG), 1e-3);
      break;
    }
    case C_ANTIPODAL: { /* within 0.5 degree, down to 1e-9, of antipodal */
      double k = pow(10, uni(-9, -0.3));
      *lat2 = clamp_lat(-*lat1 + k * uni(-1, 1));
      *lon2 = *lon1 + 180 + k * uni(-1, 1);
      if (urand() < 0.2) *lat1 = uni(-1, 1), *lat2 = -*lat1 * uni(0.5, 1.5);
      break;
    }
    case C_MERIDIONAL:
      *lat2 = rand_lat();
      *lon2 = urand() < 0.5 ? *lon1 : *lon1 + 180;
      break;
    case C_EQUATORIAL:
      *lat1 = urand() < 0.8 ? 0 : uni(-1e-7, 1e-7);
      *lat2 = urand() < 0.8 ? 0 : uni(-1e-7, 1e-7);
      *lon2 = urand() < 0.3 ? *lon1 + 180 - pow(10, uni(-6, 1))
                            : uni(-180, 180);
      break;
    case C_POLAR: { /* at a pole, or within 1e-12 .. 1e-3 degree of one */
      double off = urand() < 0.5 ? 0 : pow(10, uni(-12, -3));
      *lat1 = urand() < 0.5 ? 90 - off : -90 + off;
      *lat2 = urand() < 0.3 ? (urand() < 0.5 ? 90 : -90) : rand_lat();
      *lon2 = uni(-180, 180);
      break;
    }
    case C_COINCIDENT: /* the same point, also written lon + 360 (exact) */
      *lon1 = ldexp(round(ldexp(*lon1, 40)), -40);
      *lat2 = *lat1;
      *lon2 = *lon1 + (urand() < 0.3 ? 360 : 0);
      if (urand() < 0.1) *lat1 = *lat2 = urand() < 0.5 ? 90 : -90;
      break;
    default: /* mixtures near the special values */
      *lat1 = urand() < 0.5 ? uni(-1e-3, 1e-3) : clamp_lat(90 - pow(10, uni(-8, 0)));
      *lat2 = urand() < 0.5 ? clamp_lat(-*lat1 + uni(-1e-3, 1e-3)) : rand_lat();
      *lon2 = *lon1 + (urand() < 0.5 ? 180 - uni(0, 1) : uni(-1, 1));
      break;
  }
}

#if TESSEL_HAVE_PROJ
static void karney_vs_proj(const char *name, double a, double f,
                           int per_class) {
  geod_ellipsoid g;
  struct geod_geodesic G;
  CHECK(geod_ellipsoid_init(&g, a, f) == 0);
  geod_init(&G, a, f);
  printf("karney vs PROJ geod_inverse, %s (a = %.0f, f = %.9g):\n", name, a, f);
  printf("  %-11s %8s %10s %10s\n", "class", "pairs", "max nm", "mean nm");
  double worst_all = 0;
  for (int c = 0; c < C__COUNT; c++) {
    double maxe = 0, sum = 0, wl[4] = {0, 0, 0, 0};
    long cnt = 0, over1m = 0;
    for (int k = 0; k < per_class; k++) {
      double lat1, lon1, lat2, lon2, ref;
      draw(c, &lat1, &lon1, &lat2, &lon2);
      geod_inverse(&G, lat1, lon1, lat2, lon2, &ref, NULL, NULL);
      double s = geod_inverse_karney(&g, lat1, lon1, lat2, lon2);
      double err = fabs(s - ref);
      if (!(err <= maxe)) { /* NaN lands here too */
        maxe = isnan(err) ? INFINITY : err;
        wl[0] = lat1, wl[1] = lon1, wl[2] = lat2, wl[3] = lon2;
      }
      sum += err;
      cnt++;
      if (c == C_SHORT && ref >= 1.0) over1m++;
      if (c == C_COINCIDENT) CHECK(s == 0 && ref == 0);
    }
    printf("  %-11s %8ld %10.3f %10.4f\n", class_names[c], cnt, maxe * 1e9,
           sum / (double)cnt * 1e9);
    CHECK_MSG(maxe * 1e9 <= GEOD_ACC_MAX_NM,
              "%s %s: %.3f nm at %.17g %.17g %.17g %.17g", name,
              class_names[c], maxe * 1e9, wl[0], wl[1], wl[2], wl[3]);
    CHECK(over1m == 0);
    if (maxe > worst_all) worst_all = maxe;
  }
  printf("  all %ld pairs: max %.3f nm\n", (long)C__COUNT * per_class,
         worst_all * 1e9);
}

TEST(test_karney_wgs84) {
  karney_vs_proj("WGS84", GEOD_WGS84_A, GEOD_WGS84_F, GEOD_ACC_PER_CLASS);
}
TEST(test_karney_oblate_f50) {
  karney_vs_proj("oblate", 6378137, 1.0 / 50, GEOD_ACC_PER_CLASS);
}
TEST(test_karney_prolate_f50) {
  karney_vs_proj("prolate", 6378137, -1.0 / 50, GEOD_ACC_PER_CLASS);
}
TEST(test_karney_sphere_grs80) {
  karney_vs_proj("sphere", 6371008.8, 0, GEOD_ACC_PER_CLASS / 5);
  karney_vs_proj("GRS80", GEOD_GRS80_A, GEOD_GRS80_F, GEOD_ACC_PER_CLASS / 5);
}
#endif

/* Special values with known answers, independent of PROJ. */
TEST(test_karney_known) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  /* Quarter meridian of WGS84 (GeodSolve -E: 10001965.729312725 m). */
  CHECK_NEAR(geod_inverse_karney(&g, 0, 0, 90, 0), 10001965.729312725, 2e-8);
  /* Pole to pole on any meridian: twice that, whatever the longitudes. */
  CHECK_NEAR(geod_inverse_karney(&g, 90, 10, -90, -70), 20003931.458625451,
             4e-8);
  /* Along the equator: a * lambda. */
  CHECK_NEAR(geod_inverse_karney(&g, 0, 0, 0, 90), GEOD_WGS84_A * GEOD_PI / 2,
             1e-6);
  /* Exactly antipodal on the equator: the geodesic goes over a pole. */
  CHECK_NEAR(geod_inverse_karney(&g, 0, 0, 0, 180), 20003931.458625447, 4e-8);
  CHECK(geod_inverse_karney(&g, 12.5, 33, 12.5, 33 + 360) == 0);
  CHECK(geod_inverse_karney(&g, 90, 0, 90, 123) == 0);
  CHECK(geod_inverse_karney(&g, 0, 180, 0, -180) == 0);
}

TEST(test_karney_symmetric_bits) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  int bad = 0;
  for (int k = 0; k < 20000; k++) {
    double lat1, lon1, lat2, lon2;
    draw(k % C__COUNT, &lat1, &lon1, &lat2, &lon2);
    double s12 = geod_inverse_karney(&g, lat1, lon1, lat2, lon2);
    double s21 = geod_inverse_karney(&g, lat2, lon2, lat1, lon1);
    if (memcmp(&s12, &s21, sizeof s12) != 0) bad++;
  }
  CHECK(bad == 0);
}

TEST(test_ellipsoid_limits) {
  geod_ellipsoid g;
  CHECK(geod_ellipsoid_init(&g, 6378137, 1.0 / 50) == 0);
  CHECK(geod_ellipsoid_init(&g, 6378137, -1.0 / 50) == 0);
  CHECK(geod_ellipsoid_init(&g, 6378137, 0.021) == -1);
  CHECK(geod_ellipsoid_init(&g, 6378137, NAN) == -1);
  CHECK(geod_ellipsoid_init(&g, 0, 0.003) == -1);
  CHECK(geod_ellipsoid_init(&g, INFINITY, 0.003) == -1);
}

/* ---- Vincenty ------------------------------------------------------------ */

/* The textbook iteration (Vincenty 1975, inverse), float64, unprepared. */
static double vincenty_ref(double a, double f, double lat1, double lon1,
                           double lat2, double lon2, int *ok) {
  double b = a * (1 - f);
  double L = remainder(lon2 - lon1, 360.0) * GEOD_PI / 180;
  double U1 = atan((1 - f) * tan(lat1 * GEOD_PI / 180));
  double U2 = atan((1 - f) * tan(lat2 * GEOD_PI / 180));
  double sU1 = sin(U1), cU1 = cos(U1), sU2 = sin(U2), cU2 = cos(U2);
  double lam = L, ss = 0, cs = 1, sig = 0, c2a = 1, c2sm = 0;
  *ok = 0;
  for (int it = 0; it < 200; it++) {
    double sl = sin(lam), cl = cos(lam);
    ss = sqrt(pow(cU2 * sl, 2) + pow(cU1 * sU2 - sU1 * cU2 * cl, 2));
    if (ss == 0) {
      *ok = 1;
      return 0;
    }
    cs = sU1 * sU2 + cU1 * cU2 * cl;
    sig = atan2(ss, cs);
    double sa = cU1 * cU2 * sl / ss;
    c2a = 1 - sa * sa;
    c2sm = c2a != 0 ? cs - 2 * sU1 * sU2 / c2a : 0;
    double C = f / 16 * c2a * (4 + f * (4 - 3 * c2a));
    double prev = lam;
    lam = L + (1 - C) * f * sa *
                  (sig + C * ss * (c2sm + C * cs * (-1 + 2 * c2sm * c2sm)));
    if (fabs(lam - prev) <= 1e-12) {
      *ok = 1;
      break;
    }
  }
  if (!*ok) return NAN;
  double u2 = c2a * (a * a - b * b) / (b * b);
  double A = 1 + u2 / 16384 * (4096 + u2 * (-768 + u2 * (320 - 175 * u2)));
  double B = u2 / 1024 * (256 + u2 * (-128 + u2 * (74 - 47 * u2)));
  double ds = B * ss *
              (c2sm + B / 4 *
                          (cs * (-1 + 2 * c2sm * c2sm) -
                           B / 6 * c2sm * (-3 + 4 * ss * ss) *
                               (-3 + 4 * c2sm * c2sm)));
  return b * A * (sig - ds);
}

TEST(test_vincenty) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  static const int classes[] = {C_RANDOM, C_SHORT, C_MERIDIONAL, C_POLAR,
                                C_COINCIDENT};
  double maxe = 0, maxk = 0;
  long n = 0, both = 0;
  for (size_t c = 0; c < sizeof classes / sizeof classes[0]; c++) {
    for (int k = 0; k < 4000; k++) {
      double lat1, lon1, lat2, lon2;
      draw(classes[c], &lat1, &lon1, &lat2, &lon2);
      geod_point p, q;
      geod_point_prep(&g, lat1, lon1, &p);
      geod_point_prep(&g, lat2, lon2, &q);
      long long nc = 0;
      int ok;
      double s = geod_inverse_vincenty_pp(&g, &p, &q, &nc);
      double r = vincenty_ref(g.a, g.f, lat1, lon1, lat2, lon2, &ok);
      n++;
      if (!ok || nc) continue; /* a rare slow pair: checked below */
      both++;
      double err = fabs(s - r);
      if (err > maxe) maxe = err;
      double kk = fabs(s - geod_inverse_karney(&g, lat1, lon1, lat2, lon2));
      if (kk > maxk) maxk = kk;
    }
  }
  printf("vincenty vs textbook float64: %ld/%ld pairs, max %.3g m; vs "
         "karney max %.3g m\n",
         both, n, maxe, maxk);
  CHECK(both >= n - 10);
  CHECK(maxe <= 2e-8); /* same fixed point, different rounding */
  CHECK(maxk <= 2e-4); /* Vincenty's series: about 0.1 mm */
}

TEST(test_vincenty_nonconvergence) {
  geod_ellipsoid g;
  geod_ellipsoid_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  /* Known failures of the iteration: nearly antipodal points. */
  static const double pts[][4] = {{0, 0, 0.5, 179.8},
                                  {0, 0, 0.5, 179.7},
                                  {0, 0, 0, 180},
                                  {-0.1, 10, 0.1, -170.05}};
  long long nc = 0;
  for (int k = 0; k < 4; k++) {
    geod_point p, q;
    int ok;
    geod_point_prep(&g, pts[k][0], pts[k][1], &p);
    geod_point_prep(&g, pts[k][2], pts[k][3], &q);
    double s = geod_inverse_vincenty_pp(&g, &p, &q, &nc);
    double r = vincenty_ref(g.a, g.f, pts[k][0], pts[k][1], pts[k][2],
                            pts[k][3], &ok);
    CHECK_MSG(isnan(s), "pair %d gave %.17g", k, s);
    CHECK(!ok && isnan(r));
  }
  CHECK(nc == 4);
  /* In the antipodal class, NaN exactly where the reference fails (but for
   * pairs on the edge of convergence, where rounding decides). */
  long nan_mine = 0, nan_ref = 0, disagree = 0;
  for (int k = 0; k < 4000; k++) {
    double lat1, lon1, lat2, lon2;
    int ok;
    draw(C_ANTIPODAL, &lat1, &lon1, &lat2, &lon2);
    geod_point p, q;
    geod_point_prep(&g, lat1, lon1, &p);
    geod_point_prep(&g, lat2, lon2, &q);
    long long c = 0;
    double s = geod_inverse_vincenty_pp(&g, &p, &q, &c);
    vincenty_ref(g.a, g.f, lat1, lon1, lat2, lon2, &ok);
    CHECK(isnan(s) == (c == 1));
    nan_mine += isnan(s);
    nan_ref += !ok;
    disagree += isnan(s) != !ok;
  }
  printf("vincenty, 4000 nearly antipodal pairs: %ld NaN (reference %ld), "
         "%ld disagree\n",
         nan_mine, nan_ref, disagree);
  CHECK(nan_mine > 100);
  CHECK(disagree <= nan_mine / 50 + 2);
}

/* ---- haversine ------------------------------------------------------------ */

static double sphere_ref(double r, double lat1, double lon1, double lat2,
                         double lon2) {
  long double d = 3.14159265358979323846264338327950288L / 180;
  long double p1 = lat1 * d, p2 = lat2 * d;
  long double dl = ((long double)lon2 - (long double)lon1) * d;
  long double x = cosl(p2) * sinl(dl);
  long double y = cosl(p1) * sinl(p2) - sinl(p1) * cosl(p2) * cosl(dl);
  long double z = sinl(p1) * sinl(p2) + cosl(p1) * cosl(p2) * cosl(dl);
  return (double)(r * atan2l(sqrtl(x * x + y * y), z));
}

TEST(test_haversine) {
  double maxe = 0;
  for (int c = 0; c < C__COUNT; c++) {
    for (int k = 0; k < 4000; k++) {
      double lat1, lon1, lat2, lon2, r = k & 1 ? 6371008.8 : 1737400;
      draw(c, &lat1, &lon1, &lat2, &lon2);
      geod_point p, q;
      geod_point_prep_sphere(lat1, lon1, &p);
      geod_point_prep_sphere(lat2, lon2, &q);
      double s = geod_inverse_haversine_pp(&p, &q, r);
      double err = fabs(s - sphere_ref(r, lat1, lon1, lat2, lon2));
      CHECK_MSG(err <= 2e-9 + 1e-15 * s, "%.17g %.17g %.17g %.17g: %g", lat1,
                lon1, lat2, lon2, err);
      if (err > maxe) maxe = err;
    }
  }
  printf("haversine vs long double great circle: max %.3g m\n", maxe);
}

int main(void) {
#if TESSEL_HAVE_PROJ
  RUN(test_karney_wgs84);
  RUN(test_karney_oblate_f50);
  RUN(test_karney_prolate_f50);
  RUN(test_karney_sphere_grs80);
#else
  fprintf(stderr, "PROJ (libproj-dev, deps/packages.txt [test]) was not found "
          "at build time: the comparison with GeographicLib cannot run\n");
  check_failed++;
#endif
  RUN(test_karney_known);
  RUN(test_karney_symmetric_bits);
  RUN(test_ellipsoid_limits);
  RUN(test_vincenty);
  RUN(test_vincenty_nonconvergence);
  RUN(test_haversine);
  return check_summary();
}
