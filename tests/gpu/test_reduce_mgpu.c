/* test_reduce_mgpu.c — a big reduce by blocks over every GPU
 * (compute/kinds/reduce/lanes.h: blocks cut from the job alone, a lane
 * session a device, reduce_lane.cu, the blocks' states merged on the host
 * in block order) gives the same bits on every GPU as on one, agrees with
 * the one-GPU chunked path (gpu_reduce) within the kind's tolerance, and
 * the job's record names the devices.
 *
 * The big case: 2^28 float64 elements, [16384, 16384], "a*b + c + d" with
 * a and b full-size, c a broadcast scalar and d a row broadcast along the
 * rows; every op (sum, mean, min, max, prod, var, std, argmin, argmax,
 * norm). With TESSEL_GPU_LANES=1: through red_lanes_gpu on device 0 alone
 * (no borrow hooks: the blocks on the own device only; the record names
 * device 0 alone), against gpu_reduce (the chunked one-GPU path, another
 * fold order: within 1e-12 of the sum of |terms| / n for the sums, exact
 * for min/max/argmin/argmax); then with every device lendable
 * (gpu_trylock / gpu_unlock, as the scheduler lends): the bits must be
 * equal to device 0 alone's (memcmp), ctx.lanes must list devices 0 and 1,
 * each with rows, and ctx.spread start "cuda:0+1". Then sum again with a
 * and b as uploaded arrays (ids) resident on device 0 only (the run keeps
 * to the own device: the record names it alone) and resident on devices 0
 * and 1 (both lanes read their caches): same bits each time. Then a
 * float32 job of an odd element count (blocks of an odd number of 4096s,
 * the last short) through red_lanes_run with the CUDA session: over every
 * device against device 0 alone (max_lanes 1), same bits; the session by
 * hand on device 0 in the orders a lane meets (launch, finish; launch,
 * launch, finish, finish), its states equal to the run's. A stop after a
 * few blocks ends the run with the stop's code and leaves every device
 * free. With one GPU: device 0 alone, and beside a lent "device 1" that
 * does not exist (its lane fails to open and is reported failed, device 0
 * folds everything, same bits); the two-GPU half says it was skipped.
 * Along the last axis ([16384, 16384], axis 1: blocks of whole rows; sum,
 * mean, max, argmin, var, norm): every row the same bits on every GPU as
 * on device 0 alone, within the tolerance of gpu_reduce's (max and argmin
 * exact), the record as above.
 * Prints PASS/FAIL lines (check.h) and each run's wall time (information
 * only, never asserted).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/reduce/lanes.h"
#include "gpu_test_util.h"
#include "mgpu_test_util.h"
#include "util/util.h"

static const red_lane_fns cuda_fns = {
    cuda_reduce_lane_open, cuda_reduce_lane_launch, cuda_reduce_lane_finish,
    cuda_reduce_lane_close};

/* The record of a run: devices 0 and 1 with rows (two), or 0 alone. */
static void check_record(const job_ctx *ctx, int two, const char *what) {
  int has0 = 0, has1 = 0;
  for (int k = 0; k < ctx->lanes.n; k++) {
    if (ctx->lanes.lane[k].dev == 0 && ctx->lanes.lane[k].rows > 0) has0 = 1;
    if (ctx->lanes.lane[k].dev == 1 && ctx->lanes.lane[k].rows > 0) has1 = 1;
  }
  printf("  %s: lanes %d, spread \"%s\"\n", what, ctx->lanes.n, ctx->spread);
  if (two) {
    CHECK_MSG(ctx->lanes.n >= 2 && has0 && has1,
              "%s: the record does not name devices 0 and 1 with rows", what);
    CHECK_MSG(strncmp(ctx->spread, "cuda:0+1", 8) == 0, "%s: spread \"%s\"",
              what, ctx->spread);
  } else {
    CHECK_MSG(ctx->lanes.n == 1 && has0 && ctx->spread[0] == 0,
              "%s: the record should name device 0 alone", what);
  }
}

static const reduce_op all_ops[] = {R_SUM, R_MEAN, R_MIN,    R_MAX,    R_PROD,
                                    R_VAR, R_STD,  R_ARGMIN, R_ARGMAX, R_NORM};

/* Blocks against the chunked one-GPU path: another fold order. */
static void check_close(reduce_op op, double got, double old, double scale) {
  int exact = op == R_MIN || op == R_MAX || op == R_ARGMIN || op == R_ARGMAX;
  int ok = exact ? got == old
                 : (isnan(old) ? isnan(got)
                    : isinf(old) ? got == old
                                 : fabs(got - old) <= 1e-12 * scale +
                                                          1e-9 * fabs(old));
  CHECK_MSG(ok, "%s: blocks %.17g, gpu_reduce %.17g", reduce_op_name(op), got,
            old);
}

TEST(big_reduce_same_bits) {
  terr e;
  expr *x = NULL;
  int64_t shape[2] = {16384, 16384}, one = 1, row[1] = {16384};
  int64_t n = shape[0] * shape[1];
  CHECK(expr_compile("a*b + c + d", &x, &e) == 0);
  tarray *a = tu_random(T_F64, 2, shape, 1, -3, 3);
  tarray *b = tu_random(T_F64, 2, shape, 2, -3, 3);
  tarray *c = tu_random(T_F64, 0, &one, 3, -1, 1);
  tarray *d = tu_random(T_F64, 1, row, 4, -1, 1);
  tarray *o0 = tarray_new(T_F64, 0, &one), *o1 = tarray_new(T_F64, 0, &one);
  tarray *o2 = tarray_new(T_F64, 0, &one), *oi = tarray_new(T_I64, 0, &one);
  tarray *oi1 = tarray_new(T_I64, 0, &one), *oi2 = tarray_new(T_I64, 0, &one);
  CHECK(x && a && b && c && d && o0 && o1 && o2 && oi && oi1 && oi2);
  if (!x || !a || !b || !c || !d || !o0 || !o1 || !o2 || !oi || !oi1 || !oi2)
    goto done;
  const tarray *ins[4] = {a, b, c, d};
  const char *ids[4] = {"a_test_rmgpu_a", "a_test_rmgpu_b", NULL, NULL};
  int two = gpu_count() >= 2;
  setenv("TESSEL_GPU_LANES", "1", 1);
  red_lanes_cut cut;
  CHECK(red_lanes_wants(R_SUM, x, ins, -1, 2, shape, &cut) == 1);
  for (size_t k = 0; k < sizeof all_ops / sizeof all_ops[0]; k++) {
    reduce_op op = all_ops[k];
    int arg = op == R_ARGMIN || op == R_ARGMAX;
    tarray *r0 = arg ? oi : o0, *r1 = arg ? oi1 : o1, *r2 = arg ? oi2 : o2;
    /* the chunked one-GPU path */
    tu_job j0;
    tu_job_init(&j0, 0);
    double t0 = t_now_ms();
    CHECK_MSG(gpu_reduce(0, op, x, ins, NULL, -1, r0, &j0.ctx, &e) == 0,
              "gpu_reduce %s: %s", reduce_op_name(op), e.message);
    double t_old = t_now_ms() - t0;
    /* by blocks, device 0 alone */
    tu_job j1;
    tu_job_init(&j1, 0);
    j1.ctx.ngpu = gpu_count();
    t0 = t_now_ms();
    CHECK_MSG(red_lanes_gpu(op, x, ins, NULL, -1, 2, shape, r1, &j1.ctx, &e) == 0,
              "blocks on one GPU %s: %s", reduce_op_name(op), e.message);
    double t_one = t_now_ms() - t0;
    check_record(&j1.ctx, 0, "one GPU");
    check_close(op, tarray_get(r1, 0), tarray_get(r0, 0), 25.0);
    if (!two) {
      printf("  %s: gpu_reduce %.0f ms, blocks on one GPU %.0f ms\n",
             reduce_op_name(op), t_old, t_one);
      continue;
    }
    /* by blocks, every GPU */
    tu_job j2;
    tu_job_init(&j2, 0);
    j2.ctx.ngpu = gpu_count();
    j2.ctx.gpu_borrow = tu_ctx_borrow;
    j2.ctx.gpu_return = tu_ctx_return;
    tarray_set(r2, 0, -1);
    t0 = t_now_ms();
    int rc = red_lanes_gpu(op, x, ins, NULL, -1, 2, shape, r2, &j2.ctx, &e);
    printf("  %s: gpu_reduce %.0f ms, blocks on one GPU %.0f ms, on every "
           "GPU %.0f ms (h2d %.0f compute %.0f)\n",
           reduce_op_name(op), t_old, t_one, t_now_ms() - t0, j2.ctx.t_h2d,
           j2.ctx.t_compute);
    CHECK_MSG(rc == 0, "every GPU %s: %s", reduce_op_name(op), e.message);
    CHECK_MSG(tu_same_bytes(r1, r2), "%s: every GPU %.17g, one GPU %.17g",
              reduce_op_name(op), tarray_get(r2, 0), tarray_get(r1, 0));
    check_record(&j2.ctx, 1, reduce_op_name(op));
    tu_all_free("big reduce");
  }
  if (!two) {
    printf("  one GPU: the two-GPU runs are skipped\n");
    goto done;
  }
  /* uploaded inputs: resident on device 0 only, then on 0 and 1 */
  for (int pass = 0; pass < 2; pass++) {
    tu_job jr;
    tu_job_init(&jr, pass);
    CHECK(gpu_reduce(pass, R_SUM, x, ins, ids, -1, o0, &jr.ctx, &e) == 0);
    uint32_t m = gpu_resident_mask(ids[0], T_F64, (size_t)n * 8);
    printf("  a resident on devices mask 0x%x\n", m);
    CHECK(m & (1u << pass));
    tu_job j2;
    tu_job_init(&j2, 0);
    j2.ctx.ngpu = gpu_count();
    j2.ctx.gpu_borrow = tu_ctx_borrow;
    j2.ctx.gpu_return = tu_ctx_return;
    double t0 = t_now_ms();
    CHECK_MSG(red_lanes_gpu(R_SUM, x, ins, ids, -1, 2, shape, o2, &j2.ctx, &e) == 0,
              "resident: %s", e.message);
    printf("  sum, uploaded, resident mask 0x%x: %.1f ms\n", m,
           t_now_ms() - t0);
    tu_job j1;
    tu_job_init(&j1, 0);
    CHECK(red_lanes_gpu(R_SUM, x, ins, NULL, -1, 2, shape, o1, &j1.ctx, &e) == 0);
    CHECK_MSG(tu_same_bytes(o1, o2), "resident (pass %d): %.17g against %.17g",
              pass, tarray_get(o2, 0), tarray_get(o1, 0));
    /* resident on 0 alone: the own device reads its memory, no lane lent */
    check_record(&j2.ctx, (m & 3u) == 3u, pass ? "resident on 0 and 1"
                                               : "resident on 0");
    tu_all_free("resident");
  }
done:
  unsetenv("TESSEL_GPU_LANES");
  tarray_free(a), tarray_free(b), tarray_free(c), tarray_free(d);
  tarray_free(o0), tarray_free(o1), tarray_free(o2);
  tarray_free(oi), tarray_free(oi1), tarray_free(oi2);
  expr_free(x);
}

/* Along the last axis: 16384 rows of 16384, blocks of whole rows; each
 * row the same bits on every GPU as on device 0 alone, and within the
 * tolerance of gpu_reduce's. */
TEST(rows_same_bits) {
  terr e;
  expr *x = NULL;
  int64_t shape[2] = {16384, 16384}, one = 1, row[1] = {16384};
  CHECK(expr_compile("a*b + c + d", &x, &e) == 0);
  tarray *a = tu_random(T_F64, 2, shape, 11, -3, 3);
  tarray *b = tu_random(T_F64, 2, shape, 12, -3, 3);
  tarray *c = tu_random(T_F64, 0, &one, 13, -1, 1);
  tarray *d = tu_random(T_F64, 1, row, 14, -1, 1);
  CHECK(x && a && b && c && d);
  if (!x || !a || !b || !c || !d) goto done;
  const tarray *ins[4] = {a, b, c, d};
  red_lanes_cut cut;
  setenv("TESSEL_GPU_LANES", "1", 1);
  CHECK(red_lanes_wants(R_SUM, x, ins, 1, 2, shape, &cut) == 1 &&
        cut.outer == 16384 && cut.block > 1 && cut.block < 16384);
  static const reduce_op ops[] = {R_SUM, R_MEAN, R_MAX, R_ARGMIN, R_VAR,
                                  R_NORM};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    reduce_op op = ops[k];
    tdtype dt = op == R_ARGMIN ? T_I64 : T_F64;
    tarray *r0 = tarray_new(dt, 1, row), *r1 = tu_poisoned(dt, 1, row);
    tarray *r2 = tu_poisoned(dt, 1, row);
    CHECK(r0 && r1 && r2);
    if (r0 && r1 && r2) {
      tu_job j0, j1, j2;
      tu_job_init(&j0, 0);
      CHECK_MSG(gpu_reduce(0, op, x, ins, NULL, 1, r0, &j0.ctx, &e) == 0,
                "rows gpu_reduce %s: %s", reduce_op_name(op), e.message);
      tu_job_init(&j1, 0);
      j1.ctx.ngpu = gpu_count();
      double t0 = t_now_ms();
      CHECK_MSG(red_lanes_gpu(op, x, ins, NULL, 1, 2, shape, r1, &j1.ctx,
                              &e) == 0,
                "rows on one GPU %s: %s", reduce_op_name(op), e.message);
      double t_one = t_now_ms() - t0;
      check_record(&j1.ctx, 0, "rows, one GPU");
      int far = 0;
      for (int64_t i = 0; i < r0->size; i++) {
        double g = tarray_get(r1, i), o = tarray_get(r0, i);
        int exact = op == R_MAX || op == R_ARGMIN;
        if (exact ? g != o
                  : !(fabs(g - o) <= 1e-12 * 25 * 16384 + 1e-9 * fabs(o)))
          far++;
      }
      CHECK_MSG(far == 0, "rows %s: %d rows off gpu_reduce's",
                reduce_op_name(op), far);
      if (gpu_count() >= 2) {
        tu_job_init(&j2, 0);
        j2.ctx.ngpu = gpu_count();
        j2.ctx.gpu_borrow = tu_ctx_borrow;
        j2.ctx.gpu_return = tu_ctx_return;
        t0 = t_now_ms();
        int rc = red_lanes_gpu(op, x, ins, NULL, 1, 2, shape, r2, &j2.ctx, &e);
        printf("  rows %s: blocks on one GPU %.0f ms, on every GPU %.0f ms\n",
               reduce_op_name(op), t_one, t_now_ms() - t0);
        CHECK_MSG(rc == 0, "rows on every GPU %s: %s", reduce_op_name(op),
                  e.message);
        CHECK_MSG(tu_same_bytes(r1, r2), "rows %s: every GPU differs from one",
                  reduce_op_name(op));
        check_record(&j2.ctx, 1, "rows, every GPU");
        tu_all_free("rows");
      }
    }
    tarray_free(r0), tarray_free(r1), tarray_free(r2);
  }
  if (gpu_count() < 2) printf("  rows: the two-GPU runs are skipped\n");
done:
  unsetenv("TESSEL_GPU_LANES");
  tarray_free(a), tarray_free(b), tarray_free(c), tarray_free(d);
  expr_free(x);
}

/* The session by hand on device 0: block k's state equals the run's. */
static void check_session(const red_lanes_job *run_job) {
  terr e;
  red_lanes_job J = *run_job;
  int64_t nb = (J.n + J.block - 1) / J.block, k = 0;
  red_state *st = calloc((size_t)nb, sizeof *st);
  if (!st) return;
  J.states = st;
  red_lane *L = NULL;
  int rc = cuda_reduce_lane_open(&J, 0, &L, &e);
  CHECK_MSG(rc == 0, "session: %s", e.message);
  /* launch 0, finish 0 | launch 1, launch 2, finish 1, finish 2 | ... */
  static const char ops[] = "LFLLFFLLFF";
  int64_t nl = 0, nf = 0;
  for (int i = 0; rc == 0 && ops[i] && nl <= nb; i++) {
    if (ops[i] == 'L' && nl < nb) {
      int64_t r0 = nl * J.block, r1 = r0 + J.block < J.n ? r0 + J.block : J.n;
      rc = cuda_reduce_lane_launch(L, r0, r1, &e);
      nl++;
    } else if (ops[i] == 'F' && nf < nl) {
      int64_t r0 = nf * J.block, r1 = r0 + J.block < J.n ? r0 + J.block : J.n;
      rc = cuda_reduce_lane_finish(L, r0, r1, &e);
      nf++;
    }
  }
  CHECK_MSG(rc == 0 && nf == nl && nf >= 4, "session: %s", e.message);
  red_lane_times T;
  if (L) cuda_reduce_lane_close(L, rc, &T);
  for (k = 0; k < nf; k++)
    CHECK_MSG(memcmp(&st[k], &run_job->states[k], sizeof st[k]) == 0,
              "block %lld's state by hand differs from the run's",
              (long long)k);
  free(st);
}

TEST(odd_blocks_float32) {
  terr e;
  expr *x = NULL;
  int64_t n = 10000003, shape[1] = {n}, one = 1;
  CHECK(expr_compile("x*2.5 - y/(1 + s)", &x, &e) == 0);
  tarray *xs = tu_random(T_F32, 1, shape, 5, -2, 2);
  tarray *ys = tu_random(T_F32, 1, shape, 6, -2, 2);
  tarray *s = tu_random(T_F32, 0, &one, 7, 0, 1);
  tarray *o1 = tarray_new(T_F32, 0, &one), *o2 = tarray_new(T_F32, 0, &one);
  int64_t block = 4096 * 37; /* ~66 blocks, the last short */
  int64_t nb = (n + block - 1) / block;
  red_state *s1 = calloc((size_t)nb, sizeof *s1), *s2 = calloc((size_t)nb, sizeof *s2);
  CHECK(x && xs && ys && s && o1 && o2 && s1 && s2);
  if (!x || !xs || !ys || !s || !o1 || !o2 || !s1 || !s2) goto done;
  const tarray *ins[3] = {xs, ys, s};
  red_lanes_job J1 = {R_SUM, T_F32, x,  ins,  NULL, -1,   n,   1,
                      n,     block, 0,  s1,   NULL, NULL, NULL};
  red_lanes_job J2 = J1;
  J2.states = s2;
  mgpu_report rep;
  mgpu_lend none = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  CHECK_MSG(red_lanes_run(0, &J1, 1, &none, &cuda_fns, o1, &rep, NULL, &e) == 0,
            "device 0 alone: %s", e.message);
  CHECK(rep.lanes == 1);
  if (gpu_count() >= 2) {
    mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL, NULL,
                      NULL};
    CHECK_MSG(red_lanes_run(0, &J2, 0, &lend, &cuda_fns, o2, &rep, NULL, &e) ==
                  0,
              "%s", e.message);
    char desc[200];
    mgpu_describe(&rep, desc, sizeof desc);
    printf("  float32 odd blocks: %s\n", desc);
    CHECK_MSG(tu_every_lane_wrote(&rep, n), "float32 odd blocks: %s", desc);
  } else {
    mgpu_lend ghost = {NULL, 2, tu_ghost_borrow, tu_ghost_give_back, NULL, NULL, NULL};
    CHECK_MSG(red_lanes_run(0, &J2, 0, &ghost, &cuda_fns, o2, &rep, NULL, &e) ==
                  0,
              "%s", e.message);
    CHECK(rep.lanes == 2 && rep.failed[1] && rep.rows[0] == n);
  }
  CHECK_MSG(tu_same_bytes(o1, o2), "float32 odd blocks: %.9g against %.9g",
            tarray_get(o2, 0), tarray_get(o1, 0));
  CHECK(memcmp(s1, s2, (size_t)nb * sizeof *s1) == 0);
  {
    tu_job j0;
    tu_job_init(&j0, 0);
    tarray *o0 = tarray_new(T_F32, 0, &one);
    CHECK(o0 && gpu_reduce(0, R_SUM, x, ins, NULL, -1, o0, &j0.ctx, &e) == 0);
    if (o0)
      CHECK_MSG(fabs(tarray_get(o0, 0) - tarray_get(o1, 0)) <=
                    1e-5 * fabs(tarray_get(o0, 0)) + 1e-6 * 4.0 * 1e3,
                "float32: blocks %.9g, gpu_reduce %.9g", tarray_get(o1, 0),
                tarray_get(o0, 0));
    tarray_free(o0);
  }
  tu_all_free("odd blocks");
  check_session(&J1);
  /* a stop after a few blocks: its code, every device free */
  atomic_store(&tu_rows_done, 0);
  atomic_store(&tu_stop_rows, (int)(3 * block));
  mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL,
                    tu_stop_at, tu_count_rows};
  J2.stopped = tu_stop_at;
  CHECK(red_lanes_run(0, &J2, 0, &lend, &cuda_fns, o2, NULL, NULL, &e) ==
        T_ECANCELED);
  atomic_store(&tu_stop_rows, 0);
  tu_all_free("stop");
done:
  free(s1), free(s2);
  tarray_free(xs), tarray_free(ys), tarray_free(s);
  tarray_free(o1), tarray_free(o2);
  expr_free(x);
}

int main(void) {
  tu_mgpu_start(": the two-GPU halves are skipped");
  RUN(big_reduce_same_bits);
  RUN(rows_same_bits);
  RUN(odd_blocks_float32);
  int ngpu = gpu_count(); /* 0 once shut down */
  gpu_shutdown();
  int rc = check_summary();
  printf("%s: reduce over %d GPU(s), bits and record\n", rc ? "FAIL" : "PASS",
         ngpu < 2 ? 1 : 2);
  return rc;
}

#else
int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}
#endif
