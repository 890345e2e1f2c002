/* results.c — arrays out of the service: job results and uploaded arrays'
 * data, in the format the client asks for.
 *
 * Negotiation: ?format=json|npy|csv wins, else the Accept header
 * (application/x-npy, application/octet-stream -> npy; text/csv -> csv;
 * application/json, any type or no header -> json); anything else is 406.
 * Transformations: ?limit_rows=N (the first N rows, for previews: the
 * answer says the whole array's rows in X-Total-Rows, and JSON keeps the
 * whole "shape" beside "rows", the rows sent) and, for
 * a result whose kind names its layout (jobs_result_get), square <->
 * condensed (compute/array/layout.h).
 *
 * Nothing is copied whole, whatever the size: every answer holds O(buffer)
 * memory while a client, however slow, reads it.
 *  - An npy answer of the stored array unchanged (no layout switch, and a
 *    cut that cuts nothing) is the file itself (sendfile through MHD), or
 *    for a small job result kept in its store row, those bytes.
 *  - Everything else is produced while it is sent by a stream callback
 *    that reads the file with pread as it goes: a row range of the C-order
 *    .npy is a byte range (npy: a new header with the cut shape, then the
 *    range), the layout switch is computed from the stored matrix a block
 *    at a time (see view_read), JSON and CSV are formatted 64 KiB ahead.
 * Range (RFC 9110): the stored .npy as it is (format=npy, no cut, no
 * layout switch) answers one byte range with 206 and Content-Range, so a
 * client may fetch a big array over several connections at once; several
 * ranges in one header, a range past the end, or a readable Range on any
 * other answer is 416 naming Range; an unreadable header is ignored (200).
 * Each stream reserves its buffers in the transfer budget (util/xfer.h)
 * and answers 503 + Retry-After when it is spent. JSON is refused (406)
 * above ctx->max_json_result estimated bytes, pointing at npy.
 *
 * Threads: runs on the HTTP worker; the stream callbacks run on MHD's thread
 * for the connection. Ownership: the stream state owns its file descriptor
 * (or small in-memory array) and buffers, freed by stream_done.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "compute/array/layout.h"
#include "util/util.h"
#include "util/xfer.h"

enum { FMT_JSON, FMT_NPY, FMT_CSV };

static int pick_format(http_req *r, int *fmt, terr *e) {
  const char *f = http_query(r, "format");
  if (f) {
    if (strcmp(f, "json") == 0) *fmt = FMT_JSON;
    else if (strcmp(f, "npy") == 0) *fmt = FMT_NPY;
    else if (strcmp(f, "csv") == 0) *fmt = FMT_CSV;
    else
      return terr_set(e, T_EINVAL, "format", -1,
                      "'%s' is not one of json, npy, csv", f);
    return T_OK;
  }
  const char *acc = http_header(r, "Accept");
  if (!acc || !*acc || strstr(acc, "application/json") || strstr(acc, "*/*")) {
    /* A browser accepts any type: JSON is the sensible answer. */
    *fmt = FMT_JSON;
    if (acc && strstr(acc, "application/x-npy")) *fmt = FMT_NPY;
    return T_OK;
  }
  if (strstr(acc, "application/x-npy") || strstr(acc, "application/octet-stream"))
    *fmt = FMT_NPY;
  else if (strstr(acc, "text/csv"))
    *fmt = FMT_CSV;
  else
    return terr_set(e, T_ENOTACCEPT, "Accept", -1,
                    "cannot give '%s': use application/json, "
                    "application/x-npy or text/csv", acc);
  return T_OK;
}

/* ---- where the elements come from ------------------------------------ */

/* The stored array: a .npy file read with pread (no mapping, so a reader
 * adds nothing to the daemon's resident memory but its buffers), or a small
 * array in memory (a result kept in its job's row, at most 4 KiB). */
typedef struct src {
  int fd;          /* the file, or -1 */
  uint64_t off;    /* file offset of element 0 */
  tarray *mem;     /* or this array (owned) */
  tdtype dt;
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t size;
} src;

static void src_close(src *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  tarray_free(s->mem);
  s->mem = NULL;
}

/* n elements from element `first` into dst. 0, or -1 on a read error. */
static int src_read(const src *s, int64_t first, int64_t n, char *dst) {
  size_t es = tdtype_size(s->dt), len = (size_t)n * es;
  if (n <= 0) return 0;
  if (first < 0 || first + n > s->size) return -1;
  if (s->mem) {
    memcpy(dst, (const char *)s->mem->data + (size_t)first * es, len);
    return 0;
  }
  uint64_t at = s->off + (uint64_t)first * es;
  size_t got = 0;
  while (got < len) {
    ssize_t k = pread(s->fd, dst + got, len - got, (off_t)(at + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1; /* the file shrank under us, or an I/O error */
    got += (size_t)k;
  }
  return 0;
}

/* ---- what is sent: layout switch and cut ----------------------------- */

enum { V_PLAIN, V_SQ2CD, V_CD2SQ };

/* Square n x n -> condensed reads row i's upper part (i, i+1..n-1): one
 * pread per row. Condensed -> square needs, for output row r, column r of
 * the rows above it: a block of B output rows is filled at once, reading
 * for every earlier row j the B contiguous values (j, b0..b0+B-1), so the
 * whole square costs about n * n / B reads and B * n elements of memory
 * (BLOCK_BYTES at most). */
#define BLOCK_BYTES ((size_t)1 << 20)
#define PEND_CAP ((size_t)64 << 10) /* bytes formatted ahead */
#define EBUF_ELEMS 4096             /* elements read ahead for JSON / CSV */
#define MHD_BLOCK ((int64_t)256 << 10) /* reply.c's STREAM_BLOCK */

typedef struct view {
  int mode;
  int64_t n;       /* the matrix side (layout switches) */
  tdtype dt;
  int ndim;        /* the array as sent */
  int64_t shape[T_MAXDIM];
  int64_t size;
  int cut;         /* limit_rows was asked (ndim > 0): say the full rows */
  int64_t full_rows; /* shape[0] before the cut */
} view;

/* The array as sent, from the stored one and the query; errors as the
 * in-memory transformations gave them. */
static int view_plan(const src *s, int relayout, int from, int to,
                     int64_t limit_rows, view *v, terr *e) {
  memset(v, 0, sizeof *v);
  v->dt = s->dt;
  v->ndim = s->ndim;
  memcpy(v->shape, s->shape, sizeof v->shape);
  v->mode = V_PLAIN;
  if (relayout) {
    int rc = tlayout_switch_shape((tlayout)from, (tlayout)to, s->ndim,
                                  s->shape, &v->ndim, v->shape, &v->n, e);
    if (rc) return rc;
    v->mode = to == TLAYOUT_SQUARE ? V_CD2SQ : V_SQ2CD;
  }
  v->full_rows = v->ndim > 0 ? v->shape[0] : 1;
  v->cut = limit_rows >= 0 && v->ndim > 0;
  if (v->cut && limit_rows < v->shape[0]) v->shape[0] = limit_rows;
  v->size = tshape_size(v->ndim, v->shape, INT64_MAX);
  if (v->size < 0)
    return terr_set(e, T_EINVAL, "layout", -1, "the matrix is too large");
  return T_OK;
}

/* ---- streaming --------------------------------------------------------- */

typedef struct stream_state {
  src s;
  view v;
  int fmt;
  size_t es;
  int64_t reserved; /* bytes of the transfer budget held */

  /* the element reader: the next logical element, and per mode a cursor */
  int64_t next_read;
  int64_t ci, cj;         /* V_SQ2CD: the next stored (row, column) */
  char *blk, *scratch;    /* V_CD2SQ: the block of rows, one segment */
  int64_t blk_rows, blk_first;
  char *ebuf;             /* JSON / CSV: elements read, not yet formatted */
  int64_t ebuf_n, ebuf_i;

  /* JSON: the grid of items (elements; or, for an array with no elements,
   * the empty innermost arrays "[]" before its first zero dimension). */
  int gnd;
  int64_t gshape[T_MAXDIM];
  int64_t items;
  int leaf_empty;
  int64_t next;      /* next item (JSON) or element (CSV, npy) to produce */
  int64_t row_len;   /* CSV: elements per line */
  int stage;         /* 0 header, 1 data, 2 trailer, 3 done */
  char *pend;        /* bytes produced, not yet handed out */
  size_t pend_len, pend_off;
} stream_state;

static void stream_done(void *arg) {
  stream_state *st = arg;
  src_close(&st->s);
  free(st->blk);
  free(st->scratch);
  free(st->ebuf);
  free(st->pend);
  xfer_release(st->reserved);
  free(st);
}

/* Fill the block of output rows that holds row r (V_CD2SQ). */
static int block_fill(stream_state *st, int64_t r) {
  int64_t n = st->v.n, B = st->blk_rows, b0 = r - r % B;
  int64_t hi = b0 + B < n ? b0 + B : n;
  size_t es = st->es;
  for (int64_t j = 0; j + 1 < hi; j++) {
    int64_t c0 = b0 > j + 1 ? b0 : j + 1, cnt = hi - c0;
    if (cnt <= 0) continue;
    if (src_read(&st->s, tlayout_condensed_index(n, j, c0), cnt, st->scratch)) return -1;
    for (int64_t t = 0; t < cnt; t++)
      memcpy(st->blk + (size_t)(j * B + (c0 + t - b0)) * es,
             st->scratch + (size_t)t * es, es);
  }
  st->blk_first = b0;
  return 0;
}

/* The next `cnt` elements of the array as sent, raw, into dst. */
static int view_read(stream_state *st, int64_t cnt, char *dst) {
  size_t es = st->es;
  int64_t n = st->v.n;
  while (cnt > 0) {
    int64_t run = cnt;
    if (st->v.mode == V_PLAIN) {
      if (src_read(&st->s, st->next_read, run, dst)) return -1;
    } else if (st->v.mode == V_SQ2CD) {
      while (st->cj >= n) {
        st->ci++;
        st->cj = st->ci + 1;
      }
      if (run > n - st->cj) run = n - st->cj;
      if (src_read(&st->s, st->ci * n + st->cj, run, dst)) return -1;
      st->cj += run;
    } else {
      int64_t r = st->next_read / n, c = st->next_read % n;
      if (c < r) {
        if (st->blk_first < 0 || r < st->blk_first ||
            r >= st->blk_first + st->blk_rows) {
          if (block_fill(st, r)) return -1;
        }
        if (run > r - c) run = r - c;
        for (int64_t t = 0; t < run; t++)
          memcpy(dst + (size_t)t * es,
                 st->blk + (size_t)((c + t) * st->blk_rows + (r - st->blk_first)) * es,
                 es);
      } else if (c == r) {
        run = 1;
        memset(dst, 0, es); /* +0.0 (or 0) in any dtype */
      } else {
        if (run > n - c) run = n - c;
        if (src_read(&st->s, tlayout_condensed_index(n, r, c), run, dst)) return -1;
      }
    }
    st->next_read += run;
    dst += (size_t)run * es;
    cnt -= run;
  }
  return 0;
}

/* The next element formatted (JSON / CSV) at out, through ebuf: its
 * length, or -1 on a read error. Raw bytes to text in one step, so an
 * int64 is never read as a float (tnum_fmt). */
static int next_value(stream_state *st, char *out, int json) {
  if (st->ebuf_i >= st->ebuf_n) {
    int64_t left = st->v.size - st->next_read;
    int64_t take = left < EBUF_ELEMS ? left : EBUF_ELEMS;
    if (take <= 0 || view_read(st, take, st->ebuf)) return -1;
    st->ebuf_n = take;
    st->ebuf_i = 0;
  }
  size_t n = tnum_fmt(out, TNUM_FMT_MAX, st->v.dt,
                      st->ebuf + (size_t)st->ebuf_i * st->es, json);
  st->ebuf_i++;
  return (int)n;
}

/* Opening brackets before item i of the grid (the outermost one is in the
 * header). */
static size_t json_open(const stream_state *st, int64_t i, char *out) {
  size_t n = 0;
  int64_t stride = 1;
  for (int d = st->gnd - 1; d >= 1; d--) {
    stride *= st->gshape[d];
    if (i % stride == 0) out[n++] = '[';
  }
  return n;
}

/* Closing brackets after item i. */
static size_t json_close(const stream_state *st, int64_t i, char *out) {
  size_t n = 0;
  int64_t stride = 1;
  for (int d = st->gnd - 1; d >= 1; d--) {
    stride *= st->gshape[d];
    if ((i + 1) % stride == 0) out[n++] = ']';
  }
  return n;
}

/* The grid of JSON items: the elements, or for an array with no element
 * the "[]" at the first zero dimension ([2,0] -> [[],[]], [0,3] -> []). */
static void json_grid(stream_state *st) {
  const view *v = &st->v;
  st->gnd = v->ndim;
  memcpy(st->gshape, v->shape, sizeof st->gshape);
  st->items = v->size;
  st->leaf_empty = 0;
  if (v->size != 0 || v->ndim == 0) return;
  int z = 0;
  while (z < v->ndim && v->shape[z] != 0) z++;
  st->gnd = z;
  st->leaf_empty = 1;
  st->items = z == 0 ? 0 : tshape_size(z, v->shape, INT64_MAX);
  if (st->items < 0) st->items = INT64_MAX; /* refused by the size check */
}

/* Produce the next piece into st->pend. 0 when nothing is left, -1 on a
 * read error. */
static int stream_refill(stream_state *st) {
  char *p = st->pend;
  size_t cap = PEND_CAP, n = 0;
  const view *v = &st->v;
  st->pend_off = st->pend_len = 0;
  if (st->fmt == FMT_NPY) {
    if (st->stage == 0) {
      n = npy_header(v->dt, v->ndim, v->shape, p);
      st->stage = 1;
    } else {
      int64_t left = v->size - st->next;
      int64_t take = (int64_t)(cap / st->es);
      if (left < take) take = left;
      if (take <= 0) return 0;
      if (view_read(st, take, p)) return -1;
      st->next += take;
      n = (size_t)take * st->es;
    }
  } else if (st->fmt == FMT_CSV) {
    while (st->next < v->size && n + 64 < cap) {
      int k = next_value(st, p + n, 0);
      if (k < 0) return -1;
      n += (size_t)k;
      st->next++;
      p[n++] = (st->next % st->row_len == 0) ? '\n' : ',';
    }
    if (n == 0) return 0;
  } else {
    switch (st->stage) {
      case 0: {
        /* "shape" is the whole array's; after a cut, "rows" says how many
         * rows "data" holds. */
        char shape[256], rows[40] = "";
        int64_t full[T_MAXDIM];
        memcpy(full, v->shape, sizeof full);
        if (v->ndim > 0) full[0] = v->full_rows;
        tshape_str(v->ndim, full, shape, sizeof shape);
        for (char *s = shape; *s; s++)
          if (*s == ' ') memmove(s, s + 1, strlen(s));
        if (v->cut)
          snprintf(rows, sizeof rows, ",\"rows\":%lld", (long long)v->shape[0]);
        n = (size_t)snprintf(p, cap, "{\"dtype\":\"%s\",\"shape\":%s%s,\"data\":%s",
                             tdtype_name(v->dt), shape, rows, v->ndim == 0 ? "" : "[");
        st->stage = st->items == 0 ? 2 : 1;
        break;
      }
      case 1:
        /* An item is at most 2 * T_MAXDIM brackets, 24 bytes and a comma. */
        while (st->stage == 1 && n + 64 < cap) {
          int64_t i = st->next;
          n += json_open(st, i, p + n);
          if (st->leaf_empty) {
            memcpy(p + n, "[]", 2);
            n += 2;
          } else {
            int k = next_value(st, p + n, 1);
            if (k < 0) return -1;
            n += (size_t)k;
          }
          n += json_close(st, i, p + n);
          st->next++;
          if (st->next >= st->items) st->stage = 2;
          else p[n++] = ',';
        }
        break;
      case 2:
        n = (size_t)snprintf(p, cap, "%s}\n", v->ndim == 0 ? "" : "]");
        st->stage = 3;
        break;
      default:
        return 0;
    }
  }
  st->pend_len = n;
  return 1;
}

static long stream_fill(void *arg, uint64_t pos, char *buf, size_t max) {
  stream_state *st = arg;
  size_t out = 0;
  (void)pos; /* MHD asks in order */
  while (out < max) {
    if (st->pend_off >= st->pend_len) {
      int rc = stream_refill(st);
      if (rc < 0) return -1;
      if (rc == 0) break;
    }
    size_t take = st->pend_len - st->pend_off;
    if (take > max - out) take = max - out;
    memcpy(buf + out, st->pend + st->pend_off, take);
    st->pend_off += take;
    out += take;
  }
  return (long)out;
}

/* 503 with Retry-After: the transfer budget is spent for now. */
static void reply_budget_full(http_req *r, const char *what, int64_t need) {
  http_add_header(r, "Retry-After", XFER_RETRY_AFTER_S);
  api_reply_terr(r, T_EUNAVAIL, "",
                 "%s needs %lld bytes of transfer memory and the server's "
                 "budget (--max-transfer-memory, %lld bytes) is in use: "
                 "retry shortly", what, (long long)need,
                 (long long)xfer_budget_limit());
}

/* Answer with the array described by s (taken) and the query. */
static void reply_stream(http_req *r, api_ctx *ctx, src *s, const view *v,
                         int fmt) {
  if (fmt == FMT_CSV && v->ndim > 2) {
    src_close(s);
    api_reply_terr(r, T_ENOTACCEPT, "format",
                   "CSV holds 1-D or 2-D arrays; this one has %d dimensions: "
                   "use npy or json", v->ndim);
    return;
  }
  stream_state *st = calloc(1, sizeof *st);
  if (!st) {
    src_close(s);
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  st->s = *s;
  s->fd = -1;
  s->mem = NULL;
  st->v = *v;
  st->fmt = fmt;
  st->es = tdtype_size(v->dt);
  st->blk_first = -1;
  st->ci = 0;
  st->cj = 1;
  st->row_len = v->ndim == 2 ? v->shape[1] : 1;
  if (st->row_len <= 0) st->row_len = 1;
  json_grid(st);
  if (fmt == FMT_JSON &&
      ((double)v->size * 24.0 > (double)ctx->max_json_result ||
       (double)st->items * 3.0 > (double)ctx->max_json_result)) {
    int64_t size = v->size;
    stream_done(st);
    api_reply_terr(r, T_ENOTACCEPT, "format",
                   "result of %lld elements is too large for JSON: ask for "
                   "format=npy (or csv), or preview with limit_rows",
                   (long long)size);
    return;
  }
  int64_t need = (int64_t)PEND_CAP + MHD_BLOCK + (int64_t)sizeof *st;
  if (fmt != FMT_NPY) need += EBUF_ELEMS * (int64_t)st->es;
  if (v->mode == V_CD2SQ) {
    int64_t n = v->n > 0 ? v->n : 1;
    st->blk_rows = (int64_t)(BLOCK_BYTES / st->es) / n;
    if (st->blk_rows < 1) st->blk_rows = 1;
    if (st->blk_rows > n) st->blk_rows = n;
    need += (n + 1) * st->blk_rows * (int64_t)st->es;
  }
  if (!xfer_reserve(need)) {
    stream_done(st);
    reply_budget_full(r, "this download", need);
    return;
  }
  st->reserved = need;
  st->pend = malloc(PEND_CAP);
  if (fmt != FMT_NPY) st->ebuf = malloc(EBUF_ELEMS * st->es);
  if (v->mode == V_CD2SQ) {
    st->blk = malloc((size_t)(v->n * st->blk_rows) * st->es + 1);
    st->scratch = malloc((size_t)st->blk_rows * st->es);
  }
  if (!st->pend || (fmt != FMT_NPY && !st->ebuf) ||
      (v->mode == V_CD2SQ && (!st->blk || !st->scratch))) {
    stream_done(st);
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  const char *ct = fmt == FMT_NPY   ? "application/x-npy"
                   : fmt == FMT_CSV ? "text/csv; charset=utf-8"
                                    : "application/json; charset=utf-8";
  http_reply_stream(r, 200, ct, stream_fill, stream_done, st);
}

/* The query of an array answer: format, limit_rows, layout. T_OK, or an
 * error in e. */
typedef struct array_query {
  int fmt;
  int64_t limit_rows; /* -1: all */
  int relayout;       /* layout_from -> layout_to */
  int layout_from, layout_to; /* tlayout, when relayout */
} array_query;

static int parse_array_query(http_req *r, const char *layout_from,
                             const char *layout_to, array_query *q, terr *e) {
  q->fmt = FMT_JSON;
  q->limit_rows = -1;
  q->relayout = 0;
  int rc = pick_format(r, &q->fmt, e);
  if (rc) return rc;
  const char *lr = http_query(r, "limit_rows");
  if (lr && (t_parse_i64(lr, &q->limit_rows) || q->limit_rows < 0))
    return terr_set(e, T_EINVAL, "limit_rows", -1,
                    "expected a non-negative integer");
  q->layout_to = tlayout_parse(layout_to);
  if (layout_to && q->layout_to < 0)
    return terr_set(e, T_EINVAL, "layout", -1,
                    "'%s' is not one of square, condensed", layout_to);
  q->layout_from = tlayout_parse(layout_from);
  q->relayout = layout_from && layout_to && q->layout_from >= 0 &&
                q->layout_from != q->layout_to;
  return T_OK;
}

/* After ?limit_rows: X-Total-Rows, the rows of the whole array (of the
 * layout asked for), in every format. */
static void say_total_rows(http_req *r, const view *v) {
  if (!v->cut) return;
  char n[24];
  snprintf(n, sizeof n, "%lld", (long long)v->full_rows);
  http_add_header(r, "X-Total-Rows", n);
}

/* Is the array as sent the stored one, unchanged (a cut that cuts
 * nothing)? Then an npy answer is the stored bytes themselves. */
static int view_is_whole(const src *s, const view *v) {
  return v->mode == V_PLAIN && (v->ndim == 0 || v->shape[0] == s->shape[0]);
}

/* ---- Range: pieces of the stored .npy --------------------------------- */

/* The Range header against an answer of `len` bytes (http_range_parse says
 * the rules). 0: send all (200); 1: send *off, *n bytes (206, headers
 * added); -1: answered (416). `served` is 0 when this answer is not the
 * stored .npy as it is (JSON, CSV, a cut or a layout switch): a readable
 * Range is then refused, since its bytes would not be a piece of a file a
 * second request could finish. */
static int range_plan(http_req *r, int served, uint64_t len, uint64_t *off,
                      uint64_t *n) {
  const char *h = http_header(r, "Range");
  uint64_t a = 0, b = 0;
  *off = 0;
  *n = len;
  if (served) http_add_header(r, "Accept-Ranges", "bytes");
  http_range_kind k = http_range_parse(h, served ? len : UINT64_MAX, &a, &b);
  if (k == HTTP_RANGE_NONE) return 0;
  char cr[64];
  if (!served) {
    api_reply_terr(r, T_ERANGE, "Range",
                   "ranges are served for the stored .npy only (format=npy, "
                   "no limit_rows, no layout): drop the Range header");
    return -1;
  }
  if (k != HTTP_RANGE_ONE) {
    snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)len);
    http_add_header(r, "Content-Range", cr);
    if (k == HTTP_RANGE_MULTI)
      api_reply_terr(r, T_ERANGE, "Range",
                     "several ranges in one request are not served (no "
                     "multipart/byteranges): ask one range per request");
    else
      api_reply_terr(r, T_ERANGE, "Range",
                     "no byte of the range is within the %llu bytes",
                     (unsigned long long)len);
    return -1;
  }
  snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)a,
           (unsigned long long)b, (unsigned long long)len);
  http_add_header(r, "Content-Range", cr);
  *off = a;
  *n = b - a + 1;
  return 1;
}

/* Open the .npy at path as a source: its header is checked (by mapping it:
 * only the header's page is touched), the data is then read with pread. */
static int src_open_file(const char *path, src *s, uint64_t *file_len,
                         terr *e) {
  memset(s, 0, sizeof *s);
  s->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (s->fd < 0)
    return terr_set(e, errno == ENOENT ? T_ENOTFOUND : T_EIO, "", -1,
                    "cannot read the array's file: %s", strerror(errno));
  struct stat sb;
  tarray *a = NULL;
  int rc = fstat(s->fd, &sb) != 0
               ? terr_set(e, T_EIO, "", -1, "cannot read the array's file: %s",
                          strerror(errno))
               : tarray_map_npy(path, &a, e);
  if (!rc && (uint64_t)sb.st_size != (uint64_t)a->map_len)
    rc = terr_set(e, T_EIO, "", -1, "the array's file changed while opened");
  if (rc) {
    tarray_free(a);
    src_close(s);
    return rc;
  }
  s->off = (uint64_t)((const char *)a->data - (const char *)a->map_base);
  s->dt = a->dtype;
  s->ndim = a->ndim;
  memcpy(s->shape, a->shape, sizeof s->shape);
  s->size = a->size;
  *file_len = (uint64_t)sb.st_size;
  tarray_free(a); /* the mapping; the fd stays */
  return T_OK;
}

void api_reply_array_file(http_req *r, api_ctx *ctx, const char *path,
                          const char *layout_from, const char *layout_to) {
  terr e;
  terr_clear(&e);
  array_query q;
  src s;
  view v;
  uint64_t flen = 0;
  if (parse_array_query(r, layout_from, layout_to, &q, &e) ||
      src_open_file(path, &s, &flen, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (view_plan(&s, q.relayout, q.layout_from, q.layout_to, q.limit_rows, &v, &e)) {
    src_close(&s);
    http_reply_error(r, &e);
    return;
  }
  say_total_rows(r, &v);
  int whole = q.fmt == FMT_NPY && view_is_whole(&s, &v);
  uint64_t off = 0, n = 0;
  int part = range_plan(r, whole, flen, &off, &n);
  if (part < 0) {
    src_close(&s);
    return;
  }
  if (whole) {
    int fd = s.fd;
    s.fd = -1;
    http_reply_fd(r, part ? 206 : 200, "application/x-npy", fd, off, n);
    return;
  }
  reply_stream(r, ctx, &s, &v, q.fmt);
}

void api_reply_array_npy(http_req *r, api_ctx *ctx, char *npy, size_t len,
                         const char *layout_from, const char *layout_to) {
  terr e;
  terr_clear(&e);
  array_query q;
  tarray *a = NULL;
  if (parse_array_query(r, layout_from, layout_to, &q, &e) ||
      npy_parse_result(npy, len, ctx->max_elems, &a, &e)) {
    free(npy);
    http_reply_error(r, &e);
    return;
  }
  src s = {.fd = -1, .mem = a, .dt = a->dtype, .ndim = a->ndim, .size = a->size};
  memcpy(s.shape, a->shape, sizeof s.shape);
  view v;
  if (view_plan(&s, q.relayout, q.layout_from, q.layout_to, q.limit_rows, &v, &e)) {
    free(npy);
    src_close(&s);
    http_reply_error(r, &e);
    return;
  }
  say_total_rows(r, &v);
  int whole = q.fmt == FMT_NPY && view_is_whole(&s, &v);
  uint64_t off = 0, n = 0;
  int part = range_plan(r, whole, len, &off, &n);
  if (part < 0) {
    free(npy);
    src_close(&s);
    return;
  }
  if (whole) {
    src_close(&s);
    if (off) memmove(npy, npy + off, (size_t)n);
    http_reply_buffer(r, part ? 206 : 200, "application/x-npy", npy, (size_t)n);
    return;
  }
  free(npy); /* small (a result kept in its job's row): a is its copy */
  reply_stream(r, ctx, &s, &v, q.fmt);
}
