/* store_jobs.c — the job rows: insert (with idempotency, or [async], or a
 * chunk of store_insert_jobs: its rows under one savepoint, row by row
 * with a savepoint each only when one fails), get, list, the unfinished ones for recovery, a result kept in the row.
 * The lifecycle writes
 * (start, finish, requeue, delete) are in store_lifecycle.c.
 *
 * Every write here is a store_wop function that runs on the writer thread
 * (see store.c); the [sync] insert's arguments live on the waiting
 * caller's stack, the [async] insert's in one heap block with the op,
 * strings included. A finish queued while the async insert still waits
 * takes it over (store.c, store_lifecycle.c): store__insert_ended writes
 * the row as the insert, the start and the end would have left it; every
 * async insert that fails, so taken over or not, is counted
 * (n_insert_failed, store_insert_failures) for jobs:batch's answer. Checks that decide the outcome (request_id reuse) run
 * inside the same op, hence the same transaction, as the change they
 * guard, so two racing callers cannot both pass; so does the check that
 * the arrays and jobs (their results as inputs) a job references still
 * exist (refs_exist), which a delete or an expiry could otherwise slip
 * between. The insert writes with
 * one statement (store_wop.one_stmt): no SAVEPOINT of its own. Reads run
 * on the calling thread's read-only connection.
 *
 * Ownership: rows read into a store_job are heap strings the caller releases
 * with store_job_clear; arrays of jobs are freed by the caller (each job
 * cleared, then the array).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"
#include "util/vec.h"

/* Columns of STORE_JOB_COLS holding the timings (JOB_T_* order). */
static const int timing_cols[JOB_T__COUNT] = {17, 27, 28, 29, 30, 31, 32};

static void read_timings(sqlite3_stmt *st, job_timings *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < JOB_T__COUNT; i++)
    if (sqlite3_column_type(st, timing_cols[i]) != SQLITE_NULL)
      job_timings_put(t, (job_timing)i, sqlite3_column_double(st, timing_cols[i]));
}

/* dtype at 22, shape 33 ("[3,4]"), bytes 34, nonconverged 35. */
static void read_result(sqlite3_stmt *st, job_result_info *r) {
  memset(r, 0, sizeof *r);
  const char *dt = (const char *)sqlite3_column_text(st, 22);
  if (!dt) return;
  snprintf(r->dtype, sizeof r->dtype, "%s", dt);
  const char *sh = (const char *)sqlite3_column_text(st, 33);
  while (sh && *sh && r->ndim < STORE_MAXDIM) {
    while (*sh == '[' || *sh == ',' || *sh == ' ') sh++;
    if (*sh < '0' || *sh > '9') break;
    char *end;
    r->shape[r->ndim++] = strtoll(sh, &end, 10);
    sh = end;
  }
  r->bytes = sqlite3_column_int64(st, 34);
  r->nonconverged = sqlite3_column_int64(st, 35);
}

int store__job_row(sqlite3_stmt *st, store_job *j) {
  int oom = 0;
  memset(j, 0, sizeof *j);
  const unsigned char *id = sqlite3_column_text(st, 0);
  snprintf(j->id, sizeof j->id, "%s", id ? (const char *)id : "");
  j->owner = store__col_dup(st, 1, &oom);
  j->kind = store__col_dup(st, 2, &oom);
  j->params = store__col_dup(st, 3, &oom);
  const unsigned char *status = sqlite3_column_text(st, 4);
  int sv = job_status_parse((const char *)status);
  j->status = sv < 0 ? JOB_FAILED : (job_status)sv;
  j->backend_requested = store__col_dup(st, 5, &oom);
  j->backend_used = store__col_dup(st, 6, &oom);
  j->backend_reason = store__col_dup(st, 7, &oom);
  j->estimate = store__col_dup(st, 8, &oom);
  j->priority = sqlite3_column_int(st, 9);
  j->label = store__col_dup(st, 10, &oom);
  j->request_id = store__col_dup(st, 11, &oom);
  j->body_hash = store__col_dup(st, 12, &oom);
  j->timeout_s = sqlite3_column_double(st, 13);
  j->created_at = sqlite3_column_int64(st, 14);
  j->started_at = sqlite3_column_int64(st, 15);
  j->finished_at = sqlite3_column_int64(st, 16);
  read_timings(st, &j->timings);
  j->progress_done = sqlite3_column_int64(st, 18);
  j->progress_total = sqlite3_column_int64(st, 19);
  j->error_code = store__col_dup(st, 20, &oom);
  j->error_message = store__col_dup(st, 21, &oom);
  read_result(st, &j->result);
  j->result_path = store__col_dup(st, 23, &oom);
  j->compare = store__col_dup(st, 24, &oom);
  j->max_abs_diff = sqlite3_column_type(st, 25) == SQLITE_NULL
                        ? NAN
                        : sqlite3_column_double(st, 25);
  j->attempts = sqlite3_column_int(st, 26);
  j->output_file = store__col_dup(st, 36, &oom);
  j->result_parts = store__col_dup(st, 37, &oom);
  j->node = store__col_dup(st, 38, &oom);
  j->lease_until = sqlite3_column_int64(st, 39);
  j->cancel_requested = sqlite3_column_int(st, 40);
  j->parent = store__col_dup(st, 41, &oom);
  j->tile = sqlite3_column_int(st, 42);
  j->tiles = sqlite3_column_int(st, 43);
  j->devices = store__col_dup(st, 44, &oom);
  if (oom) {
    store_job_clear(j);
    return T_ENOMEM;
  }
  return 0;
}

/* Step a statement, appending every row (at most `max`, < 0: all) to a new
 * array. Resets the statement. */
static int collect_jobs(store_conn *c, sqlite3_stmt *st, int max,
                        store_job **jobs, int *n, terr *e) {
  store_job *v = NULL;
  int cnt = 0, rc = 0, step;
  size_t cap = 0;
  while ((max < 0 || cnt < max) && (step = sqlite3_step(st)) == SQLITE_ROW) {
    if (tvec_grow(&v, &cap, sizeof *v, (size_t)cnt + 1, 0)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      goto fail;
    }
    if (store__job_row(st, &v[cnt])) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      goto fail;
    }
    cnt++;
  }
  if ((max < 0 || cnt < max) && step != SQLITE_DONE) {
    rc = store__dberr(e, c->db, "read jobs");
    goto fail;
  }
  sqlite3_reset(st);
  *jobs = v;
  *n = cnt;
  return 0;
fail:
  sqlite3_reset(st);
  for (int i = 0; i < cnt; i++) store_job_clear(&v[i]);
  free(v);
  return rc;
}

/* ---- insert -------------------------------------------------------------- */

typedef struct insert_args {
  const store_job *j;
  store_job found; /* the stored job when request_id matched */
  int existing;
} insert_args;

/* Params that reference an array or a job's result: the insert checks
 * that they exist (refs_exist) in its own op. */
static int has_refs(const store_job *j) {
  return j->params &&
         (strstr(j->params, "\"array\"") || strstr(j->params, "\"result\""));
}

/* An array or a job the new job references ({"array": "<id>"} or
 * {"result": "<job id>"} anywhere in its params) that is not in the
 * store: T_ENOTFOUND naming its field ("params.inputs.x", as the API
 * names it). On the writer thread, in the insert's own op: a delete (an
 * array's or a job's, also writer ops, which refuse while a queued or
 * running job references the row) or an expiry is either before it (the
 * row is gone: this insert fails) or after it (it sees the job), never
 * between the check and the insert. Only the referenced job's row must
 * exist here (that it succeeded is the submit's check,
 * compute/array/store_source.c). Only params
 * that mention "array" or "result" are walked (json_tree). */
static int refs_exist(sqstore *s, const store_job *j, terr *e) {
  if (!has_refs(j)) return 0;
  sqlite3_stmt *st;
  int rc =
      store__stmt(&s->w,
                  "SELECT t.fullkey, t.key, t.atom FROM json_tree(?1) AS t"
                  " WHERE t.type = 'text' AND ((t.key = 'array' AND NOT EXISTS"
                  " (SELECT 1 FROM arrays WHERE arrays.id = t.atom)) OR"
                  " (t.key = 'result' AND NOT EXISTS"
                  " (SELECT 1 FROM jobs WHERE jobs.id = t.atom)))"
                  " ORDER BY t.fullkey LIMIT 1",
                  &st, e);
  if (rc) return rc;
  store__bind_text(st, 1, j->params);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    /* "$.inputs.x.array" -> "params.inputs.x" */
    const char *k = (const char *)sqlite3_column_text(st, 0);
    const char *key = (const char *)sqlite3_column_text(st, 1);
    const char *id = (const char *)sqlite3_column_text(st, 2);
    int arr = key && strcmp(key, "array") == 0;
    size_t suffix = arr ? 6 : 7; /* ".array", ".result" */
    size_t n = k ? strlen(k) : 0;
    if (n >= suffix + 1 &&
        strcmp(k + n - suffix, arr ? ".array" : ".result") == 0)
      n -= suffix;
    char field[TERR_FIELD_MAX];
    snprintf(field, sizeof field, "params%.*s", n ? (int)n - 1 : 0,
             n ? k + 1 : "");
    rc = terr_set(e, T_ENOTFOUND, field, -1, "%s %s not found",
                  arr ? "array" : "job", id ? id : "");
  } else if (step != SQLITE_DONE) {
    rc = store__dberr(e, s->w.db, "insert job: references");
  }
  sqlite3_reset(st);
  return rc;
}


static int insert_fn(sqstore *s, store_wop *op, terr *e) {
  insert_args *a = op->arg;
  const store_job *j = a->j;
  sqlite3_stmt *st;
  int rc;
  if (j->request_id) {
    rc = store__stmt(&s->w,
                     "SELECT " STORE_JOB_COLS " FROM jobs"
                     " WHERE owner = ?1 AND request_id = ?2",
                     &st, e);
    if (rc) return rc;
    store__bind_text(st, 1, j->owner);
    store__bind_text(st, 2, j->request_id);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
      rc = store__job_row(st, &a->found);
      sqlite3_reset(st);
      if (rc) return terr_set(e, rc, "", -1, "store: out of memory");
      if (!store__same_str(a->found.body_hash, j->body_hash)) {
        store_job_clear(&a->found);
        return terr_set(e, T_ECONFLICT, "request_id", -1,
                        "'%s' was used for a different request body",
                        j->request_id);
      }
      a->existing = 1;
      return 0;
    }
    sqlite3_reset(st);
    if (step != SQLITE_DONE) return store__dberr(e, s->w.db, "insert job");
  }
  if ((rc = refs_exist(s, j, e))) return rc;
  store_row r = {.j = *j};
  r.j.status = JOB_QUEUED;
  r.j.devices = NULL;
  return store__insert_row(s, &r, e);
}

/* See store_int.h. The row: the insert's, then the start's columns as
 * start_fn (and FINISH_START) sets them, then the end's as FINISH_SET
 * does (backend_used: the end's when it has one). Shallow: nothing is
 * allocated, so nothing here can run out of memory. */
int store__ended_row(store_wop *ins, const store_start_args *sa,
                     const store_job_end *x, store_row *out) {
  insert_args *a = ins->arg;
  out->j = *a->j;
  store_job *t = &out->j;
  if (sa) {
    t->started_at = sa->started_at;
    t->backend_used = (char *)sa->backend_used;
    t->backend_reason = (char *)sa->reason;
    t->estimate = (char *)sa->estimate;
    t->attempts++;
  }
  store_job_apply_end(t, x); /* the columns as the finish writes them */
  out->npy = x->result_npy;
  out->npy_len = x->result_npy ? x->result_npy_len : 0;
  return has_refs(t);
}

/* See store_int.h. */
int store__insert_ended(sqstore *s, store_wop *ins, const store_start_args *sa,
                        const store_job_end *x, terr *e) {
  store_row r;
  (void)store__ended_row(ins, sa, x, &r);
  int rc = refs_exist(s, &r.j, e);
  if (!rc) rc = store__insert_row(s, &r, e);
  if (rc) { /* the insert's own failure, for its after-callback */
    ins->rc = rc;
    ins->err = *e;
  }
  return rc;
}

/* [sync] See store.h. An empty j->id gets a new "j_" id, a zero created_at
 * the current time, a NULL owner "" and a NULL backend_requested "auto";
 * the job is stored as queued whatever j->status says (j->status is set). */
int sq_job_insert(sqstore *s, store_job *j, int *existing, terr *e) {
  if (existing) *existing = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  int prc = store__job_insert_prep(j, e);
  if (prc) return prc;
  store_job tmp = *j;
  if (!tmp.owner) tmp.owner = "";
  if (!tmp.backend_requested) tmp.backend_requested = "auto";
  insert_args a = {.j = &tmp};
  store_job_clear(&a.found);
  /* a barrier: the [async] inserts queued before it commit no later
   * (compute/jobs/rids.h's marks; store_fold.c's holds) */
  store_wop op = {.fn = insert_fn, .arg = &a, .one_stmt = 1, .barrier = 1};
  int rc = store__write_op(s, &op, e);
  if (rc) {
    store_job_clear(&a.found); /* the commit may fail after a match */
    return rc;
  }
  if (a.existing) {
    store_job_clear(j);
    *j = a.found;
    if (existing) *existing = 1;
  }
  return 0;
}

/* A chunk of store_insert_jobs: its rows, each with its own outcome. */
typedef struct insert_many_args {
  store_job *rows; /* prepared, owner and backend_requested set */
  insert_args *a;  /* per row */
  int n;
  int *rcs;
  terr *errs;
} insert_many_args;

static int wstep(sqstore *s, const char *sql, terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w, sql, &st, e);
  return rc ? rc : store__exec_stmt(&s->w, st, "savepoint", e);
}

/* Writer thread: the chunk's rows under one savepoint, none of their own:
 * 0 when every row went in; 1 when one failed (the savepoint is rolled
 * back: go row by row); else the error that ends the chunk. */
static int insert_many_fast(sqstore *s, insert_many_args *m, terr *e) {
  int rc = wstep(s, "SAVEPOINT many", e);
  if (rc) return rc;
  for (int i = 0; i < m->n; i++) {
    if (m->rcs[i]) continue; /* refused before the store */
    store_wop row = {.fn = insert_fn, .arg = &m->a[i]};
    terr_clear(&m->errs[i]);
    int r = insert_fn(s, &row, &m->errs[i]);
    if (sqlite3_get_autocommit(s->w.db)) /* an I/O error ended it all */
      return r ? (*e = m->errs[i], r) : store__dberr(e, s->w.db, "insert jobs");
    if (r) {
      for (int k = 0; k <= i; k++) {
        store_job_clear(&m->a[k].found);
        m->a[k].existing = 0;
      }
      terr_clear(&m->errs[i]);
      rc = wstep(s, "ROLLBACK TO many", e);
      if (!rc) rc = wstep(s, "RELEASE many", e);
      return rc ? rc : 1;
    }
  }
  return wstep(s, "RELEASE many", e);
}

/* Writer thread: the fast way first; when a row fails, every row in its
 * own savepoint (a row that fails undoes only itself), the whole chunk in
 * the batch's transaction. */
static int insert_many_fn(sqstore *s, store_wop *op, terr *e) {
  insert_many_args *m = op->arg;
  int frc = insert_many_fast(s, m, e);
  if (frc != 1) return frc;
  for (int i = 0; i < m->n; i++) {
    store_job_clear(&m->a[i].found);
    m->a[i].existing = 0;
    if (m->rcs[i]) continue; /* refused before the store */
    store_wop row = {.fn = insert_fn, .arg = &m->a[i]};
    sqlite3_stmt *st;
    int rc = store__stmt(&s->w, "SAVEPOINT row", &st, e);
    if (!rc) rc = store__exec_stmt(&s->w, st, "savepoint", e);
    if (rc) return rc;
    terr_clear(&m->errs[i]);
    m->rcs[i] = insert_fn(s, &row, &m->errs[i]);
    if (sqlite3_get_autocommit(s->w.db)) /* an I/O error ended it all */
      return m->rcs[i] ? (*e = m->errs[i], m->rcs[i])
                       : store__dberr(e, s->w.db, "insert jobs");
    if (m->rcs[i]) {
      store_job_clear(&m->a[i].found);
      m->a[i].existing = 0;
      if ((rc = store__stmt(&s->w, "ROLLBACK TO row", &st, e)) ||
          (rc = store__exec_stmt(&s->w, st, "savepoint", e)))
        return rc;
    }
    if ((rc = store__stmt(&s->w, "RELEASE row", &st, e)) ||
        (rc = store__exec_stmt(&s->w, st, "savepoint", e)))
      return rc;
  }
  return 0;
}

/* [sync] See store.h (store_insert_jobs: one chunk, one op). */
int sq_job_insert_many(sqstore *s, store_job *jobs, int n, int *existing,
                       int *rcs, terr *errs, terr *e) {
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_job *rows = calloc((size_t)n, sizeof *rows);
  insert_args *a = calloc((size_t)n, sizeof *a);
  if (!rows || !a) {
    free(rows);
    free(a);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  for (int i = 0; i < n; i++) {
    existing[i] = 0;
    terr_clear(&errs[i]);
    rcs[i] = store__job_insert_prep(&jobs[i], &errs[i]);
    rows[i] = jobs[i];
    if (!rows[i].owner) rows[i].owner = "";
    if (!rows[i].backend_requested) rows[i].backend_requested = "auto";
    a[i].j = &rows[i];
    store_job_clear(&a[i].found);
  }
  insert_many_args m = {rows, a, n, rcs, errs};
  store_wop op = {.fn = insert_many_fn, .arg = &m, .barrier = 1};
  int rc = store__write_op(s, &op, e); /* a barrier, as sq_job_insert's */
  for (int i = 0; i < n; i++) {
    if (rc) {
      store_job_clear(&a[i].found);
      if (!rcs[i]) {
        rcs[i] = rc;
        if (e) errs[i] = *e;
      }
      continue;
    }
    if (a[i].existing) {
      store_job_clear(&jobs[i]);
      jobs[i] = a[i].found;
      existing[i] = 1;
    }
  }
  free(rows);
  free(a);
  return rc;
}

/* An async insert: the op, its arguments and the row's strings in one
 * block. */
typedef struct insert_op {
  store_wop op; /* first: the writer frees the block through it */
  insert_args a;
  store_job row;
  char text[];
} insert_op;

/* Writer thread, after the batch: a failed insert (its own, or the
 * insert of a finish that took it over) is counted and logged. */
static void insert_after(sqstore *s, store_wop *op) {
  if (!op->rc) return;
  const insert_args *a = op->arg;
  pthread_mutex_lock(&s->mu);
  unsigned k = s->ins_err_next++ % STORE_INSERT_ERRS;
  t_scopy(s->ins_err[k].id, T_ID_MAX, a->j->id);
  s->ins_err[k].err = op->err;
  if (!s->ins_err[k].err.code) s->ins_err[k].err.code = (terr_code)op->rc;
  pthread_mutex_unlock(&s->mu);
  /* counted after it is kept: a caller that sees the count move finds it */
  atomic_fetch_add_explicit(&s->n_insert_failed, 1, memory_order_relaxed);
  log_warn("store: async write failed: %s", op->err.message);
}

/* See store.h (store_insert_error). The newest first. */
int sq_insert_error(sqstore *s, const char *id, terr *out) {
  int found = 0;
  pthread_mutex_lock(&s->mu);
  for (unsigned i = 1; i <= STORE_INSERT_ERRS && !found; i++) {
    unsigned k = (s->ins_err_next - i) % STORE_INSERT_ERRS;
    if (s->ins_err[k].id[0] && strcmp(s->ins_err[k].id, id) == 0) {
      *out = s->ins_err[k].err;
      found = 1;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

/* An async insert's row for a shared INSERT (store_wop.row_of): one
 * without request_id (its lookup comes first) nor references. */
static int insert_row_of(store_wop *op, store_row *out) {
  const store_job *j = ((insert_args *)op->arg)->j;
  if (j->request_id || has_refs(j)) return 1;
  out->j = *j;
  out->j.status = JOB_QUEUED;
  out->j.devices = NULL;
  out->npy = NULL;
  out->npy_len = 0;
  return 0;
}

static int insert_row_done(sqstore *s, store_wop *op, terr *e) {
  (void)s, (void)op, (void)e;
  return 0;
}

/* [async] See store.h. */
int sq_job_insert_async(sqstore *s, store_job *j, terr *e) {
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  int prc = store__job_insert_prep(j, e);
  if (prc) return prc;
  const char *owner = j->owner ? j->owner : "";
  const char *breq = j->backend_requested ? j->backend_requested : "auto";
  const char *strs[] = {owner,          j->kind,          j->params,
                        breq,           j->backend_used,  j->backend_reason,
                        j->estimate,    j->label,         j->body_hash,
                        j->request_id,
                        j->error_code,    j->error_message,
                        j->result_path,   j->compare,       j->output_file,
                        j->parent};
  size_t n = 0;
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    n += store__str_size(strs[i]);
  insert_op *o = calloc(1, sizeof *o + n);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  store_job *r = &o->row;
  *r = *j; /* numbers and the id; the strings are re-pointed below */
  char *p = o->text;
  /* The row is read-only from here on: insert_fn only binds it. */
  r->owner = (char *)store__pack_str(&p, owner);
  r->kind = (char *)store__pack_str(&p, j->kind);
  r->params = (char *)store__pack_str(&p, j->params);
  r->backend_requested = (char *)store__pack_str(&p, breq);
  r->backend_used = (char *)store__pack_str(&p, j->backend_used);
  r->backend_reason = (char *)store__pack_str(&p, j->backend_reason);
  r->estimate = (char *)store__pack_str(&p, j->estimate);
  r->label = (char *)store__pack_str(&p, j->label);
  r->request_id = (char *)store__pack_str(&p, j->request_id);
  r->body_hash = (char *)store__pack_str(&p, j->body_hash);
  r->error_code = (char *)store__pack_str(&p, j->error_code);
  r->error_message = (char *)store__pack_str(&p, j->error_message);
  r->result_path = (char *)store__pack_str(&p, j->result_path);
  r->compare = (char *)store__pack_str(&p, j->compare);
  r->parent = (char *)store__pack_str(&p, j->parent);
  r->node = NULL;
  r->output_file = (char *)store__pack_str(&p, j->output_file);
  r->result_parts = NULL; /* set by a finish only */
  o->a.j = r;
  o->op.fn = insert_fn;
  o->op.row_of = insert_row_of;
  o->op.row_done = insert_row_done;
  o->op.rows_fn = store__run_rows;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.lazy = 1;
  o->op.after = insert_after;
  o->op.insert_id = r->id; /* a finish queued meanwhile takes it over */
  /* held back until its job ends (store_fold.c), unless a delete of what
   * it names must find it where the queue put it */
  o->op.hold = !has_refs(r);
  if (store__write_async(s, &o->op) != 0)
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  return 0;
}

/* ---- reads ---------------------------------------------------------------- */

/* See store.h. *out is filled only on success (clear it with
 * store_job_clear). */
int sq_job_get(sqstore *s, const char *id, const char *owner, store_job *out,
                  terr *e) {
  memset(out, 0, sizeof *out);
  out->max_abs_diff = NAN;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  int rc;
  if (store__recent_get(s, id, owner, out, &rc, e)) /* ended: in memory */
    return rc;
  store_conn *c;
  sqlite3_stmt *st;
  rc = store__read_stmt(
      s, "SELECT " STORE_JOB_COLS " FROM jobs WHERE id = ?1", &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    const char *o = (const char *)sqlite3_column_text(st, 1);
    if (owner && (!o || strcmp(o, owner) != 0)) {
      rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
    } else if (store__job_row(st, out)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    }
  } else if (step == SQLITE_DONE) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
  } else {
    rc = store__dberr(e, c->db, "get job");
  }
  sqlite3_reset(st);
  return rc;
}

/* See store.h. The unique index (owner, request_id) finds it; the read
 * sees what is committed now (its own statement, its own snapshot). */
int sq_job_by_request(sqstore *s, const char *owner, const char *rid,
                      store_job *out, terr *e) {
  if (!s || !rid) return terr_set(e, T_EINVAL, "request_id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s,
                            "SELECT " STORE_JOB_COLS " FROM jobs"
                            " WHERE owner = ?1 AND request_id = ?2",
                            &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, owner ? owner : "", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, rid, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    if (store__job_row(st, out))
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  } else if (step == SQLITE_DONE) {
    rc = terr_set(e, T_ENOTFOUND, "request_id", -1, "no job with request_id %s",
                  rid);
  } else {
    rc = store__dberr(e, c->db, "get job by request_id");
  }
  sqlite3_reset(st);
  return rc;
}

/* q as a LIKE pattern: %q% with \ escaping \, % and _ (ESCAPE '\'). */
static int like_pattern(const char *q, char *out, size_t cap) {
  size_t n = 0;
  if (cap < 3) return -1;
  out[n++] = '%';
  for (const char *c = q; *c; c++) {
    if (n + 3 >= cap) return -1;
    if (*c == '%' || *c == '_' || *c == '\\') out[n++] = '\\';
    out[n++] = *c;
  }
  out[n++] = '%';
  out[n] = 0;
  return 0;
}

/* See store.h. The SQL is built from the filters that are set (a bounded
 * number of shapes — filters x orders x directions x cursor — each prepared
 * once per connection). Fetches limit+1 rows to know whether a next page
 * exists; the count is a second statement over the same filters. */
int sq_job_list(sqstore *s, const store_job_filter *f, store_job **jobs,
                   int *n, int *has_next, store_job_pos *next,
                   int64_t *total, terr *e) {
  *jobs = NULL;
  *n = 0;
  *has_next = 0;
  if (total) *total = 0;
  if (!s || !f) return terr_set(e, T_EINVAL, "", -1, "store: no filter");
  /* The caller may pass its position as next: copy it first. */
  store_job_pos after;
  int has_after = f->after != NULL;
  if (has_after) after = *f->after;
  memset(next, 0, sizeof *next);
  int frc = store__job_filter_check(f, e);
  if (frc) return frc;
  char pat[2 * STORE_JOB_Q_MAX + 3];
  if (f->q && (strlen(f->q) > STORE_JOB_Q_MAX ||
               like_pattern(f->q, pat, sizeof pat)))
    return terr_set(e, T_EINVAL, "q", -1, "longer than %d bytes",
                    STORE_JOB_Q_MAX);
  char where[1024];
  size_t wl = 0;
  where[0] = 0;
  /* Parameters by number, so that the binding below is shape-independent. */
  if (f->owner) wl += (size_t)snprintf(where + wl, sizeof where - wl,
                                       " AND owner = ?1");
  if (f->status >= 0)
    wl += (size_t)snprintf(where + wl, sizeof where - wl, " AND status = ?2");
  if (f->kind)
    wl += (size_t)snprintf(where + wl, sizeof where - wl, " AND kind = ?3");
  if (f->label)
    wl += (size_t)snprintf(where + wl, sizeof where - wl, " AND label = ?4");
  if (f->backend)
    /* "cuda" matches requested "cuda", used "cuda" and used "cuda:<n>":
     * the range [b":", b";") holds exactly the strings starting "b:". */
    wl += (size_t)snprintf(
        where + wl, sizeof where - wl,
        " AND (backend_requested = ?5 OR backend_used = ?5 OR"
        " (backend_used >= ?5 || ':' AND backend_used < ?5 || ';'))");
  if (f->q) /* LIKE: ASCII case-insensitive (SQLite's default) */
    wl += (size_t)snprintf(where + wl, sizeof where - wl,
                           " AND (id LIKE ?8 ESCAPE '\\' OR"
                           " label LIKE ?8 ESCAPE '\\')");

  const char *key = store__order_key_sql(f->order, !f->asc);
  const char *kcmp = !f->asc ? "<" : ">";
  /* created: the id in the direction asked; others: ties newest first. */
  const char *icmp = !key && !!f->asc ? ">" : "<";
  char sql[2048];
  size_t len = (size_t)snprintf(sql, sizeof sql,
                                "SELECT " STORE_JOB_COLS " FROM jobs WHERE parent IS NULL%s",
                                where);
  if (has_after && key)
    len += (size_t)snprintf(sql + len, sizeof sql - len,
                            " AND (%s %s ?9 OR (%s = ?9 AND id < ?6))", key,
                            kcmp, key);
  else if (has_after)
    len += (size_t)snprintf(sql + len, sizeof sql - len, " AND id %s ?6", icmp);
  if (key)
    snprintf(sql + len, sizeof sql - len, " ORDER BY %s %s, id DESC LIMIT ?7",
             key, !f->asc ? "DESC" : "ASC");
  else
    snprintf(sql + len, sizeof sql - len, " ORDER BY id %s LIMIT ?7",
             !f->asc ? "DESC" : "ASC");

  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s, sql, &c, &st, e);
  if (rc) return rc;
  if (f->owner) sqlite3_bind_text(st, 1, f->owner, -1, SQLITE_STATIC);
  if (f->status >= 0)
    sqlite3_bind_text(st, 2, job_status_name((job_status)f->status), -1,
                      SQLITE_STATIC);
  if (f->kind) sqlite3_bind_text(st, 3, f->kind, -1, SQLITE_STATIC);
  if (f->label) sqlite3_bind_text(st, 4, f->label, -1, SQLITE_STATIC);
  if (f->backend) sqlite3_bind_text(st, 5, f->backend, -1, SQLITE_STATIC);
  if (has_after) {
    sqlite3_bind_text(st, 6, after.id, -1, SQLITE_STATIC);
    if (f->order == STORE_ORDER_KIND)
      sqlite3_bind_text(st, 9, after.text, -1, SQLITE_STATIC);
    else if (f->order == STORE_ORDER_STATUS)
      sqlite3_bind_int(st, 9, (int)after.num);
    else if (key)
      sqlite3_bind_double(st, 9, after.num);
  }
  if (f->q) sqlite3_bind_text(st, 8, pat, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 7, f->limit + 1);
  store_job *v;
  int cnt;
  if ((rc = collect_jobs(c, st, -1, &v, &cnt, e))) return rc;
  if (cnt > f->limit) {
    store_job_clear(&v[f->limit]);
    cnt = f->limit;
    *has_next = 1;
    store__job_pos(&v[cnt - 1], f->order, !f->asc, next);
  }
  if (total) {
    snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE parent IS NULL%s", where);
    rc = store__read_stmt(s, sql, &c, &st, e);
    if (!rc) {
      if (f->owner) sqlite3_bind_text(st, 1, f->owner, -1, SQLITE_STATIC);
      if (f->status >= 0)
        sqlite3_bind_text(st, 2, job_status_name((job_status)f->status), -1,
                      SQLITE_STATIC);
      if (f->kind) sqlite3_bind_text(st, 3, f->kind, -1, SQLITE_STATIC);
      if (f->label) sqlite3_bind_text(st, 4, f->label, -1, SQLITE_STATIC);
      if (f->backend) sqlite3_bind_text(st, 5, f->backend, -1, SQLITE_STATIC);
      if (f->q) sqlite3_bind_text(st, 8, pat, -1, SQLITE_STATIC);
      if (sqlite3_step(st) == SQLITE_ROW)
        *total = sqlite3_column_int64(st, 0);
      else
        rc = store__dberr(e, c->db, "count jobs");
      sqlite3_reset(st);
    }
    if (rc) {
      for (int i = 0; i < cnt; i++) store_job_clear(&v[i]);
      free(v);
      *has_next = 0;
      return rc;
    }
  }
  *jobs = v;
  *n = cnt;
  return 0;
}

/* See store.h. Reads on the caller's connection; the partial index
 * jobs_unfinished serves the order. */
int sq_job_unfinished(sqstore *s, store_job **jobs, int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s,
                            "SELECT " STORE_JOB_COLS " FROM jobs"
                            " WHERE status IN ('queued','running')"
                            " ORDER BY priority DESC, created_at, id",
                            &c, &st, e);
  if (rc) return rc;
  return collect_jobs(c, st, -1, jobs, n, e);
}

/* See store.h. Reads on the caller's connection (index jobs_parent). */
int sq_job_children(sqstore *s, const char *parent_id, store_job **jobs,
                    int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!s || !parent_id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s,
                            "SELECT " STORE_JOB_COLS " FROM jobs"
                            " WHERE parent = ?1 ORDER BY tile, id",
                            &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, parent_id, -1, SQLITE_TRANSIENT);
  return collect_jobs(c, st, -1, jobs, n, e);
}

/* See store.h. Reads on the caller's connection. */
int sq_job_result_npy(sqstore *s, const char *id, const char *owner,
                         void **npy, size_t *len, terr *e) {
  *npy = NULL;
  *len = 0;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(
      s, "SELECT owner, result_npy FROM jobs WHERE id = ?1", &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    const char *o = (const char *)sqlite3_column_text(st, 0);
    if ((owner && (!o || strcmp(o, owner) != 0)) ||
        sqlite3_column_type(st, 1) != SQLITE_BLOB) {
      rc = terr_set(e, T_ENOTFOUND, "id", -1,
                    "no result of job %s in the store", id);
    } else {
      const void *b = sqlite3_column_blob(st, 1);
      int n = sqlite3_column_bytes(st, 1);
      void *copy = malloc(n > 0 ? (size_t)n : 1);
      if (!copy) {
        rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      } else {
        if (n > 0) memcpy(copy, b, (size_t)n);
        *npy = copy;
        *len = (size_t)n;
      }
    }
  } else if (step == SQLITE_DONE) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
  } else {
    rc = store__dberr(e, c->db, "job result");
  }
  sqlite3_reset(st);
  return rc;
}
