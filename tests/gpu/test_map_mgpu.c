/* test_map_mgpu.c — a big map over every GPU (compute/kinds/map/lanes.h:
 * blocks of elements, a lane session a device, map_lane.cu) gives the
 * same bytes as the whole job on one GPU (gpu_map on device 0), and the
 * job's record names the devices.
 *
 * The big case: 2^28 float64 elements, [16384, 16384], "a*b + c + d*sin(a)"
 * with a and b full-size, c a scalar and d a row broadcast along the rows.
 * Run once on device 0 alone (gpu_map, inputs streamed: the chunked path)
 * and once through map_lanes_gpu with TESSEL_GPU_LANES=1 and every device
 * lendable (gpu_trylock / gpu_unlock, as the scheduler lends): the bytes
 * must be equal (memcmp), ctx.lanes must list devices 0 and 1, each with
 * rows, and ctx.spread start "cuda:0+1". Then again with a and b as
 * uploaded arrays (ids) resident on device 0 (the one-GPU run put them
 * there): lane 0 reads them from its cache, lane 1 streams them; and
 * once they are resident on device 1 too (a one-GPU run there), both
 * lanes read their caches; same bytes each time. Then a smaller float32
 * job of an odd element count: the lane session by hand on device 0
 * (blocks of unequal sizes, each queued at its launch or behind an
 * unfinished one, as a lane meets them), and blocks of an odd number of
 * 4096s (the last short, the lanes taking several each) into a
 * page-locked result (gpu_host_register: the DMA writes it)
 * through map_lanes_run with the CUDA session, against gpu_map's. A stop
 * after a few blocks ends the run with the stop's code and leaves every
 * device free. With one GPU: the lanes on device 0 alone, and beside a lent
 * "device 1" that does not exist (its lane fails to open and is reported
 * failed, device 0 writes everything); the two-GPU half says it was
 * skipped. Prints PASS/FAIL lines (check.h) and each run's wall time
 * (information only, never asserted).
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
#include "compute/kinds/map/lanes.h"
#include "gpu_test_util.h"
#include "mgpu_test_util.h"
#include "util/util.h"

static const map_lane_fns cuda_fns = {cuda_map_lane_open, cuda_map_lane_prefault,
                                      cuda_map_lane_launch, cuda_map_lane_finish,
                                      cuda_map_lane_close};

/* The record of a lanes run over devices 0 and 1. */
static void check_record(const job_ctx *ctx, const char *what) {
  int has0 = 0, has1 = 0;
  for (int k = 0; k < ctx->lanes.n; k++) {
    if (ctx->lanes.lane[k].dev == 0 && ctx->lanes.lane[k].rows > 0) has0 = 1;
    if (ctx->lanes.lane[k].dev == 1 && ctx->lanes.lane[k].rows > 0) has1 = 1;
  }
  printf("  %s: %s\n", what, ctx->spread);
  CHECK_MSG(ctx->lanes.n >= 2 && has0 && has1,
            "%s: the record does not name devices 0 and 1 with rows", what);
  CHECK_MSG(strncmp(ctx->spread, "cuda:0+1", 8) == 0, "%s: spread \"%s\"",
            what, ctx->spread);
}

TEST(big_map_same_bytes) {
  terr e;
  expr *x = NULL;
  int64_t shape[2] = {16384, 16384}, one = 1, row[1] = {16384};
  CHECK(expr_compile("a*b + c + d*sin(a)", &x, &e) == 0);
  tarray *a = tu_random(T_F64, 2, shape, 1, -3, 3);
  tarray *b = tu_random(T_F64, 2, shape, 2, -3, 3);
  tarray *c = tu_random(T_F64, 0, &one, 3, -1, 1);
  tarray *d = tu_random(T_F64, 1, row, 4, -1, 1);
  tarray *o1 = tu_poisoned(T_F64, 2, shape), *o2 = tarray_new(T_F64, 2, shape);
  CHECK(x && a && b && c && d && o1 && o2);
  if (!x || !a || !b || !c || !d || !o1 || !o2) goto done;
  const tarray *ins[4] = {a, b, c, d};
  const char *ids[4] = {"a_test_mgpu_a", "a_test_mgpu_b", NULL, NULL};
  /* one GPU, inputs streamed */
  tu_job j1;
  tu_job_init(&j1, 0);
  double t0 = t_now_ms();
  CHECK_MSG(gpu_map(0, x, ins, NULL, o1, &j1.ctx, &e) == 0, "one GPU: %s",
            e.message);
  printf("  one GPU, streamed: %.0f ms\n", t_now_ms() - t0);
  setenv("TESSEL_GPU_LANES", "1", 1);
  if (gpu_count() < 2) {
    tu_job j2;
    tu_job_init(&j2, 0);
    j2.ctx.ngpu = 1;
    memset(o2->data, 0xA5, (size_t)o2->size * 8);
    CHECK(map_lanes_gpu(x, ins, NULL, o2, &j2.ctx, &e) == 0);
    CHECK_MSG(tu_same_bytes(o1, o2), "one GPU through map_lanes_gpu differs");
    printf("  one GPU: the two-GPU runs are skipped\n");
    goto done;
  }
  static const char *const passes[3] = {"streamed", "resident on 0",
                                        "resident on 0 and 1"};
  for (int pass = 0; pass < 3; pass++) {
    /* pass 1: a and b uploaded arrays, resident on device 0 only (lane 1
     * streams them); pass 2: on device 1 too (both read their caches) */
    const char *const *use = pass ? ids : NULL;
    if (pass) {
      tu_job jr;
      tu_job_init(&jr, pass - 1);
      memset(o2->data, 0xA5, (size_t)o2->size * 8);
      CHECK(gpu_map(pass - 1, x, ins, use, o2, &jr.ctx, &e) == 0);
      CHECK_MSG(tu_same_bytes(o1, o2), "device %d, resident inputs, differs", pass - 1);
      uint32_t m = gpu_resident_mask(ids[0], T_F64, (size_t)a->size * 8);
      printf("  a resident on devices mask 0x%x\n", m);
      CHECK(m & (1u << (pass - 1)));
    }
    tu_job j2;
    tu_job_init(&j2, 0);
    j2.ctx.ngpu = gpu_count();
    j2.ctx.gpu_borrow = tu_ctx_borrow;
    j2.ctx.gpu_return = tu_ctx_return;
    memset(o2->data, 0xA5, (size_t)o2->size * 8);
    t0 = t_now_ms();
    int rc = map_lanes_gpu(x, ins, use, o2, &j2.ctx, &e);
    printf("  every GPU (%s): %.0f ms, h2d %.0f compute %.0f d2h %.0f\n",
           passes[pass], t_now_ms() - t0, j2.ctx.t_h2d,
           j2.ctx.t_compute, j2.ctx.t_d2h);
    CHECK_MSG(rc == 0, "every GPU: %s", e.message);
    CHECK_MSG(tu_same_bytes(o1, o2), "every GPU (%s) differs from one GPU",
              passes[pass]);
    check_record(&j2.ctx, passes[pass]);
    tu_all_free("big map");
  }
done:
  unsetenv("TESSEL_GPU_LANES");
  tarray_free(a), tarray_free(b), tarray_free(c), tarray_free(d);
  tarray_free(o1), tarray_free(o2);
  expr_free(x);
}

/* The session by hand on device 0, blocks of unequal sizes in the orders
 * a lane meets: one finished before the next is launched (queued at
 * once), and one launched behind an unfinished one (queued by its
 * finish, its inputs going up while that one comes down). */
static void check_session(const expr *x, const tarray *const *ins,
                          const tarray *whole) {
  terr e;
  int64_t n = whole->size, cut[6];
  tarray *t = tu_poisoned(whole->dtype, whole->ndim, whole->shape);
  CHECK(t != NULL);
  if (!t) return;
  cut[0] = 0;
  for (int b = 1; b < 5; b++) cut[b] = n / 10 * b * b / 4 / 4096 * 4096 + 4096;
  cut[5] = n;
  int64_t cap = 0;
  for (int b = 0; b < 5; b++)
    if (cut[b + 1] - cut[b] > cap) cap = cut[b + 1] - cut[b];
  map_lanes_job J = {x, ins, NULL, t, 0, cap, NULL, NULL};
  map_lane *L = NULL;
  int rc = cuda_map_lane_open(&J, 0, &L, &e);
  CHECK_MSG(rc == 0, "session: %s", e.message);
  /* launch 0, finish 0 | launch 1, launch 2, finish 1 | launch 3,
   * finish 2, finish 3 | launch 4, finish 4 */
  static const char ops[] = "LFLLFLFFLF";
  int nl = 0, nf = 0;
  for (int i = 0; rc == 0 && ops[i]; i++) {
    if (ops[i] == 'L') {
      rc = cuda_map_lane_launch(L, cut[nl], cut[nl + 1], &e);
      nl++;
    } else {
      rc = cuda_map_lane_finish(L, cut[nf], cut[nf + 1], &e);
      nf++;
    }
  }
  CHECK_MSG(rc == 0 && nl == 5 && nf == 5, "session: %s", e.message);
  map_lane_times T;
  if (L) cuda_map_lane_close(L, rc, &T);
  CHECK_MSG(tu_same_bytes(whole, t), "the session by hand differs from the whole");
  tarray_free(t);
}

TEST(odd_blocks_pinned_result) {
  terr e;
  expr *x = NULL;
  int64_t n = 10000003, shape[1] = {n}, one = 1;
  CHECK(expr_compile("x*2.5 - y/(1 + s)", &x, &e) == 0);
  tarray *xs = tu_random(T_F32, 1, shape, 5, -2, 2);
  tarray *ys = tu_random(T_F32, 1, shape, 6, -2, 2);
  tarray *s = tu_random(T_F32, 0, &one, 7, 0, 1);
  tarray *o1 = tu_poisoned(T_F32, 1, shape), *o2 = tu_poisoned(T_F32, 1, shape);
  CHECK(x && xs && ys && s && o1 && o2);
  if (!x || !xs || !ys || !s || !o1 || !o2) goto done;
  const tarray *ins[3] = {xs, ys, s};
  tu_job j1;
  tu_job_init(&j1, 0);
  CHECK_MSG(gpu_map(0, x, ins, NULL, o1, &j1.ctx, &e) == 0, "%s", e.message);
  check_session(x, ins, o1);
  int pinned = gpu_host_register(o2->data, (size_t)n * 4, &e) == 0;
  printf("  result page-locked: %s\n", pinned ? "yes" : e.message);
  int64_t block = 4096 * 37; /* ~66 blocks, the last short */
  map_lanes_job J = {x, ins, NULL, o2, 0, block, NULL, NULL};
  mgpu_report rep;
  if (gpu_count() >= 2) {
    mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL, NULL,
                      NULL};
    CHECK_MSG(map_lanes_run(0, &J, block, &lend, &cuda_fns, &rep, NULL, &e) == 0,
              "%s", e.message);
    char desc[200];
    mgpu_describe(&rep, desc, sizeof desc);
    printf("  float32 odd blocks: %s\n", desc);
    CHECK_MSG(tu_every_lane_wrote(&rep, n), "float32 odd blocks: %s", desc);
  } else {
    mgpu_lend ghost = {NULL, 2, tu_ghost_borrow, tu_ghost_give_back, NULL, NULL, NULL};
    CHECK_MSG(map_lanes_run(0, &J, block, &ghost, &cuda_fns, &rep, NULL, &e) == 0,
              "%s", e.message);
    CHECK(rep.lanes == 2 && rep.failed[1] && rep.rows[0] == n);
  }
  CHECK_MSG(tu_same_bytes(o1, o2), "float32 odd blocks differ from one GPU");
  tu_all_free("odd blocks");
  /* a stop after a few blocks: its code, every device free */
  atomic_store(&tu_rows_done, 0);
  atomic_store(&tu_stop_rows, (int)(3 * block));
  mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL,
                    tu_stop_at, tu_count_rows};
  J.stopped = tu_stop_at;
  CHECK(map_lanes_run(0, &J, block, &lend, &cuda_fns, NULL, NULL, &e) ==
        T_ECANCELED);
  atomic_store(&tu_stop_rows, 0);
  tu_all_free("stop");
  if (pinned) gpu_host_unregister(o2->data);
done:
  tarray_free(xs), tarray_free(ys), tarray_free(s);
  tarray_free(o1), tarray_free(o2);
  expr_free(x);
}

int main(void) {
  tu_mgpu_start(": the two-GPU halves are skipped");
  RUN(big_map_same_bytes);
  RUN(odd_blocks_pinned_result);
  int ngpu = gpu_count(); /* 0 once shut down */
  gpu_shutdown();
  int rc = check_summary();
  printf("%s: map over %d GPU(s), bytes and record\n", rc ? "FAIL" : "PASS",
         ngpu < 2 ? 1 : 2);
  return rc;
}

#else
int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}
#endif
