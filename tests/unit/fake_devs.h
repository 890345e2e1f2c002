/* fake_devs.h — the fake devices of the multi-GPU tests (test_mgpu.c,
 * test_map_lanes.c, test_reduce_lanes.c): a device is a mutex that a lane
 * thread borrows (trylock: busy when another holds it) and gives back on
 * the same thread; a give-back from another thread, or a lane working on a
 * device its thread does not hold, bumps the includer's counter.
 *
 * Before including, the includer defines NDEV (the devices), FAKE_DEV_BAD
 * (its atomic_int of wrong-thread events) and FAKE_DEV_DONE (its atomic_int
 * of blocks done, for fk_stopped), and declares those counters and
 * stop_after (fk_stopped: T_ECANCELED once FAKE_DEV_DONE reaches a
 * positive stop_after). Also the report's lane of a device (slot_of).
 * Static functions: each test uses a subset.
 */
#ifndef TESSEL_TESTS_FAKE_DEVS_H
#define TESSEL_TESTS_FAKE_DEVS_H
#pragma GCC diagnostic ignored "-Wunused-function"

#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "compute/kinds/mgpu.h"
#include "util/err.h"

static pthread_mutex_t dev_mu[NDEV];
static pthread_t dev_owner[NDEV];
static atomic_int dev_held[NDEV];

static void fake_devs_init(void) {
  for (int d = 0; d < NDEV; d++) pthread_mutex_init(&dev_mu[d], NULL);
}

static int fk_borrow(void *c, int dev) {
  (void)c;
  if (pthread_mutex_trylock(&dev_mu[dev]) != 0) return -1;
  dev_owner[dev] = pthread_self();
  atomic_store(&dev_held[dev], 1);
  return 0;
}
static void fk_give_back(void *c, int dev) {
  (void)c;
  if (!pthread_equal(dev_owner[dev], pthread_self()))
    atomic_fetch_add(&FAKE_DEV_BAD, 1);
  atomic_store(&dev_held[dev], 0);
  pthread_mutex_unlock(&dev_mu[dev]);
}
static int fk_stopped(void *c) {
  (void)c;
  int s = atomic_load(&stop_after);
  return s > 0 && atomic_load(&FAKE_DEV_DONE) >= s ? T_ECANCELED : 0;
}

/* Device dev borrowed, by this thread. */
static int fk_held_here(int dev) {
  return atomic_load(&dev_held[dev]) &&
         pthread_equal(dev_owner[dev], pthread_self());
}

/* A lane session's call on its own thread (the one that opened it) and,
 * on a lent device, with the device held; else FAKE_DEV_BAD. The own
 * device (0) is the caller's: not a fake mutex. */
static void fk_check_lane(pthread_t opener, int dev) {
  if (!pthread_equal(opener, pthread_self())) atomic_fetch_add(&FAKE_DEV_BAD, 1);
  if (dev > 0 && !fk_held_here(dev)) atomic_fetch_add(&FAKE_DEV_BAD, 1);
}

/* Every lent device free (after a run: each given back). */
static void all_free(const char *what) {
  for (int d = 1; d < NDEV; d++) {
    CHECK_MSG(pthread_mutex_trylock(&dev_mu[d]) == 0, "%s: device %d held",
              what, d);
    pthread_mutex_unlock(&dev_mu[d]);
  }
}

/* The report's lane of device dev (MGPU_MAX - 1 when none ran on it). */
static int slot_of(const mgpu_report *rep, int dev) {
  for (int k = 0; k < rep->lanes; k++)
    if (rep->dev[k] == dev) return k;
  return MGPU_MAX - 1;
}

#endif
