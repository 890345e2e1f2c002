/* store.h — the job and array store: one interface, two backends.
 *
 * The backend is chosen at open (store_open_url): SQLite (embedded, the
 * default; db/sqlite/) or PostgreSQL (db/pg/, several nodes on one store).
 * Every function below means the same on both; db/store_backend.h is the
 * table of functions a backend fills, db/store.c dispatches to it.
 * Functions of the "cluster" section answer T_ENOTIMPL on SQLite (one node).
 *
 * SQLite: one database file, <data_dir>/tessel.db, in WAL mode with numbered
 * migrations (db/sqlite/schema.c). Threading rule: ONE writer thread owns the only
 * write connection and batches every write that is queued while it commits
 * the previous batch into one transaction (group commit). Readers use a
 * read-only connection per calling thread (thread-local, opened on first
 * use), which WAL lets run beside the writer.
 *
 * Functions marked [sync] return after the write is committed (or failed);
 * [async] ones queue the write and return at once. Writes commit in the
 * order they were queued, whatever the thread: an [async] write is
 * committed before any [sync] write queued after it returns (and usually
 * shares its transaction). They are for writes whose loss in a crash costs
 * nothing: progress; a job's start (a job the store still has queued or
 * running at start-up runs again either way); the insert of a job that is
 * answered only after a later [sync] write (store_job_insert_async); and a
 * finish whose completion is signalled by a callback
 * (store_job_finish_async), the scheduler's way to let a worker go on.
 *
 * Ownership: store_job / store_array hold heap strings; fill them with the
 * getters and release with store_job_clear / store_array_clear. Strings passed
 * in are copied. All functions are safe to call from any thread.
 */
#ifndef TESSEL_DB_STORE_H
#define TESSEL_DB_STORE_H

#include <stdint.h>

#include "util/err.h"
#include "util/util.h"

typedef struct store store;

typedef enum {
  JOB_QUEUED = 0,
  JOB_RUNNING,
  JOB_SUCCEEDED,
  JOB_FAILED,
  JOB_CANCELED,
} job_status;
const char *job_status_name(job_status s);   /* "queued", ... */
int job_status_parse(const char *s);          /* -1 when unknown */
static inline int job_status_final(job_status s) { return s >= JOB_SUCCEEDED; }

/* A job's phase times in ms (API.md timings_ms), typed: ms[i] counts only
 * when bit i of `set` is on (a zeroed record has none). */
typedef enum {
  JOB_T_QUEUE = 0, JOB_T_PREPARE, JOB_T_H2D, JOB_T_COMPUTE, JOB_T_D2H,
  JOB_T_STORE, JOB_T_TOTAL, JOB_T__COUNT
} job_timing;
const char *job_timing_name(job_timing t); /* "queue", ... */
typedef struct job_timings {
  double ms[JOB_T__COUNT];
  unsigned set; /* bit i: ms[i] recorded */
} job_timings;
static inline void job_timings_put(job_timings *t, job_timing i, double ms) {
  t->ms[i] = ms;
  t->set |= 1u << i;
}

/* A succeeded job's result array, typed: dtype[0] == 0 when there is
 * none. */
#define STORE_MAXDIM 8
typedef struct job_result_info {
  char dtype[16];         /* "float64" | "float32" | "int64" */
  int ndim;
  int64_t shape[STORE_MAXDIM];
  int64_t bytes;          /* data bytes */
  int64_t nonconverged;   /* geodesic pairs left NaN; 0 when none */
} job_result_info;

typedef struct store_job {
  char id[T_ID_MAX];
  char *owner;             /* token name; "" when open */
  char *kind;              /* "map" | "reduce" | "matmul" | "geodesic" */
  char *params;            /* JSON text of params, as submitted */
  job_status status;
  char *backend_requested; /* "auto" | "serial" | "cpu" | "cuda" | "compare" */
  char *backend_used;      /* "cpu", "cuda:0", ...; NULL until chosen */
  char *backend_reason;    /* the router's words; NULL when none */
  char *estimate;          /* JSON text: the router's estimates; NULL when none */
  int priority;
  char *label;             /* NULL when none */
  char *request_id;        /* NULL when none */
  char *body_hash;         /* sha256 hex of the canonical request body */
  double timeout_s;
  int64_t created_at, started_at, finished_at; /* wall ms; 0 = not yet */
  job_timings timings;     /* none until the job ends */
  int64_t progress_done, progress_total;
  char *error_code;        /* NULL unless failed/canceled */
  char *error_message;
  job_result_info result;  /* a succeeded job's result; dtype "" otherwise */
  char *result_path;       /* .npy file under the data dir; NULL */
  char *compare;           /* JSON text [{"backend","ms",...}]; NULL */
  double max_abs_diff;     /* NaN when not compared */
  int attempts;            /* times started (>1 after a recovery) */
  char *output_file;       /* "output": {"file": path}: the result is written
                            * there, not kept (no result_path, no row npy);
                            * NULL otherwise */
  char *result_parts;      /* a result of several arrays: JSON text
                            * [{"name","dtype","shape","bytes"[,"path"]}],
                            * every part in order (the first's data is
                            * result_path / the row's npy; each other's is
                            * its "path" file); NULL for one array.
                            * Written by compute/sched/text.c, read by
                            * compute/array/parts.h */
  /* cluster (all NULL / 0 on SQLite) */
  char *node;              /* the node that claimed it (a store_node id);
                            * NULL while unclaimed */
  int64_t lease_until;     /* wall ms the claim lasts until; 0: none */
  int cancel_requested;    /* 1: a cancel reached the store while the job was
                            * claimed by a node: that node stops it */
  char *parent;            /* a tile of a split job: the parent's id; such
                            * rows are left out of store_job_list */
  int tile;                /* a tile's index (0..) */
  int tiles;               /* a split parent: how many tiles; 0: not split */
  char *devices;           /* a cuda run's GPUs, written with its end: JSON
                            * text [{"device","rows","blocks"[,"failed"]
                            * [,"taken_back"]}] (compute/sched/text.c,
                            * stext_devices); NULL otherwise */
} store_job;

typedef struct store_array {
  char id[T_ID_MAX];
  char *owner;
  char *dtype;   /* "float64" | "float32" */
  char *shape;   /* JSON text, e.g. "[100,10000]" */
  int64_t bytes; /* data bytes */
  char *digest;  /* content id: "xxh3-128:<hex>" of data, dtype, shape
                  * (older rows: "sha256:<hex>"; compute/array/arrays.c) */
  char *path;    /* .npy file */
  int64_t created_at;
} store_array;

void store_job_clear(store_job *j);     /* frees strings, zeroes */
/* *dst = a deep copy of *src (clear it with store_job_clear); T_ENOMEM
 * leaves *dst cleared. */
int store_job_copy(store_job *dst, const store_job *src);
void store_array_clear(store_array *a);

/* Open (creating) <data_dir>/tessel.db, migrate, start the writer thread.
 * *out is owned by the caller: store_close it. */
int store_open(const char *data_dir, store **out, terr *e);
/* Open the store a URL names: NULL, "" or "sqlite:" -> store_open(data_dir);
 * "postgresql://..." or "postgres://..." (libpq's URI or key=value
 * conninfo) -> PostgreSQL, with migrations applied under an advisory lock.
 * The data directory is tied to the store: the first node writes
 * <data_dir>/store-id (a random id, also kept in the store); a node whose
 * directory has another id, or none while the store has one, is refused
 * (T_EINVAL, nothing written). Errors never include the password:
 * unreachable or refused -> T_EUNAVAIL; a schema newer than this binary ->
 * T_EINVAL. */
int store_open_url(const char *url, const char *data_dir, store **out,
                   terr *e);
/* "sqlite" or "postgresql". */
const char *store_kind(store *s);
/* 1 when the backend can hold several nodes (PostgreSQL). */
int store_is_cluster(store *s);
/* Drain queued writes, stop the writer, close every connection. NULL ok. */
void store_close(store *s);
/* 1 when open and the writer is alive and (PostgreSQL) the server answered
 * within the last few seconds (for /readyz). */
int store_ready(store *s);
int store_schema_version(store *s);

/* ---- jobs ---------------------------------------------------------------- */
/* [sync] Insert a new job (status queued). When j->request_id is set and a
 * job of the same owner already has it: same body_hash -> returns 0 with
 * *existing = 1 and *j replaced by the stored job; different body_hash ->
 * T_ECONFLICT. Otherwise *existing = 0. */
int store_job_insert(store *s, store_job *j, int *existing, terr *e);
/* [async] Insert a new job without waiting: the same defaults as
 * store_job_insert (j->id, created_at and status are set here), the row
 * copied, j untouched otherwise. With a request_id (SQLite; PostgreSQL
 * refuses one, T_EINVAL: a cluster's submits are [sync]) the caller must
 * know that no other row of (owner, request_id) is committed or on its way
 * (compute/jobs/rids.h: a read by store_job_by_request, and no other insert
 * of the key in flight): one that is would make this insert a silent
 * no-op (the unique index is the last guard), its job then T_ENOTFOUND as
 * below. The row is committed by the time store_sync, a [sync] insert
 * (store_job_insert, store_insert_jobs) or a write of the job's own (its
 * finish, a [sync] start, requeue) queued after this call returns, so a
 * job may be answered as accepted only after such a write — and a job
 * whose insert failed (an I/O error) is then T_ENOTFOUND to store_job_get
 * and to its finish. Other writes may commit before it (SQLite holds it
 * back so that its job's end folds into it, at most until the job has run
 * 2 ms or 20 ms after this call: db/sqlite/store_fold.c); until it commits
 * a read does not find the job. T_EUNAVAIL when closing,
 * T_ENOMEM. For many jobs at once use store_insert_jobs: N async inserts
 * queued together are all ahead of every later write (one transaction of
 * N rows that a lone submit waits behind). */
int store_job_insert_async(store *s, store_job *j, terr *e);
/* [sync] Insert n jobs, each as store_job_insert would (the same
 * defaults, the same request_id rule: an existing row replaces jobs[i] and
 * sets existing[i]), in transactions of at most STORE_INSERT_CHUNK rows
 * (SQLite; 100 on PostgreSQL),
 * each queued only when the one before has committed, so that another
 * write waits for one chunk at most. Row i's outcome is rcs[i] (0 or a
 * terr code) with its detail in errs[i]: a row that fails (a bad field, a
 * request_id conflict, an array not found) undoes only itself. Returns 0
 * when every chunk committed; else the error of the chunk that did not
 * (its rows and every later one get it in rcs; the chunks before it are
 * committed). Every row with rcs[i] == 0 is durable when this returns. */
#define STORE_INSERT_CHUNK 128
int store_insert_jobs(store *s, store_job *jobs, int n, int *existing,
                      int *rcs, terr *errs, terr *e);
/* [sync] Returns once every write queued before it (by any thread) has
 * been committed or has failed. */
int store_sync(store *s, terr *e);
/* How many store_job_insert_async rows have failed since the store opened
 * (counted before a store_sync queued after them returns), or -1 when the
 * store does not count them. Unchanged across a caller's inserts and its
 * store_sync: every one of them is committed (jobs:batch, compute/jobs). */
int64_t store_insert_failures(store *s);
/* 1 and *out the error when job id's store_job_insert_async failed
 * recently (the store keeps the last STORE_INSERT_ERRS such errors: an
 * array its params name deleted before the insert ran is T_ENOTFOUND
 * naming the input's field, "params.inputs.x"); 0 when it knows none.
 * Ask after a store_sync that covers the insert. */
#define STORE_INSERT_ERRS 64
int store_insert_error(store *s, const char *id, terr *out);
/* Read a job. owner NULL: any owner; else another owner's job is
 * T_ENOTFOUND. */
int store_job_get(store *s, const char *id, const char *owner, store_job *out,
                  terr *e);
/* Read owner's job whose request_id is rid, as committed (a read, no
 * write waited for): T_ENOTFOUND when there is none. One-node stores only
 * (SQLite); T_ENOTIMPL on PostgreSQL, whose submits never insert [async]
 * (compute/jobs/rids.h: what an idempotent [async] insert reads first). */
int store_job_by_request(store *s, const char *owner, const char *rid,
                         store_job *out, terr *e);
/* Read the jobs ids[0..n) of any owner at once (one statement on
 * PostgreSQL; one by one on a store without a batch read): found[i] 1 and
 * out[i] the job (to store_job_clear), or found[i] 0 and out[i] cleared
 * when there is none. An error leaves every out[i] cleared. */
int store_job_get_many(store *s, const char *const *ids, int n,
                       store_job *out, int *found, terr *e);

/* The orders of a job list. Each sorts by a key, then by id (newest
 * first on ties; created sorts by id alone, ids sorting by creation time):
 *   created   the id
 *   status    queued, running, succeeded, failed, canceled (that rank)
 *   kind      the kind's name
 *   duration  timings_ms.total; jobs without one (not ended) come last in
 *             either direction */
typedef enum {
  STORE_ORDER_CREATED = 0,
  STORE_ORDER_STATUS,
  STORE_ORDER_KIND,
  STORE_ORDER_DURATION,
  STORE_ORDER__COUNT
} store_job_order;

/* A position in a list: the sort key of a row and its id. The page after
 * it starts with the row that follows it in the order. key: status's rank
 * or duration's ms (the sentinel for "none" included) in num; kind's name
 * in text; neither for created. */
typedef struct store_job_pos {
  char id[T_ID_MAX];
  double num;
  char text[32];
} store_job_pos;

#define STORE_JOB_Q_MAX 100 /* bytes of a search string */

typedef struct store_job_filter {
  const char *owner;   /* NULL: all */
  int status;          /* -1: any */
  const char *kind;    /* NULL: any */
  const char *backend; /* NULL: any; matches requested or used ("cuda" matches "cuda:0") */
  const char *label;   /* NULL: any; exact */
  const char *q;       /* NULL: any; a substring of the id or the label,
                          ASCII letters matched in any case, every other
                          character literally (% and _ included); at most
                          STORE_JOB_Q_MAX bytes */
  store_job_order order;
  int asc;             /* 0: descending key (the zero value: newest first
                          for created); 1: ascending */
  const store_job_pos *after; /* NULL: the first page; else rows after it */
  int limit;           /* 1..1000 */
} store_job_filter;
/* A page in the filter's order. *jobs is a new array of *n jobs (free each
 * with store_job_clear, then free the array); *has_next is 1 when more rows
 * follow, and *next is then the last row's position. *total (when not
 * NULL): how many jobs match the filters, whatever the page. */
int store_job_list(store *s, const store_job_filter *f, store_job **jobs,
                   int *n, int *has_next, store_job_pos *next,
                   int64_t *total, terr *e);

/* [sync] queued -> running; records start time, backend used, reason and
 * estimate JSON (may be NULL); attempts += 1. */
int store_job_start(store *s, const char *id, int64_t started_at,
                    const char *backend_used, const char *reason,
                    const char *estimate, terr *e);
/* [async] The same change, queued (the strings are copied): it commits with
 * the next batch, at the latest with this thread's next [sync] write (for
 * the scheduler, the job's finish, in the same transaction when the job is
 * short). A job that is no longer queued by then (canceled) is left as it
 * is. Lost in a crash before it commits: the job is then still queued in
 * the store and runs again at the next start, as a running one would.
 * Dropped (with a warning) when the store is closing or memory is short. */
void store_job_start_async(store *s, const char *id, int64_t started_at,
                           const char *backend_used, const char *reason,
                           const char *estimate);
/* [async] progress. */
void store_job_progress(store *s, const char *id, int64_t done, int64_t total);
/* [sync] -> succeeded / failed / canceled with everything known at the end.
 * Strings may be NULL. max_abs_diff NaN: none. A result is either a file
 * (result_path) or, when small, its .npy bytes kept in the row itself
 * (result_npy, result_npy_len; NULL: none), read back with
 * store_job_result_npy; it commits with the status, so a succeeded job
 * always has it. A job already ended is T_ECONFLICT, except on
 * PostgreSQL for the very end it holds (same status, finished_at,
 * result_path and error_code, written by this store's node): that is a
 * retry after a COMMIT whose answer was lost, and it answers 0. */
typedef struct store_job_end {
  job_status status;
  int64_t finished_at;
  job_timings timings;
  job_result_info result; /* dtype "": none */
  const char *result_path, *compare;
  double max_abs_diff;
  const char *error_code, *error_message;
  int64_t progress_done, progress_total;
  const void *result_npy; /* copied; NULL: the result (if any) is a file */
  size_t result_npy_len;
  const char *result_parts; /* store_job.result_parts; NULL: one array */
  /* A cuda run's devices (store_job.devices; NULL: none) and its
   * backend_used as the run ended ("cuda:0+cuda:1"; NULL: the start's
   * stays). */
  const char *devices, *backend_used;
  /* 1: the end of a run of a job this node claimed (compute/sched/run.c, a split
   * job's coordinator). On a cluster store the row must still be claimed
   * by this node: one the reaper took back (the node was paused past its
   * lease; the job is queued again, node NULL) is T_ECONFLICT, as one
   * another node claimed is. 0: an end any node may write (a cancel of a
   * queued job). A single-node store ignores it. */
  int held;
  /* The job's row as the caller holds it with this run's start applied
   * (started_at, backend_used, backend_reason, estimate as the start wrote
   * them; attempts counting it), or NULL. The SQLite store, whose writer
   * is the row's only writer, then hands store_job_ended(before, end) to
   * the async finish's callback instead of reading the row back (a fifth
   * of a tiny job's store work); the PostgreSQL store reads back (other
   * nodes write the row too). */
  const store_job *before;
} store_job_end;
/* *dst = a deep copy of `before` with the end's columns as the finish
 * writes them (status, finished_at, timings, result, result_path,
 * compare, max_abs_diff, error, progress, result_parts, devices, and
 * backend_used when the end has one): the row a read after the finish
 * gives. T_ENOMEM leaves *dst cleared. */
/* The same, shallow and in place: row's end columns point into x (what a
 * finish writes and a read gives back; store_job_ended copies it deep). */
void store_job_apply_end(store_job *row, const store_job_end *x);
int store_job_ended(store_job *dst, const store_job *before,
                    const store_job_end *end);
int store_job_finish(store *s, const char *id, const store_job_end *end,
                     terr *e);
/* [async] The same as store_job_finish without waiting: the end record is
 * copied, and cb(arg, rc, e, row) is called once, after the batch holding
 * it has committed (rc 0; row: the job as committed, which cb owns:
 * store_job_clear it) or failed (rc and e as store_job_finish would give
 * them; row NULL), on one store thread that calls the callbacks in commit
 * order (SQLite: the thread that finishes committed batches,
 * db/sqlite/store_done.c; PostgreSQL: the writer). cb must not block and
 * must not make a [sync] store call (the store would wait for itself). Returns
 * 0, or an error (T_EINVAL, T_ENOMEM, T_EUNAVAIL when closing) and then cb
 * is never called. */
typedef void (*store_finish_fn)(void *arg, int rc, const terr *e,
                                store_job *row);
int store_job_finish_async(store *s, const char *id, const store_job_end *end,
                           store_finish_fn cb, void *arg, terr *e);
/* A job's result kept in its row: *npy is a new malloc()ed copy of the .npy
 * bytes (caller frees), *len its size. T_ENOTFOUND when the job is absent,
 * another owner's (owner non-NULL), or has no result in its row. */
int store_job_result_npy(store *s, const char *id, const char *owner,
                         void **npy, size_t *len, terr *e);
/* [sync] Put a job back to queued (recovery, or a backend retry). */
int store_job_requeue(store *s, const char *id, terr *e);
/* [sync] The same for a running job whose run was stopped by a shutdown
 * (not a crash): its start is taken back, attempts -= 1, so that only starts
 * the process died in count towards the scheduler's max_attempts. */
int store_job_unstart(store *s, const char *id, terr *e);
/* [sync] A start of an unfinished job that the process died in (the
 * scheduler's in-flight journal): attempts = max(attempts, attempt). A job
 * that ended or is gone is left alone (0). */
int store_job_note_start(store *s, const char *id, int attempt, terr *e);
/* [sync] Delete a finished job's row. T_ECONFLICT when not finished or
 * when a queued or running job takes its result as an input,
 * T_ENOTFOUND when absent or another owner's. On success *paths (caller
 * frees each and the array; NULL when none) are the *npaths files to
 * remove: result_path, then every part's "path". */
int store_job_delete(store *s, const char *id, const char *owner,
                     char ***paths, int *npaths, terr *e);
/* Jobs left queued or running (by a dead process), highest priority first,
 * FIFO within. Same allocation rule as store_job_list. */
int store_job_unfinished(store *s, store_job **jobs, int *n, terr *e);
/* [sync] Delete finished jobs whose finished_at < before_ms, and arrays
 * created before before_ms that no unfinished job references; *paths gets
 * their files, every result part's included (caller frees each and the
 * array). */
int store_expire(store *s, int64_t before_ms, char ***paths, int *npaths,
                 terr *e);

/* One group of store_stats: the jobs of one (kind, backend_used, status). */
typedef struct store_stat {
  char *kind;
  char *backend;        /* NULL for jobs that never started */
  job_status status;
  int64_t count;
  double p50_ms, p95_ms; /* of timings.compute over succeeded jobs; NaN when
                            the group is not succeeded or none recorded one */
  int64_t result_bytes;  /* sum over succeeded jobs; -1 for other groups */
} store_stat;
/* Per (kind, backend_used, status), ordered by those: *rows is a new array
 * of *n groups (store_stats_free). owner NULL: all owners. */
int store_stats(store *s, const char *owner, store_stat **rows, int *n,
                terr *e);
void store_stats_free(store_stat *rows, int n);
/* Job counts by status for /metrics and the dashboard: counts[5]. */
int store_job_counts(store *s, const char *owner, int64_t counts[5], terr *e);
/* Jobs that finished in each of nsteps steps of step_ms from since_ms (wall
 * ms): counts[i * 5 + status] for step i, a job_status (the caller's array
 * of nsteps * 5). owner NULL: all owners. */
int store_finished_by_step(store *s, const char *owner, int64_t since_ms,
                           int64_t step_ms, int nsteps, int64_t *counts,
                           terr *e);

/* ---- arrays -------------------------------------------------------------- */
/* [sync] Insert; when an array of the same owner has the same digest, returns
 * 0 with *existing = 1 and *a replaced by the stored one. */
int store_array_insert(store *s, store_array *a, int *existing, terr *e);
int store_array_get(store *s, const char *id, const char *owner,
                    store_array *out, terr *e);
/* [sync] T_ECONFLICT when an unfinished job references it. *path: the file
 * to remove (caller frees). */
int store_array_delete(store *s, const char *id, const char *owner,
                       char **path, terr *e);
int store_array_list(store *s, const char *owner, const char *cursor,
                     int limit, store_array **arrays, int *n,
                     char *next_cursor, terr *e);

/* ---- split jobs ---------------------------------------------------------- */
/* The tiles of a split job (rows whose parent is parent_id), by tile index;
 * same allocation rule as store_job_list. Both backends. */
int store_job_children(store *s, const char *parent_id, store_job **jobs,
                       int *n, terr *e);

/* ---- cluster (PostgreSQL; T_ENOTIMPL on SQLite) -------------------------- */
/* A node: one tesseld on the shared store and data directory. */
typedef struct store_node {
  char id[T_ID_MAX];   /* "n_...", new at every start */
  char *name;          /* --node-name (default: host name:port) */
  char *url;           /* where it listens, as it says */
  int threads;         /* CPU workers */
  int gpus;            /* usable GPUs */
  char *version;       /* tesseld version */
  int64_t started_at, heartbeat_at; /* wall ms (the store's clock) */
  int running, queued; /* its jobs, at its last heartbeat */
  double load;         /* machine CPU % at its last heartbeat; NaN unknown */
  int alive;           /* not gone and its heartbeat within its own lease */
  int64_t jobs_done;   /* jobs it finished */
  int64_t lease_ms;    /* its lease (--lease-s), written at register and by
                        * each heartbeat; 0 at register: none yet (the
                        * listing store's own lease judges it until its
                        * first heartbeat, as it does rows of nodes older
                        * than the column) */
} store_node;
void store_node_clear(store_node *n);
/* [sync] Register n (n->id set here, started_at/heartbeat_at from the
 * store's clock; n->lease_ms recorded, 0: none yet). */
int store_node_register(store *s, store_node *n, terr *e);
/* [sync] The node is alive: its heartbeat, counters and lease_ms (by
 * which store_node_list judges it alive) are written and every lease it
 * holds is renewed to now + lease_ms. *cancel (a new array of
 * *ncancel heap ids, NULL when none) lists its jobs with cancel_requested;
 * *lost those it believes it runs (held, nheld) but no longer holds (the
 * lease expired and the job went elsewhere): it must stop them and not
 * write their end. */
int store_node_heartbeat(store *s, const store_node *n, int64_t lease_ms,
                         const char *const *held, int nheld, char ***cancel,
                         int *ncancel, char ***lost, int *nlost, terr *e);
/* [sync] A clean shutdown: jobs it claimed and did not start go back to the
 * queue (unclaimed), the node row is marked gone. */
int store_node_leave(store *s, const char *node_id, terr *e);
/* Every node seen within keep_ms (gone and dead ones included, alive 0). */
int store_node_list(store *s, int64_t keep_ms, store_node **nodes, int *n,
                    terr *e);
void store_nodes_free(store_node *nodes, int n);
/* The room a node has for claims (sched_claim_room): at most `cpu` jobs
 * that only a CPU worker runs (backend serial, cpu, compare), at most
 * `gpu` that only a GPU worker runs (cuda; 0 on a node without a healthy
 * GPU), and at most `any` in all, those either runs (auto) included. */
typedef struct store_claim_room {
  int cpu, gpu, any;
} store_claim_room;
/* [sync] Claim queued, unclaimed jobs for node_id within room (SELECT ...
 * FOR UPDATE SKIP LOCKED: two nodes never claim the same job), priority
 * first, FIFO within, in each of the three classes (cuda first, then the
 * CPU-only ones, then the rest up to `any`); parents of split jobs only
 * when parents (the node's coordinator) else only other jobs. Each
 * claimed row gets node, lease_until = now + lease_ms, and attempts += 1
 * (committed: the cap of max_attempts holds across nodes). Same
 * allocation rule as store_job_list; *n may be 0. It does not wait for
 * [async] writes queued before it (it takes only committed rows that none
 * of them writes; a claim behind the writer's commit was a commit's wait a
 * claim). */
int store_job_claim(store *s, const char *node_id, store_claim_room room,
                    int parents, int64_t lease_ms, store_job **jobs, int *n,
                    terr *e);
/* A job the reaper moved, and the attempt its dead node ran (the claim's
 * count: result files of that run are named <id>.r<attempt>...). */
typedef struct store_reaped {
  char id[T_ID_MAX];
  int attempt;
} store_reaped;
/* [sync] Jobs whose lease expired (their node died) go back to the queue,
 * unclaimed; those whose attempts reached max_attempts fail "crashed"
 * instead. Run by one node at a time (an advisory lock; 0 with *n = 0 when
 * another holds it). *jobs (a new array the caller frees, NULL when none):
 * the *n jobs moved, each with the attempt it was taken from. */
int store_reap(store *s, int max_attempts, store_reaped **jobs, int *n,
               terr *e);
/* [sync] A cancel through any node: a queued, unclaimed job ends canceled
 * here (*ended = 1); a claimed one gets cancel_requested and its node is
 * told (*ended = 0). T_ECONFLICT when finished, T_ENOTFOUND when absent or
 * another owner's (owner NULL: any). */
int store_job_cancel_request(store *s, const char *id, const char *owner,
                             int *ended, terr *e);
/* Events from every node: a job ended ("end", id), a job was queued
 * ("queued", id), a cancel was requested ("cancel", id). cb runs on the
 * store's listener thread (one per store, started by the first
 * store_listen); it must not block. *token for store_unlisten. On a lost
 * connection the listener reconnects and calls cb(arg, "reset", NULL):
 * events may have been missed, re-read what you wait for. */
typedef void (*store_event_fn)(void *arg, const char *what, const char *id);
int store_listen(store *s, store_event_fn cb, void *arg, uint64_t *token,
                 terr *e);
void store_unlisten(store *s, uint64_t token);
/* How many jobs are queued in the whole store (claimed or not): the
 * cluster-wide queue depth, for 429 and /v1/nodes. */
int store_queue_depth(store *s, int64_t *queued, terr *e);

#endif
