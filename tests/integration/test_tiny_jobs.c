/* test_tiny_jobs.c — the fast path of tiny jobs, against the real daemon.
 *
 * A ?wait submission without request_id is inserted [async] and its end is
 * committed by the store's writer, which then hands the answer to the
 * connection (see api/jobs.c, compute/sched/run.c); small results live in
 * the job's row, not in a file. Checked here: many concurrent tiny ?wait
 * jobs all answer 200 "succeeded" with the right result in every format
 * (JSON, .npy, CSV), served from the row (no file); a larger result is a
 * file as before; a ?wait that runs out answers 202 only once the job is
 * in the store; idempotent submissions (request_id) still work with ?wait;
 * and after kill -9 every job that was answered 200 is still there,
 * succeeded, with its result.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"

static srv S;

#define TINY "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}}"

/* The three formats of a tiny job's result (x+1 over [1,2,3]). */
static void check_tiny_result(const char *id) {
  char path[160];
  snprintf(path, sizeof path, "/v1/jobs/%s/result", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  json_t *j = resp_json(&r);
  json_t *data = json_object_get(j, "data");
  CHECK_STR(jstr(j, "dtype"), "float64");
  CHECK(json_array_size(data) == 3);
  for (int i = 0; i < 3; i++)
    CHECK(json_number_value(json_array_get(data, (size_t)i)) == i + 2.0);
  json_decref(j);
  resp_free(&r);

  snprintf(path, sizeof path, "/v1/jobs/%s/result?format=npy", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  CHECK(r.len == 128 + 24 && memcmp(r.body, "\x93NUMPY\x01\x00", 8) == 0);
  if (r.len == 152) {
    CHECK(strstr(r.body + 10, "'descr': '<f8'") != NULL);
    CHECK(strstr(r.body + 10, "'shape': (3,)") != NULL);
    double v[3];
    memcpy(v, r.body + 128, sizeof v);
    CHECK(v[0] == 2 && v[1] == 3 && v[2] == 4);
  }
  resp_free(&r);

  snprintf(path, sizeof path, "/v1/jobs/%s/result?format=csv&limit_rows=2", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  CHECK_STR(r.body, "2\n3\n");
  resp_free(&r);

  char file[512];
  snprintf(file, sizeof file, "%s/results/%s.npy", S.dir, id);
  CHECK_MSG(access(file, F_OK) != 0, "%s exists: small results live in the row",
            file);
}

typedef struct client {
  int n;
  int ok;
  char (*ids)[64];
} client;

static void *client_main(void *arg) {
  client *c = arg;
  for (int i = 0; i < c->n; i++) {
    long st = 0;
    json_t *j = submit(&S, "?wait=20", TINY, &st);
    if (j && st == 200 && jstr(j, "status") &&
        strcmp(jstr(j, "status"), "succeeded") == 0) {
      json_t *res = json_object_get(j, "result");
      json_t *shape = json_object_get(res, "shape");
      if (json_integer_value(json_array_get(shape, 0)) == 3 &&
          json_integer_value(json_object_get(j, "attempts")) == 1 &&
          jstr(j, "started_at") && jstr(j, "finished_at"))
        snprintf(c->ids[c->ok++], 64, "%s", jstr(j, "id"));
    }
    json_decref(j);
  }
  return NULL;
}

#define NCLIENT 8
#define PER_CLIENT 40
static char answered[NCLIENT * PER_CLIENT][64];
static int nanswered;

TEST(many_concurrent_tiny_waits) {
  client c[NCLIENT];
  pthread_t t[NCLIENT];
  for (int i = 0; i < NCLIENT; i++) {
    c[i] = (client){PER_CLIENT, 0, &answered[i * PER_CLIENT]};
    pthread_create(&t[i], NULL, client_main, &c[i]);
  }
  int ok = 0;
  for (int i = 0; i < NCLIENT; i++) {
    pthread_join(t[i], NULL);
    ok += c[i].ok;
  }
  CHECK_MSG(ok == NCLIENT * PER_CLIENT, "%d of %d answered succeeded", ok,
            NCLIENT * PER_CLIENT);
  /* Compact the ids. */
  nanswered = 0;
  for (int i = 0; i < NCLIENT; i++)
    for (int k = 0; k < c[i].ok; k++)
      memmove(answered[nanswered++], answered[i * PER_CLIENT + k], 64);
  /* What was answered is what GET says, and the result is served. */
  for (int i = 0; i < nanswered; i += 37) {
    json_t *j = wait_job(&S, answered[i], 5);
    CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
    CHECK(j && json_integer_value(json_object_get(j, "attempts")) == 1);
    CHECK(j && jstr(json_object_get(j, "backend"), "used") != NULL);
    json_decref(j);
    check_tiny_result(answered[i]);
  }
}

TEST(larger_results_are_files) {
  long st;
  json_t *j = submit(&S, "?wait=20",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":"
                     "{\"x\":{\"range\":{\"stop\":1000}}}}}", &st);
  CHECK(j && st == 200 && strcmp(jstr(j, "status"), "succeeded") == 0);
  char file[512];
  snprintf(file, sizeof file, "%s/results/%s.npy", S.dir, j ? jstr(j, "id") : "");
  CHECK_MSG(access(file, F_OK) == 0, "%s missing", file);
  if (j) {
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s/result?format=npy", jstr(j, "id"));
    resp r = req(&S, "GET", path, NULL, NULL);
    CHECK(r.status == 200 && r.len == 128 + 8000);
    resp_free(&r);
  }
  json_decref(j);
}

/* A wait that runs out: 202, and the job is in the store by then. */
TEST(wait_timeout_answers_a_stored_job) {
  long st;
  json_t *j = submit(&S, "?wait=0.05",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{"
                     "\"points\":{\"random\":{\"shape\":[1500,2],\"seed\":3}}}}",
                     &st);
  CHECK(j && st == 202);
  const char *s = j ? jstr(j, "status") : "";
  CHECK(s && (!strcmp(s, "queued") || !strcmp(s, "running")));
  char path[160];
  snprintf(path, sizeof path, "/v1/jobs/%s", j ? jstr(j, "id") : "x");
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", j ? jstr(j, "id") : "x");
  r = req(&S, "POST", path, NULL, NULL);
  CHECK(r.status == 200 || r.status == 202);
  resp_free(&r);
  json_decref(j);
}

TEST(idempotent_wait) {
  const char *body =
      "{\"kind\":\"map\",\"request_id\":\"tiny-1\",\"params\":{\"expr\":\"x+1\","
      "\"inputs\":{\"x\":[1,2,3]}}}";
  long st1, st2;
  json_t *a = submit(&S, "?wait=20", body, &st1);
  json_t *b = submit(&S, "?wait=20", body, &st2);
  CHECK(a && b && st1 == 200 && st2 == 200);
  CHECK(a && b && strcmp(jstr(a, "id"), jstr(b, "id")) == 0);
  CHECK(a && strcmp(jstr(a, "status"), "succeeded") == 0);
  if (a) check_tiny_result(jstr(a, "id"));
  json_decref(a);
  json_decref(b);
  resp r = req(&S, "POST", "/v1/jobs?wait=20", "application/json",
               "{\"kind\":\"map\",\"request_id\":\"tiny-1\",\"params\":{\"expr\":"
               "\"x+2\",\"inputs\":{\"x\":[1,2,3]}}}");
  CHECK(is_error(&r, 409, "conflict", "request_id"));
  resp_free(&r);
}

/* Every job that was answered 200 survives kill -9, result included. */
TEST(answered_jobs_survive_kill9) {
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  CHECK(srv_restart(&S) == 0);
  int bad = 0;
  for (int i = 0; i < nanswered; i++) {
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s", answered[i]);
    resp r = req(&S, "GET", path, NULL, NULL);
    json_t *j = r.status == 200 ? resp_json(&r) : NULL;
    if (!j || strcmp(jstr(j, "status"), "succeeded") != 0) bad++;
    json_decref(j);
    resp_free(&r);
  }
  CHECK_MSG(bad == 0, "%d of %d answered jobs lost or not succeeded", bad,
            nanswered);
  for (int i = 0; i < nanswered; i += 53) check_tiny_result(answered[i]);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_tiny_jobs <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(many_concurrent_tiny_waits);
  RUN(larger_results_are_files);
  RUN(wait_timeout_answers_a_stored_job);
  RUN(idempotent_wait);
  RUN(answered_jobs_survive_kill9);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
