/* pg_arrays.c — the uploaded-array rows on PostgreSQL: insert
 * (deduplicated by digest per owner), get, list (newest first, an id
 * cursor), delete (refused while an unfinished job references the array),
 * and the two helpers job delete and expiry share: the reference check
 * and the collecting of file paths.
 *
 * As on SQLite (db/sqlite/store_arrays.c), a job references an array by
 * its id inside its params text: strpos over the unfinished jobs' params
 * finds it (ids are unique random-tailed strings). The dedupe check and
 * the insert, or the reference check and the delete, share a transaction
 * (pg__write); the insert's race with another node's insert of the same
 * digest ends in the unique index, answered as the existing row. A job
 * insert share-locks the arrays it references (pg_jobs.c, lock_refs), so
 * the delete's FOR UPDATE waits for such an insert to commit, and the
 * reference check, a later statement under READ COMMITTED, sees its job.
 *
 * Threads: any (pooled connections). Ownership as store.h says.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"
#include "util/vec.h"

#define ARRAY_COLS "id, owner, dtype, shape, bytes, digest, path, created_at"

static int array_row(PGresult *r, int row, store_array *a) {
  int oom = 0;
  memset(a, 0, sizeof *a);
  snprintf(a->id, sizeof a->id, "%s", PQgetvalue(r, row, 0));
  a->owner = pg__dup(r, row, 1, &oom);
  a->dtype = pg__dup(r, row, 2, &oom);
  a->shape = pg__dup(r, row, 3, &oom);
  a->bytes = strtoll(PQgetvalue(r, row, 4), NULL, 10);
  a->digest = pg__dup(r, row, 5, &oom);
  a->path = pg__dup(r, row, 6, &oom);
  a->created_at = strtoll(PQgetvalue(r, row, 7), NULL, 10);
  if (oom) {
    store_array_clear(a);
    return T_ENOMEM;
  }
  return 0;
}

int pg__referenced(PGconn *c, const char *id, char *first, terr *e) {
  const char *v[] = {id};
  PGresult *r;
  first[0] = 0;
  if (pg__exec(c,
               "SELECT count(*), min(id) FROM jobs WHERE status IN"
               " ('queued','running') AND strpos(params, $1) > 0",
               1, v, &r, "references", e))
    return -1;
  int n = PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : 0;
  if (n > 0 && !PQgetisnull(r, 0, 1))
    snprintf(first, T_ID_MAX, "%s", PQgetvalue(r, 0, 1));
  PQclear(r);
  return n;
}

int pg__collect_paths(PGresult *r, char ***paths, int *n, size_t *cap,
                      terr *e) {
  for (int i = 0; i < PQntuples(r); i++) {
    if (PQgetisnull(r, i, 0)) continue;
    if (tvec_grow(paths, cap, sizeof **paths, (size_t)*n + 1, 0))
      return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    int oom = 0;
    (*paths)[*n] = pg__dup(r, i, 0, &oom);
    if (oom) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    (*n)++;
  }
  return 0;
}

typedef struct ains_args {
  const store_array *a;
  store_array found;
  int existing;
} ains_args;

static int find_digest(PGconn *c, ains_args *x, terr *e) {
  const char *v[] = {x->a->owner, x->a->digest};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT " ARRAY_COLS " FROM arrays"
                    " WHERE owner = $1 AND digest = $2",
                    2, v, &r, "insert array", e);
  if (rc) return rc;
  if (PQntuples(r) == 1) {
    if (array_row(r, 0, &x->found))
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    else
      x->existing = 1;
  }
  PQclear(r);
  return rc;
}

static int ainsert_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  ains_args *x = arg;
  int rc = find_digest(c, x, e);
  if (rc || x->existing) return rc;
  const store_array *a = x->a;
  char b[2][32];
  const char *v[] = {a->id,     a->owner, a->dtype,
                     a->shape,  pg__i64(b[0], a->bytes), a->digest,
                     a->path,   pg__i64(b[1], a->created_at)};
  /* ON CONFLICT: another node inserted the same digest meanwhile. */
  PGresult *r;
  rc = pg__exec(c,
                "INSERT INTO arrays (" ARRAY_COLS ") VALUES"
                " ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (owner, digest) DO NOTHING",
                8, v, &r, "insert array", e);
  if (rc == T_ECONFLICT)
    return terr_set(e, T_ECONFLICT, "id", -1, "array %s: %s", a->id,
                    e->message);
  if (rc) return rc;
  int done = atoi(PQcmdTuples(r));
  PQclear(r);
  return done ? 0 : find_digest(c, x, e);
}

int pg_array_insert(void *impl, store_array *a, int *existing, terr *e) {
  if (existing) *existing = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  int prc = store__array_insert_prep(a, e);
  if (prc) return prc;
  store_array tmp = *a;
  if (!tmp.owner) tmp.owner = "";
  ains_args x = {.a = &tmp};
  int rc = pg__write(impl, ainsert_tx, &x, e);
  if (rc) {
    store_array_clear(&x.found);
    return rc;
  }
  if (x.existing) {
    store_array_clear(a);
    *a = x.found;
    if (existing) *existing = 1;
  }
  return 0;
}

typedef struct aget_args {
  const char *id, *owner;
  store_array *out;
} aget_args;

static int aget_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  aget_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  int rc = pg__exec(c, "SELECT " ARRAY_COLS " FROM arrays WHERE id = $1", 1,
                    v, &r, "get array", e);
  if (rc) return rc;
  if (PQntuples(r) != 1 ||
      (a->owner && strcmp(PQgetvalue(r, 0, 1), a->owner) != 0))
    rc = terr_set(e, T_ENOTFOUND, "id", -1, "no array %s", a->id);
  else if (array_row(r, 0, a->out))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  PQclear(r);
  return rc;
}

int pg_array_get(void *impl, const char *id, const char *owner,
                 store_array *out, terr *e) {
  memset(out, 0, sizeof *out);
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  aget_args a = {id, owner, out};
  return pg__read(impl, aget_rd, &a, e);
}

typedef struct alist_args {
  const char *owner, *cursor;
  int limit;
  store_array *v;
  int cnt;
} alist_args;

static int alist_rd(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  alist_args *a = arg;
  static const char *const sqls[4] = {
      "SELECT " ARRAY_COLS " FROM arrays ORDER BY id DESC LIMIT $1::int",
      "SELECT " ARRAY_COLS " FROM arrays WHERE owner = $2"
      " ORDER BY id DESC LIMIT $1::int",
      "SELECT " ARRAY_COLS " FROM arrays WHERE id < $2"
      " ORDER BY id DESC LIMIT $1::int",
      "SELECT " ARRAY_COLS " FROM arrays WHERE owner = $2 AND id < $3"
      " ORDER BY id DESC LIMIT $1::int",
  };
  char lim[32];
  const char *v[3] = {pg__i64(lim, a->limit + 1)};
  int n = 1;
  if (a->owner) v[n++] = a->owner;
  if (a->cursor) v[n++] = a->cursor;
  PGresult *r;
  int rc = pg__exec(c, sqls[(a->owner ? 1 : 0) + (a->cursor ? 2 : 0)], n, v,
                    &r, "list arrays", e);
  if (rc) return rc;
  int rows = PQntuples(r);
  a->v = calloc((size_t)rows + 1, sizeof *a->v);
  if (!a->v) rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  for (int i = 0; !rc && i < rows; i++) {
    if (array_row(r, i, &a->v[i]))
      rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    else
      a->cnt++;
  }
  PQclear(r);
  return rc;
}

int pg_array_list(void *impl, const char *owner, const char *cursor,
                  int limit, store_array **arrays, int *n, char *next_cursor,
                  terr *e) {
  *arrays = NULL;
  *n = 0;
  if (!impl) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  char cur[T_ID_MAX];
  if (cursor) {
    snprintf(cur, sizeof cur, "%s", cursor);
    cursor = cur;
  }
  next_cursor[0] = 0;
  if (limit < 1 || limit > 1000)
    return terr_set(e, T_EINVAL, "limit", limit, "must be 1..1000, got %d",
                    limit);
  alist_args a = {owner, cursor, limit, NULL, 0};
  int rc = pg__read(impl, alist_rd, &a, e);
  if (rc) {
    for (int i = 0; i < a.cnt; i++) store_array_clear(&a.v[i]);
    free(a.v);
    return rc;
  }
  if (a.cnt > limit) {
    store_array_clear(&a.v[limit]);
    a.cnt = limit;
    snprintf(next_cursor, T_ID_MAX, "%s", a.v[a.cnt - 1].id);
  }
  *arrays = a.v;
  *n = a.cnt;
  return 0;
}

typedef struct adel_args {
  const char *id, *owner;
  char *path;
} adel_args;

static int adelete_tx(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  adel_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT owner, path FROM arrays WHERE id = $1 FOR UPDATE",
                    1, v, &r, "delete array", e);
  if (rc) return rc;
  if (PQntuples(r) != 1 ||
      (a->owner && strcmp(PQgetvalue(r, 0, 0), a->owner) != 0)) {
    PQclear(r);
    return terr_set(e, T_ENOTFOUND, "id", -1, "no array %s", a->id);
  }
  int oom = 0;
  a->path = pg__dup(r, 0, 1, &oom);
  PQclear(r);
  if (oom) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  char first[T_ID_MAX];
  int ref = pg__referenced(c, a->id, first, e);
  if (ref < 0) return e->code ? e->code : T_EIO;
  if (ref > 0)
    return store_refused_by_dependents(e, "array", a->id, ref, first);
  return pg__exec(c, "DELETE FROM arrays WHERE id = $1", 1, v, NULL,
                  "delete array", e);
}

int pg_array_delete(void *impl, const char *id, const char *owner,
                    char **path, terr *e) {
  if (path) *path = NULL;
  if (!impl || !id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  adel_args a = {id, owner, NULL};
  int rc = pg__write(impl, adelete_tx, &a, e);
  if (rc || !path) {
    free(a.path);
    return rc;
  }
  *path = a.path;
  return 0;
}
