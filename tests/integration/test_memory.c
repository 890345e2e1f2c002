/* test_memory.c — memory admission against a small --max-memory (100 MB):
 * a job whose own estimate is above it is refused at submit with 413
 * naming the field; two jobs that each fit but not together do not run at
 * the same time (the second waits in the queue: API.md "Memory"); a small
 * job is not held back by the budget; the daemon stays up.
 */
#include "harness.h"

static srv S;

TEST(too_big_is_413) {
  /* map: 80 MB of range input + 80 MB of result > 100 MB. */
  resp r = req(&S, "POST", "/v1/jobs", "application/json",
               "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":"
               "{\"x\":{\"range\":{\"stop\":10000000}}}}}");
  CHECK(is_error(&r, 413, "payload_too_large", "params"));
  CHECK(strstr(r.body, "--max-memory") != NULL);
  resp_free(&r);
  /* reduce of three 40 MB inputs: 120 MB. */
  r = req(&S, "POST", "/v1/jobs", "application/json",
          "{\"kind\":\"reduce\",\"params\":{\"op\":\"sum\",\"expr\":\"x+y+z\","
          "\"inputs\":{\"x\":{\"random\":{\"shape\":[5000000]}},"
          "\"y\":{\"random\":{\"shape\":[5000000]}},"
          "\"z\":{\"random\":{\"shape\":[5000000]}}}}}");
  CHECK(is_error(&r, 413, "payload_too_large", "params"));
  resp_free(&r);
}

TEST(two_that_do_not_fit_together_do_not_overlap) {
  /* Each: 32 MB of range input + 32 MB of result = 64 MB of 100. */
  const char *body =
      "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":"
      "\"sin(x)*cos(x)+sqrt(x)+exp(-x)\",\"inputs\":{\"x\":{\"range\":"
      "{\"stop\":4000000}}}}}";
  char id[2][64];
  for (int i = 0; i < 2; i++) {
    long st;
    json_t *j = submit(&S, "", body, &st);
    CHECK(j && (st == 202 || st == 200));
    snprintf(id[i], sizeof id[i], "%s", j ? jstr(j, "id") : "");
    json_decref(j);
  }
  json_t *a = wait_job(&S, id[0], 120), *b = wait_job(&S, id[1], 120);
  CHECK(a && !strcmp(jstr(a, "status"), "succeeded"));
  CHECK(b && !strcmp(jstr(b, "status"), "succeeded"));
  const char *as = a ? jstr(a, "started_at") : NULL,
             *af = a ? jstr(a, "finished_at") : NULL,
             *bs = b ? jstr(b, "started_at") : NULL,
             *bf = b ? jstr(b, "finished_at") : NULL;
  /* RFC 3339 times of one format compare as strings. */
  CHECK_MSG(as && af && bs && bf &&
                (strcmp(bs, af) >= 0 || strcmp(as, bf) >= 0),
            "a %s..%s, b %s..%s", as ? as : "?", af ? af : "?",
            bs ? bs : "?", bf ? bf : "?");
  json_decref(a);
  json_decref(b);
}

TEST(small_jobs_run_and_daemon_serves) {
  long st;
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"reduce\",\"params\":{\"op\":\"sum\",\"inputs\":"
                     "{\"x\":[1,2,3]}}}", &st);
  CHECK(j && st == 200 && !strcmp(jstr(j, "status"), "succeeded"));
  json_decref(j);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_memory <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  setenv("TESSEL_MAX_MEMORY", "100000000", 1); /* the daemon reads it */
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(too_big_is_413);
  RUN(two_that_do_not_fit_together_do_not_overlap);
  RUN(small_jobs_run_and_daemon_serves);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
