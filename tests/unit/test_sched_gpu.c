/* test_sched_gpu.c — the scheduler's GPU paths with two fake devices.
 *
 * The fakes come in through cfg.gpu_ops (sched.h): two devices, a health
 * streak per device kept like GPU_FAIL_LIMIT says, and a lock per device
 * that records its holder. The test kinds "run" on B_CUDA on the CPU; what
 * is checked is the scheduler: cuda jobs run on the GPU workers (cuda:0 /
 * cuda:1) holding the device lock; auto jobs the router sends to cuda are
 * handed over from a CPU worker and run there; compare adds a cuda run;
 * every cuda run is reported to note_result once, and a device error fails
 * the job with device_error; unhealthy devices are left alone by auto and
 * compare; a running cuda job can be canceled; sched_check accepts cuda.
 * Borrowed GPUs (job_ctx.gpu_borrow): a cuda run gets the other device
 * when it is free and healthy, never its own, a busy or an unhealthy one,
 * nor one twice; the lock is this thread's while borrowed; whatever the
 * kind forgets to give back (even when it fails) the scheduler does.
 */
#include "compute/gpu/gpu.h"
#include "sched_fixture.h"

#define NDEV 2
static atomic_int streak[NDEV], notes[NDEV], last_rc[NDEV];
static atomic_int hook_calls, hook_bad, hook_dev[NDEV];

static int fake_count(void) { return NDEV; }
static const char *fake_reason(void) { return ""; }
static int fake_healthy(int dev) {
  return atomic_load(&streak[dev]) < GPU_FAIL_LIMIT;
}
static void fake_note(int dev, int rc) {
  atomic_fetch_add(&notes[dev], 1);
  atomic_store(&last_rc[dev], rc);
  if (rc == T_EDEVICE)
    atomic_fetch_add(&streak[dev], 1);
  else if (rc == T_OK)
    atomic_store(&streak[dev], 0);
}
static const sched_gpu_ops fake_gpu = {fake_count, fake_healthy, fake_note,
                                       fake_lock, fake_unlock, fake_reason,
                                       fake_trylock};

/* fx_open with the fake GPUs. */
static int fx_open_gpu(fx *f, int threads) {
  int rc = fx_prepare(f, threads);
  if (rc) return rc;
  f->cfg.gpu_ops = &fake_gpu;
  return fx_start(f);
}

/* On every cuda run: a valid device whose lock this thread holds. */
static void check_cuda_ctx(job_ctx *ctx) {
  atomic_fetch_add(&hook_calls, 1);
  int d = ctx->device;
  if (d < 0 || d >= NDEV || !fake_holds(d)) {
    atomic_fetch_add(&hook_bad, 1);
    return;
  }
  atomic_fetch_add(&hook_dev[d], 1);
}

static void reset_fakes(void) {
  for (int d = 0; d < NDEV; d++) {
    atomic_store(&streak[d], 0);
    atomic_store(&notes[d], 0);
    atomic_store(&hook_dev[d], 0);
  }
  atomic_store(&hook_calls, 0);
  atomic_store(&hook_bad, 0);
}

TEST(test_gpu_workers_run_cuda_jobs) {
  reset_fakes();
  fx f;
  if (fx_open_gpu(&f, 2)) return;
  sched_stats st;
  sched_get_stats(f.s, &st);
  CHECK(st.gpu_workers == NDEV);
  char ids[6][T_ID_MAX];
  for (int i = 0; i < 6; i++)
    CHECK(submit(&f, "sleepy", "{\"n\":20,\"ms\":1,\"value\":2}", "cuda", 5, 0,
                 ids[i]) == 0);
  for (int i = 0; i < 6; i++) {
    store_job j;
    if (!wait_final(&f, ids[i], &j)) continue;
    CHECK_STR(job_status_name(j.status), "succeeded");
    CHECK_MSG(j.backend_used && (!strcmp(j.backend_used, "cuda:0") ||
                                 !strcmp(j.backend_used, "cuda:1")),
              "used %s", j.backend_used);
    CHECK(j.backend_reason && strstr(j.backend_reason, "cuda requested"));
    check_npy(j.result_path ? j.result_path : "", 20, 2);
    store_job_clear(&j);
  }
  wait_idle(&f);
  CHECK(atomic_load(&hook_calls) == 6 && atomic_load(&hook_bad) == 0);
  CHECK(atomic_load(&notes[0]) + atomic_load(&notes[1]) == 6);
  CHECK(atomic_load(&last_rc[0]) == 0 || atomic_load(&notes[0]) == 0);
  job_estimate est;
  terr e;
  json_t *p = json_pack("{s:i}", "n", 5);
  CHECK(sched_check(f.s, &k_sleepy, p, NULL, B_CUDA, &est, &e) == 0);
  json_decref(p);
  fx_close(&f);
}

TEST(test_gpu_auto_handover) {
  reset_fakes();
  fx f;
  if (fx_open_gpu(&f, 2)) return;
  char big[T_ID_MAX], small[T_ID_MAX];
  /* 1e10 units of work, 80 bytes to move: the router picks cuda. */
  CHECK(submit(&f, "sleepy", "{\"n\":10,\"work\":1e10}", "auto", 5, 0, big) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":100}", "auto", 5, 0, small) == 0);
  store_job j;
  if (wait_final(&f, big, &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    CHECK_MSG(j.backend_used && !strncmp(j.backend_used, "cuda:", 5), "used %s",
              j.backend_used);
    CHECK_MSG(j.backend_reason && strstr(j.backend_reason, "large job"),
              "reason %s", j.backend_reason);
    CHECK(j.attempts == 1);
    store_job_clear(&j);
  }
  if (wait_final(&f, small, &j)) {
    CHECK_STR(j.backend_used, "serial");
    store_job_clear(&j);
  }
  CHECK(atomic_load(&hook_bad) == 0 && atomic_load(&hook_calls) == 1);
  fx_close(&f);
}

TEST(test_gpu_compare) {
  reset_fakes();
  fx f;
  if (fx_open_gpu(&f, 2)) return;
  char id[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":50,\"value\":3}", "compare", 5, 0, id) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK_STR(job_status_name(j.status), "succeeded");
    json_t *c = json_loads(j.compare ? j.compare : "null", 0, NULL);
    CHECK(json_array_size(c) == 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(c, 2), "backend")),
              "cuda:0");
    CHECK(json_number_value(json_object_get(json_array_get(c, 2), "max_abs_diff")) == 0);
    json_decref(c);
    CHECK(j.progress_done == 150 && j.progress_total == 150);
    check_npy(j.result_path ? j.result_path : "", 50, 3);
    store_job_clear(&j);
  }
  wait_idle(&f);
  CHECK(atomic_load(&hook_dev[0]) == 1 && atomic_load(&hook_bad) == 0);
  CHECK(atomic_load(&notes[0]) == 1);
  fx_close(&f);
}

TEST(test_gpu_errors_and_health) {
  reset_fakes();
  fx f;
  if (fx_open_gpu(&f, 2)) return;
  char id[T_ID_MAX];
  CHECK(submit(&f, "fail", "{\"n\":1}", "cuda", 5, 0, id) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK_STR(j.error_code, "device_error");
    CHECK(j.error_message && strstr(j.error_message, "fake device error on cuda:"));
    store_job_clear(&j);
  }
  wait_idle(&f);
  int d = atomic_load(&notes[0]) ? 0 : 1;
  CHECK(atomic_load(&notes[d]) == 1 && atomic_load(&last_rc[d]) == T_EDEVICE);
  CHECK(atomic_load(&streak[d]) == 1);
  /* Both devices unhealthy: auto stays on the CPU, compare skips cuda. */
  atomic_store(&streak[0], GPU_FAIL_LIMIT);
  atomic_store(&streak[1], GPU_FAIL_LIMIT);
  char a[T_ID_MAX], c[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":10,\"work\":1e10}", "auto", 5, 0, a) == 0);
  CHECK(submit(&f, "sleepy", "{\"n\":10}", "compare", 5, 0, c) == 0);
  if (wait_final(&f, a, &j)) {
    CHECK_STR(j.backend_used, "cpu");
    CHECK(j.backend_reason && strstr(j.backend_reason, "no usable GPU"));
    store_job_clear(&j);
  }
  if (wait_final(&f, c, &j)) {
    json_t *arr = json_loads(j.compare ? j.compare : "null", 0, NULL);
    CHECK(json_array_size(arr) == 2);
    json_decref(arr);
    store_job_clear(&j);
  }
  fx_close(&f);
}

TEST(test_gpu_cancel_running) {
  reset_fakes();
  fx f;
  if (fx_open_gpu(&f, 1)) return;
  char id[T_ID_MAX];
  CHECK(submit(&f, "sleepy", "{\"n\":5000,\"ms\":1}", "cuda", 5, 0, id) == 0);
  CHECK(wait_status(&f, id, JOB_RUNNING));
  int64_t done = 0, total = 0;
  for (int i = 0; i < 2000 && done < 5; i++) {
    sched_progress(f.s, id, &done, &total);
    sleep_ms(1);
  }
  terr e;
  CHECK(sched_cancel(f.s, id, NULL, &e) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK_STR(job_status_name(j.status), "canceled");
    CHECK(j.progress_done < 5000);
    store_job_clear(&j);
  }
  wait_idle(&f);
  CHECK(!atomic_load(&dev_held[0]) && !atomic_load(&dev_held[1]));
  fx_close(&f);
}

/* "borrow" {"forget": bool, "fail": bool}: on its run, tries every device
 * and records the answers; gives back what it got unless forget. */
static atomic_int bw_ngpu, bw_own, bw_other, bw_twice, bw_held_here,
    bw_other_dev, bw_runs;
static int borrow_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                      terr *e) {
  splan *p = plan;
  int own = ctx->device, other = own == 0 ? 1 : 0;
  atomic_fetch_add(&bw_runs, 1);
  atomic_store(&bw_ngpu, ctx->ngpu);
  atomic_store(&bw_other_dev, other);
  if (!ctx->gpu_borrow || !ctx->gpu_return)
    return terr_set(e, T_EINTERNAL, "", -1, "no borrow hooks");
  atomic_store(&bw_own, ctx->gpu_borrow(ctx, own));
  int got = ctx->gpu_borrow(ctx, other);
  atomic_store(&bw_other, got);
  atomic_store(&bw_held_here, got == 0 && fake_holds(other));
  atomic_store(&bw_twice, got == 0 ? ctx->gpu_borrow(ctx, other) : 99);
  atomic_store(&bw_own, atomic_load(&bw_own) * 10 + ctx->gpu_borrow(ctx, 7));
  if (got == 0 && p->value == 0) ctx->gpu_return(ctx, other); /* not forget */
  if (p->ms > 0) return terr_set(e, T_EINVAL, "params.fail", -1, "failing");
  int64_t one = 1;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &one, result, e);
  if (rc == T_OK) tarray_set(*result, 0, got);
  return rc;
}
/* "forget" -> value 1, "fail" -> ms 1 (sleepy's plan fields). */
static int borrow_prepare(const json_t *params, const tenv *env, void **plan,
                          terr *e) {
  splan *p = calloc(1, sizeof *p);
  p->n = 1;
  p->value = json_is_true(json_object_get(params, "forget"));
  p->ms = json_is_true(json_object_get(params, "fail"));
  *plan = p;
  return T_OK;
}
static const kind_ops k_borrow =
    KIND("borrow", 0, 0, sleepy_check, borrow_prepare, borrow_run);
static const kind_ops *borrow_kinds(const char *name) {
  return strcmp(name, "borrow") == 0 ? &k_borrow : test_kinds(name);
}

/* One borrow job on cuda; its result: what borrowing the other gave. */
static void borrow_job(fx *f, const char *params, const char *want_status) {
  char id[T_ID_MAX];
  CHECK(submit(f, "borrow", params, "cuda", 5, 0, id) == 0);
  store_job j;
  if (wait_final(f, id, &j)) {
    CHECK_MSG(!strcmp(job_status_name(j.status), want_status), "%s: %s (%s)",
              params, job_status_name(j.status),
              j.error_message ? j.error_message : "");
    store_job_clear(&j);
  }
  wait_idle(f);
}

TEST(test_gpu_borrow) {
  reset_fakes();
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  terr e;
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  fx_config(&f, 2);
  f.cfg.gpu_ops = &fake_gpu;
  f.cfg.kind_lookup = borrow_kinds;
  if (fx_start(&f)) return;
  /* Both free: the other is lent, held by the run's thread; not twice,
   * never the run's own nor a device that does not exist. */
  borrow_job(&f, "{\"n\":1}", "succeeded");
  CHECK(atomic_load(&bw_ngpu) == NDEV);
  CHECK(atomic_load(&bw_other) == 0 && atomic_load(&bw_held_here) == 1);
  CHECK(atomic_load(&bw_twice) == -1);
  CHECK(atomic_load(&bw_own) == -11); /* own: -1, device 7: -1 */
  CHECK(!atomic_load(&dev_held[0]) && !atomic_load(&dev_held[1]));
  /* Forgotten, and forgotten by a failing run: the scheduler gives it
   * back (the next borrow of it succeeds again). */
  borrow_job(&f, "{\"n\":1,\"forget\":true}", "succeeded");
  CHECK(atomic_load(&bw_other) == 0);
  CHECK(!atomic_load(&dev_held[0]) && !atomic_load(&dev_held[1]));
  borrow_job(&f, "{\"n\":1,\"forget\":true,\"fail\":true}", "failed");
  CHECK(atomic_load(&bw_other) == 0);
  CHECK(!atomic_load(&dev_held[0]) && !atomic_load(&dev_held[1]));
  /* Busy: a gate job holds one device (its worker's run); the borrow job
   * runs on the other and is refused the gate's device at once (a try,
   * never a wait: the gate is still closed when it ends). */
  char gid[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cuda", 5, 0, gid) == 0);
  int held = -1;
  for (int i = 0; i < 10000 && held < 0; i++) {
    for (int d = 0; d < NDEV; d++)
      if (atomic_load(&dev_held[d])) held = d;
    if (held < 0) sleep_ms(1);
  }
  CHECK(held >= 0);
  char bid[T_ID_MAX];
  CHECK(submit(&f, "borrow", "{\"n\":1}", "cuda", 5, 0, bid) == 0);
  store_job bj;
  if (wait_final(&f, bid, &bj)) {
    CHECK(bj.status == JOB_SUCCEEDED);
    store_job_clear(&bj);
  }
  CHECK(atomic_load(&bw_other_dev) == held && atomic_load(&bw_other) == -1);
  atomic_store(&gate_open, 1);
  if (wait_final(&f, gid, &bj)) store_job_clear(&bj);
  wait_idle(&f);
  atomic_store(&gate_open, 0);
  /* Unhealthy: never lent. */
  int sick = 1;
  atomic_store(&streak[sick], GPU_FAIL_LIMIT);
  atomic_store(&bw_other, 5);
  char id[T_ID_MAX];
  CHECK(submit(&f, "borrow", "{\"n\":1}", "cuda", 5, 0, id) == 0);
  store_job j;
  if (wait_final(&f, id, &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    if (j.backend_used && !strcmp(j.backend_used, "cuda:0"))
      CHECK(atomic_load(&bw_other) == -1);
    store_job_clear(&j);
  }
  wait_idle(&f);
  atomic_store(&streak[sick], 0);
  CHECK(!atomic_load(&dev_held[0]) && !atomic_load(&dev_held[1]));
  fx_close(&f);
}

int main(void) {
  t_log_level = T_LOG_WARN;
  cuda_hook = check_cuda_ctx;
  snprintf(root, sizeof root, "/tmp/tessel_schedgpu_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_gpu_workers_run_cuda_jobs);
  RUN(test_gpu_auto_handover);
  RUN(test_gpu_compare);
  RUN(test_gpu_errors_and_health);
  RUN(test_gpu_cancel_running);
  RUN(test_gpu_borrow);
  rm_tree(root);
  return check_summary();
}
