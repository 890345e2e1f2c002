/* http_int.h — what the files of server/ share behind http.h.
 *
 * server/daemon.c  the server object and the MHD daemon: create, start,
 *                  quiesce, destroy;
 * server/http.c    the access-handler state machine, the completion
 *                  callback and the access log;
 * server/request.c the request object: accessors, copies of headers and
 *                  query args, ref counting, defer / claim;
 * server/reply.c   building responses and handing them to the connection
 *                  (directly, or by resuming a suspended one);
 * server/route.c   the routing table ("{name}" segments, 404 / 405);
 * server/auth.c    the token file and bearer checks;
 * server/static.c  static files from web_dir;
 * server/timer.c   the deadline thread behind http_defer.
 *
 * Locks, and their order (a lock may be taken while holding one above it,
 * never the other way round):
 *   http_req.mu     guards a request's state, conn, stored response,
 *                   call_fn/call_ud and pending response headers; held
 *                   while calling
 *                   MHD_suspend_connection / MHD_resume_connection (they
 *                   take MHD's internal mutex and never call back into us);
 *   http_server.mu  guards the `deferred` list;
 *   http_timer.mu   guards the heap and every request's timer_idx.
 * No callback of ours runs with any of them held.
 */
#ifndef TESSEL_HTTP_HTTP_INT_H
#define TESSEL_HTTP_HTTP_INT_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "server/http.h"
#include "util/util.h"

/* ---- routing (route.c) ------------------------------------------------ */
#define ROUTE_MAX_SEGS 32   /* segments in a pattern or a request path */
#define ROUTE_MAX_PARAMS 8  /* "{name}" segments in a pattern */
#define ROUTE_ALLOW_MAX 160 /* the Allow header value */

typedef struct route_ent {
  char *method;  /* "GET" */
  char *pattern; /* as registered */
  int nseg;
  char *seg[ROUTE_MAX_SEGS]; /* literal text, or the name of a param */
  bool param[ROUTE_MAX_SEGS];
  http_handler h;
  const http_sink *sink; /* NULL: the body is collected */
  void *ud;
  int flags;
  /* The query parameters the route takes (http_route_query): a NULL-ended
   * list of static strings, or NULL for none; any other name is 400. */
  const char *const *query;
} route_ent;

typedef struct route_table {
  route_ent *v;
  size_t n, cap;
} route_table;

/* The decoded segments of a request path. Owned by the request. */
typedef struct path_segs {
  int n;
  char *seg[ROUTE_MAX_SEGS];
} path_segs;

typedef struct route_match {
  const route_ent *route; /* NULL when nothing matched with this method */
  int path_known;         /* some pattern matched the path (405 then) */
  char allow[ROUTE_ALLOW_MAX];
  int nparam;
  const char *pname[ROUTE_MAX_PARAMS]; /* point into the route table */
  const char *pval[ROUTE_MAX_PARAMS];  /* point into the path_segs */
} route_match;

int route_add(route_table *t, const char *method, const char *pattern,
              http_handler h, const http_sink *sink, void *ud, int flags,
              terr *e);
void route_table_free(route_table *t);
/* Set the query names of the route (method, pattern); T_ENOTFOUND when it
 * was not registered. */
int route_set_query(route_table *t, const char *method, const char *pattern,
                    const char *const *names, terr *e);
/* The first query name of r that its route does not take, or NULL. */
struct http_hdrs;
const char *route_query_unknown(const route_ent *rt,
                                const struct http_hdrs *query);
/* Split the raw (still %-encoded) path into decoded segments. "/" is zero
 * segments. Errors (T_EINVAL): bad %-escape, %00, too many segments. */
int route_split(const char *raw, path_segs *out, terr *e);
void path_segs_free(path_segs *p);
/* Find the route for method + path; HEAD also matches GET routes. */
void route_find(const route_table *t, const char *method, const path_segs *p,
                route_match *m);

/* ---- auth (auth.c) ----------------------------------------------------- */
#define AUTH_NAME_MAX 64
#define AUTH_TOKEN_MAX 512
#define AUTH_TOKEN_MIN 16 /* shorter tokens are refused at start */

typedef struct auth_entry {
  char name[AUTH_NAME_MAX + 1];
  unsigned char digest[32]; /* SHA-256 of the token */
} auth_entry;

typedef struct auth_table {
  auth_entry *v;
  size_t n;
} auth_table;

/* Load "name:token" lines; T_EINVAL naming the file and line on junk. */
int auth_load(const char *path, auth_table *t, terr *e);
void auth_free(auth_table *t);
/* Check an Authorization header value. On success copies the token's name
 * into name[AUTH_NAME_MAX + 1] and returns 1; 0 otherwise. Takes the same
 * time whatever the token and whichever entry matches. */
int auth_check(const auth_table *t, const char *authorization, char *name);

/* ---- the deadline thread (timer.c) ------------------------------------- */
typedef struct http_timer http_timer;
int timer_create_thread(http_timer **out, terr *e);
/* Stop the thread; entries still queued are dropped (their refs too). */
void timer_destroy(http_timer *t);
/* Arm r's deadline (monotonic ms); takes a ref on r. Re-arming replaces. */
void timer_arm(http_timer *t, http_req *r, double deadline_ms);
/* Disarm r if armed. Returns 1 when it was: the caller then owns the
 * timer's reference and must http_req_unref it (after letting go of r->mu).
 * Safe from any thread. */
int timer_disarm(http_timer *t, http_req *r);

/* ---- the server -------------------------------------------------------- */
/* conns.c: the open connections (see there). */
typedef struct conn_ent conn_ent;
typedef struct conn_table {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  conn_ent *head; /* under mu */
  int64_t n;      /* under mu */
  int64_t cut;    /* connections the reaper closed (atomic) */
  int header_timeout_s, body_grace_s;
  int64_t min_body_rate, per_ip_limit, max_conns;
  pthread_t thread;
  int running, stop;
} conn_table;

struct http_server {
  http_config cfg;
  conn_table conns;
  char *listen, *web_dir_real; /* owned copies */
  char *tls_cert, *tls_key;     /* PEM text (NULL: plain HTTP); owned, the
                                   key wiped before it is freed */
  route_table routes;
  auth_table auth;
  int have_auth;
  struct MHD_Daemon *d;
  int port;
  int quiesced_fd; /* the listening socket MHD_quiesce_daemon handed back,
                      shut but open until MHD_stop_daemon; -1 */
  http_timer *timer;
  atomic_int quiescing; /* new requests get 503 */
  atomic_int stopping;  /* destroy runs: no handler may start */
  atomic_int active;    /* handlers running (dispatch to post-handler) */
  atomic_int big_active; /* of those, handling a body over BIG_BODY */
  pthread_mutex_t mu;   /* guards deferred */
  http_req *deferred;   /* suspended requests (list through dnext/dprev) */
  pthread_mutex_t stats_mu;     /* guards the stats below (stats.c) */
  http_stat *stats;
  size_t nstats, capstats;
  http_stat stats_overflow;     /* past HTTP_STATS_MAX series */
};

/* ---- request statistics (stats.c) ---------------------------------------- */
/* Count r's answer (status; 0 or out of range: never answered, skipped)
 * that took `seconds` from its header block to the end. */
void http_stats_observe(http_server *s, const http_req *r, int status,
                        double seconds);

/* Request states (http_req.state, under mu). */
enum {
  REQ_READING,   /* headers seen, body being read */
  REQ_EARLY,     /* answered before the body was read */
  REQ_HELD,      /* answered from the headers, no body: queued next call */
  REQ_HANDLING,  /* the handler runs on an MHD thread */
  REQ_SUSPENDED, /* handler returned, no answer yet: connection suspended */
  REQ_RESUMING,  /* answer stored, MHD_resume_connection called */
  REQ_CALLING,   /* http_resume_call: resumed, call_fn to run on MHD's
                    thread to build the answer */
  REQ_QUEUED,    /* the response is queued on the connection */
  REQ_DONE,      /* MHD completed the request; conn is gone */
};

typedef struct http_kv {
  char *k, *v;
} http_kv;

typedef struct http_hdrs {
  http_kv *v;
  size_t n, cap;
} http_hdrs;

struct http_req {
  atomic_int refs;
  atomic_int claimed;
  pthread_mutex_t mu;
  http_server *srv; /* until REQ_DONE */
  struct MHD_Connection *conn;
  int state;
  int deferred; /* http_defer was called */
  http_handler call_fn; /* http_resume_call's, until called */
  void *call_ud;
  http_timeout_fn on_timeout;
  void *timeout_arg;
  long timer_idx; /* heap slot, -1 when not armed (under the timer's mu) */
  double deadline_ms;

  /* The request, copied out of MHD so that it stays readable from any
   * thread until the request is freed. */
  char *method, *path; /* path without the query, still %-encoded */
  path_segs segs;
  route_match match;
  int routed; /* no route matched: looked up as a static file (stats.c) */
  char *pname_own[ROUTE_MAX_PARAMS]; /* copies of match.pname */
  http_hdrs headers, query;
  int bad_query; /* a query argument had a bad %-escape */
  char rid[72];
  char owner[AUTH_NAME_MAX + 1];
  double t0;

  /* The body. */
  char *body;
  size_t body_len, body_cap;
  uint64_t body_limit;
  int64_t xfer_held; /* body bytes reserved in the transfer budget
                        (util/xfer.h), given back by req_free */
  const http_sink *sink; /* the route's, while sink_st is open */
  void *sink_st;         /* closed by req_free */
  uint64_t streamed;     /* body bytes handed to the sink */
  int64_t declared;      /* Content-Length; -1 when none or chunked */
  int has_body;    /* Content-Length > 0 or Transfer-Encoding */
  int body_coming; /* ... and it arrives unasked (no Expect: 100-continue) */

  /* The answer. */
  http_hdrs out_headers;          /* from http_add_header, until replied */
  struct MHD_Response *resp;      /* stored, not yet queued */
  int status;                     /* 0 until answered */
  int answered;                   /* a response was stored (or queued) */
  _Atomic uint64_t bytes_out;     /* body bytes (streams: produced so far) */
  enum MHD_RequestTerminationCode term;
  int raw_sent;        /* a 413 went out on the socket itself (http.c) */
  uint64_t discarded;  /* body bytes dropped after that */

  http_req *dnext, *dprev; /* in srv->deferred (under srv->mu) */
};

/* http.c: MHD's access handler and completion callback. */
enum MHD_Result http_on_access(void *cls, struct MHD_Connection *c,
                               const char *url, const char *method,
                               const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe);

/* request.c */
http_req *req_new(http_server *s, struct MHD_Connection *c, const char *url,
                  const char *method);
int hdrs_add(http_hdrs *h, const char *k, const char *v);
void hdrs_free(http_hdrs *h);
const char *hdrs_get(const http_hdrs *h, const char *k, int icase);
/* Percent-decode s in place ('+' is left alone); -1 on a bad escape or %00. */
int url_decode_inplace(char *s);

/* reply.c */
/* Take r's pending http_resume_call function (NULL when none). [r->mu] */
static inline http_handler req_take_call(http_req *r, void **ud) {
  http_handler fn = r->call_fn;
  *ud = r->call_ud;
  r->call_fn = NULL;
  r->call_ud = NULL;
  return fn;
}
/* Build the response for an error and store it on r (as http_reply_error). */
void reply_error(http_req *r, terr_code code, const char *field, int64_t pos,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The JSON error document of e (as http_reply_error sends it), malloc()ed;
 * *status gets its HTTP status. NULL when out of memory. Logs 500s. */
char *reply_error_body(http_req *r, const terr *e, int *status);
/* Store resp (taken) as the answer of r, with X-Request-Id, the headers of
 * http_add_header and "Connection: close" when quiescing, and hand it to
 * the connection when it is suspended. A second answer is dropped. */
void reply_store(http_req *r, int status, struct MHD_Response *resp);

/* static.c */
/* Answer r with a static file (T_OK), or fill e with why not (400, 404,
 * 405 with an Allow header added to r) and leave the answer to the caller. */
int static_serve(http_req *r, terr *e);

/* guard.c: header-only refusals, called first by req_begin. T_OK, or the
 * error to answer (framing and Host errors also set "Connection: close").
 * *preflight 1: a CORS preflight from an allowed origin, to answer 204. */
int guard_check(http_server *s, http_req *r, const char *version,
                int *preflight, terr *e);
/* For an HTTP_JSON route: 415 unless the request is application/json (or
 * has neither body nor Content-Type). */
int guard_content_type(const http_req *r, terr *e);
int guard_listens_on_loopback(const char *listen);

/* conns.c. notify is MHD's NOTIFY_CONNECTION callback (cls: the server).
 * conns_begin: the request's headers are complete (T_EUNAVAIL when its
 * address holds more than per_ip_limit connections); conns_body: n body
 * bytes arrived; conns_handled: the body is in, no deadline applies;
 * conns_end: the request is over, the next one's header deadline starts.
 * start/stop: the reaper thread (start also sizes max_conns to
 * RLIMIT_NOFILE). */
void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                  enum MHD_ConnectionNotificationCode toe);
int conns_begin(http_server *s, struct MHD_Connection *c, int has_body, terr *e);
void conns_body(struct MHD_Connection *c, size_t n);
void conns_handled(http_server *s, struct MHD_Connection *c);
void conns_end(http_server *s, struct MHD_Connection *c);
int conns_start(http_server *s, terr *e);
void conns_stop(http_server *s);
int64_t conns_cut_count(const http_server *s);
/* MHD's URI log callback (cls: the server): a request line arrived on c,
 * so its TLS handshake (if any) is over. Returns NULL. c's thread. */
void *conns_uri_seen(void *cls, const char *uri, struct MHD_Connection *c);
/* Write msg on c (through its TLS session under HTTPS, in clear otherwise)
 * and close the write side (TLS: close_notify first): 0, or -1 when msg
 * could not be written whole. On c's own MHD thread only. */
int conns_write_close(http_server *s, struct MHD_Connection *c,
                      const char *msg, size_t len);
/* MHD has just logged that it refuses the Content-Length of the request
 * whose headers this thread is parsing: answer it first (see conns.c).
 * MHD's logger only. */
void conns_refuse_content_length(http_server *s, int too_large);
/* The client address of c as text ("-" when unknown); valid until c
 * closes. MHD threads. */
const char *conns_client_ip(struct MHD_Connection *c);

#endif
