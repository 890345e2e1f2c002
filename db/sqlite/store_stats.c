/* store_stats.c — the aggregate views (per-group stats, counts by status)
 * and expiry.
 *
 * store_stats makes two passes on one read snapshot (the second
 * statement starts while the first is still active, so both see the same
 * data): the counts per (kind, backend_used, status) with SQL GROUP BY, and
 * the compute times of the succeeded jobs sorted by (kind, backend_used,
 * time), which are merged with the first pass group by group to give
 * p50/p95 by linear interpolation between the closest ranks (NumPy's default
 * percentile). Memory: one group's compute times at a time.
 *
 * store_finished_by_step counts finished jobs per time step and status
 * with one GROUP BY over the finished_at index (/v1/stats/history).
 *
 * store_expire is one write op: it deletes the old finished jobs and the old
 * unreferenced arrays with DELETE ... RETURNING, collecting the files the
 * caller must remove.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"
#include "util/datadir.h"
#include "util/vec.h"

/* ---- stats ---------------------------------------------------------------- */

static double percentile(const double *v, size_t n, double p) {
  if (n == 0) return NAN;
  double pos = p * (double)(n - 1);
  size_t lo = (size_t)floor(pos);
  size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

static int same_text(sqlite3_stmt *a, int ia, sqlite3_stmt *b, int ib) {
  const char *x = (const char *)sqlite3_column_text(a, ia);
  const char *y = (const char *)sqlite3_column_text(b, ib);
  if (!x || !y) return x == y;
  return strcmp(x, y) == 0;
}

static char *text_or_null(sqlite3_stmt *st, int i, int *oom) {
  const char *t = (const char *)sqlite3_column_text(st, i);
  char *d = t ? strdup(t) : NULL;
  if (t && !d) *oom = 1;
  return d;
}

/* See store.h. */
int sq_stats(sqstore *s, const char *owner, store_stat **rows, int *n,
                terr *e) {
  *rows = NULL;
  *n = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_conn *c;
  sqlite3_stmt *q1 = NULL, *q2 = NULL;
  double *vals = NULL;
  size_t nvals = 0, capvals = 0;
  store_stat *out = NULL;
  int nout = 0;
  size_t capout = 0;
  int rc = store__reader(s, &c, e);
  if (rc) return rc;
  if ((rc = store__stmt(
           c,
           owner ? "SELECT kind, backend_used, status, count(*),"
                   " sum(CASE WHEN status = 'succeeded' THEN"
                   " result_bytes END)"
                   " FROM jobs WHERE parent IS NULL AND owner = ?1"
                   " GROUP BY kind, backend_used, status ORDER BY 1, 2, 3"
                 : "SELECT kind, backend_used, status, count(*),"
                   " sum(CASE WHEN status = 'succeeded' THEN"
                   " result_bytes END)"
                   " FROM jobs WHERE parent IS NULL"
                   " GROUP BY kind, backend_used, status ORDER BY 1, 2, 3",
           &q1, e)))
    return rc;
  if (owner) sqlite3_bind_text(q1, 1, owner, -1, SQLITE_STATIC);
  int step1 = sqlite3_step(q1); /* opens the read snapshot q2 shares */
  if ((rc = store__stmt(
           c,
           owner ? "SELECT kind, backend_used, c FROM (SELECT kind,"
                   " backend_used, t_compute AS c"
                   " FROM jobs WHERE status = 'succeeded' AND parent IS NULL"
                   " AND owner = ?1)"
                   " WHERE c IS NOT NULL ORDER BY 1, 2, 3"
                 : "SELECT kind, backend_used, c FROM (SELECT kind,"
                   " backend_used, t_compute AS c"
                   " FROM jobs WHERE status = 'succeeded' AND parent IS NULL)"
                   " WHERE c IS NOT NULL ORDER BY 1, 2, 3",
           &q2, e)))
    goto fail;
  if (owner) sqlite3_bind_text(q2, 1, owner, -1, SQLITE_STATIC);
  int step2 = step1 == SQLITE_ROW ? sqlite3_step(q2) : SQLITE_DONE;
  for (; step1 == SQLITE_ROW; step1 = sqlite3_step(q1)) {
    const char *status = (const char *)sqlite3_column_text(q1, 2);
    int succeeded = status && strcmp(status, "succeeded") == 0;
    if (tvec_grow(&out, &capout, sizeof *out, (size_t)nout + 1, 0)) goto oom;
    store_stat *row = &out[nout++];
    memset(row, 0, sizeof *row);
    int oom = 0;
    row->kind = text_or_null(q1, 0, &oom);
    row->backend = text_or_null(q1, 1, &oom);
    if (oom) goto oom;
    row->status = (job_status)job_status_parse(status);
    row->count = sqlite3_column_int64(q1, 3);
    nvals = 0;
    if (succeeded) {
      /* q2 is in the same order: take this group's times. */
      while (step2 == SQLITE_ROW && same_text(q1, 0, q2, 0) &&
             same_text(q1, 1, q2, 1)) {
        if (tvec_grow(&vals, &capvals, sizeof *vals, nvals + 1, 0)) goto oom;
        vals[nvals++] = sqlite3_column_double(q2, 2);
        step2 = sqlite3_step(q2);
      }
    }
    row->p50_ms = nvals ? percentile(vals, nvals, 0.50) : NAN;
    row->p95_ms = nvals ? percentile(vals, nvals, 0.95) : NAN;
    row->result_bytes = succeeded ? sqlite3_column_int64(q1, 4) : -1;
  }
  if (step1 != SQLITE_DONE || (step2 != SQLITE_DONE && step2 != SQLITE_ROW)) {
    rc = store__dberr(e, c->db, "stats");
    goto fail;
  }
  sqlite3_reset(q1);
  sqlite3_reset(q2);
  free(vals);
  *rows = out;
  *n = nout;
  return 0;
oom:
  rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
fail:
  if (q1) sqlite3_reset(q1);
  if (q2) sqlite3_reset(q2);
  store_stats_free(out, nout);
  free(vals);
  return rc;
}

/* See store.h. counts[] is indexed by job_status; owner NULL: all. */
int sq_job_counts(sqstore *s, const char *owner, int64_t counts[5],
                     terr *e) {
  memset(counts, 0, 5 * sizeof counts[0]);
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s,
                            owner ? "SELECT status, count(*) FROM jobs"
                                    " WHERE parent IS NULL AND owner = ?1"
                                    " GROUP BY status"
                                  : "SELECT status, count(*) FROM jobs"
                                    " WHERE parent IS NULL GROUP BY status",
                            &c, &st, e);
  if (rc) return rc;
  if (owner) sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    int sv = job_status_parse((const char *)sqlite3_column_text(st, 0));
    if (sv >= 0) counts[sv] = sqlite3_column_int64(st, 1);
  }
  if (step != SQLITE_DONE) rc = store__dberr(e, c->db, "job counts");
  sqlite3_reset(st);
  return rc;
}

/* See store.h. One GROUP BY over the finished_at index. */
int sq_finished_by_step(sqstore *s, const char *owner, int64_t since_ms,
                           int64_t step_ms, int nsteps, int64_t *counts,
                           terr *e) {
  memset(counts, 0, (size_t)nsteps * 5 * sizeof counts[0]);
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  if (step_ms <= 0 || nsteps <= 0)
    return terr_set(e, T_EINVAL, "step", -1, "store: bad steps");
  store_conn *c;
  sqlite3_stmt *st;
  /* finished_at > 0 lets the planner use the partial index. */
  int rc = store__read_stmt(
      s,
      owner ? "SELECT (finished_at - ?1) / ?2, status, count(*) FROM jobs"
              " WHERE finished_at > 0 AND finished_at >= ?1 AND finished_at < ?3"
              " AND parent IS NULL AND owner = ?4 GROUP BY 1, 2"
            : "SELECT (finished_at - ?1) / ?2, status, count(*) FROM jobs"
              " WHERE finished_at > 0 AND finished_at >= ?1 AND finished_at < ?3"
              " AND parent IS NULL GROUP BY 1, 2",
      &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, since_ms);
  sqlite3_bind_int64(st, 2, step_ms);
  sqlite3_bind_int64(st, 3, since_ms + step_ms * nsteps);
  if (owner) sqlite3_bind_text(st, 4, owner, -1, SQLITE_STATIC);
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t b = sqlite3_column_int64(st, 0);
    int sv = job_status_parse((const char *)sqlite3_column_text(st, 1));
    if (b >= 0 && b < nsteps && sv >= 0) counts[b * 5 + sv] = sqlite3_column_int64(st, 2);
  }
  if (step != SQLITE_DONE) rc = store__dberr(e, c->db, "finished by step");
  sqlite3_reset(st);
  return rc;
}

/* ---- expiry ------------------------------------------------------------------ */

typedef struct expire_args {
  int64_t before;
  char **paths; /* out: heap strings */
  int n;
  size_t cap;
} expire_args;

/* Step sql (?1 = before) collecting column 0 of its rows (a SELECT, or a
 * DELETE ... RETURNING). */
static int delete_returning(sqstore *s, expire_args *a, const char *sql,
                            terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w, sql, &st, e);
  if (rc) return rc;
  sqlite3_bind_int64(st, 1, a->before);
  return store__collect_paths(s, st, &a->paths, &a->n, &a->cap, "expire", e);
}

/* A finished job (alias A) that expiry deletes: ended before ?1, and no
 * unfinished job takes its result as an input. */
#define EXPIRED(A)                                                           \
  A ".finished_at > 0 AND " A ".finished_at < ?1"                            \
  " AND " A ".status IN ('succeeded','failed','canceled') AND NOT EXISTS"    \
  " (SELECT 1 FROM jobs WHERE status IN ('queued','running')"                \
  " AND instr(jobs.params, " A ".id) > 0)"
/* The jobs expiry deletes (as `old`): the tiles of an expired split job
 * (never expired on their own), then the top-level jobs. */
#define EXPIRED_TILES                                                        \
  "old.parent IS NOT NULL AND EXISTS (SELECT 1 FROM jobs AS par"             \
  " WHERE par.id = old.parent AND " EXPIRED("par") ")"
#define EXPIRED_JOBS "old.parent IS NULL AND " EXPIRED("old")

static int expire_fn(sqstore *s, store_wop *op, terr *e) {
  expire_args *a = op->arg;
  store__recent_forget(s, NULL); /* before the commit: see store_recent.c */
  /* First the files of their results' other parts (read before the rows
   * go, in the same transaction). */
  int rc = delete_returning(s, a, STORE_PART_PATHS_SQL EXPIRED_TILES, e);
  if (!rc)
    rc = delete_returning(s, a,
                          "DELETE FROM jobs AS old WHERE " EXPIRED_TILES
                          " RETURNING result_path",
                          e);
  if (!rc) rc = delete_returning(s, a, STORE_PART_PATHS_SQL EXPIRED_JOBS, e);
  if (rc) return rc;
  rc = delete_returning(
      s, a,
      "DELETE FROM jobs AS old WHERE " EXPIRED_JOBS " RETURNING result_path",
      e);
  if (rc) return rc;
  return delete_returning(
      s, a,
      "DELETE FROM arrays WHERE created_at < ?1 AND NOT EXISTS"
      " (SELECT 1 FROM jobs WHERE status IN ('queued','running')"
      " AND instr(jobs.params, arrays.id) > 0) RETURNING path",
      e);
}

/* [sync] See store.h. On failure nothing is deleted and *paths is NULL. */
int sq_expire(sqstore *s, int64_t before_ms, char ***paths, int *npaths,
                 terr *e) {
  *paths = NULL;
  *npaths = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  expire_args a = {.before = before_ms};
  int rc;
  for (int tries = 0;; tries++) { /* a full disk: once more, on the reserve */
    rc = store__write(s, expire_fn, &a, e);
    if (!rc) break;
    for (int i = 0; i < a.n; i++) free(a.paths[i]);
    free(a.paths);
    a = (expire_args){.before = before_ms};
    if (rc != T_ENOSPACE || tries) return rc;
    reserve_release();
  }
  *paths = a.paths;
  *npaths = a.n;
  return 0;
}
