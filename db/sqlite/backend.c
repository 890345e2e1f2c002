/* db/sqlite/backend.c — the SQLite backend's entry in the store interface
 * (db/store_backend.h): store_sqlite_open and the table, each entry a
 * typed wrapper of the sq_ function that does the work. SQLite holds one
 * node: the cluster entries are NULL (T_ENOTIMPL). */
#include "db/sqlite/store_int.h"

int store_sqlite_open(const char *data_dir, void **impl, terr *e) {
  sqstore *s = NULL;
  int rc = sq_open(data_dir, &s, e);
  *impl = s;
  return rc;
}

static void be_close(void *impl) {
  sq_close(impl);
}

static int be_ready(void *impl) {
  return sq_ready(impl);
}

static int be_schema_version(void *impl) {
  return sq_schema_version(impl);
}

static int be_job_insert(void *impl, store_job *j, int *existing, terr *e) {
  return sq_job_insert(impl, j, existing, e);
}

static int be_job_insert_async(void *impl, store_job *j, terr *e) {
  return sq_job_insert_async(impl, j, e);
}

static int be_job_insert_many(void *impl, store_job *jobs, int n, int *existing, int *rcs, terr *errs, terr *e) {
  return sq_job_insert_many(impl, jobs, n, existing, rcs, errs, e);
}

static int be_sync(void *impl, terr *e) {
  return sq_sync(impl, e);
}

static int be_job_get(void *impl, const char *id, const char *owner, store_job *out, terr *e) {
  return sq_job_get(impl, id, owner, out, e);
}

static int be_job_by_request(void *impl, const char *owner, const char *rid, store_job *out, terr *e) {
  return sq_job_by_request(impl, owner, rid, out, e);
}

static int be_job_list(void *impl, const store_job_filter *f, store_job **jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e) {
  return sq_job_list(impl, f, jobs, n, has_next, next, total, e);
}

static int be_job_start(void *impl, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate, terr *e) {
  return sq_job_start(impl, id, started_at, backend_used, reason, estimate, e);
}

static void be_job_start_async(void *impl, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate) {
  sq_job_start_async(impl, id, started_at, backend_used, reason, estimate);
}

static void be_job_progress(void *impl, const char *id, int64_t done, int64_t total) {
  sq_job_progress(impl, id, done, total);
}

static int be_job_finish(void *impl, const char *id, const store_job_end *end, terr *e) {
  return sq_job_finish(impl, id, end, e);
}

static int be_job_finish_async(void *impl, const char *id, const store_job_end *end, store_finish_fn cb, void *arg, terr *e) {
  return sq_job_finish_async(impl, id, end, cb, arg, e);
}

static int be_job_result_npy(void *impl, const char *id, const char *owner, void **npy, size_t *len, terr *e) {
  return sq_job_result_npy(impl, id, owner, npy, len, e);
}

static int be_job_requeue(void *impl, const char *id, terr *e) {
  return sq_job_requeue(impl, id, e);
}

static int be_job_unstart(void *impl, const char *id, terr *e) {
  return sq_job_unstart(impl, id, e);
}

static int be_job_note_start(void *impl, const char *id, int attempt, terr *e) {
  return sq_job_note_start(impl, id, attempt, e);
}

static int be_job_delete(void *impl, const char *id, const char *owner, char ***paths, int *npaths, terr *e) {
  return sq_job_delete(impl, id, owner, paths, npaths, e);
}

static int be_job_unfinished(void *impl, store_job **jobs, int *n, terr *e) {
  return sq_job_unfinished(impl, jobs, n, e);
}

static int be_expire(void *impl, int64_t before_ms, char ***paths, int *npaths, terr *e) {
  return sq_expire(impl, before_ms, paths, npaths, e);
}

static int be_stats(void *impl, const char *owner, store_stat **rows, int *n, terr *e) {
  return sq_stats(impl, owner, rows, n, e);
}

static int be_job_counts(void *impl, const char *owner, int64_t counts[5], terr *e) {
  return sq_job_counts(impl, owner, counts, e);
}

static int be_finished_by_step(void *impl, const char *owner, int64_t since_ms, int64_t step_ms, int nsteps, int64_t *counts, terr *e) {
  return sq_finished_by_step(impl, owner, since_ms, step_ms, nsteps, counts, e);
}

static int be_array_insert(void *impl, store_array *a, int *existing, terr *e) {
  return sq_array_insert(impl, a, existing, e);
}

static int be_array_get(void *impl, const char *id, const char *owner, store_array *out, terr *e) {
  return sq_array_get(impl, id, owner, out, e);
}

static int be_array_delete(void *impl, const char *id, const char *owner, char **path, terr *e) {
  return sq_array_delete(impl, id, owner, path, e);
}

static int be_array_list(void *impl, const char *owner, const char *cursor, int limit, store_array **arrays, int *n, char *next_cursor, terr *e) {
  return sq_array_list(impl, owner, cursor, limit, arrays, n, next_cursor, e);
}

static int64_t be_insert_failures(void *impl) {
  return atomic_load(&((sqstore *)impl)->n_insert_failed);
}

static int be_insert_error(void *impl, const char *id, terr *out) {
  return sq_insert_error(impl, id, out);
}

static int be_job_children(void *impl, const char *parent_id, store_job **jobs, int *n, terr *e) {
  return sq_job_children(impl, parent_id, jobs, n, e);
}

const store_backend store_sqlite_backend = {
    .name = "sqlite",
    .cluster = 0,
    .close = be_close,
    .ready = be_ready,
    .schema_version = be_schema_version,
    .job_insert = be_job_insert,
    .job_insert_async = be_job_insert_async,
    .job_insert_many = be_job_insert_many,
    .sync = be_sync,
    .insert_failures = be_insert_failures,
    .insert_error = be_insert_error,
    .job_get = be_job_get,
    .job_by_request = be_job_by_request,
    .job_list = be_job_list,
    .job_start = be_job_start,
    .job_start_async = be_job_start_async,
    .job_progress = be_job_progress,
    .job_finish = be_job_finish,
    .job_finish_async = be_job_finish_async,
    .job_result_npy = be_job_result_npy,
    .job_requeue = be_job_requeue,
    .job_unstart = be_job_unstart,
    .job_note_start = be_job_note_start,
    .job_delete = be_job_delete,
    .job_unfinished = be_job_unfinished,
    .expire = be_expire,
    .stats = be_stats,
    .job_counts = be_job_counts,
    .finished_by_step = be_finished_by_step,
    .array_insert = be_array_insert,
    .array_get = be_array_get,
    .array_delete = be_array_delete,
    .array_list = be_array_list,
    .job_children = be_job_children,
    .node_register = NULL,
    .node_heartbeat = NULL,
    .node_leave = NULL,
    .node_list = NULL,
    .job_claim = NULL,
    .reap = NULL,
    .job_cancel_request = NULL,
    .listen = NULL,
    .unlisten = NULL,
    .queue_depth = NULL,
};
