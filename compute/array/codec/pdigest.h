/* pdigest.h — the content digest of an upload in parts, taken in file
 * order while its parts arrive out of order.
 *
 * An array's id comes from the XXH3-128 of its bytes in file order (the
 * same digest a one-stream upload takes on the way), and a streaming hash
 * cannot be taken in pieces and joined. Parts sent at once land side by
 * side, so only the part at the hashed front can be hashed as it comes;
 * the rest used to be read back and hashed at complete, one thread over
 * the whole file after the last byte (issue 25: 800 MB in 8 parts on the
 * H200 host, the parts in 0.12 s and complete 0.10-0.11 s more). Here the
 * front is followed while the parts arrive:
 *
 *   - every part is a slot: its range [off, end) and the bytes written
 *     from its front (pieces of a part come in order, on one thread);
 *   - a piece that starts exactly at the hashed front is hashed by its
 *     writer as it is written, hot in cache (all of a one-stream upload);
 *   - where the data is mapped (the parts upload's MAP_SHARED file), a
 *     chaser thread hashes from the mapping whatever is written
 *     contiguously past the front: the rest of the parts before the one
 *     being received at the front, as soon as the part before them ends.
 *
 * At complete only what is still past the front is left (pdigest_finish
 * says where it is). A part that fails after some of its bytes went into
 * the digest (it may be sent again with other bytes) starts the digest
 * over from byte 0: slots of the parts already in stay, so the chaser
 * hashes them again.
 *
 * Threads: every call from any thread; one mutex guards the slots, the
 * digest state and the front. The chaser hashes outside the mutex with
 * `chasing` set, and nobody else touches the digest state then (a writer
 * at the front waits for it; a reset waits for it). The chaser polls at
 * 1 ms while a part is in flight (a front that moves as pieces land would
 * otherwise need a wake per piece) and sleeps untimed when none is.
 */
#ifndef TESSEL_ARRAY_PDIGEST_H
#define TESSEL_ARRAY_PDIGEST_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

typedef struct pdigest pdigest;

/* h: the digest state (the caller's, reset; used only through this until
 * pdigest_finish). data: the data's mapping (byte 0 = data byte 0), or
 * NULL: no chaser (only pieces at the front are hashed as they come).
 * bytes: the data's size. chase: 0 never starts the chaser. NULL: out of
 * memory. */
pdigest *pdigest_new(XXH3_state_t *h, const char *data, uint64_t bytes,
                     int chase);
/* A part [off, off + n) begins; its slot (>= 0), or -1 when the table is
 * full (the part is then hashed at complete). */
int pdigest_begin(pdigest *d, uint64_t off, uint64_t n);
/* n bytes at data offset off were written into the file (p: those bytes,
 * hot) by slot's part; off must be where the slot's written bytes end.
 * Returns 1 when they went into the digest now. slot -1: not tracked. */
int pdigest_wrote(pdigest *d, int slot, uint64_t off, const void *p,
                  size_t n);
/* The part ends: whole (failed 0) or not. A failed part whose bytes are
 * in the digest resets it to byte 0. */
void pdigest_end(pdigest *d, int slot, int failed);
/* Stop the chaser; the data bytes [0, returned) are in h, in order.
 * After this only pdigest_free. */
uint64_t pdigest_finish(pdigest *d);
/* The bytes in the digest now (tests, debug lines). */
uint64_t pdigest_front(pdigest *d);
void pdigest_free(pdigest *d); /* finishes first if not yet; NULL ok */

/* 1 when a chaser thread pays on this machine: 4 or more CPUs online;
 * TESSEL_PARTS_CHASE=0 / =1 says no / yes anywhere (to compare, and for
 * the tests on small machines). */
int pdigest_chase_worth(void);

#endif
