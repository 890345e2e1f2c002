/* test_kept_arrays.c — uploaded arrays kept mapped between jobs
 * (compute/array/store_source.h), against the real daemon.
 *
 * The first job that reads a small uploaded array maps it from its file;
 * the jobs after it, and the checks of later submits, read the kept
 * mapping. Checked here: every job over a kept array, one by one and as a
 * batch of 60, gives the first job's result bit for bit (the .npy bytes)
 * and the value computed here; once the array is deleted, or has expired,
 * a job that names it is refused 404 naming its input (never served from
 * what was kept), the same in a batch; the same values uploaded again
 * are a new array and read as before.
 */
#include <math.h>

#include "harness.h"

static srv S, X; /* X: a daemon whose uploads expire after a second */

#define N 500

/* The JSON of N doubles (17 digits: read back exactly) and, in *want,
 * sum(x**2) summed here in order: the service's order of summing is its
 * own, so the value is compared within 1e-12, the jobs' bits exactly. */
static char *values_json(double *want) {
  size_t cap = N * 32 + 8, off = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  off += (size_t)snprintf(s, cap, "[");
  double sum = 0;
  for (int i = 0; i < N; i++) {
    double x = sin(i * 0.37) * 1e3 + 1.0 / (i + 3);
    sum += x * x;
    off += (size_t)snprintf(s + off, cap - off, "%s%.17g", i ? "," : "", x);
  }
  snprintf(s + off, cap - off, "]");
  *want = sum;
  return s;
}

static int upload(srv *s, const char *json, char id[64]) {
  resp r = req(s, "POST", "/v1/arrays", "application/json", json);
  json_t *a = r.status == 201 ? resp_json(&r) : NULL;
  snprintf(id, 64, "%s", a && jstr(a, "id") ? jstr(a, "id") : "");
  json_decref(a);
  long st = r.status;
  resp_free(&r);
  return st == 201 && id[0] ? 0 : -1;
}

static void job_body(char *b, size_t n, const char *array) {
  snprintf(b, n,
           "{\"kind\":\"reduce\",\"backend\":\"cpu\",\"params\":{\"op\":\"sum\","
           "\"expr\":\"x**2\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}}",
           array);
}

/* The 8 bytes of a scalar result as its .npy says them; 0 or -1. */
static int result_bits(srv *s, const char *id, unsigned char out[8]) {
  char path[160];
  snprintf(path, sizeof path, "/v1/jobs/%s/result?format=npy", id);
  resp r = req(s, "GET", path, NULL, NULL);
  int ok = r.status == 200 && r.len >= 8;
  if (ok) memcpy(out, r.body + r.len - 8, 8);
  resp_free(&r);
  return ok ? 0 : -1;
}

/* One job over array id, waited for: its result's bits; 0 or -1. */
static int one_job(srv *s, const char *array, unsigned char bits[8]) {
  char body[256];
  job_body(body, sizeof body, array);
  json_t *j = submit(s, "?wait=20", body, NULL);
  int ok = j && strcmp(jstr(j, "status"), "succeeded") == 0 &&
           result_bits(s, jstr(j, "id"), bits) == 0;
  json_decref(j);
  return ok ? 0 : -1;
}

/* A job over array id is refused 404 naming its input, alone and as a
 * batch's item. */
static void check_refused(srv *s, const char *array, const char *how) {
  char body[256], batch[400];
  job_body(body, sizeof body, array);
  resp r = req(s, "POST", "/v1/jobs", "application/json", body);
  CHECK_MSG(is_error(&r, 404, "not_found", "params.inputs.x"),
            "%s: a job over the array was not refused", how);
  resp_free(&r);
  snprintf(batch, sizeof batch, "{\"jobs\":[%s]}", body);
  r = req(s, "POST", "/v1/jobs:batch", "application/json", batch);
  json_t *o = r.status == 200 ? resp_json(&r) : NULL;
  json_t *err = json_object_get(json_array_get(json_object_get(o, "jobs"), 0),
                                "error");
  CHECK_MSG(err && strcmp(jstr(err, "field"), "jobs[0].params.inputs.x") == 0 &&
                strcmp(jstr(err, "code"), "not_found") == 0,
            "%s: a batch's item over the array was not refused: %.300s", how,
            r.body);
  json_decref(o);
  resp_free(&r);
}

TEST(kept_arrays_give_the_same_bits) {
  double want;
  char *vals = values_json(&want);
  char id[64];
  CHECK(vals && upload(&S, vals, id) == 0);
  unsigned char first[8], again[8];
  CHECK(one_job(&S, id, first) == 0); /* mapped from the file, then kept */
  double v;
  memcpy(&v, first, 8);
  CHECK_MSG(fabs(v - want) <= 1e-12 * want, "sum %.17g, want %.17g", v, want);
  CHECK(one_job(&S, id, again) == 0); /* from the kept mapping */
  CHECK(memcmp(first, again, 8) == 0);

  /* a batch of 60 over it, waited for: every result the same bits */
  size_t cap = 60 * 256 + 64, off = 0;
  char *batch = malloc(cap), body[256];
  job_body(body, sizeof body, id);
  off += (size_t)snprintf(batch, cap, "{\"jobs\":[");
  for (int i = 0; i < 60; i++)
    off += (size_t)snprintf(batch + off, cap - off, "%s%s", i ? "," : "", body);
  snprintf(batch + off, cap - off, "]}");
  resp r = req(&S, "POST", "/v1/jobs:batch?wait=20", "application/json", batch);
  CHECK(r.status == 200);
  json_t *o = resp_json(&r);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) == 60);
  int same = 0;
  for (size_t i = 0; i < json_array_size(jobs); i++) {
    json_t *j = json_array_get(jobs, i);
    unsigned char b[8];
    if (jstr(j, "status") && strcmp(jstr(j, "status"), "succeeded") == 0 &&
        result_bits(&S, jstr(j, "id"), b) == 0 && memcmp(b, first, 8) == 0)
      same++;
  }
  CHECK_MSG(same == 60, "%d of 60 batch results equal the first job's", same);
  json_decref(o);
  resp_free(&r);
  free(batch);

  /* deleted: refused, never read from what was kept */
  char path[128];
  snprintf(path, sizeof path, "/v1/arrays/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 204 || r.status == 200);
  resp_free(&r);
  check_refused(&S, id, "deleted");

  /* the same values again: a new array, read as before */
  char id2[64];
  CHECK(upload(&S, vals, id2) == 0);
  CHECK(strcmp(id, id2) != 0);
  CHECK(one_job(&S, id2, again) == 0);
  CHECK(memcmp(first, again, 8) == 0);
  free(vals);
}

TEST(an_expired_kept_array_is_not_found) {
  double want;
  char *vals = values_json(&want);
  char id[64];
  CHECK(vals && upload(&X, vals, id) == 0);
  free(vals);
  unsigned char b[8];
  CHECK(one_job(&X, id, b) == 0);
  CHECK(one_job(&X, id, b) == 0); /* kept now */
  /* TTL 1 s: wait for its expiry (a state, bounded at 60 s) */
  char path[128];
  snprintf(path, sizeof path, "/v1/arrays/%s", id);
  int gone = 0;
  for (int i = 0; i < 600 && !gone; i++) {
    usleep(100000);
    resp r = req(&X, "GET", path, NULL, NULL);
    gone = r.status == 404;
    resp_free(&r);
  }
  CHECK(gone);
  check_refused(&X, id, "expired");
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_kept_arrays <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  if (srv_start(&X, argv[1], "--threads", "1", "--result-ttl", "1", NULL) != 0)
    return 1;
  RUN(kept_arrays_give_the_same_bits);
  RUN(an_expired_kept_array_is_not_found);
  srv_cleanup(&S);
  srv_cleanup(&X);
  curl_global_cleanup();
  return check_summary();
}
