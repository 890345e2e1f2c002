/* pg_lifecycle.c — a job's lifecycle writes on PostgreSQL: start, finish,
 * progress (the [async] writer runs them too, pg_store.c), requeue,
 * unstart, note_start and delete.
 *
 * Each transition is one UPDATE guarded by the status in its WHERE clause
 * (racing callers cannot both pass); one that changed nothing says why
 * (why_unchanged). The node fence (spec14): once the store knows its node
 * (pg__node), start and finish only touch a row that is unclaimed or
 * claimed by that node; a row another node holds is T_ECONFLICT "job <id>
 * is held by another node". The end of a run (store_job_end.held) needs
 * the row claimed by this node still: one the reaper took back while the
 * node was paused past its lease (queued again, node NULL) is T_ECONFLICT
 * "no longer held by this node", so a stale run neither ends a job that
 * will run again nor records the failure its removed temporaries caused.
 * A finish records the finishing node and clears the lease in its
 * statement, and notes "end:<id>" (sent once its transaction committed:
 * pg__note); a start the writer folded into it
 * (pg_start: both were queued at once) is written by the same UPDATE. A finish that finds the row already
 * ended by this very finish (same node, status, finished_at, result path
 * and error code: the retry of a batch whose COMMIT's answer was lost)
 * succeeds without writing (same_finish); any other ended row is
 * T_ECONFLICT. A delete takes a split job's children with it and returns
 * every file of their results (result_path and result_parts' paths). It
 * locks the row FOR UPDATE before looking for queued or running jobs that
 * take its result: a job insert share-locks the jobs whose results it
 * takes (pg_jobs.c, lock_refs), so on any two nodes the delete either
 * sees the inserted job (T_ECONFLICT) or the insert finds the job gone.
 *
 * Threads: any; [sync] entries borrow a pooled connection (pg__write).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"

/* After a guarded UPDATE that changed no row: say why. */
static int why_unchanged(pgstore *p, PGconn *c, const char *id,
                         const char *want, terr *e) {
  const char *v[] = {id};
  PGresult *r;
  int rc = pg__exec(c, "SELECT status, node FROM jobs WHERE id = $1", 1, v,
                    &r, "job status", e);
  if (rc) return rc;
  if (PQntuples(r) != 1) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
  } else {
    const char *st = PQgetvalue(r, 0, 0);
    int sv = job_status_parse(st);
    const char *self = pg__node(p);
    if (sv >= 0 && !job_status_final((job_status)sv) && self[0] &&
        !PQgetisnull(r, 0, 1) && strcmp(PQgetvalue(r, 0, 1), self) != 0)
      rc = terr_set(e, T_ECONFLICT, "id", -1,
                    "job %s is held by another node", id);
    else if (sv >= 0 && !job_status_final((job_status)sv) && self[0] &&
             PQgetisnull(r, 0, 1))
      rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s is no longer held by "
                    "this node (its lease passed: it is %s again)", id, st);
    else
      rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s is %s, not %s", id, st,
                    want);
  }
  PQclear(r);
  return rc;
}

static int changed(PGresult *r) { return atoi(PQcmdTuples(r)) > 0; }

/* A finish that changed nothing: 1 when the row already holds this very
 * finish — final with the same status, finished_at, result path and error
 * code, finished by this node (pg__node; an unregistered store: a row no
 * node finished). That is the retry of a batch whose COMMIT committed but
 * whose answer was lost with the connection (pg_store.c retries it whole):
 * the end is in the store, so the finish succeeded; row (when not NULL)
 * gets the job as it is. 0 when not (why_unchanged says why), <0 with e
 * set on error. */
static int same_finish(pgstore *p, PGconn *c, const char *id,
                       const store_job_end *x, store_job *row, terr *e) {
  char b[32];
  const char *v[] = {id, job_status_name(x->status),
                     pg__i64(b, x->finished_at), x->result_path,
                     x->error_code, pg__node(p)};
  PGresult *r;
  if (pg__exec(c,
               "SELECT " PG_JOB_COLS " FROM jobs WHERE id = $1"
               " AND status = $2 AND finished_at = $3::bigint"
               " AND result_path IS NOT DISTINCT FROM $4"
               " AND error_code IS NOT DISTINCT FROM $5"
               " AND (node = $6 OR ($6 = '' AND node IS NULL))",
               6, v, &r, "finish job", e))
    return -1;
  int same = PQntuples(r) == 1;
  if (same && row && pg__job_row(r, 0, row)) {
    PQclear(r);
    terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    return -1;
  }
  PQclear(r);
  if (same)
    log_info("store: job %s: its finish was already committed (a retry "
             "after a lost answer)", id);
  return same;
}

/* The fence: $n is this store's node id ("" before it registered). */
#define FENCE(n) " AND (node IS NULL OR $" n "::text = '' OR node = $" n "::text)"

int pg__start_on(pgstore *p, PGconn *c, const char *id, int64_t started_at,
                 const char *backend_used, const char *reason,
                 const char *estimate, terr *e) {
  char b[32];
  const char *v[] = {id, pg__i64(b, started_at), backend_used, reason,
                     estimate, pg__node(p)};
  PGresult *r;
  int rc = pg__exec(c,
                    "UPDATE jobs SET status = 'running', started_at = $2,"
                    " backend_used = $3, backend_reason = $4, estimate = $5,"
                    " attempts = attempts + CASE WHEN node IS NULL THEN 1"
                    " ELSE 0 END" /* a claimed row's claim counted it */
                    " WHERE id = $1 AND status = 'queued'" FENCE("6"),
                    6, v, &r, "start job", e);
  if (rc) return rc;
  int ok = changed(r);
  PQclear(r);
  return ok ? 0 : why_unchanged(p, c, id, "queued", e);
}

typedef struct start_args {
  const char *id, *backend_used, *reason, *estimate;
  int64_t started_at;
} start_args;

static int start_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  start_args *a = arg;
  return pg__start_on(p, c, a->id, a->started_at, a->backend_used, a->reason,
                      a->estimate, e);
}

int pg_job_start(void *impl, const char *id, int64_t started_at,
                 const char *backend_used, const char *reason,
                 const char *estimate, terr *e) {
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  start_args a = {id, backend_used, reason, estimate, started_at};
  return pg__write(impl, start_tx, &a, e);
}

int pg__progress_on(PGconn *c, const char *id, int64_t done, int64_t total,
                    terr *e) {
  char b[2][32];
  const char *v[] = {id, pg__i64(b[0], done), pg__i64(b[1], total)};
  return pg__exec(c,
                  "UPDATE jobs SET progress_done = $2, progress_total = $3"
                  " WHERE id = $1 AND status = 'running'",
                  3, v, NULL, "progress", e);
}

const char **pg__finish_values(pgstore *p, const char *id,
                              const store_job_end *x, const pg_start *st,
                              pg_fin_vals *fv) {
  char (*b)[32] = fv->b;
  const char *tv[JOB_T__COUNT];
  for (int i = 0; i < JOB_T__COUNT; i++)
    tv[i] = x->timings.set & (1u << i) ? pg__f64(b[i], x->timings.ms[i])
                                       : NULL;
  const job_result_info *res = &x->result;
  if (res->dtype[0]) store__shape_text(res, fv->shape, sizeof fv->shape);
  const char *v[PG_FINISH_NVALS] = {
      id, job_status_name(x->status), pg__i64(b[7], x->finished_at),
      tv[JOB_T_QUEUE], res->dtype[0] ? res->dtype : NULL, x->result_path,
      x->compare, isnan(x->max_abs_diff) ? NULL : pg__f64(b[8], x->max_abs_diff),
      x->error_code, x->error_message, pg__i64(b[9], x->progress_done),
      pg__i64(b[10], x->progress_total), (const char *)x->result_npy,
      tv[JOB_T_PREPARE], tv[JOB_T_H2D], tv[JOB_T_COMPUTE], tv[JOB_T_D2H],
      tv[JOB_T_STORE], tv[JOB_T_TOTAL], res->dtype[0] ? fv->shape : NULL,
      NULL, NULL, x->result_parts, pg__node(p), x->held ? "1" : "0",
      x->devices, x->backend_used,
      st ? pg__i64(b[11], st->started_at) : NULL,
      st ? st->backend_used : NULL, st ? st->reason : NULL,
      st ? st->estimate : NULL};
  if (res->dtype[0]) {
    v[20] = pg__i64(b[12], res->bytes);
    if (res->nonconverged > 0) v[21] = pg__i64(b[13], res->nonconverged);
  }
  memcpy(fv->v, v, sizeof v);
  return fv->v;
}

int pg__finish_on(pgstore *p, PGconn *c, const char *id,
                  const store_job_end *x, const pg_start *st, store_job *row,
                  terr *e) {
  pg_fin_vals fv;
  const char **v = pg__finish_values(p, id, x, st, &fv);
  int lens[PG_FINISH_NVALS] = {0}, fmts[PG_FINISH_NVALS] = {0};
  lens[12] = (int)x->result_npy_len;
  fmts[12] = 1;
  PGresult *r;
#define P(n, type) "$" #n "::" type
  int rc = pg__exec_ex(
      c,
      "WITH u AS (UPDATE jobs SET " PG_FINISH_SET(P)
      " WHERE id = $1 AND " PG_FINISH_WHERE(P)
      " RETURNING " PG_JOB_COLS ")"
      " SELECT * FROM u", /* "end" notified after the commit */
      PG_FINISH_NVALS, v, lens, fmts, 0, &r, "finish job", e);
#undef P
  if (rc) return rc;
  if (PQntuples(r) != 1) {
    PQclear(r);
    int same = same_finish(p, c, id, x, row, e);
    if (same < 0) return e->code ? e->code : T_EIO;
    /* its own end, committed by a COMMIT whose answer was lost: the
     * events noted then were dropped with it, so "end" is told now (a
     * second one is harmless: listeners read the row) */
    if (same) pg__note(c, "end", id);
    return same ? 0 : why_unchanged(p, c, id, "queued or running", e);
  }
  pg__note(c, "end", id);
  if (row && pg__job_row(r, 0, row))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  PQclear(r);
  return rc;
}

typedef struct finish_args {
  const char *id;
  const store_job_end *end;
} finish_args;

static int finish_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  finish_args *a = arg;
  return pg__finish_on(p, c, a->id, a->end, NULL, NULL, e);
}

int pg_job_finish(void *impl, const char *id, const store_job_end *end,
                  terr *e) {
  if (!impl || !id || !end) return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  finish_args a = {id, end};
  return pg__write(impl, finish_tx, &a, e);
}

#define REQUEUE_SET                                                         \
  "UPDATE jobs SET status = 'queued', started_at = 0,"                      \
  " backend_used = NULL, backend_reason = NULL,"                            \
  " progress_done = 0, progress_total = 0"

typedef struct id_args {
  const char *id, *sql, *want;
  int attempt;
} id_args;

static int update_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  id_args *a = arg;
  char b[32];
  const char *v[] = {a->id, pg__i64(b, a->attempt)};
  PGresult *r;
  int rc = pg__exec(c, a->sql, a->want ? 1 : 2, v, &r, "update job", e);
  if (rc) return rc;
  int ok = changed(r);
  PQclear(r);
  return ok || !a->want ? 0 : why_unchanged(p, c, a->id, a->want, e);
}

int pg_job_requeue(void *impl, const char *id, terr *e) {
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  id_args a = {id,
               REQUEUE_SET " WHERE id = $1 AND status IN ('queued','running')",
               "queued or running", 0};
  return pg__write(impl, update_tx, &a, e);
}

int pg_job_unstart(void *impl, const char *id, terr *e) {
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  id_args a = {id,
               REQUEUE_SET ", attempts = CASE WHEN node IS NULL THEN"
                           " GREATEST(attempts - 1, 0) ELSE attempts END"
                           " WHERE id = $1 AND status = 'running'",
               "queued or running", 0};
  return pg__write(impl, update_tx, &a, e);
}

int pg_job_note_start(void *impl, const char *id, int attempt, terr *e) {
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  id_args a = {id,
               "UPDATE jobs SET attempts = GREATEST(attempts, $2::int)"
               " WHERE id = $1 AND status IN ('queued','running')",
               NULL, attempt};
  return pg__write(impl, update_tx, &a, e);
}

/* ---- delete ---------------------------------------------------------------- */

/* The part files ("path" of result_parts' entries) of the jobs `old` that
 * the condition appended to this text selects. */
#define PG_PART_PATHS_SQL                                                     \
  "SELECT p->>'path' FROM jobs AS old,"                                       \
  " json_array_elements(old.result_parts::json) AS p"                         \
  " WHERE old.result_parts IS NOT NULL AND json_typeof(p) = 'object' AND "

typedef struct del_args {
  const char *id, *owner;
  char **paths;
  int n;
  size_t cap;
} del_args;

static int delete_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  del_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT owner, status FROM jobs WHERE id = $1 AND"
                    " parent IS NULL FOR UPDATE",
                    1, v, &r, "delete job", e);
  if (rc) return rc;
  if (PQntuples(r) != 1 ||
      (a->owner && strcmp(PQgetvalue(r, 0, 0), a->owner) != 0)) {
    PQclear(r);
    return terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", a->id);
  }
  int sv = job_status_parse(PQgetvalue(r, 0, 1));
  PQclear(r);
  if (sv < 0 || !job_status_final((job_status)sv))
    return terr_set(e, T_ECONFLICT, "id", -1, "job %s is %s; cancel it first",
                    a->id, job_status_name((job_status)sv));
  char first[T_ID_MAX];
  int ref = pg__referenced(c, a->id, first, e);
  if (ref < 0) return e->code ? e->code : T_EIO;
  if (ref > 0)
    return store_refused_by_dependents(e, "job", a->id, ref, first);
  if ((rc = pg__exec(c,
                     "SELECT count(*) FROM jobs WHERE parent = $1"
                     " AND status IN ('queued','running')",
                     1, v, &r, "delete job", e)))
    return rc;
  int busy = atoi(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (busy > 0)
    return terr_set(e, T_ECONFLICT, "id", -1,
                    "job %s still has %d tile(s) queued or running", a->id,
                    busy);
  /* Its result's files, every part's (its tiles' too): result paths
   * first, as store.h lists them, then the parts. */
  if ((rc = pg__exec(c,
                     "SELECT result_path FROM jobs WHERE id = $1 OR"
                     " parent = $1 ORDER BY parent NULLS FIRST, tile",
                     1, v, &r, "delete job", e)))
    return rc;
  rc = pg__collect_paths(r, &a->paths, &a->n, &a->cap, e);
  PQclear(r);
  if (rc) return rc;
  if ((rc = pg__exec(c, PG_PART_PATHS_SQL "(old.id = $1 OR old.parent = $1)",
                     1, v, &r, "delete job", e)))
    return rc;
  rc = pg__collect_paths(r, &a->paths, &a->n, &a->cap, e);
  PQclear(r);
  if (rc) return rc;
  return pg__exec(c, "DELETE FROM jobs WHERE id = $1 OR parent = $1", 1, v,
                  NULL, "delete job", e);
}

int pg_job_delete(void *impl, const char *id, const char *owner,
                  char ***paths, int *npaths, terr *e) {
  *paths = NULL;
  *npaths = 0;
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  del_args a = {.id = id, .owner = owner};
  int rc = pg__write(impl, delete_tx, &a, e);
  if (rc) {
    for (int i = 0; i < a.n; i++) free(a.paths[i]);
    free(a.paths);
    return rc;
  }
  *paths = a.paths;
  *npaths = a.n;
  return 0;
}
