/* range.c — the Range request header (RFC 9110 section 14.2), read for
 * downloads that can be sent in pieces (http.h: http_range_parse).
 *
 * Only the "bytes" unit is known. A header this parser cannot read (another
 * unit, a missing "=", a range whose first byte is after its last, a
 * number with a sign or junk after it) is not an error: RFC 9110 says such
 * a header is ignored, so the answer is the whole representation (200).
 * A header it reads gives one of three answers:
 *  - one range that overlaps the representation: its first and last byte,
 *    the last clamped to the end ("bytes=0-" and "bytes=-n" included);
 *  - ranges none of which can be served (first byte at or past the end, a
 *    suffix of 0, anything on an empty representation): 416;
 *  - several ranges (a range-set with a comma): Tessel sends no
 *    multipart/byteranges, and says so with a 416 naming Range (a client
 *    that wants pieces asks for one per request, on several connections).
 * Numbers too large for 64 bits are read as the largest value (a first
 * byte that far is past any end; a last byte that far is the end).
 *
 * Threads: pure function, any thread.
 */
#include <stddef.h>
#include <stdint.h>
#include <strings.h>

#include "server/http.h"

static const char *skip_ows(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* Decimal digits at *p (at least one) into *v, saturating. */
static int read_num(const char **p, uint64_t *v) {
  const char *s = *p;
  uint64_t n = 0;
  if (*s < '0' || *s > '9') return -1;
  for (; *s >= '0' && *s <= '9'; s++) {
    unsigned d = (unsigned)(*s - '0');
    n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
  }
  *p = s;
  *v = n;
  return 0;
}

/* One range-spec at *p: "a-b", "a-" or "-n". 0 and the spec, or -1. */
static int read_spec(const char **p, int *suffix, uint64_t *a, uint64_t *b) {
  const char *s = *p;
  *suffix = 0;
  *a = 0;
  *b = UINT64_MAX;
  if (*s == '-') {
    s++;
    *suffix = 1;
    if (read_num(&s, a)) return -1;
  } else {
    if (read_num(&s, a) || *s != '-') return -1;
    s++;
    if (*s >= '0' && *s <= '9') {
      if (read_num(&s, b) || *b < *a) return -1;
    }
  }
  *p = s;
  return 0;
}

http_range_kind http_range_parse(const char *h, uint64_t len, uint64_t *first,
                                 uint64_t *last) {
  *first = *last = 0;
  if (!h) return HTTP_RANGE_NONE;
  const char *p = skip_ows(h);
  if (strncasecmp(p, "bytes", 5) != 0) return HTTP_RANGE_NONE;
  p = skip_ows(p + 5);
  if (*p++ != '=') return HTTP_RANGE_NONE;
  int n = 0, suffix = 0;
  uint64_t a = 0, b = 0;
  for (;;) {
    p = skip_ows(p);
    if (*p == ',') { /* empty list elements are allowed (RFC 9110 5.6.1) */
      p++;
      continue;
    }
    if (!*p) break;
    if (read_spec(&p, &suffix, &a, &b)) return HTTP_RANGE_NONE;
    n++;
    p = skip_ows(p);
    if (*p && *p != ',') return HTTP_RANGE_NONE;
  }
  if (n == 0) return HTTP_RANGE_NONE;
  if (n > 1) return HTTP_RANGE_MULTI;
  if (suffix) {
    if (a == 0 || len == 0) return HTTP_RANGE_UNSAT;
    *first = a >= len ? 0 : len - a;
    *last = len - 1;
    return HTTP_RANGE_ONE;
  }
  if (a >= len) return HTTP_RANGE_UNSAT;
  *first = a;
  *last = b >= len ? len - 1 : b;
  return HTTP_RANGE_ONE;
}
