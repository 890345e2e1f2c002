/* upload.h — an .npy upload read as its bytes arrive.
 *
 * The HTTP layer hands the body over in the pieces it reads from the socket
 * (http.h, streamed routes); nothing holds the whole body. The preamble and
 * header are collected (at most 10,012 bytes) and checked as npy_parse
 * checks them as soon as they are in; from then on the data goes straight
 * into the array's file through arrays_writer (array/arrays.h): float64 and
 * float32 bytes as they are (the one copy: the socket's buffer into the
 * page cache), integers and bools converted to float64 in pieces of 64 KiB.
 * The digest is computed on the way. The data's length is checked against
 * the shape as it arrives (more than the shape holds: refused at that
 * byte) and at the end (fewer: refused); a Content-Length that does not
 * match the header's shape is refused as soon as the header is read.
 *
 * Errors are T_EINVAL / T_ETOOLARGE naming "body", position = the byte
 * offset in the body; a full disk is T_ENOSPACE when the file's blocks are
 * reserved, right after the header: before the data is read.
 *
 * Threads: one upload is fed by one thread at a time (its connection's).
 */
#ifndef TESSEL_ARRAY_UPLOAD_H
#define TESSEL_ARRAY_UPLOAD_H

#include <stdint.h>

#include "array/arrays.h"

typedef struct npy_upload npy_upload;

/* declared: the body's announced length (Content-Length), -1 if unknown. */
int npy_upload_begin(arrays *A, int64_t max_elems, int64_t declared,
                     npy_upload **out, terr *e);
int npy_upload_feed(npy_upload *u, const void *p, size_t n, terr *e);
/* The body ended: check it was complete, store it (as arrays_put). Frees u. */
int npy_upload_end(npy_upload *u, const char *owner, store_array *rec,
                   int *existing, terr *e);
/* Drop it (the client left, or an error was answered): no file remains. */
void npy_upload_abort(npy_upload *u);
/* Body bytes fed so far. */
uint64_t npy_upload_bytes(const npy_upload *u);

#endif
