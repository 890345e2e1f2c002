/* csv.c — numbers-only CSV in and out.
 *
 * Reading: the buffer is walked once, line by line ('\n' or "\r\n"), cell
 * by cell (','), without copying lines. Each cell is trimmed of spaces and
 * tabs and must be a plain decimal number (sign, digits, '.', exponent) or,
 * when allowed, nan / inf / infinity; hex floats, quotes and anything else
 * are refused with "row R, column C" (1-based, counted in the file, the
 * header line included) and position = the cell's byte offset. The first
 * line is a header when one of its cells is non-empty and not a number; its
 * cell count (quotes respected) must match the data. Blank lines at the end
 * are ignored; elsewhere they are an error. Values go to a growing buffer
 * whose size never passes max_elems (T_ETOOLARGE beyond), then into a
 * float64 tarray: one column or one row gives 1-D, else 2-D [rows, cols];
 * no data rows gives shape [0].
 *
 * Writing: %.17g (float64) / %.9g (float32), so that values read back
 * exactly; nan and inf are written as nan, inf, -inf.
 *
 * Ownership: *out is the caller's. No shared state; any thread.
 */
#include "compute/tarray.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define CSV_CELL_MAX 256 /* longest number text accepted in one cell */

typedef struct csv_state {
  const char *buf;
  size_t len;
  int64_t max_elems;
  int allow_nonfinite;
  double *vals;
  int64_t nvals, cap;
  terr *e;
} csv_state;

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Case-insensitive equality of s[0..n) and a lowercase word. */
static int word_eq(const char *s, size_t n, const char *w) {
  if (strlen(w) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((s[i] | 32) != w[i]) return 0;
  return 1;
}

/* 1 when s[0..n) is a decimal number: [+-]digits[.digits][(e|E)[+-]digits]
 * with at least one digit in the mantissa; 2 when it is nan/inf/infinity. */
static int num_syntax(const char *s, size_t n) {
  size_t i = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) i++;
  if (word_eq(s + i, n - i, "nan") || word_eq(s + i, n - i, "inf") ||
      word_eq(s + i, n - i, "infinity"))
    return 2;
  size_t digits = 0;
  while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  if (i < n && s[i] == '.') {
    i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
  }
  if (!digits) return 0;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    size_t ed = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, ed++;
    if (!ed) return 0;
  }
  return i == n;
}

static int push(csv_state *st, double v, int64_t row, int64_t col,
                size_t at) {
  if (st->nvals == st->cap) {
    if (st->nvals >= st->max_elems)
      return terr_set(st->e, T_ETOOLARGE, "", (int64_t)at,
                      "row %lld, column %lld: more than %lld values",
                      (long long)row, (long long)col,
                      (long long)st->max_elems);
    int64_t nc = st->cap ? st->cap * 2 : 1024;
    if (nc > st->max_elems) nc = st->max_elems;
    double *nv = realloc(st->vals, (size_t)nc * sizeof *nv);
    if (!nv) return terr_set(st->e, T_ENOMEM, "", -1, "csv: out of memory");
    st->vals = nv;
    st->cap = nc;
  }
  st->vals[st->nvals++] = v;
  return 0;
}

/* Parse the trimmed cell s[0..n) at byte offset `at`. */
static int cell_value(csv_state *st, const char *s, size_t n, int64_t row,
                      int64_t col, size_t at, double *v) {
  if (n == 0)
    return terr_set(st->e, T_EINVAL, "", (int64_t)at,
                    "row %lld, column %lld: empty cell", (long long)row,
                    (long long)col);
  if (s[0] == '"' || s[0] == '\'')
    return terr_set(st->e, T_EINVAL, "", (int64_t)at,
                    "row %lld, column %lld: quoted values are not supported "
                    "(numbers only)",
                    (long long)row, (long long)col);
  int kind = n < CSV_CELL_MAX ? num_syntax(s, n) : 0;
  if (!kind)
    return terr_set(st->e, T_EINVAL, "", (int64_t)at,
                    "row %lld, column %lld: '%.*s' is not a number",
                    (long long)row, (long long)col, (int)(n > 40 ? 40 : n), s);
  if (kind == 2 && !st->allow_nonfinite)
    return terr_set(st->e, T_EINVAL, "", (int64_t)at,
                    "row %lld, column %lld: NaN/Inf not allowed",
                    (long long)row, (long long)col);
  char tmp[CSV_CELL_MAX];
  memcpy(tmp, s, n);
  tmp[n] = 0;
  if (t_parse_f64(tmp, v) != 0)
    return terr_set(st->e, T_EINVAL, "", (int64_t)at,
                    "row %lld, column %lld: '%s' is out of range",
                    (long long)row, (long long)col, tmp);
  return 0;
}

/* Is [p, end) a line with some non-empty, non-number cell? Counts cells
 * (respecting double quotes) into *ncells. */
static int line_is_header(const char *p, const char *end, int64_t *ncells) {
  int header = 0, inq = 0;
  int64_t cells = 0;
  const char *c0 = p;
  for (const char *q = p;; q++) {
    if (q < end && *q == '"') inq = !inq;
    if (q == end || (*q == ',' && !inq)) {
      const char *a = c0, *b = q;
      while (a < b && is_blank(*a)) a++;
      while (b > a && is_blank(b[-1])) b--;
      if (b > a && !num_syntax(a, (size_t)(b - a))) header = 1;
      cells++;
      c0 = q + 1;
      if (q == end) break;
    }
  }
  *ncells = cells;
  return header;
}

int csv_parse(const char *buf, size_t len, int64_t max_elems,
              int allow_nonfinite, tarray **out, terr *e) {
  *out = NULL;
  csv_state st = {.buf = buf, .len = len, .max_elems = max_elems,
                  .allow_nonfinite = allow_nonfinite, .e = e};
  int rc = 0;
  int64_t rows = 0, cols = -1, header_cells = -1, line_no = 0;
  size_t pos = 0;
  /* Blank lines at the very end are dropped: find where content ends. */
  size_t stop = len;
  while (stop > 0 && (buf[stop - 1] == '\n' || buf[stop - 1] == '\r' ||
                      is_blank(buf[stop - 1])))
    stop--;
  while (pos < stop) {
    const char *nl = memchr(buf + pos, '\n', stop - pos);
    size_t lend = nl ? (size_t)(nl - buf) : stop;
    size_t next = nl ? lend + 1 : stop;
    if (lend > pos && buf[lend - 1] == '\r') lend--;
    line_no++;
    if (line_no == 1 &&
        line_is_header(buf + pos, buf + lend, &header_cells)) {
      pos = next;
      continue;
    }
    header_cells = line_no == 1 ? -1 : header_cells;
    int64_t col = 0;
    size_t c0 = pos;
    for (size_t q = pos;; q++) {
      if (q < lend && buf[q] == '\r') {
        rc = terr_set(e, T_EINVAL, "", (int64_t)q,
                      "row %lld, column %lld: stray carriage return",
                      (long long)line_no, (long long)(col + 1));
        goto fail;
      }
      if (q == lend || buf[q] == ',') {
        size_t a = c0, b = q;
        while (a < b && is_blank(buf[a])) a++;
        while (b > a && is_blank(buf[b - 1])) b--;
        double v;
        col++;
        if (lend == pos && q == lend) {
          rc = terr_set(e, T_EINVAL, "", (int64_t)pos, "row %lld: empty line",
                        (long long)line_no);
          goto fail;
        }
        if ((rc = cell_value(&st, buf + a, b - a, line_no, col, a, &v)))
          goto fail;
        if ((rc = push(&st, v, line_no, col, a))) goto fail;
        c0 = q + 1;
        if (q == lend) break;
      }
    }
    if (cols < 0) {
      cols = col;
      if (header_cells >= 0 && header_cells != cols) {
        rc = terr_set(e, T_EINVAL, "", (int64_t)pos,
                      "row %lld: %lld columns, but the header has %lld",
                      (long long)line_no, (long long)col,
                      (long long)header_cells);
        goto fail;
      }
    } else if (col != cols) {
      rc = terr_set(e, T_EINVAL, "", (int64_t)pos,
                    "row %lld: %lld columns, expected %lld", (long long)line_no,
                    (long long)col, (long long)cols);
      goto fail;
    }
    rows++;
    pos = next;
  }
  int64_t shape[2];
  int ndim;
  if (rows == 0) {
    ndim = 1;
    shape[0] = 0;
  } else if (cols == 1 || rows == 1) {
    ndim = 1;
    shape[0] = st.nvals;
  } else {
    ndim = 2;
    shape[0] = rows;
    shape[1] = cols;
  }
  tarray *a = tarray_new(T_F64, ndim, shape);
  if (!a) {
    rc = terr_set(e, T_ENOMEM, "", -1, "csv: out of memory");
    goto fail;
  }
  if (st.nvals) memcpy(a->data, st.vals, (size_t)st.nvals * sizeof(double));
  free(st.vals);
  *out = a;
  return 0;
fail:
  free(st.vals);
  return rc;
}

/* ---- writer -------------------------------------------------------------- */

/* Buffered output: one fwrite per 64 KiB instead of a locked call per
 * number. */
typedef struct obuf {
  FILE *f;
  size_t n;
  int err;
  char b[65536];
} obuf;

static void ob_flush(obuf *o) {
  if (o->n && fwrite(o->b, 1, o->n, o->f) != o->n) o->err = 1;
  o->n = 0;
}

static void ob_num(obuf *o, double v, int digits, char sep) {
  if (sizeof o->b - o->n < 40) ob_flush(o);
  int k = snprintf(o->b + o->n, 40, "%.*g", digits, v);
  o->n += (size_t)k;
  o->b[o->n++] = sep;
}

int csv_write(FILE *f, const tarray *a, terr *e) {
  if (a->ndim != 1 && a->ndim != 2)
    return terr_set(e, T_ENOTACCEPT, "", -1,
                    "csv holds 1-D or 2-D arrays; this one has %d dimensions",
                    a->ndim);
  obuf *o = malloc(sizeof *o);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "csv: out of memory");
  o->f = f;
  o->n = 0;
  o->err = 0;
  int digits = a->dtype == T_F32 ? 9 : 17;
  int64_t cols = a->ndim == 2 ? a->shape[1] : 1;
  int64_t rows = cols ? a->shape[0] : 0; /* [r, 0] writes nothing */
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++)
      ob_num(o, tarray_get(a, r * cols + c), digits,
             c + 1 == cols ? '\n' : ',');
  }
  ob_flush(o);
  int err = o->err || ferror(f);
  free(o);
  if (err)
    return terr_set(e, T_EIO, "", -1, "csv: write failed: %s",
                    strerror(errno));
  return 0;
}
