/* test_poison.c — a job that kills the process is not run for ever: its
 * start is counted before it runs where the crash cannot lose it (the
 * in-flight journal), and after --max-attempts starts that never finished
 * it fails "crashed" instead of running again.
 *
 * The daemon runs with the test-only fault switch TESSEL_TEST_CRASH_LABEL=
 * poison: a job labelled "poison" calls abort() right after its start is
 * committed. The test submits it between ordinary jobs on one worker, waits
 * for the daemon to die, starts it again on the same data dir, and repeats
 * (bounded) until the daemon stays up. Then: the poison job is failed with
 * code "crashed" and attempts == 3, every other job succeeded, the daemon
 * died exactly 3 times, and it goes on serving new jobs. On a daemon that
 * counts starts lazily (attempts stays 0) it dies at every restart, and the
 * bounded loop ends with the job never final.
 */
#include "harness.h"

static srv S;

#define MAX_ATTEMPTS 3
#define NOTHER 4

/* Wait (up to ms) for the daemon to exit on its own; 1 when it did. */
static int died_within(srv *s, int ms) {
  for (int i = 0; i < ms / 20; i++) {
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      s->pid = 0;
      return 1;
    }
    usleep(20000);
  }
  return 0;
}

/* The id of the job labelled "poison" (its submit may get no answer: the
 * daemon can die while the request waits for a quick job's end). */
static void find_poison(srv *s, char *out, size_t cap) {
  resp r = req(s, "GET", "/v1/jobs?label=poison", NULL, NULL);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  json_t *first = json_array_get(json_object_get(j, "jobs"), 0);
  if (first && jstr(first, "id")) snprintf(out, cap, "%s", jstr(first, "id"));
  json_decref(j);
  resp_free(&r);
}

/* The job's status without waiting; "" when it cannot be read. */
static void job_status(srv *s, const char *id, char *out, size_t cap) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(s, "GET", path, NULL, NULL);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  snprintf(out, cap, "%s", j && jstr(j, "status") ? jstr(j, "status") : "");
  json_decref(j);
  resp_free(&r);
}

TEST(poison_job_fails_after_max_attempts) {
  char other[NOTHER][64], poison[64] = "";
  char body[512];
  long st;
  for (int i = 0; i < NOTHER; i++) {
    if (i == NOTHER / 2) {
      json_t *j = submit(&S, "",
                         "{\"kind\":\"map\",\"label\":\"poison\",\"params\":"
                         "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}}",
                         &st);
      if (j) snprintf(poison, sizeof poison, "%s", jstr(j, "id"));
      json_decref(j);
    }
    snprintf(body, sizeof body,
             "{\"kind\":\"map\",\"label\":\"plain\",\"params\":{\"expr\":"
             "\"x*%d\",\"inputs\":{\"x\":{\"range\":{\"stop\":1000}}}}}",
             i + 2);
    json_t *j = submit(&S, "", body, &st);
    /* The daemon may die under us once the poison job runs: the jobs
     * accepted before that count, the rest are not submitted. */
    if (!j) {
      other[i][0] = 0;
      continue;
    }
    CHECK(st == 202 || st == 200);
    snprintf(other[i], sizeof other[i], "%s", jstr(j, "id"));
    json_decref(j);
  }
  /* Die, restart, bounded: with the cap the daemon dies MAX_ATTEMPTS times
   * and then stays up; without it, it would go on dying. */
  int deaths = 0, final = 0;
  for (int tick = 0; tick < 3000 && !final && deaths <= MAX_ATTEMPTS + 2;
       tick++) { /* 3000 x ~20 ms at most */
    if (S.pid > 0 && died_within(&S, 20)) {
      deaths++;
      /* A daemon that dies before it listens is reaped (and counted) by
       * the next died_within. */
      srv_restart(&S);
      continue;
    }
    char status[32] = "";
    if (!poison[0]) find_poison(&S, poison, sizeof poison);
    if (poison[0]) job_status(&S, poison, status, sizeof status);
    final = !strcmp(status, "failed") || !strcmp(status, "succeeded");
  }
  CHECK(poison[0] != 0);
  CHECK_MSG(final, "the poison job never ended (%d deaths)", deaths);
  CHECK_MSG(deaths == MAX_ATTEMPTS, "the daemon died %d times, not %d", deaths,
            MAX_ATTEMPTS);
  json_t *j = wait_job(&S, poison, 30);
  CHECK(j && !strcmp(jstr(j, "status"), "failed"));
  json_t *err = j ? json_object_get(j, "error") : NULL;
  CHECK_MSG(err && jstr(err, "code") && !strcmp(jstr(err, "code"), "crashed"),
            "error %s", err && jstr(err, "code") ? jstr(err, "code") : "none");
  CHECK(err && jstr(err, "message") && strstr(jstr(err, "message"), "3 times"));
  CHECK_MSG(j && json_integer_value(json_object_get(j, "attempts")) ==
                     MAX_ATTEMPTS,
            "attempts %lld",
            j ? (long long)json_integer_value(json_object_get(j, "attempts"))
              : -1LL);
  json_decref(j);
  for (int i = 0; i < NOTHER; i++) {
    if (!other[i][0]) continue;
    j = wait_job(&S, other[i], 60);
    CHECK_MSG(j && !strcmp(jstr(j, "status"), "succeeded"), "job %d: %s", i,
              j ? jstr(j, "status") : "missing");
    json_decref(j);
  }
  /* Still serving: health and a new job. */
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  j = submit(&S, "?wait=30",
             "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":"
             "{\"x\":[1,2]}}}", &st);
  CHECK(j && st == 200 && !strcmp(jstr(j, "status"), "succeeded"));
  json_decref(j);
  CHECK(S.pid > 0 && !died_within(&S, 200));
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_poison <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  /* Inherited by the daemon (and by each restart). */
  setenv("TESSEL_TEST_CRASH_LABEL", "poison", 1);
  setenv("TESSEL_MAX_ATTEMPTS", "3", 1);
  if (srv_start(&S, argv[1], "--threads", "1", NULL) != 0)
    return 1;
  RUN(poison_job_fails_after_max_attempts);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
