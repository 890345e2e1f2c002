/* parts_upload.h — an array uploaded in parts sent at once.
 *
 * POST /v1/uploads creates one (dtype and shape: the array's file is made
 * at once, sized and its blocks reserved, Tessel's header written);
 * each PUT /v1/uploads/{id}?offset=O brings the data bytes [O, O+len) and
 * writes them at their place as they arrive (pwrite, no buffer between the
 * socket's and the page cache), any number at once from several
 * connections; complete checks that every byte came, hashes the file and
 * stores it as an upload in one piece is stored (arrays.h: the same digest,
 * the same id, 201 or 200 for content already stored). The table of open
 * uploads lives in this process (a restart forgets them; arrays_sweep then
 * removes their .tmp files).
 *
 * Rules: a part must lie within the data (offset + length <= bytes) and
 * must not overlap a part received or being received (T_EINVAL naming
 * "offset"); a part that did not arrive whole (the client left, the body
 * was short) is forgotten, its range free to be sent again. Complete with
 * a range missing, or with a part still arriving, is T_ECONFLICT naming
 * the first missing range. Another owner's upload is T_ENOTFOUND, as is an
 * expired one. Limits per owner: open uploads and their bytes in all
 * (T_ETOOLARGE naming "shape"); the part's own size is the route's body
 * cap. An upload untouched for ttl_s seconds expires: parts_upload_expire
 * (called by compute/jobs/lifecycle.c, the one owner of ends of life)
 * drops it and its file; so does parts_upload_delete.
 *
 * Threads: every function, any thread; one mutex guards the table (never
 * held across a write or the hash).
 */
#ifndef TESSEL_ARRAY_PARTS_UPLOAD_H
#define TESSEL_ARRAY_PARTS_UPLOAD_H

#include <stdint.h>

#include "compute/array/arrays.h"

typedef struct parts_limits {
  int64_t ttl_s;       /* an upload untouched this long expires */
  int64_t max_open;    /* open uploads per owner */
  int64_t max_pending; /* their bytes in all, per owner */
  int64_t max_bytes;   /* one upload's data bytes (--max-upload) */
  int64_t max_elems;   /* one upload's elements (--max-elements) */
} parts_limits;

/* Set the limits (at start, before serving; defaults otherwise). */
void parts_upload_setup(const parts_limits *l);

typedef struct parts_info {
  char id[T_ID_MAX];
  uint64_t bytes;      /* data bytes in all */
  uint64_t received;   /* data bytes received */
  int64_t expires_ms;  /* wall ms */
  uint64_t missing_from, missing_to; /* the first missing range [from, to) */
  char dtype[16];
  char shape[256];
} parts_info;

/* A new upload of `owner`. Errors: T_EINVAL naming "dtype"/"shape",
 * T_ETOOLARGE naming "shape" (a limit), T_ENOSPACE. */
int parts_upload_create(arrays *A, const char *owner, tdtype dt, int ndim,
                        const int64_t *shape, parts_info *out, terr *e);
/* The state of an upload (T_ENOTFOUND naming "id"). */
int parts_upload_info(const char *id, const char *owner, parts_info *out,
                      terr *e);

/* One part being received. begin claims [offset, offset+len); write takes
 * the body's pieces in order; end checks they were len bytes and marks the
 * range received (frees p); abort forgets it (frees p; NULL: no-op). */
typedef struct parts_put parts_put;
int parts_put_begin(const char *id, const char *owner, int64_t offset,
                    int64_t len, parts_put **out, terr *e);
int parts_put_write(parts_put *p, const void *buf, size_t n, terr *e);
int parts_put_end(parts_put *p, parts_info *out, terr *e);
void parts_put_abort(parts_put *p);

/* Every byte received: store the array (rec as arrays_writer_commit gives
 * it); the upload is gone after, whatever the answer. */
int parts_upload_complete(const char *id, const char *owner,
                          store_array *rec, int *existing, terr *e);
/* Drop an upload and its file (T_ENOTFOUND naming "id"). Parts still
 * arriving are cut off: their writes fail, the file goes with the last. */
int parts_upload_delete(const char *id, const char *owner, terr *e);
/* Drop the uploads untouched since before now_ms - ttl; *n: how many. */
void parts_upload_expire(int64_t now_ms, int *n);

#endif
