/* results.c — arrays out of the service: job results and uploaded arrays'
 * data, in the format the client asks for.
 *
 * Negotiation: ?format=json|npy|csv wins, else the Accept header
 * (application/x-npy, application/octet-stream -> npy; text/csv -> csv;
 * application/json, any type or no header -> json); anything else is 406.
 * An unchanged .npy is sent straight from its file (sendfile through MHD),
 * or for a small job result kept in its store row, from those bytes.
 * JSON and CSV are produced row by row while the response is sent, so a big
 * result never exists twice in memory; JSON is refused (406) above
 * ctx->max_json_result estimated bytes, pointing at npy.
 * Transformations before sending: ?limit_rows=N (the first N rows, for
 * previews) and, for geodesic results, square <-> condensed layouts.
 *
 * Threads: runs on the HTTP worker; the stream callbacks run on MHD's thread
 * for the connection. Ownership: the stream state owns its tarray.
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
#include "util/util.h"

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

/* ---- transformations ------------------------------------------------- */

/* Condensed (n(n-1)/2, SciPy pdist order) -> square n x n. */
static tarray *condensed_to_square(const tarray *c, terr *e) {
  int64_t m = c->size;
  int64_t n = (int64_t)llround((1.0 + sqrt(1.0 + 8.0 * (double)m)) / 2.0);
  if (c->ndim != 1 || n * (n - 1) / 2 != m) {
    terr_set(e, T_EINVAL, "layout", -1, "result is not a condensed matrix");
    return NULL;
  }
  int64_t shape[2] = {n, n};
  tarray *s = tarray_new(c->dtype, 2, shape);
  if (!s) {
    terr_set(e, T_ENOMEM, "", -1, "out of memory");
    return NULL;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    tarray_set(s, i * n + i, 0.0);
    for (int64_t j = i + 1; j < n; j++, k++) {
      double v = tarray_get(c, k);
      tarray_set(s, i * n + j, v);
      tarray_set(s, j * n + i, v);
    }
  }
  return s;
}

/* Square n x n -> condensed (upper triangle, row by row). */
static tarray *square_to_condensed(const tarray *s, terr *e) {
  if (s->ndim != 2 || s->shape[0] != s->shape[1]) {
    terr_set(e, T_EINVAL, "layout", -1,
             "only a square matrix has a condensed layout");
    return NULL;
  }
  int64_t n = s->shape[0];
  int64_t shape[1] = {n * (n - 1) / 2};
  tarray *c = tarray_new(s->dtype, 1, shape);
  if (!c) {
    terr_set(e, T_ENOMEM, "", -1, "out of memory");
    return NULL;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) tarray_set(c, k++, tarray_get(s, i * n + j));
  return c;
}

/* First `rows` rows (along axis 0) as a new array. */
static tarray *first_rows(const tarray *a, int64_t rows) {
  if (a->ndim == 0 || rows >= a->shape[0]) return tarray_clone(a);
  int64_t shape[T_MAXDIM];
  memcpy(shape, a->shape, sizeof shape);
  shape[0] = rows;
  tarray *b = tarray_new(a->dtype, a->ndim, shape);
  if (b) memcpy(b->data, a->data, (size_t)b->size * tdtype_size(a->dtype));
  return b;
}

/* ---- streaming JSON and CSV ------------------------------------------ */

typedef struct stream_state {
  tarray *a;
  int fmt;
  int64_t next;      /* next element to format */
  int64_t row_len;   /* elements per output row (CSV / inner JSON arrays) */
  int stage;         /* JSON: 0 header, 1 data, 2 trailer, 3 done */
  char pend[512];    /* formatted bytes not yet handed out */
  size_t pend_len, pend_off;
} stream_state;

static void stream_done(void *arg) {
  stream_state *st = arg;
  tarray_free(st->a);
  free(st);
}

static int fmt_num(char *buf, size_t len, double v, tdtype dt, int json) {
  if (isnan(v)) return snprintf(buf, len, "%s", json ? "null" : "nan");
  if (isinf(v))
    return snprintf(buf, len, "%s", json ? "null" : (v > 0 ? "inf" : "-inf"));
  return snprintf(buf, len, dt == T_F32 ? "%.9g" : "%.17g", v);
}

/* Opening brackets before element i of a JSON array of shape a->shape. */
static size_t json_open(const tarray *a, int64_t i, char *out) {
  size_t n = 0;
  int64_t stride = 1;
  for (int d = a->ndim - 1; d >= 1; d--) {
    stride *= a->shape[d];
    if (i % stride == 0) n++;
  }
  memset(out, '[', n);
  return n;
}

static size_t json_close(const tarray *a, int64_t i, char *out) {
  /* Closing brackets after element i. */
  size_t n = 0;
  int64_t stride = 1;
  for (int d = a->ndim - 1; d >= 1; d--) {
    stride *= a->shape[d];
    if ((i + 1) % stride == 0) n++;
  }
  memset(out, ']', n);
  return n;
}

/* Format the next piece into st->pend. Returns 0 when nothing is left. */
static int stream_refill(stream_state *st) {
  tarray *a = st->a;
  char *p = st->pend;
  size_t cap = sizeof st->pend, n = 0;
  st->pend_off = 0;
  st->pend_len = 0; /* nothing pending until a piece is formatted */
  if (st->fmt == FMT_CSV) {
    if (st->next >= a->size) return 0;
    /* One element plus its separator. */
    n += (size_t)fmt_num(p, cap, tarray_get(a, st->next), a->dtype, 0);
    st->next++;
    p[n++] = (st->next % st->row_len == 0) ? '\n' : ',';
    st->pend_len = n;
    return 1;
  }
  switch (st->stage) {
    case 0: {
      char shape[256];
      tshape_str(a->ndim, a->shape, shape, sizeof shape);
      for (char *s = shape; *s; s++)
        if (*s == ' ') memmove(s, s + 1, strlen(s));
      n = (size_t)snprintf(p, cap, "{\"dtype\":\"%s\",\"shape\":%s,\"data\":%s",
                           tdtype_name(a->dtype), shape,
                           a->ndim == 0 ? "" : "[");
      st->stage = a->size == 0 ? 2 : 1;
      break;
    }
    case 1: {
      int64_t i = st->next;
      if (a->ndim > 0) n += json_open(a, i, p + n);
      n += (size_t)fmt_num(p + n, cap - n - 16, tarray_get(a, i), a->dtype, 1);
      if (a->ndim > 0) n += json_close(a, i, p + n);
      st->next++;
      if (st->next >= a->size) st->stage = 2;
      else p[n++] = ',';
      break;
    }
    case 2:
      n = (size_t)snprintf(p, cap, "%s}\n", a->ndim == 0 ? "" : "]");
      st->stage = 3;
      break;
    default:
      return 0;
  }
  st->pend_len = n;
  return 1;
}

static long stream_fill(void *arg, uint64_t pos, char *buf, size_t max) {
  stream_state *st = arg;
  size_t out = 0;
  while (out < max) {
    if (st->pend_off >= st->pend_len && !stream_refill(st)) break;
    size_t take = st->pend_len - st->pend_off;
    if (take > max - out) take = max - out;
    memcpy(buf + out, st->pend + st->pend_off, take);
    st->pend_off += take;
    out += take;
  }
  return (long)out;
}

static void reply_formatted(http_req *r, api_ctx *ctx, tarray *a, int fmt) {
  terr e;
  if (fmt == FMT_NPY) {
    char *buf;
    size_t len;
    if (npy_to_buffer(a, &buf, &len, &e)) {
      tarray_free(a);
      http_reply_error(r, &e);
      return;
    }
    tarray_free(a);
    http_reply_buffer(r, 200, "application/x-npy", buf, len);
    return;
  }
  if (fmt == FMT_CSV && a->ndim > 2) {
    int ndim = a->ndim;
    tarray_free(a);
    api_reply_terr(r, T_ENOTACCEPT, "format",
                   "CSV holds 1-D or 2-D arrays; this one has %d dimensions: "
                   "use npy or json", ndim);
    return;
  }
  if (fmt == FMT_JSON && (double)a->size * 24.0 > (double)ctx->max_json_result) {
    int64_t size = a->size;
    tarray_free(a);
    api_reply_terr(r, T_ENOTACCEPT, "format",
                   "result of %lld elements is too large for JSON: ask for "
                   "format=npy (or csv), or preview with limit_rows",
                   (long long)size);
    return;
  }
  stream_state *st = calloc(1, sizeof *st);
  if (!st) {
    tarray_free(a);
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  st->a = a;
  st->fmt = fmt;
  st->row_len = a->ndim == 2 ? a->shape[1] : 1;
  if (st->row_len <= 0) st->row_len = 1;
  http_reply_stream(r, 200,
                    fmt == FMT_CSV ? "text/csv; charset=utf-8"
                                   : "application/json; charset=utf-8",
                    stream_fill, stream_done, st);
}

/* The query of an array answer: format, limit_rows, layout. T_OK, or an
 * error in e. */
typedef struct array_query {
  int fmt;
  int64_t limit_rows; /* -1: all */
  int relayout;       /* layout_from -> layout_to */
  const char *layout_to;
} array_query;

static int parse_array_query(http_req *r, const char *layout_from,
                             const char *layout_to, array_query *q, terr *e) {
  q->fmt = FMT_JSON;
  q->limit_rows = -1;
  q->layout_to = layout_to;
  int rc = pick_format(r, &q->fmt, e);
  if (rc) return rc;
  const char *lr = http_query(r, "limit_rows");
  if (lr && (t_parse_i64(lr, &q->limit_rows) || q->limit_rows < 0))
    return terr_set(e, T_EINVAL, "limit_rows", -1,
                    "expected a non-negative integer");
  if (layout_to && strcmp(layout_to, "square") &&
      strcmp(layout_to, "condensed"))
    return terr_set(e, T_EINVAL, "layout", -1,
                    "'%s' is not one of square, condensed", layout_to);
  q->relayout =
      layout_from && layout_to && strcmp(layout_from, layout_to) != 0;
  return T_OK;
}

/* Transform a (taken) as asked and answer with it. */
static void reply_array(http_req *r, api_ctx *ctx, tarray *a,
                        const array_query *q) {
  terr e;
  terr_clear(&e);
  if (q->relayout) {
    tarray *b = strcmp(q->layout_to, "square") == 0
                    ? condensed_to_square(a, &e)
                    : square_to_condensed(a, &e);
    tarray_free(a);
    if (!b) {
      http_reply_error(r, &e);
      return;
    }
    a = b;
  }
  if (q->limit_rows >= 0) {
    tarray *b = first_rows(a, q->limit_rows);
    tarray_free(a);
    if (!b) {
      api_reply_terr(r, T_ENOMEM, "", "out of memory");
      return;
    }
    a = b;
  }
  reply_formatted(r, ctx, a, q->fmt);
}

void api_reply_array_file(http_req *r, api_ctx *ctx, const char *path,
                          const char *layout_from, const char *layout_to) {
  terr e;
  terr_clear(&e);
  array_query q;
  if (parse_array_query(r, layout_from, layout_to, &q, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (q.fmt == FMT_NPY && !q.relayout && q.limit_rows < 0) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
      if (fd >= 0) close(fd);
      api_reply_terr(r, T_EIO, "", "cannot read the array's file: %s",
                     strerror(errno));
      return;
    }
    http_reply_fd(r, 200, "application/x-npy", fd, 0, (uint64_t)sb.st_size);
    return;
  }
  tarray *a = NULL;
  if (tarray_map_npy(path, &a, &e)) {
    http_reply_error(r, &e);
    return;
  }
  reply_array(r, ctx, a, &q);
}

void api_reply_array_npy(http_req *r, api_ctx *ctx, char *npy, size_t len,
                         const char *layout_from, const char *layout_to) {
  terr e;
  terr_clear(&e);
  array_query q;
  if (parse_array_query(r, layout_from, layout_to, &q, &e)) {
    free(npy);
    http_reply_error(r, &e);
    return;
  }
  if (q.fmt == FMT_NPY && !q.relayout && q.limit_rows < 0) {
    http_reply_buffer(r, 200, "application/x-npy", npy, len);
    return;
  }
  tarray *a = NULL;
  int rc = npy_parse(npy, len, ctx->max_elems, &a, &e);
  free(npy);
  if (rc) {
    http_reply_error(r, &e);
    return;
  }
  reply_array(r, ctx, a, &q);
}
