/* test_async_refs.c — a ?wait submit (and a jobs:batch item) whose input is
 * an uploaded array is inserted [async] (compute/jobs/submit.c): its row is
 * written with the store's next commit, often with its own end. What must
 * hold when the array is deleted at the same moment, against the real
 * daemon, round after round:
 *
 *   - the job's answer is 200 succeeded, or 404 naming its input
 *     ("params.inputs.x"; "jobs[i].params.inputs.x" in a batch): the
 *     delete came first, at the submit's check or between it and the row
 *     (the store's note of the failed insert, store_insert_error); never a
 *     500, never a job answered that the store does not have;
 *   - a 404 job goes with a delete that succeeded; a delete refused 409
 *     goes with a job that was recorded (it saw the job);
 *   - every job answered 200 is in the store afterwards, and the daemon
 *     lives.
 * The daemon checks a batch's items on three checker threads
 * (TESSEL_BATCH_CHECKERS=3).
 * Which of the orders a round takes is the machine's; the pairs above are
 * what every order must give. (The order "delete between the check and
 * the row" is forced deterministically in tests/unit/test_store_fold.c.)
 */
#include <pthread.h>

#include "harness.h"

static srv S;

#define ROUNDS 40
#define BATCH 12

typedef struct race {
  const char *array;
  const char *body; /* the job (or batch) body */
  int batch;
  pthread_barrier_t *go;
  long job_status, del_status;
  char *job_body;
} race;

static void *submitter(void *p) {
  race *r = p;
  pthread_barrier_wait(r->go);
  resp x = req(&S, "POST", r->batch ? "/v1/jobs:batch?wait=30" : "/v1/jobs?wait=30",
               "application/json", r->body);
  r->job_status = x.status;
  r->job_body = x.body ? strdup(x.body) : strdup("");
  resp_free(&x);
  return NULL;
}

static void *deleter(void *p) {
  race *r = p;
  char path[128];
  snprintf(path, sizeof path, "/v1/arrays/%s", r->array);
  pthread_barrier_wait(r->go);
  resp x = req(&S, "DELETE", path, NULL, NULL);
  r->del_status = x.status;
  resp_free(&x);
  return NULL;
}

static int upload(int round, char id[64]) {
  char body[128];
  snprintf(body, sizeof body, "[%d.5, 2, 3, %d]", round, round * 7 + 1);
  resp r = req(&S, "POST", "/v1/arrays", "application/json", body);
  json_t *a = r.status == 201 ? resp_json(&r) : NULL;
  snprintf(id, 64, "%s", a && jstr(a, "id") ? jstr(a, "id") : "");
  json_decref(a);
  resp_free(&r);
  return id[0] ? 0 : -1;
}

static int job_stored(const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  int ok = r.status == 200;
  if (!ok) fprintf(stderr, "GET %s: %ld %.300s\n", path, r.status, r.body);
  resp_free(&r);
  return ok;
}

/* One item's (or a single job's) answer: 1 succeeded and stored, 0 a 404
 * naming want_field, -1 anything else (printed). */
static int judge(json_t *j, const char *want_field) {
  json_t *err = json_object_get(j, "error"); /* null on a record */
  if (json_is_object(err)) {
    const char *c = jstr(err, "code"), *f = jstr(err, "field");
    if (c && f && strcmp(c, "not_found") == 0 && strcmp(f, want_field) == 0)
      return 0;
  } else if (jstr(j, "status") && strcmp(jstr(j, "status"), "succeeded") == 0 &&
             jstr(j, "id") && job_stored(jstr(j, "id"))) {
    return 1;
  }
  char *s = json_dumps(j, JSON_COMPACT);
  fprintf(stderr, "unexpected answer: %.400s\n", s ? s : "?");
  free(s);
  return -1;
}

static void run_race(int round, int batch, int *ran, int *refused) {
  char id[64];
  CHECK(upload(round, id) == 0);
  char one[256];
  snprintf(one, sizeof one,
           "{\"kind\":\"reduce\",\"backend\":\"cpu\",\"params\":{\"op\":\"sum\","
           "\"expr\":\"x*2\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
           id);
  char body[BATCH * 256 + 32];
  if (batch) {
    size_t off = (size_t)snprintf(body, sizeof body, "{\"jobs\":[");
    for (int i = 0; i < BATCH; i++)
      off += (size_t)snprintf(body + off, sizeof body - off, "%s%s", i ? "," : "", one);
    snprintf(body + off, sizeof body - off, "]}");
  } else {
    snprintf(body, sizeof body, "%s", one);
  }
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  race r = {.array = id, .body = body, .batch = batch, .go = &go};
  pthread_t a, b;
  pthread_create(&a, NULL, submitter, &r);
  pthread_create(&b, NULL, deleter, &r);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  pthread_barrier_destroy(&go);

  CHECK_MSG(r.del_status == 204 || r.del_status == 200 || r.del_status == 409,
            "round %d: the delete answered %ld", round, r.del_status);
  int oks = 0, gones = 0, bad = 0;
  if (!batch && r.job_status == 404) {
    resp x = {.status = 404, .body = r.job_body, .len = strlen(r.job_body)};
    if (is_error(&x, 404, "not_found", "params.inputs.x")) gones++;
    else bad++;
  } else if (!batch && r.job_status == 200) {
    json_t *j = json_loads(r.job_body, 0, NULL);
    int v = j ? judge(j, "params.inputs.x") : -1;
    v == 1 ? oks++ : bad++;
    json_decref(j);
  } else if (batch && r.job_status == 200) {
    json_t *o = json_loads(r.job_body, 0, NULL);
    json_t *jobs = json_object_get(o, "jobs");
    if (json_array_size(jobs) != BATCH) bad++;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
      char f[64];
      snprintf(f, sizeof f, "jobs[%zu].params.inputs.x", i);
      int v = judge(json_array_get(jobs, i), f);
      if (v == 1) oks++;
      else if (v == 0) gones++;
      else bad++;
    }
    json_decref(o);
  } else {
    bad++;
  }
  CHECK_MSG(bad == 0, "round %d (%s): job answer %ld %.300s", round,
            batch ? "batch" : "single", r.job_status, r.job_body);
  /* a job not recorded goes with a delete that went first */
  if (gones) CHECK_MSG(r.del_status != 409, "round %d: 404 jobs, delete 409", round);
  /* a delete refused saw a recorded, unfinished job */
  if (r.del_status == 409) CHECK_MSG(oks > 0, "round %d: 409 without a job", round);
  *ran += oks;
  *refused += gones;
  free(r.job_body);
  if (r.del_status == 409) { /* its jobs have ended: it goes now */
    char path[128];
    snprintf(path, sizeof path, "/v1/arrays/%s", id);
    resp x = req(&S, "DELETE", path, NULL, NULL);
    CHECK(x.status == 204 || x.status == 200);
    resp_free(&x);
  }
}

TEST(wait_submits_race_their_arrays_delete) {
  int ran = 0, refused = 0;
  for (int i = 0; i < ROUNDS; i++) run_race(i, 0, &ran, &refused);
  fprintf(stderr, "single: %d ran, %d not found\n", ran, refused);
  CHECK(ran + refused == ROUNDS);
  CHECK(srv_healthy(&S));
}

TEST(batch_items_race_their_arrays_delete) {
  int ran = 0, refused = 0;
  for (int i = 0; i < ROUNDS; i++) run_race(1000 + i, 1, &ran, &refused);
  fprintf(stderr, "batch: %d ran, %d not found\n", ran, refused);
  CHECK(ran + refused == ROUNDS * BATCH);
  CHECK(srv_healthy(&S));
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_async_refs <tesseld>");
  /* a batch's items checked on several threads (compute/jobs/batch.c)
   * while their array goes */
  setenv("TESSEL_BATCH_CHECKERS", "3", 1);
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(wait_submits_race_their_arrays_delete);
  RUN(batch_items_race_their_arrays_delete);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
