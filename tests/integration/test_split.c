/* test_split.c — split jobs on SQLite (sched/split.c, API.md "Split
 * jobs"): a geodesic job with at least --split-min-pairs pairs runs as tile
 * jobs, each a band of its rows, and its result is the same bytes as the
 * job run whole.
 *
 * Two daemons: S splits everything from 1000 pairs into 4 tiles, U never
 * splits. Each case runs on both (random points from a seed, so the same
 * points) and every part of the two results is compared byte for byte in
 * .npy (matrix square and condensed, with targets, float32 Vincenty, knn
 * with and without targets, rowwise sum and argmin; serial and cpu). Then:
 * the tiles are not in GET /v1/jobs nor in its total; a canceled parent
 * ends canceled and so do its tiles (the daemon's job_end lines); DELETE
 * takes the tiles' and the parent's files; a tile that runs past its
 * timeout fails the parent with "tile i: ..."; kill -9 mid-split and a
 * restart resume the parent, whose result equals U's.
 */
#include <dirent.h>

#include "harness.h"

static srv S, U;

#define NPTS 300

/* The .npy bytes of a job's result, or of its part `part` (NULL: the
 * result); r.status 200 on success. */
static resp npy_of(srv *s, const char *id, const char *part) {
  char path[256];
  snprintf(path, sizeof path, "/v1/jobs/%s/result%s%s?format=npy", id,
           part ? "/" : "", part ? part : "");
  return req(s, "GET", path, NULL, NULL);
}

static json_t *run_on(srv *s, const char *body) {
  long st = 0;
  json_t *j = submit(s, "", body, &st);
  if (!j) return NULL;
  char id[64];
  snprintf(id, sizeof id, "%s", jstr(j, "id"));
  json_decref(j);
  return wait_job(s, id, 120);
}

/* Run body on S (split) and U (whole): both succeed, S's has tiles, and
 * every part is the same bytes. */
static void same_result(const char *body, const char *const *parts,
                        const char *what) {
  json_t *a = run_on(&S, body), *b = run_on(&U, body);
  CHECK_MSG(a && strcmp(jstr(a, "status"), "succeeded") == 0, "%s: split %s",
            what, a ? jstr(a, "status") : "missing");
  CHECK_MSG(b && strcmp(jstr(b, "status"), "succeeded") == 0, "%s: whole %s",
            what, b ? jstr(b, "status") : "missing");
  json_t *tiles = a ? json_object_get(a, "tiles") : NULL;
  CHECK_MSG(tiles && json_integer_value(json_object_get(tiles, "total")) == 4 &&
                json_integer_value(json_object_get(tiles, "done")) == 4,
            "%s: tiles", what);
  CHECK_MSG(b && !json_object_get(b, "tiles"), "%s: the whole job is not split",
            what);
  for (int p = 0; a && b && (p == 0 || (parts && parts[p - 1])); p++) {
    const char *part = parts ? parts[p] : NULL;
    if (parts && !part) break;
    resp ra = npy_of(&S, jstr(a, "id"), part);
    resp rb = npy_of(&U, jstr(b, "id"), part);
    CHECK_MSG(ra.status == 200 && rb.status == 200 && ra.len == rb.len &&
                  ra.len > 0 && memcmp(ra.body, rb.body, ra.len) == 0,
              "%s: part %s differs (%zu vs %zu bytes)", what,
              part ? part : "result", ra.len, rb.len);
    resp_free(&ra);
    resp_free(&rb);
    if (!parts) break;
  }
  json_decref(a);
  json_decref(b);
}

static int njobs_submitted;

TEST(split_equals_whole) {
  static const char *const knn_parts[] = {"distance", "index", NULL};
  const char *backends[] = {"serial", "cpu"};
  char body[1024], what[64];
  for (int bi = 0; bi < 2; bi++) {
    const char *be = backends[bi];
    struct {
      const char *name, *extra;
      const char *const *parts;
    } cases[] = {
        {"square", "", NULL},
        {"condensed", ",\"layout\":\"condensed\"", NULL},
        {"targets", ",\"targets\":{\"random\":{\"shape\":[45,2],\"seed\":8}}", NULL},
        {"float32 vincenty", ",\"dtype\":\"float32\",\"method\":\"vincenty\"", NULL},
        {"knn", ",\"query\":{\"knn\":{\"k\":5}}", knn_parts},
        {"knn targets",
         ",\"targets\":{\"random\":{\"shape\":[45,2],\"seed\":8}},"
         "\"query\":{\"knn\":{\"k\":3}}", knn_parts},
        {"rowwise sum", ",\"query\":{\"rowwise\":{\"op\":\"sum\"}}", NULL},
        {"rowwise argmin", ",\"query\":{\"rowwise\":{\"op\":\"argmin\"}}", NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      snprintf(body, sizeof body,
               "{\"kind\":\"geodesic\",\"backend\":\"%s\",\"params\":{\"points\":"
               "{\"random\":{\"shape\":[%d,2],\"low\":-80,\"high\":80,\"seed\":%d}}%s}}",
               be, NPTS, (int)c + 1, cases[c].extra);
      snprintf(what, sizeof what, "%s %s", be, cases[c].name);
      same_result(body, cases[c].parts, what);
      njobs_submitted++;
    }
  }
}

TEST(tiles_not_listed) {
  resp r = req(&S, "GET", "/v1/jobs?limit=1000", NULL, NULL);
  json_t *o = resp_json(&r);
  json_t *jobs = json_object_get(o, "jobs");
  CHECK(r.status == 200 && json_is_array(jobs));
  CHECK_MSG(json_integer_value(json_object_get(o, "total")) == njobs_submitted,
            "total %lld, submitted %d",
            (long long)json_integer_value(json_object_get(o, "total")),
            njobs_submitted);
  CHECK((int)json_array_size(jobs) == njobs_submitted);
  size_t i;
  json_t *j;
  json_array_foreach(jobs, i, j) /* every one a parent: no tile listed */
      CHECK(json_is_object(json_object_get(j, "tiles")));
  json_decref(o);
  resp_free(&r);
}

/* job_end lines of the daemon's log with status=canceled. */
static int canceled_ends(const srv *s) {
  char path[400], line[2048];
  snprintf(path, sizeof path, "%s/daemon.log", s->dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "job_end") && strstr(line, "status=canceled")) n++;
  if (f) fclose(f);
  return n;
}

TEST(cancel_parent_cancels_tiles) {
  int before = canceled_ends(&S);
  long st;
  json_t *j = submit(&S, "",
                     "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":"
                     "{\"points\":{\"random\":{\"shape\":[6000,2],\"seed\":3}}}}",
                     &st);
  CHECK(j && st == 202);
  char id[64], path[128];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  CHECK(wait_running(&S, id));
  usleep(200000);
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
  resp r = req(&S, "POST", path, NULL, NULL);
  CHECK_MSG(r.status == 200 || r.status == 202, "cancel: %ld %.200s",
            r.status, r.body);
  resp_free(&r);
  j = wait_job(&S, id, 60);
  CHECK(j && strcmp(jstr(j, "status"), "canceled") == 0);
  json_decref(j);
  /* its 4 tiles end canceled too (running ones at their next chunk) */
  int n = 0;
  for (int i = 0; i < 500 && (n = canceled_ends(&S) - before) < 4; i++)
    usleep(20000);
  CHECK_MSG(n == 4, "%d tiles ended canceled", n);
}

/* Files under <dir>/results whose name starts with any of ids. */
static int files_of(const srv *s, json_t *ids) {
  char path[400];
  snprintf(path, sizeof path, "%s/results", s->dir);
  DIR *d = opendir(path);
  struct dirent *de;
  int n = 0;
  while (d && (de = readdir(d))) {
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
      const char *id = json_string_value(v);
      if (id && strncmp(de->d_name, id, strlen(id)) == 0) n++;
    }
  }
  if (d) closedir(d);
  return n;
}

TEST(delete_takes_tiles_and_files) {
  /* 800 x 800 float64: every tile's result and the parent's are files */
  json_t *j = run_on(&S, "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":"
                         "{\"points\":{\"random\":{\"shape\":[800,2],\"seed\":4}}}}");
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  if (!j) return;
  char id[64], path[128];
  snprintf(id, sizeof id, "%s", jstr(j, "id"));
  json_decref(j);
  /* every file in results/ now: the parent's and its tiles' among them */
  char rdir[400];
  snprintf(rdir, sizeof rdir, "%s/results", S.dir);
  json_t *all = json_array();
  DIR *d = opendir(rdir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] == 'j') {
      char stem[64];
      snprintf(stem, sizeof stem, "%.28s", de->d_name);
      json_array_append_new(all, json_string(stem));
    }
  if (d) closedir(d);
  int before = files_of(&S, all);
  json_t *pid = json_pack("[s]", id);
  CHECK(files_of(&S, pid) == 1);
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK_MSG(r.status == 204 || r.status == 200, "delete: %ld", r.status);
  resp_free(&r);
  CHECK(files_of(&S, pid) == 0);
  /* the parent's file and its 4 tiles' went */
  CHECK_MSG(before - files_of(&S, all) == 5, "%d files went",
            before - files_of(&S, all));
  json_decref(pid);
  json_decref(all);
}

TEST(failing_tile_fails_parent) {
  json_t *j = run_on(&S, "{\"kind\":\"geodesic\",\"backend\":\"serial\","
                         "\"timeout_s\":0.2,\"params\":"
                         "{\"points\":{\"random\":{\"shape\":[8000,2],\"seed\":5}}}}");
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *msg = err ? jstr(err, "message") : NULL;
  CHECK_MSG(msg && strncmp(msg, "tile ", 5) == 0, "error: %s", msg ? msg : "none");
  json_decref(j);
}

TEST(kill9_resumes_parent) {
  const char *body =
      "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":"
      "{\"points\":{\"random\":{\"shape\":[4000,2],\"seed\":6}},"
      "\"layout\":\"condensed\"}}";
  long st;
  json_t *j = submit(&S, "", body, &st);
  CHECK(j && st == 202);
  char id[64];
  snprintf(id, sizeof id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  CHECK(wait_running(&S, id));
  usleep(300000);
  /* mid-split: not every tile done yet, or the test proves nothing */
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *o = resp_json(&r);
  json_t *tiles = o ? json_object_get(o, "tiles") : NULL;
  CHECK_MSG(tiles && json_integer_value(json_object_get(tiles, "done")) < 4 &&
                strcmp(jstr(o, "status"), "running") == 0,
            "before the kill: %.300s", r.body);
  json_decref(o);
  resp_free(&r);
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  CHECK(srv_restart(&S) == 0);
  json_t *a = wait_job(&S, id, 180), *b = run_on(&U, body);
  CHECK_MSG(a && strcmp(jstr(a, "status"), "succeeded") == 0, "after restart: %s",
            a ? jstr(a, "status") : "missing");
  CHECK(a && json_integer_value(json_object_get(a, "attempts")) >= 2);
  if (a && b) {
    resp ra = npy_of(&S, id, NULL), rb = npy_of(&U, jstr(b, "id"), NULL);
    CHECK(ra.status == 200 && ra.len == rb.len && ra.len > 0 &&
          memcmp(ra.body, rb.body, ra.len) == 0);
    resp_free(&ra);
    resp_free(&rb);
  }
  json_decref(a);
  json_decref(b);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_split <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", "--split-min-pairs", "1000",
                "--tiles", "4", NULL) != 0)
    return 1;
  if (srv_start(&U, argv[1], "--threads", "2", NULL) != 0) {
    srv_cleanup(&S);
    return 1;
  }
  RUN(split_equals_whole);
  RUN(tiles_not_listed);
  RUN(cancel_parent_cancels_tiles);
  RUN(delete_takes_tiles_and_files);
  RUN(failing_tile_fails_parent);
  RUN(kill9_resumes_parent);
  srv_cleanup(&S);
  srv_cleanup(&U);
  curl_global_cleanup();
  return check_summary();
}
