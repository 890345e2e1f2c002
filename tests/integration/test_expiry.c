/* test_expiry.c — finished jobs expire after --result-ttl with their result
 * files, uploaded arrays no job uses go too, and jobs still queued or
 * running are never expired.
 */
#include <sys/stat.h>

#include "harness.h"

static srv S;

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

TEST(finished_jobs_and_their_files_expire) {
  json_t *j = submit(&S, "?wait=20",
                     "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2\",\"inputs\":{\"x\":"
                     "{\"range\":{\"stop\":2000}}}}}", /* 16 KB: a file, not the row */
                     NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  char id[64], path[128], file[512];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  snprintf(file, sizeof file, "%s/results/%s.npy", S.dir, id);
  CHECK(file_exists(file));
  resp r = req(&S, "POST", "/v1/arrays", "application/json", "[4,5,6]");
  CHECK(r.status == 201);
  json_t *a = resp_json(&r);
  CHECK(a && json_is_string(json_object_get(a, "id")));
  char apath[128];
  snprintf(apath, sizeof apath, "/v1/arrays/%s", a ? jstr(a, "id") : "x");
  json_decref(a);
  resp_free(&r);

  /* A slow job that is still running when the others expire. */
  long st;
  json_t *slow = submit(&S, "",
                        "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":{\"points\":"
                        "{\"random\":{\"shape\":[4000,2],\"seed\":2}}}}", &st);
  char slow_path[128];
  snprintf(slow_path, sizeof slow_path, "/v1/jobs/%s", slow ? jstr(slow, "id") : "x");
  json_decref(slow);

  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  /* TTL 1 s, expiry every 1 s: the array, uploaded a moment after the job
   * finished, may go one pass later than the job, and a pass removes the
   * row before the file, so wait for all three states (bounded: 60 s, for
   * a loaded sanitizer build), not for a time. */
  int job_gone = 0, array_gone = 0, file_gone = 0;
  for (int i = 0; i < 600 && !(job_gone && array_gone && file_gone); i++) {
    usleep(100000);
    r = req(&S, "GET", path, NULL, NULL);
    job_gone = r.status == 404;
    resp_free(&r);
    r = req(&S, "GET", apath, NULL, NULL);
    array_gone = r.status == 404;
    resp_free(&r);
    file_gone = job_gone && !file_exists(file);
  }
  CHECK(job_gone);
  CHECK(array_gone);
  CHECK(file_gone);
  r = req(&S, "GET", slow_path, NULL, NULL);
  CHECK(r.status == 200); /* unfinished: kept */
  resp_free(&r);
  snprintf(path, sizeof path, "%s/cancel", slow_path);
  r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_expiry <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "1", "--result-ttl", "1", NULL) != 0) return 1;
  RUN(finished_jobs_and_their_files_expire);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
