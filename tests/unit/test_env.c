/* test_env.c — tenv_from_store: array_meta and array_load backed by a real
 * store (in a temp dir) and .npy files: dtype and shape from the row, data
 * mapped from the file, another owner's array is "not found" exactly like
 * an unknown id, and a file that no longer matches its row is an I/O error.
 * A job's int64 result (a geodesic query's indices) taken as an input is
 * float64 (NumPy's promotion), from its file or from its row: result_load
 * gives the int64 array as stored and arrayval_resolve converts it by
 * chunks, so a result of several chunks and a ragged end has the bytes of
 * a plain element-by-element conversion, and a stop flag set before the
 * conversion (a cancel, a timeout) ends it with T_ECANCELED / T_ETIMEOUT
 * and no array (test_arrayval stops one midway).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compute/array/store_source.h"
#include "util/pool.h"

static char root[256];

/* Write a .npy of `a` to path and insert its row for owner. */
static int add_array(store *st, const char *owner, const tarray *a,
                     const char *path, const char *shape_json, char *id) {
  FILE *f = fopen(path, "wb");
  terr e;
  if (!f || npy_write(f, a, &e)) return -1;
  fclose(f);
  store_array row;
  memset(&row, 0, sizeof row);
  row.owner = strdup(owner);
  row.dtype = strdup(tdtype_name(a->dtype));
  row.shape = strdup(shape_json);
  row.bytes = a->size * (int64_t)tdtype_size(a->dtype);
  row.digest = strdup(path); /* unique per file is all the store needs */
  row.path = strdup(path);
  int existing;
  int rc = store_array_insert(st, &row, &existing, &e);
  CHECK_MSG(rc == 0, "insert: %s", e.message);
  snprintf(id, T_ID_MAX, "%s", row.id);
  store_array_clear(&row);
  return rc;
}

TEST(test_env_meta_and_load) {
  store *st = NULL;
  terr e;
  CHECK(store_open(root, &st, &e) == 0);
  if (!st) return;
  int64_t shape[2] = {3, 4};
  tarray *a = tarray_new(T_F32, 2, shape);
  for (int i = 0; i < 12; i++) tarray_set(a, i, i * 0.5);
  char path[400], id[T_ID_MAX], id2[T_ID_MAX];
  snprintf(path, sizeof path, "%s/a.npy", root);
  CHECK(add_array(st, "alice", a, path, "[3,4]", id) == 0);

  tenv env;
  tenv_from_store(&env, st, "alice", 1000);
  CHECK(env.max_elems == 1000);
  CHECK_STR(env.owner, "alice");
  tdtype dt;
  int ndim = -1;
  int64_t sh[T_MAXDIM];
  CHECK(env.array_meta(env.ud, "alice", id, &dt, &ndim, sh, &e) == 0);
  CHECK(dt == T_F32 && ndim == 2 && sh[0] == 3 && sh[1] == 4);
  tarray *got = NULL;
  CHECK(env.array_load(env.ud, "alice", id, &got, &e) == 0);
  if (got) {
    CHECK(got->dtype == T_F32 && got->ndim == 2 && got->size == 12);
    int bad = 0;
    for (int i = 0; i < 12; i++) bad += tarray_get(got, i) != i * 0.5;
    CHECK(bad == 0);
    tarray_free(got);
  }
  /* Another owner: not found, like an unknown id. */
  CHECK(env.array_meta(env.ud, "bob", id, &dt, &ndim, sh, &e) == T_ENOTFOUND);
  CHECK(env.array_load(env.ud, "bob", id, &got, &e) == T_ENOTFOUND);
  CHECK(got == NULL);
  CHECK(env.array_meta(env.ud, "alice", "a_nope", &dt, &ndim, sh, &e) ==
        T_ENOTFOUND);
  /* No cap given: none. */
  tenv_from_store(&env, st, NULL, 0);
  CHECK(env.max_elems == INT64_MAX && strcmp(env.owner, "") == 0);

  /* A row whose file says another shape: I/O error, not other data. */
  char path2[400];
  snprintf(path2, sizeof path2, "%s/b.npy", root);
  CHECK(add_array(st, "alice", a, path2, "[4,3]", id2) == 0);
  CHECK(env.array_load(env.ud, "alice", id2, &got, &e) == T_EIO);
  CHECK(strstr(e.message, "does not match") != NULL);
  /* A file gone: error, no crash. */
  unlink(path2);
  CHECK(env.array_load(env.ud, "alice", id2, &got, &e) != 0);
  tarray_free(a);
  store_close(st);
}

/* A queued geodesic job of alice's (a tile of `parent` when not NULL). */
static void add_job(store *st, const char *parent, char *id) {
  store_job j;
  memset(&j, 0, sizeof j);
  j.owner = strdup("alice");
  j.kind = strdup("geodesic");
  j.params = strdup("{}");
  j.body_hash = strdup("0");
  j.max_abs_diff = NAN;
  if (parent) {
    j.parent = strdup(parent);
    j.tiles = 1;
  }
  int existing;
  terr e;
  CHECK(store_job_insert(st, &j, &existing, &e) == 0);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
}

/* A succeeded job whose result is the int64 array a: a file, or the row. */
static void add_int64_job(store *st, const tarray *a, const char *path,
                          char *id) {
  terr e;
  add_job(st, NULL, id);
  char *npy = NULL;
  size_t len = 0;
  if (path) {
    FILE *f = fopen(path, "wb");
    CHECK(f && npy_write(f, a, &e) == 0);
    if (f) fclose(f);
  } else {
    CHECK(npy_to_buffer(a, &npy, &len, &e) == 0);
  }
  store_job_end end = {.status = JOB_SUCCEEDED, .finished_at = 5,
                       .max_abs_diff = NAN, .result_path = path,
                       .result_npy = npy, .result_npy_len = len};
  snprintf(end.result.dtype, sizeof end.result.dtype, "int64");
  end.result.ndim = a->ndim;
  end.result.shape[0] = a->shape[0];
  end.result.bytes = a->size * 8;
  CHECK(store_job_finish(st, id, &end, &e) == 0);
  free(npy);
}

/* A tile of a split job (a row with a parent) is no input: a conflict
 * naming the field and the parent, while its parent is taken. */
TEST(test_env_tile_is_no_input) {
  store *st = NULL;
  terr e;
  CHECK(store_open(root, &st, &e) == 0);
  if (!st) return;
  int64_t n = 2;
  tarray *a = tarray_new(T_I64, 1, &n);
  memset(a->data, 0, 16);
  char parent[T_ID_MAX], tile[T_ID_MAX];
  add_int64_job(st, a, NULL, parent);
  add_job(st, parent, tile);
  store_job_end end = {.status = JOB_SUCCEEDED, .finished_at = 5,
                       .max_abs_diff = NAN};
  CHECK(store_job_finish(st, tile, &end, &e) == 0);
  tenv env;
  tenv_from_store(&env, st, "alice", 1000);
  json_t *ref = json_pack("{s:s}", "result", tile);
  tarray *got = NULL;
  int rc = arrayval_resolve(&env, ref, "params.x", T_F64, &got, &e);
  CHECK_MSG(rc == T_ECONFLICT && !got && strcmp(e.field, "params.x") == 0 &&
                strstr(e.message, "tile of split job") &&
                strstr(e.message, parent),
            "a tile as input: %d %s (%s)", rc, e.message, e.field);
  json_decref(ref);
  ref = json_pack("{s:s}", "result", parent);
  CHECK(arrayval_resolve(&env, ref, "params.x", T_F64, &got, &e) == 0 && got &&
        got->size == 2);
  tarray_free(got);
  json_decref(ref);
  tarray_free(a);
  store_close(st);
}

TEST(test_env_int64_result_is_float64) {
  store *st = NULL;
  terr e;
  CHECK(store_open(root, &st, &e) == 0);
  if (!st) return;
  int64_t n = 3;
  tarray *a = tarray_new(T_I64, 1, &n);
  int64_t v[3] = {((int64_t)1 << 53) + 1, -5, 7};
  memcpy(a->data, v, sizeof v);
  char path[400], ids[2][T_ID_MAX];
  snprintf(path, sizeof path, "%s/ix.npy", root);
  add_int64_job(st, a, path, ids[0]);
  add_int64_job(st, a, NULL, ids[1]);
  tenv env;
  tenv_from_store(&env, st, "alice", 1000);
  for (int k = 0; k < 2; k++) {
    tdtype dt = T_I64;
    int ndim = -1;
    int64_t sh[T_MAXDIM];
    CHECK_MSG(env.result_meta(env.ud, "alice", ids[k], NULL, &dt, &ndim, sh, &e) == 0,
              "%s", e.message);
    CHECK(dt == T_F64 && ndim == 1 && sh[0] == 3);
    tarray *got = NULL;
    CHECK_MSG(env.result_load(env.ud, "alice", ids[k], NULL, &got, &e) == 0, "%s",
              e.message);
    /* as stored: the conversion is arrayval_resolve's */
    CHECK(got && got->dtype == T_I64 && got->size == 3 &&
          memcmp(got->data, v, sizeof v) == 0);
    tarray_free(got);
    /* Through the array-value form a kind sees: float64 (or float32 when
     * asked), never int64. */
    json_t *ref = json_pack("{s:s}", "result", ids[k]);
    got = NULL;
    CHECK(arrayval_resolve(&env, ref, "params.x", T_F64, &got, &e) == 0);
    CHECK(got && got->dtype == T_F64 && got->size == 3);
    if (got) { /* 2^53 + 1 rounds to 2^53, as numpy's astype(float64) */
      CHECK(((double *)got->data)[0] == 9007199254740992.0);
      CHECK(((double *)got->data)[1] == -5 && ((double *)got->data)[2] == 7);
    }
    tarray_free(got);
    got = NULL;
    CHECK(arrayval_resolve(&env, ref, "params.x", T_F32, &got, &e) == 0);
    CHECK(got && got->dtype == T_F32 && tarray_get(got, 1) == -5);
    tarray_free(got);
    json_decref(ref);
  }
  tarray_free(a);
  store_close(st);
}

/* An int64 result of several conversion chunks and a ragged end (a knn
 * index part read by the next job): its float64 bytes are a plain
 * element-by-element conversion's, on one thread and on a pool; a stop flag
 * already set stops it before any chunk: no array, the stop's code, named
 * at the input. */
TEST(test_env_int64_result_by_chunks) {
  store *st = NULL;
  terr e;
  CHECK(store_open(root, &st, &e) == 0);
  if (!st) return;
  int64_t n = 2 * TENV_CHUNK + 3;
  tarray *a = tarray_new(T_I64, 1, &n);
  tarray *want = tarray_new(T_F64, 1, &n);
  CHECK(a && want);
  if (!a || !want) goto done;
  int64_t *v = a->data;
  for (int64_t i = 0; i < n; i++) /* small, negative, past 2^53 (rounded) */
    v[i] = i % 3 == 0   ? i
           : i % 3 == 1 ? -i * 7
                        : (int64_t)(((uint64_t)i * 0x9E3779B97F4A7C15ULL) >> 1);
  for (int64_t i = 0; i < n; i++) ((double *)want->data)[i] = (double)v[i];
  char path[400], id[T_ID_MAX];
  snprintf(path, sizeof path, "%s/big_ix.npy", root);
  add_int64_job(st, a, path, id);
  json_t *ref = json_pack("{s:s}", "result", id);
  pool *p2 = pool_create(2, NULL, NULL);
  for (int w = 1; w <= 2; w++) {
    tenv env;
    tenv_from_store(&env, st, "alice", 0);
    env.pool = p2;
    env.width = w;
    tarray *got = NULL;
    int rc = arrayval_resolve(&env, ref, "params.x", T_F64, &got, &e);
    CHECK_MSG(rc == 0, "width %d: %s", w, e.message);
    CHECK(got && got->dtype == T_F64 && got->size == n);
    CHECK_MSG(got && memcmp(got->data, want->data, (size_t)n * 8) == 0,
              "width %d: not the plain conversion's bytes", w);
    tarray_free(got);
  }
  for (int code = 1; code <= 2; code++) {
    atomic_int stop;
    atomic_init(&stop, code);
    tenv env;
    tenv_from_store(&env, st, "alice", 0);
    env.stop = &stop;
    tarray *got = NULL;
    terr_clear(&e);
    int rc = arrayval_resolve(&env, ref, "params.x", T_F64, &got, &e);
    CHECK_MSG(rc == (code == 1 ? T_ECANCELED : T_ETIMEOUT) && !got,
              "stop %d: rc %d", code, rc);
    CHECK_STR(e.field, "params.x");
    tarray_free(got);
  }
  pool_destroy(p2);
  json_decref(ref);
done:
  tarray_free(a);
  tarray_free(want);
  store_close(st);
}

static void rm_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *de;
  char sub[600];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
    rm_tree(sub);
  }
  closedir(d);
  rmdir(path);
}

int main(void) {
  t_log_level = T_LOG_WARN;
  snprintf(root, sizeof root, "/tmp/tessel_env_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_env_meta_and_load);
  RUN(test_env_int64_result_is_float64);
  RUN(test_env_tile_is_no_input);
  RUN(test_env_int64_result_by_chunks);
  rm_tree(root);
  return check_summary();
}
