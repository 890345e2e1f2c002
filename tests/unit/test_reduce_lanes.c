/* test_reduce_lanes.c — a whole-array reduce by blocks over every lent GPU
 * (compute/kinds/reduce/lanes.h) with fake devices and a CPU lane session.
 *
 * The block cut: a multiple of RED_LANES_ALIGN within the bounds (or the
 * whole job when that is fewer elements), a pure function of the job (it
 * takes no device), RED_LANES_SPLIT blocks or more where the bounds
 * allow; the parts of a block from its length alone; the bytes an
 * element reads count the full-size inputs, not a scalar; the decision
 * (red_lanes_wants): the switch, an axis, a sink input, a job under
 * RED_LANES_MIN keep gpu_reduce — and nothing about devices enters it.
 *
 * The host's fold against known values: sum with cancellation (Neumaier
 * keeps the small terms), min/max/argmin/argmax with ties (the first
 * index) and NaN (the first NaN), mean, var/std by Chan's merge, norm,
 * prod, and the empty states.
 *
 * A rows job (along the last axis, blocks of whole rows): each row's
 * value the same bits on 1, 2, 4 and 8 devices, and with a lent device
 * failing after half its block's rows were written (torn), as that row
 * folded alone.
 *
 * The glue (red_lanes_run over mgpu_run) with fakes: a device is a mutex
 * the lane thread must hold in every call; the session folds a*b + c
 * (c a broadcast scalar) over [r0, r1) into a state at launch, element by
 * element, and writes it into J->states[r0 / block] at finish, checking
 * that it never holds more than two blocks, finishes oldest first, is
 * opened and closed once on its own thread. Over 1, 2, 4 and 8 devices
 * and every op: the result's bits equal those of the blocks folded in
 * order on one thread, every block's state written once, the report's
 * rows add up to the job; max_lanes 1 uses the own device only; a lent
 * device failing mid-job (its block's state left torn) gives its blocks to
 * the others and the bits are still equal; a lent device without memory
 * for two blocks is a failed lane (the job goes on), the own device's the
 * job's T_ENOMEM; a stop ends it with the stop's code; every device free
 * after every run; the slowest lane's times are the run's.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/reduce/lanes.h"

#define NDEV 8
#define N 300001 /* elements: ~74 blocks of 4096, the last short */
#define NB_MAX (N / 4096 + 2)

static atomic_int bad, nopen, nclose;
static atomic_int nfinished, fail_dev, fail_after, enomem_dev, stop_after;
static atomic_int writes[NB_MAX];

#define FAKE_DEV_BAD bad
#define FAKE_DEV_DONE nfinished
#include "fake_devs.h"

/* One value's state, merged as a one-element part (the fake's fold). */
static red_state one(reduce_op op, double x, int64_t l) {
  red_state s;
  red_state_init(op, &s);
  switch (op) {
    case R_SUM:
    case R_MEAN: s.a = x; break;
    case R_PROD: s.a = x; break;
    case R_VAR:
    case R_STD: s.a = 1, s.b = x; break;
    case R_NORM: s.a = fabs(x), s.b = x == 0 ? 0 : 1; break;
    default: s.a = x, s.i = l; break;
  }
  return s;
}

/* The fold of [r0, r1) of a*b + c, element by element. */
static red_state fold(reduce_op op, const red_lanes_job *J, int64_t r0,
                      int64_t r1) {
  const double *a = J->inputs[0]->data, *b = J->inputs[1]->data,
               *c = J->inputs[2]->data;
  red_state s;
  red_state_init(op, &s);
  for (int64_t i = r0; i < r1; i++) {
    red_state o = one(op, a[i] * b[i] + c[0], i);
    red_state_merge(op, &s, &o);
  }
  return s;
}

struct red_lane {
  int dev;
  pthread_t thread;
  const red_lanes_job *J;
  red_state st[2];
  double *vals[2]; /* a rows job's values, a block's rows */
  int64_t r0[2], r1[2], nl, nf, done;
};

static void fk_check_thread(const red_lane *L) {
  fk_check_lane(L->thread, L->dev);
}

static int fk_open(const red_lanes_job *J, int dev, red_lane **out, terr *e) {
  red_lane *L = calloc(1, sizeof *L);
  *out = L;
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory");
  L->dev = dev;
  L->thread = pthread_self();
  L->J = J;
  atomic_fetch_add(&nopen, 1);
  fk_check_thread(L);
  if (dev == atomic_load(&enomem_dev))
    return terr_set(e, T_ENOMEM, "", -1, "fake device %d: no room", dev);
  if (J->outer > 1)
    for (int k = 0; k < 2; k++)
      if (!(L->vals[k] = malloc((size_t)J->block * sizeof(double))))
        return terr_set(e, T_ENOMEM, "", -1, "no memory");
  return 0;
}

static int fk_launch(red_lane *L, int64_t r0, int64_t r1, terr *e) {
  (void)e;
  fk_check_thread(L);
  if (L->nl - L->nf >= 2 || r1 - r0 > L->J->block || r0 % L->J->block)
    atomic_fetch_add(&bad, 1);
  int k = (int)(L->nl % 2);
  const red_lanes_job *J = L->J;
  if (J->outer > 1) /* rows: each row folded whole, its value kept */
    for (int64_t r = r0; r < r1; r++) {
      red_state s = fold(J->op, J, r * J->L, (r + 1) * J->L);
      L->vals[k][r - r0] = red_state_final(J->op, s, J->L);
    }
  else
    L->st[k] = fold(J->op, J, r0, r1);
  L->r0[k] = r0;
  L->r1[k] = r1;
  L->nl++;
  return 0;
}

static int fk_finish(red_lane *L, int64_t r0, int64_t r1, terr *e) {
  fk_check_thread(L);
  int k = (int)(L->nf % 2);
  int64_t b = r0 / L->J->block;
  if (L->nf >= L->nl || L->r0[k] != r0 || L->r1[k] != r1)
    atomic_fetch_add(&bad, 1);
  if (L->dev == atomic_load(&fail_dev) && L->done >= atomic_load(&fail_after)) {
    if (L->J->outer > 1) /* torn: half its rows, redone whole by another */
      for (int64_t r = r0; r < r0 + (r1 - r0 + 1) / 2; r++)
        tarray_set(L->J->out, r, -12345);
    else
      L->J->states[b].a = -12345;
    return terr_set(e, T_EDEVICE, "", -1, "fake device %d failed", L->dev);
  }
  if (L->J->outer > 1)
    for (int64_t r = r0; r < r1; r++) tarray_set(L->J->out, r, L->vals[k][r - r0]);
  else
    L->J->states[b] = L->st[k];
  atomic_fetch_add(&writes[b], 1);
  L->nf++;
  L->done++;
  atomic_fetch_add(&nfinished, 1);
  return 0;
}

static void fk_close(red_lane *L, int rc, red_lane_times *t) {
  (void)rc;
  fk_check_thread(L);
  atomic_fetch_add(&nclose, 1);
  t->h2d = 1.0 + L->dev; /* the slowest lane: the highest device */
  t->compute = 2.0 + L->dev;
  t->d2h = 3.0 + L->dev;
  free(L->vals[0]);
  free(L->vals[1]);
  free(L);
}

static const red_lane_fns fakes = {fk_open, fk_launch, fk_finish, fk_close};

static tarray *vec(int64_t n) {
  int64_t shape[1] = {n};
  return tarray_new(T_F64, 1, shape);
}

static void reset(void) {
  atomic_store(&bad, 0);
  atomic_store(&nopen, 0);
  atomic_store(&nclose, 0);
  atomic_store(&nfinished, 0);
  atomic_store(&fail_dev, -1);
  atomic_store(&fail_after, 0);
  atomic_store(&enomem_dev, -1);
  atomic_store(&stop_after, 0);
  for (int i = 0; i < NB_MAX; i++) atomic_store(&writes[i], 0);
}

static tarray *in3[3];
static red_state states[NB_MAX];

static red_lanes_job job_of(reduce_op op, int64_t block) {
  red_lanes_job J = {op, T_F64, NULL,  (const tarray *const *)in3,
                     NULL, -1, N, 1, N, block, 0, states, NULL, NULL, NULL};
  return J;
}

/* A rows job: N elements as [ROWS_OUTER, ROWS_L] along the last axis. */
#define ROWS_L 1009
#define ROWS_OUTER (N / ROWS_L) /* 297: the last 328 elements not read */
static red_lanes_job rows_job_of(reduce_op op, int64_t block, tarray *out) {
  red_lanes_job J = job_of(op, block);
  J.axis = 1;
  J.outer = ROWS_OUTER;
  J.L = ROWS_L;
  J.n = ROWS_OUTER * ROWS_L;
  J.states = NULL;
  J.out = out;
  return J;
}

/* One run over ndev fake devices (at most max_lanes); 0 or the error. */
static int run(reduce_op op, int ndev, int max_lanes, int64_t block,
               tarray *out, mgpu_report *rep, red_lane_times *T, terr *e) {
  memset(states, 0xab, sizeof states);
  tarray_set(out, 0, -777);
  red_lanes_job J = job_of(op, block);
  mgpu_lend lend = {NULL, ndev, fk_borrow, fk_give_back, NULL, fk_stopped,
                    NULL};
  return red_lanes_run(0, &J, max_lanes, &lend, &fakes, out, rep, T, e);
}

/* The answer: the blocks folded in order on this thread. */
static double expected(reduce_op op, int64_t block) {
  red_lanes_job J = job_of(op, block);
  red_state s;
  red_state_init(op, &s);
  for (int64_t r0 = 0; r0 < N; r0 += block) {
    red_state b = fold(op, &J, r0, r0 + block < N ? r0 + block : N);
    red_state_merge(op, &s, &b);
  }
  return red_state_final(op, s, N);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

TEST(test_block_cut) {
  int64_t n = (int64_t)1 << 28;
  int64_t b = red_lanes_block(n, 16);
  CHECK(b % RED_LANES_ALIGN == 0);
  CHECK(b * 16 <= RED_LANES_BLOCK_MAX && b * 16 >= RED_LANES_BLOCK_MIN);
  CHECK(n / b >= RED_LANES_SPLIT);
  CHECK(red_lanes_block(n, 16) == b); /* a pure function */
  CHECK(red_lanes_block((int64_t)1 << 24, 8) * 8 == RED_LANES_BLOCK_MIN);
  CHECK(red_lanes_block(1000, 8) == 1000); /* fewer: the whole job */
  CHECK(red_lanes_block(0, 8) == 1);
  for (int64_t m = 1; m < ((int64_t)1 << 34); m = m * 3 + 7) {
    int64_t x = red_lanes_block(m, 24);
    CHECK(x >= 1 && x <= m && (x == m || x % RED_LANES_ALIGN == 0));
    CHECK(x * 24 <= RED_LANES_BLOCK_MAX || x == RED_LANES_ALIGN);
  }
  /* rows: whole rows, within the block's bytes, at least one */
  CHECK(red_lanes_rows(16384, 16384, 16) * 16384 <= b * 2);
  CHECK(red_lanes_rows(16384, 16384, 16) ==
        red_lanes_block((int64_t)1 << 28, 16) / 16384);
  CHECK(red_lanes_rows(10, (int64_t)1 << 30, 8) == 1);
  CHECK(red_lanes_rows(3, 100, 8) == 3);
  /* parts: from the block's length alone, within [1, RED_LANES_PARTS] */
  CHECK(red_lanes_parts(b) == RED_LANES_PARTS);
  CHECK(red_lanes_parts(2047) == 1 && red_lanes_parts(4096 * 3) == 6);
  CHECK(red_lanes_parts(0) == 1);
}

TEST(test_wants) {
  terr e;
  expr *x = NULL;
  CHECK(expr_compile("a*b + c", &x, &e) == 0);
  if (!x) return;
  static double dummy[4]; /* shapes only: data never read */
  tarray a = {0}, sc = {0};
  int64_t n = (int64_t)1 << 28;
  a.dtype = T_F64, a.ndim = 1, a.shape[0] = a.size = n, a.data = dummy;
  sc.dtype = T_F64, sc.ndim = 0, sc.size = 1, sc.data = dummy;
  const tarray *ins[3] = {&a, &a, &sc};
  int64_t sh1[1] = {n}, sh2[2] = {16384, 16384}, shc[2] = {4, n / 4};
  int64_t shf[2] = {n / 4, 4}, shw[2] = {2, n / 2};
  red_lanes_cut cut;
  CHECK(red_lanes_per_elem(x, ins, n) == 16); /* a, b; c once */
  setenv("TESSEL_GPU_LANES", "1", 1);
  CHECK(red_lanes_wants(R_SUM, x, ins, -1, 1, sh1, &cut) == 1);
  CHECK(cut.n == n && cut.outer == 1 && cut.L == n &&
        cut.block == red_lanes_block(n, 16));
  CHECK(red_lanes_wants(R_ARGMAX, x, ins, -1, 1, sh1, &cut) == 1);
  CHECK(red_lanes_wants(R_SUM, x, ins, 0, 1, sh1, &cut) == 1); /* the one */
  CHECK(cut.outer == 1);
  /* along the last axis: rows of 16384, blocks of whole rows */
  CHECK(red_lanes_wants(R_MEAN, x, ins, 1, 2, sh2, &cut) == 1);
  CHECK(cut.outer == 16384 && cut.L == 16384 &&
        cut.block == red_lanes_rows(16384, 16384, 16) && cut.block > 1 &&
        cut.block < 16384);
  CHECK(red_lanes_wants(R_SUM, x, ins, -1, 2, sh2, &cut) == 1 &&
        cut.outer == 1);
  CHECK(red_lanes_wants(R_SUM, x, ins, 0, 2, sh2, &cut) == 0); /* columns */
  CHECK(red_lanes_wants(R_SUM, x, ins, 0, 2, shf, &cut) == 0);
  /* rows longer than a block: one GPU; and too few rows for two blocks */
  CHECK(red_lanes_wants(R_SUM, x, ins, 1, 2, shc, &cut) == 0);
  CHECK(red_lanes_wants(R_SUM, x, ins, 1, 2, shw, &cut) == 0);
  a.data = NULL; /* a sink */
  CHECK(red_lanes_wants(R_SUM, x, ins, -1, 1, sh1, &cut) == 0);
  a.data = dummy;
  /* under RED_LANES_MIN bytes read, and just over */
  tarray small = a;
  int64_t m = RED_LANES_MIN / 16 - 1;
  small.shape[0] = small.size = m;
  const tarray *sins[3] = {&small, &small, &sc};
  CHECK(red_lanes_wants(R_SUM, x, sins, -1, 1, &m, &cut) == 0);
  m = RED_LANES_MIN / 16 + 1;
  small.shape[0] = small.size = m;
  CHECK(red_lanes_wants(R_SUM, x, sins, -1, 1, &m, &cut) == 1);
  setenv("TESSEL_GPU_LANES", "0", 1);
  CHECK(red_lanes_wants(R_SUM, x, ins, -1, 1, sh1, &cut) == 0);
  CHECK(red_lanes_switch() == 0);
  setenv("TESSEL_GPU_LANES", "junk", 1);
  CHECK(red_lanes_switch() == RED_LANES_DEFAULT);
  unsetenv("TESSEL_GPU_LANES");
  CHECK(red_lanes_switch() == RED_LANES_DEFAULT);
  expr_free(x);
}

/* The host's merge and final value against known answers. */
TEST(test_host_fold) {
  red_state s, o;
  /* Neumaier: 1e16 + 1 - 1e16 keeps the 1 */
  double v[3] = {1e16, 1.0, -1e16};
  red_state_init(R_SUM, &s);
  for (int i = 0; i < 3; i++) {
    o = one(R_SUM, v[i], i);
    red_state_merge(R_SUM, &s, &o);
  }
  CHECK(red_state_final(R_SUM, s, 3) == 1.0);
  CHECK(red_state_final(R_MEAN, s, 3) == 1.0 / 3);
  /* min/argmin: the first of a tie; a NaN wins, the first NaN */
  double w[5] = {3, 1, 2, 1, 5};
  red_state_init(R_ARGMIN, &s);
  for (int i = 0; i < 5; i++) {
    o = one(R_ARGMIN, w[i], i);
    red_state_merge(R_ARGMIN, &s, &o);
  }
  CHECK(red_state_final(R_ARGMIN, s, 5) == 1);
  CHECK(red_state_final(R_MIN, s, 5) == 1);
  o = one(R_ARGMIN, NAN, 7);
  red_state_merge(R_ARGMIN, &s, &o);
  o = one(R_ARGMIN, NAN, 9);
  red_state_merge(R_ARGMIN, &s, &o);
  CHECK(red_state_final(R_ARGMIN, s, 10) == 7);
  red_state_init(R_MAX, &s);
  CHECK(isnan(red_state_final(R_MAX, s, 0))); /* no value */
  /* var/std of 1..4: 1.25 (population) */
  red_state_init(R_VAR, &s);
  for (int i = 1; i <= 4; i++) {
    o = one(R_VAR, i, i);
    red_state_merge(R_VAR, &s, &o);
  }
  CHECK(fabs(red_state_final(R_VAR, s, 4) - 1.25) < 1e-15);
  CHECK(fabs(red_state_final(R_STD, s, 4) - sqrt(1.25)) < 1e-15);
  /* norm of (3, 4) and of huge values */
  red_state_init(R_NORM, &s);
  o = one(R_NORM, 3, 0);
  red_state_merge(R_NORM, &s, &o);
  o = one(R_NORM, -4, 1);
  red_state_merge(R_NORM, &s, &o);
  CHECK(fabs(red_state_final(R_NORM, s, 2) - 5) < 1e-15);
  red_state_init(R_NORM, &s);
  o = one(R_NORM, 3e200, 0);
  red_state_merge(R_NORM, &s, &o);
  o = one(R_NORM, 4e200, 1);
  red_state_merge(R_NORM, &s, &o);
  CHECK(fabs(red_state_final(R_NORM, s, 2) / 5e200 - 1) < 1e-15);
  red_state_init(R_PROD, &s);
  o = one(R_PROD, 2.5, 0);
  red_state_merge(R_PROD, &s, &o);
  o = one(R_PROD, -4, 1);
  red_state_merge(R_PROD, &s, &o);
  CHECK(red_state_final(R_PROD, s, 2) == -10);
}

TEST(test_same_bits_any_devices) {
  int64_t one1 = 1;
  tarray *out = tarray_new(T_F64, 0, &one1);
  if (!out) return;
  int64_t block = 4096 * 3;
  reduce_op ops[] = {R_SUM, R_MEAN, R_MIN,  R_MAX, R_PROD,
                     R_VAR, R_STD,  R_ARGMIN, R_ARGMAX, R_NORM};
  for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
    double want = expected(ops[oi], block);
    for (int ndev = 1; ndev <= NDEV; ndev *= 2) {
      terr e;
      mgpu_report rep;
      red_lane_times T;
      reset();
      int rc = run(ops[oi], ndev, 0, block, out, &rep, &T, &e);
      CHECK_MSG(rc == 0, "op %d, %d devices: %s", (int)ops[oi], ndev,
                e.message);
      CHECK_MSG(same_bits(tarray_get(out, 0), want),
                "op %d, %d devices: %.17g, not %.17g", (int)ops[oi], ndev,
                tarray_get(out, 0), want);
      int once = 1;
      for (int b = 0; b < (N + block - 1) / block; b++)
        once &= atomic_load(&writes[b]) == 1;
      CHECK_MSG(once, "%d devices: a block's state not written exactly once",
                ndev);
      CHECK(atomic_load(&bad) == 0);
      CHECK(rep.lanes == ndev && rep.depth == 2);
      int64_t rows = 0;
      for (int k = 0; k < rep.lanes; k++) rows += rep.rows[k];
      CHECK(rows == N && rep.block_rows == block);
      CHECK(atomic_load(&nopen) == ndev && atomic_load(&nclose) == ndev);
      CHECK(T.h2d == 1.0 + (ndev - 1) && T.d2h == 3.0 + (ndev - 1));
      all_free("same bits");
    }
  }
  /* max_lanes 1: the own device only, the same bits */
  terr e;
  mgpu_report rep;
  reset();
  CHECK(run(R_SUM, 8, 1, block, out, &rep, NULL, &e) == 0);
  CHECK(rep.lanes == 1 && rep.dev[0] == 0 && atomic_load(&nopen) == 1);
  CHECK(same_bits(tarray_get(out, 0), expected(R_SUM, block)));
  all_free("own only");
  tarray_free(out);
}

/* The rows of a rows job: each row's value the same bits on 1 to 8
 * devices and equal to that row folded alone; a lent lane failing with
 * half its rows torn has them redone whole. */
TEST(test_rows_any_devices) {
  int64_t sh[1] = {ROWS_OUTER};
  tarray *out = tarray_new(T_F64, 1, sh), *want = tarray_new(T_F64, 1, sh);
  if (!out || !want) return;
  reduce_op ops[] = {R_SUM, R_MEAN, R_ARGMAX, R_VAR, R_NORM};
  for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
    red_lanes_job W = rows_job_of(ops[oi], 7, want);
    for (int64_t r = 0; r < ROWS_OUTER; r++)
      tarray_set(want, r,
                 red_state_final(ops[oi],
                                 fold(ops[oi], &W, r * ROWS_L, (r + 1) * ROWS_L),
                                 ROWS_L));
    for (int ndev = 1; ndev <= NDEV; ndev *= 2) {
      for (int failing = 0; failing < 2; failing++) {
        if (failing && ndev < 2) continue;
        terr e;
        mgpu_report rep;
        reset();
        if (failing) atomic_store(&fail_dev, 1);
        for (int64_t r = 0; r < ROWS_OUTER; r++) tarray_set(out, r, -777);
        red_lanes_job J = rows_job_of(ops[oi], 7, out);
        mgpu_lend lend = {NULL, ndev, fk_borrow, fk_give_back, NULL,
                          fk_stopped, NULL};
        int rc = red_lanes_run(0, &J, 0, &lend, &fakes, out, &rep, NULL, &e);
        CHECK_MSG(rc == 0, "rows, op %d, %d devices: %s", (int)ops[oi], ndev,
                  e.message);
        CHECK_MSG(memcmp(out->data, want->data, ROWS_OUTER * 8) == 0,
                  "rows, op %d, %d devices%s: the values differ", (int)ops[oi],
                  ndev, failing ? ", one failing" : "");
        int64_t rows = 0;
        for (int k = 0; k < rep.lanes; k++) rows += rep.rows[k];
        CHECK(rows == ROWS_OUTER && rep.block_rows == 7);
        CHECK(atomic_load(&bad) == 0);
        all_free("rows");
      }
    }
  }
  /* a rows job whose result is not the job's: refused */
  terr e;
  red_lanes_job J = rows_job_of(R_SUM, 7, out);
  mgpu_lend lend = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  CHECK(red_lanes_run(0, &J, 0, &lend, &fakes, want, NULL, NULL, &e) ==
        T_EINVAL);
  tarray_free(out);
  tarray_free(want);
}

TEST(test_failing_lane) {
  int64_t one1 = 1;
  tarray *out = tarray_new(T_F64, 0, &one1);
  if (!out) return;
  terr e;
  mgpu_report rep;
  double want = expected(R_SUM, 4096 * 2);
  for (int after = 0; after < 3; after++) {
    reset();
    atomic_store(&fail_dev, 1);
    atomic_store(&fail_after, after); /* its first (primed) block, or later */
    CHECK_MSG(run(R_SUM, 4, 0, 4096 * 2, out, &rep, NULL, &e) == 0, "%s",
              e.message);
    /* its primed block always comes to it; a later one only if the
     * others have not taken every block by then */
    int k1 = slot_of(&rep, 1);
    CHECK(rep.lanes == 4);
    CHECK_MSG(rep.failed[k1] == 1 || (after > 0 && rep.blocks[k1] < after + 1),
              "after %d: device 1 wrote %lld blocks and did not fail", after,
              (long long)rep.blocks[k1]);
    CHECK_MSG(same_bits(tarray_get(out, 0), want),
              "a failed lane's block was not redone whole (after %d)", after);
    CHECK(atomic_load(&bad) == 0);
    all_free("failing lane");
  }
  /* a lent device that cannot hold two blocks: a failed lane, job whole */
  reset();
  atomic_store(&enomem_dev, 2);
  CHECK_MSG(run(R_SUM, 4, 0, 4096 * 2, out, &rep, NULL, &e) == 0, "%s",
            e.message);
  CHECK(rep.failed[slot_of(&rep, 2)] == 1);
  CHECK(same_bits(tarray_get(out, 0), want));
  CHECK(atomic_load(&nclose) == 4); /* the failed open closed too */
  all_free("no room lent");
  /* the own device so: the job's T_ENOMEM, the result untouched */
  reset();
  atomic_store(&enomem_dev, 0);
  CHECK(run(R_SUM, 2, 0, 4096 * 2, out, &rep, NULL, &e) == T_ENOMEM);
  CHECK(tarray_get(out, 0) == -777);
  all_free("no room own");
  /* the only device failing: the job's T_EDEVICE */
  reset();
  atomic_store(&fail_dev, 0);
  CHECK(run(R_SUM, 1, 0, 4096 * 2, out, &rep, NULL, &e) == T_EDEVICE);
  CHECK(tarray_get(out, 0) == -777);
  tarray_free(out);
}

TEST(test_stop) {
  int64_t one1 = 1;
  tarray *out = tarray_new(T_F64, 0, &one1);
  if (!out) return;
  terr e;
  reset();
  atomic_store(&stop_after, 5);
  CHECK(run(R_SUM, 4, 0, 4096, out, NULL, NULL, &e) == T_ECANCELED);
  CHECK(atomic_load(&nopen) == atomic_load(&nclose));
  CHECK(tarray_get(out, 0) == -777);
  all_free("stop");
  /* bad arguments: a result of more than one element */
  tarray *two = vec(2);
  red_lanes_job J = job_of(R_SUM, 4096);
  mgpu_lend lend = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  CHECK(two && red_lanes_run(0, &J, 0, &lend, &fakes, two, NULL, NULL, &e) ==
                   T_EINVAL);
  tarray_free(two);
  tarray_free(out);
}

int main(void) {
  fake_devs_init();
  int64_t one1 = 1;
  in3[0] = vec(N);
  in3[1] = vec(N);
  in3[2] = tarray_new(T_F64, 0, &one1);
  if (!in3[0] || !in3[1] || !in3[2]) return 1;
  double *a = in3[0]->data, *b = in3[1]->data;
  ((double *)in3[2]->data)[0] = 0.1;
  for (int i = 0; i < N; i++) {
    a[i] = 1.0 / (i + 3.0);
    b[i] = (i % 977) * 0.7 - 11.0 + (i % 5 == 0 ? 1e12 : 0);
  }
  RUN(test_block_cut);
  RUN(test_wants);
  RUN(test_host_fold);
  RUN(test_same_bits_any_devices);
  RUN(test_rows_any_devices);
  RUN(test_failing_lane);
  RUN(test_stop);
  for (int i = 0; i < 3; i++) tarray_free(in3[i]);
  return check_summary();
}
