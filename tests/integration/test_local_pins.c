/* test_local_pins.c — a {"file"} input changed between the submit and the
 * run (issue 23, cases 1 and 2), against the real daemon (one CPU worker,
 * --local-dir, --max-result 10000000).
 *
 * Each job is queued behind a long one (a serial geodesic rowwise sum over
 * 6000 random points: a small result, tens of seconds of work, canceled
 * once the swap is done), so the change always lands while it waits. The
 * file is replaced as os.replace does (a new file renamed over the path):
 *  - reduce sum over 4e6 values -> a 16-value file: the job fails
 *    `conflict` naming params.inputs.x.file, and the daemon lives (it died
 *    of SIGBUS before);
 *  - map x+0 over 4000 -> 500 values: fails `conflict`, no result (it
 *    succeeded before, with values read past the file);
 *  - a file of the same size (another inode, other values), and one of
 *    another dtype (float32): both fail `conflict`;
 *  - across a restart (kill -9 while it waits): an untouched file runs and
 *    gives the right values; a replaced one fails `conflict` (the pins are
 *    stored with the job);
 *  - geodesic over a 10-point file grown to 1500 points (an 18 MB matrix,
 *    over --max-result): fails `conflict`, no result kept.
 */
#include <dirent.h>

#include "compute/array/tarray.h"
#include "harness.h"

static srv S;
static char L[256]; /* the allowed dir */

static const char *LONG_JOB =
    "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
    "{\"random\":{\"shape\":[6000,2],\"low\":-60,\"high\":60,\"seed\":1}},"
    "\"query\":{\"rowwise\":{\"op\":\"sum\"}}}}";

/* Write n values (i * 0.5 + add) of dtype dt, shape [n] or [n/2, 2] (cols
 * 2), as a .npy at a temporary name beside path, then rename it over path
 * (os.replace). 0 on success. */
static int replace_npy(const char *path, tdtype dt, int64_t n, double add,
                       int cols2) {
  int64_t shape[2] = {cols2 ? n / 2 : n, 2};
  tarray *a = tarray_new(dt, cols2 ? 2 : 1, shape);
  if (!a) return -1;
  for (int64_t i = 0; i < n; i++) tarray_set(a, i, (double)i * 0.5 + add);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  FILE *f = fopen(tmp, "wb");
  terr e;
  int rc = f ? npy_write(f, a, &e) : -1;
  if (f && fclose(f) != 0) rc = -1;
  tarray_free(a);
  return rc == 0 ? rename(tmp, path) : -1;
}

/* Points in [-60, 60) degrees: latitude and longitude from i. */
static int replace_points(const char *path, int64_t npts) {
  int64_t shape[2] = {npts, 2};
  tarray *a = tarray_new(T_F64, 2, shape);
  if (!a) return -1;
  for (int64_t i = 0; i < npts; i++) {
    tarray_set(a, 2 * i, (double)(i % 120) - 60);
    tarray_set(a, 2 * i + 1, (double)((i * 7) % 120) - 60);
  }
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  FILE *f = fopen(tmp, "wb");
  terr e;
  int rc = f ? npy_write(f, a, &e) : -1;
  if (f && fclose(f) != 0) rc = -1;
  tarray_free(a);
  return rc == 0 ? rename(tmp, path) : -1;
}

static int healthy(srv *s) {
  resp r = req(s, "GET", "/healthz", NULL, NULL);
  int ok = r.status == 200;
  resp_free(&r);
  return ok;
}

/* Start the long job and wait until it runs: its id in lid. */
static void start_long(char lid[64]) {
  long st;
  json_t *l = submit(&S, "", LONG_JOB, &st);
  snprintf(lid, 64, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  CHECK(wait_running(&S, lid));
}

/* Submit body (it queues behind the long job): its id in qid. */
static void queue_job(const char *body, char qid[64]) {
  long st;
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  CHECK(q && strcmp(jstr(q, "status"), "queued") == 0);
  snprintf(qid, 64, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
}

/* Cancel the long job; the queued job once final. */
static json_t *release_and_wait(const char *lid, const char *qid) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", lid);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  return wait_job(&S, qid, 60);
}

/* The job failed `conflict` naming field, with no result; the daemon
 * still answers. */
static void fails_conflict(json_t *j, const char *field) {
  CHECK_MSG(j && jstr(j, "status") && strcmp(jstr(j, "status"), "failed") == 0,
            "status %s", j && jstr(j, "status") ? jstr(j, "status") : "-");
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *c = err ? jstr(err, "code") : NULL, *m = err ? jstr(err, "message") : NULL;
  CHECK_MSG(c && strcmp(c, "conflict") == 0, "code %s", c ? c : "-");
  CHECK_MSG(m && strstr(m, field) && strstr(m, "changed since the job was accepted"),
            "message %s", m ? m : "-");
  json_t *res = j ? json_object_get(j, "result") : NULL;
  CHECK(!res || json_is_null(res));
  CHECK(healthy(&S));
}

static void body_for(char *buf, size_t cap, const char *kind, const char *x) {
  if (strcmp(kind, "reduce") == 0)
    snprintf(buf, cap,
             "{\"kind\":\"reduce\",\"backend\":\"serial\",\"params\":"
             "{\"op\":\"sum\",\"inputs\":{\"x\":{\"file\":\"%s\"}}}}", x);
  else
    snprintf(buf, cap,
             "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":"
             "{\"expr\":\"x+0\",\"inputs\":{\"x\":{\"file\":\"%s\"}}}}", x);
}

/* Case 1: the file at x holds n values when the job is accepted; while it
 * waits, x is replaced by a file of m values of dtype dt (add: offset of
 * the values). The job must fail `conflict`. */
static void swapped(const char *kind, int64_t n, int64_t m, tdtype dt,
                    double add) {
  char x[400], body[2048], lid[64], qid[64];
  snprintf(x, sizeof x, "%s/%s-%lld-%lld.npy", L, kind, (long long)n,
           (long long)m);
  CHECK(replace_npy(x, T_F64, n, 0, 0) == 0);
  start_long(lid);
  body_for(body, sizeof body, kind, x);
  queue_job(body, qid);
  CHECK(replace_npy(x, dt, m, add, 0) == 0);
  json_t *j = release_and_wait(lid, qid);
  fails_conflict(j, "params.inputs.x.file");
  json_decref(j);
  unlink(x);
}

TEST(reduce_over_a_file_swapped_smaller) {
  swapped("reduce", 4000000, 16, T_F64, 0); /* was SIGBUS */
}

TEST(map_over_a_file_swapped_smaller) {
  swapped("map", 4000, 500, T_F64, 0); /* was values read past the file */
}

TEST(map_over_a_file_swapped_same_size_or_dtype) {
  swapped("map", 4000, 4000, T_F64, 1.0); /* another inode, same bytes */
  swapped("map", 4000, 4000, T_F32, 0);   /* another dtype */
}

/* Queued across a kill -9 and a restart: an untouched file runs as
 * accepted; a replaced one fails `conflict` (the pins were stored). */
TEST(pins_outlive_a_restart) {
  char x[400], y[400], body[2048], lid[64], qx[64], qy[64];
  snprintf(x, sizeof x, "%s/kept.npy", L);
  snprintf(y, sizeof y, "%s/swapped.npy", L);
  CHECK(replace_npy(x, T_F64, 4000, 0, 0) == 0);
  CHECK(replace_npy(y, T_F64, 4000, 0, 0) == 0);
  start_long(lid);
  body_for(body, sizeof body, "map", x);
  queue_job(body, qx);
  body_for(body, sizeof body, "map", y);
  queue_job(body, qy);
  srv_kill(&S, SIGKILL);
  CHECK(replace_npy(y, T_F64, 500, 0, 0) == 0);
  CHECK(srv_restart(&S) == 0);
  json_t *j = release_and_wait(lid, qx);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *d = j ? result_data(&S, j) : NULL;
  int same = json_is_array(d) && json_array_size(d) == 4000;
  for (size_t i = 0; same && i < json_array_size(d); i++)
    same = json_number_value(json_array_get(d, i)) == (double)i * 0.5;
  CHECK(same);
  json_decref(d);
  json_decref(j);
  j = wait_job(&S, qy, 60);
  fails_conflict(j, "params.inputs.x.file");
  json_decref(j);
  unlink(x);
  unlink(y);
}

/* Case 2: a geodesic matrix over 10 points (800 bytes) accepted under
 * --max-result 10000000; the file grows to 1500 points (18 MB) while the
 * job waits. It must not run on them. */
TEST(geodesic_points_grown_after_submit) {
  char p[400], body[2048], lid[64], qid[64];
  snprintf(p, sizeof p, "%s/points.npy", L);
  CHECK(replace_points(p, 10) == 0);
  start_long(lid);
  snprintf(body, sizeof body,
           "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":"
           "{\"points\":{\"file\":\"%s\"},\"method\":\"haversine\"}}", p);
  queue_job(body, qid);
  CHECK(replace_points(p, 1500) == 0);
  json_t *j = release_and_wait(lid, qid);
  fails_conflict(j, "params.points.file");
  json_decref(j);
  /* Refused as it stands now (over the limit), as at any submit. */
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 413, "payload_too_large", "params"));
  resp_free(&r);
  unlink(p);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_local_pins <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  snprintf(L, sizeof L, "/tmp/tessel-it-pins-XXXXXX");
  if (!mkdtemp(L)) return 1;
  if (srv_start(&S, argv[1], "--threads", "1", "--local-dir", L,
                "--max-result", "10000000", NULL) != 0)
    return 1;
  RUN(reduce_over_a_file_swapped_smaller);
  RUN(map_over_a_file_swapped_smaller);
  RUN(map_over_a_file_swapped_same_size_or_dtype);
  RUN(pins_outlive_a_restart);
  RUN(geodesic_points_grown_after_submit);
  srv_cleanup(&S);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", L);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", L);
  curl_global_cleanup();
  return check_summary();
}
