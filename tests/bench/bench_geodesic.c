/* bench_geodesic.c — distance-matrix throughput: Tessel's karney on one
 * thread (serial), on the pool (cpu) and on a GPU (cuda), against PROJ's
 * geod_inverse (GeographicLib's C code) on one thread and on all threads,
 * and against the seeds' approach (geopy's geodesic one pair at a time
 * through a multiprocessing.Pool, tests/bench/geodesic_geopy.py run with
 * Debian's /usr/bin/python3) at a size it can finish. One table; ratios
 * are against PROJ on one thread, measured in the same run.
 *
 *   bench_geodesic [--sizes 1000,5000,20000] [--gpu-sizes 1000,5000,20000,
 *                  50000] [--budget PAIRS] [--threads T] [--geopy N]
 *                  [--no-cpu] [--no-gpu] [--e2e N] [--e2e-dir DIR]
 *                  [--variants N]
 *
 * Pairs are distinct pairs evaluated: n (n - 1) / 2 for a square matrix
 * (only the upper triangle is computed, then mirrored, by Tessel and by the
 * PROJ peer alike). On the CPU, sizes whose matrix exceeds --budget pairs
 * (default 3 million) are measured on a band: the first R rows of the
 * matrix against all n points (R n pairs, R = budget / n), labelled
 * "band"; pairs per second do not depend on n there.
 *
 * GPU rows: "cuda (device)" is the kernel alone, the whole matrix computed
 * into device memory (cuda_geodesic_bench, median of 3 after a warm-up);
 * "cuda (to host)" is the whole call, the matrix copied back through the
 * pinned staging into host memory. --variants N times the kernel shapes on
 * an N x N targets matrix. --e2e N: the matrix into a mapped file (as the
 * scheduler stores results) against the peer "copy the same bytes to the
 * host and write them to a file", both with and without fsync.
 *
 * The HTTP end-to-end figures (submit -> stored -> .npy downloaded) come
 * from tests/bench/geodesic_http.py against a running daemon.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compute/kinds/geodesic/kind.h"
#include "util/pool.h"
#include "util/util.h"

#if TESSEL_HAVE_CUDA
#include "compute/kinds/geodesic/geodesic_cuda.h"
#endif
#if TESSEL_HAVE_PROJ
#include <geodesic.h>
#endif

#define MAXSIZES 8

typedef struct opts {
  int64_t sizes[MAXSIZES], gpu_sizes[MAXSIZES];
  int nsizes, ngpu;
  double budget;
  int threads, geopy, cpu, gpu, variants;
  int64_t e2e;
  const char *e2e_dir;
} opts;

static int parse_list(const char *s, int64_t *out) {
  int n = 0;
  while (*s && n < MAXSIZES) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 2) return -1;
    out[n++] = v;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

/* Random points, uniform on the sphere (n x 2, lat lon). */
static double *points(int64_t n, uint64_t seed) {
  double *p = malloc((size_t)n * 2 * sizeof *p);
  uint64_t z = seed;
  for (int64_t i = 0; i < n; i++) {
    z += 0x9E3779B97F4A7C15ULL;
    uint64_t a = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    uint64_t b = (a ^ (a >> 27)) * 0x94D049BB133111EBULL;
    double u = (double)(a >> 11) * 0x1p-53, v = (double)(b >> 11) * 0x1p-53;
    p[2 * i] = asin(2 * u - 1) / GEOD_DEG;
    p[2 * i + 1] = 360 * v - 180;
  }
  return p;
}

/* ---- table ---------------------------------------------------------------- */

static double g_proj1; /* PROJ one-thread pairs/s of the current size */

static void row(int64_t n, const char *what, const char *backend, int threads,
                double pairs, double secs) {
  double rate = pairs / secs;
  char ratio[32] = "";
  if (g_proj1 > 0) snprintf(ratio, sizeof ratio, "%.2fx", rate / g_proj1);
  printf("| %6lld | %-6s | %-22s | %3d | %12.0f | %9.3f | %14.0f | %8s |\n",
         (long long)n, what, backend, threads, pairs, secs, rate, ratio);
  fflush(stdout);
}

static void header(void) {
  printf("| %6s | %-6s | %-22s | %3s | %12s | %9s | %14s | %8s |\n", "n",
         "matrix", "backend", "thr", "pairs", "seconds", "pairs/s",
         "vs PROJ1");
  printf("|--------|--------|------------------------|-----|--------------|"
         "-----------|----------------|----------|\n");
}

/* ---- Tessel on the CPU ------------------------------------------------------ */

static int heap_alloc(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

/* Seconds for geod_cpu_run on the plan (best of reps). */
static double time_cpu(const geod_plan *pl, pool *pp, int width, int reps) {
  double best = 1e300;
  tarray *out = tarray_new(pl->dtype, pl->ndim, pl->shape);
  if (!out) return -1;
  memset(out->data, 0, (size_t)out->size * tdtype_size(out->dtype));
  for (int r = 0; r < reps; r++) {
    atomic_int stop = 0;
    job_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.pool = pp;
    ctx.threads = width;
    ctx.stop = &stop;
    ctx.result_alloc = heap_alloc;
    int64_t nc;
    terr e;
    double t0 = t_now_ms();
    if (geod_cpu_run(pl, width, out, &ctx, &nc, &e) != 0) return -1;
    double t = (t_now_ms() - t0) / 1e3;
    if (t < best) best = t;
  }
  tarray_free(out);
  return best;
}

/* ---- PROJ ------------------------------------------------------------------ */

#if TESSEL_HAVE_PROJ
typedef struct proj_job {
  const double *pts;
  int64_t n, rows; /* rows == n: square upper triangle; else band rows x n */
  double *out;
  int t, nt;
  struct geod_geodesic *g;
} proj_job;

static void *proj_main(void *arg) {
  proj_job *j = arg;
  int64_t n = j->n;
  for (int64_t i = j->t; i < j->rows; i += j->nt) {
    const double *p = j->pts + 2 * i;
    if (j->rows == n) {
      for (int64_t k = i + 1; k < n; k++) {
        double s;
        geod_inverse(j->g, p[0], p[1], j->pts[2 * k], j->pts[2 * k + 1], &s,
                     NULL, NULL);
        j->out[i * n + k] = s;
        j->out[k * n + i] = s;
      }
    } else {
      for (int64_t k = 0; k < n; k++)
        geod_inverse(j->g, p[0], p[1], j->pts[2 * k], j->pts[2 * k + 1],
                     &j->out[i * n + k], NULL, NULL);
    }
  }
  return NULL;
}

static double time_proj(const double *pts, int64_t n, int64_t rows, int nt,
                        int reps) {
  struct geod_geodesic g;
  geod_init(&g, GEOD_WGS84_A, GEOD_WGS84_F);
  double *out = calloc((size_t)rows * (size_t)n, sizeof *out);
  if (!out) return -1;
  double best = 1e300;
  for (int r = 0; r < reps; r++) {
    pthread_t th[64];
    proj_job jobs[64];
    double t0 = t_now_ms();
    for (int t = 0; t < nt; t++) {
      jobs[t] = (proj_job){pts, n, rows, out, t, nt, &g};
      if (t) pthread_create(&th[t], NULL, proj_main, &jobs[t]);
    }
    proj_main(&jobs[0]);
    for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
    double s = (t_now_ms() - t0) / 1e3;
    if (s < best) best = s;
  }
  free(out);
  return best;
}
#endif

static void bench_cpu(const opts *o, pool *pp) {
  for (int si = 0; si < o->nsizes; si++) {
    int64_t n = o->sizes[si];
    double *pts = points(n, 1000 + (uint64_t)n);
    double full = (double)n * (double)(n - 1) / 2;
    int64_t rows = full <= o->budget ? n : (int64_t)(o->budget / (double)n) + 1;
    if (rows > n) rows = n;
    int band = rows < n;
    double pairs = band ? (double)rows * (double)n : full;
    const char *what = band ? "band" : "full";
    int reps = pairs <= 1e6 ? 3 : 1;
    geod_plan *pl = NULL;
    terr e;
    if (geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                        0, T_F64, pts, band ? rows : n, band ? pts : NULL,
                        band ? n : 0, &pl, &e) != 0) {
      fprintf(stderr, "plan: %s\n", e.message);
      exit(1);
    }
    g_proj1 = 0;
#if TESSEL_HAVE_PROJ
    double tp1 = time_proj(pts, n, rows, 1, reps);
    g_proj1 = pairs / tp1;
    row(n, what, "PROJ geod_inverse", 1, pairs, tp1);
    if (o->threads > 1)
      row(n, what, "PROJ geod_inverse", o->threads, pairs,
          time_proj(pts, n, rows, o->threads, reps));
#endif
    row(n, what, "tessel karney serial", 1, pairs, time_cpu(pl, NULL, 1, reps));
    row(n, what, "tessel karney cpu", o->threads, pairs,
        time_cpu(pl, pp, o->threads, reps));
    geod_plan_free(pl);
    free(pts);
  }
}

/* The seeds' approach, run by Debian's python3 with geopy. */
static void bench_geopy(const opts *o) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 %s/tests/bench/geodesic_geopy.py %d %d 2>&1",
           TESSEL_SOURCE_DIR, o->geopy, o->threads);
  FILE *f = popen(cmd, "r");
  if (!f) return;
  char line[512];
  double pairs = 0, secs = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "geopy pairs %lf seconds %lf", &pairs, &secs) == 2) break;
    fprintf(stderr, "geopy: %s", line);
  }
  pclose(f);
  g_proj1 = 0;
  if (secs > 0) {
#if TESSEL_HAVE_PROJ
    double *pts = points(o->geopy, 7);
    g_proj1 = pairs / time_proj(pts, o->geopy, o->geopy, 1, 3);
    free(pts);
#endif
    row(o->geopy, "full", "geopy + Pool (seeds)", o->threads, pairs, secs);
  }
}

/* ---- GPU -------------------------------------------------------------------- */

#if TESSEL_HAVE_CUDA
static void bench_gpu(const opts *o) {
  terr e;
  g_proj1 = 0;
  for (int si = 0; si < o->ngpu; si++) {
    int64_t n = o->gpu_sizes[si];
    double *pts = points(n, 1000 + (uint64_t)n);
    geod_plan *pl = NULL;
    if (geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                        0, T_F64, pts, n, NULL, 0, &pl, &e) != 0)
      exit(1);
    double ms, pairs;
    if (cuda_geodesic_bench(0, pl, 0, 3, &ms, &pairs, &e) == 0)
      row(n, "full", "tessel karney cuda dev", 0, pairs, ms / 1e3);
    else
      printf("cuda bench n=%lld: %s\n", (long long)n, e.message);
    tarray *out = tarray_new(T_F64, 2, pl->shape);
    if (out) {
      int64_t nc;
      double best = 1e300;
      for (int r = 0; r < (n <= 20000 ? 2 : 1); r++) {
        double t0 = t_now_ms();
        if (cuda_geodesic(0, pl, out, NULL, &nc, &e) != 0) {
          printf("cuda n=%lld: %s\n", (long long)n, e.message);
          break;
        }
        double t = (t_now_ms() - t0) / 1e3;
        if (t < best) best = t;
      }
      if (best < 1e300) row(n, "full", "tessel karney cuda host", 0, pairs, best);
      tarray_free(out);
    }
    geod_plan_free(pl);
    free(pts);
  }
  if (o->variants > 0) {
    int64_t n = o->variants;
    double *pts = points(n, 99);
    geod_plan *pl = NULL;
    geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1, 0,
                    T_F64, pts, n, pts, n, &pl, &e);
    printf("\nkernel shapes, karney float64, %lld x %lld targets (all pairs) "
           "and square (half), on device:\n",
           (long long)n, (long long)n);
    for (int v = 0; cuda_geodesic_variant_name(v); v++) {
      double ms, pairs, ms2 = 0, pairs2 = 0;
      int rc = cuda_geodesic_bench(0, pl, v, 3, &ms, &pairs, &e);
      geod_plan sq = *pl;
      sq.has_targets = 0;
      int rc2 = cuda_geodesic_bench(0, &sq, v, 3, &ms2, &pairs2, &e);
      if (rc || rc2)
        printf("  %d %-40s: %s\n", v, cuda_geodesic_variant_name(v), e.message);
      else
        printf("  %d %-40s: %.3g pairs/s (targets), %.3g pairs/s (square)\n",
               v, cuda_geodesic_variant_name(v), pairs / (ms / 1e3),
               pairs2 / (ms2 / 1e3));
    }
    /* The other methods, for scale. */
    for (int m = GEOD_VINCENTY; m <= GEOD_HAVERSINE; m++) {
      geod_plan *p2 = NULL;
      double ms, pairs;
      geod_plan_build((geod_method)m, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                      0, T_F64, pts, n, pts, n, &p2, &e);
      if (p2 && cuda_geodesic_bench(0, p2, 0, 3, &ms, &pairs, &e) == 0)
        printf("  %-42s: %.3g pairs/s (targets)\n",
               m == GEOD_VINCENTY ? "vincenty" : "haversine",
               pairs / (ms / 1e3));
      geod_plan_free(p2);
    }
    geod_plan_free(pl);
    free(pts);
  }
}

/* The matrix into a mapped file vs copying the same bytes and writing. */
static void bench_e2e(const opts *o) {
  int64_t n = o->e2e;
  terr e;
  char path[1024];
  double *pts = points(n, 5);
  geod_plan *pl = NULL;
  geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1, 0,
                  T_F64, pts, n, NULL, 0, &pl, &e);
  size_t bytes = (size_t)n * (size_t)n * 8;
  printf("\nend to end on the GPU, n = %lld (%.2f GB float64), files in %s:\n",
         (long long)n, bytes / 1e9, o->e2e_dir);
  for (int sync = 0; sync <= 1; sync++) {
    /* peer: copy to host + write */
    snprintf(path, sizeof path, "%s/geod_peer.bin", o->e2e_dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    double ms = 0, t0 = t_now_ms();
    if (fd < 0 || cuda_copy_baseline(0, bytes, 0, fd, &ms, &e) != 0) {
      printf("  peer failed: %s\n", fd < 0 ? "open" : e.message);
      if (fd >= 0) close(fd);
      break;
    }
    if (sync) fsync(fd);
    close(fd);
    double peer = t_now_ms() - t0;
    unlink(path);
    /* Tessel: compute + copy into a result file made the way result_alloc
     * makes it (tarray_create_npy: fallocated, mapped, prefaulted by the
     * GPU's copy gang on a disk file system). */
    snprintf(path, sizeof path, "%s/geod_result.npy", o->e2e_dir);
    t0 = t_now_ms();
    int64_t shape[2] = {n, n};
    tarray *out = NULL;
    if (tarray_create_npy(path, T_F64, 2, shape, &out, &e) != 0) {
      printf("  result file failed: %s\n", e.message);
      break;
    }
    int64_t nc;
    int rc = cuda_geodesic(0, pl, out, NULL, &nc, &e);
    if (sync) msync(out->map_base, out->map_len, MS_SYNC);
    tarray_free(out);
    double ours = t_now_ms() - t0;
    unlink(path);
    if (rc) {
      printf("  cuda failed: %s\n", e.message);
      break;
    }
    printf("  %-7s copy+write peer %8.1f ms | tessel compute+copy+store "
           "%8.1f ms | ratio %.2f\n",
           sync ? "fsync" : "no sync", peer, ours, ours / peer);
  }
  geod_plan_free(pl);
  free(pts);
}
#endif

int main(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.nsizes = parse_list("1000,5000,20000", o.sizes);
  o.ngpu = parse_list("1000,5000,20000,50000", o.gpu_sizes);
  o.budget = 3e6;
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  o.threads = nproc > 0 ? (int)nproc : 1;
  if (o.threads > 64) o.threads = 64;
  o.geopy = 400;
  o.cpu = o.gpu = 1;
  o.e2e_dir = "/tmp";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--sizes") && v) o.nsizes = parse_list(v, o.sizes), i++;
    else if (!strcmp(a, "--gpu-sizes") && v) o.ngpu = parse_list(v, o.gpu_sizes), i++;
    else if (!strcmp(a, "--budget") && v) o.budget = strtod(v, NULL), i++;
    else if (!strcmp(a, "--threads") && v) o.threads = (int)strtol(v, NULL, 10), i++;
    else if (!strcmp(a, "--geopy") && v) o.geopy = (int)strtol(v, NULL, 10), i++;
    else if (!strcmp(a, "--variants") && v) o.variants = (int)strtol(v, NULL, 10), i++;
    else if (!strcmp(a, "--e2e") && v) o.e2e = strtoll(v, NULL, 10), i++;
    else if (!strcmp(a, "--e2e-dir") && v) o.e2e_dir = v, i++;
    else if (!strcmp(a, "--no-cpu")) o.cpu = 0;
    else if (!strcmp(a, "--no-gpu")) o.gpu = 0;
    else {
      fprintf(stderr, "usage: see the top of tests/bench/bench_geodesic.c\n");
      return 2;
    }
  }
  if (o.nsizes < 0 || o.ngpu < 0 || o.threads < 1 || o.threads > 64) {
    fprintf(stderr, "bad sizes or threads\n");
    return 2;
  }
  printf("geodesic distance matrices, WGS84, float64, random points; %d CPU "
         "threads\n\n",
         o.threads);
  header();
  if (o.cpu) {
    pool *pp = pool_create(o.threads, NULL, NULL);
    if (!pp) return 1;
    bench_cpu(&o, pp);
    pool_destroy(pp);
    if (o.geopy > 1) bench_geopy(&o);
  }
#if TESSEL_HAVE_CUDA
  char name[256];
  terr e;
  if (o.gpu && cuda_geodesic_probe(0, name, sizeof name, &e) == 0) {
    printf("(GPU rows on %s; \"dev\" = kernel only, \"host\" = matrix "
           "copied to host memory)\n",
           name);
    bench_gpu(&o);
    if (o.e2e > 1) bench_e2e(&o);
  } else if (o.gpu) {
    printf("(no GPU rows: %s)\n", e.message);
  }
#else
  if (o.gpu) printf("(no GPU rows: CUDA support not built)\n");
#endif
  return 0;
}
