/* arrays.c — the uploaded arrays' life (arrays.h): the content digest, the
 * atomic file write, the store row, and the id and query rules.
 *
 * Threads: any; the store takes its own locks.
 */
#include "array/arrays.h"

#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

#define LIST_DEFAULT 50
#define LIST_MAX 1000

/* sha256 of "dtype|shape|" and the data: the array's content id. */
static void array_digest(const tarray *a, char hex[65]) {
  char shape[256], head[300];
  tshape_str(a->ndim, a->shape, shape, sizeof shape);
  int hl = snprintf(head, sizeof head, "%s|%s|", tdtype_name(a->dtype), shape);
  size_t dlen = (size_t)a->size * tdtype_size(a->dtype);
  struct sha256_ctx h;
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_init(&h);
  sha256_update(&h, (size_t)hl, (const uint8_t *)head);
  if (dlen) sha256_update(&h, dlen, a->data);
  sha256_digest(&h, sizeof digest, digest);
  for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
    snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

static int write_npy_atomically(const tarray *a, const char *path, terr *e) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return terr_set(e, T_EIO, "", -1, "cannot create %s", tmp);
  int rc = npy_write(f, a, e);
  int err = rc ? errno : 0;
  if (fclose(f) != 0 && !rc) {
    err = errno;
    rc = terr_set(e, T_EIO, "", -1, "cannot write %s", tmp);
  }
  rc = terr_nospace(e, rc, err); /* a full disk: 507 */
  if (!rc && rename(tmp, path) != 0)
    rc = terr_set(e, T_EIO, "", -1, "cannot rename %s", tmp);
  if (rc) unlink(tmp);
  return rc;
}

int arrays_put(arrays *A, const char *owner, const tarray *a,
               store_array *rec, int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  t_id_new('a', rec->id);
  char hex[65], shape[300], path[4096];
  array_digest(a, hex);
  /* The stored shape is JSON: "[2, 3]" is already valid JSON. */
  tshape_str(a->ndim, a->shape, shape, sizeof shape);
  snprintf(path, sizeof path, "%s/arrays/%s.npy", A->data_dir, rec->id);
  int rc = write_npy_atomically(a, path, e);
  if (rc) return rc;
  /* Heap copies: the store frees them when the content is already stored. */
  rec->owner = strdup(owner);
  rec->dtype = strdup(tdtype_name(a->dtype));
  rec->shape = strdup(shape);
  rec->bytes = a->size * (int64_t)tdtype_size(a->dtype);
  rec->sha256 = strdup(hex);
  rec->path = strdup(path);
  rec->created_at = t_wall_ms();
  if (!rec->owner || !rec->dtype || !rec->shape || !rec->sha256 ||
      !rec->path) {
    unlink(path);
    store_array_clear(rec);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  if ((rc = store_array_insert(A->st, rec, existing, e))) {
    unlink(path);
    store_array_clear(rec);
    return rc;
  }
  if (*existing) unlink(path); /* the same content is stored under its id */
  return T_OK;
}

int arrays_get(arrays *A, const char *id, const char *owner, store_array *rec,
               terr *e) {
  memset(rec, 0, sizeof *rec);
  if (!id || !t_id_valid('a', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "array '%s' not found",
                    id ? id : "");
  return store_array_get(A->st, id, owner, rec, e);
}

int arrays_delete(arrays *A, const char *id, const char *owner, char **path,
                  terr *e) {
  *path = NULL;
  if (!id || !t_id_valid('a', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "array '%s' not found",
                    id ? id : "");
  return store_array_delete(A->st, id, owner, path, e);
}

int arrays_list(arrays *A, const char *owner, const char *limit,
                const char *cursor, store_array **out, int *n,
                char next[T_ID_MAX], terr *e) {
  *out = NULL;
  *n = 0;
  next[0] = 0;
  int64_t lim = LIST_DEFAULT;
  if (limit && (t_parse_i64(limit, &lim) || lim < 1 || lim > LIST_MAX))
    return terr_set(e, T_EINVAL, "limit", -1,
                    "expected an integer from 1 to %d", LIST_MAX);
  if (cursor && *cursor && !t_id_valid('a', cursor))
    return terr_set(e, T_EINVAL, "cursor", -1,
                    "not a cursor from next_cursor");
  return store_array_list(A->st, owner, cursor && *cursor ? cursor : NULL,
                          (int)lim, out, n, next, e);
}
