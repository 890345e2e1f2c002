/* test_job_text.c — api_job_text (the job written straight to JSON text)
 * against api_job_json (the jansson tree the listings use): for jobs in
 * every state and with awkward strings, the text must parse (strictly) to
 * JSON equal to the tree, key order included, with and without params.
 * Stored documents are copied verbatim, so a stored 0.012 must come out as
 * "0.012" and parse to the same double the tree holds.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "api/api_int.h"
#include "check.h"

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
    char *text = api_job_text(NULL, j, wp, &len);
    CHECK_MSG(text != NULL, "%s: no text", what);
    if (!text) continue;
    CHECK(len == strlen(text));
    json_error_t je;
    json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(a != NULL, "%s: %s in %s", what, je.text, text);
    json_t *b = api_job_json(NULL, j, wp);
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
  j.timings = "{\"queue\":0.012,\"prepare\":0.004,\"h2d\":0.0,\"compute\":0.001,"
              "\"d2h\":0.0,\"store\":0.002,\"total\":0.1}";
  j.result = "{\"dtype\":\"float64\",\"shape\":[3],\"bytes\":24}";
  j.progress_done = j.progress_total = 3;
  j.attempts = 1;
  same(&j, "succeeded");
  j.compare = "[{\"backend\":\"serial\",\"ms\":0.5},{\"backend\":\"cpu\",\"ms\":0.25,"
              "\"threads\":2,\"max_abs_diff\":0.0}]";
  j.max_abs_diff = 3.7e-9;
  j.backend_requested = "compare";
  same(&j, "compare");
  j.result = "{}";
  same(&j, "empty result object");
  j.max_abs_diff = 0;
  same(&j, "zero diff");
}

TEST(test_failed_and_odd) {
  store_job j = base();
  j.status = JOB_FAILED;
  j.error_code = "invalid_argument";
  j.error_message = "params.expr: unknown name 'y' at 4 \"quoted\"";
  j.result = "{\"dtype\":\"float64\",\"shape\":[3],\"bytes\":24}"; /* not shown */
  same(&j, "failed");
  j.status = JOB_CANCELED;
  j.error_code = "canceled";
  j.error_message = NULL;
  same(&j, "canceled, no message");
  j.status = JOB_RUNNING;
  j.started_at = 1795000000200;
  j.progress_done = 48;
  j.progress_total = 64;
  j.timings = NULL;
  j.estimate = "{\"work\":1.0e+20,\"size\":-1}";
  same(&j, "running, odd estimate");
  j.estimate = "{\"work\":5}"; /* no size */
  j.timeout_s = 86400;
  j.priority = 9;
  j.attempts = 3;
  same(&j, "no size");
}

int main(void) {
  RUN(test_queued);
  RUN(test_succeeded);
  RUN(test_failed_and_odd);
  return check_summary();
}
