/* test_geodesic_mgpu.c — a geodesic matrix over two real GPUs
 * (geod_mgpu_run, compute/kinds/geodesic/gpu.h) is the same bytes as the
 * whole matrix on one GPU (cuda_geodesic on device 0), and as the same
 * blocks on device 0 alone.
 *
 * Exits 77 without CUDA in the build or a device, and says so explicitly
 * with one GPU (a two-GPU run needs two). Square float64 and float32,
 * condensed float32, points x targets float64 (karney), square vincenty;
 * blocks of an odd number of rows, so that the last is short and the
 * lanes take several each; outputs poisoned first. The lanes borrow their
 * device the way a run's lanes do: a non-blocking gpu_trylock on the
 * lane's own thread, gpu_unlock on it at the end.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/geodesic/plan.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double urand(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static tarray *poisoned(const geod_plan *pl) {
  tarray *t = tarray_new(pl->dtype, pl->ndim, pl->shape);
  if (t) memset(t->data, 0xA5, (size_t)t->size * tdtype_size(t->dtype));
  return t;
}

static int lend_borrow(void *c, int dev) {
  (void)c;
  return gpu_trylock(dev);
}
static void lend_give_back(void *c, int dev) {
  (void)c;
  gpu_unlock(dev);
}

static void check_case(const geod_plan *pl, const char *what) {
  terr e;
  int64_t nc1 = 0, nc2 = 0, nc3 = 0;
  tarray *one = poisoned(pl), *two = poisoned(pl), *blocks = poisoned(pl);
  CHECK(one && two && blocks);
  if (!one || !two || !blocks) goto done;
  size_t bytes = (size_t)one->size * tdtype_size(pl->dtype);
  /* device 1 first: the same bytes as device 0, and its staging set up
   * before the lanes race (else device 0 may take every block) */
  CHECK_MSG(cuda_geodesic(1, pl, two, NULL, &nc2, &e) == 0, "%s: %s", what,
            e.message);
  CHECK_MSG(cuda_geodesic(0, pl, one, NULL, &nc1, &e) == 0, "%s: %s", what,
            e.message);
  CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
            "%s: device 1 differs from device 0", what);
  memset(two->data, 0xA5, bytes);
  mgpu_lend lend = {NULL, gpu_count(), lend_borrow, lend_give_back, NULL,
                    NULL, NULL};
  mgpu_report rep;
  int64_t br = pl->n / 23 + 1; /* ~23 blocks, the last short */
  CHECK_MSG(geod_mgpu_run(0, pl, two, &lend, br, &rep, NULL, NULL, NULL,
                          &nc2, &e) == 0,
            "%s: %s", what, e.message);
  char desc[200];
  mgpu_describe(&rep, desc, sizeof desc);
  printf("  %s: %s\n", what, desc);
  CHECK_MSG(rep.lanes == 2 && rep.rows[0] > 0 && rep.rows[1] > 0,
            "%s: %s", what, desc);
  CHECK_MSG(memcmp(one->data, two->data, bytes) == 0,
            "%s: two GPUs differ from one", what);
  mgpu_lend alone = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  CHECK(geod_mgpu_run(0, pl, blocks, &alone, br, NULL, NULL, NULL, NULL,
                      &nc3, &e) == 0);
  CHECK_MSG(memcmp(one->data, blocks->data, bytes) == 0,
            "%s: blocks on one GPU differ from the whole", what);
  CHECK(nc1 == nc2 && nc1 == nc3);
done:
  tarray_free(one);
  tarray_free(two);
  tarray_free(blocks);
}

TEST(test_two_gpus_same_bytes) {
  enum { N = 2500, M = 1700 };
  static double pts[2 * N], tgt[2 * M];
  for (int i = 0; i < N; i++) {
    pts[2 * i] = urand() * 180 - 90;
    pts[2 * i + 1] = urand() * 360 - 180;
  }
  for (int i = 0; i < M; i++) {
    tgt[2 * i] = urand() * 180 - 90;
    tgt[2 * i + 1] = urand() * 360 - 180;
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
  if (gpu_count() < 2)
    SKIP_ALL("one GPU (%s): a two-GPU run needs two", name);
  if (cuda_geodesic_probe(1, name, sizeof name, &e) != 0) {
    printf("FAIL: device 1: %s\n", e.message);
    return 1;
  }
  printf("devices 0 and 1: %s\n", name);
  RUN(test_two_gpus_same_bytes);
  return check_summary();
}

#else

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
