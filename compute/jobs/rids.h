/* compute/jobs/rids.h — idempotency keys (owner, request_id) whose insert
 * is in flight: what lets an idempotent ?wait submit ride the store's
 * [async] insert (store_job_insert_async) instead of its own commit.
 *
 * An [async] insert of a key is safe only when no other row of that key is
 * committed (the submit reads the store first: store_job_by_request) or
 * on its way to the store (this table). So every insert of a key, of any
 * kind, is known here while it is in flight:
 *   - an [async] one claims the key (rids_claim: refused when anything of
 *     the key is here), reads the store, and either finds the key's job
 *     (rids_unclaim) or queues its insert (rids_queued: stamped, and kept
 *     until an insert queued no earlier is known committed) and its job
 *     (rids_enqueued);
 *   - a [sync] one (a lone submit, a batch item) holds the key while its
 *     insert runs (rids_hold ... rids_release). A hold waits only while a
 *     claim is still reading the store and queueing its job (one read and
 *     two queue pushes), then, when the claim's insert is queued and not
 *     known committed, commits it (one store_sync: the store may move a
 *     queued insert to its job's end, a finish taking it over, so the row
 *     is where the queue put it only once committed); its own insert then
 *     finds that row (the same job, or 409), or the store had the key and
 *     the claim is gone. No submit waits longer than one commit.
 * Stamps say which [async] inserts are known committed: a stamp is given
 * once the insert is queued, rids_mark reads the latest before a [sync]
 * write is queued, and once that write returns every insert stamped at or
 * below the mark is committed or has failed (store.h: writes commit in the
 * order they were queued): rids_committed drops those entries, oldest
 * first (a list in stamp order). The SQLite store may hold an [async]
 * insert back past later commits (db/sqlite/store_fold.c) until its job
 * ends: such an entry is still watched, so it stays (busy) however it is
 * swept, and the [sync] insert of a hold is a barrier that commits every
 * [async] insert queued before it, so it finds that row.
 *
 * Bounded: at most `max` keys claimed or queued (rids_claim answers NULL
 * beyond: that submit takes the [sync] path); holds are bounded by the
 * inserts in flight, one per HTTP thread or batch item being inserted.
 *
 * Threads: any; one mutex guards the table, held only for a hash lookup
 * and a few pointer moves (a hold's wait releases it).
 */
#ifndef TESSEL_JOBS_RIDS_H
#define TESSEL_JOBS_RIDS_H

#include <stdint.h>

typedef struct jobs_rids jobs_rids;
typedef struct rids_entry rids_entry;

#define RIDS_MAX_DEFAULT 4096

/* A table of at most max claimed or queued keys (0: RIDS_MAX_DEFAULT);
 * NULL when out of memory. rids_free: NULL ok; no call may be running. */
jobs_rids *rids_new(int max);
void rids_free(jobs_rids *t);

/* The [async] path: the key for this submit's insert alone, or NULL when
 * the key is busy (claimed, queued, or held), the table is full, or out of
 * memory: then take the [sync] path (rids_hold). */
rids_entry *rids_claim(jobs_rids *t, const char *owner, const char *rid);
/* The claim's insert is queued: the entry stays, stamped, until
 * rids_committed covers the returned stamp, and (the key kept busy for a
 * claim) until its job's end is reported once by rids_ended. */
uint64_t rids_queued(jobs_rids *t, rids_entry *en);
/* The claim's job is in the scheduler's queue (after rids_queued, which
 * must come first: the job's end is queued after its stamp): holds of the
 * key stop waiting, and a submit that finds the job also finds it queued
 * (a ?wait then waits for its end). Call it also when the enqueue
 * failed. */
void rids_enqueued(rids_entry *en);
/* The job of a queued claim ended: committed 1 when its end is known
 * committed (then so is its insert, and every insert stamped before it),
 * 0 when that is not known (a later rids_committed covers the insert).
 * Called exactly once per rids_queued; no lock of the caller's needed
 * (the store's writer thread may call it). */
void rids_ended(rids_entry *en, int committed);
/* The claim ends with no insert queued (the store had the key, or the
 * insert could not be queued): the key is free again. */
void rids_unclaim(jobs_rids *t, rids_entry *en);

/* The [sync] path: hold the key while this submit's insert runs; waits
 * while a claim of the key reads the store. *queued: 1 when the key's
 * [async] insert is queued and not known committed (then commit it before
 * this insert: jobs_sync). NULL: out of memory. */
rids_entry *rids_hold(jobs_rids *t, const char *owner, const char *rid,
                      int *queued);
void rids_release(jobs_rids *t, rids_entry *en);

/* The latest stamp: read before a [sync] store write is queued, given to
 * rids_committed once it returned. */
uint64_t rids_mark(jobs_rids *t);
/* Every insert stamped <= upto is committed (or failed): their keys leave
 * the table unless a [sync] insert holds them. */
void rids_committed(jobs_rids *t, uint64_t upto);

/* What the table holds (tests, figures): keys, and of them claimed or
 * queued. */
void rids_count(jobs_rids *t, int *keys, int *async);

#endif
