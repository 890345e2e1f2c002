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
#include <sqlite3.h>
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

/* ---- jobs:batch's async items -------------------------------------------
 * Items without request_id are inserted [async] and run at once; the
 * answer waits for one commit that covers them (compute/jobs/batch.c).
 * Right after each answer another connection to the database file (a
 * plain SQLite reader, not the daemon) must find every answered item's
 * row; and after kill -9 every one is there (below). */
#define NBATCHER 4
#define BATCHES 4
#define BATCH_ITEMS 150
static char batched[NBATCHER * BATCHES * BATCH_ITEMS][64];
static atomic_int nbatched;

typedef struct batcher {
  int missing, failed, bad;
} batcher;

/* How many of ids[0..n) the database file lacks, on a connection of our
 * own (WAL: it sees what is committed, nothing else). */
static int missing_rows(char (*ids)[64], int n) {
  char path[400];
  snprintf(path, sizeof path, "%s/tessel.db", S.dir);
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int missing = n;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT 1 FROM jobs WHERE id = ?1", -1, &st,
                         NULL) == SQLITE_OK) {
    missing = 0;
    for (int i = 0; i < n; i++) {
      sqlite3_reset(st);
      sqlite3_bind_text(st, 1, ids[i], -1, SQLITE_STATIC);
      if (sqlite3_step(st) != SQLITE_ROW) missing++;
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return missing;
}

static void *batcher_main(void *arg) {
  batcher *b = arg;
  size_t cap = 64 + (size_t)BATCH_ITEMS * (sizeof TINY + 2);
  char *body = malloc(cap);
  for (int k = 0; k < BATCHES; k++) {
    size_t len = (size_t)snprintf(body, cap, "{\"jobs\":[");
    for (int i = 0; i < BATCH_ITEMS; i++)
      len += (size_t)snprintf(body + len, cap - len, "%s%s", i ? "," : "",
                              TINY);
    snprintf(body + len, cap - len, "]}");
    resp r = req(&S, "POST", "/v1/jobs:batch", "application/json", body);
    json_t *j = r.status == 200 ? resp_json(&r) : NULL;
    json_t *jobs = json_object_get(j, "jobs");
    char own[BATCH_ITEMS][64];
    int n = 0;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
      const char *id = jstr(json_array_get(jobs, i), "id");
      if (id && !json_is_object(json_object_get(json_array_get(jobs, i), "error")))
        snprintf(own[n++], 64, "%s", id);
    }
    if (json_array_size(jobs) != BATCH_ITEMS || n != BATCH_ITEMS) {
      if (!b->failed) fprintf(stderr, "batch: %ld %.300s\n", r.status, r.body);
      b->failed++;
    }
    b->missing += missing_rows(own, n); /* right after the answer */
    for (int i = 0; i < n; i++)
      snprintf(batched[atomic_fetch_add(&nbatched, 1)], 64, "%s", own[i]);
    json_decref(j);
    resp_free(&r);
  }
  free(body);
  return NULL;
}

TEST(batch_async_rows_committed_at_answer) {
  batcher b[NBATCHER];
  pthread_t t[NBATCHER];
  memset(b, 0, sizeof b);
  for (int i = 0; i < NBATCHER; i++)
    pthread_create(&t[i], NULL, batcher_main, &b[i]);
  int missing = 0, failed = 0;
  for (int i = 0; i < NBATCHER; i++) {
    pthread_join(t[i], NULL);
    missing += b[i].missing;
    failed += b[i].failed;
  }
  CHECK_MSG(failed == 0, "%d batches not answered whole", failed);
  CHECK_MSG(missing == 0, "%d answered rows not committed at the answer",
            missing);
  CHECK(atomic_load(&nbatched) == NBATCHER * BATCHES * BATCH_ITEMS);
  /* They run: each ends succeeded (a sample: the last of each batch). */
  for (int i = BATCH_ITEMS - 1; i < atomic_load(&nbatched); i += BATCH_ITEMS) {
    json_t *j = wait_job(&S, batched[i], 10);
    CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
    json_decref(j);
  }
}

/* An async item whose insert fails on the writer (here a trigger another
 * connection adds refuses the rows labelled "doomed": the writer's own
 * error, after the submit accepted the item) is answered as failed, its
 * neighbours as accepted and committed. */
TEST(batch_async_insert_failure_is_answered) {
  char path[400];
  snprintf(path, sizeof path, "%s/tessel.db", S.dir);
  sqlite3 *db = NULL;
  char *msg = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  CHECK_MSG(sqlite3_exec(db,
                         "CREATE TRIGGER doomed BEFORE INSERT ON jobs"
                         " WHEN NEW.label = 'doomed'"
                         " BEGIN SELECT RAISE(ABORT, 'doomed row'); END",
                         NULL, NULL, &msg) == SQLITE_OK,
            "%s", msg ? msg : "");
  sqlite3_free(msg);
#define DOOMED                                                             \
  "{\"kind\":\"map\",\"label\":\"doomed\",\"params\":{\"expr\":\"x+1\","   \
  "\"inputs\":{\"x\":[1,2,3]}}}"
  const char *body = "{\"jobs\":[" TINY "," DOOMED "," TINY "," DOOMED "]}";
  for (int round = 0; round < 3; round++) {
    resp r = req(&S, "POST", "/v1/jobs:batch", "application/json", body);
    CHECK(r.status == 200);
    json_t *j = r.status == 200 ? resp_json(&r) : NULL;
    json_t *jobs = json_object_get(j, "jobs");
    CHECK(json_array_size(jobs) == 4);
    char ok[2][64];
    int nok = 0;
    for (size_t i = 0; i < json_array_size(jobs); i++) {
      json_t *it = json_array_get(jobs, i);
      json_t *err = json_object_get(it, "error");
      if (i % 2 == 1) {
        CHECK_MSG(json_is_object(err) && jstr(it, "id") == NULL,
                  "doomed item %zu answered as accepted", i);
        CHECK(json_is_object(err) &&
              strcmp(jstr(err, "code"), "internal") == 0);
      } else {
        CHECK(!json_is_object(err) && jstr(it, "id"));
        if (jstr(it, "id") && nok < 2) snprintf(ok[nok++], 64, "%s", jstr(it, "id"));
      }
    }
    CHECK(nok == 2 && missing_rows(ok, nok) == 0);
    json_decref(j);
    resp_free(&r);
  }
  CHECK(sqlite3_exec(db, "DROP TRIGGER doomed", NULL, NULL, NULL) ==
        SQLITE_OK);
  sqlite3_close(db);
  resp h = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(h.status == 200);
  resp_free(&h);
}

/* Every job that was answered 200 survives kill -9, result included; so
 * does every item a batch answered. */
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
  int lost = 0, n = atomic_load(&nbatched);
  for (int i = 0; i < n; i++) {
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s", batched[i]);
    resp r = req(&S, "GET", path, NULL, NULL);
    if (r.status != 200) lost++;
    resp_free(&r);
  }
  CHECK_MSG(lost == 0, "%d of %d batched jobs lost", lost, n);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_tiny_jobs <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(many_concurrent_tiny_waits);
  RUN(larger_results_are_files);
  RUN(wait_timeout_answers_a_stored_job);
  RUN(idempotent_wait);
  RUN(batch_async_rows_committed_at_answer);
  RUN(batch_async_insert_failure_is_answered);
  RUN(answered_jobs_survive_kill9);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
