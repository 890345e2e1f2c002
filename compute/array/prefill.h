/* prefill.h — a parts upload's mapping populated ahead of its parts by
 * threads of its own (prefill.c has the why and the measurements).
 *
 * prefill_new(base, len) for a MAP_SHARED mapping [base, base + len) of a
 * file whose blocks are allocated; NULL when prefilling is off (fewer than
 * 4 CPUs, or TESSEL_PARTS_PREFILL=0) or memory is short: callers then go
 * on without it. prefill_range(p, off, n): a part will write [off, off+n)
 * — its pages are made present by up to prefill's threads, started as
 * needed; they exit when nothing is left. prefill_free(p): stops the
 * threads, waits for them (none touches the mapping after it returns) and
 * frees; call before the mapping goes. Never changes a byte of the file.
 *
 * Threads: prefill_range and prefill_free from any thread (one free).
 */
#ifndef TESSEL_PREFILL_H
#define TESSEL_PREFILL_H

#include <stddef.h>
#include <stdint.h>

typedef struct prefill prefill;

prefill *prefill_new(char *base, size_t len);
void prefill_range(prefill *p, uint64_t off, uint64_t n);
void prefill_free(prefill *p);
int prefill_threads(void); /* the threads a prefill may use; 0: off */

#endif
