/* test_http_conns.c — slow clients and floods from one address get
 * answers, not silence (server/conns.c), against the real daemon.
 *
 * All from 127.0.0.1 (what every client behind a proxy looks like), with
 * bounded counts and waits:
 *  - 120 connections trickle header bytes; the server cuts every one of
 *    them once its header deadline (--header-timeout 2) passes, while 10
 *    ordinary requests sent meanwhile are all answered (200, or 503 with
 *    Retry-After while the address is over its share), and afterwards an
 *    ordinary request gets 200;
 *  - 400 complete requests at once each get an HTTP status line (200, or
 *    503 with Retry-After and a JSON error): none is closed unanswered;
 *  - a body that stalls is cut after the grace period (--min-body-rate),
 *    with a 408 written first;
 *  - 64 requests in progress (--per-ip-limit 64) make the next one a 503
 *    with Retry-After, and requests pass again once they are gone;
 *  - a kept-alive connection idle past --conn-timeout after its answer is
 *    closed without a word (a 408 there would be read as the answer of the
 *    client's next request).
 * Waits are bounded (the test fails, it does not hang); nothing asserts a
 * duration.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include "harness.h"

static srv S;

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Is fd closed by the peer (recv 0 or an error other than EAGAIN)? */
static int peer_closed(int fd) { /* reads and drops what came (a 408) */
  char b[256];
  ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

TEST(trickling_headers_are_cut) {
  enum { N = 120 };
  int fd[N], cut = 0, opened = 0;
  for (int i = 0; i < N; i++) {
    fd[i] = dial();
    if (fd[i] >= 0) {
      opened++;
      send(fd[i], "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", 41, MSG_NOSIGNAL);
    }
  }
  CHECK(opened == N);
  /* ordinary requests while they trickle: each answered */
  int answered = 0;
  for (int k = 0; k < 10; k++) {
    resp r = req(&S, "GET", "/healthz", NULL, NULL);
    char ra[32];
    if (r.status == 200 || (r.status == 503 && resp_header_get(&r, "Retry-After", ra, sizeof ra)))
      answered++;
    else
      fprintf(stderr, "ordinary request %d: status %ld\n", k, r.status);
    resp_free(&r);
  }
  CHECK_MSG(answered == 10, "%d of 10 answered", answered);
  /* trickle one byte each half second; the server must cut them all */
  double t0 = now_s();
  int open_left = opened;
  while (open_left > 0 && now_s() - t0 < 20) {
    for (int i = 0; i < N; i++) {
      if (fd[i] < 0) continue;
      if (peer_closed(fd[i]) || send(fd[i], "X", 1, MSG_NOSIGNAL) < 0) {
        close(fd[i]);
        fd[i] = -1;
        cut++;
        open_left--;
      }
    }
    usleep(500 * 1000);
  }
  for (int i = 0; i < N; i++)
    if (fd[i] >= 0) close(fd[i]);
  CHECK_MSG(cut == opened, "%d of %d trickling connections cut", cut, opened);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

TEST(burst_every_request_answered) {
  enum { N = 400 };
  static int fd[N];
  static char buf[N][512];
  static size_t got[N];
  const char *rq = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  int opened = 0;
  for (int i = 0; i < N; i++) {
    got[i] = 0;
    fd[i] = dial();
    if (fd[i] >= 0) opened++;
  }
  CHECK(opened == N);
  for (int i = 0; i < N; i++)
    if (fd[i] >= 0) send(fd[i], rq, strlen(rq), MSG_NOSIGNAL);
  /* read every answer until each connection closes (bounded) */
  int done = 0;
  double t0 = now_s();
  static struct pollfd p[N];
  while (done < opened && now_s() - t0 < 30) {
    int np = 0;
    for (int i = 0; i < N; i++)
      if (fd[i] >= 0) p[np++] = (struct pollfd){.fd = fd[i], .events = POLLIN};
    if (poll(p, (nfds_t)np, 1000) <= 0) continue;
    for (int j = 0; j < np; j++) {
      if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int i = 0;
      while (fd[i] != p[j].fd) i++;
      ssize_t k = recv(fd[i], buf[i] + got[i], sizeof buf[i] - 1 - got[i], 0);
      if (k > 0) got[i] += (size_t)k;
      if (k <= 0 || got[i] >= sizeof buf[i] - 1) {
        close(fd[i]);
        fd[i] = -1;
        done++;
      }
    }
  }
  int ok200 = 0, ok503 = 0, silent = 0;
  for (int i = 0; i < N; i++) {
    if (fd[i] >= 0) close(fd[i]);
    buf[i][got[i]] = 0;
    if (strncmp(buf[i], "HTTP/1.1 200", 12) == 0) ok200++;
    else if (strncmp(buf[i], "HTTP/1.1 503", 12) == 0 && strcasestr(buf[i], "Retry-After:") &&
             strstr(buf[i], "\"code\":\"unavailable\""))
      ok503++;
    else
      silent++;
  }
  printf("     burst of %d: %d answered 200, %d answered 503 + Retry-After, %d unanswered\n",
         N, ok200, ok503, silent);
  CHECK_MSG(silent == 0, "%d of %d requests got no HTTP answer", silent, N);
  CHECK(ok200 > 0);
}

/* 64 requests in progress (bodies announced, not yet sent) fill the
 * address's share: the next request is answered 503 + Retry-After with a
 * JSON error, and once they are gone requests pass again. */
TEST(share_full_answers_503) {
  enum { N = 64 };
  int fd[N];
  const char *h = "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: text/csv\r\nContent-Length: 100\r\n\r\n";
  for (int i = 0; i < N; i++) {
    fd[i] = dial();
    if (fd[i] >= 0) send(fd[i], h, strlen(h), MSG_NOSIGNAL);
  }
  /* The server reads their headers in its own time: ask until it refuses
   * (the state checked), not after a fixed pause. */
  resp r = {0};
  WAIT_FOR((resp_free(&r), r = req(&S, "GET", "/healthz", NULL, NULL), r.status == 503), 60);
  char ra[32];
  CHECK_MSG(r.status == 503 && resp_header_get(&r, "Retry-After", ra, sizeof ra),
            "status %ld", r.status);
  CHECK(is_error(&r, 503, "unavailable", NULL));
  resp_free(&r);
  for (int i = 0; i < N; i++)
    if (fd[i] >= 0) close(fd[i]);
  int ok = 0;
  WAIT_FOR((r = req(&S, "GET", "/healthz", NULL, NULL), ok = r.status == 200, resp_free(&r), ok),
           60);
  CHECK(ok);
}

TEST(stalled_body_is_cut) {
  int fd = dial();
  CHECK(fd >= 0);
  const char *h = "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: text/csv\r\nContent-Length: 1000000\r\n\r\n1,2\n";
  send(fd, h, strlen(h), MSG_NOSIGNAL);
  struct timeval tv = {25, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[1024];
  size_t n = 0;
  ssize_t k;
  while (n < sizeof b - 1 && (k = recv(fd, b + n, sizeof b - 1 - n, 0)) > 0) n += (size_t)k;
  b[n] = 0;
  int closed = k == 0;
  close(fd);
  CHECK_MSG(closed, "a body stalled at 4 bytes was not cut in 25 s");
  CHECK_MSG(strncmp(b, "HTTP/1.1 408", 12) == 0 && strstr(b, "deadline_exceeded"), "%s", b);
}

static const char *g_exe;

TEST(idle_kept_alive_closed_silently) {
  srv keep = S; /* a second daemon with a short idle timeout */
  if (srv_start(&S, g_exe, "--conn-timeout", "3", "--access-log", "0", NULL) != 0) {
    CHECK_MSG(0, "the second daemon did not start");
    S = keep;
    return;
  }
  int fd = dial();
  CHECK(fd >= 0);
  if (fd < 0) return;
  const char *q = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  send(fd, q, strlen(q), MSG_NOSIGNAL);
  struct timeval tv = {20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[4096];
  size_t n = 0;
  ssize_t k = 0;
  /* the answer, then (past --conn-timeout 3) the close, nothing between */
  while (n < sizeof b - 1 && (k = recv(fd, b + n, sizeof b - 1 - n, 0)) > 0) n += (size_t)k;
  b[n] = 0;
  close(fd);
  CHECK_MSG(k == 0, "the idle connection was not closed within 20 s");
  CHECK_MSG(strncmp(b, "HTTP/1.1 200", 12) == 0, "%s", b);
  CHECK_MSG(strstr(b, "HTTP/1.1 408") == NULL, "a 408 after the answer: %s", b);
  srv_cleanup(&S);
  S = keep;
}

/* 16 submits of ~2.4 MB JSON bodies at once: at most http threads - 1 are
 * parsed together (the rest answered 503 + Retry-After), so /healthz is
 * answered while they run. On a daemon of its own with the default
 * --header-timeout: the main one's 2 s (for trickling_headers_are_cut) cut
 * a /healthz and a submit with 408 when a loaded 2-core CI machine gave the
 * free thread no CPU for 2 s — a deadline missed, not a thread taken. */
typedef struct big_arg {
  const char *body;
  long status;
} big_arg;

static void *big_submit(void *p) {
  big_arg *a = p;
  resp r = req(&S, "POST", "/v1/jobs", "application/json", a->body);
  a->status = r.status;
  resp_free(&r);
  return NULL;
}

TEST(big_bodies_leave_a_thread) {
  enum { T = 16, N = 300000 };
  size_t cap = (size_t)N * 8 + 256, n = 0;
  char *body = malloc(cap);
  n += (size_t)snprintf(body + n, cap - n,
                        "{\"kind\":\"reduce\",\"params\":{\"op\":\"sum\",\"inputs\":{\"x\":[");
  for (int i = 0; i < N; i++) n += (size_t)snprintf(body + n, cap - n, i ? ",%d.5" : "%d.5", i % 1000);
  snprintf(body + n, cap - n, "]}}}");
  srv keep = S;
  if (srv_start(&S, g_exe, "--threads", "1", "--per-ip-limit", "64", "--access-log", "0",
                NULL) != 0) {
    CHECK_MSG(0, "the daemon for big bodies did not start");
    S = keep;
    free(body);
    return;
  }
  pthread_t th[T];
  big_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (big_arg){body, 0};
    pthread_create(&th[i], NULL, big_submit, &args[i]);
  }
  int health = 0;
  for (int k = 0; k < 5; k++) {
    resp r = req(&S, "GET", "/healthz", NULL, NULL);
    health += r.status == 200;
    resp_free(&r);
  }
  int accepted = 0, busy = 0, other = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    if (args[i].status == 202 || args[i].status == 200) accepted++;
    else if (args[i].status == 503) busy++;
    else other++;
  }
  free(body);
  printf("     16 big submits: %d accepted, %d answered 503, %d other; /healthz %d of 5\n",
         accepted, busy, other, health);
  CHECK(health == 5);
  CHECK(other == 0 && accepted > 0);
  srv_cleanup(&S);
  S = keep;
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_http_conns <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  g_exe = argv[1];
  if (srv_start(&S, argv[1], "--threads", "1", "--header-timeout", "2", "--queue-limit", "100000",
                "--per-ip-limit", "64", "--access-log", "0", NULL) != 0)
    return 1;
  RUN(share_full_answers_503);
  RUN(stalled_body_is_cut);
  RUN(trickling_headers_are_cut);
  RUN(burst_every_request_answered);
  RUN(big_bodies_leave_a_thread);
  RUN(idle_kept_alive_closed_silently);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
