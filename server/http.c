/* http.c — the life of a request, from MHD's callbacks.
 *
 * MHD calls the access handler (http_on_access) several times per request,
 * on the worker thread that owns the connection:
 *  1. headers read (*con_cls NULL): req_begin creates the request and
 *     decides everything that needs no body: 503 when quiescing, 400 for a
 *     bad path, 404 / 405, static files, 401, and 413 when Content-Length
 *     is over the route's cap. Such an answer never reads the body: with
 *     no body it is queued on MHD's next call (keeping the connection),
 *     with "Expect: 100-continue" at once (MHD then never asks for the
 *     body), and with body bytes on their way on the socket itself.
 *  2. body data: appended to r->body up to the cap, or handed to the
 *     route's sink (http_route_sink: streamed bodies are never held
 *     whole); a chunked body that goes over the cap is answered 413 right
 *     there, as is a piece the sink refuses. (An error answered while
 *     body bytes are on their way is written on the socket by
 *     req_raw_error: see there why.)
 *  3. body done (*upload_data_size 0): the handler runs. If it answered,
 *     the answer is queued; if it called http_defer, the connection is
 *     suspended (no thread waits for it); otherwise it gets a 500.
 *  4. after MHD_resume_connection (reply.c): the stored answer is queued,
 *     or, after http_resume_call, the answer is built here (req_call).
 * http_on_completed drops MHD's reference and writes the access log line.
 *
 * Threads: everything here runs on MHD worker threads; a request's fields
 * that other threads touch (state, the stored answer) are under r->mu.
 */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/http_int.h"
#include "util/vec.h"
#include "util/xfer.h"
#include "util/tassert.h"

#define MIB (1024 * 1024)
#define BODY_MIN_CAP (64 * 1024)
#define BODY_PREALLOC ((size_t)16 * MIB)
/* Bodies over this are "big": at most http threads - 1 handlers parse
 * such bodies at once, so one MHD thread is always left for everything
 * else (/healthz, small requests); more get 503 + Retry-After. */
#define BIG_BODY ((size_t)1 * MIB)
#define XFER_STEP ((int64_t)1 * MIB)

/* Reserve body bytes in the transfer budget (util/xfer.h) up to `want`:
 * T_OK, or the error to answer: 413 when the budget could never hold it,
 * 503 (+ Retry-After) when it cannot now. Bodies are memory the server
 * holds, like streamed downloads, so they share the one budget and many
 * large requests at once are refused, not swapped. (A streamed body, a
 * route's sink, holds none: the sink bounds what it keeps.) */
static int body_reserve(http_req *r, int64_t want, terr *e) {
  if (want <= r->xfer_held) return T_OK;
  if (!xfer_fits(want))
    return terr_set(e, T_ETOOLARGE, "body", -1,
                    "%lld bytes is more than the server's transfer "
                    "budget (--max-transfer-memory, %lld bytes)",
                    (long long)want, (long long)xfer_budget_limit());
  if (!xfer_reserve(want - r->xfer_held)) {
    http_add_header(r, "Retry-After", XFER_RETRY_AFTER_S);
    return terr_set(e, T_EUNAVAIL, "", -1,
                    "the server's transfer budget (--max-transfer-memory, "
                    "%lld bytes) is in use by other requests: retry shortly",
                    (long long)xfer_budget_limit());
  }
  r->xfer_held = want;
  return T_OK;
}

int http_reserve_more(http_req *r, int64_t more, terr *e) {
  return body_reserve(r, r->xfer_held + more, e);
}

/* Queue r's stored answer on its connection; the state becomes `state`. */
static enum MHD_Result req_queue(http_req *r, struct MHD_Connection *c,
                                 int state) {
  pthread_mutex_lock(&r->mu);
  struct MHD_Response *resp = r->resp;
  int status = r->status;
  r->resp = NULL;
  r->state = state;
  pthread_mutex_unlock(&r->mu);
  if (!resp) return MHD_NO; /* not even an error could be built: close */
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  if (ret != MHD_YES)
    log_error("http: MHD refused the %d answer to %s %s (request %s)", status,
              r->method, r->path, r->rid);
  return ret;
}

/* An answer written on the socket itself, for when the client is sending
 * (or may be sending) a body that we will not read:
 *  - MHD 0.9.75 takes a response only before the body is read or after all
 *    of it, so a chunked body that goes over the cap cannot be answered
 *    through MHD;
 *  - an answer queued through MHD before the body makes MHD close the
 *    socket with the body unread, which sends a TCP RST that can destroy
 *    the answer before the client reads it.
 * So the error goes out here (through the TLS session under HTTPS:
 * conns_write_close; a few hundred bytes into an empty send
 * buffer: the request is still being received, MHD has nothing queued),
 * the write side is shut (the client sees the answer, then EOF), and what
 * the client still sends is read and dropped until it closes (curl and
 * browsers stop sending on an error answer) or DRAIN_MAX bytes have been
 * dropped, when MHD closes the connection. A body announced with a
 * Content-Length within the route's cap is drained to its end instead:
 * clients that send the whole body before they read (Python's
 * http.client, requests) then read the answer too. It costs bandwidth,
 * never memory (nothing is kept), and the connection's deadlines still
 * hold. A streamed upload refused after its header is the common case. */
#define DRAIN_MAX ((uint64_t)16 * MIB)
int http_big_bodies(const http_server *s) {
  return s->cfg.threads > 1 ? s->cfg.threads - 1 : 1;
}

static uint64_t drain_max(const http_req *r) {
  if (r->declared > 0 && (uint64_t)r->declared <= r->body_limit &&
      (uint64_t)r->declared > DRAIN_MAX)
    return (uint64_t)r->declared;
  return DRAIN_MAX;
}
static enum MHD_Result req_raw_error(http_req *r, struct MHD_Connection *c,
                                     const terr *e) {
  int status;
  char *body = reply_error_body(r, e, &status);
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  char *msg = NULL;
  size_t blen = body ? strlen(body) : 0;
  enum MHD_Result ret = MHD_NO;
  if (!body || !ci) goto done;
  pthread_mutex_lock(&r->mu);
  size_t cap = blen + 512;
  for (size_t i = 0; i < r->out_headers.n; i++)
    cap += strlen(r->out_headers.v[i].k) + strlen(r->out_headers.v[i].v) + 4;
  msg = malloc(cap);
  size_t off = 0;
  if (msg) {
    const char *reason = MHD_get_reason_phrase_for((unsigned)status);
    off = (size_t)snprintf(msg, cap,
                           "HTTP/1.1 %d %s\r\n"
                           "Content-Type: application/json; charset=utf-8\r\n"
                           "Content-Length: %zu\r\nX-Request-Id: %s\r\n"
                           "Connection: close\r\n",
                           status, reason ? reason : "Error", blen, r->rid);
    for (size_t i = 0; i < r->out_headers.n && off < cap; i++)
      if (strcasecmp(r->out_headers.v[i].k, "Connection") != 0) /* above */
        off += (size_t)snprintf(msg + off, cap - off, "%s: %s\r\n",
                                r->out_headers.v[i].k, r->out_headers.v[i].v);
    if (off + 2 + blen <= cap) {
      memcpy(msg + off, "\r\n", 2);
      memcpy(msg + off + 2, body, blen);
      off += 2 + blen;
    } else {
      off = 0;
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (!off) goto done;
  /* Through the TLS session under HTTPS (never in clear into it). */
  if (conns_write_close(r->srv, c, msg, off)) goto done; /* not said: close */
  pthread_mutex_lock(&r->mu);
  r->status = status;
  r->answered = 1;
  r->state = REQ_EARLY;
  r->raw_sent = 1;
  pthread_mutex_unlock(&r->mu);
  atomic_store(&r->claimed, 1);
  atomic_store(&r->bytes_out, (uint64_t)blen);
  ret = MHD_YES;
done:
  free(msg);
  free(body);
  return ret;
}

/* Send the answer stored while the headers were examined. With no body
 * announced it waits for MHD's next call (the end of the empty body):
 * queued now, MHD would close the connection after it, as it does for
 * every answer given before the body; keep-alive survives this way. With a
 * body announced the client is waiting for "100 Continue" (else
 * req_raw_error answered): queue now, so that MHD never asks for it. */
static enum MHD_Result req_early_queue(http_req *r, struct MHD_Connection *c) {
  if (r->has_body) return req_queue(r, c, REQ_EARLY);
  pthread_mutex_lock(&r->mu);
  r->state = REQ_HELD;
  pthread_mutex_unlock(&r->mu);
  return MHD_YES;
}

/* Answer e without reading the body: through MHD when no body bytes are
 * on their way (none announced, or the client waits for "100 Continue"),
 * on the socket otherwise (see req_raw_error). */
static enum MHD_Result req_early_terr(http_req *r, struct MHD_Connection *c,
                                      int mid_body, const terr *e) {
  if (mid_body || r->body_coming) return req_raw_error(r, c, e);
  http_reply_error(r, e);
  return req_early_queue(r, c);
}

/* req_early_terr with the error built here. */
static enum MHD_Result req_early_error(http_req *r, struct MHD_Connection *c,
                                       int mid_body, terr_code code,
                                       const char *field, int64_t pos,
                                       const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static enum MHD_Result req_early_error(http_req *r, struct MHD_Connection *c,
                                       int mid_body, terr_code code,
                                       const char *field, int64_t pos,
                                       const char *fmt, ...) {
  terr e;
  va_list ap;
  va_start(ap, fmt);
  terr_vset(&e, code, field, pos, fmt, ap);
  va_end(ap);
  return req_early_terr(r, c, mid_body, &e);
}

/* Is a body announced; will its bytes arrive without us asking for them? */
static void body_expected(http_req *r) {
  const char *te = http_header(r, "Transfer-Encoding");
  const char *cl = http_header(r, "Content-Length");
  const char *ex = http_header(r, "Expect");
  int64_t n = 0;
  r->has_body = te || (cl && (t_parse_i64(cl, &n) != 0 || n != 0));
  r->body_coming = r->has_body && !(ex && strcasestr(ex, "100-continue"));
}

/* Step 1: everything that can be decided from the headers. */
static enum MHD_Result req_begin(http_server *s, http_req *r,
                                 struct MHD_Connection *c, const char *version) {
  terr e;
  terr_clear(&e);
  body_expected(r);
  int preflight = 0;
  if (guard_check(s, r, version, &preflight, &e) != T_OK)
    return req_early_terr(r, c, 0, &e);
  if (preflight) {
    http_reply_buffer(r, 204, "text/plain", NULL, 0);
    return req_early_queue(r, c);
  }
  if (conns_begin(s, c, r->has_body, &e) != T_OK) {
    http_add_header(r, "Retry-After", "1");
    http_add_header(r, "Connection", "close");
    return req_early_terr(r, c, 0, &e);
  }
  if (atomic_load(&s->quiescing))
    return req_early_error(r, c, 0, T_EUNAVAIL, "", -1,
                           "the server is shutting down");
  if (route_split(r->path, &r->segs, &e) != T_OK)
    return req_early_terr(r, c, 0, &e);
  if (r->bad_query)
    return req_early_error(r, c, 0, T_EINVAL, "query", -1,
                           "bad %%-escape or %%00 in the query");
  route_find(&s->routes, r->method, &r->segs, &r->match);
  /* The names point into the routing table: copy them, so that a request
   * that outlives the server still answers http_param. */
  for (int i = 0; i < r->match.nparam; i++)
    if (!(r->match.pname[i] = r->pname_own[i] = strdup(r->match.pname[i])))
      return req_early_error(r, c, 0, T_ENOMEM, "", -1, "out of memory");
  const route_ent *rt = r->match.route;
  if (!rt) {
    if (r->match.path_known) {
      http_add_header(r, "Allow", r->match.allow);
      return req_early_error(r, c, 0, T_EMETHOD, "", -1,
                             "%s is not allowed here (allowed: %s)", r->method,
                             r->match.allow);
    }
    r->routed = 1; /* /metrics: route "static" */
    /* The API's own space is never the dashboard's files: an unknown
     * /v1/... is no such endpoint, not "no file". */
    if (!strcmp(r->path, "/v1") || !strncmp(r->path, "/v1/", 4))
      return req_early_error(r, c, 0, T_ENOTFOUND, "path", -1,
                             "no such endpoint: %s %s (the endpoints are "
                             "listed in /openapi.json)",
                             r->method, r->path);
    if (!s->web_dir_real)
      return req_early_error(r, c, 0, T_ENOTFOUND, "", -1,
                             "no route for %s %s", r->method, r->path);
    if (static_serve(r, &e) == T_OK) return req_early_queue(r, c);
    return req_early_terr(r, c, 0, &e);
  }
  if ((rt->flags & HTTP_AUTH) && s->have_auth) {
    const char *authz = http_header(r, "Authorization");
    if (!auth_check(&s->auth, authz, r->owner)) {
      http_add_header(r, "WWW-Authenticate",
                      authz ? "Bearer realm=\"tessel\", error=\"invalid_token\""
                            : "Bearer realm=\"tessel\"");
      return req_early_error(
          r, c, 0, T_EUNAUTH, "", -1, "%s",
          authz ? "the bearer token is not valid"
                : "this route needs \"Authorization: Bearer <token>\"");
    }
  }
  const char *unknown = route_query_unknown(rt, &r->query);
  if (unknown)
    return req_early_error(r, c, 0, T_EINVAL, unknown, -1,
                           "unknown query parameter '%s'", unknown);
  if ((rt->flags & HTTP_JSON) && guard_content_type(r, &e) != T_OK)
    return req_early_terr(r, c, 0, &e);
  r->body_limit = (uint64_t)((rt->flags & HTTP_UPLOAD) ? s->cfg.max_upload
                                                       : s->cfg.max_body);
  const char *cl = http_header(r, "Content-Length");
  int64_t n = 0;
  if (cl && !http_header(r, "Transfer-Encoding")) {
    if (t_parse_i64(cl, &n) != 0 || n < 0)
      return req_early_error(r, c, 0, T_EINVAL, "Content-Length", -1,
                             "not a byte count");
    r->declared = n;
    if ((uint64_t)n > r->body_limit)
      return req_early_error(
          r, c, 0, T_ETOOLARGE, "body", -1,
          "the body is %lld bytes; this route takes at most %llu",
          (long long)n, (unsigned long long)r->body_limit);
  }
  if (rt->sink) { /* streamed: the sink takes the body as it comes */
    void *st = NULL;
    if (rt->sink->open(r, rt->ud, &st, &e) != T_OK)
      return req_early_terr(r, c, 0, &e);
    if (st) {
      r->sink = rt->sink;
      r->sink_st = st;
      return MHD_YES;
    }
  }
  if (cl && !http_header(r, "Transfer-Encoding")) {
    if (n > 0 && body_reserve(r, n, &e) != T_OK)
      return req_early_terr(r, c, 0, &e);
    if (n > 0) {
      /* Up to BODY_PREALLOC at once; a client that announces a large body
       * and sends nothing does not get to reserve it. */
      size_t want = (size_t)n + 1 > BODY_PREALLOC ? BODY_PREALLOC : (size_t)n + 1;
      r->body = malloc(want);
      if (!r->body)
        return req_early_error(r, c, 0, T_ENOMEM, "", -1,
                               "no memory for a %lld byte body", (long long)n);
      r->body_cap = want;
    }
  }
  return MHD_YES;
}

/* Step 2 of a streamed body: the piece goes to the sink. */
static enum MHD_Result req_sink(http_req *r, struct MHD_Connection *c,
                                const char *data, size_t len) {
  terr e;
  terr_clear(&e);
  int rc = r->streamed + len > r->body_limit
               ? terr_set(&e, T_ETOOLARGE, "", -1,
                          "the body is over %llu bytes, the most this route "
                          "takes",
                          (unsigned long long)r->body_limit)
               : r->sink->write(r->sink_st, data, len, &e);
  if (rc == T_OK) {
    r->streamed += len;
    T_ASSERT(r->streamed <= r->body_limit); /* checked just above */
    return MHD_YES;
  }
  /* Drop what the sink holds now (a partial file), not when freed. */
  r->sink->close(r->sink_st);
  r->sink_st = NULL;
  return req_early_terr(r, c, 1, &e);
}

/* Step 2: a piece of the body. */
static enum MHD_Result req_body(http_req *r, struct MHD_Connection *c,
                                const char *data, size_t *size) {
  size_t len = *size;
  *size = 0;
  conns_body(c, len);
  if (r->sink_st) return req_sink(r, c, data, len);
  if ((uint64_t)r->body_len + len > r->body_limit) {
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    return req_early_error(
        r, c, 1, T_ETOOLARGE, "body", -1,
        "the body is over %llu bytes, the most this route takes",
        (unsigned long long)r->body_limit);
  }
  if ((int64_t)(r->body_len + len) > r->xfer_held) { /* chunked: grows */
    terr e;
    int64_t want = (int64_t)(r->body_len + len) + XFER_STEP;
    if ((uint64_t)want > r->body_limit + 1) want = (int64_t)r->body_limit + 1;
    if (body_reserve(r, want, &e) != T_OK) {
      free(r->body);
      r->body = NULL;
      r->body_len = r->body_cap = 0;
      return req_early_terr(r, c, 1, &e);
    }
  }
  /* Bytes through the vector idiom, capped at the body's limit (+ its
   * terminator), which body_reserve has already checked. */
  size_t need = r->body_len + len + 1, max = (size_t)r->body_limit + 1;
  if (r->body_cap == 0 && need < BODY_MIN_CAP) /* a first block, not 16 B */
    need = BODY_MIN_CAP < max ? BODY_MIN_CAP : max;
  if (tvec_grow(&r->body, &r->body_cap, 1, need, max))
    return req_early_error(r, c, 1, T_ENOMEM, "", -1,
                           "no memory for the body");
  memcpy(r->body + r->body_len, data, len);
  r->body_len += len;
  /* Debug builds: the body stays within its cap (and its terminator). */
  assert(r->body_len < r->body_cap &&
         (uint64_t)r->body_len <= r->body_limit);
  return MHD_YES;
}

/* Step 3: the whole body is here; run the handler. */
static enum MHD_Result req_dispatch(http_server *s, http_req *r,
                                    struct MHD_Connection *c) {
  /* the terminator's byte is inside the body's buffer (req_body kept it) */
  T_ASSERT(!r->body || r->body_len < r->body_cap);
  if (r->body) r->body[r->body_len] = 0;
  conns_handled(s, c);
  /* Counted before `stopping` is read: destroy sets stopping, then waits
   * for this count to drop, so no handler can defer behind its back. */
  atomic_fetch_add(&s->active, 1);
  if (atomic_load(&s->stopping)) {
    reply_error(r, T_EUNAVAIL, "", -1, "the server is shutting down");
    enum MHD_Result ret = req_queue(r, c, REQ_QUEUED);
    atomic_fetch_sub(&s->active, 1);
    return ret;
  }
  int big = r->body_len > BIG_BODY;
  if (big && atomic_fetch_add(&s->big_active, 1) >= http_big_bodies(s)) {
    atomic_fetch_sub(&s->big_active, 1);
    http_add_header(r, "Retry-After", "1");
    reply_error(r, T_EUNAVAIL, "", -1,
                "%d large bodies are being handled, the most at once: retry "
                "shortly",
                http_big_bodies(s));
    enum MHD_Result ret = req_queue(r, c, REQ_QUEUED);
    atomic_fetch_sub(&s->active, 1);
    return ret;
  }
  pthread_mutex_lock(&r->mu);
  r->state = REQ_HANDLING;
  pthread_mutex_unlock(&r->mu);
  const route_ent *rt = r->match.route;
  rt->h(r, rt->ud);
  if (big) atomic_fetch_sub(&s->big_active, 1);
  enum MHD_Result ret = MHD_YES;
  pthread_mutex_lock(&r->mu);
  void *call_ud;
  http_handler call = req_take_call(r, &call_ud);
  if (call && !r->resp) {
    /* http_resume_call came while the handler ran: answer right here. */
    pthread_mutex_unlock(&r->mu);
    call(r, call_ud);
    pthread_mutex_lock(&r->mu);
  }
  if (r->resp) {
    pthread_mutex_unlock(&r->mu);
    ret = req_queue(r, c, REQ_QUEUED);
  } else if (r->deferred && !call) {
    pthread_mutex_lock(&s->mu);
    r->dnext = s->deferred;
    r->dprev = NULL;
    if (s->deferred) s->deferred->dprev = r;
    s->deferred = r;
    pthread_mutex_unlock(&s->mu);
    r->state = REQ_SUSPENDED;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
  } else {
    pthread_mutex_unlock(&r->mu);
    log_error("http: the handler of %s %s returned without answering",
              rt->method, rt->pattern);
    reply_error(r, T_EINTERNAL, "", -1, "the handler did not answer");
    ret = req_queue(r, c, REQ_QUEUED);
  }
  atomic_fetch_sub(&s->active, 1);
  return ret;
}

/* Step 4 of an http_resume_call: build the answer here, then queue it. */
static enum MHD_Result req_call(http_server *s, http_req *r,
                                struct MHD_Connection *c) {
  atomic_fetch_add(&s->active, 1);
  pthread_mutex_lock(&r->mu);
  void *ud;
  http_handler fn = req_take_call(r, &ud);
  r->state = REQ_HANDLING;
  pthread_mutex_unlock(&r->mu);
  if (fn) fn(r, ud);
  pthread_mutex_lock(&r->mu);
  int have = r->resp != NULL;
  pthread_mutex_unlock(&r->mu);
  if (!have) {
    log_error("http: the deferred answer to %s %s was not given", r->method,
              r->path);
    reply_error(r, T_EINTERNAL, "", -1, "the answer was not given");
  }
  enum MHD_Result ret = req_queue(r, c, REQ_QUEUED);
  atomic_fetch_sub(&s->active, 1);
  return ret;
}

enum MHD_Result http_on_access(void *cls, struct MHD_Connection *c,
                               const char *url, const char *method,
                               const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls) {
  http_server *s = cls;
  http_req *r = *con_cls;
  if (!r) {
    r = req_new(s, c, url, method);
    if (!r) {
      log_error("http: out of memory for a new request");
      return MHD_NO;
    }
    *con_cls = r;
    return req_begin(s, r, c, version);
  }
  pthread_mutex_lock(&r->mu);
  int state = r->state;
  pthread_mutex_unlock(&r->mu);
  switch (state) {
    case REQ_READING:
      if (*upload_data_size) return req_body(r, c, upload_data, upload_data_size);
      return req_dispatch(s, r, c);
    case REQ_RESUMING:
      return req_queue(r, c, REQ_QUEUED);
    case REQ_CALLING:
      return req_call(s, r, c);
    case REQ_HELD:
      if (!*upload_data_size) return req_queue(r, c, REQ_QUEUED);
      *upload_data_size = 0; /* body bytes that were not announced */
      return MHD_YES;
    default:
      if (r->raw_sent) { /* see req_raw_error */
        r->discarded += *upload_data_size;
        if (!*upload_data_size || r->discarded > drain_max(r)) return MHD_NO;
      }
      /* Answered early but MHD still hands us body bytes: drop them. */
      *upload_data_size = 0;
      return MHD_YES;
  }
}

/* Copy s for a log line: at most 200 bytes, control bytes as '?'. */
static void log_safe(char *out, size_t cap, const char *s) {
  size_t i = 0;
  for (; s[i] && i + 1 < cap && i < 200; i++)
    out[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
  out[i] = 0;
}

static const char *term_name(enum MHD_RequestTerminationCode t) {
  switch (t) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "";
    case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "read error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client";
    default: return "other";
  }
}

/* One line per request: method, path and query (control characters as
 * '?', at most 200 bytes each), status, body bytes sent, ms from header to
 * end, request id, owner, client address, and how it ended. */
static void access_log(const http_req *r, struct MHD_Connection *c, int status,
                       enum MHD_RequestTerminationCode toe) {
  char m[32], p[256], q[256] = "";
  log_safe(m, sizeof m, r->method);
  log_safe(p, sizeof p, r->path);
  size_t o = 0;
  for (size_t i = 0; i < r->query.n && o + 2 < sizeof q; i++) {
    char k[128], v[128];
    log_safe(k, sizeof k, r->query.v[i].k ? r->query.v[i].k : "");
    log_safe(v, sizeof v, r->query.v[i].v ? r->query.v[i].v : "");
    int n = snprintf(q + o, sizeof q - o, "%s%s=%s", i ? "&" : "", k, v);
    if (n < 0) break;
    o = (size_t)n < sizeof q - o ? o + (size_t)n : sizeof q - 1;
  }
  const char *end = term_name(toe);
  t_kv kv[] = {
      T_KV_S("method", m),
      T_KV_S("path", p),
      T_KV_S("query", q[0] ? q : NULL),
      T_KV_N("status", status),
      T_KV_N("bytes", (double)atomic_load(&r->bytes_out)),
      T_KV_N("ms", round((t_now_ms() - r->t0) * 10) / 10),
      T_KV_S("request_id", r->rid),
      T_KV_S("owner", r->owner[0] ? r->owner : "-"),
      T_KV_S("client", conns_client_ip(c)),
      T_KV_S("aborted", end[0] ? end : NULL),
  };
  t_log_kv(T_LOG_INFO, "access", kv, (int)(sizeof kv / sizeof kv[0]));
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe) {
  http_server *s = cls;
  http_req *r = *con_cls;
  conns_end(s, c);
  if (!r) return;
  *con_cls = NULL;
  pthread_mutex_lock(&r->mu);
  int was_deferred = r->state == REQ_SUSPENDED || r->state == REQ_RESUMING ||
                     r->state == REQ_CALLING ||
                     (r->deferred && r->state == REQ_QUEUED);
  void *call_ud;
  http_handler call = req_take_call(r, &call_ud);
  r->state = REQ_DONE;
  r->term = toe;
  r->conn = NULL;
  int status = r->status;
  int unref_timer = timer_disarm(s->timer, r);
  r->srv = NULL;
  pthread_mutex_unlock(&r->mu);
  atomic_store(&r->claimed, 1);
  if (was_deferred) {
    pthread_mutex_lock(&s->mu);
    if (r->dprev || s->deferred == r) {
      if (r->dprev) r->dprev->dnext = r->dnext;
      else s->deferred = r->dnext;
      if (r->dnext) r->dnext->dprev = r->dprev;
      r->dnext = r->dprev = NULL;
    }
    pthread_mutex_unlock(&s->mu);
  }
  if (call) call(r, call_ud); /* the client left first: answer dropped */
  http_stats_observe(s, r, status, (t_now_ms() - r->t0) / 1e3);
  if (s->cfg.access_log) access_log(r, c, status, toe);
  if (unref_timer) http_req_unref(r);
  http_req_unref(r);
}
