/* test_env.c — tenv_from_store: array_meta and array_load backed by a real
 * store (in a temp dir) and .npy files: dtype and shape from the row, data
 * mapped from the file, another owner's array is "not found" exactly like
 * an unknown id, and a file that no longer matches its row is an I/O error.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "array/store_source.h"

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
  rm_tree(root);
  return check_summary();
}
