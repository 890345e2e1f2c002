/* bench_reduce_lanes.c — a big whole-array reduce, one GPU against the
 * blocks over every GPU (compute/kinds/reduce/lanes.h, issue 27), without
 * the daemon.
 *
 *   bench_reduce_lanes [--log2n 28] [--reps 3] [--op sum]
 *
 * The job: op of "a*b" over 2^log2n float64 elements, a and b full-size;
 * once with a and b inline (streamed up through the pinned slots) and once
 * as uploaded arrays (ids: device 0's resident cache filled by a first run
 * that is not timed; a lent lane streams them). Rows (median wall ms of
 * --reps, the phase times of the median run as a job's timings_ms gets
 * them):
 *   one GPU          gpu_reduce on device 0 (the chunked one-GPU path)
 *   blocks, 1 GPU    red_lanes_run with device 0 alone (the path of a big
 *                    job on one GPU once TESSEL_GPU_LANES is on, and of an
 *                    uploaded one whose inputs only device 0 holds)
 *   blocks, N GPUs   red_lanes_run over every device (a non-blocking
 *                    gpu_trylock a lane, as a run's lanes borrow), with the
 *                    split it reports
 * Every N-GPU run's bits are compared with the 1-GPU blocks' (a mismatch is
 * printed and the exit status is 1); the one-GPU path's value is printed
 * beside (another fold order: a few ulp apart). No time is asserted.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/reduce/lanes.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "util/util.h"
#include "lanes_bench.h"

static const red_lane_fns cuda_fns = {
    cuda_reduce_lane_open, cuda_reduce_lane_launch, cuda_reduce_lane_finish,
    cuda_reduce_lane_close};

typedef struct bjob {
  reduce_op op;
  const expr *x;
  const tarray *const *ins;
  const char *const *ids;
  int64_t n;
} bjob;

/* mode 0: one GPU; 1: blocks on device 0 alone; 2: blocks on every GPU. */
static int run_one(int mode, const bjob *B, const double *ref, row *out) {
  terr e;
  int rc = 0;
  int64_t one = 1;
  tarray *o = tarray_new(T_F64, 0, &one);
  memset(out, 0, sizeof *out);
  if (!o) return -1;
  double t0 = t_now_ms();
  if (mode == 0) {
    job_ctx ctx;
    atomic_int stop;
    bench_ctx(&ctx, &stop, "j_bench", 1);
    rc = gpu_reduce(0, B->op, B->x, B->ins, B->ids, -1, o, &ctx, &e);
    out->h2d = ctx.t_h2d, out->comp = ctx.t_compute, out->d2h = ctx.t_d2h;
  } else {
    int64_t block = red_lanes_block(B->n, red_lanes_per_elem(B->x, B->ins, B->n));
    int64_t nb = (B->n + block - 1) / block;
    red_state *st = calloc((size_t)nb, sizeof *st);
    red_lanes_job J = {B->op, T_F64, B->x, B->ins, B->ids, -1,   B->n, 1,
                       B->n,  block, 0,    st,     NULL,   NULL, NULL};
    mgpu_lend lend = {NULL, mode == 2 ? gpu_count() : 1,
                      mode == 2 ? lend_borrow : NULL, lend_give_back,
                      NULL, NULL, NULL};
    mgpu_report rep;
    red_lane_times T;
    rc = st ? red_lanes_run(0, &J, 0, &lend, &cuda_fns, o, &rep, &T, &e)
            : terr_set(&e, T_ENOMEM, "", -1, "no memory");
    out->h2d = T.h2d, out->comp = T.compute, out->d2h = T.d2h;
    mgpu_describe(&rep, out->split, sizeof out->split);
    free(st);
  }
  out->ms = t_now_ms() - t0;
  out->value = tarray_get(o, 0);
  if (rc) fprintf(stderr, "run failed: %s\n", e.message);
  if (!rc && ref && memcmp(ref, o->data, 8)) {
    fprintf(stderr, "MISMATCH: blocks on every GPU %.17g, on one %.17g\n",
            out->value, *ref);
    rc = -1;
  }
  tarray_free(o);
  return rc;
}

static int median(int mode, const bjob *B, int reps, const double *ref,
                  row *med) {
  row rs[16];
  if (reps > 16) reps = 16;
  for (int k = 0; k < reps; k++)
    if (run_one(mode, B, ref, &rs[k]) != 0) return -1;
  qsort(rs, (size_t)reps, sizeof rs[0], cmp_ms);
  *med = rs[reps / 2];
  return 0;
}

int main(int argc, char **argv) {
  int log2n = 28, reps = 3, bad = 0, op = R_SUM;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--log2n")) log2n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--op")) op = reduce_op_parse(argv[i + 1]);
  }
  if (reps < 1) reps = 1;
  if (log2n < 12 || log2n > 32) log2n = 28;
  if (op < 0 || op == R_ARGMIN || op == R_ARGMAX) op = R_SUM;
  char kdir[] = "/tmp/bench-reduce-lanes-XXXXXX"; /* the kernel cache */
  gpu_config cfg = {mkdtemp(kdir), 0.5, 0};
  gpu_configure(&cfg);
  if (gpu_init() != 0 || gpu_count() == 0) {
    printf("SKIP: no CUDA device (%s)\n", gpu_unavailable_reason());
    return 77;
  }
  int64_t n = (int64_t)1 << log2n, shape[1] = {n};
  terr e;
  expr *x = NULL;
  if (expr_compile("a*b", &x, &e) != 0) return 1;
  tarray *a = tarray_new(T_F64, 1, shape), *b = tarray_new(T_F64, 1, shape);
  if (!a || !b) {
    printf("no memory for 2^%d elements\n", log2n);
    return 1;
  }
  uint64_t s = 1;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    ((double *)a->data)[i] = (double)(s >> 11) * 0x1p-53 - 0.5;
    ((double *)b->data)[i] = (double)(s >> 13) * 0x1p-51 + 1.0;
  }
  const tarray *ins[2] = {a, b};
  const char *ids[2] = {"a_bench_reduce_lanes_a", "a_bench_reduce_lanes_b"};
  printf("reduce %s of \"a*b\" over 2^%d float64 (%.2f GB read), %d GPU(s); "
         "median of %d\n\n",
         reduce_op_name((reduce_op)op), log2n, (double)n * 16 / 1e9,
         gpu_count(), reps);
  printf("| inputs | path | wall ms | h2d ms | compute ms | d2h ms | value | "
         "split |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  const char *nm[3] = {"one GPU (gpu_reduce)", "blocks, 1 GPU",
                       "blocks, all GPUs"};
  for (int up = 0; up < 2; up++) {
    bjob B = {(reduce_op)op, x, ins, up ? ids : NULL, n};
    row m, r1;
    if (up) { /* device 0's cache filled, untimed */
      job_ctx ctx;
      atomic_int stop;
      int64_t one = 1;
      tarray *o = tarray_new(T_F64, 0, &one);
      bench_ctx(&ctx, &stop, "j_bench_fill", 0);
      if (!o || gpu_reduce(0, B.op, x, ins, ids, -1, o, &ctx, &e) != 0) {
        printf("cache fill: %s\n", o ? e.message : "no memory");
        return 1;
      }
      tarray_free(o);
    }
    int have1 = 0;
    for (int mode = 0; mode < 3; mode++) {
      if (mode == 2 && gpu_count() < 2) continue;
      if (median(mode, &B, reps, mode == 2 && have1 ? &r1.value : NULL, &m) !=
          0) {
        bad = 1;
        continue;
      }
      if (mode == 1) r1 = m, have1 = 1;
      printf("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.17g | %s |\n",
             up ? "uploaded (cache on 0)" : "inline", nm[mode], m.ms, m.h2d,
             m.comp, m.d2h, m.value, m.split[0] ? m.split : "-");
    }
  }
  tarray_free(a), tarray_free(b);
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
