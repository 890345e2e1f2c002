/* test_chain.c — chained jobs: a finished job's result as an input,
 * {"result": "j_..."}, against the real daemon (one CPU worker).
 *
 *  - a chain of three maps, through a result kept in a file (100,000
 *    values) and one kept in the job's row (10 values): every value checked
 *    against its closed form;
 *  - an input job that is queued or running, failed or canceled: 409
 *    naming the input's field, with its status in the message;
 *  - an unknown job: 404; a malformed id: 400 naming ".result"; an
 *    object with two forms: 400;
 *  - a job whose result a queued job takes cannot be deleted (409, the
 *    message naming that job: the dependent is what blocks the delete, not
 *    the finished job's own status) until that job has run; then it can.
 */
#include "harness.h"

static srv S;

/* Submit and wait for the end; the job (new ref) or NULL. */
static json_t *run_job(const char *body) {
  long st;
  json_t *j = submit(&S, "?wait=30", body, &st);
  if (!j) return NULL;
  const char *s = jstr(j, "status");
  if (s && strcmp(s, "succeeded") && strcmp(s, "failed") && strcmp(s, "canceled")) {
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(j, "id"));
    json_decref(j);
    j = wait_job(&S, id, 60);
  }
  return j;
}

static const char *backend = "auto"; /* of every job of a chain */

static json_t *chained(const char *expr, const char *input_id) {
  char body[512];
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":"
           "\"%s\",\"inputs\":{\"x\":{\"result\":\"%s\"}}}}",
           backend, expr, input_id);
  return run_job(body);
}

/* Every value of the job's result equals f(i). */
static int values_are(json_t *job, double (*f)(int64_t), int64_t n) {
  json_t *d = result_data(&S, job);
  int ok = json_is_array(d) && (int64_t)json_array_size(d) == n;
  for (int64_t i = 0; ok && i < n; i++) {
    double v = json_number_value(json_array_get(d, (size_t)i));
    if (v != f(i)) {
      fprintf(stderr, "element %lld: %.17g, want %.17g\n", (long long)i, v, f(i));
      ok = 0;
    }
  }
  json_decref(d);
  return ok;
}

static double twice(int64_t i) { return 2.0 * (double)i; }
static double twice_plus_1(int64_t i) { return 2.0 * (double)i + 1; }
static double squared(int64_t i) {
  double y = 2.0 * (double)i + 1;
  return y * y;
}

static void chain_of_three(int64_t n) {
  char body[256];
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":"
           "\"x*2\",\"inputs\":{\"x\":{\"range\":{\"stop\":%lld}}}}}",
           backend, (long long)n);
  json_t *a = run_job(body);
  CHECK(a && strcmp(jstr(a, "status"), "succeeded") == 0);
  json_t *b = a ? chained("x+1", jstr(a, "id")) : NULL;
  CHECK_MSG(b && strcmp(jstr(b, "status"), "succeeded") == 0, "n=%lld", (long long)n);
  json_t *c = b ? chained("x**2", jstr(b, "id")) : NULL;
  CHECK(c && strcmp(jstr(c, "status"), "succeeded") == 0);
  if (strcmp(backend, "cuda") == 0 && a && b && c) { /* each ran where asked */
    for (json_t **j = (json_t *[]){a, b, c, NULL}; *j; j++) {
      const char *used = jstr(json_object_get(*j, "backend"), "used");
      CHECK_MSG(used && strncmp(used, "cuda", 4) == 0, "used %s", used ? used : "?");
    }
    /* b's input (a's result) was copied up and stayed; b ran whole on the
     * device and its result stayed there too: c copied nothing up. */
    json_t *tc = json_object_get(c, "timings_ms");
    double h2d_c = json_number_value(json_object_get(tc, "h2d"));
    CHECK_MSG(json_object_get(tc, "h2d") && h2d_c == 0.0,
              "n=%lld: c's h2d %g ms, want 0 (b's result resident)",
              (long long)n, h2d_c);
  }
  if (a) CHECK(values_are(a, twice, n));
  if (b) CHECK(values_are(b, twice_plus_1, n));
  if (c) CHECK(values_are(c, squared, n));
  json_decref(a);
  json_decref(b);
  json_decref(c);
}

TEST(chains_through_files_and_rows) {
  chain_of_three(100000); /* results in files */
  chain_of_three(10);     /* results kept in the job's row */
}

/* The same chains with every job on the GPU (the GPU machine; without a
 * usable GPU this is said and skipped: cuda would be 503). */
TEST(chains_through_cuda) {
  if (!srv_has_gpu(&S)) {
    printf("SKIPPED: chains_through_cuda: no usable GPU\n");
    return;
  }
  backend = "cuda";
  chain_of_three(100000);
  chain_of_three(10);
  backend = "auto";
}

static void refused(const char *input_id, long status, const char *code,
                    const char *field, const char *says) {
  char body[512];
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":"
           "{\"result\":\"%s\"}}}}", input_id);
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK_MSG(is_error(&r, status, code, field), "input %s", input_id);
  if (says) CHECK_MSG(strstr(r.body, says) != NULL, "%s lacks '%s'", r.body, says);
  resp_free(&r);
}

TEST(unfinished_failed_canceled_unknown_inputs) {
  /* A long job on the one worker: queued or running when chained. */
  long st;
  json_t *l = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                     "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":1}}}}",
                     &st);
  CHECK(l && st == 202);
  char lid[64];
  snprintf(lid, sizeof lid, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  CHECK(wait_running(&S, lid));
  refused(lid, 409, "conflict", "params.inputs.x", "is running");
  /* Canceled: no result to take. */
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", lid);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *c = wait_job(&S, lid, 60);
  CHECK(c && strcmp(jstr(c, "status"), "canceled") == 0);
  json_decref(c);
  refused(lid, 409, "conflict", "params.inputs.x", "canceled");
  /* Failed: a job past its deadline. */
  json_t *f = run_job("{\"kind\":\"map\",\"timeout_s\":0.001,\"params\":{\"expr\":"
                      "\"sin(x)*exp(-x)\",\"inputs\":{\"x\":{\"range\":{\"stop\":"
                      "100000000}}}}}");
  CHECK(f && strcmp(jstr(f, "status"), "failed") == 0);
  if (f) refused(jstr(f, "id"), 409, "conflict", "params.inputs.x", "failed");
  json_decref(f);
  /* Unknown, malformed, two forms at once. */
  refused("j_0123456789abcdefghjkmnpqrs", 404, "not_found", "params.inputs.x", NULL);
  refused("a_0123456789abcdefghjkmnpqrs", 400, "invalid_argument",
          "params.inputs.x.result", NULL);
  r = req(&S, "POST", "/v1/jobs", "application/json",
          "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":"
          "{\"result\":\"j_0123456789abcdefghjkmnpqrs\",\"range\":{\"stop\":3}}}}}");
  CHECK(is_error(&r, 400, "invalid_argument", "params.inputs.x"));
  resp_free(&r);
}

TEST(an_input_job_is_kept_while_a_queued_job_takes_it) {
  json_t *a = run_job("{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":"
                      "{\"x\":{\"range\":{\"stop\":1000}}}}}");
  CHECK(a && strcmp(jstr(a, "status"), "succeeded") == 0);
  char aid[64];
  snprintf(aid, sizeof aid, "%s", a ? jstr(a, "id") : "");
  json_decref(a);
  /* Hold the worker with a long job; the chained one queues behind it. */
  long st;
  json_t *l = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                     "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":2}}}}",
                     &st);
  char lid[64];
  snprintf(lid, sizeof lid, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  CHECK(wait_running(&S, lid));
  char body[256];
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":"
           "{\"result\":\"%s\"}}}}", aid);
  json_t *b = submit(&S, "", body, &st);
  CHECK(b && st == 202 && strcmp(jstr(b, "status"), "queued") == 0);
  char bid[64];
  snprintf(bid, sizeof bid, "%s", b ? jstr(b, "id") : "");
  json_decref(b);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", aid);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(is_error(&r, 409, "conflict", "id"));
  CHECK_MSG(r.body && strstr(r.body, bid) && !strstr(r.body, "not finished"),
            "the 409 does not name the dependent %s: %.300s", bid,
            r.body ? r.body : "");
  resp_free(&r);
  /* Let the queued job run, then the input may go. */
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", lid);
  r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *done = wait_job(&S, bid, 60);
  CHECK(done && strcmp(jstr(done, "status"), "succeeded") == 0);
  if (done) CHECK(values_are(done, twice_plus_1, 1000));
  json_decref(done);
  snprintf(path, sizeof path, "/v1/jobs/%s", aid);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_chain <tesseld>");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (srv_start(&S, argv[1], "--threads", "1", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(chains_through_files_and_rows);
  RUN(chains_through_cuda);
  RUN(unfinished_failed_canceled_unknown_inputs);
  RUN(an_input_job_is_kept_while_a_queued_job_takes_it);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
