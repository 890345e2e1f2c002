/* route.c — the routing table: patterns with "{name}" segments, 404 / 405.
 *
 * A pattern is split once, at registration, into segments that are either
 * literal text or a parameter name. A request path is split into segments
 * on '/' while still %-encoded and each segment is then decoded on its own,
 * so that "%2F" inside an id stays inside that segment and never adds one.
 *
 * Matching: a route matches when it has as many segments as the path and
 * every literal segment is equal. Among the routes that match the path and
 * the method the most specific wins (the first segment where two patterns
 * differ, literal beats parameter), so "/v1/jobs/stats" beats
 * "/v1/jobs/{id}". HEAD is answered by a GET route unless a HEAD route is
 * registered. When the path matches but no route has the method, the
 * result carries the Allow list: every method of every matching pattern
 * (plus HEAD when GET is there), in registration order, without repeats.
 * Each route lists the query parameters it takes (route_set_query; none by
 * default): route_query_unknown names the first one it does not.
 *
 * Threads: the table is filled before http_server_start and only read
 * afterwards, from any MHD thread, without a lock.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http_int.h"
#include "util/vec.h"

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int url_decode_inplace(char *s) {
  char *w = s;
  for (const char *p = s; *p; p++) {
    if (*p != '%') {
      *w++ = *p;
      continue;
    }
    int hi = hexval((unsigned char)p[1]);
    int lo = hi < 0 ? -1 : hexval((unsigned char)p[2]);
    if (hi < 0 || lo < 0) return -1;
    int c = hi * 16 + lo;
    if (c == 0) return -1;
    *w++ = (char)c;
    p += 2;
  }
  *w = 0;
  return 0;
}

int route_split(const char *raw, path_segs *out, terr *e) {
  memset(out, 0, sizeof *out);
  if (!raw || raw[0] != '/')
    return terr_set(e, T_EINVAL, "path", 0, "the path must start with '/'");
  const char *p = raw + 1;
  if (!*p) return T_OK; /* "/" */
  for (;;) {
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (out->n == ROUTE_MAX_SEGS) {
      path_segs_free(out);
      return terr_set(e, T_EINVAL, "path", (int64_t)(p - raw),
                      "more than %d path segments", ROUTE_MAX_SEGS);
    }
    char *seg = strndup(p, len);
    if (!seg) {
      path_segs_free(out);
      return terr_set(e, T_ENOMEM, "path", -1, "out of memory");
    }
    out->seg[out->n++] = seg;
    if (url_decode_inplace(seg) != 0) {
      path_segs_free(out);
      return terr_set(e, T_EINVAL, "path", (int64_t)(p - raw),
                      "bad %%-escape or %%00 in the path");
    }
    if (!end) break;
    p = end + 1;
  }
  return T_OK;
}

void path_segs_free(path_segs *p) {
  for (int i = 0; i < p->n; i++) free(p->seg[i]);
  p->n = 0;
}

static void route_ent_free(route_ent *r) {
  free(r->method);
  free(r->pattern);
  for (int i = 0; i < r->nseg; i++) free(r->seg[i]);
}

int route_add(route_table *t, const char *method, const char *pattern,
              http_handler h, const http_sink *sink, void *ud, int flags,
              terr *e) {
  if (!method || !method[0] || !pattern || pattern[0] != '/' || !h)
    return terr_set(e, T_EINVAL, "route", -1,
                    "a route needs a method, a pattern starting with '/' "
                    "and a handler");
  route_ent r;
  memset(&r, 0, sizeof r);
  r.h = h;
  r.sink = sink;
  r.ud = ud;
  r.flags = flags;
  r.method = strdup(method);
  r.pattern = strdup(pattern);
  if (!r.method || !r.pattern) goto nomem;
  int nparam = 0;
  const char *p = pattern + 1;
  while (*p) {
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (r.nseg == ROUTE_MAX_SEGS) {
      terr_set(e, T_EINVAL, "route", (int64_t)(p - pattern),
               "%s: more than %d segments", pattern, ROUTE_MAX_SEGS);
      goto fail;
    }
    bool is_param = len >= 3 && p[0] == '{' && p[len - 1] == '}';
    if (is_param && ++nparam > ROUTE_MAX_PARAMS) {
      terr_set(e, T_EINVAL, "route", (int64_t)(p - pattern),
               "%s: more than %d parameters", pattern, ROUTE_MAX_PARAMS);
      goto fail;
    }
    if (!is_param && (memchr(p, '{', len) || memchr(p, '}', len))) {
      terr_set(e, T_EINVAL, "route", (int64_t)(p - pattern),
               "%s: a parameter must be a whole segment", pattern);
      goto fail;
    }
    r.param[r.nseg] = is_param;
    r.seg[r.nseg] = is_param ? strndup(p + 1, len - 2) : strndup(p, len);
    if (!r.seg[r.nseg++]) goto nomem;
    if (!end) break;
    p = end + 1;
  }
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->v[i].pattern, pattern) == 0 &&
        strcmp(t->v[i].method, method) == 0) {
      terr_set(e, T_ECONFLICT, "route", -1, "%s %s registered twice", method,
               pattern);
      goto fail;
    }
  if (tvec_reserve(t, t->n + 1)) goto nomem;
  t->v[t->n++] = r;
  return T_OK;
nomem:
  terr_set(e, T_ENOMEM, "route", -1, "out of memory");
fail:
  route_ent_free(&r);
  return e ? (int)e->code : T_EINVAL;
}

int route_set_query(route_table *t, const char *method, const char *pattern,
                    const char *const *names, terr *e) {
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->v[i].pattern, pattern) == 0 &&
        strcmp(t->v[i].method, method) == 0) {
      t->v[i].query = names;
      return T_OK;
    }
  return terr_set(e, T_ENOTFOUND, "route", -1, "%s %s is not registered",
                  method, pattern);
}

const char *route_query_unknown(const route_ent *rt,
                                const struct http_hdrs *query) {
  for (size_t i = 0; i < query->n; i++) {
    const char *k = query->v[i].k;
    bool known = false;
    for (const char *const *q = rt->query; q && *q && !known; q++)
      known = strcmp(*q, k) == 0;
    if (!known) return k;
  }
  return NULL;
}

void route_table_free(route_table *t) {
  for (size_t i = 0; i < t->n; i++) route_ent_free(&t->v[i]);
  free(t->v);
  memset(t, 0, sizeof *t);
}

static bool route_matches_path(const route_ent *r, const path_segs *p) {
  if (r->nseg != p->n) return false;
  for (int i = 0; i < p->n; i++)
    if (!r->param[i] && strcmp(r->seg[i], p->seg[i]) != 0) return false;
  return true;
}

/* >0 when a is more specific than b (both match the same path). */
static int route_specificity(const route_ent *a, const route_ent *b) {
  for (int i = 0; i < a->nseg; i++)
    if (a->param[i] != b->param[i]) return a->param[i] ? -1 : 1;
  return 0;
}

static void allow_add(char *allow, const char *method) {
  size_t n = strlen(allow), ml = strlen(method);
  /* Look for the method as a whole item of the list. */
  for (const char *p = allow; (p = strstr(p, method)) != NULL; p += ml)
    if ((p == allow || p[-1] == ' ') && (p[ml] == ',' || p[ml] == 0)) return;
  if (n + ml + 3 >= ROUTE_ALLOW_MAX) return;
  if (n) {
    memcpy(allow + n, ", ", 2);
    n += 2;
  }
  memcpy(allow + n, method, ml + 1);
}

void route_find(const route_table *t, const char *method, const path_segs *p,
                route_match *m) {
  memset(m, 0, sizeof *m);
  const route_ent *best = NULL, *best_get = NULL;
  bool has_get = false;
  for (size_t i = 0; i < t->n; i++) {
    const route_ent *r = &t->v[i];
    if (!route_matches_path(r, p)) continue;
    m->path_known = 1;
    allow_add(m->allow, r->method);
    if (strcmp(r->method, "GET") == 0) {
      has_get = true;
      if (!best_get || route_specificity(r, best_get) > 0) best_get = r;
    }
    if (strcmp(r->method, method) == 0 &&
        (!best || route_specificity(r, best) > 0))
      best = r;
  }
  if (has_get) allow_add(m->allow, "HEAD");
  if (!best && strcmp(method, "HEAD") == 0) best = best_get;
  m->route = best;
  if (!best) return;
  for (int i = 0; i < best->nseg && m->nparam < ROUTE_MAX_PARAMS; i++)
    if (best->param[i]) {
      m->pname[m->nparam] = best->seg[i];
      m->pval[m->nparam++] = p->seg[i];
    }
}
