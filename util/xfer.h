/* xfer.h — one budget for the memory that transfers may hold at once.
 *
 * Everything that moves data through HTTP and holds memory for it while
 * it does (a collected request body, the buffers of a streamed download)
 * reserves its bytes here first and gives them back when it is done.
 * (Uploads are streamed into their files and hold a small constant each:
 * they reserve nothing.) The budget is a single process-wide count (an atomic, no lock):
 * a reservation that would take the total over the limit fails at once and
 * the caller answers 503 with Retry-After (or 413 when the request could
 * never fit, xfer_fits). The limit is set once at start-up
 * (--max-transfer-memory); 0 there means "half of the memory this process
 * may use" (the smaller of physical RAM and the cgroup v2 limit).
 *
 * Threads: every function may be called from any thread.
 */
#ifndef TESSEL_UTIL_XFER_H
#define TESSEL_UTIL_XFER_H

#include <stdint.h>

/* Set the limit in bytes (before serving); <= 0: the default above. */
void xfer_budget_set(int64_t bytes);
/* The limit in effect, bytes. */
int64_t xfer_budget_limit(void);
/* Bytes reserved now (for /metrics and tests). */
int64_t xfer_budget_used(void);
/* 1 when a request of `bytes` could ever be reserved (bytes <= limit). */
int xfer_fits(int64_t bytes);
/* Reserve bytes: 1 when reserved (give them back with xfer_release),
 * 0 when the budget cannot take them now. bytes <= 0 always succeeds. */
int xfer_reserve(int64_t bytes);
void xfer_release(int64_t bytes);
/* Seconds a refused client should wait before trying again. */
#define XFER_RETRY_AFTER_S "1"

#endif
