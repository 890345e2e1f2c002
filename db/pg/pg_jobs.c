/* pg_jobs.c — the job rows on PostgreSQL: reading a row (pg__job_row),
 * insert (idempotent per owner and request_id; notes "queued:<id>", sent
 * after its transaction commits: pg__note), get, the list with every filter and order of
 * store_job_filter and its cursor, the unfinished jobs, a split job's
 * children, a result kept in the row. An insert share-locks the arrays
 * and the jobs (their results as inputs) its params reference (lock_refs:
 * serialised with an array's or a job's delete and with expiry on any
 * node; one already gone fails the insert T_ENOTFOUND).
 *
 * Same semantics as db/sqlite/store_jobs.c: children (rows with parent)
 * are never listed nor counted; q matches ASCII letters in any case and
 * every other character literally (translate() folds A-Z only, LIKE with
 * \ escaping); cursors compare the order's key then the id, ids bytewise
 * (the columns are COLLATE "C"). Parameters are numbered as they are
 * added (PostgreSQL wants every parameter used and typed).
 *
 * Threads: any; each call borrows a pooled connection (pg__read /
 * pg__write). Ownership as store.h says.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"
#include "util/vec.h"

static double col_f64(PGresult *r, int row, int col) {
  return strtod(PQgetvalue(r, row, col), NULL);
}
static int64_t col_i64(PGresult *r, int row, int col) {
  return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Columns of PG_JOB_COLS holding the timings (JOB_T_* order). */
static const int timing_cols[JOB_T__COUNT] = {17, 27, 28, 29, 30, 31, 32};

int pg__job_row(PGresult *r, int row, store_job *j) {
  int oom = 0;
  memset(j, 0, sizeof *j);
  snprintf(j->id, sizeof j->id, "%s", PQgetvalue(r, row, 0));
  j->owner = pg__dup(r, row, 1, &oom);
  j->kind = pg__dup(r, row, 2, &oom);
  j->params = pg__dup(r, row, 3, &oom);
  int sv = job_status_parse(PQgetvalue(r, row, 4));
  j->status = sv < 0 ? JOB_FAILED : (job_status)sv;
  j->backend_requested = pg__dup(r, row, 5, &oom);
  j->backend_used = pg__dup(r, row, 6, &oom);
  j->backend_reason = pg__dup(r, row, 7, &oom);
  j->estimate = pg__dup(r, row, 8, &oom);
  j->priority = (int)col_i64(r, row, 9);
  j->label = pg__dup(r, row, 10, &oom);
  j->request_id = pg__dup(r, row, 11, &oom);
  j->body_hash = pg__dup(r, row, 12, &oom);
  j->timeout_s = col_f64(r, row, 13);
  j->created_at = col_i64(r, row, 14);
  j->started_at = col_i64(r, row, 15);
  j->finished_at = col_i64(r, row, 16);
  for (int i = 0; i < JOB_T__COUNT; i++)
    if (!PQgetisnull(r, row, timing_cols[i]))
      job_timings_put(&j->timings, (job_timing)i,
                      col_f64(r, row, timing_cols[i]));
  j->progress_done = col_i64(r, row, 18);
  j->progress_total = col_i64(r, row, 19);
  j->error_code = pg__dup(r, row, 20, &oom);
  j->error_message = pg__dup(r, row, 21, &oom);
  if (!PQgetisnull(r, row, 22)) {
    job_result_info *x = &j->result;
    snprintf(x->dtype, sizeof x->dtype, "%s", PQgetvalue(r, row, 22));
    const char *sh = PQgetvalue(r, row, 33);
    while (*sh && x->ndim < STORE_MAXDIM) {
      while (*sh == '[' || *sh == ',' || *sh == ' ') sh++;
      if (*sh < '0' || *sh > '9') break;
      char *end;
      x->shape[x->ndim++] = strtoll(sh, &end, 10);
      sh = end;
    }
    x->bytes = col_i64(r, row, 34);
    x->nonconverged = col_i64(r, row, 35);
  }
  j->result_path = pg__dup(r, row, 23, &oom);
  j->compare = pg__dup(r, row, 24, &oom);
  j->max_abs_diff = PQgetisnull(r, row, 25) ? NAN : col_f64(r, row, 25);
  j->attempts = (int)col_i64(r, row, 26);
  j->output_file = pg__dup(r, row, 36, &oom);
  j->result_parts = pg__dup(r, row, 37, &oom);
  j->node = pg__dup(r, row, 38, &oom);
  j->lease_until = col_i64(r, row, 39);
  j->cancel_requested = PQgetvalue(r, row, 40)[0] == 't';
  j->parent = pg__dup(r, row, 41, &oom);
  j->tile = (int)col_i64(r, row, 42);
  j->tiles = (int)col_i64(r, row, 43);
  j->devices = pg__dup(r, row, 44, &oom);
  if (oom) {
    store_job_clear(j);
    return T_ENOMEM;
  }
  return 0;
}

int pg__job_rows(PGresult *r, store_job **jobs, int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  int cnt = PQntuples(r);
  if (cnt == 0) return 0;
  store_job *v = calloc((size_t)cnt, sizeof *v);
  if (!v) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  for (int i = 0; i < cnt; i++)
    if (pg__job_row(r, i, &v[i])) {
      for (int k = 0; k < i; k++) store_job_clear(&v[k]);
      free(v);
      return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    }
  *jobs = v;
  *n = cnt;
  return 0;
}

/* ---- insert -------------------------------------------------------------- */

/* Every {"array": "<id>"} and {"result": "<job id>"} object inside params
 * (at any depth), with its dotted path as the API names a field
 * ("params.x", "params.inputs.a", "params.v[0]"), the key (kind) and the
 * id (rid): a recursive walk of the document's objects and arrays. */
#define PG_REFS_SQL                                                      \
  "WITH RECURSIVE t(path, v) AS (SELECT 'params'::text, $1::jsonb"       \
  " UNION ALL SELECT t.path || c.sub, c.v FROM t CROSS JOIN LATERAL ("   \
  "  SELECT '.' || o.k, o.x FROM jsonb_each(CASE jsonb_typeof(t.v)"      \
  "   WHEN 'object' THEN t.v ELSE '{}'::jsonb END) AS o(k, x)"           \
  "  UNION ALL SELECT '[' || (a.i - 1) || ']', a.x FROM"                 \
  "   jsonb_array_elements(CASE jsonb_typeof(t.v) WHEN 'array' THEN t.v" \
  "   ELSE '[]'::jsonb END) WITH ORDINALITY AS a(x, i)) AS c(sub, v)"    \
  " WHERE jsonb_typeof(c.v) IN ('object', 'array')),"                    \
  " refs AS MATERIALIZED (SELECT t.path, k.kind, t.v->>k.kind AS rid"    \
  "  FROM t CROSS JOIN (VALUES ('array'), ('result')) AS k(kind)"        \
  "  WHERE jsonb_typeof(t.v) = 'object'"                                 \
  "  AND jsonb_typeof(t.v->k.kind) = 'string')"

/* The arrays and the jobs (whose results are inputs) a new job references
 * are share-locked (FOR KEY SHARE) until its transaction ends, and one
 * that is gone fails the insert: T_ENOTFOUND naming its field. A delete
 * (of an array, pg_arrays.c, or of a job, pg_lifecycle.c) takes the row
 * FOR UPDATE and then looks for referencing jobs, so the two are
 * serialised: a delete that locked first and commits makes this insert
 * wait and then find the row gone; an insert that locked first makes the
 * delete wait and then see the committed job (READ COMMITTED: its
 * reference check is a statement after the lock) and answer T_ECONFLICT.
 * Expiry skips the rows locked here (pg_stats.c). Only the referenced
 * job's row must exist here: that it succeeded is the submit's check
 * (compute/array/store_source.c).
 * FOR KEY SHARE does not block the referenced job's own updates (start,
 * finish). Only params that mention "array" or "result" are walked. */
static int lock_refs(PGconn *c, const store_job *j, terr *e) {
  if (!pg__has_refs(j->params)) return 0;
  const char *v[] = {j->params};
  PGresult *r;
  int rc =
      pg__exec(c,
               PG_REFS_SQL ","
               " arr AS MATERIALIZED (SELECT id FROM arrays WHERE id IN"
               "  (SELECT rid FROM refs WHERE kind = 'array') FOR KEY SHARE),"
               " job AS MATERIALIZED (SELECT id FROM jobs WHERE id IN"
               "  (SELECT rid FROM refs WHERE kind = 'result') FOR KEY SHARE)"
               " SELECT path, kind, rid FROM refs WHERE CASE kind"
               "  WHEN 'array' THEN rid NOT IN (SELECT id FROM arr)"
               "  ELSE rid NOT IN (SELECT id FROM job) END"
               " ORDER BY path, kind LIMIT 1",
               1, v, &r, "insert job: references", e);
  if (rc) return rc;
  if (PQntuples(r) == 1)
    rc = terr_set(e, T_ENOTFOUND, PQgetvalue(r, 0, 0), -1, "%s %s not found",
                  strcmp(PQgetvalue(r, 0, 1), "array") == 0 ? "array" : "job",
                  PQgetvalue(r, 0, 2));
  PQclear(r);
  return rc;
}

const char **pg__job_values(const store_job *j, pg_job_vals *jv) {
  char (*b)[32] = jv->b;
  const job_timings *t = &j->timings;
  const char *tv[JOB_T__COUNT];
  for (int i = 0; i < JOB_T__COUNT; i++)
    tv[i] = t->set & (1u << i) ? pg__f64(b[i], t->ms[i]) : NULL;
  const job_result_info *x = &j->result;
  if (x->dtype[0]) store__shape_text(x, jv->shape, sizeof jv->shape);
  const char *v[PG_INSERT_NCOLS] = {
      j->id, j->owner, j->kind, j->params, j->backend_requested,
      j->backend_used, j->backend_reason, j->estimate,
      pg__i64(b[7], j->priority), j->label, j->request_id, j->body_hash,
      pg__f64(b[8], j->timeout_s), pg__i64(b[9], j->created_at),
      pg__i64(b[10], j->started_at), pg__i64(b[11], j->finished_at),
      tv[JOB_T_QUEUE], pg__i64(b[12], j->progress_done),
      pg__i64(b[13], j->progress_total), j->error_code, j->error_message,
      x->dtype[0] ? x->dtype : NULL, j->result_path, j->compare,
      isnan(j->max_abs_diff) ? NULL : pg__f64(b[14], j->max_abs_diff),
      pg__i64(b[15], j->attempts), tv[JOB_T_PREPARE], tv[JOB_T_H2D],
      tv[JOB_T_COMPUTE], tv[JOB_T_D2H], tv[JOB_T_STORE], tv[JOB_T_TOTAL],
      x->dtype[0] ? jv->shape : NULL, NULL, NULL, j->output_file,
      j->result_parts, j->parent, NULL, NULL};
  if (x->dtype[0]) {
    v[33] = pg__i64(b[16], x->bytes);
    if (x->nonconverged > 0) v[34] = pg__i64(b[17], x->nonconverged);
  }
  v[38] = pg__i64(b[18], j->tile);
  v[39] = pg__i64(b[19], j->tiles);
  memcpy(jv->v, v, sizeof v);
  return jv->v;
}

static int pg__insert_on_(pgstore *p, PGconn *c, const store_job *j,
                          store_job *found, int *existing, int retry,
                          terr *e) {
  PGresult *r;
  int rc;
  *existing = 0;
  if (j->request_id) {
    const char *v[] = {j->owner, j->request_id};
    /* FOR UPDATE: a racing insert of the same key waits for ours. */
    rc = pg__exec(c,
                  "SELECT " PG_JOB_COLS " FROM jobs"
                  " WHERE owner = $1 AND request_id = $2 FOR UPDATE",
                  2, v, &r, "insert job", e);
    if (rc) return rc;
    if (PQntuples(r) == 1) {
      store_job f;
      rc = pg__job_row(r, 0, &f);
      PQclear(r);
      if (rc) return terr_set(e, rc, "", -1, "store: out of memory");
      if (!store__same_str(f.body_hash, j->body_hash)) {
        store_job_clear(&f);
        return terr_set(e, T_ECONFLICT, "request_id", -1,
                        "'%s' was used for a different request body",
                        j->request_id);
      }
      *existing = 1;
      if (found) *found = f;
      else store_job_clear(&f);
      return 0;
    }
    PQclear(r);
  }
  if ((rc = lock_refs(c, j, e))) return rc;
  pg_job_vals jv;
  const char **v = pg__job_values(j, &jv);
  /* The "queued" notification only for a row that went in, sent after
   * the commit (pg__note). */
  rc = pg__exec(c,
                "WITH ins AS (INSERT INTO jobs" PG_INSERT_COLUMNS " VALUES"
                " ($1, $2, $3, $4, 'queued', $5, $6, $7, $8, $9, $10, $11,"
                " $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,"
                " $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33,"
                " $34, $35, $36, $37, $38, $39, $40)"
                /* Another node's insert of the same key won the race: we
                 * waited for its commit; answer as its row (below). */
                " ON CONFLICT (owner, request_id) WHERE request_id IS NOT NULL"
                " DO NOTHING RETURNING id)"
                " SELECT id FROM ins",
                PG_INSERT_NCOLS, v, &r, "insert job", e);
  if (rc == T_ECONFLICT)
    return terr_set(e, T_ECONFLICT, "id", -1, "job %s: %s", j->id, e->message);
  if (rc) return rc;
  int inserted = PQntuples(r) > 0;
  PQclear(r);
  if (inserted) pg__note(c, "queued", j->id);
  if (!inserted) return retry ? pg__insert_on_(p, c, j, found, existing, 0, e)
                              : terr_set(e, T_EIO, "request_id", -1,
                                         "store: insert job: lost a race twice");
  return 0;
}

int pg__insert_on(pgstore *p, PGconn *c, const store_job *j, store_job *found,
                  int *existing, terr *e) {
  return pg__insert_on_(p, c, j, found, existing, 1, e);
}

typedef struct insert_args {
  const store_job *j;
  store_job found;
  int existing;
} insert_args;

static int insert_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  insert_args *a = arg;
  store_job_clear(&a->found); /* run again after a deadlock */
  a->existing = 0;
  return pg__insert_on(p, c, a->j, &a->found, &a->existing, e);
}

int pg_job_insert(void *impl, store_job *j, int *existing, terr *e) {
  if (existing) *existing = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  int prc = store__job_insert_prep(j, e);
  if (prc) return prc;
  store_job tmp = *j;
  if (!tmp.owner) tmp.owner = "";
  if (!tmp.backend_requested) tmp.backend_requested = "auto";
  insert_args a = {.j = &tmp};
  store_job_clear(&a.found);
  int rc = pg__write_grouped(impl, insert_tx, &a, e);
  if (rc) {
    store_job_clear(&a.found);
    return rc;
  }
  if (a.existing) {
    store_job_clear(j);
    *j = a.found;
    if (existing) *existing = 1;
  }
  return 0;
}

/* A chunk of store_insert_jobs: each row in a savepoint of its own. */
typedef struct insert_many_args {
  insert_args *a;
  int n;
  int *rcs;
  const int *refused; /* rows that failed before the store */
  terr *errs;
} insert_many_args;

/* Every row without a savepoint of its own, inside one savepoint for the
 * chunk: rows that reference arrays or job results one by one (lock_refs),
 * every other in one INSERT (pg_bulk.c). 0 when all went in (or were
 * found by request_id), 1 when a row failed (the chunk's savepoint is
 * rolled back: run it row by row), else the error that ends the chunk. */
static int insert_many_fast(pgstore *p, PGconn *c, insert_many_args *m,
                            terr *e) {
  int n = m->n;
  const store_job **rows = calloc((size_t)n, sizeof *rows);
  int *ok = calloc((size_t)n, sizeof *ok), *ex = calloc((size_t)n, sizeof *ex);
  store_job *found = calloc((size_t)n, sizeof *found);
  int rc = !rows || !ok || !ex || !found
               ? terr_set(e, T_ENOMEM, "", -1, "store: out of memory")
               : pg__exec(c, "SAVEPOINT many", 0, NULL, NULL, "savepoint", e);
  int bulk = 0;
  for (int i = 0; !rc && i < n; i++) {
    store_job_clear(&m->a[i].found);
    m->a[i].existing = 0;
    if (m->refused[i]) continue;
    terr_clear(&m->errs[i]);
    if (!pg__has_refs(m->a[i].j->params)) {
      rows[i] = m->a[i].j;
      ok[i] = 1;
      m->rcs[i] = 0;
      bulk++;
      continue;
    }
    m->rcs[i] = insert_tx(p, c, &m->a[i], &m->errs[i]);
    if (m->rcs[i] == T_EUNAVAIL) {
      *e = m->errs[i];
      rc = T_EUNAVAIL;
    } else if (m->rcs[i]) {
      rc = 1;
    }
  }
  if (!rc && bulk) {
    rc = pg__insert_bulk(c, rows, n, ok, found, ex, e);
    if (rc && rc != T_EUNAVAIL) rc = 1;
  }
  for (int i = 0; !rc && i < n; i++)
    if (ok[i] && ex[i]) {
      m->a[i].found = found[i];
      m->a[i].existing = 1;
    }
  free(rows);
  free(ok);
  free(ex);
  free(found);
  if (rc == 1) {
    terr_clear(e);
    int rrc = pg__exec(c, "ROLLBACK TO SAVEPOINT many", 0, NULL, NULL,
                       "savepoint", e);
    return rrc ? rrc : 1;
  }
  if (rc) return rc;
  return pg__exec(c, "RELEASE SAVEPOINT many", 0, NULL, NULL, "savepoint", e);
}

static int insert_many_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  insert_many_args *m = arg;
  int rc = insert_many_fast(p, c, m, e);
  if (rc != 1) return rc;
  for (int i = 0; i < m->n; i++) {
    store_job_clear(&m->a[i].found);
    m->a[i].existing = 0;
    if (m->refused[i]) continue;
    rc = pg__exec(c, "SAVEPOINT row", 0, NULL, NULL, "savepoint", e);
    if (rc) return rc;
    terr_clear(&m->errs[i]);
    m->rcs[i] = insert_tx(p, c, &m->a[i], &m->errs[i]);
    if (m->rcs[i] == T_EUNAVAIL || m->rcs[i] == T_EBUSY) {
      *e = m->errs[i]; /* the chunk's, not the row's: the writer decides */
      return m->rcs[i];
    }
    rc = pg__exec(c, m->rcs[i] ? "ROLLBACK TO SAVEPOINT row"
                               : "RELEASE SAVEPOINT row",
                  0, NULL, NULL, "savepoint", e);
    if (rc) return rc;
  }
  return 0;
}

/* [sync] One chunk of store_insert_jobs, one op of the writer's batch. */
int pg_job_insert_many(void *impl, store_job *jobs, int n, int *existing,
                       int *rcs, terr *errs, terr *e) {
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_job *rows = calloc((size_t)n, sizeof *rows);
  insert_args *a = calloc((size_t)n, sizeof *a);
  int *refused = calloc((size_t)n, sizeof *refused);
  if (!rows || !a || !refused) {
    free(rows);
    free(a);
    free(refused);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  for (int i = 0; i < n; i++) {
    existing[i] = 0;
    terr_clear(&errs[i]);
    refused[i] = rcs[i] = store__job_insert_prep(&jobs[i], &errs[i]);
    rows[i] = jobs[i];
    if (!rows[i].owner) rows[i].owner = "";
    if (!rows[i].backend_requested) rows[i].backend_requested = "auto";
    a[i].j = &rows[i];
    store_job_clear(&a[i].found);
  }
  insert_many_args m = {a, n, rcs, refused, errs};
  int rc = pg__write_grouped(impl, insert_many_tx, &m, e);
  for (int i = 0; i < n; i++) {
    if (rc) {
      store_job_clear(&a[i].found);
      if (!refused[i]) {
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
  free(refused);
  return rc;
}

/* ---- reads ---------------------------------------------------------------- */

typedef struct get_args {
  const char *id, *owner;
  store_job *out;
} get_args;

static int get_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  get_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  int rc = pg__exec(c, "SELECT " PG_JOB_COLS " FROM jobs WHERE id = $1", 1, v,
                    &r, "get job", e);
  if (rc) return rc;
  if (PQntuples(r) != 1 ||
      (a->owner && strcmp(PQgetvalue(r, 0, 1), a->owner) != 0))
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", a->id);
  else if (pg__job_row(r, 0, a->out))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  PQclear(r);
  return rc;
}

int pg_job_get(void *impl, const char *id, const char *owner, store_job *out,
               terr *e) {
  memset(out, 0, sizeof *out);
  out->max_abs_diff = NAN;
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  get_args a = {id, owner, out};
  return pg__read(impl, get_rd, &a, e);
}

typedef struct many_args {
  const char *const *ids;
  int n;
  store_job *out;
  int *found;
} many_args;

/* One SELECT for every id (id = ANY); each row goes to every position
 * that asked for its id. */
static int many_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  many_args *a = arg;
  char *arr = pg__text_array(a->ids, a->n);
  if (!arr) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  PGresult *r;
  int rc = pg__exec(c, "SELECT " PG_JOB_COLS " FROM jobs WHERE id ="
                       " ANY($1::text[])",
                    1, (const char *const[]){arr}, &r, "get jobs", e);
  free(arr);
  if (rc) return rc;
  for (int k = 0; !rc && k < PQntuples(r); k++) {
    const char *id = PQgetvalue(r, k, 0);
    for (int i = 0; !rc && i < a->n; i++) {
      if (a->found[i] || strcmp(a->ids[i], id) != 0) continue;
      if (pg__job_row(r, k, &a->out[i]))
        rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      else
        a->found[i] = 1;
    }
  }
  PQclear(r);
  return rc;
}

int pg_job_get_many(void *impl, const char *const *ids, int n,
                    store_job *out, int *found, terr *e) {
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  if (n <= 0) return T_OK;
  many_args a = {ids, n, out, found};
  int rc = pg__read(impl, many_rd, &a, e);
  if (rc)
    for (int i = 0; i < n; i++) {
      store_job_clear(&out[i]);
      found[i] = 0;
    }
  return rc;
}

typedef struct rows_args {
  const char *sql;
  const char *v[2];
  int n;
  store_job **jobs;
  int *cnt;
} rows_args;

static int rows_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  rows_args *a = arg;
  PGresult *r;
  int rc = pg__exec(c, a->sql, a->n, a->v, &r, "read jobs", e);
  if (rc) return rc;
  rc = pg__job_rows(r, a->jobs, a->cnt, e);
  PQclear(r);
  return rc;
}

int pg_job_unfinished(void *impl, store_job **jobs, int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  rows_args a = {"SELECT " PG_JOB_COLS " FROM jobs"
                 " WHERE status IN ('queued','running')"
                 " ORDER BY priority DESC, created_at, id",
                 {NULL, NULL}, 0, jobs, n};
  return pg__read(impl, rows_rd, &a, e);
}

int pg_job_children(void *impl, const char *parent_id, store_job **jobs,
                    int *n, terr *e) {
  *jobs = NULL;
  *n = 0;
  if (!impl || !parent_id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  rows_args a = {"SELECT " PG_JOB_COLS " FROM jobs WHERE parent = $1"
                 " ORDER BY tile, id",
                 {parent_id, NULL}, 1, jobs, n};
  return pg__read(impl, rows_rd, &a, e);
}

typedef struct npy_args {
  const char *id, *owner;
  void **npy;
  size_t *len;
} npy_args;

static int npy_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  npy_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  /* Binary result: the bytea's bytes as they are. */
  int rc = pg__exec_ex(c, "SELECT owner, result_npy FROM jobs WHERE id = $1",
                       1, v, NULL, NULL, 1, &r, "job result", e);
  if (rc) return rc;
  if (PQntuples(r) != 1) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", a->id);
  } else if ((a->owner && strcmp(PQgetvalue(r, 0, 0), a->owner) != 0) ||
             PQgetisnull(r, 0, 1)) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1,
                  "no result of job %s in the store", a->id);
  } else {
    int len = PQgetlength(r, 0, 1);
    void *copy = malloc(len > 0 ? (size_t)len : 1);
    if (!copy) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    } else {
      memcpy(copy, PQgetvalue(r, 0, 1), (size_t)len);
      *a->npy = copy;
      *a->len = (size_t)len;
    }
  }
  PQclear(r);
  return rc;
}

int pg_job_result_npy(void *impl, const char *id, const char *owner,
                      void **npy, size_t *len, terr *e) {
  *npy = NULL;
  *len = 0;
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  npy_args a = {id, owner, npy, len};
  return pg__read(impl, npy_rd, &a, e);
}

/* ---- the list -------------------------------------------------------------- */

/* q as a LIKE pattern: %q% with \ escaping \, % and _, A-Z folded. */
static int like_pattern(const char *q, char *out, size_t cap) {
  size_t n = 0;
  if (cap < 3) return -1;
  out[n++] = '%';
  for (const char *c = q; *c; c++) {
    if (n + 3 >= cap) return -1;
    if (*c == '%' || *c == '_' || *c == '\\') out[n++] = '\\';
    out[n++] = *c >= 'A' && *c <= 'Z' ? (char)(*c - 'A' + 'a') : *c;
  }
  out[n++] = '%';
  out[n] = 0;
  return 0;
}

#define FOLD(col)                                                             \
  "translate(" col ", 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',"                          \
  " 'abcdefghijklmnopqrstuvwxyz')"

/* The WHERE text and its parameters, numbered in order. */
typedef struct qb {
  char sql[3072];
  size_t len;
  const char *v[12];
  int n;
} qb;

static void qb_add(qb *q, const char *fmt, const char *val) {
  /* fmt has one %d for the parameter number (two for the backend). */
  q->v[q->n++] = val;
  q->len += (size_t)snprintf(q->sql + q->len, sizeof q->sql - q->len, fmt,
                             q->n, q->n, q->n);
}

typedef struct list_args {
  const store_job_filter *f;
  store_job_pos after;
  int has_after;
  const char *pat;
  store_job *v;
  int cnt;
  int64_t *total;
} list_args;

static void filters(const list_args *a, qb *q, char *st) {
  const store_job_filter *f = a->f;
  q->len = (size_t)snprintf(q->sql, sizeof q->sql, " WHERE parent IS NULL");
  if (f->owner) qb_add(q, " AND owner = $%d", f->owner);
  if (f->status >= 0) {
    snprintf(st, 16, "%s", job_status_name((job_status)f->status));
    qb_add(q, " AND status = $%d", st);
  }
  if (f->kind) qb_add(q, " AND kind = $%d", f->kind);
  if (f->label) qb_add(q, " AND label = $%d", f->label);
  if (f->backend)
    qb_add(q,
           " AND (backend_requested = $%d::text OR backend_used = $%d::text"
           " OR backend_used LIKE replace(replace(replace($%d::text, '\\',"
           " '\\\\'), '%%', '\\%%'), '_', '\\_') || ':%%')",
           f->backend);
  if (f->q)
    qb_add(q, " AND (" FOLD("id") " LIKE $%d::text OR " FOLD("label")
              " LIKE $%d::text OR false)",
           a->pat);
}

static int list_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  list_args *a = arg;
  const store_job_filter *f = a->f;
  char st[16], num[32], lim[32];
  qb q;
  q.n = 0;
  filters(a, &q, st);
  qb w = q; /* the filters alone, for the total */
  const char *key = store__order_key_sql(f->order, !f->asc);
  const char *kcmp = !f->asc ? "<" : ">";
  const char *icmp = !key && f->asc ? ">" : "<";
  if (a->has_after && key) {
    const char *kv = f->order == STORE_ORDER_KIND ? a->after.text
                     : f->order == STORE_ORDER_STATUS
                         ? pg__i64(num, (int64_t)a->after.num)
                         : pg__f64(num, a->after.num);
    const char *cast = f->order == STORE_ORDER_KIND     ? "text"
                       : f->order == STORE_ORDER_STATUS ? "int"
                                                        : "float8";
    q.v[q.n++] = kv;
    q.v[q.n++] = a->after.id;
    q.len += (size_t)snprintf(q.sql + q.len, sizeof q.sql - q.len,
                              " AND (%s %s $%d::%s OR (%s = $%d::%s AND"
                              " id < $%d::text))",
                              key, kcmp, q.n - 1, cast, key, q.n - 1, cast,
                              q.n);
  } else if (a->has_after) {
    q.v[q.n++] = a->after.id;
    q.len += (size_t)snprintf(q.sql + q.len, sizeof q.sql - q.len,
                              " AND id %s $%d::text", icmp, q.n);
  }
  q.v[q.n++] = pg__i64(lim, f->limit + 1);
  if (key)
    q.len += (size_t)snprintf(q.sql + q.len, sizeof q.sql - q.len,
                              " ORDER BY %s %s, id DESC LIMIT $%d::int", key,
                              !f->asc ? "DESC" : "ASC", q.n);
  else
    q.len += (size_t)snprintf(q.sql + q.len, sizeof q.sql - q.len,
                              " ORDER BY id %s LIMIT $%d::int",
                              !f->asc ? "DESC" : "ASC", q.n);
  char sql[3400];
  snprintf(sql, sizeof sql, "SELECT " PG_JOB_COLS " FROM jobs%s", q.sql);
  PGresult *r;
  int rc = pg__exec_dyn(c, sql, q.n, q.v, &r, "list jobs", e);
  if (rc) return rc;
  rc = pg__job_rows(r, &a->v, &a->cnt, e);
  PQclear(r);
  if (rc || !a->total) return rc;
  snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs%s", w.sql);
  if ((rc = pg__exec_dyn(c, sql, w.n, w.v, &r, "count jobs", e))) return rc;
  *a->total = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return 0;
}

int pg_job_list(void *impl, const store_job_filter *f, store_job **jobs,
                int *n, int *has_next, store_job_pos *next, int64_t *total,
                terr *e) {
  *jobs = NULL;
  *n = 0;
  *has_next = 0;
  if (total) *total = 0;
  if (!impl || !f) return terr_set(e, T_EINVAL, "", -1, "store: no filter");
  list_args a = {.f = f, .has_after = f->after != NULL, .total = total};
  if (a.has_after) a.after = *f->after;
  memset(next, 0, sizeof *next);
  int frc = store__job_filter_check(f, e);
  if (frc) return frc;
  char pat[2 * STORE_JOB_Q_MAX + 3];
  if (f->q && (strlen(f->q) > STORE_JOB_Q_MAX ||
               like_pattern(f->q, pat, sizeof pat)))
    return terr_set(e, T_EINVAL, "q", -1, "longer than %d bytes",
                    STORE_JOB_Q_MAX);
  a.pat = pat;
  int rc = pg__read(impl, list_rd, &a, e);
  if (rc) {
    for (int i = 0; i < a.cnt; i++) store_job_clear(&a.v[i]);
    free(a.v);
    if (total) *total = 0;
    return rc;
  }
  if (a.cnt > f->limit) {
    store_job_clear(&a.v[f->limit]);
    a.cnt = f->limit;
    *has_next = 1;
    store__job_pos(&a.v[a.cnt - 1], f->order, !f->asc, next);
  }
  *jobs = a.v;
  *n = a.cnt;
  return 0;
}
