/* test_transfer.c — arrays out of (and into) the daemon without copies that
 * multiply memory (issue 9, item 5) and the JSON of zero-size arrays (item
 * 12).
 *
 * 1. Byte identity: ?limit_rows cuts (N = 0, N < rows, N = rows, N > rows)
 *    of an array large enough to cross every buffer boundary, in npy, JSON
 *    and CSV, float64 and float32, against references built here (the npy
 *    header from npy_header, the same writer the stored files use; JSON and
 *    CSV with the fewest significant digits that read back to the value,
 *    found here by trying every precision from 1 up, written in %g's
 *    notation at 15 digits (float32: 6), as API.md says). A cut says the
 *    whole array's rows: X-Total-Rows in every format, and in JSON the
 *    whole "shape" beside "rows", the rows sent. The same for the geodesic
 *    layout switch both ways (square <-> condensed), with and without a
 *    cut, against a reference computed here from the stored result.
 * 2. Zero-size shapes in JSON: [2,0] -> [[],[]], [0,3] -> [], [2,0,3] ->
 *    [[],[]], [2,3,0] -> [[[],[],[]],[[],[],[]]].
 * 3. Memory: 6 slow readers (they read a few KB, then pause) of a 128 MiB
 *    result with limit_rows, and of a 64 MiB geodesic matrix with ?layout,
 *    must add less than the result's size to the daemon's VmRSS in total;
 *    an upload's peak (VmHWM) must stay within 2.5x the file.
 * 4. The transfer budget: uploads (.npy, CSV, JSON: all streamed) need none
 *    of it, even while it is held; a collected body (a job's JSON) gets 503
 *    with Retry-After and a JSON error while the budget is held by
 *    downloads, and is read again once they are gone.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "compute/array/tarray.h"
#include "util/util.h"
#include "harness.h"

static const char *DAEMON;


/* ---- helpers ------------------------------------------------------------ */

/* A whole .npy (header from npy_header) of `n` elements from v. */
static char *npy_bytes(tdtype dt, int ndim, const int64_t *shape,
                       const double *v, int64_t n, size_t *len) {
  char hdr[NPY_HEADER_MAX];
  size_t h = npy_header(dt, ndim, shape, hdr);
  size_t es = dt == T_F32 ? 4 : 8;
  char *b = malloc(h + (size_t)n * es + 1);
  memcpy(b, hdr, h);
  for (int64_t i = 0; i < n; i++) {
    if (dt == T_F32) {
      float f = (float)v[i];
      memcpy(b + h + (size_t)i * 4, &f, 4);
    } else {
      memcpy(b + h + (size_t)i * 8, &v[i], 8);
    }
  }
  *len = h + (size_t)n * es;
  return b;
}

/* Upload an .npy; the array's id into id (T_ID_MAX). 1 on success. */
static int upload(srv *s, const char *npy, size_t len, char *id) {
  resp r = reqx(s, "POST", "/v1/arrays", "application/x-npy", npy, (long)len, NULL);
  json_t *o = (r.status == 201 || r.status == 200) ? resp_json(&r) : NULL;
  const char *i = o ? jstr(o, "id") : NULL;
  if (i) snprintf(id, T_ID_MAX, "%s", i);
  else fprintf(stderr, "upload: %ld %.200s\n", r.status, r.body);
  json_decref(o);
  resp_free(&r);
  return i != NULL;
}

/* Upload n float64 zeros but element `mark`, set to `mark` (a content of
 * its own); 1 when stored. */
static int upload_marked(srv *s, int64_t n, int64_t mark, char *id) {
  double *v = calloc((size_t)n, sizeof(double));
  v[mark] = (double)mark;
  size_t len;
  char *npy = npy_bytes(T_F64, 1, &n, v, n, &len);
  free(v);
  int ok = upload(s, npy, len, id);
  free(npy);
  return ok;
}

/* Growable text for the references. */
typedef struct text {
  char *p;
  size_t n, cap;
} text;

static void tput(text *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->n + n + 1) * 2;
    t->p = realloc(t->p, t->cap);
  }
  memcpy(t->p + t->n, s, n);
  t->n += n;
  t->p[t->n] = 0;
}
static void tstr(text *t, const char *s) { tput(t, s, strlen(s)); }

static void tnum(text *t, double v, tdtype dt, int json) {
  char b[64];
  if (isnan(v)) snprintf(b, sizeof b, "%s", json ? "null" : "nan");
  else if (isinf(v)) snprintf(b, sizeof b, "%s", json ? "null" : (v > 0 ? "inf" : "-inf"));
  else { /* the fewest digits that read back, in %g's notation at 15 (6) */
    int p = 1, lo = dt == T_F32 ? 6 : 15;
    for (; p < 17; p++) {
      snprintf(b, sizeof b, "%.*g", p, v);
      if (dt == T_F32 ? strtof(b, NULL) == (float)v : strtod(b, NULL) == v) break;
    }
    snprintf(b, sizeof b, "%.*g", p > lo ? p : lo, v);
  }
  tstr(t, b);
}

/* The JSON the API gives for a non-empty 1-D or 2-D array. */
/* full: the whole array's rows after a cut (limit_rows), else -1. */
static void ref_json(text *t, tdtype dt, int ndim, const int64_t *shape,
                     int64_t full, const double *v) {
  char b[160], nrows[40] = "";
  long long r0 = (long long)(full >= 0 ? full : shape[0]);
  if (full >= 0) snprintf(nrows, sizeof nrows, ",\"rows\":%lld", (long long)shape[0]);
  if (ndim == 1)
    snprintf(b, sizeof b, "{\"dtype\":\"%s\",\"shape\":[%lld]%s,\"data\":[",
             dt == T_F32 ? "float32" : "float64", r0, nrows);
  else
    snprintf(b, sizeof b, "{\"dtype\":\"%s\",\"shape\":[%lld,%lld]%s,\"data\":[",
             dt == T_F32 ? "float32" : "float64", r0, (long long)shape[1], nrows);
  tstr(t, b);
  int64_t rows = shape[0], cols = ndim == 2 ? shape[1] : 1;
  for (int64_t i = 0; i < rows; i++) {
    if (ndim == 2) tstr(t, "[");
    for (int64_t j = 0; j < cols; j++) {
      tnum(t, v[i * cols + j], dt, 1);
      if (j + 1 < cols) tstr(t, ",");
    }
    if (ndim == 2) tstr(t, "]");
    if (i + 1 < rows) tstr(t, ",");
  }
  tstr(t, "]}\n");
}

static void ref_csv(text *t, tdtype dt, int ndim, const int64_t *shape,
                    const double *v) {
  int64_t rows = shape[0], cols = ndim == 2 ? shape[1] : 1;
  for (int64_t i = 0; i < rows * cols; i++) {
    tnum(t, v[i], dt, 0);
    tstr(t, (i + 1) % cols == 0 ? "\n" : ",");
  }
}

/* Compare a GET's body with the expected bytes, and its X-Total-Rows with
 * full (-1: no such header). */
static int same_body(srv *s, const char *path, const char *want, size_t wlen,
                     int64_t full) {
  resp r = req(s, "GET", path, NULL, NULL);
  int ok = r.status == 200 && r.len == wlen && memcmp(r.body, want, wlen) == 0;
  char tr[32];
  const char *h = resp_header_get(&r, "X-Total-Rows", tr, sizeof tr);
  char fs[32];
  snprintf(fs, sizeof fs, "%lld", (long long)full);
  if (full >= 0 ? !h || strcmp(h, fs) != 0 : h != NULL) {
    fprintf(stderr, "%s: X-Total-Rows %s, want %s\n", path, h ? h : "(none)",
            full >= 0 ? fs : "(none)");
    ok = 0;
  }
  if (!ok) {
    size_t k = 0;
    while (k < r.len && k < wlen && r.body[k] == want[k]) k++;
    fprintf(stderr, "%s: status %ld, %zu bytes (want %zu), first difference at %zu\n",
            path, r.status, r.len, wlen, k);
  }
  resp_free(&r);
  return ok;
}

/* All three formats of (dt, ndim, shape, v) at `path` + query `q`. */
static void check_formats(srv *s, const char *base, const char *q, tdtype dt,
                          int ndim, const int64_t *shape, int64_t full,
                          const double *v) {
  char path[512];
  int64_t n = shape[0] * (ndim == 2 ? shape[1] : 1);
  size_t len;
  char *npy = npy_bytes(dt, ndim, shape, v, n, &len);
  snprintf(path, sizeof path, "%s?format=npy%s", base, q);
  CHECK(same_body(s, path, npy, len, full));
  free(npy);
  text t = {0};
  ref_json(&t, dt, ndim, shape, full, v);
  snprintf(path, sizeof path, "%s?format=json%s", base, q);
  CHECK(same_body(s, path, t.p, t.n, full));
  t.n = 0;
  ref_csv(&t, dt, ndim, shape, v);
  snprintf(path, sizeof path, "%s?format=csv%s", base, q);
  CHECK(same_body(s, path, t.p ? t.p : "", t.n, full));
  free(t.p);
}

/* ---- 1. byte identity of cuts ------------------------------------------- */

TEST(limit_rows_identical) {
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "2", NULL) == 0);
  /* 300 x 257: the formatted text crosses every buffer (64 KiB pieces,
   * MHD's 256 KiB blocks) many times. */
  enum { R = 300, C = 257 };
  double *v = malloc(sizeof(double) * R * C);
  for (int i = 0; i < R * C; i++)
    v[i] = (i % 7 == 3) ? -1.0 / (i + 1) : sin(i) * 1e3 + i * 1e-7;
  v[5] = NAN;
  v[9] = INFINITY;
  for (int d = 0; d < 2; d++) {
    tdtype dt = d ? T_F32 : T_F64;
    double *w = malloc(sizeof(double) * R * C);
    for (int i = 0; i < R * C; i++) w[i] = dt == T_F32 ? (double)(float)v[i] : v[i];
    int64_t shape[2] = {R, C};
    size_t len;
    char *npy = npy_bytes(dt, 2, shape, w, R * C, &len);
    char id[T_ID_MAX], base[128];
    CHECK(upload(&s, npy, len, id));
    free(npy);
    snprintf(base, sizeof base, "/v1/arrays/%s/data", id);
    static const int64_t cuts[] = {0, 1, 137, R, R + 5};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
      char q[64];
      snprintf(q, sizeof q, "&limit_rows=%lld", (long long)cuts[k]);
      int64_t cs[2] = {cuts[k] < R ? cuts[k] : R, C};
      check_formats(&s, base, q, dt, 2, cs, R, w);
    }
    check_formats(&s, base, "", dt, 2, shape, -1, w);
    free(w);
  }
  /* 1-D: rows are elements. */
  int64_t n1 = 100000;
  double *x = malloc(sizeof(double) * (size_t)n1);
  for (int64_t i = 0; i < n1; i++) x[i] = cos((double)i) / 3.0;
  size_t len;
  char *npy = npy_bytes(T_F64, 1, &n1, x, n1, &len);
  char id[T_ID_MAX], base[128];
  CHECK(upload(&s, npy, len, id));
  free(npy);
  snprintf(base, sizeof base, "/v1/arrays/%s/data", id);
  static const int64_t cuts1[] = {0, 3, 65536, 100000, 100001};
  for (size_t k = 0; k < sizeof cuts1 / sizeof cuts1[0]; k++) {
    char q[64];
    snprintf(q, sizeof q, "&limit_rows=%lld", (long long)cuts1[k]);
    int64_t cs = cuts1[k] < n1 ? cuts1[k] : n1;
    check_formats(&s, base, q, T_F64, 1, &cs, n1, x);
  }
  free(x);
  free(v);
  srv_cleanup(&s);
}

/* ---- 1b. layouts -------------------------------------------------------- */

/* n points spread over the globe as a JSON array. */
static char *points_json(int n) {
  text t = {0};
  tstr(&t, "[");
  for (int i = 0; i < n; i++) {
    char b[80];
    snprintf(b, sizeof b, "%s[%.6f,%.6f]", i ? "," : "",
             -80.0 + 160.0 * i / n, fmod(i * 37.7, 360.0) - 180.0);
    tstr(&t, b);
  }
  tstr(&t, "]");
  return t.p;
}

/* Run a geodesic job; its id into id. */
static int geodesic_job(srv *s, int n, const char *layout, const char *dtype,
                        char *id) {
  char *pts = points_json(n);
  size_t cap = strlen(pts) + 256;
  char *body = malloc(cap);
  snprintf(body, cap,
           "{\"kind\":\"geodesic\",\"params\":{\"points\":%s,\"layout\":\"%s\","
           "\"dtype\":\"%s\"}}",
           pts, layout, dtype);
  free(pts);
  long st = 0;
  json_t *j = submit(s, "?wait=60", body, &st);
  free(body);
  if (!j) return 0;
  snprintf(id, T_ID_MAX, "%s", jstr(j, "id"));
  json_t *done = wait_job(s, id, 300);
  int ok = done && strcmp(jstr(done, "status"), "succeeded") == 0;
  if (!ok) fprintf(stderr, "geodesic job %s did not succeed\n", id);
  json_decref(done);
  json_decref(j);
  return ok;
}

/* The job's result as stored (npy, no layout change) into doubles. */
static double *fetch_values(srv *s, const char *id, tdtype dt, int64_t want) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/result?format=npy", id);
  resp r = req(s, "GET", path, NULL, NULL);
  size_t es = dt == T_F32 ? 4 : 8;
  double *v = NULL;
  if (r.status == 200 && r.len >= 128 && r.len >= (size_t)want * es) {
    const char *d = r.body + (r.len - (size_t)want * es);
    v = malloc(sizeof(double) * (size_t)(want ? want : 1));
    for (int64_t i = 0; i < want; i++) {
      if (dt == T_F32) {
        float f;
        memcpy(&f, d + i * 4, 4);
        v[i] = f;
      } else {
        memcpy(&v[i], d + i * 8, 8);
      }
    }
  }
  resp_free(&r);
  return v;
}

static void layouts_for(srv *s, int n, tdtype dt) {
  const char *dts = dt == T_F32 ? "float32" : "float64";
  int64_t m = (int64_t)n * (n - 1) / 2;
  char sq_id[T_ID_MAX], cd_id[T_ID_MAX];
  double *sq = NULL, *cd = NULL;
  int jobs_ok = geodesic_job(s, n, "square", dts, sq_id) &&
                geodesic_job(s, n, "condensed", dts, cd_id);
  CHECK(jobs_ok);
  if (!jobs_ok) return;
  sq = fetch_values(s, sq_id, dt, (int64_t)n * n);
  cd = fetch_values(s, cd_id, dt, m);
  CHECK(sq && cd);
  if (!sq || !cd) goto out;
  /* References computed here: the upper triangle of the square result, and
   * the square built from the condensed one. */
  double *want_cd = malloc(sizeof(double) * (size_t)(m ? m : 1));
  double *want_sq = malloc(sizeof(double) * (size_t)n * n);
  int64_t k = 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) want_cd[k++] = sq[(int64_t)i * n + j];
  k = 0;
  for (int i = 0; i < n; i++) {
    want_sq[(int64_t)i * n + i] = 0.0;
    for (int j = i + 1; j < n; j++, k++)
      want_sq[(int64_t)i * n + j] = want_sq[(int64_t)j * n + i] = cd[k];
  }
  char base[128];
  snprintf(base, sizeof base, "/v1/jobs/%s/result", sq_id);
  check_formats(s, base, "&layout=condensed", dt, 1, &m, -1, want_cd);
  int64_t cut = m / 3;
  check_formats(s, base, "&layout=condensed&limit_rows=0", dt, 1,
                (int64_t[]){0}, m, want_cd);
  char q[96];
  snprintf(q, sizeof q, "&layout=condensed&limit_rows=%lld", (long long)cut);
  check_formats(s, base, q, dt, 1, &cut, m, want_cd);
  snprintf(base, sizeof base, "/v1/jobs/%s/result", cd_id);
  int64_t sshape[2] = {n, n};
  check_formats(s, base, "&layout=square", dt, 2, sshape, -1, want_sq);
  int64_t rows = n / 2 + 1;
  int64_t cshape[2] = {rows, n};
  snprintf(q, sizeof q, "&layout=square&limit_rows=%lld", (long long)rows);
  check_formats(s, base, q, dt, 2, cshape, n, want_sq);
  snprintf(q, sizeof q, "&layout=square&limit_rows=%d", n + 2);
  check_formats(s, base, q, dt, 2, sshape, n, want_sq);
  /* As stored, through the layout it already has. */
  check_formats(s, base, "&layout=condensed", dt, 1, &m, -1, cd);
  free(want_cd);
  free(want_sq);
out:
  free(sq);
  free(cd);
}

TEST(layouts_identical) {
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "2", NULL) == 0);
  /* 700 points: a square of 3.9 MB, more than one block of rows when the
   * square is built from the condensed file; 9 points: kept in the job's
   * row (<= 4 KiB); 2 and 1 points: the smallest matrices. */
  layouts_for(&s, 700, T_F64);
  layouts_for(&s, 300, T_F32);
  layouts_for(&s, 9, T_F64);
  layouts_for(&s, 2, T_F64);
  /* Not a square / not condensed: 400 naming layout, as before. */
  srv_cleanup(&s);
}

/* ---- 2. zero-size JSON -------------------------------------------------- */

static void zero_json(srv *s, int ndim, const int64_t *shape, const char *want) {
  size_t len;
  char *npy = npy_bytes(T_F64, ndim, shape, NULL, 0, &len);
  char id[T_ID_MAX], path[128];
  CHECK(upload(s, npy, len, id));
  free(npy);
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=json", id);
  resp r = req(s, "GET", path, NULL, NULL);
  json_t *o = resp_json(&r);
  char *d = o ? json_dumps(json_object_get(o, "data"), JSON_COMPACT) : NULL;
  CHECK(r.status == 200 && d && strcmp(d, want) == 0);
  if (!d || strcmp(d, want) != 0)
    fprintf(stderr, "data of shape ndim %d: %s, want %s\n", ndim, d ? d : "?", want);
  free(d);
  json_decref(o);
  resp_free(&r);
  /* limit_rows keeps the structure of what is left. */
  if (shape[0] > 1) {
    snprintf(path, sizeof path, "/v1/arrays/%s/data?format=json&limit_rows=1", id);
    r = req(s, "GET", path, NULL, NULL);
    o = resp_json(&r);
    json_t *data = o ? json_object_get(o, "data") : NULL;
    CHECK(r.status == 200 && json_is_array(data) && json_array_size(data) == 1);
    json_decref(o);
    resp_free(&r);
  }
}

TEST(zero_size_json) {
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "2", NULL) == 0);
  zero_json(&s, 2, (int64_t[]){2, 0}, "[[],[]]");
  zero_json(&s, 2, (int64_t[]){0, 3}, "[]");
  zero_json(&s, 3, (int64_t[]){2, 0, 3}, "[[],[]]");
  zero_json(&s, 3, (int64_t[]){2, 3, 0}, "[[[],[],[]],[[],[],[]]]");
  zero_json(&s, 1, (int64_t[]){0}, "[]");
  /* A result of shape [2, 0] from a job, kept in its row. */
  long st = 0;
  json_t *j = submit(&s, "?wait=30",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":"
                     "{\"x\":[[],[]]}}}",
                     &st);
  CHECK(j != NULL);
  if (j) {
    json_t *done = wait_job(&s, jstr(j, "id"), 30);
    json_t *data = done ? result_data(&s, done) : NULL;
    char *d = data ? json_dumps(data, JSON_COMPACT) : NULL;
    CHECK(d && strcmp(d, "[[],[]]") == 0);
    free(d);
    json_decref(data);
    json_decref(done);
    json_decref(j);
  }
  srv_cleanup(&s);
}

/* ---- 3. memory ---------------------------------------------------------- */

/* A field of /proc/<pid>/status in KiB; -1 when unreadable. */
static long proc_kib(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  if (f) fclose(f);
  return v;
}

/* Open a connection that asks for `path` and reads only `take` bytes of
 * the answer; a small receive buffer keeps the kernel from taking the
 * rest. Returns the socket (the caller closes it), -1 on failure. */
static int slow_reader(srv *s, const char *path, size_t take, char *first,
                       size_t first_cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int rcv = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  char rq[512];
  int n = snprintf(rq, sizeof rq, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (send(fd, rq, (size_t)n, MSG_NOSIGNAL) != n) {
    close(fd);
    return -1;
  }
  size_t got = 0;
  while (got < take) {
    char buf[1024];
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k <= 0) break;
    if (first && got < first_cap) {
      size_t c = (size_t)k < first_cap - got ? (size_t)k : first_cap - got;
      memcpy(first + got, buf, c);
    }
    got += (size_t)k;
  }
  if (first && first_cap) first[got < first_cap ? got : first_cap - 1] = 0;
  if (got < take) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 6 slow readers of each path; *add gets the VmRSS change in KiB while they
 * all wait (negative when the daemon gave memory back meanwhile, e.g. an
 * earlier job's pages, which ASan's allocator returns late). 0, or -1 when
 * a reader could not start. */
static int readers_rss(srv *s, const char *const *paths, int npaths,
                       long *add) {
  long before = proc_kib(s->pid, "VmRSS");
  int fds[64], nf = 0, bad = 0;
  for (int p = 0; p < npaths; p++)
    for (int i = 0; i < 6 && nf < 64; i++) {
      char first[256];
      int fd = slow_reader(s, paths[p], 8192, first, sizeof first);
      if (fd < 0 || strncmp(first, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "reader of %s: %.60s\n", paths[p], fd < 0 ? "failed" : first);
        bad = 1;
      }
      if (fd >= 0) fds[nf++] = fd;
    }
  usleep(500 * 1000); /* let the daemon fill what it will */
  long during = proc_kib(s->pid, "VmRSS");
  for (int i = 0; i < nf; i++) close(fds[i]);
  usleep(500 * 1000); /* let the daemon let go before the next batch */
  *add = during - before;
  return bad ? -1 : 0;
}

TEST(slow_readers_memory) {
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "2", "--max-json-result",
                  "1073741824", NULL) == 0);
  /* 16 Mi float64: a 128 MiB result file. */
  long st = 0;
  json_t *j = submit(&s, "?wait=60",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":"
                     "{\"x\":{\"range\":{\"stop\":16777216}}}}}",
                     &st);
  CHECK(j != NULL);
  if (!j) goto out;
  json_t *done = wait_job(&s, jstr(j, "id"), 300);
  CHECK(done && strcmp(jstr(done, "status"), "succeeded") == 0);
  char p1[160], p2[160], p3[160], p4[160];
  snprintf(p1, sizeof p1, "/v1/jobs/%s/result?format=npy&limit_rows=16777216", jstr(j, "id"));
  snprintf(p2, sizeof p2, "/v1/jobs/%s/result?format=json&limit_rows=16000000", jstr(j, "id"));
  snprintf(p3, sizeof p3, "/v1/jobs/%s/result?format=csv&limit_rows=20000000", jstr(j, "id"));
  snprintf(p4, sizeof p4, "/v1/jobs/%s/result?format=npy&limit_rows=10000000", jstr(j, "id"));
  json_decref(done);
  json_decref(j);
  const char *paths[] = {p1, p2, p3, p4};
  const long result_kib = 128 * 1024;
  for (int p = 0; p < 4; p++) {
    long add = 0;
    CHECK(readers_rss(&s, &paths[p], 1, &add) == 0);
    fprintf(stderr, "6 slow readers of %s: VmRSS %+ld KiB\n", paths[p], add);
    CHECK(add < result_kib);
  }

  /* A 64 MiB geodesic matrix (2900 points, float64) read condensed, and
   * its condensed twin read square. */
  char sq_id[T_ID_MAX], cd_id[T_ID_MAX];
  CHECK(geodesic_job(&s, 2900, "square", "float64", sq_id));
  CHECK(geodesic_job(&s, 2900, "condensed", "float64", cd_id));
  char l1[160], l2[160], l3[160];
  snprintf(l1, sizeof l1, "/v1/jobs/%s/result?format=npy&layout=condensed", sq_id);
  snprintf(l2, sizeof l2, "/v1/jobs/%s/result?format=json&layout=square", cd_id);
  snprintf(l3, sizeof l3, "/v1/jobs/%s/result?format=npy&layout=square&limit_rows=2000", cd_id);
  const char *lpaths[] = {l1, l2, l3};
  const long matrix_kib = 2900L * 2900 * 8 / 1024;
  for (int p = 0; p < 3; p++) {
    long add = 0;
    CHECK(readers_rss(&s, &lpaths[p], 1, &add) == 0);
    fprintf(stderr, "6 slow readers of %s: VmRSS %+ld KiB\n", lpaths[p], add);
    CHECK(add < matrix_kib);
  }
out:
  srv_cleanup(&s);
}

TEST(upload_peak_memory) {
  srv s;
  /* No spare result files: an upload of 64 MiB or more asks the keeper
   * for one (compute/array/codec/spare.h), whose pages it maps while it
   * reads them in, and they count in VmRSS (on 4 CPUs or more; on fewer
   * spares are off): page cache for a later upload, no copy of this one. */
  CHECK(srv_start(&s, DAEMON, "--threads", "1", "--spare-results", "0",
                  NULL) == 0);
  int64_t n = 8 * 1024 * 1024; /* 64 MiB of float64 */
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (double)i * 0.5;
  size_t len;
  char *npy = npy_bytes(T_F64, 1, &n, v, n, &len);
  free(v);
  /* Start-up (the calibration) leaves a high-water mark of its own: reset
   * it ("5" to clear_refs), so that VmHWM is the upload's peak. */
  char cr[64];
  snprintf(cr, sizeof cr, "/proc/%d/clear_refs", (int)s.pid);
  FILE *f = fopen(cr, "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
  long hwm0 = proc_kib(s.pid, "VmHWM"), rss0 = proc_kib(s.pid, "VmRSS");
  char id[T_ID_MAX];
  CHECK(upload(&s, npy, len, id));
  long hwm1 = proc_kib(s.pid, "VmHWM");
  long file_kib = (long)(len / 1024);
  fprintf(stderr, "upload of %ld KiB: VmHWM %ld -> %ld KiB (+%.2fx the file; VmRSS was %ld)\n",
          file_kib, hwm0, hwm1, (double)(hwm1 - rss0) / (double)file_kib, rss0);
  /* A float64 .npy is not copied at all: the body is the only copy. */
  if (!UNDER_ASAN) CHECK(hwm1 - rss0 <= file_kib * 3 / 2);
  /* Same content again: the same id (the digest did not change). */
  char id2[T_ID_MAX];
  CHECK(upload(&s, npy, len, id2) && strcmp(id, id2) == 0);
  free(npy);
  srv_cleanup(&s);
}

/* A .npy of v (float64, 1-D) as NumPy may write it: version `major`, the
 * data starting at byte `data_at` (the header padded with spaces). */
static char *npy_custom(int major, size_t data_at, const double *v, int64_t n,
                        size_t *len) {
  char dict[128];
  int dl = snprintf(dict, sizeof dict,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld,), }",
                    (long long)n);
  size_t pre = major == 1 ? 10 : 12, hlen = data_at - pre;
  char *b = malloc(data_at + (size_t)n * 8);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (char)major;
  b[7] = 0;
  b[8] = (char)(hlen & 0xff);
  b[9] = (char)(hlen >> 8);
  if (major != 1) b[10] = b[11] = 0;
  memset(b + pre, ' ', hlen);
  memcpy(b + pre, dict, (size_t)dl);
  b[data_at - 1] = '\n';
  memcpy(b + data_at, v, (size_t)n * 8);
  *len = data_at + (size_t)n * 8;
  return b;
}

TEST(upload_headers_canonical) {
  /* Whatever header an upload came with (NumPy pads to 128 bytes, version
   * 2.0, a data offset that is not aligned), the stored file has the
   * canonical one, the data is the same, and the same content is the same
   * array (the digest covers dtype, shape and data only). */
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "1", NULL) == 0);
  int64_t n = 1000;
  double v[1000];
  for (int i = 0; i < 1000; i++) v[i] = i * 0.25 - 3;
  size_t len;
  char *canon = npy_bytes(T_F64, 1, &n, v, n, &len);
  char id0[T_ID_MAX], path[128];
  CHECK(upload(&s, canon, len, id0));
  static const struct { int major; size_t at; } forms[] = {
      {1, 128}, {2, 128}, {1, 84}, {3, 192}};
  for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
    size_t l2;
    char *b = npy_custom(forms[k].major, forms[k].at, v, n, &l2);
    char id[T_ID_MAX] = "";
    CHECK(upload(&s, b, l2, id) && strcmp(id, id0) == 0);
    free(b);
  }
  /* A new owner-less content under a NumPy header: stored canonically. */
  v[0] = 42;
  size_t l3;
  char *b = npy_custom(1, 128, v, n, &l3);
  char id[T_ID_MAX];
  CHECK(upload(&s, b, l3, id) && strcmp(id, id0) != 0);
  free(b);
  free(canon);
  canon = npy_bytes(T_F64, 1, &n, v, n, &len);
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  CHECK(same_body(&s, path, canon, len, -1));
  free(canon);
  srv_cleanup(&s);
}

/* ---- 4. the budget ------------------------------------------------------ */

TEST(transfer_budget) {
  srv s;
  CHECK(srv_start(&s, DAEMON, "--threads", "2", "--max-transfer-memory",
                  "6291456", NULL) == 0);
  /* 8 MiB of float64 in an .npy fits, although the budget is 6 MiB: the
   * body is streamed into its file and never held. So do 300,000 CSV or
   * JSON values (600 KB bodies, 2.4 MB arrays): they are streamed through
   * their push readers too, and once needed the budget for their parsers'
   * values and trees. */
  char streamed[T_ID_MAX];
  CHECK(upload_marked(&s, 1024 * 1024, 3, streamed));
  resp r;
  text t = {0};
  for (int i = 0; i < 300000; i++) tstr(&t, i == 5 ? "3\n" : "1\n");
  r = reqx(&s, "POST", "/v1/arrays", "text/csv", t.p, (long)t.n, NULL);
  CHECK(r.status == 201);
  resp_free(&r);
  t.n = 0;
  tstr(&t, "[1");
  for (int i = 1; i < 300000; i++) tstr(&t, i == 9 ? ",4" : ",1");
  tstr(&t, "]");
  r = reqx(&s, "POST", "/v1/arrays", "application/json", t.p, (long)t.n, NULL);
  CHECK(r.status == 201);
  resp_free(&r);
  free(t.p);
  /* 4 MiB of float64 fits, as any .npy does. */
  char big[T_ID_MAX];
  CHECK(upload_marked(&s, 512 * 1024, 7, big));
  /* A small one fits. */
  int64_t n2 = 1000;
  double v2[1000];
  for (int i = 0; i < 1000; i++) v2[i] = i;
  size_t len;
  char *npy = npy_bytes(T_F64, 1, &n2, v2, n2, &len);
  char id[T_ID_MAX];
  CHECK(upload(&s, npy, len, id));
  free(npy);

  /* Downloads hold the budget while they last: square views of a
   * condensed matrix are the costliest streams. */
  char cd_id[T_ID_MAX];
  CHECK(geodesic_job(&s, 1200, "condensed", "float64", cd_id));
  char path[160];
  snprintf(path, sizeof path, "/v1/jobs/%s/result?format=json&layout=square", cd_id);
  int fds[16], nf = 0, refused = 0;
  for (int i = 0; i < 16 && !refused; i++) {
    char first[128];
    /* 64 bytes: the status line (a 503's whole answer is short). */
    int fd = slow_reader(&s, path, 64, first, sizeof first);
    CHECK(fd >= 0);
    if (fd >= 0 && strncmp(first, "HTTP/1.1 503", 12) == 0) refused = 1;
    if (fd >= 0) fds[nf++] = fd;
  }
  CHECK(refused);
  /* A collected body (a job's JSON, 3.4 MB) while the budget is held: 503
   * with Retry-After and a JSON error (more than what the readers left,
   * less than the budget). */
  text t3 = {0};
  tstr(&t3, "{\"kind\": \"map\"");
  for (int i = 0; i < 340000; i++) tstr(&t3, "          ");
  tstr(&t3, "}");
  r = reqx(&s, "POST", "/v1/jobs", "application/json", t3.p, (long)t3.n, NULL);
  CHECK(is_error(&r, 503, "unavailable", NULL));
  char ra[32];
  CHECK(resp_header_get(&r, "Retry-After", ra, sizeof ra) != NULL);
  resp_free(&r);
  /* ... while uploads, which hold nothing, go through: .npy and CSV. */
  char during[T_ID_MAX];
  CHECK(upload_marked(&s, 200000, 5, during));
  text t4 = {0};
  for (int i = 0; i < 130000; i++) tstr(&t4, i == 7 ? "2\n" : "1\n");
  r = reqx(&s, "POST", "/v1/arrays", "text/csv", t4.p, (long)t4.n, NULL);
  CHECK(r.status == 201);
  resp_free(&r);
  free(t4.p);
  for (int i = 0; i < nf; i++) close(fds[i]);
  /* Once the readers are gone the budget is back: the job body is read
   * (and refused for what it says, not for memory). */
  int ok = 0;
  for (int i = 0; i < 100 && !ok; i++) {
    r = reqx(&s, "POST", "/v1/jobs", "application/json", t3.p, (long)t3.n, NULL);
    ok = r.status != 503;
    resp_free(&r);
    if (!ok) usleep(100 * 1000);
  }
  CHECK(ok);
  free(t3.p);
  srv_cleanup(&s);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/tesseld\n", argv[0]);
    return 2;
  }
  DAEMON = argv[1];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  RUN(limit_rows_identical);
  RUN(layouts_identical);
  RUN(zero_size_json);
  RUN(upload_peak_memory);
  RUN(upload_headers_canonical);
  RUN(slow_readers_memory);
  RUN(transfer_budget);
  curl_global_cleanup();
  return check_summary();
}
