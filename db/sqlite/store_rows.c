/* store_rows.c — job rows inserted several to a statement.
 *
 * Under load the writer's batch holds runs of ops that each insert one job
 * row: async inserts, and finishes that took their job's insert over and
 * insert the ended row (store.c, the fold table). Run one at a time, each
 * such INSERT paid SQLite's per-statement work: opening a cursor on the
 * table and on each of its nine indexes, evaluating the partial indexes'
 * conditions, closing them all, on top of the row's own b-tree work (about
 * 40 % of a tiny job's INSERT; tests/bench/README.md, 2026-11-29, s37). A
 * multi-row INSERT (`VALUES (...), (...), ...`) pays it once per statement.
 *
 * An op that may lead a run (an async insert, a finish) carries
 * store__run_rows as its rows_fn; store.c's run_batch calls it when it
 * reaches the op (a pointer, so that store.c, which this file calls, does
 * not call it back). It gathers the run: the ops whose row_of gives a row,
 * passing only empty ops and passable ones (they change rows of jobs
 * inserted before them, which a new row of another job does not change),
 * and inserts them in statements of 64, 16, 4 and 2 rows. A statement is
 * atomic: when one fails (a constraint, say), SQLite undoes it and its ops
 * are left to run alone, each with its own outcome, exactly as without
 * the run. Rows of one run may so go in in another order than queued;
 * none of them depends on another (a row that must check references, or
 * a request_id, is not in a run: row_of), and they commit together.
 *
 * Also here: the binding of a job row (store__bind_row, and the typed
 * timings and result that the finish's UPDATE binds too) and the one-row
 * INSERT (store__insert_row).
 *
 * Thread: the writer only (s->rows_sql, s->rows are its own; sq_close
 * frees them). The texts of the statements are built on first use.
 */
#include <math.h>
#include <stdlib.h>

#include "db/sqlite/store_int.h"
#include "util/buf.h"

/* The statement sizes, largest first (a lone row runs as its op). */
static const int sizes[4] = {STORE_ROWS_MAX, 16, 4, 2};

/* The INSERT of k rows: ?(r*43+1) .. ?(r*43+43) for row r, the columns of
 * STORE_ROWS_COLS (node, lease_until, cancel_requested are constants). */
static char *rows_text(int k) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "INSERT INTO jobs (" STORE_ROWS_COLS ") VALUES ");
  for (int r = 0; r < k; r++) {
    int p = r * STORE_ROW_PARAMS;
    tbuf_addf(&b, "%s(?%d", r ? "," : "", p + 1);
    for (int c = 2; c <= STORE_ROW_PARAMS; c++)
      tbuf_addf(&b, c == 39 ? ",NULL,NULL,0,?%d" : ",?%d", p + c);
    tbuf_adds(&b, ")");
  }
  char *t = tbuf_take(&b, NULL); /* NULL when out of memory */
  tbuf_free(&b);
  return t;
}

/* Insert rows[0..k) of ops[0..k) with the statement of size index si:
 * 1 when it went in; 0 when it failed (undone; its ops will not join
 * another run: each runs alone); -1 when the transaction is gone. */
static int insert_k(sqstore *s, int si, store_wop **ops,
                    const store_row *rows, int k) {
  if (!s->rows_sql[si] && !(s->rows_sql[si] = rows_text(sizes[si])))
    return 0;
  sqlite3_stmt *st;
  terr e;
  if (store__stmt(&s->w, s->rows_sql[si], &st, &e)) return 0;
  for (int r = 0; r < k; r++)
    store__bind_row(st, r * STORE_ROW_PARAMS, &rows[r]);
  int step = sqlite3_step(st);
  sqlite3_reset(st);
  if (step == SQLITE_DONE) return 1;
  if (sqlite3_get_autocommit(s->w.db)) return -1;
  for (int r = 0; r < k; r++) /* left as they were: each runs alone */
    ops[r]->row_of = NULL;
  return 0;
}

/* Insert rows[i], ops[i]'s row (row_of gave it), for i in [0, n), with as
 * few statements as it can (of STORE_ROWS_MAX rows, then fewer; a last
 * lone row is left). Every op whose statement went in is done: grouped =
 * 1, rc = its row_done. An op whose statement failed is left as it was
 * (the statement undid itself): run_batch runs it alone, as it would have
 * without the run, so each op's outcome is its own. 0; or -1 when an error
 * ended the whole transaction: the ops that went in are failed (grouped,
 * rc set), the rest left as they were. */
static int insert_rows(sqstore *s, store_wop **ops, const store_row *rows,
                       int n) {
  int at = 0;
  for (int si = 0; si < 4 && at < n; si++) {
    while (n - at >= sizes[si]) {
      int k = sizes[si];
      int r = insert_k(s, si, ops + at, rows + at, k);
      if (r < 0) { /* the rows that went in are gone with the transaction:
                      failed, as an op before a failing one is */
        for (int i = 0; i < at; i++)
          if (!ops[i]->rc)
            ops[i]->rc = store__dberr(&ops[i]->err, s->w.db,
                                      "transaction rolled back");
        return -1;
      }
      if (r) {
        for (int i = at; i < at + k; i++) {
          terr_clear(&ops[i]->err);
          ops[i]->rc = ops[i]->row_done(s, ops[i], &ops[i]->err);
          ops[i]->grouped = 1;
        }
        atomic_fetch_add_explicit(&s->n_rows_grouped, k,
                                  memory_order_relaxed);
      }
      at += k;
    }
  }
  return 0;
}

/* From o on, the ops whose rows may share a multi-row INSERT (row_of
 * gives one), stepping over empty ops and passable ones (store_wop:
 * writes to the rows of jobs inserted before them, which a new row of
 * another job does not change) and stopping at any other op, so that no
 * row goes in before an op its presence could change: inserted together
 * (store_rows.c). A run of one row is left to its op. 0; -1 when an error
 * ended the transaction (insert_rows). See store_int.h. */
int store__run_rows(sqstore *s, store_wop *o) {
  if (!s->rows && !(s->rows = malloc(STORE_ROWS_RUN * sizeof *s->rows)))
    return 0; /* without memory for it: each op alone */
  store_wop *ops[STORE_ROWS_RUN];
  if (!o->row_of || o->row_of(o, &s->rows[0])) /* alone: no scan */
    return 0;
  ops[0] = o;
  int n = 1;
  for (store_wop *x = o->next; x && n < STORE_ROWS_RUN; x = x->next) {
    if (store__op_empty(x) || x->grouped) continue;
    if (x->row_of && x->row_of(x, &s->rows[n]) == 0) {
      ops[n++] = x;
      continue;
    }
    if (!x->passable) break;
  }
  return n < 2 ? 0 : insert_rows(s, ops, s->rows, n);
}

/* See store_int.h (the one-row statement of rows_text's shape). */
int store__insert_row(sqstore *s, const store_row *r, terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "INSERT INTO jobs (" STORE_ROWS_COLS ") VALUES"
                       " (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
                       " ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,"
                       " ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32,"
                       " ?33, ?34, ?35, ?36, ?37, ?38, NULL, NULL, 0, ?39,"
                       " ?40, ?41, ?42, ?43)",
                       &st, e);
  if (rc) return rc;
  store__bind_row(st, 0, r);
  return store__exec_insert(s, st, "job", r->j.id, e);
}

/* See store_int.h. Unbound parameters are NULL (store__stmt clears the
 * bindings), so NULL columns are left unbound. */
void store__bind_row(sqlite3_stmt *st, int b, const store_row *r) {
  const store_job *j = &r->j;
  sqlite3_bind_text(st, b + 1, j->id, -1, SQLITE_STATIC);
  store__bind_text(st, b + 2, j->owner);
  store__bind_text(st, b + 3, j->kind);
  store__bind_text(st, b + 4, j->params);
  sqlite3_bind_text(st, b + 5, job_status_name(j->status), -1, SQLITE_STATIC);
  store__bind_text(st, b + 6, j->backend_requested);
  if (j->backend_used) store__bind_text(st, b + 7, j->backend_used);
  if (j->backend_reason) store__bind_text(st, b + 8, j->backend_reason);
  if (j->estimate) store__bind_text(st, b + 9, j->estimate);
  sqlite3_bind_int(st, b + 10, j->priority);
  if (j->label) store__bind_text(st, b + 11, j->label);
  if (j->request_id) store__bind_text(st, b + 12, j->request_id);
  if (j->body_hash) store__bind_text(st, b + 13, j->body_hash);
  sqlite3_bind_double(st, b + 14, j->timeout_s);
  sqlite3_bind_int64(st, b + 15, j->created_at);
  sqlite3_bind_int64(st, b + 16, j->started_at);
  sqlite3_bind_int64(st, b + 17, j->finished_at);
  const int tcols[JOB_T__COUNT] = {b + 18, b + 28, b + 29, b + 30,
                                   b + 31, b + 32, b + 33};
  const int rcols[4] = {b + 23, b + 34, b + 35, b + 36};
  store__bind_timings(st, &j->timings, tcols);
  sqlite3_bind_int64(st, b + 19, j->progress_done);
  sqlite3_bind_int64(st, b + 20, j->progress_total);
  if (j->error_code) store__bind_text(st, b + 21, j->error_code);
  if (j->error_message) store__bind_text(st, b + 22, j->error_message);
  store__bind_result(st, &j->result, rcols);
  if (j->result_path) store__bind_text(st, b + 24, j->result_path);
  if (j->compare) store__bind_text(st, b + 25, j->compare);
  if (!isnan(j->max_abs_diff)) sqlite3_bind_double(st, b + 26, j->max_abs_diff);
  sqlite3_bind_int(st, b + 27, j->attempts);
  if (j->output_file) store__bind_text(st, b + 37, j->output_file);
  if (j->result_parts) store__bind_text(st, b + 38, j->result_parts);
  if (j->parent) store__bind_text(st, b + 39, j->parent);
  sqlite3_bind_int(st, b + 40, j->tile);
  sqlite3_bind_int(st, b + 41, j->tiles);
  if (j->devices) store__bind_text(st, b + 42, j->devices);
  if (r->npy)
    sqlite3_bind_blob64(st, b + 43, r->npy, r->npy_len, SQLITE_STATIC);
}

void store__bind_timings(sqlite3_stmt *st, const job_timings *t,
                         const int idx[JOB_T__COUNT]) {
  for (int i = 0; i < JOB_T__COUNT; i++) {
    if (t->set & (1u << i)) sqlite3_bind_double(st, idx[i], t->ms[i]);
    else sqlite3_bind_null(st, idx[i]);
  }
}

void store__bind_result(sqlite3_stmt *st, const job_result_info *r,
                        const int idx[4]) {
  if (!r->dtype[0]) {
    for (int i = 0; i < 4; i++) sqlite3_bind_null(st, idx[i]);
    return;
  }
  char shape[STORE_MAXDIM * 22 + 4];
  store__shape_text(r, shape, sizeof shape);
  sqlite3_bind_text(st, idx[0], r->dtype, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, idx[1], shape, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, idx[2], r->bytes);
  if (r->nonconverged > 0) sqlite3_bind_int64(st, idx[3], r->nonconverged);
  else sqlite3_bind_null(st, idx[3]);
}
