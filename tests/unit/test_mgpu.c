/* test_mgpu.c — mgpu_run (compute/kinds/mgpu.h) with fake devices: one job's
 * row blocks over 1, 2, 4 and 8 of them. The fakes: a mutex per device
 * whose holder thread is recorded (the scheduler's lock is the thread's),
 * a block that writes f(row) into each of its rows and checks that its
 * thread holds the device. Checked: every row written into its place
 * with the same bytes whatever the number of devices; a busy device is
 * not used; a device failing mid-job (after writing half its block) gives
 * its block back and the others finish it; every device failing fails the
 * job with the device error; another error ends every lane; a device a
 * waiting job wants is given back before the job ends (the job cannot end
 * before the waiter holds it); a stop ends the run; every borrowed device
 * is given back on every path. Every case runs twice: with block alone,
 * and as a lane session (lane_begin, prepare, launch two deep after 3
 * primed, 2 on the odd devices whose lane_begin lowers it, lane_end),
 * where the fakes also check that a block is written only after its own
 * lane launched it (oldest first, never more launched than its prime),
 * that no block is written before every open lane prepared, that
 * prepare's ranks are 0..nlive-1 once each, that every lane that opened
 * is ended, and that a device failing in a launch, or in a block with
 * more launched, gives all it holds back. 300 runs of random shape (1-8
 * devices, block sizes, primes 0-8, a failure in a block, a launch or an
 * open, or a stop) end whole or with the error they must. And the
 * geodesic matrix's switch, TESSEL_GPU_LANES: "0" off, "1" on, anything
 * else (or unset) the built-in default. The random runs take their blocks
 * in order or folded (ops.fold: both ends in turn), and mgpu_fold is a
 * permutation whose order one lane sees launched.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/kinds/geodesic/gpu.h"
#include "compute/kinds/mgpu.h"

#define NDEV 8
#define ROWS 1000
static atomic_int bad_thread, fail_dev, fail_after, fail_code, stop_after;
static atomic_int blocks_done, want_dev, want_after, waiter_got;
static atomic_int dev_blocks[NDEV], entered[NDEV], nentered, sync_start;
static double out[ROWS];
/* the lane session's fakes */
static int deep;
static atomic_int nbegun, nended, nprepared, nlive_seen, rank_mask;
static atomic_int fail_launch_dev, fail_begin_dev;
static int64_t launched[NDEV][MGPU_PRIME_MAX]; /* launched blocks' r0 */
static int nlaunched[NDEV], nlaunches[NDEV]; /* its lane's thread only */
static atomic_int writes[ROWS];
static int ndev_now;
static int fold; /* ops.fold of the next runs */

#define FAKE_DEV_BAD bad_thread
#define FAKE_DEV_DONE blocks_done
#include "fake_devs.h"

static double f(int64_t r) { return (double)r * 3.25 + 1.0; }

static int fk_wanted(void *c, int dev) {
  (void)c;
  return dev >= 0 && dev == atomic_load(&want_dev) &&
         atomic_load(&blocks_done) >= atomic_load(&want_after);
}

static int fk_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  (void)u;
  (void)lane;
  if (!fk_held_here(dev)) atomic_fetch_add(&bad_thread, 1);
  /* sync_start: no block goes on before every device has entered one. */
  if (!atomic_exchange(&entered[dev], 1)) atomic_fetch_add(&nentered, 1);
  if (atomic_load(&sync_start))
    while (atomic_load(&nentered) < ndev_now) sched_yield();
  /* A wanted device's waiter must get it before any other block ends. */
  if (dev != atomic_load(&want_dev) && fk_wanted(NULL, atomic_load(&want_dev)))
    while (!atomic_load(&waiter_got)) sched_yield();
  if (deep) { /* launched by this lane, oldest first; prepared by all */
    if (nlaunched[dev] < 1 || launched[dev][0] != r0)
      atomic_fetch_add(&bad_thread, 1);
    if (nlaunched[dev] > 0) {
      memmove(launched[dev], launched[dev] + 1,
              (size_t)(nlaunched[dev] - 1) * sizeof launched[dev][0]);
      nlaunched[dev]--;
    }
    if (atomic_load(&nprepared) != atomic_load(&nlive_seen))
      atomic_fetch_add(&bad_thread, 1);
  }
  int n = atomic_fetch_add(&dev_blocks[dev], 1);
  if (dev == atomic_load(&fail_dev) && n >= atomic_load(&fail_after)) {
    for (int64_t r = r0; r < r0 + (r1 - r0) / 2; r++) out[r] = -1; /* torn */
    return terr_set(e, (terr_code)atomic_load(&fail_code), "", -1,
                    "fake device %d failed", dev);
  }
  for (int64_t r = r0; r < r1; r++) {
    out[r] = f(r);
    atomic_fetch_add(&writes[r], 1);
  }
  atomic_fetch_add(&blocks_done, 1);
  return 0;
}

/* Lanes prime 3 blocks, an odd device's lane only 2 (lane_begin lowers). */
static int prime_ask = 3, fail_launch_at = 2;
static int fk_asked(void) {
  return prime_ask < 1 ? 1 : prime_ask > MGPU_PRIME_MAX ? MGPU_PRIME_MAX
                                                        : prime_ask;
}
static int fk_depth(int dev) {
  return dev % 2 && fk_asked() > 2 ? 2 : fk_asked();
}
/* what a lane may hold: its primed blocks, two once they are written */
static int fk_cap(int dev) { return fk_depth(dev) < 2 ? 2 : fk_depth(dev); }

static int fk_lane_begin(void *u, int lane, int dev, int *prime, terr *e) {
  (void)u, (void)lane;
  if (*prime != fk_asked()) atomic_fetch_add(&bad_thread, 1);
  *prime = fk_depth(dev);
  atomic_fetch_add(&nbegun, 1);
  nlaunched[dev] = nlaunches[dev] = 0;
  if (dev == atomic_load(&fail_begin_dev))
    return terr_set(e, (terr_code)atomic_load(&fail_code), "", -1,
                    "fake device %d failed to open", dev);
  return 0;
}
static void fk_prepare(void *u, int lane, int dev, int rank, int nlive) {
  (void)u, (void)lane, (void)dev;
  if (rank < 0 || rank >= nlive ||
      (atomic_fetch_or(&rank_mask, 1 << rank) & (1 << rank)))
    atomic_fetch_add(&bad_thread, 1);
  atomic_store(&nlive_seen, nlive);
  atomic_fetch_add(&nprepared, 1);
}
static int fk_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  (void)u, (void)lane, (void)r1;
  if (!fk_held_here(dev) || nlaunched[dev] >= fk_cap(dev))
    atomic_fetch_add(&bad_thread, 1);
  /* its second launch: the one behind its first block (sync_start holds
   * every lane's first block until all entered one: blocks are left) */
  if (dev == atomic_load(&fail_launch_dev) && ++nlaunches[dev] == fail_launch_at) {
    if (!atomic_exchange(&entered[dev], 1)) /* as far as it gets */
      atomic_fetch_add(&nentered, 1);
    return terr_set(e, T_EDEVICE, "", -1, "fake device %d failed", dev);
  }
  if (nlaunched[dev] < fk_cap(dev)) launched[dev][nlaunched[dev]++] = r0;
  return 0;
}
static void fk_lane_end(void *u, int lane, int dev, int rc) {
  (void)u, (void)lane, (void)dev, (void)rc;
  atomic_fetch_add(&nended, 1);
}

static void reset(int ndev) {
  atomic_store(&nbegun, 0);
  atomic_store(&nended, 0);
  atomic_store(&nprepared, 0);
  atomic_store(&nlive_seen, -1);
  atomic_store(&rank_mask, 0);
  atomic_store(&fail_launch_dev, -1);
  atomic_store(&fail_begin_dev, -1);
  ndev_now = ndev;
  memset(out, 0, sizeof out);
  for (int r = 0; r < ROWS; r++) atomic_store(&writes[r], 0);
  for (int d = 0; d < NDEV; d++) {
    atomic_store(&dev_blocks[d], 0);
    atomic_store(&entered[d], 0);
  }
  atomic_store(&nentered, 0);
  atomic_store(&sync_start, 1);
  atomic_store(&bad_thread, 0);
  atomic_store(&fail_dev, -1);
  atomic_store(&fail_after, 0);
  atomic_store(&fail_code, T_EDEVICE);
  atomic_store(&stop_after, 0);
  atomic_store(&blocks_done, 0);
  atomic_store(&want_dev, -1);
  atomic_store(&want_after, 0);
  atomic_store(&waiter_got, 0);
}

/* The run as the scheduler makes it: the own device (0) held by the
 * caller's thread. */
static int run(int64_t block, mgpu_report *rep, terr *e) {
  mgpu_lend l = {NULL, ndev_now, fk_borrow, fk_give_back, fk_wanted,
                 fk_stopped, NULL};
  mgpu_ops ops = {.u = NULL, .block = fk_block};
  if (deep) {
    ops.lane_begin = fk_lane_begin;
    ops.prepare = fk_prepare;
    ops.launch = fk_launch;
    ops.lane_end = fk_lane_end;
    ops.prime = prime_ask;
  }
  ops.fold = fold;
  CHECK(fk_borrow(NULL, 0) == 0);
  int rc = mgpu_run(0, ROWS, block, 0, &l, &ops, rep, e);
  fk_give_back(NULL, 0);
  CHECK(atomic_load(&nended) == atomic_load(&nbegun)); /* every one ended */
  if (rep)
    CHECK(rep->depth == (deep ? 2 : 1) &&
          rep->prime == (deep && prime_ask > 1 ? prime_ask : 1));
  for (int d = 0; d < NDEV; d++) CHECK(!atomic_load(&dev_held[d]));
  CHECK(atomic_load(&bad_thread) == 0);
  return rc;
}

static void check_rows(void) {
  for (int r = 0; r < ROWS; r++) {
    CHECK_MSG(out[r] == f(r), "row %d", r);
    CHECK_MSG(atomic_load(&writes[r]) == 1, "row %d written %d times", r,
              atomic_load(&writes[r]));
  }
}

TEST(test_devices_1_2_4_8) {
  static double one[ROWS];
  int ns[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; i++) {
    mgpu_report rep;
    terr e;
    reset(ns[i]);
    CHECK(run(7, &rep, &e) == 0);
    check_rows();
    CHECK(rep.lanes == ns[i]);
    CHECK(rep.dev[0] == 0);
    int64_t rows = 0, blocks = 0;
    for (int k = 0; k < rep.lanes; k++) {
      rows += rep.rows[k];
      blocks += rep.blocks[k];
      CHECK(!rep.failed[k] && !rep.taken_back[k]);
    }
    CHECK(rows == ROWS && blocks == (ROWS + 6) / 7 && rep.nblocks == blocks);
    if (i == 0) memcpy(one, out, sizeof one);
    CHECK(memcmp(one, out, sizeof one) == 0); /* the same bytes */
    char buf[200];
    mgpu_describe(&rep, buf, sizeof buf);
    CHECK(strncmp(buf, "cuda:0", 6) == 0);
  }
}

TEST(test_busy_device_not_used) {
  mgpu_report rep;
  terr e;
  reset(4);
  atomic_store(&sync_start, 0); /* three devices only enter */
  pthread_mutex_lock(&dev_mu[2]); /* another job's */
  CHECK(run(10, &rep, &e) == 0);
  pthread_mutex_unlock(&dev_mu[2]);
  check_rows();
  CHECK(rep.lanes == 3);
  for (int k = 0; k < rep.lanes; k++) CHECK(rep.dev[k] != 2);
  CHECK(atomic_load(&dev_blocks[2]) == 0);
}

TEST(test_device_fails_mid_job) {
  mgpu_report rep;
  terr e;
  reset(4);
  atomic_store(&fail_dev, 2);
  atomic_store(&fail_after, 0); /* its first block fails, half written */
  CHECK(run(5, &rep, &e) == 0);
  check_rows(); /* the torn rows written again, whole, by another lane */
  /* two deep: the three it primed go back */
  CHECK(rep.retried == (deep ? 3 : 1) && rep.lanes == 4);
  int seen = 0;
  for (int k = 0; k < rep.lanes; k++)
    if (rep.dev[k] == 2) {
      seen = 1;
      CHECK(rep.failed[k] && rep.blocks[k] == 0 && rep.rows[k] == 0);
    }
  CHECK(seen);
  /* the own device failing: the borrowed ones finish */
  reset(2);
  atomic_store(&fail_dev, 0);
  atomic_store(&fail_after, 0);
  CHECK(run(5, &rep, &e) == 0);
  check_rows();
  CHECK(rep.failed[0] && rep.rows[0] == 0 && rep.rows[1] == ROWS);
}

TEST(test_every_device_fails) {
  mgpu_report rep;
  terr e;
  reset(1); /* one device: nobody to hand the block to */
  atomic_store(&fail_dev, 0);
  atomic_store(&fail_after, 3);
  CHECK(run(5, &rep, &e) == T_EDEVICE);
  CHECK(e.code == T_EDEVICE && strstr(e.message, "fake device 0"));
}

TEST(test_other_error_ends_all) {
  mgpu_report rep;
  terr e;
  reset(4);
  atomic_store(&fail_dev, 1);
  atomic_store(&fail_code, T_ENOMEM);
  CHECK(run(5, &rep, &e) == T_ENOMEM);
  CHECK(e.code == T_ENOMEM && rep.retried == 0);
  int64_t rows = 0;
  for (int k = 0; k < rep.lanes; k++) rows += rep.rows[k];
  CHECK(rows < ROWS);
}

static void *waiter(void *arg) {
  int dev = *(int *)arg;
  while (!fk_wanted(NULL, dev)) sched_yield();
  pthread_mutex_lock(&dev_mu[dev]); /* the GPU worker's blocking lock */
  atomic_store(&waiter_got, 1);
  pthread_mutex_unlock(&dev_mu[dev]);
  return NULL;
}

TEST(test_wanted_device_given_back) {
  mgpu_report rep;
  terr e;
  reset(4);
  int dev = 3;
  atomic_store(&want_dev, dev);
  atomic_store(&want_after, 20);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, waiter, &dev) == 0);
  CHECK(run(5, &rep, &e) == 0);
  pthread_join(th, NULL);
  check_rows(); /* the others wrote what lane 3 left */
  CHECK(atomic_load(&waiter_got) == 1 && rep.lanes == 4);
  for (int k = 0; k < rep.lanes; k++)
    CHECK(rep.taken_back[k] == (rep.dev[k] == dev));
}

TEST(test_stop) {
  mgpu_report rep;
  terr e;
  reset(4);
  atomic_store(&stop_after, 10);
  CHECK(run(5, &rep, &e) == T_ECANCELED);
  CHECK(e.code == T_ECANCELED);
}

TEST(test_bad_arguments) {
  mgpu_lend l = {0};
  mgpu_ops ops = {.u = NULL, .block = fk_block};
  terr e;
  CHECK(mgpu_run(0, 10, 0, 0, &l, &ops, NULL, &e) == T_EINVAL);
  CHECK(mgpu_run(0, -1, 5, 0, &l, &ops, NULL, &e) == T_EINVAL);
  /* no rows: nothing to do, no lane needed */
  CHECK(mgpu_run(0, 0, 5, 0, &l, &ops, NULL, &e) == 0);
}

/* The lane session only: a device failing in a launch (with a block in
 * hand) or in lane_begin; the prepared shares cover every open lane. */
TEST(test_session_failures) {
  mgpu_report rep;
  terr e;
  char buf[200];
  reset(4);
  atomic_store(&fail_launch_dev, 1);
  CHECK(run(5, &rep, &e) == 0);
  check_rows(); /* what lane 1 held was written by the others */
  CHECK(rep.retried == 2 && atomic_load(&dev_blocks[1]) == 0);
  CHECK(atomic_load(&rank_mask) == 0xF && atomic_load(&nlive_seen) == 4);
  for (int k = 0; k < rep.lanes; k++)
    CHECK_MSG(rep.failed[k] == (rep.dev[k] == 1), "lane %d dev %d failed %d blocks %lld", k, rep.dev[k], rep.failed[k], (long long)rep.blocks[k]);
  reset(4);
  atomic_store(&fail_begin_dev, 2); /* lane 2 never opens */
  atomic_store(&sync_start, 0);      /* nor enters a block */
  CHECK(run(5, &rep, &e) == 0);
  check_rows();
  CHECK(atomic_load(&nlive_seen) == 3 && atomic_load(&rank_mask) == 0x7);
  CHECK(atomic_load(&dev_blocks[2]) == 0);
  mgpu_describe(&rep, buf, sizeof buf);
  CHECK_MSG(strstr(buf, "2:0 failed") && strstr(buf, "2 deep, 3 primed"),
            "%s", buf);
  reset(2);
  atomic_store(&fail_begin_dev, 1);
  atomic_store(&sync_start, 0);
  atomic_store(&fail_code, T_ENOMEM); /* not a device error: the job's */
  CHECK(run(5, &rep, &e) == T_ENOMEM);
  CHECK(e.code == T_ENOMEM && strstr(e.message, "to open"));
}

/* Many runs of random shape: 1-8 devices, blocks of 1-60 rows, prime
 * 0-8, and one of: nothing wrong, a device failing in a block, in a
 * launch or in lane_begin, a stop. Whole rows, or the error it must be. */
TEST(test_random_sessions) {
  uint64_t s = 0x2545F4914F6CDD1DULL;
#define RND() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
  for (int it = 0; it < 300; it++) {
    mgpu_report rep;
    terr e;
    int nd = 1 + (int)(RND() % NDEV), what = (int)(RND() % 5);
    int dev = (int)(RND() % (uint64_t)nd);
    int64_t block = 1 + (int64_t)(RND() % 60);
    reset(nd);
    atomic_store(&sync_start, 0);
    prime_ask = (int)(RND() % 9);
    fail_launch_at = 1 + (int)(RND() % 3);
    fold = (int)(RND() % 2);
    if (what == 1) {
      atomic_store(&fail_dev, dev);
      atomic_store(&fail_after, (int)(RND() % 4));
    } else if (what == 2) {
      atomic_store(&fail_launch_dev, dev);
    } else if (what == 3) {
      atomic_store(&fail_begin_dev, dev);
    } else if (what == 4) {
      atomic_store(&stop_after, 1 + (int)(RND() % 40));
    }
    int rc = run(block, &rep, &e);
    int all_failed = rep.lanes > 0;
    for (int k = 0; k < rep.lanes; k++) all_failed &= rep.failed[k];
    if (rc == 0)
      check_rows();
    else
      CHECK_MSG((what == 4 && rc == T_ECANCELED) ||
                    (rc == T_EDEVICE && all_failed && nd == 1),
                "run %d: rc %d (%s), devices %d, case %d", it, rc,
                e.message, nd, what);
  }
#undef RND
  prime_ask = 3;
  fail_launch_at = 2;
  fold = 0;
}

/* mgpu_fold: a permutation of every block count up to 200, both ends in
 * turn; and one lane (one device, one block at a time) takes its blocks
 * in that order. */
static int64_t order[ROWS];
static int norder;
static int fk_block_order(void *u, int lane, int dev, int64_t r0, int64_t r1,
                          terr *e) {
  order[norder++] = r0;
  return fk_block(u, lane, dev, r0, r1, e);
}

TEST(test_fold) {
  for (int64_t nb = 1; nb <= 200; nb++) {
    static char seen[200];
    memset(seen, 0, sizeof seen);
    for (int64_t t = 0; t < nb; t++) {
      int64_t b = mgpu_fold(t, nb);
      CHECK_MSG(b >= 0 && b < nb && !seen[b], "nb %lld t %lld -> %lld",
                (long long)nb, (long long)t, (long long)b);
      if (b >= 0 && b < nb) seen[b] = 1;
    }
    CHECK(mgpu_fold(0, nb) == 0 && (nb < 2 || mgpu_fold(1, nb) == nb - 1));
  }
  reset(1);
  norder = 0;
  deep = 0; /* block alone: no launches to check against */
  mgpu_lend l = {NULL, 1, fk_borrow, fk_give_back, NULL, fk_stopped, NULL};
  mgpu_ops ops = {.u = NULL, .block = fk_block_order, .fold = 1};
  terr e;
  CHECK(fk_borrow(NULL, 0) == 0);
  CHECK(mgpu_run(0, ROWS, 100, 0, &l, &ops, NULL, &e) == 0);
  fk_give_back(NULL, 0);
  int64_t want[10] = {0, 900, 100, 800, 200, 700, 300, 600, 400, 500};
  CHECK(norder == 10);
  for (int k = 0; k < norder && k < 10; k++)
    CHECK_MSG(order[k] == want[k], "block %d at row %lld", k,
              (long long)order[k]);
  check_rows();
  CHECK(atomic_load(&bad_thread) == 0);
  deep = 1;
}

TEST(test_lanes_switch) {
  setenv("TESSEL_GPU_LANES", "0", 1);
  CHECK(geod_mgpu_switch() == 0);
  setenv("TESSEL_GPU_LANES", "1", 1);
  CHECK(geod_mgpu_switch() == 1);
  unsetenv("TESSEL_GPU_LANES");
  int dflt = geod_mgpu_switch();
  CHECK(dflt == 0 || dflt == 1);
  setenv("TESSEL_GPU_LANES", "yes", 1); /* not a switch: the default */
  CHECK(geod_mgpu_switch() == dflt);
  unsetenv("TESSEL_GPU_LANES");
}

int main(void) {
  fake_devs_init();
  for (deep = 0; deep < 2; deep++) {
    printf("-- %s\n", deep ? "lane session, two deep" : "block alone");
    RUN(test_devices_1_2_4_8);
    RUN(test_busy_device_not_used);
    RUN(test_device_fails_mid_job);
    RUN(test_every_device_fails);
    RUN(test_other_error_ends_all);
    RUN(test_wanted_device_given_back);
    RUN(test_stop);
    RUN(test_bad_arguments);
  }
  deep = 1;
  RUN(test_session_failures);
  RUN(test_random_sessions);
  RUN(test_lanes_switch);
  RUN(test_fold);
  return check_summary();
}
