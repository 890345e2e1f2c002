/* sched_fixture.h — shared by the scheduler tests (test_sched.c and
 * test_sched_gpu.c): test kinds passed through cfg.kind_lookup, a fixture
 * with a real store in a fresh temp dir, the API's submit sequence, waits
 * that poll the store, and a hand-made .npy check.
 *
 *   sleepy  {"n","ms","value","work"}: n chunks of ms each over the pool,
 *           result[c] = value + c; honours stop between chunks. On cuda it
 *           records the device and checks the device lock is held.
 *   gate    blocks (checking stop) until the test opens the gate
 *   record  appends params.tag to a list (run order)
 *   fail    fails at check / prepare / run ({"at": ...}) with T_EINVAL; on
 *           cuda it fails with T_EDEVICE (a GPU error)
 *   wrong   like sleepy, but the cpu result is off by 0.5 (compare)
 *   loose   wrong, with a plan tolerance (kind_ops.tolerance) of atol 0.75
 *           when params.loose is true
 *
 * fake_lock / fake_unlock / fake_trylock: the GPU tests' device locks.
 *
 * Static functions: each test file uses a subset.
 */
#ifndef TESSEL_TESTS_SCHED_FIXTURE_H
#define TESSEL_TESTS_SCHED_FIXTURE_H
#pragma GCC diagnostic ignored "-Wunused-function"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "util/pool.h"
#include "compute/jobs/jobs.h"
#include "compute/sched/sched.h"
#include "db/store.h"

static char root[256];
static int dir_seq;

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1e3),
                        (long)(fmod(ms, 1e3) * 1e6)};
  nanosleep(&ts, NULL);
}

/* ---- test kinds ----------------------------------------------------------- */
static atomic_long chunks_run;
static atomic_int gate_open;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static char order[4096];

typedef struct splan {
  int64_t n;
  double ms, value, work;
  int wrong, loose;
  const char *tag;
} splan;

static int sleepy_check(const json_t *params, const tenv *env,
                        job_estimate *est, terr *e) {
  json_int_t n = 0;
  double work = 0;
  if (json_unpack((json_t *)params, "{s:I, s?F}", "n", &n, "work", &work) != 0 ||
      n < 1)
    return terr_set(e, T_EINVAL, "params.n", -1, "must be a positive integer");
  est->out_dtype = T_F64;
  est->out_ndim = 1;
  est->out_shape[0] = n;
  est->out_bytes = n * 8;
  est->mem_bytes = n * 8;
  est->work = work > 0 ? work : (double)n;
  est->ops_per_elem = 1;
  est->size = n;
  return T_OK;
}

static int sleepy_prepare(const json_t *params, const tenv *env, void **plan,
                          terr *e) {
  splan *p = calloc(1, sizeof *p);
  json_int_t n = 0;
  p->value = 0;
  json_unpack((json_t *)params, "{s:I, s?F, s?F}", "n", &n, "ms", &p->ms,
              "value", &p->value);
  p->n = n;
  *plan = p;
  return T_OK;
}

typedef struct srun_arg {
  splan *p;
  tarray *res;
  job_ctx *ctx;
  double add;
} srun_arg;

static void sleepy_chunk(void *arg, int64_t c, int slot) {
  srun_arg *a = arg;
  if (a->p->ms > 0) sleep_ms(a->p->ms);
  tarray_set(a->res, c, a->p->value + (double)c + a->add);
  job_ctx_progress(a->ctx, 1);
  atomic_fetch_add(&chunks_run, 1);
}

/* Called by sleepy on B_CUDA (the GPU test checks device and lock). */
static void (*cuda_hook)(job_ctx *ctx);

static int sleepy_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                      terr *e) {
  splan *p = plan;
  if (b == B_CUDA && cuda_hook) cuda_hook(ctx);
  tarray *res = NULL;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &p->n, &res, e);
  if (rc) return rc;
  atomic_store(&ctx->progress_total, p->n);
  srun_arg a = {p, res, ctx, p->wrong && b == B_CPU ? 0.5 : 0};
  if (pool_for(ctx->pool, ctx->threads, p->n, sleepy_chunk, &a, ctx->stop)) {
    tarray_free(res);
    return terr_set(e, job_ctx_stop_code(ctx), "", -1, "stopped");
  }
  *result = res;
  return T_OK;
}

static void plan_release(void *plan) { free(plan); }

static int wrong_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  int rc = sleepy_prepare(params, env, plan, e);
  ((splan *)*plan)->wrong = 1;
  return rc;
}

static int gate_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                    terr *e) {
  while (!atomic_load(&gate_open)) {
    if (job_ctx_stopped(ctx))
      return terr_set(e, job_ctx_stop_code(ctx), "", -1, "stopped");
    sleep_ms(1);
  }
  int64_t one = 1;
  return ctx->result_alloc(ctx, T_F64, 1, &one, result, e) ||
         (tarray_set(*result, 0, 42), 0);
}

static int record_prepare(const json_t *params, const tenv *env, void **plan,
                          terr *e) {
  const char *tag = json_string_value(json_object_get(params, "tag"));
  splan *p = calloc(1, sizeof *p);
  p->tag = tag ? tag : "?";
  p->n = 1;
  *plan = p;
  return T_OK;
}

static int record_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                      terr *e) {
  splan *p = plan;
  pthread_mutex_lock(&order_mu);
  size_t len = strlen(order);
  snprintf(order + len, sizeof order - len, "%s%s", len ? " " : "", p->tag);
  pthread_mutex_unlock(&order_mu);
  int64_t one = 1;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &one, result, e);
  if (rc == T_OK) tarray_set(*result, 0, 1);
  return rc;
}

static const char *fail_at(const json_t *params) {
  const char *at = json_string_value(json_object_get(params, "at"));
  return at ? at : "run";
}
static int fail_check(const json_t *params, const tenv *env, job_estimate *est,
                      terr *e) {
  if (strcmp(fail_at(params), "check") == 0)
    return terr_set(e, T_EINVAL, "params.at", 0, "failing at check");
  return sleepy_check(params, env, est, e);
}
static int fail_prepare(const json_t *params, const tenv *env, void **plan,
                        terr *e) {
  if (strcmp(fail_at(params), "prepare") == 0)
    return terr_set(e, T_ENOMEM, "", -1, "failing at prepare");
  return sleepy_prepare(params, env, plan, e);
}
static int fail_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                    terr *e) {
  if (b == B_CUDA)
    return terr_set(e, T_EDEVICE, "", -1, "fake device error on cuda:%d",
                    ctx->device);
  return terr_set(e, T_EINVAL, "params.x", 3, "bad value at run time");
}

/* "wrong" with {"loose": true}: a plan tolerance (kind_ops.tolerance) wide
 * enough to accept the cpu run's 0.5 error. */
static int loose_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  int rc = wrong_prepare(params, env, plan, e);
  ((splan *)*plan)->loose = json_is_true(json_object_get(params, "loose"));
  return rc;
}
static void loose_tolerance(const void *plan, double *rtol, double *atol) {
  if (((const splan *)plan)->loose) *atol = 0.75;
}

#define KIND(name_, rtol_, atol_, check_, prepare_, run_)               \
  {.name = (name_), .rtol = (rtol_), .atol = (atol_),         \
   .tolerance_doc = "test", .check = (check_), .prepare = (prepare_),        \
   .run = (run_), .release = plan_release}
static const kind_ops k_sleepy =
    KIND("sleepy", 0, 0, sleepy_check, sleepy_prepare, sleepy_run);
static const kind_ops k_wrong =
    KIND("wrong", 1e-9, 1e-12, sleepy_check, wrong_prepare, sleepy_run);
static const kind_ops k_gate =
    KIND("gate", 0, 0, sleepy_check, sleepy_prepare, gate_run);
static const kind_ops k_record =
    KIND("record", 0, 0, sleepy_check, record_prepare, record_run);
static const kind_ops k_fail =
    KIND("fail", 0, 0, fail_check, fail_prepare, fail_run);
static const kind_ops k_loose = {
    .name = "loose", .rtol = 1e-9, .atol = 1e-12,
    .tolerance_doc = "test", .check = sleepy_check, .prepare = loose_prepare,
    .run = sleepy_run, .release = plan_release, .tolerance = loose_tolerance};

static const kind_ops *test_kinds(const char *name) {
  const kind_ops *all[] = {&k_sleepy, &k_wrong, &k_gate, &k_record, &k_fail,
                           &k_loose};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(all[i]->name, name) == 0) return all[i];
  return kind_find(name); /* the real kinds (map, reduce, ...) too */
}

/* ---- fixture ----------------------------------------------------------------- */
typedef struct fx {
  char dir[300];
  store *st;
  sched *s;
  sched_config cfg;
} fx;

static void fx_config(fx *f, int threads) {
  memset(&f->cfg, 0, sizeof f->cfg);
  f->cfg.st = f->st;
  f->cfg.data_dir = f->dir;
  f->cfg.threads = threads;
  f->cfg.queue_limit = 100;
  f->cfg.inline_result_max = 64;
  f->cfg.kind_lookup = test_kinds;
}

static int fx_start(fx *f) {
  terr e;
  int rc = sched_create(&f->cfg, &f->s, &e);
  CHECK_MSG(rc == 0, "sched_create: %s", e.message);
  if (rc) return rc;
  rc = sched_start(f->s, &e);
  CHECK_MSG(rc == 0, "sched_start: %s", e.message);
  return rc;
}

/* A fresh data dir and store, and the default configuration for threads
 * workers, without the scheduler: the caller may change f->cfg (or the
 * store) before fx_start. 0, or the store's error (checked). */
static int fx_prepare(fx *f, int threads) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s/d%d", root, dir_seq++);
  terr e;
  int rc = store_open(f->dir, &f->st, &e);
  CHECK_MSG(rc == 0, "store_open: %s", e.message);
  if (rc) return rc;
  fx_config(f, threads);
  return 0;
}

static int fx_open(fx *f, int threads) {
  int rc = fx_prepare(f, threads);
  return rc ? rc : fx_start(f);
}

static void fx_close(fx *f) {
  atomic_store(&gate_open, 1);
  sched_destroy(f->s);
  store_close(f->st);
  atomic_store(&gate_open, 0);
}

/* Insert a job in the store (queued), without the scheduler. */
static int insert_job(store *st, const char *kind, const char *params,
                      const char *backend, int priority, double timeout_s,
                      char id[T_ID_MAX]) {
  store_job j;
  memset(&j, 0, sizeof j);
  j.owner = strdup("");
  j.kind = strdup(kind);
  j.params = strdup(params);
  j.backend_requested = strdup(backend);
  j.body_hash = strdup("0");
  j.priority = priority;
  j.timeout_s = timeout_s;
  j.max_abs_diff = NAN;
  int existing;
  terr e;
  int rc = store_job_insert(st, &j, &existing, &e);
  CHECK_MSG(rc == 0, "insert: %s", e.message);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
  return rc;
}

/* What the API does: reserve, insert, enqueue. */
static int submit(fx *f, const char *kind, const char *params,
                  const char *backend, int priority, double timeout_s,
                  char id[T_ID_MAX]) {
  int retry = 0;
  terr e;
  int rc = sched_reserve(f->s, &retry, &e);
  if (rc) return rc;
  if ((rc = insert_job(f->st, kind, params, backend, priority, timeout_s, id))) {
    sched_unreserve(f->s);
    return rc;
  }
  store_job j;
  rc = store_job_get(f->st, id, NULL, &j, &e);
  CHECK(rc == 0);
  rc = sched_enqueue(f->s, &j, &e);
  CHECK_MSG(rc == 0, "enqueue: %s", e.message);
  store_job_clear(&j);
  return rc;
}

/* Poll the store until the job is final (or ~20 s). Fills *out. */
static int wait_final(fx *f, const char *id, store_job *out) {
  for (int i = 0; i < 10000; i++) {
    terr e;
    memset(out, 0, sizeof *out);
    if (store_job_get(f->st, id, NULL, out, &e) == 0) {
      if (job_status_final(out->status)) return 1;
      store_job_clear(out);
    }
    sleep_ms(2);
  }
  CHECK_MSG(0, "job %s did not finish", id);
  memset(out, 0, sizeof *out);
  return 0;
}

static int wait_status(fx *f, const char *id, job_status want) {
  for (int i = 0; i < 10000; i++) {
    store_job j;
    terr e;
    if (store_job_get(f->st, id, NULL, &j, &e) == 0) {
      int ok = j.status == want;
      store_job_clear(&j);
      if (ok) return 1;
    }
    sleep_ms(2);
  }
  return 0;
}

/* Wait until the scheduler holds no job (the store row is final a moment
 * before the worker releases the job and counts it). */
static void wait_idle(fx *f) {
  for (int i = 0; i < 10000; i++) {
    sched_stats st;
    sched_get_stats(f->s, &st);
    if (st.queued == 0 && st.running == 0) return;
    sleep_ms(2);
  }
  CHECK_MSG(0, "the scheduler did not go idle");
}

static int count_tmp_files(const char *dir) {
  char path[400];
  snprintf(path, sizeof path, "%s/results", dir);
  DIR *d = opendir(path);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strstr(de->d_name, ".tmp")) n++;
  if (d) closedir(d);
  return n;
}

/* Read a whole file into a new buffer. */
static char *slurp(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  *len = fread(buf, 1, (size_t)n, fp);
  buf[*len] = 0;
  fclose(fp);
  return buf;
}

/* A .npy in memory: magic, version 1.0, header dict, then n float64 values
 * value + i. Parsed by hand so the test does not lean on npy.c. */
static void check_npy_buf(const char *buf, size_t len, int64_t n,
                          double value) {
  CHECK(len > 10 && memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
  size_t hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
  char expect_shape[64];
  snprintf(expect_shape, sizeof expect_shape, "'shape': (%lld,)", (long long)n);
  char *hdr = strndup(buf + 10, hlen);
  CHECK_MSG(strstr(hdr, "'descr': '<f8'") != NULL, "header %s", hdr);
  CHECK_MSG(strstr(hdr, expect_shape) != NULL, "header %s", hdr);
  CHECK(strstr(hdr, "'fortran_order': False") != NULL);
  CHECK((10 + hlen) % 64 == 0);
  CHECK_MSG(len == 10 + hlen + (size_t)n * 8, "file length %zu", len);
  if (len == 10 + hlen + (size_t)n * 8) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double v;
      memcpy(&v, buf + 10 + hlen + i * 8, 8);
      bad += v != value + (double)i;
    }
    CHECK_MSG(bad == 0, "%d wrong values", bad);
  }
  free(hdr);
}

/* The same for a result file. */
static void check_npy(const char *path, int64_t n, double value) {
  size_t len = 0;
  char *buf = slurp(path, &len);
  CHECK_MSG(buf != NULL, "no result file %s", path);
  if (!buf) return;
  check_npy_buf(buf, len, n, value);
  free(buf);
}

static double timing(const store_job *j, const char *key) {
  char *text = jobs_timings_json(&j->timings); /* as the API shows them */
  json_t *t = json_loads(text ? text : "{}", 0, NULL);
  free(text);
  json_t *v = json_object_get(t, key);
  double x = json_is_number(v) ? json_number_value(v) : -1;
  json_decref(t);
  return x;
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

/* ---- fake GPUs: a mutex per device whose holder is recorded ------------
 * (test_sched_gpu.c, test_sched_mgpu.c). Each test brings its own count,
 * health and note calls; the lock calls are these. fake_holds(dev): the
 * calling thread holds dev's lock, as a kind's run or a lane must. */
#define FAKE_NDEV_MAX 8
static pthread_mutex_t dev_mu[FAKE_NDEV_MAX] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static pthread_t dev_owner[FAKE_NDEV_MAX]; /* written under dev_mu */
static atomic_int dev_held[FAKE_NDEV_MAX];

static void fake_lock(int dev) {
  pthread_mutex_lock(&dev_mu[dev]);
  dev_owner[dev] = pthread_self();
  atomic_store(&dev_held[dev], 1);
}
static void fake_unlock(int dev) {
  atomic_store(&dev_held[dev], 0);
  pthread_mutex_unlock(&dev_mu[dev]);
}
static int fake_trylock(int dev) {
  if (pthread_mutex_trylock(&dev_mu[dev]) != 0) return -1;
  dev_owner[dev] = pthread_self();
  atomic_store(&dev_held[dev], 1);
  return 0;
}
static int fake_holds(int dev) {
  return dev >= 0 && dev < FAKE_NDEV_MAX && atomic_load(&dev_held[dev]) &&
         pthread_equal(dev_owner[dev], pthread_self());
}

#endif
