/* harness.h — integration tests: start the real tesseld, talk HTTP to it.
 *
 *   srv s; srv_start(&s, daemon_path, "--threads", "2", NULL);
 *   resp r = req(&s, "POST", "/v1/jobs?wait=10", "application/json", body);
 *   CHECK(r.status == 200); json_t *j = resp_json(&r); ... resp_free(&r);
 *   srv_kill(&s, SIGKILL); srv_restart(&s); srv_stop(&s);
 *
 * The daemon runs on a free port (--port 0; the harness reads the port from
 * its "listening on" line) with a fresh temporary data dir that
 * srv_cleanup removes. Its stderr goes to <data>/daemon.log, printed when a
 * test fails. Only loopback is ever contacted; every request has a timeout.
 */
#ifndef TESSEL_TESTS_HARNESS_H
#define TESSEL_TESTS_HARNESS_H

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* 1 in a build under AddressSanitizer: freed blocks wait in a quarantine
 * and realloc always copies there, so a peak of the daemon's resident
 * memory says nothing about copies; such bounds are only printed. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define SRV_MAX_ARGS 48

typedef struct srv {
  pid_t pid;
  int port;
  char dir[256];       /* data dir */
  char base[64];       /* "http://127.0.0.1:PORT" */
  const char *daemon;
  const char *args[SRV_MAX_ARGS];
  int nargs;
  const char *token;   /* bearer token for requests, or NULL */
  const char *cainfo;  /* HTTPS: the CA file requests trust (NULL: curl's) */
} srv;

typedef struct resp {
  long status;
  char *body;
  size_t len, cap; /* cap: bytes allocated for body (grows by doubling) */
  char headers[8192];
} resp;

static inline void srv_dump_log(const srv *s) {
  char path[400];
  snprintf(path, sizeof path, "%s/daemon.log", s->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  fprintf(stderr, "---- %s (last 60 lines) ----\n", path);
  char *lines[60] = {0};
  char buf[1024];
  int n = 0;
  while (fgets(buf, sizeof buf, f)) {
    free(lines[n % 60]);
    lines[n % 60] = strdup(buf);
    n++;
  }
  for (int i = n > 60 ? n - 60 : 0; i < n; i++) {
    fputs(lines[i % 60], stderr);
  }
  for (int i = 0; i < 60; i++) free(lines[i]);
  fclose(f);
}

/* Spawn the daemon with s->args; wait for its "listening on" line. */
static inline int srv_spawn(srv *s) {
  int out[2];
  if (pipe(out) != 0) return -1;
  char logpath[400], portbuf[16];
  snprintf(logpath, sizeof logpath, "%s/daemon.log", s->dir);
  snprintf(portbuf, sizeof portbuf, "%d", s->port);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const char *argv[SRV_MAX_ARGS + 12];
    int a = 0;
    argv[a++] = s->daemon;
    argv[a++] = "--port";
    argv[a++] = portbuf;
    argv[a++] = "--data-dir";
    argv[a++] = s->dir;
    argv[a++] = "--access-log";
    argv[a++] = "1";
    for (int i = 0; i < s->nargs; i++) argv[a++] = s->args[i];
    argv[a] = NULL;
    dup2(out[1], 1);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 2);
    close(out[0]);
    close(out[1]);
    execv(s->daemon, (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  s->pid = pid;
  FILE *f = fdopen(out[0], "r");
  char line[512];
  int port = -1;
  /* The daemon prints one line on stdout when it listens. */
  int tls = 0;
  while (fgets(line, sizeof line, f)) {
    char *p = strstr(line, "listening on http");
    if (p && (strncmp(p + 17, "://", 3) == 0 || strncmp(p + 17, "s://", 4) == 0)) {
      tls = p[17] == 's';
      char *colon = strrchr(p, ':');
      if (colon) port = (int)strtol(colon + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  if (port <= 0) {
    fprintf(stderr, "daemon did not start\n");
    srv_dump_log(s);
    return -1;
  }
  s->port = port;
  snprintf(s->base, sizeof s->base, "%s://127.0.0.1:%d", tls ? "https" : "http",
           port);
  return 0;
}

/* Start with extra args (NULL-terminated). A new temp data dir. */
static inline int srv_start(srv *s, const char *daemon, ...) {
  memset(s, 0, sizeof *s);
  s->daemon = daemon;
  snprintf(s->dir, sizeof s->dir, "/tmp/tessel-it-XXXXXX");
  if (!mkdtemp(s->dir)) return -1;
  va_list ap;
  va_start(ap, daemon);
  const char *arg;
  while ((arg = va_arg(ap, const char *)) && s->nargs < SRV_MAX_ARGS)
    s->args[s->nargs++] = arg;
  va_end(ap);
  s->port = 0;
  return srv_spawn(s);
}

/* Restart on the same data dir and port. */
static inline int srv_restart(srv *s) { return srv_spawn(s); }

/* Send a signal and wait for the process; returns its exit status or
 * 128+signal. */
static inline int srv_kill(srv *s, int sig) {
  if (s->pid <= 0) return -1;
  kill(s->pid, sig);
  int st = 0;
  for (int i = 0; i < 600; i++) { /* up to 60 s */
    pid_t w = waitpid(s->pid, &st, WNOHANG);
    if (w == s->pid) break;
    usleep(100000);
    if (i == 599) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &st, 0);
    }
  }
  s->pid = 0;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

static inline void srv_cleanup(srv *s) {
  if (s->pid > 0) srv_kill(s, SIGKILL);
  if (check_failed) srv_dump_log(s);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
  if (strncmp(s->dir, "/tmp/tessel-it-", 15) == 0 && system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", s->dir);
}

static inline size_t resp_write(char *p, size_t sz, size_t n, void *ud) {
  resp *r = ud;
  size_t add = sz * n;
  if (r->len + add + 1 > r->cap) {
    /* Doubling: a realloc per piece copies the whole body each time under
     * ASan (realloc always moves there), quadratic in a 40 MB download. */
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + add + 1) cap *= 2;
    char *nb = realloc(r->body, cap);
    if (!nb) return 0;
    r->body = nb;
    r->cap = cap;
  }
  memcpy(r->body + r->len, p, add);
  r->len += add;
  r->body[r->len] = 0;
  return add;
}

static inline size_t resp_header(char *p, size_t sz, size_t n, void *ud) {
  resp *r = ud;
  size_t add = sz * n, have = strlen(r->headers);
  if (have + add + 1 < sizeof r->headers) {
    memcpy(r->headers + have, p, add);
    r->headers[have + add] = 0;
  }
  return add;
}

/* A request with optional body (len < 0: strlen) and extra headers
 * (NULL-terminated "Name: value" strings after the length). */
static inline resp reqx(srv *s, const char *method, const char *path, const char *ctype,
                 const char *body, long len, ...) {
  resp r;
  memset(&r, 0, sizeof r);
  CURL *c = curl_easy_init();
  char url[2048];
  snprintf(url, sizeof url, "%s%s", s->base, path);
  struct curl_slist *h = NULL;
  char ct[256], auth[300];
  if (ctype) {
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
    h = curl_slist_append(h, ct);
  }
  if (s->token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", s->token);
    h = curl_slist_append(h, auth);
  }
  h = curl_slist_append(h, "Expect:");
  va_list ap;
  va_start(ap, len);
  const char *extra;
  while ((extra = va_arg(ap, const char *))) h = curl_slist_append(h, extra);
  va_end(ap);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, resp_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, resp_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (s->cainfo) curl_easy_setopt(c, CURLOPT_CAINFO, s->cainfo);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                     (curl_off_t)(len < 0 ? (long)strlen(body) : len));
  }
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    fprintf(stderr, "%s %s: %s\n", method, path, curl_easy_strerror(rc));
    r.status = -1;
  } else {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  }
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (!r.body) r.body = calloc(1, 1);
  return r;
}
#define req(s, m, p, ct, body) reqx((s), (m), (p), (ct), (body), -1, NULL)

static inline void resp_free(resp *r) {
  free(r->body);
  r->body = NULL;
  r->len = r->cap = 0;
}

/* The body as JSON (NULL and a failed CHECK when it is not). New ref. */
static inline json_t *resp_json(const resp *r) {
  json_error_t je;
  json_t *v = json_loadb(r->body, r->len, 0, &je);
  if (!v) fprintf(stderr, "not JSON (%s): %.300s\n", je.text, r->body);
  return v;
}

/* Value of a response header (case-insensitive), into buf; NULL if none. */
static inline const char *resp_header_get(const resp *r, const char *name, char *buf,
                                   size_t len) {
  size_t n = strlen(name);
  const char *p = r->headers;
  while (p && *p) {
    if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
      p += n + 1;
      while (*p == ' ') p++;
      size_t k = strcspn(p, "\r\n");
      if (k >= len) k = len - 1;
      memcpy(buf, p, k);
      buf[k] = 0;
      return buf;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NULL;
}

/* Error body check: status, code and (when given) field. */
static inline int is_error(const resp *r, long status, const char *code,
                    const char *field) {
  if (r->status != status) {
    fprintf(stderr, "expected %ld, got %ld: %.300s\n", status, r->status, r->body);
    return 0;
  }
  json_t *j = resp_json(r);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *c = err ? json_string_value(json_object_get(err, "code")) : NULL;
  const char *f = err ? json_string_value(json_object_get(err, "field")) : NULL;
  int ok = c && strcmp(c, code) == 0 && (!field || (f && strcmp(f, field) == 0));
  if (!ok) fprintf(stderr, "unexpected error body: %.300s\n", r->body);
  json_decref(j);
  return ok;
}

/* Poll a job until it is final (or timeout_s); returns the job (new ref). */
static inline json_t *wait_job(srv *s, const char *id, double timeout_s) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    resp r = req(s, "GET", path, NULL, NULL);
    json_t *j = r.status == 200 ? resp_json(&r) : NULL;
    resp_free(&r);
    const char *st = j ? json_string_value(json_object_get(j, "status")) : NULL;
    if (st && (!strcmp(st, "succeeded") || !strcmp(st, "failed") ||
               !strcmp(st, "canceled")))
      return j;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)(t.tv_sec - t0.tv_sec) > timeout_s) return j;
    json_decref(j);
    usleep(20000);
  }
}

/* Submit a job body; returns the job JSON (new ref) or NULL. */
static inline json_t *submit(srv *s, const char *query, const char *body, long *status) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs%s", query ? query : "");
  resp r = req(s, "POST", path, "application/json", body);
  if (status) *status = r.status;
  json_t *j = (r.status == 200 || r.status == 202) ? resp_json(&r) : NULL;
  if (!j) fprintf(stderr, "submit failed %ld: %.300s\n", r.status, r.body);
  resp_free(&r);
  return j;
}

static inline const char *jstr(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* GET a finished job's result (its result.href + query, e.g.
 * "?layout=condensed") as JSON and return its "data" member (new ref, or
 * NULL when the job, the href, the body or "data" is missing). */
static inline json_t *result_data_at(srv *s, json_t *job, const char *query) {
  const char *href = jstr(json_object_get(job, "result"), "href");
  if (!href) return NULL;
  char path[256];
  snprintf(path, sizeof path, "%s%s", href, query ? query : "");
  resp r = req(s, "GET", path, NULL, NULL);
  json_t *o = resp_json(&r);
  json_t *data = json_incref(json_object_get(o, "data"));
  json_decref(o);
  resp_free(&r);
  return data;
}
#define result_data(s, job) result_data_at((s), (job), NULL)

/* 1 when the daemon has a usable GPU (GET /v1/devices cuda.available). */
static inline int srv_has_gpu(srv *s) {
  resp r = req(s, "GET", "/v1/devices", NULL, NULL);
  json_t *d = resp_json(&r);
  int gpu = json_is_true(json_object_get(json_object_get(d, "cuda"), "available"));
  json_decref(d);
  resp_free(&r);
  return gpu;
}

/* 1 when job id's status is "running" now. */
static inline int job_is_running(srv *s, const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(s, "GET", path, NULL, NULL);
  json_t *o = r.status == 200 ? resp_json(&r) : NULL;
  const char *st = o ? jstr(o, "status") : NULL;
  int running = st && strcmp(st, "running") == 0;
  json_decref(o);
  resp_free(&r);
  return running;
}

/* Poll a job (up to 60 s: a loaded machine may start it late) until its
 * status is "running"; 1 if it got there, 0 if not (callers CHECK it). */
static inline int wait_running(srv *s, const char *id) {
  int running = 0;
  WAIT_FOR((running = job_is_running(s, id)), 60);
  return running;
}

/* 1 when GET /healthz answers 200 (the daemon is up and serving). */
static inline int srv_healthy(srv *s) {
  resp r = req(s, "GET", "/healthz", NULL, NULL);
  int ok = r.status == 200;
  resp_free(&r);
  return ok;
}

/* Poll a job (up to ~20 s) until its progress says it has computed some
 * but not all of its elements: it is reading its input. 1 when seen. */
static inline int wait_reading(srv *s, const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  for (int i = 0; i < 2000; i++) {
    resp r = req(s, "GET", path, NULL, NULL);
    json_t *o = resp_json(&r);
    json_t *p = o ? json_object_get(o, "progress") : NULL;
    json_int_t done = json_integer_value(json_object_get(p, "done"));
    json_int_t total = json_integer_value(json_object_get(p, "total"));
    int mid = done > 0 && done < total;
    json_decref(o);
    resp_free(&r);
    if (mid) return 1;
    usleep(10000);
  }
  return 0;
}

/* A serial geodesic matrix long enough (6000 points) to be caught queued
 * or running by a test that acts on it meanwhile. */
#define LONG_SERIAL_JOB                                                 \
  "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":" \
  "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":1}}}}"

/* Run the daemon to its exit, not as a server (a bad option, --help): argv
 * is daemon, then pre's and args' strings (each NULL-terminated; at most
 * 30 in all), env ("NAME=value") put in the child's environment when not
 * NULL. Its exit status (-1 when it did not exit), its stdout+stderr in
 * out (cap bytes, NUL-terminated). */
static inline int daemon_run_capture(const char *daemon, const char *const *pre,
                                     const char *const *args, const char *env,
                                     char *out, size_t cap) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    if (env) putenv((char *)env);
    const char *argv[32];
    int n = 0;
    argv[n++] = daemon;
    for (int i = 0; pre && pre[i] && n < 31; i++) argv[n++] = pre[i];
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    execv(daemon, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t got;
  while ((got = read(fds[0], out + len, cap - 1 - len)) > 0) len += (size_t)got;
  out[len] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
