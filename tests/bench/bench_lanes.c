/* bench_lanes.c — a geodesic square matrix into a fresh result file, the
 * one-GPU pipeline against the lanes of compute/kinds/mgpu.h (issue 27),
 * without the daemon: the same plan, the same kind of mapping the
 * scheduler gives a big result (a fallocated file mapped shared, marked
 * for prefault unless it is on tmpfs), a fresh file for every run.
 *
 *   bench_lanes [--n 40000] [--dtype float32|float64] [--reps 3]
 *               [--dir /tmp] [--block-rows R]
 *
 * Rows (median wall ms of --reps, each a new file; the phase times of the
 * median run as the kind adds them to a job's timings_ms):
 *   one GPU          cuda_geodesic on device 0 (SYM: each pair once, its
 *                    own prefault of the whole mapping by device 0's gang)
 *   lanes, 1 GPU     geod_mgpu_run with device 0 alone (one lane session:
 *                    SQR, each pair twice, primed, two deep)
 *   lanes, N GPUs    geod_mgpu_run over every device (a non-blocking
 *                    gpu_trylock a lane, as a run's lanes borrow), with
 *                    the split it reports
 * and, when both ran, the N-GPU lanes against the one-GPU pipeline. Every
 * lanes run's bytes are compared with the one-GPU run's (a mismatch is
 * printed and the exit status is 1). No time is asserted.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/geodesic/plan.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"
#include "util/util.h"
#include "lanes_bench.h"

/* mode 0: one GPU; 1: lanes on device 0 alone; 2: lanes on every GPU. */
static int run_one(int mode, const geod_plan *pl, const char *dir, int k,
                   int64_t br, const void *ref, row *out) {
  res r;
  terr e;
  int64_t nc = 0;
  int rc = 0;
  memset(out, 0, sizeof *out);
  if (res_open(&r, pl->dtype, 2, pl->shape, dir, "bench_lanes", k) != 0) {
    fprintf(stderr, "cannot make a result file in %s\n", dir);
    res_close(&r);
    return -1;
  }
  double t0 = t_now_ms();
  if (mode == 0) {
    geod_gpu_job job;
    memset(&job, 0, sizeof job);
    job.t_h2d = &out->h2d;
    job.t_compute = &out->comp;
    job.t_d2h = &out->d2h;
    rc = cuda_geodesic(0, pl, &r.t, &job, &nc, &e);
  } else {
    mgpu_lend lend = {NULL, mode == 2 ? gpu_count() : 1,
                      mode == 2 ? lend_borrow : NULL, lend_give_back,
                      NULL, NULL, NULL};
    mgpu_report rep;
    rc = geod_mgpu_run(0, pl, &r.t, &lend, br, &rep, &out->h2d, &out->comp,
                       &out->d2h, &nc, &e);
    mgpu_describe(&rep, out->split, sizeof out->split);
  }
  out->ms = t_now_ms() - t0;
  if (rc) fprintf(stderr, "run failed: %s\n", e.message);
  if (!rc && ref &&
      memcmp(ref, r.t.data, (size_t)r.t.size * tdtype_size(pl->dtype))) {
    fprintf(stderr, "MISMATCH: %s differs from one GPU\n",
            mode == 1 ? "lanes on one GPU" : "lanes on every GPU");
    rc = -1;
  }
  res_close(&r);
  return rc;
}

/* The median of reps runs; ref (NULL: none) the bytes to compare with. */
static int median(int mode, const geod_plan *pl, const char *dir, int reps,
                  int64_t br, const void *ref, row *med) {
  row rs[16];
  if (reps > 16) reps = 16;
  for (int k = 0; k < reps; k++)
    if (run_one(mode, pl, dir, k, br, ref, &rs[k]) != 0) return -1;
  qsort(rs, (size_t)reps, sizeof rs[0], cmp_ms);
  *med = rs[reps / 2];
  return 0;
}

int main(int argc, char **argv) {
  int64_t n = 40000, br = 0;
  int reps = 3, f64 = 0, bad = 0;
  const char *dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) n = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--block-rows")) br = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--dtype")) f64 = !strcmp(argv[i + 1], "float64");
  }
  if (reps < 1) reps = 1;
  char name[256];
  terr e;
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0) {
    printf("SKIP: %s\n", e.message);
    return 77;
  }
  double *pts = malloc((size_t)n * 2 * sizeof *pts);
  uint64_t s = 1;
  for (int64_t i = 0; i < 2 * n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(s >> 11) * 0x1p-53;
    pts[i] = i % 2 ? u * 360 - 180 : u * 180 - 90;
  }
  geod_plan *pl = NULL;
  if (geod_plan_build(GEOD_KARNEY, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                      0, f64 ? T_F64 : T_F32, pts, n, NULL, 0, &pl, &e)) {
    printf("plan: %s\n", e.message);
    return 1;
  }
  if (br <= 0) br = geod_mgpu_block_rows(pl);
  size_t bytes = (size_t)n * (size_t)n * (f64 ? 8 : 4);
  printf("geodesic square n = %lld %s (%.2f GB) into a new file in %s, "
         "%d GPU(s): %s; blocks of %lld rows; median of %d\n\n",
         (long long)n, f64 ? "float64" : "float32", (double)bytes / 1e9, dir,
         gpu_count(), name, (long long)br, reps);
  printf("| path | wall ms | h2d ms | compute ms | d2h ms | split |\n");
  printf("|---|---|---|---|---|---|\n");
  /* the reference bytes: one GPU into the heap */
  tarray *ref = tarray_new(pl->dtype, 2, pl->shape);
  int64_t nc = 0;
  if (!ref || cuda_geodesic(0, pl, ref, NULL, &nc, &e) != 0) {
    printf("reference: %s\n", ref ? e.message : "no memory");
    return 1;
  }
  row one, l1, ln;
  const char *nm[3] = {"one GPU (pipeline)", "lanes, 1 GPU", "lanes, all GPUs"};
  row *rw[3] = {&one, &l1, &ln};
  int ran[3] = {0, 0, 0};
  for (int m = 0; m < 3; m++) {
    if (m == 2 && gpu_count() < 2) continue;
    if (median(m, pl, dir, reps, br, ref->data, rw[m]) != 0) {
      bad = 1;
      continue;
    }
    ran[m] = 1;
    printf("| %s | %.0f | %.0f | %.0f | %.0f | %s |\n", nm[m], rw[m]->ms,
           rw[m]->h2d, rw[m]->comp, rw[m]->d2h,
           rw[m]->split[0] ? rw[m]->split : "-");
  }
  if (ran[0] && ran[2])
    printf("\nlanes on %d GPUs against one GPU: %.2fx\n", gpu_count(),
           one.ms / ln.ms);
  tarray_free(ref);
  geod_plan_free(pl);
  free(pts);
  return bad;
}

#else

int main(void) {
  printf("SKIP: CUDA support not built\n");
  return 77;
}

#endif
