/* store_lifecycle.c — a job's lifecycle writes: start ([sync], or [async]
 * and lazy), finish ([sync], or [async] with a completion callback),
 * requeue and delete.
 *
 * Every write is a store_wop function run on the writer thread (store.c),
 * writing with one statement (store_wop.one_stmt: no SAVEPOINT of its own);
 * the transition it makes is guarded by the status in its WHERE clause, in
 * the same transaction, so racing callers cannot both pass, and an UPDATE
 * that changed nothing says why (why_unchanged). A [sync] op's arguments
 * live on the waiting caller's stack, an [async] op's in one heap block with
 * the op, strings included.
 *
 * A finish queued while its job's lazy start still waits in the queue takes
 * the start over (store_wop.absorbed): one UPDATE sets both, so a tiny job
 * costs an INSERT and an UPDATE; and when its async insert still waits too
 * (store_wop.absorbed_insert), the finish inserts the ended row instead
 * (store__insert_ended, store_jobs.c): one INSERT. That insert's failure is
 * the insert's own (counted and logged as before); the finish then runs its
 * UPDATE as if it had taken nothing over, so it fails as it did when the
 * row was missing. The [sync] start, requeue, unstart and note name their
 * job (store_wop.touch_id): a start or insert queued before them stays
 * where it is. The async finish hands the row as
 * committed to its callback after the commit, and to store_recent.c, which
 * answers reads of it from then on; a delete forgets it there before its
 * own commit. That row is the caller's with the end applied when the
 * caller gives it (store_job_end.before: this writer is the row's only
 * writer, so it is what a read would give; test_store checks they are
 * equal), else read back in the finish's transaction.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"
#include "util/datadir.h"

/* After an UPDATE guarded by a status that changed no row: say why. */
static int why_unchanged(sqstore *s, const char *id, const char *want,
                         terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w, "SELECT status FROM jobs WHERE id = ?1", &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW)
    rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s is %s, not %s", id,
                  (const char *)sqlite3_column_text(st, 0), want);
  else if (step == SQLITE_DONE)
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
  else
    rc = store__dberr(e, s->w.db, "job status");
  sqlite3_reset(st);
  return rc;
}

typedef store_start_args start_args;

static int start_fn(sqstore *s, store_wop *op, terr *e) {
  start_args *a = op->arg;
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "UPDATE jobs SET status = 'running', started_at = ?2,"
                       " backend_used = ?3, backend_reason = ?4,"
                       " estimate = ?5, attempts = attempts + 1"
                       " WHERE id = ?1 AND status = 'queued'",
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, a->started_at);
  store__bind_text(st, 3, a->backend_used);
  store__bind_text(st, 4, a->reason);
  store__bind_text(st, 5, a->estimate);
  if ((rc = store__exec_stmt(&s->w, st, "start job", e))) return rc;
  if (sqlite3_changes(s->w.db) == 0) return why_unchanged(s, a->id, "queued", e);
  return 0;
}

/* [sync] See store.h. T_ENOTFOUND when absent, T_ECONFLICT when the job is
 * not queued (canceled meanwhile, or already running). */
int sq_job_start(sqstore *s, const char *id, int64_t started_at,
                    const char *backend_used, const char *reason,
                    const char *estimate, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  start_args a = {id, backend_used, reason, estimate, started_at};
  store_wop op = {.fn = start_fn, .arg = &a, .one_stmt = 1, .touch_id = id,
                  .passable = 1};
  return store__write_op(s, &op, e);
}

/* An async start: the op, its arguments and their strings in one block. */
typedef struct start_op {
  store_wop op; /* first: the writer frees the block through it */
  start_args a;
  char text[]; /* id, backend_used, reason, estimate, NUL-terminated */
} start_op;

/* Writer thread. A job that is no longer queued (canceled, deleted) is not
 * an error here: its worker learns that from the finish. */
static int start_async_fn(sqstore *s, store_wop *op, terr *e) {
  int rc = start_fn(s, op, e);
  if (rc == T_ECONFLICT || rc == T_ENOTFOUND) {
    log_debug("store: async start of %s skipped: %s",
              ((start_args *)op->arg)->id, e->message);
    terr_clear(e);
    return 0;
  }
  return rc;
}

/* [async] See store.h. Any thread; never waits for the database. */
void sq_job_start_async(sqstore *s, const char *id, int64_t started_at,
                           const char *backend_used, const char *reason,
                           const char *estimate) {
  if (!s || !id) return;
  size_t n = strlen(id) + 1 + (backend_used ? strlen(backend_used) + 1 : 0) +
             (reason ? strlen(reason) + 1 : 0) +
             (estimate ? strlen(estimate) + 1 : 0);
  start_op *o = calloc(1, sizeof *o + n);
  if (!o) {
    log_warn("store: no memory to record the start of %s", id);
    return;
  }
  char *p = o->text;
  o->a.id = store__pack_str(&p, id);
  o->a.backend_used = store__pack_str(&p, backend_used);
  o->a.reason = store__pack_str(&p, reason);
  o->a.estimate = store__pack_str(&p, estimate);
  o->a.started_at = started_at;
  o->op.fn = start_async_fn;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.passable = 1;
  o->op.lazy = 1;
  o->op.start_id = o->a.id; /* a finish queued meanwhile takes it over */
  if (store__write_async(s, &o->op) != 0)
    log_warn("store: closing; the start of %s is not recorded", id);
}

typedef struct finish_args {
  const char *id;
  const store_job_end *end;
  store_job *row; /* non-NULL: the row as committed, for the callback */
  int composed;   /* 1: *row was made from end->before (no read back) */
  uint64_t gen;   /* store__recent_gen when it was read back */
} finish_args;

#define FINISH_SET                                                          \
  "UPDATE jobs SET status = ?2, finished_at = ?3, t_queue = ?4,"            \
  " result_dtype = ?5, result_path = ?6, compare = ?7, max_abs_diff = ?8,"  \
  " error_code = ?9, error_message = ?10, progress_done = ?11,"             \
  " progress_total = ?12, result_npy = ?13, t_prepare = ?18, t_h2d = ?19,"  \
  " t_compute = ?20, t_d2h = ?21, t_store = ?22, t_total = ?23,"           \
  " result_shape = ?24, result_bytes = ?25, result_nonconverged = ?26,"     \
  " result_parts = ?27, devices = ?28,"                                      \
  " backend_used = COALESCE(?29, backend_used)"
#define FINISH_WHERE " WHERE id = ?1 AND status IN ('queued','running')"
static int finish_row(sqstore *s, finish_args *a, terr *e);
/* With the job's start taken over (store_wop.absorbed): the start's
 * columns too; the start would have needed status 'queued', which the
 * finish accepts. */
#define FINISH_START                                                        \
  ", started_at = ?14, backend_used = ?15, backend_reason = ?16,"           \
  " estimate = ?17, attempts = attempts + 1"

static int finish_fn(sqstore *s, store_wop *op, terr *e) {
  finish_args *a = op->arg;
  const store_job_end *x = a->end;
  const start_args *sa = op->absorbed;
  sqlite3_stmt *st;
  int rc;
  if (op->absorbed_insert) { /* the row goes in ended: no UPDATE */
    rc = store__insert_ended(s, op->absorbed_insert, sa, x, e);
    if (rc && sqlite3_get_autocommit(s->w.db)) return rc; /* all undone */
    if (!rc) return finish_row(s, a, e);
    terr_clear(e); /* the insert's failure is its own; the finish goes on
                      as it would have: its row is missing */
  }
  rc = store__stmt(&s->w,
                       sa ? FINISH_SET FINISH_START FINISH_WHERE
                          : FINISH_SET FINISH_WHERE,
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, job_status_name(x->status), -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, x->finished_at);
  static const int tcols[JOB_T__COUNT] = {4, 18, 19, 20, 21, 22, 23};
  static const int rcols[4] = {5, 24, 25, 26};
  store__bind_timings(st, &x->timings, tcols);
  store__bind_result(st, &x->result, rcols);
  store__bind_text(st, 6, x->result_path);
  store__bind_text(st, 7, x->compare);
  if (isnan(x->max_abs_diff)) sqlite3_bind_null(st, 8);
  else sqlite3_bind_double(st, 8, x->max_abs_diff);
  store__bind_text(st, 9, x->error_code);
  store__bind_text(st, 10, x->error_message);
  sqlite3_bind_int64(st, 11, x->progress_done);
  sqlite3_bind_int64(st, 12, x->progress_total);
  if (x->result_npy)
    sqlite3_bind_blob64(st, 13, x->result_npy, x->result_npy_len,
                        SQLITE_STATIC);
  store__bind_text(st, 27, x->result_parts);
  store__bind_text(st, 28, x->devices);
  store__bind_text(st, 29, x->backend_used);
  if (sa) { /* its backend_used the end's when it has one (the last wins) */
    sqlite3_bind_int64(st, 14, sa->started_at);
    store__bind_text(st, 15,
                     x->backend_used ? x->backend_used : sa->backend_used);
    store__bind_text(st, 16, sa->reason);
    store__bind_text(st, 17, sa->estimate);
  }
  if ((rc = store__exec_stmt(&s->w, st, "finish job", e))) return rc;
  if (sqlite3_changes(s->w.db) == 0)
    return why_unchanged(s, a->id, "queued or running", e);
  return finish_row(s, a, e);
}

/* The finish's row for its callback, once its write is done: composed by
 * the caller, or read back in this transaction. */
static int finish_row(sqstore *s, finish_args *a, terr *e) {
  sqlite3_stmt *st;
  int rc;
  if (!a->row) return 0;
  if (a->composed) { /* the caller's row and this end: what a read gives */
    a->gen = store__recent_gen(s);
    return 0;
  }
  /* The row as this transaction has it (a plain read of a page the UPDATE
   * just touched; cheaper than RETURNING's temporary table). */
  if ((rc = store__stmt(&s->w,
                        "SELECT " STORE_JOB_COLS " FROM jobs WHERE id = ?1",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  a->gen = store__recent_gen(s);
  if (sqlite3_step(st) != SQLITE_ROW)
    rc = store__dberr(e, s->w.db, "read the finished job");
  else if (store__job_row(st, a->row))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  sqlite3_reset(st);
  return rc;
}

/* A finish that took its job's insert over: its ended row may share a
 * multi-row INSERT (store_wop.row_of); then its row for the callback. */
static int finish_row_of(store_wop *op, store_row *out) {
  if (!op->absorbed_insert) return 1; /* an UPDATE */
  const finish_args *a = op->arg;
  return store__ended_row(op->absorbed_insert, op->absorbed, a->end, out);
}

static int finish_row_done(sqstore *s, store_wop *op, terr *e) {
  return finish_row(s, op->arg, e);
}

/* [sync] See store.h. end->status must be final (T_EINVAL otherwise);
 * T_ECONFLICT when the job already ended. */
int sq_job_finish(sqstore *s, const char *id, const store_job_end *end,
                     terr *e) {
  if (!s || !id || !end) return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  finish_args a = {id, end, NULL, 0, 0};
  store_wop op = {.fn = finish_fn, .arg = &a, .one_stmt = 1,
                  .absorb_id = id, .row_of = finish_row_of,
                  .row_done = finish_row_done, .rows_fn = store__run_rows,
                  .passable = 1};
  return store__write_op(s, &op, e);
}

/* An async finish: the op, its arguments, a copy of the end record and
 * its strings and blob, and the row read back, in one block. */
typedef struct finish_op {
  store_wop op; /* first: the writer frees the block through it */
  finish_args a;
  store_job_end end;
  store_job row; /* zeroed until read back */
  store_finish_fn cb;
  void *cb_arg;
  char text[];
} finish_op;

/* After the batch (store_done.c's thread): hand the row (or the error)
 * over. */
static void finish_after(sqstore *s, store_wop *op) {
  finish_op *o = (finish_op *)op;
  if (op->rc) {
    store_job_clear(&o->row); /* read back, then rolled back */
    o->cb(o->cb_arg, op->rc, &op->err, NULL);
  } else { /* committed: readers may have it from memory from now on */
    store__recent_put(s, &o->row, o->a.gen);
    o->cb(o->cb_arg, 0, &op->err, &o->row);
  }
}

/* [async] See store.h. */
int sq_job_finish_async(sqstore *s, const char *id, const store_job_end *end,
                           store_finish_fn cb, void *arg, terr *e) {
  if (!s || !id || !end || !cb)
    return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  const char *strs[] = {id, end->result_path, end->compare, end->error_code,
                        end->error_message, end->result_parts, end->devices,
                        end->backend_used};
  size_t n = end->result_npy ? end->result_npy_len : 0;
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    n += store__str_size(strs[i]);
  finish_op *o = calloc(1, sizeof *o + n);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  store_job_end *x = &o->end;
  *x = *end;
  char *p = o->text;
  if (end->result_npy) { /* first: no alignment needed for bytes anyway */
    memcpy(p, end->result_npy, end->result_npy_len);
    x->result_npy = p;
    p += end->result_npy_len;
  }
  o->a.id = store__pack_str(&p, id);
  x->result_path = store__pack_str(&p, end->result_path);
  x->compare = store__pack_str(&p, end->compare);
  x->error_code = store__pack_str(&p, end->error_code);
  x->error_message = store__pack_str(&p, end->error_message);
  x->result_parts = store__pack_str(&p, end->result_parts);
  x->devices = store__pack_str(&p, end->devices);
  x->backend_used = store__pack_str(&p, end->backend_used);
  o->a.end = x;
  o->row.max_abs_diff = NAN;
  o->a.row = &o->row;
  /* The row from the caller's and the end, made here on the caller's
   * thread: the writer, this row's only writer, need not read it back
   * (store.h, store_job_end.before). Out of memory: read back. */
  o->a.composed =
      end->before && store_job_ended(&o->row, end->before, end) == 0;
  x->before = NULL; /* not kept past this call */
  o->cb = cb;
  o->cb_arg = arg;
  o->op.fn = finish_fn;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.row_of = finish_row_of;
  o->op.row_done = finish_row_done;
  o->op.rows_fn = store__run_rows;
  o->op.passable = 1;
  o->op.after = finish_after;
  o->op.absorb_id = o->a.id;
  if (store__write_async(s, &o->op) != 0)
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  return 0;
}

#define REQUEUE_SET                                                         \
  "UPDATE jobs SET status = 'queued', started_at = 0,"                      \
  " backend_used = NULL, backend_reason = NULL,"                            \
  " progress_done = 0, progress_total = 0"

/* [sync] A one-statement write of job id's row: a queued start or
 * insert of that job stays where it is (store_wop.touch_id). */
static int touch_write(sqstore *s, store_wfn fn, void *arg, const char *id,
                       terr *e) {
  store_wop op = {.fn = fn, .arg = arg, .one_stmt = 1, .touch_id = id,
                  .passable = 1};
  return store__write_op(s, &op, e);
}

static int requeue_sql(sqstore *s, const char *id, const char *sql, terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w, sql, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  if ((rc = store__exec_stmt(&s->w, st, "requeue job", e))) return rc;
  if (sqlite3_changes(s->w.db) == 0)
    return why_unchanged(s, id, "queued or running", e);
  return 0;
}

static int requeue_fn(sqstore *s, store_wop *op, terr *e) {
  return requeue_sql(
      s, op->arg,
      REQUEUE_SET " WHERE id = ?1 AND status IN ('queued','running')", e);
}

static int unstart_fn(sqstore *s, store_wop *op, terr *e) {
  return requeue_sql(s, op->arg,
                     REQUEUE_SET ", attempts = MAX(attempts - 1, 0)"
                                 " WHERE id = ?1 AND status = 'running'",
                     e);
}

/* [sync] See store.h. T_ECONFLICT when the job is not running. */
int sq_job_unstart(sqstore *s, const char *id, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  return touch_write(s, unstart_fn, (void *)id, id, e);
}

typedef struct note_args {
  const char *id;
  int attempt;
} note_args;

static int note_fn(sqstore *s, store_wop *op, terr *e) {
  note_args *a = op->arg;
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "UPDATE jobs SET attempts = MAX(attempts, ?2)"
                       " WHERE id = ?1 AND status IN ('queued','running')",
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, a->attempt);
  return store__exec_stmt(&s->w, st, "note a start", e);
}

/* [sync] See store.h. */
int sq_job_note_start(sqstore *s, const char *id, int attempt, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  note_args a = {id, attempt};
  return touch_write(s, note_fn, &a, id, e);
}

/* [sync] See store.h. Running (or queued) -> queued, forgetting the start
 * time, backend choice and progress; attempts is kept. T_ECONFLICT when the
 * job already ended. */
int sq_job_requeue(sqstore *s, const char *id, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  return touch_write(s, requeue_fn, (void *)id, id, e);
}

static int delete_fn(sqstore *s, store_wop *op, terr *e) {
  store_del_args *a = op->arg;
  sqlite3_stmt *st;
  int rc = store__del_find(
      s, a,
      "SELECT owner, status FROM jobs WHERE id = ?1 AND parent IS NULL",
      "job", &st, e);
  if (rc) return rc;
  int sv = job_status_parse((const char *)sqlite3_column_text(st, 1));
  if (sv < 0 || !job_status_final((job_status)sv)) {
    rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s is %s; cancel it first",
                  a->id, job_status_name((job_status)sv));
  }
  sqlite3_reset(st);
  if (rc) return rc;
  char first[T_ID_MAX];
  int ref = store__referenced(s, a->id, first, e); /* a chained input */
  if (ref < 0) return T_EIO;
  if (ref > 0)
    return store_refused_by_dependents(e, "job", a->id, ref, first);
  /* A split job's tiles go with it: none may still run. */
  if ((rc = store__stmt(&s->w,
                        "SELECT count(*) FROM jobs WHERE parent = ?1"
                        " AND status IN ('queued','running')",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  int busy = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
  sqlite3_reset(st);
  if (busy < 0) return store__dberr(e, s->w.db, "delete job");
  if (busy > 0)
    return terr_set(e, T_ECONFLICT, "id", -1,
                    "job %s still has %d tile(s) queued or running", a->id,
                    busy);
  /* Its result's files, every part's (its tiles' too), removed with the
   * rows. */
  if ((rc = store__stmt(&s->w,
                        "SELECT result_path FROM jobs WHERE id = ?1"
                        " OR parent = ?1",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  if ((rc = store__collect_paths(s, st, &a->more, &a->nmore, &a->cap,
                                 "delete job", e)))
    return rc;
  if ((rc = store__stmt(&s->w,
                        STORE_PART_PATHS_SQL "(old.id = ?1 OR old.parent = ?1)",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  if ((rc = store__collect_paths(s, st, &a->more, &a->nmore, &a->cap,
                                 "delete job", e)))
    return rc;
  store__recent_forget(s, a->id); /* before the commit: see store_recent.c */
  return store__del_exec(s, "DELETE FROM jobs WHERE id = ?1 OR parent = ?1",
                         a->id, "job", e);
}

/* [sync] See store.h. Not one statement: the reference check and the
 * delete share a savepoint. */
int sq_job_delete(sqstore *s, const char *id, const char *owner,
                     char ***paths, int *npaths, terr *e) {
  *paths = NULL;
  *npaths = 0;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_del_args a = {.id = id, .owner = owner};
  int rc;
  for (int tries = 0;; tries++) { /* a full disk: once more, on the reserve */
    rc = store__write(s, delete_fn, &a, e);
    if (!rc) break;
    for (int i = 0; i < a.nmore; i++) free(a.more[i]);
    free(a.more);
    a = (store_del_args){.id = id, .owner = owner};
    if (rc != T_ENOSPACE || tries) return rc;
    reserve_release();
  }
  *paths = a.more;
  *npaths = a.nmore;
  return T_OK;
}
