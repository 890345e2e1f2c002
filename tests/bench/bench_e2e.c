/* bench_e2e.c — what a user holding an array waits for, end to end, side by
 * side with the ceilings and the peers, in one run.
 *
 *   bench_e2e <tesseld> [--sizes 1e6,1e7,1e8] [--upload-mib 1024]
 *             [--reps 3] [--threads T] [--dir PARENT=/tmp] [--no-peers]
 *
 * Ceilings (this machine, this run):
 *   memcpy    — one thread copying the upload's bytes;
 *   sink      — libcurl POSTing the same .npy body to a plain HTTP sink in
 *               this process (a thread that reads the headers, drains
 *               Content-Length bytes into a 1 MiB buffer and answers 200):
 *               loopback TCP with HTTP framing and nothing else.
 * Upload: the same libcurl POST of an .npy body to tesseld's /v1/arrays
 *   (each repetition a different array, so nothing is deduplicated); the
 *   table gives GB/s and the ratio to the sink (issue 11's target: >= 0.8).
 * End to end, per size and backend (serial, cpu, auto; cuda when the
 *   daemon has a GPU): the seeds' map y = x**2 + 2*x + 1 over float64 held
 *   by the client as raw doubles — upload .npy, POST /v1/jobs?wait=60
 *   naming it, GET the result as .npy into memory. Columns: the whole
 *   (what the user waits for), the upload, the job's submit->stored (its
 *   timings_ms.total), the download, and the ratio to NumPy.
 * Peers ($PYTHON or python3, when it imports them): NumPy computing the same
 *   expression on an array it already holds; CuPy (asarray + compute +
 *   asnumpy) and PyTorch (.to(cuda) ... .cpu()) on the GPU machine.
 *
 * Every figure is the median of --reps runs after one warm-up. Not yet
 * here (issue 11 lists them): reduce, matmul, geodesic, chains, the
 * same-host path and pinned-PCIe ceilings.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_daemon.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- .npy bodies ------------------------------------------------------------ */
static char *npy_body(int64_t n, unsigned seed, size_t *len) {
  char dict[128];
  int dl = snprintf(dict, sizeof dict,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld,), }",
                    (long long)n);
  size_t h = 128;
  *len = h + (size_t)n * 8;
  char *b = malloc(*len);
  if (!b) return NULL;
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(h - 10);
  b[9] = 0;
  memset(b + 10, ' ', h - 10);
  memcpy(b + 10, dict, (size_t)dl);
  b[h - 1] = '\n';
  double *d = (double *)(b + h);
  for (int64_t i = 0; i < n; i++) d[i] = (double)((i * 2654435761u + seed) % 1000) * 1e-3;
  return b;
}

/* ---- libcurl -------------------------------------------------------------- */
typedef struct membuf {
  char *p;
  size_t n, cap;
} membuf;

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
  membuf *m = ud;
  size_t add = sz * nm;
  if (m->n + add + 1 > m->cap) {
    size_t c = m->cap ? m->cap : 65536;
    while (c < m->n + add + 1) c *= 2;
    char *np = realloc(m->p, c);
    if (!np) return 0;
    m->p = np;
    m->cap = c;
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

/* One request; the answer's body into *out (reset). Returns the status. */
static long http(const char *method, const char *url, const char *ctype,
                 const char *body, size_t len, membuf *out) {
  out->n = 0;
  CURL *c = curl_easy_init();
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
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 600L);
  /* Big buffers, as a client moving arrays would set (libcurl's defaults
   * are 16 KiB down and 64 KiB up): the same for tesseld and the sink. */
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
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return code;
}

/* ---- a plain HTTP sink (the loopback ceiling) ------------------------------ */
typedef struct sink {
  int lfd, port;
  pthread_t th;
} sink;

static void *sink_main(void *arg) {
  sink *k = arg;
  char *buf = malloc(1 << 20);
  for (;;) {
    int fd = accept(k->lfd, NULL, NULL);
    if (fd < 0) break;
    size_t hn = 0;
    char *end = NULL;
    while (!end) {
      ssize_t r = recv(fd, buf + hn, 65536, 0);
      if (r <= 0) break;
      hn += (size_t)r;
      buf[hn] = 0;
      end = strstr(buf, "\r\n\r\n");
    }
    if (!end) {
      close(fd);
      continue;
    }
    const char *cl = strcasestr(buf, "Content-Length:");
    long long want = cl ? atoll(cl + 15) : 0, got = (long long)(hn - (size_t)(end + 4 - buf));
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

static int sink_start(sink *k) {
  k->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  socklen_t al = sizeof a;
  if (bind(k->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(k->lfd, 8) != 0 ||
      getsockname(k->lfd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  k->port = ntohs(a.sin_port);
  return pthread_create(&k->th, NULL, sink_main, k);
}

/* ---- the daemon (bench_daemon.h) ------------------------------------------ */

/* Upload; the id into id[]. Returns seconds or -1. */
static double upload(bench_daemon *d, const char *body, size_t len, char id[64]) {
  char url[128];
  snprintf(url, sizeof url, "%s/v1/arrays", d->base);
  membuf m = {0};
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

static void delete_array(bench_daemon *d, const char *id) {
  char url[160];
  snprintf(url, sizeof url, "%s/v1/arrays/%s", d->base, id);
  membuf m = {0};
  http("DELETE", url, NULL, NULL, 0, &m);
  free(m.p);
}

/* One end-to-end run; times in seconds (-1 on error). */
typedef struct e2e {
  double whole, up, stored, down;
} e2e;

static e2e run_once(bench_daemon *d, const char *body, size_t len,
                    const char *backend, int64_t n) {
  e2e r = {-1, -1, -1, -1};
  char id[64];
  double t0 = now_s();
  r.up = upload(d, body, len, id);
  if (r.up < 0) return r;
  char url[256], job[512];
  snprintf(url, sizeof url, "%s/v1/jobs?wait=60", d->base);
  snprintf(job, sizeof job,
           "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":"
           "\"x**2 + 2*x + 1\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
           backend, id);
  membuf m = {0};
  long st = http("POST", url, "application/json", job, strlen(job), &m);
  json_t *o = st == 200 ? json_loads(m.p, 0, NULL) : NULL;
  const char *status = o ? json_string_value(json_object_get(o, "status")) : NULL;
  if (!status || strcmp(status, "succeeded") != 0) {
    fprintf(stderr, "job (%s): %ld %.300s\n", backend, st, m.p ? m.p : "");
    json_decref(o);
    free(m.p);
    delete_array(d, id);
    return r;
  }
  r.stored = json_real_value(json_object_get(json_object_get(o, "timings_ms"), "total")) / 1e3;
  char jid[64];
  snprintf(jid, sizeof jid, "%s", json_string_value(json_object_get(o, "id")));
  json_decref(o);
  snprintf(url, sizeof url, "%s/v1/jobs/%s/result?format=npy", d->base, jid);
  /* The client knows the result's size: one buffer, no regrowth (a user's
   * np.empty + readinto). */
  if (m.cap < 128 + (size_t)n * 8 + 1) {
    free(m.p);
    m.cap = 128 + (size_t)n * 8 + 1;
    m.p = malloc(m.cap);
    if (!m.p) return r;
  }
  double t1 = now_s();
  st = http("GET", url, NULL, NULL, 0, &m);
  r.down = now_s() - t1;
  r.whole = now_s() - t0;
  if (st != 200 || m.n != 128 + (size_t)n * 8) {
    fprintf(stderr, "result: %ld, %zu bytes\n", st, m.n);
    r.whole = -1;
  } else { /* check one value: y = (x+1)^2 */
    double x, y;
    memcpy(&x, body + 128 + 8 * (size_t)(n / 2), 8);
    memcpy(&y, m.p + 128 + 8 * (size_t)(n / 2), 8);
    if (fabs(y - (x + 1) * (x + 1)) > 1e-12 * fabs(y) + 1e-15) {
      fprintf(stderr, "wrong value: %.17g for x = %.17g\n", y, x);
      r.whole = -1;
    }
  }
  free(m.p);
  snprintf(url, sizeof url, "%s/v1/jobs/%s", d->base, jid);
  membuf z = {0};
  http("DELETE", url, NULL, NULL, 0, &z);
  free(z.p);
  delete_array(d, id);
  return r;
}

/* ---- peers in python3 -------------------------------------------------------- */
/* "numpy cupy torch" times (seconds, -1 when not importable). */
static void peers(int64_t n, int reps, double out[3]) {
  out[0] = out[1] = out[2] = -1;
  char cmd[4096];
  const char *py = getenv("PYTHON") ? getenv("PYTHON") : "python3";
  snprintf(cmd, sizeof cmd,
           "%s - <<'EOF' 2>/dev/null\n"
           "import time, statistics\n"
           "import numpy as np\n"
           "n, reps = %lld, %d\n"
           "x = (np.arange(n, dtype=np.float64) * 2654435761 %% 1000) * 1e-3\n"
           "def med(f):\n"
           "    f(); t = []\n"
           "    for _ in range(reps):\n"
           "        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)\n"
           "    return statistics.median(t)\n"
           "r = [med(lambda: x**2 + 2*x + 1), -1, -1]\n"
           "try:\n"
           "    import cupy as cp\n"
           "    if cp.cuda.runtime.getDeviceCount() > 0:\n"
           "        def c():\n"
           "            g = cp.asarray(x); y = cp.asnumpy(g**2 + 2*g + 1)\n"
           "        r[1] = med(c)\n"
           "except Exception: pass\n"
           "try:\n"
           "    import torch\n"
           "    if torch.cuda.is_available():\n"
           "        tx = torch.from_numpy(x)\n"
           "        def t():\n"
           "            g = tx.to('cuda'); y = (g**2 + 2*g + 1).cpu().numpy()\n"
           "        r[2] = med(t)\n"
           "except Exception: pass\n"
           "print(r[0], r[1], r[2])\n"
           "EOF",
           py, (long long)n, reps);
  FILE *p = popen(cmd, "r");
  if (!p) return;
  /* (cmd starts with "python3": $PYTHON, when set, names another one) */
  if (fscanf(p, "%lf %lf %lf", &out[0], &out[1], &out[2]) != 3) out[0] = out[1] = out[2] = -1;
  pclose(p);
}

static void fmt_ms(char *b, size_t cap, double s) {
  if (s < 0) snprintf(b, cap, "—");
  else snprintf(b, cap, "%.1f", s * 1e3);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_e2e <tesseld> [--sizes 1e6,1e7,1e8] "
                    "[--upload-mib 1024] [--reps 3] [--threads T] [--dir P] "
                    "[--no-peers]\n");
    return 2;
  }
  const char *exe = argv[1], *parent = "/tmp", *threads = NULL;
  const char *sizes_s = "1e6,1e7,1e8";
  int reps = 3, want_peers = 1;
  long upload_mib = 1024;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes_s = argv[++i];
    else if (!strcmp(argv[i], "--upload-mib") && i + 1 < argc) upload_mib = atol(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) parent = argv[++i];
    else if (!strcmp(argv[i], "--no-peers")) want_peers = 0;
  }
  if (reps < 1 || reps > 50) reps = 3;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  signal(SIGPIPE, SIG_IGN);
  bench_daemon d;
  const char *extra[] = {"--max-upload", "17179869184", threads ? "--threads" : NULL,
                         threads, NULL};
  if (bench_daemon_start(&d, exe, parent, "bench_e2e", extra) != 0) return 1;
  sink k;
  if (sink_start(&k) != 0) {
    fprintf(stderr, "bench_e2e: cannot start the sink\n");
    bench_daemon_remove(&d);
    return 1;
  }
  char load[128] = "";
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf && fgets(load, sizeof load, lf)) load[strcspn(load, "\n")] = 0;
  if (lf) fclose(lf);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("# bench_e2e: %ld CPUs, load %s, tesseld %s, median of %d after a warm-up\n\n",
         ncpu, load, exe, reps);

  /* Devices: is there a GPU? */
  char url[160];
  membuf m = {0};
  snprintf(url, sizeof url, "%s/v1/devices", d.base);
  int have_cuda = 0;
  if (http("GET", url, NULL, NULL, 0, &m) == 200) {
    json_t *o = json_loads(m.p, 0, NULL);
    have_cuda = json_is_true(json_object_get(json_object_get(o, "cuda"), "available"));
    json_decref(o);
  }
  free(m.p);

  /* ---- ceilings and the upload ---- */
  int64_t un = (int64_t)upload_mib * 1024 * 1024 / 8;
  size_t ulen;
  char *ub = npy_body(un, 1, &ulen);
  char *dst = malloc(ulen);
  if (!ub || !dst) {
    fprintf(stderr, "bench_e2e: no memory for a %ld MiB body\n", upload_mib);
    return 1;
  }
  double tm[50], ts[50], tu[50];
  memcpy(dst, ub, ulen); /* fault the pages in */
  char surl[64];
  snprintf(surl, sizeof surl, "http://127.0.0.1:%d/x", k.port);
  membuf sm = {0};
  http("POST", surl, "application/x-npy", ub, ulen, &sm); /* warm-up */
  char id[64];
  double w = upload(&d, ub, ulen, id);
  if (w >= 0) delete_array(&d, id);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    memcpy(dst, ub, ulen);
    tm[r] = now_s() - t0;
    t0 = now_s();
    http("POST", surl, "application/x-npy", ub, ulen, &sm);
    ts[r] = now_s() - t0;
    ((double *)(ub + 128))[0] = (double)r + 0.5; /* a new array each time */
    tu[r] = upload(&d, ub, ulen, id);
    if (tu[r] >= 0) delete_array(&d, id);
  }
  free(sm.p);
  free(dst);
  double cm = median(tm, reps), cs = median(ts, reps), cu = median(tu, reps);
  double gb = (double)ulen / 1e9;
  printf("## Upload of a %ld MiB .npy (libcurl, loopback)\n\n", upload_mib);
  printf("| path | seconds | GB/s | / sink |\n|---|---|---|---|\n");
  printf("| memcpy (ceiling) | %.3f | %.2f | %.2f |\n", cm, gb / cm, cs / cm);
  printf("| plain HTTP sink (ceiling) | %.3f | %.2f | 1.00 |\n", cs, gb / cs);
  printf("| tesseld POST /v1/arrays | %.3f | %.2f | %.2f |\n\n", cu, gb / cu, cs / cu);
  free(ub);

  /* ---- end to end ---- */
  const char *backends[] = {"serial", "cpu", "auto", "cuda"};
  int nb = have_cuda ? 4 : 3;
  printf("## map y = x**2 + 2*x + 1, float64: client array -> upload -> job -> "
         "download (ms)\n\n");
  printf("| n | backend | whole | upload | submit->stored | download | NumPy "
         "compute | whole / NumPy | CuPy asarray+compute+asnumpy | PyTorch "
         "to+compute+cpu | whole / CuPy |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  char *save = strdup(sizes_s), *tok, *sp = NULL;
  for (tok = strtok_r(save, ",", &sp); tok; tok = strtok_r(NULL, ",", &sp)) {
    int64_t n = (int64_t)strtod(tok, NULL);
    if (n < 1) continue;
    size_t len;
    char *body = npy_body(n, 7, &len);
    if (!body) continue;
    double pe[3] = {-1, -1, -1};
    if (want_peers) peers(n, reps, pe);
    for (int b = 0; b < nb; b++) {
      double w1[50], u1[50], s1[50], d1[50];
      int ok = 1;
      ((double *)(body + 128))[1] = -1.0 - b; /* a new array per backend */
      e2e warm = run_once(&d, body, len, backends[b], n);
      if (warm.whole < 0) ok = 0;
      for (int r = 0; ok && r < reps; r++) {
        ((double *)(body + 128))[0] = (double)r * 0.25 + b;
        e2e x = run_once(&d, body, len, backends[b], n);
        if (x.whole < 0) ok = 0;
        w1[r] = x.whole;
        u1[r] = x.up;
        s1[r] = x.stored;
        d1[r] = x.down;
      }
      char a[5][32], pn[32], pc[32], pt[32], rn[32], rc[32];
      if (ok) {
        fmt_ms(a[0], 32, median(w1, reps));
        fmt_ms(a[1], 32, median(u1, reps));
        fmt_ms(a[2], 32, median(s1, reps));
        fmt_ms(a[3], 32, median(d1, reps));
      } else {
        for (int i = 0; i < 4; i++) snprintf(a[i], 32, "error");
      }
      fmt_ms(pn, 32, pe[0]);
      fmt_ms(pc, 32, pe[1]);
      fmt_ms(pt, 32, pe[2]);
      double wm = ok ? median(w1, reps) : -1;
      if (wm > 0 && pe[0] > 0) snprintf(rn, 32, "%.1f", wm / pe[0]);
      else snprintf(rn, 32, "—");
      if (wm > 0 && pe[1] > 0) snprintf(rc, 32, "%.2f", wm / pe[1]);
      else snprintf(rc, 32, "—");
      printf("| %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
             (long long)n, backends[b], a[0], a[1], a[2], a[3], pn, rn, pc, pt, rc);
      fflush(stdout);
    }
    free(body);
  }
  free(save);
  printf("\n");
  shutdown(k.lfd, SHUT_RDWR);
  close(k.lfd);
  pthread_join(k.th, NULL);
  bench_daemon_remove(&d);
  curl_global_cleanup();
  return 0;
}
