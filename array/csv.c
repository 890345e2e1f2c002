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
 * The push reader (csv_push, below) reads the same language as the body
 * arrives, with the same values and errors; it is the upload path, and
 * csv_parse its reference in tests and the differential fuzzer.
 *
 * Writing: %.17g (float64) / %.9g (float32), so that values read back
 * exactly; nan and inf are written as nan, inf, -inf.
 *
 * Ownership: *out is the caller's. No shared state; any thread.
 */
#include "array/tarray.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "util/vec.h"

#define CSV_CELL_MAX 256 /* longest number text accepted in one cell */

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

static int too_many(terr *e, int64_t row, int64_t col, size_t at,
                    int64_t max_elems) {
  return terr_set(e, T_ETOOLARGE, "body", (int64_t)at,
                  "row %lld, column %lld: more than %lld values",
                  (long long)row, (long long)col, (long long)max_elems);
}

static int push(csv_state *st, double v, int64_t row, int64_t col,
                size_t at) {
  if (st->nvals == st->cap) {
    if ((int64_t)st->nvals >= st->max_elems)
      return too_many(st->e, row, col, at, st->max_elems);
    if (tvec_grow(&st->vals, &st->cap, sizeof *st->vals, st->nvals + 1,
                  (size_t)st->max_elems))
      return terr_set(st->e, T_ENOMEM, "body", -1, "csv: out of memory");
  }
  st->vals[st->nvals++] = v;
  return 0;
}

/* Parse the trimmed cell s[0..n) at byte offset `at`. */
static int cell_value(const char *s, size_t n, int64_t row, int64_t col,
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
  int kind = n < CSV_CELL_MAX ? num_syntax(s, n) : 0;
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
        if (num_syntax(a, (size_t)(b - a))) numeric = 1;
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
        if ((rc = cell_value(buf + a, b - a, line_no, col, a,
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

/* ---- push reader ---------------------------------------------------------
 * The same language read as the body arrives, in pieces split anywhere
 * (csv_push_*; the service's upload path). It keeps no line, only the
 * cell being read (its trimmed text, at most CELL_KEEP bytes: a longer
 * cell cannot be a number, and the first 40 bytes the error shows are
 * kept), the values not yet written (PUSH_OUT doubles) and what one-shot
 * csv_parse learns by looking ahead:
 *  - Whitespace is held back as a summary (the blanks before its first
 *    line end, where its first two line ends and the line after them
 *    start) until a byte that is not whitespace says what it was: blanks
 *    inside a cell, the end of the line, or a blank / empty line (an
 *    error only when something follows it); at the end of the body it
 *    was the trailing blank lines csv_parse drops (`stop`). The one
 *    place this shows: an empty last cell of the last line is reported
 *    at its first byte (csv_parse's `stop`), elsewhere at its line's end.
 *  - Line 1 may be a header (no cell a number, one not empty): its cells
 *    are classified with num_syntax as they arrive (ndfa: the same
 *    grammar, byte by byte, for cells longer than CELL_KEEP), its values
 *    written speculatively and its first error held until the line ends.
 *    A header drops the error and the values (out.restart: only cells
 *    such as '" 1"', a number once trimmed inside its quotes, which the
 *    header test does not trim, give values on a header line).
 * Inside a cell, a run of more than RUN_KEEP blanks is kept as its first
 * RUN_KEEP: such a cell is not a number either way (blanks inside a number
 * are refused, blanks next to its quotes are trimmed), and the message
 * shows the same 40 bytes. So every body gives the value or the error
 * (code, field, position, message) csv_parse gives, however it is split;
 * tests/unit/test_csv_push.c and tests/fuzz/fuzz_csv_push.c hold it to
 * that. */
#define PUSH_OUT 8192 /* doubles written at a time: 64 KiB */
#define CELL_KEEP 512 /* > CSV_CELL_MAX + 2 + 2 * RUN_KEEP */
#define RUN_KEEP 64   /* >= 41: the message shows 40 bytes */

/* num_syntax one byte at a time (for line 1's header test). */
enum { ND_START, ND_SIGN, ND_INT, ND_DOT0, ND_FRAC, ND_E, ND_ESIGN, ND_EXP,
       ND_WORD, ND_DEAD };
typedef struct ndfa {
  unsigned char st, nw;
  char w[8];
} ndfa;

static void nd_step(ndfa *d, char c) {
  int dig = c >= '0' && c <= '9';
  switch (d->st) {
    case ND_START:
      if (c == '+' || c == '-') {
        d->st = ND_SIGN;
        return;
      }
      /* fall through */
    case ND_SIGN:
      if (dig) d->st = ND_INT;
      else if (c == '.') d->st = ND_DOT0;
      else {
        d->st = ND_WORD;
        d->w[0] = (char)(c | 32);
        d->nw = 1;
      }
      return;
    case ND_INT:
      if (dig) return;
      if (c == '.') d->st = ND_FRAC;
      else if (c == 'e' || c == 'E') d->st = ND_E;
      else break;
      return;
    case ND_DOT0:
      if (dig) {
        d->st = ND_FRAC;
        return;
      }
      break;
    case ND_FRAC:
      if (dig) return;
      if (c == 'e' || c == 'E') {
        d->st = ND_E;
        return;
      }
      break;
    case ND_E:
      if (c == '+' || c == '-') {
        d->st = ND_ESIGN;
        return;
      }
      /* fall through */
    case ND_ESIGN:
      if (dig) {
        d->st = ND_EXP;
        return;
      }
      break;
    case ND_EXP:
      if (dig) return;
      break;
    case ND_WORD:
      if (d->nw < sizeof d->w) {
        d->w[d->nw++] = (char)(c | 32);
        return;
      }
      break;
    default:
      break;
  }
  d->st = ND_DEAD;
}

static int nd_accept(const ndfa *d) {
  if (d->st == ND_INT || d->st == ND_FRAC || d->st == ND_EXP) return 1;
  return d->st == ND_WORD &&
         (word_eq(d->w, d->nw, "nan") || word_eq(d->w, d->nw, "inf") ||
          word_eq(d->w, d->nw, "infinity"));
}

struct csv_push {
  int64_t max_elems;
  int allow_nonfinite;
  tvals_out out;
  int failed;          /* the error returned; every later call returns it */
  uint64_t off;        /* body offset of the next byte */
  unsigned char bom;   /* bytes of a BOM matched; 4: decided */
  uint64_t start;      /* where line 1 may begin (after a BOM) */
  /* the open line (line 1 begins with the first byte that is not
   * whitespace; a line ends when one after its end arrives) */
  int inq;
  int64_t line_no, col, rows, cols, header_cells;
  uint64_t line_pos;
  /* line 1 */
  int l1_numeric, l1_text, l1_failed;
  terr l1_err;
  /* the open cell: trimmed text; over: longer than CELL_KEEP (the last
   * byte then sits at cell[CELL_KEEP - 1]) */
  uint64_t c0, a;
  int has, over;
  size_t ncell;
  ndfa raw, unq, unq_prev; /* line 1: the cell, and inside its quotes */
  /* whitespace held back */
  int w_any, w_nterm, prev_cr;
  uint64_t w_term1, w_line2, w_term2, w_last;
  size_t nwb;
  char wb[RUN_KEEP];
  /* values */
  int64_t nvals;
  size_t nout;
  int flushed; /* values already handed to out.write */
  char cell[CELL_KEEP];
  double vout[PUSH_OUT];
};

int csv_push_new(int64_t max_elems, int allow_nonfinite, const tvals_out *out,
                 csv_push **p, terr *e) {
  csv_push *c = calloc(1, sizeof *c);
  *p = c;
  if (!c) return terr_set(e, T_ENOMEM, "", -1, "csv: out of memory");
  c->max_elems = max_elems;
  c->allow_nonfinite = allow_nonfinite;
  c->out = *out;
  c->cols = c->header_cells = -1;
  return T_OK;
}

void csv_push_free(csv_push *p) { free(p); }

static int out_flush(csv_push *p, terr *e) {
  if (!p->nout) return T_OK;
  int rc = p->out.write(p->out.ud, p->vout, p->nout * sizeof(double), e);
  p->nout = 0;
  p->flushed = 1;
  return rc;
}

static void cell_reset(csv_push *p, uint64_t c0) {
  p->c0 = c0;
  p->has = p->over = 0;
  p->ncell = 0;
  memset(&p->raw, 0, sizeof p->raw);
  memset(&p->unq, 0, sizeof p->unq);
  memset(&p->unq_prev, 0, sizeof p->unq_prev);
}

static void cell_put(csv_push *p, char c) {
  if (p->ncell < CELL_KEEP) p->cell[p->ncell++] = c;
  else {
    p->over = 1;
    p->cell[CELL_KEEP - 1] = c;
  }
  if (p->line_no == 1) { /* the header test's two readings */
    int first = !p->has;
    if (!first && p->cell[0] == '"') {
      p->unq_prev = p->unq;
      nd_step(&p->unq, c);
    }
    nd_step(&p->raw, c);
  }
  p->has = 1;
}

static void line_start(csv_push *p, uint64_t pos) {
  p->inq = 0;
  p->line_no++;
  p->line_pos = pos;
  p->col = 0;
  cell_reset(p, pos);
}

/* The cell ends at `end` (a ',' or its line's end; eof: the body's). */
static int cell_end(csv_push *p, uint64_t end, int eof, terr *e) {
  p->col++;
  uint64_t at = p->has ? p->a : eof ? p->c0 : end;
  size_t n = p->over ? CELL_KEEP : p->ncell;
  const char *s = p->cell;
  if (p->line_no == 1) { /* line_is_header's test of this cell */
    int quoted = p->ncell >= 2 && s[0] == '"' && s[n - 1] == '"';
    if (quoted ? p->ncell > 2 : p->ncell > 0) {
      if (nd_accept(quoted ? &p->unq_prev : &p->raw)) p->l1_numeric = 1;
      else p->l1_text = 1;
    }
    if (p->l1_failed) return T_OK;
  }
  double v;
  int rc = cell_value(s, n, p->line_no, p->col, (size_t)at, p->allow_nonfinite,
                      &v, e);
  if (!rc && p->nvals >= p->max_elems)
    rc = too_many(e, p->line_no, p->col, (size_t)at, p->max_elems);
  if (!rc) {
    p->vout[p->nout++] = v;
    p->nvals++;
    if (p->nout == PUSH_OUT) rc = out_flush(p, e);
    if (rc) return rc;
  }
  if (rc && p->line_no == 1) { /* held until line 1 is known */
    p->l1_failed = 1;
    p->l1_err = *e;
    return T_OK;
  }
  return rc;
}

/* The open line ends at lend (eof: at the body's end). */
static int line_end(csv_push *p, uint64_t lend, int eof, terr *e) {
  int rc = cell_end(p, lend, eof, e);
  if (rc) return rc;
  if (p->line_no == 1) {
    if (p->l1_text && !p->l1_numeric) { /* a header */
      if (eof)
        return terr_set(e, T_EINVAL, "body", (int64_t)p->line_pos,
                        "row 1: a header line and no data rows");
      p->header_cells = p->col;
      p->nvals = 0;
      p->nout = 0;
      if (p->flushed && p->out.restart) p->out.restart(p->out.ud);
      p->flushed = 0;
      return T_OK;
    }
    if (p->l1_failed) {
      *e = p->l1_err;
      return e->code;
    }
  }
  if (p->cols < 0) {
    p->cols = p->col;
    if (p->header_cells >= 0 && p->header_cells != p->cols)
      return terr_set(e, T_EINVAL, "body", (int64_t)p->line_pos,
                      "row %lld: %lld columns, but the header has %lld",
                      (long long)p->line_no, (long long)p->col,
                      (long long)p->header_cells);
  } else if (p->col != p->cols) {
    return terr_set(e, T_EINVAL, "body", (int64_t)p->line_pos,
                    "row %lld: %lld columns, expected %lld",
                    (long long)p->line_no, (long long)p->col,
                    (long long)p->cols);
  }
  p->rows++;
  return T_OK;
}

/* A line of blanks only, [start, lend), with something after it. */
static int blank_line(int64_t row, uint64_t start, uint64_t lend, terr *e) {
  if (lend == start)
    return terr_set(e, T_EINVAL, "body", (int64_t)start,
                    "row %lld: empty line", (long long)row);
  return terr_set(e, T_EINVAL, "body", (int64_t)lend,
                  "row %lld, column 1: empty cell", (long long)row);
}

/* Byte c (not whitespace) arrives: say what the whitespace before it
 * was. */
static int ws_resolve(csv_push *p, char c, terr *e) {
  int rc = T_OK;
  if (p->line_no == 0) { /* line 1 not begun */
    if (p->w_nterm) return blank_line(1, p->start, p->w_term1, e);
    line_start(p, p->start);
  } else if (p->w_any && p->w_nterm == 0) { /* blanks inside the line */
    if (p->has && !(c == ',' && !p->inq))
      for (size_t i = 0; i < p->nwb; i++) cell_put(p, p->wb[i]);
  } else if (p->w_any) {
    if ((rc = line_end(p, p->w_term1, 0, e))) return rc;
    if (p->w_nterm >= 2)
      return blank_line(p->line_no + 1, p->w_line2, p->w_term2, e);
    line_start(p, p->w_last);
  }
  p->w_any = p->w_nterm = p->prev_cr = 0;
  p->nwb = 0;
  return T_OK;
}

static int feed_byte(csv_push *p, char c, terr *e) {
  uint64_t at = p->off++;
  if (c == ' ' || c == '\t') {
    p->w_any = 1;
    p->prev_cr = 0;
    if (p->w_nterm == 0 && p->nwb < RUN_KEEP) p->wb[p->nwb++] = c;
    return T_OK;
  }
  if (c == '\n' || c == '\r') {
    p->w_any = 1;
    if (c == '\n' && p->prev_cr) { /* the end of "\r\n" */
      p->prev_cr = 0;
      if (p->w_nterm == 1) p->w_line2 = at + 1;
      p->w_last = at + 1;
      return T_OK;
    }
    p->prev_cr = c == '\r';
    if (p->w_nterm == 0) {
      p->w_term1 = at;
      p->w_line2 = at + 1;
    } else if (p->w_nterm == 1) {
      p->w_term2 = at;
    }
    if (p->w_nterm < 2) p->w_nterm++;
    p->w_last = at + 1;
    return T_OK;
  }
  int rc = (p->w_any || p->line_no == 0) ? ws_resolve(p, c, e) : T_OK;
  if (rc) return rc;
  if (c == ',' && !p->inq) {
    if ((rc = cell_end(p, at, 0, e))) return rc;
    cell_reset(p, at + 1);
    return T_OK;
  }
  if (c == '"') p->inq = !p->inq;
  if (!p->has) p->a = at;
  cell_put(p, c);
  return T_OK;
}

/* A byte that only extends a cell's text. */
static int plain(char c) {
  return c != ',' && c != '"' && c != ' ' && c != '\t' && c != '\n' &&
         c != '\r';
}

static int feed_bytes(csv_push *p, const char *s, size_t n, terr *e) {
  size_t i = 0;
  while (i < n) {
    /* The common case in bulk: more text of a cell already begun, past
     * line 1, no whitespace held (what feed_byte does for such a byte). */
    if (p->has && !p->w_any && p->line_no > 1) {
      size_t j = i;
      while (j < n && p->ncell < CELL_KEEP && plain(s[j]))
        p->cell[p->ncell++] = s[j++];
      p->off += j - i;
      i = j;
      if (i == n) break;
    }
    int rc = feed_byte(p, s[i++], e);
    if (rc) return rc;
  }
  return T_OK;
}

static const char BOM[3] = {'\xEF', '\xBB', '\xBF'};

int csv_push_feed(csv_push *p, const char *s, size_t n, terr *e) {
  if (p->failed) return p->failed;
  while (p->bom < 3 && n) { /* a BOM is skipped; a part of one is data */
    if (*s != BOM[p->bom]) {
      unsigned char k = p->bom;
      p->bom = 4;
      int rc = feed_bytes(p, BOM, k, e);
      if (rc) return p->failed = rc;
      break;
    }
    s++;
    n--;
    if (++p->bom == 3) p->off = p->start = 3;
  }
  int rc = feed_bytes(p, s, n, e);
  if (rc) p->failed = rc;
  return rc;
}

int csv_push_end(csv_push *p, int *ndim, int64_t *shape, terr *e) {
  if (p->failed) return p->failed;
  int rc = T_OK;
  if (p->bom < 3) {
    unsigned char k = p->bom;
    p->bom = 4;
    rc = feed_bytes(p, BOM, k, e);
  }
  if (!rc && p->line_no == 0)
    rc = terr_set(e, T_EINVAL, "body", 0, "no values (an empty CSV)");
  if (!rc) rc = line_end(p, p->off, 1, e);
  if (!rc) rc = out_flush(p, e);
  if (rc) return p->failed = rc;
  if (p->cols == 1 || p->rows == 1) {
    *ndim = 1;
    shape[0] = p->nvals;
  } else {
    *ndim = 2;
    shape[0] = p->rows;
    shape[1] = p->cols;
  }
  return T_OK;
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
