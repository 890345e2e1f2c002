/* test_http_guard.c — requests refused from their headers (server/guard.c),
 * against the real daemon.
 *
 * Framing attacks go over raw sockets: each is followed by a pipelined
 * "GET /healthz", which must never be answered (exactly one status line
 * comes back, then the server closes). Then the cross-site rules: JSON
 * routes take application/json only (415), a foreign Origin may not POST
 * (403) and gets no CORS headers, an allowed one (--allow-origin) gets
 * them and its preflight, a Host that is not loopback or --server-name is
 * 421 on a loopback listener (DNS rebinding). Refused submits create no
 * job.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "harness.h"

static srv S, S2;

/* Send `data` on a fresh connection, read until the server closes (or 8 s
 * pass: *closed 0). Returns the bytes read (malloc'd, NUL-terminated). */
static char *raw(const srv *s, const char *data, size_t len, int *closed) {
  *closed = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {8, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char *buf = calloc(1, 65536);
  size_t n = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len) {
    for (;;) {
      ssize_t k = recv(fd, buf + n, 65535 - n, 0);
      if (k == 0) { *closed = 1; break; }
      if (k < 0) break;
      n += (size_t)k;
      if (n >= 65535) break;
    }
  }
  close(fd);
  buf[n] = 0;
  return buf;
}

static int count(const char *hay, const char *needle) {
  int c = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) c++;
  return c;
}

/* 1 when b is exactly one well-formed HTTP/1.1 response: a status line, one
 * header block with one Content-Length, and that many body bytes, nothing
 * after. */
static int one_response(const char *b) {
  const char *end = strstr(b, "\r\n\r\n");
  if (strncmp(b, "HTTP/1.1 ", 9) != 0 || !end) return 0;
  int ncl = 0;
  long cl = -1;
  for (const char *p = strstr(b, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n"))
    if (strncasecmp(p + 2, "Content-Length:", 15) == 0) {
      ncl++;
      cl = strtol(p + 17, NULL, 10);
    }
  return ncl == 1 && cl >= 0 && strlen(end + 4) == (size_t)cl;
}

/* One answer with `status`, a JSON error naming `field`, then close. */
static int refused_alone(const char *name, const char *req, int status,
                         const char *field) {
  char pipelined[2048];
  snprintf(pipelined, sizeof pipelined,
           "%sGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", req);
  int closed;
  char *b = raw(&S, pipelined, strlen(pipelined), &closed);
  char want[64], fld[128];
  snprintf(want, sizeof want, "HTTP/1.1 %d ", status);
  snprintf(fld, sizeof fld, "\"field\":\"%s\"", field);
  int ok = closed && strncmp(b, want, strlen(want)) == 0 &&
           count(b, "\nHTTP/1.") == 0 && !strstr(b, "\"status\":\"ok\"") &&
           strstr(b, fld) && strstr(b, "application/json") && one_response(b);
  if (!ok) fprintf(stderr, "%s: closed %d, got:\n%.800s\n", name, closed, b);
  free(b);
  return ok;
}

TEST(framing) {
  const char *P = "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\n";
  char r[1024];
  snprintf(r, sizeof r, "%sContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", P);
  CHECK(refused_alone("CL+TE", r, 400, "Transfer-Encoding"));
  snprintf(r, sizeof r, "%sTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", P);
  CHECK(refused_alone("TE+CL", r, 400, "Transfer-Encoding"));
  snprintf(r, sizeof r, "%sContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}", P);
  CHECK(refused_alone("two CL", r, 400, "Content-Length"));
  snprintf(r, sizeof r, "%sContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", P);
  CHECK(refused_alone("two equal CL", r, 400, "Content-Length"));
  snprintf(r, sizeof r, "%sTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", P);
  CHECK(refused_alone("TE space colon", r, 400, "headers"));
  snprintf(r, sizeof r, "%sTransfer-Encoding: gzip\r\n\r\nabc", P);
  CHECK(refused_alone("TE gzip", r, 501, "Transfer-Encoding"));
  snprintf(r, sizeof r, "%sTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", P);
  CHECK(refused_alone("TE gzip,chunked", r, 501, "Transfer-Encoding"));
  CHECK(refused_alone("no Host", "GET /v1/jobs HTTP/1.1\r\n\r\n", 400, "Host"));
  CHECK(refused_alone("two Hosts",
                      "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n",
                      400, "Host"));
  /* HTTP/1.0 needs no Host */
  int closed;
  const char *h10 = "GET /healthz HTTP/1.0\r\n\r\n";
  char *b = raw(&S, h10, strlen(h10), &closed);
  CHECK_MSG(strncmp(b, "HTTP/1.1 200", 12) == 0 || strncmp(b, "HTTP/1.0 200", 12) == 0,
            "%.300s", b);
  free(b);
  /* A malformed Content-Length, which libmicrohttpd refuses itself (0.9.75
   * sent its header block twice): exactly one well-formed JSON answer, the
   * pipelined request unanswered, the connection closed. */
  const char *bad[] = {"-1", "+5", "0x10", "1x", "5 5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(r, sizeof r, "%sContent-Length: %s\r\n\r\n{}", P, bad[i]);
    CHECK_MSG(refused_alone(bad[i], r, 400, "Content-Length"),
              "Content-Length: %s", bad[i]);
  }
  snprintf(r, sizeof r, "%sContent-Length: 99999999999999999999999\r\n\r\n{}", P);
  CHECK(refused_alone("CL over 64 bits", r, 413, "Content-Length"));
}

static long jobs_listed(srv *s) {
  resp r = req(s, "GET", "/v1/jobs", NULL, NULL);
  json_t *j = resp_json(&r);
  long n = j ? (long)json_array_size(json_object_get(j, "jobs")) : -1;
  json_decref(j);
  resp_free(&r);
  return n;
}

#define JOB "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2]}}}"

TEST(content_type) {
  const char *bad[] = {"text/plain", "application/x-www-form-urlencoded",
                       "multipart/form-data; boundary=x", "application/jsonx", NULL};
  for (int i = 0; bad[i]; i++) {
    resp r = req(&S, "POST", "/v1/jobs", bad[i], JOB);
    CHECK_MSG(is_error(&r, 415, "unsupported_media_type", "Content-Type"), "%s", bad[i]);
    resp_free(&r);
  }
  /* a body with no Content-Type at all (curl would add a form type: raw) */
  char rq[512];
  snprintf(rq, sizeof rq,
           "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(JOB), JOB);
  int closed;
  char *b = raw(&S, rq, strlen(rq), &closed);
  CHECK_MSG(strncmp(b, "HTTP/1.1 415", 12) == 0, "%.300s", b);
  free(b);
  CHECK(jobs_listed(&S) == 0);
  resp r = req(&S, "POST", "/v1/jobs?wait=10", "application/json; charset=utf-8", JOB);
  CHECK_MSG(r.status == 200, "%s", r.body);
  resp_free(&r);
  CHECK(jobs_listed(&S) == 1);
}

TEST(origin) {
  char own[128], buf[256];
  snprintf(own, sizeof own, "Origin: http://127.0.0.1:%d", S.port);
  resp r = reqx(&S, "POST", "/v1/jobs", "application/json", JOB, -1, own, NULL);
  CHECK_MSG(r.status == 202 || r.status == 200, "own origin: %ld %s", r.status, r.body);
  resp_free(&r);
  long before = jobs_listed(&S);
  r = reqx(&S, "POST", "/v1/jobs", "application/json", JOB, -1,
           "Origin: https://evil.example", NULL);
  CHECK(is_error(&r, 403, "permission_denied", "Origin"));
  CHECK(!resp_header_get(&r, "Access-Control-Allow-Origin", buf, sizeof buf));
  resp_free(&r);
  r = reqx(&S, "POST", "/v1/jobs", "application/json", JOB, -1, "Origin: null", NULL);
  CHECK(is_error(&r, 403, "permission_denied", "Origin"));
  resp_free(&r);
  CHECK(jobs_listed(&S) == before);
  /* reading stays possible (no CORS headers, so the page cannot see it) */
  r = reqx(&S, "GET", "/v1/jobs", NULL, NULL, -1, "Origin: https://evil.example", NULL);
  CHECK(r.status == 200 && !resp_header_get(&r, "Access-Control-Allow-Origin", buf, sizeof buf));
  resp_free(&r);
  /* a preflight from a foreign origin */
  r = reqx(&S, "OPTIONS", "/v1/jobs", NULL, NULL, -1, "Origin: https://evil.example",
           "Access-Control-Request-Method: POST", NULL);
  CHECK(is_error(&r, 403, "permission_denied", "Origin"));
  resp_free(&r);
  /* S2 allows https://app.example */
  r = reqx(&S2, "OPTIONS", "/v1/jobs", NULL, NULL, -1, "Origin: https://app.example",
           "Access-Control-Request-Method: POST",
           "Access-Control-Request-Headers: content-type", NULL);
  CHECK_MSG(r.status == 204, "%ld %s", r.status, r.body);
  CHECK(resp_header_get(&r, "Access-Control-Allow-Origin", buf, sizeof buf) &&
        strcmp(buf, "https://app.example") == 0);
  CHECK(resp_header_get(&r, "Access-Control-Allow-Headers", buf, sizeof buf) &&
        strcasestr(buf, "content-type"));
  resp_free(&r);
  r = reqx(&S2, "POST", "/v1/jobs?wait=10", "application/json", JOB, -1,
           "Origin: https://app.example", NULL);
  CHECK_MSG(r.status == 200, "%ld %s", r.status, r.body);
  CHECK(resp_header_get(&r, "Access-Control-Allow-Origin", buf, sizeof buf) &&
        strcmp(buf, "https://app.example") == 0);
  resp_free(&r);
  r = reqx(&S2, "POST", "/v1/jobs", "application/json", JOB, -1,
           "Origin: https://app.example.evil", NULL);
  CHECK(is_error(&r, 403, "permission_denied", "Origin"));
  resp_free(&r);
}

TEST(host) {
  char h[128];
  const char *bad[] = {"Host: evil.example", "Host: evil.example:80",
                       "Host: 10.0.0.1", "Host: 127.0.0.1.evil.example", NULL};
  for (int i = 0; bad[i]; i++) {
    resp r = reqx(&S, "GET", "/v1/jobs", NULL, NULL, -1, bad[i], NULL);
    CHECK_MSG(is_error(&r, 421, "misdirected_request", "Host"), "%s", bad[i]);
    resp_free(&r);
  }
  const char *good[] = {"Host: localhost", "Host: 127.0.0.1", "Host: [::1]:8080", NULL};
  for (int i = 0; good[i]; i++) {
    resp r = reqx(&S, "GET", "/v1/jobs", NULL, NULL, -1, good[i], NULL);
    CHECK_MSG(r.status == 200, "%s: %ld", good[i], r.status);
    resp_free(&r);
  }
  snprintf(h, sizeof h, "Host: localhost:%d", S.port);
  resp r = reqx(&S, "GET", "/healthz", NULL, NULL, -1, h, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  /* S2 also answers as tessel.lan (--server-name) */
  r = reqx(&S2, "GET", "/v1/jobs", NULL, NULL, -1, "Host: tessel.lan:8080", NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = reqx(&S2, "GET", "/v1/jobs", NULL, NULL, -1, "Host: other.lan", NULL);
  CHECK(is_error(&r, 421, "misdirected_request", "Host"));
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_http_guard <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "1", NULL) != 0) return 1;
  if (srv_start(&S2, argv[1], "--threads", "1", "--server-name", "tessel.lan",
                "--allow-origin", "https://app.example", NULL) != 0)
    return 1;
  RUN(framing);
  RUN(content_type);
  RUN(origin);
  RUN(host);
  /* after all of it both still answer */
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  srv_cleanup(&S);
  srv_cleanup(&S2);
  curl_global_cleanup();
  return check_summary();
}
