/* tarray.h — the n-dimensional array every job reads and writes.
 *
 * A tarray is a dense, C-ordered (row-major) float64 or float32 array of up
 * to T_MAXDIM dimensions. Its data is either heap memory owned by the array
 * or a read/write mapping of a .npy file (see tarray_map_npy): either way
 * tarray_free releases it. A 0-d array (ndim 0) is a scalar of size 1.
 * One more form exists for results only: a .npy file being filled by
 * slices (tarray_create_npy_sink), whose data is NULL — it is written with
 * tarray_write and read back, once complete, from its file.
 *
 * Readers and writers for the three wire forms live beside it:
 *   npy.c   NumPy format 1.0/2.0/3.0 read (strict), 1.0 write
 *   csv.c   numbers-only CSV, optional header line, 1-D or 2-D
 *   jarray.c nested JSON arrays (rectangular), both ways
 * All readers take a caller-owned buffer and a byte cap and fail with
 * T_EINVAL naming the position (byte offset, or element index for JSON).
 * CSV and JSON also have push readers (csv_push, json_push: fed the body
 * in pieces, values out through a tvals_out), the upload path.
 */
#ifndef TESSEL_ARRAY_TARRAY_H
#define TESSEL_ARRAY_TARRAY_H

#include <jansson.h>
#ifndef __cplusplus /* the .cu files (C++) do not map same-host files */
#include <stdatomic.h>
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define T_MAXDIM 8

/* T_I64 holds integer results only (a geodesic query's indices and counts):
 * no input is ever int64 (uploads of integer .npy become float64), and a
 * job's int64 result read as another job's input is converted to float64
 * (arrayval_resolve, by chunks; compute/array/store_source.c gives it as stored). */
typedef enum { T_F64 = 0, T_F32 = 1, T_I64 = 2 } tdtype;

typedef struct tarray {
  tdtype dtype;
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t size;  /* product of shape; 1 for ndim 0 */
  void *data;    /* size * tdtype_size(dtype) bytes, C order */
  /* private: how data is held */
  void *map_base;    /* non-NULL when data lies in a file mapping */
  size_t map_len;
  struct tarray_sink *sink; /* non-NULL (and data NULL): a file filled by
                               slices (npyfile.c) */
  unsigned char map_prefault; /* a new result mapping on a file system whose
                                 write faults are dear (not tmpfs): whoever
                                 fills it fast should prefault it first, in
                                 parallel (compute/gpu/stage.cu says why) */
  unsigned char map_warm; /* its pages are already in the page cache (a spare
                             file, compute/array/codec/spare.h): a copy into
                             it runs faster taking its own faults than after
                             a prefault, so stage_prefault skips it (a
                             prefault hidden behind compute may still pay:
                             matmul's view clears this) */
  int guard; /* > 0: the mapping is a guarded same-host file (a {"file"}
              * input or an "output" file under --local-dir, which another
              * process may truncate): util/sigbus.h's id, dropped by
              * tarray_free before it unmaps; 0 otherwise */
  /* Non-NULL: data is borrowed (a registered region's mapping,
   * compute/array/region.h): tarray_free calls release(release_arg)
   * instead of freeing or unmapping anything. */
  void (*release)(void *arg);
  void *release_arg;
} tarray;

size_t tdtype_size(tdtype dt);               /* 8 or 4 (int64: 8) */
const char *tdtype_name(tdtype dt); /* "float64" / "float32" / "int64" */
/* "float64" | "float32" -> dt; -1 when unknown (never T_I64: it is not a
 * dtype a client may ask for). */
int tdtype_parse(const char *name, tdtype *dt);

/* Shapes and overflow. NumPy refuses a shape when its dimensions, zeros
 * left out, multiplied by the item size overflow intp ("array is too big":
 * np.empty((0, 2**62)) raises, although it would hold nothing). Tessel holds
 * every array as float64 somewhere (conversions, results), so it refuses a
 * shape whose non-zero dimensions multiply to more than T_EXTENT_MAX =
 * INT64_MAX / 8 = 2^60 - 1 whatever its dtype. Every product of dimensions anywhere
 * (element counts, byte counts, the sizes along and around a reduction
 * axis, broadcast shapes) is then a product of a subset of a checked
 * shape's dimensions, so it is at most the extent (or 0) and cannot
 * overflow, and bytes = elements * 8 cannot either. */
#define T_EXTENT_MAX (INT64_MAX / 8)
/* Product of the non-zero dimensions; -1 when a dimension is negative, ndim
 * is out of range, or the product is over T_EXTENT_MAX. */
int64_t tshape_extent(int ndim, const int64_t *shape);
/* Element count of a shape; -1 when tshape_extent refuses the shape or the
 * count exceeds `max_elems` (pass INT64_MAX for no cap). */
int64_t tshape_size(int ndim, const int64_t *shape, int64_t max_elems);
/* "[100, 10000]" into buf. Returns buf. */
char *tshape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* New array with uninitialised data (heap). NULL on overflow / no memory.
 * The caller owns the result: tarray_free it. */
tarray *tarray_new(tdtype dt, int ndim, const int64_t *shape);
/* Same, zero-filled. */
tarray *tarray_zeros(tdtype dt, int ndim, const int64_t *shape);
/* Deep copy; NULL on no memory. */
tarray *tarray_clone(const tarray *a);
/* Copy converted to another dtype (any pair; int64 -> float rounds to
 * nearest, float -> int64 truncates toward zero: callers convert only
 * integers). */
tarray *tarray_convert(const tarray *a, tdtype dt);
/* Free data (unmapping when mapped) and the struct. NULL is a no-op. */
void tarray_free(tarray *a);
/* tarray_free, but a big file mapping (64 MiB and more) is unmapped on a
 * thread of its own, so that the caller does not wait for the page tables
 * to be torn down (a stored result: its bytes are in the file already).
 * tarray_unmapping: how many such unmaps are under way (tests). */
void tarray_free_behind(tarray *a);
int tarray_unmapping(void);

/* Element i (flat, C order) as double, whatever the dtype. */
static inline double tarray_get(const tarray *a, int64_t i) {
  return a->dtype == T_F64   ? ((const double *)a->data)[i]
         : a->dtype == T_F32 ? (double)((const float *)a->data)[i]
                             : (double)((const int64_t *)a->data)[i];
}
static inline void tarray_set(tarray *a, int64_t i, double v) {
  if (a->dtype == T_F64)
    ((double *)a->data)[i] = v;
  else if (a->dtype == T_F32)
    ((float *)a->data)[i] = (float)v;
  else
    ((int64_t *)a->data)[i] = (int64_t)v;
}

/* One element (raw, at elem: any alignment) as text, the one way every
 * writer of results formats numbers (csv.c, jarray.c, api/results.c):
 * a float as the shortest text that reads back to the same value (0.1,
 * not 0.10000000000000001; at most %.17g, float32 %.9g), int64 as an
 * integer (42, never 42.0; exact beyond 2^53). A NaN or an infinity is
 * null when json, else nan / inf / -inf. cap >= TNUM_FMT_MAX; returns the
 * length written (no NUL counted). */
#define TNUM_FMT_MAX 32
size_t tnum_fmt(char *buf, size_t cap, tdtype dt, const void *elem, int json);

/* ---- .npy -------------------------------------------------------------- */
/* Parse a whole .npy file held in memory. Strict: magic, version 1.0-3.0,
 * header <= 10,000 bytes, a dict with exactly descr/fortran_order/shape,
 * descr one of '<f8' '<f4' '<i8' '<i4' '<i2' '<i1' '<u1' ... '|u1' '|i1'
 * '<u2' '<u4' '<u8' '|b1' (integers and bools are converted to float64;
 * '>' big-endian and object/str/complex dtypes are refused), C order (a
 * fortran_order True array is refused), data length exactly
 * size * itemsize. Element count capped by max_elems (T_ETOOLARGE beyond).
 * On success *out is a new heap array (float32 stays float32). */
int npy_parse(const void *buf, size_t len, int64_t max_elems, tarray **out,
              terr *e);
/* The same for a result Tessel wrote (a job's result kept in its store
 * row): '<i8' stays int64 (T_I64), bit for bit; other integers convert as
 * above. */
int npy_parse_result(const void *buf, size_t len, int64_t max_elems,
                     tarray **out, terr *e);
/* A header read as the bytes arrive (a streamed upload): npy_head_need
 * says how many bytes from the start hold the whole preamble + header (10
 * until the preamble is in; the preamble's own length when it is not a
 * .npy preamble, so that npy_head_read can say why); npy_head_read checks
 * those bytes as npy_parse does (all but the data's length, which the
 * caller counts: h->src_bytes follow h->data_off). Integers and bools are
 * stored as float64: npy_head_native is 0 for them and npy_head_convert
 * turns n of them into doubles. */
typedef struct npy_head {
  int src_kind, src_itemsize; /* as the file holds them */
  tdtype dtype;               /* as Tessel stores them */
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t size;               /* elements */
  size_t data_off;            /* preamble + header bytes */
  uint64_t src_bytes;         /* data bytes that must follow */
} npy_head;
size_t npy_head_need(const void *buf, size_t len);
int npy_head_read(const void *buf, size_t len, int64_t max_elems,
                  npy_head *h, terr *e);
int npy_head_native(const npy_head *h);
void npy_head_convert(const npy_head *h, const void *src, int64_t n,
                      double *dst);
/* Write the NumPy 1.0 header for (dtype, ndim, shape) into hdr (at least
 * NPY_HEADER_MAX bytes); returns its length, a multiple of 64. */
#define NPY_HEADER_MAX 256
size_t npy_header(tdtype dt, int ndim, const int64_t *shape, char *hdr);
/* The same padded to len bytes (a multiple of 64, at most NPY_HEADER_MAX:
 * every shape of T_MAXDIM dimensions fits 256); 0 when it does not fit. */
size_t npy_header_pad(tdtype dt, int ndim, const int64_t *shape, char *hdr,
                      size_t len);
/* Whole .npy file to a FILE / to a new heap buffer (caller frees). */
int npy_write(FILE *f, const tarray *a, terr *e);
int npy_to_buffer(const tarray *a, char **buf, size_t *len, terr *e);
/* Create `path` as a .npy of this dtype/shape, sized and mapped read/write:
 * the returned array's data is the file's data section, so writing into it
 * fills the file with no second copy. The file is complete once the array
 * is tarray_free'd (which msyncs nothing; the page cache writes back).
 * Its blocks are reserved first: a full disk is T_ENOSPACE here, never a
 * SIGBUS later. (npyfile.c says when to prefer the sink below.) */
int tarray_create_npy(const char *path, tdtype dt, int ndim,
                      const int64_t *shape, tarray **out, terr *e);
/* Create `path` as a .npy of this dtype/shape to be filled by slices: sized,
 * its blocks reserved (a full disk: T_ENOSPACE, and nothing left at path),
 * its header written. The returned array has data NULL and a->sink set;
 * write its elements with tarray_write (from any threads, disjoint ranges);
 * the file is complete once every element was written, and tarray_free
 * closes it. Reading the elements back means mapping the file
 * (tarray_map_npy). */
int tarray_create_npy_sink(const char *path, tdtype dt, int ndim,
                           const int64_t *shape, tarray **out, terr *e);
/* Create `path` as a .npy whose shape is known only once its data is in
 * (a streamed CSV or JSON upload): its data goes at NPY_HEADER_MAX, after
 * a header area of that size (every shape fits: npy_header_pad), written
 * with tarray_write_bytes in order; tarray_stream_finish then gives the
 * shape (its element count must be the bytes written) and writes the
 * header. Until then the array is 1-D of T_EXTENT_MAX elements. Blocks
 * cannot be reserved ahead: a full disk is T_ENOSPACE at the write that
 * meets it. On failure nothing is left at path. */
int tarray_create_npy_stream(const char *path, tdtype dt, tarray **out,
                             terr *e);
int tarray_stream_finish(tarray *a, int ndim, const int64_t *shape,
                         terr *e);
/* Elements [start, start + count) of a from src (count elements of a's
 * dtype): a memcpy into a->data, or for a sink a pwrite at their offset in
 * the file. Any thread; ranges written at the same time must not overlap.
 * 0, T_EIO (T_ENOSPACE for a full disk or quota), or T_EINTERNAL for a
 * range outside the array. */
int tarray_write(tarray *a, int64_t start, int64_t count, const void *src,
                 terr *e);
/* The same by bytes of the data section: len bytes at byte offset off
 * (pieces that need not hold whole elements: a streamed upload). */
int tarray_write_bytes(tarray *a, uint64_t off, const void *src, size_t len,
                       terr *e);
/* A file filled by slices: tarray.sink (made by codec/npyfile.c's
 * tarray_create_npy_fd, closed here: the type owns its end, so tarray.c
 * never calls back into a codec). */
struct tarray_sink {
  int fd;
  size_t data_off; /* bytes of header before element 0 */
};
/* A sink's file descriptor (still the sink's: closed by tarray_sink_close)
 * and the file offset of element 0; -1 when a is not a sink. For a
 * sequential writer that batches its own writes (compute/array/wbehind.h). */
int tarray_sink_fd(const tarray *a, uint64_t *data_off);
/* Close a sink's file (tarray_free does it too); after this the array has
 * neither data nor sink. 0, or close's errno (a deferred write error: the
 * file is not complete). No-op (0) for other arrays and NULL. */
int tarray_sink_close(tarray *a);
/* Map an existing .npy file read-only (private mapping; writes are not
 * carried to the file). Header checks as npy_parse; '<f8', '<f4' and '<i8'
 * map (the dtypes Tessel writes: '<i8' is an int64 result, mapped as T_I64
 * unconverted), other integer dtypes are refused. A reader of a job's
 * result as an input converts T_I64 (arrayval_resolve, by chunks). */
int tarray_map_npy(const char *path, tarray **out, terr *e);
/* The same from an open descriptor (borrowed; the mapping keeps the file
 * after the caller closes it); `name` is for messages. Only '<f8' and '<f4'
 * map here (same-host files the user wrote: no integer input, API.md). guard: the mapping
 * is registered with util/sigbus.h before its header is read (a->guard;
 * `torn`, when not NULL, is set if it is ever torn: see sigbus_guard);
 * T_EUNAVAIL when the registry is full. */
#ifndef __cplusplus
int tarray_map_npy_fd(int fd, const char *name, int guard, atomic_int *torn,
                      tarray **out, terr *e);
#endif
/* Create a .npy of dt/shape in the file open read/write at fd (borrowed,
 * empty: it is sized here): sized, blocks reserved, header written, then
 * mapped shared (sink 0; a->guard left 0 for the caller to set) or a sink
 * (sink 1; the sink holds a dup of fd). Nothing is unlinked on failure:
 * the caller named the file. */
int tarray_create_npy_fd(int fd, const char *name, tdtype dt, int ndim,
                         const int64_t *shape, int sink, tarray **out,
                         terr *e);

/* ---- CSV --------------------------------------------------------------- */
/* Numbers only, comma separated, '\n' or "\r\n" line ends, an optional
 * header line (detected: the first line has a non-numeric cell), rows of
 * equal length. One column or one row gives 1-D; otherwise 2-D [rows, cols].
 * NaN/Inf cells are refused unless allow_nonfinite. Errors name "row R,
 * column C" with position = byte offset. Result float64. */
int csv_parse(const char *buf, size_t len, int64_t max_elems,
              int allow_nonfinite, tarray **out, terr *e);
/* Where a push reader (CSV or JSON, below) puts the values it reads:
 * write(ud, p, n, e) takes n bytes of elements of the reader's dtype, in
 * C order, in pieces (a non-zero return stops the reader with that
 * error); restart(ud) drops every byte written so far (the CSV reader's
 * line 1 turned out to be a header). The service's out is the array's
 * file (compute/array/codec/upload.h); tests collect into memory. */
typedef struct tvals_out {
  int (*write)(void *ud, const void *p, size_t n, terr *e);
  void (*restart)(void *ud);
  void *ud;
} tvals_out;

/* The CSV reader fed the body in pieces split anywhere, holding no more
 * than one cell's text and 64 KiB of values whatever the body's size:
 * the values or the error (code, field, position, message) csv_parse
 * gives for the whole body. feed: an error stops it (later calls return
 * the same code); end: the body is complete: *ndim and shape[0..2) are
 * the array's (float64, the values written to out). csv_parse stays as
 * the one-shot reference the push reader is tested against. */
typedef struct csv_push csv_push;
int csv_push_new(int64_t max_elems, int allow_nonfinite, const tvals_out *out,
                 csv_push **p, terr *e);
int csv_push_feed(csv_push *p, const char *s, size_t n, terr *e);
int csv_push_end(csv_push *p, int *ndim, int64_t *shape, terr *e);
void csv_push_free(csv_push *p); /* NULL: no-op */

/* 1-D: one value per line; 2-D: rows. 17 significant digits (%.17g) for
 * float64, 9 for float32. Other ndim: T_ENOTACCEPT. */
int csv_write(FILE *f, const tarray *a, terr *e);

/* ---- JSON -------------------------------------------------------------- */
/* A JSON number (0-d) or nested arrays of numbers, rectangular, depth <=
 * T_MAXDIM. Booleans, strings, nulls and ragged nesting are refused with
 * the flat element index or the path in the message ("ragged at [3]").
 * `field` names where the value sits ("params.inputs.x"). */
int jarray_parse(const json_t *v, tdtype dt, int64_t max_elems,
                 const char *field, tarray **out, terr *e);
/* Shape only, without building the array (validation at submit time). */
int jarray_shape(const json_t *v, int64_t max_elems, const char *field,
                 int *ndim, int64_t *shape, terr *e);
/* A JSON body of nested lists of numbers (or one number) read as it
 * arrives, in pieces split anywhere, without Jansson (compute/array/codec/jsonpush.c
 * says why and where it differs from jansson + jarray_parse): values of
 * dtype dt to out; end gives the shape. Errors name `field` "body":
 * syntax "invalid JSON at line L column C: ..." (position = byte
 * offset), the rest as jarray_parse words them (position = element
 * index). Holds a 64 KiB value buffer and one number's text. */
typedef struct json_push json_push;
int json_push_new(tdtype dt, int64_t max_elems, const tvals_out *out,
                  json_push **p, terr *e);
int json_push_feed(json_push *p, const char *s, size_t n, terr *e);
int json_push_end(json_push *p, int *ndim, int64_t *shape, terr *e);
void json_push_free(json_push *p); /* NULL: no-op */

/* Nested arrays (numbers; NaN/Inf become null). New reference. */
json_t *jarray_to_json(const tarray *a);
/* Stream the same JSON text to a FILE without building a json_t (for big
 * results). %.17g / %.9g. */
int jarray_write(FILE *f, const tarray *a, terr *e);

#endif
