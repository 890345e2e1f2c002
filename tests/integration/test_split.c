/* test_split.c — split jobs on SQLite (compute/sched/split.c, API.md "Split
 * jobs"): a geodesic job with at least --split-min-pairs pairs runs as tile
 * jobs, each a band of its rows, and its result is the same bytes as the
 * job run whole.
 *
 * Two daemons: S splits everything from 100 pairs into 4 tiles, U never
 * splits. Each case runs on both (random points from a seed, so the same
 * points) and every part of the two results is compared byte for byte in
 * .npy (matrix square and condensed, with targets, float32 Vincenty, knn
 * with and without targets, rowwise sum and argmin; serial and cpu). Then:
 * the tiles are not in GET /v1/jobs nor in its total; a canceled parent
 * ends canceled and so do its tiles (the daemon's job_end lines); DELETE
 * takes the tiles' and the parent's files; a tile that fails (a NaN found
 * at run time) fails the parent with "tile i: ..."; the job's timeout_s
 * bounds the whole job (its tiles' wait for a worker included); a split
 * job's end has its job_end line (backend=split) and counts once in
 * /metrics, its tiles not; kill -9 mid-split and a
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

/* Vincenty's non-converged pairs (NaN) in a split square matrix: the
 * same bytes and the same count as the whole job (the join counts them at
 * j > i, once a pair). Points near (0, 0) and near (0, 180): many pairs
 * near-antipodal. float64 and float32. */
/* A GPU beats its tiles (API.md): with a usable GPU, a job asked
 * for cuda and an auto one are run whole; without, cuda is 503 and auto is
 * split. */
TEST(gpu_jobs_not_split) {
  int gpu = srv_has_gpu(&S);
  const char *be[] = {"cuda", "auto"};
  for (int i = 0; i < 2; i++) {
    char body[300];
    snprintf(body, sizeof body,
             "{\"kind\":\"geodesic\",\"backend\":\"%s\",\"params\":{"
             "\"points\":{\"random\":{\"shape\":[300,2],\"seed\":41}}}}", be[i]);
    long st = 0;
    json_t *j = submit(&S, "", body, &st);
    if (!gpu && i == 0) {
      CHECK_MSG(st == 503, "cuda without a GPU: %ld", st);
    } else {
      CHECK_MSG(st == 202 && j, "%s: submit %ld", be[i], st);
      int split = j && json_is_object(json_object_get(j, "tiles"));
      CHECK_MSG(split == (!gpu && i == 1), "%s with%s a GPU: %s", be[i],
                gpu ? "" : "out", split ? "split" : "whole");
      json_t *d = j ? wait_job(&S, jstr(j, "id"), 120) : NULL;
      CHECK(d && strcmp(jstr(d, "status"), "succeeded") == 0);
      json_decref(d);
      njobs_submitted++;
    }
    json_decref(j);
  }
}

/* Results small enough for the job's row (4 KiB): the joins write them
 * into a buffer, not a file. */
TEST(split_small_in_row) {
  same_result("{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{\"points\":"
              "{\"random\":{\"shape\":[20,2],\"seed\":31}},\"dtype\":\"float32\"}}",
              NULL, "small square float32");
  same_result("{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{\"points\":"
              "{\"random\":{\"shape\":[20,2],\"seed\":32}},\"layout\":\"condensed\"}}",
              NULL, "small condensed");
  njobs_submitted += 2;
}

TEST(split_vincenty_nonconverged) {
  size_t cap = 64 * NPTS + 512;
  char *pts = malloc(cap), *body = malloc(cap + 256);
  size_t at = 0;
  at += (size_t)snprintf(pts + at, cap - at, "[");
  for (int i = 0; i < NPTS; i++)
    at += (size_t)snprintf(pts + at, cap - at, "%s[%.6f,%.6f]", i ? "," : "",
                           (i % 7) * 0.05 - 0.15,
                           (i % 2 ? 179.8 : 0.0) + (i % 5) * 0.03);
  snprintf(pts + at, cap - at, "]");
  for (int f32 = 0; f32 < 2; f32++) {
    snprintf(body, cap + 256,
             "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{"
             "\"points\":%s,\"method\":\"vincenty\"%s}}",
             pts, f32 ? ",\"dtype\":\"float32\"" : "");
    same_result(body, NULL, f32 ? "vincenty antipodes float32" : "vincenty antipodes");
    njobs_submitted++;
    json_t *a = run_on(&S, body), *b = run_on(&U, body);
    json_t *ra = a ? json_object_get(a, "result") : NULL,
           *rb = b ? json_object_get(b, "result") : NULL;
    json_int_t na = json_integer_value(json_object_get(ra, "nonconverged")),
               nb = json_integer_value(json_object_get(rb, "nonconverged"));
    printf("vincenty antipodes%s: %lld non-converged pairs split, %lld whole\n",
           f32 ? " float32" : "", (long long)na, (long long)nb);
    CHECK_MSG(nb > 0 && na == nb, "non-converged: split %lld, whole %lld",
              (long long)na, (long long)nb);
    njobs_submitted++;
    json_decref(a);
    json_decref(b);
  }
  free(pts);
  free(body);
}

/* The value of the /metrics sample whose line starts with `series` (0
 * when absent). */
static double metric(srv *s, const char *series) {
  resp r = req(s, "GET", "/metrics", NULL, NULL);
  double v = 0;
  const char *p = r.body;
  size_t n = strlen(series);
  while (p && *p) {
    if (strncmp(p, series, n) == 0 && p[n] == ' ') {
      v = atof(p + n + 1);
      break;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  resp_free(&r);
  return v;
}

/* /metrics counts a split job once, as backend "split", and none of its
 * 4 tiles (API.md: they are in no count nor statistic). */
TEST(metrics_count_the_job) {
  const char *fin = "tessel_jobs_finished_total{status=\"succeeded\"}";
  const char *hist = "tessel_job_duration_seconds_count{kind=\"geodesic\","
                     "backend=\"split\",status=\"succeeded\"}";
  double f0 = metric(&S, fin), h0 = metric(&S, hist);
  json_t *j = run_on(&S, "{\"kind\":\"geodesic\",\"backend\":\"serial\","
                         "\"params\":{\"points\":{\"random\":{\"shape\":"
                         "[300,2],\"seed\":9}}}}");
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0 &&
        json_integer_value(json_object_get(json_object_get(j, "tiles"),
                                           "total")) == 4);
  json_decref(j);
  double f1 = metric(&S, fin), h1 = metric(&S, hist);
  CHECK_MSG(f1 - f0 == 1 && h1 - h0 == 1,
            "finished %g -> %g, split histogram %g -> %g", f0, f1, h0, h1);
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

/* job_end lines of the daemon's log with `what` (e.g. "status=canceled"):
 * of tiles and other jobs (split 0), or of split parents (split 1: theirs
 * say backend=split). */
static int ends_with(const srv *s, const char *what, int split) {
  char path[400], line[2048];
  snprintf(path, sizeof path, "%s/daemon.log", s->dir);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "job_end") && strstr(line, what) &&
        !strstr(line, "backend=split") == !split)
      n++;
  if (f) fclose(f);
  return n;
}
static int canceled_ends(const srv *s) {
  return ends_with(s, "status=canceled", 0);
}
static int split_ends(const srv *s, const char *what) {
  return ends_with(s, what, 1);
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
  /* its progress moves before any tile is done: the running tiles' own */
  int moved = 0;
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  for (int i = 0; i < 300 && !moved; i++) {
    resp g = req(&S, "GET", path, NULL, NULL);
    json_t *o = resp_json(&g);
    json_t *tl = o ? json_object_get(o, "tiles") : NULL;
    json_t *pg = o ? json_object_get(o, "progress") : NULL;
    if (tl && json_integer_value(json_object_get(tl, "done")) > 0) i = 300;
    moved = json_integer_value(json_object_get(pg, "done")) > 0 &&
            json_integer_value(json_object_get(tl, "done")) == 0;
    json_decref(o);
    resp_free(&g);
    if (!moved) usleep(20000);
  }
  CHECK_MSG(moved, "no progress before the first tile ended");
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
  CHECK(split_ends(&S, "status=canceled") == 1); /* the job's own line */
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

/* A tile that fails fails the job, with "tile i: <its message>": a NaN at
 * row NAN_ROW of 2^20 + 8 uploaded points (beyond what a submit checks
 * value by value, GEOD_CHECK_VALUES_MAX) is found by each tile's prepare. */
#define NAN_ROW 1000003
TEST(failing_tile_fails_parent) {
  int64_t n = ((int64_t)1 << 20) + 8;
  char hdr[128];
  int hl = snprintf(hdr + 10, sizeof hdr - 10,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': "
                    "(%lld, 2), }", (long long)n);
  while (hl < 128 - 10 - 1) hdr[10 + hl++] = ' ';
  hdr[10 + hl++] = '\n';
  memcpy(hdr, "\x93NUMPY\x01\x00", 8);
  hdr[8] = (char)(hl & 0xff), hdr[9] = (char)(hl >> 8);
  size_t len = 128 + (size_t)n * 16;
  char *body = malloc(len);
  memcpy(body, hdr, 128);
  double *p = (double *)(body + 128);
  for (int64_t i = 0; i < n; i++)
    p[2 * i] = (double)(i % 170) - 85, p[2 * i + 1] = (double)(i % 359) - 179;
  p[2 * NAN_ROW] = NAN;
  resp u = reqx(&S, "POST", "/v1/arrays", "application/x-npy", body, (long)len,
                NULL);
  free(body);
  json_t *a = resp_json(&u);
  CHECK_MSG(u.status == 201 && a, "upload: %ld %.200s", u.status, u.body);
  char sub[400];
  snprintf(sub, sizeof sub,
           "{\"kind\":\"geodesic\",\"backend\":\"serial\",\"params\":"
           "{\"points\":{\"array\":\"%s\"},\"targets\":[[0,0],[10,10]],"
           "\"query\":{\"knn\":{\"k\":1}}}}", a ? jstr(a, "id") : "");
  json_decref(a);
  resp_free(&u);
  json_t *j = run_on(&S, sub);
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0 &&
        json_object_get(j, "tiles"));
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *msg = err ? jstr(err, "message") : NULL;
  CHECK_MSG(msg && strncmp(msg, "tile ", 5) == 0 && strstr(msg, "not finite") &&
                strcmp(jstr(err, "code"), "invalid_argument") == 0,
            "error: %s", msg ? msg : "none");
  json_decref(j);
}

/* The job's timeout_s bounds the whole split job, its tiles' wait for a
 * worker included, not each tile apart (each tile alone here takes
 * milliseconds): two long jobs hold S's two workers; a split job with
 * timeout_s 1 fails deadline_exceeded while they still run, and its
 * tiles end with it. */
#define LONG_MAP                                                               \
  "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":"            \
  "\"sin(x)*cos(x)+exp(sin(x))+log(x+2)+sqrt(x+1)+tanh(x)*atan(x)\","           \
  "\"inputs\":{\"x\":{\"range\":{\"start\":0,\"stop\":60000000}}},"           \
  "\"dtype\":\"float32\"}}"
TEST(timeout_bounds_whole_split_job) {
  char blk[2][64];
  for (int i = 0; i < 2; i++) {
    long st = 0;
    json_t *b = submit(&S, "", LONG_MAP, &st);
    CHECK(b && st == 202);
    snprintf(blk[i], sizeof blk[i], "%s", b ? jstr(b, "id") : "");
    json_decref(b);
    CHECK(wait_running(&S, blk[i]));
  }
  int before = split_ends(&S, "status=failed");
  json_t *j = run_on(&S, "{\"kind\":\"geodesic\",\"backend\":\"serial\","
                         "\"timeout_s\":1,\"params\":"
                         "{\"points\":{\"random\":{\"shape\":[300,2],\"seed\":5}}}}");
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *msg = err ? jstr(err, "message") : NULL;
  CHECK_MSG(err && strcmp(jstr(err, "code"), "deadline_exceeded") == 0 && msg &&
                strstr(msg, "ran past its timeout of 1 s"),
            "error: %s", msg ? msg : "none");
  json_t *tiles = j ? json_object_get(j, "tiles") : NULL;
  CHECK(tiles && json_integer_value(json_object_get(tiles, "done")) == 0);
  json_decref(j);
  /* the blockers still ran: it was the job's own deadline */
  for (int i = 0; i < 2; i++) {
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", blk[i]);
    resp r = req(&S, "GET", path, NULL, NULL);
    json_t *o = resp_json(&r);
    CHECK_MSG(o && strcmp(jstr(o, "status"), "running") == 0,
              "blocker %d: %.200s", i, r.body);
    json_decref(o);
    resp_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", blk[i]);
    r = req(&S, "POST", path, NULL, NULL);
    resp_free(&r);
    json_decref(wait_job(&S, blk[i], 60));
  }
  /* its one job_end line: backend split, status failed */
  CHECK(split_ends(&S, "status=failed") == before + 1);
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
  if (srv_start(&S, argv[1], "--threads", "2", "--split-min-pairs", "100",
                "--tiles", "4", NULL) != 0)
    return 1;
  if (srv_start(&U, argv[1], "--threads", "2", NULL) != 0) {
    srv_cleanup(&S);
    return 1;
  }
  RUN(split_equals_whole);
  RUN(split_vincenty_nonconverged);
  RUN(split_small_in_row);
  RUN(tiles_not_listed); /* every job listed so far is split */
  RUN(gpu_jobs_not_split);
  RUN(metrics_count_the_job);
  RUN(cancel_parent_cancels_tiles);
  RUN(delete_takes_tiles_and_files);
  RUN(failing_tile_fails_parent);
  RUN(timeout_bounds_whole_split_job);
  RUN(kill9_resumes_parent);
  srv_cleanup(&S);
  srv_cleanup(&U);
  curl_global_cleanup();
  return check_summary();
}
