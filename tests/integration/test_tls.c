/* test_tls.c — HTTPS (--tls-cert/--tls-key) against the real daemon, with
 * libcurl as the client (the test-only certificates in tests/integration/tls:
 * self-signed for localhost, 127.0.0.1 and ::1).
 *
 * Asserts:
 *  - the daemon announces https://, answers /healthz and /v1/info (which
 *    says features.tls) to a client that trusts its certificate, runs a
 *    job with ?wait and serves its result;
 *  - a 40 MiB .npy upload (the write-behind path) and its download (a file
 *    response, no sendfile under TLS) come back byte for byte over HTTPS;
 *  - a client trusting another certificate fails the handshake (no
 *    answer), and a plain-HTTP request to the HTTPS port gets no HTTP
 *    answer; the daemon serves HTTPS normally afterwards;
 *  - misconfiguration stops the daemon at start with a message naming the
 *    option: only one of the two flags, a file that is missing, not PEM, or
 *    a key that does not match the certificate;
 *  - without the flags the daemon still speaks plain HTTP (features.tls
 *    false);
 *  - the connection reaper speaks TLS on a TLS connection (--header-timeout
 *    1, a GnuTLS client of its own): a client that sends part of a header
 *    block and waits reads, decrypted, one 408 and then the end of the
 *    session; one that sends nothing after its handshake reads the end of
 *    the session; neither ever reads bytes outside TLS records (the reaper
 *    wrote its 408 in clear into the session, which the client's GnuTLS
 *    took for a broken record); a malformed Content-Length is answered
 *    once, through the session as well, and so is a body over --max-body
 *    (answered before its bytes are read);
 *  - an expired certificate (tls/expired-cert.pem, valid on 2020-01-01
 *    only) is served, but the start logs a warning that says EXPIRED and
 *    its date.
 */
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"

static const char *daemon_path;
static char cert[512], key[512], other_cert[512], other_key[512];
static char expired_cert[512], expired_key[512];

/* The certificates' folder, found at run time (a path compiled in fails
 * wherever the binary runs off the build machine): $TESSEL_TEST_TLS_DIR
 * (CTest sets it, tests/tests.cmake), else tests/integration/tls under
 * the current directory (a copy of the repository, as tests/gpu's
 * device_run.sh runs the binaries from its root). 0 when found. */
static int paths(void) {
  const char *dir = getenv("TESSEL_TEST_TLS_DIR");
  if (!dir || !*dir) dir = "tests/integration/tls";
  snprintf(cert, sizeof cert, "%s/server-cert.pem", dir);
  snprintf(key, sizeof key, "%s/server-key.pem", dir);
  snprintf(other_cert, sizeof other_cert, "%s/other-cert.pem", dir);
  snprintf(other_key, sizeof other_key, "%s/other-key.pem", dir);
  snprintf(expired_cert, sizeof expired_cert, "%s/expired-cert.pem", dir);
  snprintf(expired_key, sizeof expired_key, "%s/expired-key.pem", dir);
  if (access(cert, R_OK) == 0 && access(expired_key, R_OK) == 0) return 0;
  fprintf(stderr, "no test certificates at %s: set TESSEL_TEST_TLS_DIR to "
                  "tests/integration/tls or run from the repository's root\n", dir);
  return -1;
}

/* 1 when the daemon's log holds `what`. */
static int log_has(const srv *s, const char *what) {
  char path[400];
  snprintf(path, sizeof path, "%s/daemon.log", s->dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[2048];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
  fclose(f);
  return found;
}

static int feature_tls(srv *s) {
  resp r = req(s, "GET", "/v1/info", NULL, NULL);
  CHECK_MSG(r.status == 200, "GET /v1/info: %ld", r.status);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  resp_free(&r);
  json_t *v = json_object_get(json_object_get(j, "features"), "tls");
  CHECK_MSG(json_is_boolean(v), "features.tls is not a boolean");
  int on = json_is_true(v);
  json_decref(j);
  return on;
}

TEST(https_serves_everything) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "2", "--tls-cert", cert,
                  "--tls-key", key, NULL) == 0);
  CHECK_MSG(strncmp(s.base, "https://", 8) == 0, "base %s", s.base);
  s.cainfo = cert;
  resp r = req(&s, "GET", "/healthz", NULL, NULL);
  CHECK_MSG(r.status == 200, "healthz over https: %ld", r.status);
  resp_free(&r);
  CHECK(feature_tls(&s) == 1);

  /* A job through ?wait, and its result as JSON. */
  long st = 0;
  json_t *job = submit(&s, "?wait=30",
                       "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":"
                       "{\"expr\":\"x*2+1\",\"inputs\":{\"x\":[1,2,3]}}}",
                       &st);
  CHECK_MSG(st == 200 || st == 201, "submit: %ld", st);
  CHECK_STR(jstr(job, "status"), "succeeded");
  json_t *data = result_data_at(&s, job, "");
  CHECK(json_is_array(data) && json_array_size(data) == 3 &&
        json_number_value(json_array_get(data, 0)) == 3.0 &&
        json_number_value(json_array_get(data, 2)) == 7.0);
  json_decref(data);
  json_decref(job);

  /* 40 MiB up (write-behind: >= 32 MiB) and down, byte for byte. */
  int64_t n = 5 * 1024 * 1024;
  size_t hl = 128, len = hl + (size_t)n * 8;
  char *npy = malloc(len);
  CHECK(npy != NULL);
  if (npy) {
    char dict[128];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld,), }",
                      (long long)n);
    memcpy(npy, "\x93NUMPY\x01\x00", 8);
    npy[8] = (char)((hl - 10) & 0xff);
    npy[9] = (char)((hl - 10) >> 8);
    memset(npy + 10, ' ', hl - 10);
    memcpy(npy + 10, dict, (size_t)dl);
    npy[hl - 1] = '\n';
    for (int64_t i = 0; i < n; i++) {
      double v = (double)i * 0.5 - 17.25;
      memcpy(npy + hl + (size_t)i * 8, &v, 8);
    }
    r = reqx(&s, "POST", "/v1/arrays", "application/x-npy", npy, (long)len, NULL);
    CHECK_MSG(r.status == 201, "upload over https: %ld %.200s", r.status, r.body);
    json_t *a = r.status == 201 ? resp_json(&r) : NULL;
    resp_free(&r);
    const char *id = jstr(a, "id");
    CHECK(id != NULL);
    if (id) {
      char path[256];
      snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
      r = req(&s, "GET", path, NULL, NULL);
      CHECK_MSG(r.status == 200, "download over https: %ld", r.status);
      /* The served header may be laid out differently: compare the data. */
      CHECK(r.len >= (size_t)n * 8);
      if (r.len >= (size_t)n * 8)
        CHECK(memcmp(r.body + (r.len - (size_t)n * 8), npy + hl, (size_t)n * 8) == 0);
      resp_free(&r);
    }
    json_decref(a);
    free(npy);
  }

  /* A client that trusts another certificate: the handshake fails. */
  s.cainfo = other_cert;
  r = req(&s, "GET", "/healthz", NULL, NULL);
  CHECK_MSG(r.status == -1, "untrusted certificate accepted: %ld", r.status);
  resp_free(&r);

  /* Plain HTTP to the HTTPS port: no HTTP answer. */
  char base[64];
  snprintf(base, sizeof base, "%s", s.base);
  snprintf(s.base, sizeof s.base, "http://127.0.0.1:%d", s.port);
  s.cainfo = NULL;
  r = req(&s, "GET", "/healthz", NULL, NULL);
  CHECK_MSG(r.status != 200, "plain HTTP answered 200 on the HTTPS port");
  resp_free(&r);

  /* Still serving HTTPS. */
  snprintf(s.base, sizeof s.base, "%s", base);
  s.cainfo = cert;
  r = req(&s, "GET", "/healthz", NULL, NULL);
  CHECK_MSG(r.status == 200, "healthz after the bad clients: %ld", r.status);
  resp_free(&r);
  CHECK(srv_kill(&s, SIGTERM) == 0);
  srv_cleanup(&s);
}

/* The daemon must refuse to start, saying `what` in its log. */
static void refuses(const char *what, const char *a1, const char *v1,
                    const char *a2, const char *v2) {
  srv s;
  int rc = srv_start(&s, daemon_path, a1, v1, a2, v2, NULL);
  CHECK_MSG(rc != 0, "the daemon started with %s %s %s %s", a1, v1,
            a2 ? a2 : "", v2 ? v2 : "");
  if (rc == 0) {
    srv_kill(&s, SIGKILL);
  } else {
    int st = srv_kill(&s, SIGKILL);
    CHECK_MSG(st != 0 && st < 128, "exit status %d (want a plain failure)", st);
  }
  CHECK_MSG(log_has(&s, what), "the log does not say \"%s\"", what);
  srv_cleanup(&s);
}

TEST(misconfiguration_stops_the_start) {
  refuses("tls-key", "--tls-cert", cert, NULL, NULL);
  refuses("tls-cert", "--tls-key", key, NULL, NULL);
  refuses("cannot read", "--tls-cert", "/nonexistent/cert.pem", "--tls-key", key);
  refuses("not a PEM file", "--tls-cert", "/etc/hostname", "--tls-key", key);
  refuses("not a PEM file", "--tls-cert", cert, "--tls-key", "/etc/hostname");
  /* A key of another certificate: GnuTLS refuses the pair. */
  refuses("tls-cert", "--tls-cert", cert, "--tls-key", other_key);
}

TEST(plain_http_without_the_flags) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "1", NULL) == 0);
  CHECK_MSG(strncmp(s.base, "http://", 7) == 0, "base %s", s.base);
  CHECK(feature_tls(&s) == 0);
  srv_cleanup(&s);
}

/* Connect to 127.0.0.1:port, shake hands (trusting anything: what is
 * tested is the framing, not the certificate), send `send` (may be ""),
 * then read until the session ends. *got gets the decrypted bytes (up to
 * cap - 1, NUL-terminated); returns how the reading ended: 0 (close_notify),
 * GNUTLS_E_PREMATURE_TERMINATION (TCP close), another GnuTLS error (bytes
 * that were no TLS record), or 1 when the handshake itself failed. */
static int tls_idle_client(int port, const char *send_text, char *got,
                           size_t cap) {
  got[0] = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return 1;
  }
  gnutls_certificate_credentials_t cred;
  gnutls_session_t ss;
  gnutls_certificate_allocate_credentials(&cred);
  gnutls_init(&ss, GNUTLS_CLIENT);
  gnutls_set_default_priority(ss);
  gnutls_credentials_set(ss, GNUTLS_CRD_CERTIFICATE, cred);
  gnutls_transport_set_int(ss, fd);
  gnutls_handshake_set_timeout(ss, 10000);
  gnutls_record_set_timeout(ss, 20000); /* the reaper cuts after ~1 s */
  int rc;
  do rc = gnutls_handshake(ss);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  if (rc < 0) {
    rc = 1;
  } else {
    if (send_text[0]) gnutls_record_send(ss, send_text, strlen(send_text));
    size_t n = 0;
    for (;;) {
      char buf[1024];
      ssize_t r = gnutls_record_recv(ss, buf, sizeof buf);
      if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) continue;
      if (r <= 0) {
        rc = (int)r;
        break;
      }
      size_t k = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
      memcpy(got + n, buf, k);
      n += k;
      got[n] = 0;
    }
  }
  gnutls_deinit(ss);
  gnutls_certificate_free_credentials(cred);
  close(fd);
  return rc;
}

TEST(reaper_answers_inside_tls) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "2", "--tls-cert", cert,
                  "--tls-key", key, "--header-timeout", "1", "--max-body",
                  "2000", NULL) == 0);
  char got[4096];
  /* A request line and a header, then nothing: the header deadline. */
  int rc = tls_idle_client(s.port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                           got, sizeof got);
  CHECK_MSG(rc == 0 || rc == GNUTLS_E_PREMATURE_TERMINATION,
            "the session ended with %d (%s): bytes outside TLS?", rc,
            rc < 0 ? gnutls_strerror(rc) : "handshake");
  CHECK_MSG(strncmp(got, "HTTP/1.1 408 ", 13) == 0 &&
                strstr(got, "deadline_exceeded") &&
                !strstr(strstr(got, "\r\n\r\n") ? strstr(got, "\r\n\r\n") + 4 : got,
                        "HTTP/1.1"),
            "decrypted: \"%.300s\"", got);
  /* Nothing at all after the handshake: closed, in TLS terms or TCP's. */
  rc = tls_idle_client(s.port, "", got, sizeof got);
  CHECK_MSG(rc == 0 || rc == GNUTLS_E_PREMATURE_TERMINATION,
            "an idle TLS client read %d (%s)", rc,
            rc < 0 ? gnutls_strerror(rc) : "handshake failed");
  CHECK_MSG(got[0] == 0 || strncmp(got, "HTTP/1.1 408 ", 13) == 0,
            "an idle TLS client read \"%.200s\"", got);
  /* A malformed Content-Length (answered before libmicrohttpd, through
   * the session too): one 400 naming it, decrypted, then the end. */
  rc = tls_idle_client(s.port,
                       "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       "application/json\r\nContent-Length: -1\r\n\r\n",
                       got, sizeof got);
  CHECK_MSG((rc == 0 || rc == GNUTLS_E_PREMATURE_TERMINATION) &&
                strncmp(got, "HTTP/1.1 400 ", 13) == 0 &&
                strstr(got, "\"field\":\"Content-Length\"") &&
                !strstr(got + 1, "HTTP/1.1"),
            "Content-Length -1 over TLS: %d, \"%.300s\"", rc, got);
  /* A body over --max-body announced, its bytes on their way: answered
   * on the socket by http.c before the body (req_raw_error), in TLS. */
  rc = tls_idle_client(s.port,
                       "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       "application/json\r\nContent-Length: 5000\r\n\r\n{",
                       got, sizeof got);
  CHECK_MSG((rc == 0 || rc == GNUTLS_E_PREMATURE_TERMINATION) &&
                strncmp(got, "HTTP/1.1 413 ", 13) == 0,
            "a body over --max-body over TLS: %d, \"%.300s\"", rc, got);
  /* The daemon serves TLS as before. */
  s.cainfo = cert;
  resp r = req(&s, "GET", "/healthz", NULL, NULL);
  CHECK_MSG(r.status == 200, "healthz after the idle clients: %ld", r.status);
  resp_free(&r);
  srv_cleanup(&s);
}

TEST(expired_certificate_warns_at_start) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "1", "--tls-cert",
                  expired_cert, "--tls-key", expired_key, NULL) == 0);
  CHECK_MSG(log_has(&s, "EXPIRED on 2020-01-02T00:00:00Z"),
            "no warning at start about the expired certificate");
  srv_cleanup(&s);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_tls <tesseld>");
  daemon_path = argv[1];
  if (paths() != 0) return 1;
  curl_global_init(CURL_GLOBAL_ALL);
  RUN(https_serves_everything);
  RUN(misconfiguration_stops_the_start);
  RUN(plain_http_without_the_flags);
  RUN(expired_certificate_warns_at_start);
  RUN(reaper_answers_inside_tls);
  curl_global_cleanup();
  return check_summary();
}
