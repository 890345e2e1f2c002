/* test_lifecycle.c — compute/jobs/lifecycle.c: a client's delete and the
 * daemon's expiry end a job and an array the same way. Each world holds a
 * finished job (result file plus one part file) and an uploaded array;
 * one world is ended by jobs_delete / jobs_array_delete, the other by
 * jobs_expire. In both, every file (result, part, upload) is gone, the
 * rows are gone, and the GPU-resident drop was asked once for each id: the
 * drop goes through the test hook, so no GPU is needed.
 * The uploaded arrays kept mapped between jobs (compute/array/store_source.h)
 * end the same way: an array a job read (kept) is, after its delete or
 * its expiry, "not found" to the next check and the next load, while a
 * job that still holds it reads its bytes unharmed; a load that began
 * before a drop keeps nothing; an array loaded again is the same bytes.
 * Under threads (kept_arrays_under_threads): jobs loading 24 arrays of
 * 64 KiB each through a cache of 1 MiB (so entries are evicted while jobs
 * read them) while another thread drops them, every load reads its own
 * array's bytes (sanitizer builds also watch the references).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/array/store_source.h"
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

/* Load w's array the way a job does (store_source.c). */
static tarray *job_load(store *s, const world *w, int *rc) {
  tenv env;
  tenv_from_store(&env, s, "", 0);
  tarray *a = NULL;
  terr e;
  *rc = env.array_load(env.ud, "", w->array, &a, &e);
  return a;
}

static int job_meta(store *s, const world *w) {
  tenv env;
  tenv_from_store(&env, s, "", 0);
  tdtype dt;
  int ndim;
  int64_t shape[T_MAXDIM];
  terr e;
  return env.array_meta(env.ud, "", w->array, &dt, &ndim, shape, &e);
}

static int kept(void) {
  int n;
  arrcache_stats(&n, NULL);
  return n;
}

/* A kept array, then its end by `how` ("delete" or "expiry"). */
static void check_kept_array_ends(store *s, arrays *A, const char *dir,
                                  const char *how) {
  world w;
  terr e;
  make_world(s, A, dir, &w);
  int cluster = store_is_cluster(s); /* nothing is kept there */
  int rc;
  tarray *a1 = job_load(s, &w, &rc);
  CHECK(rc == 0 && a1 && a1->size == 4);
  CHECK_MSG(kept() == (cluster ? 0 : 1), "%s: %d kept", how, kept());
  tarray *a2 = job_load(s, &w, &rc); /* from the cache: the same bytes */
  CHECK(rc == 0 && a2 && a2->size == 4 && a2->dtype == T_F64);
  if (a1 && a2) CHECK(memcmp(a1->data, a2->data, 32) == 0);
  if (a2 && !cluster) CHECK(a2->data == a1->data && a2->release != NULL);
  CHECK(job_meta(s, &w) == 0);
  if (strcmp(how, "delete") == 0) {
    CHECK(jobs_array_delete(A, w.array, NULL, &e) == 0);
  } else {
    int nfiles = -1;
    CHECK(jobs_expire(s, t_wall_ms() + 1000, &nfiles, &e) == 0);
  }
  CHECK_MSG(kept() == 0, "%s: %d kept after the array's end", how, kept());
  CHECK_MSG(job_meta(s, &w) == T_ENOTFOUND, "%s: the check still finds it",
            how);
  tarray *a3 = job_load(s, &w, &rc);
  CHECK_MSG(rc == T_ENOTFOUND && !a3, "%s: a job still loads it (%d)", how,
            rc);
  /* the jobs that held it read on: zeros, as uploaded */
  static const double zeros[4];
  if (a2) CHECK(memcmp(a2->data, zeros, sizeof zeros) == 0);
  tarray_free(a1);
  tarray_free(a2);
  tarray_free(a3);
}

TEST(kept_arrays_end_with_their_array) {
  char dir[300], sub[400];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  snprintf(sub, sizeof sub, "%s/results", dir);
  CHECK(mkdir(sub, 0700) == 0);
  snprintf(sub, sizeof sub, "%s/arrays", dir);
  CHECK(mkdir(sub, 0700) == 0);
  arrays A = {.st = s, .data_dir = dir};
  jobs_lifecycle_gpu_drop_hook(record_drop);
  arrcache_clear();
  check_kept_array_ends(s, &A, dir, "delete");
  check_kept_array_ends(s, &A, dir, "expiry");

  /* A load that began before a drop (its row read, then the array
   * deleted) offers what it mapped: kept nothing, the caller keeps it. */
  world w;
  make_world(s, &A, dir, &w);
  terr e;
  tarray *m = NULL;
  char path[400];
  snprintf(path, sizeof path, "%s", w.upload);
  uint64_t gen = arrcache_gen();
  CHECK(tarray_map_npy(path, &m, &e) == 0);
  arrcache_drop(w.array);
  tarray *got = arrcache_adopt(s, "", w.array, gen, m);
  CHECK(got == m && kept() == 0);
  tarray_free(got);
  /* The same offer under the current generation is kept. */
  CHECK(tarray_map_npy(path, &m, &e) == 0);
  got = arrcache_adopt(s, "", w.array, arrcache_gen(), m);
  CHECK(got != m && kept() == 1 && got->data == m->data);
  tarray_free(got);
  arrcache_clear();
  CHECK(kept() == 0);
  jobs_lifecycle_gpu_drop_hook(NULL);
  store_close(s);
}

#define NARR 24
#define ELEMS 8192 /* 64 KiB: 16 fit in the cache's 1 MiB (main's setenv) */

typedef struct shared_arrays {
  store *s;
  char id[NARR][T_ID_MAX];
  atomic_int stop, bad, loads;
} shared_arrays;

static void *loader(void *arg) {
  shared_arrays *w = arg;
  tenv env;
  tenv_from_store(&env, w->s, "", 0);
  unsigned seed = (unsigned)(uintptr_t)&env;
  for (int i = 0; i < 3000 && !atomic_load(&w->stop); i++) {
    int k = (int)(rand_r(&seed) % NARR);
    tarray *a = NULL;
    terr e;
    if (env.array_load(env.ud, "", w->id[k], &a, &e) != 0 || !a ||
        a->size != ELEMS) {
      atomic_fetch_add(&w->bad, 1);
    } else {
      const double *d = a->data;
      if (d[0] != k || d[ELEMS - 1] != k + 0.5) atomic_fetch_add(&w->bad, 1);
    }
    tarray_free(a);
    atomic_fetch_add(&w->loads, 1);
  }
  return NULL;
}

static void *dropper(void *arg) {
  shared_arrays *w = arg;
  for (int i = 0; !atomic_load(&w->stop); i++) {
    arrcache_drop(w->id[i % NARR]);
    usleep(50);
  }
  return NULL;
}

TEST(kept_arrays_under_threads) {
  char dir[300], sub[400];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  snprintf(sub, sizeof sub, "%s/arrays", dir);
  CHECK(mkdir(sub, 0700) == 0);
  arrays A = {.st = s, .data_dir = dir};
  shared_arrays w = {.s = s};
  int64_t shape[1] = {ELEMS};
  for (int k = 0; k < NARR; k++) {
    tarray *a = tarray_zeros(T_F64, 1, shape);
    double *d = a->data;
    for (int i = 0; i < ELEMS; i++) d[i] = k;
    d[ELEMS - 1] = k + 0.5;
    store_array rec;
    int existing = 0;
    terr e;
    CHECK(arrays_put(&A, "", a, &rec, &existing, &e) == 0);
    snprintf(w.id[k], T_ID_MAX, "%s", rec.id);
    store_array_clear(&rec);
    tarray_free(a);
  }
  arrcache_clear();
  pthread_t t[4], d;
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, loader, &w);
  pthread_create(&d, NULL, dropper, &w);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  atomic_store(&w.stop, 1);
  pthread_join(d, NULL);
  size_t bytes;
  arrcache_stats(NULL, &bytes);
  CHECK_MSG(atomic_load(&w.bad) == 0, "%d of %d loads read another array",
            atomic_load(&w.bad), atomic_load(&w.loads));
  CHECK_MSG(bytes <= ((size_t)1 << 20), "%zu bytes kept over the 1 MiB bound",
            bytes);
  arrcache_clear();
  store_close(s);
}

int main(void) {
  /* before the cache's first use in this process: its bound (1 MiB) */
  setenv("TESSEL_ARRAY_CACHE_MB", "1", 1);
  if (fixture_root("/tmp/tessel_lifecycle_XXXXXX")) return 1;
  RUN(test_delete_and_expiry_end_alike);
  RUN(kept_arrays_end_with_their_array);
  RUN(kept_arrays_under_threads);
  rm_tree(root);
  return check_summary();
}
