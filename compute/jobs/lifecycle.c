/* compute/jobs/lifecycle.c — the one owner of the end of a job or an array
 * (lifecycle.h): client delete and daemon expiry take the same path.
 *
 * Order, for each ended thing: (1) the store's row, in one transaction
 * that returns the files the row named; (2) the kept copies of its id: an
 * uploaded array's mapping (compute/array/store_source.h) and the GPU-resident
 * copies (an uploaded array's, a chain's result kept on a device); (3) the
 * files, result and every part's, or the upload. Row first because a row
 * is what a reader follows to a file: a crash or a failure after (1)
 * leaves at worst files that nothing names (disk space, never a wrong
 * answer; no sweep removes such a finished file today, only the .tmp
 * ones and unfinished jobs' results at start, compute/sched and
 * compute/array), and never a row that names a missing file. A failed
 * (1) changes nothing. The GPU drop never fails (it is queued while a
 * device is busy) and a file already gone (ENOENT) is not an error; any
 * other unlink error is left as the orphan above.
 *
 * Expiry learns from the store only the files it removed, so the ids whose
 * GPU copies go are read back from the file names, which the writers build
 * from the id: arrays/<id>.npy (compute/array), results/<stem>[.part].npy
 * with stem <job id> or <job id>.r<n> (compute/sched). A name that yields
 * no valid id drops nothing.
 *
 * The full disk: the store's expiry and delete write on the disk reserve
 * when the disk is full (db/sqlite gives it up once and retries), so a
 * delete still frees room on a full disk; nothing here needs to.
 *
 * Uploads in parts that were never completed have neither row nor GPU
 * copy: their end is parts_upload.h's delete or expiry, called from here.
 *
 * Threads: any; no lock here (the store and the GPU runtime take theirs).
 */
#include "compute/jobs/lifecycle.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/array/store_source.h"
#include "compute/array/codec/parts_upload.h"
#include "compute/gpu/gpu.h"
#include "util/util.h"

static void (*gpu_drop)(const char *id) = gpu_resident_drop;

void jobs_lifecycle_gpu_drop_hook(void (*drop)(const char *id)) {
  gpu_drop = drop ? drop : gpu_resident_drop;
}

/* Remove the file and free its path (NULL: nothing). ENOENT: gone
 * already; another error leaves an orphan (see the top). */
static void remove_file(char *path) {
  if (path) (void)unlink(path);
  free(path);
}

/* Remove the n files and free them and the array (paths may be NULL). */
static void remove_files(char **paths, int n) {
  for (int i = 0; i < n; i++) remove_file(paths[i]);
  free(paths);
}

/* The id a stored file's name carries (see the top), into id; 0 if none. */
static int id_of_path(const char *path, char id[T_ID_MAX]) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t len = strcspn(base, ".");
  if (len == 0 || len >= T_ID_MAX) return 0;
  memcpy(id, base, len);
  id[len] = 0;
  return t_id_valid('a', id) || t_id_valid('j', id);
}

int jobs_delete(jobs *J, const char *id, const char *owner, terr *e) {
  if (!id || !t_id_valid('j', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "job '%s' not found",
                    id ? id : "");
  char **paths = NULL;
  int n = 0;
  /* The store's 409 says what blocks the delete: the job's own status,
   * the queued jobs that take its result, or its tiles. */
  int rc = store_job_delete(J->st, id, owner, &paths, &n, e);
  if (rc) return rc;
  gpu_drop(id);
  remove_files(paths, n);
  return T_OK;
}

int jobs_array_delete(arrays *A, const char *id, const char *owner, terr *e) {
  char *path = NULL;
  int rc = arrays_delete(A, id, owner, &path, e);
  if (rc) return rc;
  arrcache_drop(id);
  gpu_drop(id);
  remove_file(path);
  return T_OK;
}

int jobs_expire(store *st, int64_t before_ms, int *nfiles, terr *e) {
  if (nfiles) *nfiles = 0;
  char **paths = NULL;
  int n = 0;
  int rc = store_expire(st, before_ms, &paths, &n, e);
  if (rc) return rc;
  char id[T_ID_MAX], last[T_ID_MAX] = "";
  for (int i = 0; i < n; i++) { /* a job's parts follow its result */
    if (paths[i] && id_of_path(paths[i], id) && strcmp(id, last) != 0) {
      if (id[0] == 'a') arrcache_drop(id);
      gpu_drop(id);
      memcpy(last, id, sizeof last);
    }
  }
  remove_files(paths, n);
  if (nfiles) *nfiles = n;
  return T_OK;
}

void jobs_uploads_setup(const parts_limits *l) { parts_upload_setup(l); }

int jobs_upload_delete(const char *id, const char *owner, terr *e) {
  return parts_upload_delete(id, owner, e);
}

void jobs_uploads_expire(int *n) { parts_upload_expire(t_wall_ms(), n); }
