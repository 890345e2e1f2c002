/* xfer.c — the transfer memory budget (see xfer.h).
 *
 * `used` only grows by compare-and-swap below the limit, so concurrent
 * reservations can never take it over; releases subtract. The default
 * limit is half of what the process may use: physical RAM, or the cgroup
 * v2 memory.max of the process when that is lower (a container).
 */
#include "util/xfer.h"

#include <assert.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/util.h"

static _Atomic int64_t limit_bytes = INT64_MAX;
static _Atomic int64_t used_bytes;

/* The memory this process may use, bytes (0 when unknown). */
static int64_t memory_available(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  int64_t ram = pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (f) {
    char line[64];
    int64_t cg = 0;
    if (fgets(line, sizeof line, f)) {
      for (char *p = line; *p; p++)
        if (*p == '\n') *p = 0;
      if (t_parse_i64(line, &cg) == 0 && cg > 0 && (ram == 0 || cg < ram))
        ram = cg; /* "max" (no limit) does not parse and is ignored */
    }
    fclose(f);
  }
  return ram;
}

void xfer_budget_set(int64_t bytes) {
  if (bytes <= 0) {
    int64_t avail = memory_available();
    bytes = avail > 0 ? avail / 2 : (int64_t)4 << 30;
  }
  atomic_store(&limit_bytes, bytes);
}

int64_t xfer_budget_limit(void) { return atomic_load(&limit_bytes); }

int64_t xfer_budget_used(void) { return atomic_load(&used_bytes); }

int xfer_fits(int64_t bytes) { return bytes <= atomic_load(&limit_bytes); }

int xfer_reserve(int64_t bytes) {
  if (bytes <= 0) return 1;
  int64_t lim = atomic_load(&limit_bytes);
  int64_t cur = atomic_load(&used_bytes);
  do {
    if (bytes > lim - cur) return 0;
  } while (!atomic_compare_exchange_weak(&used_bytes, &cur, cur + bytes));
  return 1;
}

void xfer_release(int64_t bytes) {
  if (bytes <= 0) return;
  int64_t before = atomic_fetch_sub(&used_bytes, bytes);
  /* Debug builds: nothing is released that was not reserved. */
  assert(before >= bytes);
  (void)before;
}
