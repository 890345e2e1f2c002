/* test_upload_stream.c — uploads streamed from the socket to their file:
 * .npy, CSV and JSON.
 *
 * The daemon never holds an upload's body: an .npy header is read as soon
 * as it arrives and the data goes straight into the array's file; CSV and
 * JSON bodies go through their push readers, whose values go straight into
 * the file. Checked here against the real daemon:
 *  - .npy round trips, byte-exact, of every accepted dtype and several
 *    sizes (0 elements, 1, odd counts, 3,000,001), each sent from a raw
 *    socket in pieces of 1 to 13 bytes with pauses, so that the header and
 *    the elements are split across the daemon's reads (integers are
 *    converted element by element: a split element must come out whole),
 *    and again chunked through libcurl;
 *  - CSV and JSON round trips, byte-exact (the downloaded data is the
 *    doubles the text wrote with %.17g): 1-D and 2-D, a header line, 0
 *    elements ("[]"), 1, 7, 1001, 3,000,003, a 0-d JSON number, float32
 *    from JSON; sent in 1-13 byte pieces (plain and chunked) and in one;
 *  - the same array uploaded as .npy, CSV (with or without a header) and
 *    JSON has one digest and id (float32 too: .npy '<f4' and JSON
 *    ?dtype=float32);
 *  - lying bodies: a Content-Length that does not match the header's shape
 *    is refused before the data, a body longer than its shape (chunked) at
 *    the byte where it overflows, a body cut off midway and a client that
 *    leaves leave no array and no file; a CSV or JSON body with a bad byte
 *    midway is answered before the rest is sent; a wrong Content-Type or
 *    dtype is answered before the body;
 *  - kill -9 in the middle of an .npy, a CSV and a JSON upload: after the
 *    restart no array and no partial file remain, and the same upload then
 *    succeeds;
 *  - peak memory: a 1 GiB .npy upload and ~200 MB CSV and JSON uploads
 *    (sent from generators: the test holds none of it either) raise the
 *    daemon's VmHWM by a few MiB (< 64 MiB for .npy, < 16 MiB for text),
 *    not by their size (skipped under ASan, whose allocator has its own
 *    overhead).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <math.h>
#include <sys/stat.h>

#include "harness.h"

static const char *DAEMON;

/* ---- building .npy bodies ------------------------------------------------ */
typedef struct dkind {
  const char *descr;
  int itemsize;
} dkind;

static const dkind KINDS[] = {
    {"<f8", 8}, {"<f4", 4}, {"<i8", 8}, {"<i4", 4}, {"<i2", 2},
    {"|i1", 1}, {"<u8", 8}, {"<u4", 4}, {"<u2", 2}, {"|u1", 1}, {"|b1", 1},
};

/* Element i of a test array of this kind (a value that survives the type). */
static void elem(const dkind *k, int64_t i, unsigned char *out) {
  int64_t v = (i * 7919 + 13) % 20011 - 10000;
  if (k->descr[1] == 'u') v = v < 0 ? -v : v;
  if (k->descr[1] == 'b') v = (i % 3) == 0;
  if (k->itemsize == 1 && k->descr[1] != 'b') v = v % 100;
  if (k->descr[1] == 'f') {
    if (k->itemsize == 8) {
      double d = (double)v * 0.125 + 1e-3;
      memcpy(out, &d, 8);
    } else {
      float f = (float)v * 0.25f;
      memcpy(out, &f, 4);
    }
    return;
  }
  memcpy(out, &v, (size_t)k->itemsize); /* little-endian: the low bytes */
}

/* The element as the server stores it (float64 for all but <f4). */
static double as_double(const dkind *k, const unsigned char *p) {
  switch (k->descr[1]) {
    case 'f':
      if (k->itemsize == 8) {
        double d;
        memcpy(&d, p, 8);
        return d;
      } else {
        float f;
        memcpy(&f, p, 4);
        return f;
      }
    case 'b': return p[0] != 0;
    case 'u': {
      uint64_t u = 0;
      memcpy(&u, p, (size_t)k->itemsize);
      return (double)u;
    }
    default: {
      int64_t s = 0;
      memcpy(&s, p, (size_t)k->itemsize);
      int sh = 64 - 8 * k->itemsize; /* sign-extend */
      if (sh) s = (int64_t)((uint64_t)s << sh) >> sh;
      return (double)s;
    }
  }
}

/* A NumPy 1.0 .npy of n elements (1-D) with a header padded to 64. */
static char *make_npy(const dkind *k, int64_t n, size_t *len, size_t *data_at) {
  char dict[160];
  int dl = snprintf(dict, sizeof dict,
                    "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                    k->descr, (long long)n);
  size_t total_h = ((size_t)(10 + dl + 1) + 63) & ~(size_t)63;
  size_t hlen = total_h - 10;
  *data_at = total_h;
  *len = total_h + (size_t)n * (size_t)k->itemsize;
  char *b = malloc(*len ? *len : 1);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(hlen & 0xff);
  b[9] = (char)(hlen >> 8);
  memset(b + 10, ' ', hlen);
  memcpy(b + 10, dict, (size_t)dl);
  b[total_h - 1] = '\n';
  for (int64_t i = 0; i < n; i++)
    elem(k, i, (unsigned char *)b + total_h + (size_t)i * (size_t)k->itemsize);
  return b;
}

/* ---- a raw client that sends in small pieces --------------------------- */
static int connect_to(srv *s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read the answer until the peer closes or 30 s; status into *status. */
static char *read_answer(int fd, int *status) {
  struct timeval tv = {30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  for (;;) {
    ssize_t r = recv(fd, b + n, cap - n - 1, 0);
    if (r <= 0) break;
    n += (size_t)r;
    b[n] = 0;
    char *hend = strstr(b, "\r\n\r\n");
    const char *cl = hend ? strcasestr(b, "Content-Length:") : NULL;
    if (hend && cl && cl < hend &&
        n >= (size_t)(hend + 4 - b) + (size_t)atol(cl + 15))
      break;
    if (n + 1 >= cap) break;
  }
  b[n] = 0;
  *status = n > 12 ? atoi(b + 9) : -1;
  return b;
}

/* POST body in pieces of 1..13 bytes for the first `fine` bytes (with a
 * pause every few pieces, so that the daemon reads them apart), the rest
 * in 64 KiB pieces; chunked when content_length < 0 is asked. */
static int post_pieces_as(srv *s, const char *ctype, const char *body,
                          size_t len, size_t fine, int chunked, char **answer) {
  int fd = connect_to(s);
  if (fd < 0) return -1;
  char head[512];
  int hl = chunked
               ? snprintf(head, sizeof head,
                          "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: %s\r\n"
                          "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                          ctype)
               : snprintf(head, sizeof head,
                          "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: %s\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                          ctype, len);
  int rc = send_all(fd, head, (size_t)hl);
  size_t off = 0;
  unsigned seed = 7;
  int piece = 0;
  while (!rc && off < len) {
    size_t want = off < fine ? 1 + (seed = seed * 1103515245 + 12345) % 13 : 65536;
    if (want > len - off) want = len - off;
    if (chunked) {
      char ch[32];
      int cl = snprintf(ch, sizeof ch, "%zx\r\n", want);
      rc = send_all(fd, ch, (size_t)cl);
    }
    if (!rc) rc = send_all(fd, body + off, want);
    if (!rc && chunked) rc = send_all(fd, "\r\n", 2);
    off += want;
    if (off < fine && ++piece % 4 == 0) usleep(300);
  }
  if (!rc && chunked) rc = send_all(fd, "0\r\n\r\n", 5);
  int status = -1;
  *answer = read_answer(fd, &status);
  close(fd);
  return rc ? -1 : status;
}

static int post_pieces(srv *s, const char *body, size_t len, size_t fine,
                       int chunked, char **answer) {
  return post_pieces_as(s, "application/x-npy", body, len, fine, chunked,
                        answer);
}

/* The stored array, downloaded as .npy: its data section as doubles /
 * floats compared with what was sent. */
static int stored_matches(srv *s, const char *id, const dkind *k,
                          const char *body, size_t data_at, int64_t n) {
  char path[128];
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  resp r = req(s, "GET", path, NULL, NULL);
  int ok = r.status == 200 && r.len >= 10;
  size_t hl = ok ? 10 + ((size_t)(unsigned char)r.body[8] |
                         (size_t)(unsigned char)r.body[9] << 8)
                 : 0;
  int f4 = strcmp(k->descr, "<f4") == 0;
  size_t isz = f4 ? 4 : 8;
  ok = ok && r.len == hl + (size_t)n * isz &&
       memmem(r.body, hl, f4 ? "'<f4'" : "'<f8'", 5) != NULL;
  if (!ok)
    fprintf(stderr, "download of %s: %ld, %zu bytes (header %zu): %.120s\n",
            id, r.status, r.len, hl, r.body ? r.body : "");
  for (int64_t i = 0; ok && i < n; i++) {
    double want = as_double(k, (const unsigned char *)body + data_at +
                                   (size_t)i * (size_t)k->itemsize);
    double got;
    if (f4) {
      float f;
      memcpy(&f, r.body + hl + (size_t)i * 4, 4);
      got = f;
    } else {
      memcpy(&got, r.body + hl + (size_t)i * 8, 8);
    }
    if (got != want) {
      fprintf(stderr, "%s element %lld: got %.17g, sent %.17g\n", k->descr,
              (long long)i, got, want);
      ok = 0;
    }
  }
  resp_free(&r);
  return ok;
}

static int id_of(const char *answer, char *id, size_t cap) {
  const char *b = strstr(answer, "\r\n\r\n");
  json_t *o = b ? json_loads(b + 4, 0, NULL) : NULL;
  const char *i = o ? json_string_value(json_object_get(o, "id")) : NULL;
  if (i) snprintf(id, cap, "%s", i);
  json_decref(o);
  return i != NULL;
}

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name), sl = strlen(suffix);
    if (de->d_name[0] != '.' && l >= sl && strcmp(de->d_name + l - sl, suffix) == 0)
      n++;
  }
  closedir(d);
  return n;
}

static int64_t array_count(srv *s) {
  resp r = req(s, "GET", "/v1/arrays?limit=1000", NULL, NULL);
  json_t *o = r.status == 200 ? resp_json(&r) : NULL;
  int64_t n = o ? (int64_t)json_array_size(json_object_get(o, "arrays")) : -1;
  json_decref(o);
  resp_free(&r);
  return n;
}

static srv S;

TEST(round_trip_every_dtype_in_small_pieces) {
  const int64_t sizes[] = {0, 1, 7, 1001};
  for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
      const dkind *d = &KINDS[k];
      int64_t n = sizes[z];
      size_t len, at;
      char *body = make_npy(d, n, &len, &at);
      for (int chunked = 0; chunked < 2; chunked++) {
        char *ans = NULL, id[64];
        int st = post_pieces(&S, body, len, len, chunked, &ans);
        CHECK_MSG(st == 201 || st == 200, "%s n=%lld chunked=%d: %d %.300s",
                  d->descr, (long long)n, chunked, st, ans ? ans : "");
        if ((st == 201 || st == 200) && id_of(ans, id, sizeof id))
          CHECK_MSG(stored_matches(&S, id, d, body, at, n), "%s n=%lld",
                    d->descr, (long long)n);
        free(ans);
      }
      free(body);
    }
}

TEST(large_arrays_round_trip) {
  /* 3,000,001 int16 (a split element at every 64 KiB piece) and float64. */
  const dkind *ks[] = {&KINDS[4], &KINDS[0]};
  for (int k = 0; k < 2; k++) {
    size_t len, at;
    int64_t n = 3000001;
    char *body = make_npy(ks[k], n, &len, &at);
    char *ans = NULL, id[64];
    int st = post_pieces(&S, body, len, 4096, 0, &ans);
    CHECK_MSG(st == 201, "%s: %d %.300s", ks[k]->descr, st, ans ? ans : "");
    if (st == 201 && id_of(ans, id, sizeof id))
      CHECK(stored_matches(&S, id, ks[k], body, at, n));
    free(ans);
    /* Again through libcurl in one piece: the same content, the same id. */
    resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", body,
                  (long)len, NULL);
    json_t *o = resp_json(&r);
    CHECK(r.status == 200 && o && strcmp(jstr(o, "id"), id) == 0);
    json_decref(o);
    resp_free(&r);
    free(body);
  }
}

TEST(one_digest_whatever_the_format) {
  const dkind *d = &KINDS[0];
  size_t len, at;
  char *body = make_npy(d, 4, &len, &at);
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", body, (long)len, NULL);
  json_t *a = resp_json(&r);
  CHECK(r.status == 201 && a);
  char id[64], digest[128];
  snprintf(id, sizeof id, "%s", a ? jstr(a, "id") : "");
  snprintf(digest, sizeof digest, "%s", a ? jstr(a, "digest") : "");
  json_decref(a);
  resp_free(&r);
  char text[512];
  double v[4];
  for (int i = 0; i < 4; i++) memcpy(&v[i], body + at + 8 * i, 8);
  snprintf(text, sizeof text, "%.17g\n%.17g\n%.17g\n%.17g\n", v[0], v[1], v[2], v[3]);
  r = req(&S, "POST", "/v1/arrays", "text/csv", text);
  a = resp_json(&r);
  CHECK(r.status == 200 && a && strcmp(jstr(a, "id"), id) == 0 &&
        strcmp(jstr(a, "digest"), digest) == 0);
  json_decref(a);
  resp_free(&r);
  snprintf(text, sizeof text, "[%.17g, %.17g, %.17g, %.17g]", v[0], v[1], v[2], v[3]);
  r = req(&S, "POST", "/v1/arrays", "application/json", text);
  a = resp_json(&r);
  CHECK(r.status == 200 && a && strcmp(jstr(a, "id"), id) == 0);
  json_decref(a);
  resp_free(&r);
  free(body);
}

TEST(lying_and_cut_bodies_leave_nothing) {
  int64_t before = array_count(&S);
  char adir[300];
  snprintf(adir, sizeof adir, "%s/arrays", S.dir);
  int files = count_files(adir, ".npy");
  const dkind *d = &KINDS[0];
  size_t len, at;
  char *body = make_npy(d, 100000, &len, &at);
  /* Content-Length longer than the shape: refused when the header is in,
   * before the data (the answer comes though most of the body is unsent). */
  int fd = connect_to(&S);
  char head[256];
  int hl = snprintf(head, sizeof head,
                    "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/x-npy\r\nContent-Length: %zu\r\n\r\n",
                    len + 8);
  CHECK(send_all(fd, head, (size_t)hl) == 0 && send_all(fd, body, at + 16) == 0);
  int st;
  char *ans = read_answer(fd, &st);
  CHECK_MSG(st == 400 && strstr(ans, "shape x itemsize needs") &&
                strstr(ans, "\"field\":\"body\""),
            "%d %.300s", st, ans);
  free(ans);
  close(fd);
  /* Longer than its shape, chunked: refused at the byte it overflows. */
  char *longer = malloc(len + 100);
  memcpy(longer, body, len);
  memset(longer + len, 1, 100);
  st = post_pieces(&S, longer, len + 100, 0, 1, &ans);
  CHECK_MSG(st == 400 && strstr(ans, "longer than shape"), "%d %.300s", st, ans);
  free(ans);
  free(longer);
  /* Shorter than its shape, chunked: refused at the end. */
  st = post_pieces(&S, body, len - 9, 0, 1, &ans);
  CHECK_MSG(st == 400 && strstr(ans, "shape x itemsize needs"), "%d %.300s", st, ans);
  free(ans);
  /* Cut off midway: the client sends half and leaves. */
  fd = connect_to(&S);
  hl = snprintf(head, sizeof head,
                "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/x-npy\r\nContent-Length: %zu\r\n\r\n",
                len);
  CHECK(send_all(fd, head, (size_t)hl) == 0 && send_all(fd, body, len / 2) == 0);
  /* Leave once the daemon has begun the partial file (not after a time). */
  int tmp = -1;
  WAIT_FOR((tmp = count_files(adir, ".tmp")) == 1, 60);
  CHECK_MSG(tmp == 1, "%d partial files while the body arrives", tmp);
  close(fd);
  /* Nothing under a real id, and no file once the daemon noticed. */
  WAIT_FOR((tmp = count_files(adir, ".tmp")) == 0, 60);
  CHECK_MSG(tmp == 0, "%d partial files left", tmp);
  CHECK(count_files(adir, ".npy") == files);
  CHECK(array_count(&S) == before);
  free(body);
}

/* kill -9 in the middle of an upload of `body` (half of it sent): the
 * partial file exists while the body arrives; after the restart no array
 * and no partial file remain, and the same body, whole, then uploads. */
static void kill_9_midway(const char *ct, const char *body, size_t len) {
  srv k;
  CHECK(srv_start(&k, DAEMON, "--threads", "1", NULL) == 0);
  int fd = connect_to(&k);
  char head[256];
  int hl = snprintf(head, sizeof head,
                    "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", ct, len);
  CHECK(send_all(fd, head, (size_t)hl) == 0 && send_all(fd, body, len / 2) == 0);
  char adir[300];
  snprintf(adir, sizeof adir, "%s/arrays", k.dir);
  int tmp = 0;
  WAIT_FOR((tmp = count_files(adir, ".tmp")) != 0, 60);
  CHECK_MSG(tmp == 1, "%s", ct);
  CHECK(srv_kill(&k, SIGKILL) == 128 + SIGKILL);
  close(fd);
  CHECK(srv_restart(&k) == 0);
  CHECK(count_files(adir, ".tmp") == 0);
  CHECK(count_files(adir, ".npy") == 0);
  CHECK(array_count(&k) == 0);
  resp r = reqx(&k, "POST", "/v1/arrays", ct, body, (long)len, NULL);
  CHECK_MSG(r.status == 201, "%s: %ld", ct, r.status);
  resp_free(&r);
  CHECK(array_count(&k) == 1);
  srv_cleanup(&k);
}

TEST(kill_9_in_the_middle_of_an_upload) {
  size_t len, at;
  char *body = make_npy(&KINDS[0], 4 * 1000 * 1000, &len, &at);
  kill_9_midway("application/x-npy", body, len);
  free(body);
}

/* ---- peak memory of a 1 GiB upload ---------------------------------------- */
typedef struct gen {
  char head[128];
  uint64_t total, pos;
} gen;

static size_t gen_read(char *buf, size_t sz, size_t nmemb, void *ud) {
  gen *g = ud;
  size_t max = sz * nmemb, n = 0;
  while (n < max && g->pos < g->total) {
    if (g->pos < 128) {
      buf[n++] = g->head[g->pos++];
      continue;
    }
    /* data: the float64 value of its element index, byte by byte */
    uint64_t i = (g->pos - 128) / 8, b = (g->pos - 128) % 8;
    double v = (double)i;
    unsigned char e[8];
    memcpy(e, &v, 8);
    size_t take = 8 - b < max - n ? 8 - b : max - n;
    if (take > g->total - g->pos) take = g->total - g->pos;
    memcpy(buf + n, e + b, take);
    n += take;
    g->pos += take;
  }
  return n;
}

static long proc_kib(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  size_t fl = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, fl) == 0 && line[fl] == ':') v = atol(line + fl + 1);
  if (f) fclose(f);
  return v;
}

TEST(one_gib_upload_peak_memory) {
  if (UNDER_ASAN) {
    fprintf(stderr, "skipped under ASan: its allocator's own overhead\n");
    return;
  }
  srv m;
  CHECK(srv_start(&m, DAEMON, "--threads", "1", "--max-upload", "2147483648",
                  NULL) == 0);
  gen g = {.total = 128 + ((uint64_t)1 << 30)};
  int dl = snprintf(g.head + 10, sizeof g.head - 10,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (%llu,), }",
                    (unsigned long long)((uint64_t)1 << 27));
  memcpy(g.head, "\x93NUMPY\x01\x00", 8);
  g.head[8] = 118;
  g.head[9] = 0;
  memset(g.head + 10 + dl, ' ', (size_t)(128 - 10 - dl - 1));
  g.head[127] = '\n';
  char cr[64];
  snprintf(cr, sizeof cr, "/proc/%d/clear_refs", (int)m.pid);
  FILE *f = fopen(cr, "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
  long rss0 = proc_kib(m.pid, "VmRSS");
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "%s/v1/arrays", m.base);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/x-npy");
  h = curl_slist_append(h, "Expect:");
  resp r;
  memset(&r, 0, sizeof r);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, gen_read);
  curl_easy_setopt(c, CURLOPT_READDATA, &g);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)g.total);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, resp_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
  CHECK(curl_easy_perform(c) == CURLE_OK);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  CHECK_MSG(r.status == 201, "%ld %.300s", r.status, r.body ? r.body : "");
  long hwm = proc_kib(m.pid, "VmHWM");
  fprintf(stderr, "1 GiB upload: daemon VmRSS before %ld KiB, VmHWM after %ld KiB "
          "(+%ld KiB, %.4fx the body)\n", rss0, hwm, hwm - rss0,
          (double)(hwm - rss0) / (double)(g.total / 1024));
  /* Streamed: the body is never held. 64 MiB is generous (the daemon's
   * buffers are a 64 KiB connection pool and a 64 KiB conversion buffer). */
  CHECK(rss0 > 0 && hwm - rss0 < 64 * 1024);
  /* And the file is the whole array. */
  json_t *o = resp_json(&r);
  const char *id = o ? jstr(o, "id") : "";
  char path[400];
  snprintf(path, sizeof path, "%s/arrays/%s.npy", m.dir, id);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == g.total);
  json_decref(o);
  resp_free(&r);
  srv_cleanup(&m);
}

/* ---- CSV and JSON bodies, streamed through their push readers ---------- */

/* Value i of a text test array: varied magnitudes, exact in %.17g. */
static double tval(int64_t i) {
  double v = (double)((i * 7919 + 13) % 20011 - 10000) * 0.001;
  if (i % 5 == 1) v *= 1e-300;
  if (i % 7 == 3) v = v * 1e300;
  if (i % 11 == 4 && i > 100) v = -0.0; /* (not in the small arrays) */
  return v;
}

/* rows x cols values as CSV (a header line when header) or as JSON
 * (cols 0: a flat list of rows values; rows 0: "[]"). The doubles into
 * *vals (caller frees). */
static char *text_body(int json, int64_t rows, int64_t cols, int header,
                       double **vals, size_t *len) {
  int64_t n = rows * (cols ? cols : 1);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  char *b = NULL;
  size_t bl = 0;
  FILE *f = open_memstream(&b, &bl);
  if (header)
    for (int64_t c = 0; c < cols; c++) fprintf(f, c ? ",c%lld" : "c%lld", (long long)c);
  if (header) fputs("\r\n", f);
  if (json) fputc('[', f);
  for (int64_t r = 0; r < rows; r++) {
    if (json && r) fputs(", ", f);
    if (json && cols) fputc('[', f);
    for (int64_t c = 0; c < (cols ? cols : 1); c++) {
      int64_t i = r * (cols ? cols : 1) + c;
      v[i] = tval(i);
      fprintf(f, c ? (json ? ", %.17g" : ",%.17g") : "%.17g", v[i]);
      /* JSON "-0" is an integer token: Jansson (and the push reader) read
       * it as +0; CSV keeps -0. */
      if (json && v[i] == 0) v[i] = 0.0;
    }
    if (json && cols) fputc(']', f);
    if (!json) fputc('\n', f);
  }
  if (json) fputc(']', f);
  fclose(f);
  *vals = v;
  *len = bl;
  return b;
}

/* The stored array `id`: its shape is `shape` (JSON text) and its
 * downloaded .npy data is exactly `bytes` bytes of `data`. */
static int stored_exact(srv *s, const char *id, const char *shape,
                        const void *data, size_t bytes) {
  char path[128];
  snprintf(path, sizeof path, "/v1/arrays/%s", id);
  resp m = req(s, "GET", path, NULL, NULL);
  json_t *o = resp_json(&m);
  char *got_shape = o ? json_dumps(json_object_get(o, "shape"), JSON_COMPACT) : NULL;
  int ok = got_shape && strcmp(got_shape, shape) == 0;
  if (!ok) fprintf(stderr, "%s: shape %s, expected %s\n", id, got_shape ? got_shape : "(none)", shape);
  free(got_shape);
  json_decref(o);
  resp_free(&m);
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  resp r = req(s, "GET", path, NULL, NULL);
  size_t hl = r.status == 200 && r.len >= 10
                  ? 10 + ((size_t)(unsigned char)r.body[8] |
                          (size_t)(unsigned char)r.body[9] << 8)
                  : 0;
  ok = ok && hl && r.len == hl + bytes &&
       (bytes == 0 || memcmp(r.body + hl, data, bytes) == 0);
  if (!ok) fprintf(stderr, "%s: download %ld, %zu bytes, header %zu\n", id, r.status, r.len, hl);
  resp_free(&r);
  return ok;
}

TEST(text_round_trips_in_small_pieces) {
  static const struct {
    int json;
    int64_t rows, cols;
    int header;
    const char *shape;
  } cases[] = {
      {0, 1, 1, 0, "[1]"},        {0, 7, 1, 0, "[7]"},
      {0, 1, 9, 0, "[9]"},        {0, 13, 3, 1, "[13,3]"},
      {0, 1001, 1, 1, "[1001]"},  {0, 77, 13, 0, "[77,13]"},
      {1, 0, 0, 0, "[0]"},        {1, 1, 0, 0, "[1]"},
      {1, 7, 0, 0, "[7]"},        {1, 13, 3, 0, "[13,3]"},
      {1, 1001, 0, 0, "[1001]"},  {1, 77, 13, 0, "[77,13]"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    size_t len;
    double *v;
    char *body = text_body(cases[k].json, cases[k].rows, cases[k].cols,
                           cases[k].header, &v, &len);
    size_t n = (size_t)(cases[k].rows * (cases[k].cols ? cases[k].cols : 1));
    for (int chunked = 0; chunked < 2; chunked++) {
      char *ans = NULL, id[64];
      int st = post_pieces_as(&S, cases[k].json ? "application/json" : "text/csv",
                              body, len, len, chunked, &ans);
      CHECK_MSG((st == 201 || st == 200) && id_of(ans, id, sizeof id),
                "case %zu chunked %d: %d %.300s", k, chunked, st, ans ? ans : "");
      if (st == 201 || st == 200)
        CHECK_MSG(stored_exact(&S, id, cases[k].shape, v, n * 8), "case %zu", k);
      free(ans);
    }
    free(v);
    free(body);
  }
  /* 0-d: a JSON number; float32 from JSON: rounded as NumPy rounds */
  resp r = req(&S, "POST", "/v1/arrays", "application/json", " 2.5 ");
  json_t *o = resp_json(&r);
  double d = 2.5;
  CHECK(r.status / 100 == 2 && o && stored_exact(&S, jstr(o, "id"), "[]", &d, 8));
  json_decref(o);
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays?dtype=float32", "application/json",
          "[[0.1, 1e39], [-1e-50, 3]]");
  o = resp_json(&r);
  float f[4] = {0.1f, INFINITY, -0.0f, 3.0f};
  CHECK(r.status / 100 == 2 && o && strcmp(jstr(o, "dtype"), "float32") == 0 &&
        stored_exact(&S, jstr(o, "id"), "[2,2]", f, 16));
  json_decref(o);
  resp_free(&r);
}

TEST(large_text_round_trip) {
  for (int json = 0; json < 2; json++) {
    size_t len;
    double *v;
    int64_t rows = 1000001, cols = 3;
    char *body = text_body(json, rows, cols, 0, &v, &len);
    char *ans = NULL, id[64] = "";
    int st = post_pieces_as(&S, json ? "application/json" : "text/csv", body,
                            len, 4096, 0, &ans);
    CHECK_MSG(st == 201 && id_of(ans, id, sizeof id), "%d %.300s", st, ans);
    CHECK(stored_exact(&S, id, "[1000001,3]", v, (size_t)(rows * cols) * 8));
    free(ans);
    /* Again through libcurl in one piece: the same content, the same id. */
    resp r = reqx(&S, "POST", "/v1/arrays", json ? "application/json" : "text/csv",
                  body, (long)len, NULL);
    json_t *o = resp_json(&r);
    CHECK(r.status == 200 && o && strcmp(jstr(o, "id"), id) == 0);
    json_decref(o);
    resp_free(&r);
    free(v);
    free(body);
  }
}

/* One array as .npy, CSV (with and without a header) and JSON: one id. */
TEST(one_id_for_npy_csv_json_2d) {
  int64_t rows = 5, cols = 4;
  size_t len;
  double *v;
  char *csv = text_body(0, rows, cols, 0, &v, &len);
  char head[128];
  int dl = snprintf(head + 10, sizeof head - 10,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (5, 4), }");
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = 118;
  head[9] = 0;
  memset(head + 10 + dl, ' ', (size_t)(128 - 10 - dl - 1));
  head[127] = '\n';
  char npy[128 + 20 * 8];
  memcpy(npy, head, 128);
  memcpy(npy + 128, v, 20 * 8);
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", npy, (long)sizeof npy, NULL);
  json_t *o = resp_json(&r);
  CHECK(r.status == 201 && o);
  char id[64];
  snprintf(id, sizeof id, "%s", o ? jstr(o, "id") : "");
  json_decref(o);
  resp_free(&r);
  double *v2;
  size_t l2, l3;
  char *csvh = text_body(0, rows, cols, 1, &v2, &l2);
  free(v2);
  char *js = text_body(1, rows, cols, 0, &v2, &l3);
  free(v2);
  const char *bodies[] = {csv, csvh, js};
  const size_t lens[] = {len, l2, l3};
  const char *types[] = {"text/csv", "text/csv", "application/json"};
  for (int i = 0; i < 3; i++) {
    r = reqx(&S, "POST", "/v1/arrays", types[i], bodies[i], (long)lens[i], NULL);
    o = resp_json(&r);
    CHECK_MSG(r.status == 200 && o && strcmp(jstr(o, "id"), id) == 0,
              "%s: %ld %.200s", types[i], r.status, r.body);
    json_decref(o);
    resp_free(&r);
  }
  /* and float32: .npy '<f4' and JSON ?dtype=float32 */
  float fv[3] = {0.5f, -1.25f, 3e38f};
  dl = snprintf(head + 10, sizeof head - 10,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
  memset(head + 10 + dl, ' ', (size_t)(128 - 10 - dl - 1));
  head[127] = '\n';
  memcpy(npy, head, 128);
  memcpy(npy + 128, fv, 12);
  r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", npy, 140, NULL);
  o = resp_json(&r);
  snprintf(id, sizeof id, "%s", o ? jstr(o, "id") : "");
  CHECK(r.status == 201);
  json_decref(o);
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays?dtype=float32", "application/json", "[0.5,-1.25,3e38]");
  o = resp_json(&r);
  CHECK(r.status == 200 && o && strcmp(jstr(o, "id"), id) == 0);
  json_decref(o);
  resp_free(&r);
  free(v);
  free(csv);
  free(csvh);
  free(js);
}

/* Refused bodies (answered as soon as the bad byte arrives), cut-off and
 * abandoned ones: no array, no file. */
TEST(text_refused_and_cut_bodies_leave_nothing) {
  int64_t before = array_count(&S);
  char adir[300];
  snprintf(adir, sizeof adir, "%s/arrays", S.dir);
  int files = count_files(adir, ".npy");
  for (int json = 0; json < 2; json++) {
    const char *ct = json ? "application/json" : "text/csv";
    size_t len;
    double *v;
    char *body = text_body(json, 100000, 2, 0, &v, &len);
    /* A bad byte in the middle: answered at once (a 400 naming body) while
     * the rest is unsent. */
    char *bad = malloc(len);
    memcpy(bad, body, len);
    size_t mid = len / 2;
    while (bad[mid] != ',') mid++;
    bad[mid] = ';';
    int fd = connect_to(&S);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/arrays HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", ct, len);
    CHECK(send_all(fd, head, (size_t)hl) == 0 && send_all(fd, bad, mid + 4096) == 0);
    int st;
    char *ans = read_answer(fd, &st);
    CHECK_MSG(st == 400 && strstr(ans, "\"field\":\"body\""), "%s: %d %.300s", ct, st, ans);
    free(ans);
    close(fd);
    /* Cut: a complete HTTP body that ends midway through the data. */
    st = post_pieces_as(&S, ct, body, mid, 0, 1, &ans);
    CHECK_MSG(json ? st == 400 && strstr(ans, "end of input")
                   : st == 201 || st == 400, /* CSV: a shorter table, or ragged */
              "%s: %d %.300s", ct, st, ans);
    if (st == 201) { /* a cut at a line end is a valid, shorter CSV: delete it */
      char id[64], path[128];
      if (id_of(ans, id, sizeof id)) {
        snprintf(path, sizeof path, "/v1/arrays/%s", id);
        resp d = req(&S, "DELETE", path, NULL, NULL);
        resp_free(&d);
      }
    }
    free(ans);
    /* Abandoned: the client sends half and leaves. */
    fd = connect_to(&S);
    CHECK(send_all(fd, head, (size_t)hl) == 0 && send_all(fd, body, len / 2) == 0);
    /* Leave once the daemon has begun the partial file (not after a time). */
    int tmp = -1;
    WAIT_FOR((tmp = count_files(adir, ".tmp")) == 1, 60);
    CHECK_MSG(tmp == 1, "%s: %d partial files while the body arrives", ct, tmp);
    close(fd);
    WAIT_FOR((tmp = count_files(adir, ".tmp")) == 0, 60);
    CHECK_MSG(tmp == 0, "%s: %d partial files left", ct, tmp);
    CHECK(count_files(adir, ".npy") == files);
    CHECK(array_count(&S) == before);
    free(bad);
    free(v);
    free(body);
  }
  /* Wrong Content-Type and dtype: answered before the body, no file. */
  resp r = req(&S, "POST", "/v1/arrays", "text/plain", "1,2");
  CHECK(r.status == 415);
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays?dtype=int8", "application/json", "[1]");
  CHECK(r.status == 400 && strstr(r.body, "\"field\":\"dtype\""));
  resp_free(&r);
  CHECK(count_files(adir, ".tmp") == 0 && count_files(adir, ".npy") == files);
}

/* The same for a CSV and a JSON upload (their push readers' files). */
TEST(kill_9_in_the_middle_of_a_text_upload) {
  for (int json = 0; json < 2; json++) {
    size_t len;
    double *v;
    char *body = text_body(json, 1000000, 2, 0, &v, &len);
    kill_9_midway(json ? "application/json" : "text/csv", body, len);
    free(v);
    free(body);
  }
}

/* ---- peak memory of ~200 MB CSV and JSON bodies --------------------------
 * Generated as curl reads them (the test holds none of it): row i is
 * "i.25,-i.5\n" (CSV) or "[i.25,-i.5]," (JSON). */
typedef struct tgen {
  int json;
  int64_t rows, row;
  char line[96];
  size_t ll, lpos;
  int done;
} tgen;

static size_t tgen_read(char *buf, size_t sz, size_t nmemb, void *ud) {
  tgen *g = ud;
  size_t max = sz * nmemb, n = 0;
  while (n < max && !g->done) {
    if (g->lpos == g->ll) {
      if (g->row == g->rows + (g->json ? 1 : 0)) {
        g->done = 1;
        break;
      }
      int64_t i = g->row++;
      if (g->json && i == 0) g->ll = (size_t)sprintf(g->line, "[");
      else if (g->json && i == g->rows) g->ll = (size_t)sprintf(g->line, "]");
      else if (g->json)
        g->ll = (size_t)sprintf(g->line, "[%lld.25,-%lld.5]%s", (long long)i,
                                (long long)i, i + 1 < g->rows ? "," : "");
      else
        g->ll = (size_t)sprintf(g->line, "%lld.25,-%lld.5\n", (long long)i,
                                (long long)i);
      if (g->json && i == 0) { /* row 0's values follow "[" */
        g->ll += (size_t)sprintf(g->line + g->ll, "[0.25,-0.5]%s",
                                 g->rows > 1 ? "," : "");
      }
      g->lpos = 0;
    }
    size_t take = g->ll - g->lpos < max - n ? g->ll - g->lpos : max - n;
    memcpy(buf + n, g->line + g->lpos, take);
    g->lpos += take;
    n += take;
  }
  return n;
}

static uint64_t tgen_size(int json, int64_t rows) {
  tgen g = {.json = json, .rows = rows};
  char buf[65536];
  uint64_t total = 0;
  size_t k;
  while ((k = tgen_read(buf, 1, sizeof buf, &g)) > 0) total += k;
  return total;
}

TEST(text_200mb_upload_peak_memory) {
  if (UNDER_ASAN) {
    fprintf(stderr, "skipped under ASan: its allocator's own overhead\n");
    return;
  }
  for (int json = 0; json < 2; json++) {
    srv m;
    CHECK(srv_start(&m, DAEMON, "--threads", "1", NULL) == 0);
    int64_t rows = json ? 8600000 : 9300000; /* >= 200 MB either way */
    uint64_t total = tgen_size(json, rows);
    tgen g = {.json = json, .rows = rows};
    char cr[64];
    snprintf(cr, sizeof cr, "/proc/%d/clear_refs", (int)m.pid);
    FILE *f = fopen(cr, "w");
    if (f) {
      fputs("5", f);
      fclose(f);
    }
    long rss0 = proc_kib(m.pid, "VmRSS");
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/v1/arrays", m.base);
    struct curl_slist *h = curl_slist_append(
        NULL, json ? "Content-Type: application/json" : "Content-Type: text/csv");
    h = curl_slist_append(h, "Expect:");
    resp r;
    memset(&r, 0, sizeof r);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, tgen_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &g);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)total);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, resp_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 600L);
    CHECK(curl_easy_perform(c) == CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    CHECK_MSG(r.status == 201, "%ld %.300s", r.status, r.body ? r.body : "");
    long hwm = proc_kib(m.pid, "VmHWM");
    fprintf(stderr, "%s upload of %.1f MB: daemon VmRSS before %ld KiB, VmHWM after "
            "%ld KiB (+%ld KiB)\n", json ? "JSON" : "CSV", (double)total / 1e6,
            rss0, hwm, hwm - rss0);
    CHECK(rss0 > 0 && hwm - rss0 < 16 * 1024);
    /* The file is the whole array: header area + rows x 2 doubles, and
     * its values are the generated ones. */
    json_t *o = resp_json(&r);
    char path[400];
    snprintf(path, sizeof path, "%s/arrays/%s.npy", m.dir, o ? jstr(o, "id") : "");
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == 256 + (uint64_t)rows * 16);
    FILE *af = fopen(path, "rb");
    int64_t probe[] = {0, 1, rows / 2, rows - 1};
    for (int i = 0; af && i < 4; i++) {
      double d[2];
      CHECK(fseeko(af, 256 + probe[i] * 16, SEEK_SET) == 0 && fread(d, 8, 2, af) == 2 &&
            d[0] == (double)probe[i] + 0.25 && d[1] == -((double)probe[i] + 0.5));
    }
    if (af) fclose(af);
    json_decref(o);
    resp_free(&r);
    srv_cleanup(&m);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_upload_stream <tesseld>");
  DAEMON = argv[1];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (srv_start(&S, DAEMON, "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", DAEMON);
    return 1;
  }
  RUN(round_trip_every_dtype_in_small_pieces);
  RUN(large_arrays_round_trip);
  RUN(one_digest_whatever_the_format);
  RUN(lying_and_cut_bodies_leave_nothing);
  RUN(kill_9_in_the_middle_of_an_upload);
  RUN(one_gib_upload_peak_memory);
  RUN(text_round_trips_in_small_pieces);
  RUN(large_text_round_trip);
  RUN(one_id_for_npy_csv_json_2d);
  RUN(text_refused_and_cut_bodies_leave_nothing);
  RUN(kill_9_in_the_middle_of_a_text_upload);
  RUN(text_200mb_upload_peak_memory);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
