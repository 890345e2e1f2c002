/* jobs.h — the one owner of a job's life.
 *
 * The API calls these and nothing else for a job: it never runs the
 * scheduler's protocol or reads the store itself. What happens here:
 *   submit  the body's envelope is checked field by field (unknown fields
 *           refused), the kind checks and estimates its params once
 *           (sched_check: 400, 413, 503), a queue slot is reserved (429 with
 *           *retry_after_s), the job is committed to the store (idempotent
 *           by request_id: the same body gives the original job, another
 *           body is 409) and only then queued with what the check produced,
 *           so that no worker parses or compiles the params again.
 *   get, list, cancel, delete, result, and waiting for a job's end.
 * The job's JSON (API.md "The job object") is written in one place,
 * compute/jobs/json.c, for every answer that carries jobs.
 *
 * Threads: every function may be called from any thread; none blocks on
 * compute. Ownership: out-parameters are the caller's (store_job_clear,
 * jobs_result_clear, free); `owner` strings are borrowed for the call.
 */
#ifndef TESSEL_JOBS_JOBS_H
#define TESSEL_JOBS_JOBS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "db/store.h"
#include "compute/sched/sched.h"
#include "util/err.h"

/* The job service: borrowed store and scheduler, the limits of submit. */
typedef struct jobs {
  store *st;
  sched *sc;
  int64_t max_elems;        /* cap on the elements of any one array */
  int64_t max_result_bytes; /* --max-result, for kinds whose defaults follow
                               it (tenv.max_result_bytes); 0: not known */
  double default_timeout_s; /* for jobs that give no timeout_s */
  /* --local-dir (compute/array/localfile.h): {"file"} inputs and "output" files;
   * NULL: off (403). Borrowed. */
  const struct tlocal *local;
  /* The idempotency keys with an insert in flight (compute/jobs/rids.h):
   * with it an idempotent ?wait submit is inserted [async] on a one-node
   * store; NULL: every submit with a request_id takes the [sync] insert.
   * Owned by whoever made it (jobs_rids_new), freed after the scheduler. */
  struct jobs_rids *rids;
  /* The threads that check a batch's items beside its HTTP thread
   * (batch.c, jobs_checkers_new); NULL: the HTTP thread checks them
   * alone. Owned by whoever made it. One request at a time has them
   * (jobs_checkers_take): 1 while one does. */
  struct pool *checkers;
  _Atomic int checkers_taken;
} jobs;

/* The table of jobs.rids, made at start, freed after the scheduler (no
 * submit or job end may still run); NULL when out of memory. */
struct jobs_rids *jobs_rids_new(void);
void jobs_rids_free(struct jobs_rids *t);
/* jobs.checkers, made at start: a quarter of the online CPUs, at most 7
 * (TESSEL_BATCH_CHECKERS=N: N threads, 0..64, 0 none); NULL when none or
 * out of memory (the batches' checks then run on their HTTP threads).
 * Freed after the HTTP server (no batch may still run); NULL ok. */
struct pool *jobs_checkers_new(void);
void jobs_checkers_free(struct pool *p);
/* J->checkers for one request's items (a batch's checks, an answer's
 * items), or NULL when there are none or another request has them: the
 * checkers help one request at a time, the one that finds them free.
 * Under load every core already serves a request of its own, and checkers
 * shared by many requests cost more in hand-offs than they gain (on the
 * H200, 16 cores, 64 clients of batches of 1,000: 32,400 jobs/s with the
 * checkers for every batch, 37,800 without; one batch of 100 alone:
 * jobs:batch 5.3-5.9 ms with them, 6.3-7.5 without). Give them back with
 * jobs_checkers_give. */
struct pool *jobs_checkers_take(jobs *J);
void jobs_checkers_give(jobs *J, struct pool *p);

/* A job as the API shows it (the store's row, typed). */
typedef store_job job_record;

/* ---- the same-host path (--local-dir) -------------------------------------- */

/* The allowed directories, checked now (compute/array/localfile.h: each must exist
 * and be a directory, else T_EINVAL naming it), logged, and the SIGBUS
 * guard installed (util/sigbus.h); *out NULL when n is 0 (off). For the
 * daemon's start; jobs_local_free releases it after the scheduler. */
int jobs_local_open(const char *const *dirs, int n, int tokens,
                    struct tlocal **out, terr *e);
void jobs_local_free(struct tlocal *l);
/* The same-host directories `owner` may use (compute/array/localfile.h's roots):
 * every DIR when owner is "" or NULL (no tokens); with tokens DIR/owner
 * for each DIR where that directory exists now, never another token's.
 * A new JSON array of strings ([] when --local-dir is off); NULL when out
 * of memory. */
json_t *jobs_local_dirs(jobs *J, const char *owner);

/* ---- registered regions (compute/jobs/regions.c, compute/array/region.h) -- */

struct region_info;
/* Once at start: the per-token byte limit of regions (--region-bytes; 0:
 * a quarter of RAM), and the GPU's page-locking of each new region
 * (compute/gpu: gpu_host_register; compute/array may not call it). */
void jobs_regions_setup(int64_t bytes);
/* 1 when POST /v1/regions can work here: --local-dir given, and a single
 * node's store (GET /v1/info features.regions). */
int jobs_regions_available(jobs *J);
/* POST /v1/regions: 400 on a cluster store, else region_add under
 * --local-dir (errors name "path"). */
int jobs_region_add(jobs *J, const char *owner, const char *path,
                    struct region_info *out, terr *e);
/* DELETE /v1/regions/{id}: 404, or 409 naming the queued or running jobs
 * that use it (the store says which). */
int jobs_region_delete(jobs *J, const char *owner, const char *id, terr *e);
/* 1 when params name a region ({"region": id} at any depth). */
int jobs_names_region(const json_t *params);
/* Record job_id as a user of every region its params name and of
 * out_region (NULL: none): T_ENOTFOUND naming the field when one is gone;
 * 400 on a cluster store. */
int jobs_regions_use(jobs *J, const char *owner, const json_t *params,
                     const char *out_region, const char *job_id, terr *e);

/* ---- batches (batch.c) ---------------------------------------------------- */

#define JOBS_BATCH_MAX 10000
/* One item of a batch: rc 0 and its job's id, or rc and err (its field
 * "jobs[i]..."). row: rc 0, a copy of the job's row as committed by the
 * submit (or the request_id's earlier job as found), which an answer may
 * show instead of reading the store again while the job is not final
 * (jobs_holds); row.id empty when none. jobs_batch_item_clear frees it. */
typedef struct jobs_batch_item {
  int rc;
  char id[T_ID_MAX];
  terr err;
  job_record row;
} jobs_batch_item;
void jobs_batch_item_clear(jobs_batch_item *it);
/* sched_holds: 1 while job id is queued or running here (its end not yet
 * committed) and owner's (NULL: anyone's). */
int jobs_holds(jobs *J, const char *id, const char *owner);
/* Submit each item of `items` (a JSON array, borrowed) as jobs_submit
 * would, out[i] its outcome (out holds json_array_size(items) entries).
 * Refused whole, before any item is submitted: not an array (400 "jobs"),
 * more than JOBS_BATCH_MAX items (413 "jobs"), a request_id twice (400
 * "jobs[i].request_id"). The rows jobs_submit would insert [async] go in
 * so, each job queued at once; the others through store_insert_jobs, one
 * transaction per STORE_INSERT_CHUNK items, each job queued once its row
 * is committed (batch.c). The items' checks run on J->checkers too; the
 * slots, ids and keys are taken in item order (on whichever of those
 * threads finds the next item checked). On return every item with
 * rc 0 has its row committed, also when an error (out of memory) is
 * returned. */
int jobs_submit_batch(jobs *J, const char *owner, json_t *items,
                      jobs_batch_item *out, terr *e);

/* ---- life ---------------------------------------------------------------- */

/* Submit the job described by the request body (a JSON object, borrowed).
 * *async_insert in: the caller answers only after a later store commit
 * (?wait), so the row may be committed with the next store write instead of
 * now; out: whether it was (never for a request_id, which must be compared
 * with the stored jobs at once). On 0, id holds the job's id (the original
 * job's for a repeated request_id). T_EBUSY sets *retry_after_s. */
int jobs_submit(jobs *J, const char *owner, json_t *body, int *async_insert,
                char id[T_ID_MAX], int *retry_after_s, terr *e);

/* The job `id` of `owner` (NULL: any owner). A malformed id, an unknown
 * job and another owner's job are all T_ENOTFOUND naming "id". */
int jobs_get(jobs *J, const char *id, const char *owner, job_record *out,
             terr *e);

/* The jobs ids[0..n) of `owner` (NULL: any owner) in one store read (one
 * SELECT on PostgreSQL): found[i] 1 and out[i] the job (the caller clears
 * it, store_job_clear), or found[i] 0 (out[i] cleared) for an unknown id,
 * a malformed one or another owner's job. An error (the store's) leaves
 * every out[i] cleared and found[i] 0. Only on a cluster store, whose
 * reads are round trips: elsewhere T_ENOTIMPL (SQLite's reads of ended
 * jobs come from its memory; read them with jobs_get). */
int jobs_get_many(jobs *J, const char *const *ids, int n, const char *owner,
                  job_record *out, int *found, terr *e);

/* The list query, as the request gave it (each NULL when absent): the
 * filters, q (a substring of the id or the label), order_by (created,
 * status, kind, duration), desc (true, false; the default is the order's:
 * true for created and duration, false for status and kind), the page size
 * and the cursor of the page before. */
typedef struct jobs_query {
  const char *status, *kind, *backend, *label, *limit, *cursor;
  const char *q, *order_by, *desc;
} jobs_query;
/* The page of jobs: the JSON text
 * {"jobs":[...],"next_cursor":...,"total":N} (new string of *len bytes),
 * total counting every job that matches the filters. A cursor is opaque:
 * it encodes the order, the direction, the last row's sort key and id; one
 * from another order or direction is refused. Bad values are T_EINVAL
 * naming the parameter. */
int jobs_list_json(jobs *J, const char *owner, const jobs_query *q,
                   char **text, size_t *len, terr *e);

/* Cancel: 0 when the job is canceled or stopping; T_ECONFLICT naming "id"
 * when it has already ended; T_ENOTFOUND. */
int jobs_cancel(jobs *J, const char *id, const char *owner, terr *e);

/* Delete: compute/jobs/lifecycle.h (jobs_delete), with expiry. */

/* A succeeded job's result: the .npy file (path) or, for a small result
 * kept in the job's row, its bytes (npy, npy_len). layout: the stored
 * result's layout ("square", "condensed") when the kind lets it be
 * switched, else NULL. T_ECONFLICT when the job has not succeeded, and for
 * a job with "output": {"file"} (its result is that file only). */
typedef struct jobs_result {
  char *path;
  char *npy;
  size_t npy_len;
  const char *layout; /* static string */
} jobs_result;
int jobs_result_get(jobs *J, const char *id, const char *owner,
                    jobs_result *out, terr *e);
/* The bytes (.npy) of the result j's row keeps (its first part), from
 * the row j as read already (final: a succeeded job): no second read of
 * the row, no layout. T_ENOTFOUND when j has no result kept in its row (not
 * succeeded, a file, an "output"), or it was deleted since. *npy: the
 * caller frees. For an answer that inlines small results (jobs:get). */
int jobs_result_row_npy(jobs *J, const job_record *j, void **npy,
                        size_t *len, terr *e);
/* The same for part `name` of a result of several arrays (NULL: the first,
 * as jobs_result_get). T_ENOTFOUND (field "name") when the result has no
 * such part, the name is not a part name, or the result is one array;
 * errors of the job itself as above (T_ECONFLICT while it has not
 * succeeded). layout is NULL for parts after the first. */
int jobs_result_part_get(jobs *J, const char *id, const char *owner,
                         const char *name, jobs_result *out, terr *e);
void jobs_result_clear(jobs_result *r);

/* Commit every store write queued so far (after an async insert). */
int jobs_sync(jobs *J, terr *e);
/* Why job id, inserted [async], is not in the store (after a jobs_sync
 * covering its insert): its insert's error, e.g. an array its params name
 * deleted before the insert ran, 404 naming the input's field. Else,
 * 500 "could not be recorded" (507 when the data disk is full). Returns
 * out->code. */
int jobs_unrecorded(jobs *J, const char *id, terr *out);

/* ---- waiting --------------------------------------------------------------
 * As sched_wait_end / sched_unwait (sched.h): cb runs once when the job
 * ends, with its row as committed (or NULL: read it with jobs_get), on a
 * thread that must not block; 1 means the job is not waiting to end here
 * (read it now). */
typedef void (*jobs_end_fn)(void *arg, const char *id, const job_record *j);
int jobs_wait_end(jobs *J, const char *id, jobs_end_fn cb, void *arg,
                  uint64_t *token);
/* jobs_wait_end's, the result with it: npy the .npy of a succeeded job's
 * result kept in its row as its end committed it (borrowed for the call),
 * or NULL (none there, or not known: read it; sched_wait_result). */
typedef void (*jobs_result_fn)(void *arg, const char *id, const job_record *j,
                               const void *npy, size_t npy_len);
int jobs_wait_result(jobs *J, const char *id, jobs_result_fn cb, void *arg,
                     uint64_t *token);
int jobs_unwait(jobs *J, uint64_t token);

/* ---- the service's figures ------------------------------------------------ */

/* The store's groups (kind, backend used, status) and counts by status for
 * `owner` (NULL: all), and the scheduler's counters. */
typedef struct jobs_stats {
  store_stat *groups;
  int ngroups;
  int64_t by_status[5]; /* indexed by job_status */
  sched_stats sched;
} jobs_stats;
int jobs_stats_get(jobs *J, const char *owner, jobs_stats *out, terr *e);
void jobs_stats_clear(jobs_stats *s);
/* The scheduler's counters alone (no store read). */
void jobs_sched_stats(jobs *J, sched_stats *out);
/* The load now and the kept samples since a time (sched_sample_now,
 * sched_samples: compute/sched/stats/sampler.c). */
int jobs_sample_now(jobs *J, sched_sample *out);
int jobs_samples(jobs *J, int64_t since_wall_ms, sched_sample *out, int cap);
/* Jobs finished per step, by status (store_finished_by_step). */
int jobs_finished_by_step(jobs *J, const char *owner, int64_t since_ms,
                          int64_t step_ms, int nsteps, int64_t *counts, terr *e);
/* 1 when the store answers reads. */
int jobs_store_ready(jobs *J);
/* 1 on a cluster store (store_is_cluster: PostgreSQL). */
int jobs_is_cluster(jobs *J);
/* "sqlite" or "postgresql" (store_kind). */
const char *jobs_store_kind(jobs *J);
/* The nodes (GET /v1/nodes; sched_nodes) and this one's id and name. */
int jobs_nodes(jobs *J, store_node **nodes, int *n, terr *e);
void jobs_node_self(jobs *J, char id[T_ID_MAX], char *name, size_t cap);

/* The devices the service computes on, for the API (compute/jobs/devices.c;
 * the API calls no gpu_* function): the number of usable GPUs, and the
 * /v1/devices "cuda" object (the runtime's answer with each device's
 * utilisation from NVML), a new reference. */
int jobs_gpu_count(void);
json_t *jobs_devices_json(void);
/* The run-time histogram of the jobs of one kind, backend family
 * ("serial", "cpu", "cuda", "compare", "split") and final
 * status (-1: any) since start (sched_histogram). */
void jobs_histogram(jobs *J, const char *kind, const char *backend, int status,
                    int64_t counts[SCHED_HIST_BUCKETS], double *sum_ms,
                    int64_t *count);

/* ---- JSON (compute/jobs/json.c) ---------------------------------------------------- */

/* The job object of API.md as JSON text (with its params when
 * with_params), a new string of *len bytes; NULL when out of memory. A
 * job that has not ended shows the scheduler's live progress when J is
 * given. */
char *jobs_json(jobs *J, const job_record *j, int with_params, size_t *len);
/* The typed timings as API.md's timings_ms object, and a result's metadata
 * as its result object (with its href when id is given; "null" when there
 * is no result): new strings, NULL when out of memory. */
char *jobs_timings_json(const job_timings *t);
char *jobs_result_json(const job_result_info *r, const char *id);
/* The stored estimate document written at submit (new string, NULL when out
 * of memory). files: the same-host inputs' pins as JSON text
 * (tlocal_pins_text; NULL: none), kept as its "files". */
char *jobs_estimate_json(const job_estimate *est, const char *files);
/* A job's params as the store keeps them: json_dumps(JSON_COMPACT) with
 * reals in their fewest digits (tjson_short_reals); malloc()ed, NULL when
 * out of memory. */
char *jobs_params_text(const json_t *params);

#endif
