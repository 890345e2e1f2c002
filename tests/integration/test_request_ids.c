/* test_request_ids.c — request_id's meaning when an idempotent ?wait submit
 * is inserted [async] (compute/jobs/rids.h), against the real daemon.
 *
 * Many submits of one key at the same moment, from threads released
 * together: all ?wait (each may claim the key for an [async] insert), a
 * mix of ?wait and no-wait (the [sync] insert), and a jobs:batch item with
 * lone submits. Each time exactly one job has the key (the owner's list,
 * by the test's own label), and every answer names it. With two bodies at
 * once the first insert of the key decides: every submit of that body is
 * answered with the one job, every submit of the other body 409 naming
 * request_id, and the job's params are the winning body's. A key whose job
 * was committed long ago gives the same id, with ?wait and without; and
 * after kill -9 an acknowledged keyed ?wait job is there, and a retry of
 * its key gives its id and no new job; so is every ?wait job answered
 * while 16 threads submit, keyed and not, when kill -9 comes in the
 * middle of that load. A retry of a key while its job runs names that
 * job. All of it twice: as shipped, and with the store holding every
 * [async] insert back until its job ends or a barrier comes
 * (TESSEL_STORE_HOLD_MS=600000, db/sqlite/store_fold.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "harness.h"

static srv S;

#define NT 16
#define ROUNDS 4 /* keys in turn for the mixed races */

typedef struct shot {
  const char *query; /* "?wait=20" or "" */
  const char *body;
  const char *path; /* NULL: /v1/jobs */
  long status;
  char id[64];
  char code[32], field[64];
} shot;

static pthread_barrier_t gate;

static void *fire(void *arg) {
  shot *s = arg;
  char path[128];
  snprintf(path, sizeof path, "%s%s", s->path ? s->path : "/v1/jobs", s->query);
  pthread_barrier_wait(&gate);
  resp r = req(&S, "POST", path, "application/json", s->body);
  s->status = r.status;
  json_t *top = resp_json(&r);
  /* jobs:batch: its one item */
  json_t *j = s->path ? json_array_get(json_object_get(top, "jobs"), 0) : top;
  json_t *err = json_object_get(j, "error");
  if (json_is_object(err)) {
    snprintf(s->code, sizeof s->code, "%s",
             jstr(err, "code") ? jstr(err, "code") : "");
    snprintf(s->field, sizeof s->field, "%s",
             jstr(err, "field") ? jstr(err, "field") : "");
  } else if (j && jstr(j, "id")) {
    snprintf(s->id, sizeof s->id, "%s", jstr(j, "id"));
  }
  json_decref(top);
  resp_free(&r);
  return NULL;
}

/* Fire n shots at once; returns when all are answered. */
static void fire_all(shot *s, int n) {
  pthread_t t[NT];
  pthread_barrier_init(&gate, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, fire, &s[i]);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&gate);
}

/* The owner's jobs with label `label`: how many, and the first's id. */
static int count_label(const char *label, char id[64]) {
  char path[160];
  snprintf(path, sizeof path, "/v1/jobs?label=%s&limit=100", label);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  json_t *jobs = json_object_get(j, "jobs");
  int n = (int)json_array_size(jobs);
  if (id) snprintf(id, 64, "%s", n ? jstr(json_array_get(jobs, 0), "id") : "");
  json_decref(j);
  resp_free(&r);
  return n;
}

static char body_a[256], body_b[256];

static void make_bodies(const char *rid, const char *label) {
  snprintf(body_a, sizeof body_a,
           "{\"kind\":\"map\",\"request_id\":\"%s\",\"label\":\"%s\","
           "\"params\":{\"expr\":\"x*x\",\"inputs\":{\"x\":[1,2,3]}}}",
           rid, label);
  snprintf(body_b, sizeof body_b,
           "{\"kind\":\"map\",\"request_id\":\"%s\",\"label\":\"%s\","
           "\"params\":{\"expr\":\"x+7\",\"inputs\":{\"x\":[1,2,3]}}}",
           rid, label);
}

TEST(one_key_many_waits_at_once) {
  make_bodies("k-waits", "l-waits");
  shot s[NT];
  for (int i = 0; i < NT; i++)
    s[i] = (shot){.query = "?wait=20", .body = body_a};
  fire_all(s, NT);
  char id[64];
  CHECK_MSG(count_label("l-waits", id) == 1, "%d jobs with one key",
            count_label("l-waits", NULL));
  for (int i = 0; i < NT; i++) {
    CHECK_MSG(s[i].status == 200, "shot %d: %ld %s", i, s[i].status, s[i].code);
    CHECK_STR(s[i].id, id);
  }
  json_t *j = wait_job(&S, id, 10);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
}

/* Two bodies, one key, at once: the first insert decides. */
TEST(one_key_two_bodies_at_once) {
  make_bodies("k-bodies", "l-bodies");
  shot s[NT];
  for (int i = 0; i < NT; i++)
    s[i] = (shot){.query = "?wait=20", .body = i % 2 ? body_b : body_a};
  fire_all(s, NT);
  char id[64];
  CHECK(count_label("l-bodies", id) == 1);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *j = resp_json(&r);
  const char *expr = jstr(json_object_get(j, "params"), "expr");
  int a_won = expr && strcmp(expr, "x*x") == 0;
  CHECK(expr && (a_won || strcmp(expr, "x+7") == 0));
  for (int i = 0; i < NT; i++) {
    int winner = (i % 2 == 0) == a_won;
    if (winner) {
      CHECK_MSG(s[i].status == 200, "shot %d (winning body): %ld %s", i,
                s[i].status, s[i].code);
      CHECK_STR(s[i].id, id);
    } else {
      CHECK_MSG(s[i].status == 409, "shot %d (other body): %ld", i,
                s[i].status);
      CHECK_STR(s[i].code, "conflict");
      CHECK_STR(s[i].field, "request_id");
    }
  }
  json_decref(j);
  resp_free(&r);
}

/* The key of a job committed long ago: its id, no new job. */
TEST(key_committed_before) {
  make_bodies("k-waits", "l-waits");
  char id[64];
  CHECK(count_label("l-waits", id) == 1);
  long st;
  json_t *a = submit(&S, "?wait=20", body_a, &st);
  CHECK(a && st == 200 && strcmp(jstr(a, "id"), id) == 0);
  json_decref(a);
  json_t *b = submit(&S, "", body_a, &st);
  CHECK(b && st == 202 && strcmp(jstr(b, "id"), id) == 0);
  json_decref(b);
  resp r = req(&S, "POST", "/v1/jobs?wait=20", "application/json", body_b);
  CHECK(is_error(&r, 409, "conflict", "request_id"));
  resp_free(&r);
  CHECK(count_label("l-waits", NULL) == 1);
}

/* ?wait ([async] insert) and no-wait ([sync]) submits of one key (a few
 * keys in turn: the race has more than one way to go). */
TEST(one_key_wait_and_nowait_at_once) {
  for (int round = 0; round < ROUNDS; round++) {
    char rid[32], label[32];
    snprintf(rid, sizeof rid, "k-mixed-%d", round);
    snprintf(label, sizeof label, "l-mixed-%d", round);
    make_bodies(rid, label);
    shot s[NT];
    for (int i = 0; i < NT; i++)
      s[i] = (shot){.query = (i + round) % 2 ? "" : "?wait=20", .body = body_a};
    fire_all(s, NT);
    char id[64];
    CHECK(count_label(label, id) == 1);
    for (int i = 0; i < NT; i++) {
      /* a ?wait [sync] insert that finds the key's job between another
       * submit's commit and its enqueue answers it as it stands (202) */
      CHECK_MSG((i + round) % 2 ? s[i].status == 202
                                : s[i].status == 200 || s[i].status == 202,
                "shot %d: %ld", i, s[i].status);
      CHECK_STR(s[i].id, id);
    }
  }
}

/* A jobs:batch item and lone ?wait submits of one key. */
TEST(one_key_batch_and_waits_at_once) {
  for (int round = 0; round < ROUNDS; round++) {
    char rid[32], label[32];
    snprintf(rid, sizeof rid, "k-batch-%d", round);
    snprintf(label, sizeof label, "l-batch-%d", round);
    make_bodies(rid, label);
    char batch[400];
    snprintf(batch, sizeof batch, "{\"jobs\":[%s]}", body_a);
    shot s[NT];
    for (int i = 0; i < NT; i++)
      s[i] = (i + round) % 4 == 0
                 ? (shot){.query = "", .path = "/v1/jobs:batch", .body = batch}
                 : (shot){.query = "?wait=20", .body = body_a};
    fire_all(s, NT);
    char id[64];
    CHECK(count_label(label, id) == 1);
    for (int i = 0; i < NT; i++) {
      /* jobs:batch answers 200; a ?wait that finds the batch's job before
       * the batch queued it answers it as it stands (202) */
      CHECK_MSG(s[i].status == 200 || ((i + round) % 4 && s[i].status == 202),
                "shot %d: %ld %s", i, s[i].status, s[i].code);
      CHECK_STR(s[i].id, id);
    }
  }
}

/* Many keys one after another: each its own job (the table's entries
 * leave it, or the bound would turn them [sync]: either way, right). */
TEST(many_keys_in_a_row) {
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"kind\":\"map\",\"request_id\":\"row-%d\",\"label\":\"l-row\","
             "\"params\":{\"expr\":\"x+%d\",\"inputs\":{\"x\":[1]}}}",
             i, i);
    long st;
    json_t *j = submit(&S, "?wait=20&include=result", body, &st);
    json_t *data = json_object_get(json_object_get(j, "result"), "data");
    if (j && st == 200 && json_number_value(json_array_get(data, 0)) == 1.0 + i)
      ok++;
    json_decref(j);
  }
  CHECK_MSG(ok == 200, "%d of 200 keyed tiny jobs answered right", ok);
  resp r = req(&S, "GET", "/v1/jobs?label=l-row&limit=1000", NULL, NULL);
  json_t *j = resp_json(&r);
  CHECK(json_array_size(json_object_get(j, "jobs")) == 200);
  json_decref(j);
  resp_free(&r);
}

/* kill -9 after an acknowledged keyed ?wait: the job is there after the
 * restart, and the key again gives its id. */
TEST(acknowledged_key_survives_kill9) {
  make_bodies("k-kill", "l-kill");
  long st;
  json_t *a = submit(&S, "?wait=20", body_a, &st);
  CHECK(a && st == 200);
  char id[64];
  snprintf(id, sizeof id, "%s", a ? jstr(a, "id") : "");
  json_decref(a);
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  CHECK(srv_restart(&S) == 0);
  json_t *j = wait_job(&S, id, 10);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
  json_t *b = submit(&S, "?wait=20", body_a, &st);
  CHECK(b && st == 200 && strcmp(jstr(b, "id"), id) == 0);
  json_decref(b);
  CHECK(count_label("l-kill", NULL) == 1);
}

/* The held round's daemon holds an [async] insert until its job ends or a
 * barrier (TESSEL_STORE_HOLD_MS=600000, db/sqlite/store_fold.c). */
static int held_round;

typedef struct slow_call {
  const char *body;
  long status;
  char id[64], state[32];
} slow_call;

static void *slow_submit(void *arg) {
  slow_call *c = arg;
  json_t *j = submit(&S, "?wait=30", c->body, &c->status);
  snprintf(c->id, sizeof c->id, "%s", j && jstr(j, "id") ? jstr(j, "id") : "");
  snprintf(c->state, sizeof c->state, "%s",
           j && jstr(j, "status") ? jstr(j, "status") : "");
  json_decref(j);
  return NULL;
}

/* A retry of a key while its job runs and (held round) its insert is
 * still held back: the retry's [sync] path commits the held insert first
 * (a barrier), so it names the same job, which a GET of that id then
 * finds. Before the retry, in the held round, the job is in no list (its
 * row is not in the store yet: a GET of its id would be 404); otherwise it
 * is listed once it has run 2 ms. */
TEST(retry_while_insert_held) {
  const char *body =
      "{\"kind\":\"map\",\"backend\":\"serial\",\"request_id\":\"k-held\","
      "\"label\":\"l-held\",\"params\":{\"expr\":\"sin(x)*cos(x)+exp(sin(x))"
      "+log(x+2)+sqrt(x+1)+tanh(x)*atan(x)\",\"inputs\":{\"x\":{\"range\":"
      "{\"start\":0,\"stop\":60000000}}},\"dtype\":\"float32\"}}";
  slow_call a = {.body = body};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, slow_submit, &a) == 0);
  usleep(400 * 1000); /* the job runs (seconds of one core) */
  if (held_round) {
    CHECK(count_label("l-held", NULL) == 0);
  } else {
    int n = 0;
    for (int i = 0; i < 200 && !(n = count_label("l-held", NULL)); i++)
      usleep(50 * 1000);
    CHECK(n == 1);
  }
  long st;
  json_t *b = submit(&S, "?wait=0", body, &st);
  CHECK(b && (st == 202 || st == 200));
  char id[64];
  snprintf(id, sizeof id, "%s", b && jstr(b, "id") ? jstr(b, "id") : "");
  json_decref(b);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp g = req(&S, "GET", path, NULL, NULL);
  CHECK(g.status == 200);
  resp_free(&g);
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
  resp c = req(&S, "POST", path, "application/json", "{}");
  resp_free(&c);
  pthread_join(t, NULL);
  CHECK(a.status == 200);
  CHECK_STR(a.id, id);
  CHECK(count_label("l-held", NULL) == 1);
}

/* kill -9 while ?wait jobs, keyed and not, flow from NT threads: every
 * job answered (200, succeeded) before the kill is there after the
 * restart, and a retry of each answered key names the same job. */
#define LOAD_MAX 20000
typedef struct load_out {
  char id[64], key[32];
} load_out;
static load_out loaded[LOAD_MAX];
static atomic_int nloaded, load_stop;

static void *load_main(void *arg) {
  int k = (int)(intptr_t)arg;
  for (int i = 0; !atomic_load(&load_stop); i++) {
    char key[32] = "", body[256];
    if (i % 2) snprintf(key, sizeof key, "load-%d-%d", k, i);
    snprintf(body, sizeof body,
             "{\"kind\":\"map\",%s%s%s\"params\":{\"expr\":\"x+%d\","
             "\"inputs\":{\"x\":[1,2,3]}}}",
             *key ? "\"request_id\":\"" : "", key, *key ? "\"," : "", i);
    long st = 0;
    json_t *j = submit(&S, "?wait=20", body, &st);
    if (st == 200 && j && strcmp(jstr(j, "status"), "succeeded") == 0) {
      int n = atomic_fetch_add(&nloaded, 1);
      if (n < LOAD_MAX) {
        snprintf(loaded[n].id, sizeof loaded[n].id, "%s", jstr(j, "id"));
        snprintf(loaded[n].key, sizeof loaded[n].key, "%s", key);
      }
    }
    json_decref(j);
    if (st == 0) break; /* the daemon is gone */
  }
  return NULL;
}

TEST(answered_waits_survive_kill9_under_load) {
  pthread_t t[NT];
  atomic_store(&nloaded, 0);
  atomic_store(&load_stop, 0);
  for (int i = 0; i < NT; i++)
    pthread_create(&t[i], NULL, load_main, (void *)(intptr_t)i);
  usleep(1500 * 1000);
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  atomic_store(&load_stop, 1);
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  CHECK(srv_restart(&S) == 0);
  int n = atomic_load(&nloaded), lost = 0, moved = 0;
  if (n > LOAD_MAX) n = LOAD_MAX;
  CHECK_MSG(n > 100, "only %d jobs answered before the kill", n);
  for (int i = 0; i < n; i++) {
    json_t *j = wait_job(&S, loaded[i].id, 10);
    if (!j || strcmp(jstr(j, "status"), "succeeded") != 0) lost++;
    json_decref(j);
    if (!*loaded[i].key || i % 7) continue;
    char body[256];
    snprintf(body, sizeof body,
             "{\"kind\":\"map\",\"request_id\":\"%s\",\"params\":{\"expr\":"
             "\"x+0\",\"inputs\":{\"x\":[1,2,3]}}}", loaded[i].key);
    /* another body under the key: 409 when the key's job is there */
    long st;
    json_t *b = submit(&S, "?wait=20", body, &st);
    if (st != 409) moved++;
    json_decref(b);
  }
  CHECK_MSG(lost == 0, "%d of %d answered ?wait jobs lost", lost, n);
  CHECK_MSG(moved == 0, "%d answered keys lost their job", moved);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_request_ids <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  /* twice: as shipped, then with every [async] insert held until its job
   * ends or a barrier comes (the holds' longest case) */
  for (held_round = 0; held_round < 2; held_round++) {
    if (held_round) setenv("TESSEL_STORE_HOLD_MS", "600000", 1);
    if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
    printf("-- %s\n", held_round ? "inserts held until their end"
                                   : "default holds");
    RUN(one_key_many_waits_at_once);
    RUN(one_key_two_bodies_at_once);
    RUN(key_committed_before);
    RUN(one_key_wait_and_nowait_at_once);
    RUN(one_key_batch_and_waits_at_once);
    RUN(many_keys_in_a_row);
    RUN(retry_while_insert_held);
    RUN(acknowledged_key_survives_kill9);
    RUN(answered_waits_survive_kill9_under_load);
    srv_cleanup(&S);
    unsetenv("TESSEL_STORE_HOLD_MS");
  }
  curl_global_cleanup();
  return check_summary();
}
