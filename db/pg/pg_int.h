/* pg_int.h — what the files of db/pg/ share (private to db/pg/).
 *
 * The PostgreSQL backend (store_pg_backend): a pool of libpq connections
 * (borrowed per call: pg__get / pg__put), a writer thread for the [async]
 * operations of store.h and the job inserts (a FIFO; each batch in one
 * transaction, so inserts that arrive together share a commit —
 * pg__write_grouped; another [sync] write first waits until every async
 * write queued before it committed — pg__flush), numbered migrations under an advisory lock (pg_schema.c),
 * and the cluster operations (pg_cluster.c: nodes, claims, leases,
 * LISTEN/NOTIFY).
 *
 * Every statement goes through pg__exec (text parameters, $1..$n; one
 * with parameters is prepared once per connection, pg_conn.c), which
 * maps a failure to a terr code: connection lost or server gone ->
 * T_EUNAVAIL (and the connection is marked broken: pg__put closes it);
 * unique violation (23505) -> T_ECONFLICT; disk full (53100) -> T_ENOSPACE;
 * deadlock (40P01) or serialization failure (40001) -> T_EBUSY (run the
 * transaction again); else T_EIO. Messages never contain the conninfo (no password leaks).
 *
 * Notifications: one channel, "tessel"; the payload is "<what>:<id>" with
 * what one of "queued", "end", "cancel" (store_listen). A job's insert sends
 * "queued" and its finish "end" in the same transaction as the write
 * (delivered only on commit).
 */
#ifndef TESSEL_DB_PG_INT_H
#define TESSEL_DB_PG_INT_H

#include <libpq-fe.h>

#include "db/store_backend.h"

typedef struct pgstore pgstore; /* defined in pg_store.c */

/* A connection of the pool; blocks while every one is in use. T_EUNAVAIL
 * when the server cannot be reached. */
int pg__get(pgstore *p, PGconn **c, terr *e);
/* Give it back; broken != 0 (or a connection libpq says is bad): closed. */
void pg__put(pgstore *p, PGconn *c, int broken);
/* A connection of its own, outside the pool (the listener's): PQfinish it. */
int pg__connect(pgstore *p, PGconn **c, terr *e);
/* Run sql with n text parameters (NULL values are SQL NULL). *res (when
 * res is not NULL) gets the result to PQclear; else it is cleared here.
 * 0, or a terr code as above with "<what>: <server message>". */
int pg__exec(PGconn *c, const char *sql, int n, const char *const *vals,
             PGresult **res, const char *what, terr *e);
/* pg__exec for a text built per call (never prepared: pg_conn.c keeps
 * the statements it prepared per connection, up to a bound). */
int pg__exec_dyn(PGconn *c, const char *sql, int n, const char *const *vals,
                 PGresult **res, const char *what, terr *e);
/* How many times the writer runs a queued op again from its savepoint when
 * it was a deadlock or serialization victim (T_EBUSY) before that error
 * stands; ops clear their outputs before they run. A [sync] write is not
 * run again (pg__write). */
#define PG_RETRIES 5
/* A notification ("<what>:<id>" on channel tessel) of what c's open
 * transaction wrote, sent once it committed (pg__commit), in a transaction
 * of its own that does not wait for a WAL flush; dropped when it rolls back
 * (or back to a savepoint taken before the note). A NOTIFY inside the
 * data's transaction takes PostgreSQL's one notify lock from its commit to
 * the end of its WAL flush, so every notifying commit of every node ran one
 * after the other (tests/bench/results/pg-2core-2026-11-29b.md). Outside a
 * transaction: sent at once. */
void pg__note(PGconn *c, const char *what, const char *id);
/* BEGIN / COMMIT / ROLLBACK on c (COMMIT then sends c's notes). */
int pg__begin(PGconn *c, terr *e);
int pg__commit(PGconn *c, terr *e);
void pg__rollback(PGconn *c);
/* [sync] Wait until every async write queued before the call committed. */
int pg__flush(pgstore *p, terr *e);
/* Read a row selected with PG_JOB_COLS (the same names and order as the
 * SQLite backend's job columns, then the cluster ones) into *j. */
int pg__job_row(PGresult *r, int row, store_job *j);
/* The store's clock (wall ms): now() on the server, for leases. */
int pg__now_ms(PGconn *c, int64_t *ms, terr *e);

/* The job columns: store_common.h's STORE_JOB_COLS (both backends read
 * the same list, in the same order); read with pg__job_row. */
#define PG_JOB_COLS STORE_JOB_COLS
#define PG_JOB_NCOLS STORE_JOB_NCOLS
/* Every row of r (PG_JOB_COLS) as a new array of *n jobs (store_job_list's
 * allocation rule). 0 or T_ENOMEM. */
int pg__job_rows(PGresult *r, store_job **jobs, int *n, terr *e);
/* pg__exec with some parameters binary (lens/fmts per parameter, NULL:
 * all text) and the result in resfmt (0 text, 1 binary). */
int pg__exec_ex(PGconn *c, const char *sql, int n, const char *const *vals,
                const int *lens, const int *fmts, int resfmt, PGresult **res,
                const char *what, terr *e);
/* Connect to conninfo (libpq URI or key=value; 5 s connect timeout):
 * T_EUNAVAIL "store: cannot reach PostgreSQL: <libpq's words>" with any
 * password in those words replaced by "***". pg__connect's work. */
int pg__open_conn(const char *conninfo, PGconn **c, terr *e);
/* The node this store registered as (store_node_register sets it; "" before):
 * start and finish only touch rows that are unclaimed or claimed by it. */
void pg__set_node(pgstore *p, const char *node_id);
const char *pg__node(pgstore *p);
/* The data directory the store is tied to (store-id). */
const char *pg__data_dir(pgstore *p);
/* pg_schema.c: migrate (advisory lock 7243001) and tie the data directory
 * (meta.store_id and <data_dir>/store-id); *version: the schema version. */
int pg__migrate(PGconn *c, const char *data_dir, int *version, terr *e);
/* A heap copy of a text column (NULL for SQL NULL); sets *oom. */
char *pg__dup(PGresult *r, int row, int col, int *oom);
/* Text of an int64 / a double for a parameter (buf of 32 bytes). */
const char *pg__i64(char *buf, int64_t v);
const char *pg__f64(char *buf, double v);

/* A job row's 40 insert values (pg_jobs.c's INSERT order: id, owner,
 * kind, params, backend_requested, ..., parent, tile, tiles), text or
 * NULL, pointing into j and *jv; valid while both are. */
#define PG_INSERT_NCOLS 40
/* The jobs columns an insert names, in that order (status, the fifth, is
 * the literal 'queued', not one of the 40 values): pg_jobs.c's one row,
 * pg_bulk.c's chunk. */
#define PG_INSERT_COLUMNS                                                   \
  " (id, owner, kind, params, status, backend_requested, backend_used,"     \
  " backend_reason, estimate, priority, label, request_id, body_hash,"      \
  " timeout_s, created_at, started_at, finished_at, t_queue,"              \
  " progress_done, progress_total, error_code, error_message,"             \
  " result_dtype, result_path, compare, max_abs_diff, attempts,"           \
  " t_prepare, t_h2d, t_compute, t_d2h, t_store, t_total, result_shape,"   \
  " result_bytes, result_nonconverged, output_file, result_parts, parent," \
  " tile, tiles)"
typedef struct pg_job_vals {
  char b[20][32];
  char shape[STORE_MAXDIM * 22 + 4];
  const char *v[PG_INSERT_NCOLS];
} pg_job_vals;
const char **pg__job_values(const store_job *j, pg_job_vals *jv);
/* pg_bulk.c: rows of a store_insert_jobs chunk in one INSERT (and one
 * read of the request_ids already taken). ok[i] != 0: row i is tried
 * (no references in its params, not refused); found/existing as
 * store_job_insert's per row. 0 when every tried row went in or was
 * found, 1 when one was not (a body_hash conflict, a race lost): nothing
 * is changed then only if the caller rolls back; else a terr code. */
int pg__insert_bulk(PGconn *c, const store_job *const *rows, int n,
                    const int *ok, store_job *found, int *existing, terr *e);
/* v[0..n) as a text[] literal ({"a","b",NULL}: quotes and backslashes
 * escaped); heap, NULL on no memory. */
char *pg__text_array(const char *const *v, int n);
/* 1 when params mention an array or a job result (lock_refs walks them). */
int pg__has_refs(const char *params);

/* The job writes on a connection the caller holds inside its transaction
 * (the [sync] entries and the writer thread share them). insert: *found /
 * *existing as store_job_insert (j complete: id, owner, status set);
 * finish: row (when not NULL) gets the job as written. */
int pg__insert_on(pgstore *p, PGconn *c, const store_job *j, store_job *found,
                  int *existing, terr *e);
int pg__start_on(pgstore *p, PGconn *c, const char *id, int64_t started_at,
                 const char *backend_used, const char *reason,
                 const char *estimate, terr *e);
/* A start the writer folded into the same job's finish (both queued at
 * once: pg_store.c); the finish writes it as pg__start_on would have,
 * when the row is still queued. */
typedef struct pg_start {
  int64_t started_at;
  const char *backend_used, *reason, *estimate;
} pg_start;
int pg__finish_on(pgstore *p, PGconn *c, const char *id,
                  const store_job_end *end, const pg_start *start,
                  store_job *row, terr *e);
/* A finish's 31 values ($1 id, $2 status, ..., $13 the result's .npy
 * (binary: result_npy_len bytes), ..., $24 this node, $25 held, ..., $28..
 * $31 a folded start), pointing into id, end, start and *fv. */
#define PG_FINISH_NVALS 31
typedef struct pg_fin_vals {
  char b[14][32];
  char shape[STORE_MAXDIM * 22 + 4];
  const char *v[PG_FINISH_NVALS];
} pg_fin_vals;
const char **pg__finish_values(pgstore *p, const char *id,
                               const store_job_end *end, const pg_start *st,
                               pg_fin_vals *fv);
/* The finish's SET list and its WHERE beyond the id, with P(n, "type")
 * naming value n (a parameter "$n::type", or a column of unnest'ed rows:
 * pg_bulk.c). A folded start (value 28 not NULL) counts only on a row
 * still queued (old values in SET): as pg__start_on, whose WHERE wants
 * status queued. The fence: node NULL, no node of ours yet (value 24
 * ''), or ours; held (value 25): claimed by this node still, not taken
 * back by the reaper. */
#define PG_FINISH_SET(P)                                                     \
  "started_at = CASE WHEN " P(28, "bigint") " IS NOT NULL AND"              \
  " status = 'queued' THEN " P(28, "bigint") " ELSE started_at END,"        \
  " backend_reason = CASE WHEN " P(28, "bigint") " IS NOT NULL AND"         \
  " status = 'queued' THEN " P(30, "text") " ELSE backend_reason END,"      \
  " estimate = CASE WHEN " P(28, "bigint") " IS NOT NULL AND"               \
  " status = 'queued' THEN " P(31, "text") " ELSE estimate END,"            \
  " attempts = attempts + CASE WHEN " P(28, "bigint") " IS NOT NULL AND"    \
  " status = 'queued' AND node IS NULL THEN 1 ELSE 0 END,"                  \
  " status = " P(2, "text") ", finished_at = " P(3, "bigint") ","           \
  " t_queue = " P(4, "float8") ", result_dtype = " P(5, "text") ","         \
  " result_path = " P(6, "text") ", compare = " P(7, "text") ","            \
  " max_abs_diff = " P(8, "float8") ", error_code = " P(9, "text") ","      \
  " error_message = " P(10, "text") ","                                     \
  " progress_done = " P(11, "bigint") ","                                   \
  " progress_total = " P(12, "bigint") ", result_npy = " P(13, "bytea") "," \
  " t_prepare = " P(14, "float8") ", t_h2d = " P(15, "float8") ","          \
  " t_compute = " P(16, "float8") ", t_d2h = " P(17, "float8") ","          \
  " t_store = " P(18, "float8") ", t_total = " P(19, "float8") ","          \
  " result_shape = " P(20, "text") ", result_bytes = " P(21, "bigint") ","  \
  " result_nonconverged = " P(22, "bigint") ","                             \
  " result_parts = " P(23, "text") ","                                      \
  " node = COALESCE(NULLIF(" P(24, "text") ", ''), node),"                  \
  " lease_until = NULL, devices = " P(26, "text") ","                       \
  " backend_used = COALESCE(" P(27, "text") ", CASE WHEN " P(28, "bigint")  \
  " IS NOT NULL AND status = 'queued' THEN " P(29, "text") " END,"          \
  " backend_used)"
#define PG_FINISH_WHERE(P)                                                   \
  "status IN ('queued','running') AND (node IS NULL OR " P(24, "text")      \
  " = '' OR node = " P(24, "text") ") AND (" P(25, "int") " = 0 OR "        \
  P(24, "text") " = '' OR node IS NOT NULL)"
int pg__progress_on(PGconn *c, const char *id, int64_t done, int64_t total,
                    terr *e);
/* A [sync] write: flush the async queue, then run fn(p, c, arg, e) in one
 * transaction on a pooled connection (committed when fn returns 0, rolled
 * back otherwise). */
typedef int (*pg_txfn)(pgstore *p, PGconn *c, void *arg, terr *e);
int pg__write(pgstore *p, pg_txfn fn, void *arg, terr *e);
/* pg__write without waiting for the async queue: for a write that no
 * queued op of this node orders (the claim: it takes only committed,
 * unclaimed rows; waiting for the writer's batch and its commit put a
 * whole commit in front of every claim). */
int pg__write_now(pgstore *p, pg_txfn fn, void *arg, terr *e);
/* A [sync] write through the writer's queue, sharing its batch's commit
 * (pg_store.c: the group commit of submits). */
int pg__write_grouped(pgstore *p, pg_txfn fn, void *arg, terr *e);
int pg_job_insert_many(void *impl, store_job *jobs, int n, int *existing, int *rcs, terr *errs, terr *e);
/* A read on a pooled connection: fn(p, c, arg, e), no transaction. */
int pg__read(pgstore *p, pg_txfn fn, void *arg, terr *e);

/* pg_bulk.c: several finishes in one UPDATE (the writer's batch). Each
 * f[i] whose row the UPDATE ended gets done = 1 and *row (when not NULL)
 * the job as written; the others (fenced, ended already, an id twice)
 * are left for pg__finish_on, which says why. 0 or a terr code (the
 * transaction is then aborted). */
typedef struct pg_fin {
  const char *id;
  const store_job_end *end;
  const pg_start *st;
  store_job *row;
  int done;
} pg_fin;
int pg__finish_bulk(pgstore *p, PGconn *c, pg_fin *f, int n, terr *e);
/* The backend's non-cluster entries (store_backend.h's, impl a pgstore). */
int pg_job_insert(void *impl, store_job *j, int *existing, terr *e);
int pg_job_get(void *impl, const char *id, const char *owner, store_job *out, terr *e);
int pg_job_get_many(void *impl, const char *const *ids, int n, store_job *out, int *found, terr *e);
int pg_job_list(void *impl, const store_job_filter *f, store_job **jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e);
int pg_job_unfinished(void *impl, store_job **jobs, int *n, terr *e);
int pg_job_children(void *impl, const char *parent_id, store_job **jobs, int *n, terr *e);
int pg_job_result_npy(void *impl, const char *id, const char *owner, void **npy, size_t *len, terr *e);
int pg_job_start(void *impl, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate, terr *e);
int pg_job_finish(void *impl, const char *id, const store_job_end *end, terr *e);
int pg_job_requeue(void *impl, const char *id, terr *e);
int pg_job_unstart(void *impl, const char *id, terr *e);
int pg_job_note_start(void *impl, const char *id, int attempt, terr *e);
int pg_job_delete(void *impl, const char *id, const char *owner, char ***paths, int *npaths, terr *e);
int pg_expire(void *impl, int64_t before_ms, char ***paths, int *npaths, terr *e);
int pg_stats(void *impl, const char *owner, store_stat **rows, int *n, terr *e);
int pg_job_counts(void *impl, const char *owner, int64_t counts[5], terr *e);
int pg_finished_by_step(void *impl, const char *owner, int64_t since_ms, int64_t step_ms, int nsteps, int64_t *counts, terr *e);
int pg_array_insert(void *impl, store_array *a, int *existing, terr *e);
int pg_array_get(void *impl, const char *id, const char *owner, store_array *out, terr *e);
int pg_array_delete(void *impl, const char *id, const char *owner, char **path, terr *e);
int pg_array_list(void *impl, const char *owner, const char *cursor, int limit, store_array **arrays, int *n, char *next_cursor, terr *e);
/* pg_arrays.c, for job and array delete: how many queued or running jobs'
 * params mention id, 0 when none, <0 (e set) on error; first[T_ID_MAX]
 * gets the smallest (earliest) such job's id. */
int pg__referenced(PGconn *c, const char *id, char *first, terr *e);
/* Append the non-NULL column 0 of every row of r to (*paths, *n, *cap). */
int pg__collect_paths(PGresult *r, char ***paths, int *n, size_t *cap,
                      terr *e);

/* pg_cluster.c: the cluster entries of store_pg_backend. */
int pg_node_register(void *impl, store_node *n, terr *e);
int pg_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms,
                      const char *const *held, int nheld, char ***cancel,
                      int *ncancel, char ***lost, int *nlost, terr *e);
int pg_node_leave(void *impl, const char *node_id, terr *e);
int pg_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n,
                 terr *e);
int pg_job_claim(void *impl, const char *node_id, store_claim_room room,
                 int parents, int64_t lease_ms, store_job **jobs, int *n,
                 terr *e);
int pg_reap(void *impl, int max_attempts, store_reaped **jobs, int *n,
            terr *e);
int pg_job_cancel_request(void *impl, const char *id, const char *owner,
                          int *ended, terr *e);
int pg_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token,
              terr *e);
void pg_unlisten(void *impl, uint64_t token);
int pg_queue_depth(void *impl, int64_t *queued, terr *e);
/* Stop the listener thread (store close). */
void pg__listen_stop(pgstore *p);

#endif
