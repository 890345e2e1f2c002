/* pg_bulk.c — many rows a statement. A chunk of store_insert_jobs on
 * PostgreSQL in two statements, not one or two per row: one read of the
 * (owner, request_id)
 * pairs already taken (FOR UPDATE, as a single insert locks its key), then
 * one INSERT of every other row from 40 text arrays (unnest), with ON
 * CONFLICT on the request key and one "queued" notification for the whole
 * chunk (naming its first row; the nodes' claimers only need a kick),
 * sent after the commit (pg__note).
 *
 * The caller (pg_jobs.c, insert_many_fast) runs this inside a savepoint
 * and only for rows whose params reference no array or job result (those
 * take lock_refs, row by row). Anything this path cannot answer for each
 * row by itself — a request_id used with another body, a key another
 * node's insert took meanwhile (the row not returned), any error of the
 * statement — returns 1 (or the error): the caller rolls the savepoint
 * back and runs the chunk row by row, which gives each row its own
 * answer. So request_id keeps its meaning (the same rows again answer the
 * existing ids, create nothing).
 *
 * Finishes (pg__finish_bulk): the writer's batch ends several jobs in one
 * UPDATE ... FROM unnest(31 text arrays), the same SET and WHERE as a
 * single finish (PG_FINISH_SET / PG_FINISH_WHERE, pg_int.h), a small
 * result's .npy as bytea hex text, one "end" notification per row (after
 * the commit: pg__note); rows
 * it did not end are left to pg__finish_on, which says why.
 *
 * Array literals: each value double-quoted with \ and " escaped; SQL NULL
 * as an unquoted NULL. Statement texts are fixed (prepared once per
 * connection, pg_conn.c).
 *
 * Threads: the caller's connection, inside its transaction.
 */
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"
#include "util/buf.h"

/* "{"a","b",NULL}" of the non-NULL rows' values of one column. */
static void arr_add(tbuf *b, const char *s, int first) {
  if (!first) tbuf_add(b, ",", 1);
  if (!s) {
    tbuf_adds(b, "NULL");
    return;
  }
  tbuf_add(b, "\"", 1);
  for (const char *q = s; *q;) {
    size_t run = strcspn(q, "\"\\");
    tbuf_add(b, q, run);
    q += run;
    if (*q) {
      tbuf_add(b, "\\", 1);
      tbuf_add(b, q, 1);
      q++;
    }
  }
  tbuf_add(b, "\"", 1);
}

char *pg__text_array(const char *const *v, int n) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "{");
  for (int i = 0; i < n; i++) arr_add(&b, v[i], i == 0);
  tbuf_adds(&b, "}");
  return tbuf_take(&b, NULL);
}

#define U(n) "u.c" #n
static const char bulk_insert_sql[] =
    "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],"
    " $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],"
    " $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],"
    " $20::text[], $21::text[], $22::text[], $23::text[], $24::text[],"
    " $25::text[], $26::text[], $27::text[], $28::text[], $29::text[],"
    " $30::text[], $31::text[], $32::text[], $33::text[], $34::text[],"
    " $35::text[], $36::text[], $37::text[], $38::text[], $39::text[],"
    " $40::text[]) AS u(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12,"
    " c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26,"
    " c27, c28, c29, c30, c31, c32, c33, c34, c35, c36, c37, c38, c39, c40)),"
    " ins AS (INSERT INTO jobs" PG_INSERT_COLUMNS
    " SELECT " U(1) ", " U(2) ", " U(3) ", " U(4) ", 'queued', " U(5) ", "
    U(6) ", " U(7) ", " U(8) ", " U(9) "::int, " U(10) ", " U(11) ", "
    U(12) ", " U(13) "::float8, " U(14) "::bigint, " U(15) "::bigint, "
    U(16) "::bigint, " U(17) "::float8, " U(18) "::bigint, " U(19)
    "::bigint, " U(20) ", " U(21) ", " U(22) ", " U(23) ", " U(24) ", "
    U(25) "::float8, " U(26) "::int, " U(27) "::float8, " U(28)
    "::float8, " U(29) "::float8, " U(30) "::float8, " U(31) "::float8, "
    U(32) "::float8, " U(33) ", " U(34) "::bigint, " U(35) "::bigint, "
    U(36) ", " U(37) ", " U(38) ", " U(39) "::int, " U(40) "::int FROM u"
    " ON CONFLICT (owner, request_id) WHERE request_id IS NOT NULL"
    " DO NOTHING RETURNING id)"
    /* one notification for the chunk, after the commit (pg__note) */
    " SELECT id FROM ins";
#undef U

int pg__has_refs(const char *params) {
  return params &&
         (strstr(params, "\"array\"") || strstr(params, "\"result\""));
}

/* Rows whose (owner, request_id) is taken: found/existing filled, 1 when
 * one was taken with another body. */
static int existing_rows(PGconn *c, const store_job *const *rows, int n,
                         const int *ok, store_job *found, int *existing,
                         terr *e) {
  tbuf ob, rb;
  tbuf_init(&ob, 0);
  tbuf_init(&rb, 0);
  tbuf_adds(&ob, "{");
  tbuf_adds(&rb, "{");
  int keys = 0;
  for (int i = 0; i < n; i++)
    if (ok[i] && rows[i]->request_id) {
      arr_add(&ob, rows[i]->owner, keys == 0);
      arr_add(&rb, rows[i]->request_id, keys == 0);
      keys++;
    }
  tbuf_adds(&ob, "}");
  tbuf_adds(&rb, "}");
  char *os = tbuf_take(&ob, NULL), *rs = tbuf_take(&rb, NULL);
  int rc = 0;
  if (!os || !rs) rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  PGresult *r = NULL;
  if (!rc && keys)
    rc = pg__exec(c,
                  "SELECT " PG_JOB_COLS " FROM jobs WHERE (owner, request_id)"
                  " IN (SELECT * FROM unnest($1::text[], $2::text[]))"
                  " FOR UPDATE",
                  2, (const char *const[]){os, rs}, &r, "insert jobs", e);
  free(os);
  free(rs);
  for (int k = 0; !rc && r && k < PQntuples(r); k++) {
    const char *ow = PQgetvalue(r, k, 1), *rq = PQgetvalue(r, k, 11);
    for (int i = 0; !rc && i < n; i++) {
      if (!ok[i] || existing[i] || !rows[i]->request_id ||
          strcmp(rows[i]->owner, ow) != 0 ||
          strcmp(rows[i]->request_id, rq) != 0)
        continue;
      const char *bh = PQgetisnull(r, k, 12) ? NULL : PQgetvalue(r, k, 12);
      if (!store__same_str(bh, rows[i]->body_hash)) {
        rc = 1; /* the row-by-row path says which and why */
      } else if (pg__job_row(r, k, &found[i])) {
        rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      } else {
        existing[i] = 1;
      }
    }
  }
  PQclear(r);
  return rc;
}

int pg__insert_bulk(PGconn *c, const store_job *const *rows, int n,
                    const int *ok, store_job *found, int *existing,
                    terr *e) {
  for (int i = 0; i < n; i++) existing[i] = 0;
  int rc = existing_rows(c, rows, n, ok, found, existing, e);
  if (rc) { /* the rows it found before it stopped are not the caller's */
    for (int i = 0; i < n; i++)
      if (existing[i]) {
        store_job_clear(&found[i]);
        existing[i] = 0;
      }
    return rc;
  }
  tbuf cols[PG_INSERT_NCOLS];
  for (int k = 0; k < PG_INSERT_NCOLS; k++) {
    tbuf_init(&cols[k], 0);
    tbuf_adds(&cols[k], "{");
  }
  int want = 0;
  for (int i = 0; i < n; i++) {
    if (!ok[i] || existing[i]) continue;
    pg_job_vals jv;
    const char **v = pg__job_values(rows[i], &jv);
    for (int k = 0; k < PG_INSERT_NCOLS; k++) arr_add(&cols[k], v[k], !want);
    want++;
  }
  char *vals[PG_INSERT_NCOLS];
  int bad = 0;
  for (int k = 0; k < PG_INSERT_NCOLS; k++) {
    tbuf_adds(&cols[k], "}");
    bad |= !(vals[k] = tbuf_take(&cols[k], NULL));
  }
  PGresult *r = NULL;
  if (bad)
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  else if (want)
    rc = pg__exec(c, bulk_insert_sql, PG_INSERT_NCOLS,
                  (const char *const *)vals, &r, "insert jobs", e);
  for (int k = 0; k < PG_INSERT_NCOLS; k++) free(vals[k]);
  /* a row not inserted: its key was taken meanwhile (or twice in the
   * chunk); the row-by-row path answers it as the existing row */
  if (!rc && want && PQntuples(r) != want) rc = 1;
  if (!rc && want) pg__note(c, "queued", PQgetvalue(r, 0, 0));
  PQclear(r);
  if (rc)
    for (int i = 0; i < n; i++)
      if (existing[i]) {
        store_job_clear(&found[i]);
        existing[i] = 0;
      }
  return rc;
}

/* ---- finishes ------------------------------------------------------------ */

#define P(n, type) "u.c" #n "::" type
static const char bulk_finish_sql[] =
    "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],"
    " $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],"
    " $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],"
    " $20::text[], $21::text[], $22::text[], $23::text[], $24::text[],"
    " $25::text[], $26::text[], $27::text[], $28::text[], $29::text[],"
    " $30::text[], $31::text[]) AS u(c1, c2, c3, c4, c5, c6, c7, c8, c9,"
    " c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23,"
    " c24, c25, c26, c27, c28, c29, c30, c31)),"
    " w AS (UPDATE jobs SET " PG_FINISH_SET(P) " FROM u WHERE jobs.id = u.c1"
    " AND " PG_FINISH_WHERE(P) " RETURNING " PG_JOB_COLS ")"
    " SELECT * FROM w"; /* each "end" notified after the commit */
#undef P

/* The bytes as bytea's hex text ("\\x0a1b..."); heap, NULL on no memory. */
static char *hex_of(const void *bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  char *h = malloc(2 * n + 3);
  if (!h) return NULL;
  h[0] = '\\';
  h[1] = 'x';
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++) {
    h[2 + 2 * i] = digits[b[i] >> 4];
    h[3 + 2 * i] = digits[b[i] & 15];
  }
  h[2 + 2 * n] = 0;
  return h;
}

int pg__finish_bulk(pgstore *p, PGconn *c, pg_fin *f, int n, terr *e) {
  tbuf cols[PG_FINISH_NVALS];
  for (int k = 0; k < PG_FINISH_NVALS; k++) {
    tbuf_init(&cols[k], 0);
    tbuf_adds(&cols[k], "{");
  }
  int want = 0, bad = 0;
  for (int i = 0; i < n; i++) {
    f[i].done = 0;
    int twice = 0; /* an id twice: the later ones one by one */
    for (int k = 0; k < i && !twice; k++) twice = strcmp(f[k].id, f[i].id) == 0;
    if (twice) {
      f[i].done = -1;
      continue;
    }
    pg_fin_vals fv;
    const char **v = pg__finish_values(p, f[i].id, f[i].end, f[i].st, &fv);
    char *hex = NULL;
    if (f[i].end->result_npy &&
        !(hex = hex_of(f[i].end->result_npy, f[i].end->result_npy_len)))
      bad = 1;
    v[12] = hex;
    for (int k = 0; k < PG_FINISH_NVALS; k++) arr_add(&cols[k], v[k], !want);
    free(hex);
    want++;
  }
  char *vals[PG_FINISH_NVALS];
  for (int k = 0; k < PG_FINISH_NVALS; k++) {
    tbuf_adds(&cols[k], "}");
    bad |= !(vals[k] = tbuf_take(&cols[k], NULL));
  }
  PGresult *r = NULL;
  int rc = bad ? terr_set(e, T_ENOMEM, "", -1, "store: out of memory")
               : pg__exec(c, bulk_finish_sql, PG_FINISH_NVALS,
                          (const char *const *)vals, &r, "finish jobs", e);
  for (int k = 0; k < PG_FINISH_NVALS; k++) free(vals[k]);
  for (int i = 0; i < n; i++)
    if (f[i].done < 0) f[i].done = 0;
  for (int k = 0; !rc && k < PQntuples(r); k++) {
    const char *id = PQgetvalue(r, k, 0);
    for (int i = 0; i < n; i++) {
      if (f[i].done || strcmp(f[i].id, id) != 0) continue;
      if (f[i].row) {
        store_job_clear(f[i].row);
        if (pg__job_row(r, k, f[i].row)) {
          rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
          break;
        }
      }
      f[i].done = 1;
      pg__note(c, "end", id);
      break;
    }
  }
  PQclear(r);
  return rc;
}
