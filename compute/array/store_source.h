/* compute/array/store_source.h — a tenv (where uploaded arrays come from) backed by the store.
 *
 * The API builds one at submit (arrayval_check -> array_meta) and the
 * scheduler at prepare (arrayval_resolve -> array_load). Both callbacks look
 * the array up with store_array_get under the job's owner, so an array of
 * another owner is "not found" (T_ENOTFOUND), exactly like an unknown id.
 *
 * Threads: the callbacks may be called from any thread (the store gives
 * each thread its own read connection). The env holds no lock and nothing
 * to free; it borrows `st` and `owner`, which must outlive it.
 */
#ifndef TESSEL_ARRAY_STORE_SOURCE_H
#define TESSEL_ARRAY_STORE_SOURCE_H

#include <stdint.h>

#include "compute/array/tarray.h"

#include "compute/array/arrayval.h"
#include "db/store.h"

/* Fill env: ud = st, owner = owner ("" when open), max_elems caps every
 * array's element count (T_ETOOLARGE beyond; <= 0: no cap). */
void tenv_from_store(tenv *env, store *st, const char *owner,
                     int64_t max_elems);

/* ---- arrays kept mapped between jobs (arrcache) ----------------------
 *
 * A job that reads an uploaded array ({"array": "a_..."}) used to read the
 * array's row from the store, open its .npy file, map it, check it, and
 * unmap it at the job's end: for the seeds' 100 sums over 80 KB arrays on
 * 2 cores ~140 of the ~170 µs a job cost its worker (uprobes; most of it
 * the store read and the munmap, a TLB shootdown on every core; see
 * tests/bench/results/gang-2core-2026-11-29.md). An uploaded array never
 * changes (its file is written whole under a temporary name and renamed;
 * new bytes are a new id), so the mapping a job loaded is kept, keyed by
 * (store, owner, id): the next job, and the next submit's check
 * (array_meta), read it from here: no store read, no open, no map, no unmap.
 *
 * Why a kept array is still there when a job reads it: the store refuses
 * to delete (409) or expire an array a queued or running job names, and a
 * job that names one is inserted only after the store found it, in the
 * insert's own transaction (compute/jobs/submit.c, refs_stored): a check
 * answered from here is checked again there. The drop on a delete or an
 * expiry (compute/jobs/lifecycle.c, arrcache_drop, after the row is gone)
 * keeps it so for any later reader and gives the deleted file's blocks
 * back: the mapping is unmapped when the last job reading it lets go.
 * A load that read the row before a drop and offers its mapping after it
 * would put back what was dropped: each drop moves a generation on, and
 * arrcache_adopt keeps nothing offered under an older generation than the
 * one taken before the store read (arrcache_gen). On a cluster store
 * another node may delete the array: store_source.c keeps nothing there.
 * The files are the daemon's own, in its locked data directory (not a
 * neighbour's same-host file, which is guarded, localfile.h): a kept
 * mapping is exposed to a truncation by the daemon's own user as a job's
 * mapping always was, only for longer.
 *
 * Bounds: arrays of at most ARRCACHE_ONE_MAX bytes, ARRCACHE_TOTAL_MAX
 * bytes and ARRCACHE_ENTRIES_MAX entries in all (the least recently used
 * leave first; one a job still reads stays mapped until it lets go);
 * TESSEL_ARRAY_CACHE_MB=N sets the total, 0 turns the cache off. Entries
 * name their store by address: the daemon has one store for its life
 * (arrcache_clear empties the table, for tests).
 *
 * Threads: any; one mutex, held only for the table's own work (never
 * across a store read, a map or an unmap).
 */

#define ARRCACHE_ONE_MAX ((size_t)1 << 20)
#define ARRCACHE_TOTAL_MAX ((size_t)64 << 20)
#define ARRCACHE_ENTRIES_MAX 8192

/* 1 and a view of the kept array in *out (the caller frees it with
 * tarray_free: that lets go of the entry, never unmapping it while the
 * cache keeps it); 0 when not kept (*out NULL). */
int arrcache_get(const void *st, const char *owner, const char *id,
                 tarray **out);

/* 1 and the kept array's dtype and shape; 0 when not kept. */
int arrcache_meta(const void *st, const char *owner, const char *id,
                  tdtype *dt, int *ndim, int64_t *shape);

/* The generation to pass to arrcache_adopt: take it before the store read
 * that finds the array. */
uint64_t arrcache_gen(void);

/* Offer a mapped array just loaded from the store under gen. Returns what
 * the caller holds from now on: a view of the kept entry (the cache took
 * `a`), or `a` itself when it is not kept (too big, not a file mapping,
 * the cache off, the same entry kept already, a drop since gen). Never
 * NULL. */
tarray *arrcache_adopt(const void *st, const char *owner, const char *id,
                       uint64_t gen, tarray *a);

/* The array id is gone (deleted or expired): every entry of it leaves the
 * table now (whatever its store or owner). */
void arrcache_drop(const char *id);

/* Every entry leaves (a test between cases). */
void arrcache_clear(void);

/* What the cache holds now: entries and bytes (tests). */
void arrcache_stats(int *entries, size_t *bytes);

#endif
