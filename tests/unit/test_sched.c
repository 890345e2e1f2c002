/* test_sched.c — the scheduler against a real store in a temp dir, with
 * the test kinds of sched_fixture.h passed through cfg.kind_lookup.
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
#include "sched_fixture.h"
#include "compute/expr/expr.h"
#include "compute/sched/sched_int.h" /* white-box: compute/sched/text.c */

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
    char *rtext = jobs_result_json(&j.result, NULL);
    json_t *r = json_loads(rtext ? rtext : "null", 0, NULL);
    free(rtext);
    CHECK_STR(json_string_value(json_object_get(r, "dtype")), "float64");
    CHECK(json_integer_value(json_array_get(json_object_get(r, "shape"), 0)) == ns[i]);
    CHECK(json_integer_value(json_object_get(r, "bytes")) == ns[i] * 8);
    json_decref(r);
    const char *keys[] = {"queue", "prepare", "h2d", "compute", "d2h", "store", "total"};
    for (int k = 0; k < 7; k++)
      CHECK_MSG(timing(&j, keys[k]) >= 0, "timings.%s missing", keys[k]);
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
  sched_histogram(f.s, "sleepy", "cpu", -1, counts, &sum, &n);
  CHECK(n == 2 && counts[SCHED_HIST_BUCKETS - 1] <= 2 && sum > 0);
  sched_histogram(f.s, "sleepy", "cpu", JOB_SUCCEEDED, counts, &sum, &n);
  CHECK(n == 2);
  sched_histogram(f.s, "sleepy", "cpu", JOB_FAILED, counts, &sum, &n);
  CHECK(n == 0 && sum == 0);
  sched_histogram(f.s, NULL, NULL, -1, counts, &sum, &n);
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

/* Many priorities, with queued cancels taking jobs out of the middle of
 * the heap: the run order is (priority desc, submit order), no canceled
 * job runs, none runs twice. */
TEST(test_priority_many_with_cancels) {
  fx f;
  if (fx_open(&f, 1)) return;
  order[0] = 0;
  enum { N = 90 }; /* under the fixture's queue limit of 100 */
  char gate[T_ID_MAX], ids[N][T_ID_MAX];
  int prio[N];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  for (int i = 0; i < N; i++) {
    char params[64];
    prio[i] = (i * 7) % 10;
    snprintf(params, sizeof params, "{\"n\":1,\"tag\":\"%d\"}", i);
    CHECK(submit(&f, "record", params, "serial", prio[i], 0, ids[i]) == 0);
  }
  terr e;
  for (int i = 0; i < N; i += 3) CHECK(sched_cancel(f.s, ids[i], NULL, &e) == 0);
  atomic_store(&gate_open, 1);
  wait_idle(&f);
  char want[4096] = "";
  size_t len = 0;
  for (int p = 9; p >= 0; p--)
    for (int i = 0; i < N; i++)
      if (prio[i] == p && i % 3 != 0)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%d",
                                len ? " " : "", i);
  CHECK_STR(order, want);
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

/* ---- results kept in the store row ------------------------------------------- */
/* cfg.row_result_max: a result whose .npy fits stays in the job's row (no
 * file at all); a larger one is a file as before. */
TEST(test_result_in_row) {
  fx f;
  if (fx_prepare(&f, 2)) return;
  terr e;
  f.cfg.inline_result_max = 1 << 20; /* heap results for both sizes */
  f.cfg.row_result_max = 4096;       /* 128 B header + up to 496 values */
  if (fx_start(&f)) return;
  char small[T_ID_MAX], big[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":5,\"value\":2}", "cpu", 5, 0, small) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":600,\"value\":1}", "cpu", 5, 0, big) == 0);
  store_job j;
  if (wait_final(&f, small, &j)) {
    CHECK(j.status == JOB_SUCCEEDED && j.result_path == NULL);
    CHECK(j.attempts == 1 && j.started_at > 0);
    CHECK(j.result.bytes == 40);
    store_job_clear(&j);
    void *npy = NULL;
    size_t len = 0;
    CHECK(store_job_result_npy(f.st, small, "", &npy, &len, &e) == 0);
    if (npy) check_npy_buf(npy, len, 5, 2);
    free(npy);
    char path[400];
    snprintf(path, sizeof path, "%s/results/%s.npy", f.dir, small);
    CHECK(access(path, F_OK) != 0); /* no file */
  }
  if (wait_final(&f, big, &j)) {
    char want[400];
    snprintf(want, sizeof want, "%s/results/%s.npy", f.dir, big);
    CHECK_STR(j.result_path, want);
    check_npy(want, 600, 1);
    store_job_clear(&j);
    void *npy = NULL;
    size_t len = 0;
    CHECK(store_job_result_npy(f.st, big, NULL, &npy, &len, &e) == T_ENOTFOUND);
  }
  CHECK(count_tmp_files(f.dir) == 0);
  fx_close(&f);
}

/* A job canceled in the store before a worker took it (sched_cancel's path
 * for a job not held yet): the worker's start and finish change nothing,
 * the job stays canceled, waiters still fire, nothing counts as succeeded. */
static void on_end_count(void *arg, const char *id) {
  atomic_fetch_add((atomic_int *)arg, 1);
}
TEST(test_canceled_in_store_before_start) {
  fx f;
  if (fx_open(&f, 1)) return;
  char gate[T_ID_MAX], id[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  int retry;
  terr e;
  CHECK(sched_reserve(f.s, &retry, &e) == 0);
  CHECK(insert_job(f.st, "sleepy", "{\"n\":3}", "cpu", 5, 0, id) == 0);
  store_job j;
  CHECK(store_job_get(f.st, id, NULL, &j, &e) == 0);
  store_job_end cx = {.status = JOB_CANCELED, .finished_at = t_wall_ms(),
                      .max_abs_diff = NAN, .error_code = "canceled",
                      .error_message = "canceled by request"};
  CHECK(store_job_finish(f.st, id, &cx, &e) == 0);
  CHECK(sched_enqueue(f.s, &j, &e) == 0); /* the API's late enqueue */
  store_job_clear(&j);
  atomic_int fired = 0;
  uint64_t tok;
  CHECK(sched_wait(f.s, id, on_end_count, &fired, &tok) == 0);
  atomic_store(&gate_open, 1);
  for (int i = 0; i < 5000 && atomic_load(&fired) == 0; i++) sleep_ms(2);
  CHECK(atomic_load(&fired) == 1);
  wait_idle(&f);
  CHECK(store_job_get(f.st, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_CANCELED && j.started_at == 0 && j.attempts == 0);
  CHECK(!j.result.dtype[0] && j.result_path == NULL);
  store_job_clear(&j);
  char path[400];
  snprintf(path, sizeof path, "%s/results/%s.npy", f.dir, id);
  CHECK(access(path, F_OK) != 0);
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.finished_total[JOB_SUCCEEDED] == 1); /* the gate job only */
  fx_close(&f);
}

/* ---- the stored documents (compute/sched/text.c) ---------------------------------------- */
/* Written straight to text, they must read exactly as jansson's
 * JSON_COMPACT | JSON_REAL_PRECISION(9) dump of the same tree. */
static void same_as_jansson(char *text, json_t *tree) {
  char *want = json_dumps(tree, JSON_COMPACT | JSON_REAL_PRECISION(9));
  CHECK_STR(text, want);
  free(want);
  free(text);
  json_decref(tree);
}
TEST(test_stored_text) {
  static const job_timing keys[] = {JOB_T_QUEUE, JOB_T_PREPARE, JOB_T_COMPUTE,
                                    JOB_T_TOTAL};
  double ms[4] = {0.0123456, 12, 1e-9, 98765.4321};
  json_t *t = json_object();
  job_timings tt;
  memset(&tt, 0, sizeof tt);
  for (int i = 0; i < 4; i++) {
    json_object_set_new(t, job_timing_name(keys[i]),
                        json_real(round(ms[i] * 1e3) / 1e3));
    job_timings_put(&tt, keys[i], sched_ms_round(ms[i]));
  }
  same_as_jansson(jobs_timings_json(&tt), t);

  job_result_info ri = {.dtype = "float32", .ndim = 2, .shape = {3, 4},
                        .bytes = 48};
  same_as_jansson(jobs_result_json(&ri, NULL),
                  json_pack("{s:s, s:[I,I], s:I}", "dtype", "float32", "shape",
                            (json_int_t)3, (json_int_t)4, "bytes", (json_int_t)48));
  job_result_info r0 = {.dtype = "float64", .bytes = 8, .nonconverged = 5};
  same_as_jansson(jobs_result_json(&r0, NULL),
                  json_pack("{s:s, s:[], s:I, s:I}", "dtype", "float64", "shape",
                            "bytes", (json_int_t)8, "nonconverged", (json_int_t)5));

  job_estimate est;
  memset(&est, 0, sizeof est);
  est.size = 1000000;
  est.work = 3e12;
  est.out_dtype = T_F64;
  est.out_ndim = 1;
  est.out_shape[0] = 1000000;
  est.out_bytes = 8000000;
  est.in_bytes = 16;
  est.mem_bytes = 8000016;
  /* The router's figures arrive as members text (router_choose_text). */
  const char *router = "\"model\":\"size-rule\",\"unit\":\"element \\\"ops\\\"\\n\","
                       "\"serial_ms\":6e-6,\"cpu_ms\":1e20,\"cores\":2,"
                       "\"transfer_ms\":0.0,\"gpu_available\":false,\"none\":null";
  char *wrapped = malloc(strlen(router) + 3);
  sprintf(wrapped, "{%s}", router);
  json_t *rtree = json_loads(wrapped, 0, NULL);
  free(wrapped);
  CHECK(rtree != NULL);
  json_t *tree = json_pack("{s:I, s:f, s:s, s:[I], s:I, s:I, s:I}", "size",
                           (json_int_t)est.size, "work", est.work, "out_dtype",
                           "float64", "out_shape", (json_int_t)1000000,
                           "out_bytes", (json_int_t)est.out_bytes, "in_bytes",
                           (json_int_t)est.in_bytes, "mem_bytes",
                           (json_int_t)est.mem_bytes);
  json_object_update_missing(tree, rtree);
  json_decref(rtree);
  same_as_jansson(stext_estimate(&est, router, NULL), tree);
  tree = json_pack("{s:I, s:f, s:s, s:[], s:I, s:I, s:I}", "size",
                   (json_int_t)est.size, "work", est.work, "out_dtype",
                   "float64", "out_shape", "out_bytes",
                   (json_int_t)est.out_bytes, "in_bytes",
                   (json_int_t)est.in_bytes, "mem_bytes",
                   (json_int_t)est.mem_bytes);
  est.out_ndim = 0;
  same_as_jansson(stext_estimate(&est, NULL, NULL), tree);
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
  if (fx_prepare(&f, 1)) return;
  terr e;
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

/* Two waiters of one job, each unwaiting the other from its callback:
 * the first one called stops the second, which is then never called. */
typedef struct pair_w {
  sched *s;
  uint64_t other;
  atomic_int calls;
  int rc;
} pair_w;
static void on_end_unwait_other(void *arg, const char *id) {
  pair_w *w = arg;
  w->rc = sched_unwait(w->s, w->other);
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
  pair_w pa = {.s = f.s}, pb = {.s = f.s};
  uint64_t ta, tb;
  CHECK(sched_wait(f.s, a, on_end_unwait_other, &pa, &ta) == 0);
  CHECK(sched_wait(f.s, a, on_end_unwait_other, &pb, &tb) == 0);
  pa.other = tb;
  pb.other = ta;
  CHECK(t1 && t2 && t1 != t2);
  CHECK(sched_unwait(f.s, t2) == 1); /* removed before it fired */
  CHECK(sched_unwait(f.s, t2) == 0);
  atomic_store(&gate_open, 1);
  store_job j;
  if (wait_final(&f, a, &j)) store_job_clear(&j);
  for (int i = 0; i < 1000 && (atomic_load(&w1.calls) == 0 ||
                               atomic_load(&w4.calls) == 0 ||
                               atomic_load(&pa.calls) + atomic_load(&pb.calls) == 0);
       i++)
    sleep_ms(2);
  /* unwait of a waiter being called blocks until its callback returned */
  CHECK(sched_unwait(f.s, ta) == 0 && sched_unwait(f.s, tb) == 0);
  CHECK(sched_unwait(f.s, t1) == 0); /* fired */
  CHECK(atomic_load(&w1.calls) == 1);
  CHECK_STR(w1.id, a);
  CHECK(atomic_load(&w2.calls) == 0);
  CHECK(atomic_load(&w3.calls) == 1);
  CHECK_STR(w3.id, gate);
  CHECK(atomic_load(&w4.calls) == 1 && w4.unwait_rc == 0);
  CHECK(atomic_load(&pa.calls) + atomic_load(&pb.calls) == 1);
  CHECK((atomic_load(&pa.calls) ? pa.rc : pb.rc) == 1);
  /* Finished: nothing to wait for here. */
  uint64_t t5 = 99;
  CHECK(sched_wait(f.s, a, on_end, &w1, &t5) == 1);
  CHECK(sched_wait(f.s, "j_nope", on_end, &w1, &t5) == 1);
  sleep_ms(10);
  CHECK(atomic_load(&w1.calls) == 1);
  fx_close(&f);
}

/* sched_wait_end: the callback gets the row as committed (the same as the
 * store then reads), and the store already says so when it runs; a job
 * canceled before it started gives NULL. */
typedef struct we {
  atomic_int calls;
  int had_row, stored_final;
  store_job row;
  store *st;
} we;
static void on_end_row(void *arg, const char *id, const store_job *ended) {
  we *w = arg;
  w->had_row = ended != NULL;
  if (ended) store_job_copy(&w->row, ended);
  store_job j; /* a read is fine here; a [sync] write is not */
  terr e;
  if (store_job_get(w->st, id, NULL, &j, &e) == 0) {
    w->stored_final = job_status_final(j.status);
    store_job_clear(&j);
  }
  atomic_fetch_add(&w->calls, 1);
}
TEST(test_wait_end) {
  fx f;
  if (fx_open(&f, 1)) return;
  char gate[T_ID_MAX], a[T_ID_MAX], q[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  CHECK(submit(&f, "sleepy", "{\"n\":3,\"value\":4}", "serial", 5, 0, a) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":3}", "cpu", 5, 0, q) == 0);
  we wa, wq;
  memset(&wa, 0, sizeof wa);
  memset(&wq, 0, sizeof wq);
  wa.st = wq.st = f.st;
  uint64_t ta, tq;
  CHECK(sched_wait_end(f.s, a, on_end_row, &wa, &ta) == 0);
  CHECK(sched_wait_end(f.s, q, on_end_row, &wq, &tq) == 0);
  terr e;
  CHECK(sched_cancel(f.s, q, NULL, &e) == 0);
  CHECK(atomic_load(&wq.calls) == 1 && !wq.had_row && wq.stored_final);
  atomic_store(&gate_open, 1);
  for (int i = 0; i < 5000 && atomic_load(&wa.calls) == 0; i++) sleep_ms(2);
  CHECK(atomic_load(&wa.calls) == 1 && wa.had_row && wa.stored_final);
  store_job j;
  if (wa.had_row && store_job_get(f.st, a, NULL, &j, &e) == 0) {
    CHECK_STR(wa.row.id, a);
    CHECK(wa.row.status == JOB_SUCCEEDED && j.status == JOB_SUCCEEDED);
    CHECK(wa.row.attempts == 1 && j.attempts == 1);
    CHECK(wa.row.started_at == j.started_at && wa.row.finished_at == j.finished_at);
    CHECK_STR(wa.row.backend_used, "serial");
    CHECK(memcmp(&wa.row.result, &j.result, sizeof j.result) == 0);
    CHECK(memcmp(&wa.row.timings, &j.timings, sizeof j.timings) == 0);
    CHECK_STR(wa.row.params, j.params);
    CHECK_STR(wa.row.result_path, j.result_path);
    store_job_clear(&j);
  }
  store_job_clear(&wa.row);
  wait_idle(&f);
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
  /* The plan's own tolerance (kind_ops.tolerance) decides. */
  char loose[T_ID_MAX], strict[T_ID_MAX];
  CHECK(submit(&f, "loose", "{\"n\":20,\"loose\":true}", "compare", 5, 0, loose) == 0);
  CHECK(submit(&f, "loose", "{\"n\":20,\"loose\":false}", "compare", 5, 0, strict) == 0);
  if (wait_final(&f, loose, &j)) {
    CHECK_STR(job_status_name(j.status), "succeeded");
    CHECK_NEAR(j.max_abs_diff, 0.5, 1e-12);
    store_job_clear(&j);
  }
  if (wait_final(&f, strict, &j)) {
    CHECK_STR(job_status_name(j.status), "failed");
    CHECK(j.error_message && strstr(j.error_message, "1e-12 + 1e-09*|b|"));
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
  if (fx_prepare(&f, 1)) return;
  terr e;
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
  if (fx_prepare(&f, 2)) return; /* the store first: the jobs a dead process left */
  terr e;
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
  /* Not failed: queued again, its start taken back (a shutdown is not a
   * crash, so it does not count towards --max-attempts). */
  CHECK_STR(job_status_name(j.status), "queued");
  CHECK_MSG(j.attempts == 0, "attempts %d", j.attempts);
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
    CHECK(j.status == JOB_SUCCEEDED && j.attempts == 1);
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

/* Each expression is parsed and compiled once per job: at submit
 * (sched_check_keep, handed to the worker with sched_enqueue_checked), or,
 * for a job queued from the store (a restart), once by the worker. */
static void test_compiled_once(void) {
  fx f;
  if (fx_open(&f, 2)) return;
  const char *params = "{\"expr\":\"sin(x)*2+y\",\"inputs\":{\"x\":[1,2,3],"
                       "\"y\":[[1],[2]]}}";
  for (int path = 0; path < 2; path++) {
    int64_t c0 = expr_compiles();
    char id[T_ID_MAX];
    terr e;
    if (path == 0) { /* as jobs_submit does */
      json_t *p = json_loads(params, 0, NULL);
      job_estimate est;
      void *checked = NULL;
      CHECK(sched_check_keep(f.s, &kind_map_ops, p, NULL, B_CPU, &est,
                             &checked, &e) == 0);
      CHECK(checked != NULL);
      CHECK(expr_compiles() - c0 == 1);
      int retry = 0;
      CHECK(sched_reserve(f.s, &retry, &e) == 0);
      CHECK(insert_job(f.st, "map", params, "cpu", 5, 60, id) == 0);
      store_job j;
      CHECK(store_job_get(f.st, id, NULL, &j, &e) == 0);
      CHECK(sched_enqueue_checked(f.s, &j, p, &est, &kind_map_ops, checked,
                                  &e) == 0);
      store_job_clear(&j);
      json_decref(p);
    } else { /* queued from the store, nothing checked yet */
      CHECK(submit(&f, "map", params, "cpu", 5, 60, id) == 0);
    }
    store_job done;
    CHECK(wait_final(&f, id, &done) == 1);
    CHECK_MSG(done.status == JOB_SUCCEEDED, "path %d: %s", path,
              done.error_message ? done.error_message : "");
    CHECK_MSG(expr_compiles() - c0 == 1, "path %d: compiled %lld times", path,
              (long long)(expr_compiles() - c0));
    store_job_clear(&done);
  }
  /* A checked job that never runs frees what its check built (ASan). */
  json_t *p = json_loads(params, 0, NULL);
  job_estimate est;
  void *checked = NULL;
  terr e;
  CHECK(sched_check_keep(f.s, &kind_map_ops, p, NULL, B_CUDA, &est, &checked,
                         &e) == T_EUNAVAIL);
  CHECK(checked == NULL);
  json_decref(p);
  fx_close(&f);
}

/* A caller woken by a job's end may destroy the scheduler at once, while
 * the thread that released the job is still inside the waiter callbacks:
 * sched_destroy must wait for them (it freed the scheduler under a firing
 * callback before; ASan/TSan saw the releasing thread read it after). */
typedef struct slow_waiter {
  atomic_int entered, returned;
} slow_waiter;
static void on_end_slow(void *arg, const char *id) {
  (void)id;
  slow_waiter *w = arg;
  atomic_store(&w->entered, 1);
  sleep_ms(300); /* the main thread destroys meanwhile */
  atomic_store(&w->returned, 1);
}
TEST(test_destroy_waits_for_firing_waiters) {
  fx f;
  if (fx_open(&f, 1)) return;
  char gate[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gate) == 0);
  CHECK(wait_status(&f, gate, JOB_RUNNING));
  slow_waiter w = {0};
  uint64_t tok;
  CHECK(sched_wait(f.s, gate, on_end_slow, &w, &tok) == 0);
  atomic_store(&gate_open, 1);
  for (int i = 0; i < 5000 && !atomic_load(&w.entered); i++) sleep_ms(2);
  CHECK(atomic_load(&w.entered) == 1);
  fx_close(&f); /* sched_destroy: must not return under the callback */
  CHECK_MSG(atomic_load(&w.returned) == 1,
            "sched_destroy returned while a waiter callback still ran");
  for (int i = 0; i < 500 && !atomic_load(&w.returned); i++) sleep_ms(2);
}

/* sched_split_rows: every tile's band is non-empty, the bands cover
 * [0, n) in order; tri = 0 bands differ by at most one row; tri = 1 bands
 * (a matrix without targets, row i ~ n - i pairs) hold the same pairs to
 * within one row's (n), and their rows grow down the matrix. The same
 * bands every call (every node must cut alike). */
TEST(test_split_rows) {
  static const int64_t ns[] = {2, 3, 7, 300, 1001, 50000, 3000000};
  static const int ts[] = {2, 3, 4, 6, 16, 256};
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof ts / sizeof ts[0]; b++)
      for (int tri = 0; tri < 2; tri++) {
        int64_t n = ns[a];
        int T = ts[b];
        if (T > n) continue; /* sched_split_tiles: at most n tiles */
        double total = tri ? (double)n * (double)(n + 1) / 2 : (double)n;
        int64_t prev = 0, minrows = n, maxrows = 0, prows = 0;
        double worst = 0;
        int ok = 1;
        for (int t = 0; t < T; t++) {
          int64_t r0, r1, q0, q1;
          sched_split_rows(n, t, T, tri, &r0, &r1);
          sched_split_rows(n, t, T, tri, &q0, &q1);
          ok &= r0 == prev && r1 > r0 && r1 <= n && q0 == r0 && q1 == r1;
          /* lower rows are cheaper: more of them (to a row of rounding) */
          if (tri) ok &= t == 0 || r1 - r0 + 1 >= prows;
          prows = r1 - r0;
          prev = r1;
          if (r1 - r0 < minrows) minrows = r1 - r0;
          if (r1 - r0 > maxrows) maxrows = r1 - r0;
          double w = tri ? (double)(r1 - r0) * (double)n -
                               ((double)r1 * (double)(r1 - 1) -
                                (double)r0 * (double)(r0 - 1)) / 2
                         : (double)(r1 - r0);
          double off = fabs(w - total / T);
          if (off > worst) worst = off;
        }
        ok &= prev == n;
        CHECK_MSG(ok, "n %lld T %d tri %d: bands not contiguous/non-empty/"
                  "growing", (long long)n, T, tri);
        if (!tri)
          CHECK_MSG(maxrows - minrows <= 1, "n %lld T %d: rows %lld..%lld",
                    (long long)n, T, (long long)minrows, (long long)maxrows);
        else if (n >= 4 * (int64_t)T) /* tiny n: clamped to one row each */
          CHECK_MSG(worst <= (double)n,
                    "n %lld T %d: a band is %.0f pairs off %.0f", (long long)n,
                    T, worst, total / T);
      }
}

int main(void) {
  t_log_level = T_LOG_WARN;
  snprintf(root, sizeof root, "/tmp/tessel_sched_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_success_and_result_file);
  RUN(test_destroy_waits_for_firing_waiters);
  RUN(test_auto_router);
  RUN(test_priority_fifo);
  RUN(test_priority_many_with_cancels);
  RUN(test_cancel_queued);
  RUN(test_cancel_running);
  RUN(test_result_in_row);
  RUN(test_stored_text);
  RUN(test_canceled_in_store_before_start);
  RUN(test_timeout);
  RUN(test_queue_limit);
  RUN(test_waiters);
  RUN(test_wait_end);
  RUN(test_unwait_race);
  RUN(test_compare);
  RUN(test_failures);
  RUN(test_check);
  RUN(test_recovery);
  RUN(test_shutdown_and_restart);
  RUN(test_progress_stored);
  RUN(test_compiled_once);
  RUN(test_split_rows);
  rm_tree(root);
  return check_summary();
}
