/* wbehind.h — a stream of bytes written into a file behind its producer.
 *
 * An upload's bytes arrive in pieces of tens of KiB on the HTTP thread;
 * writing each with pwrite there puts the page-cache copy (and a syscall per
 * piece) between two reads of the socket. A wbehind takes the pieces into a
 * few large buffers and a thread of its own writes them, so the socket is
 * read while the previous megabytes go into the page cache. wbehind.c says
 * why and what it measured.
 *
 * Ownership: the fd stays the caller's (not closed here); wbehind_finish and
 * wbehind_abort free the wbehind. Threads: one producer (any thread, the
 * same one for every call) and the wbehind's own writer thread.

 *
 * Below it, the other helper threads of an upload's writes: prefill, a
 * parts upload's mapping populated ahead of its parts.
 */
#ifndef TESSEL_ARRAY_WBEHIND_H
#define TESSEL_ARRAY_WBEHIND_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct wbehind wbehind;

/* Streams below this many bytes are not worth a thread: write them as they
 * come (the caller's pwrite). */
#define WBEHIND_MIN ((uint64_t)32 << 20)
#define WBEHIND_BUFS 4
#define WBEHIND_BUF ((size_t)1 << 20) /* so 4 MiB of buffers per stream */

/* 1 when a write-behind thread pays on this machine: 4 or more CPUs
 * online. On 2 cores the thread competes with the HTTP thread and the
 * client for the same cores and its extra copy (piece -> buffer) costs more
 * than the overlap gives: with the 256 KiB pieces MHD reads now
 * (server/daemon.c), writing each piece straight from MHD's buffer into the
 * file (one copy: the page cache's) ran at 1.1-1.5x a plain sink where the
 * write-behind ran at 0.6x (tests/bench/bench_upload.py, 2-core VM). The
 * 16-core machine's gain (wbehind.c) is kept there. */
int wbehind_worth(void);

/* Write the next `total` bytes of the stream at fd offsets base, base+1, ...
 * T_ENOMEM when the buffers or the thread cannot be had. */
int wbehind_open(int fd, uint64_t base, uint64_t total, wbehind **out,
                 terr *e);
/* Append n bytes (copied; p may be reused at once). Fails with the first
 * write error the writer met (T_EIO, or T_ENOSPACE for a full disk), or
 * T_EINTERNAL past `total`. */
int wbehind_write(wbehind *w, const void *p, size_t n, terr *e);
/* Write what is buffered, wait for the writer, free: 0 or the first write
 * error's errno. */
int wbehind_finish(wbehind *w);
/* Stop (what is buffered may or may not be written), wait, free. NULL ok. */
void wbehind_abort(wbehind *w);

/* ---- prefill: a parts upload's mapping populated ahead of its parts by
 * threads of its own (wbehind.c's second half has the why and the
 * measurements).
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
typedef struct prefill prefill;

prefill *prefill_new(char *base, size_t len);
void prefill_range(prefill *p, uint64_t off, uint64_t n);
void prefill_free(prefill *p);
int prefill_threads(void); /* the threads a prefill may use; 0: off */

#endif
