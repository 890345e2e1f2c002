/* test_lifecycle.c — compute/jobs/lifecycle.c: a client's delete and the
 * daemon's expiry end a job and an array the same way. Each world holds a
 * finished job (result file plus one part file) and an uploaded array;
 * one world is ended by jobs_delete / jobs_array_delete, the other by
 * jobs_expire. In both, every file (result, part, upload) is gone, the
 * rows are gone, and the GPU-resident drop was asked once for each id: the
 * drop goes through the test hook, so no GPU is needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/jobs/lifecycle.h"
#include "store_fixture.h"
#include "util/util.h"

#define DROPS_MAX 16
static char drops[DROPS_MAX][T_ID_MAX];
static int ndrops;

static void record_drop(const char *id) {
  if (ndrops < DROPS_MAX) snprintf(drops[ndrops++], T_ID_MAX, "%s", id);
}

static int drops_of(const char *id) {
  int n = 0;
  for (int i = 0; i < ndrops; i++) n += strcmp(drops[i], id) == 0;
  return n;
}

static int exists(const char *path) {
  return access(path, F_OK) == 0;
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  CHECK_MSG(f != NULL, "cannot create %s", path);
  if (f) fclose(f);
}

/* One world: a finished job with a result and a part, and an array. */
typedef struct world {
  char job[T_ID_MAX], array[T_ID_MAX];
  char result[400], part[400], upload[400];
} world;

static void make_world(store *s, arrays *A, const char *dir, world *w) {
  terr e;
  CHECK(insert_job(s, "", "map", 0, w->job) == 0);
  snprintf(w->result, sizeof w->result, "%s/results/%s.npy", dir, w->job);
  snprintf(w->part, sizeof w->part, "%s/results/%s.b.npy", dir, w->job);
  touch(w->result);
  touch(w->part);
  char parts[600];
  snprintf(parts, sizeof parts,
           "[{\"name\":\"a\",\"dtype\":\"float64\",\"shape\":[3],\"bytes\":24},"
           "{\"name\":\"b\",\"dtype\":\"float64\",\"shape\":[3],\"bytes\":24,"
           "\"path\":\"%s\"}]",
           w->part);
  store_job_end x = {
      .status = JOB_SUCCEEDED,
      .finished_at = t_wall_ms(),
      .result = {.dtype = "float64", .ndim = 1, .shape = {3}, .bytes = 24},
      .result_path = w->result,
      .result_parts = parts,
      .max_abs_diff = NAN};
  CHECK(store_job_finish(s, w->job, &x, &e) == 0);

  int64_t shape[1] = {4};
  tarray *a = tarray_zeros(T_F64, 1, shape);
  store_array rec;
  int existing = 0;
  CHECK_MSG(arrays_put(A, "", a, &rec, &existing, &e) == 0, "arrays_put: %s",
            e.message);
  tarray_free(a);
  snprintf(w->array, sizeof w->array, "%s", rec.id);
  snprintf(w->upload, sizeof w->upload, "%s", rec.path ? rec.path : "");
  store_array_clear(&rec);
  CHECK(exists(w->result) && exists(w->part) && exists(w->upload));
}

/* The world is gone: rows, files, and one GPU drop per id. */
static void check_gone(store *s, const world *w, const char *how) {
  terr e;
  store_job j;
  store_array a;
  CHECK_MSG(store_job_get(s, w->job, NULL, &j, &e) == T_ENOTFOUND,
            "%s: the job's row is left", how);
  CHECK_MSG(store_array_get(s, w->array, NULL, &a, &e) == T_ENOTFOUND,
            "%s: the array's row is left", how);
  CHECK_MSG(!exists(w->result), "%s: the result file is left", how);
  CHECK_MSG(!exists(w->part), "%s: the part file is left", how);
  CHECK_MSG(!exists(w->upload), "%s: the upload is left", how);
  CHECK_MSG(drops_of(w->job) == 1, "%s: the job's GPU copy dropped %d times",
            how, drops_of(w->job));
  CHECK_MSG(drops_of(w->array) == 1,
            "%s: the array's GPU copy dropped %d times", how,
            drops_of(w->array));
}

TEST(test_delete_and_expiry_end_alike) {
  char dir[300], sub[400];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  snprintf(sub, sizeof sub, "%s/results", dir);
  CHECK(mkdir(sub, 0700) == 0);
  snprintf(sub, sizeof sub, "%s/arrays", dir);
  CHECK(mkdir(sub, 0700) == 0);
  arrays A = {.st = s, .data_dir = dir};
  jobs J = {.st = s};
  jobs_lifecycle_gpu_drop_hook(record_drop);
  terr e;

  world del, exp;
  make_world(s, &A, dir, &del);
  ndrops = 0;
  CHECK(jobs_delete(&J, del.job, NULL, &e) == 0);
  CHECK(jobs_array_delete(&A, del.array, NULL, &e) == 0);
  check_gone(s, &del, "delete");
  CHECK(ndrops == 2);

  make_world(s, &A, dir, &exp);
  ndrops = 0;
  int nfiles = -1;
  /* Everything made so far is older than a second from now. */
  CHECK(jobs_expire(s, t_wall_ms() + 1000, &nfiles, &e) == 0);
  CHECK(nfiles == 3);
  check_gone(s, &exp, "expiry");
  CHECK(ndrops == 2);

  /* A delete of what is gone is 404 and drops nothing. */
  ndrops = 0;
  CHECK(jobs_delete(&J, del.job, NULL, &e) == T_ENOTFOUND);
  CHECK(jobs_array_delete(&A, exp.array, NULL, &e) == T_ENOTFOUND);
  CHECK(ndrops == 0);
  jobs_lifecycle_gpu_drop_hook(NULL);
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_lifecycle_XXXXXX")) return 1;
  RUN(test_delete_and_expiry_end_alike);
  rm_tree(root);
  return check_summary();
}
