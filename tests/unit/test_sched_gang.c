/* test_sched_gang.c — gangs (compute/sched/README.md, "Gangs"): tiny cuda
 * jobs a GPU worker takes together to share one launch, with one fake
 * device.
 *
 * The test kind "gangy" ({"n", "value", "key", "alone", "bad"}) gives a
 * one-element result value * 2, alone (run) or in a gang (gang_run, which
 * counts its calls and members and checks the device lock is held); its
 * gang key is params.key ("alone": no key), "bad" fails it in the gang
 * with T_EINVAL, and with `hold` set gang_run waits for the test. A
 * "gate" cuda job holds the GPU worker while the jobs queue behind it.
 * Checked: 8 alike jobs run as one launch, each with its own end, result
 * and "launch" in its stored estimate; jobs that may not group (another
 * key, no key, another size, backend cpu) run alone, a failing member
 * fails alone; a member canceled during the launch ends canceled and the
 * others succeed; a member canceled in the queue is not taken; a kill -9
 * during a launch loses no acknowledged job (after the restart each ends
 * succeeded with its own value); a batch's items queued with its hold
 * (sched_hold_open) while the worker is free form one gang of 100, and
 * 300 of them two (256 and 44); during a gang's launch each of its 100
 * members holds a slot of the in-flight journal.
 */
#include <signal.h>
#include <sys/wait.h>

#include "sched_fixture.h"

static atomic_int gang_calls, gang_members, gang_bad_lock, gang_hold,
    gang_in;

static int gangy_key(const void *plan, char *key, size_t cap) {
  const splan *p = plan;
  if (!p->tag) return 0;
  snprintf(key, cap, "%s", p->tag);
  return 1;
}

static int gangy_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  int rc = sleepy_prepare(params, env, plan, e);
  splan *p = *plan;
  json_t *k = json_object_get(params, "key");
  p->tag = json_is_string(k) && !json_is_true(json_object_get(params, "alone"))
               ? json_string_value(k) : NULL; /* params outlive the plan */
  p->wrong = json_is_true(json_object_get(params, "bad"));
  return rc;
}

static int gangy_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                     terr *e) {
  splan *p = plan;
  int64_t one = 1;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &one, result, e);
  if (!rc) tarray_set(*result, 0, p->value * 2);
  return rc;
}

static void gangy_gang_run(void *const *plans, int n, job_ctx *const *ctx,
                           tarray **results, int *rc, terr *e) {
  atomic_fetch_add(&gang_calls, 1);
  atomic_fetch_add(&gang_members, n);
  if (!fake_holds(ctx[0]->device)) atomic_fetch_add(&gang_bad_lock, 1);
  atomic_store(&gang_in, 1);
  while (atomic_load(&gang_hold)) sleep_ms(1);
  for (int i = 0; i < n; i++) {
    const splan *p = plans[i];
    int64_t one = 1;
    results[i] = NULL;
    rc[i] = ctx[i]->result_alloc(ctx[i], T_F64, 1, &one, &results[i], &e[i]);
    if (!rc[i] && p->wrong)
      rc[i] = terr_set(&e[i], T_EINVAL, "params.bad", -1, "a bad member");
    if (!rc[i]) tarray_set(results[i], 0, p->value * 2);
  }
}

static const kind_ops k_gangy = {
    .name = "gangy", .tolerance_doc = "test", .check = sleepy_check,
    .prepare = gangy_prepare, .run = gangy_run, .release = plan_release,
    .gang_max = 100, .gang_key = gangy_key, .gang_run = gangy_gang_run};

static const kind_ops *gang_kinds(const char *name) {
  return strcmp(name, "gangy") == 0 ? &k_gangy : test_kinds(name);
}

static int one_count(void) { return 1; }
static int one_healthy(int dev) { return dev == 0; }
static void one_note(int dev, int rc) { (void)dev, (void)rc; }
static const char *one_reason(void) { return ""; }
static const sched_gpu_ops one_gpu = {one_count, one_healthy, one_note,
                                      fake_lock, fake_unlock, one_reason,
                                      fake_trylock};

/* What the API does for a job it checked: reserve, insert, enqueue with
 * the estimate (sched_enqueue_held; a batch's items with its hold, else
 * 0), which is what a gang is taken by. */
static int submit_held(fx *f, const char *kind, const char *params,
                       const char *backend, uint64_t hold,
                       char id[T_ID_MAX]) {
  int retry = 0;
  terr e;
  json_t *pj = json_loads(params, 0, NULL);
  const kind_ops *k = gang_kinds(kind);
  job_estimate est;
  memset(&est, 0, sizeof est);
  int rc = sched_reserve(f->s, &retry, &e);
  CHECK(rc == 0 && pj && k && k->check(pj, NULL, &est, &e) == 0);
  if (rc || !pj) {
    json_decref(pj);
    return -1;
  }
  if ((rc = insert_job(f->st, kind, params, backend, 5, 0, id))) {
    sched_unreserve(f->s);
    json_decref(pj);
    return rc;
  }
  store_job j;
  rc = store_job_get(f->st, id, NULL, &j, &e);
  CHECK(rc == 0);
  rc = sched_enqueue_held(f->s, &j, pj, &est, k, NULL, hold, &e);
  CHECK_MSG(rc == 0, "enqueue: %s", e.message);
  store_job_clear(&j);
  json_decref(pj);
  return rc;
}

static int submit_checked(fx *f, const char *kind, const char *params,
                          const char *backend, char id[T_ID_MAX]) {
  return submit_held(f, kind, params, backend, 0, id);
}

static int fx_open_gang(fx *f) {
  int rc = fx_prepare(f, 2);
  if (rc) return rc;
  f->cfg.gpu_ops = &one_gpu;
  f->cfg.kind_lookup = gang_kinds;
  f->cfg.row_result_max = 4096;
  return fx_start(f);
}

/* The GPU worker held by a gate job: what is submitted now queues. */
static void hold_gpu(fx *f, char *gate) {
  atomic_store(&gate_open, 0);
  CHECK(submit(f, "gate", "{\"n\":1}", "cuda", 5, 0, gate) == 0);
  CHECK(wait_status(f, gate, JOB_RUNNING));
}

/* Job id's end: status, and for a success its value and "launch". */
static void check_job(fx *f, const char *id, job_status want, double value,
                      int shared, const char *first) {
  store_job j;
  if (!wait_final(f, id, &j)) return;
  CHECK_MSG(j.status == want, "job %s: status %d, want %d (%s)", id,
            (int)j.status, (int)want, j.error_message ? j.error_message : "");
  char launch[200] = "";
  if (shared > 1)
    snprintf(launch, sizeof launch,
             "\"launch\":{\"shared\":%d,\"first\":\"%s\"}", shared, first);
  if (shared > 1)
    CHECK_MSG(j.estimate && strstr(j.estimate, launch), "job %s estimate %s",
              id, j.estimate ? j.estimate : "(null)");
  else
    CHECK_MSG(!j.estimate || !strstr(j.estimate, "\"launch\""),
              "job %s estimate %s", id, j.estimate);
  CHECK(j.timings.ms[JOB_T_TOTAL] >= 0);
  store_job_clear(&j);
  if (want != JOB_SUCCEEDED) return;
  void *npy = NULL;
  size_t len = 0;
  terr e;
  CHECK(store_job_result_npy(f->st, id, "", &npy, &len, &e) == 0);
  if (npy) check_npy_buf(npy, len, 1, value);
  free(npy);
}

TEST(test_gang_alike_jobs_share_a_launch) {
  fx f;
  if (fx_open_gang(&f)) return;
  atomic_store(&gang_calls, 0);
  atomic_store(&gang_members, 0);
  char gate[T_ID_MAX], ids[8][T_ID_MAX];
  hold_gpu(&f, gate);
  for (int i = 0; i < 8; i++) {
    char p[128];
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_checked(&f, "gangy", p, "cuda", ids[i]) == 0);
  }
  atomic_store(&gate_open, 1);
  for (int i = 0; i < 8; i++)
    check_job(&f, ids[i], JOB_SUCCEEDED, 2.0 * i, 8, ids[0]);
  CHECK_MSG(atomic_load(&gang_calls) == 1, "%d launches",
            atomic_load(&gang_calls));
  CHECK(atomic_load(&gang_members) == 8);
  CHECK(atomic_load(&gang_bad_lock) == 0);
  check_job(&f, gate, JOB_SUCCEEDED, 42, 0, "");
  wait_idle(&f);
  fx_close(&f);
}

TEST(test_gang_keeps_apart_what_may_not_share) {
  fx f;
  if (fx_open_gang(&f)) return;
  atomic_store(&gang_calls, 0);
  atomic_store(&gang_members, 0);
  char gate[T_ID_MAX], a1[T_ID_MAX], b[T_ID_MAX], alone[T_ID_MAX],
      bad[T_ID_MAX], a2[T_ID_MAX], big[T_ID_MAX], cpu[T_ID_MAX],
      a3[T_ID_MAX];
  hold_gpu(&f, gate);
  CHECK(submit_checked(&f, "gangy", "{\"n\":10,\"value\":1,\"key\":\"a\"}", "cuda", a1) == 0);
  CHECK(submit_checked(&f, "gangy", "{\"n\":10,\"value\":2,\"key\":\"b\"}", "cuda", b) == 0);
  CHECK(submit_checked(&f, "gangy",
                       "{\"n\":10,\"value\":3,\"key\":\"a\",\"alone\":true}",
                       "cuda", alone) == 0);
  CHECK(submit_checked(&f, "gangy",
                       "{\"n\":10,\"value\":4,\"key\":\"a\",\"bad\":true}",
                       "cuda", bad) == 0);
  CHECK(submit_checked(&f, "gangy", "{\"n\":10,\"value\":5,\"key\":\"a\"}",
                       "cuda", a2) == 0);
  /* another size: the gang taken so far ends before it */
  CHECK(submit_checked(&f, "gangy", "{\"n\":11,\"value\":6,\"key\":\"a\"}", "cuda", big) == 0);
  CHECK(submit_checked(&f, "gangy", "{\"n\":10,\"value\":7,\"key\":\"a\"}", "cpu", cpu) == 0);
  CHECK(submit_checked(&f, "gangy", "{\"n\":10,\"value\":8,\"key\":\"a\"}", "cuda", a3) == 0);
  atomic_store(&gate_open, 1);
  /* taken together: a1 b alone bad a2 (5); in the launch: a1 bad a2 */
  check_job(&f, a1, JOB_SUCCEEDED, 2, 5, a1);
  check_job(&f, b, JOB_SUCCEEDED, 4, 5, a1);
  check_job(&f, alone, JOB_SUCCEEDED, 6, 5, a1);
  check_job(&f, bad, JOB_FAILED, 0, 5, a1);
  check_job(&f, a2, JOB_SUCCEEDED, 10, 5, a1);
  /* big and a3 may be taken together (big first, then a3 is another size:
   * no); cpu never by a GPU worker */
  check_job(&f, big, JOB_SUCCEEDED, 12, 0, "");
  check_job(&f, cpu, JOB_SUCCEEDED, 14, 0, "");
  check_job(&f, a3, JOB_SUCCEEDED, 16, 0, "");
  CHECK_MSG(atomic_load(&gang_calls) == 1, "%d launches",
            atomic_load(&gang_calls));
  CHECK_MSG(atomic_load(&gang_members) == 3, "%d members",
            atomic_load(&gang_members));
  store_job j;
  if (wait_final(&f, bad, &j)) {
    CHECK(j.error_code && strcmp(j.error_code, "invalid_argument") == 0);
    store_job_clear(&j);
  }
  wait_idle(&f);
  fx_close(&f);
}

TEST(test_gang_cancel_of_one_member) {
  fx f;
  if (fx_open_gang(&f)) return;
  atomic_store(&gang_calls, 0);
  atomic_store(&gang_in, 0);
  atomic_store(&gang_hold, 1);
  char gate[T_ID_MAX], ids[5][T_ID_MAX];
  hold_gpu(&f, gate);
  for (int i = 0; i < 5; i++) {
    char p[128];
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_checked(&f, "gangy", p, "cuda", ids[i]) == 0);
  }
  terr e;
  /* canceled while queued: never taken into the gang */
  CHECK(sched_cancel(f.s, ids[4], NULL, &e) == 0);
  atomic_store(&gate_open, 1);
  for (int i = 0; i < 2000 && !atomic_load(&gang_in); i++) sleep_ms(2);
  CHECK(atomic_load(&gang_in));
  /* canceled during the launch: it alone ends canceled */
  CHECK(sched_cancel(f.s, ids[1], NULL, &e) == 0);
  atomic_store(&gang_hold, 0);
  check_job(&f, ids[0], JOB_SUCCEEDED, 0, 4, ids[0]);
  check_job(&f, ids[1], JOB_CANCELED, 0, 4, ids[0]);
  check_job(&f, ids[2], JOB_SUCCEEDED, 4, 4, ids[0]);
  check_job(&f, ids[3], JOB_SUCCEEDED, 6, 4, ids[0]);
  check_job(&f, ids[4], JOB_CANCELED, 0, 0, "");
  CHECK(atomic_load(&gang_calls) == 1);
  wait_idle(&f);
  fx_close(&f);
}

/* A batch's items queued with its hold while the GPU worker is free
 * (sched_hold_open): none is taken while the hold is open and fewer than
 * a full gang wait, so 100 alike items run as one launch of 100 (not the
 * first alone and the rest in the steps they came in), and 300 as two:
 * the first full gang (256) as soon as it waits, the other 44 at the
 * close. At most SCHED_HOLDS_MAX holds are open at once (then 0: none). */
TEST(test_gang_hold_takes_a_batch_whole) {
  enum { N = 300 };
  fx f;
  if (fx_prepare(&f, 2)) return;
  f.cfg.gpu_ops = &one_gpu;
  f.cfg.kind_lookup = gang_kinds;
  f.cfg.row_result_max = 4096;
  f.cfg.queue_limit = 4 * N;
  if (fx_start(&f)) return;
  atomic_store(&gang_calls, 0);
  atomic_store(&gang_members, 0);
  static char ids[N][T_ID_MAX];
  char p[128];
  uint64_t hold = sched_hold_open(f.s);
  CHECK(hold > 0);
  CHECK(submit_held(&f, "gangy", "{\"n\":10,\"value\":0,\"key\":\"a\"}",
                    "cuda", hold, ids[0]) == 0);
  sleep_ms(50); /* the worker is free: only the hold keeps it queued */
  sched_stats ss;
  sched_get_stats(f.s, &ss);
  CHECK_MSG(ss.queued == 1 && ss.running == 0 && ss.finished_total[0] +
            ss.finished_total[1] + ss.finished_total[2] +
            ss.finished_total[3] + ss.finished_total[4] == 0,
            "held: %d queued, %d running", ss.queued, ss.running);
  for (int i = 1; i < 100; i++) {
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_held(&f, "gangy", p, "cuda", hold, ids[i]) == 0);
  }
  sched_hold_close(f.s, hold);
  for (int i = 0; i < 100; i++)
    check_job(&f, ids[i], JOB_SUCCEEDED, 2.0 * i, 100, ids[0]);
  CHECK_MSG(atomic_load(&gang_calls) == 1, "%d launches for 100",
            atomic_load(&gang_calls));
  CHECK(atomic_load(&gang_members) == 100);

  hold = sched_hold_open(f.s);
  for (int i = 0; i < N; i++) {
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_held(&f, "gangy", p, "cuda", hold, ids[i]) == 0);
  }
  sched_hold_close(f.s, hold);
  for (int i = 0; i < N; i++)
    check_job(&f, ids[i], JOB_SUCCEEDED, 2.0 * i, i < 256 ? 256 : N - 256,
              i < 256 ? ids[0] : ids[256]);
  CHECK_MSG(atomic_load(&gang_calls) == 3, "%d launches for 100 + 300",
            atomic_load(&gang_calls));
  CHECK(atomic_load(&gang_members) == 100 + N);

  uint64_t h[SCHED_HOLDS_MAX];
  for (int i = 0; i < SCHED_HOLDS_MAX; i++) CHECK((h[i] = sched_hold_open(f.s)) > 0);
  CHECK(sched_hold_open(f.s) == 0); /* full: the items queued as any */
  for (int i = 0; i < SCHED_HOLDS_MAX; i++) sched_hold_close(f.s, h[i]);
  sched_hold_close(f.s, 0);
  CHECK((hold = sched_hold_open(f.s)) > 0);
  sched_hold_close(f.s, hold);
  wait_idle(&f);
  fx_close(&f);
}

/* TESSEL_GPU_GANG_HOLD=0 (read by sched_create): no hold opens, so a
 * batch's first item, queued while the GPU worker is free, runs at once
 * on its own, as before holds; the rest still run and succeed. */
TEST(test_gang_hold_off) {
  setenv("TESSEL_GPU_GANG_HOLD", "0", 1);
  fx f;
  int bad = fx_prepare(&f, 2);
  if (!bad) {
    f.cfg.gpu_ops = &one_gpu;
    f.cfg.kind_lookup = gang_kinds;
    f.cfg.row_result_max = 4096;
    bad = fx_start(&f);
  }
  unsetenv("TESSEL_GPU_GANG_HOLD");
  if (bad) return;
  atomic_store(&gang_calls, 0);
  atomic_store(&gang_members, 0);
  static char ids[20][T_ID_MAX];
  uint64_t hold = sched_hold_open(f.s);
  CHECK(hold == 0);
  CHECK(submit_held(&f, "gangy", "{\"n\":10,\"value\":0,\"key\":\"a\"}",
                    "cuda", hold, ids[0]) == 0);
  /* ended while the "batch" is still open: with a hold it would stay
   * queued until the close below (test_gang_hold_takes_a_batch_whole) */
  check_job(&f, ids[0], JOB_SUCCEEDED, 0.0, 0, NULL);
  char p[128];
  for (int i = 1; i < 20; i++) {
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_held(&f, "gangy", p, "cuda", hold, ids[i]) == 0);
  }
  sched_hold_close(f.s, hold);
  for (int i = 1; i < 20; i++) {
    store_job j;
    if (!wait_final(&f, ids[i], &j)) continue;
    CHECK_MSG(j.status == JOB_SUCCEEDED, "job %d: status %d", i, (int)j.status);
    store_job_clear(&j);
  }
  wait_idle(&f);
  fx_close(&f);
}

/* Slots of <dir>/inflight (the in-flight journal, compute/sched/journal.c:
 * 64-byte slots, in use while they begin with the magic "TJNL") naming one
 * of ids[0..n-1]. */
static int journal_count(const fx *f, char (*ids)[T_ID_MAX], int n) {
  char path[400];
  snprintf(path, sizeof path, "%s/inflight", f->dir);
  FILE *fp = fopen(path, "rb");
  if (!fp) return -1;
  unsigned char slot[64];
  int found = 0;
  while (fread(slot, 1, sizeof slot, fp) == sizeof slot) {
    uint32_t magic;
    memcpy(&magic, slot, 4);
    if (magic != 0x544a4e4cu) continue;
    for (int i = 0; i < n; i++)
      if (strncmp((const char *)slot + 8, ids[i], T_ID_MAX) == 0) found++;
  }
  fclose(fp);
  return found;
}

/* While a gang of 100 is in its launch, every member is counted in the
 * in-flight journal (its start in a slot, the store's start lazy), as a
 * job run alone is: one slot per GPU worker left most members to commit
 * their starts [sync], one after the other, before the launch. */
TEST(test_gang_members_each_in_the_journal) {
  enum { N = 100 };
  fx f;
  if (fx_prepare(&f, 2)) return;
  f.cfg.gpu_ops = &one_gpu;
  f.cfg.kind_lookup = gang_kinds;
  f.cfg.row_result_max = 4096;
  f.cfg.queue_limit = 4 * N;
  if (fx_start(&f)) return;
  atomic_store(&gang_in, 0);
  atomic_store(&gang_hold, 1);
  static char ids[N][T_ID_MAX];
  uint64_t hold = sched_hold_open(f.s);
  for (int i = 0; i < N; i++) {
    char p[128];
    snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
    CHECK(submit_held(&f, "gangy", p, "cuda", hold, ids[i]) == 0);
  }
  sched_hold_close(f.s, hold);
  for (int i = 0; i < 5000 && !atomic_load(&gang_in); i++) sleep_ms(1);
  CHECK(atomic_load(&gang_in));
  int in = journal_count(&f, ids, N);
  CHECK_MSG(in == N, "%d of %d members in the journal during the launch", in,
            N);
  atomic_store(&gang_hold, 0);
  for (int i = 0; i < N; i++)
    check_job(&f, ids[i], JOB_SUCCEEDED, 2.0 * i, N, ids[0]);
  CHECK(journal_count(&f, ids, N) == 0); /* every slot given back */
  wait_idle(&f);
  fx_close(&f);
}

/* The scheduler on an existing data dir (a restart). */
static int fx_reopen_gang(fx *f, const char *dir) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  terr e;
  int rc = store_open(f->dir, &f->st, &e);
  CHECK_MSG(rc == 0, "store_open: %s", e.message);
  if (rc) return rc;
  fx_config(f, 2);
  f->cfg.gpu_ops = &one_gpu;
  f->cfg.kind_lookup = gang_kinds;
  f->cfg.row_result_max = 4096;
  return fx_start(f);
}

/* kill -9 while a gang's launch runs: after the restart every acknowledged
 * job (the gang's, one queued behind it, the gate) ends, each once,
 * succeeded with its own value. */
TEST(test_gang_killed_mid_launch) {
  enum { N = 6 };
  char dir[300];
  snprintf(dir, sizeof dir, "%s/d%d", root, dir_seq); /* the child's fx */
  int fd[2];
  CHECK(pipe(fd) == 0);
  pid_t pid = fork();
  if (pid == 0) { /* the service that dies */
    close(fd[0]);
    fx f;
    if (fx_open_gang(&f)) _exit(2);
    atomic_store(&gang_in, 0);
    atomic_store(&gang_hold, 1);
    char ids[N + 2][T_ID_MAX];
    hold_gpu(&f, ids[N]);
    for (int i = 0; i < N; i++) {
      char p[128];
      snprintf(p, sizeof p, "{\"n\":10,\"value\":%d,\"key\":\"a\"}", i);
      if (submit_checked(&f, "gangy", p, "cuda", ids[i])) _exit(3);
    }
    atomic_store(&gate_open, 1);
    for (int i = 0; i < 5000 && !atomic_load(&gang_in); i++) sleep_ms(1);
    if (!atomic_load(&gang_in)) _exit(7); /* no launch under way */
    /* acknowledged while the launch runs: queued behind it */
    if (submit_checked(&f, "gangy", "{\"n\":10,\"value\":9,\"key\":\"a\"}",
                       "cuda", ids[N + 1]))
      _exit(4);
    if (write(fd[1], ids, sizeof ids) != (ssize_t)sizeof ids) _exit(5);
    kill(getpid(), SIGKILL);
    _exit(6);
  }
  close(fd[1]);
  char ids[N + 2][T_ID_MAX];
  ssize_t got = read(fd[0], ids, sizeof ids);
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK_MSG(got == (ssize_t)sizeof ids && WIFSIGNALED(st) &&
                WTERMSIG(st) == SIGKILL,
            "child: %zd bytes, status %d", got, st);
  if (got != (ssize_t)sizeof ids) return;
  dir_seq++;
  atomic_store(&gang_hold, 0);
  atomic_store(&gate_open, 1);
  fx f;
  if (fx_reopen_gang(&f, dir)) return;
  for (int i = 0; i < N; i++) {
    store_job j;
    if (!wait_final(&f, ids[i], &j)) continue;
    CHECK_MSG(j.status == JOB_SUCCEEDED, "job %d: %d %s", i, (int)j.status,
              j.error_message ? j.error_message : "");
    store_job_clear(&j);
    void *npy = NULL;
    size_t len = 0;
    terr e;
    CHECK(store_job_result_npy(f.st, ids[i], "", &npy, &len, &e) == 0);
    if (npy) check_npy_buf(npy, len, 1, 2.0 * i);
    free(npy);
  }
  check_job(&f, ids[N + 1], JOB_SUCCEEDED, 18, 0, "");
  store_job j;
  if (wait_final(&f, ids[N], &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    store_job_clear(&j);
  }
  wait_idle(&f);
  fx_close(&f);
}

int main(void) {
  t_log_level = T_LOG_ERROR;
  snprintf(root, sizeof root, "/tmp/tessel_schedgang_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_gang_alike_jobs_share_a_launch);
  RUN(test_gang_keeps_apart_what_may_not_share);
  RUN(test_gang_cancel_of_one_member);
  RUN(test_gang_hold_takes_a_batch_whole);
  RUN(test_gang_hold_off);
  RUN(test_gang_members_each_in_the_journal);
  RUN(test_gang_killed_mid_launch);
  rm_tree(root);
  return check_summary();
}
