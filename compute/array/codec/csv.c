/* csv.c — numbers-only CSV in and out.
 *
 * Reading: the buffer is walked once, line by line, cell by cell (','),
 * without copying lines. A UTF-8 byte-order mark at the start (Excel's
 * "CSV UTF-8") is skipped. Lines end at "\n", "\r\n" or a lone "\r" (old
 * Mac and some exporters), so no ending hides rows. Each cell is trimmed of
 * spaces and tabs; a cell wrapped in double quotes ("1.5", as Python's csv
 * module writes with QUOTE_ALL) is unwrapped; what remains must be a plain
 * decimal number (sign, digits, '.', exponent) or, when allowed, nan / inf
 * / infinity; hex floats, other separators (';', tabs inside a cell) and
 * anything else are refused with "row R, column C" (1-based, counted in the
 * file, the header line included) and position = the cell's byte offset.
 *
 * The first line is a header only when none of its cells is a number (at
 * least one is non-empty) and more lines follow: "x,y" over numbers is a
 * header, "1,2" is data, and a single line that is not numbers ("1;2", "0x10",
 * ".") is an error naming it, never an empty array. A header's cell count
 * (quotes respected) must match the data. Blank lines at the end are
 * ignored; elsewhere they are an error. So a non-empty body either gives
 * every value it holds or a 400 naming the row: never fewer values, never
 * shape [0]. Every error's field is "body".
 *
 * Values go to a growing buffer whose size never passes max_elems
 * (T_ETOOLARGE beyond), then into a float64 tarray: one column or one row
 * gives 1-D, else 2-D [rows, cols].
 *
 * The push reader (csv_push, csvpush.c) reads the same language as the
 * body arrives, with the same values and errors, through the cell rules
 * here (csv_int.h); it is the upload path, and csv_parse its reference in
 * tests and the differential fuzzer.
 *
 * Writing: tnum_fmt (compute/array/tarray.h): the shortest text that reads back
 * exactly (0.1, at most %.17g / float32 %.9g), int64 results as integers; nan and inf
 * are written as nan, inf, -inf.
 *
 * Ownership: *out is the caller's. No shared state; any thread.
 */
#include "compute/array/tarray.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/codec/csv_int.h"
#include "util/util.h"
#include "util/vec.h"


typedef struct csv_state {
  const char *buf;
  size_t len;
  int64_t max_elems;
  int allow_nonfinite;
  double *vals;
  size_t nvals, cap;
  terr *e;
} csv_state;

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Case-insensitive equality of s[0..n) and a lowercase word. */
int csv_word_eq(const char *s, size_t n, const char *w) {
  if (strlen(w) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((s[i] | 32) != w[i]) return 0;
  return 1;
}

/* 1 when s[0..n) is a decimal number: [+-]digits[.digits][(e|E)[+-]digits]
 * with at least one digit in the mantissa; 2 when it is nan/inf/infinity. */
int csv_num_syntax(const char *s, size_t n) {
  size_t i = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) i++;
  if (csv_word_eq(s + i, n - i, "nan") || csv_word_eq(s + i, n - i, "inf") ||
      csv_word_eq(s + i, n - i, "infinity"))
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

/* csv_int.h */
int csv_too_many(terr *e, int64_t row, int64_t col, size_t at,
                 int64_t max_elems) {
  return terr_set(e, T_ETOOLARGE, "body", (int64_t)at,
                  "row %lld, column %lld: more than %lld values",
                  (long long)row, (long long)col, (long long)max_elems);
}

static int push(csv_state *st, double v, int64_t row, int64_t col,
                size_t at) {
  if (st->nvals == st->cap) {
    if ((int64_t)st->nvals >= st->max_elems)
      return csv_too_many(st->e, row, col, at, st->max_elems);
    if (tvec_grow(&st->vals, &st->cap, sizeof *st->vals, st->nvals + 1,
                  (size_t)st->max_elems))
      return terr_set(st->e, T_ENOMEM, "body", -1, "csv: out of memory");
  }
  st->vals[st->nvals++] = v;
  return 0;
}

/* Parse the trimmed cell s[0..n) at byte offset `at` (csv_int.h). */
int csv_cell_value(const char *s, size_t n, int64_t row, int64_t col,
                   size_t at, int allow_nonfinite, double *v, terr *e) {
  if (n == 0)
    return terr_set(e, T_EINVAL, "body", (int64_t)at,
                    "row %lld, column %lld: empty cell", (long long)row,
                    (long long)col);
  if (n >= 2 && s[0] == '"' && s[n - 1] == '"') { /* "1.5": unwrap */
    s++;
    n -= 2;
    while (n && is_blank(*s)) s++, n--;
    while (n && is_blank(s[n - 1])) n--;
    if (n == 0)
      return terr_set(e, T_EINVAL, "body", (int64_t)at,
                      "row %lld, column %lld: empty cell", (long long)row,
                      (long long)col);
  }
  int kind = n < CSV_CELL_MAX ? csv_num_syntax(s, n) : 0;
  if (!kind)
    return terr_set(e, T_EINVAL, "body", (int64_t)at,
                    "row %lld, column %lld: '%.*s' is not a number",
                    (long long)row, (long long)col, (int)(n > 40 ? 40 : n), s);
  if (kind == 2 && !allow_nonfinite)
    return terr_set(e, T_EINVAL, "body", (int64_t)at,
                    "row %lld, column %lld: NaN/Inf not allowed",
                    (long long)row, (long long)col);
  char tmp[CSV_CELL_MAX];
  memcpy(tmp, s, n);
  tmp[n] = 0;
  if (t_parse_f64(tmp, v) != 0)
    return terr_set(e, T_EINVAL, "body", (int64_t)at,
                    "row %lld, column %lld: '%s' is out of range",
                    (long long)row, (long long)col, tmp);
  return 0;
}

/* Where the line starting at pos ends (*lend, its content's end) and the
 * next begins (*next): "\n", "\r\n" and a lone "\r" all end a line. */
static void line_bounds(const char *buf, size_t pos, size_t stop, size_t *lend,
                        size_t *next) {
  size_t q = pos;
  while (q < stop && buf[q] != '\n' && buf[q] != '\r') q++;
  *lend = q;
  if (q >= stop) *next = stop;
  else if (buf[q] == '\r' && q + 1 < stop && buf[q + 1] == '\n') *next = q + 2;
  else *next = q + 1;
}

/* Is [p, end) a header line: no cell a number (quotes unwrapped), at least
 * one non-empty? Counts cells (respecting double quotes) into *ncells. */
static int line_is_header(const char *p, const char *end, int64_t *ncells) {
  int numeric = 0, text = 0, inq = 0;
  int64_t cells = 0;
  const char *c0 = p;
  for (const char *q = p;; q++) {
    if (q < end && *q == '"') inq = !inq;
    if (q == end || (*q == ',' && !inq)) {
      const char *a = c0, *b = q;
      while (a < b && is_blank(*a)) a++;
      while (b > a && is_blank(b[-1])) b--;
      if (b - a >= 2 && *a == '"' && b[-1] == '"') a++, b--;
      if (b > a) {
        if (csv_num_syntax(a, (size_t)(b - a))) numeric = 1;
        else text = 1;
      }
      cells++;
      c0 = q + 1;
      if (q == end) break;
    }
  }
  *ncells = cells;
  return text && !numeric;
}

int csv_parse(const char *buf, size_t len, int64_t max_elems,
              int allow_nonfinite, tarray **out, terr *e) {
  *out = NULL;
  csv_state st = {.buf = buf, .len = len, .max_elems = max_elems,
                  .allow_nonfinite = allow_nonfinite, .e = e};
  int rc = 0;
  int64_t rows = 0, cols = -1, header_cells = -1, line_no = 0;
  size_t pos = 0;
  if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) pos = 3; /* BOM */
  /* Blank lines at the very end are dropped: find where content ends. */
  size_t stop = len;
  while (stop > pos && (buf[stop - 1] == '\n' || buf[stop - 1] == '\r' ||
                        is_blank(buf[stop - 1])))
    stop--;
  if (stop == pos) {
    rc = terr_set(e, T_EINVAL, "body", 0, "no values (an empty CSV)");
    goto fail;
  }
  while (pos < stop) {
    size_t lend, next;
    line_bounds(buf, pos, stop, &lend, &next);
    line_no++;
    if (line_no == 1 && line_is_header(buf + pos, buf + lend, &header_cells)) {
      if (next >= stop) {
        rc = terr_set(e, T_EINVAL, "body", (int64_t)pos,
                      "row 1: a header line and no data rows");
        goto fail;
      }
      pos = next;
      continue;
    }
    int64_t col = 0;
    size_t c0 = pos;
    int inq = 0;
    if (lend == pos) {
      rc = terr_set(e, T_EINVAL, "body", (int64_t)pos, "row %lld: empty line",
                    (long long)line_no);
      goto fail;
    }
    for (size_t q = pos;; q++) {
      if (q < lend && buf[q] == '"') inq = !inq;
      if (q == lend || (buf[q] == ',' && !inq)) {
        size_t a = c0, b = q;
        while (a < b && is_blank(buf[a])) a++;
        while (b > a && is_blank(buf[b - 1])) b--;
        double v;
        col++;
        if ((rc = csv_cell_value(buf + a, b - a, line_no, col, a,
                              allow_nonfinite, &v, e)))
          goto fail;
        if ((rc = push(&st, v, line_no, col, a))) goto fail;
        c0 = q + 1;
        if (q == lend) break;
      }
    }
    if (cols < 0) {
      cols = col;
      if (header_cells >= 0 && header_cells != cols) {
        rc = terr_set(e, T_EINVAL, "body", (int64_t)pos,
                      "row %lld: %lld columns, but the header has %lld",
                      (long long)line_no, (long long)col,
                      (long long)header_cells);
        goto fail;
      }
    } else if (col != cols) {
      rc = terr_set(e, T_EINVAL, "body", (int64_t)pos,
                    "row %lld: %lld columns, expected %lld", (long long)line_no,
                    (long long)col, (long long)cols);
      goto fail;
    }
    rows++;
    pos = next;
  }
  int64_t shape[2];
  int ndim;
  if (cols == 1 || rows == 1) {
    ndim = 1;
    shape[0] = st.nvals;
  } else {
    ndim = 2;
    shape[0] = rows;
    shape[1] = cols;
  }
  tarray *a = tarray_new(T_F64, ndim, shape);
  if (!a) {
    rc = terr_set(e, T_ENOMEM, "body", -1, "csv: out of memory");
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

static void ob_num(obuf *o, const tarray *a, int64_t i, char sep) {
  if (sizeof o->b - o->n < TNUM_FMT_MAX + 1) ob_flush(o);
  o->n += tnum_fmt(o->b + o->n, TNUM_FMT_MAX, a->dtype,
                   (const char *)a->data + (size_t)i * tdtype_size(a->dtype), 0);
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
  int64_t cols = a->ndim == 2 ? a->shape[1] : 1;
  int64_t rows = cols ? a->shape[0] : 0; /* [r, 0] writes nothing */
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++)
      ob_num(o, a, r * cols + c, c + 1 == cols ? '\n' : ',');
  }
  ob_flush(o);
  int err = o->err || ferror(f);
  free(o);
  if (err)
    return terr_set(e, T_EIO, "", -1, "csv: write failed: %s",
                    strerror(errno));
  return 0;
}
