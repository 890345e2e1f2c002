/* arrays.h — the uploaded arrays' life: store, read, list, delete.
 *
 * The API parses an upload into a tarray and hands it here; nothing in the
 * API writes an array file or reads the store. An array is kept as
 * <data>/arrays/<id>.npy (written under a temp name, then renamed: a crash
 * never leaves half a file under a real name) and a row in the store. The
 * same content from the same owner gives the same id (sha256 of dtype,
 * shape and data): the first upload stores it, a repeat finds it.
 *
 * Threads: any. Ownership: records filled here are the caller's
 * (store_array_clear); `owner` and ids are borrowed for the call.
 */
#ifndef TESSEL_ARRAY_ARRAYS_H
#define TESSEL_ARRAY_ARRAYS_H

#include "array/tarray.h"
#include "db/store.h"
#include "util/err.h"

typedef struct arrays {
  store *st;            /* borrowed */
  const char *data_dir; /* arrays in <data_dir>/arrays */
} arrays;

/* Store array `a` of `owner`: *rec is its record; *existing 1 when the same
 * content was already stored (rec is then that array's record, and no new
 * file is left behind). A full disk is T_ENOSPACE. */
int arrays_put(arrays *A, const char *owner, const tarray *a,
               store_array *rec, int *existing, terr *e);

/* The array `id` of `owner` (NULL: any). A malformed id, an unknown array
 * and another owner's array are all T_ENOTFOUND naming "id". */
int arrays_get(arrays *A, const char *id, const char *owner, store_array *rec,
               terr *e);

/* Delete; *path (free()) is its file for the caller to remove. */
int arrays_delete(arrays *A, const char *id, const char *owner, char **path,
                  terr *e);

/* A page of `owner`'s arrays: limit and cursor as the request gave them
 * (NULL when absent; T_EINVAL naming the parameter when bad). *out is a new
 * array of *n records (store_array_clear each, then free). */
int arrays_list(arrays *A, const char *owner, const char *limit,
                const char *cursor, store_array **out, int *n,
                char next[T_ID_MAX], terr *e);

#endif
