/* test_http.c — server/ against libcurl, in process, on a loopback port.
 *
 * One server (port 0, 4 threads, 1 MiB body cap, 8 MiB upload cap, two
 * tokens, a web_dir in a temp folder) with test handlers that need nothing
 * outside server/ and util/. Each test talks HTTP to it with libcurl and
 * checks status, headers and bodies: routing (404, 405 + Allow, decoded
 * params, query), request ids, the JSON error shape, body caps (413 before
 * the body is read, chunked over cap, upload cap), bearer auth, deferred
 * replies (another thread, timeout, claim race, shutdown, answers built on
 * the connection's thread by http_resume_call), streaming of
 * multi-megabyte bodies checked byte for byte, static files and traversal
 * attempts, quiesce, and 64 concurrent clients. Nothing asserts a time.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "server/http.h"
#include "server/http_int.h" /* white-box: the deadline heap */
#include "util/util.h"

/* ---- test data --------------------------------------------------------- */

static unsigned char pattern_byte(uint64_t i) {
  return (unsigned char)((i * 2654435761u) >> 13);
}

#define FD_LEN ((uint64_t)5 * 1024 * 1024 + 123)
#define CB_LEN ((uint64_t)6 * 1024 * 1024 + 7)

static char tmpdir[256], webdir[300], fd_file[300];
static http_server *srv;
static int port;
static atomic_int helpers_running; /* detached helper threads alive */

/* ---- handlers ---------------------------------------------------------- */

static void h_health(http_req *r, void *ud) {
  http_reply_json(r, 200, json_pack("{s:b}", "ok", 1));
}

static void h_echo(http_req *r, void *ud) {
  const char *q = http_query(r, "q"), *x = http_query(r, "x");
  const char *t = http_header(r, "x-test");
  http_add_header(r, "X-Handler", "echo");
  http_reply_json(r, 200,
                  json_pack("{s:s, s:s, s:s*, s:s*, s:s*, s:s, s:s, s:s, s:b}",
                            "a", http_param(r, "a"), "b", http_param(r, "b"),
                            "q", q, "x", x, "test", t, "owner", http_owner(r),
                            "rid", http_request_id(r), "method", http_method(r),
                            "nop", http_param(r, "nope") == NULL));
}

static void h_things(http_req *r, void *ud) {
  http_reply_json(r, 200, json_pack("{s:s}", "id", http_param(r, "id")));
}

static void h_body(http_req *r, void *ud) {
  size_t len;
  const char *b = http_body(r, &len);
  char hex[65];
  t_sha256_hex(b, len, hex);
  http_reply_json(r, 200, json_pack("{s:I, s:s}", "len", (json_int_t)len,
                                    "sha256", hex));
}

/* A slow handler of big bodies: counts how many run at once. */
static atomic_int slow_now, slow_max;
static void h_slowbig(http_req *r, void *ud) {
  int n = atomic_fetch_add(&slow_now, 1) + 1;
  int m = atomic_load(&slow_max);
  while (n > m && !atomic_compare_exchange_weak(&slow_max, &m, n)) {
  }
  usleep(400 * 1000);
  atomic_fetch_sub(&slow_now, 1);
  h_body(r, ud);
}

static void h_err(http_req *r, void *ud) {
  terr e;
  terr_set(&e, T_EINVAL, "params.expr", 5, "unknown name '%s'", "y");
  http_reply_error(r, &e);
}

static void h_err500(http_req *r, void *ud) {
  terr e;
  terr_set(&e, T_EIO, "", -1, "disk on fire");
  http_add_header(r, "Retry-After", "7");
  http_reply_error(r, &e);
}

static void h_noreply(http_req *r, void *ud) {}

static void h_twice(http_req *r, void *ud) {
  http_reply_json(r, 200, json_pack("{s:i}", "n", 1));
  http_reply_json(r, 201, json_pack("{s:i}", "n", 2)); /* dropped */
}

/* Deferred, answered by another thread after a short sleep. */
typedef struct helper {
  http_req *r;
  int sleep_us;
} helper;

static atomic_int race_by_thread, race_by_timer, race_lost, late_bad;

static void *helper_main(void *arg) {
  helper *h = arg;
  usleep((useconds_t)h->sleep_us);
  if (http_claim(h->r)) {
    atomic_fetch_add(&race_by_thread, 1);
    http_reply_json(h->r, 200, json_pack("{s:s}", "by", "thread"));
  } else {
    atomic_fetch_add(&race_lost, 1);
  }
  /* The answer may be sent and MHD done with the request by now: our
   * reference keeps everything readable (ASan checks the memory). */
  usleep(1000);
  if (strncmp(http_path(h->r), "/v1/", 4) != 0 || !http_request_id(h->r)[0] ||
      http_header(h->r, "Host") == NULL)
    atomic_fetch_add(&late_bad, 1);
  http_req_unref(h->r);
  free(h);
  atomic_fetch_sub(&helpers_running, 1);
  return NULL;
}

static void spawn_helper(http_req *r, int sleep_us) {
  helper *h = malloc(sizeof *h);
  h->r = r;
  h->sleep_us = sleep_us;
  http_req_ref(r);
  atomic_fetch_add(&helpers_running, 1);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, helper_main, h) != 0) abort();
  pthread_attr_destroy(&a);
}

static void on_timeout_reply(http_req *r, void *arg) {
  atomic_fetch_add(&race_by_timer, 1);
  http_reply_json(r, 200, json_pack("{s:s, s:s}", "by", "timer", "arg",
                                    (const char *)arg));
}

static void h_defer(http_req *r, void *ud) {
  http_defer(r, 10000, on_timeout_reply, "t");
  spawn_helper(r, 30000);
}

static void h_defer_timeout(http_req *r, void *ud) {
  http_defer(r, 80, on_timeout_reply, "timeout-arg");
}

static void h_race(http_req *r, void *ud) {
  const char *d = http_query(r, "d");
  int64_t us = 0;
  if (d) t_parse_i64(d, &us);
  http_defer(r, us / 1000, on_timeout_reply, "race");
  spawn_helper(r, (int)us);
}

/* Parks a request for good; forever_parked counts the parked ones. */
static atomic_int forever_parked;
static void h_forever(http_req *r, void *ud) {
  http_defer(r, -1, NULL, NULL);
  atomic_fetch_add(&forever_parked, 1);
}

/* http_resume_call: the answer is built by call_build on an MHD thread,
 * which says whether that was another thread than the one that asked.
 * ?d=us: a helper thread asks after that delay; 0: the handler asks itself,
 * before it returns. */
static atomic_int calls_made;
typedef struct call_arg {
  pthread_t from;
} call_arg;

static void call_build(http_req *r, void *ud) {
  call_arg *a = ud;
  int other = !pthread_equal(a->from, pthread_self());
  atomic_fetch_add(&calls_made, 1);
  http_reply_json(r, 200, json_pack("{s:s, s:b}", "by", "call",
                                    "other_thread", other));
  free(a);
}

static void ask_call(http_req *r) {
  call_arg *a = malloc(sizeof *a);
  a->from = pthread_self();
  http_resume_call(r, call_build, a);
}

static void *call_helper_main(void *arg) {
  helper *h = arg;
  usleep((useconds_t)h->sleep_us);
  if (http_claim(h->r)) ask_call(h->r);
  http_req_unref(h->r);
  free(h);
  atomic_fetch_sub(&helpers_running, 1);
  return NULL;
}

static void h_call(http_req *r, void *ud) {
  const char *d = http_query(r, "d");
  int64_t us = 0;
  if (d) t_parse_i64(d, &us);
  http_defer(r, 10000, on_timeout_reply, "call");
  if (us == 0) {
    if (http_claim(r)) ask_call(r);
    return;
  }
  helper *h = malloc(sizeof *h);
  h->r = r;
  h->sleep_us = (int)us;
  http_req_ref(r);
  atomic_fetch_add(&helpers_running, 1);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, call_helper_main, h) != 0) abort();
  pthread_attr_destroy(&a);
}

static int fd_open_file(void) {
  int fd = -1;
  FILE *f = fopen(fd_file, "re");
  if (f) {
    fd = dup(fileno(f));
    fclose(f);
  }
  return fd;
}

static void h_stream_fd(http_req *r, void *ud) {
  int fd = fd_open_file();
  if (fd < 0) {
    terr e;
    terr_set(&e, T_EIO, "", -1, "test file missing");
    http_reply_error(r, &e);
    return;
  }
  http_reply_fd(r, 200, "application/octet-stream", fd, 0, FD_LEN);
}

static atomic_int stream_done;
static long cb_fill(void *arg, uint64_t pos, char *buf, size_t max) {
  uint64_t total = *(uint64_t *)arg;
  if (pos >= total) return 0;
  size_t n = max;
  if (n > total - pos) n = (size_t)(total - pos);
  if (n > 100000) n = 100000; /* short blocks, like a real producer */
  for (size_t i = 0; i < n; i++) buf[i] = (char)pattern_byte(pos + i);
  return (long)n;
}
static void cb_done(void *arg) {
  free(arg);
  atomic_fetch_add(&stream_done, 1);
}
static void h_stream_cb(http_req *r, void *ud) {
  uint64_t *total = malloc(sizeof *total);
  *total = CB_LEN;
  http_reply_stream(r, 200, "application/octet-stream", cb_fill, cb_done, total);
}

/* ---- the client -------------------------------------------------------- */

typedef struct resp {
  long status;
  long nconn; /* new connections this transfer opened */
  CURLcode cc;
  char *body;
  size_t len, cap;
  char hdrs[8192];
  size_t hlen;
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  resp *r = ud;
  size_t len = sz * n;
  if (r->len + len + 1 > r->cap) {
    size_t ncap = r->cap ? 2 * r->cap : 4096;
    while (ncap < r->len + len + 1) ncap *= 2;
    r->body = realloc(r->body, ncap);
    r->cap = ncap;
  }
  memcpy(r->body + r->len, p, len);
  r->len += len;
  r->body[r->len] = 0;
  return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  resp *r = ud;
  size_t len = sz * n;
  if (r->hlen + len < sizeof r->hdrs) {
    memcpy(r->hdrs + r->hlen, p, len);
    r->hlen += len;
    r->hdrs[r->hlen] = 0;
  }
  return len;
}

/* Value of response header name (last occurrence), into out. */
static const char *resp_header(const resp *r, const char *name, char *out,
                               size_t cap) {
  const char *found = NULL;
  size_t nl = strlen(name);
  for (const char *p = r->hdrs; *p;) {
    const char *eol = strstr(p, "\r\n");
    if (!eol) break;
    if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':')
      found = p + nl + 1;
    p = eol + 2;
  }
  if (!found) return NULL;
  while (*found == ' ') found++;
  size_t len = (size_t)(strstr(found, "\r\n") - found);
  if (len >= cap) len = cap - 1;
  memcpy(out, found, len);
  out[len] = 0;
  return out;
}

static void resp_free(resp *r) { free(r->body); }

typedef struct upload {
  uint64_t total, sent;
} upload;

static size_t on_read(char *buf, size_t sz, size_t n, void *ud) {
  upload *u = ud;
  size_t max = sz * n;
  if (u->sent >= u->total) return 0;
  if (max > u->total - u->sent) max = (size_t)(u->total - u->sent);
  for (size_t i = 0; i < max; i++) buf[i] = (char)pattern_byte(u->sent + i);
  u->sent += max;
  return max;
}

typedef struct req_opts {
  const char *method; /* NULL: GET */
  const char *body;   /* small body, or NULL */
  upload *up;         /* a streamed body */
  int chunked;        /* send up with Transfer-Encoding: chunked */
  int expect;         /* allow Expect: 100-continue */
  const char *h1, *h2; /* extra request headers */
  CURL *reuse;         /* keep the connection (quiesce test) */
} req_opts;

static resp do_req(const char *path, const req_opts *o) {
  static const req_opts none;
  if (!o) o = &none;
  resp r;
  memset(&r, 0, sizeof r);
  CURL *c = o->reuse ? o->reuse : curl_easy_init();
  char url[1024];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  struct curl_slist *hl = NULL;
  if (o->h1) hl = curl_slist_append(hl, o->h1);
  if (o->h2) hl = curl_slist_append(hl, o->h2);
  if (!o->expect) hl = curl_slist_append(hl, "Expect:");
  if (o->chunked) hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 5000L);
  if (o->up) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, o->up);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                     o->chunked ? (curl_off_t)-1 : (curl_off_t)o->up->total);
  } else if (o->body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, o->body);
  }
  if (o->method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, o->method);
  if (o->method && strcmp(o->method, "HEAD") == 0)
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  r.cc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &r.nconn);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
  curl_slist_free_all(hl);
  if (!o->reuse) curl_easy_cleanup(c);
  return r;
}

static json_t *resp_json(const resp *r) {
  return r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
}

/* error.code of a JSON error body, "" when not one. */
static const char *err_code(json_t *j) {
  const char *s = json_string_value(json_object_get(json_object_get(j, "error"),
                                                    "code"));
  return s ? s : "";
}

static int has_json_type(const resp *r) {
  char v[128];
  return resp_header(r, "Content-Type", v, sizeof v) &&
         strcmp(v, "application/json; charset=utf-8") == 0;
}

#define ALICE "Authorization: Bearer tok-alice-0123456789"

/* ---- tests ------------------------------------------------------------- */

TEST(test_not_found_json) {
  resp r = do_req("/v1/nothing/here", NULL);
  CHECK(r.cc == CURLE_OK);
  CHECK(r.status == 404);
  CHECK(has_json_type(&r));
  json_t *j = resp_json(&r);
  CHECK_STR(err_code(j), "not_found");
  CHECK(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
  char rid[128];
  CHECK(resp_header(&r, "X-Request-Id", rid, sizeof rid) && t_id_valid('r', rid));
  json_decref(j);
  resp_free(&r);
  /* Not a GET: no static lookup either. */
  req_opts o = {.method = "POST", .body = "{}"};
  r = do_req("/nothing", &o);
  CHECK(r.status == 404);
  j = resp_json(&r);
  CHECK_STR(err_code(j), "not_found");
  json_decref(j);
  resp_free(&r);
}

TEST(test_method_not_allowed) {
  req_opts o = {.method = "PUT", .body = "{}", .h1 = ALICE};
  resp r = do_req("/v1/things/7", &o);
  CHECK(r.status == 405);
  char allow[256];
  CHECK(resp_header(&r, "Allow", allow, sizeof allow));
  CHECK_STR(allow, "GET, DELETE, HEAD");
  json_t *j = resp_json(&r);
  CHECK_STR(err_code(j), "method_not_allowed");
  json_decref(j);
  resp_free(&r);
  /* The literal route beats the parameter one; DELETE reaches {id}. */
  o = (req_opts){.method = "DELETE", .h1 = ALICE};
  r = do_req("/v1/things/special", &o);
  CHECK(r.status == 200);
  j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "id")), "special");
  json_decref(j);
  resp_free(&r);
  r = do_req("/v1/things/special", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 200);
  CHECK(r.body && strstr(r.body, "\"literal\""));
  resp_free(&r);
  /* HEAD is served by the GET route, without a body. */
  r = do_req("/healthz", &(req_opts){.method = "HEAD"});
  CHECK(r.status == 200 && r.len == 0);
  resp_free(&r);
}

TEST(test_params_query_ids) {
  req_opts o = {.h1 = ALICE, .h2 = "X-Request-Id: abc-123.X_y"};
  resp r = do_req("/v1/echo/h%C3%A9llo/a%2Fb?q=hello%20world&x=1+2%2B3", &o);
  CHECK(r.status == 200);
  CHECK(has_json_type(&r));
  json_t *j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "a")), "h\xc3\xa9llo");
  CHECK_STR(json_string_value(json_object_get(j, "b")), "a/b");
  CHECK_STR(json_string_value(json_object_get(j, "q")), "hello world");
  CHECK_STR(json_string_value(json_object_get(j, "x")), "1 2+3");
  CHECK_STR(json_string_value(json_object_get(j, "rid")), "abc-123.X_y");
  CHECK_STR(json_string_value(json_object_get(j, "method")), "GET");
  CHECK(json_is_true(json_object_get(j, "nop")));
  CHECK(json_object_get(j, "test") == NULL);
  char v[128];
  CHECK(resp_header(&r, "X-Request-Id", v, sizeof v) && !strcmp(v, "abc-123.X_y"));
  CHECK(resp_header(&r, "X-Handler", v, sizeof v) && !strcmp(v, "echo"));
  json_decref(j);
  resp_free(&r);
  /* Ids that are not sane are replaced by a new one. */
  char longid[100];
  memset(longid, 'a', 65);
  longid[65] = 0;
  char h[128];
  snprintf(h, sizeof h, "X-Request-Id: %s", longid);
  const char *bad[] = {"X-Request-Id: has space", "X-Request-Id: semi;colon",
                       h};
  for (int i = 0; i < 3; i++) {
    o = (req_opts){.h1 = ALICE, .h2 = bad[i]};
    r = do_req("/v1/echo/1/2", &o);
    CHECK(r.status == 200);
    CHECK(resp_header(&r, "X-Request-Id", v, sizeof v) && t_id_valid('r', v));
    j = resp_json(&r);
    CHECK_STR(json_string_value(json_object_get(j, "rid")), v);
    json_decref(j);
    resp_free(&r);
  }
  /* Exactly 64 is fine; a header reaches the handler. */
  longid[64] = 0;
  snprintf(h, sizeof h, "X-Request-Id: %s", longid);
  r = do_req("/v1/echo/1/2", &(req_opts){.h1 = h, .h2 = "X-Test: yes"});
  CHECK(r.status == 401); /* no token: auth is checked (and the id kept) */
  CHECK(resp_header(&r, "X-Request-Id", v, sizeof v) && !strcmp(v, longid));
  resp_free(&r);
  /* Bad escapes: 400 before any handler. */
  r = do_req("/v1/echo/a%zz/b", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 400);
  resp_free(&r);
  r = do_req("/v1/echo/a/b?q=%4", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 400);
  resp_free(&r);
  /* A query name the route does not take: 400 naming it, after the token
   * check (401 first) and before any handler; a route given no list
   * (/healthz) takes none. */
  r = do_req("/v1/echo/a/b?q=1&zz=2", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 400);
  json_t *uj = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(json_object_get(uj, "error"), "field")), "zz");
  json_decref(uj);
  resp_free(&r);
  r = do_req("/v1/echo/a/b?zz=2", NULL);
  CHECK(r.status == 401);
  resp_free(&r);
  r = do_req("/healthz?x=1", NULL);
  CHECK(r.status == 400);
  resp_free(&r);
  r = do_req("/v1/echo/a/b?x=1&q=2", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 200);
  resp_free(&r);
}

TEST(test_error_shape) {
  resp r = do_req("/v1/err", NULL);
  CHECK(r.status == 400);
  CHECK(has_json_type(&r));
  json_t *j = resp_json(&r);
  json_t *e = json_object_get(j, "error");
  CHECK(json_object_size(j) == 1 && json_object_size(e) == 4);
  CHECK_STR(err_code(j), "invalid_argument");
  CHECK_STR(json_string_value(json_object_get(e, "message")),
            "params.expr: unknown name 'y'");
  CHECK_STR(json_string_value(json_object_get(e, "field")), "params.expr");
  CHECK(json_integer_value(json_object_get(e, "position")) == 5);
  json_decref(j);
  resp_free(&r);

  r = do_req("/v1/err500", NULL);
  CHECK(r.status == 500);
  char rid[128], ra[16];
  CHECK(resp_header(&r, "X-Request-Id", rid, sizeof rid));
  CHECK(resp_header(&r, "Retry-After", ra, sizeof ra) && !strcmp(ra, "7"));
  j = resp_json(&r);
  e = json_object_get(j, "error");
  CHECK_STR(err_code(j), "io_error");
  const char *msg = json_string_value(json_object_get(e, "message"));
  CHECK(msg && strstr(msg, "disk on fire") && strstr(msg, rid));
  CHECK(json_object_get(e, "field") == NULL);
  CHECK(json_object_get(e, "position") == NULL);
  json_decref(j);
  resp_free(&r);

  r = do_req("/v1/noreply", NULL);
  CHECK(r.status == 500);
  j = resp_json(&r);
  CHECK_STR(err_code(j), "internal");
  json_decref(j);
  resp_free(&r);

  r = do_req("/v1/twice", NULL);
  CHECK(r.status == 200);
  CHECK(r.body && !strcmp(r.body, "{\"n\":1}"));
  resp_free(&r);
}

TEST(test_body_caps) {
  /* A declared 100 MiB body on a 1 MiB route: 413 long before it is sent. */
  upload u = {.total = 100u << 20};
  req_opts o = {.up = &u, .h1 = ALICE};
  resp r = do_req("/v1/body", &o);
  CHECK_MSG(r.status == 413, "status %ld curl %d", r.status, (int)r.cc);
  CHECK_MSG(u.sent < (16u << 20), "sent %llu", (unsigned long long)u.sent);
  printf("     413 (Content-Length 100 MiB): client produced %llu bytes\n",
         (unsigned long long)u.sent);
  json_t *j = resp_json(&r);
  CHECK_STR(err_code(j), "payload_too_large");
  json_decref(j);
  resp_free(&r);
  /* The same with Expect: 100-continue: not one body byte goes out. */
  u = (upload){.total = 100u << 20};
  o = (req_opts){.up = &u, .h1 = ALICE, .expect = 1};
  r = do_req("/v1/body", &o);
  CHECK(r.status == 413);
  CHECK_MSG(u.sent == 0, "sent %llu", (unsigned long long)u.sent);
  resp_free(&r);
  /* An unknown route and a 401 do not read the body either. */
  u = (upload){.total = 100u << 20};
  o = (req_opts){.up = &u, .expect = 1};
  r = do_req("/v1/body", &o);
  CHECK(r.status == 401 && u.sent == 0);
  resp_free(&r);
  u = (upload){.total = 100u << 20};
  o = (req_opts){.up = &u, .h1 = ALICE};
  r = do_req("/v1/nowhere", &o);
  CHECK(r.status == 404 && u.sent < (16u << 20));
  resp_free(&r);
  /* Chunked: counted while read, cut at the cap. */
  u = (upload){.total = 64u << 20};
  o = (req_opts){.up = &u, .chunked = 1, .h1 = ALICE};
  r = do_req("/v1/body", &o);
  CHECK_MSG(r.status == 413, "status %ld curl %d", r.status, (int)r.cc);
  CHECK_MSG(u.sent < (32u << 20), "sent %llu", (unsigned long long)u.sent);
  printf("     413 (chunked, 64 MiB, cap 1 MiB): client produced %llu bytes\n",
         (unsigned long long)u.sent);
  resp_free(&r);
  /* Under the cap, chunked and not, the bytes arrive intact. */
  for (int k = 0; k < 4; k++) {
    int chunked = k & 1, expect = k >> 1;
    u = (upload){.total = 1000 * 1000};
    o = (req_opts){.up = &u, .chunked = chunked, .expect = expect, .h1 = ALICE};
    r = do_req("/v1/body", &o);
    CHECK_MSG(r.status == 200, "chunked %d expect %d", chunked, expect);
    unsigned char *buf = malloc(u.total);
    for (uint64_t i = 0; i < u.total; i++) buf[i] = pattern_byte(i);
    char hex[65];
    t_sha256_hex(buf, u.total, hex);
    free(buf);
    j = resp_json(&r);
    CHECK(json_integer_value(json_object_get(j, "len")) == 1000 * 1000);
    CHECK_STR(json_string_value(json_object_get(j, "sha256")), hex);
    json_decref(j);
    resp_free(&r);
  }
  /* The upload route takes 3 MiB; the JSON route does not. */
  u = (upload){.total = 3u << 20};
  o = (req_opts){.up = &u, .h1 = ALICE};
  r = do_req("/v1/upload", &o);
  CHECK(r.status == 200);
  j = resp_json(&r);
  CHECK(json_integer_value(json_object_get(j, "len")) == (3 << 20));
  json_decref(j);
  resp_free(&r);
  u = (upload){.total = 3u << 20};
  r = do_req("/v1/body", &o);
  CHECK_MSG(r.status == 413, "status %ld curl %d sent %llu", r.status,
            (int)r.cc, (unsigned long long)u.sent);
  resp_free(&r);
  /* Over the upload cap, chunked. */
  u = (upload){.total = 40u << 20};
  o = (req_opts){.up = &u, .chunked = 1, .h1 = ALICE};
  r = do_req("/v1/upload", &o);
  CHECK(r.status == 413 && u.sent < u.total);
  resp_free(&r);
}

TEST(test_auth) {
  resp r = do_req("/v1/echo/1/2", NULL);
  CHECK(r.status == 401);
  char v[128];
  CHECK(resp_header(&r, "WWW-Authenticate", v, sizeof v) &&
        !strncmp(v, "Bearer", 6));
  json_t *j = resp_json(&r);
  CHECK_STR(err_code(j), "unauthenticated");
  json_decref(j);
  resp_free(&r);
  const char *wrong[] = {"Authorization: Bearer tok-alice-012345678",
                         "Authorization: Bearer tok-alice-01234567890",
                         "Authorization: Basic dG9rLWFsaWNlLTAxMjM0NTY3ODk=",
                         "Authorization: Bearer", "Authorization: tok-bob-xyz-0123456"};
  for (int i = 0; i < 5; i++) {
    r = do_req("/v1/echo/1/2", &(req_opts){.h1 = wrong[i]});
    CHECK_MSG(r.status == 401, "%s", wrong[i]);
    resp_free(&r);
  }
  r = do_req("/v1/echo/1/2", &(req_opts){.h1 = ALICE});
  CHECK(r.status == 200);
  j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "owner")), "alice");
  json_decref(j);
  resp_free(&r);
  r = do_req("/v1/echo/1/2",
             &(req_opts){.h1 = "Authorization: bearer   tok-bob-xyz-0123456"});
  CHECK(r.status == 200);
  j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "owner")), "bob");
  json_decref(j);
  resp_free(&r);
  /* Open routes stay open; their owner is "". */
  r = do_req("/healthz", NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
  chmod(path, 0600);
}

TEST(test_token_file_errors) {
  char path[400];
  const char *bad[] = {"alice tok\n", "alice:\n", ":tok\n", "a:b c\n",
                       "a:x-0123456789abcdef\nb:x-0123456789abcdef\n",
                       "# only a comment\n\n", "alice:x\n",
                       "alice:0123456789abcde\n"};
  for (int i = 0; i < 8; i++) {
    snprintf(path, sizeof path, "%s/bad%d.tokens", tmpdir, i);
    write_file(path, bad[i]);
    http_config cfg = {.port = 0, .token_file = path};
    http_server *s = NULL;
    terr e;
    terr_clear(&e);
    int rc = http_server_create(&cfg, &s, &e);
    CHECK_MSG(rc == T_EINVAL && s == NULL, "case %d rc %d", i, rc);
    CHECK(strstr(e.message, path) != NULL);
    CHECK(i == 5 || strstr(e.message, i == 4 ? ":2:" : ":1:") != NULL);
    /* one- and 15-character tokens: refused for being guessable */
    CHECK_MSG(i < 6 || strstr(e.message, "at least 16"), "%s", e.message);
  }
  http_config cfg = {.port = 0, .token_file = "/nonexistent/tokens"};
  http_server *s = NULL;
  terr e;
  CHECK(http_server_create(&cfg, &s, &e) == T_EINVAL && s == NULL);
}

typedef struct fetch_arg {
  const char *path;
  resp r;
} fetch_arg;

static void *fetch_main(void *arg) {
  fetch_arg *f = arg;
  f->r = do_req(f->path, &(req_opts){.h1 = ALICE});
  return NULL;
}

static void wait_helpers(void) { WAIT_FOR(atomic_load(&helpers_running) == 0, 60); }

TEST(test_deferred) {
  atomic_store(&race_by_thread, 0);
  atomic_store(&race_by_timer, 0);
  resp r = do_req("/v1/defer", NULL);
  CHECK(r.status == 200);
  CHECK(r.body && strstr(r.body, "\"thread\""));
  char v[128];
  CHECK(resp_header(&r, "X-Request-Id", v, sizeof v));
  resp_free(&r);
  r = do_req("/v1/defer_timeout", NULL);
  CHECK(r.status == 200);
  json_t *j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "by")), "timer");
  CHECK_STR(json_string_value(json_object_get(j, "arg")), "timeout-arg");
  json_decref(j);
  resp_free(&r);
  wait_helpers();
  CHECK(atomic_load(&race_by_thread) == 1 && atomic_load(&race_by_timer) == 1);
  /* Deferred requests hold no MHD thread: more of them than threads (4)
   * are open at the same time and all get their answer. */
  enum { N = 12 };
  fetch_arg fa[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    fa[i].path = "/v1/defer";
    pthread_create(&t[i], NULL, fetch_main, &fa[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    CHECK(fa[i].r.status == 200);
    resp_free(&fa[i].r);
  }
  wait_helpers();
}

/* http_resume_call: built on the connection's thread, once, whether the
 * call comes while the handler still runs or after the suspension; and
 * called once even when the client has gone. */
TEST(test_resume_call) {
  atomic_store(&calls_made, 0);
  resp r = do_req("/v1/call?d=0", NULL);
  CHECK(r.status == 200);
  json_t *j = resp_json(&r);
  CHECK_STR(json_string_value(json_object_get(j, "by")), "call");
  CHECK(json_is_false(json_object_get(j, "other_thread"))); /* same thread */
  json_decref(j);
  char v[128];
  CHECK(resp_header(&r, "X-Request-Id", v, sizeof v));
  resp_free(&r);
  for (int i = 0; i < 20; i++) {
    r = do_req(i % 2 ? "/v1/call?d=20000" : "/v1/call?d=1", NULL);
    CHECK(r.status == 200);
    j = resp_json(&r);
    CHECK_STR(json_string_value(json_object_get(j, "by")), "call");
    if (i % 2) /* surely suspended by then: built on an MHD thread */
      CHECK(json_is_true(json_object_get(j, "other_thread")));
    json_decref(j);
    resp_free(&r);
  }
  wait_helpers();
  CHECK(atomic_load(&calls_made) == 21);
  /* The client gives up before the answer: the call still happens once. */
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/call?d=300000", port);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 100L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  resp gone;
  memset(&gone, 0, sizeof gone);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &gone);
  CHECK(curl_easy_perform(c) == CURLE_OPERATION_TIMEDOUT);
  curl_easy_cleanup(c);
  resp_free(&gone);
  wait_helpers();
  WAIT_FOR(atomic_load(&calls_made) >= 22, 60);
  CHECK(atomic_load(&calls_made) == 22);
}

TEST(test_claim_race) {
  atomic_store(&race_by_thread, 0);
  atomic_store(&race_by_timer, 0);
  atomic_store(&race_lost, 0);
  enum { N = 150 };
  int by_thread = 0, by_timer = 0;
  for (int i = 0; i < N; i++) {
    char path[64];
    snprintf(path, sizeof path, "/v1/race?d=%d", (i % 6) * 500);
    resp r = do_req(path, NULL);
    CHECK(r.status == 200);
    json_t *j = resp_json(&r);
    const char *by = json_string_value(json_object_get(j, "by"));
    if (by && !strcmp(by, "thread")) by_thread++;
    else if (by && !strcmp(by, "timer")) by_timer++;
    json_decref(j);
    resp_free(&r);
  }
  wait_helpers();
  /* Every request got exactly one answer, from exactly one winner; every
   * helper that lost knew it. */
  CHECK(by_thread + by_timer == N);
  CHECK(atomic_load(&race_by_thread) == by_thread);
  CHECK(atomic_load(&race_by_timer) == by_timer);
  CHECK(atomic_load(&race_by_thread) + atomic_load(&race_lost) == N);
  CHECK(atomic_load(&late_bad) == 0);
  printf("     claim race: thread won %d, timer won %d\n", by_thread, by_timer);
}

static int check_pattern(const resp *r, uint64_t len) {
  if (r->len != len) return 0;
  for (uint64_t i = 0; i < len; i++)
    if ((unsigned char)r->body[i] != pattern_byte(i)) return 0;
  return 1;
}

TEST(test_streaming) {
  resp r = do_req("/v1/stream_fd", NULL);
  CHECK(r.status == 200);
  CHECK_MSG(check_pattern(&r, FD_LEN), "len %zu", r.len);
  char v[64];
  CHECK(resp_header(&r, "Content-Length", v, sizeof v));
  resp_free(&r);
  atomic_store(&stream_done, 0);
  r = do_req("/v1/stream_cb", NULL);
  CHECK(r.status == 200);
  CHECK_MSG(check_pattern(&r, CB_LEN), "len %zu", r.len);
  resp_free(&r);
  WAIT_FOR(atomic_load(&stream_done), 60);
  CHECK(atomic_load(&stream_done) == 1);
}

TEST(test_static) {
  resp r = do_req("/", NULL);
  CHECK(r.status == 200);
  CHECK(r.body && !strcmp(r.body, "<html>hello</html>\n"));
  char v[128], etag[128];
  CHECK(resp_header(&r, "Content-Type", v, sizeof v) &&
        !strcmp(v, "text/html; charset=utf-8"));
  CHECK(resp_header(&r, "Cache-Control", v, sizeof v) && !strcmp(v, "no-cache"));
  CHECK(resp_header(&r, "X-Request-Id", v, sizeof v));
  CHECK(resp_header(&r, "ETag", etag, sizeof etag));
  resp_free(&r);
  char inm[160];
  snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
  r = do_req("/index.html", &(req_opts){.h1 = inm});
  CHECK(r.status == 304 && r.len == 0);
  resp_free(&r);
  struct {
    const char *path, *type;
  } ok[] = {{"/app.js", "text/javascript; charset=utf-8"},
            {"/style.css", "text/css; charset=utf-8"},
            {"/logo.svg", "image/svg+xml"},
            {"/sub/", "text/html; charset=utf-8"},
            {"/sub/data.json", "application/json; charset=utf-8"},
            {"/inside-link.js", "text/javascript; charset=utf-8"}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    r = do_req(ok[i].path, NULL);
    CHECK_MSG(r.status == 200, "%s: %ld", ok[i].path, r.status);
    CHECK_MSG(resp_header(&r, "Content-Type", v, sizeof v) &&
                  !strcmp(v, ok[i].type),
              "%s", ok[i].path);
    resp_free(&r);
  }
  r = do_req("/app.js", NULL);
  CHECK(r.body && !strcmp(r.body, "console.log(1);\n"));
  CHECK(resp_header(&r, "Cache-Control", v, sizeof v) &&
        !strcmp(v, "no-cache"));
  resp_free(&r);
  /* Traversal: refused, and the secret never shows. */
  struct {
    const char *path;
    long status;
  } bad[] = {{"/../secret.txt", 400},        {"/%2e%2e/secret.txt", 400},
             {"/sub/..%2f..%2fsecret.txt", 400}, {"/sub/%2e%2E/%2e%2e/secret.txt", 400},
             {"/a%5c..%5csecret.txt", 400},  {"/x%00y", 400},
             {"/./index.html", 400},         {"/out-link.txt", 404},
             {"/.hidden", 404},              {"/missing.js", 404},
             {"/sub//data.json", 404}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = do_req(bad[i].path, NULL);
    CHECK_MSG(r.status == bad[i].status, "%s: %ld", bad[i].path, r.status);
    CHECK(!r.body || !strstr(r.body, "TOPSECRET"));
    CHECK(has_json_type(&r));
    resp_free(&r);
  }
  r = do_req("/app.js", &(req_opts){.method = "POST", .body = "x"});
  CHECK(r.status == 405);
  CHECK(resp_header(&r, "Allow", v, sizeof v) && !strcmp(v, "GET, HEAD"));
  resp_free(&r);
}

/* Answers given from the headers alone (static files, 404, 401, 405)
 * keep the connection open when no body was announced. */
TEST(test_keep_alive) {
  CURL *c = curl_easy_init();
  const char *paths[] = {"/", "/app.js", "/missing.js", "/v1/echo/1/2",
                         "/healthz", "/v1/err", "/%2e%2e/x"};
  long want[] = {200, 200, 404, 401, 200, 400, 400};
  for (int i = 0; i < 7; i++) {
    resp r = do_req(paths[i], &(req_opts){.reuse = c});
    CHECK_MSG(r.status == want[i], "%s: %ld", paths[i], r.status);
    CHECK_MSG(i == 0 || r.nconn == 0, "%s opened a connection", paths[i]);
    resp_free(&r);
  }
  curl_easy_cleanup(c);
}

typedef struct client_arg {
  int id, ok;
} client_arg;

static void *client_main(void *arg) {
  client_arg *a = arg;
  CURL *c = curl_easy_init();
  for (int k = 0; k < 8; k++) {
    char path[128];
    const char *want_a = NULL;
    if (k % 4 == 3) {
      snprintf(path, sizeof path, "/v1/defer");
    } else {
      snprintf(path, sizeof path, "/v1/echo/c%d/k%d?q=%d", a->id, k, a->id * k);
      want_a = path + 9;
    }
    resp r = do_req(path, &(req_opts){.h1 = ALICE, .reuse = c});
    json_t *j = resp_json(&r);
    int good = r.status == 200 && j;
    if (good && want_a) {
      char ea[16], eq[16];
      snprintf(ea, sizeof ea, "c%d", a->id);
      snprintf(eq, sizeof eq, "%d", a->id * k);
      good = !strcmp(json_string_value(json_object_get(j, "a")), ea) &&
             !strcmp(json_string_value(json_object_get(j, "q")), eq);
    }
    a->ok += good;
    json_decref(j);
    resp_free(&r);
  }
  curl_easy_cleanup(c);
  return NULL;
}

TEST(test_concurrent_clients) {
  enum { N = 64 };
  pthread_t t[N];
  client_arg a[N];
  for (int i = 0; i < N; i++) {
    a[i] = (client_arg){.id = i};
    pthread_create(&t[i], NULL, client_main, &a[i]);
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    ok += a[i].ok;
  }
  wait_helpers();
  CHECK_MSG(ok == N * 8, "%d of %d", ok, N * 8);
}

/* A second server: quiesce, then destroy with a suspended request. */
TEST(test_quiesce_and_shutdown) {
  http_config cfg = {.listen = "127.0.0.1", .port = 0, .threads = 2};
  http_server *s = NULL;
  terr e;
  CHECK(http_server_create(&cfg, &s, &e) == T_OK);
  http_route(s, "GET", "/healthz", h_health, NULL, 0);
  http_route(s, "GET", "/forever", h_forever, NULL, 0);
  CHECK(http_server_start(s, &e) == T_OK);
  int main_port = port;
  port = http_port(s);
  CHECK(port > 0 && port != main_port);
  CURL *c = curl_easy_init();
  resp r = do_req("/healthz", &(req_opts){.reuse = c});
  CHECK(r.status == 200);
  resp_free(&r);
  /* Park one request for good before quiescing. */
  fetch_arg parked = {.path = "/forever"};
  pthread_t pt;
  atomic_store(&forever_parked, 0);
  pthread_create(&pt, NULL, fetch_main, &parked);
  /* Quiesce once it is parked (the state this test is about). */
  WAIT_FOR(atomic_load(&forever_parked) == 1, 60);
  CHECK(atomic_load(&forever_parked) == 1);
  http_server_quiesce(s);
  r = do_req("/healthz", &(req_opts){.reuse = c}); /* same connection */
  CHECK_MSG(r.status == 503, "status %ld curl %d", r.status, (int)r.cc);
  json_t *j = resp_json(&r);
  CHECK_STR(err_code(j), "unavailable");
  json_decref(j);
  resp_free(&r);
  curl_easy_cleanup(c);
  r = do_req("/healthz", NULL); /* a new connection: nobody listens */
  CHECK(r.cc == CURLE_COULDNT_CONNECT);
  resp_free(&r);
  http_server_destroy(s);
  pthread_join(pt, NULL);
  CHECK_MSG(parked.r.status == 503, "parked got %ld", parked.r.status);
  j = resp_json(&parked.r);
  CHECK_STR(err_code(j), "unavailable");
  json_decref(j);
  resp_free(&parked.r);
  port = main_port;
}

TEST(test_ipv6_listen) {
  http_config cfg = {.listen = "::1", .port = 0, .threads = 1};
  http_server *s = NULL;
  terr e;
  CHECK(http_server_create(&cfg, &s, &e) == T_OK);
  http_route(s, "GET", "/healthz", h_health, NULL, 0);
  if (http_server_start(s, &e) != T_OK) {
    http_server_destroy(s);
    SKIP_TEST("no IPv6 loopback here: %s", e.message);
  }
  char url[128];
  snprintf(url, sizeof url, "http://[::1]:%d/healthz", http_port(s));
  CURL *c = curl_easy_init();
  resp r;
  memset(&r, 0, sizeof r);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  CHECK(curl_easy_perform(c) == CURLE_OK);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  CHECK(r.status == 200 && r.body && strstr(r.body, "\"ok\":true"));
  curl_easy_cleanup(c);
  resp_free(&r);
  http_server_destroy(s);
}

/* The deadline heap on its own: requests armed in a scrambled order fire
 * in deadline order, and disarmed ones never fire. Fake request objects
 * carry only what the timer touches. */
enum { HEAP_N = 200 };
static atomic_int heap_fired[HEAP_N];
static atomic_int heap_nfired, heap_nstored;

static void heap_on_timeout(http_req *r, void *arg) {
  int i = atomic_fetch_add(&heap_nfired, 1);
  if (i < HEAP_N) atomic_store(&heap_fired[i], (int)(intptr_t)arg);
  atomic_fetch_add(&heap_nstored, 1);
}

/* The gate: the first deadline to pass; its callback holds the timer
 * thread until the test opens it, so that arming and disarming the others
 * happen before any of them can fire, however slow the machine. */
static atomic_int gate_entered, gate_open;
static void gate_on_timeout(http_req *r, void *arg) {
  atomic_store(&gate_entered, 1);
  while (!atomic_load(&gate_open)) usleep(1000);
}

static http_req *fake_req(http_timeout_fn on_timeout, void *arg) {
  http_req *r = calloc(1, sizeof *r);
  atomic_init(&r->refs, 1);
  pthread_mutex_init(&r->mu, NULL);
  r->timer_idx = -1;
  r->on_timeout = on_timeout;
  r->timeout_arg = arg;
  return r;
}

TEST(test_timer_heap) {
  http_timer *t = NULL;
  terr e;
  CHECK(timer_create_thread(&t, &e) == T_OK);
  http_req *rs[HEAP_N];
  atomic_store(&heap_nfired, 0);
  atomic_store(&heap_nstored, 0);
  atomic_store(&gate_entered, 0);
  atomic_store(&gate_open, 0);
  http_req *gate = fake_req(gate_on_timeout, NULL);
  timer_arm(t, gate, t_now_ms());
  WAIT_FOR(atomic_load(&gate_entered), 60);
  CHECK(atomic_load(&gate_entered));
  /* Deadlines already past: all due once the gate opens, fired in order. */
  double base = t_now_ms();
  for (int k = 0; k < HEAP_N; k++) {
    int i = (k * 7919) % HEAP_N; /* a scrambled order of 0..N-1 */
    http_req *r = fake_req(heap_on_timeout, (void *)(intptr_t)i);
    rs[i] = r;
    /* Re-arming replaces: first far away, then the real deadline. */
    timer_arm(t, r, base + 1e6);
    timer_arm(t, r, base + 0.25 * i);
  }
  int disarmed = 0;
  for (int i = 0; i < HEAP_N; i += 3)
    if (timer_disarm(t, rs[i])) {
      http_req_unref(rs[i]);
      disarmed++;
    }
  CHECK(disarmed == (HEAP_N + 2) / 3);
  atomic_store(&gate_open, 1);
  WAIT_FOR(atomic_load(&heap_nstored) >= HEAP_N - disarmed, 60);
  int n = atomic_load(&heap_nstored);
  CHECK_MSG(n == HEAP_N - disarmed, "fired %d", n);
  int ordered = 1, none_disarmed = 1;
  for (int k = 0; k < n; k++) {
    int f = atomic_load(&heap_fired[k]);
    if (k && f <= atomic_load(&heap_fired[k - 1])) ordered = 0;
    if (f % 3 == 0) none_disarmed = 0;
  }
  CHECK(ordered);
  CHECK(none_disarmed);
  /* Still armed at destroy: dropped with their references. */
  http_req *late = fake_req(heap_on_timeout, NULL);
  timer_arm(t, late, t_now_ms() + 1e7);
  timer_destroy(t);
  CHECK(late->timer_idx == -1 && atomic_load(&late->refs) == 1);
  http_req_unref(late);
  for (int i = 0; i < HEAP_N; i++) http_req_unref(rs[i]);
  http_req_unref(gate);
}

/* ---- setup ------------------------------------------------------------- */

static void setup_files(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tessel_http_XXXXXX");
  if (!mkdtemp(tmpdir)) abort();
  char p[400];
  snprintf(webdir, sizeof webdir, "%s/web", tmpdir);
  mkdir(webdir, 0755);
  snprintf(p, sizeof p, "%s/index.html", webdir);
  write_file(p, "<html>hello</html>\n");
  snprintf(p, sizeof p, "%s/app.js", webdir);
  write_file(p, "console.log(1);\n");
  snprintf(p, sizeof p, "%s/style.css", webdir);
  write_file(p, "body{}\n");
  snprintf(p, sizeof p, "%s/logo.svg", webdir);
  write_file(p, "<svg/>\n");
  snprintf(p, sizeof p, "%s/.hidden", webdir);
  write_file(p, "TOPSECRET\n");
  snprintf(p, sizeof p, "%s/sub", webdir);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/sub/index.html", webdir);
  write_file(p, "<html>sub</html>\n");
  snprintf(p, sizeof p, "%s/sub/data.json", webdir);
  write_file(p, "{}\n");
  snprintf(p, sizeof p, "%s/secret.txt", tmpdir);
  write_file(p, "TOPSECRET\n");
  char link[400];
  snprintf(link, sizeof link, "%s/out-link.txt", webdir);
  if (symlink(p, link) != 0) abort();
  snprintf(link, sizeof link, "%s/inside-link.js", webdir);
  if (symlink("app.js", link) != 0) abort();
  snprintf(p, sizeof p, "%s/tokens", tmpdir);
  write_file(p, "# who:token\n\nalice:tok-alice-0123456789\r\n  bob : tok-bob-xyz-0123456 \n");
  snprintf(fd_file, sizeof fd_file, "%s/big.bin", tmpdir);
  FILE *f = fopen(fd_file, "w");
  for (uint64_t i = 0; i < FD_LEN; i++) fputc(pattern_byte(i), f);
  fclose(f);
}

static void cleanup_files(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
}

static void h_literal(http_req *r, void *ud) {
  http_reply_json(r, 200, json_pack("{s:s}", "literal", "yes"));
}

/* Bodies over 1 MiB: with 4 HTTP threads at most 3 handlers hold one at
 * once (a 4th is answered 503 + Retry-After, or waits for its thread:
 * MHD's workers own their connections), and a small request on a new
 * connection is answered meanwhile (a thread stays free to accept it). */
typedef struct big_req {
  upload up;
  long status;
  int retry_after;
} big_req;

static void *send_big(void *p) {
  big_req *b = p;
  req_opts o = {.method = "POST", .up = &b->up, .h1 = ALICE};
  resp r = do_req("/v1/slowbig", &o);
  b->status = r.status;
  b->retry_after = strcasestr(r.hdrs, "Retry-After:") != NULL;
  resp_free(&r);
  return NULL;
}

TEST(test_big_bodies_bounded) {
  enum { T = 8 };
  pthread_t th[T];
  big_req b[T];
  atomic_store(&slow_max, 0);
  for (int i = 0; i < T; i++) {
    b[i] = (big_req){.up = {.total = 2u << 20}};
    pthread_create(&th[i], NULL, send_big, &b[i]);
  }
  usleep(200 * 1000);
  resp h = do_req("/healthz", NULL);
  CHECK(h.status == 200);
  resp_free(&h);
  int ok = 0, busy = 0, other = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    if (b[i].status == 200) ok++;
    else if (b[i].status == 503 && b[i].retry_after) busy++;
    else other++;
  }
  printf("     8 big bodies at once: %d handled (at most %d together), %d answered 503\n",
         ok, atomic_load(&slow_max), busy);
  /* Every request answered (handled, or 503 + Retry-After) and never more
   * than threads - 1 handled together: the bound this test is for. How
   * many ran together below it depends on how the senders' bodies arrive
   * (a loaded 2-core machine may deliver them one by one: max 1), so only
   * that at least one was handled is asserted below it. */
  CHECK(other == 0 && ok + busy == T && ok >= 1);
  CHECK(atomic_load(&slow_max) >= 1 && atomic_load(&slow_max) <= 3);
}

/* http_range_parse (server/range.c): each form, the clamps, what is
 * refused and what is ignored. */
TEST(test_range_parse) {
  struct {
    const char *h;
    uint64_t len;
    http_range_kind k;
    uint64_t a, b;
  } c[] = {
      {NULL, 100, HTTP_RANGE_NONE, 0, 0},
      {"bytes=0-9", 100, HTTP_RANGE_ONE, 0, 9},
      {"bytes=90-200", 100, HTTP_RANGE_ONE, 90, 99},
      {"bytes=99-99", 100, HTTP_RANGE_ONE, 99, 99},
      {"bytes=10-", 100, HTTP_RANGE_ONE, 10, 99},
      {"bytes=-5", 100, HTTP_RANGE_ONE, 95, 99},
      {"bytes=-500", 100, HTTP_RANGE_ONE, 0, 99},
      {"BYTES = 1-2", 100, HTTP_RANGE_ONE, 1, 2},
      {"bytes=0-0,", 100, HTTP_RANGE_ONE, 0, 0},
      {"bytes=100-", 100, HTTP_RANGE_UNSAT, 0, 0},
      {"bytes=-0", 100, HTTP_RANGE_UNSAT, 0, 0},
      {"bytes=0-", 0, HTTP_RANGE_UNSAT, 0, 0},
      {"bytes=99999999999999999999999-", 100, HTTP_RANGE_UNSAT, 0, 0},
      {"bytes=0-1,5-6", 100, HTTP_RANGE_MULTI, 0, 0},
      {"bytes=5-2", 100, HTTP_RANGE_NONE, 0, 0},
      {"items=0-1", 100, HTTP_RANGE_NONE, 0, 0},
      {"bytes=", 100, HTTP_RANGE_NONE, 0, 0},
      {"bytes=-", 100, HTTP_RANGE_NONE, 0, 0},
      {"bytes=1-2x", 100, HTTP_RANGE_NONE, 0, 0},
      {"bytes=+1-2", 100, HTTP_RANGE_NONE, 0, 0},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    uint64_t a = 7, b = 7;
    http_range_kind k = http_range_parse(c[i].h, c[i].len, &a, &b);
    CHECK_MSG(k == c[i].k && a == c[i].a && b == c[i].b,
              "'%s' len %llu: kind %d [%llu, %llu]", c[i].h ? c[i].h : "(null)",
              (unsigned long long)c[i].len, (int)k, (unsigned long long)a,
              (unsigned long long)b);
  }
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  setup_files();
  char tokens[400];
  snprintf(tokens, sizeof tokens, "%s/tokens", tmpdir);
  http_config cfg = {.listen = "127.0.0.1", .port = 0, .threads = 4,
                     .max_body = 1 << 20, .max_upload = 8 << 20,
                     .conn_timeout_s = 30, .per_ip_limit = 128,
                     .token_file = tokens, .web_dir = webdir, .access_log = 1};
  terr e;
  if (http_server_create(&cfg, &srv, &e) != T_OK) {
    fprintf(stderr, "create: %s\n", e.message);
    return 1;
  }
  http_route(srv, "GET", "/healthz", h_health, NULL, 0);
  http_route(srv, "GET", "/v1/echo/{a}/{b}", h_echo, NULL, HTTP_AUTH);
  http_route(srv, "GET", "/v1/things/{id}", h_things, NULL, HTTP_AUTH);
  http_route(srv, "DELETE", "/v1/things/{id}", h_things, NULL, HTTP_AUTH);
  http_route(srv, "GET", "/v1/things/special", h_literal, NULL, HTTP_AUTH);
  http_route(srv, "POST", "/v1/body", h_body, NULL, HTTP_AUTH);
  http_route(srv, "POST", "/v1/upload", h_body, NULL, HTTP_AUTH | HTTP_UPLOAD);
  http_route(srv, "POST", "/v1/slowbig", h_slowbig, NULL, HTTP_AUTH | HTTP_UPLOAD);
  http_route(srv, "GET", "/v1/err", h_err, NULL, 0);
  http_route(srv, "GET", "/v1/err500", h_err500, NULL, 0);
  http_route(srv, "GET", "/v1/noreply", h_noreply, NULL, 0);
  http_route(srv, "GET", "/v1/twice", h_twice, NULL, 0);
  http_route(srv, "GET", "/v1/defer", h_defer, NULL, 0);
  http_route(srv, "GET", "/v1/defer_timeout", h_defer_timeout, NULL, 0);
  http_route(srv, "GET", "/v1/race", h_race, NULL, 0);
  http_route(srv, "GET", "/v1/call", h_call, NULL, 0);
  http_route(srv, "GET", "/v1/stream_fd", h_stream_fd, NULL, 0);
  http_route(srv, "GET", "/v1/stream_cb", h_stream_cb, NULL, 0);
  CHECK(http_route(srv, "GET", "/v1/echo/{a}/{b}", h_echo, NULL, 0) != T_OK);
  static const char *const echo_q[] = {"q", "x", NULL}, *const d_q[] = {"d", NULL};
  CHECK(http_route_query(srv, "GET", "/v1/echo/{a}/{b}", echo_q) == T_OK);
  CHECK(http_route_query(srv, "GET", "/v1/call", d_q) == T_OK);
  CHECK(http_route_query(srv, "GET", "/v1/race", d_q) == T_OK);
  CHECK(http_route_query(srv, "GET", "/v1/nowhere", d_q) != T_OK);
  if (http_server_start(srv, &e) != T_OK) {
    fprintf(stderr, "start: %s\n", e.message);
    return 1;
  }
  port = http_port(srv);

  RUN(test_not_found_json);
  RUN(test_method_not_allowed);
  RUN(test_params_query_ids);
  RUN(test_error_shape);
  RUN(test_body_caps);
  RUN(test_big_bodies_bounded);
  RUN(test_auth);
  RUN(test_token_file_errors);
  RUN(test_deferred);
  RUN(test_resume_call);
  RUN(test_claim_race);
  RUN(test_streaming);
  RUN(test_static);
  RUN(test_keep_alive);
  RUN(test_concurrent_clients);
  RUN(test_quiesce_and_shutdown);
  RUN(test_ipv6_listen);
  RUN(test_timer_heap);
  RUN(test_range_parse);

  wait_helpers();
  http_server_destroy(srv);
  cleanup_files();
  curl_global_cleanup();
  return check_summary();
}
