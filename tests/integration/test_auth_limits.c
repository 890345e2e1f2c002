/* test_auth_limits.c — bearer tokens (401, per-owner visibility), the
 * queue limit (429 with Retry-After), ?wait that runs out (202), and the
 * access log line per request.
 */
#include "harness.h"

static srv S;

static const char *SLOW =
    "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
    "{\"random\":{\"shape\":[3000,2],\"low\":-60,\"high\":60,\"seed\":%d}}}}";

TEST(auth) {
  S.token = NULL;
  resp r = req(&S, "GET", "/v1/jobs", NULL, NULL);
  CHECK(is_error(&r, 401, "unauthenticated", NULL));
  char h[128];
  CHECK(resp_header_get(&r, "WWW-Authenticate", h, sizeof h) != NULL);
  resp_free(&r);
  S.token = "wrong";
  r = req(&S, "GET", "/v1/jobs", NULL, NULL);
  CHECK(is_error(&r, 401, "unauthenticated", NULL));
  resp_free(&r);
  /* Probes stay open. */
  S.token = NULL;
  r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);

  S.token = "alice-secret-01234";
  json_t *j = submit(&S, "?wait=20",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":[1]}}}", NULL);
  CHECK(j != NULL);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", j ? jstr(j, "id") : "x");
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays", "application/json", "[1,2,3]");
  json_t *a = resp_json(&r);
  char apath[128];
  snprintf(apath, sizeof apath, "/v1/arrays/%s", a ? jstr(a, "id") : "x");
  json_decref(a);
  resp_free(&r);

  /* Bob sees neither Alice's job nor her array. */
  S.token = "bob-secret-0123456";
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
  r = req(&S, "GET", apath, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
  r = req(&S, "GET", "/v1/jobs", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(o && json_array_size(json_object_get(o, "jobs")) == 0);
  json_decref(o);
  resp_free(&r);
  /* ... nor her job counts in /metrics; she sees her own. */
  r = req(&S, "GET", "/metrics", NULL, NULL);
  CHECK(r.status == 200 && strstr(r.body, "tessel_queue_depth") &&
        !strstr(r.body, "tessel_jobs{kind=\"map\""));
  resp_free(&r);
  S.token = "alice-secret-01234";
  r = req(&S, "GET", "/metrics", NULL, NULL);
  CHECK(r.status == 200 && strstr(r.body, "tessel_jobs{kind=\"map\",backend=\"") != NULL);
  resp_free(&r);
  json_decref(j);
}

TEST(wait_runs_out_then_queue_full) {
  /* One worker, queue limit 2: a slow job runs, two wait, the next is 429. */
  char body[512];
  long st;
  snprintf(body, sizeof body, SLOW, 1);
  json_t *running = submit(&S, "?wait=0.2", body, &st);
  CHECK(running && st == 202); /* ?wait ran out: 202 with the job */
  CHECK(running && strcmp(jstr(running, "status"), "succeeded") != 0);
  int accepted = 0, refused = 0;
  char retry[32] = "";
  for (int i = 2; i < 8; i++) {
    snprintf(body, sizeof body, SLOW, i);
    resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
    if (r.status == 202) accepted++;
    if (r.status == 429) {
      refused++;
      CHECK(is_error(&r, 429, "too_many_requests", NULL));
      CHECK(resp_header_get(&r, "Retry-After", retry, sizeof retry) && atoi(retry) >= 1);
    }
    resp_free(&r);
  }
  CHECK(accepted >= 1 && accepted <= 3);
  CHECK(refused >= 3);
  /* Cancel everything so the test ends quickly. */
  resp r = req(&S, "GET", "/v1/jobs?limit=100", NULL, NULL);
  json_t *o = resp_json(&r);
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(o, "jobs"), i, it) {
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", jstr(it, "id"));
    resp c = req(&S, "POST", path, NULL, NULL);
    resp_free(&c);
  }
  json_decref(o);
  resp_free(&r);
  json_decref(running);
}

/* 1 when daemon.log holds the access line of GET /v1/jobs?limit=1. */
static int has_access_line(void) {
  char path[400], line[2048];
  snprintf(path, sizeof path, "%s/daemon.log", S.dir);
  FILE *f = fopen(path, "r");
  int found = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, " access ") && strstr(line, "method=GET") &&
        strstr(line, "path=/v1/jobs ") && strstr(line, "query=\"limit=1\" ") &&
        strstr(line, "status=200 ") && strstr(line, "client=127.0.0.1"))
      found = 1;
  if (f) fclose(f);
  return found;
}

/* The line may be written after the answer is sent: wait for it. */
TEST(access_log_line) {
  resp r = req(&S, "GET", "/v1/jobs?limit=1", NULL, NULL);
  resp_free(&r);
  int found = 0;
  WAIT_FOR((found = has_access_line()), 30);
  CHECK(found);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_auth_limits <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  char tokens[300];
  snprintf(tokens, sizeof tokens, "/tmp/tessel-tokens-%d", (int)getpid());
  FILE *f = fopen(tokens, "w");
  fprintf(f, "# name:token\nalice:alice-secret-01234\nbob:bob-secret-0123456\n");
  fclose(f);
  if (srv_start(&S, argv[1], "--threads", "1", "--queue-limit", "2", "--token-file",
                tokens, NULL) != 0)
    return 1;
  RUN(auth);
  RUN(wait_runs_out_then_queue_full);
  RUN(access_log_line);
  srv_cleanup(&S);
  unlink(tokens);
  curl_global_cleanup();
  return check_summary();
}
