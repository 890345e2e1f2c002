/* test_disk_reserve.c — the way out of a full disk is never blocked by the
 * full disk (issue 23, case 8: with the data directory full, 33 of 33
 * DELETEs of arrays answered 507 and a new job then got a 500 "could not
 * be recorded").
 *
 * The data dir is a 64 MiB tmpfs (needs root; skipped with CTest's skip
 * otherwise) and the daemon runs with its default reserve (5% of it:
 * 3.2 MiB). NJOBS small jobs are run (their results in their rows: their
 * deletes free no file), arrays are uploaded until the disk refuses one
 * (507), then a filler file (another process, say) takes every block that
 * is left. Then:
 *   - a new job is refused 507 resource_exhausted (not a 500), and the
 *     daemon still answers;
 *   - after a SIGTERM the daemon starts again on the full disk (the stop
 *     truncated its WAL, so every page the deletes write is new room; the
 *     filler takes what the truncation freed), still refusing new jobs
 *     507;
 *   - every job's DELETE answers 200, then every array's, whose file is
 *     gone; the store's growth over them is printed;
 *   - a new job is then recorded and succeeds;
 *   - the store passes PRAGMA integrity_check.
 */
#include <sys/statvfs.h>

#include "full_disk.h"

static srv S;

#define MAX_ARRAYS 64
static char ids[MAX_ARRAYS][64];
static int nids;
static char job_id[64];
#define NJOBS 400
static char jids[NJOBS][64];

#define SMALL_MAP                                                          \
  "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":"      \
  "[1,2,3]}}}"

/* A float64 .npy of n elements (the caller frees *body). */
static size_t npy_body(int64_t n, char **body) {
  char hdr[128];
  int hl = snprintf(hdr, sizeof hdr,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': "
                    "(%lld,), }", (long long)n);
  int pad = (64 - (10 + hl + 1) % 64) % 64;
  size_t hlen = (size_t)(hl + pad + 1);
  size_t len = 10 + hlen + (size_t)n * 8;
  char *b = calloc(1, len);
  if (!b) return 0;
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(hlen & 0xff);
  b[9] = (char)(hlen >> 8);
  memcpy(b + 10, hdr, (size_t)hl);
  memset(b + 10 + hl, ' ', (size_t)pad);
  b[10 + hl + pad] = '\n';
  double *d = (double *)(b + 10 + hlen);
  for (int64_t i = 0; i < n; i++) d[i] = (double)i;
  *body = b;
  return len;
}

static off_t reserve_size; /* the daemon's reserve, read at its start */

static off_t reserve_bytes(void) {
  char path[400];
  struct stat sb;
  snprintf(path, sizeof path, "%s/tesseld.reserve", S.dir);
  return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* Take every block left on the file system with one file. The daemon may
 * have given its reserve to the store already (its own writes took the
 * free space under the low mark) or give it while the filler runs (its
 * main loop looks every second); the filler would then take that room
 * too, which is not the case under test (another process eating the
 * reserve itself, which no reserve withstands): the filler then stops
 * short by the reserve, as if it had been that much smaller. */
static void fill_up(void) {
  char path[400];
  snprintf(path, sizeof path, "%s/filler", S.dir);
  off_t reserve = reserve_size;
  CHECK(reserve > 0);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  if (fd < 0) return;
  off_t end = 0;
  for (off_t chunk = (off_t)64 << 20; chunk >= 4096;) {
    if (posix_fallocate(fd, end, chunk) == 0) end += chunk;
    else chunk /= 2;
  }
  int given = reserve_bytes() == 0;
  if (given) CHECK(end > reserve && ftruncate(fd, end - reserve) == 0);
  close(fd);
  struct statvfs v;
  CHECK(statvfs(S.dir, &v) == 0 && (given || v.f_bavail == 0));
  if (given) printf("note: the reserve was given while the filler ran\n");
}

TEST(fill_the_disk) {
  for (int i = 0; i < NJOBS; i++) {
    long st;
    json_t *j = submit(&S, "?wait=30", SMALL_MAP, &st);
    CHECK(j && st == 200 && !strcmp(jstr(j, "status"), "succeeded"));
    snprintf(jids[i], sizeof jids[i], "%s", j ? jstr(j, "id") : "");
    json_decref(j);
  }
  char *body = NULL;
  size_t len = npy_body(196608, &body); /* 1.5 MiB each */
  CHECK(len > 0);
  long last = 0;
  size_t data_off = body ? 10 + (size_t)(unsigned char)body[8] +
                               ((size_t)(unsigned char)body[9] << 8)
                         : 0;
  for (int k = 0; body && nids < MAX_ARRAYS; k++) {
    /* Equal bodies are one array (by digest): each one differs. */
    double first = (double)k + 0.5;
    memcpy(body + data_off, &first, sizeof first);
    resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", body,
                  (long)len, NULL);
    last = r.status;
    json_t *j = r.status == 201 || r.status == 200 ? resp_json(&r) : NULL;
    if (j) snprintf(ids[nids++], sizeof ids[0], "%s", jstr(j, "id"));
    json_decref(j);
    if (last == 507) CHECK(is_error(&r, 507, "resource_exhausted", NULL));
    resp_free(&r);
    if (last != 201 && last != 200) break;
  }
  free(body);
  CHECK_MSG(last == 507, "the upload after %d arrays answered %ld", nids,
            last);
  CHECK(nids >= 8);
  fill_up();
  printf("note: %d jobs, %d arrays of 1.5 MiB, then the filler took the "
         "rest\n", NJOBS, nids);
}

TEST(new_work_on_a_full_disk_is_507) {
  long st;
  json_t *j = submit(&S, "?wait=30", SMALL_MAP, &st);
  CHECK_MSG(st == 507, "a job on a full disk answered %ld", st);
  json_decref(j);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

TEST(restart_on_the_full_disk) {
  int rc = srv_kill(&S, SIGTERM);
  CHECK_MSG(rc == 0, "the daemon's exit status %d", rc);
  CHECK(srv_restart(&S) == 0);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  /* The stop truncated the WAL, and the restart took the reserve back with
   * that room: the filler takes the rest again. */
  fill_up();
  long st;
  json_t *j = submit(&S, "?wait=30", SMALL_MAP, &st);
  CHECK_MSG(st == 507, "a job on a full disk after a restart answered %ld",
            st);
  json_decref(j);
}

static long long file_size(const char *name) {
  char path[400];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", S.dir, name);
  return stat(path, &sb) == 0 ? (long long)sb.st_blocks * 512 : 0;
}

static long long store_size(void) {
  return file_size("tessel.db") + file_size("tessel.db-wal") +
         file_size("tessel.db-shm");
}

TEST(every_job_delete_succeeds_on_a_full_disk) {
  long long size0 = store_size();
  int ok = 0;
  for (int i = 0; i < NJOBS; i++) {
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", jids[i]);
    resp r = req(&S, "DELETE", path, NULL, NULL);
    if (r.status == 200) ok++;
    else if (NJOBS - ok < 5)
      printf("DELETE %s: %ld %.*s\n", jids[i], r.status, (int)r.len, r.body);
    resp_free(&r);
  }
  CHECK_MSG(ok == NJOBS, "%d of %d job DELETEs answered 200", ok, NJOBS);
  printf("note: the store (database, WAL, shm) grew by %lld bytes over %d "
         "job deletes\n",
         store_size() - size0, NJOBS);
}

TEST(every_array_delete_succeeds_on_a_full_disk) {
  long long wal0 = store_size();
  int ok = 0;
  for (int i = 0; i < nids; i++) {
    char path[128];
    snprintf(path, sizeof path, "/v1/arrays/%s", ids[i]);
    resp r = req(&S, "DELETE", path, NULL, NULL);
    if (r.status == 200) ok++;
    else printf("DELETE %s: %ld %.*s\n", ids[i], r.status, (int)r.len, r.body);
    resp_free(&r);
    r = req(&S, "GET", path, NULL, NULL);
    CHECK(r.status == 404);
    resp_free(&r);
  }
  CHECK_MSG(ok == nids, "%d of %d DELETEs answered 200", ok, nids);
  printf("note: the store grew by %lld bytes over %d array deletes\n",
         store_size() - wal0, nids);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s/arrays)\"", S.dir);
  CHECK(system(cmd) == 0);
}

TEST(after_the_deletes_a_new_job_succeeds) {
  long st;
  json_t *j = submit(&S, "?wait=30", SMALL_MAP, &st);
  CHECK_MSG(j && st == 200 && !strcmp(jstr(j, "status"), "succeeded"),
            "a job after the deletes answered %ld %s", st,
            j ? jstr(j, "status") : "");
  snprintf(job_id, sizeof job_id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
}

TEST(the_store_is_sound) {
  int rc = srv_kill(&S, SIGTERM);
  CHECK_MSG(rc == 0, "the daemon's exit status %d", rc);
  char why[300];
  CHECK_STR(store_integrity(S.dir, why, sizeof why), "ok");
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_disk_reserve <tesseld>");
  if (full_disk_start(&S, argv[1], "reserve", "1") != 0) return 1;
  reserve_size = reserve_bytes(); /* held at start: its full size */
  RUN(fill_the_disk);
  RUN(new_work_on_a_full_disk_is_507);
  RUN(restart_on_the_full_disk);
  RUN(every_job_delete_succeeds_on_a_full_disk);
  RUN(every_array_delete_succeeds_on_a_full_disk);
  RUN(after_the_deletes_a_new_job_succeeds);
  RUN(the_store_is_sound);
  full_disk_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
