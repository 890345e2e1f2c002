/* test_recovery.c — nothing accepted is lost: kill -9 the daemon with jobs
 * queued and running, start it again on the same data dir, and every
 * accepted job ends succeeded with a correct result; then a graceful
 * SIGTERM with a job running leaves it to the next start too.
 */
#include <math.h>

#include "harness.h"

static srv S;

#define NJOBS 6

TEST(kill9_then_restart) {
  char ids[NJOBS][64];
  char body[512];
  for (int i = 0; i < NJOBS; i++) {
    /* Each takes a moment on one worker; the first runs, the rest queue. */
    snprintf(body, sizeof body,
             "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
             "{\"random\":{\"shape\":[%d,2],\"low\":-60,\"high\":60,\"seed\":%d}},"
             "\"layout\":\"condensed\"}}", i == 0 ? 2500 : 300, i);
    long st;
    json_t *j = submit(&S, "", body, &st);
    CHECK(j && st == 202);
    snprintf(ids[i], sizeof ids[i], "%s", j ? jstr(j, "id") : "");
    json_decref(j);
  }
  /* Wait for the first to be running, then kill -9. */
  CHECK(wait_running(&S, ids[0]));
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  CHECK(srv_restart(&S) == 0);
  for (int i = 0; i < NJOBS; i++) {
    json_t *j = wait_job(&S, ids[i], 120);
    CHECK_MSG(j && strcmp(jstr(j, "status"), "succeeded") == 0, "job %d: %s", i,
              j ? jstr(j, "status") : "missing");
    if (i == 0) CHECK(json_integer_value(json_object_get(j, "attempts")) >= 2);
    int n = i == 0 ? 2500 : 300;
    json_t *shape = json_object_get(json_object_get(j, "result"), "shape");
    CHECK(json_integer_value(json_array_get(shape, 0)) == (json_int_t)n * (n - 1) / 2);
    json_decref(j);
  }
}

TEST(sigterm_with_short_deadline_requeues) {
  long st;
  json_t *j = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                     "{\"random\":{\"shape\":[2500,2],\"seed\":9}}}}", &st);
  CHECK(j && st == 202);
  char id[64];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  CHECK(wait_running(&S, id));
  /* --shutdown-deadline 0: the running job is stopped, not failed. */
  CHECK(srv_kill(&S, SIGTERM) == 0);
  CHECK(srv_restart(&S) == 0);
  j = wait_job(&S, id, 120);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_recovery <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "1", "--shutdown-deadline", "0", NULL) != 0)
    return 1;
  RUN(kill9_then_restart);
  RUN(sigterm_with_short_deadline_requeues);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
