/* test_errors.c — every error status of API.md, each with its JSON body
 * (code and field), and a check that bad input leaves the store as it was
 * (no job recorded, the service still answering).
 */
#include "harness.h"

static srv S;

static long job_count(void) {
  resp r = req(&S, "GET", "/v1/jobs?limit=1000", NULL, NULL);
  json_t *o = resp_json(&r);
  long n = o ? (long)json_array_size(json_object_get(o, "jobs")) : -1;
  json_decref(o);
  resp_free(&r);
  return n;
}

static int post_job_error(const char *body, long status, const char *code,
                          const char *field) {
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  int ok = is_error(&r, status, code, field);
  resp_free(&r);
  return ok;
}

TEST(not_found_and_method) {
  /* an unknown endpoint in the API's space says so, whatever the method,
   * never "no file" (the dashboard's files are not searched there) */
  const char *nope[][2] = {{"GET", "/v1/nope"}, {"POST", "/v1/nope/x"},
                           {"GET", "/v1"}};
  for (int i = 0; i < 3; i++) {
    resp r = req(&S, nope[i][0], nope[i][1], NULL, NULL);
    CHECK(is_error(&r, 404, "not_found", "path"));
    CHECK_MSG(r.body && strstr(r.body, "no such endpoint") &&
                  !strstr(r.body, "no file"),
              "%s %s: %s", nope[i][0], nope[i][1], r.body ? r.body : "");
    resp_free(&r);
  }
  resp r;
  r = req(&S, "PUT", "/v1/jobs", "application/json", "{}");
  CHECK(is_error(&r, 405, "method_not_allowed", NULL));
  char allow[128];
  CHECK(resp_header_get(&r, "Allow", allow, sizeof allow) && strstr(allow, "GET") &&
        strstr(allow, "POST"));
  resp_free(&r);
  r = req(&S, "GET", "/v1/jobs/j_0000000000000000000000000a", NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
  r = req(&S, "GET", "/v1/jobs/not-an-id", NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
  r = req(&S, "GET", "/v1/arrays/a_0000000000000000000000000a", NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
}

TEST(bad_bodies) {
  long before = job_count();
  CHECK(post_job_error("{not json", 400, "invalid_argument", "body"));
  CHECK(post_job_error("[1,2]", 400, "invalid_argument", "body"));
  CHECK(post_job_error("{\"kind\":\"map\",\"kind\":\"map\",\"params\":{}}", 400,
                       "invalid_argument", "body"));
  CHECK(post_job_error("{\"params\":{}}", 400, "invalid_argument", "kind"));
  CHECK(post_job_error("{\"kind\":\"fft\",\"params\":{}}", 400, "invalid_argument", "kind"));
  CHECK(post_job_error("{\"kind\":\"map\",\"colour\":1,\"params\":{}}", 400,
                       "invalid_argument", "colour"));
  CHECK(post_job_error("{\"kind\":\"map\",\"backend\":\"tpu\",\"params\":{}}", 400,
                       "invalid_argument", "backend"));
  CHECK(post_job_error("{\"kind\":\"map\",\"priority\":99,\"params\":{}}", 400,
                       "invalid_argument", "priority"));
  CHECK(post_job_error("{\"kind\":\"map\",\"timeout_s\":-1,\"params\":{}}", 400,
                       "invalid_argument", "timeout_s"));
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":3}", 400, "invalid_argument", "params"));
  /* The expression error names the field and the position. */
  resp r = req(&S, "POST", "/v1/jobs", "application/json",
               "{\"kind\":\"map\",\"params\":{\"expr\":\"x + y\",\"inputs\":{\"x\":[1]}}}");
  CHECK(is_error(&r, 400, "invalid_argument", "params.expr"));
  json_t *o = resp_json(&r);
  json_t *err = json_object_get(o, "error");
  CHECK(json_integer_value(json_object_get(err, "position")) == 4);
  CHECK(strstr(jstr(err, "message"), "unknown name 'y' at 4") != NULL);
  json_decref(o);
  resp_free(&r);
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":{\"expr\":\"x +* 2\",\"inputs\":{\"x\":[1]}}}",
                       400, "invalid_argument", "params.expr"));
  /* Ragged and non-numeric arrays, NaN where not allowed, bad shapes. */
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":[[1,2],[3]]}}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":[1,\"a\"]}}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":{\"expr\":\"x+y\",\"inputs\":{\"x\":[1,2,3],\"y\":[1,2]}}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"matmul\",\"params\":{\"a\":[[1,2]],\"b\":[[1,2]]}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"geodesic\",\"params\":{\"points\":[[91,0],[0,0]]}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"reduce\",\"params\":{\"op\":\"median\",\"inputs\":{\"x\":[1]}}}",
                       400, "invalid_argument", NULL));
  CHECK(post_job_error("{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":{\"array\":\"a_0000000000000000000000000a\"}}}}",
                       404, "not_found", NULL));
  /* No GPU here (CI): cuda is 503. On a GPU machine this test is skipped. */
  if (!srv_has_gpu(&S))
    CHECK(post_job_error("{\"kind\":\"map\",\"backend\":\"cuda\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":[1]}}}",
                         503, "unavailable", NULL));
  /* A result over --max-result: 413 before any work. */
  CHECK(post_job_error("{\"kind\":\"geodesic\",\"params\":{\"points\":{\"random\":{\"shape\":[200000,2],\"seed\":1}}}}",
                       413, "payload_too_large", NULL));
  CHECK(job_count() == before);
  r = req(&S, "GET", "/v1/jobs?status=done", NULL, NULL);
  CHECK(is_error(&r, 400, "invalid_argument", "status"));
  resp_free(&r);
  r = req(&S, "GET", "/v1/jobs?limit=0", NULL, NULL);
  CHECK(is_error(&r, 400, "invalid_argument", "limit"));
  resp_free(&r);
  r = req(&S, "POST", "/v1/jobs?wait=600", "application/json", "{}");
  CHECK(is_error(&r, 400, "invalid_argument", "wait"));
  resp_free(&r);
}

TEST(uploads) {
  resp r = req(&S, "POST", "/v1/arrays", "image/png", "xxxx");
  CHECK(is_error(&r, 415, "unsupported_media_type", NULL));
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays", "text/csv", "1,2\n3,abc\n");
  CHECK(is_error(&r, 400, "invalid_argument", NULL));
  CHECK(strstr(r.body, "row") != NULL);
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays", "text/csv", "1,2\n3,nan\n");
  CHECK(is_error(&r, 400, "invalid_argument", NULL));
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays", "text/csv", "1,2\n3\n");
  CHECK(is_error(&r, 400, "invalid_argument", NULL));
  resp_free(&r);
  r = req(&S, "POST", "/v1/arrays", "application/json", "[[1,2],[3]]");
  CHECK(is_error(&r, 400, "invalid_argument", NULL));
  resp_free(&r);
  /* A .npy whose header claims 4 doubles but carries 2. */
  char buf[256];
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }";
  size_t hl = 118; /* 10 + 118 = 128 */
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)hl;
  buf[9] = 0;
  memset(buf + 10, ' ', hl);
  memcpy(buf + 10, dict, strlen(dict));
  buf[10 + hl - 1] = '\n';
  memset(buf + 10 + hl, 0, 16);
  r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", buf, (long)(10 + hl + 16), NULL);
  CHECK(is_error(&r, 400, "invalid_argument", NULL));
  resp_free(&r);
  r = req(&S, "GET", "/v1/arrays", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(json_array_size(json_object_get(o, "arrays")) == 0); /* nothing stored */
  json_decref(o);
  resp_free(&r);
}

TEST(body_cap_413) {
  /* --max-body is 65536 here: a bigger declared body is refused unread. */
  size_t n = 200000;
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  big[0] = '{';
  big[n - 1] = '}';
  big[n] = 0;
  resp r = req(&S, "POST", "/v1/jobs", "application/json", big);
  CHECK(is_error(&r, 413, "payload_too_large", NULL));
  resp_free(&r);
  free(big);
}

TEST(not_acceptable) {
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":"
                     "{\"random\":{\"shape\":[2,2,2],\"seed\":1}}}}}", NULL);
  CHECK(j != NULL);
  char path[160];
  snprintf(path, sizeof path, "%s", j ? jstr(json_object_get(j, "result"), "href") : "/");
  resp r = reqx(&S, "GET", path, NULL, NULL, -1, "Accept: image/png", NULL);
  CHECK(is_error(&r, 406, "not_acceptable", NULL));
  resp_free(&r);
  r = reqx(&S, "GET", path, NULL, NULL, -1, "Accept: text/csv", NULL); /* 3-D */
  CHECK(is_error(&r, 406, "not_acceptable", NULL));
  resp_free(&r);
  json_decref(j);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_errors <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", "--max-body", "65536",
                "--max-result", "100000000", NULL) != 0)
    return 1;
  RUN(not_found_and_method);
  RUN(bad_bodies);
  RUN(uploads);
  RUN(body_cap_413);
  RUN(not_acceptable);
  resp r = req(&S, "GET", "/healthz", NULL, NULL); /* still serving */
  CHECK(r.status == 200);
  resp_free(&r);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
