/* test_sched.c — the scheduler against a real store in a temp dir, with
 * test kinds of its own passed through cfg.kind_lookup:
 *
 *   sleepy  {"n","ms","value","work"}: n chunks of ms each over the pool,
 *           result[c] = value + c; honours stop between chunks
 *   gate    blocks (checking stop) until the test opens the gate
 *   record  appends params.tag to a list (run order)
 *   fail    fails at check / prepare / run ({"at": ...}) with T_EINVAL
 *   wrong   like sleepy, but the cpu result is off by 0.5 (compare)
 *
 * Each test opens a fresh data dir (store + results) and a fresh scheduler.
 * Checked: priority order and FIFO within; cancel of queued (at once) and
 * running jobs (at a chunk boundary); timeout -> deadline_exceeded; queue
 * limit -> T_EBUSY with Retry-After; waiters fire once and sched_unwait's
 * contract; compare agree/disagree; the result file's header and data and
 * no temporary left; failures carry the terr code and message; recovery of
 * queued and running jobs with attempts counted; shutdown leaves running
 * jobs unfinished for the next start; progress, stats and the histogram.
 * No test asserts a duration; waits poll with a generous cap.
 */
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
#include "compute/pool.h"
#include "compute/sched.h"
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
static char order[256];

typedef struct splan {
  int64_t n;
  double ms, value, work;
  int wrong;
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

static int sleepy_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                      terr *e) {
  splan *p = plan;
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
  return terr_set(e, T_EINVAL, "params.x", 3, "bad value at run time");
}

static const kind_ops k_sleepy = {K_MAP, "sleepy", 0, 0, "exact", sleepy_check,
                                  sleepy_prepare, sleepy_run, plan_release};
static const kind_ops k_wrong = {K_MAP, "wrong", 1e-9, 1e-12, "near",
                                 sleepy_check, wrong_prepare, sleepy_run,
                                 plan_release};
static const kind_ops k_gate = {K_MAP, "gate", 0, 0, "exact", sleepy_check,
                                sleepy_prepare, gate_run, plan_release};
static const kind_ops k_record = {K_MAP, "record", 0, 0, "exact", sleepy_check,
                                  record_prepare, record_run, plan_release};
static const kind_ops k_fail = {K_MAP, "fail", 0, 0, "exact", fail_check,
                                fail_prepare, fail_run, plan_release};

static const kind_ops *test_kinds(const char *name) {
  const kind_ops *all[] = {&k_sleepy, &k_wrong, &k_gate, &k_record, &k_fail};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strcmp(all[i]->name, name) == 0) return all[i];
  return NULL;
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

static int fx_open(fx *f, int threads) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s/d%d", root, dir_seq++);
  terr e;
  int rc = store_open(f->dir, &f->st, &e);
  CHECK_MSG(rc == 0, "store_open: %s", e.message);
  if (rc) return rc;
  fx_config(f, threads);
  return fx_start(f);
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

/* The .npy file: magic, version 1.0, header dict, then n float64 values
 * value + i. Parsed by hand so the test does not lean on npy.c. */
static void check_npy(const char *path, int64_t n, double value) {
  size_t len = 0;
  char *buf = slurp(path, &len);
  CHECK_MSG(buf != NULL, "no result file %s", path);
  if (!buf) return;
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
  free(buf);
}

static double timing(const store_job *j, const char *key) {
  json_t *t = json_loads(j->timings ? j->timings : "{}", 0, NULL);
  json_t *v = json_object_get(t, key);
  double x = json_is_number(v) ? json_number_value(v) : -1;
  json_decref(t);
  return x;
}

/* ---- success, result files, timings ---------------------------------------- */
TEST(test_success_and_result_file) {
  fx f;
  if (fx_open(&f, 2)) return;
  char small[T_ID_MAX], big[T_ID_MAX], ser[T_ID_MAX];
  /* 4 values = 32 bytes: heap + npy_write; 300 = 2400 bytes: mapped file. */
  CHECK(submit(&f, "sleepy", "{\"n\":4,\"value\":10}", "cpu", 5, 0, small) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":300,\"value\":0.5}", "cpu", 5, 0, big) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":300,\"value\":-3}", "serial", 5, 0, ser) == 0);
  store_job j;
  const char *ids[3] = {small, big, ser};
  int64_t ns[3] = {4, 300, 300};
  double vals[3] = {10, 0.5, -3};
  for (int i = 0; i < 3; i++) {
    if (!wait_final(&f, ids[i], &j)) continue;
    CHECK_STR(job_status_name(j.status), "succeeded");
    CHECK_STR(j.backend_used, i == 2 ? "serial" : "cpu");
    CHECK(j.attempts == 1);
    CHECK(j.started_at >= j.created_at && j.finished_at >= j.started_at);
    char want_path[400];
    snprintf(want_path, sizeof want_path, "%s/results/%s.npy", f.dir, ids[i]);
    CHECK_STR(j.result_path, want_path);
    check_npy(want_path, ns[i], vals[i]);
    json_t *r = json_loads(j.result ? j.result : "null", 0, NULL);
    CHECK_STR(json_string_value(json_object_get(r, "dtype")), "float64");
    CHECK(json_integer_value(json_array_get(json_object_get(r, "shape"), 0)) == ns[i]);
    CHECK(json_integer_value(json_object_get(r, "bytes")) == ns[i] * 8);
    json_decref(r);
    const char *keys[] = {"queue", "prepare", "h2d", "compute", "d2h", "store", "total"};
    for (int k = 0; k < 7; k++)
      CHECK_MSG(timing(&j, keys[k]) >= 0, "timings.%s missing in %s", keys[k], j.timings);
    CHECK(timing(&j, "total") >= timing(&j, "compute"));
    CHECK(j.progress_done == ns[i] && j.progress_total == ns[i]);
    CHECK(j.error_code == NULL);
    CHECK(isnan(j.max_abs_diff));
    json_t *est = json_loads(j.estimate ? j.estimate : "null", 0, NULL);
    CHECK(json_integer_value(json_object_get(est, "size")) == ns[i]);
    json_decref(est);
    store_job_clear(&j);
  }
  CHECK(count_tmp_files(f.dir) == 0);
  wait_idle(&f);
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.finished_total[JOB_SUCCEEDED] == 3);
  CHECK(st.queued == 0 && st.running == 0 && st.workers == 2 && st.accepting);
  int64_t counts[SCHED_HIST_BUCKETS], n;
  double sum;
  sched_histogram(f.s, "sleepy", "cpu", counts, &sum, &n);
  CHECK(n == 2 && counts[SCHED_HIST_BUCKETS - 1] <= 2 && sum > 0);
  sched_histogram(f.s, NULL, NULL, counts, &sum, &n);
  CHECK(n == 3);
  for (int b = 1; b < SCHED_HIST_BUCKETS; b++) CHECK(counts[b] >= counts[b - 1]);
  fx_close(&f);
}

/* ---- auto: the router's choice and reason are recorded ---------------------- */
TEST(test_auto_router) {
  fx f;
  if (fx_open(&f, 2)) return;
  char tiny[T_ID_MAX], large[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":1000}", "auto", 5, 0, tiny) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":10,\"work\":1e9}", "auto", 5, 0, large) == 0);
  store_job j;
  if (wait_final(&f, tiny, &j)) {
    CHECK_STR(j.backend_used, "serial");
    CHECK_MSG(j.backend_reason && strstr(j.backend_reason, "small job (1000 elements)"),
              "reason %s", j.backend_reason);
    CHECK(j.status == JOB_SUCCEEDED);
    store_job_clear(&j);
  }
  if (wait_final(&f, large, &j)) {
    CHECK_STR(j.backend_used, "cpu"); /* no GPU in this build */
    CHECK(j.backend_reason && strstr(j.backend_reason, "no usable GPU"));
    json_t *est = json_loads(j.estimate ? j.estimate : "null", 0, NULL);
    CHECK(json_number_value(json_object_get(est, "serial_ms")) > 100);
    json_decref(est);
    store_job_clear(&j);
  }
  fx_close(&f);
}

/* ---- priority order and FIFO within -------------------------------------------- */
TEST(test_priority_fifo) {
  fx f;
  if (fx_open(&f, 1)) return;
  order[0] = 0;
  char gate[T_ID_MAX], ids[6][T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  const char *tags[6] = {"a1", "b5", "c5", "d9", "e1", "f5"};
  int prio[6] = {1, 5, 5, 9, 1, 5};
  for (int i = 0; i < 6; i++) {
    char params[64];
    snprintf(params, sizeof params, "{\"n\":1,\"tag\":\"%s\"}", tags[i]);
    CHECK(submit(&f, "record", params, "serial", prio[i], 0, ids[i]) == 0);
  }
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.queued == 6 && st.running == 1);
  atomic_store(&gate_open, 1);
  store_job j;
  for (int i = 0; i < 6; i++)
    if (wait_final(&f, ids[i], &j)) store_job_clear(&j);
  CHECK_STR(order, "d9 b5 c5 f5 a1 e1");
  fx_close(&f);
}

/* ---- cancel ------------------------------------------------------------------- */
TEST(test_cancel_queued) {
  fx f;
  if (fx_open(&f, 1)) return;
  char gate[T_ID_MAX], q[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  CHECK(submit(&f, "sleepy", "{\"n\":3}", "cpu", 5, 0, q) == 0);
  terr e;
  CHECK(sched_cancel(f.s, q, "someone-else", &e) == T_ENOTFOUND);
  CHECK(sched_cancel(f.s, q, "", &e) == 0);
  /* Canceled at once: the store says so when cancel returns. */
  store_job j;
  CHECK(store_job_get(f.st, q, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_CANCELED);
  CHECK_STR(j.error_code, "canceled");
  CHECK(j.attempts == 0 && j.started_at == 0);
  store_job_clear(&j);
  CHECK(sched_cancel(f.s, q, NULL, &e) == T_ECONFLICT);
  CHECK(sched_cancel(f.s, "j_00000000000000000000000000", NULL, &e) == T_ENOTFOUND);
  int64_t d, t;
  CHECK(sched_progress(f.s, q, &d, &t) == T_ENOTFOUND);
  atomic_store(&gate_open, 1);
  if (wait_final(&f, gate, &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    store_job_clear(&j);
  }
  wait_idle(&f);
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.finished_total[JOB_CANCELED] == 1);
  fx_close(&f);
}

TEST(test_cancel_running) {
  fx f;
  if (fx_open(&f, 2)) return;
  char id[T_ID_MAX];
  atomic_store(&chunks_run, 0);
  CHECK(submit(&f, "sleepy", "{\"n\":5000,\"ms\":1}", "cpu", 5, 0, id) == 0);
  int64_t d = 0, t = 0;
  for (int i = 0; i < 5000 && d < 20; i++) {
    if (sched_progress(f.s, id, &d, &t) != 0) break;
    sleep_ms(1);
  }
  CHECK(d >= 20 && t == 5000);
  terr e;
  CHECK(sched_cancel(f.s, id, "", &e) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK_STR(job_status_name(j.status), "canceled");
    CHECK_STR(j.error_code, "canceled");
    CHECK(j.result_path == NULL);
    CHECK(j.progress_done >= 20 && j.progress_done < 5000);
    store_job_clear(&j);
  }
  long ran = atomic_load(&chunks_run);
  CHECK_MSG(ran < 5000, "%ld chunks ran", ran);
  sleep_ms(20);
  CHECK(atomic_load(&chunks_run) == ran); /* nothing runs after the end */
  CHECK(count_tmp_files(f.dir) == 0);
  char path[400];
  snprintf(path, sizeof path, "%s/results/%s.npy", f.dir, id);
  CHECK(access(path, F_OK) != 0);
  fx_close(&f);
}

/* ---- timeout ------------------------------------------------------------------- */
TEST(test_timeout) {
  fx f;
  if (fx_open(&f, 2)) return;
  char id[T_ID_MAX], ok[T_ID_MAX];
  atomic_store(&chunks_run, 0);
  CHECK(submit(&f, "sleepy", "{\"n\":5000,\"ms\":1}", "cpu", 5, 0.1, id) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":5}", "cpu", 5, 30, ok) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK_STR(job_status_name(j.status), "failed");
    CHECK_STR(j.error_code, "deadline_exceeded");
    CHECK(j.error_message && strstr(j.error_message, "0.1 s"));
    store_job_clear(&j);
  }
  CHECK(atomic_load(&chunks_run) < 5000);
  if (wait_final(&f, ok, &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    store_job_clear(&j);
  }
  /* The default timeout applies to jobs that give none. */
  sched_destroy(f.s);
  f.cfg.default_timeout_s = 0.05;
  if (fx_start(&f)) return;
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, id) == 0);
  if (wait_final(&f, id, &j)) {
    CHECK_STR(j.error_code, "deadline_exceeded");
    store_job_clear(&j);
  }
  fx_close(&f);
}

/* ---- queue limit ---------------------------------------------------------------- */
TEST(test_queue_limit) {
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  terr e;
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  fx_config(&f, 1);
  f.cfg.queue_limit = 2;
  if (fx_start(&f)) return;
  char gate[T_ID_MAX], a[T_ID_MAX], b[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "cpu", 5, 0, a) == 0);
  int retry = -1;
  CHECK(sched_reserve(f.s, &retry, &e) == 0); /* one slot left: reserve it */
  CHECK(sched_reserve(f.s, &retry, &e) == T_EBUSY);
  CHECK(retry >= 1);
  CHECK(e.code == T_EBUSY && strstr(e.message, "queue is full"));
  sched_unreserve(f.s);
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "cpu", 5, 0, b) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "cpu", 5, 0, b) == T_EBUSY);
  atomic_store(&gate_open, 1);
  store_job j;
  if (wait_final(&f, b, &j)) store_job_clear(&j);
  CHECK(sched_reserve(f.s, &retry, &e) == 0);
  sched_unreserve(f.s);
  fx_close(&f);
}

/* ---- waiters ---------------------------------------------------------------- */
typedef struct wt {
  atomic_int calls;
  char id[T_ID_MAX];
  sched *s;
  uint64_t token;
  int unwait_rc;
} wt;

static void on_end(void *arg, const char *id) {
  wt *w = arg;
  snprintf(w->id, sizeof w->id, "%s", id);
  atomic_fetch_add(&w->calls, 1);
}

static void on_end_unwait(void *arg, const char *id) {
  wt *w = arg;
  w->unwait_rc = sched_unwait(w->s, w->token); /* from inside: no deadlock */
  atomic_fetch_add(&w->calls, 1);
}

TEST(test_waiters) {
  fx f;
  if (fx_open(&f, 1)) return;
  char gate[T_ID_MAX], a[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  CHECK(submit(&f, "sleepy", "{\"n\":2}", "cpu", 5, 0, a) == 0);
  wt w1 = {0}, w2 = {0}, w3 = {0}, w4 = {0};
  uint64_t t1, t2, t3, t4;
  CHECK(sched_wait(f.s, a, on_end, &w1, &t1) == 0);
  CHECK(sched_wait(f.s, a, on_end, &w2, &t2) == 0);
  CHECK(sched_wait(f.s, gate, on_end, &w3, &t3) == 0);
  w4.s = f.s;
  CHECK(sched_wait(f.s, a, on_end_unwait, &w4, &t4) == 0);
  w4.token = t4;
  CHECK(t1 && t2 && t1 != t2);
  CHECK(sched_unwait(f.s, t2) == 1); /* removed before it fired */
  CHECK(sched_unwait(f.s, t2) == 0);
  atomic_store(&gate_open, 1);
  store_job j;
  if (wait_final(&f, a, &j)) store_job_clear(&j);
  for (int i = 0; i < 1000 && (atomic_load(&w1.calls) == 0 || atomic_load(&w4.calls) == 0); i++)
    sleep_ms(2);
  CHECK(sched_unwait(f.s, t1) == 0); /* fired */
  CHECK(atomic_load(&w1.calls) == 1);
  CHECK_STR(w1.id, a);
  CHECK(atomic_load(&w2.calls) == 0);
  CHECK(atomic_load(&w3.calls) == 1);
  CHECK_STR(w3.id, gate);
  CHECK(atomic_load(&w4.calls) == 1 && w4.unwait_rc == 0);
  /* Finished: nothing to wait for here. */
  uint64_t t5 = 99;
  CHECK(sched_wait(f.s, a, on_end, &w1, &t5) == 1);
  CHECK(sched_wait(f.s, "j_nope", on_end, &w1, &t5) == 1);
  sleep_ms(10);
  CHECK(atomic_load(&w1.calls) == 1);
  fx_close(&f);
}

/* Many short jobs, each with a heap-allocated waiter that the "request"
 * thread unwaits and frees at a random moment: the callback must never run
 * after sched_unwait returned (ASan/TSan would see the freed arg). */
typedef struct hw {
  atomic_int fired;
} hw;
static void on_end_heap(void *arg, const char *id) {
  hw *h = arg;
  atomic_fetch_add(&h->fired, 1);
}

TEST(test_unwait_race) {
  fx f;
  if (fx_open(&f, 2)) return;
  int fired = 0, removed = 0, bad = 0;
  for (int i = 0; i < 60; i++) {
    char id[T_ID_MAX];
    if (submit(&f, "sleepy", "{\"n\":2}", "cpu", 5, 0, id)) break;
    hw *h = calloc(1, sizeof *h);
    uint64_t tok;
    if (sched_wait(f.s, id, on_end_heap, h, &tok) == 1) {
      free(h);
      continue;
    }
    if (i % 3) sleep_ms(i % 5 == 0 ? 1 : 0.1);
    int r = sched_unwait(f.s, tok);
    int got = atomic_load(&h->fired);
    if (r == 1) {
      removed++;
      bad += got != 0;
    } else {
      fired++;
      bad += got != 1;
    }
    free(h);
  }
  CHECK(bad == 0);
  CHECK(fired + removed > 0);
  fx_close(&f);
}

/* ---- compare ----------------------------------------------------------------- */
TEST(test_compare) {
  fx f;
  if (fx_open(&f, 2)) return;
  char good[T_ID_MAX], bad[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":200,\"value\":1}", "compare", 5, 0, good) == 0);
  CHECK(submit(&f, "wrong", "{\"n\":200,\"value\":1}", "compare", 5, 0, bad) == 0);
  store_job j;
  if (wait_final(&f, good, &j)) {
    CHECK_STR(job_status_name(j.status), "succeeded");
    CHECK_STR(j.backend_used, "compare");
    CHECK(j.max_abs_diff == 0);
    json_t *c = json_loads(j.compare ? j.compare : "null", 0, NULL);
    CHECK(json_array_size(c) == 2); /* no GPU here: serial and cpu */
    CHECK_STR(json_string_value(json_object_get(json_array_get(c, 0), "backend")), "serial");
    CHECK_STR(json_string_value(json_object_get(json_array_get(c, 1), "backend")), "cpu");
    CHECK(json_integer_value(json_object_get(json_array_get(c, 1), "threads")) == 2);
    CHECK(json_number_value(json_object_get(json_array_get(c, 0), "ms")) >= 0);
    json_decref(c);
    check_npy(j.result_path ? j.result_path : "", 200, 1);
    /* progress counts both runs */
    CHECK(j.progress_done == 400 && j.progress_total == 400);
    store_job_clear(&j);
  }
  if (wait_final(&f, bad, &j)) {
    CHECK_STR(job_status_name(j.status), "failed");
    CHECK_STR(j.error_code, "internal");
    CHECK_MSG(j.error_message && strstr(j.error_message, "cpu and serial disagree") &&
                  strstr(j.error_message, "max |a-b| = 0.5"),
              "message: %s", j.error_message);
    CHECK_NEAR(j.max_abs_diff, 0.5, 1e-12);
    CHECK(j.compare && strstr(j.compare, "\"cpu\""));
    CHECK(j.result_path == NULL);
    store_job_clear(&j);
  }
  CHECK(count_tmp_files(f.dir) == 0);
  fx_close(&f);
}

/* ---- failures ----------------------------------------------------------------- */
TEST(test_failures) {
  fx f;
  if (fx_open(&f, 2)) return;
  char r[T_ID_MAX], p[T_ID_MAX], c[T_ID_MAX], k[T_ID_MAX], g[T_ID_MAX],
      bj[T_ID_MAX], bb[T_ID_MAX];
  CHECK(submit(&f, "fail", "{\"n\":1,\"at\":\"run\"}", "cpu", 5, 0, r) == 0);
  CHECK(submit(&f, "fail", "{\"n\":1,\"at\":\"prepare\"}", "cpu", 5, 0, p) == 0);
  CHECK(submit(&f, "fail", "{\"n\":1,\"at\":\"check\"}", "cpu", 5, 0, c) == 0);
  CHECK(submit(&f, "nosuchkind", "{}", "cpu", 5, 0, k) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "cuda", 5, 0, g) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":1", "cpu", 5, 0, bj) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "quantum", 5, 0, bb) == 0);
  struct { const char *id, *code, *msg; int attempts; } want[] = {
      {r, "invalid_argument", "params.x: bad value at run time", 1},
      {p, "resource_exhausted", "failing at prepare", 1},
      {c, "invalid_argument", "params.at: failing at check", 0},
      {k, "invalid_argument", "unknown kind 'nosuchkind'", 0},
      {g, "unavailable", "no usable GPU", 0},
      {bj, "invalid_argument", "params", 0},
      {bb, "invalid_argument", "unknown backend 'quantum'", 0},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    store_job j;
    if (!wait_final(&f, want[i].id, &j)) continue;
    CHECK_STR(job_status_name(j.status), "failed");
    CHECK_STR(j.error_code, want[i].code);
    CHECK_MSG(j.error_message && strstr(j.error_message, want[i].msg),
              "message %s, want %s", j.error_message, want[i].msg);
    CHECK(j.attempts == want[i].attempts);
    CHECK(j.result_path == NULL);
    store_job_clear(&j);
  }
  wait_idle(&f);
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.finished_total[JOB_FAILED] == 7);
  CHECK(count_tmp_files(f.dir) == 0);
  fx_close(&f);
}

/* ---- sched_check: limits and backend availability ------------------------- */
TEST(test_check) {
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  terr e;
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  fx_config(&f, 1);
  f.cfg.max_result_bytes = 800;
  f.cfg.max_job_mem_bytes = 1000;
  if (fx_start(&f)) return;
  job_estimate est;
  json_t *p50 = json_pack("{s:i}", "n", 50), *p101 = json_pack("{s:i}", "n", 101),
         *p120 = json_pack("{s:i}", "n", 120), *p0 = json_pack("{s:i}", "n", 0);
  CHECK(sched_check(f.s, &k_sleepy, p50, NULL, B_CPU, &est, &e) == 0);
  CHECK(est.out_bytes == 400);
  CHECK(sched_check(f.s, &k_sleepy, p101, NULL, B_CPU, &est, &e) == T_ETOOLARGE);
  CHECK(strstr(e.message, "808 bytes") != NULL);
  CHECK(sched_check(f.s, &k_sleepy, p50, NULL, B_COMPARE, &est, &e) == 0);
  CHECK(sched_check(f.s, &k_sleepy, p0, NULL, B_CPU, &est, &e) == T_EINVAL);
  CHECK_STR(e.field, "params.n");
  /* 90 elements: result 720 <= 800, memory 720 (cpu) but 1440 for compare */
  json_t *p90 = json_pack("{s:i}", "n", 90);
  CHECK(sched_check(f.s, &k_sleepy, p90, NULL, B_CPU, &est, &e) == 0);
  CHECK(sched_check(f.s, &k_sleepy, p90, NULL, B_COMPARE, &est, &e) == T_ETOOLARGE);
  CHECK(sched_check(f.s, &k_sleepy, p50, NULL, B_CUDA, &est, &e) == T_EUNAVAIL);
  CHECK_STR(e.field, "backend");
  sched_shutdown(f.s, 1);
  CHECK(sched_check(f.s, &k_sleepy, p50, NULL, B_CPU, &est, &e) == T_EUNAVAIL);
  int retry;
  CHECK(sched_reserve(f.s, &retry, &e) == T_EUNAVAIL);
  json_decref(p50), json_decref(p101), json_decref(p120), json_decref(p0);
  json_decref(p90);
  fx_close(&f);
}

/* ---- recovery ----------------------------------------------------------------- */
TEST(test_recovery) {
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  terr e;
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  char q[3][T_ID_MAX], r[2][T_ID_MAX];
  for (int i = 0; i < 3; i++)
    insert_job(f.st, "sleepy", "{\"n\":5,\"value\":7}", "cpu", 5, 0, q[i]);
  for (int i = 0; i < 2; i++) {
    insert_job(f.st, "sleepy", "{\"n\":6,\"value\":1}", "auto", 3, 0, r[i]);
    CHECK(store_job_start(f.st, r[i], t_wall_ms(), "cpu", "before the crash",
                          NULL, &e) == 0);
  }
  /* A half-written result left by the dead process. */
  char stale[400];
  snprintf(stale, sizeof stale, "%s/results", f.dir);
  t_mkdirs(stale);
  snprintf(stale, sizeof stale, "%s/results/%s.npy.tmp7", f.dir, r[0]);
  FILE *fp = fopen(stale, "wb");
  if (fp) fclose(fp);
  fx_config(&f, 2);
  if (fx_start(&f)) return;
  store_job j;
  for (int i = 0; i < 3; i++) {
    if (!wait_final(&f, q[i], &j)) continue;
    CHECK(j.status == JOB_SUCCEEDED && j.attempts == 1);
    check_npy(j.result_path ? j.result_path : "", 5, 7);
    store_job_clear(&j);
  }
  for (int i = 0; i < 2; i++) {
    if (!wait_final(&f, r[i], &j)) continue;
    CHECK(j.status == JOB_SUCCEEDED);
    CHECK_MSG(j.attempts == 2, "attempts %d", j.attempts);
    CHECK(j.backend_reason && strcmp(j.backend_reason, "before the crash") != 0);
    check_npy(j.result_path ? j.result_path : "", 6, 1);
    store_job_clear(&j);
  }
  CHECK(access(stale, F_OK) != 0);
  CHECK(count_tmp_files(f.dir) == 0);
  fx_close(&f);
}

/* ---- shutdown leaves running work for the next start ------------------------- */
TEST(test_shutdown_and_restart) {
  fx f;
  if (fx_open(&f, 1)) return;
  char run[T_ID_MAX], queued[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, run) == 0);
  CHECK(wait_status(&f, run, JOB_RUNNING));
  CHECK(submit(&f, "sleepy", "{\"n\":3}", "cpu", 5, 0, queued) == 0);
  wt w = {0};
  uint64_t tok;
  CHECK(sched_wait(f.s, queued, on_end, &w, &tok) == 0);
  sched_shutdown(f.s, 0.05); /* the gate never opens: stopped */
  CHECK(atomic_load(&w.calls) == 1); /* waiters are told, even so */
  store_job j;
  terr e;
  CHECK(store_job_get(f.st, run, NULL, &j, &e) == 0);
  CHECK_STR(job_status_name(j.status), "running"); /* not failed */
  store_job_clear(&j);
  CHECK(store_job_get(f.st, queued, NULL, &j, &e) == 0);
  CHECK_STR(job_status_name(j.status), "queued");
  store_job_clear(&j);
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(!st.accepting && st.running == 0 && st.queued == 0);
  sched_destroy(f.s);
  /* Next start: both run to the end. */
  atomic_store(&gate_open, 1);
  if (fx_start(&f)) return;
  if (wait_final(&f, run, &j)) {
    CHECK(j.status == JOB_SUCCEEDED && j.attempts == 2);
    store_job_clear(&j);
  }
  if (wait_final(&f, queued, &j)) {
    CHECK(j.status == JOB_SUCCEEDED && j.attempts == 1);
    store_job_clear(&j);
  }
  fx_close(&f);
}

/* ---- progress reaches the store while running ---------------------------------- */
TEST(test_progress_stored) {
  fx f;
  if (fx_open(&f, 2)) return;
  char id[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":3000,\"ms\":1}", "cpu", 5, 0, id) == 0);
  int seen = 0;
  for (int i = 0; i < 2000 && !seen; i++) {
    store_job j;
    terr e;
    if (store_job_get(f.st, id, NULL, &j, &e) == 0) {
      seen = j.status == JOB_RUNNING && j.progress_done > 0 &&
             j.progress_total == 3000;
      store_job_clear(&j);
    }
    sleep_ms(5);
  }
  CHECK(seen);
  terr e;
  sched_cancel(f.s, id, NULL, &e);
  store_job j;
  if (wait_final(&f, id, &j)) store_job_clear(&j);
  fx_close(&f);
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
  snprintf(root, sizeof root, "/tmp/tessel_sched_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_success_and_result_file);
  RUN(test_auto_router);
  RUN(test_priority_fifo);
  RUN(test_cancel_queued);
  RUN(test_cancel_running);
  RUN(test_timeout);
  RUN(test_queue_limit);
  RUN(test_waiters);
  RUN(test_unwait_race);
  RUN(test_compare);
  RUN(test_failures);
  RUN(test_check);
  RUN(test_recovery);
  RUN(test_shutdown_and_restart);
  RUN(test_progress_stored);
  rm_tree(root);
  return check_summary();
}
