/* csvpush.c — the CSV reader fed the body in pieces (tarray.h, csv_push).
 *
 * csv.c's language (its opening says it) read as the body arrives, in
 * pieces split anywhere (the service's upload path). It keeps no line,
 * only the
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
 *    are classified with csv_num_syntax as they arrive (ndfa: the same
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
 * that.
 *
 * The cells are read with csv.c's own rules (csv_int.h). Ownership: a
 * csv_push is its caller's (csv_push_free); one thread at a time.
 */
#include "compute/array/tarray.h"

#include <stdlib.h>
#include <string.h>

#include "compute/array/codec/csv_int.h"

#define PUSH_OUT 8192 /* doubles written at a time: 64 KiB */
#define CELL_KEEP 512 /* > CSV_CELL_MAX + 2 + 2 * RUN_KEEP */
#define RUN_KEEP 64   /* >= 41: the message shows 40 bytes */

/* csv_num_syntax one byte at a time (for line 1's header test). */
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
         (csv_word_eq(d->w, d->nw, "nan") || csv_word_eq(d->w, d->nw, "inf") ||
          csv_word_eq(d->w, d->nw, "infinity"));
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
  int rc = csv_cell_value(s, n, p->line_no, p->col, (size_t)at,
                          p->allow_nonfinite, &v, e);
  if (!rc && p->nvals >= p->max_elems)
    rc = csv_too_many(e, p->line_no, p->col, (size_t)at, p->max_elems);
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
