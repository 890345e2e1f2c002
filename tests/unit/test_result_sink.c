/* test_result_sink.c — map results written by slices (compute/sched/run.c's
 * result_stream, compute/array/codec/npyfile.c's sink), through the real scheduler and
 * the real map kind:
 *   - a result file written by 3 pool threads is byte for byte the serial
 *     one, float64 and float32, for sizes no chunk or slice divides, one
 *     element and zero elements (every result is a file here: no row);
 *   - "compare" reads its sink results back and keeps an identical file;
 *   - a full disk (the results folder on an 8 MiB tmpfs: needs root,
 *     a CTest skip with the reason otherwise) fails the job "resource_exhausted"
 *     with no file under the result's name and no temporary left, and the
 *     next job that fits succeeds;
 *   - below the scheduler, a write that fails in the middle of a parallel
 *     map (the sink's file swapped for /dev/full once created) ends the run
 *     with T_ENOSPACE and writes nothing more.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>

#include "sched_fixture.h"

static char *result_of(fx *f, const char *kind_params, const char *backend,
                       store_job *j) {
  char id[T_ID_MAX];
  memset(j, 0, sizeof *j);
  if (submit(f, "map", kind_params, backend, 5, 0, id) != 0) return NULL;
  if (!wait_final(f, id, j)) return NULL;
  CHECK_MSG(j->status == JOB_SUCCEEDED, "%s on %s: %s", kind_params, backend,
            j->error_message ? j->error_message : "?");
  return j->result_path;
}

static int same_file(const char *p, const char *q) {
  size_t lp = 0, lq = 0;
  char *a = p ? slurp(p, &lp) : NULL, *b = q ? slurp(q, &lq) : NULL;
  int same = a && b && lp == lq && memcmp(a, b, lp) == 0;
  free(a);
  free(b);
  return same;
}

TEST(parallel_file_is_the_serial_file) {
  fx f;
  if (fx_open(&f, 3)) return;
  const long long sizes[] = {0, 1, 32769, 196613, 1000003};
  for (int dt = 0; dt < 2; dt++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      char params[256];
      snprintf(params, sizeof params,
               "{\"expr\": \"x + 7\", \"dtype\": \"%s\", \"inputs\": "
               "{\"x\": {\"range\": {\"stop\": %lld}}}}",
               dt ? "float32" : "float64", sizes[k]);
      store_job js, jc;
      const char *ps = result_of(&f, params, "serial", &js);
      const char *pc = result_of(&f, params, "cpu", &jc);
      CHECK_MSG(ps && pc, "no result file for %s", params);
      CHECK_MSG(same_file(ps, pc), "serial and cpu files differ: %s", params);
      if (!dt && ps) check_npy(ps, sizes[k], 7);
      if (sizes[k] == 196613) {
        store_job jm;
        const char *pm = result_of(&f, params, "compare", &jm);
        CHECK_MSG(same_file(ps, pm), "compare's file differs: %s", params);
        store_job_clear(&jm);
      }
      store_job_clear(&js);
      store_job_clear(&jc);
    }
  wait_idle(&f);
  CHECK(count_tmp_files(f.dir) == 0);
  fx_close(&f);
}

TEST(full_disk_fails_the_job_cleanly) {
  fx f;
  if (fx_open(&f, 2)) return;
  char results[400];
  snprintf(results, sizeof results, "%s/results", f.dir);
  if (mount("tmpfs", results, "tmpfs", 0, "size=8m") != 0) {
    int err = errno;
    fx_close(&f);
    SKIP_TEST("cannot mount a tmpfs (%s; needs root)", strerror(err));
  }
  const char *const backends[] = {"serial", "cpu"};
  for (int b = 0; b < 2; b++) {
    char id[T_ID_MAX], final[500];
    store_job j;
    /* 16 MB of float64 into 8 MiB */
    CHECK(submit(&f, "map",
                 "{\"expr\": \"x * 2\", \"inputs\": {\"x\": {\"range\": "
                 "{\"stop\": 2000000}}}}",
                 backends[b], 5, 0, id) == 0);
    if (!wait_final(&f, id, &j)) continue;
    CHECK_MSG(j.status == JOB_FAILED && j.error_code &&
                  !strcmp(j.error_code, "resource_exhausted"),
              "%s: status %d, %s: %s", backends[b], (int)j.status,
              j.error_code ? j.error_code : "-",
              j.error_message ? j.error_message : "-");
    CHECK(j.result_path == NULL);
    snprintf(final, sizeof final, "%s/%s.npy", results, id);
    CHECK_MSG(access(final, F_OK) != 0, "%s exists", final);
    store_job_clear(&j);
  }
  wait_idle(&f);
  CHECK(count_tmp_files(f.dir) == 0);
  store_job j;
  const char *p = result_of(&f,
                            "{\"expr\": \"x + 7\", \"inputs\": {\"x\": "
                            "{\"range\": {\"stop\": 100000}}}}",
                            "cpu", &j);
  if (p) check_npy(p, 100000, 7);
  store_job_clear(&j);
  fx_close(&f);
  umount2(results, MNT_DETACH);
}

/* result_stream of the next test: a sink at sink_path whose descriptor is
 * then pointed at /dev/full (found through /proc/self/fd by its path). */
static char sink_path[400];
static int full_stream(job_ctx *c, tdtype dt, int nd, const int64_t *sh,
                       tarray **out, terr *e) {
  int rc = tarray_create_npy_sink(sink_path, dt, nd, sh, out, e);
  if (rc) return rc;
  int full = open("/dev/full", O_WRONLY | O_CLOEXEC), swapped = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  while (full >= 0 && d && (de = readdir(d))) {
    char link[64], target[512];
    snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (!strcmp(target, sink_path) && atoi(de->d_name) != full)
      swapped = dup2(full, atoi(de->d_name)) >= 0;
  }
  if (d) closedir(d);
  if (full >= 0) close(full);
  CHECK_MSG(swapped, "the sink's descriptor was not found");
  return rc;
}
static int heap_alloc(job_ctx *c, tdtype dt, int nd, const int64_t *sh,
                      tarray **out, terr *e) {
  *out = tarray_new(dt, nd, sh);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

TEST(write_error_mid_run_fails_the_run) {
  snprintf(sink_path, sizeof sink_path, "%s/full.npy.tmp", root);
  pool *p = pool_create(3, NULL, NULL);
  atomic_int stop;
  atomic_init(&stop, 0);
  const kind_ops *k = kind_find("map");
  json_t *params = json_loads(
      "{\"expr\": \"x + 1\", \"inputs\": {\"x\": {\"range\": "
      "{\"stop\": 1000003}}}}", 0, NULL);
  tenv env = {.owner = "", .max_elems = INT64_MAX / 8};
  void *plan = NULL;
  terr e;
  CHECK(params && k && k->prepare(params, &env, &plan, &e) == 0);
  for (int width = 1; plan && width <= 3; width += 2) {
    job_ctx c;
    memset(&c, 0, sizeof c);
    c.pool = p;
    c.threads = width;
    c.stop = &stop;
    c.result_alloc = heap_alloc;
    c.result_stream = full_stream;
    tarray *res = NULL;
    terr_clear(&e);
    int rc = k->run(plan, width == 1 ? B_SERIAL : B_CPU, &c, &res, &e);
    CHECK_MSG(rc == T_ENOSPACE && !res, "width %d: rc %d: %s", width, rc,
              e.message);
    /* the chunks after the failure did nothing (none counted as done) */
    CHECK(atomic_load(&c.progress_done) < atomic_load(&c.progress_total));
    unlink(sink_path);
  }
  if (plan) k->release(plan);
  json_decref(params);
  pool_destroy(p);
}

int main(void) {
  t_log_level = T_LOG_ERROR + 1; /* the full disk's job errors are expected */
  snprintf(root, sizeof root, "/tmp/tessel_sink_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(parallel_file_is_the_serial_file);
  RUN(full_disk_fails_the_job_cleanly);
  RUN(write_error_mid_run_fails_the_run);
  rm_tree(root);
  return check_summary();
}
