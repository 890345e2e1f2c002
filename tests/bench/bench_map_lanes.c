/* bench_map_lanes.c — a big map into a fresh result file, one GPU against
 * the lanes over every GPU (compute/kinds/map/lanes.h, issue 27), without
 * the daemon: the same kind of mapping the scheduler gives a big result (a
 * fallocated file mapped shared, marked for prefault unless it is on
 * tmpfs), a fresh file for every run.
 *
 *   bench_map_lanes [--log2n 28] [--reps 3] [--dir /tmp]
 *
 * The job: "a*b + c" over 2^log2n float64 elements, a and b full-size, c a
 * scalar; once with a and b inline (streamed up through the pinned slots)
 * and once as uploaded arrays (ids: the one-GPU run and the run's own lane
 * read them from device 0's resident cache, filled by a first run that is
 * not timed; a lent lane streams them). Rows (median wall ms of --reps,
 * the phase times of the median run as a job's timings_ms gets them):
 *   one GPU          gpu_map on device 0 (the job's path today)
 *   lanes, 1 GPU     map_lanes_run with device 0 alone
 *   lanes, N GPUs    map_lanes_run over every device (a non-blocking
 *                    gpu_trylock a lane, as a run's lanes borrow), with
 *                    the split it reports
 * Every lanes run's bytes are compared with the one-GPU run's (a mismatch
 * is printed and the exit status is 1). No time is asserted.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/map/lanes.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "util/util.h"
#include "lanes_bench.h"

static const map_lane_fns cuda_fns = {cuda_map_lane_open, cuda_map_lane_prefault,
                                      cuda_map_lane_launch, cuda_map_lane_finish,
                                      cuda_map_lane_close};

typedef struct bjob {
  const expr *x;
  const tarray *const *ins;
  const char *const *ids;
  int64_t n;
  const char *dir;
} bjob;

/* mode 0: one GPU; 1: lanes on device 0 alone; 2: lanes on every GPU. */
static int run_one(int mode, const bjob *B, int k, const void *ref, row *out) {
  res r;
  terr e;
  int rc = 0;
  memset(out, 0, sizeof *out);
  if (res_open(&r, T_F64, 1, &B->n, B->dir, "bench_map_lanes", k) != 0) {
    fprintf(stderr, "cannot make a result file in %s\n", B->dir);
    res_close(&r);
    return -1;
  }
  double t0 = t_now_ms();
  if (mode == 0) {
    job_ctx ctx;
    atomic_int stop;
    bench_ctx(&ctx, &stop, "j_bench", 1);
    rc = gpu_map(0, B->x, B->ins, B->ids, &r.t, &ctx, &e);
    out->h2d = ctx.t_h2d, out->comp = ctx.t_compute, out->d2h = ctx.t_d2h;
  } else {
    int64_t block = map_lanes_block(B->n, map_lanes_per_elem(B->x, B->ins, &r.t));
    map_lanes_job J = {B->x, B->ins, B->ids, &r.t, 0, block, NULL, NULL};
    mgpu_lend lend = {NULL, mode == 2 ? gpu_count() : 1,
                      mode == 2 ? lend_borrow : NULL, lend_give_back,
                      NULL, NULL, NULL};
    mgpu_report rep;
    map_lane_times T;
    rc = map_lanes_run(0, &J, block, &lend, &cuda_fns, &rep, &T, &e);
    out->h2d = T.h2d, out->comp = T.compute, out->d2h = T.d2h;
    mgpu_describe(&rep, out->split, sizeof out->split);
  }
  out->ms = t_now_ms() - t0;
  if (rc) fprintf(stderr, "run failed: %s\n", e.message);
  if (!rc && ref && memcmp(ref, r.t.data, (size_t)B->n * 8)) {
    fprintf(stderr, "MISMATCH: %s differs from one GPU\n",
            mode == 1 ? "lanes on one GPU" : "lanes on every GPU");
    rc = -1;
  }
  res_close(&r);
  return rc;
}

static int median(int mode, const bjob *B, int reps, const void *ref,
                  row *med) {
  row rs[16];
  if (reps > 16) reps = 16;
  for (int k = 0; k < reps; k++)
    if (run_one(mode, B, k, ref, &rs[k]) != 0) return -1;
  qsort(rs, (size_t)reps, sizeof rs[0], cmp_ms);
  *med = rs[reps / 2];
  return 0;
}

int main(int argc, char **argv) {
  int log2n = 28, reps = 3, bad = 0;
  const char *dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--log2n")) log2n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  if (reps < 1) reps = 1;
  if (log2n < 12 || log2n > 32) log2n = 28;
  char kdir[] = "/tmp/bench-map-lanes-XXXXXX"; /* the kernel cache */
  gpu_config cfg = {mkdtemp(kdir), 0.5, 0};
  gpu_configure(&cfg);
  if (gpu_init() != 0 || gpu_count() == 0) {
    printf("SKIP: no CUDA device (%s)\n", gpu_unavailable_reason());
    return 77;
  }
  int64_t n = (int64_t)1 << log2n, one = 1, shape[1] = {n};
  terr e;
  expr *x = NULL;
  if (expr_compile("a*b + c", &x, &e) != 0) return 1;
  tarray *a = tarray_new(T_F64, 1, shape), *b = tarray_new(T_F64, 1, shape),
         *c = tarray_new(T_F64, 0, &one), *ref = tarray_new(T_F64, 1, shape);
  if (!a || !b || !c || !ref) {
    printf("no memory for 2^%d elements\n", log2n);
    return 1;
  }
  uint64_t s = 1;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    ((double *)a->data)[i] = (double)(s >> 11) * 0x1p-53 - 0.5;
    ((double *)b->data)[i] = (double)(s >> 13) * 0x1p-51 + 1.0;
  }
  ((double *)c->data)[0] = 1.5;
  const tarray *ins[3] = {a, b, c};
  const char *ids[3] = {"a_bench_map_lanes_a", "a_bench_map_lanes_b", NULL};
  printf("map \"a*b + c\" over 2^%d float64 (%.2f GB result) into a new file "
         "in %s, %d GPU(s); median of %d\n\n",
         log2n, (double)n * 8 / 1e9, dir, gpu_count(), reps);
  printf("| inputs | path | wall ms | h2d ms | compute ms | d2h ms | split |\n");
  printf("|---|---|---|---|---|---|---|\n");
  const char *nm[3] = {"one GPU (gpu_map)", "lanes, 1 GPU", "lanes, all GPUs"};
  for (int up = 0; up < 2; up++) {
    bjob B = {x, ins, up ? ids : NULL, n, dir};
    job_ctx ctx;
    atomic_int stop;
    bench_ctx(&ctx, &stop, "j_bench_ref", 0);
    /* the reference bytes (and, uploaded, device 0's cache filled) */
    if (gpu_map(0, x, ins, B.ids, ref, &ctx, &e) != 0) {
      printf("reference: %s\n", e.message);
      return 1;
    }
    for (int mode = 0; mode < 3; mode++) {
      row m;
      if (mode == 2 && gpu_count() < 2) continue;
      if (median(mode, &B, reps, ref->data, &m) != 0) {
        bad = 1;
        continue;
      }
      printf("| %s | %s | %.0f | %.0f | %.0f | %.0f | %s |\n",
             up ? "uploaded (cache on 0)" : "inline", nm[mode], m.ms, m.h2d,
             m.comp, m.d2h, m.split[0] ? m.split : "-");
    }
  }
  tarray_free(a), tarray_free(b), tarray_free(c), tarray_free(ref);
  expr_free(x);
  gpu_shutdown();
  return bad;
}

#else
int main(void) {
  printf("SKIP: CUDA support not built\n");
  return 77;
}
#endif
