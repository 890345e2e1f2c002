/* test_xfer.c — the transfer memory budget (util/xfer.c): limits, the
 * default, and that threads racing for it never take it over the limit. */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "util/xfer.h"

TEST(limits) {
  xfer_budget_set(1000);
  CHECK(xfer_budget_limit() == 1000);
  CHECK(xfer_fits(1000) && !xfer_fits(1001));
  CHECK(xfer_reserve(600));
  CHECK(!xfer_reserve(401)); /* over: refused, nothing taken */
  CHECK(xfer_budget_used() == 600);
  CHECK(xfer_reserve(400));
  CHECK(!xfer_reserve(1));
  CHECK(xfer_reserve(0)); /* nothing asked: always granted */
  xfer_release(600);
  xfer_release(400);
  CHECK(xfer_budget_used() == 0);
  CHECK(!xfer_reserve(1001)); /* never fits */
  CHECK(xfer_budget_used() == 0);
}

TEST(default_is_half_of_memory) {
  xfer_budget_set(0);
  int64_t lim = xfer_budget_limit();
  /* Half of RAM (or of a cgroup limit): some MiB, not everything. */
  CHECK(lim >= ((int64_t)1 << 20) && lim < INT64_MAX / 2);
}

static atomic_long over_limit;

static void *racer(void *arg) {
  (void)arg;
  for (int i = 0; i < 200000; i++) {
    if (xfer_reserve(7)) {
      if (xfer_budget_used() > 100) atomic_fetch_add(&over_limit, 1);
      xfer_release(7);
    }
  }
  return NULL;
}

TEST(threads_never_overrun) {
  xfer_budget_set(100);
  pthread_t t[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, racer, NULL);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  CHECK(atomic_load(&over_limit) == 0);
  CHECK(xfer_budget_used() == 0);
}

int main(void) {
  RUN(limits);
  RUN(default_is_half_of_memory);
  RUN(threads_never_overrun);
  return check_summary();
}
