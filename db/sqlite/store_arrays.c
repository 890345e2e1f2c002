/* store_arrays.c — the uploaded-array rows: insert (deduplicated by digest
 * per owner), get, list, delete.
 *
 * The data itself is a .npy file under the data dir; the row holds its path
 * and what describes it. Writes run on the writer thread (see store.c), each
 * in its own savepoint, so the dedupe check and the insert, or the reference
 * check and the delete, are one atomic step.
 *
 * A job references an array through {"array": "a_..."} inside its params
 * JSON; the store finds references by searching the params text of the
 * unfinished jobs for the id (ids are unique random-tailed strings, so a
 * plain substring search has no false matches in practice). The partial
 * index jobs_unfinished keeps that scan to the queued and running jobs.
 *
 * Ownership: store_array strings are heap copies released with
 * store_array_clear; list arrays are freed by the caller.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"

#define ARRAY_COLS "id, owner, dtype, shape, bytes, digest, path, created_at"

static int array_row(sqlite3_stmt *st, store_array *a) {
  int oom = 0;
  memset(a, 0, sizeof *a);
  const unsigned char *id = sqlite3_column_text(st, 0);
  snprintf(a->id, sizeof a->id, "%s", id ? (const char *)id : "");
  a->owner = store__col_dup(st, 1, &oom);
  a->dtype = store__col_dup(st, 2, &oom);
  a->shape = store__col_dup(st, 3, &oom);
  a->bytes = sqlite3_column_int64(st, 4);
  a->digest = store__col_dup(st, 5, &oom);
  a->path = store__col_dup(st, 6, &oom);
  a->created_at = sqlite3_column_int64(st, 7);
  if (oom) {
    store_array_clear(a);
    return T_ENOMEM;
  }
  return 0;
}

/* ---- insert -------------------------------------------------------------- */

typedef struct ainsert_args {
  const store_array *a;
  store_array found;
  int existing;
} ainsert_args;

static int ainsert_fn(sqstore *s, store_wop *op, terr *e) {
  ainsert_args *x = op->arg;
  const store_array *a = x->a;
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "SELECT " ARRAY_COLS " FROM arrays"
                       " WHERE owner = ?1 AND digest = ?2",
                       &st, e);
  if (rc) return rc;
  store__bind_text(st, 1, a->owner);
  store__bind_text(st, 2, a->digest);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    rc = array_row(st, &x->found);
    sqlite3_reset(st);
    if (rc) return terr_set(e, rc, "", -1, "store: out of memory");
    x->existing = 1;
    return 0;
  }
  sqlite3_reset(st);
  if (step != SQLITE_DONE) return store__dberr(e, s->w.db, "insert array");
  if ((rc = store__stmt(&s->w,
                        "INSERT INTO arrays (" ARRAY_COLS ")"
                        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        &st, e)))
    return rc;
  sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
  store__bind_text(st, 2, a->owner);
  store__bind_text(st, 3, a->dtype);
  store__bind_text(st, 4, a->shape);
  sqlite3_bind_int64(st, 5, a->bytes);
  store__bind_text(st, 6, a->digest);
  store__bind_text(st, 7, a->path);
  sqlite3_bind_int64(st, 8, a->created_at);
  return store__exec_insert(s, st, "array", a->id, e);
}

/* [sync] See store.h. dtype, shape, digest and path are required; an empty
 * a->id gets a new "a_" id, a zero created_at the current time, a NULL owner
 * "". On *existing = 1 the caller's file for the new upload is redundant
 * (the stored a->path is the one to keep). */
int sq_array_insert(sqstore *s, store_array *a, int *existing, terr *e) {
  if (existing) *existing = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  int prc = store__array_insert_prep(a, e);
  if (prc) return prc;
  store_array tmp = *a;
  if (!tmp.owner) tmp.owner = "";
  ainsert_args x = {.a = &tmp};
  int rc = store__write(s, ainsert_fn, &x, e);
  if (rc) {
    store_array_clear(&x.found); /* the commit may fail after a match */
    return rc;
  }
  if (x.existing) {
    store_array_clear(a);
    *a = x.found;
    if (existing) *existing = 1;
  }
  return 0;
}

/* ---- reads ----------------------------------------------------------------- */

/* See store.h. owner NULL: any owner; another owner's array is
 * T_ENOTFOUND. *out is filled only on success. */
int sq_array_get(sqstore *s, const char *id, const char *owner,
                    store_array *out, terr *e) {
  memset(out, 0, sizeof *out);
  if (!s || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(
      s, "SELECT " ARRAY_COLS " FROM arrays WHERE id = ?1", &c, &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    const char *o = (const char *)sqlite3_column_text(st, 1);
    if (owner && (!o || strcmp(o, owner) != 0))
      rc = terr_set(e, T_ENOTFOUND, "id", -1, "no array %s", id);
    else if (array_row(st, out))
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  } else if (step == SQLITE_DONE) {
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no array %s", id);
  } else {
    rc = store__dberr(e, c->db, "get array");
  }
  sqlite3_reset(st);
  return rc;
}

/* See store.h. Newest first; owner NULL: all; cursor NULL: from the newest;
 * limit 1..1000. *arrays is a new array of *n (clear each, free the array);
 * next_cursor (T_ID_MAX bytes) is "" on the last page. */
int sq_array_list(sqstore *s, const char *owner, const char *cursor,
                     int limit, store_array **arrays, int *n,
                     char *next_cursor, terr *e) {
  *arrays = NULL;
  *n = 0;
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  /* The caller may pass its cursor buffer as next_cursor: copy it first. */
  char cur[T_ID_MAX];
  if (cursor) {
    snprintf(cur, sizeof cur, "%s", cursor);
    cursor = cur;
  }
  next_cursor[0] = 0;
  if (limit < 1 || limit > 1000)
    return terr_set(e, T_EINVAL, "limit", limit, "must be 1..1000, got %d",
                    limit);
  static const char *const sqls[4] = {
      "SELECT " ARRAY_COLS " FROM arrays ORDER BY id DESC LIMIT ?3",
      "SELECT " ARRAY_COLS " FROM arrays WHERE owner = ?1"
      " ORDER BY id DESC LIMIT ?3",
      "SELECT " ARRAY_COLS " FROM arrays WHERE id < ?2"
      " ORDER BY id DESC LIMIT ?3",
      "SELECT " ARRAY_COLS " FROM arrays WHERE owner = ?1 AND id < ?2"
      " ORDER BY id DESC LIMIT ?3",
  };
  store_conn *c;
  sqlite3_stmt *st;
  int rc = store__read_stmt(s, sqls[(owner ? 1 : 0) + (cursor ? 2 : 0)], &c,
                            &st, e);
  if (rc) return rc;
  if (owner) sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
  if (cursor) sqlite3_bind_text(st, 2, cursor, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 3, limit + 1);
  store_array *v = NULL;
  int cnt = 0, step;
  v = calloc((size_t)limit + 1, sizeof *v);
  if (!v) {
    sqlite3_reset(st);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (array_row(st, &v[cnt])) {
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
      goto fail;
    }
    cnt++;
  }
  if (step != SQLITE_DONE) {
    rc = store__dberr(e, c->db, "list arrays");
    goto fail;
  }
  sqlite3_reset(st);
  if (cnt > limit) {
    store_array_clear(&v[limit]);
    cnt = limit;
    snprintf(next_cursor, T_ID_MAX, "%s", v[cnt - 1].id);
  }
  *arrays = v;
  *n = cnt;
  return 0;
fail:
  sqlite3_reset(st);
  for (int i = 0; i < cnt; i++) store_array_clear(&v[i]);
  free(v);
  return rc;
}

/* ---- delete ---------------------------------------------------------------- */

static int adelete_fn(sqstore *s, store_wop *op, terr *e) {
  store_del_args *a = op->arg;
  sqlite3_stmt *st;
  int rc = store__del_find(s, a, "SELECT owner, path FROM arrays WHERE id = ?1",
                           "array", &st, e);
  if (rc) return rc;
  int oom = 0;
  a->path = store__col_dup(st, 1, &oom);
  if (oom) rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  sqlite3_reset(st);
  if (rc) return rc;
  char first[T_ID_MAX];
  int ref = store__referenced(s, a->id, first, e);
  if (ref < 0) return T_EIO;
  if (ref > 0)
    return store_refused_by_dependents(e, "array", a->id, ref, first);
  return store__del_exec(s, "DELETE FROM arrays WHERE id = ?1", a->id, "array",
                         e);
}

/* [sync] See store.h. T_ENOTFOUND when absent or another owner's (owner
 * NULL: any owner). On success *path (caller frees) is the file to remove. */
int sq_array_delete(sqstore *s, const char *id, const char *owner,
                       char **path, terr *e) {
  /* Not one statement: the reference check and the delete share a
   * savepoint. */
  return store__delete(s, adelete_fn, 0, id, owner, path, e);
}
