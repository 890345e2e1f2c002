/* bench_upload_sink.c — the plain C socket sink that bench_upload.py
 * measures tesseld's uploads against: the floor of "curl -T into a server"
 * on this machine (loopback TCP and HTTP framing, nothing else).
 *
 *   bench_upload_sink PORT     (0: any free port; prints "listening on N")
 *
 * One connection at a time: read the request's headers, answer
 * "100 Continue" when asked, read Content-Length bytes into one reused
 * 1 MiB buffer (recv, no parsing, no file, no hash) and answer 200 "ok"
 * with Connection: close. No Tessel code.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static void serve(int c, char *buf, size_t cap) {
  char head[16384];
  size_t hl = 0;
  char *end = NULL;
  while (!end && hl < sizeof head - 1) {
    ssize_t k = recv(c, head + hl, sizeof head - 1 - hl, 0);
    if (k <= 0) return;
    hl += (size_t)k;
    head[hl] = 0;
    end = strstr(head, "\r\n\r\n");
  }
  if (!end) return;
  long long n = 0;
  for (char *p = head; p < end; p = strstr(p, "\r\n") + 2) {
    if (strncasecmp(p, "Content-Length:", 15) == 0) n = atoll(p + 15);
    if (strncasecmp(p, "Expect: 100-continue", 20) == 0) {
      const char *cont = "HTTP/1.1 100 Continue\r\n\r\n";
      if (send(c, cont, strlen(cont), 0) < 0) return;
    }
  }
  long long got = (long long)(hl - (size_t)(end + 4 - head));
  while (got < n) {
    ssize_t k = recv(c, buf, cap, 0);
    if (k <= 0) return;
    got += k;
  }
  const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  if (send(c, ok, strlen(ok), 0) < 0) return;
}

int main(int argc, char **argv) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)(argc > 1 ? atoi(argv[1]) : 0))};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  socklen_t al = sizeof a;
  if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16) ||
      getsockname(s, (struct sockaddr *)&a, &al)) {
    perror("bench_upload_sink");
    return 1;
  }
  printf("listening on %d\n", ntohs(a.sin_port));
  fflush(stdout);
  size_t cap = (size_t)1 << 20;
  char *buf = malloc(cap);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    serve(c, buf, cap);
    close(c);
  }
}
