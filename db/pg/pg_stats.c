/* pg_stats.c — the aggregate views on PostgreSQL (per-group stats, counts
 * by status, finished jobs per time step) and expiry.
 *
 * store_stats is one GROUP BY: counts per (kind, backend_used, status),
 * the succeeded jobs' result bytes, and p50/p95 of their compute times
 * with percentile_cont (linear interpolation between the closest ranks,
 * NumPy's default, as the SQLite backend computes them). Children of
 * split jobs are left out of every view.
 *
 * store_expire runs on one node at a time: its transaction first takes
 * pg_try_advisory_xact_lock(7243003); a node that does not get it expires
 * nothing this round (0, no paths) — the holder does the work. It deletes
 * the old unreferenced finished jobs (a split job with its tiles; tiles
 * never expire on their own) and the old unreferenced arrays with
 * DELETE ... RETURNING, collecting the files of the rows it removed for
 * the caller to remove. Jobs and arrays are locked before their reference
 * check (FOR UPDATE SKIP LOCKED: one a job insert is taking is left for
 * the next round), as a delete does, so an expiry never removes a job
 * whose result, or an array, a job inserted at the same moment on another
 * node uses.
 *
 * Threads: any (pooled connections).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"
#include "util/vec.h"

#define PG_EXPIRE_LOCK "7243003" /* the reaper (pg_cluster.c) has 7243002 */

typedef struct stats_args {
  const char *owner;
  store_stat *rows;
  int n;
} stats_args;

static int stats_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  stats_args *a = arg;
  const char *v[] = {a->owner};
  PGresult *r;
  int rc = pg__exec(
      c,
      "SELECT kind, backend_used, status, count(*),"
      " sum(result_bytes) FILTER (WHERE status = 'succeeded'),"
      " percentile_cont(0.5) WITHIN GROUP (ORDER BY t_compute)"
      "  FILTER (WHERE status = 'succeeded'),"
      " percentile_cont(0.95) WITHIN GROUP (ORDER BY t_compute)"
      "  FILTER (WHERE status = 'succeeded')"
      " FROM jobs WHERE parent IS NULL AND ($1::text IS NULL OR owner = $1)"
      " GROUP BY 1, 2, 3"
      " ORDER BY kind, backend_used NULLS FIRST, status COLLATE \"C\"",
      1, v, &r, "stats", e);
  if (rc) return rc;
  int rows = PQntuples(r);
  a->rows = calloc((size_t)rows + 1, sizeof *a->rows);
  if (!a->rows) rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  for (int i = 0; !rc && i < rows; i++) {
    store_stat *s = &a->rows[a->n++];
    int oom = 0;
    s->kind = pg__dup(r, i, 0, &oom);
    s->backend = pg__dup(r, i, 1, &oom);
    if (oom) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      break;
    }
    s->status = (job_status)job_status_parse(PQgetvalue(r, i, 2));
    s->count = strtoll(PQgetvalue(r, i, 3), NULL, 10);
    int ok = s->status == JOB_SUCCEEDED;
    s->result_bytes = ok ? strtoll(PQgetvalue(r, i, 4), NULL, 10) : -1;
    s->p50_ms = ok && !PQgetisnull(r, i, 5) ? strtod(PQgetvalue(r, i, 5), NULL)
                                            : NAN;
    s->p95_ms = ok && !PQgetisnull(r, i, 6) ? strtod(PQgetvalue(r, i, 6), NULL)
                                            : NAN;
  }
  PQclear(r);
  return rc;
}

int pg_stats(void *impl, const char *owner, store_stat **rows, int *n,
             terr *e) {
  *rows = NULL;
  *n = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  stats_args a = {owner, NULL, 0};
  int rc = pg__read(impl, stats_rd, &a, e);
  if (rc) {
    store_stats_free(a.rows, a.n);
    return rc;
  }
  *rows = a.rows;
  *n = a.n;
  return 0;
}

typedef struct counts_args {
  const char *owner;
  int64_t since, step;
  int nsteps;
  int64_t *counts;
} counts_args;

static int counts_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  counts_args *a = arg;
  const char *v[] = {a->owner};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT status, count(*) FROM jobs WHERE parent IS NULL"
                    " AND ($1::text IS NULL OR owner = $1) GROUP BY status",
                    1, v, &r, "job counts", e);
  if (rc) return rc;
  for (int i = 0; i < PQntuples(r); i++) {
    int sv = job_status_parse(PQgetvalue(r, i, 0));
    if (sv >= 0) a->counts[sv] = strtoll(PQgetvalue(r, i, 1), NULL, 10);
  }
  PQclear(r);
  return 0;
}

int pg_job_counts(void *impl, const char *owner, int64_t counts[5], terr *e) {
  memset(counts, 0, 5 * sizeof counts[0]);
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  counts_args a = {.owner = owner, .counts = counts};
  return pg__read(impl, counts_rd, &a, e);
}

static int steps_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  counts_args *a = arg;
  char b[3][32];
  const char *v[] = {pg__i64(b[0], a->since), pg__i64(b[1], a->step),
                     pg__i64(b[2], a->since + a->step * a->nsteps), a->owner};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT (finished_at - $1::bigint) / $2::bigint, status,"
                    " count(*) FROM jobs WHERE finished_at > 0"
                    " AND finished_at >= $1::bigint AND finished_at < $3::bigint"
                    " AND parent IS NULL AND ($4::text IS NULL OR owner = $4)"
                    " GROUP BY 1, 2",
                    4, v, &r, "finished by step", e);
  if (rc) return rc;
  for (int i = 0; i < PQntuples(r); i++) {
    int64_t k = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    int sv = job_status_parse(PQgetvalue(r, i, 1));
    if (k >= 0 && k < a->nsteps && sv >= 0)
      a->counts[k * 5 + sv] = strtoll(PQgetvalue(r, i, 2), NULL, 10);
  }
  PQclear(r);
  return 0;
}

int pg_finished_by_step(void *impl, const char *owner, int64_t since_ms,
                        int64_t step_ms, int nsteps, int64_t *counts,
                        terr *e) {
  if (nsteps > 0) memset(counts, 0, (size_t)nsteps * 5 * sizeof counts[0]);
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  if (step_ms <= 0 || nsteps <= 0)
    return terr_set(e, T_EINVAL, "step", -1, "store: bad steps");
  counts_args a = {owner, since_ms, step_ms, nsteps, counts};
  return pg__read(impl, steps_rd, &a, e);
}

/* ---- expiry ------------------------------------------------------------------ */

/* A finished top-level job (`old`) older than $1 whose result no queued
 * or running job takes (the reference check of pg_lifecycle.c's delete). */
#define EXPIRED_JOBS                                                        \
  "old.parent IS NULL AND old.finished_at > 0 AND old.finished_at <"        \
  " $1::bigint AND old.status IN ('succeeded','failed','canceled') AND NOT" \
  " EXISTS (SELECT 1 FROM jobs AS u WHERE u.status IN ('queued','running')" \
  " AND strpos(u.params, old.id) > 0)"

/* A queued or running job mentions the array (the outer query's
 * `arrays` row): pg_arrays.c's reference check. */
#define ARRAY_REFS                                                           \
  "(SELECT 1 FROM jobs WHERE status IN ('queued','running')"                \
  " AND strpos(jobs.params, arrays.id) > 0)"

typedef struct expire_args {
  int64_t before;
  char **paths;
  int n;
  size_t cap;
} expire_args;

/* The ids `pick` selects (older than $1 and unreferenced), locked, those a
 * job insert holds (FOR KEY SHARE until it commits: pg_jobs.c) skipped. */
#define LOCKED_IDS(pick)                                                    \
  "SELECT coalesce(array_agg(id), '{}') FROM (" pick                        \
  " FOR UPDATE SKIP LOCKED) AS l"

/* Expire in two statements: `lock` (LOCKED_IDS), then `del` on those ids
 * ($2) with the same
 * conditions again, collecting the paths it returns into a. The second
 * statement's snapshot is taken after the locks, so it sees every job
 * whose insert locked a row before us; later inserts wait for this
 * transaction and find the row gone. (One statement would check
 * references on a snapshot older than its locks.) */
static int lock_then_delete(PGconn *c, expire_args *a, const char *lock,
                            const char *del, terr *e) {
  char b[32];
  const char *v[] = {pg__i64(b, a->before), NULL};
  PGresult *r;
  int rc = pg__exec(c, lock, 1, v, &r, "expire", e);
  if (rc) return rc;
  char *ids = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (!ids) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  v[1] = ids;
  rc = pg__exec(c, del, 2, v, &r, "expire", e);
  free(ids);
  if (rc) return rc;
  rc = pg__collect_paths(r, &a->paths, &a->n, &a->cap, e);
  PQclear(r);
  return rc;
}

static int expire_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  expire_args *a = arg;
  PGresult *r;
  int rc = pg__exec(c, "SELECT pg_try_advisory_xact_lock(" PG_EXPIRE_LOCK ")",
                    0, NULL, &r, "expire", e);
  if (rc) return rc;
  int got = PQgetvalue(r, 0, 0)[0] == 't';
  PQclear(r);
  if (!got) return 0; /* another node expires now */
  /* Old unreferenced jobs (a split job with its tiles: a tile never
   * expires on its own), then old unreferenced arrays; the files returned
   * are those of the rows removed (a job's result_path, then every part's
   * path). */
  rc = lock_then_delete(
      c, a,
      LOCKED_IDS("SELECT id FROM jobs AS old WHERE " EXPIRED_JOBS),
      "WITH gone AS MATERIALIZED (SELECT id FROM jobs AS old WHERE"
      " old.id = ANY($2::text[]) AND " EXPIRED_JOBS "),"
      " d AS (DELETE FROM jobs WHERE id IN (SELECT id FROM gone)"
      "  OR parent IN (SELECT id FROM gone)"
      "  RETURNING result_path, result_parts)"
      " SELECT result_path FROM d UNION ALL SELECT p->>'path'"
      " FROM d, json_array_elements(d.result_parts::json) AS p"
      " WHERE d.result_parts IS NOT NULL AND json_typeof(p) = 'object'",
      e);
  if (rc) return rc;
  return lock_then_delete(
      c, a,
      LOCKED_IDS("SELECT id FROM arrays WHERE created_at < $1::bigint AND"
                 " NOT EXISTS " ARRAY_REFS),
      "DELETE FROM arrays WHERE id = ANY($2::text[]) AND"
      " created_at < $1::bigint AND NOT EXISTS " ARRAY_REFS " RETURNING path",
      e);
}

int pg_expire(void *impl, int64_t before_ms, char ***paths, int *npaths,
              terr *e) {
  *paths = NULL;
  *npaths = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  expire_args a = {.before = before_ms};
  int rc = pg__write(impl, expire_tx, &a, e);
  if (rc) {
    for (int i = 0; i < a.n; i++) free(a.paths[i]);
    free(a.paths);
    return rc;
  }
  *paths = a.paths;
  *npaths = a.n;
  return 0;
}
