/* arrays.h — the uploaded arrays' life: store, read, list, delete.
 *
 * An upload reaches the store through the writer below (compute/array/codec/upload.h
 * feeds it as the body arrives; arrays_put hands it a whole tarray);
 * nothing in the API writes an array file or reads the store. An array is kept as
 * <data>/arrays/<id>.npy (written under a temp name, then renamed: a crash
 * never leaves half a file under a real name) and a row in the store. The
 * same content from the same owner gives the same id (the digest of data,
 * dtype and shape; see arrays.c): the first upload stores it, a repeat
 * finds it.
 *
 * Threads: any. Ownership: records filled here are the caller's
 * (store_array_clear); `owner` and ids are borrowed for the call.
 */
#ifndef TESSEL_ARRAY_ARRAYS_H
#define TESSEL_ARRAY_ARRAYS_H

#include "compute/array/tarray.h"
#include "db/store.h"
#include "util/err.h"

typedef struct arrays {
  store *st;            /* borrowed */
  const char *data_dir; /* arrays in <data_dir>/arrays */
} arrays;

/* "xxh3-128:" + 32 hex digits, + NUL; older rows hold "sha256:<64 hex>". */
#define ARRAY_DIGEST_MAX 80

/* An array written as its data arrives (a streamed upload): open with the
 * dtype and shape (the file is created as <id>.npy.tmp, its blocks
 * reserved: a full disk is T_ENOSPACE here), write the data in any pieces
 * (T_EINVAL naming "body" past the shape's bytes), then commit (T_EINVAL
 * when bytes are missing; renames the file and inserts the row, as
 * arrays_put) or abort (removes the file). Commit and abort free w. */
typedef struct array_writer array_writer;
int arrays_writer_open(arrays *A, tdtype dt, int ndim, const int64_t *shape,
                       array_writer **out, terr *e);
int arrays_writer_write(array_writer *w, const void *p, size_t n, terr *e);
uint64_t arrays_writer_missing(const array_writer *w); /* bytes to come */
/* A writer whose shape is known only once the data is in (a streamed CSV
 * or JSON upload; tarray_create_npy_stream): write the data, then give
 * the shape (T_EINTERNAL unless it holds exactly the bytes written; the
 * header is written then), then commit. restart drops what was written
 * (the file is written again from its start, the digest begins again). */
int arrays_writer_open_stream(arrays *A, tdtype dt, array_writer **out,
                              terr *e);
void arrays_writer_restart(array_writer *w);
int arrays_writer_shape(array_writer *w, int ndim, const int64_t *shape,
                        terr *e);
int arrays_writer_commit(array_writer *w, const char *owner, store_array *rec,
                         int *existing, terr *e);
void arrays_writer_abort(array_writer *w);

/* A writer filled out of order (an upload in parts, codec/parts_upload.h):
 * opened as arrays_writer_open (file sized, blocks reserved, header
 * written) but written with arrays_writer_pwrite at data offsets, from any
 * threads at once (pwrite; the caller keeps the pieces apart), and
 * committed with arrays_writer_commit_parts, which hashes the file's data
 * once it is whole and then commits as arrays_writer_commit does (the same
 * digest, so the same id as a one-piece upload of the same bytes). */
int arrays_writer_open_parts(arrays *A, tdtype dt, int ndim,
                             const int64_t *shape, array_writer **out,
                             terr *e);
int arrays_writer_pwrite(array_writer *w, int slot, uint64_t off,
                         const void *p, size_t n, terr *e);
/* Around each part: begin before its first arrays_writer_pwrite (its
 * answer, the part's slot in the digest, goes to every pwrite of the
 * part), end after its last. The digest is taken in file order as the
 * parts come (compute/array/codec/pdigest.h); a part that failed (it may be
 * sent again with other bytes) passes failed 1 to end, and where its
 * bytes were in the digest it starts over. begin names the part's data
 * range [off, off + n): where the file is mapped and TESSEL_PARTS_PREFILL
 * is on, its pages are made present by wbehind.h's prefill threads. */
int arrays_writer_part_begin(array_writer *w, uint64_t off, uint64_t n);
/* 1 when parts sent at once are copied side by side into the file's
 * mapping (4 CPUs or more, or TESSEL_PARTS_MAP=1), where several at once
 * beat one stream; 0: they are pwritten and queue on the file's inode
 * lock, so one stream is as fast. */
int arrays_parts_mapped(void);
void arrays_writer_part_end(array_writer *w, int slot, int failed);
uint64_t arrays_writer_bytes(const array_writer *w); /* data bytes in all */
int arrays_writer_commit_parts(array_writer *w, const char *owner,
                               store_array *rec, int *existing, terr *e);

/* Remove the .tmp files of uploads a dead process left unfinished (at
 * start, before the service takes requests). */
void arrays_sweep(arrays *A);

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
