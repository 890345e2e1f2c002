/* store_ops.c — steps that several store operations share: an INSERT's
 * step with its conflict check (job and array inserts), a reader's cached
 * statement (every read), and the [sync] delete by id with its returned
 * file path, its owner-checked lookup and its DELETE (job and array
 * deletes), the collecting of file paths a delete returns.
 *
 * Threads: store__exec_insert runs on the writer thread (inside an op, on
 * s->w); store__read_stmt on any thread, with that thread's reader
 * connection; store__del_find and store__del_exec on the writer thread;
 * store__delete on a caller thread, which waits for the writer
 * (the arguments live on its stack). No lock of their own.
 *
 * A delete that finds the disk full (SQLITE_FULL) is tried once more after
 * the data disk's reserve is given to the store (util/datadir.h): freeing
 * room must not need room.
 *
 * Ownership: the path store__delete returns is the caller's to free, and
 * so are the strings and array store__collect_paths fills.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"
#include "util/datadir.h"
#include "util/tassert.h"
#include "util/vec.h"

/* See store_int.h (the writer thread). */
int store__exec_insert(sqstore *s, sqlite3_stmt *st, const char *noun,
                       const char *id, terr *e) {
  T_ASSERT(s && st && noun); /* a statement prepared on the writer */
  int step = sqlite3_step(st);
  sqlite3_reset(st);
  if (step == SQLITE_DONE) return 0;
  if ((sqlite3_extended_errcode(s->w.db) & 0xff) == SQLITE_CONSTRAINT)
    return terr_set(e, T_ECONFLICT, "id", -1, "%s %s: %s", noun, id,
                    sqlite3_errmsg(s->w.db));
  char what[64];
  snprintf(what, sizeof what, "insert %s", noun);
  return store__dberr(e, s->w.db, what);
}

/* See store_int.h (any thread, its own reader). */
int store__read_stmt(sqstore *s, const char *sql, store_conn **c,
                     sqlite3_stmt **st, terr *e) {
  int rc = store__reader(s, c, e);
  if (rc) return rc;
  return store__stmt(*c, sql, st, e);
}

/* [sync] See store_int.h. */
int store__delete(sqstore *s, store_wfn fn, int one_stmt, const char *id,
                  const char *owner, char **path, terr *e) {
  if (path) *path = NULL;
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_del_args a = {.id = id, .owner = owner};
  int rc;
  for (int tries = 0;; tries++) { /* a full disk: once more, on the reserve */
    rc = one_stmt ? store__write_one(s, fn, &a, e)
                  : store__write(s, fn, &a, e);
    if (!rc) break;
    free(a.path);
    a.path = NULL;
    if (rc != T_ENOSPACE || tries) return rc;
    reserve_release();
  }
  if (path) *path = a.path;
  else free(a.path);
  return 0;
}

/* See store_int.h (the writer thread). */
int store__referenced(sqstore *s, const char *id, char *first, terr *e) {
  sqlite3_stmt *st;
  T_ASSERT(s && id && first); /* first holds T_ID_MAX bytes */
  first[0] = 0;
  if (store__stmt(&s->w,
                  "SELECT count(*), min(id) FROM jobs WHERE status IN"
                  " ('queued','running') AND instr(params, ?1) > 0",
                  &st, e))
    return -1;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st), n = -1;
  if (step == SQLITE_ROW) {
    n = sqlite3_column_int(st, 0);
    const char *f = (const char *)sqlite3_column_text(st, 1);
    if (f) snprintf(first, T_ID_MAX, "%s", f);
  }
  sqlite3_reset(st);
  if (n < 0) store__dberr(e, s->w.db, "references");
  return n;
}

/* See store_int.h (the writer thread). */
int store__del_find(sqstore *s, const store_del_args *a, const char *sql,
                    const char *noun, sqlite3_stmt **out, terr *e) {
  sqlite3_stmt *st;
  T_ASSERT(a && a->id && sql && out); /* store__delete checked the id */
  int rc = store__stmt(&s->w, sql, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_DONE ||
      (step == SQLITE_ROW && a->owner &&
       strcmp((const char *)sqlite3_column_text(st, 0), a->owner) != 0)) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no %s %s", noun, a->id);
  } else if (step != SQLITE_ROW) {
    char what[64];
    snprintf(what, sizeof what, "delete %s", noun);
    rc = store__dberr(e, s->w.db, what);
  }
  if (rc) {
    sqlite3_reset(st);
    return rc;
  }
  *out = st;
  return 0;
}

/* See store_int.h (the writer thread). */
int store__collect_paths(sqstore *s, sqlite3_stmt *st, char ***paths, int *n,
                         size_t *cap, const char *what, terr *e) {
  int step, rc = 0;
  T_ASSERT(st && paths && n && cap && *n >= 0); /* a prepared statement */
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_type(st, 0) == SQLITE_NULL) continue;
    if (tvec_grow(paths, cap, sizeof **paths, (size_t)*n + 1, 0)) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      break;
    }
    int oom = 0;
    (*paths)[*n] = store__col_dup(st, 0, &oom);
    if (oom) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      break;
    }
    (*n)++;
  }
  if (!rc && step != SQLITE_DONE) rc = store__dberr(e, s->w.db, what);
  sqlite3_reset(st);
  return rc;
}

/* See store_int.h (the writer thread). */
int store__del_exec(sqstore *s, const char *sql, const char *id,
                    const char *noun, terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w, sql, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  char what[64];
  snprintf(what, sizeof what, "delete %s", noun);
  return store__exec_stmt(&s->w, st, what, e);
}
