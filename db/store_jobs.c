/* store_jobs.c — the job rows: insert (with idempotency), get, list, the
 * lifecycle updates (start, finish, requeue), delete and recovery.
 *
 * Every write here is a store_wop function that runs on the writer thread
 * (see store.c); a [sync] op's arguments live on the waiting caller's
 * stack, an [async] op's (insert_async, start_async, finish_async) in one
 * heap block with the op, strings included. All of them write with one
 * statement (store_wop.one_stmt), so they need no SAVEPOINT of their own.
 * The async finish reads the row back in its transaction and hands it to
 * its callback after the commit. A finish queued while its job's lazy start
 * still waits in the queue takes the start over (store_wop.absorbed): one
 * UPDATE sets both, so a tiny job costs an INSERT and an UPDATE. Checks that decide the outcome (request_id reuse, the state
 * a transition starts from) run inside the same op, hence the same
 * transaction, as the change they guard, so two racing callers cannot both
 * pass. Reads run on the calling thread's read-only connection.
 *
 * Ownership: rows read into a store_job are heap strings the caller releases
 * with store_job_clear; arrays of jobs are freed by the caller (each job
 * cleared, then the array).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store_int.h"

static const char *const status_names[] = {"queued", "running", "succeeded",
                                           "failed", "canceled"};

/* "queued", "running", ... ("unknown" out of range); static strings. */
const char *job_status_name(job_status s) {
  return (unsigned)s < 5 ? status_names[s] : "unknown";
}

/* The job_status of a name, -1 when unknown or NULL. */
int job_status_parse(const char *s) {
  if (!s) return -1;
  for (int i = 0; i < 5; i++)
    if (strcmp(s, status_names[i]) == 0) return i;
  return -1;
}

/* Free every string of *j and zero it (max_abs_diff NaN). NULL ok. */
void store_job_clear(store_job *j) {
  if (!j) return;
  free(j->owner);
  free(j->kind);
  free(j->params);
  free(j->backend_requested);
  free(j->backend_used);
  free(j->backend_reason);
  free(j->estimate);
  free(j->label);
  free(j->request_id);
  free(j->body_hash);
  free(j->timings);
  free(j->error_code);
  free(j->error_message);
  free(j->result);
  free(j->result_path);
  free(j->compare);
  memset(j, 0, sizeof *j);
  j->max_abs_diff = NAN;
}

/* See store.h. */
int store_job_copy(store_job *dst, const store_job *src) {
  *dst = *src; /* numbers and the id */
  char **f[] = {&dst->owner, &dst->kind, &dst->params,
                &dst->backend_requested, &dst->backend_used,
                &dst->backend_reason, &dst->estimate, &dst->label,
                &dst->request_id, &dst->body_hash, &dst->timings,
                &dst->error_code, &dst->error_message, &dst->result,
                &dst->result_path, &dst->compare};
  int oom = 0;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (!*f[i]) continue;
    /* After a failure the rest become NULL, never src's strings. */
    char *c = oom ? NULL : strdup(*f[i]);
    if (!c) oom = 1;
    *f[i] = c;
  }
  if (oom) {
    store_job_clear(dst); /* frees the copies made */
    return T_ENOMEM;
  }
  return 0;
}

/* The column order store__job_row reads. */
#define JOB_COLS                                                              \
  "id, owner, kind, params, status, backend_requested, backend_used, "        \
  "backend_reason, estimate, priority, label, request_id, body_hash, "        \
  "timeout_s, created_at, started_at, finished_at, timings, progress_done, "  \
  "progress_total, error_code, error_message, result, result_path, "          \
  "compare, max_abs_diff, attempts"

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
  j->timings = store__col_dup(st, 17, &oom);
  j->progress_done = sqlite3_column_int64(st, 18);
  j->progress_total = sqlite3_column_int64(st, 19);
  j->error_code = store__col_dup(st, 20, &oom);
  j->error_message = store__col_dup(st, 21, &oom);
  j->result = store__col_dup(st, 22, &oom);
  j->result_path = store__col_dup(st, 23, &oom);
  j->compare = store__col_dup(st, 24, &oom);
  j->max_abs_diff = sqlite3_column_type(st, 25) == SQLITE_NULL
                        ? NAN
                        : sqlite3_column_double(st, 25);
  j->attempts = sqlite3_column_int(st, 26);
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
  int cnt = 0, cap = 0, rc = 0, step;
  while ((max < 0 || cnt < max) && (step = sqlite3_step(st)) == SQLITE_ROW) {
    if (cnt == cap) {
      cap = cap ? 2 * cap : 16;
      store_job *nv = realloc(v, (size_t)cap * sizeof *nv);
      if (!nv) {
        rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
        goto fail;
      }
      v = nv;
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

/* Copy s (may be NULL) to *p, advancing it: the async ops keep their
 * strings in the op's own allocation. Returns the copy or NULL. */
static const char *pack_str(char **p, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  memcpy(*p, s, n);
  const char *out = *p;
  *p += n;
  return out;
}

/* ---- insert -------------------------------------------------------------- */

typedef struct insert_args {
  const store_job *j;
  store_job found; /* the stored job when request_id matched */
  int existing;
} insert_args;

static int same_str(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

static int insert_fn(store *s, store_wop *op, terr *e) {
  insert_args *a = op->arg;
  const store_job *j = a->j;
  sqlite3_stmt *st;
  int rc;
  if (j->request_id) {
    rc = store__stmt(&s->w,
                     "SELECT " JOB_COLS " FROM jobs"
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
      if (!same_str(a->found.body_hash, j->body_hash)) {
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
  rc = store__stmt(&s->w,
                   "INSERT INTO jobs (" JOB_COLS ") VALUES (?1, ?2, ?3, ?4,"
                   " ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,"
                   " ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
                   &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
  store__bind_text(st, 2, j->owner);
  store__bind_text(st, 3, j->kind);
  store__bind_text(st, 4, j->params);
  sqlite3_bind_text(st, 5, "queued", -1, SQLITE_STATIC);
  store__bind_text(st, 6, j->backend_requested);
  store__bind_text(st, 7, j->backend_used);
  store__bind_text(st, 8, j->backend_reason);
  store__bind_text(st, 9, j->estimate);
  sqlite3_bind_int(st, 10, j->priority);
  store__bind_text(st, 11, j->label);
  store__bind_text(st, 12, j->request_id);
  store__bind_text(st, 13, j->body_hash);
  sqlite3_bind_double(st, 14, j->timeout_s);
  sqlite3_bind_int64(st, 15, j->created_at);
  sqlite3_bind_int64(st, 16, j->started_at);
  sqlite3_bind_int64(st, 17, j->finished_at);
  store__bind_text(st, 18, j->timings);
  sqlite3_bind_int64(st, 19, j->progress_done);
  sqlite3_bind_int64(st, 20, j->progress_total);
  store__bind_text(st, 21, j->error_code);
  store__bind_text(st, 22, j->error_message);
  store__bind_text(st, 23, j->result);
  store__bind_text(st, 24, j->result_path);
  store__bind_text(st, 25, j->compare);
  if (isnan(j->max_abs_diff)) sqlite3_bind_null(st, 26);
  else sqlite3_bind_double(st, 26, j->max_abs_diff);
  sqlite3_bind_int(st, 27, j->attempts);
  int step = sqlite3_step(st);
  sqlite3_reset(st);
  if (step == SQLITE_DONE) return 0;
  if ((sqlite3_extended_errcode(s->w.db) & 0xff) == SQLITE_CONSTRAINT)
    return terr_set(e, T_ECONFLICT, "id", -1, "job %s: %s", j->id,
                    sqlite3_errmsg(s->w.db));
  return store__dberr(e, s->w.db, "insert job");
}

/* [sync] See store.h. An empty j->id gets a new "j_" id, a zero created_at
 * the current time, a NULL owner "" and a NULL backend_requested "auto";
 * the job is stored as queued whatever j->status says (j->status is set). */
int store_job_insert(store *s, store_job *j, int *existing, terr *e) {
  if (existing) *existing = 0;
  if (!s || !j) return terr_set(e, T_EINVAL, "", -1, "store: no job");
  if (!j->kind || !*j->kind)
    return terr_set(e, T_EINVAL, "kind", -1, "missing");
  if (!j->params) return terr_set(e, T_EINVAL, "params", -1, "missing");
  if (!j->id[0]) t_id_new('j', j->id);
  if (!j->created_at) j->created_at = t_wall_ms();
  j->status = JOB_QUEUED;
  store_job tmp = *j;
  if (!tmp.owner) tmp.owner = "";
  if (!tmp.backend_requested) tmp.backend_requested = "auto";
  insert_args a = {.j = &tmp};
  store_job_clear(&a.found);
  int rc = store__write_one(s, insert_fn, &a, e);
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

/* An async insert: the op, its arguments and the row's strings in one
 * block. */
typedef struct insert_op {
  store_wop op; /* first: the writer frees the block through it */
  insert_args a;
  store_job row;
  char text[];
} insert_op;

static size_t str_size(const char *s) { return s ? strlen(s) + 1 : 0; }

/* [async] See store.h. */
int store_job_insert_async(store *s, store_job *j, terr *e) {
  if (!s || !j) return terr_set(e, T_EINVAL, "", -1, "store: no job");
  if (!j->kind || !*j->kind)
    return terr_set(e, T_EINVAL, "kind", -1, "missing");
  if (!j->params) return terr_set(e, T_EINVAL, "params", -1, "missing");
  if (j->request_id)
    return terr_set(e, T_EINVAL, "request_id", -1,
                    "store: an idempotent insert must be [sync]");
  if (!j->id[0]) t_id_new('j', j->id);
  if (!j->created_at) j->created_at = t_wall_ms();
  j->status = JOB_QUEUED;
  const char *owner = j->owner ? j->owner : "";
  const char *breq = j->backend_requested ? j->backend_requested : "auto";
  size_t n = str_size(owner) + str_size(j->kind) + str_size(j->params) +
             str_size(breq) + str_size(j->backend_used) +
             str_size(j->backend_reason) + str_size(j->estimate) +
             str_size(j->label) + str_size(j->body_hash) +
             str_size(j->timings) + str_size(j->error_code) +
             str_size(j->error_message) + str_size(j->result) +
             str_size(j->result_path) + str_size(j->compare);
  insert_op *o = calloc(1, sizeof *o + n);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  store_job *r = &o->row;
  *r = *j; /* numbers and the id; the strings are re-pointed below */
  char *p = o->text;
  /* The row is read-only from here on: insert_fn only binds it. */
  r->owner = (char *)pack_str(&p, owner);
  r->kind = (char *)pack_str(&p, j->kind);
  r->params = (char *)pack_str(&p, j->params);
  r->backend_requested = (char *)pack_str(&p, breq);
  r->backend_used = (char *)pack_str(&p, j->backend_used);
  r->backend_reason = (char *)pack_str(&p, j->backend_reason);
  r->estimate = (char *)pack_str(&p, j->estimate);
  r->label = (char *)pack_str(&p, j->label);
  r->request_id = NULL;
  r->body_hash = (char *)pack_str(&p, j->body_hash);
  r->timings = (char *)pack_str(&p, j->timings);
  r->error_code = (char *)pack_str(&p, j->error_code);
  r->error_message = (char *)pack_str(&p, j->error_message);
  r->result = (char *)pack_str(&p, j->result);
  r->result_path = (char *)pack_str(&p, j->result_path);
  r->compare = (char *)pack_str(&p, j->compare);
  o->a.j = r;
  o->op.fn = insert_fn;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.lazy = 1;
  if (store__write_async(s, &o->op) != 0)
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  return 0;
}

/* ---- reads ---------------------------------------------------------------- */

/* See store.h. *out is filled only on success (clear it with
 * store_job_clear). */
int store_job_get(store *s, const char *id, const char *owner, store_job *out,
                  terr *e) {
  memset(out, 0, sizeof *out);
  out->max_abs_diff = NAN;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__reader(s, &c, e);
  if (rc) return rc;
  if ((rc = store__stmt(c, "SELECT " JOB_COLS " FROM jobs WHERE id = ?1", &st,
                        e)))
    return rc;
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

/* See store.h. The SQL is built from the filters that are set (a bounded
 * number of shapes, each prepared once per connection). Fetches limit+1 rows
 * to know whether a next page exists. */
int store_job_list(store *s, const store_job_filter *f, store_job **jobs,
                   int *n, char *next_cursor, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!s || !f) return terr_set(e, T_EINVAL, "", -1, "store: no filter");
  /* The caller may pass its cursor buffer as next_cursor: copy it first. */
  char cursor[T_ID_MAX];
  int has_cursor = f->cursor != NULL;
  if (has_cursor) snprintf(cursor, sizeof cursor, "%s", f->cursor);
  next_cursor[0] = 0;
  if (f->limit < 1 || f->limit > 1000)
    return terr_set(e, T_EINVAL, "limit", f->limit, "must be 1..1000, got %d",
                    f->limit);
  if (f->status < -1 || f->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "unknown status %d", f->status);
  char sql[1024];
  size_t len = (size_t)snprintf(sql, sizeof sql,
                                "SELECT " JOB_COLS " FROM jobs WHERE 1");
  /* Parameters by number, so that the binding below is shape-independent. */
  if (f->owner) len += (size_t)snprintf(sql + len, sizeof sql - len,
                                        " AND owner = ?1");
  if (f->status >= 0)
    len += (size_t)snprintf(sql + len, sizeof sql - len, " AND status = ?2");
  if (f->kind)
    len += (size_t)snprintf(sql + len, sizeof sql - len, " AND kind = ?3");
  if (f->label)
    len += (size_t)snprintf(sql + len, sizeof sql - len, " AND label = ?4");
  if (f->backend)
    /* "cuda" matches requested "cuda", used "cuda" and used "cuda:<n>":
     * the range [b":", b";") holds exactly the strings starting "b:". */
    len += (size_t)snprintf(
        sql + len, sizeof sql - len,
        " AND (backend_requested = ?5 OR backend_used = ?5 OR"
        " (backend_used >= ?5 || ':' AND backend_used < ?5 || ';'))");
  if (has_cursor)
    len += (size_t)snprintf(sql + len, sizeof sql - len, " AND id < ?6");
  snprintf(sql + len, sizeof sql - len, " ORDER BY id DESC LIMIT ?7");

  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__reader(s, &c, e);
  if (rc) return rc;
  if ((rc = store__stmt(c, sql, &st, e))) return rc;
  if (f->owner) sqlite3_bind_text(st, 1, f->owner, -1, SQLITE_STATIC);
  if (f->status >= 0)
    sqlite3_bind_text(st, 2, status_names[f->status], -1, SQLITE_STATIC);
  if (f->kind) sqlite3_bind_text(st, 3, f->kind, -1, SQLITE_STATIC);
  if (f->label) sqlite3_bind_text(st, 4, f->label, -1, SQLITE_STATIC);
  if (f->backend) sqlite3_bind_text(st, 5, f->backend, -1, SQLITE_STATIC);
  if (has_cursor) sqlite3_bind_text(st, 6, cursor, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 7, f->limit + 1);
  store_job *v;
  int cnt;
  if ((rc = collect_jobs(c, st, -1, &v, &cnt, e))) return rc;
  if (cnt > f->limit) {
    store_job_clear(&v[f->limit]);
    cnt = f->limit;
    snprintf(next_cursor, T_ID_MAX, "%s", v[cnt - 1].id);
  }
  *jobs = v;
  *n = cnt;
  return 0;
}

/* See store.h. Reads on the caller's connection; the partial index
 * jobs_unfinished serves the order. */
int store_job_unfinished(store *s, store_job **jobs, int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__reader(s, &c, e);
  if (rc) return rc;
  if ((rc = store__stmt(c,
                        "SELECT " JOB_COLS " FROM jobs"
                        " WHERE status IN ('queued','running')"
                        " ORDER BY priority DESC, created_at, id",
                        &st, e)))
    return rc;
  return collect_jobs(c, st, -1, jobs, n, e);
}

/* ---- lifecycle -------------------------------------------------------------- */

/* After an UPDATE guarded by a status that changed no row: say why. */
static int why_unchanged(store *s, const char *id, const char *want,
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

typedef struct start_args {
  const char *id, *backend_used, *reason, *estimate;
  int64_t started_at;
} start_args;

static int start_fn(store *s, store_wop *op, terr *e) {
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
int store_job_start(store *s, const char *id, int64_t started_at,
                    const char *backend_used, const char *reason,
                    const char *estimate, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  start_args a = {id, backend_used, reason, estimate, started_at};
  return store__write_one(s, start_fn, &a, e);
}

/* An async start: the op, its arguments and their strings in one block. */
typedef struct start_op {
  store_wop op; /* first: the writer frees the block through it */
  start_args a;
  char text[]; /* id, backend_used, reason, estimate, NUL-terminated */
} start_op;

/* Writer thread. A job that is no longer queued (canceled, deleted) is not
 * an error here: its worker learns that from the finish. */
static int start_async_fn(store *s, store_wop *op, terr *e) {
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
void store_job_start_async(store *s, const char *id, int64_t started_at,
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
  o->a.id = pack_str(&p, id);
  o->a.backend_used = pack_str(&p, backend_used);
  o->a.reason = pack_str(&p, reason);
  o->a.estimate = pack_str(&p, estimate);
  o->a.started_at = started_at;
  o->op.fn = start_async_fn;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.lazy = 1;
  o->op.start_id = o->a.id; /* a finish queued meanwhile takes it over */
  if (store__write_async(s, &o->op) != 0)
    log_warn("store: closing; the start of %s is not recorded", id);
}

typedef struct finish_args {
  const char *id;
  const store_job_end *end;
  store_job *row; /* non-NULL: read the row back as committed (RETURNING) */
} finish_args;

#define FINISH_SET                                                          \
  "UPDATE jobs SET status = ?2, finished_at = ?3, timings = ?4,"            \
  " result = ?5, result_path = ?6, compare = ?7, max_abs_diff = ?8,"        \
  " error_code = ?9, error_message = ?10, progress_done = ?11,"             \
  " progress_total = ?12, result_npy = ?13"
#define FINISH_WHERE " WHERE id = ?1 AND status IN ('queued','running')"
/* With the job's start taken over (store_wop.absorbed): the start's
 * columns too; the start would have needed status 'queued', which the
 * finish accepts. */
#define FINISH_START                                                        \
  ", started_at = ?14, backend_used = ?15, backend_reason = ?16,"           \
  " estimate = ?17, attempts = attempts + 1"

static int finish_fn(store *s, store_wop *op, terr *e) {
  finish_args *a = op->arg;
  const store_job_end *x = a->end;
  const start_args *sa = op->absorbed;
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       sa ? FINISH_SET FINISH_START FINISH_WHERE
                          : FINISH_SET FINISH_WHERE,
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, status_names[x->status], -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, x->finished_at);
  store__bind_text(st, 4, x->timings);
  store__bind_text(st, 5, x->result);
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
  if (sa) {
    sqlite3_bind_int64(st, 14, sa->started_at);
    store__bind_text(st, 15, sa->backend_used);
    store__bind_text(st, 16, sa->reason);
    store__bind_text(st, 17, sa->estimate);
  }
  if ((rc = store__exec_stmt(&s->w, st, "finish job", e))) return rc;
  if (sqlite3_changes(s->w.db) == 0)
    return why_unchanged(s, a->id, "queued or running", e);
  if (!a->row) return 0;
  /* The row as this transaction has it (a plain read of a page the UPDATE
   * just touched; cheaper than RETURNING's temporary table). */
  if ((rc = store__stmt(&s->w, "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW)
    rc = store__dberr(e, s->w.db, "read the finished job");
  else if (store__job_row(st, a->row))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  sqlite3_reset(st);
  return rc;
}

/* [sync] See store.h. end->status must be final (T_EINVAL otherwise);
 * T_ECONFLICT when the job already ended. */
int store_job_finish(store *s, const char *id, const store_job_end *end,
                     terr *e) {
  if (!s || !id || !end) return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  finish_args a = {id, end, NULL};
  store_wop op = {.fn = finish_fn, .arg = &a, .one_stmt = 1,
                  .absorb_id = id};
  return store__write_op(s, &op, e);
}

/* See store.h. Reads on the caller's connection. */
int store_job_result_npy(store *s, const char *id, const char *owner,
                         void **npy, size_t *len, terr *e) {
  *npy = NULL;
  *len = 0;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__reader(s, &c, e);
  if (rc) return rc;
  if ((rc = store__stmt(c, "SELECT owner, result_npy FROM jobs WHERE id = ?1",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    const char *o = (const char *)sqlite3_column_text(st, 0);
    if ((owner && (!o || strcmp(o, owner) != 0)) ||
        sqlite3_column_type(st, 1) != SQLITE_BLOB) {
      rc = terr_set(e, T_ENOTFOUND, "id", -1, "no result of job %s in the store",
                    id);
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

/* Writer thread, after the batch: hand the row (or the error) over. */
static void finish_after(store *s, store_wop *op) {
  finish_op *o = (finish_op *)op;
  if (op->rc) {
    store_job_clear(&o->row); /* read back, then rolled back */
    o->cb(o->cb_arg, op->rc, &op->err, NULL);
  } else {
    o->cb(o->cb_arg, 0, &op->err, &o->row);
  }
}

/* [async] See store.h. */
int store_job_finish_async(store *s, const char *id, const store_job_end *end,
                           store_finish_fn cb, void *arg, terr *e) {
  if (!s || !id || !end || !cb)
    return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  size_t n = str_size(id) + str_size(end->timings) + str_size(end->result) +
             str_size(end->result_path) + str_size(end->compare) +
             str_size(end->error_code) + str_size(end->error_message) +
             (end->result_npy ? end->result_npy_len : 0);
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
  o->a.id = pack_str(&p, id);
  x->timings = pack_str(&p, end->timings);
  x->result = pack_str(&p, end->result);
  x->result_path = pack_str(&p, end->result_path);
  x->compare = pack_str(&p, end->compare);
  x->error_code = pack_str(&p, end->error_code);
  x->error_message = pack_str(&p, end->error_message);
  o->a.end = x;
  o->row.max_abs_diff = NAN;
  o->a.row = &o->row;
  o->cb = cb;
  o->cb_arg = arg;
  o->op.fn = finish_fn;
  o->op.arg = &o->a;
  o->op.one_stmt = 1;
  o->op.after = finish_after;
  o->op.absorb_id = o->a.id;
  if (store__write_async(s, &o->op) != 0)
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  return 0;
}

static int requeue_fn(store *s, store_wop *op, terr *e) {
  const char *id = op->arg;
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "UPDATE jobs SET status = 'queued', started_at = 0,"
                       " backend_used = NULL, backend_reason = NULL,"
                       " progress_done = 0, progress_total = 0"
                       " WHERE id = ?1 AND status IN ('queued','running')",
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  if ((rc = store__exec_stmt(&s->w, st, "requeue job", e))) return rc;
  if (sqlite3_changes(s->w.db) == 0)
    return why_unchanged(s, id, "queued or running", e);
  return 0;
}

/* [sync] See store.h. Running (or queued) -> queued, forgetting the start
 * time, backend choice and progress; attempts is kept. T_ECONFLICT when the
 * job already ended. */
int store_job_requeue(store *s, const char *id, terr *e) {
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  return store__write_one(s, requeue_fn, (void *)id, e);
}

typedef struct delete_args {
  const char *id, *owner;
  char *path; /* out */
} delete_args;

static int delete_fn(store *s, store_wop *op, terr *e) {
  delete_args *a = op->arg;
  sqlite3_stmt *st;
  int rc = store__stmt(
      &s->w, "SELECT owner, status, result_path FROM jobs WHERE id = ?1", &st,
      e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_DONE ||
      (step == SQLITE_ROW && a->owner &&
       strcmp((const char *)sqlite3_column_text(st, 0), a->owner) != 0)) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", a->id);
  } else if (step != SQLITE_ROW) {
    rc = store__dberr(e, s->w.db, "delete job");
  } else {
    int sv = job_status_parse((const char *)sqlite3_column_text(st, 1));
    if (sv < 0 || !job_status_final((job_status)sv)) {
      rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s is %s; cancel it first",
                    a->id, job_status_name((job_status)sv));
    } else {
      int oom = 0;
      a->path = store__col_dup(st, 2, &oom);
      if (oom) rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    }
  }
  sqlite3_reset(st);
  if (rc) return rc;
  if ((rc = store__stmt(&s->w, "DELETE FROM jobs WHERE id = ?1", &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  return store__exec_stmt(&s->w, st, "delete job", e);
}

/* [sync] See store.h. */
int store_job_delete(store *s, const char *id, const char *owner,
                     char **result_path, terr *e) {
  if (result_path) *result_path = NULL;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  delete_args a = {id, owner, NULL};
  int rc = store__write_one(s, delete_fn, &a, e);
  if (rc) {
    free(a.path);
    return rc;
  }
  if (result_path) *result_path = a.path;
  else free(a.path);
  return 0;
}
