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
  json_t *a = resp_json(&r);
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
  int gone = 0;
  for (int i = 0; i < 80 && !gone; i++) { /* TTL 1 s, checked every 1 s */
    usleep(100000);
    r = req(&S, "GET", path, NULL, NULL);
    gone = r.status == 404;
    resp_free(&r);
  }
  CHECK(gone);
  CHECK(!file_exists(file));
  /* the array was made after the job finished, so a sweep can take the job
   * and leave the array (younger than the TTL) for the next one */
  int agone = 0;
  for (int i = 0; i < 30 && !agone; i++) {
    r = req(&S, "GET", apath, NULL, NULL);
    agone = r.status == 404;
    resp_free(&r);
    if (!agone) usleep(100000);
  }
  CHECK(agone);
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
