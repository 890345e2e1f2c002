/* jsonpush.c — a JSON array body read as it arrives (tarray.h, json_push).
 *
 * Why not Jansson: json_loadb needs the whole text in memory and builds a
 * tree of it (about 80 bytes a number), which is what an upload must not
 * hold; Jansson has no incremental parser. An upload body is a narrow
 * language — nested lists of numbers, or one number — so it is read here
 * by a small hand-written state machine, byte by byte, in pieces split
 * anywhere: strict JSON numbers ('-'? ('0' | [1-9][0-9]*) ('.' [0-9]+)?
 * ([eE] [+-]? [0-9]+)?), whitespace (space, tab, CR, LF), '[' ',' ']',
 * a depth cap of T_MAXDIM, and every list of one level the same length.
 * A number's text is collected (at most NUM_MAX bytes: a longer one is a
 * 400; Jansson has no cap) and converted exactly as Jansson converts it:
 * an integer token with strtoll then to double (so "-0" is +0.0, and an
 * integer beyond int64 is an error, "too big integer"), any other with
 * strtod (overflow is an error, "real number overflow"; underflow is not);
 * float32 rounds the double as tarray_set does. So the values are the
 * bytes jarray_parse would produce.
 *
 * The shape is learnt as jarray_parse learns it — from the first element
 * at each depth (the "first chain": the lists opened before the first
 * number or empty list) — with one difference of timing: a list's length
 * is known when it closes, so every later list of that depth is checked
 * against it as it is read (longer: at the element past the length;
 * shorter: at its ']'). Errors carry jarray_parse's words, field "body",
 * position the element index: "nested deeper than 8 levels", "expected a
 * number or an array, not a string", "more than N elements" (413),
 * "ragged array at [1]: a different length where an array of 3 was
 * expected", "ragged array at [1, 0]: a number where ...", "ragged array
 * at [0, 2]", "element [2] is null, not a number". Syntax errors are
 * "invalid JSON at line L column C: <what>", position the byte offset.
 *
 * Where it differs from jansson + jarray_parse, by choice: the first
 * problem in the text is the one reported and reading stops there (a
 * streamed upload is answered as soon as the body is wrong, as the .npy
 * path answers a bad header before the data). jarray_parse, run on a
 * parsed tree, reports any syntax error before any shape error, and among
 * shape errors the element-count cap first, then a list's length before
 * what the list holds. So a body with two problems may be answered with
 * the other one: still 400 (or 413), field "body". Syntax messages are
 * worded here (Jansson's own words and columns are not reproduced; line
 * and column are counted in bytes). A string or object element is refused
 * when its first byte arrives, before its end is read. A NUL byte is a
 * syntax error (RFC 8259); Jansson 2.14 takes one that follows a number
 * for the end of the text and accepts "0\0" and "[1\0]" as 0 and [1].
 *
 * Memory: the struct (64 KiB of values waiting to be written, one number's
 * text, T_MAXDIM + 1 list counters). Ownership: the caller's (free with
 * json_push_free). Threads: one at a time per reader.
 */
#include "compute/array/tarray.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define NUM_MAX 512   /* longest number text */
#define OUT_BYTES 65536

enum { ST_VALUE, ST_FIRST, ST_AFTER, ST_DONE, ST_NUM, ST_LIT };
/* number lexer states; N_ZERO, N_INT, N_FRAC and N_EXP may end a number */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { K_NUM, K_ARR, K_STR, K_OBJ, K_BOOL, K_NULL };

static const char *KIND_NAME[] = {"a number", "an array", "a string",
                                  "an object", "a boolean", "null"};

struct json_push {
  tdtype dt;
  int64_t max_elems;
  tvals_out out;
  int failed;
  int state, after_tok; /* after_tok: the state a token returns to */
  uint64_t off;         /* body offset of the next byte */
  int64_t line;         /* syntax errors' line and its first byte */
  uint64_t line_at;
  int depth;            /* lists open */
  int ndim;             /* -1 while the first chain is read */
  int64_t shape[T_MAXDIM];
  int64_t count[T_MAXDIM + 1];     /* elements done in each open list */
  int64_t flat_open[T_MAXDIM + 1]; /* elements before each open list */
  unsigned char fc[T_MAXDIM + 1];  /* the open list is on the first chain */
  int64_t flat;                    /* numbers read */
  int nstate, real;                /* the number being read */
  size_t ntok;
  uint64_t tok_at;
  char tok[NUM_MAX + 1];
  size_t nout;
  unsigned char vout[OUT_BYTES];
};

int json_push_new(tdtype dt, int64_t max_elems, const tvals_out *out,
                  json_push **p, terr *e) {
  json_push *j = calloc(1, sizeof *j);
  *p = j;
  if (!j) return terr_set(e, T_ENOMEM, "", -1, "json: out of memory");
  j->dt = dt;
  j->max_elems = max_elems;
  j->out = *out;
  j->line = 1;
  j->ndim = -1;
  j->state = ST_VALUE;
  return T_OK;
}

void json_push_free(json_push *p) { free(p); }

static int syntax(json_push *p, uint64_t at, terr *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int syntax(json_push *p, uint64_t at, terr *e, const char *fmt, ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return terr_set(e, T_EINVAL, "body", (int64_t)at,
                  "invalid JSON at line %lld column %llu: %s",
                  (long long)p->line,
                  (unsigned long long)(at - p->line_at + 1), what);
}

static int unexpected(json_push *p, char c, uint64_t at, terr *e) {
  unsigned char u = (unsigned char)c;
  if (u >= 0x20 && u < 0x7f)
    return syntax(p, at, e, "unexpected '%c'", c);
  return syntax(p, at, e, "unexpected byte 0x%02x", u);
}

/* The path of the element being read at depth k: the open lists' counts. */
static void path(const json_push *p, int k, char *buf, size_t len) {
  tshape_str(k, p->count, buf, len);
}

static int out_flush(json_push *p, terr *e) {
  if (!p->nout) return T_OK;
  int rc = p->out.write(p->out.ud, p->vout, p->nout, e);
  p->nout = 0;
  return rc;
}

/* An element of `kind` begins (lists, strings, objects) or has been read
 * (numbers, true/false/null) at depth p->depth: check it against the
 * shape. */
static int element(json_push *p, int kind, terr *e) {
  char where[T_MAXDIM * 22];
  int k = p->depth;
  if (k > 0 && !p->fc[k - 1] && p->count[k - 1] == p->shape[k - 1]) {
    path(p, k - 1, where, sizeof where); /* the open list is too long */
    return terr_set(e, T_EINVAL, "body", p->flat_open[k - 1],
                    "ragged array at %s: a different length where an array "
                    "of %lld was expected",
                    where, (long long)p->shape[k - 1]);
  }
  if (p->ndim < 0) { /* the first chain */
    if (kind == K_ARR) {
      if (k == T_MAXDIM)
        return terr_set(e, T_EINVAL, "body", 0, "nested deeper than %d levels",
                        T_MAXDIM);
      return T_OK;
    }
    if (k == 0 && kind != K_NUM)
      return terr_set(e, T_EINVAL, "body", 0,
                      "expected a number or an array, not %s",
                      KIND_NAME[kind]);
    p->ndim = k;
  }
  if (k < p->ndim ? kind == K_ARR : kind == K_NUM) return T_OK;
  path(p, k, where, sizeof where); /* an error: its path */
  if (k < p->ndim) {
    if (kind == K_NUM)
      return terr_set(e, T_EINVAL, "body", p->flat,
                      "ragged array at %s: a number where an array of %lld "
                      "was expected",
                      where, (long long)p->shape[k]);
  } else if (kind == K_ARR) {
    return terr_set(e, T_EINVAL, "body", p->flat, "ragged array at %s",
                    where);
  }
  return terr_set(e, T_EINVAL, "body", p->flat,
                  "element %s is %s, not a number", where, KIND_NAME[kind]);
}

/* An element is complete: back to its list, or the end of the value. */
static void element_done(json_push *p) {
  if (p->depth == 0) {
    p->state = ST_DONE;
    return;
  }
  p->count[p->depth - 1]++;
  p->state = ST_AFTER;
}

static int open_list(json_push *p, terr *e) {
  int rc = element(p, K_ARR, e);
  if (rc) return rc;
  int d = p->depth++;
  p->count[d] = 0;
  p->flat_open[d] = p->flat;
  p->fc[d] = p->ndim < 0;
  p->state = ST_FIRST;
  return T_OK;
}

static int close_list(json_push *p, terr *e) {
  int d = p->depth - 1;
  if (p->ndim < 0) { /* an empty list ends the first chain */
    p->ndim = p->depth;
    p->shape[d] = 0;
  } else if (p->fc[d]) {
    p->shape[d] = p->count[d];
  } else if (p->count[d] != p->shape[d]) {
    char where[T_MAXDIM * 22];
    path(p, d, where, sizeof where);
    return terr_set(e, T_EINVAL, "body", p->flat_open[d],
                    "ragged array at %s: a different length where an array "
                    "of %lld was expected",
                    where, (long long)p->shape[d]);
  }
  p->depth--;
  element_done(p);
  return T_OK;
}

/* The number in tok is complete: convert it as Jansson does, store it. */
static int number_done(json_push *p, terr *e) {
  uint64_t at = p->tok_at;
  if (p->nstate != N_ZERO && p->nstate != N_INT && p->nstate != N_FRAC &&
      p->nstate != N_EXP)
    return syntax(p, at, e, "invalid number '%.*s'", (int)p->ntok, p->tok);
  p->tok[p->ntok] = 0;
  double v;
  errno = 0;
  if (!p->real) {
    long long i = strtoll(p->tok, NULL, 10);
    if (errno == ERANGE)
      return syntax(p, at, e, i < 0 ? "too big negative integer"
                                    : "too big integer");
    v = (double)i;
  } else {
    v = strtod(p->tok, NULL);
    if ((v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE)
      return syntax(p, at, e, "real number overflow");
  }
  int rc = element(p, K_NUM, e);
  if (rc) return rc;
  if (p->flat >= p->max_elems)
    return terr_set(e, T_ETOOLARGE, "body", -1, "more than %lld elements",
                    (long long)p->max_elems);
  size_t isz = tdtype_size(p->dt);
  if (p->nout + isz > OUT_BYTES && (rc = out_flush(p, e))) return rc;
  if (p->dt == T_F64) {
    memcpy(p->vout + p->nout, &v, 8);
  } else {
    float f = (float)v;
    memcpy(p->vout + p->nout, &f, 4);
  }
  p->nout += isz;
  p->flat++;
  element_done(p);
  return T_OK;
}

/* true / false / null (in tok) is complete. */
static int literal_done(json_push *p, terr *e) {
  p->tok[p->ntok] = 0;
  int kind = strcmp(p->tok, "true") == 0 || strcmp(p->tok, "false") == 0
                 ? K_BOOL
             : strcmp(p->tok, "null") == 0 ? K_NULL
                                           : -1;
  if (kind < 0) return syntax(p, p->tok_at, e, "invalid token '%s'", p->tok);
  int rc = element(p, kind, e);
  return rc ? rc : terr_set(e, T_EINTERNAL, "", -1, "json: unreachable");
}

/* One byte of a number: 1 when it belongs to it, 0 when it ends it. */
static int number_byte(json_push *p, char c, uint64_t at, terr *e, int *rc) {
  int dig = c >= '0' && c <= '9';
  int ns = p->nstate;
  switch (ns) {
    case N_MINUS: ns = c == '0' ? N_ZERO : dig ? N_INT : -1; break;
    case N_ZERO:
      if (dig) {
        *rc = syntax(p, at, e, "invalid number: a leading zero");
        return 1;
      }
      /* fall through */
    case N_INT:
    case N_FRAC:
      if (dig && ns != N_ZERO) break;
      ns = c == '.' && ns != N_FRAC ? N_DOT
           : c == 'e' || c == 'E'   ? N_E
                                    : -1;
      break;
    case N_DOT: ns = dig ? N_FRAC : -1; break;
    case N_E: ns = c == '+' || c == '-' ? N_ESIGN : dig ? N_EXP : -1; break;
    case N_ESIGN: ns = dig ? N_EXP : -1; break;
    case N_EXP: ns = dig ? N_EXP : -1; break;
  }
  if (ns < 0) return 0;
  if (p->ntok == NUM_MAX) {
    *rc = syntax(p, p->tok_at, e, "a number longer than %d characters",
                 NUM_MAX);
    return 1;
  }
  if (ns == N_DOT || ns == N_E) p->real = 1;
  p->nstate = ns;
  p->tok[p->ntok++] = c;
  return 1;
}

static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int value_byte(json_push *p, char c, uint64_t at, terr *e) {
  if (c == '[') return open_list(p, e);
  if (c == '-' || (c >= '0' && c <= '9')) {
    p->state = ST_NUM;
    p->tok_at = at;
    p->ntok = 0;
    p->real = 0;
    p->nstate = N_MINUS;
    if (c == '-') {
      p->tok[p->ntok++] = c;
      return T_OK;
    }
    int rc = T_OK;
    number_byte(p, c, at, e, &rc);
    return rc;
  }
  if (c == '"') return element(p, K_STR, e);
  if (c == '{') return element(p, K_OBJ, e);
  if (c >= 'a' && c <= 'z') {
    p->state = ST_LIT;
    p->tok_at = at;
    p->tok[0] = c;
    p->ntok = 1;
    return T_OK;
  }
  return unexpected(p, c, at, e);
}

static int feed_byte(json_push *p, char c, terr *e) {
  uint64_t at = p->off++;
  int rc = T_OK;
  if (p->state == ST_NUM) {
    if (number_byte(p, c, at, e, &rc)) return rc;
    if ((rc = number_done(p, e))) return rc;
  } else if (p->state == ST_LIT) {
    if (c >= 'a' && c <= 'z' && p->ntok < 6) {
      p->tok[p->ntok++] = c;
      return T_OK;
    }
    if (c >= 'a' && c <= 'z') {
      p->tok[p->ntok] = 0;
      return syntax(p, p->tok_at, e, "invalid token '%s...'", p->tok);
    }
    if ((rc = literal_done(p, e))) return rc;
  }
  if (c == '\n') {
    p->line++;
    p->line_at = at + 1;
  }
  if (is_ws(c)) return T_OK;
  switch (p->state) {
    case ST_FIRST:
      if (c == ']') return close_list(p, e);
      return value_byte(p, c, at, e);
    case ST_VALUE:
      return value_byte(p, c, at, e);
    case ST_AFTER:
      if (c == ',') {
        p->state = ST_VALUE;
        return T_OK;
      }
      if (c == ']') return close_list(p, e);
      return unexpected(p, c, at, e);
    default: /* ST_DONE */
      return syntax(p, at, e, "end of input expected after the value");
  }
}

int json_push_feed(json_push *p, const char *s, size_t n, terr *e) {
  if (p->failed) return p->failed;
  for (size_t i = 0; i < n; i++) {
    int rc = feed_byte(p, s[i], e);
    if (rc) return p->failed = rc;
  }
  return T_OK;
}

int json_push_end(json_push *p, int *ndim, int64_t *shape, terr *e) {
  if (p->failed) return p->failed;
  int rc = T_OK;
  if (p->state == ST_NUM) rc = number_done(p, e);
  else if (p->state == ST_LIT) rc = literal_done(p, e);
  if (!rc && p->state != ST_DONE)
    rc = syntax(p, p->off, e, "unexpected end of input");
  if (!rc) rc = out_flush(p, e);
  if (rc) return p->failed = rc;
  *ndim = p->ndim;
  for (int i = 0; i < p->ndim; i++) shape[i] = p->shape[i];
  return T_OK;
}
