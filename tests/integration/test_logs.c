/* test_logs.c — the daemon's log lines (API.md, "Logs").
 *
 * Asserts:
 *  - text format: the access line has the method, path, query string,
 *    status, request id, owner and client address; one job_end line per
 *    ended job with id, kind, backend used, status, ms — and the error code
 *    for a job that failed on its timeout and for a canceled one;
 *  - --log-format json: every line the daemon writes (start, access, job
 *    ends, shutdown) is one JSON object with time and level; the access
 *    and job_end events carry their fields as members of the right JSON
 *    type, and a query with a quote, a backslash and a control character
 *    stays valid JSON (the control character as '?', as in text);
 *  - a bad --log-format stops the start (exit status 2).
 */
#include "harness.h"

static const char *daemon_path;

/* The daemon's log as one string (caller frees). */
static char *read_log(const srv *s) {
  char path[400];
  snprintf(path, sizeof path, "%s/daemon.log", s->dir);
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  b[got] = 0;
  fclose(f);
  return b;
}

/* The first line of log holding all of the NULL-terminated strings. */
static int has_line(const char *log, ...) {
  const char *p = log;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char *line = strndup(p, len);
    va_list ap;
    va_start(ap, log);
    int all = 1;
    const char *w;
    while ((w = va_arg(ap, const char *)))
      if (!strstr(line, w)) all = 0;
    va_end(ap);
    free(line);
    if (all) return 1;
    p = nl ? nl + 1 : p + len;
  }
  return 0;
}

/* 1 when the log has a job_end line for each of the three ids. */
static int ends_logged(const srv *s, const char *a, const char *b, const char *c) {
  char *log = read_log(s);
  int all = has_line(log, "job_end", a, NULL) && has_line(log, "job_end", b, NULL) &&
            has_line(log, "job_end", c, NULL);
  free(log);
  return all;
}

/* 1 when the log has the access line of GET /v1/jobs?limit=1&status=... */
static int access_logged(const srv *s) {
  char *log = read_log(s);
  int has = has_line(log, " access ", "method=GET", "path=/v1/jobs",
                     "query=\"limit=1&status=succeeded\"", "status=200",
                     "request_id=r_", "owner=-", "client=127.0.0.1", NULL);
  free(log);
  return has;
}

/* Run a succeeded, a timed-out and a canceled job; returns the ids once
 * their end lines are in the log (written after the commit, so the
 * answer can come first: wait for the lines, not for a time). */
static void three_jobs(srv *s, char ok[64], char late[64], char gone[64]) {
  long st;
  json_t *j = submit(s, "?wait=30",
                     "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":"
                     "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2]}}}", &st);
  snprintf(ok, 64, "%s", jstr(j, "id") ? jstr(j, "id") : "?");
  json_decref(j);
  j = submit(s, "?wait=30",
             "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"timeout_s\":0.05,"
             "\"params\":{\"points\":{\"random\":{\"shape\":[6000,2],\"seed\":1,"
             "\"low\":-60,\"high\":60}}}}", &st);
  snprintf(late, 64, "%s", jstr(j, "id") ? jstr(j, "id") : "?");
  CHECK_STR(jstr(j, "status"), "failed");
  json_decref(j);
  j = submit(s, NULL,
             "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
             "{\"random\":{\"shape\":[8000,2],\"seed\":2,\"low\":-60,\"high\":60}}}}",
             &st);
  snprintf(gone, 64, "%s", jstr(j, "id") ? jstr(j, "id") : "?");
  json_decref(j);
  CHECK(wait_running(s, gone));
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", gone);
  resp r = req(s, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *end = wait_job(s, gone, 30);
  CHECK_STR(jstr(end, "status"), "canceled");
  json_decref(end);
  int logged = 0;
  WAIT_FOR((logged = ends_logged(s, ok, late, gone)), 30);
  CHECK_MSG(logged, "no job_end line for one of %s %s %s", ok, late, gone);
}

TEST(text_lines) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "2", NULL) == 0);
  char ok[64], late[64], gone[64];
  three_jobs(&s, ok, late, gone);
  resp r = req(&s, "GET", "/v1/jobs?limit=1&status=succeeded", NULL, NULL);
  resp_free(&r);
  int logged = 0;
  WAIT_FOR((logged = access_logged(&s)), 30);
  CHECK(logged);
  char *log = read_log(&s);
  CHECK(has_line(log, " job_end ", ok, "kind=map", "backend=serial",
                 "status=succeeded", "ms=", NULL));
  CHECK(has_line(log, " job_end ", late, "kind=geodesic", "status=failed",
                 "error=deadline_exceeded", NULL));
  CHECK(has_line(log, " job_end ", gone, "status=canceled", "error=canceled", NULL));
  free(log);
  srv_cleanup(&s);
}

TEST(json_lines) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "2", "--log-format", "json", NULL) == 0);
  char ok[64], late[64], gone[64];
  three_jobs(&s, ok, late, gone);
  /* A query with a quote, a backslash and a control character (%01). */
  resp r = req(&s, "GET", "/v1/jobs?label=%22a%5Cb%01", NULL, NULL);
  resp_free(&r);
  CHECK(srv_kill(&s, SIGTERM) == 0);
  char *log = read_log(&s);
  int lines = 0, bad = 0, access = 0, ends = 0, odd_query = 0;
  for (char *p = log, *nl; *p; p = nl ? nl + 1 : p + strlen(p)) {
    nl = strchr(p, '\n');
    if (nl) *nl = 0;
    if (!*p) continue;
    lines++;
    json_error_t je;
    json_t *o = json_loads(p, 0, &je);
    if (!json_is_object(o) || !json_is_string(json_object_get(o, "time")) ||
        !json_is_string(json_object_get(o, "level"))) {
      if (bad++ < 3) fprintf(stderr, "not a JSON log line: %s\n", p);
      json_decref(o);
      continue;
    }
    const char *ev = jstr(o, "event");
    if (ev && strcmp(ev, "access") == 0) {
      access++;
      CHECK(json_is_integer(json_object_get(o, "status")) &&
            json_is_number(json_object_get(o, "ms")) &&
            json_is_integer(json_object_get(o, "bytes")) &&
            jstr(o, "client") && jstr(o, "request_id") && jstr(o, "path"));
      const char *q = jstr(o, "query");
      /* control characters are '?' in every log line */
      if (q && strcmp(q, "label=\"a\\b?") == 0) odd_query = 1;
    }
    if (ev && strcmp(ev, "job_end") == 0) {
      ends++;
      const char *id = jstr(o, "id"), *stt = jstr(o, "status");
      CHECK(id && stt && jstr(o, "kind") && jstr(o, "backend") &&
            json_is_number(json_object_get(o, "ms")));
      if (id && strcmp(id, late) == 0) CHECK_STR(jstr(o, "error"), "deadline_exceeded");
      if (id && strcmp(id, gone) == 0) CHECK_STR(stt, "canceled");
      if (id && strcmp(id, ok) == 0) CHECK(json_object_get(o, "error") == NULL);
    }
    json_decref(o);
  }
  CHECK_MSG(lines > 10 && bad == 0, "%d lines, %d not JSON", lines, bad);
  CHECK_MSG(access >= 5 && ends == 3, "%d access lines, %d job ends", access, ends);
  CHECK_MSG(odd_query, "the query with a quote and a control character");
  free(log);
  srv_cleanup(&s);
}

TEST(bad_format_refused) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--log-format", "xml", NULL) != 0);
  CHECK(srv_kill(&s, SIGKILL) == 2);
  srv_cleanup(&s);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_logs <tesseld>");
  daemon_path = argv[1];
  curl_global_init(CURL_GLOBAL_ALL);
  RUN(text_lines);
  RUN(json_lines);
  RUN(bad_format_refused);
  curl_global_cleanup();
  return check_summary();
}
