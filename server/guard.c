/* guard.c — requests refused from their headers alone: framing that could
 * smuggle a second request, hosts this server is not, and cross-site
 * writes.
 *
 * Runs first in req_begin (http.c), on the MHD worker thread that owns the
 * connection, before routing and before any body byte is read. Every check
 * reads the request's own header copy (r->headers keeps duplicates, in
 * order), so nothing here touches MHD.
 *
 * Framing (RFC 9112 §6): libmicrohttpd 0.9.75 takes Content-Length and
 * Transfer-Encoding together, lets the first of two Content-Lengths win,
 * stores "Transfer-Encoding " (a space before the colon) as a header of
 * its own and waits for the end of a body it cannot frame. Each of those
 * lets a front proxy and Tessel disagree on where a request ends, so each
 * is refused and the connection closed (no request behind it is read):
 * 400 for CL + TE, two Content-Lengths, two Transfer-Encodings, a header
 * name with white space or control bytes, HTTP/1.1 without exactly one
 * Host; 501 for a transfer coding other than "chunked". (MHD's own
 * strict mode refuses some of these too, but answers them with an HTML
 * page whose header block 0.9.75 sends twice; refused here they get one
 * JSON answer.)
 *
 * Hosts (DNS rebinding): a page on evil.example whose name is made to
 * resolve to 127.0.0.1 reaches a loopback service with "Host:
 * evil.example". When the server listens on loopback, only Hosts naming
 * loopback (127.0.0.0/8, localhost, ::1) or one of --server-name pass;
 * the rest get 421. On other addresses Hosts are checked only when
 * --server-name is given.
 *
 * Cross-site writes (CSRF): browsers send Origin with every cross-origin
 * request that can change state. A request other than GET/HEAD/OPTIONS
 * whose Origin is neither the server's own (http(s):// + its Host) nor in
 * --allow-origin is refused with 403. For an allowed origin the answer
 * carries CORS headers, and a preflight (OPTIONS with
 * Access-Control-Request-Method) is answered 204 here. Routes registered
 * with HTTP_JSON also refuse any Content-Type but application/json (415,
 * guard_content_type), which no cross-site form or no-cors fetch can send
 * (text/plain, forms and multipart are "simple" requests that skip the
 * preflight; application/json is not).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/http_int.h"

/* Is [s, s+n) equal to the NUL-terminated w, ignoring case? */
static int span_eq(const char *s, size_t n, const char *w) {
  return strlen(w) == n && strncasecmp(s, w, n) == 0;
}

/* Does the comma-separated list contain [s, s+n) (ignoring case and blanks
 * around items)? */
static int list_has(const char *list, const char *s, size_t n) {
  if (!list) return 0;
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    const char *q = p;
    while (*q && *q != ',') q++;
    const char *end = q;
    while (end > p && end[-1] == ' ') end--;
    if ((size_t)(end - p) == n && n && strncasecmp(p, s, n) == 0) return 1;
    p = q;
  }
  return 0;
}

/* How many headers are named `name`; *last gets the last one's value. */
static int hdr_count(const http_req *r, const char *name, const char **last) {
  int n = 0;
  for (size_t i = 0; i < r->headers.n; i++)
    if (strcasecmp(r->headers.v[i].k, name) == 0) {
      n++;
      if (last) *last = r->headers.v[i].v;
    }
  return n;
}

/* The host part of a Host value ("[::1]:8080" -> "::1", "a.b:80" -> "a.b"). */
static void host_part(const char *host, const char **s, size_t *n) {
  if (host[0] == '[') {
    const char *e = strchr(host, ']');
    *s = host + 1;
    *n = e ? (size_t)(e - host - 1) : strlen(host + 1);
    return;
  }
  const char *colon = strrchr(host, ':');
  *s = host;
  *n = colon ? (size_t)(colon - host) : strlen(host);
}

static int is_loopback_name(const char *s, size_t n) {
  if (span_eq(s, n, "localhost") || span_eq(s, n, "::1")) return 1;
  if (n >= 4 && strncmp(s, "127.", 4) == 0) {
    for (size_t i = 4; i < n; i++)
      if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) return 0;
    return 1;
  }
  return 0;
}

int guard_listens_on_loopback(const char *listen) {
  return listen && is_loopback_name(listen, strlen(listen));
}

/* 400/501 for a request whose framing is ambiguous. */
static int check_framing(const http_req *r, const char *version, terr *e) {
  for (size_t i = 0; i < r->headers.n; i++) {
    const unsigned char *k = (const unsigned char *)r->headers.v[i].k;
    for (; *k; k++)
      if (*k <= ' ' || *k == 0x7f)
        return terr_set(e, T_EINVAL, "headers", -1,
                        "header name '%.40s' holds white space or a control "
                        "byte",
                        r->headers.v[i].k);
  }
  const char *te = NULL, *cl = NULL;
  int nte = hdr_count(r, "Transfer-Encoding", &te);
  int ncl = hdr_count(r, "Content-Length", &cl);
  if (ncl > 1)
    return terr_set(e, T_EINVAL, "Content-Length", -1,
                    "%d Content-Length headers: one at most", ncl);
  if (nte > 1)
    return terr_set(e, T_EINVAL, "Transfer-Encoding", -1,
                    "%d Transfer-Encoding headers: one at most", nte);
  if (nte && ncl)
    return terr_set(e, T_EINVAL, "Transfer-Encoding", -1,
                    "Content-Length and Transfer-Encoding together: the body's "
                    "end would be ambiguous");
  if (nte) {
    const char *v = te;
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    if (!span_eq(v, n, "chunked"))
      return terr_set(e, T_ENOTIMPL, "Transfer-Encoding", -1,
                      "transfer coding '%.40s' is not supported (only "
                      "chunked)",
                      te);
  }
  int nhost = hdr_count(r, "Host", NULL);
  if (nhost == 0 && version && strcmp(version, "HTTP/1.0") != 0)
    return terr_set(e, T_EINVAL, "Host", -1,
                    "an HTTP/1.1 request needs a Host header");
  if (nhost > 1)
    return terr_set(e, T_EINVAL, "Host", -1, "%d Host headers: one at most",
                    nhost);
  return T_OK;
}

/* 421 for a Host this server does not answer as. */
static int check_host(const http_server *s, const http_req *r, terr *e) {
  const char *names = s->cfg.server_names;
  int loop = guard_listens_on_loopback(s->cfg.listen);
  if (!loop && !(names && names[0])) return T_OK;
  const char *host = NULL;
  hdr_count(r, "Host", &host);
  if (!host) return T_OK; /* HTTP/1.0 without Host: nothing to rebind */
  const char *h;
  size_t n;
  host_part(host, &h, &n);
  if ((loop && is_loopback_name(h, n)) || list_has(names, h, n)) return T_OK;
  return terr_set(e, T_EMISDIRECTED, "Host", -1,
                  "this server does not answer as '%.80s' (add it with "
                  "--server-name)",
                  host);
}

/* Is this Origin the server's own (scheme + the request's Host)? */
static int origin_is_own(const http_req *r, const char *origin) {
  const char *host = NULL;
  hdr_count(r, "Host", &host);
  if (!host) return 0;
  const char *rest = NULL;
  if (strncasecmp(origin, "http://", 7) == 0) rest = origin + 7;
  else if (strncasecmp(origin, "https://", 8) == 0) rest = origin + 8;
  return rest && strcasecmp(rest, host) == 0;
}

static int origin_allowed(const http_server *s, const char *origin) {
  return list_has(s->cfg.allow_origins, origin, strlen(origin)) ||
         list_has(s->cfg.allow_origins, "*", 1);
}

static int method_is_safe(const char *m) {
  return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0 ||
         strcmp(m, "OPTIONS") == 0;
}

int guard_check(http_server *s, http_req *r, const char *version,
                int *preflight, terr *e) {
  *preflight = 0;
  int rc = check_framing(r, version, e);
  if (rc == T_OK) rc = check_host(s, r, e);
  if (rc != T_OK) {
    http_add_header(r, "Connection", "close");
    return rc;
  }
  const char *origin = NULL;
  hdr_count(r, "Origin", &origin);
  if (!origin || origin_is_own(r, origin)) return T_OK;
  int allowed = origin_allowed(s, origin);
  if (allowed) {
    http_add_header(r, "Access-Control-Allow-Origin", origin);
    http_add_header(r, "Vary", "Origin");
    http_add_header(r, "Access-Control-Expose-Headers",
                    "Location, Retry-After, X-Request-Id");
  }
  if (strcmp(r->method, "OPTIONS") == 0 &&
      hdr_count(r, "Access-Control-Request-Method", NULL)) {
    if (!allowed)
      return terr_set(e, T_EFORBIDDEN, "Origin", -1,
                      "origin '%.80s' is not allowed (--allow-origin)", origin);
    http_add_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE");
    http_add_header(r, "Access-Control-Allow-Headers",
                    "Authorization, Content-Type, X-Request-Id");
    http_add_header(r, "Access-Control-Max-Age", "600");
    *preflight = 1;
    return T_OK;
  }
  if (!allowed && !method_is_safe(r->method))
    return terr_set(e, T_EFORBIDDEN, "Origin", -1,
                    "a %s from origin '%.80s' is refused: only this server's "
                    "own pages (or --allow-origin) may change state",
                    r->method, origin);
  return T_OK;
}

int guard_content_type(const http_req *r, terr *e) {
  if (method_is_safe(r->method)) return T_OK;
  const char *ct = NULL;
  hdr_count(r, "Content-Type", &ct);
  if (!ct && !r->has_body) return T_OK; /* POST .../cancel with no body */
  if (ct) {
    size_t n = strcspn(ct, "; \t");
    if (span_eq(ct, n, "application/json")) return T_OK;
  }
  return terr_set(e, T_EMEDIA, "Content-Type", -1,
                  "'%.60s' is not application/json, the only type this "
                  "route takes",
                  ct ? ct : "(none)");
}
