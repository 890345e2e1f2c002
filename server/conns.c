/* conns.c — every open connection, its deadline, and its address's share.
 *
 * libmicrohttpd 0.9.75 has one timeout, an idle one that every received
 * byte resets, and a per-address connection limit that closes what is over
 * it without a word. So a client trickling one header byte every few
 * seconds holds a connection forever, a few hundred of them starve
 * everyone behind the same address (a proxy, Docker's userland proxy),
 * and a burst of short requests is partly reset. This file replaces both:
 *
 *  - Deadlines. A connection's first request must have sent its whole
 *    header block within header_timeout of the connect; a later request on
 *    a kept-alive connection within conn_timeout (the idle timeout) of the
 *    previous request's end. While a body is read it must arrive at
 *    min_body_rate bytes/s on average once body_grace has passed. Once the
 *    request is handled (answered, suspended for ?wait, streaming its
 *    answer) no deadline applies: MHD's idle timeout does.
 *  - A reaper thread looks every 250 ms and calls shutdown(fd, SHUT_RDWR)
 *    on a connection past its deadline: MHD then sees EOF and closes it as
 *    it closes any other. This is safe because MHD calls the CLOSED
 *    notification (which removes the entry under `mu`) before it closes
 *    the socket, on every path (read in MHD 0.9.75's connection close,
 *    cleanup and thread-exit code): the reaper, holding `mu`, only ever
 *    sees open descriptors.
 *    Before the shutdown the reaper writes a 408 (JSON) on the socket, which
 *    MHD has written nothing on yet in those two phases, so the client
 *    learns why — except on a kept-alive connection waiting for its next
 *    request (idle since the last answer): that one is closed without a
 *    word, as RFC 9112 9.8 expects of a server closing an idle persistent
 *    connection, because a client sending its next request at that moment
 *    would read the 408 as that request's answer (bench_e2e did, after its
 *    peers ran for a minute).
 *    Under TLS the 408 goes through the connection's GnuTLS session
 *    (gnutls_record_send, then gnutls_bye(GNUTLS_SHUT_WR): the client reads
 *    the 408 and a close_notify), never in clear into the session (it did:
 *    a TLS client read garbage). GnuTLS lets one thread send while another
 *    receives on a session once the handshake is over, and MHD only
 *    receives in the phases the reaper cuts. The handshake is known to be
 *    over once MHD has parsed a request line on the connection (MHD's URI
 *    log callback, conns_uri_seen, on the connection's own thread): a TLS
 *    connection that has not sent one (still in its handshake, or silent
 *    after it) is closed without a word, as no TLS record can be written
 *    safely into a handshake that another thread runs.
 *  - Answers written on the socket by http.c (req_raw_error) go through
 *    conns_write_close, which uses the session the same way (there on the
 *    connection's own thread), under `mu` as the reaper writes, so that
 *    the two never send on one session at once; a connection answered that
 *    way gets no 408 after it when the reaper cuts its drain.
 *  - A malformed Content-Length ("-1", "+5", "0x10", or more than 64 bits)
 *    never reaches http.c: MHD 0.9.75 refuses it while it parses the
 *    headers, with an HTML answer whose header block it sends twice (its
 *    error path queues the answer, then its state machine starts the reply
 *    again). It logs why just before (mhd_logger, daemon.c, calls
 *    conns_refuse_content_length on that same thread), so Tessel answers
 *    first: the one connection of this thread whose header block is
 *    complete, whose request http.c has not seen and which has no answer
 *    queued is the one being refused (MHD handles one connection at a time
 *    per thread); it gets one JSON 400 (413 when too large) naming
 *    Content-Length and its write side closed, so MHD's doubled answer
 *    finds a closed socket and MHD closes the connection. When that
 *    connection cannot be told apart (never seen), or MHD's message
 *    differs (a newer MHD, which answers once), MHD's own answer stands.
 *  - Shares. MHD's per-address limit is not used. When a request's headers
 *    are complete, it is answered 503 with Retry-After (and closed), never
 *    dropped, if its address already has per_ip_limit requests in
 *    progress (body being read, or being handled), or holds half of
 *    max_conns connections in any phase. The whole server takes up to
 *    max_conns connections (MHD's CONNECTION_LIMIT, RLIMIT_NOFILE raised to
 *    fit), so one address can never take every slot: the rest stay for
 *    other clients; connections still sending headers count there too and
 *    are bounded by the header deadline.
 *
 * Threads: notify runs on MHD's threads (STARTED on the one that accepts,
 * CLOSED on the owner); conns_begin/body/handled/end on the connection's
 * worker; the reaper on its own thread. All state is under s->conns.mu;
 * entries are freed only by the CLOSED notification.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "server/http_int.h"
#include "util/tassert.h"

enum { PH_HEADERS, PH_BODY, PH_HANDLED };

/* The 408 the reaper writes before it cuts a connection (made once). */
static const char timeout_body[] =
    "{\"error\":{\"code\":\"deadline_exceeded\",\"message\":\"the request was "
    "not received in time (--header-timeout, --min-body-rate)\"}}";
static char timeout_msg[512];
static size_t timeout_len;

struct conn_ent {
  conn_ent *next, *prev;
  int fd;
  char ip[INET6_ADDRSTRLEN];
  int phase;
  double deadline_ms; /* PH_HEADERS: the header block's deadline */
  double body_t0;     /* PH_BODY: when the body began */
  uint64_t body_bytes;
  int cut;            /* the reaper shut it down */
  int kept;           /* a request was answered on it: idle between two */
  struct MHD_Connection *conn;
  pthread_t owner;    /* the MHD thread that accepted it (and serves it) */
  int answered;       /* an answer was written on the socket itself
                         (conns_write_close): the reaper adds nothing */
  gnutls_session_t tls; /* MHD's session under HTTPS, else NULL */
  int tls_up;         /* a request line arrived: the handshake is over
                         (atomic: set on MHD's thread, read by the reaper) */
};

static void addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  out[0] = 0;
  if (!sa) return;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
              (socklen_t)cap);
}

void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                  enum MHD_ConnectionNotificationCode toe) {
  http_server *s = cls;
  conn_table *t = &s->conns;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    conn_ent *e = calloc(1, sizeof *e);
    *socket_context = e;
    if (!e) return; /* untracked: MHD's idle timeout still applies */
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    e->fd = fi ? fi->connect_fd : -1;
    e->conn = c;
    e->owner = pthread_self();
    if (s->tls_cert) {
      const union MHD_ConnectionInfo *ti =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
      e->tls = ti ? (gnutls_session_t)ti->tls_session : NULL;
      if (!e->tls) e->fd = -1; /* cannot answer in TLS: never cut */
    }
    addr_text(ai ? ai->client_addr : NULL, e->ip, sizeof e->ip);
    e->phase = PH_HEADERS;
    e->deadline_ms = t_now_ms() + 1000.0 * t->header_timeout_s;
    pthread_mutex_lock(&t->mu);
    e->next = t->head;
    if (t->head) t->head->prev = e;
    t->head = e;
    t->n++;
    pthread_mutex_unlock(&t->mu);
  } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    conn_ent *e = *socket_context;
    *socket_context = NULL;
    if (!e) return;
    pthread_mutex_lock(&t->mu);
    if (e->prev) e->prev->next = e->next;
    else t->head = e->next;
    if (e->next) e->next->prev = e->prev;
    t->n--;
    pthread_mutex_unlock(&t->mu);
    free(e);
  }
}

static conn_ent *ent_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *i =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return i ? (conn_ent *)i->socket_context : NULL;
}

void *conns_uri_seen(void *cls, const char *uri, struct MHD_Connection *c) {
  (void)cls;
  (void)uri;
  conn_ent *e = ent_of(c);
  if (e) __atomic_store_n(&e->tls_up, 1, __ATOMIC_RELEASE);
  return NULL; /* MHD's client_context: http_on_access makes the request */
}

/* Write all of msg through the session (TLS) or the socket: 0, or -1 when
 * it could not (a full send buffer, a peer gone). */
static int write_all(gnutls_session_t tls, int fd, const char *msg,
                     size_t len) {
  size_t sent = 0;
  while (sent < len) {
    ssize_t w = tls ? gnutls_record_send(tls, msg + sent, len - sent)
                    : send(fd, msg + sent, len - sent,
                           MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w <= 0) return -1;
    sent += (size_t)w;
  }
  return 0;
}

/* conns_write_close with t->mu held (e: c's entry, or NULL). Under mu so
 * that the reaper, which writes under mu too, never writes into the same
 * session at the same time (two senders on one GnuTLS session are not
 * allowed), and never adds its 408 after this answer. */
static int write_close_locked(conn_ent *e, struct MHD_Connection *c,
                              const char *msg, size_t len) {
  if (e && (e->cut || e->answered)) return -1; /* already said, or cut */
  const union MHD_ConnectionInfo *fi =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  const union MHD_ConnectionInfo *ti =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  gnutls_session_t tls = ti ? (gnutls_session_t)ti->tls_session : NULL;
  if (e) e->answered = 1;
  if (!fi || write_all(tls, fi->connect_fd, msg, len)) return -1;
  if (tls) gnutls_bye(tls, GNUTLS_SHUT_WR); /* close_notify */
  shutdown(fi->connect_fd, SHUT_WR);
  return 0;
}

int conns_write_close(http_server *s, struct MHD_Connection *c,
                      const char *msg, size_t len) {
  pthread_mutex_lock(&s->conns.mu);
  int rc = write_close_locked(ent_of(c), c, msg, len);
  pthread_mutex_unlock(&s->conns.mu);
  return rc;
}

/* The reaper's 408 on e (see the file's opening): in clear on a plain
 * connection, through the session on a TLS one whose handshake is over,
 * nothing on a TLS one still in (or silent since) its handshake. */
static void say_timeout(conn_ent *e) {
  int rc = 0;
  if (!e->tls)
    rc = write_all(NULL, e->fd, timeout_msg, timeout_len);
  else if (__atomic_load_n(&e->tls_up, __ATOMIC_ACQUIRE) &&
           (rc = write_all(e->tls, -1, timeout_msg, timeout_len)) == 0)
    gnutls_bye(e->tls, GNUTLS_SHUT_WR);
  if (rc) log_debug("http: the 408 could not be written to %s", e->ip);
}

/* Copy v into out as JSON string content, or "" when it holds a byte that
 * would need escaping (then the message leaves the value out). */
static void json_safe(const char *v, char *out, size_t cap) {
  T_ASSERT(out && cap > 0); /* room for the terminator at least */
  size_t i = 0;
  for (; v && v[i] && i + 1 < cap; i++) {
    unsigned char ch = (unsigned char)v[i];
    if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
      i = 0;
      break;
    }
    out[i] = (char)ch;
  }
  out[i] = 0;
}

void conns_refuse_content_length(http_server *s, int too_large) {
  conn_table *t = &s->conns;
  pthread_t self = pthread_self();
  conn_ent *hit = NULL;
  int n = 0;
  pthread_mutex_lock(&t->mu);
  for (conn_ent *e = t->head; e; e = e->next) {
    if (!e->conn || e->cut || e->answered || e->phase != PH_HEADERS ||
        !pthread_equal(e->owner, self))
      continue;
    if (!MHD_get_connection_info(e->conn,
                                 MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE) ||
        MHD_get_connection_info(e->conn, MHD_CONNECTION_INFO_HTTP_STATUS))
      continue; /* headers still coming, or closed, or answered already */
    hit = e;
    n++;
  }
  if (n == 1) {
    char v[48], body[256], msg[512];
    json_safe(MHD_lookup_connection_value(hit->conn, MHD_HEADER_KIND,
                                          "Content-Length"),
              v, sizeof v);
    int bl = snprintf(
        body, sizeof body,
        "{\"error\":{\"code\":\"%s\",\"message\":\"Content-Length%s%s%s %s\","
        "\"field\":\"Content-Length\"}}",
        too_large ? "payload_too_large" : "invalid_argument", v[0] ? " '" : "",
        v, v[0] ? "'" : "",
        too_large ? "is too large" : "is not a byte count (decimal digits only)");
    int ml = snprintf(msg, sizeof msg,
                      "HTTP/1.1 %s\r\nContent-Type: application/json; "
                      "charset=utf-8\r\nConnection: close\r\n"
                      "Content-Length: %d\r\n\r\n%s",
                      too_large ? "413 Content Too Large" : "400 Bad Request",
                      bl, body);
    if (bl > 0 && ml > 0 && (size_t)ml < sizeof msg &&
        write_close_locked(hit, hit->conn, msg, (size_t)ml) == 0)
      log_info("http: refused a malformed Content-Length from %s", hit->ip);
  }
  pthread_mutex_unlock(&t->mu);
}

const char *conns_client_ip(struct MHD_Connection *c) {
  conn_ent *e = c ? ent_of(c) : NULL;
  return e && e->ip[0] ? e->ip : "-";
}

int conns_begin(http_server *s, struct MHD_Connection *c, int has_body,
                terr *err) {
  conn_table *t = &s->conns;
  conn_ent *e = ent_of(c);
  if (!e) return T_OK;
  int64_t busy = 0, all = 0;
  pthread_mutex_lock(&t->mu);
  for (conn_ent *p = t->head; p; p = p->next) {
    if (p == e || strcmp(p->ip, e->ip) != 0) continue;
    all++;
    if (p->phase != PH_HEADERS) busy++;
  }
  e->phase = has_body ? PH_BODY : PH_HANDLED;
  e->body_t0 = t_now_ms();
  e->body_bytes = 0;
  pthread_mutex_unlock(&t->mu);
  if (t->per_ip_limit > 0 && busy >= t->per_ip_limit)
    return terr_set(err, T_EUNAVAIL, "", -1,
                    "%lld requests from %s are in progress, the most one "
                    "address may have (--per-ip-limit): retry later",
                    (long long)busy, e->ip);
  if (all >= t->max_conns / 2)
    return terr_set(err, T_EUNAVAIL, "", -1,
                    "%s holds %lld connections, half of what the server "
                    "takes (--max-connections): retry later",
                    e->ip, (long long)all);
  return T_OK;
}

void conns_body(struct MHD_Connection *c, size_t n) {
  conn_ent *e = ent_of(c);
  if (e) __atomic_add_fetch(&e->body_bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

void conns_handled(http_server *s, struct MHD_Connection *c) {
  conn_ent *e = ent_of(c);
  if (!e) return;
  pthread_mutex_lock(&s->conns.mu);
  e->phase = PH_HANDLED;
  pthread_mutex_unlock(&s->conns.mu);
}

void conns_end(http_server *s, struct MHD_Connection *c) {
  conn_ent *e = c ? ent_of(c) : NULL;
  if (!e) return;
  pthread_mutex_lock(&s->conns.mu);
  e->phase = PH_HEADERS; /* the next request on a kept-alive connection */
  e->kept = 1;
  e->deadline_ms = t_now_ms() + 1000.0 * s->cfg.conn_timeout_s;
  pthread_mutex_unlock(&s->conns.mu);
}

/* Is e past its deadline at `now`? Under mu. */
static int overdue(const conn_table *t, const conn_ent *e, double now) {
  if (e->phase == PH_HEADERS) return now > e->deadline_ms;
  if (e->phase != PH_BODY || t->min_body_rate <= 0) return 0;
  double secs = (now - e->body_t0) / 1000.0;
  if (secs < t->body_grace_s) return 0;
  uint64_t got = __atomic_load_n(&e->body_bytes, __ATOMIC_RELAXED);
  return (double)got < secs * (double)t->min_body_rate;
}

static void *reaper(void *arg) {
  http_server *s = arg;
  conn_table *t = &s->conns;
  pthread_mutex_lock(&t->mu);
  while (!t->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 250 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    double now = t_now_ms();
    for (conn_ent *e = t->head; e && !t->stop; e = e->next) {
      if (e->cut || e->fd < 0 || !overdue(t, e, now)) continue;
      e->cut = 1;
      __atomic_add_fetch(&t->cut, 1, __ATOMIC_RELAXED);
      int idle = e->phase == PH_HEADERS && e->kept; /* closed silently */
      if (!idle && !e->answered) say_timeout(e);
      shutdown(e->fd, SHUT_RDWR); /* open: see the file's opening */
      log_info("http: closed a connection from %s: %s", e->ip,
               idle ? "idle since its last answer (--conn-timeout)"
               : e->phase == PH_HEADERS ? "its request headers missed the deadline"
                                        : "its body came in below the minimum rate");
    }
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

int conns_start(http_server *s, terr *err) {
  conn_table *t = &s->conns;
  timeout_len = (size_t)snprintf(
      timeout_msg, sizeof timeout_msg,
      "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json; "
      "charset=utf-8\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
      sizeof timeout_body - 1, timeout_body);
  t->header_timeout_s = s->cfg.header_timeout_s > 0 ? s->cfg.header_timeout_s : 10;
  t->min_body_rate = s->cfg.min_body_rate;
  t->body_grace_s = 10;
  t->per_ip_limit = s->cfg.per_ip_limit;
  /* Room for max_conns sockets beside the store's and results' files. */
  struct rlimit rl;
  int64_t want = s->cfg.max_conns > 0 ? s->cfg.max_conns : 4096;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rlim_t need = (rlim_t)want + 512;
    if (rl.rlim_cur < need) {
      rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
    if ((int64_t)rl.rlim_cur - 512 < want) want = (int64_t)rl.rlim_cur - 512;
  }
  if (want < 16) want = 16;
  t->max_conns = want;
  if (pthread_create(&t->thread, NULL, reaper, s) != 0)
    return terr_set(err, T_EINTERNAL, "", -1, "cannot start the connection reaper");
  t->running = 1;
  return T_OK;
}

void conns_stop(http_server *s) {
  conn_table *t = &s->conns;
  if (!t->running) return;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  t->running = 0;
}

int64_t conns_cut_count(const http_server *s) {
  return __atomic_load_n(&s->conns.cut, __ATOMIC_RELAXED);
}
