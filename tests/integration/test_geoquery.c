/* test_geoquery.c — geodesic neighbour queries (params.query) end to end
 * through HTTP on the CPU backends: the parts a job lists and serves, their
 * formats, compare across backends, the radius cap, and the refusals. The
 * engines' exactness against brute force is tests/unit/test_geoquery.c (CPU)
 * and tests/gpu/test_geoquery_gpu.c; here the served answers are checked
 * against the same job's square matrix fetched as JSON.
 *
 * Asserts:
 *  - knn: result.parts = distance (float64) and index (int64) with hrefs;
 *    /result is the distance part; /result/index as JSON holds integers
 *    (no ".0") and as CSV too; every row equals the matrix row sorted by
 *    (distance, index) without the point itself; /result/nope is 404 naming
 *    the part;
 *  - compare (serial, cpu[, cuda]) on a knn job succeeds with every part
 *    compared (max_abs_diff 0 on the CPU);
 *  - radius over its cap fails resource_exhausted, error.field
 *    params.query.radius.max_pairs, r in the message as the user wrote it; with the cap it lists the pairs i < j
 *    within r, as the matrix says;
 *  - rowwise argmin's int64 result is a plain one-array result;
 *  - bad queries are 400 naming the field; a query with "layout" is 400; a
 *    knn job with a same-host output file fails naming output.file; delete
 *    removes every part's file.
 */
#include <dirent.h>
#include <math.h>

#include "harness.h"

static srv S;
static char local_dir[128];

#define PTS                                                                  \
  "[[0,0],[0,0.5],[0.2,0.1],[10,10],[10,10.01],[-45,170],[-45,-179.99],"     \
  "[89.9,0],[-89.9,30],[0,0],[33,-100],[33.001,-100.002]]"
#define NPTS 12

static json_t *get_json(const char *path) {
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK_MSG(r.status == 200, "GET %s: %ld %.200s", path, r.status, r.body);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  resp_free(&r);
  return j;
}

static double mat[NPTS][NPTS];

static void load_matrix(void) {
  long st;
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
                     "{\"points\":" PTS "}}", &st);
  json_t *d = result_data(&S, j);
  CHECK(json_array_size(d) == NPTS);
  for (int i = 0; i < NPTS; i++)
    for (int k = 0; k < NPTS; k++)
      mat[i][k] = json_number_value(json_array_get(json_array_get(d, i), k));
  json_decref(d);
  json_decref(j);
}

TEST(knn_parts_and_formats) {
  long st;
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
                     "{\"points\":" PTS ",\"query\":{\"knn\":{\"k\":3}}}}", &st);
  CHECK_STR(jstr(j, "status"), "succeeded");
  json_t *res = json_object_get(j, "result");
  json_t *parts = json_object_get(res, "parts");
  CHECK(json_array_size(parts) == 2);
  CHECK_STR(jstr(json_array_get(parts, 0), "name"), "distance");
  CHECK_STR(jstr(json_array_get(parts, 1), "name"), "index");
  CHECK_STR(jstr(json_array_get(parts, 1), "dtype"), "int64");
  CHECK_STR(jstr(res, "dtype"), "float64");
  const char *id = jstr(j, "id");
  char path[256];
  json_t *dist = result_data(&S, j);
  snprintf(path, sizeof path, "/v1/jobs/%s/result/index?format=json", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200 && !strstr(r.body, ".0,") && !strstr(r.body, ".0]"));
  json_t *io = resp_json(&r);
  resp_free(&r);
  json_t *idx = json_object_get(io, "data");
  CHECK(json_array_size(idx) == NPTS && json_array_size(dist) == NPTS);
  for (int i = 0; i < NPTS && json_array_size(idx) == NPTS; i++) {
    /* brute force: the row sorted by (distance, index), without i */
    int order[NPTS], no = 0;
    for (int k = 0; k < NPTS; k++)
      if (k != i) order[no++] = k;
    for (int a = 1; a < no; a++)
      for (int b = a; b > 0; b--) {
        int x = order[b - 1], y = order[b];
        if (mat[i][y] < mat[i][x] || (mat[i][y] == mat[i][x] && y < x)) {
          order[b - 1] = y;
          order[b] = x;
        }
      }
    for (int k = 0; k < 3; k++) {
      json_t *v = json_array_get(json_array_get(idx, i), k);
      CHECK_MSG(json_is_integer(v) && json_integer_value(v) == order[k],
                "row %d, neighbour %d: %lld, want %d", i, k,
                (long long)json_integer_value(v), order[k]);
      CHECK(json_number_value(json_array_get(json_array_get(dist, i), k)) ==
            mat[i][order[k]]);
    }
  }
  json_decref(io);
  json_decref(dist);
  snprintf(path, sizeof path, "/v1/jobs/%s/result/index?format=csv", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200 && strncmp(r.body, "9,2,1\n", 6) == 0);
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/jobs/%s/result/nope", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "name"));
  resp_free(&r);
  json_decref(j);
}

TEST(compare_every_part) {
  long st;
  json_t *j = submit(&S, "?wait=60",
                     "{\"kind\":\"geodesic\",\"backend\":\"compare\",\"params\":"
                     "{\"points\":" PTS ",\"query\":{\"knn\":{\"k\":4}}}}", &st);
  CHECK_MSG(strcmp(jstr(j, "status") ? jstr(j, "status") : "", "succeeded") == 0,
            "compare: %s", json_dumps(json_object_get(j, "error"), 0));
  CHECK(json_array_size(json_object_get(j, "compare")) >= 2);
  json_decref(j);
}

TEST(radius_cap_and_pairs) {
  long st;
  /* r = 100 km: the close pairs only */
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":"
                     "{\"points\":" PTS ",\"query\":{\"radius\":{\"r\":2000000,"
                     "\"max_pairs\":2}}}}", &st);
  CHECK_STR(jstr(j, "status"), "failed");
  json_t *err = json_object_get(j, "error");
  CHECK_STR(jstr(err, "code"), "resource_exhausted");
  /* a run-time error names its field as a refused submit does, and the
   * user's 2000000 comes back as written, not as %g's 2e+06 */
  CHECK_STR(jstr(err, "field"), "params.query.radius.max_pairs");
  CHECK_MSG(jstr(err, "message") && strstr(jstr(err, "message"), "r = 2000000 "),
            "message: %s", jstr(err, "message"));
  json_decref(j);
  j = submit(&S, "?wait=30",
             "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
             "{\"points\":" PTS ",\"query\":{\"radius\":{\"r\":100000}}}}", &st);
  CHECK_STR(jstr(j, "status"), "succeeded");
  const char *id = jstr(j, "id");
  char path[256];
  snprintf(path, sizeof path, "/v1/jobs/%s/result/i", id);
  json_t *io = get_json(path);
  snprintf(path, sizeof path, "/v1/jobs/%s/result/j", id);
  json_t *jo = get_json(path);
  json_t *ia = json_object_get(io, "data"), *ja = json_object_get(jo, "data");
  size_t p = 0;
  for (int a = 0; a < NPTS; a++)
    for (int b = a + 1; b < NPTS; b++)
      if (mat[a][b] <= 100000) {
        CHECK_MSG(json_integer_value(json_array_get(ia, p)) == a &&
                      json_integer_value(json_array_get(ja, p)) == b,
                  "pair %zu: want (%d, %d)", p, a, b);
        p++;
      }
  CHECK(p > 3 && json_array_size(ia) == p && json_array_size(ja) == p);
  json_decref(io);
  json_decref(jo);
  json_decref(j);
}

TEST(rowwise_is_one_array) {
  long st;
  json_t *j = submit(&S, "?wait=30",
                     "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
                     "{\"points\":" PTS ",\"query\":{\"rowwise\":{\"op\":\"argmin\"}}}}",
                     &st);
  json_t *res = json_object_get(j, "result");
  CHECK_STR(jstr(res, "dtype"), "int64");
  CHECK(json_object_get(res, "parts") == NULL);
  json_t *d = result_data(&S, j);
  CHECK(json_integer_value(json_array_get(d, 0)) == 9 &&
        json_integer_value(json_array_get(d, 9)) == 0); /* the duplicates */
  json_decref(d);
  json_decref(j);
}

static void bad(const char *params, const char *field) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"kind\":\"geodesic\",\"params\":{\"points\":" PTS ",%s}}", params);
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK_MSG(is_error(&r, 400, "invalid_argument", field), "%s: %ld %.200s", params,
            r.status, r.body);
  resp_free(&r);
}

TEST(refusals) {
  bad("\"query\":{\"knn\":{\"k\":0}}", "params.query.knn.k");
  bad("\"query\":{\"knn\":{\"k\":100000}}", "params.query.knn.k");
  bad("\"query\":{\"radius\":{\"r\":-1}}", "params.query.radius.r");
  bad("\"query\":{\"nearest\":{}}", "params.query");
  bad("\"query\":{\"knn\":{\"k\":1},\"radius\":{\"r\":1}}", "params.query");
  bad("\"query\":{\"rowwise\":{\"op\":\"median\"}}", "params.query.rowwise.op");
  bad("\"layout\":\"condensed\",\"query\":{\"knn\":{\"k\":1}}", "params.layout");
  /* several parts cannot go to one output file */
  char body[1024];
  snprintf(body, sizeof body,
           "{\"kind\":\"geodesic\",\"params\":{\"points\":" PTS
           ",\"query\":{\"knn\":{\"k\":2}}},\"output\":{\"file\":\"%s/o.npy\"}}",
           local_dir);
  resp r = req(&S, "POST", "/v1/jobs?wait=30", "application/json", body);
  json_t *j = resp_json(&r);
  resp_free(&r);
  CHECK_STR(jstr(j, "status"), "failed");
  const char *m = jstr(json_object_get(j, "error"), "message");
  CHECK_MSG(m && strstr(m, "output.file"), "message: %s", m ? m : "(none)");
  json_decref(j);
}

static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
  if (d) closedir(d);
  return n;
}

TEST(delete_removes_every_part) {
  long st;
  /* big enough that the parts are files, not kept in the row */
  json_t *j = submit(&S, "?wait=60",
                     "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
                     "{\"points\":{\"random\":{\"shape\":[20000,2],\"seed\":3,"
                     "\"low\":-60,\"high\":60}},\"query\":{\"knn\":{\"k\":8}}}}",
                     &st);
  CHECK_STR(jstr(j, "status"), "succeeded");
  const char *id = jstr(j, "id");
  char dir[400], path[256];
  snprintf(dir, sizeof dir, "%s/results", S.dir);
  CHECK_MSG(count_files(dir, id) == 2, "%d result files", count_files(dir, id));
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  CHECK_MSG(count_files(dir, id) == 0, "%d result files left", count_files(dir, id));
  json_decref(j);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_geoquery <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  snprintf(local_dir, sizeof local_dir, "/tmp/tessel-gq-XXXXXX");
  if (!mkdtemp(local_dir)) return 1;
  if (srv_start(&S, argv[1], "--threads", "2", "--local-dir", local_dir, NULL) != 0)
    return 1;
  load_matrix();
  RUN(knn_parts_and_formats);
  RUN(compare_every_part);
  RUN(radius_cap_and_pairs);
  RUN(rowwise_is_one_array);
  RUN(refusals);
  RUN(delete_removes_every_part);
  srv_cleanup(&S);
  rmdir(local_dir);
  curl_global_cleanup();
  return check_summary();
}
