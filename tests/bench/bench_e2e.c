/* bench_e2e.c — what a user holding an array waits for, end to end, side by
 * side with the ceilings and the peers, in one run (issue 11, item 6).
 *
 *   bench_e2e <tesseld> [--sizes 1e6,1e7] [--map-sizes 1e8]
 *             [--matmul 1024,4096] [--matmul-big] [--geo 5000] [--geo-big]
 *             [--cases map1,map2,reduce,matmul,geodesic,chain]
 *             [--upload-mib 1024] [--download-mb 800] [--reps 3]
 *             [--max-run-s 20] [--threads T] [--dir PARENT=/tmp] [--no-peers]
 *             [--client-sizes 1e8] [--client-python PY]
 *
 * Ceilings (this machine, this run), then the cases; tests/bench/README.md
 * says what every column is. In short:
 *   upload   — memcpy of a --upload-mib .npy; libcurl POSTing it to a plain
 *              HTTP sink in this process (a thread draining Content-Length
 *              bytes: loopback TCP with HTTP framing, nothing else); the same
 *              POST to tesseld's /v1/arrays.
 *   download — a --download-mb result: a plain HTTP server in this process
 *              sending the same file with sendfile(2), and tesseld's GET
 *              /v1/jobs/{id}/result?format=npy, each read by the same libcurl
 *              client three ways: discarding the bytes (curl -o /dev/null),
 *              into a freshly allocated buffer (the old client: every page
 *              faulted during the download), into a reused buffer sized from
 *              Content-Length (this client, as a user reusing an output array).
 *   PCIe     — pinned host <-> device copies of 800 MB, by CuPy when the
 *              peers' python imports it and sees a GPU.
 * Cases, per backend (serial, cpu, cuda when the daemon has a GPU, auto),
 * and through the same-host path (the daemon started with --local-dir on a
 * directory in /dev/shm: the client writes its inputs there as .npy, the
 * job names them {"file"} and writes its result there ("output"), the client
 * reads it back; on cuda when there is a GPU, else auto; a second row with
 * the inputs already in the directory, as when the client made them there): map x**2 + 2*x + 1, map -b/a,
 * reduce sum(x**2) along axis 1 of [1000, n/1000], matmul W@X + bias (n x n),
 * geodesic karney square (n points), and a chain of three maps (2*x + 1,
 * x*x, x - 1, each job's input the previous job's {"result"}), the chain
 * also against three separate upload/job/download round trips. Each run:
 * upload the client's arrays as .npy (each run a different array: element 0
 * changes, so nothing is deduplicated), POST /v1/jobs?wait=60 (polled past
 * a minute), GET the result as .npy into the client's buffer; sampled
 * values are checked against a C reference every run, and the peers'
 * results against Tessel's whole result (peers_e2e.py).
 *
 * Then the Python client (clients/python, issue 12) against the same daemon:
 * tests/bench/bench_client.py --row, run by --client-python (default
 * $TESSEL_PYTHON, else $PYTHON, else python3), times the client's upload and
 * download of --client-sizes float64 (default 1e8) beside curl moving the
 * same bytes, and its same-host c.map beside a raw client; this program
 * runs its own C same-host client (run_local, map1, the same backend) for
 * --reps runs before and --reps after the script, and prints the ratios to
 * curl and to that C client. Skipped, with the reason printed, when that
 * python lacks NumPy, there is no curl, or the daemon has no --local-dir.
 *
 * Every figure is the median of --reps runs after one warm-up, the
 * backends taking turns run by run (a burst of load falls on all); a backend
 * whose warm-up took more than --max-run-s gives that one run ("(1 run)"),
 * and serial is skipped (said) for geodesic n >= 20,000 (minutes). The client
 * keeps one libcurl handle (keep-alive, 512 KiB receive / 2 MiB send
 * buffers) and one receive buffer per case, grown from Content-Length.
 *
 * Threads: main drives everything; the sink and the file server are one
 * thread each, serving one connection at a time. Memory: a case holds its
 * input bodies and one result buffer; the peers read the same bytes from
 * files in the run's work dir (under --dir), removed at the end.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_daemon.h"

enum { MAXREPS = 50 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(const double *v0, int n) {
  double v[MAXREPS];
  memcpy(v, v0, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- .npy bodies ------------------------------------------------------------ */
enum { NPY_HDR = 128 };

/* A float64 C-order .npy of shape [d0] (d1 == 0) or [d0, d1], 128-byte
 * header; the data left for the caller (uninitialised). */
static char *npy_new(int64_t d0, int64_t d1, size_t *len) {
  char dict[128];
  int dl = d1 ? snprintf(dict, sizeof dict,
                         "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld, %lld), }",
                         (long long)d0, (long long)d1)
              : snprintf(dict, sizeof dict,
                         "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld,), }",
                         (long long)d0);
  *len = NPY_HDR + (size_t)(d0 * (d1 ? d1 : 1)) * 8;
  char *b = malloc(*len);
  if (!b) return NULL;
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(NPY_HDR - 10);
  b[9] = 0;
  memset(b + 10, ' ', NPY_HDR - 10);
  memcpy(b + 10, dict, (size_t)dl);
  b[NPY_HDR - 1] = '\n';
  return b;
}
static double *npy_data(char *b) { return (double *)(b + NPY_HDR); }

/* Deterministic values in [lo, lo + span). */
static void fill(double *d, int64_t n, unsigned seed, double lo, double span) {
  for (int64_t i = 0; i < n; i++)
    d[i] = lo + span * (double)(((uint64_t)i * 2654435761u + seed * 40503u) % 100003) / 100003.0;
}

/* Where the data of a downloaded .npy starts (its header's length). */
static size_t npy_off(const char *p, size_t n) {
  if (n < 10 || memcmp(p, "\x93NUMPY", 6) != 0) return 0;
  if (p[6] == 1) return 10 + (size_t)(unsigned char)p[8] + 256 * (size_t)(unsigned char)p[9];
  if (n < 12) return 0;
  return 12 + (size_t)(unsigned char)p[8] + 256 * (size_t)(unsigned char)p[9] +
         65536 * (size_t)(unsigned char)p[10];
}

/* ---- libcurl: one client, keep-alive -------------------------------------- */
/* A receive buffer. keep: grown once from Content-Length and reused (the
 * client's output array); otherwise freshly allocated per request (the old
 * client, for the download ceiling); discard: bytes counted, not kept. */
typedef struct rbuf {
  char *p;
  size_t n, cap;
  int discard, fresh, failed;
} rbuf;

static int rbuf_reserve(rbuf *m, size_t want) {
  if (want <= m->cap) return 0;
  char *np = realloc(m->p, want);
  if (!np) return -1;
  m->p = np;
  m->cap = want;
  return 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  rbuf *m = ud;
  size_t len = sz * nm;
  if (!m->discard && len > 15 && strncasecmp(p, "Content-Length:", 15) == 0) {
    size_t want = (size_t)strtoull(p + 15, NULL, 10) + 1;
    if (m->fresh) { /* the old client's way: new memory every time */
      free(m->p);
      m->p = NULL;
      m->cap = 0;
    }
    if (rbuf_reserve(m, want) != 0) m->failed = 1;
  }
  return len;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
  rbuf *m = ud;
  size_t add = sz * nm;
  if (m->discard) {
    m->n += add;
    return add;
  }
  if (m->n + add + 1 > m->cap) { /* no Content-Length (chunked): grow */
    size_t c = m->cap ? m->cap : 65536;
    while (c < m->n + add + 1) c *= 2;
    if (rbuf_reserve(m, c) != 0) return 0;
  }
  memcpy(m->p + m->n, p, add);
  m->n += add;
  m->p[m->n] = 0;
  return add;
}

typedef struct src {
  const char *p;
  size_t n, off;
} src;

static size_t on_read(char *buf, size_t sz, size_t nm, void *ud) {
  src *s = ud;
  size_t k = sz * nm < s->n - s->off ? sz * nm : s->n - s->off;
  memcpy(buf, s->p + s->off, k);
  s->off += k;
  return k;
}

static CURL *g_curl;

/* One request on the shared handle; the answer's body into *out (reset).
 * Returns the status, -1 when the transfer failed. */
static long http(const char *method, const char *url, const char *ctype,
                 const char *body, size_t len, rbuf *out) {
  out->n = 0;
  out->failed = 0;
  CURL *c = g_curl;
  curl_easy_reset(c);
  struct curl_slist *h = NULL;
  char ct[128];
  if (ctype) {
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
    h = curl_slist_append(h, ct);
  }
  h = curl_slist_append(h, "Expect:");
  src s = {body, len, 0};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 900L);
  /* No reuse of a connection idle for 30 s: tesseld ends a kept-alive
   * connection idle for --conn-timeout (60 s) by writing a 408 on it, which
   * a client that sends its next request at that moment reads as the
   * answer (seen here while the peers ran for minutes). */
  curl_easy_setopt(c, CURLOPT_MAXAGE_CONN, 30L);
  /* Big buffers, as a client moving arrays would set (libcurl's defaults
   * are 16 KiB down and 64 KiB up): the same for tesseld and the ceilings. */
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
  curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &s);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  } else if (strcmp(method, "GET") != 0) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  }
  long code = -1;
  if (curl_easy_perform(c) == CURLE_OK && !out->failed)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(h);
  return code;
}

/* ---- ceilings: a plain HTTP sink and a plain sendfile server --------------- */
typedef struct plain {
  int lfd, port;
  pthread_t th;
  char path[512]; /* the file server's file, set before each request */
} plain;

/* Read a request's headers into buf (cap >= 64 KiB + 1); the bytes after
 * them are counted in *extra. NULL on a closed connection. */
static char *read_headers(int fd, char *buf, size_t cap, size_t *extra) {
  size_t hn = 0;
  char *end = NULL;
  while (!end && hn + 65537 <= cap) {
    ssize_t r = recv(fd, buf + hn, 65536, 0);
    if (r <= 0) return NULL;
    hn += (size_t)r;
    buf[hn] = 0;
    end = strstr(buf, "\r\n\r\n");
  }
  if (end) *extra = hn - (size_t)(end + 4 - buf);
  return end;
}

static void *sink_main(void *arg) {
  plain *k = arg;
  char *buf = malloc(1 << 20);
  for (;;) {
    int fd = accept(k->lfd, NULL, NULL);
    if (fd < 0) break;
    size_t extra = 0;
    if (!read_headers(fd, buf, 1 << 20, &extra)) {
      close(fd);
      continue;
    }
    const char *cl = strcasestr(buf, "Content-Length:");
    long long want = cl ? atoll(cl + 15) : 0, got = (long long)extra;
    while (got < want) {
      ssize_t r = recv(fd, buf, 1 << 20, 0);
      if (r <= 0) break;
      got += r;
    }
    const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) < 0) {
    }
    close(fd);
  }
  free(buf);
  return NULL;
}

/* The download ceiling: answers any GET with k->path, sendfile(2) in as
 * few calls as the kernel takes (no framing beyond Content-Length). */
static void *files_main(void *arg) {
  plain *k = arg;
  char *buf = malloc(1 << 17);
  for (;;) {
    int fd = accept(k->lfd, NULL, NULL);
    if (fd < 0) break;
    size_t extra = 0;
    int f = read_headers(fd, buf, 1 << 17, &extra) ? open(k->path, O_RDONLY) : -1;
    struct stat sb;
    if (f >= 0 && fstat(f, &sb) == 0) {
      char h[256];
      int hl = snprintf(h, sizeof h,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/x-npy\r\n"
                        "Content-Length: %lld\r\nConnection: close\r\n\r\n",
                        (long long)sb.st_size);
      if (send(fd, h, (size_t)hl, MSG_NOSIGNAL) == hl) {
        off_t off = 0;
        while (off < sb.st_size)
          if (sendfile(fd, f, &off, (size_t)(sb.st_size - off)) <= 0) break;
      }
    }
    if (f >= 0) close(f);
    close(fd);
  }
  free(buf);
  return NULL;
}

static int plain_start(plain *k, void *(*fn)(void *)) {
  k->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  socklen_t al = sizeof a;
  if (bind(k->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(k->lfd, 8) != 0 ||
      getsockname(k->lfd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  k->port = ntohs(a.sin_port);
  return pthread_create(&k->th, NULL, fn, k);
}

static void plain_stop(plain *k) {
  shutdown(k->lfd, SHUT_RDWR);
  close(k->lfd);
  pthread_join(k->th, NULL);
}

/* ---- the daemon's API ------------------------------------------------------ */
static bench_daemon D;

/* Interrupted (a timeout's SIGTERM, ^C): the daemon goes too. */
static void on_signal(int sig) {
  if (D.pid > 0) kill(D.pid, SIGKILL);
  _exit(128 + sig);
}

/* Upload; the id into id[]. Returns seconds or -1. */
static double upload(const char *body, size_t len, char id[64]) {
  char url[128];
  snprintf(url, sizeof url, "%s/v1/arrays", D.base);
  rbuf m = {0};
  double t0 = now_s();
  long st = http("POST", url, "application/x-npy", body, len, &m);
  double t = now_s() - t0;
  json_t *o = (st == 201 || st == 200) ? json_loads(m.p, 0, NULL) : NULL;
  const char *i = o ? json_string_value(json_object_get(o, "id")) : NULL;
  if (i) snprintf(id, 64, "%s", i);
  else fprintf(stderr, "upload: %ld %.200s\n", st, m.p ? m.p : "");
  json_decref(o);
  free(m.p);
  return i ? t : -1;
}

static void delete_path(const char *what, const char *id) {
  char url[200];
  snprintf(url, sizeof url, "%s/v1/%s/%s", D.base, what, id);
  rbuf m = {0};
  http("DELETE", url, NULL, NULL, 0, &m);
  free(m.p);
}

static int final_status(const char *s) {
  return s && (!strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "canceled"));
}

/* Submit a job and wait until it ends; its id into jid, its submit->stored
 * (timings_ms.total, seconds) into *stored. 0, or -1 (said on stderr). */
static int run_job(const char *job, char jid[64], double *stored) {
  char url[256];
  snprintf(url, sizeof url, "%s/v1/jobs?wait=60", D.base);
  rbuf m = {0};
  long st = http("POST", url, "application/json", job, strlen(job), &m);
  json_t *o = (st == 200 || st == 202) ? json_loads(m.p, 0, NULL) : NULL;
  const char *id = o ? json_string_value(json_object_get(o, "id")) : NULL;
  if (!id) {
    fprintf(stderr, "job: %ld %.300s\n", st, m.p ? m.p : "");
    json_decref(o);
    free(m.p);
    return -1;
  }
  snprintf(jid, 64, "%s", id);
  while (!final_status(json_string_value(json_object_get(o, "status")))) {
    json_decref(o);
    usleep(20000); /* past ?wait's minute only (geodesic on a slow CPU) */
    snprintf(url, sizeof url, "%s/v1/jobs/%s", D.base, jid);
    st = http("GET", url, NULL, NULL, 0, &m);
    o = st == 200 ? json_loads(m.p, 0, NULL) : NULL;
    if (!o) break;
  }
  const char *status = o ? json_string_value(json_object_get(o, "status")) : NULL;
  int rc = 0;
  if (!status || strcmp(status, "succeeded") != 0) {
    fprintf(stderr, "job %s: %.300s\n", jid, m.p ? m.p : "");
    rc = -1;
  } else {
    *stored = json_real_value(json_object_get(json_object_get(o, "timings_ms"), "total")) / 1e3;
  }
  json_decref(o);
  free(m.p);
  return rc;
}

/* GET a job's result as .npy into *out. Seconds, or -1. */
static double download(const char *jid, rbuf *out) {
  char url[200];
  snprintf(url, sizeof url, "%s/v1/jobs/%s/result?format=npy", D.base, jid);
  double t0 = now_s();
  long st = http("GET", url, NULL, NULL, 0, out);
  double t = now_s() - t0;
  if (st != 200) {
    fprintf(stderr, "result of %s: %ld\n", jid, st);
    return -1;
  }
  return t;
}

/* ---- cases ------------------------------------------------------------------ */
enum { C_MAP1, C_MAP2, C_REDUCE, C_MATMUL, C_GEO, C_CHAIN, NCASES };
static const char *case_name[NCASES] = {"map1", "map2", "reduce", "matmul", "geodesic", "chain"};
static const char *case_title[NCASES] = {
    "map x**2 + 2*x + 1", "map -b/a", "reduce sum(x**2), axis 1 of [1000, n/1000]",
    "matmul W@X + bias, n x n", "geodesic karney, square", "chain 2*x+1 -> x*x -> x-1"};
static const char *CHAIN_EXPR[3] = {"2*x + 1", "x*x", "x - 1"};

typedef struct cse {
  int kind;
  int64_t n;          /* as people count it: elements, matrix side, points */
  int nin;
  const char *in_name[3];
  char *body[3];
  size_t len[3];
  int64_t out_elems;  /* of the result */
} cse;

static int case_build(cse *c, int kind, int64_t n) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->n = n;
  switch (kind) {
  case C_MAP1:
  case C_CHAIN:
    c->nin = 1;
    c->in_name[0] = "x";
    c->body[0] = npy_new(n, 0, &c->len[0]);
    if (c->body[0]) fill(npy_data(c->body[0]), n, 7, 0, 1);
    c->out_elems = n;
    break;
  case C_MAP2:
    c->nin = 2;
    c->in_name[0] = "a";
    c->in_name[1] = "b";
    c->body[0] = npy_new(n, 0, &c->len[0]);
    c->body[1] = npy_new(n, 0, &c->len[1]);
    if (c->body[0]) fill(npy_data(c->body[0]), n, 3, 0.5, 1); /* never 0 */
    if (c->body[1]) fill(npy_data(c->body[1]), n, 5, -1, 2);
    c->out_elems = n;
    break;
  case C_REDUCE:
    c->nin = 1;
    c->in_name[0] = "x";
    c->body[0] = npy_new(1000, n / 1000, &c->len[0]);
    if (c->body[0]) fill(npy_data(c->body[0]), 1000 * (n / 1000), 11, -1, 2);
    c->out_elems = 1000;
    break;
  case C_MATMUL:
    c->nin = 3;
    c->in_name[0] = "W";
    c->in_name[1] = "X";
    c->in_name[2] = "bias";
    c->body[0] = npy_new(n, n, &c->len[0]);
    c->body[1] = npy_new(n, n, &c->len[1]);
    c->body[2] = npy_new(n, 0, &c->len[2]);
    if (c->body[0]) fill(npy_data(c->body[0]), n * n, 13, -1, 2);
    if (c->body[1]) fill(npy_data(c->body[1]), n * n, 17, -1, 2);
    if (c->body[2]) fill(npy_data(c->body[2]), n, 19, -1, 2);
    c->out_elems = n * n;
    break;
  case C_GEO: {
    c->nin = 1;
    c->in_name[0] = "points";
    c->body[0] = npy_new(n, 2, &c->len[0]);
    if (!c->body[0]) break;
    double *p = npy_data(c->body[0]), *t = malloc((size_t)n * sizeof *t);
    if (!t) break;
    fill(t, n, 23, -80, 160);
    for (int64_t i = 0; i < n; i++) p[2 * i] = t[i];
    fill(t, n, 29, -180, 360);
    for (int64_t i = 0; i < n; i++) p[2 * i + 1] = t[i];
    free(t);
    c->out_elems = n * n;
    break;
  }
  }
  for (int i = 0; i < c->nin; i++)
    if (!c->body[i]) return -1;
  return 0;
}

static void case_free(cse *c) {
  for (int i = 0; i < c->nin; i++) free(c->body[i]);
}

/* Element 0 of every input changes each run, so no upload is deduplicated
 * (values stay in range: a latitude, a non-zero divisor). */
static unsigned g_tweak;
static void case_tweak(cse *c) {
  g_tweak++;
  for (int i = 0; i < c->nin; i++) npy_data(c->body[i])[0] = 0.5 + (g_tweak % 1000) * 1e-4;
}

/* The job of one step; ids: the uploaded inputs, or (chain steps 2, 3) prev. */
static void case_job(const cse *c, const char *backend, char ids[3][64],
                     int step, const char *prev, char *job, size_t cap) {
  switch (c->kind) {
  case C_MAP1:
    snprintf(job, cap,
             "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":"
             "\"x**2 + 2*x + 1\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
             backend, ids[0]);
    break;
  case C_MAP2:
    snprintf(job, cap,
             "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":\"-b/a\","
             "\"inputs\":{\"a\":{\"array\":\"%s\"},\"b\":{\"array\":\"%s\"}}}}",
             backend, ids[0], ids[1]);
    break;
  case C_REDUCE:
    snprintf(job, cap,
             "{\"kind\":\"reduce\",\"backend\":\"%s\",\"params\":{\"op\":\"sum\","
             "\"expr\":\"x**2\",\"axis\":1,\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
             backend, ids[0]);
    break;
  case C_MATMUL:
    snprintf(job, cap,
             "{\"kind\":\"matmul\",\"backend\":\"%s\",\"params\":{\"a\":{\"array\":"
             "\"%s\"},\"b\":{\"array\":\"%s\"},\"bias\":{\"array\":\"%s\"}}}",
             backend, ids[0], ids[1], ids[2]);
    break;
  case C_GEO:
    snprintf(job, cap,
             "{\"kind\":\"geodesic\",\"backend\":\"%s\",\"params\":{\"points\":"
             "{\"array\":\"%s\"},\"method\":\"karney\"}}",
             backend, ids[0]);
    break;
  case C_CHAIN:
    if (prev)
      snprintf(job, cap,
               "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":\"%s\","
               "\"inputs\":{\"x\":{\"result\":\"%s\"}}}}",
               backend, CHAIN_EXPR[step], prev);
    else
      snprintf(job, cap,
               "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":\"%s\","
               "\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
               backend, CHAIN_EXPR[step], ids[0]);
    break;
  }
}

/* Sampled values of a result against a C reference. 0 or -1 (said). */
static int case_check(const cse *c, const char *npy, size_t len) {
  size_t off = npy_off(npy, len);
  if (!off || len != off + (size_t)c->out_elems * 8) {
    fprintf(stderr, "%s n=%lld: result of %zu bytes, want %lld elements\n",
            case_name[c->kind], (long long)c->n, len, (long long)c->out_elems);
    return -1;
  }
  const double *y = (const double *)(npy + off);
  const double *x = npy_data(c->body[0]);
  for (int s = 0; s < 17; s++) {
    int64_t i = s == 16 ? c->out_elems - 1 : (c->out_elems * s) / 16;
    long double ref = 0;
    double tol = 1e-12;
    switch (c->kind) {
    case C_MAP1:
      ref = (long double)x[i] * x[i] + 2.0L * x[i] + 1;
      break;
    case C_MAP2:
      ref = -(long double)npy_data(c->body[1])[i] / x[i];
      break;
    case C_CHAIN: {
      long double v = 2.0L * x[i] + 1;
      ref = v * v - 1;
      break;
    }
    case C_REDUCE: {
      int64_t cols = c->n / 1000;
      for (int64_t j = 0; j < cols; j++) ref += (long double)x[i * cols + j] * x[i * cols + j];
      tol = 1e-10;
      break;
    }
    case C_MATMUL: {
      int64_t n = c->n, r = i / n, col = i % n;
      const double *X = npy_data(c->body[1]);
      long double mag = 0;
      for (int64_t k = 0; k < n; k++) {
        ref += (long double)x[r * n + k] * X[k * n + col];
        mag += fabsl((long double)x[r * n + k] * X[k * n + col]);
      }
      ref += npy_data(c->body[2])[col];
      /* the worst case of n float64 additions in any order */
      if (fabsl((long double)y[i] - ref) > (long double)n * 2.3e-16L * mag + 1e-300L) goto bad;
      continue;
    }
    case C_GEO: { /* square, symmetric, zero diagonal, within half a meridian ring */
      int64_t n = c->n, r = i / n, col = i % n;
      if (!(y[i] >= 0 && y[i] < 2.0004e7) || y[col * n + r] != y[i] ||
          y[r * n + r] != 0) {
        ref = -1;
        goto bad;
      }
      continue;
    }
    }
    if (fabsl((long double)y[i] - ref) > tol * fabsl(ref) + 1e-300L) {
    bad:
      fprintf(stderr, "WRONG VALUE: %s n=%lld at %lld: %.17g, reference %.17Lg\n",
              case_name[c->kind], (long long)c->n, (long long)i, y[i], ref);
      return -1;
    }
  }
  return 0;
}

/* One run's parts, seconds (-1: failed). */
typedef struct e2e {
  double whole, up, stored, down;
} e2e;

/* One end-to-end run of case c on backend b; the result stays in *res. */
static e2e run_once(cse *c, const char *backend, rbuf *res) {
  e2e r = {-1, -1, -1, -1};
  char ids[3][64] = {{0}}, jid[3][64] = {{0}}, job[1024];
  int nup = 0, njob = 0, ok = 1;
  case_tweak(c);
  double t0 = now_s(), up = 0, stored = 0;
  for (; nup < c->nin && ok; nup++) {
    double t = upload(c->body[nup], c->len[nup], ids[nup]);
    if (t < 0) ok = 0;
    up += t;
  }
  int steps = c->kind == C_CHAIN ? 3 : 1;
  for (int s = 0; ok && s < steps; s++) {
    double st = 0;
    case_job(c, backend, ids, s, s ? jid[s - 1] : NULL, job, sizeof job);
    if (run_job(job, jid[s], &st) != 0) ok = 0;
    else njob++;
    stored += st;
  }
  double down = ok ? download(jid[steps - 1], res) : -1;
  double whole = now_s() - t0;
  if (ok && down >= 0 && case_check(c, res->p, res->n) == 0)
    r = (e2e){whole, up, stored, down};
  for (int s = njob - 1; s >= 0; s--) delete_path("jobs", jid[s]);
  for (int i = 0; i < nup; i++)
    if (ids[i][0]) delete_path("arrays", ids[i]);
  return r;
}

/* The chain as three separate round trips: upload, job, download, the
 * downloaded .npy uploaded as the next step's input. Whole seconds or -1. */
static double run_roundtrips(cse *c, const char *backend, rbuf *res) {
  case_tweak(c);
  const char *body = c->body[0];
  size_t len = c->len[0];
  char *held = NULL;
  double t0 = now_s();
  int ok = 1;
  for (int s = 0; s < 3 && ok; s++) {
    char ids[3][64] = {{0}}, jid[64], job[1024];
    double st;
    if (upload(body, len, ids[0]) < 0) {
      ok = 0;
      break;
    }
    case_job(c, backend, ids, s, NULL, job, sizeof job);
    if (run_job(job, jid, &st) != 0 || download(jid, res) < 0) ok = 0;
    delete_path("jobs", jid);
    delete_path("arrays", ids[0]);
    if (!ok) break;
    if (s < 2) { /* the next upload's body: this result, as the client holds it */
      free(held);
      held = malloc(res->n);
      if (!held) ok = 0;
      else memcpy(held, res->p, res->n);
      body = held;
      len = res->n;
    }
  }
  double t = now_s() - t0;
  free(held);
  /* (the copy into `held` is inside the time: the user holds each result) */
  return ok && case_check(c, res->p, res->n) == 0 ? t : -1;
}

static int write_file(const char *path, const char *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, p + off, n - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  return off == n ? 0 : -1;
}

/* ---- same-host ------------------------------------------------------------ */
/* The {"file"} path (--local-dir): the client writes its arrays as .npy into
 * the shared directory (np.save), names them in the job, has the result
 * written there ("output") and reads it back (np.load; here copied into the
 * client's reused buffer, as a download fills it). g_local: the directory
 * (/dev/shm/... when there is a /dev/shm), "" when this tesseld has no
 * --local-dir. */
static char g_local[256];

/* The job of step s with every {"array": "@@i"} made {"file": in_i}, and an
 * "output" on the last step. */
static void case_job_files(cse *c, const char *backend, int s, const char *prev,
                           char *job, size_t cap) {
  char ids[3][64] = {"@@0", "@@1", "@@2"}, tmp[2048];
  case_job(c, backend, ids, s, prev, tmp, sizeof tmp);
  size_t o = 0;
  int last = c->kind == C_CHAIN ? s == 2 : 1;
  if (last)
    o += (size_t)snprintf(job, cap, "{\"output\":{\"file\":\"%s/out.npy\"},", g_local);
  else
    o += (size_t)snprintf(job, cap, "{");
  for (const char *t = tmp + 1; *t && o + 300 < cap;) {
    if (!strncmp(t, "{\"array\":\"@@", 12) && t[12] >= '0' && t[12] <= '2') {
      o += (size_t)snprintf(job + o, cap - o, "{\"file\":\"%s/in_%c.npy\"}", g_local, t[12]);
      t += 15; /* {"array":"@@i"} */
    } else {
      job[o++] = *t++;
    }
  }
  job[o] = 0;
}

/* One same-host run of case c on backend b: writes the inputs (unless
 * made_there: they were written before and are not timed), runs the jobs,
 * copies the output file into *res. e2e.up = writing the inputs,
 * e2e.down = reading the output. */
static e2e run_local(cse *c, const char *backend, int made_there, rbuf *res) {
  e2e r = {-1, -1, -1, -1};
  char path[400], jid[3][64] = {{0}}, job[2400];
  int ok = 1, njob = 0;
  case_tweak(c);
  if (made_there)
    for (int i = 0; i < c->nin && ok; i++) {
      snprintf(path, sizeof path, "%s/in_%d.npy", g_local, i);
      ok = write_file(path, c->body[i], c->len[i]) == 0;
    }
  double t0 = now_s(), up = 0, stored = 0;
  for (int i = 0; i < c->nin && ok && !made_there; i++) {
    snprintf(path, sizeof path, "%s/in_%d.npy", g_local, i);
    ok = write_file(path, c->body[i], c->len[i]) == 0;
  }
  up = now_s() - t0;
  int steps = c->kind == C_CHAIN ? 3 : 1;
  for (int s = 0; ok && s < steps; s++) {
    double st = 0;
    case_job_files(c, backend, s, s ? jid[s - 1] : NULL, job, sizeof job);
    if (run_job(job, jid[s], &st) != 0) ok = 0;
    else njob++;
    stored += st;
  }
  double t1 = now_s();
  snprintf(path, sizeof path, "%s/out.npy", g_local);
  int fd = ok ? open(path, O_RDONLY) : -1;
  struct stat sb;
  if (fd >= 0 && fstat(fd, &sb) == 0 && rbuf_reserve(res, (size_t)sb.st_size) == 0) {
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
      ssize_t k = read(fd, res->p + got, (size_t)sb.st_size - got);
      if (k <= 0) break;
      got += (size_t)k;
    }
    res->n = got;
  } else {
    ok = 0;
  }
  if (fd >= 0) close(fd);
  double t2 = now_s();
  if (ok && case_check(c, res->p, res->n) == 0)
    r = (e2e){t2 - t0, made_there ? 0 : up, stored, t2 - t1};
  unlink(path);
  for (int i = 0; i < c->nin; i++) {
    snprintf(path, sizeof path, "%s/in_%d.npy", g_local, i);
    unlink(path);
  }
  for (int s = njob - 1; s >= 0; s--) delete_path("jobs", jid[s]);
  return r;
}

/* ---- peers ----------------------------------------------------------------- */
static const char *g_python, *g_script;

/* Run peers_e2e.py; its RESULT line's words into out[0..5]. 0 or -1. */
static int py_peers(const char *kase, const char *dir, int reps, char out[6][32]) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' '%s' %s '%s' %d", g_python, g_script, kase, dir, reps);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[512];
  int rc = -1;
  while (fgets(line, sizeof line, p))
    if (strncmp(line, "RESULT ", 7) == 0)
      rc = sscanf(line + 7, "%31s %31s %31s %31s %31s", out[0], out[1], out[2], out[3],
                  out[4]) >= 3 ? 0 : -1;
  pclose(p);
  return rc;
}


static void fmt_ms(char *b, size_t cap, double s) {
  if (s < 0) snprintf(b, cap, "—");
  else if (s * 1e3 >= 100) snprintf(b, cap, "%.0f", s * 1e3);
  else snprintf(b, cap, "%.1f", s * 1e3);
}
static void fmt_ratio(char *b, size_t cap, double a, double d) {
  if (a > 0 && d > 0) snprintf(b, cap, "%.2f", a / d);
  else snprintf(b, cap, "—");
}

/* ---- main ------------------------------------------------------------------- */
typedef struct opts {
  const char *exe, *parent, *threads, *sizes, *map_sizes, *matmul, *geo, *cases;
  const char *client_sizes, *client_python;
  int reps, peers, matmul_big, geo_big;
  double max_run_s;
  long upload_mib, download_mb;
} opts;

static int64_t *parse_list(const char *s, int *n) {
  int64_t *v = calloc(64, sizeof *v);
  *n = 0;
  char *save = strdup(s ? s : ""), *sp = NULL;
  for (char *t = strtok_r(save, ",", &sp); t && *n < 64; t = strtok_r(NULL, ",", &sp)) {
    int64_t x = (int64_t)strtod(t, NULL);
    if (x > 0) v[(*n)++] = x;
  }
  free(save);
  return v;
}

static int have_case(const opts *o, int k) {
  char want[64];
  snprintf(want, sizeof want, ",%s,", case_name[k]);
  char all[300];
  snprintf(all, sizeof all, ",%s,", o->cases);
  return strstr(all, want) != NULL;
}

static void ceilings(const opts *o, plain *sink, plain *files, const char *work) {
  int reps = o->reps;
  /* Upload. */
  int64_t un = (int64_t)o->upload_mib * 1024 * 1024 / 8;
  size_t ulen;
  char *ub = npy_new(un, 0, &ulen);
  char *dst = ub ? malloc(ulen) : NULL;
  if (!ub || !dst) {
    fprintf(stderr, "bench_e2e: no memory for a %ld MiB body\n", o->upload_mib);
    exit(1);
  }
  fill(npy_data(ub), un, 1, 0, 1);
  double tm[MAXREPS], ts[MAXREPS], tu[MAXREPS];
  memcpy(dst, ub, ulen); /* fault the pages in */
  char surl[64], id[64];
  snprintf(surl, sizeof surl, "http://127.0.0.1:%d/x", sink->port);
  rbuf sm = {0};
  http("POST", surl, "application/x-npy", ub, ulen, &sm); /* warm-up */
  if (upload(ub, ulen, id) >= 0) delete_path("arrays", id);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    memcpy(dst, ub, ulen);
    tm[r] = now_s() - t0;
    t0 = now_s();
    http("POST", surl, "application/x-npy", ub, ulen, &sm);
    ts[r] = now_s() - t0;
    npy_data(ub)[0] = (double)r + 0.5; /* a new array each time */
    tu[r] = upload(ub, ulen, id);
    if (tu[r] >= 0) delete_path("arrays", id);
  }
  free(sm.p);
  free(dst);
  free(ub);
  double cm = median(tm, reps), cs = median(ts, reps), cu = median(tu, reps);
  double gb = (double)ulen / 1e9;
  printf("## Ceilings: upload of a %ld MiB .npy (libcurl, loopback)\n\n", o->upload_mib);
  printf("| path | seconds | GB/s | / sink |\n|---|---|---|---|\n");
  printf("| memcpy (ceiling) | %.3f | %.2f | %.2f |\n", cm, gb / cm, cs / cm);
  printf("| plain HTTP sink (ceiling) | %.3f | %.2f | 1.00 |\n", cs, gb / cs);
  printf("| tesseld POST /v1/arrays | %.3f | %.2f | %.2f |\n\n", cu, gb / cu, cs / cu);
  fflush(stdout);

  /* Download: a map result of --download-mb, from tesseld and from the
   * plain server (the same file's bytes), read three ways, interleaved. */
  int64_t dn = (int64_t)o->download_mb * 1000000 / 8;
  char job[512], jid[64];
  double st;
  snprintf(job, sizeof job,
           "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":\"x + 1\","
           "\"inputs\":{\"x\":{\"range\":{\"stop\":%lld}}}}}",
           (long long)dn);
  if (run_job(job, jid, &st) != 0) return;
  rbuf keep = {0};
  char turl[200], furl[96];
  snprintf(turl, sizeof turl, "%s/v1/jobs/%s/result?format=npy", D.base, jid);
  snprintf(furl, sizeof furl, "http://127.0.0.1:%d/r.npy", files->port);
  snprintf(files->path, sizeof files->path, "%s/download.npy", work);
  if (download(jid, &keep) < 0 || write_file(files->path, keep.p, keep.n) != 0) {
    fprintf(stderr, "bench_e2e: cannot prepare the download ceiling\n");
    free(keep.p);
    return;
  }
  size_t bytes = keep.n;
  const char *how[3] = {"discarded (curl -o /dev/null)", "into a fresh buffer (old client)",
                        "into a reused buffer (this client)"};
  double t[2][3][MAXREPS];
  for (int r = -1; r < reps; r++) /* r = -1: the warm-up */
    for (int s = 0; s < 2; s++)
      for (int w = 0; w < 3; w++) {
        rbuf fresh = {0, 0, 0, 0, 1, 0}, disc = {0, 0, 0, 1, 0, 0};
        rbuf *b = w == 0 ? &disc : w == 1 ? &fresh : &keep;
        double t0 = now_s();
        long code = http("GET", s ? turl : furl, NULL, NULL, 0, b);
        double d = now_s() - t0;
        if (code != 200 || b->n != bytes) d = -1;
        if (r >= 0) t[s][w][r] = d;
        free(fresh.p);
      }
  printf("## Ceilings: download of a %.0f MB result (libcurl, loopback)\n\n", bytes / 1e6);
  printf("| server | read | seconds | GB/s | / plain server, same read |\n|---|---|---|---|---|\n");
  for (int s = 0; s < 2; s++)
    for (int w = 0; w < 3; w++) {
      double m = median(t[s][w], reps), p = median(t[0][w], reps);
      printf("| %s | %s | %.3f | %.2f | %.2f |\n",
             s ? "tesseld GET /v1/jobs/{id}/result" : "plain sendfile server (ceiling)",
             how[w], m, bytes / m / 1e9, p / m);
    }
  printf("\n");
  free(keep.p);
  unlink(files->path);
  delete_path("jobs", jid);

  /* Pinned PCIe, by CuPy. */
  char pr[6][32];
  if (o->peers && py_peers("pcie", work, reps, pr) == 0 && atof(pr[0]) > 0) {
    double b = atof(pr[2]) / 1e9;
    printf("## Ceilings: pinned PCIe, %.0f MB (CuPy)\n\n", b * 1e3);
    printf("| direction | seconds | GB/s |\n|---|---|---|\n");
    printf("| h2d | %.4f | %.1f |\n| d2h | %.4f | %.1f |\n\n", atof(pr[0]),
           b / atof(pr[0]), atof(pr[1]), b / atof(pr[1]));
  } else {
    printf("Pinned PCIe: not measured (no CuPy with a GPU in %s).\n\n", g_python);
  }
  fflush(stdout);
}

/* The peers' inputs (the bodies as last uploaded) and Tessel's answer to
 * them, into the work dir. 1 when written. */
static int save_for_peers(const cse *c, const rbuf *res, const char *work) {
  char p[600];
  for (int i = 0; i < c->nin; i++) {
    snprintf(p, sizeof p, "%s/in_%s.npy", work, c->in_name[i]);
    if (write_file(p, c->body[i], c->len[i]) != 0) return 0;
  }
  snprintf(p, sizeof p, "%s/tessel.npy", work);
  return write_file(p, res->p, res->n) == 0;
}

/* Results of one case and size, per backend. */
typedef struct row {
  int ok;
  int runs;         /* medians of this many runs (1: the warm-up alone) */
  const char *skip; /* not run, and why */
  e2e med;
  double rt; /* chain: three round trips, whole */
} row;

static int g_auto_n, g_auto_within;
static char g_same_host[200];

static void run_case(const opts *o, int kind, int64_t n, const char **backends, int nb,
                     const char *work) {
  cse c;
  if (case_build(&c, kind, n) != 0) {
    fprintf(stderr, "bench_e2e: no memory for %s n=%lld\n", case_name[kind], (long long)n);
    case_free(&c);
    return;
  }
  int reps = o->reps;
  row rows[5] = {{0}};
  rbuf res = {0};
  int saved = !o->peers || kind == C_GEO; /* nothing for peers to read */
  /* Warm-ups, then the repetitions with the backends interleaved (a burst
   * of load on a shared machine then falls on every backend alike). */
  static double w[5][MAXREPS], u[5][MAXREPS], s[5][MAXREPS], d[5][MAXREPS], rt[5][MAXREPS];
  for (int b = 0; b < nb; b++) {
    if (kind == C_GEO && n >= 20000 && !strcmp(backends[b], "serial")) {
      rows[b].skip = "one thread takes minutes at this size";
      continue;
    }
    e2e wu = run_once(&c, backends[b], &res);
    rows[b].ok = wu.whole >= 0;
    if (rows[b].ok && !saved) saved = save_for_peers(&c, &res, work); /* the first success */
    rows[b].runs = rows[b].ok && wu.whole > o->max_run_s ? 1 : reps;
    if (rows[b].runs == 1) { /* too slow to repeat: the warm-up is the figure */
      w[b][0] = wu.whole;
      u[b][0] = wu.up;
      s[b][0] = wu.stored;
      d[b][0] = wu.down;
    }
    if (rows[b].ok && kind == C_CHAIN) {
      if (rows[b].runs == 1) rt[b][0] = run_roundtrips(&c, backends[b], &res);
      else run_roundtrips(&c, backends[b], &res); /* its warm-up */
      if (rows[b].runs == 1 && rt[b][0] < 0) rows[b].ok = 0;
    }
  }
  for (int r = 0; r < reps; r++)
    for (int b = 0; b < nb; b++) {
      if (!rows[b].ok || rows[b].runs == 1) continue;
      e2e x = run_once(&c, backends[b], &res);
      if (x.whole < 0) rows[b].ok = 0;
      w[b][r] = x.whole;
      u[b][r] = x.up;
      s[b][r] = x.stored;
      d[b][r] = x.down;
      if (rows[b].ok && r == reps - 1) saved = saved || save_for_peers(&c, &res, work);
      if (rows[b].ok && kind == C_CHAIN && (rt[b][r] = run_roundtrips(&c, backends[b], &res)) < 0)
        rows[b].ok = 0;
    }
  for (int b = 0; b < nb; b++) {
    if (!rows[b].ok) continue;
    int k = rows[b].runs;
    rows[b].med = (e2e){median(w[b], k), median(u[b], k), median(s[b], k), median(d[b], k)};
    rows[b].rt = kind == C_CHAIN ? median(rt[b], k) : -1;
  }
  free(res.p);
  char pe[6][32] = {"-1", "-1", "-1", "none", "0"};
  if (o->peers && kind != C_GEO) {
    if (py_peers(case_name[kind], work, reps, pe) != 0) {
      fprintf(stderr, "bench_e2e: peers_e2e.py %s gave no result\n", case_name[kind]);
      snprintf(pe[3], 32, "error");
    }
  }
  if (strcmp(pe[3], "MISMATCH") == 0)
    fprintf(stderr, "\n!!!!!! %s n=%lld: a peer's result differs from Tessel's (above)\n\n",
            case_name[kind], (long long)n);
  double np_s = atof(pe[0]), cp_s = atof(pe[1]), th_s = atof(pe[2]);
  /* auto / best: auto's submit->stored over the fastest other backend's. */
  double best = -1, autos = -1;
  for (int b = 0; b < nb; b++) {
    if (!rows[b].ok) continue;
    if (!strcmp(backends[b], "auto")) autos = rows[b].med.stored;
    else if (best < 0 || rows[b].med.stored < best) best = rows[b].med.stored;
  }
  if (autos > 0 && best > 0) {
    g_auto_n++;
    if (autos <= 1.10 * best) g_auto_within++;
  }
  char sz[32];
  snprintf(sz, sizeof sz, "%lld", (long long)n);
  for (int b = 0; b < nb; b++) {
    char a[4][32], pn[32], pc[32], pt[32], rn[32], rc[32], ab[32], be[64];
    if (rows[b].skip) {
      printf("| %s | %s | %s | skipped: %s | | | | | | | | | | |\n", case_name[kind], sz,
             backends[b], rows[b].skip);
      continue;
    }
    snprintf(be, sizeof be, "%s%s", backends[b], rows[b].runs == 1 ? " (1 run)" : "");
    if (rows[b].ok) {
      fmt_ms(a[0], 32, rows[b].med.whole);
      fmt_ms(a[1], 32, rows[b].med.up);
      fmt_ms(a[2], 32, rows[b].med.stored);
      fmt_ms(a[3], 32, rows[b].med.down);
    } else {
      for (int i = 0; i < 4; i++) snprintf(a[i], 32, "error");
    }
    fmt_ms(pn, 32, np_s);
    fmt_ms(pc, 32, cp_s);
    fmt_ms(pt, 32, th_s);
    double wm = rows[b].ok ? rows[b].med.whole : -1;
    fmt_ratio(rn, 32, wm, np_s);
    fmt_ratio(rc, 32, wm, cp_s);
    if (!strcmp(backends[b], "auto")) fmt_ratio(ab, 32, autos, best);
    else snprintf(ab, 32, " ");
    printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
           case_name[kind], sz, be, a[0], a[1], a[2], a[3], pn, pc, pt, rn, rc, ab,
           b == 0 ? pe[3] : "");
  }
  if (!g_local[0] || kind == C_GEO) {
    printf("| %s | %s | same-host | skipped: %s | | | | | | | | | | |\n", case_name[kind], sz,
           g_local[0] ? "geodesic takes its points inline here" : g_same_host);
  } else { /* the GPU when there is one (the issue's target), else auto */
    const char *lb = nb > 3 ? "cuda" : "auto";
    for (int made = 0; made <= 1; made++) {
      double lw[MAXREPS], lu[MAXREPS], ls[MAXREPS], ld[MAXREPS];
      int lok = 1;
      rbuf lres = {0};
      run_local(&c, lb, made, &lres); /* warm-up */
      for (int r = 0; r < reps && lok; r++) {
        e2e x = run_local(&c, lb, made, &lres);
        lok = x.whole >= 0;
        lw[r] = x.whole, lu[r] = x.up, ls[r] = x.stored, ld[r] = x.down;
      }
      free(lres.p);
      char a[4][32], rn[32], rc[32], be[80];
      snprintf(be, sizeof be, "same-host %s%s", lb, made ? ", input made in the dir" : "");
      double wm = lok ? median(lw, reps) : -1;
      fmt_ms(a[0], 32, wm);
      fmt_ms(a[1], 32, lok ? median(lu, reps) : -1);
      fmt_ms(a[2], 32, lok ? median(ls, reps) : -1);
      fmt_ms(a[3], 32, lok ? median(ld, reps) : -1);
      fmt_ratio(rn, 32, wm, np_s);
      fmt_ratio(rc, 32, wm, cp_s);
      printf("| %s | %s | %s | %s | %s | %s | %s | | | | %s | %s | | |\n", case_name[kind],
             sz, be, lok ? a[0] : "error", a[1], a[2], a[3], rn, rc);
    }
  }
  if (kind == C_CHAIN) {
    printf("| | | *chain:* | *whole, chained* | *three round trips* | *round trips / chained* "
           "| | | | | | | | |\n");
    for (int b = 0; b < nb; b++) {
      if (rows[b].skip) continue;
      char cw[32], ct[32], cq[32];
      fmt_ms(cw, 32, rows[b].ok ? rows[b].med.whole : -1);
      fmt_ms(ct, 32, rows[b].ok ? rows[b].rt : -1);
      fmt_ratio(cq, 32, rows[b].ok ? rows[b].rt : -1, rows[b].ok ? rows[b].med.whole : -1);
      printf("| chain | %s | %s | %s | %s | %s | | | | | | | | |\n", sz, backends[b], cw, ct, cq);
    }
  }
  fflush(stdout);
  char p[600];
  for (int i = 0; i < c.nin; i++) {
    snprintf(p, sizeof p, "%s/in_%s.npy", work, c.in_name[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/tessel.npy", work);
  unlink(p);
  case_free(&c);
}

/* ---- the Python client (issue 12) ----------------------------------------- */
/* bench_client.py next to peers_e2e.py (found the same way). */
static const char *find_client_script(void) {
  static char p[600];
  if (access("tests/bench/bench_client.py", R_OK) == 0) return "tests/bench/bench_client.py";
  snprintf(p, sizeof p, "%s", __FILE__);
  char *slash = strrchr(p, '/');
  if (slash) snprintf(slash + 1, sizeof p - (size_t)(slash + 1 - p), "bench_client.py");
  return p;
}

/* Why the client rows cannot run here, or NULL. */
static const char *client_skip(const char *py, const char *script, char *why, size_t cap) {
  char cmd[1200];
  if (!g_local[0]) return g_same_host;
  if (access(script, R_OK) != 0) {
    snprintf(why, cap, "no %s", script);
    return why;
  }
  snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", py);
  if (system(cmd) != 0) {
    snprintf(why, cap, "%s has no NumPy (set TESSEL_PYTHON or --client-python)", py);
    return why;
  }
  if (system("curl --version >/dev/null 2>&1") != 0) return "no curl (the peer)";
  return NULL;
}

/* The client's rows at n: C same-host runs (reps before, reps after),
 * bench_client.py --row between them, both tables printed. */
static void client_rows(const opts *o, int64_t n, const char *backend) {
  char why[300], cmd[2048], line[1024];
  const char *py = o->client_python, *script = find_client_script();
  const char *skip = client_skip(py, script, why, sizeof why);
  if (skip) {
    printf("| %lld | skipped: %s | | | | |\n", (long long)n, skip);
    return;
  }
  cse c;
  if (case_build(&c, C_MAP1, n) != 0) {
    printf("| %lld | skipped: no memory | | | | |\n", (long long)n);
    case_free(&c);
    return;
  }
  int reps = o->reps, k = 0, ok = 1;
  double cw[2 * MAXREPS];
  rbuf res = {0};
  run_local(&c, backend, 0, &res); /* warm-up */
  for (int r = 0; r < reps && ok; r++) {
    cw[k] = run_local(&c, backend, 0, &res).whole;
    ok = cw[k++] >= 0;
  }
  snprintf(cmd, sizeof cmd, "'%s' '%s' --row '%s' '%s' %lld %d %s 2>&1", py, script, D.base,
           g_local, (long long)n, reps, backend);
  FILE *p = popen(cmd, "r");
  char got[1024] = "", last[1024] = "no output";
  while (p && fgets(line, sizeof line, p)) {
    if (!strncmp(line, "RESULT ", 7)) snprintf(got, sizeof got, "%s", line + 7);
    else if (line[0] != '\n') snprintf(last, sizeof last, "%s", line);
  }
  if (p) pclose(p);
  last[strcspn(last, "\n")] = 0;
  for (int r = 0; r < reps && ok; r++) {
    cw[k] = run_local(&c, backend, 0, &res).whole;
    ok = cw[k++] >= 0;
  }
  free(res.p);
  case_free(&c);
  /* got: "bytes=B key=seconds ..." */
  static const char *keys[] = {"bytes", "curl_up", "curl_down", "py_up", "py_down",
                               "py_down_out", "sh_py", "sh_py_out", "sh_raw"};
  double v[9];
  for (int i = 0; i < 9; i++) {
    char want[32];
    snprintf(want, sizeof want, "%s=", keys[i]);
    const char *at = strstr(got, want);
    v[i] = at ? atof(at + strlen(want)) : -1;
    if (v[i] <= 0) ok = 0;
  }
  if (!got[0]) {
    printf("| %lld | error: bench_client.py: %s | | | | |\n", (long long)n, last);
    return;
  }
  if (!ok) {
    printf("| %lld | error: a C same-host run failed or a figure is missing | | | | |\n",
           (long long)n);
    return;
  }
  double gb = v[0] / 1e9, csh = median(cw, k), curl = 2 * gb / (v[1] + v[2]);
  double tp = 2 * gb / (v[3] + v[4]), tpo = 2 * gb / (v[3] + v[5]);
  printf("| %lld | curl -T / curl -o /dev/null | %.0f | %.0f | %.2f | 1.00 |\n", (long long)n,
         v[1] * 1e3, v[2] * 1e3, curl);
  printf("| %lld | client: c.upload / Job.result (new array) | %.0f | %.0f | %.2f | %.2f |\n",
         (long long)n, v[3] * 1e3, v[4] * 1e3, tp, tp / curl);
  printf("| %lld | client: c.upload / Job.result(out=reused) | %.0f | %.0f | %.2f | %.2f |\n",
         (long long)n, v[3] * 1e3, v[5] * 1e3, tpo, tpo / curl);
  printf("| %lld | *same-host %s, whole:* | | | *ms* | *client / C client* |\n", (long long)n,
         backend);
  printf("| %lld | C client (the same-host row's steps; %d runs) | | | %.0f | 1.00 |\n",
         (long long)n, k, csh * 1e3);
  printf("| %lld | raw Python (the same steps) | | | %.0f | %.2f |\n", (long long)n, v[8] * 1e3,
         v[8] / csh);
  printf("| %lld | client: c.map(..., x=a) (result mapped) | | | %.0f | %.2f |\n", (long long)n,
         v[6] * 1e3, v[6] / csh);
  printf("| %lld | client: submit_map(...).result(out=reused) | | | %.0f | %.2f |\n",
         (long long)n, v[7] * 1e3, v[7] / csh);
  fflush(stdout);
}

/* Does this tesseld take --local-dir (the same-host path)? */
static int has_local_dir(const char *exe) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", exe);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  char line[512];
  int yes = 0;
  while (fgets(line, sizeof line, p))
    if (strstr(line, "--local-dir")) yes = 1;
  pclose(p);
  return yes;
}

static const char *find_script(void) {
  static char p[600];
  if (access("tests/bench/peers_e2e.py", R_OK) == 0) return "tests/bench/peers_e2e.py";
  snprintf(p, sizeof p, "%s", __FILE__);
  char *slash = strrchr(p, '/');
  if (slash) snprintf(slash + 1, sizeof p - (size_t)(slash + 1 - p), "peers_e2e.py");
  return p;
}

int main(int argc, char **argv) {
  opts o = {.parent = "/tmp", .sizes = "1e6,1e7", .map_sizes = "", .matmul = "1024,4096",
            .geo = "5000", .cases = "map1,map2,reduce,matmul,geodesic,chain", .reps = 3,
            .peers = 1, .upload_mib = 1024, .download_mb = 800, .max_run_s = 20,
            .client_sizes = "1e8"};
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr,
            "usage: bench_e2e <tesseld> [--sizes 1e6,1e7] [--map-sizes 1e8] "
            "[--matmul 1024,4096] [--matmul-big] [--geo 5000] [--geo-big] "
            "[--cases map1,map2,reduce,matmul,geodesic,chain] [--upload-mib 1024] "
            "[--download-mb 800] [--reps 3] [--max-run-s 20] [--threads T] [--dir P] "
            "[--no-peers] [--client-sizes 1e8] [--client-python PY]\n");
    return 2;
  }
  o.exe = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--sizes") && v) o.sizes = argv[++i];
    else if (!strcmp(a, "--map-sizes") && v) o.map_sizes = argv[++i];
    else if (!strcmp(a, "--matmul") && v) o.matmul = argv[++i];
    else if (!strcmp(a, "--matmul-big")) o.matmul_big = 1;
    else if (!strcmp(a, "--geo") && v) o.geo = argv[++i];
    else if (!strcmp(a, "--geo-big")) o.geo_big = 1;
    else if (!strcmp(a, "--cases") && v) o.cases = argv[++i];
    else if (!strcmp(a, "--upload-mib") && v) o.upload_mib = atol(argv[++i]);
    else if (!strcmp(a, "--download-mb") && v) o.download_mb = atol(argv[++i]);
    else if (!strcmp(a, "--reps") && v) o.reps = atoi(argv[++i]);
    else if (!strcmp(a, "--max-run-s") && v) o.max_run_s = atof(argv[++i]);
    else if (!strcmp(a, "--threads") && v) o.threads = argv[++i];
    else if (!strcmp(a, "--dir") && v) o.parent = argv[++i];
    else if (!strcmp(a, "--no-peers")) o.peers = 0;
    else if (!strcmp(a, "--client-sizes") && v) o.client_sizes = argv[++i];
    else if (!strcmp(a, "--client-python") && v) o.client_python = argv[++i];
    else {
      fprintf(stderr, "bench_e2e: unknown or incomplete option %s\n", a);
      return 2;
    }
  }
  if (o.reps < 1 || o.reps > MAXREPS) o.reps = 3;
  g_python = getenv("PYTHON") ? getenv("PYTHON") : "python3";
  if (!o.client_python)
    o.client_python = getenv("TESSEL_PYTHON") && *getenv("TESSEL_PYTHON") ? getenv("TESSEL_PYTHON")
                                                                          : g_python;
  g_script = find_script();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  g_curl = curl_easy_init();
  signal(SIGPIPE, SIG_IGN);
  int local = has_local_dir(o.exe);
  if (local) { /* a client on this host would use /dev/shm */
    struct stat sb;
    snprintf(g_local, sizeof g_local, "%s/tessel-bench-e2e-%d",
             stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    if (mkdir(g_local, 0700) != 0) g_local[0] = 0;
  }
  const char *extra[] = {"--max-upload", "17179869184", g_local[0] ? "--local-dir" : NULL,
                         g_local, o.threads ? "--threads" : NULL, o.threads, NULL};
  if (!g_local[0]) extra[2] = o.threads ? "--threads" : NULL, extra[3] = o.threads, extra[4] = NULL;
  if (bench_daemon_start(&D, o.exe, o.parent, "bench_e2e", extra) != 0) return 1;
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  char work[400];
  snprintf(work, sizeof work, "%s/work", D.dir);
  mkdir(work, 0755);
  plain sink, files;
  if (plain_start(&sink, sink_main) != 0 || plain_start(&files, files_main) != 0) {
    fprintf(stderr, "bench_e2e: cannot start the ceilings' servers\n");
    bench_daemon_remove(&D);
    return 1;
  }
  snprintf(g_same_host, sizeof g_same_host, "%s",
           local ? "cannot make a directory for --local-dir" : "this tesseld has no --local-dir");

  char load[128] = "", cpu[160] = "";
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf && fgets(load, sizeof load, lf)) load[strcspn(load, "\n")] = 0;
  if (lf) fclose(lf);
  lf = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (lf && fgets(line, sizeof line, lf))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
      cpu[strcspn(cpu, "\n")] = 0;
      break;
    }
  if (lf) fclose(lf);

  /* Devices: is there a GPU? */
  char url[160], gpu[200] = "none";
  rbuf m = {0};
  snprintf(url, sizeof url, "%s/v1/devices", D.base);
  int have_cuda = 0;
  if (http("GET", url, NULL, NULL, 0, &m) == 200) {
    json_t *j = json_loads(m.p, 0, NULL);
    json_t *cu = json_object_get(j, "cuda");
    have_cuda = json_is_true(json_object_get(cu, "available"));
    json_t *d0 = json_array_get(json_object_get(cu, "devices"), 0);
    const char *nm = json_string_value(json_object_get(d0, "name"));
    if (have_cuda) snprintf(gpu, sizeof gpu, "%s", nm ? nm : "yes");
    json_decref(j);
  }
  free(m.p);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("# bench_e2e: %ld CPUs (%s), GPU %s, load %s, tesseld %s, peers %s, "
         "median of %d after a warm-up\n\n",
         ncpu, cpu, gpu, load, o.exe, o.peers ? g_python : "off", o.reps);
  fflush(stdout);

  ceilings(&o, &sink, &files, work);

  const char *backends[5];
  int nb = 0;
  backends[nb++] = "serial";
  backends[nb++] = "cpu";
  if (have_cuda) backends[nb++] = "cuda";
  backends[nb++] = "auto";
  printf("## Cases: client array -> upload -> job -> download into client memory (ms)\n\n");
  printf("| case | n | backend | whole | upload | submit->stored | download | NumPy "
         "compute | CuPy asarray+compute+asnumpy | PyTorch to(cuda)+compute+cpu() | "
         "whole / NumPy | whole / CuPy | auto / best | peers' check |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  fflush(stdout);
  int ns, nms, nmm, ng;
  int64_t *sizes = parse_list(o.sizes, &ns), *msizes = parse_list(o.map_sizes, &nms);
  int64_t *mm = parse_list(o.matmul, &nmm), *geo = parse_list(o.geo, &ng);
  if (o.matmul_big && nmm < 64) mm[nmm++] = 8192;
  if ((o.geo_big || have_cuda) && ng < 64) geo[ng++] = 20000;
  for (int k = 0; k < NCASES; k++) {
    if (!have_case(&o, k)) continue;
    if (k == C_MATMUL) {
      for (int i = 0; i < nmm; i++) run_case(&o, k, mm[i], backends, nb, work);
    } else if (k == C_GEO) {
      for (int i = 0; i < ng; i++) run_case(&o, k, geo[i], backends, nb, work);
    } else {
      for (int i = 0; i < ns; i++)
        if (k != C_REDUCE || sizes[i] >= 1000) run_case(&o, k, sizes[i], backends, nb, work);
      if (k == C_MAP1 || k == C_MAP2)
        for (int i = 0; i < nms; i++) run_case(&o, k, msizes[i], backends, nb, work);
    }
  }
  int ncs;
  int64_t *csz = parse_list(o.client_sizes, &ncs);
  if (ncs) {
    printf("\n## The Python client (issue 12): NumPy -> NumPy, map x**2 + 2*x + 1, float64 "
           "(%s)\n\n", o.client_python);
    printf("| n | client | upload ms | download ms | GB/s (up + down) | / curl |\n"
           "|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (int i = 0; i < ncs; i++) client_rows(&o, csz[i], have_cuda ? "cuda" : "auto");
    printf("\nissue 12's targets: client / curl >= 0.8 (over HTTP); client / C client <= 1.2 "
           "(same-host).\n");
  }
  free(csz);
  printf("\nCases:");
  for (int k = 0; k < NCASES; k++) printf(" %s = %s%s", case_name[k], case_title[k], k + 1 < NCASES ? ";" : ".\n");
  printf("\nauto within 10 %% of the best backend's submit->stored on %d of %d cases "
         "(%.0f %%; issue 11's target: >= 90 %%).\n",
         g_auto_within, g_auto_n, g_auto_n ? 100.0 * g_auto_within / g_auto_n : 0.0);
  free(sizes);
  free(msizes);
  free(mm);
  free(geo);
  plain_stop(&sink);
  plain_stop(&files);
  bench_daemon_remove(&D);
  if (g_local[0]) rmdir(g_local);
  curl_easy_cleanup(g_curl);
  curl_global_cleanup();
  return 0;
}
