/* test_batch.c — many jobs per request: POST /v1/jobs:batch and
 * POST /v1/jobs:get (api/batch.c, compute/jobs/batch.c), against the real
 * daemon.
 *
 * Checked: a batch answers its items in the order sent, a bad item with
 * its error and a field path "jobs[i]..." while the good ones around it are
 * accepted and run; the same batch sent again (request_id per item) gives
 * the same ids and adds no rows; a request_id twice in one batch is 400
 * naming "jobs[i].request_id", more than 10,000 items 413 naming "jobs",
 * a body over --max-body 413, and each refused batch leaves the job count
 * as it was; jobs:get answers in order with an unknown id as its own
 * not_found error, refuses "wait" out of range (400 naming it), waits for
 * the jobs' end (a running job is canceled while the request waits: the
 * answer shows it canceled — a state, not a time), and with
 * "include": ["result"] gives a small result's values inline as
 * result.data and a large one as its link only. A batch of 300 items
 * (three of the store's insert chunks, a bad item and a missing array in
 * the middle ones, request_ids in all) answers every item, adds exactly
 * its good items, and sent again gives the request_id items their ids and
 * adds only the items without one. Ended jobs' records (read from the
 * store's memory and a batch's committed rows) match GET /v1/jobs/{id}
 * and are gone from jobs:get and GET once the job is deleted.
 * One job: POST /v1/jobs?wait&include=result answers a tiny job's values
 * as result.data in the one round trip (exact to the last bit: 0.1 + 0.2),
 * GET /v1/jobs/{id}?include=result the same, a result over the inline
 * bound its link only, a non-finite value null; any other include is 400
 * naming "include" and adds no job.
 * A read mask ("fields") answers each job of jobs:batch and jobs:get with
 * only the members named (its id first, refused items as their error, the
 * inline data kept); a bad mask is 400 naming fields[i] and submits nothing.
 * The daemon runs with three batch checker threads (the items' checks on
 * several threads at once): a batch whose items fail their checks at
 * seeded positions is answered in order, each with its own field, the good
 * items with their own values and ids rising with their index.
 */
#include <pthread.h>
#include <stdint.h>

#include "harness.h"

static srv S;

#define TINY(expr, xs)                                                   \
  "{\"kind\":\"map\",\"params\":{\"expr\":\"" expr "\",\"inputs\":{\"x\":" xs \
  "}}}"

static json_t *post(const char *path, const char *body, long *status) {
  resp r = req(&S, "POST", path, "application/json", body);
  *status = r.status;
  json_t *o = resp_json(&r);
  resp_free(&r);
  return o;
}

static json_int_t job_count(void) {
  resp r = req(&S, "GET", "/v1/jobs?limit=1", NULL, NULL);
  json_t *o = resp_json(&r);
  json_int_t n = json_integer_value(json_object_get(o, "total"));
  json_decref(o);
  resp_free(&r);
  return n;
}

static const char *item_field(json_t *jobs, size_t i) {
  return jstr(json_object_get(json_array_get(jobs, i), "error"), "field");
}

TEST(order_and_bad_items) {
  const char *body =
      "{\"jobs\":[" TINY("x+1", "[1]") "," TINY("x+", "[1]") ",7,"
      "{\"kind\":\"nope\",\"params\":{}}," TINY("x*3", "[2,4]") "]}";
  long st;
  json_t *o = post("/v1/jobs:batch?wait=30", body, &st);
  CHECK(st == 200);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) == 5);
  CHECK_STR(item_field(jobs, 1), "jobs[1].params.expr");
  CHECK_STR(item_field(jobs, 2), "jobs[2]");
  CHECK_STR(item_field(jobs, 3), "jobs[3].kind");
  json_t *a = json_array_get(jobs, 0), *b = json_array_get(jobs, 4);
  CHECK_STR(jstr(a, "status"), "succeeded");
  CHECK_STR(jstr(b, "status"), "succeeded");
  CHECK_STR(jstr(json_object_get(b, "params"), "expr"), "x*3");
  json_t *d = result_data(&S, b);
  CHECK(json_array_size(d) == 2 &&
        json_number_value(json_array_get(d, 1)) == 12.0);
  json_decref(d);
  json_decref(o);
}

/* Items a hostile client sends: each refused alone, the batch answered. */
TEST(odd_items) {
  long st;
  json_t *o = post("/v1/jobs:batch",
                   "{\"jobs\":[null,[],\"s\",{\"request_id\":5,"
                   "\"kind\":\"map\",\"params\":{}},{}]}",
                   &st);
  CHECK(st == 200);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) == 5);
  CHECK_STR(item_field(jobs, 0), "jobs[0]");
  CHECK_STR(item_field(jobs, 1), "jobs[1]");
  CHECK_STR(item_field(jobs, 2), "jobs[2]");
  CHECK_STR(item_field(jobs, 3), "jobs[3].request_id");
  CHECK_STR(item_field(jobs, 4), "jobs[4].kind");
  json_decref(o);
  o = post("/v1/jobs:batch", "{\"jobs\":[]}", &st);
  CHECK(st == 200 && json_array_size(json_object_get(o, "jobs")) == 0);
  json_decref(o);
}

TEST(request_id_repeat) {
  const char *body = "{\"jobs\":["
                     "{\"kind\":\"map\",\"request_id\":\"r1\",\"params\":{"
                     "\"expr\":\"x+1\",\"inputs\":{\"x\":[1]}}},"
                     "{\"kind\":\"map\",\"request_id\":\"r2\",\"params\":{"
                     "\"expr\":\"x+2\",\"inputs\":{\"x\":[1]}}}]}";
  long st1, st2;
  json_t *o1 = post("/v1/jobs:batch", body, &st1);
  json_int_t n = job_count();
  json_t *o2 = post("/v1/jobs:batch", body, &st2);
  CHECK(st1 == 200 && st2 == 200);
  for (size_t i = 0; i < 2; i++) {
    const char *a = jstr(json_array_get(json_object_get(o1, "jobs"), i), "id");
    const char *b = jstr(json_array_get(json_object_get(o2, "jobs"), i), "id");
    CHECK(a && b && strcmp(a, b) == 0);
  }
  CHECK(job_count() == n);
  json_decref(o1);
  json_decref(o2);
}

/* 300 items: chunk boundaries of store_insert_jobs (128) crossed twice. */
#define NCHUNKY 300
static char *chunky_body(void) {
  size_t cap = NCHUNKY * 160 + 64, at = 0;
  char *b = malloc(cap);
  at += (size_t)snprintf(b + at, cap - at, "{\"jobs\":[");
  for (int i = 0; i < NCHUNKY; i++) {
    const char *sep = i ? "," : "";
    if (i == 150)
      at += (size_t)snprintf(b + at, cap - at, "%s7", sep);
    else if (i == 260)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"params\":{\"expr\":\"x\","
                             "\"inputs\":{\"x\":{\"array\":\"a_nosuch%d\"}}}}",
                             sep, i);
    else if (i % 3 == 0)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"request_id\":\"chunky%d\","
                             "\"params\":{\"expr\":\"x+%d\",\"inputs\":{"
                             "\"x\":[1]}}}",
                             sep, i, i);
    else
      at += (size_t)snprintf(b + at, cap - at,
                             "%s" TINY("x+%d", "[1]"), sep, i);
  }
  snprintf(b + at, cap - at, "]}");
  return b;
}

TEST(chunks) {
  char *body = chunky_body();
  json_int_t n0 = job_count();
  long st1, st2;
  json_t *o1 = post("/v1/jobs:batch?wait=30", body, &st1);
  json_int_t n1 = job_count();
  json_t *o2 = post("/v1/jobs:batch", body, &st2);
  json_int_t n2 = job_count();
  CHECK(st1 == 200 && st2 == 200);
  json_t *j1 = json_object_get(o1, "jobs"), *j2 = json_object_get(o2, "jobs");
  CHECK(json_array_size(j1) == NCHUNKY && json_array_size(j2) == NCHUNKY);
  CHECK_STR(item_field(j1, 150), "jobs[150]");
  const char *f = item_field(j1, 260);
  CHECK(f && strncmp(f, "jobs[260].", 10) == 0);
  int with_rid = 0, without = 0;
  for (int i = 0; i < NCHUNKY; i++) {
    if (i == 150 || i == 260) continue;
    json_t *a = json_array_get(j1, (size_t)i), *b = json_array_get(j2, (size_t)i);
    CHECK_STR(jstr(a, "status"), "succeeded");
    const char *ia = jstr(a, "id"), *ib = jstr(b, "id");
    CHECK(ia && ib);
    if (i % 3 == 0) {
      with_rid++;
      CHECK(ia && ib && strcmp(ia, ib) == 0);
    } else {
      without++;
      CHECK(ia && ib && strcmp(ia, ib) != 0);
    }
  }
  CHECK(n1 == n0 + with_rid + without);
  CHECK(n2 == n1 + without);
  json_decref(o1);
  json_decref(o2);
  free(body);
}

/* The checks of a batch's items run on several threads (TESSEL_BATCH_CHECKERS,
 * set in main; compute/jobs/batch.c), the slots and ids in item order:
 * 160 items, each bad in one of four ways at positions drawn from a fixed
 * seed, sent four times, answered in order, each its own field; the good ones with their
 * own values, their ids rising with the item's index (ids are
 * time-ordered: made in item order, not in the order the checks ended)
 * and created_at never falling; exactly the good ones added. */
#define NPAR 160
TEST(checked_apart_admitted_in_order) {
  size_t cap = NPAR * 200 + 64, at = 0;
  char *b = malloc(cap);
  int how[NPAR], good = 0;
  uint32_t seed = 12345;
  at += (size_t)snprintf(b + at, cap - at, "{\"include\":[\"result\"],\"jobs\":[");
  for (int i = 0; i < NPAR; i++) {
    seed = seed * 1103515245u + 12345u;
    int r = (int)((seed >> 16) % 8); /* 0..3: bad in its own way */
    how[i] = r < 4 ? r : 4;
    const char *sep = i ? "," : "";
    if (how[i] == 0)
      at += (size_t)snprintf(b + at, cap - at, "%s" TINY("x+", "[1]"), sep);
    else if (how[i] == 1)
      at += (size_t)snprintf(b + at, cap - at, "%s[%d]", sep, i);
    else if (how[i] == 2)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"nope%d\",\"params\":{}}", sep, i);
    else if (how[i] == 3)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"params\":{\"expr\":\"x\","
                             "\"inputs\":{\"x\":{\"array\":\"a_0000000000000000000000%04d\"}}}}",
                             sep, i);
    else
      at += (size_t)snprintf(b + at, cap - at, "%s" TINY("x+%d", "[1]"), sep, i);
    good += how[i] == 4;
  }
  snprintf(b + at, cap - at, "]}");
  CHECK(good > 20 && good < NPAR - 20); /* the seed mixes them */
  for (int round = 0; round < 4; round++) { /* the threads' order varies */
    json_int_t n0 = job_count();
    long st;
    json_t *o = post("/v1/jobs:batch?wait=30", b, &st);
    CHECK(st == 200);
    json_t *jobs = json_object_get(o, "jobs");
    CHECK(json_array_size(jobs) == NPAR);
    static const char *const tail[] = {".params.expr", "", ".kind",
                                       ".params.inputs.x"};
    const char *prev_id = "", *prev_at = "";
    for (int i = 0; i < NPAR && json_array_size(jobs) == NPAR; i++) {
      json_t *j = json_array_get(jobs, (size_t)i);
      if (how[i] < 4) {
        char want[64];
        snprintf(want, sizeof want, "jobs[%d]%s", i, tail[how[i]]);
        CHECK_MSG(item_field(jobs, (size_t)i) &&
                      strcmp(item_field(jobs, (size_t)i), want) == 0,
                  "item %d: field %s, want %s", i,
                  item_field(jobs, (size_t)i) ? item_field(jobs, (size_t)i)
                                              : "(none)", want);
        CHECK(!json_object_get(j, "id"));
        continue;
      }
      CHECK_STR(jstr(j, "status"), "succeeded");
      json_t *d = json_object_get(json_object_get(j, "result"), "data");
      CHECK_MSG(json_array_size(d) == 1 &&
                    json_number_value(json_array_get(d, 0)) == 1.0 + i,
                "item %d: its own value", i);
      const char *id = jstr(j, "id"), *cat = jstr(j, "created_at");
      CHECK_MSG(id && strcmp(prev_id, id) < 0, "item %d: id %s after %s", i,
                id ? id : "(none)", prev_id);
      CHECK_MSG(cat && strcmp(prev_at, cat) <= 0, "item %d: created_at", i);
      if (id) prev_id = id;
      if (cat) prev_at = cat;
    }
    CHECK(job_count() == n0 + good);
    json_decref(o);
  }
  free(b);
}

TEST(refused_batches_change_nothing) {
  json_int_t n = job_count();
  long st;
  json_t *o = post("/v1/jobs:batch",
                   "{\"jobs\":[" TINY("x", "[1]") ","
                   "{\"kind\":\"map\",\"request_id\":\"d\",\"params\":{}},"
                   TINY("x", "[2]") ","
                   "{\"kind\":\"map\",\"request_id\":\"d\",\"params\":{}}]}",
                   &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "jobs[3].request_id");
  json_decref(o);

  size_t cap = 10001 * 3 + 32;
  char *big = malloc(cap);
  size_t len = (size_t)snprintf(big, cap, "{\"jobs\":[");
  for (int i = 0; i < 10001; i++) len += (size_t)snprintf(big + len, cap - len, "%s{}", i ? "," : "");
  snprintf(big + len, cap - len, "]}");
  o = post("/v1/jobs:batch", big, &st);
  CHECK(st == 413);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "jobs");
  json_decref(o);
  free(big);

  o = post("/v1/jobs:batch", "{\"jobs\":{}}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "jobs");
  json_decref(o);
  o = post("/v1/jobs:batch", "{\"jobs\":[],\"x\":1}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "x");
  json_decref(o);
  CHECK(job_count() == n);
}

/* The daemon runs with --max-body 65536 (see main). */
TEST(over_body_limit) {
  json_int_t n = job_count();
  size_t cap = 70000;
  char *big = malloc(cap);
  size_t len = (size_t)snprintf(big, cap, "{\"jobs\":[");
  while (len < 66000)
    len += (size_t)snprintf(big + len, cap - len, TINY("x", "[1]") ",");
  snprintf(big + len, cap - len, TINY("x", "[1]") "]}");
  long st;
  json_t *o = post("/v1/jobs:batch", big, &st);
  CHECK(st == 413);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "body");
  json_decref(o);
  free(big);
  CHECK(job_count() == n);
}

TEST(get_many) {
  long st;
  json_t *o = post("/v1/jobs:batch?wait=30",
                   "{\"jobs\":[" TINY("x+1", "[[1,2],[3,4]]") "]}", &st);
  char small[64], large[64], body[512];
  snprintf(small, sizeof small, "%s",
           jstr(json_array_get(json_object_get(o, "jobs"), 0), "id"));
  json_decref(o);
  /* 10,000 float64: 80,000 bytes, over the 64 KiB inline bound */
  json_t *lg = submit(&S, "?wait=30",
                      "{\"kind\":\"map\",\"params\":{\"expr\":\"x*0+1\","
                      "\"inputs\":{\"x\":{\"random\":{\"shape\":[10000],"
                      "\"seed\":1}}}}}",
                      &st);
  snprintf(large, sizeof large, "%s", lg ? jstr(lg, "id") : "?");
  json_decref(lg);
  snprintf(body, sizeof body,
           "{\"ids\":[\"%s\",\"j_unknown\",\"%s\"],\"wait\":30,"
           "\"include\":[\"result\"]}",
           small, large);
  o = post("/v1/jobs:get", body, &st);
  CHECK(st == 200);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) == 3);
  json_t *a = json_array_get(jobs, 0), *u = json_array_get(jobs, 1),
         *c = json_array_get(jobs, 2);
  CHECK_STR(jstr(a, "id"), small);
  json_t *data = json_object_get(json_object_get(a, "result"), "data");
  CHECK(json_array_size(data) == 2 &&
        json_number_value(json_array_get(json_array_get(data, 1), 1)) == 5.0);
  CHECK_STR(jstr(u, "id"), "j_unknown");
  CHECK_STR(jstr(json_object_get(u, "error"), "code"), "not_found");
  CHECK_STR(jstr(json_object_get(u, "error"), "field"), "ids[1]");
  CHECK_STR(jstr(c, "status"), "succeeded");
  CHECK(json_object_get(json_object_get(c, "result"), "data") == NULL);
  CHECK(jstr(json_object_get(c, "result"), "href") != NULL);
  json_decref(o);

  o = post("/v1/jobs:get", "{\"ids\":[],\"wait\":61}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "wait");
  json_decref(o);
  o = post("/v1/jobs:get", "{\"ids\":[\"a\",3]}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "ids[1]");
  json_decref(o);
  o = post("/v1/jobs:get", "{\"ids\":[],\"include\":[\"logs\"]}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "include[0]");
  json_decref(o);
}

TEST(single_include_result) {
  long st;
  json_t *o = submit(&S, "?wait=30&include=result",
                     TINY("x+0.2", "[[0.1,1e300],[3,4]]"), &st);
  CHECK(st == 200);
  CHECK_STR(jstr(o, "status"), "succeeded");
  json_t *data = json_object_get(json_object_get(o, "result"), "data");
  CHECK(json_array_size(data) == 2);
  CHECK(json_real_value(json_array_get(json_array_get(data, 0), 0)) == 0.1 + 0.2);
  CHECK(json_number_value(json_array_get(json_array_get(data, 1), 1)) == 4.2);
  char id[64];
  snprintf(id, sizeof id, "%s", o ? jstr(o, "id") : "?");
  json_decref(o);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s?include=result", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  o = resp_json(&r);
  resp_free(&r);
  data = json_object_get(json_object_get(o, "result"), "data");
  CHECK(json_array_size(data) == 2 &&
        json_real_value(json_array_get(json_array_get(data, 0), 0)) == 0.1 + 0.2);
  json_decref(o);
  /* without include: no data */
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  r = req(&S, "GET", path, NULL, NULL);
  o = resp_json(&r);
  resp_free(&r);
  CHECK(json_object_get(json_object_get(o, "result"), "href") != NULL);
  CHECK(json_object_get(json_object_get(o, "result"), "data") == NULL);
  json_decref(o);
  /* a non-finite value is null */
  o = submit(&S, "?wait=30&include=result", TINY("log(x)", "[0,1]"), &st);
  data = json_object_get(json_object_get(o, "result"), "data");
  CHECK(json_array_size(data) == 2 && json_is_null(json_array_get(data, 0)) &&
        json_number_value(json_array_get(data, 1)) == 0.0);
  json_decref(o);
  /* over the inline bound: the link only */
  o = submit(&S, "?wait=30&include=result",
             "{\"kind\":\"map\",\"params\":{\"expr\":\"x*0+1\","
             "\"inputs\":{\"x\":{\"random\":{\"shape\":[10000],"
             "\"seed\":2}}}}}",
             &st);
  CHECK_STR(jstr(o, "status"), "succeeded");
  CHECK(json_object_get(json_object_get(o, "result"), "data") == NULL);
  CHECK(jstr(json_object_get(o, "result"), "href") != NULL);
  json_decref(o);
  /* a bad include: 400 naming it, no job added */
  json_int_t before = job_count();
  o = post("/v1/jobs?wait=30&include=logs", TINY("x+1", "[1]"), &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "include");
  json_decref(o);
  CHECK(job_count() == before);
  snprintf(path, sizeof path, "/v1/jobs/%s?include=", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 400);
  resp_free(&r);
}

TEST(read_mask) {
  long st;
  json_int_t before = job_count();
  json_t *o = post("/v1/jobs:batch?wait=30",
                   "{\"fields\":[\"status\",\"error\"],\"jobs\":["
                   TINY("x+1", "[1,2]") "," TINY("x+", "[1]") "]}", &st);
  CHECK(st == 200);
  json_t *a = json_array_get(json_object_get(o, "jobs"), 0);
  CHECK(json_object_size(a) == 3 && jstr(a, "id") != NULL);
  CHECK_STR(jstr(a, "status"), "succeeded");
  CHECK(json_is_null(json_object_get(a, "error")));
  CHECK(json_object_get(a, "params") == NULL && json_object_get(a, "estimate") == NULL);
  CHECK_STR(item_field(json_object_get(o, "jobs"), 1), "jobs[1].params.expr");
  char id[64], body[512];
  snprintf(id, sizeof id, "%s", jstr(a, "id") ? jstr(a, "id") : "?");
  snprintf(body, sizeof body,
           "{\"ids\":[\"%s\"],\"include\":[\"result\"],\"fields\":[\"result\"]}",
           jstr(a, "id"));
  json_decref(o);
  CHECK(job_count() == before + 1);
  o = post("/v1/jobs:get", body, &st);
  CHECK(st == 200);
  a = json_array_get(json_object_get(o, "jobs"), 0);
  CHECK(json_object_size(a) == 2);
  json_t *data = json_object_get(json_object_get(a, "result"), "data");
  CHECK(json_array_size(data) == 2 && json_number_value(json_array_get(data, 1)) == 3.0);
  json_decref(o);
  /* every member named gives the whole record: the mask's list
   * (api/fields.c) has every member jobs_json writes */
  snprintf(body, sizeof body,
           "{\"ids\":[\"%s\"],\"fields\":[\"kind\",\"status\",\"label\","
           "\"priority\",\"request_id\",\"timeout_s\",\"backend\",\"estimate\","
           "\"size\",\"launch\",\"created_at\",\"started_at\",\"finished_at\","
           "\"timings_ms\",\"progress\",\"result\",\"output\",\"compare\","
           "\"max_abs_diff\",\"error\",\"attempts\",\"node\",\"params\"]}",
           id);
  char whole_body[128];
  snprintf(whole_body, sizeof whole_body, "{\"ids\":[\"%s\"]}", id);
  json_t *masked = post("/v1/jobs:get", body, &st);
  json_t *whole = post("/v1/jobs:get", whole_body, &st);
  CHECK(json_equal(json_array_get(json_object_get(masked, "jobs"), 0),
                   json_array_get(json_object_get(whole, "jobs"), 0)));
  json_decref(masked);
  json_decref(whole);
  /* include on jobs:batch: a job ended by the answer brings its data */
  o = post("/v1/jobs:batch?wait=30",
           "{\"include\":[\"result\"],\"fields\":[\"result\"],\"jobs\":["
           TINY("x*2", "[1.5]") "]}", &st);
  CHECK(st == 200);
  a = json_array_get(json_object_get(o, "jobs"), 0);
  data = json_object_get(json_object_get(a, "result"), "data");
  CHECK(json_array_size(data) == 1 && json_number_value(json_array_get(data, 0)) == 3.0);
  json_decref(o);
  o = post("/v1/jobs:batch", "{\"include\":[\"logs\"],\"jobs\":[" TINY("x+1", "[1]") "]}",
           &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "include[0]");
  json_decref(o);
  before++; /* the x*2 job above */
  /* bad masks: nothing submitted */
  o = post("/v1/jobs:batch", "{\"fields\":[\"status\",\"estimates\"],\"jobs\":["
                             TINY("x+1", "[1]") "]}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "fields[1]");
  json_decref(o);
  o = post("/v1/jobs:batch", "{\"fields\":[],\"jobs\":[" TINY("x+1", "[1]") "]}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "fields");
  json_decref(o);
  o = post("/v1/jobs:get", "{\"ids\":[],\"fields\":\"status\"}", &st);
  CHECK(st == 400);
  CHECK_STR(jstr(json_object_get(o, "error"), "field"), "fields");
  json_decref(o);
  CHECK(job_count() == before + 1);
}

/* A job that builds 2 x 10^8 random values before it computes: running
 * long enough to be canceled while a jobs:get waits on it. */
#define SLOW                                                                \
  "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":\"x+1\","  \
  "\"inputs\":{\"x\":{\"random\":{\"shape\":[200000000],\"dist\":"         \
  "\"normal\",\"seed\":3}}},\"dtype\":\"float32\"}}"

typedef struct getter {
  char body[256];
  long status;
  json_t *answer;
} getter;

static void *get_thread(void *arg) {
  getter *g = arg;
  g->answer = post("/v1/jobs:get", g->body, &g->status);
  return NULL;
}

TEST(wait_for_the_end) {
  long st;
  json_t *o = post("/v1/jobs:batch", "{\"jobs\":[" SLOW "," TINY("x", "[1]") "]}", &st);
  CHECK(st == 200);
  const char *slow = jstr(json_array_get(json_object_get(o, "jobs"), 0), "id");
  const char *tiny = jstr(json_array_get(json_object_get(o, "jobs"), 1), "id");
  if (!slow || !tiny) {
    json_decref(o);
    CHECK(0);
    return;
  }
  getter g = {0};
  snprintf(g.body, sizeof g.body, "{\"ids\":[\"%s\",\"%s\"],\"wait\":60}",
           tiny, slow);
  CHECK(wait_running(&S, slow));
  pthread_t t;
  pthread_create(&t, NULL, get_thread, &g);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", slow);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  pthread_join(t, NULL);
  CHECK(g.status == 200);
  json_t *jobs = json_object_get(g.answer, "jobs");
  CHECK_STR(jstr(json_array_get(jobs, 0), "status"), "succeeded");
  CHECK_STR(jstr(json_array_get(jobs, 1), "status"), "canceled");
  json_decref(g.answer);
  json_decref(o);
}

/* An ended job's record is read from the store's memory of ended rows
 * (db/sqlite/store_recent.c) and from a batch's committed rows: the same
 * record as GET /v1/jobs/{id} gives, "queued" or ended in a batch's
 * answer without ?wait, and gone everywhere once the job is deleted. */
TEST(records_after_end_and_delete) {
  long st;
  json_t *o = post("/v1/jobs:batch",
                   "{\"jobs\":[" TINY("x+1", "[1]") "," TINY("x+2", "[2]") "]}",
                   &st);
  CHECK(st == 200);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) == 2);
  char id0[64], id1[64], body[256];
  snprintf(id0, sizeof id0, "%s", jstr(json_array_get(jobs, 0), "id"));
  snprintf(id1, sizeof id1, "%s", jstr(json_array_get(jobs, 1), "id"));
  const char *s0 = jstr(json_array_get(jobs, 0), "status");
  CHECK(s0 && (strcmp(s0, "queued") == 0 || strcmp(s0, "succeeded") == 0));
  json_decref(o);
  snprintf(body, sizeof body, "{\"ids\":[\"%s\",\"%s\"],\"wait\":30}", id0,
           id1);
  for (int round = 0; round < 2; round++) { /* waited for, then ended */
    o = post("/v1/jobs:get", body, &st);
    CHECK(st == 200);
    jobs = json_object_get(o, "jobs");
    CHECK_STR(jstr(json_array_get(jobs, 0), "status"), "succeeded");
    CHECK_STR(jstr(json_array_get(jobs, 1), "status"), "succeeded");
    CHECK(jstr(json_array_get(jobs, 0), "finished_at") != NULL);
    json_decref(o);
  }
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id0);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *g = resp_json(&r);
  CHECK(r.status == 200);
  CHECK_STR(jstr(g, "status"), "succeeded");
  json_decref(g);
  resp_free(&r);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200 || r.status == 204);
  resp_free(&r);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 404);
  resp_free(&r);
  o = post("/v1/jobs:get", body, &st);
  CHECK(st == 200);
  jobs = json_object_get(o, "jobs");
  CHECK_STR(item_field(jobs, 0), "ids[0]");
  CHECK_STR(jstr(json_object_get(json_array_get(jobs, 0), "error"), "code"),
            "not_found");
  CHECK_STR(jstr(json_array_get(jobs, 1), "status"), "succeeded");
  json_decref(o);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_batch <tesseld>");
  /* three checker threads whatever the machine's cores: every batch here
   * is checked on several threads at once (compute/jobs/batch.c) */
  setenv("TESSEL_BATCH_CHECKERS", "3", 1);
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", "--max-body", "65536",
                NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(order_and_bad_items);
  RUN(odd_items);
  RUN(request_id_repeat);
  RUN(chunks);
  RUN(checked_apart_admitted_in_order);
  RUN(refused_batches_change_nothing);
  RUN(over_body_limit);
  RUN(get_many);
  RUN(single_include_result);
  RUN(read_mask);
  RUN(wait_for_the_end);
  RUN(records_after_end_and_delete);
  CHECK(srv_kill(&S, SIGTERM) == 0);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
