/* test_geodesic_gpu.c — the geodesic kind on a CUDA GPU
 * (compute/kinds/geodesic/geodesic.cu), run on the device machine.
 *
 * Exits 77 ("SKIPPED: no CUDA device") without CUDA in the build or a
 * device at run time. On a GPU:
 *  - accuracy: the same classes as test_geodesic_accuracy.c (random, under
 *    1 m, nearly antipodal, meridional, equatorial, polar, coincident,
 *    mixed) as 8 blocks of 128 x 128 pairs (131,072 pairs) on each of
 *    WGS84, f = 1/50, f = -1/50 and the sphere, computed on the GPU and
 *    compared with GeographicLib (PROJ's geod_inverse): max <= 15 nm per
 *    class. The GPU machine has no PROJ, so the references can come from a
 *    file written here by the same program: `--write-ref FILE` (needs PROJ)
 *    stores inputs and references, `--ref FILE` reads them.
 *  - square (the resident, mirrored path) against the host build of the
 *    same core; poisoned output checked fully written, symmetric, zero
 *    diagonal; vincenty (NaN count equal to the host's) and haversine too;
 *  - float32 output equal to the float64 result rounded once;
 *  - matrices forced into several passes (a small device-memory budget and
 *    small pinned chunks), square and condensed bitwise equal to the
 *    resident result, targets within 1 nm (their pairs (i, j), j < i, run
 *    in the other order);
 *  - error paths: a device that does not exist and a cancel between chunks
 *    fail the call with T_EDEVICE / T_ECANCELED, and the next call works;
 *  - spread over devices (job->borrow, job->lanes): with a fake lender of
 *    device 1 (on 2 GPUs; skipped, saying so, on one), two lanes on device
 *    0 (the streams shared, the pinned slots and memory split: safe on any
 *    GPU), and both: square f64 / f32, condensed f64 / f32, targets
 *    f64 / f32 and vincenty bitwise equal to the one-device matrix, the
 *    same non-converged count, the lanes driven as asked, every borrowed
 *    device given back once; a cancel after the first chunk stops the
 *    call and gives them back; no lender: one device.
 * --quick runs small sizes only (for compute-sanitizer).
 */
#include <stdint.h>

#include "check.h"
#include "compute/kinds/geodesic/plan.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"
#endif
#if TESSEL_HAVE_PROJ
#include <geodesic.h>
#endif

#if TESSEL_HAVE_CUDA

#define NB 128 /* block edge */
#define NCLASS 8
#define NELL 4
static const char *const class_names[NCLASS] = {
    "random", "short<1m", "antipodal", "meridional", "equatorial", "polar",
    "coincident", "mixed"};
static const double ell_a[NELL] = {6378137, 6378137, 6378137, 6371008.8};
static const double ell_f[NELL] = {1 / 298.257223563, 1.0 / 50, -1.0 / 50, 0};
static const char *const ell_names[NELL] = {"WGS84", "oblate 1/50",
                                            "prolate 1/50", "sphere"};

/* Inputs and references of one ellipsoid: per class, A and B (NB x 2) and
 * ref (NB x NB). */
typedef struct sample {
  double A[NCLASS][NB * 2], B[NCLASS][NB * 2], ref[NCLASS][NB * NB];
} sample;

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double urand(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}
static double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }
static double rlat(void) { return asin(2 * urand() - 1) / GEOD_DEG; }
static double clat(double x) { return x > 90 ? 90 : x < -90 ? -90 : x; }

/* Blocks where every pair (i, j) belongs to the class. */
static void draw_block(int c, double *A, double *B) {
  double x = rlat(), y = uni(-180, 180);
  for (int k = 0; k < NB; k++) {
    double *a = A + 2 * k, *b = B + 2 * k;
    switch (c) {
      case 0:
        a[0] = rlat(), a[1] = uni(-180, 180), b[0] = rlat(), b[1] = uni(-180, 180);
        break;
      case 1: { /* a cluster within ~0.3 m of (x, y) */
        double s = 2.5e-6, cs = fmax(cos(x * GEOD_DEG), 1e-3);
        a[0] = clat(x + uni(-s, s)), a[1] = y + uni(-s, s) / cs;
        b[0] = clat(x + uni(-s, s)), b[1] = y + uni(-s, s) / cs;
        break;
      }
      case 2: { /* clusters around (x, y) and its antipode */
        double s = k % 2 ? 0.25 : pow(10, uni(-9, -2));
        a[0] = clat(x + uni(-s, s)), a[1] = y + uni(-s, s);
        b[0] = clat(-x + uni(-s, s)), b[1] = y + 180 + uni(-s, s);
        break;
      }
      case 3: /* one meridian and its continuation over the pole */
        a[0] = rlat(), a[1] = y, b[0] = rlat(), b[1] = k % 2 ? y : y + 180;
        break;
      case 4: /* the equator, some pairs exactly antipodal */
        a[0] = 0, a[1] = uni(-180, 180), b[0] = 0;
        b[1] = k % 4 == 0 ? a[1] + 180 : uni(-180, 180);
        break;
      case 5: { /* at or near a pole */
        double off = k % 2 ? 0 : pow(10, uni(-12, -3));
        a[0] = k % 4 < 2 ? 90 - off : -90 + off, a[1] = uni(-180, 180);
        b[0] = k % 3 ? rlat() : (k % 2 ? 90 : -90), b[1] = uni(-180, 180);
        break;
      }
      case 6: { /* 8 distinct points, each 16 times (lon + 360 exactly) */
        uint64_t save = rng;
        rng = 77 + (uint64_t)(k % 8);
        double p0 = rlat(), p1 = ldexp(round(ldexp(uni(-180, 180), 40)), -40);
        rng = save;
        a[0] = b[0] = p0;
        a[1] = p1, b[1] = p1 + (k % 3 == 0 ? 360 : 0);
        break;
      }
      default: /* near the equator or a pole, against random or near */
        a[0] = k % 2 ? uni(-1e-3, 1e-3) : clat(90 - pow(10, uni(-8, 0)));
        a[1] = uni(-180, 180);
        b[0] = k % 3 ? clat(-a[0] + uni(-1e-3, 1e-3)) : rlat();
        b[1] = a[1] + (k % 2 ? 180 - uni(0, 1) : uni(-1, 1));
        break;
    }
  }
}

static int ref_io(const char *path, int write, sample *S) {
  FILE *f = fopen(path, write ? "wb" : "rb");
  if (!f) return -1;
  size_t want = sizeof(sample) * NELL, got;
  got = write ? fwrite(S, 1, want, f) : fread(S, 1, want, f);
  fclose(f);
  return got == want ? 0 : -1;
}

static sample *g_sample; /* NELL of them */

/* Inputs always from the generator; references from PROJ or the file. */
static int sample_init(const char *ref_path, const char *write_path) {
  g_sample = calloc(NELL, sizeof(sample));
  if (!g_sample) return -1;
  for (int e = 0; e < NELL; e++)
    for (int c = 0; c < NCLASS; c++)
      draw_block(c, g_sample[e].A[c], g_sample[e].B[c]);
  if (ref_path) return ref_io(ref_path, 0, g_sample); /* inputs too */
#if TESSEL_HAVE_PROJ
  for (int e = 0; e < NELL; e++) {
    struct geod_geodesic G;
    geod_init(&G, ell_a[e], ell_f[e]);
    for (int c = 0; c < NCLASS; c++)
      for (int i = 0; i < NB; i++)
        for (int j = 0; j < NB; j++)
          geod_inverse(&G, g_sample[e].A[c][2 * i], g_sample[e].A[c][2 * i + 1],
                       g_sample[e].B[c][2 * j], g_sample[e].B[c][2 * j + 1],
                       &g_sample[e].ref[c][i * NB + j], NULL, NULL);
  }
  if (write_path) return ref_io(write_path, 1, g_sample);
  return 0;
#else
  (void)write_path;
  return 1; /* no reference */
#endif
}

/* ---- helpers ----------------------------------------------------------- */

static const uint64_t POISON64 = 0x7FF4DEADBEEF0001ULL;
static const uint32_t POISON32 = 0x7FA0BEEFu;

static tarray *poisoned(const geod_plan *pl) {
  tarray *t = tarray_new(pl->dtype, pl->ndim, pl->shape);
  if (!t) return NULL;
  for (int64_t i = 0; i < t->size; i++) {
    if (t->dtype == T_F64)
      memcpy((char *)t->data + 8 * i, &POISON64, 8);
    else
      memcpy((char *)t->data + 4 * i, &POISON32, 4);
  }
  return t;
}

static int64_t count_poison(const tarray *t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t->size; i++)
    n += t->dtype == T_F64 ? memcmp((char *)t->data + 8 * i, &POISON64, 8) == 0
                           : memcmp((char *)t->data + 4 * i, &POISON32, 4) == 0;
  return n;
}

typedef struct cb_state {
  int64_t done, total, stop_after;
} cb_state;
static int cb_stopped(void *c) {
  cb_state *s = c;
  return s->stop_after > 0 && s->done >= s->stop_after ? T_ECANCELED : 0;
}
static void cb_progress(void *c, int64_t add) { ((cb_state *)c)->done += add; }
static void cb_total(void *c, int64_t add) { ((cb_state *)c)->total += add; }

/* Run a plan on device 0 into a fresh poisoned array. */
static int gpu_run(const geod_plan *pl, tarray **out, int64_t *nc,
                   cb_state *st, terr *e) {
  cb_state local = {0, 0, 0};
  if (!st) st = &local;
  geod_gpu_job job = {st,   cb_stopped, cb_progress, cb_total, NULL, NULL,
                      NULL, 0,          NULL,        NULL,     0,    NULL,
                      NULL};
  *out = poisoned(pl);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  int64_t ncl = 0;
  int rc = cuda_geodesic(0, pl, *out, &job, nc ? nc : &ncl, e);
  if (rc) {
    tarray_free(*out);
    *out = NULL;
  }
  return rc;
}

static double *random_points(int n, uint64_t seed) {
  double *p = malloc((size_t)n * 2 * sizeof *p);
  uint64_t save = rng;
  rng = seed;
  for (int i = 0; i < n; i++) {
    p[2 * i] = rlat(), p[2 * i + 1] = uni(-180, 180);
    if (i % 19 == 3 && i > 0) /* some nearly antipodal pairs */
      p[2 * i] = -p[2 * i - 2] + uni(-1e-3, 1e-3), p[2 * i + 1] = p[2 * i - 1] + 179.99;
    if (i % 31 == 5) p[2 * i] = 90;
    p[2 * i] = clat(p[2 * i]);
  }
  rng = save;
  return p;
}

/* ---- tests ----------------------------------------------------------------- */

static int g_have_ref, g_quick;

TEST(test_gpu_accuracy_vs_geographiclib) {
  if (!g_have_ref) {
    printf("  (no PROJ and no --ref file: checked against the host core "
           "below only)\n");
    return;
  }
  terr e;
  for (int el = 0; el < (g_quick ? 1 : NELL); el++) {
    printf("GPU karney vs GeographicLib (PROJ), %s:\n", ell_names[el]);
    printf("  %-11s %8s %10s %10s %12s %10s\n", "class", "pairs", "max nm",
           "mean nm", "host max nm", "max m");
    for (int c = 0; c < NCLASS; c++) {
      geod_plan *pl = NULL;
      CHECK(geod_plan_build(GEOD_KARNEY, ell_a[el], ell_f[el], 6371008.8, 1, 0,
                            T_F64, g_sample[el].A[c], NB, g_sample[el].B[c],
                            NB, &pl, &e) == 0);
      tarray *r = NULL;
      int rc = gpu_run(pl, &r, NULL, NULL, &e);
      CHECK_MSG(rc == 0, "%s", e.message);
      if (rc) {
        geod_plan_free(pl);
        return;
      }
      double maxe = 0, sum = 0, hmax = 0, smax = 0;
      const double *R = r->data, *ref = g_sample[el].ref[c];
      for (int k = 0; k < NB * NB; k++) {
        double err = fabs(R[k] - ref[k]);
        if (!(err <= maxe)) maxe = isnan(err) ? INFINITY : err;
        sum += err;
        if (c == 6 && ref[k] == 0) CHECK(R[k] == 0);
        double h = geod_inverse_karney_pp(&pl->ell, &pl->p[k / NB],
                                          &pl->q[k % NB]);
        if (!(fabs(h - ref[k]) <= hmax)) hmax = fabs(h - ref[k]);
        if (ref[k] > smax) smax = ref[k];
      }
      printf("  %-11s %8d %10.3f %10.4f %12.3f %10.4g\n", class_names[c],
             NB * NB, maxe * 1e9, sum / (NB * NB) * 1e9, hmax * 1e9, smax);
      CHECK(hmax <= 15e-9);
      if (c == 1) CHECK(smax < 1.0); /* the short class is under 1 m */
      CHECK_MSG(maxe <= 15e-9, "%s %s: %.3f nm", ell_names[el], class_names[c],
                maxe * 1e9);
      tarray_free(r);
      geod_plan_free(pl);
    }
  }
}

static tarray *g_sym64; /* the resident square result of random_points */
static geod_plan *g_sym_plan;
static int NSQ = 1000; /* --quick: 200 (for compute-sanitizer) */

TEST(test_gpu_square_vs_host) {
  terr e;
  double *pts = random_points(NSQ, 11);
  CHECK(geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                        0, T_F64, pts, NSQ, NULL, 0, &g_sym_plan, &e) == 0);
  cb_state st = {0, 0, 0};
  int rc = gpu_run(g_sym_plan, &g_sym64, NULL, &st, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  free(pts);
  if (rc) return;
  CHECK(count_poison(g_sym64) == 0);
  CHECK(st.done == st.total && st.total >= 1);
  const double *S = g_sym64->data;
  double maxe = 0;
  int64_t asym = 0;
  for (int i = 0; i < NSQ; i++) {
    CHECK(S[i * NSQ + i] == 0);
    for (int j = i + 1; j < NSQ; j++) {
      double h = geod_inverse_karney_pp(&g_sym_plan->ell, &g_sym_plan->p[i],
                                        &g_sym_plan->p[j]);
      double err = fabs(S[i * NSQ + j] - h);
      if (!(err <= maxe)) maxe = isnan(err) ? INFINITY : err;
      asym += memcmp(&S[i * NSQ + j], &S[j * NSQ + i], 8) != 0;
    }
  }
  printf("square %d x %d (resident, mirrored): max |GPU - host| %.3f nm\n",
         NSQ, NSQ, maxe * 1e9);
  CHECK(maxe <= 15e-9);
  CHECK(asym == 0);
}

TEST(test_gpu_float32) {
  if (!g_sym64) return;
  terr e;
  geod_plan p32 = *g_sym_plan;
  p32.dtype = T_F32;
  tarray *r = NULL;
  CHECK(gpu_run(&p32, &r, NULL, NULL, &e) == 0);
  if (!r) return;
  CHECK(count_poison(r) == 0);
  int64_t bad = 0;
  for (int64_t k = 0; k < r->size; k++)
    bad += ((const float *)r->data)[k] != (float)((const double *)g_sym64->data)[k];
  CHECK(bad == 0);
  tarray_free(r);
}

/* Passes: a 3 MB device budget and 256 KB chunks. */
TEST(test_gpu_passes) {
  if (!g_sym64) return;
  terr e;
  geod_plan p = *g_sym_plan;
  p.gpu_mem_limit = g_quick ? 100 << 10 : 3 << 20;
  p.gpu_chunk_bytes = g_quick ? 8 << 10 : 256 << 10;
  cb_state st = {0, 0, 0};
  tarray *r = NULL;
  CHECK(gpu_run(&p, &r, NULL, &st, &e) == 0);
  if (r) {
    CHECK(count_poison(r) == 0);
    int64_t diff = 0; /* SQR gives each element SYM's arguments */
    for (int64_t k = 0; k < r->size; k++)
      diff += memcmp((double *)r->data + k, (double *)g_sym64->data + k, 8) != 0;
    printf("square in passes: %lld chunks, %lld elements not bitwise equal to "
           "the resident matrix\n",
           (long long)st.total, (long long)diff);
    CHECK(st.total > 20 && st.done == st.total);
    CHECK(diff == 0);
    tarray_free(r);
  }
  /* condensed, in passes: pdist order of the same matrix */
  p.condensed = 1;
  p.ndim = 1;
  p.shape[0] = (int64_t)NSQ * (NSQ - 1) / 2;
  CHECK(gpu_run(&p, &r, NULL, NULL, &e) == 0);
  if (r) {
    CHECK(count_poison(r) == 0);
    int64_t k = 0, bad = 0; /* the same pairs as SYM's: the same bits */
    for (int i = 0; i < NSQ; i++)
      for (int j = i + 1; j < NSQ; j++, k++)
        bad += memcmp((double *)r->data + k,
                      (double *)g_sym64->data + (size_t)i * NSQ + j, 8) != 0;
    CHECK(bad == 0);
    tarray_free(r);
  }
  /* targets (the first NSQ/3 points against all), in passes */
  geod_plan t = *g_sym_plan;
  t.has_targets = 1;
  t.n = NSQ / 3;
  t.shape[0] = NSQ / 3;
  t.gpu_mem_limit = g_quick ? 64 << 10 : 1 << 20;
  t.gpu_chunk_bytes = g_quick ? 10 << 10 : 100 << 10;
  CHECK(gpu_run(&t, &r, NULL, NULL, &e) == 0);
  if (r) {
    CHECK(count_poison(r) == 0);
    int64_t bad = 0;
    for (int64_t k = 0; k < r->size; k++)
      bad += fabs(((double *)r->data)[k] - ((double *)g_sym64->data)[k]) > 1e-9;
    CHECK(bad == 0);
    tarray_free(r);
  }
}

TEST(test_gpu_other_methods) {
  if (!g_sym_plan) return;
  terr e;
  int n = g_quick ? 150 : 600;
  double *pts = random_points(n, 12);
  for (int m = GEOD_VINCENTY; m <= GEOD_HAVERSINE; m++) {
    geod_plan *pl = NULL;
    CHECK(geod_plan_build((geod_method)m, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8,
                          1000, 0, T_F64, pts, n, NULL, 0, &pl, &e) == 0);
    tarray *r = NULL;
    int64_t nc = 0;
    CHECK(gpu_run(pl, &r, &nc, NULL, &e) == 0);
    if (!r) {
      geod_plan_free(pl);
      continue;
    }
    CHECK(count_poison(r) == 0);
    double maxe = 0;
    long long hnc = 0;
    int64_t nan_gpu = 0;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) {
        double h = geod_plan_pair(pl, &pl->p[i], &pl->p[j], &hnc);
        double g = ((double *)r->data)[i * n + j];
        nan_gpu += isnan(g);
        if (isnan(h) || isnan(g)) continue;
        if (fabs(g - h) > maxe) maxe = fabs(g - h);
      }
    printf("%s on GPU vs host (km): max %.3g, NaN %lld (counted %lld, host "
           "%lld)\n",
           m == GEOD_VINCENTY ? "vincenty" : "haversine", maxe,
           (long long)nan_gpu, (long long)nc, hnc);
    CHECK(maxe <= 1e-11); /* km: 10 nm */
    CHECK(nc == nan_gpu);
    CHECK(llabs((long long)nc - hnc) <= 2);
    if (m == GEOD_VINCENTY) CHECK(nc > 0);
    tarray_free(r);
    geod_plan_free(pl);
  }
  free(pts);
}

TEST(test_gpu_errors) {
  if (!g_sym_plan) return;
  terr e;
  terr_clear(&e);
  tarray *r = poisoned(g_sym_plan);
  int64_t nc;
  int rc = cuda_geodesic(99, g_sym_plan, r, NULL, &nc, &e);
  printf("device 99: rc %d: %s\n", rc, e.message);
  CHECK(rc == T_EDEVICE);
  tarray_free(r);
  /* A cancel after the first chunk. */
  geod_plan p = *g_sym_plan;
  p.gpu_chunk_bytes = g_quick ? 4 << 10 : 64 << 10;
  cb_state st = {0, 0, 1};
  rc = gpu_run(&p, &r, NULL, &st, &e);
  printf("canceled after %lld of %lld chunks: rc %d\n", (long long)st.done,
         (long long)st.total, rc);
  CHECK(rc == T_ECANCELED && r == NULL);
  CHECK(st.done < st.total);
  /* The device is fine afterwards. */
  CHECK(gpu_run(g_sym_plan, &r, NULL, NULL, &e) == 0);
  if (r) CHECK(memcmp(r->data, g_sym64->data, (size_t)r->size * 8) == 0);
  tarray_free(r);
}

/* ---- spread over devices ------------------------------------------------ */

/* The scheduler's part, faked: lends device `lend` (one holder at a time)
 * and counts what is borrowed and given back. st first: the stop and
 * progress callbacks read the same ctx as a cb_state. */
typedef struct lender {
  cb_state st;
  int lend, held, borrowed, returned, wrong;
} lender;
static int lend_borrow(void *c, int dev) {
  lender *l = c;
  if (dev != l->lend || l->held) return -1;
  l->held = 1;
  l->borrowed++;
  return 0;
}
static void lend_give_back(void *c, int dev) {
  lender *l = c;
  if (dev != l->lend || !l->held) l->wrong++;
  l->held = 0;
  l->returned++;
}

static int g_ngpu;

/* Run a plan on device 0 with device `lend` lendable and `lanes` lanes a
 * device, into a fresh poisoned array; *nl: the lanes driven. */
static int64_t g_rep_rows, g_rep_calls; /* spread_report's */
static void spread_report(void *c, int n, const int *dev,
                          const int64_t *rows, const int64_t *bands) {
  (void)c, (void)dev, (void)bands;
  g_rep_calls++;
  for (int k = 0; k < n; k++) g_rep_rows += rows[k];
}

static int spread_run(const geod_plan *pl, int lend, int lanes, lender *l,
                      tarray **out, int64_t *nc, int *nl, terr *e) {
  geod_gpu_job job = {l,      cb_stopped,     cb_progress, cb_total, NULL,
                      NULL,   NULL,           g_ngpu,      lend_borrow,
                      lend_give_back, lanes,  nl,          spread_report};
  int64_t ncl = 0;
  g_rep_rows = g_rep_calls = 0;
  l->lend = lend;
  *out = poisoned(pl);
  if (!*out) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  int rc = cuda_geodesic(0, pl, *out, &job, nc ? nc : &ncl, e);
  if (rc) {
    tarray_free(*out);
    *out = NULL;
  }
  /* spread: the devices' shares reported once, every row of the run */
  if (rc == 0 && nl && *nl > 1) {
    int64_t want = (pl->row1 > 0 ? pl->row1 : pl->n) -
                   (pl->row1 > 0 ? pl->row0 : 0);
    CHECK_MSG(g_rep_calls == 1 && g_rep_rows == want,
              "report: %lld calls, %lld rows of %lld",
              (long long)g_rep_calls, (long long)g_rep_rows, (long long)want);
  }
  return rc;
}

/* Square (resident on one device), float32, condensed, targets and
 * vincenty, each spread over the lanes of a variant, bitwise equal to the
 * one-device matrix; the devices lent all given back; a cancel mid-way
 * stops the call and gives them back too. */
TEST(test_gpu_spread) {
  if (!g_sym64) return;
  struct {
    int lend, lanes;
    const char *what;
  } var[3] = {{1, 1, "device 1 lent"},
              {-1, 2, "two lanes on device 0"},
              {1, 2, "device 1 lent, two lanes a device"}};
  terr e;
  double *vp = random_points(g_quick ? 150 : 400, 12);
  geod_plan *vin = NULL;
  CHECK(geod_plan_build(GEOD_VINCENTY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8,
                        1, 0, T_F64, vp, g_quick ? 150 : 400, NULL, 0, &vin,
                        &e) == 0);
  free(vp);
  if (!vin) return;
  /* The cases, small chunks so that each result holds many. */
  enum { NCASE = 7 };
  geod_plan pc[NCASE];
  const char *names[NCASE] = {"square f64", "square f32", "condensed f64",
                              "condensed f32", "targets f64", "targets f32",
                              "vincenty square"};
  for (int c = 0; c < NCASE; c++) {
    pc[c] = c == 6 ? *vin : *g_sym_plan;
    pc[c].gpu_chunk_bytes = g_quick ? 4 << 10 : 64 << 10;
    if (c % 2 == 1 && c < 6) pc[c].dtype = T_F32;
    if (c == 2 || c == 3) {
      pc[c].condensed = 1;
      pc[c].ndim = 1;
      pc[c].shape[0] = (int64_t)NSQ * (NSQ - 1) / 2;
    }
    if (c == 4 || c == 5) {
      pc[c].has_targets = 1;
      pc[c].n = NSQ / 3;
      pc[c].shape[0] = NSQ / 3;
    }
  }
  /* The one-device references (square f64: the resident g_sym64). */
  tarray *ref[NCASE] = {0};
  int64_t ref_nc[NCASE] = {0};
  for (int c = 1; c < NCASE; c++)
    CHECK_MSG(gpu_run(&pc[c], &ref[c], &ref_nc[c], NULL, &e) == 0, "%s: %s",
              names[c], e.message);
  ref[0] = g_sym64;
  for (int v = 0; v < 3; v++) {
    if (var[v].lend == 1 && g_ngpu < 2) {
      printf("spread, %s: skipped (%d GPU)\n", var[v].what, g_ngpu);
      continue;
    }
    int want_nl = (var[v].lend == 1 ? 2 : 1) * var[v].lanes;
    for (int c = 0; c < NCASE; c++) {
      if (!ref[c]) continue;
      lender l;
      memset(&l, 0, sizeof l);
      tarray *r = NULL;
      int64_t nc = -1;
      int nl = 0;
      int rc = spread_run(&pc[c], var[v].lend, var[v].lanes, &l, &r, &nc, &nl,
                          &e);
      CHECK_MSG(rc == 0, "%s, %s: %s", var[v].what, names[c], e.message);
      CHECK(l.borrowed == l.returned && !l.held && l.wrong == 0);
      CHECK(l.borrowed == (var[v].lend == 1 ? 1 : 0));
      CHECK_MSG(nl == want_nl, "%s, %s: %d lanes", var[v].what, names[c], nl);
      if (!r) continue;
      size_t bytes = (size_t)r->size * tdtype_size(r->dtype);
      int same = r->size == ref[c]->size &&
                 memcmp(r->data, ref[c]->data, bytes) == 0;
      printf("spread, %s, %s: %lld chunks, %s the one-device matrix\n",
             var[v].what, names[c], (long long)l.st.total,
             same ? "bitwise equal to" : "DIFFERENT from");
      CHECK(same);
      CHECK(l.st.done == l.st.total && l.st.total >= 4);
      CHECK(nc == ref_nc[c]);
      if (c == 6) CHECK(nc > 0);
      tarray_free(r);
    }
    /* A cancel after the first chunk: stopped, the devices given back,
     * and the next call is whole again. */
    lender l;
    memset(&l, 0, sizeof l);
    l.st.stop_after = 1;
    tarray *r = NULL;
    int nl = 0;
    int rc = spread_run(&pc[0], var[v].lend, var[v].lanes, &l, &r, NULL, &nl,
                        &e);
    printf("spread, %s: canceled after %lld of %lld chunks: rc %d\n",
           var[v].what, (long long)l.st.done, (long long)l.st.total, rc);
    CHECK(rc == T_ECANCELED && r == NULL);
    CHECK(l.st.done >= 1 && l.st.done < l.st.total);
    CHECK(l.borrowed == l.returned && !l.held && l.wrong == 0);
    memset(&l, 0, sizeof l);
    CHECK(spread_run(&pc[0], var[v].lend, var[v].lanes, &l, &r, NULL, &nl,
                     &e) == 0);
    if (r) CHECK(memcmp(r->data, g_sym64->data, (size_t)r->size * 8) == 0);
    tarray_free(r);
  }
  /* Without a lender, or when it refuses, one device as before. */
  lender l;
  memset(&l, 0, sizeof l);
  tarray *r = NULL;
  int nl = 0;
  CHECK(spread_run(&pc[0], -1, 1, &l, &r, NULL, &nl, &e) == 0);
  CHECK(nl == 1 && l.borrowed == 0 && l.returned == 0);
  if (r) CHECK(memcmp(r->data, g_sym64->data, (size_t)r->size * 8) == 0);
  tarray_free(r);
  for (int c = 1; c < NCASE; c++) tarray_free(ref[c]);
  geod_plan_free(vin);
}

int main(int argc, char **argv) {
  const char *ref = NULL, *wref = NULL;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--ref") == 0) ref = argv[i + 1];
    if (i + 1 < argc && strcmp(argv[i], "--write-ref") == 0) wref = argv[i + 1];
    if (strcmp(argv[i], "--quick") == 0) g_quick = 1, NSQ = 200;
  }
  int s = sample_init(ref, wref);
  if (s < 0) {
    fprintf(stderr, "reference file %s: cannot %s it\n", ref ? ref : wref,
            ref ? "read" : "write");
    return 1;
  }
  g_have_ref = s == 0;
  if (wref) {
    printf("wrote inputs and PROJ references to %s\n", wref);
    return 0;
  }
  char name[256];
  terr e;
  terr_clear(&e);
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0)
    SKIP_ALL_NO_GPU("%s", e.message);
  g_ngpu = gpu_count();
  printf("device 0: %s; %d GPU(s)\n", name, g_ngpu);
  RUN(test_gpu_accuracy_vs_geographiclib);
  RUN(test_gpu_square_vs_host);
  RUN(test_gpu_float32);
  RUN(test_gpu_passes);
  RUN(test_gpu_other_methods);
  RUN(test_gpu_errors);
  RUN(test_gpu_spread);
  tarray_free(g_sym64);
  geod_plan_free(g_sym_plan);
  free(g_sample);
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA */

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
