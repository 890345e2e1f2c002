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
 * store.c's run_batch picks the runs (ops whose row_of gives a row, with
 * only empty ops between them, so no other write moves past them) and
 * calls store__insert_rows, which inserts them in statements of 64, 16, 4
 * and 2 rows. A statement is atomic: when one fails (a constraint, say),
 * SQLite undoes it and its ops are left to run alone, each with its own
 * outcome, exactly as without the group. Rows of one run may so go in in
 * another order than queued; none of them depends on another (a row that
 * must check references, or a request_id, is not in a run: row_of), and
 * they commit together.
 *
 * Thread: the writer only (s->rows_sql, s->rows are its own). The texts of
 * the statements are built on first use and freed by store__rows_free.
 */
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

/* See store_int.h. */
int store__insert_rows(sqstore *s, store_wop **ops, const store_row *rows,
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

/* See store_int.h. */
void store__rows_free(sqstore *s) {
  for (int i = 0; i < 4; i++) {
    free(s->rows_sql[i]);
    s->rows_sql[i] = NULL;
  }
  free(s->rows);
  s->rows = NULL;
}
