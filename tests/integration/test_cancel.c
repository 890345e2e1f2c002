/* test_cancel.c — a running job of every CPU kind stops soon after
 * POST /v1/jobs/{id}/cancel, and a canceled job's time is all in its
 * phases (issue 15: a job showed canceled seconds after the click, with a
 * 6.6 s gap that belonged to no phase).
 *
 * For each kind (map, reduce, matmul, geodesic) on backends serial and cpu
 * a job is submitted that would run far longer than the bound, is seen
 * running, then canceled; the test polls the job until it has ended and
 * asserts:
 *   - it ended "canceled" (not succeeded: it was still computing — it is
 *     canceled 0.3 s after its progress shows a total, i.e. its compute
 *     began);
 *   - it stopped where it was: its progress at the end is short of its
 *     total (it did not run its compute to the end and then say canceled).
 *     That is the state the cancel promises; how long it took is printed
 *     (the design target is about a second: every kind checks its stop
 *     flag at least every ~0.3 s of one core's work) but never asserted,
 *     since a loaded 2-core CI machine stretches any time;
 *   - its timings: queue + prepare + h2d + compute + d2h + store is never
 *     more than total and accounts for at least half of it (issue 15's
 *     bug left a 6.6 s gap in a job of about as long that belonged to no
 *     phase): a proportion of the service's own bookkeeping, not a bound
 *     on a time.
 * And a job canceled while it still builds its inputs (prepare: 2 x 10^8
 * random values, far more than it gets through) has never computed.
 */
#include <math.h>
#include <time.h>

#include "harness.h"

/* The timings are rounded to 0.001 ms each: six phases may exceed the
 * total by that much. */
#define ROUND_MS 0.01

static srv S;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double tnum(json_t *t, const char *k) {
  json_t *v = json_object_get(t, k);
  return json_is_number(v) ? json_number_value(v) : 0.0;
}

/* Poll until the job's compute has begun (its progress has a total: the
 * kinds set it when their run starts, after prepare); 0 after ~30 s. */
static int wait_computing(const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  for (int i = 0; i < 1500; i++) {
    resp r = req(&S, "GET", path, NULL, NULL);
    json_t *o = resp_json(&r);
    json_t *p = json_object_get(o, "progress");
    int on = o && strcmp(jstr(o, "status"), "running") == 0 &&
             json_integer_value(json_object_get(p, "total")) > 0;
    json_decref(o);
    resp_free(&r);
    if (on) return 1;
    usleep(20000);
  }
  return 0;
}

/* in_prepare: cancel while the job builds its inputs (before its compute
 * begins), and check that it never computed. */
static void cancel_at(const char *what, const char *body, int in_prepare) {
  long st = 0;
  json_t *j = submit(&S, "", body, &st);
  CHECK_MSG(j && st == 202, "%s: submit %ld", what, st);
  if (!j) return;
  char id[64], path[128];
  snprintf(id, sizeof id, "%s", jstr(j, "id"));
  json_decref(j);
  if (in_prepare)
    CHECK_MSG(wait_running(&S, id), "%s: never running", what);
  else
    CHECK_MSG(wait_computing(id), "%s: never computing", what);
  usleep(300000); /* well inside its prepare, or its compute */
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
  resp r = req(&S, "POST", path, NULL, NULL);
  double t0 = now_s();
  CHECK_MSG(r.status == 200 || r.status == 202, "%s: cancel %ld", what,
            r.status);
  resp_free(&r);
  json_t *done = wait_job(&S, id, 60);
  double lat = now_s() - t0;
  const char *status = done ? jstr(done, "status") : NULL;
  json_t *t = done ? json_object_get(done, "timings_ms") : NULL;
  double total = tnum(t, "total");
  double sum = tnum(t, "queue") + tnum(t, "prepare") + tnum(t, "h2d") +
               tnum(t, "compute") + tnum(t, "d2h") + tnum(t, "store");
  printf("cancel %-16s ended %s after %.3f s; timings total %.1f ms, "
         "phases %.1f ms (queue %.1f prepare %.1f compute %.1f store %.1f)\n",
         what, status ? status : "?", lat, total, sum, tnum(t, "queue"),
         tnum(t, "prepare"), tnum(t, "compute"), tnum(t, "store"));
  CHECK_MSG(status && strcmp(status, "canceled") == 0, "%s: ended %s", what,
            status ? status : "(not ended)");
  json_t *pg = done ? json_object_get(done, "progress") : NULL;
  json_int_t pdone = json_integer_value(json_object_get(pg, "done"));
  json_int_t ptotal = json_integer_value(json_object_get(pg, "total"));
  if (!in_prepare)
    CHECK_MSG(ptotal > 0 && pdone < ptotal, "%s: progress %lld of %lld at the end",
              what, (long long)pdone, (long long)ptotal);
  CHECK_MSG(total > 0 && sum <= total + ROUND_MS && sum >= 0.5 * total,
            "%s: total %.1f ms but the phases add up to %.1f ms", what, total,
            sum);
  if (in_prepare) { /* stopped in prepare: it never computed */
    json_t *p = done ? json_object_get(done, "progress") : NULL;
    CHECK_MSG(tnum(t, "prepare") > 0 && tnum(t, "compute") == 0 &&
                  json_integer_value(json_object_get(p, "total")) == 0,
              "%s: prepare %.1f ms, compute %.1f ms: not stopped in prepare",
              what, tnum(t, "prepare"), tnum(t, "compute"));
  }
  json_decref(done);
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  resp_free(&r);
}

static void cancel_one(const char *what, const char *body) {
  cancel_at(what, body, 0);
}

/* Each body would run for tens of seconds on one core. */
#define MAP_BODY(b)                                                            \
  "{\"kind\":\"map\",\"backend\":\"" b "\",\"params\":{\"expr\":"               \
  "\"sin(x)*cos(x)+exp(sin(x))+log(x+2)+sqrt(x+1)+tanh(x)*atan(x)+"             \
  "sin(x+1)*cos(x+2)+exp(cos(x))+log(x+3)+tanh(x+1)\",\"inputs\":{\"x\":"       \
  "{\"range\":{\"start\":0,\"stop\":30000000}}},\"dtype\":\"float32\"}}"
#define REDUCE_BODY(b)                                                         \
  "{\"kind\":\"reduce\",\"backend\":\"" b "\",\"params\":{\"op\":\"sum\","      \
  "\"expr\":\"sin(x)*cos(x)+exp(sin(x))+log(x+2)+sqrt(x+1)+tanh(x)*atan(x)+"    \
  "sin(x+1)*cos(x+2)+exp(cos(x))+log(x+3)+tanh(x+1)\",\"inputs\":{\"x\":"       \
  "{\"range\":{\"start\":0,\"stop\":30000000}}},\"dtype\":\"float32\"}}"
#define MATMUL_BODY(b)                                                         \
  "{\"kind\":\"matmul\",\"backend\":\"" b "\",\"params\":{\"a\":{\"random\":"   \
  "{\"shape\":[4000,4000],\"seed\":1}},\"b\":{\"random\":{\"shape\":"           \
  "[4000,4000],\"seed\":2}}}}"
#define GEOD_BODY(b)                                                           \
  "{\"kind\":\"geodesic\",\"backend\":\"" b "\",\"params\":{\"points\":"        \
  "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":1}}}}"

TEST(cancel_map) {
  cancel_one("map/serial", MAP_BODY("serial"));
  cancel_one("map/cpu", MAP_BODY("cpu"));
}
TEST(cancel_reduce) {
  cancel_one("reduce/serial", REDUCE_BODY("serial"));
  cancel_one("reduce/cpu", REDUCE_BODY("cpu"));
}
TEST(cancel_matmul) {
  cancel_one("matmul/serial", MATMUL_BODY("serial"));
  cancel_one("matmul/cpu", MATMUL_BODY("cpu"));
}
TEST(cancel_geodesic) {
  cancel_one("geodesic/serial", GEOD_BODY("serial"));
  cancel_one("geodesic/cpu", GEOD_BODY("cpu"));
  /* A 2 GB result (not by default: disk and memory of a shared CI). */
  if (getenv("TESSEL_TEST_CANCEL_BIG"))
    cancel_one("geodesic/big", "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{\"points\":"
        "{\"random\":{\"shape\":[16000,2],\"low\":-60,\"high\":60,\"seed\":1}}}}");
}

/* A job still building its inputs: 2 x 10^8 normal random values take
 * ~5-10 s of one core (a serial job builds on one thread), far past the
 * bound; before the build looked at the stop flag the cancel waited for
 * all of it (4.4 s for 10^8, 17 s for 4 x 10^8 on this VM). float32: an
 * 800 MB input; the result is never made. */
#define PREPARE_BODY(b)                                                        \
  "{\"kind\":\"map\",\"backend\":\"" b "\",\"params\":{\"expr\":\"x+1\","     \
  "\"inputs\":{\"x\":{\"random\":{\"shape\":[200000000],\"dist\":\"normal\","  \
  "\"seed\":3}}},\"dtype\":\"float32\"}}"

TEST(cancel_in_prepare) {
  cancel_at("map/serial in prepare", PREPARE_BODY("serial"), 1);
  cancel_at("map/cpu in prepare", PREPARE_BODY("cpu"), 1);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_cancel <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(cancel_map);
  RUN(cancel_reduce);
  RUN(cancel_matmul);
  RUN(cancel_geodesic);
  RUN(cancel_in_prepare);
  CHECK(srv_kill(&S, SIGTERM) == 0);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
