/* daemon.c — the server object and libmicrohttpd's daemon.
 *
 * The server runs libmicrohttpd with the flags
 *   MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME (implies
 *   MHD_USE_ITC, which MHD_quiesce_daemon needs) | MHD_USE_ERROR_LOG
 *   (| MHD_USE_IPv6, or MHD_USE_DUAL_STACK for "::")
 * and the options EXTERNAL_LOGGER (first, so MHD's messages all go to
 * t_log), THREAD_POOL_SIZE (cfg.threads epoll workers, each owning its
 * connections; left out for one thread), CONNECTION_TIMEOUT,
 * CONNECTION_LIMIT and NOTIFY_CONNECTION (conns.c: deadlines and per-address
 * shares), CONNECTION_MEMORY_LIMIT (conn_memory, 256 KiB: request line,
 * headers and the read buffer a body is read through; see below),
 * SOCK_ADDR (cfg.listen through inet_pton or getaddrinfo;
 * port 0 picks a free port, read back with MHD_DAEMON_INFO_BIND_PORT;
 * no LISTENING_ADDRESS_REUSE, so the socket has SO_REUSEADDR and never
 * SO_REUSEPORT: a port in use by another listener is refused),
 * UNESCAPE_CALLBACK (identity: the path reaches
 * us still %-encoded so that route.c can split it before decoding) and
 * NOTIFY_COMPLETED (http.c), URI_LOG_CALLBACK (conns.c: a request line
 * arrived, so a TLS handshake is over).
 *
 * HTTPS (--tls-cert/--tls-key): libmicrohttpd's own TLS through GnuTLS
 * (MHD_USE_TLS with HTTPS_MEM_CERT/HTTPS_MEM_KEY; the PEM files are read
 * once at create, at most 1 MiB each, and the key's copy is wiped when the
 * server is destroyed). The certificate's dates are read at start
 * (tls_check_dates): an expired or not yet valid one, which every client
 * refuses, is a warning naming its dates, as is one that expires within
 * 14 days; a certificate GnuTLS cannot parse stops the start.
 * Everything above the socket is unchanged: the
 * same routes, limits and deadlines. Downloads lose sendfile (the bytes
 * are encrypted in user space), which a reverse proxy terminating TLS
 * keeps (README: when to use which). A plain-HTTP request to the TLS port
 * fails its handshake and is closed by MHD.
 *
 * Why 256 KiB of connection memory (issue 25): MHD reads a body in pieces
 * of about half of it, and every piece is one recv, one sink call and one
 * write into the upload's file. With 64 KiB (32 KiB pieces) `curl -T` of
 * 1 GiB into POST /v1/arrays ran at 0.59-0.63x the same curl into a plain
 * C sink on the 2-core VM (loaded by other builds); with 256 KiB and the
 * pieces written straight into the file (compute/array/wbehind.h:
 * wbehind_worth) 1.1-1.5x in the same runs (tests/bench/bench_upload.py,
 * results in tests/bench/results/upload-2core-2026-11-28.md). What it
 * costs every request (measured 2026-11-29, results/sync-2core-2026-11-29b.md):
 * MHD 0.9.75 claims half the pool as the read buffer, zeroes what it gives
 * back when the answer is built (MHD_pool_reallocate) and zeroes the whole
 * pool again before the next request of a kept-alive connection
 * (MHD_pool_reset) — ~390 KiB of memset per request at 256 KiB, 60 % of
 * the daemon's instructions for a tiny `?wait` job under callgrind (~13 us
 * on the 2-core VM), and every kept-alive connection's whole pool is
 * resident after its first request. TESSEL_CONN_MEMORY_KB (16 to 4096, in
 * the daemon's environment) sets the pool for an A/B of uploads against
 * small requests; 256 unless set.
 *
 * poll, not epoll: MHD 0.9.75's MHD_quiesce_daemon races an epoll worker
 * that removes the listening socket from its set at the same moment, and
 * the loser panics ("Failed to remove listen FD from epoll set": the
 * daemon aborted on SIGTERM in test_disk_full, about 1 run in 7 here; the
 * defect is still open upstream). poll rebuilds its set every round, so a
 * quiesce is only a flag there. Measured with bench_service (2 cores, tiny
 * jobs, same run): poll 2554-2670 / 5860-6084 / 7957-8364 jobs/s at
 * 1 / 8 / 64 connections against epoll's 2615-2936 / 6115-6328 /
 * 8488-9494, a few percent, for at most --max-connections sockets spread
 * over the pool's threads.
 *
 * Shutdown: http_server_quiesce shuts the listening socket and makes
 * every new request a 503 with "Connection: close". http_server_destroy
 * then answers every suspended request 503 (claiming it, or overruling
 * after a grace second a claim holder that does not answer), waits (at
 * most 3 s) for those answers to be sent and for running handlers to
 * return, and only then calls MHD_stop_daemon, which would abort on a
 * connection still suspended.
 *
 * Threads: create / route / start / quiesce / destroy from one thread
 * (the daemon's owner); http_port from any.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gnutls/x509.h>
#include <time.h>

#include "server/http_int.h"
#include "util/vec.h"
#include "util/tassert.h"

#define MIB (1024 * 1024)

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  /* MHD 0.9.75's words, logged just before it answers a malformed
   * Content-Length with its header block twice: conns.c answers first. */
  if (strstr(buf, "Failed to parse `Content-Length' header"))
    conns_refuse_content_length(cls, 0);
  else if (strstr(buf, "Too large value of 'Content-Length' header"))
    conns_refuse_content_length(cls, 1);
  size_t n = strlen(buf);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
  /* A client that goes away, or a connection we close on purpose after
   * answering on the socket (req_raw_error, a malformed Content-Length),
   * or a request MHD refuses (a client's error, in its access line), is
   * no news. */
  if (strstr(buf, "closing connection") || strstr(buf, "connection closure") ||
      strstr(buf, "Connection reset") || strstr(buf, "Broken pipe") ||
      strstr(buf, "no longer available for sending") ||
      strstr(buf, "Content-Length' header") ||
      strstr(buf, "Error processing request (HTTP response code is"))
    log_debug("mhd: %s", buf);
  else
    log_warn("mhd: %s", buf);
}

/* Leave the path %-encoded (route.c decodes per segment, request.c the
 * query arguments). MHD has already turned '+' into ' ' in arguments. */
static size_t mhd_unescape_none(void *cls, struct MHD_Connection *c,
                                char *s) {
  return strlen(s);
}

/* A PEM file for TLS into *out (at most 1 MiB, must hold a PEM block). */
static int read_pem(const char *path, const char *field, char **out, terr *e) {
  size_t len;
  int err = t_read_file(path, MIB, out, &len);
  if (err)
    return terr_set(e, T_EINVAL, field, -1, "cannot read %s: %s", path,
                    err == EFBIG ? "larger than 1 MiB" : strerror(err));
  if (!strstr(*out, "-----BEGIN ")) {
    free(*out);
    *out = NULL;
    return terr_set(e, T_EINVAL, field, -1, "%s is not a PEM file", path);
  }
  return T_OK;
}

static void utc_text(time_t t, char *out, size_t cap) {
  T_ASSERT(out && cap >= sizeof "YYYY-MM-DDTHH:MM:SSZ"); /* fits a date */
  struct tm tm;
  if (t == (time_t)-1 || !gmtime_r(&t, &tm) ||
      !strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, cap, "(unknown)");
}

/* Warn about the first certificate of the PEM chain when clients will
 * refuse it (expired, not yet valid) or soon will (within 14 days). A PEM
 * block GnuTLS cannot read as a certificate is T_EINVAL naming tls-cert. */
static int tls_check_dates(const char *pem, const char *path, terr *e) {
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0)
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
  int g = gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM);
  if (g < 0) {
    gnutls_x509_crt_deinit(crt);
    return terr_set(e, T_EINVAL, "tls-cert", -1,
                    "%s holds no certificate GnuTLS can read: %s", path,
                    gnutls_strerror(g));
  }
  time_t from = gnutls_x509_crt_get_activation_time(crt);
  time_t until = gnutls_x509_crt_get_expiration_time(crt);
  gnutls_x509_crt_deinit(crt);
  time_t now = time(NULL);
  char f[32], u[32];
  utc_text(from, f, sizeof f);
  utc_text(until, u, sizeof u);
  if (until != (time_t)-1 && until < now)
    log_warn("tls: the certificate %s EXPIRED on %s (valid %s to %s): "
             "clients will refuse it; renew it",
             path, u, f, u);
  else if (from != (time_t)-1 && from > now)
    log_warn("tls: the certificate %s is NOT YET VALID: valid from %s (to "
             "%s); clients will refuse it until then (is the clock right?)",
             path, f, u);
  else if (until != (time_t)-1 && until - now < 14 * 86400)
    log_warn("tls: the certificate %s expires on %s, in less than 14 days",
             path, u);
  return T_OK;
}

int http_server_create(const http_config *cfg, http_server **out, terr *e) {
  *out = NULL;
  http_server *s = calloc(1, sizeof *s);
  if (!s) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  s->quiesced_fd = -1;
  int rc = T_OK;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->stats_mu, NULL);
  pthread_mutex_init(&s->conns.mu, NULL);
  pthread_cond_init(&s->conns.cv, NULL);
  if (cfg) s->cfg = *cfg;
  s->cfg.token_file = s->cfg.web_dir = NULL; /* not kept: see below */
  if (s->cfg.port < 0 || s->cfg.port > 65535) {
    rc = terr_set(e, T_EINVAL, "port", -1, "port %d is not in 0..65535",
                  s->cfg.port);
    goto fail;
  }
  if (s->cfg.threads <= 0) { /* one per core, 4 to 16 (http.h) */
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    s->cfg.threads = nc < 4 ? 4 : nc > 16 ? 16 : (int)nc;
  }
  if (s->cfg.max_body <= 0) s->cfg.max_body = 16 * (int64_t)MIB;
  if (s->cfg.max_upload <= 0) s->cfg.max_upload = 1024 * (int64_t)MIB;
  if (s->cfg.conn_timeout_s <= 0) s->cfg.conn_timeout_s = 60;
  if (s->cfg.per_ip_limit <= 0) s->cfg.per_ip_limit = 256;
  if (s->cfg.header_timeout_s <= 0) s->cfg.header_timeout_s = 10;
  if (s->cfg.max_conns <= 0) s->cfg.max_conns = 4096;
  s->listen = strdup(cfg && cfg->listen ? cfg->listen : "127.0.0.1");
  if (!s->listen) {
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }
  s->cfg.listen = s->listen;
  if (cfg && cfg->token_file) {
    rc = auth_load(cfg->token_file, &s->auth, e);
    if (rc != T_OK) goto fail;
    s->have_auth = 1;
  }
  if (cfg && (!cfg->tls_cert != !cfg->tls_key)) {
    rc = terr_set(e, T_EINVAL, cfg->tls_cert ? "tls-key" : "tls-cert", -1,
                  "--tls-cert and --tls-key go together");
    goto fail;
  }
  if (cfg && cfg->tls_cert) {
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
      rc = terr_set(e, T_EUNAVAIL, "tls-cert", -1,
                    "this libmicrohttpd was built without TLS support");
      goto fail;
    }
    rc = read_pem(cfg->tls_cert, "tls-cert", &s->tls_cert, e);
    if (rc == T_OK) rc = tls_check_dates(s->tls_cert, cfg->tls_cert, e);
    if (rc == T_OK) rc = read_pem(cfg->tls_key, "tls-key", &s->tls_key, e);
    if (rc != T_OK) goto fail;
  }
  s->cfg.tls_cert = s->cfg.tls_key = NULL; /* the paths are not kept */
  if (cfg && cfg->web_dir) {
    s->web_dir_real = realpath(cfg->web_dir, NULL);
    if (!s->web_dir_real) {
      rc = terr_set(e, T_EINVAL, "web_dir", -1, "%s: no such directory",
                    cfg->web_dir);
      goto fail;
    }
  }
  *out = s;
  return T_OK;
fail:
  http_server_destroy(s);
  return rc;
}

int http_route_sink(http_server *s, const char *method, const char *pattern,
                    http_handler h, const http_sink *sink, void *ud,
                    int flags) {
  terr e;
  if (s->d) {
    log_error("http: route %s %s added after start: ignored", method, pattern);
    return T_ECONFLICT;
  }
  int rc = route_add(&s->routes, method, pattern, h, sink, ud, flags, &e);
  if (rc != T_OK) log_error("http: route refused: %s", e.message);
  return rc;
}

int http_route(http_server *s, const char *method, const char *pattern,
               http_handler h, void *ud, int flags) {
  return http_route_sink(s, method, pattern, h, NULL, ud, flags);
}

int http_route_query(http_server *s, const char *method, const char *pattern,
                     const char *const *names) {
  terr e;
  if (s->d) return T_ECONFLICT;
  int rc = route_set_query(&s->routes, method, pattern, names, &e);
  if (rc != T_OK) log_error("http: %s", e.message);
  return rc;
}

/* The connection memory (the header comment: why 256 KiB, what it costs
 * a small request); TESSEL_CONN_MEMORY_KB overrides it within 16..4096. */
static size_t conn_memory(void) {
  const char *v = getenv("TESSEL_CONN_MEMORY_KB");
  int64_t kb;
  if (v && t_parse_i64(v, &kb) == 0 && kb >= 16 && kb <= 4096) return (size_t)kb * 1024;
  return 256 * 1024;
}

/* Fill ss from s->listen and the port; sets *v6 (1: IPv6, 2: "::"). */
static int listen_addr(http_server *s, struct sockaddr_storage *ss,
                       socklen_t *len, int *v6, terr *e) {
  memset(ss, 0, sizeof *ss);
  *v6 = 0;
  char host[256];
  const char *h = s->listen;
  size_t hl = strlen(h);
  if (hl >= sizeof host)
    return terr_set(e, T_EINVAL, "listen", -1, "address too long");
  if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') {
    memcpy(host, h + 1, hl - 2);
    host[hl - 2] = 0;
  } else {
    memcpy(host, h, hl + 1);
  }
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)s->cfg.port);
    *len = sizeof *a4;
    return T_OK;
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)s->cfg.port);
    *len = sizeof *a6;
    *v6 = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? 2 : 1;
    return T_OK;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  int g = getaddrinfo(host, NULL, &hints, &res);
  if (g != 0 || !res)
    return terr_set(e, T_EINVAL, "listen", -1, "cannot resolve \"%s\": %s",
                    host, gai_strerror(g));
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  if (res->ai_family == AF_INET6) {
    a6->sin6_port = htons((uint16_t)s->cfg.port);
    *v6 = 1;
  } else {
    a4->sin_port = htons((uint16_t)s->cfg.port);
  }
  freeaddrinfo(res);
  return T_OK;
}

int http_server_start(http_server *s, terr *e) {
  if (s->d) return terr_set(e, T_ECONFLICT, "", -1, "already started");
  struct sockaddr_storage ss;
  socklen_t sl;
  int v6;
  int rc = listen_addr(s, &ss, &sl, &v6, e);
  if (rc != T_OK) return rc;
  if (!s->timer && (rc = timer_create_thread(&s->timer, e)) != T_OK) return rc;
  if (!s->conns.running && (rc = conns_start(s, e)) != T_OK) return rc;
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_ERROR_LOG;
  if (v6 == 2) flags |= MHD_USE_DUAL_STACK;
  else if (v6) flags |= MHD_USE_IPv6;
  if (s->tls_cert) flags |= MHD_USE_TLS;
  /* EXTERNAL_LOGGER first, so that MHD never prints on its own; a pool of
   * one is no pool (MHD warns), the polling thread then serves alone. */
  struct MHD_OptionItem opts[20];
  int no = 0;
#define OPT(o, v, p) opts[no++] = (struct MHD_OptionItem){(o), (intptr_t)(v), (p)}
  OPT(MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_logger, s);
  if (s->cfg.threads > 1)
    OPT(MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.threads, NULL);
  OPT(MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.conn_timeout_s, NULL);
  /* No PER_IP_CONNECTION_LIMIT: it closes without a word; conns.c answers
   * 503 instead, and keeps the deadlines MHD's idle timeout cannot. */
  OPT(MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->conns.max_conns, NULL);
  OPT(MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)conns_notify, s);
  OPT(MHD_OPTION_CONNECTION_MEMORY_LIMIT, conn_memory(), NULL);
  OPT(MHD_OPTION_SOCK_ADDR, 0, &ss);
  /* No LISTENING_ADDRESS_REUSE: 1 there is SO_REUSEPORT, with which a
   * second tesseld bound the same port and took half the connections; 0
   * is not "the default" but drops SO_REUSEADDR too. Left out, MHD sets
   * SO_REUSEADDR alone: a restart binds at once over the old connections'
   * TIME_WAIT, and a live listener keeps its port to itself. */
  OPT(MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)mhd_unescape_none, s);
  OPT(MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)http_on_completed, s);
  OPT(MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)conns_uri_seen, s);
  if (s->tls_cert) {
    OPT(MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert);
    OPT(MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key);
  }
  /* No MHD_OPTION_STRICT_FOR_CLIENT: 0.9.75 answers what it refuses with
   * an HTML page whose header block it sends twice. guard.c refuses the
   * same requests (and more) with one JSON answer. */
  OPT(MHD_OPTION_END, 0, NULL);
#undef OPT
  s->d = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, http_on_access,
                          s, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
  (void)sl;
  if (!s->d && s->tls_cert)
    return terr_set(e, T_EINVAL, "tls-cert", -1,
                    "cannot start HTTPS on %s port %d: the port is in use, or "
                    "the certificate or key is not valid or they do not match "
                    "(the log says which)",
                    s->listen, s->cfg.port);
  if (!s->d)
    return terr_set(e, T_EIO, "listen", -1,
                    "cannot listen on %s port %d (in use, or no such address)",
                    s->listen, s->cfg.port);
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? info->port : s->cfg.port;
  log_info("http: listening on %s port %d (%d threads%s)", s->listen, s->port,
           s->cfg.threads, s->tls_cert ? ", HTTPS" : "");
  return T_OK;
}

int http_port(const http_server *s) { return s ? s->port : 0; }

int http_is_tls(const http_server *s) { return s && s->tls_cert; }

void http_server_quiesce(http_server *s) {
  if (!s || !s->d || atomic_exchange(&s->quiescing, 1)) return;
  /* MHD's threads may still hold the socket until MHD_stop_daemon (its
   * manual: close it only after that), so it is shut, not closed: new
   * connections are refused at once, and the descriptor cannot be reused
   * under a thread that still polls it. */
  MHD_socket fd = MHD_quiesce_daemon(s->d);
  if (fd != MHD_INVALID_SOCKET) {
    shutdown(fd, SHUT_RDWR);
    s->quiesced_fd = fd;
  }
  log_info("http: quiesced: no new connections, new requests get 503");
}

/* Answer every suspended request 503 and wait until they are sent and no
 * handler runs; at most ~3 s. */
static void server_drain(http_server *s) {
  double t0 = t_now_ms();
  http_req **v = NULL;
  size_t cap = 0;
  for (;;) {
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (http_req *r = s->deferred; r; r = r->dnext) {
      if (tvec_grow(&v, &cap, sizeof *v, n + 1, 0)) break;
      http_req_ref(r);
      v[n++] = r;
    }
    pthread_mutex_unlock(&s->mu);
    int busy = atomic_load(&s->active) > 0;
    if (n == 0 && !busy) break;
    double waited = t_now_ms() - t0;
    for (size_t i = 0; i < n; i++) {
      http_req *r = v[i];
      pthread_mutex_lock(&r->mu);
      int answered = r->answered;
      pthread_mutex_unlock(&r->mu);
      /* The claim holder gets a second to answer before being overruled. */
      if (!answered && (http_claim(r) || waited > 1000.0))
        reply_error(r, T_EUNAVAIL, "", -1, "the server is shutting down");
      http_req_unref(r);
    }
    if (waited > 3000.0) {
      log_warn("http: %zu deferred requests still open at shutdown", n);
      break;
    }
    usleep(5000);
  }
  free(v);
}

void http_server_destroy(http_server *s) {
  if (!s) return;
  if (s->d) {
    http_server_quiesce(s);
    atomic_store(&s->stopping, 1);
    server_drain(s);
    MHD_stop_daemon(s->d);
    s->d = NULL;
    if (s->quiesced_fd >= 0) close(s->quiesced_fd);
    s->quiesced_fd = -1;
  }
  conns_stop(s);
  timer_destroy(s->timer);
  route_table_free(&s->routes);
  auth_free(&s->auth);
  free(s->web_dir_real);
  free(s->listen);
  free(s->tls_cert);
  if (s->tls_key) {
    explicit_bzero(s->tls_key, strlen(s->tls_key));
    free(s->tls_key);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->stats_mu);
  free(s->stats);
  pthread_mutex_destroy(&s->conns.mu);
  pthread_cond_destroy(&s->conns.cv);
  free(s);
}


