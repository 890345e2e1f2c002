/* upload.h — an upload read as its bytes arrive: .npy, CSV, JSON.
 *
 * The HTTP layer hands the body over in the pieces it reads from the socket
 * (http.h, streamed routes); nothing holds the whole body. The preamble and
 * header are collected (at most 10,012 bytes) and checked as npy_parse
 * checks them as soon as they are in; from then on the data goes straight
 * into the array's file through arrays_writer (compute/array/arrays.h): float64 and
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

#include "compute/array/arrays.h"

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

/* A CSV (text/csv) or JSON (nested lists) upload read as its bytes
 * arrive: the body goes to the push reader (tarray.h: csv_push, json_push)
 * and the values it reads go straight into the array's file
 * (arrays_writer_open_stream: data after a fixed 256-byte header area,
 * the header written at the end, when the shape is known), the digest
 * computed on the way over the same bytes an .npy upload of the same
 * array gives. Held per upload: the reader (64 KiB of values, one cell's
 * or number's text) whatever the body's size. CSV values are float64
 * (NaN/Inf refused); JSON values of dtype dt. Errors as the readers give
 * them ("body"); the file is created at begin (an error then is answered
 * before the body is read). */
typedef struct text_upload text_upload;
int text_upload_begin(arrays *A, int json, tdtype dt, int64_t max_elems,
                      text_upload **out, terr *e);
int text_upload_feed(text_upload *u, const void *p, size_t n, terr *e);
/* The body ended: read its end, store it (as arrays_put). Frees u. */
int text_upload_end(text_upload *u, const char *owner, store_array *rec,
                    int *existing, terr *e);
/* Drop it: no file remains. NULL: no-op. */
void text_upload_abort(text_upload *u);
uint64_t text_upload_bytes(const text_upload *u);

#endif
