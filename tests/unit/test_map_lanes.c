/* test_map_lanes.c — a map over every lent GPU (compute/kinds/map/lanes.h)
 * with fake devices and a CPU lane session.
 *
 * The block cut: a multiple of MAP_LANES_ALIGN within the bounds (or the
 * whole job when that is fewer elements), the same for a job whatever the
 * devices (it takes none), MAP_LANES_SPLIT blocks or more where the
 * bounds allow; the bytes an element moves count the result and the
 * full-size inputs, not a scalar or a smaller broadcast input; the
 * decision (map_lanes_wants): the switch, one device, no borrow hooks, a
 * sink, a job under MAP_LANES_MIN each keep the one-GPU path.
 *
 * The glue (map_lanes_run over mgpu_run) with fakes: a device is a mutex
 * the lane thread must hold in every call; the session computes a*b + c
 * (c a broadcast scalar) for [r0, r1) into one of its two buffers at
 * launch and copies the oldest into its place at finish, checking that
 * it never holds more than two, finishes oldest first, is opened and
 * closed once on its own thread, and that no block is finished before
 * every open lane prefaulted its share (ranks 0..nlive-1 once each). Over
 * 1, 2, 4 and 8 devices: the result's bytes equal the serial loop's,
 * every element written once, the report's rows add up to the job; a lent device failing mid-job (after half a
 * block torn) gives its blocks to the others and the bytes are still
 * equal; a lent device without memory for two blocks is a failed lane
 * (the job goes on), the own device's the job's T_ENOMEM;
 * TESSEL_MAP_PREFAULT=0 leaves the prefault out (same bytes); a stop ends it
 * with the stop's code; every device free after every run; the slowest
 * lane's times are the run's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/map/lanes.h"

#define NDEV 8
#define N 300000 /* elements: ~73 blocks of 4096 */

static atomic_int bad, nopen, nclose, nprefault, rank_mask;
static atomic_int nfinished, fail_dev, fail_after, enomem_dev, stop_after;
static atomic_int writes[N];
static atomic_int nlive_seen;

#define FAKE_DEV_BAD bad
#define FAKE_DEV_DONE nfinished
#include "fake_devs.h"

struct map_lane {
  int dev;
  pthread_t thread;
  const map_lanes_job *J;
  double *buf[2];
  int64_t r0[2], r1[2], nl, nf, done;
};

static void fk_check_thread(const map_lane *L) {
  fk_check_lane(L->thread, L->dev);
}

static int fk_open(const map_lanes_job *J, int dev, map_lane **out, terr *e) {
  map_lane *L = calloc(1, sizeof *L);
  *out = L;
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  L->dev = dev;
  L->thread = pthread_self();
  L->J = J;
  atomic_fetch_add(&nopen, 1);
  fk_check_thread(L);
  if (dev == atomic_load(&enomem_dev))
    return terr_set(e, T_ENOMEM, "", -1, "fake device %d: no room", dev);
  for (int k = 0; k < 2; k++) {
    L->buf[k] = malloc((size_t)J->cap * sizeof(double));
    if (!L->buf[k]) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  }
  return 0;
}

static void fk_prefault(map_lane *L, int rank, int nlive) {
  fk_check_thread(L);
  atomic_fetch_or(&rank_mask, 1 << rank);
  atomic_store(&nlive_seen, nlive);
  atomic_fetch_add(&nprefault, 1);
}

static int fk_launch(map_lane *L, int64_t r0, int64_t r1, terr *e) {
  (void)e;
  fk_check_thread(L);
  if (L->nl - L->nf >= 2 || r1 - r0 > L->J->cap || r0 % 4096)
    atomic_fetch_add(&bad, 1);
  int k = (int)(L->nl % 2);
  const double *a = L->J->inputs[0]->data, *b = L->J->inputs[1]->data,
               *c = L->J->inputs[2]->data;
  for (int64_t i = r0; i < r1; i++) L->buf[k][i - r0] = a[i] * b[i] + c[0];
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->nl++;
  return 0;
}

static int fk_finish(map_lane *L, int64_t r0, int64_t r1, terr *e) {
  fk_check_thread(L);
  int k = (int)(L->nf % 2);
  double *out = L->J->out->data;
  if (L->nf >= L->nl || L->r0[k] != r0 || L->r1[k] != r1)
    atomic_fetch_add(&bad, 1);
  /* every open lane prefaulted before anybody writes */
  if (atomic_load(&nprefault) != atomic_load(&nlive_seen))
    atomic_fetch_add(&bad, 1);
  if (L->dev == atomic_load(&fail_dev) && L->done >= atomic_load(&fail_after)) {
    for (int64_t i = r0; i < r0 + (r1 - r0) / 2; i++) out[i] = -1; /* torn */
    return terr_set(e, T_EDEVICE, "", -1, "fake device %d failed", L->dev);
  }
  memcpy(out + r0, L->buf[k], (size_t)(r1 - r0) * sizeof(double));
  for (int64_t i = r0; i < r1; i++) atomic_fetch_add(&writes[i], 1);
  L->nf++;
  L->done++;
  atomic_fetch_add(&nfinished, 1);
  return 0;
}

static void fk_close(map_lane *L, int rc, map_lane_times *t) {
  (void)rc;
  fk_check_thread(L);
  atomic_fetch_add(&nclose, 1);
  t->h2d = 1.0 + L->dev; /* the slowest lane: the highest device */
  t->compute = 2.0 + L->dev;
  t->d2h = 3.0 + L->dev;
  free(L->buf[0]);
  free(L->buf[1]);
  free(L);
}

static const map_lane_fns fakes = {fk_open, fk_prefault, fk_launch, fk_finish,
                                   fk_close};

static tarray *vec(int64_t n) {
  int64_t shape[1] = {n};
  return tarray_new(T_F64, 1, shape);
}

static void reset(void) {
  atomic_store(&bad, 0);
  atomic_store(&nopen, 0);
  atomic_store(&nclose, 0);
  atomic_store(&nprefault, 0);
  atomic_store(&rank_mask, 0);
  atomic_store(&nlive_seen, 0);
  atomic_store(&nfinished, 0);
  atomic_store(&fail_dev, -1);
  atomic_store(&fail_after, 0);
  atomic_store(&enomem_dev, -1);
  atomic_store(&stop_after, 0);
  for (int i = 0; i < N; i++) atomic_store(&writes[i], 0);
}

static tarray *in3[3], *want;

/* One run over ndev fake devices; 0 or the error. */
static int run(int ndev, int64_t block, tarray *out, mgpu_report *rep,
               map_lane_times *T, terr *e) {
  for (int64_t i = 0; i < out->size; i++) ((double *)out->data)[i] = 0.5;
  out->map_prefault = 1;
  map_lanes_job J = {NULL, (const tarray *const *)in3, NULL, out, 0, block,
                     NULL, NULL};
  mgpu_lend lend = {NULL, ndev, fk_borrow, fk_give_back, NULL, fk_stopped,
                    NULL};
  return map_lanes_run(0, &J, block, &lend, &fakes, rep, T, e);
}

TEST(test_block_cut) {
  /* within the bounds, aligned, from the job only */
  int64_t b = map_lanes_block((int64_t)1 << 28, 32);
  CHECK(b % MAP_LANES_ALIGN == 0);
  CHECK(b * 32 <= MAP_LANES_BLOCK_MAX && b * 32 >= MAP_LANES_BLOCK_MIN);
  CHECK(((int64_t)1 << 28) / b >= MAP_LANES_SPLIT);
  CHECK(map_lanes_block((int64_t)1 << 28, 32) == b); /* a pure function */
  int64_t s = map_lanes_block((int64_t)1 << 24, 8); /* 128 MiB: the floor */
  CHECK(s * 8 == MAP_LANES_BLOCK_MIN);
  CHECK(map_lanes_block(1000, 8) == 1000); /* fewer: the whole job */
  CHECK(map_lanes_block(0, 8) == 1);
  for (int64_t n = 1; n < ((int64_t)1 << 34); n = n * 3 + 7) {
    int64_t x = map_lanes_block(n, 24);
    CHECK(x >= 1 && x <= n && (x == n || x % MAP_LANES_ALIGN == 0));
    CHECK(x * 24 <= MAP_LANES_BLOCK_MAX || x == MAP_LANES_ALIGN);
  }
}

TEST(test_wants) {
  terr e;
  expr *x = NULL;
  CHECK(expr_compile("a*b + c", &x, &e) == 0);
  if (!x) return;
  /* shapes only: data never read */
  static double dummy[4];
  tarray a = {0}, sc = {0}, out = {0};
  a.dtype = T_F64, a.ndim = 1, a.shape[0] = a.size = (int64_t)1 << 28;
  a.data = dummy;
  sc.dtype = T_F64, sc.ndim = 0, sc.size = 1, sc.data = dummy;
  out = a;
  const tarray *ins[3] = {&a, &a, &sc};
  CHECK(map_lanes_per_elem(x, ins, &out) == 24); /* a, b, out; c once */
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.ngpu = 2;
  ctx.gpu_borrow = (int (*)(job_ctx *, int))1; /* never called here */
  ctx.gpu_return = (void (*)(job_ctx *, int))1;
  setenv("TESSEL_GPU_LANES", "1", 1);
  CHECK(map_lanes_wants(x, ins, &out, &ctx) == 1);
  ctx.ngpu = 1;
  CHECK(map_lanes_wants(x, ins, &out, &ctx) == 0);
  ctx.ngpu = 2;
  ctx.gpu_borrow = NULL;
  CHECK(map_lanes_wants(x, ins, &out, &ctx) == 0);
  ctx.gpu_borrow = (int (*)(job_ctx *, int))1;
  out.data = NULL; /* a sink */
  CHECK(map_lanes_wants(x, ins, &out, &ctx) == 0);
  out.data = dummy;
  /* under MAP_LANES_MIN bytes moved */
  tarray small = a;
  small.shape[0] = small.size = MAP_LANES_MIN / 24 - 1;
  const tarray *sins[3] = {&small, &small, &sc};
  CHECK(map_lanes_wants(x, sins, &small, &ctx) == 0);
  small.shape[0] = small.size = MAP_LANES_MIN / 24 + 1;
  CHECK(map_lanes_wants(x, sins, &small, &ctx) == 1);
  setenv("TESSEL_GPU_LANES", "0", 1);
  CHECK(map_lanes_wants(x, ins, &out, &ctx) == 0);
  CHECK(map_lanes_switch() == 0);
  setenv("TESSEL_GPU_LANES", "junk", 1);
  CHECK(map_lanes_switch() == MAP_LANES_DEFAULT);
  unsetenv("TESSEL_GPU_LANES");
  CHECK(map_lanes_switch() == MAP_LANES_DEFAULT);
  expr_free(x);
}

TEST(test_same_bytes_any_devices) {
  tarray *out = vec(N);
  CHECK(out != NULL);
  if (!out) return;
  int64_t block = 4096 * 3;
  for (int ndev = 1; ndev <= NDEV; ndev *= 2) {
    terr e;
    mgpu_report rep;
    map_lane_times T;
    reset();
    int rc = run(ndev, block, out, &rep, &T, &e);
    CHECK_MSG(rc == 0, "%d devices: %s", ndev, e.message);
    CHECK_MSG(memcmp(out->data, want->data, N * sizeof(double)) == 0,
              "%d devices: the bytes differ from the serial loop", ndev);
    int once = 1;
    for (int i = 0; i < N; i++) once &= atomic_load(&writes[i]) == 1;
    CHECK_MSG(once, "%d devices: an element not written exactly once", ndev);
    CHECK(atomic_load(&bad) == 0);
    CHECK(rep.lanes == ndev && rep.depth == 2);
    int64_t rows = 0;
    for (int k = 0; k < rep.lanes; k++) rows += rep.rows[k];
    CHECK(rows == N && rep.block_rows == block);
    CHECK(atomic_load(&nopen) == ndev && atomic_load(&nclose) == ndev);
    CHECK(atomic_load(&rank_mask) == (1 << ndev) - 1);
    CHECK(out->map_prefault == 0);
    CHECK(T.h2d == 1.0 + (ndev - 1) && T.d2h == 3.0 + (ndev - 1));
    all_free("same bytes");
  }
  tarray_free(out);
}

TEST(test_failing_lane) {
  tarray *out = vec(N);
  if (!out) return;
  terr e;
  mgpu_report rep;
  reset();
  atomic_store(&fail_dev, 1);
  atomic_store(&fail_after, 0); /* its first (primed) block */
  CHECK_MSG(run(4, 4096 * 2, out, &rep, NULL, &e) == 0, "%s", e.message);
  CHECK(rep.failed[slot_of(&rep, 1)] == 1 && rep.lanes == 4);
  CHECK_MSG(memcmp(out->data, want->data, N * sizeof(double)) == 0,
            "a failed lane's blocks were not redone whole");
  CHECK(atomic_load(&bad) == 0);
  all_free("failing lane");
  /* a lent device that cannot hold two blocks: a failed lane, job whole */
  reset();
  atomic_store(&enomem_dev, 2);
  CHECK_MSG(run(4, 4096 * 2, out, &rep, NULL, &e) == 0, "%s", e.message);
  CHECK(rep.failed[slot_of(&rep, 2)] == 1);
  CHECK(memcmp(out->data, want->data, N * sizeof(double)) == 0);
  CHECK(atomic_load(&nclose) == 4); /* the failed open closed too */
  all_free("no room lent");
  /* the own device so: the job's T_ENOMEM */
  reset();
  atomic_store(&enomem_dev, 0);
  CHECK(run(2, 4096 * 2, out, &rep, NULL, &e) == T_ENOMEM);
  all_free("no room own");
  tarray_free(out);
}

/* TESSEL_MAP_PREFAULT=0: no lane prefaults, the bytes the same. */
TEST(test_no_prefault) {
  tarray *out = vec(N);
  if (!out) return;
  terr e;
  reset();
  setenv("TESSEL_MAP_PREFAULT", "0", 1);
  CHECK_MSG(run(4, 4096 * 3, out, NULL, NULL, &e) == 0, "%s", e.message);
  unsetenv("TESSEL_MAP_PREFAULT");
  CHECK(atomic_load(&nprefault) == 0 && out->map_prefault == 0);
  CHECK(memcmp(out->data, want->data, N * sizeof(double)) == 0);
  CHECK(atomic_load(&bad) == 0);
  all_free("no prefault");
  tarray_free(out);
}

TEST(test_stop) {
  tarray *out = vec(N);
  if (!out) return;
  terr e;
  reset();
  atomic_store(&stop_after, 5);
  CHECK(run(4, 4096, out, NULL, NULL, &e) == T_ECANCELED);
  CHECK(atomic_load(&nopen) == atomic_load(&nclose));
  all_free("stop");
  tarray_free(out);
}

int main(void) {
  fake_devs_init();
  int64_t one = 1;
  in3[0] = vec(N);
  in3[1] = vec(N);
  in3[2] = tarray_new(T_F64, 0, &one);
  want = vec(N);
  if (!in3[0] || !in3[1] || !in3[2] || !want) return 1;
  double *a = in3[0]->data, *b = in3[1]->data, *w = want->data;
  ((double *)in3[2]->data)[0] = 0.1;
  for (int i = 0; i < N; i++) {
    a[i] = 1.0 / (i + 3.0);
    b[i] = i * 0.7 - 11.0;
    w[i] = a[i] * b[i] + 0.1;
  }
  RUN(test_block_cut);
  RUN(test_wants);
  RUN(test_same_bytes_any_devices);
  RUN(test_failing_lane);
  RUN(test_no_prefault);
  RUN(test_stop);
  for (int i = 0; i < 3; i++) tarray_free(in3[i]);
  tarray_free(want);
  return check_summary();
}
