/* test_kind_contract.c — a kind owns its whole contract (issue 24, item 2).
 *
 * The test-only kind "twice" (tests/kinds/twice.c) is added to the kind
 * table by one line, kinds_register(&test_kind_twice), and then runs
 * through everything that serves the built-in kinds with no other change:
 * the router's size rule names its size in its words; the calibration
 * measures its own rate and the cost model estimates it from its terms;
 * the scheduler runs it on auto (the calibrated model says why), compare
 * checks its backends against each other, the split service cuts a big
 * one into row tiles and joins them; the API accepts it at POST /v1/jobs
 * (refusing bad params naming the field), lists it in GET /v1/info, filters
 * GET /v1/jobs by it and counts it in /metrics; the calibration file keeps
 * its rate and its corrections under its name.
 *
 * The kind is in no daemon, so the service runs in this process: the
 * store, the scheduler, the HTTP server and the API wired as app/main.c
 * wires them, on a loopback port; requests go through libcurl (harness.h's
 * helpers, pointed at that port), with the GPUs the machine has (the kind
 * has no device code: its cuda run computes on the host). The argument
 * (the daemon's path) is not used.
 */
#include "api/api.h"
#include "compute/array/arrays.h"
#include "compute/gpu/gpu.h"
#include "compute/jobs/jobs.h"
#include "compute/sched/route/costmodel.h"
#include "compute/sched/route/router.h"
#include "compute/sched/sched.h"
#include "db/store.h"
#include "integration/harness.h"
#include "kinds/twice.h"
#include "server/http.h"

static srv S; /* its base URL only: no process */
static char g_dir[256], g_calib[300];
static store *g_st;
static sched *g_sc;
static http_server *g_srv;
static jobs g_jobs;
static arrays g_arrays;
static api_ctx g_api;

TEST(registered_by_one_line) {
  CHECK(kinds_register(&test_kind_twice) == 0); /* the one line */
  CHECK(kind_find("twice") == &test_kind_twice);
  CHECK(kind_slot(&test_kind_twice) == kind_count() - 1);
  CHECK(strstr(kind_list(), ", twice") != NULL);
  CHECK(kinds_register(&test_kind_twice) == -1); /* a name once */
}

/* Before any calibration the size rule speaks the kind's words. */
TEST(router_size_rule) {
  job_estimate est;
  memset(&est, 0, sizeof est);
  est.size = 10;
  est.work = 20;
  tbackend b = B_AUTO;
  char why[200];
  json_t *j = NULL;
  CHECK(router_choose(&test_kind_twice, &est, 0, &b, why, sizeof why, &j) == 0);
  CHECK(b == B_SERIAL);
  CHECK_MSG(strstr(why, "(10 rows)") != NULL, "%s", why);
  CHECK_STR(json_string_value(json_object_get(j, "unit")), "cells");
  json_decref(j);
}

static int start_service(void) {
  terr e;
  terr_clear(&e);
  snprintf(g_dir, sizeof g_dir, "/tmp/tessel-kind-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_calib, sizeof g_calib, "%s/calibration.json", g_dir);
  if (store_open(g_dir, &g_st, &e)) goto fail;
  sched_config sc = {.st = g_st,
                     .data_dir = g_dir,
                     .threads = 2,
                     .queue_limit = 100,
                     .row_result_max = 4096,
                     .calibration_path = g_calib,
                     .kind_lookup = kind_find,
                     .split_min_pairs = 4000,
                     .tiles = 3};
  if (sched_create(&sc, &g_sc, &e)) goto fail;
  http_config hc = {.listen = "127.0.0.1", .port = 0, .threads = 2};
  if (http_server_create(&hc, &g_srv, &e)) goto fail;
  g_jobs = (jobs){
      .st = g_st, .sc = g_sc, .max_elems = 1 << 26, .default_timeout_s = 60};
  g_arrays = (arrays){.st = g_st, .data_dir = g_dir};
  g_api = (api_ctx){.srv = g_srv,
                    .jobs = &g_jobs,
                    .arrays = &g_arrays,
                    .max_elems = 1 << 26,
                    .max_json_result = 64 << 20};
  if (api_register(g_srv, &g_api, &e) || sched_start(g_sc, &e) ||
      http_server_start(g_srv, &e))
    goto fail;
  S.port = http_port(g_srv);
  snprintf(S.base, sizeof S.base, "http://127.0.0.1:%d", S.port);
  return 0;
fail:
  fprintf(stderr, "start: %s\n", e.message);
  return -1;
}

static void stop_service(void) {
  http_server_destroy(g_srv); /* no request in flight after this */
  sched_destroy(g_sc);
  store_close(g_st);
}

/* The calibration measured the kind's own rate, and the model estimates
 * it from the kind's terms. */
TEST(cost_model_uses_its_terms) {
  cm_model m;
  cm_get(&m);
  CHECK(cm_rate_get(&m.r, "twice_rows_1") == TWICE_RATE);
  job_estimate est;
  memset(&est, 0, sizeof est);
  est.size = 1000000;
  est.work = 2e6;
  est.out_bytes = 16000000;
  cm_parts p;
  cm_model_parts(&m, &test_kind_twice, &est, B_SERIAL, &p);
  CHECK_NEAR(p.compute, 2e6 / TWICE_RATE, 1e-12);
  /* the pool: its threads, as well as the VM's work scaled over them */
  double eff = m.r.vm_ops_n / (m.r.vm_ops_1 * m.r.threads);
  if (eff > 1) eff = 1;
  cm_model_parts(&m, &test_kind_twice, &est, B_CPU, &p);
  CHECK_NEAR(p.compute, 2e6 / (TWICE_RATE * m.r.threads * eff), 1e-9);
}

/* The rows (i s, 2 i s) for i in [0, n), as the result's JSON data. */
static int rows_ok(json_t *data, int64_t n, double s) {
  if (json_array_size(data) != (size_t)n) return 0;
  for (int64_t i = 0; i < n; i++) {
    json_t *r = json_array_get(data, (size_t)i);
    if (json_number_value(json_array_get(r, 0)) != (double)i * s ||
        json_number_value(json_array_get(r, 1)) != 2.0 * (double)i * s)
      return 0;
  }
  return 1;
}

TEST(auto_runs_and_says_why) {
  json_t *j =
      submit(&S, "?wait=60",
             "{\"kind\":\"twice\",\"params\":{\"n\":500,\"scale\":0.5}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  const char *why = j ? jstr(json_object_get(j, "backend"), "reason") : NULL;
  CHECK_MSG(why && strncmp(why, "estimate ", 9) == 0, "reason %s",
            why ? why : "(none)");
  CHECK(j && !json_object_get(j, "tiles")); /* 1000 cells: not split */
  json_t *d = j ? result_data(&S, j) : NULL;
  CHECK(rows_ok(d, 500, 0.5));
  json_decref(d);
  json_decref(j);
}

TEST(bad_params_name_the_field) {
  long st = 0;
  json_t *j = submit(&S, "", "{\"kind\":\"twice\",\"params\":{\"n\":0}}", &st);
  CHECK(!j && st == 400);
  resp r = req(&S, "POST", "/v1/jobs", "application/json",
               "{\"kind\":\"twice\",\"params\":{\"n\":3,\"m\":1}}");
  CHECK(is_error(&r, 400, "invalid_argument", "params"));
  resp_free(&r);
}

TEST(compare_checks_its_backends) {
  json_t *j = submit(&S, "?wait=60",
                     "{\"kind\":\"twice\",\"backend\":\"compare\","
                     "\"params\":{\"n\":20000}}",
                     NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *cmp = j ? json_object_get(j, "compare") : NULL;
  CHECK(json_array_size(cmp) >= 2);
  CHECK(j && json_number_value(json_object_get(j, "max_abs_diff")) == 0);
  CHECK(j && !json_object_get(j, "tiles")); /* compare never splits */
  json_decref(j);
}

TEST(split_into_tiles_and_joined) {
  json_t *j = submit(&S, "?wait=60",
                     "{\"kind\":\"twice\",\"backend\":\"cpu\","
                     "\"params\":{\"n\":3001,\"scale\":3}}",
                     NULL);
  char id[64] = "";
  if (j) snprintf(id, sizeof id, "%s", jstr(j, "id"));
  json_decref(j);
  j = id[0] ? wait_job(&S, id, 60) : NULL;
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *tiles = j ? json_object_get(j, "tiles") : NULL;
  CHECK_MSG(tiles && json_integer_value(json_object_get(tiles, "total")) == 3 &&
                json_integer_value(json_object_get(tiles, "done")) == 3,
            "tiles %s", tiles ? "wrong" : "missing");
  json_t *d = j ? result_data(&S, j) : NULL;
  CHECK(rows_ok(d, 3001, 3));
  json_decref(d);
  json_decref(j);
}

TEST(api_lists_filters_and_counts_it) {
  resp r = req(&S, "GET", "/v1/info", NULL, NULL);
  json_t *o = resp_json(&r);
  json_t *kinds = json_object_get(o, "kinds");
  int seen = 0;
  size_t i;
  json_t *it;
  json_array_foreach(kinds, i, it) seen |=
      strcmp(json_string_value(it), "twice") == 0;
  CHECK(seen);
  json_decref(o);
  resp_free(&r);
  r = req(&S, "GET", "/v1/jobs?kind=twice", NULL, NULL);
  o = resp_json(&r);
  json_t *list = json_object_get(o, "jobs");
  CHECK(r.status == 200 && json_array_size(list) >= 3);
  json_array_foreach(list, i, it) CHECK_STR(jstr(it, "kind"), "twice");
  json_decref(o);
  resp_free(&r);
  r = req(&S, "GET", "/metrics", NULL, NULL);
  CHECK(r.status == 200 &&
        strstr(r.body, "kind=\"twice\",backend=\"compare\""));
  resp_free(&r);
}

/* After the service stops: its rate and corrections are in the file. */
static void calibration_keeps_it(void) {
  json_error_t je;
  json_t *c = json_load_file(g_calib, 0, &je);
  json_t *rate = json_object_get(json_object_get(c, "rates"), "twice_rows_1");
  CHECK(json_number_value(rate) == TWICE_RATE);
  json_t *corr = json_object_get(json_object_get(c, "corrections"), "twice");
  CHECK(json_is_object(corr));
  json_decref(c);
}

int main(int argc, char **argv) {
  curl_global_init(CURL_GLOBAL_ALL);
  gpu_init(); /* as the daemon: on a GPU machine auto and compare may use it */
  RUN(registered_by_one_line);
  RUN(router_size_rule);
  if (start_service() != 0) {
    CHECK_MSG(0, "the service did not start");
    return check_summary();
  }
  RUN(cost_model_uses_its_terms);
  RUN(auto_runs_and_says_why);
  RUN(bad_params_name_the_field);
  RUN(compare_checks_its_backends);
  RUN(split_into_tiles_and_joined);
  RUN(api_lists_filters_and_counts_it);
  stop_service();
  gpu_shutdown();
  RUN(calibration_keeps_it);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  curl_global_cleanup();
  return check_summary();
}
