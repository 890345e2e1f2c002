/* buf.c — the capped growable buffer of buf.h and its JSON value writers.
 *
 * Growth doubles from 256 bytes and stops at max; the error state is
 * sticky (see buf.h), which keeps every writer free of per-call checks.
 * The JSON writers are here, not in a JSON library, because the documents
 * the service writes most often (a job, its timings) are hot: building a
 * jansson tree and dumping it cost more than running a tiny job
 * (tests/bench/README.md), while appending to one buffer costs nothing.
 */
#include "util/buf.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void tbuf_init(tbuf *b, size_t max) {
  memset(b, 0, sizeof *b);
  b->max = max ? max : TBUF_MAX_DEFAULT;
}

static void fail(tbuf *b, int code) {
  if (!b->err) b->err = code;
}

int tbuf_reserve(tbuf *b, size_t more) {
  if (b->err) return b->err;
  if (!b->max) b->max = TBUF_MAX_DEFAULT; /* a zeroed tbuf works too */
  if (more > b->max || b->len > b->max - more) {
    fail(b, T_ETOOLARGE);
    return b->err;
  }
  size_t need = b->len + more + 1; /* + the terminator */
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > b->max + 1) cap = b->max + 1;
  char *p = realloc(b->p, cap);
  if (!p) {
    fail(b, T_ENOMEM);
    return b->err;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

/* tbuf_add's way when the room is not there (buf.h: the rest is inline). */
void tbuf_add_grow(tbuf *b, const void *s, size_t n) {
  if ((b->err || n >= b->cap - b->len) && tbuf_reserve(b, n)) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
  assert(b->len <= b->max && b->len < b->cap); /* within the cap */
}

void tbuf_adds(tbuf *b, const char *s) { tbuf_add(b, s, strlen(s)); }

void tbuf_vaddf(tbuf *b, const char *fmt, va_list ap) {
  if (b->err) return;
  va_list ap2;
  va_copy(ap2, ap);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap2);
  va_end(ap2);
  if (n < 0) {
    fail(b, T_EINTERNAL);
    return;
  }
  if ((size_t)n < sizeof small) {
    tbuf_add(b, small, (size_t)n);
    return;
  }
  if (tbuf_reserve(b, (size_t)n)) return;
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void tbuf_addf(tbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tbuf_vaddf(b, fmt, ap);
  va_end(ap);
}

char *tbuf_take(tbuf *b, size_t *len) {
  char *p = NULL;
  if (!b->err && tbuf_reserve(b, 0) == 0) {
    b->p[b->len] = 0;
    p = b->p;
    if (len) *len = b->len;
    b->p = NULL;
  }
  size_t max = b->max;
  tbuf_free(b);
  tbuf_init(b, max);
  return p;
}

void tbuf_free(tbuf *b) {
  if (!b) return;
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->err = 0;
}

void tbuf_json_str(tbuf *b, const char *s) {
  if (!s) {
    tbuf_add(b, "null", 4);
    return;
  }
  const char *q = s; /* the common case: nothing to escape, one copy */
  while ((unsigned char)*q >= 0x20 && *q != '"' && *q != '\\') q++;
  if (!*q) {
    size_t n = (size_t)(q - s);
    if (tbuf_reserve(b, n + 2)) return;
    char *d = b->p + b->len;
    d[0] = '"';
    memcpy(d + 1, s, n);
    d[n + 1] = '"';
    d[n + 2] = 0;
    b->len += n + 2;
    return;
  }
  tbuf_add(b, "\"", 1);
  const char *run = s;
  for (s = q; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    tbuf_add(b, run, (size_t)(s - run));
    switch (c) {
      case '"': tbuf_add(b, "\\\"", 2); break;
      case '\\': tbuf_add(b, "\\\\", 2); break;
      case '\b': tbuf_add(b, "\\b", 2); break;
      case '\f': tbuf_add(b, "\\f", 2); break;
      case '\n': tbuf_add(b, "\\n", 2); break;
      case '\r': tbuf_add(b, "\\r", 2); break;
      case '\t': tbuf_add(b, "\\t", 2); break;
      default: tbuf_addf(b, "\\u%04X", c);
    }
    run = s + 1;
  }
  tbuf_add(b, run, (size_t)(s - run));
  tbuf_add(b, "\"", 1);
}

/* u's decimal digits written backwards ending at end; returns the first. */
static char *digits_back(char *end, unsigned long long u) {
  do *--end = (char)('0' + u % 10); while (u /= 10);
  return end;
}

/* prec (0: 15) significant digits hold every integer below 10^prec: %g
 * writes such an integer-valued double as its digits, which these are. */
static int int_real(tbuf *b, double v, int prec) {
  static const double lim[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,
                               1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15};
  double a = fabs(v);
  int p = prec == 0 || prec > 15 ? 15 : prec;
  if (a >= lim[p] || v != trunc(v) || (v == 0 && signbit(v))) return 0;
  char num[24], *end = num + sizeof num - 2;
  end[0] = '.', end[1] = '0';
  char *q = digits_back(end, (unsigned long long)a);
  if (v < 0) *--q = '-';
  tbuf_add(b, q, (size_t)(num + sizeof num - q));
  return 1;
}

/* %.{prec}g (prec 1-9) of a v that %g writes in fixed notation (1e-4 <=
 * |v| < 10^prec), without printf's float path (~2,700 instructions a call:
 * a tiny job's timings and its estimate document write 14 reals,
 * tests/bench/README.md). v * 10^s, s chosen so that it has prec integer
 * digits, is one correctly rounded product (10^s is exact for s <= 22), off
 * the exact one by under 1e-7 below 10^9; rounded to the nearest integer it
 * gives %g's digits, unless it lies within 1e-6 of a tie (printf rounds the
 * exact value, half to even) or carries into a new digit: then 0, and
 * printf writes it. Trailing zeros of the fraction dropped, as %g does;
 * ".0" when none is left (the JSON real, as jansson writes it). */
static int fixed_real(tbuf *b, double v, int prec) {
  static const double p10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5, 1e6,
                               1e7, 1e8, 1e9, 1e10, 1e11, 1e12};
  double a = fabs(v);
  if (prec < 1 || prec > 9 || !(a >= 1e-4) || a >= p10[prec]) return 0;
  double lo = p10[prec - 1], x = a;
  int s = 0;
  while (x < lo) {
    if (++s > prec + 3) return 0;
    x = a * p10[s];
  }
  double fl = floor(x), fr = x - fl;
  if (fabs(fr - 0.5) < 1e-6) return 0;
  unsigned long long d = (unsigned long long)fl + (fr > 0.5);
  if ((double)d >= p10[prec]) return 0;
  char dig[16], out[40], *o = out;
  digits_back(dig + prec, d); /* exactly prec digits: d >= 10^(prec-1) */
  int nd = prec, frac = s;
  while (frac > 0 && dig[nd - 1] == '0') nd--, frac--;
  if (v < 0) *o++ = '-';
  if (s >= prec) { /* 0.000ddd */
    *o++ = '0', *o++ = '.';
    for (int i = 0; i < s - prec; i++) *o++ = '0';
    memcpy(o, dig, (size_t)nd), o += nd;
  } else {
    memcpy(o, dig, (size_t)(prec - s)), o += prec - s;
    *o++ = '.';
    if (frac == 0) *o++ = '0';
    else memcpy(o, dig + prec - s, (size_t)frac), o += frac;
  }
  tbuf_add(b, out, (size_t)(o - out));
  return 1;
}

void tbuf_json_real(tbuf *b, double v, int prec) {
  if (!isfinite(v)) {
    tbuf_add(b, "null", 4);
    return;
  }
  if (prec < 0 || prec > 17) prec = 17;
  /* the common case of data and counts, without printf's float path */
  if (int_real(b, v, prec) || fixed_real(b, v, prec)) return;
  char num[48];
  int n = -1;
  if (prec == 0) { /* the fewest digits that read back as v */
    /* A normal double's shortest form has at most 15 digits whenever %.15g
     * reads back (the digits past it are zeros, which %g drops); a
     * subnormal has fewer significant bits, so its search starts at 1. */
    for (prec = fabs(v) < DBL_MIN && v != 0 ? 1 : 15; prec < 17; prec++) {
      n = snprintf(num, sizeof num, "%.*g", prec, v);
      if (n > 0 && n < (int)sizeof num && strtod(num, NULL) == v) break;
      n = -1;
    }
  }
  if (n < 0) /* not found by the search (its 17 digits), or a fixed prec */
    n = snprintf(num, sizeof num, "%.*g", prec, v);
  if (n <= 0 || n >= (int)sizeof num - 3) {
    tbuf_add(b, "null", 4);
    return;
  }
  char *e = strchr(num, 'e');
  if (!strchr(num, '.') && !e) {
    memcpy(num + n, ".0", 3);
  } else if (e) { /* "1e+20" -> "1e20", "6e-06" -> "6e-6" */
    char *start = e + 1, *end = start + 1;
    if (*start == '-') start++;
    else end = start;
    if (*end == '+') end++;
    while (*end == '0' && end[1]) end++;
    if (end != start) memmove(start, end, strlen(end) + 1);
  }
  tbuf_adds(b, num);
}

void tbuf_json_int(tbuf *b, long long v) { /* as %lld, without printf */
  char num[24];
  char *q = digits_back(num + sizeof num, v < 0 ? 0ULL - (unsigned long long)v
                                                : (unsigned long long)v);
  if (v < 0) *--q = '-';
  tbuf_add(b, q, (size_t)(num + sizeof num - q));
}

/* Copy the JSON text s, every real number token (one with '.', 'e' or
 * 'E', outside strings) written again with the fewest digits that read
 * back as the same double (tbuf_json_real with prec 0); integers, strings
 * and everything else byte for byte. jansson writes reals with 17
 * significant digits ("823.75400000000002"), which is exact but noisy;
 * this is the text a reader expects ("823.754") and parses to the same
 * value. Linear; the text is assumed to be jansson's (valid JSON). */
char *tjson_short_reals(const char *s, size_t *len) {
  tbuf b;
  tbuf_init(&b, 0);
  const char *p = s;
  while (*p) {
    const char *run = p;
    while (*p && *p != '"' && *p != '-' && (*p < '0' || *p > '9')) p++;
    tbuf_add(&b, run, (size_t)(p - run));
    if (!*p) break;
    if (*p == '"') { /* a string, escapes included, as it is */
      run = p++;
      while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
      if (*p) p++;
      tbuf_add(&b, run, (size_t)(p - run));
      continue;
    }
    run = p;
    int real = 0;
    while (*p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' ||
           (*p >= '0' && *p <= '9')) {
      real |= *p == '.' || *p == 'e' || *p == 'E';
      p++;
    }
    if (real) tbuf_json_real(&b, strtod(run, NULL), 0);
    else tbuf_add(&b, run, (size_t)(p - run));
  }
  return tbuf_take(&b, len);
}
