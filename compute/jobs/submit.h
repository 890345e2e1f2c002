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
 * The prepare is itself two halves: jobs_submit_check, which holds
 * nothing shared and so may run for many items at once on other threads,
 * and jobs_submit_admit, which takes the slot, the id and the key in the
 * caller's order.
 *
 * Threads: an HTTP thread (the caller's), or a batch's checker thread
 * (batch.c); no lock is held here.
 */
#ifndef TESSEL_JOBS_SUBMIT_H
#define TESSEL_JOBS_SUBMIT_H

#include "compute/jobs/jobs.h"

/* A job checked, its slot reserved and its row built, not yet inserted. */
typedef struct jobs_pending {
  job_record row;         /* the row to insert (owned) */
  const kind_ops *kind;
  json_t *params;         /* borrowed from the request body */
  const char *out_region; /* "output": {"region"} (borrowed), or NULL */
  job_estimate est;
  void *checked;          /* the kind's checked params (owned) */
  int async_ok;           /* the row may be inserted [async] */
  /* its request_id's entry in J->rids (rids.h), or NULL: held for a [sync]
   * insert (released by jobs_submit_inserted), or claimed for jobs_submit's
   * [async] one (rid_claimed) */
  struct rids_entry *rid;
  int rid_claimed;
  uint64_t rid_mark;      /* rids_mark before the [sync] insert */
  /* the scheduler's hold it is queued with (a batch's: sched_hold_open);
   * 0: none */
  uint64_t hold;
} jobs_pending;

/* Everything of jobs_submit before the insert: jobs_submit_check, then
 * jobs_submit_admit. On an error nothing is held (no slot, no row);
 * T_EBUSY sets *retry_after_s. */
int jobs_submit_prepare(jobs *J, const char *owner, json_t *body,
                        jobs_pending *p, int *retry_after_s, terr *e);

/* The prepare's first half: the envelope, the output's place, the kind's
 * check and estimate (the same-host pins, the uploaded arrays' reads),
 * the output's size, the row without its id. It takes no queue slot,
 * no key, no region and writes nothing: any thread may run it, several
 * items at once (batch.c's checkers); the body is only read. On 0 p
 * holds the checked params and the row: jobs_submit_admit takes them, or
 * jobs_submit_uncheck frees them. On an error nothing is held. */
int jobs_submit_check(jobs *J, const char *owner, json_t *body,
                      jobs_pending *p, terr *e);
/* The second half, in the order jobs are admitted (a batch's: item
 * order, on the caller's thread): the full disk (507), the queue slot
 * (429), the id and created_at, the regions it names, the request_id's
 * key (any thread, one item at a time). On an error nothing is held (p
 * given up). */
int jobs_submit_admit(jobs *J, jobs_pending *p, int *retry_after_s,
                      terr *e);
/* Frees what a checked, not admitted p holds. */
void jobs_submit_uncheck(jobs_pending *p);

/* The insert's outcome: insert_rc 0 (existing: a request_id's earlier row,
 * now in p->row) or its error (returned as is). On 0 id holds the job's id
 * and the job is queued unless it existed. Frees what p holds. */
int jobs_submit_inserted(jobs *J, jobs_pending *p, int insert_rc,
                         int existing, char id[T_ID_MAX], terr *e);

#endif
