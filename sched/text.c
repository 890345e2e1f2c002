/* sched/text.c — the JSON documents a worker stores at a job's start and
 * end (estimate, timings, result metadata), written straight to text.
 *
 * They used to be built as jansson trees and dumped; for a tiny job that
 * was a tenth of the worker's time (tests/bench/README.md). The text is the
 * same jansson wrote with JSON_COMPACT | JSON_REAL_PRECISION(9): keys in
 * the same order, reals with 9 significant digits, ".0" on a real that
 * reads as an integer, exponents without '+' or leading zeros (1e20, 6e-6),
 * strings escaped as jansson does by default. test_sched checks the stored
 * documents parse and hold the expected values.
 *
 * Ownership: every function returns a new malloc()ed string (NULL when out
 * of memory). Threads: any; nothing shared.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

typedef struct stext {
  char *p;
  size_t len, cap;
  int oom;
} stext;

static void st_put(stext *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void st_puts(stext *b, const char *s) { st_put(b, s, strlen(s)); }

static char *st_done(stext *b) {
  if (b->oom) {
    free(b->p);
    return NULL;
  }
  return b->p;
}

/* A real as jansson's JSON_REAL_PRECISION(9) writes it; null if not
 * finite (jansson refuses those; no stored document has one). */
static void st_real(stext *b, double v) {
  if (!isfinite(v)) {
    st_puts(b, "null");
    return;
  }
  char num[48];
  int n = snprintf(num, sizeof num, "%.9g", v);
  if (n <= 0 || n >= (int)sizeof num - 3) {
    st_puts(b, "null");
    return;
  }
  char *e = strchr(num, 'e');
  if (!strchr(num, '.') && !e) {
    memcpy(num + n, ".0", 3);
  } else if (e) { /* "1e+20" -> "1e20", "6e-06" -> "6e-6" */
    char *start = e + 1, *end = start + 1;
    if (*start == '-') start++;
    while (*end == '0') end++;
    if (end != start) memmove(start, end, strlen(end) + 1);
  }
  st_puts(b, num);
}

static void st_int(stext *b, long long v) {
  char num[24];
  int n = snprintf(num, sizeof num, "%lld", v);
  st_put(b, num, (size_t)n);
}

static void st_str(stext *b, const char *s) {
  st_put(b, "\"", 1);
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    st_put(b, run, (size_t)(s - run));
    char esc[8];
    const char *shortform = c == '"' ? "\\\"" : c == '\\' ? "\\\\"
                            : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                            : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t" : NULL;
    if (shortform) {
      st_put(b, shortform, 2);
    } else {
      snprintf(esc, sizeof esc, "\\u%04X", c);
      st_put(b, esc, 6);
    }
    run = s + 1;
  }
  st_put(b, run, (size_t)(s - run));
  st_put(b, "\"", 1);
}

/* `"key":` with the separator before it unless it is the first. */
static void st_key(stext *b, const char *k, int *first) {
  if (!*first) st_put(b, ",", 1);
  *first = 0;
  st_str(b, k);
  st_put(b, ":", 1);
}

/* A duration in ms, to the microsecond. */
static void st_ms(stext *b, double ms) { st_real(b, round(ms * 1e3) / 1e3); }

char *stext_timings(const char *const *keys, const double *ms, int n) {
  stext b = {0};
  int first = 1;
  st_put(&b, "{", 1);
  for (int i = 0; i < n; i++) {
    st_key(&b, keys[i], &first);
    st_ms(&b, ms[i]);
  }
  st_put(&b, "}", 1);
  return st_done(&b);
}

char *stext_result(tdtype dt, int ndim, const int64_t *shape, int64_t bytes,
                   int64_t nonconverged) {
  stext b = {0};
  st_puts(&b, "{\"dtype\":");
  st_str(&b, tdtype_name(dt));
  st_puts(&b, ",\"shape\":[");
  for (int i = 0; i < ndim; i++) {
    if (i) st_put(&b, ",", 1);
    st_int(&b, (long long)shape[i]);
  }
  st_puts(&b, "],\"bytes\":");
  st_int(&b, (long long)bytes);
  if (nonconverged > 0) {
    st_puts(&b, ",\"nonconverged\":");
    st_int(&b, (long long)nonconverged);
  }
  st_put(&b, "}", 1);
  return st_done(&b);
}

/* One value of the router's flat object; anything nested is dumped by
 * jansson (no router writes one today). */
static void st_value(stext *b, const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_STRING: st_str(b, json_string_value(v)); break;
    case JSON_INTEGER: st_int(b, (long long)json_integer_value(v)); break;
    case JSON_REAL: st_real(b, json_real_value(v)); break;
    case JSON_TRUE: st_puts(b, "true"); break;
    case JSON_FALSE: st_puts(b, "false"); break;
    case JSON_NULL: st_puts(b, "null"); break;
    default: {
      char *t = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9) |
                                  JSON_ENCODE_ANY);
      st_puts(b, t ? t : "null");
      free(t);
    }
  }
}

char *stext_estimate(const job_estimate *est, const json_t *router) {
  static const char *const own[] = {"size",      "work",     "out_dtype",
                                    "out_shape", "out_bytes", "in_bytes",
                                    "mem_bytes"};
  stext b = {0};
  int first = 1;
  st_put(&b, "{", 1);
  st_key(&b, own[0], &first);
  st_int(&b, (long long)est->size);
  st_key(&b, own[1], &first);
  st_real(&b, est->work);
  st_key(&b, own[2], &first);
  st_str(&b, tdtype_name(est->out_dtype));
  st_key(&b, own[3], &first);
  st_put(&b, "[", 1);
  for (int i = 0; i < est->out_ndim; i++) {
    if (i) st_put(&b, ",", 1);
    st_int(&b, (long long)est->out_shape[i]);
  }
  st_put(&b, "]", 1);
  st_key(&b, own[4], &first);
  st_int(&b, (long long)est->out_bytes);
  st_key(&b, own[5], &first);
  st_int(&b, (long long)est->in_bytes);
  st_key(&b, own[6], &first);
  st_int(&b, (long long)est->mem_bytes);
  /* The router's figures, but not the keys above (json_object_update_
   * missing, as before). */
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)router, k, v) {
    int dup = 0;
    for (size_t i = 0; i < sizeof own / sizeof own[0] && !dup; i++)
      dup = strcmp(own[i], k) == 0;
    if (dup) continue;
    st_key(&b, k, &first);
    st_value(&b, v);
  }
  st_put(&b, "}", 1);
  return st_done(&b);
}
