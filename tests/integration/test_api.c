/* test_api.c — every route of API.md against the real daemon: the seeds'
 * examples end to end, results in every format, arrays, listing, compare,
 * the service routes. Error statuses live in test_errors.c; auth, limits
 * and recovery in their own files.
 *
 * Accuracy: map/reduce/matmul results are checked against values computed
 * here in double precision, to 1e-12 relative (float64 jobs).
 */
#include <math.h>

#include "harness.h"

static srv S;

static double num(json_t *v) { return json_number_value(v); }

TEST(service_routes) {
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  char rid[80];
  CHECK(resp_header_get(&r, "X-Request-Id", rid, sizeof rid) != NULL);
  resp_free(&r);

  r = reqx(&S, "GET", "/healthz", NULL, NULL, -1, "X-Request-Id: my-req-1", NULL);
  CHECK(resp_header_get(&r, "X-Request-Id", rid, sizeof rid) &&
        strcmp(rid, "my-req-1") == 0);
  resp_free(&r);

  r = req(&S, "GET", "/readyz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);

  r = req(&S, "GET", "/openapi.json", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(r.status == 200 && o && json_object_get(o, "paths") &&
        json_object_get(json_object_get(o, "paths"), "/v1/jobs"));
  json_decref(o);
  resp_free(&r);

  r = req(&S, "GET", "/v1/devices", NULL, NULL);
  o = resp_json(&r);
  CHECK(r.status == 200 && o);
  CHECK(json_integer_value(json_object_get(json_object_get(o, "cpu"), "threads")) >= 1);
  json_t *cuda = json_object_get(o, "cuda");
  CHECK(json_is_boolean(json_object_get(cuda, "available")));
  if (!json_is_true(json_object_get(cuda, "available")))
    CHECK(strlen(jstr(cuda, "reason")) > 0);
  json_decref(o);
  resp_free(&r);
}

TEST(map_seed_square_polynomial) {
  /* x**2 + 2*x + 1 over arange(0, 100000): (x+1)^2 exactly. */
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":"
                     "\"x**2 + 2*x + 1\",\"inputs\":{\"x\":{\"range\":{\"start\":0,"
                     "\"stop\":100000}}}}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *res = json_object_get(j, "result");
  CHECK(json_integer_value(json_array_get(json_object_get(res, "shape"), 0)) == 100000);
  CHECK(strcmp(jstr(res, "dtype"), "float64") == 0);
  CHECK(json_integer_value(json_object_get(res, "bytes")) == 800000);
  json_t *t = json_object_get(j, "timings_ms");
  CHECK(json_is_number(json_object_get(t, "compute")) &&
        json_is_number(json_object_get(t, "total")));
  CHECK(strcmp(jstr(json_object_get(j, "backend"), "used"), "cpu") == 0);

  char path[160];
  snprintf(path, sizeof path, "%s?limit_rows=5", jstr(res, "href"));
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *o = resp_json(&r);
  json_t *data = json_object_get(o, "data");
  CHECK(r.status == 200 && json_array_size(data) == 5);
  for (int i = 0; i < 5; i++) CHECK(num(json_array_get(data, i)) == (double)((i + 1) * (i + 1)));
  json_decref(o);
  resp_free(&r);

  /* The whole result as .npy: header then 100000 doubles. */
  snprintf(path, sizeof path, "%s?format=npy", jstr(res, "href"));
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200 && r.len > 128 && memcmp(r.body, "\x93NUMPY", 6) == 0);
  size_t hl = (unsigned char)r.body[8] | ((unsigned char)r.body[9] << 8);
  CHECK(r.len == 10 + hl + 800000);
  if (r.len == 10 + hl + 800000) {
    const double *d = (const double *)(r.body + 10 + hl);
    int bad = 0;
    for (int i = 0; i < 100000; i++) bad += d[i] != (double)(i + 1) * (i + 1);
    CHECK(bad == 0);
  }
  resp_free(&r);

  /* CSV through Accept. */
  snprintf(path, sizeof path, "%s?limit_rows=3", jstr(res, "href"));
  r = reqx(&S, "GET", path, NULL, NULL, -1, "Accept: text/csv", NULL);
  CHECK(r.status == 200 && strcmp(r.body, "1\n4\n9\n") == 0);
  resp_free(&r);

  /* A one-array result lists no parts, and /result/{name} is 404 naming
   * the part (field "name"), a name that cannot be a part's too. */
  CHECK(json_object_get(res, "parts") == NULL);
  snprintf(path, sizeof path, "%s/index?format=npy", jstr(res, "href"));
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "name") && strstr(r.body, "'index'"));
  resp_free(&r);
  snprintf(path, sizeof path, "%s/No%%2F..", jstr(res, "href"));
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "name"));
  resp_free(&r);
  json_decref(j);
}

TEST(map_seed_linear_equations) {
  /* -b/a with broadcasting: a is [3,1], b is [4]. */
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"-b/a\",\"inputs\":"
                     "{\"a\":[[1],[2],[4]],\"b\":[2,3,4,5]}}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *data = result_data(&S, j);
  CHECK(json_array_size(data) == 3 && json_array_size(json_array_get(data, 0)) == 4);
  double a[3] = {1, 2, 4}, b[4] = {2, 3, 4, 5};
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 4; k++)
      CHECK(num(json_array_get(json_array_get(data, i), k)) == -b[k] / a[i]);
  json_decref(data);
  json_decref(j);
}

TEST(reduce_sum_of_squares_per_dataset) {
  /* 100 datasets of 1000 values: row i holds i*1000 .. i*1000+999. */
  json_t *j = submit(&S, "?wait=30",
             "{\"kind\":\"reduce\",\"backend\":\"cpu\",\"params\":{\"op\":\"sum\","
             "\"expr\":\"x**2\",\"inputs\":{\"x\":{\"random\":{\"shape\":[100,1000],"
             "\"dist\":\"uniform\",\"low\":1,\"high\":2,\"seed\":7}}},\"axis\":1}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *shape = json_object_get(json_object_get(j, "result"), "shape");
  CHECK(json_array_size(shape) == 1 && json_integer_value(json_array_get(shape, 0)) == 100);
  json_t *data = result_data(&S, j);
  /* Each sum of 1000 squares of values in [1,2) lies in [1000, 4000). */
  int ok = json_array_size(data) == 100;
  for (size_t i = 0; ok && i < 100; i++) {
    double v = num(json_array_get(data, i));
    ok = v >= 1000 && v < 4000;
  }
  CHECK(ok);
  json_decref(data);
  json_decref(j);

  /* A whole-array mean of a known range: mean(0..999) = 499.5. */
  j = submit(&S, "?wait=30",
             "{\"kind\":\"reduce\",\"params\":{\"op\":\"mean\",\"inputs\":{\"x\":"
             "{\"range\":{\"start\":0,\"stop\":1000}}}}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  data = result_data(&S, j);
  CHECK(data && fabs(num(data) - 499.5) < 1e-12);
  json_decref(data);
  json_decref(j);
}

/* An uploaded array's id (JSON, in `dtype`), or NULL. */
static char *upload_json(const char *dtype, const char *body) {
  char path[64];
  snprintf(path, sizeof path, "/v1/arrays?dtype=%s", dtype);
  resp r = req(&S, "POST", path, "application/json", body);
  json_t *a = resp_json(&r);
  char *id = a && jstr(a, "id") ? strdup(jstr(a, "id")) : NULL;
  json_decref(a);
  resp_free(&r);
  return id;
}

/* The result dtype of a job (params as JSON text, %s the float32 array, %s
 * the float64 one), on `backend`; "" when it did not succeed. */
static const char *dtype_of(const char *backend, const char *fmt,
                            const char *x32, const char *y64, char *out,
                            size_t cap) {
  char params[512], body[700];
  snprintf(params, sizeof params, fmt, x32, y64);
  snprintf(body, sizeof body, "{%s,\"backend\":\"%s\"}", params, backend);
  json_t *j = submit(&S, "?wait=30", body, NULL);
  const char *dt = j ? jstr(json_object_get(j, "result"), "dtype") : NULL;
  snprintf(out, cap, "%s", j && !strcmp(jstr(j, "status"), "succeeded") && dt ? dt : "");
  if (!*out) fprintf(stderr, "  %s: %s\n", body, j ? json_dumps(j, 0) : "(no answer)");
  json_decref(j);
  return out;
}

TEST(result_dtypes_as_numpy) {
  /* Without "dtype", a job's dtype is NumPy's promotion of its inputs: a
   * float32 array stays float32 with numbers (weak Python scalars) and
   * with other float32 arrays; a float64 array (an upload, an inline list,
   * a range) makes it float64; argmin/argmax are int64; "dtype" still
   * decides when given. On serial and cpu, and cuda where there is a GPU. */
  char *x = upload_json("float32", "[[1.5, -2.5, 3.25], [4, 5, -6]]");
  char *y = upload_json("float64", "[0.5, 0.25, 0.125]");
  CHECK(x && y);
  if (!x || !y) return;
  static const struct {
    const char *params, *want;
  } cases[] = {
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}%.0s",
       "float32"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x*c + 1.5\",\"inputs\":{\"x\":{\"array\":\"%s\"},"
       "\"c\":2.5}}%.0s", "float32"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x*x\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}%.0s",
       "float32"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x + y\",\"inputs\":{\"x\":{\"array\":\"%s\"},"
       "\"y\":{\"array\":\"%s\"}}}", "float64"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x + y\",\"inputs\":{\"x\":{\"array\":\"%s\"},"
       "\"y\":[1, 2, 3]}}%.0s", "float64"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x + y\",\"inputs\":{\"x\":{\"array\":\"%s\"},"
       "\"y\":{\"range\":{\"stop\":3}}}}%.0s", "float64"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"dtype\":\"float64\",\"inputs\":{\"x\":"
       "{\"array\":\"%s\"}}}%.0s", "float64"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"y*2\",\"dtype\":\"float32\",\"inputs\":{\"y\":"
       "{\"array\":\"%.0s%s\"}}}", "float32"},
      {"\"kind\":\"map\",\"params\":{\"expr\":\"2*c\",\"inputs\":{\"c\":3}}%.0s%.0s", "float64"},
      {"\"kind\":\"reduce\",\"params\":{\"op\":\"sum\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}%.0s",
       "float32"},
      {"\"kind\":\"reduce\",\"params\":{\"op\":\"mean\",\"axis\":1,\"inputs\":{\"x\":{\"array\":"
       "\"%s\"}}}%.0s", "float32"},
      {"\"kind\":\"reduce\",\"params\":{\"op\":\"argmax\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}"
       "%.0s", "int64"},
      {"\"kind\":\"reduce\",\"params\":{\"op\":\"argmin\",\"axis\":0,\"inputs\":{\"x\":{\"array\":"
       "\"%s\"}}}%.0s", "int64"},
      {"\"kind\":\"matmul\",\"params\":{\"a\":{\"array\":\"%s\"},\"b\":{\"array\":\"%s\"}}",
       "float64"},
  };
  char got[16];
  /* with a GPU, cuda too: its kernels take the plan's dtype (map.cu,
   * reduce.cu's int64 argmin/argmax store, matmul.cu's float32 GEMM) */
  const char *backends[] = {"serial", "cpu", "cuda"};
  int nb = srv_has_gpu(&S) ? 3 : 2;
  for (int b = 0; b < nb; b++)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      CHECK_MSG(!strcmp(dtype_of(backends[b], cases[i].params, x, y, got, sizeof got),
                        cases[i].want),
                "%s case %zu: %s, want %s", backends[b], i, got, cases[i].want);
  /* the values: argmax of x is its flat index 4, as an integer */
  json_t *j = submit(&S, "?wait=30", "{\"kind\":\"reduce\",\"params\":{\"op\":\"argmax\","
                     "\"inputs\":{\"x\":[[1.5,-2.5,3.25],[4,5,-6]]}}}", NULL);
  json_t *d = j ? result_data(&S, j) : NULL;
  CHECK(d && json_is_integer(d) && json_integer_value(d) == 4);
  json_decref(d);
  json_decref(j);
  /* float32 @ float32 is float32 (x is 2 x 3, its rows as a 3 x 2) */
  char *w = upload_json("float32", "[[1, 2], [3, 4], [5, 6]]");
  CHECK(w && !strcmp(dtype_of("cpu", "\"kind\":\"matmul\",\"params\":{\"a\":{\"array\":\"%s\"},"
                              "\"b\":{\"array\":\"%s\"}}", x, w, got, sizeof got),
                     "float32"));
  free(w);
  free(x);
  free(y);
}

TEST(matmul_w_x_plus_b) {
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"matmul\",\"params\":{\"a\":[[1,2],[3,4]],\"b\":"
                     "[[5,6],[7,8]],\"bias\":[[1],[2]]}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *d = result_data(&S, j);
  /* [[19,22],[43,50]] + [[1],[2]] */
  CHECK(num(json_array_get(json_array_get(d, 0), 0)) == 20);
  CHECK(num(json_array_get(json_array_get(d, 0), 1)) == 23);
  CHECK(num(json_array_get(json_array_get(d, 1), 0)) == 45);
  CHECK(num(json_array_get(json_array_get(d, 1), 1)) == 52);
  json_decref(d);
  json_decref(j);
}

TEST(geodesic_matrix_layouts) {
  /* Three points; distances checked for symmetry, zero diagonal, and the
   * condensed layout equal to the upper triangle. (Accuracy against
   * GeographicLib is tests/unit/test_geodesic_accuracy.c.) */
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"geodesic\",\"params\":{\"points\":[[0,0],[0,1],"
                     "[51.5,-0.12]]}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *d = result_data(&S, j);
  CHECK(json_array_size(d) == 3);
  for (int i = 0; i < 3; i++) {
    CHECK(num(json_array_get(json_array_get(d, i), i)) == 0);
    for (int k = 0; k < 3; k++)
      CHECK(num(json_array_get(json_array_get(d, i), k)) ==
            num(json_array_get(json_array_get(d, k), i)));
  }
  /* One degree of longitude on the equator of WGS84: a*pi/180. */
  CHECK(fabs(num(json_array_get(json_array_get(d, 0), 1)) - 111319.49079327357) < 1e-6);
  json_t *c = result_data_at(&S, j, "?layout=condensed");
  CHECK(json_array_size(c) == 3);
  CHECK(num(json_array_get(c, 0)) == num(json_array_get(json_array_get(d, 0), 1)));
  CHECK(num(json_array_get(c, 1)) == num(json_array_get(json_array_get(d, 0), 2)));
  CHECK(num(json_array_get(c, 2)) == num(json_array_get(json_array_get(d, 1), 2)));
  json_decref(c);
  json_decref(d);
  json_decref(j);
}

TEST(arrays_upload_use_download_delete) {
  /* CSV upload with a header line. */
  resp r = req(&S, "POST", "/v1/arrays", "text/csv", "a,b\n1,2\n3,4\n5,6\n");
  json_t *a = resp_json(&r);
  CHECK(r.status == 201 && a);
  char id[64];
  snprintf(id, sizeof id, "%s", a ? jstr(a, "id") : "");
  CHECK(json_integer_value(json_array_get(json_object_get(a, "shape"), 0)) == 3);
  CHECK(json_integer_value(json_array_get(json_object_get(a, "shape"), 1)) == 2);
  /* The content id names its hash: XXH3-128, 32 hex digits. */
  CHECK(strncmp(jstr(a, "digest"), "xxh3-128:", 9) == 0 &&
        strlen(jstr(a, "digest")) == 9 + 32 &&
        strspn(jstr(a, "digest") + 9, "0123456789abcdef") == 32);
  json_decref(a);
  resp_free(&r);

  /* The same bytes again: the same id, 200. */
  r = req(&S, "POST", "/v1/arrays", "text/csv", "a,b\n1,2\n3,4\n5,6\n");
  a = resp_json(&r);
  CHECK(r.status == 200 && a && strcmp(jstr(a, "id"), id) == 0);
  json_decref(a);
  resp_free(&r);

  /* JSON upload, then .npy upload of what we downloaded. */
  r = req(&S, "POST", "/v1/arrays?dtype=float32", "application/json", "[1.5, 2.5, 3.5]");
  a = resp_json(&r);
  CHECK(r.status == 201 && a && strcmp(jstr(a, "dtype"), "float32") == 0);
  json_decref(a);
  resp_free(&r);

  char path[160], body[512];
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200 && memcmp(r.body, "\x93NUMPY", 6) == 0);
  resp r2 = reqx(&S, "POST", "/v1/arrays", "application/x-npy", r.body, (long)r.len, NULL);
  a = resp_json(&r2);
  CHECK(r2.status == 200 && a && strcmp(jstr(a, "id"), id) == 0); /* same content */
  json_decref(a);
  resp_free(&r2);
  resp_free(&r);

  /* Use it in a job: sum of a*b over rows -> [2, 12, 30]. */
  snprintf(body, sizeof body,
           "{\"kind\":\"reduce\",\"params\":{\"op\":\"sum\",\"expr\":\"m*m\","
           "\"inputs\":{\"m\":{\"array\":\"%s\"}},\"axis\":1}}", id);
  json_t *j = submit(&S, "?wait=30", body, NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *d = result_data(&S, j);
  CHECK(num(json_array_get(d, 0)) == 5 && num(json_array_get(d, 1)) == 25 &&
        num(json_array_get(d, 2)) == 61);
  json_decref(d);
  /* auto's estimate, submit -> stored in parts: the upload is read
   * through its file's mapping (a read term however small), the three
   * sums fit the store row (no store term). */
  json_t *est = json_object_get(j, "estimate");
  CHECK(strcmp(jstr(est, "model"), "calibrated") == 0);
  json_t *ps = json_object_get(json_object_get(est, "parts_ms"), "serial");
  CHECK(num(json_object_get(ps, "read")) > 0);
  CHECK(num(json_object_get(ps, "fixed")) > 0);
  CHECK(json_is_number(json_object_get(ps, "store")) &&
        num(json_object_get(ps, "store")) == 0);
  CHECK(num(json_object_get(est, "serial_ms")) > 0); /* corrected: any size */
  json_decref(j);

  snprintf(path, sizeof path, "/v1/arrays/%s", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "GET", "/v1/arrays", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(json_array_size(json_object_get(o, "arrays")) >= 2);
  json_decref(o);
  resp_free(&r);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
}

TEST(list_filters_and_cursor) {
  for (int i = 0; i < 5; i++) {
    json_t *j = submit(&S, "?wait=30",
                       "{\"kind\":\"map\",\"label\":\"page-test\",\"backend\":\"serial\","
                       "\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}}", NULL);
    CHECK(j != NULL);
    json_decref(j);
  }
  resp r = req(&S, "GET", "/v1/jobs?label=page-test&limit=2", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(r.status == 200 && json_array_size(json_object_get(o, "jobs")) == 2);
  const char *cur = jstr(o, "next_cursor");
  CHECK(cur != NULL);
  char path[200];
  int seen = 2, pages = 1;
  char prev_last[64] = "";
  snprintf(prev_last, sizeof prev_last, "%s",
           jstr(json_array_get(json_object_get(o, "jobs"), 1), "id"));
  while (cur && pages < 10) {
    snprintf(path, sizeof path, "/v1/jobs?label=page-test&limit=2&cursor=%s", cur);
    resp r2 = req(&S, "GET", path, NULL, NULL);
    json_t *o2 = resp_json(&r2);
    json_t *jobs = json_object_get(o2, "jobs");
    seen += (int)json_array_size(jobs);
    /* Newest first: every id on this page sorts before the previous one. */
    if (json_array_size(jobs))
      CHECK(strcmp(jstr(json_array_get(jobs, 0), "id"), prev_last) < 0);
    json_decref(o);
    o = o2;
    cur = jstr(o, "next_cursor");
    resp_free(&r2);
    pages++;
  }
  CHECK(seen == 5);
  json_decref(o);
  resp_free(&r);

  r = req(&S, "GET", "/v1/jobs?status=succeeded&kind=map&backend=serial&limit=100", NULL, NULL);
  o = resp_json(&r);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(json_array_size(jobs) >= 5);
  size_t i;
  json_t *it;
  json_array_foreach(jobs, i, it) {
    CHECK(strcmp(jstr(it, "status"), "succeeded") == 0);
    CHECK(strcmp(jstr(it, "kind"), "map") == 0);
  }
  json_decref(o);
  resp_free(&r);
}

TEST(compare_records_every_backend) {
  json_t *j = submit(&S, "?wait=60",
                     "{\"kind\":\"map\",\"backend\":\"compare\",\"params\":{\"expr\":"
                     "\"sin(x)*exp(-x)\",\"inputs\":{\"x\":{\"random\":{\"shape\":[200000],"
                     "\"seed\":3}}}}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *cmp = json_object_get(j, "compare");
  CHECK(json_array_size(cmp) >= 2);
  int serial = 0, cpu = 0;
  size_t i;
  json_t *it;
  json_array_foreach(cmp, i, it) {
    if (strcmp(jstr(it, "backend"), "serial") == 0) serial = 1;
    if (strcmp(jstr(it, "backend"), "cpu") == 0) cpu = 1;
    CHECK(json_number_value(json_object_get(it, "ms")) > 0);
  }
  CHECK(serial && cpu);
  CHECK(json_is_number(json_object_get(j, "max_abs_diff")));
  CHECK(json_number_value(json_object_get(j, "max_abs_diff")) <= 1e-12);
  json_decref(j);
}

TEST(idempotent_request_id) {
  const char *body = "{\"kind\":\"map\",\"request_id\":\"idem-1\",\"params\":{\"expr\":"
                     "\"x*2\",\"inputs\":{\"x\":[1,2]}}}";
  json_t *a = submit(&S, "", body, NULL);
  json_t *b = submit(&S, "", body, NULL);
  CHECK(a && b && strcmp(jstr(a, "id"), jstr(b, "id")) == 0);
  json_decref(a);
  json_decref(b);
  resp r = req(&S, "POST", "/v1/jobs", "application/json",
               "{\"kind\":\"map\",\"request_id\":\"idem-1\",\"params\":{\"expr\":"
               "\"x*3\",\"inputs\":{\"x\":[1,2]}}}");
  CHECK(is_error(&r, 409, "conflict", NULL));
  resp_free(&r);
}

/* Without ?wait a submit is 202 Accepted as documented, even when a tiny
 * job has already ended before the answer is built (it was a 200 then). */
TEST(submit_without_wait_is_202) {
  int n202 = 0;
  for (int i = 0; i < 100; i++) {
    resp r = req(&S, "POST", "/v1/jobs", "application/json",
                 "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":\"x+1\","
                 "\"inputs\":{\"x\":[1]}}}");
    n202 += r.status == 202;
    resp_free(&r);
    if (i % 10 == 0) usleep(20000); /* let some finish before the next answer */
  }
  CHECK_MSG(n202 == 100, "%d of 100 answered 202", n202);
}

/* GET /v1/jobs/{id}?wait=S waits like a submit's ?wait (200 however the
 * job stands when it answers); a bad wait is 400 naming it. */
TEST(get_waits_for_the_end) {
  long st;
  json_t *j = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                     "{\"random\":{\"shape\":[2500,2],\"low\":-60,\"high\":60,\"seed\":4}}}}",
                     &st);
  CHECK(j && st == 202);
  char id[64], path[160];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  /* a short wait on a job that takes seconds: answered, not ended */
  snprintf(path, sizeof path, "/v1/jobs/%s?wait=0.2", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *o = resp_json(&r);
  const char *s0 = o ? jstr(o, "status") : NULL;
  CHECK_MSG(r.status == 200 && s0 && (!strcmp(s0, "queued") || !strcmp(s0, "running")),
            "%ld %s", r.status, s0 ? s0 : "?");
  json_decref(o);
  resp_free(&r);
  /* a long one: the job's end */
  snprintf(path, sizeof path, "/v1/jobs/%s?wait=60", id);
  r = req(&S, "GET", path, NULL, NULL);
  o = resp_json(&r);
  CHECK_MSG(r.status == 200 && o && !strcmp(jstr(o, "status"), "succeeded"), "%ld",
            r.status);
  json_decref(o);
  resp_free(&r);
  /* ended already: at once, the same */
  snprintf(path, sizeof path, "/v1/jobs/%s?wait=30", id);
  r = req(&S, "GET", path, NULL, NULL);
  o = resp_json(&r);
  CHECK(r.status == 200 && o && !strcmp(jstr(o, "status"), "succeeded"));
  json_decref(o);
  resp_free(&r);
  const char *bad[] = {"61", "-1", "abc", "nan"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "/v1/jobs/%s?wait=%s", id, bad[i]);
    r = req(&S, "GET", path, NULL, NULL);
    CHECK_MSG(is_error(&r, 400, "invalid_argument", "wait"), "wait=%s", bad[i]);
    resp_free(&r);
  }
  r = req(&S, "GET", "/v1/jobs/j_00000000000000000000000000?wait=5", NULL, NULL);
  CHECK(r.status == 404);
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  resp_free(&r);
}

TEST(cancel_running_and_delete) {
  /* A long geodesic job on one worker: cancel it while it runs. */
  long st;
  json_t *j = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                     "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":1}}}}",
                     &st);
  CHECK(j && st == 202);
  char id[64], path[128];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  wait_running(&S, id);
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(is_error(&r, 409, "conflict", NULL)); /* running: cannot delete */
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
  r = req(&S, "POST", path, NULL, NULL);
  CHECK(r.status == 200 || r.status == 202);
  resp_free(&r);
  j = wait_job(&S, id, 30);
  CHECK(j && strcmp(jstr(j, "status"), "canceled") == 0);
  json_decref(j);
  r = req(&S, "POST", path, NULL, NULL);
  CHECK(is_error(&r, 409, "conflict", NULL)); /* already finished */
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s/result", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 409);
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", NULL));
  resp_free(&r);
}

TEST(metrics_and_stats) {
  resp r = req(&S, "GET", "/metrics", NULL, NULL);
  CHECK(r.status == 200);
  CHECK(strstr(r.body, "tessel_queue_depth") != NULL);
  CHECK(strstr(r.body, "tessel_jobs{kind=\"map\"") != NULL);
  CHECK(strstr(r.body, "tessel_job_duration_seconds_bucket{kind=\"map\"") != NULL);
  CHECK(strstr(r.body, "tessel_http_requests_total{route=\"/v1/jobs\",method=\"POST\",code=\"") != NULL);
  resp_free(&r);
  r = req(&S, "GET", "/v1/stats", NULL, NULL);
  json_t *o = resp_json(&r);
  CHECK(r.status == 200 && json_array_size(json_object_get(o, "by_kind")) > 0);
  CHECK(json_integer_value(json_object_get(json_object_get(o, "jobs_by_status"), "succeeded")) > 0);
  json_decref(o);
  resp_free(&r);
}

/* Every real in `body` is written with the fewest digits that read back as
 * the same double: no number token of 16+ significant digits that %.15g
 * would give back exactly (API.md's rule; jansson's default wrote
 * "823.75400000000002"). Strings are skipped. Returns the noisy tokens
 * seen (0 = none). */
static int noisy_reals(const char *body) {
  int noisy = 0;
  for (const char *p = body; p && *p;) {
    if (*p == '"') {
      for (p++; *p && *p != '"'; p += (*p == '\\' && p[1]) ? 2 : 1) {
      }
      if (*p) p++;
      continue;
    }
    if (*p != '-' && (*p < '0' || *p > '9')) {
      p++;
      continue;
    }
    const char *t = p;
    /* significant digits: a real's leading zeros are not ("0.00109...",
     * 15 significant digits, is the shortest text of cpu_percent 0.00109...;
     * counting its zeros flagged it when the machine was nearly idle) */
    int digits = 0, real = 0, lead = 1;
    for (; *p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' ||
           (*p >= '0' && *p <= '9');
         p++) {
      if (*p == 'e' || *p == 'E') real = 2;
      if (*p == '.' && real != 2) real = 1;
      if (*p >= '1' && *p <= '9') lead = 0;
      if (*p >= '0' && *p <= '9' && real != 2 && !lead) digits++;
    }
    if (!real || digits < 16) continue;
    double v = strtod(t, NULL);
    char shorter[40];
    snprintf(shorter, sizeof shorter, "%.15g", v);
    if (strtod(shorter, NULL) == v) {
      fprintf(stderr, "noisy real %.*s (%s reads back the same)\n", (int)(p - t), t,
              shorter);
      noisy++;
    }
  }
  return noisy;
}

TEST(reals_without_digit_noise) {
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"map\",\"timeout_s\":30.1,\"params\":{\"expr\":"
                     "\"x*0.1\",\"inputs\":{\"x\":{\"range\":{\"start\":0.1,"
                     "\"stop\":3}}}}}",
                     NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", j ? jstr(j, "id") : "x");
  json_decref(j);
  const char *paths[] = {path, "/v1/stats", "/v1/jobs?limit=50", "/v1/info"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    resp r = req(&S, "GET", paths[i], NULL, NULL);
    CHECK_MSG(r.status == 200, "%s: %ld", paths[i], r.status);
    CHECK_MSG(noisy_reals(r.body) == 0, "%s", paths[i]);
    if (i == 0) { /* the user's 30.1 and 0.1 come back as written */
      CHECK(strstr(r.body, "\"timeout_s\":30.1") != NULL);
      CHECK(strstr(r.body, "\"start\":0.1") != NULL);
    }
    resp_free(&r);
  }
}

TEST(dashboard_served) {
  resp r = req(&S, "GET", "/", NULL, NULL);
  CHECK(r.status == 200 && strstr(r.body, "<html") != NULL);
  char v[512];
  /* No inline script or style may run; no framing; no referrer. */
  CHECK(resp_header_get(&r, "Content-Security-Policy", v, sizeof v) &&
        strstr(v, "script-src 'self'") && strstr(v, "frame-ancestors 'none'") &&
        !strstr(v, "unsafe-inline") && !strstr(v, "unsafe-eval"));
  CHECK(resp_header_get(&r, "Referrer-Policy", v, sizeof v) && strcmp(v, "no-referrer") == 0);
  CHECK(resp_header_get(&r, "X-Frame-Options", v, sizeof v) && strcmp(v, "DENY") == 0);
  resp_free(&r);
  /* Modules are revalidated at every use (an upgrade never mixes old and
   * new ones): no-cache with an ETag, and If-None-Match answers 304. */
  r = req(&S, "GET", "/js/dom.js", NULL, NULL);
  char etag[128] = "";
  CHECK(r.status == 200 && resp_header_get(&r, "Cache-Control", v, sizeof v) &&
        strcmp(v, "no-cache") == 0);
  CHECK(resp_header_get(&r, "ETag", etag, sizeof etag));
  resp_free(&r);
  char inm[160];
  snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
  r = reqx(&S, "GET", "/js/dom.js", NULL, NULL, -1, inm, NULL);
  CHECK_MSG(r.status == 304 && r.len == 0, "revalidation: %ld", r.status);
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_api <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(service_routes);
  RUN(map_seed_square_polynomial);
  RUN(map_seed_linear_equations);
  RUN(reduce_sum_of_squares_per_dataset);
  RUN(result_dtypes_as_numpy);
  RUN(matmul_w_x_plus_b);
  RUN(geodesic_matrix_layouts);
  RUN(arrays_upload_use_download_delete);
  RUN(list_filters_and_cursor);
  RUN(compare_records_every_backend);
  RUN(idempotent_request_id);
  RUN(submit_without_wait_is_202);
  RUN(get_waits_for_the_end);
  RUN(cancel_running_and_delete);
  RUN(metrics_and_stats);
  RUN(dashboard_served);
  RUN(reals_without_digit_noise);
  int code = srv_kill(&S, SIGTERM);
  CHECK(code == 0); /* graceful shutdown exits 0 */
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
