/* test_geodesic_mgpu.c — a geodesic matrix over two real GPUs
 * (geod_mgpu_run, compute/kinds/geodesic/gpu.h: a lane session a device,
 * geodesic_spread.cu, block k + 1 launched before block k is written) is
 * the same bytes as the whole matrix on one GPU (cuda_geodesic on device
 * 0), and as the same blocks on device 0 alone.
 *
 * Exits 77 without CUDA in the build or a device. With one GPU the
 * one-device checks run (the lane session by hand and through the engine
 * on device 0 alone, against cuda_geodesic; and beside a lent "device 1"
 * that does not exist, whose lane fails to open and is reported failed)
 * and the two-GPU ones say they were skipped. Square float64 and float32, condensed float32, points x
 * targets float64 (karney), square vincenty; blocks of an odd number of
 * rows, so that the last is short and the lanes take several each;
 * outputs poisoned first; the two-GPU run writes into a mapping marked
 * for prefault (the lanes' shares), the session by hand launches three
 * blocks of different sizes (a ring of three buffers, each used again)
 * before it finishes the first. A stop after a
 * few blocks ends the run with the stop's code and leaves both devices
 * free (a run after it is whole). The lanes borrow their device the way a
 * run's lanes do: a non-blocking gpu_trylock on the lane's own thread,
 * gpu_unlock on it at the end. The blocks also go into a pinned result
 * (registered, as a region is: copied straight in), and every case runs
 * in the three lane modes of a square matrix (TESSEL_GEOD_LANES_MODE
 * unset: SYMB into the pinned result, SQR into the others; "symb"; "sqr").
 */
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/geodesic/plan.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"
#include "mgpu_test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static tarray *poisoned(const geod_plan *pl) {
  tarray *t = tarray_new(pl->dtype, pl->ndim, pl->shape);
  if (t) memset(t->data, 0xA5, (size_t)t->size * tdtype_size(t->dtype));
  return t;
}

/* The session by hand on device 0: blocks of growing sizes, the next
 * launched before the one in hand is finished. */
static void check_session(const geod_plan *pl, const tarray *one,
                          int64_t nc1, const char *what) {
  terr e;
  tarray *t = poisoned(pl);
  CHECK(t != NULL);
  if (!t) return;
  int64_t cut[8], nc = 0;
  int nb = 0;
  for (int64_t r = 0; r < pl->n && nb < 7; nb++) {
    cut[nb] = r;
    r += pl->n / 20 * (nb + 1) + 1;
  }
  cut[nb] = pl->n;
  size_t cap = 0;
  for (int b = 0; b < nb; b++) {
    size_t x = cuda_geod_lane_bytes(pl, t, cut[b], cut[b + 1]);
    if (x > cap) cap = x;
  }
  geod_lane *L = NULL;
  int nbuf = 3; /* a ring of three: every buffer used twice or more */
  int rc = cuda_geod_lane_open(0, pl, t, cap, &nbuf, NULL, NULL, &L, &e);
  CHECK_MSG(rc == 0 && nbuf == 3, "%s: %s", what, e.message);
  for (int b = 0; rc == 0 && b < nbuf && b < nb; b++)
    rc = cuda_geod_lane_launch(L, cut[b], cut[b + 1], &e);
  for (int b = 0; rc == 0 && b < nb; b++) {
    rc = cuda_geod_lane_finish(L, cut[b], cut[b + 1], &nc, &e);
    if (rc == 0 && b + nbuf < nb)
      rc = cuda_geod_lane_launch(L, cut[b + nbuf], cut[b + nbuf + 1], &e);
  }
  CHECK_MSG(rc == 0, "%s: session: %s", what, e.message);
  cuda_geod_lane_close(L, rc, NULL, NULL, NULL);
  size_t bytes = (size_t)one->size * tdtype_size(pl->dtype);
  CHECK_MSG(memcmp(one->data, t->data, bytes) == 0,
            "%s: the session by hand differs from the whole", what);
  CHECK(nc == nc1);
  tarray_free(t);
}

/* A stop after a few blocks: the stop's code, both devices free after. */
static void check_stop(const geod_plan *pl, const char *what) {
  terr e;
  int64_t nc = 0;
  tarray *t = poisoned(pl);
  CHECK(t != NULL);
  if (!t) return;
  int64_t br = pl->n / 23 + 1;
  atomic_store(&tu_rows_done, 0);
  atomic_store(&tu_stop_rows, (int)(3 * br));
  mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL,
                    tu_stop_at, tu_count_rows};
  CHECK_MSG(geod_mgpu_run(0, pl, t, &lend, br, NULL, NULL, NULL, NULL, &nc,
                          &e) == T_ECANCELED,
            "%s: stop: %s", what, e.message);
  atomic_store(&tu_stop_rows, 0);
  for (int d = 0; d < gpu_count() && d < 2; d++) {
    CHECK_MSG(gpu_trylock(d) == 0, "%s: device %d held after a stop", what,
              d);
    gpu_unlock(d);
  }
  tarray_free(t);
}

static void check_case(const geod_plan *pl, const char *what) {
  terr e;
  int64_t nc1 = 0, nc2 = 0, nc3 = 0;
  int two_gpus = gpu_count() >= 2;
  /* two: in an anonymous mapping marked for prefault (tu_mapped) */
  tarray *one = poisoned(pl), *blocks = poisoned(pl),
         tm = tu_mapped(pl->dtype, pl->ndim, pl->shape[0],
                        pl->ndim == 2 ? pl->shape[1] : 0, 0),
         *two = &tm;
  CHECK(one && tm.data && blocks);
  if (!one || !tm.data || !blocks) goto done;
  size_t bytes = (size_t)one->size * tdtype_size(pl->dtype);
  memset(two->data, 0xA5, bytes);
  CHECK_MSG(cuda_geodesic(0, pl, one, NULL, &nc1, &e) == 0, "%s: %s", what,
            e.message);
  check_session(pl, one, nc1, what);
  check_stop(pl, what);
  mgpu_lend alone = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  CHECK(geod_mgpu_run(0, pl, blocks, &alone, pl->n / 23 + 1, NULL, NULL,
                      NULL, NULL, &nc3, &e) == 0);
  CHECK_MSG(memcmp(one->data, blocks->data, bytes) == 0,
            "%s: blocks on one GPU differ from the whole", what);
  CHECK(nc1 == nc3);
  /* the same blocks on one GPU into a pinned result (straight in) */
  terr_clear(&e);
  if (gpu_host_register(two->data, bytes, &e) == 0) {
    memset(two->data, 0xA5, bytes);
    CHECK(geod_mgpu_run(0, pl, two, &alone, pl->n / 23 + 1, NULL, NULL, NULL,
                        NULL, &nc3, &e) == 0);
    CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
              "%s: blocks on one GPU into a pinned result differ", what);
    CHECK(nc1 == nc3);
    gpu_host_unregister(two->data);
  } else {
    CHECK_MSG(0, "%s: the result could not be pinned: %s", what, e.message);
  }
  if (!two_gpus) {
    /* a lent "device 1" that does not exist: its lane cannot open (a
     * device error), device 0 writes every block */
    mgpu_lend ghost = {NULL, 2, tu_ghost_borrow, tu_ghost_give_back, NULL, NULL,
                       NULL};
    mgpu_report rep;
    memset(blocks->data, 0xA5, bytes);
    CHECK_MSG(geod_mgpu_run(0, pl, blocks, &ghost, pl->n / 23 + 1, &rep,
                            NULL, NULL, NULL, &nc3, &e) == 0,
              "%s: %s", what, e.message);
    CHECK(rep.lanes == 2 && rep.failed[1] && rep.rows[0] == pl->n);
    CHECK_MSG(memcmp(one->data, blocks->data, bytes) == 0,
              "%s: blocks beside a failed lane differ from the whole", what);
    printf("  %s: one GPU: the two-GPU run skipped\n", what);
    goto done;
  }
  /* device 1: the same bytes as device 0, and its staging set up before
   * the lanes race (else device 0 may take every block) */
  CHECK_MSG(cuda_geodesic(1, pl, two, NULL, &nc2, &e) == 0, "%s: %s", what,
            e.message);
  CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
            "%s: device 1 differs from device 0", what);
  memset(two->data, 0xA5, bytes);
  two->map_prefault = 1;
  mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL,
                    NULL, NULL};
  mgpu_report rep;
  int64_t br = pl->n / 23 + 1; /* ~23 blocks, the last short */
  CHECK_MSG(geod_mgpu_run(0, pl, two, &lend, br, &rep, NULL, NULL, NULL,
                          &nc2, &e) == 0,
            "%s: %s", what, e.message);
  CHECK(two->map_prefault == 0 && rep.depth == 2);
  char desc[200];
  mgpu_describe(&rep, desc, sizeof desc);
  printf("  %s: %s\n", what, desc);
  CHECK_MSG(tu_every_lane_wrote(&rep, pl->n), "%s: %s", what, desc);
  CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
            "%s: two GPUs differ from one", what);
  CHECK(nc1 == nc2);
  /* a pinned result (a registered region's case): blocks copied straight
   * in, SYMB unless the mode is forced */
  terr_clear(&e);
  if (gpu_host_register(two->data, bytes, &e) == 0) {
    memset(two->data, 0xA5, bytes);
    two->map_prefault = 0;
    CHECK_MSG(geod_mgpu_run(0, pl, two, &lend, br, &rep, NULL, NULL, NULL,
                            &nc2, &e) == 0,
              "%s: pinned: %s", what, e.message);
    CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
              "%s: two GPUs into a pinned result differ from one", what);
    CHECK(nc1 == nc2);
    gpu_host_unregister(two->data);
  } else {
    CHECK_MSG(0, "%s: the result could not be pinned: %s", what, e.message);
  }
done:
  tarray_free(one);
  if (tm.map_base) munmap(tm.map_base, tm.map_len);
  tarray_free(blocks);
}

TEST(test_two_gpus_same_bytes) {
  enum { N = 2500, M = 1700 };
  static double pts[2 * N], tgt[2 * M];
  for (int i = 0; i < N; i++) {
    pts[2 * i] = tu_urand(&rng) * 180 - 90;
    pts[2 * i + 1] = tu_urand(&rng) * 360 - 180;
  }
  for (int i = 0; i < M; i++) {
    tgt[2 * i] = tu_urand(&rng) * 180 - 90;
    tgt[2 * i + 1] = tu_urand(&rng) * 360 - 180;
  }
  struct {
    geod_method m;
    int condensed, targets;
    tdtype dt;
    const char *what;
  } c[] = {
      {GEOD_KARNEY, 0, 0, T_F64, "karney square f64"},
      {GEOD_KARNEY, 0, 0, T_F32, "karney square f32"},
      {GEOD_KARNEY, 1, 0, T_F32, "karney condensed f32"},
      {GEOD_KARNEY, 0, 1, T_F64, "karney targets f64"},
      {GEOD_VINCENTY, 0, 0, T_F64, "vincenty square f64"},
  };
  for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
    geod_plan *pl = NULL;
    terr e;
    int rc = geod_plan_build(c[k].m, GEOD_WGS84_A, GEOD_WGS84_F, 6371008.8, 1,
                             c[k].condensed, c[k].dt, pts, N,
                             c[k].targets ? tgt : NULL, c[k].targets ? M : 0,
                             &pl, &e);
    CHECK_MSG(rc == 0, "%s: %s", c[k].what, e.message);
    if (rc) continue;
    check_case(pl, c[k].what);
    geod_plan_free(pl);
  }
}

int main(void) {
  char name[256];
  terr e;
  terr_clear(&e);
  if (cuda_geodesic_probe(0, name, sizeof name, &e) != 0)
    SKIP_ALL_NO_GPU("%s", e.message);
  if (gpu_count() < 2) {
    printf("one GPU (%s): the two-GPU runs are skipped\n", name);
  } else if (cuda_geodesic_probe(1, name, sizeof name, &e) != 0) {
    printf("FAIL: device 1: %s\n", e.message);
    return 1;
  } else {
    printf("devices 0 and 1: %s\n", name);
  }
  static const char *const modes[3] = {NULL, "symb", "sqr"};
  for (int m = 0; m < 3; m++) {
    if (modes[m])
      setenv("TESSEL_GEOD_LANES_MODE", modes[m], 1);
    else
      unsetenv("TESSEL_GEOD_LANES_MODE");
    printf("-- lane mode %s\n", modes[m] ? modes[m] : "(default)");
    RUN(test_two_gpus_same_bytes);
  }
  unsetenv("TESSEL_GEOD_LANES_MODE");
  return check_summary();
}

#else

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
