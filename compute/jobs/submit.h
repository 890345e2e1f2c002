/* compute/jobs/submit.h — jobs_submit in two halves around the store's
 * insert, for a caller that inserts many rows in one transaction
 * (batch.c: store_insert_jobs, one transaction per chunk of a batch).
 *
 * jobs_submit_prepare runs the protocol of sched.h up to the insert: the
 * envelope, the check, the queue slot, the row (and the regions it names).
 * The caller then inserts p->row by any store call and hands the outcome
 * to jobs_submit_inserted, which enqueues the job or gives the slot back
 * (a failed insert, or a request_id's earlier job): every prepared job goes
 * through it exactly once. A prepared job with a request_id holds its key
 * in J->rids (rids.h) from the prepare to jobs_submit_inserted: the insert
 * between them must be the store's [sync] one (store_job_insert or
 * store_insert_jobs). Private to compute/jobs/.
 *
 * Threads: an HTTP thread (the caller's); no lock is held here.
 */
#ifndef TESSEL_JOBS_SUBMIT_H
#define TESSEL_JOBS_SUBMIT_H

#include "compute/jobs/jobs.h"

/* A job checked, its slot reserved and its row built, not yet inserted. */
typedef struct jobs_pending {
  job_record row;         /* the row to insert (owned) */
  const kind_ops *kind;
  json_t *params;         /* borrowed from the request body */
  job_estimate est;
  void *checked;          /* the kind's checked params (owned) */
  int async_ok;           /* the row may be inserted [async] */
  /* its request_id's entry in J->rids (rids.h), or NULL: held for a [sync]
   * insert (released by jobs_submit_inserted), or claimed for jobs_submit's
   * [async] one (rid_claimed) */
  struct rids_entry *rid;
  int rid_claimed;
  uint64_t rid_mark;      /* rids_mark before the [sync] insert */
} jobs_pending;

/* Everything of jobs_submit before the insert. On an error nothing is
 * held (no slot, no row); T_EBUSY sets *retry_after_s. */
int jobs_submit_prepare(jobs *J, const char *owner, json_t *body,
                        jobs_pending *p, int *retry_after_s, terr *e);

/* The insert's outcome: insert_rc 0 (existing: a request_id's earlier row,
 * now in p->row) or its error (returned as is). On 0 id holds the job's id
 * and the job is queued unless it existed. Frees what p holds. */
int jobs_submit_inserted(jobs *J, jobs_pending *p, int insert_rc,
                         int existing, char id[T_ID_MAX], terr *e);

#endif
