/* test_job_text.c — jobs_json (the job written straight to JSON text, the
 * one serialiser every answer uses) against a model built here as a
 * jansson tree from API.md's job object: for jobs in every state and with
 * awkward strings, the text must parse (strictly) to JSON equal to the
 * model, key order included, with and without params.
 * Stored documents are copied verbatim, so a stored 0.012 must come out as
 * "0.012" and parse to the same double the tree holds.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "compute/jobs/jobs.h"
#include "util/buf.h"
#include "util/util.h"

/* ---- the model: the job object of API.md built as a jansson tree -------- */

/* Parse stored JSON text; NULL text or bad JSON gives NULL. */
/* The model of error.field: a message "params.a.b: text" or "output...:
 * text" names the words before its first ": " when they hold no space. */
static json_t *model_field(const char *msg) {
  if (!msg) return json_null();
  if (strncmp(msg, "params.", 7) != 0 && strncmp(msg, "output", 6) != 0)
    return json_null();
  const char *colon = strstr(msg, ": ");
  if (!colon) return json_null();
  for (const char *p = msg; p < colon; p++)
    if (*p == ' ' || *p == '"' || *p == '\'') return json_null();
  return json_stringn(msg, (size_t)(colon - msg));
}

static json_t *loads(const char *text) {
  if (!text || !*text) return NULL;
  return json_loads(text, 0, NULL);
}

static json_t *time_or_null(int64_t ms) {
  if (ms <= 0) return json_null();
  char buf[40];
  return json_string(t_rfc3339(ms, buf, sizeof buf));
}

static json_t *model_job_json(const store_job *j, int with_params) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_string(j->id));
  json_object_set_new(o, "kind", json_string(j->kind ? j->kind : ""));
  json_object_set_new(o, "status", json_string(job_status_name(j->status)));
  json_object_set_new(o, "label", j->label ? json_string(j->label) : json_null());
  json_object_set_new(o, "priority", json_integer(j->priority));
  json_object_set_new(o, "request_id",
                      j->request_id ? json_string(j->request_id) : json_null());
  json_object_set_new(o, "timeout_s", json_real(j->timeout_s));
  json_object_set_new(
      o, "backend",
      json_pack("{s:s, s:o, s:o, s:o}", "requested",
                j->backend_requested ? j->backend_requested : "auto", "used",
                j->backend_used ? json_string(j->backend_used) : json_null(),
                "reason",
                j->backend_reason ? json_string(j->backend_reason)
                                  : json_null(),
                "devices", j->devices ? loads(j->devices) : json_null()));
  json_t *est = loads(j->estimate);
  json_object_set_new(o, "estimate", est ? est : json_null());
  /* The input size (elements, or points for geodesic) for the dashboard's
   * performance chart. */
  json_t *size = est ? json_object_get(est, "size") : NULL;
  json_object_set(o, "size", size ? size : json_null());
  /* A gang member's launch (compute/sched/README.md, "Gangs"): the
   * estimate's own top-level "launch" object. */
  json_t *launch = est ? json_object_get(est, "launch") : NULL;
  json_object_set(o, "launch", json_is_object(launch) ? launch : json_null());
  json_object_set_new(o, "created_at", time_or_null(j->created_at));
  json_object_set_new(o, "started_at", time_or_null(j->started_at));
  json_object_set_new(o, "finished_at", time_or_null(j->finished_at));
  json_t *timings = json_object();
  for (int i = 0; i < JOB_T__COUNT; i++)
    if (j->timings.set & (1u << i))
      json_object_set_new(timings, job_timing_name((job_timing)i),
                          json_real(j->timings.ms[i]));
  json_object_set_new(o, "timings_ms", timings);

  int64_t done = j->progress_done, total = j->progress_total;
  json_object_set_new(o, "progress",
                      json_pack("{s:I, s:I}", "done", (json_int_t)done,
                                "total", (json_int_t)total));
  json_t *res = NULL;
  if (j->result.dtype[0]) {
    json_t *shape = json_array();
    for (int d = 0; d < j->result.ndim; d++)
      json_array_append_new(shape, json_integer(j->result.shape[d]));
    res = json_pack("{s:s, s:o, s:I}", "dtype", j->result.dtype, "shape",
                    shape, "bytes", (json_int_t)j->result.bytes);
    if (j->result.nonconverged > 0)
      json_object_set_new(res, "nonconverged",
                          json_integer(j->result.nonconverged));
  }
  if (res && j->status == JOB_SUCCEEDED) {
    char href[96];
    snprintf(href, sizeof href, "/v1/jobs/%s/result", j->id);
    if (j->output_file)
      json_object_set_new(res, "file", json_string(j->output_file));
    else
      json_object_set_new(res, "href", json_string(href));
    json_object_set_new(o, "result", res);
  } else {
    json_decref(res);
    json_object_set_new(o, "result", json_null());
  }
  json_object_set_new(o, "output",
                      j->output_file
                          ? json_pack("{s:s}", "file", j->output_file)
                          : json_null());
  json_t *cmp = loads(j->compare);
  json_object_set_new(o, "compare", cmp ? cmp : json_null());
  json_object_set_new(o, "max_abs_diff", isnan(j->max_abs_diff)
                                             ? json_null()
                                             : json_real(j->max_abs_diff));
  if (j->error_code)
    json_object_set_new(
        o, "error",
        json_pack("{s:s, s:s, s:o}", "code", j->error_code, "message",
                  j->error_message ? j->error_message : "", "field",
                  model_field(j->error_message)));
  else
    json_object_set_new(o, "error", json_null());
  json_object_set_new(o, "attempts", json_integer(j->attempts));
  json_object_set_new(o, "node", j->node ? json_string(j->node) : json_null());
  if (with_params) {
    json_t *p = loads(j->params);
    json_object_set_new(o, "params", p ? p : json_object());
  }
  return o;
}


static store_job base(void) {
  store_job j;
  memset(&j, 0, sizeof j);
  snprintf(j.id, sizeof j.id, "j_01m7yjgaqf000005ep7bc8rce7");
  j.owner = "";
  j.kind = "map";
  j.params = "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}";
  j.status = JOB_QUEUED;
  j.backend_requested = "auto";
  j.priority = 5;
  j.timeout_s = 600;
  j.created_at = 1795000000123;
  j.estimate = "{\"size\":3,\"work\":6.0,\"out_bytes\":24,\"in_bytes\":24}";
  j.max_abs_diff = NAN;
  return j;
}

/* The keys of an object, in order, as one string. */
static void key_order(json_t *o, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s,", k);
    if (n >= cap) break;
  }
}

static void same(const store_job *j, const char *what) {
  for (int wp = 0; wp < 2; wp++) {
    size_t len = 0;
    char *text = jobs_json(NULL, j, wp, &len);
    CHECK_MSG(text != NULL, "%s: no text", what);
    if (!text) continue;
    CHECK(len == strlen(text));
    json_error_t je;
    json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(a != NULL, "%s: %s in %s", what, je.text, text);
    json_t *b = model_job_json(j, wp);
    CHECK_MSG(a && json_equal(a, b), "%s: %s", what, text);
    if (a && b) {
      char ka[1024], kb[1024];
      key_order(a, ka, sizeof ka);
      key_order(b, kb, sizeof kb);
      CHECK_STR(ka, kb);
    }
    json_decref(a);
    json_decref(b);
    free(text);
  }
}

TEST(test_queued) {
  store_job j = base();
  same(&j, "queued");
  j.estimate = NULL; /* no estimate: size null too */
  j.label = "nightly \"run\"\\ one\n\ttab \x01 é ✓";
  j.request_id = "req-1";
  j.timeout_s = 0.25;
  same(&j, "label and request_id");
  j.params = NULL; /* none stored: {} */
  j.timeout_s = 1e-7;
  same(&j, "no params");
}

TEST(test_succeeded) {
  store_job j = base();
  j.status = JOB_SUCCEEDED;
  j.backend_used = "serial";
  j.backend_reason = "small job (3 elements): serial avoids thread hand-off";
  j.estimate = "{\"size\":3,\"work\":6.0,\"out_dtype\":\"float64\",\"out_shape\":"
               "[3],\"out_bytes\":24,\"in_bytes\":24,\"mem_bytes\":48,\"model\":"
               "\"size-rule\",\"serial_ms\":6e-06,\"cpu_ms\":3e-06,\"cores\":2,"
               "\"gpu_available\":false}";
  j.started_at = 1795000000124;
  j.finished_at = 1795000000125;
  const double ms[JOB_T__COUNT] = {0.012, 0.004, 0.0, 0.001, 0.0, 0.002, 0.1};
  for (int i = 0; i < JOB_T__COUNT; i++)
    job_timings_put(&j.timings, (job_timing)i, ms[i]);
  j.result = (job_result_info){.dtype = "float64", .ndim = 1, .shape = {3},
                               .bytes = 24};
  j.progress_done = j.progress_total = 3;
  j.attempts = 1;
  same(&j, "succeeded");
  j.compare = "[{\"backend\":\"serial\",\"ms\":0.5},{\"backend\":\"cpu\",\"ms\":0.25,"
              "\"threads\":2,\"max_abs_diff\":0.0}]";
  j.max_abs_diff = 3.7e-9;
  j.backend_requested = "compare";
  same(&j, "compare");
  j.result = (job_result_info){.dtype = "float32", .bytes = 4};
  same(&j, "0-d result");
  j.result.nonconverged = 12;
  same(&j, "nonconverged pairs");
  j.result = (job_result_info){.dtype = "float64", .ndim = 3,
                               .shape = {0, 2, 1000000000000LL}, .bytes = 0};
  same(&j, "zero-size result");
  j.max_abs_diff = 0;
  same(&j, "zero diff");
  j.output_file = "/dev/shm/tessel/y \"q\".npy"; /* result: file, no href */
  same(&j, "output file");
  j.output_file = NULL;
  /* a gang member: the scheduler appends "launch" to its estimate */
  j.estimate = "{\"size\":3,\"work\":6.0,\"launch\":{\"shared\":100,"
               "\"first\":\"j_01m7yjgaqf000005ep7bc8rce7\"}}";
  same(&j, "launch");
  /* a file's name that holds the same words is no launch */
  j.estimate = "{\"size\":3,\"files\":[{\"field\":\"params.inputs.x\",\"path\":"
               "\"a,\\\"launch\\\":{\\\"shared\\\":9}}\"}]}";
  same(&j, "launch words in a file name");
  j.estimate = "{\"size\":3,\"files\":[{\"path\":\"x\"}],\"p\":\"a,\\\"launch"
               "\\\":{\\\"shared\\\":9}}\"}";
  same(&j, "launch words last, in a string");
  j.backend_requested = "cuda"; /* a run over three GPUs, one failed */
  j.backend_used = "cuda:0+cuda:2";
  j.devices = "[{\"device\":0,\"rows\":700,\"blocks\":7},{\"device\":1,"
              "\"rows\":0,\"blocks\":0,\"failed\":true},{\"device\":2,"
              "\"rows\":300,\"blocks\":3,\"taken_back\":true}]";
  same(&j, "devices");
}

TEST(test_failed_and_odd) {
  store_job j = base();
  j.status = JOB_FAILED;
  j.error_code = "invalid_argument";
  j.error_message = "params.expr: unknown name 'y' at 4 \"quoted\"";
  j.result = (job_result_info){.dtype = "float64", .ndim = 1, .shape = {3},
                               .bytes = 24}; /* not shown */
  same(&j, "failed");
  j.error_code = "resource_exhausted"; /* a run-time error names its field */
  j.error_message = "params.query.radius.max_pairs: more than 10 pairs within "
                    "r = 2000000 (11 found before stopping)";
  same(&j, "failed at run time, a field");
  j.error_message = "params.x is no field: it has a space";
  same(&j, "no field: a space before the colon");
  j.error_message = "the job ran past its timeout of 1 s";
  same(&j, "no field: not a params path");
  j.status = JOB_CANCELED;
  j.error_code = "canceled";
  j.error_message = NULL;
  same(&j, "canceled, no message");
  j.status = JOB_RUNNING;
  j.started_at = 1795000000200;
  j.progress_done = 48;
  j.progress_total = 64;
  memset(&j.timings, 0, sizeof j.timings);
  job_timings_put(&j.timings, JOB_T_QUEUE, 1e-9);
  job_timings_put(&j.timings, JOB_T_TOTAL, 12345.678);
  j.estimate = "{\"work\":1.0e+20,\"size\":-1}";
  same(&j, "running, odd estimate");
  j.estimate = "{\"work\":5}"; /* no size */
  j.timeout_s = 86400;
  j.priority = 9;
  j.attempts = 3;
  same(&j, "no size");
  j.node = "n_01m7yjgaqf000005ep7bc8rce7"; /* a cluster store's claim */
  same(&j, "claimed by a node");
}

/* The params a submit stores (jobs_params_text, one walk) are the text
 * json_dumps(JSON_COMPACT) and tjson_short_reals wrote before it: for
 * nested objects and arrays in their order, reals short and long, big and
 * small integers, awkward strings, a string holding a NUL and a value
 * deeper than the walk goes (both handed to jansson). */
static void same_params(const char *text, size_t flags) {
  json_error_t err;
  json_t *v = json_loads(text, flags, &err);
  CHECK_MSG(v != NULL, "%s: %s", text, err.text);
  if (!v) return;
  char *raw = json_dumps(v, JSON_COMPACT);
  char *want = raw ? tjson_short_reals(raw, NULL) : NULL;
  char *got = jobs_params_text(v);
  CHECK_MSG(want && got && strcmp(want, got) == 0, "got %s, want %s",
            got ? got : "(null)", want ? want : "(null)");
  free(raw);
  free(want);
  free(got);
  json_decref(v);
}

TEST(test_params_text) {
  same_params("{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}", 0);
  same_params("{\"z\":1,\"a\":2,\"m\":{\"y\":[],\"b\":{}}}", 0);
  same_params("{\"r\":[0.1,1e-06,823.754,1e300,-0.0,2.5e-7,"
              "0.30000000000000004,123456789012345678.0,5e-324,-1.5,3.0]}", 0);
  same_params("{\"i\":[0,-1,9223372036854775807,-9223372036854775808]}", 0);
  same_params("{\"s\":[\"\",\"q\\\"uote\",\"back\\\\slash\","
              "\"nl\\nta\\tb\",\"\\u0001\\u001f\",\"/\",\"\xc3\xa9\xe2\x82\xac\","
              "\"\\ud83d\\ude00\"],\"t\":true,\"f\":false,\"n\":null}", 0);
  same_params("{\"nul\":\"a\\u0000b\",\"k\":[\"\\u0000\"]}", JSON_ALLOW_NUL);
  char deep[400];
  size_t n = 0;
  for (int i = 0; i < 90; i++) deep[n++] = '[';
  n += (size_t)snprintf(deep + n, sizeof deep - n, "0.1");
  for (int i = 0; i < 90; i++) deep[n++] = ']';
  deep[n] = 0;
  same_params(deep, JSON_DECODE_ANY);
}

int main(void) {
  RUN(test_queued);
  RUN(test_succeeded);
  RUN(test_failed_and_odd);
  RUN(test_params_text);
  return check_summary();
}
