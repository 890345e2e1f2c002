/* http.h — Tessel's HTTP layer over libmicrohttpd.
 *
 * The server owns the MHD daemon (internal poll thread pool), the routing
 * table, limits (body caps, connection timeout, per-IP connections), auth,
 * X-Request-Id, the access log and static files. A handler gets a complete
 * request (body already read, within its route's cap, or handed to the
 * route's sink as it arrived: http_route_sink) and answers exactly
 * once, either before it returns or later from any thread after
 * http_defer (the connection is then suspended: no MHD thread is held).
 *
 * Threads: handlers run on MHD's worker threads and must not block on
 * compute (a store commit is fine). http_reply_* may be called from any
 * thread. A deferred request lives until it has been answered AND every
 * reference taken with http_req_ref has been dropped.
 */
#ifndef TESSEL_HTTP_HTTP_H
#define TESSEL_HTTP_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct http_server http_server;
typedef struct http_req http_req;

typedef void (*http_handler)(http_req *r, void *ud);

typedef struct http_config {
  const char *listen;        /* address, "127.0.0.1" by default */
  int port;                  /* 8080; 0 picks a free port (see http_port) */
  int threads;               /* MHD worker threads (0: one per core, 4 to 16) */
  int64_t max_body;          /* cap on JSON bodies (default 16 MiB) */
  int64_t max_upload;        /* cap on /v1/arrays uploads (default 1 GiB) */
  int conn_timeout_s;        /* idle connection timeout (default 60) */
  int per_ip_limit;          /* connections per client address (default
                                256); more: 503 + Retry-After (conns.c) */
  const char *token_file;    /* lines "name:token"; NULL: open service */
  const char *web_dir;       /* static files for "/" ; NULL: none */
  int access_log;            /* 1: a line per request to stderr */
  int header_timeout_s;      /* a request's header block must be complete
                                this long after the connect (default 10) */
  int64_t min_body_rate;     /* bytes/s a body must average after 10 s;
                                0: no minimum */
  int64_t max_conns;         /* connections at once, all addresses (4096) */
  const char *server_names;  /* comma-separated Host names also answered to
                                (guard.c); NULL: loopback names only */
  const char *allow_origins; /* comma-separated origins that may call the API
                                cross-site (CORS); NULL: none */
  /* HTTPS: PEM files of the certificate (chain) and its private key, both
   * or neither (NULL: plain HTTP). Read once by http_server_create (each at
   * most 1 MiB); the key must not be encrypted. */
  const char *tls_cert, *tls_key;
} http_config;

/* Route flags. */
enum {
  HTTP_AUTH = 1,     /* needs a bearer token when tokens are configured */
  HTTP_UPLOAD = 2,   /* body capped by max_upload instead of max_body */
  HTTP_JSON = 4,     /* the body, when there is one, is JSON: any other
                        Content-Type is 415 before it is read (guard.c) */
};

int http_server_create(const http_config *cfg, http_server **out, terr *e);
/* Register a route before http_server_start. `pattern` is a path with
 * "{name}" segments ("/v1/jobs/{id}/result"); `method` "GET", "POST",
 * "DELETE", ... . A path matching a pattern with another method gets 405
 * with Allow; no pattern: 404 (JSON error). */
int http_route(http_server *s, const char *method, const char *pattern,
               http_handler h, void *ud, int flags);
/* The query parameters a registered route takes: `names` is a NULL-ended
 * list of static strings (borrowed for the server's life). A request with
 * any other name is answered 400 (`field` the name) after the token check
 * and before its body is read; a route never given a list takes none. */
int http_route_query(http_server *s, const char *method, const char *pattern,
                     const char *const *names);
/* A streamed body: instead of collecting the body into memory, the server
 * hands it to the route's sink piece by piece as it reads it from the
 * socket (one piece: what one read brought, up to the connection's buffer).
 * open(r, ud, &st, e) runs once the headers passed every check (route,
 * auth, the body cap); T_OK with *st NULL declines (the body is then
 * collected as for any route), an error is answered before the body is
 * read. write(st, p, n, e) takes a piece; an error is answered at once and
 * the rest of the body is dropped. Once the body is complete the route's
 * handler runs; http_sink_state(r) gives it st. close(st) runs exactly once,
 * when the request is freed (after the handler, or when the client left or
 * an error was answered): it frees st and drops what was not finished.
 * Streamed bytes count against the route's body cap but not the transfer
 * budget: the sink keeps what it holds bounded itself. */
typedef struct http_sink {
  int (*open)(http_req *r, void *ud, void **st, terr *e);
  int (*write)(void *st, const char *p, size_t n, terr *e);
  void (*close)(void *st);
} http_sink;
int http_route_sink(http_server *s, const char *method, const char *pattern,
                    http_handler h, const http_sink *sink, void *ud, int flags);
/* The sink state of a streamed request (NULL when the sink declined). */
void *http_sink_state(const http_req *r);
/* The handler has taken (and freed) the sink state: close will not run. */
void http_sink_clear(http_req *r);
int http_server_start(http_server *s, terr *e);
int http_port(const http_server *s); /* the bound port */
/* 1 when the server speaks HTTPS (http_config.tls_cert). */
int http_is_tls(const http_server *s);
/* Requests with a body over 1 MiB handled at once (threads - 1; more get
 * 503): what a client sending parts at once may use. */
int http_big_bodies(const http_server *s);
/* Requests answered since start, by route pattern, method and status code,
 * with a histogram of their durations (server/stats.c says what each label
 * holds). For /metrics. */
#define HTTP_STATS_BUCKETS 16
#define HTTP_STATS_MAX 1024
extern const double http_stats_bounds_s[HTTP_STATS_BUCKETS]; /* upper, s */
typedef struct http_stat {
  const char *route;  /* "/v1/jobs/{id}", "static", "unrouted", "other" */
  const char *method; /* "GET", ..., "OTHER" */
  int code;           /* 200, 404, ...; 0 in the overflow series */
  int64_t counts[HTTP_STATS_BUCKETS]; /* cumulative in a snapshot */
  double sum_s;
  int64_t count;
} http_stat;
/* A copy of the table (*out: caller frees; its strings live as long as the
 * server). T_OK or T_ENOMEM. Any thread. */
int http_stats_snapshot(http_server *s, http_stat **out, size_t *n);
/* Stop accepting; answer 503 to new requests; close idle connections. */
void http_server_quiesce(http_server *s);
void http_server_destroy(http_server *s);

/* ---- the request ------------------------------------------------------ */
const char *http_method(const http_req *r);
const char *http_path(const http_req *r);
/* A "{name}" segment of the matched pattern (URL-decoded); NULL if none. */
const char *http_param(const http_req *r, const char *name);
/* Query argument (decoded) or NULL. */
const char *http_query(const http_req *r, const char *name);
/* Request header (case-insensitive) or NULL. */
const char *http_header(const http_req *r, const char *name);
/* The whole body; len 0 when none. Owned by the request. */
const char *http_body(const http_req *r, size_t *len);
/* Reserve `more` bytes of the transfer budget (--max-transfer-memory) for
 * memory held on behalf of r beyond its body (the JSON tree parsed from
 * it: api/common.c); they are given back when the request is freed. T_OK,
 * T_ETOOLARGE (field "body") when the budget could never hold all that r
 * holds, T_EUNAVAIL (+ Retry-After) when it cannot now. Only on the
 * request's handler thread. */
int http_reserve_more(http_req *r, int64_t more, terr *e);
/* Token name of the caller ("" when the service is open). */
const char *http_owner(const http_req *r);
/* The request id (from X-Request-Id when sane, else generated). */
const char *http_request_id(const http_req *r);

/* The Range header of a download of `len` bytes (server/range.c says the
 * rules): NONE (absent, or unreadable: send the whole, 200), ONE (send
 * bytes *first..*last inclusive, 206), UNSAT (416, its Content-Range
 * giving the length), MULTI (several ranges: Tessel answers 416). */
typedef enum {
  HTTP_RANGE_NONE = 0,
  HTTP_RANGE_ONE,
  HTTP_RANGE_UNSAT,
  HTTP_RANGE_MULTI
} http_range_kind;
http_range_kind http_range_parse(const char *h, uint64_t len, uint64_t *first,
                                 uint64_t *last);

/* ---- answering (exactly one of these per request) ---------------------- */
/* Add a response header before replying ("Location", "Retry-After"). */
void http_add_header(http_req *r, const char *name, const char *value);
/* JSON body; steals the reference to body. */
void http_reply_json(http_req *r, int status, json_t *body);
/* {"error": {"code", "message", "field"?, "position"?}} with the status of
 * e->code (500s carry the request id in the message and are logged). */
void http_reply_error(http_req *r, const terr *e);
/* Raw bytes; the server takes ownership of buf (free()d when sent). */
void http_reply_buffer(http_req *r, int status, const char *content_type,
                       char *buf, size_t len);
/* Stream `len` bytes of an open file from `offset` (the server closes fd). */
void http_reply_fd(http_req *r, int status, const char *content_type, int fd,
                   uint64_t offset, uint64_t len);
/* Stream bytes produced on demand: fill(arg, pos, buf, max) returns bytes
 * written, 0 at the end, -1 on error; done(arg) frees arg at the end. */
typedef long (*http_fill_fn)(void *arg, uint64_t pos, char *buf, size_t max);
void http_reply_stream(http_req *r, int status, const char *content_type,
                       http_fill_fn fill, void (*done)(void *arg), void *arg);

/* ---- deferring --------------------------------------------------------- */
/* Answer later. After the handler returns the connection is suspended. At
 * wall time now+timeout_ms, if nobody has claimed the request, the server
 * claims it and calls on_timeout(r, arg), which must reply. */
typedef void (*http_timeout_fn)(http_req *r, void *arg);
void http_defer(http_req *r, int64_t timeout_ms, http_timeout_fn on_timeout,
                void *arg);
/* 1 for the first caller (who must then reply), 0 afterwards. */
int http_claim(http_req *r);
/* For the claim holder of a deferred request: have the answer built on the
 * connection's own MHD thread, by fn(r, ud) there (it must reply as a
 * handler does), instead of on this thread; the connection is resumed for
 * it. fn is called exactly once: there, or at once on this thread when the
 * request cannot be answered any more (its answer is then dropped), or when
 * MHD completes the request first (client gone). Any thread. */
void http_resume_call(http_req *r, http_handler fn, void *ud);
/* Keep the request object alive beyond its answer (for callbacks that may
 * fire late); each ref is dropped with http_req_unref. */
void http_req_ref(http_req *r);
void http_req_unref(http_req *r);

/* The HTTP status of an error code (API.md's table): 400 for
 * T_EINVAL, ...; 500 for an unknown code. */
int http_status_of(terr_code code);

#endif
