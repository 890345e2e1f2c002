/* test_store_fold.c — a finish queued while its job's async insert still
 * waits in the writer's queue takes the insert over (db/sqlite/store.c,
 * store_wop.absorbed_insert): the writer inserts the ended row, one INSERT
 * and no UPDATE, and nothing a caller sees may differ from the two writes
 * it replaces.
 *
 * Made deterministic with a hold: an async op whose function keeps the
 * writer busy until the test lets it go, so that the insert, the start and
 * the finish queued meanwhile meet in one queue (the fold happens at
 * enqueue; the counter n_folds says it did). Checks: for ends of every
 * shape (a tiny job's result in the row and partial timings, a failure
 * with compare figures, a cuda end's devices and backend_used, a cancel
 * of a queued job without a start, a label, priority and timeout) the
 * folded row equals field for field the row of a twin whose insert
 * committed first (read after reopening the store), result_npy included,
 * and the finish's callback row equals the stored one (composed from
 * `before`, and read back); an insert that fails (an array it names is
 * gone) fails the folded finish the way a missing row does (T_ENOTFOUND)
 * and is counted; a duplicate id's insert fails alone and the finish
 * ends the row that has the id, as before; a [sync] cancel folds and the
 * worker's later finish gets T_ECONFLICT; a [sync] start queued between
 * keeps the insert in its place (no fold; without that pin the start
 * would find no row); 5,000 inserts and their finishes in one queue all
 * fold (the table keyed by id). The rows of a batch's inserts and folded
 * ends go in several to an INSERT (store_rows.c), a failing row alone.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "db/sqlite/store_int.h" /* the hold op and the counters */
#define SQ(s) ((sqstore *)store_impl(s))
#include "job_same.h"
#include "store_fixture.h"
#include "finish_seen.h"

/* ---- the hold -------------------------------------------------------------- */

typedef struct hold {
  atomic_int started, release;
} hold;

static int hold_fn(sqstore *s, store_wop *op, terr *e) {
  (void)s;
  (void)e;
  hold *h = op->arg;
  atomic_store(&h->started, 1);
  for (int i = 0; i < 20000 && !atomic_load(&h->release); i++) usleep(500);
  return 0;
}

/* The writer runs the hold op (its queue empty) until hold_release. */
static void hold_writer(store *s, hold *h) {
  atomic_store(&h->started, 0);
  atomic_store(&h->release, 0);
  store_wop *o = calloc(1, sizeof *o);
  o->fn = hold_fn;
  o->arg = h;
  o->one_stmt = 1;
  CHECK(store__write_async(SQ(s), o) == 0);
  for (int i = 0; i < 20000 && !atomic_load(&h->started); i++) usleep(500);
  CHECK(atomic_load(&h->started));
}

static void hold_release(store *s, hold *h) {
  terr e;
  atomic_store(&h->release, 1);
  CHECK(store_sync(s, &e) == 0);
}

static long long folds(store *s) { return atomic_load(&SQ(s)->n_folds); }
static long long failed(store *s) {
  return atomic_load(&SQ(s)->n_insert_failed);
}

/* ---- finishes ------------------------------------------------------------- */


/* A job as a submit would queue it [async]. */
static void insert_async(store *s, store_job *j, int variant) {
  terr e;
  job_init(j, variant ? "dora" : "", "map");
  if (variant) {
    j->label = sdup("nightly \"run\"");
    j->priority = 3;
    j->timeout_s = 0.25;
  }
  CHECK_MSG(store_job_insert_async(s, j, &e) == 0, "%s", e.message);
}

typedef struct a_case {
  const char *name;
  int variant, start; /* start: a lazy start queued before the end */
  const char *used, *reason, *estimate;
  store_job_end end;
} a_case;

/* One job through insert, start and end; fold: all three queued while
 * the writer is held, else the insert committed first. with_before: the
 * finish gets the row as the scheduler holds it (else it reads back). */
static void run_twin(store *s, const a_case *c, int fold, int with_before,
                     seen *f, char id[T_ID_MAX]) {
  terr e;
  hold h;
  long long f0 = folds(s);
  if (fold) hold_writer(s, &h);
  store_job j;
  insert_async(s, &j, c->variant);
  snprintf(id, T_ID_MAX, "%s", j.id);
  if (!fold) CHECK(store_sync(s, &e) == 0);
  store_job before = j;
  if (c->start) {
    int64_t at = j.created_at + 5;
    store_job_start_async(s, j.id, at, c->used, c->reason, c->estimate);
    before.started_at = at;
    before.backend_used = (char *)c->used;
    before.backend_reason = (char *)c->reason;
    before.estimate = (char *)c->estimate;
    before.attempts = j.attempts + 1;
  }
  store_job_end x = c->end;
  x.before = with_before ? &before : NULL;
  memset(f, 0, sizeof *f);
  CHECK(store_job_finish_async(s, j.id, &x, on_finished, f, &e) == 0);
  if (fold) hold_release(s, &h);
  wait_seen(f);
  CHECK_MSG(f->rc == 0 && f->have_row, "%s: finish rc %d", c->name, f->rc);
  CHECK_MSG(folds(s) - f0 == (fold ? 1 : 0), "%s: folds %lld", c->name,
            folds(s) - f0);
  store_job_clear(&j);
}

TEST(test_folded_row_is_the_unfolded_row) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  static const unsigned char npy[5] = {1, 2, 3, 4, 5};
  a_case cases[5];
  memset(cases, 0, sizeof cases);
  cases[0] = (a_case){"tiny", 0, 1, "serial", "estimate serial 0.01 ms",
                      "{\"size\":3}",
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "float64", .ndim = 2,
                                  .shape = {2, 3}, .bytes = 48},
                       .max_abs_diff = NAN, .progress_done = 3,
                       .progress_total = 3, .result_npy = npy,
                       .result_npy_len = sizeof npy}};
  job_timings_put(&cases[0].end.timings, JOB_T_QUEUE, 0.012);
  job_timings_put(&cases[0].end.timings, JOB_T_TOTAL, 0.125);
  cases[1] = (a_case){"failed", 1, 1, "cpu", "", NULL,
                      {.status = JOB_FAILED,
                       .compare = "[{\"backend\":\"serial\",\"ms\":0.5}]",
                       .max_abs_diff = 3.7e-9, .error_code = "internal",
                       .error_message = "went \"wrong\"\n", .progress_done = 1,
                       .progress_total = 7}};
  cases[2] = (a_case){"cuda", 0, 1, "cuda:0", "cuda requested", NULL,
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "float32", .ndim = 1,
                                  .shape = {4}, .bytes = 16,
                                  .nonconverged = 2},
                       .result_path = "/tmp/none/result.npy",
                       .max_abs_diff = NAN,
                       .devices = "[{\"device\":0,\"rows\":4}]",
                       .backend_used = "cuda:0+cuda:1"}};
  for (int t = 0; t < JOB_T__COUNT; t++)
    job_timings_put(&cases[2].end.timings, (job_timing)t, 0.001 * (t + 1));
  cases[3] = (a_case){"canceled queued", 1, 0, NULL, NULL, NULL,
                      {.status = JOB_CANCELED, .max_abs_diff = NAN,
                       .error_code = "canceled",
                       .error_message = "canceled by the client"}};
  cases[4] = (a_case){"0-d", 0, 1, "serial", NULL, NULL,
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "int64", .ndim = 0, .bytes = 8},
                       .max_abs_diff = NAN, .result_npy = npy,
                       .result_npy_len = 3}};
  enum { N = 5 };
  seen got[N][2];
  char ids[N][2][T_ID_MAX];
  for (int i = 0; i < N; i++) {
    cases[i].end.finished_at = 1795000000000 + i;
    run_twin(s, &cases[i], 1, i % 2 == 0, &got[i][0], ids[i][0]);
    run_twin(s, &cases[i], 0, i % 2 == 1, &got[i][1], ids[i][1]);
  }
  store_close(s);
  s = reopen(dir); /* nothing cached: every read from the file */
  if (!s) return;
  terr e;
  for (int i = 0; i < N; i++) {
    store_job row[2];
    void *npyv[2];
    size_t npyn[2];
    for (int t = 0; t < 2; t++) {
      CHECK(store_job_get(s, ids[i][t], NULL, &row[t], &e) == 0);
      CHECK_MSG(same_job(&got[i][t].row, &row[t], cases[i].name),
                "%s: the callback's row (%s) is the stored one",
                cases[i].name, t ? "unfolded" : "folded");
      int rc = store_job_result_npy(s, ids[i][t], NULL, &npyv[t], &npyn[t],
                                    &e);
      CHECK((rc == 0) == (cases[i].end.result_npy != NULL));
      if (rc) npyv[t] = NULL, npyn[t] = 0;
    }
    CHECK(npyn[0] == npyn[1] &&
          (!npyn[0] || memcmp(npyv[0], npyv[1], npyn[0]) == 0));
    /* The twins differ only in their ids and creation times. */
    snprintf(row[1].id, sizeof row[1].id, "%s", row[0].id);
    int64_t d = row[1].created_at - row[0].created_at;
    row[1].created_at = row[0].created_at;
    if (row[1].started_at) row[1].started_at -= d;
    CHECK_MSG(same_job(&row[0], &row[1], cases[i].name),
              "%s: folded vs unfolded", cases[i].name);
    CHECK(row[0].status == cases[i].end.status);
    for (int t = 0; t < 2; t++) {
      free(npyv[t]);
      store_job_clear(&row[t]);
      store_job_clear(&got[i][t].row);
    }
  }
  store_close(s);
}

/* The insert fails inside the fold: the finish fails as it does when its
 * row is missing, the failure is counted, and no row is left. */
TEST(test_fold_insert_fails) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  for (int fold = 1; fold >= 0; fold--) {
    hold h;
    long long f0 = folds(s), x0 = failed(s);
    if (fold) hold_writer(s, &h);
    store_job j;
    job_init(&j, "o", "map");
    free(j.params); /* an array deleted between the check and the insert */
    j.params = sdup("{\"expr\":\"x\",\"inputs\":{\"x\":{\"array\":\"a_gone\"}}}");
    CHECK(store_job_insert_async(s, &j, &e) == 0);
    if (!fold) CHECK(store_sync(s, &e) == 0); /* the insert fails first */
    store_job_start_async(s, j.id, j.created_at + 1, "cpu", NULL, NULL);
    store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                       .finished_at = j.created_at + 2};
    seen f;
    memset(&f, 0, sizeof f);
    CHECK(store_job_finish_async(s, j.id, &x, on_finished, &f, &e) == 0);
    if (fold) hold_release(s, &h);
    wait_seen(&f);
    CHECK_MSG(f.rc == T_ENOTFOUND && !f.have_row, "fold %d: rc %d", fold,
              f.rc);
    CHECK(folds(s) - f0 == fold);
    CHECK(failed(s) - x0 == 1);
    store_job g;
    CHECK(store_job_get(s, j.id, NULL, &g, &e) == T_ENOTFOUND);
    store_job_clear(&j);
  }
  /* A taken id: the insert fails alone; the finish ends the row that has
   * the id (what the two writes did, too). */
  char taken[T_ID_MAX];
  CHECK(insert_job(s, "o", "map", 0, taken) == 0);
  hold h;
  long long f0 = folds(s), x0 = failed(s);
  hold_writer(s, &h);
  store_job j;
  job_init(&j, "o", "map");
  snprintf(j.id, sizeof j.id, "%s", taken);
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  store_job_end x = {.status = JOB_FAILED, .max_abs_diff = NAN,
                     .error_code = "internal", .error_message = "x"};
  seen f;
  memset(&f, 0, sizeof f);
  CHECK(store_job_finish_async(s, taken, &x, on_finished, &f, &e) == 0);
  hold_release(s, &h);
  wait_seen(&f);
  CHECK(f.rc == 0 && f.have_row && f.row.status == JOB_FAILED);
  CHECK(folds(s) - f0 == 1 && failed(s) - x0 == 1);
  store_job_clear(&f.row);
  store_job_clear(&j);
  int64_t c[5];
  CHECK(store_job_counts(s, "o", c, &e) == 0);
  CHECK(c[JOB_FAILED] == 1 && c[JOB_QUEUED] == 0);
  store_close(s);
}

typedef struct sync_call {
  store *s;
  const char *id;
  int what; /* 0 cancel (a [sync] finish), 1 a [sync] start */
  int rc;
} sync_call;

static void *sync_worker(void *p) {
  sync_call *a = p;
  terr e;
  if (a->what == 0) {
    store_job_end x = {.status = JOB_CANCELED, .max_abs_diff = NAN,
                       .error_code = "canceled",
                       .error_message = "canceled by the client",
                       .finished_at = 1795000000999};
    a->rc = store_job_finish(a->s, a->id, &x, &e);
  } else {
    a->rc = store_job_start(a->s, a->id, 1795000000500, "cpu", "r", NULL, &e);
  }
  return NULL;
}

/* Wait until the writer's queue holds n ops (the held batch taken). */
static void queued(store *s, int n) {
  for (int i = 0; i < 10000; i++) {
    int k = 0;
    pthread_mutex_lock(&SQ(s)->mu);
    for (store_wop *o = SQ(s)->qhead; o; o = o->next) k++;
    pthread_mutex_unlock(&SQ(s)->mu);
    if (k >= n) return;
    usleep(500);
  }
  CHECK_MSG(0, "the queue never held %d ops", n);
}

/* A cancel ([sync] finish) folds; a [sync] start between keeps the insert
 * where it is. */
TEST(test_fold_cancel_and_sync_start) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  for (int what = 0; what < 2; what++) {
    hold h;
    long long f0 = folds(s);
    hold_writer(s, &h);
    store_job j;
    insert_async(s, &j, 0);
    sync_call a = {s, j.id, what, -1};
    pthread_t th;
    pthread_create(&th, NULL, sync_worker, &a);
    queued(s, 2);
    store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                       .finished_at = 1795000001000};
    seen f;
    memset(&f, 0, sizeof f);
    CHECK(store_job_finish_async(s, j.id, &x, on_finished, &f, &e) == 0);
    hold_release(s, &h);
    pthread_join(th, NULL);
    wait_seen(&f);
    store_job g;
    CHECK(store_job_get(s, j.id, NULL, &g, &e) == 0);
    if (what == 0) { /* canceled while queued; the run's end comes late */
      CHECK(a.rc == 0 && folds(s) - f0 == 1);
      CHECK(f.rc == T_ECONFLICT);
      CHECK(g.status == JOB_CANCELED && g.started_at == 0 &&
            g.attempts == 0 && g.finished_at == 1795000000999);
    } else { /* the start found its row: no fold */
      CHECK_MSG(a.rc == 0, "sync start rc %d", a.rc);
      CHECK(folds(s) - f0 == 0);
      CHECK(f.rc == 0 && g.status == JOB_SUCCEEDED &&
            g.started_at == 1795000000500 && g.attempts == 1);
      store_job_clear(&f.row);
    }
    store_job_clear(&g);
    store_job_clear(&j);
  }
  store_close(s);
}

/* Many inserts and their finishes in one queue: every finish finds its
 * insert (the table grows), every job ends. */
TEST(test_fold_many) {
  store *s = open_fresh_store();
  if (!s) return;
  enum { N = 5000 };
  static char ids[N][T_ID_MAX];
  static seen f[N];
  terr e;
  hold h;
  long long f0 = folds(s);
  hold_writer(s, &h);
  for (int i = 0; i < N; i++) {
    store_job j;
    job_init(&j, "m", "map");
    CHECK(store_job_insert_async(s, &j, &e) == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
  }
  for (int i = N - 1; i >= 0; i--) {
    store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                       .finished_at = 1795000000000 + i};
    CHECK(store_job_finish_async(s, ids[i], &x, on_finished, &f[i], &e) == 0);
  }
  hold_release(s, &h);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    wait_seen(&f[i]);
    if (f[i].rc != 0) bad++;
    store_job_clear(&f[i].row);
  }
  CHECK(bad == 0);
  CHECK_MSG(folds(s) - f0 == N, "folds %lld", folds(s) - f0);
  int64_t c[5];
  CHECK(store_job_counts(s, "m", c, &e) == 0);
  CHECK(c[JOB_SUCCEEDED] == N && c[JOB_QUEUED] == 0);
  store_close(s);
}

typedef struct del_call {
  store *s;
  const char *id;
  int rc;
  char *path;
} del_call;

static void *del_worker(void *p) {
  del_call *a = p;
  terr e;
  a->rc = store_array_delete(a->s, a->id, NULL, &a->path, &e);
  return NULL;
}

/* An uploaded array as an [async] insert's input (compute/jobs/submit.c):
 * a delete queued before the insert goes first and the insert fails, the
 * store noting why by job id (store_insert_error: T_ENOTFOUND naming the
 * input), with and without the job's end folded into it; a delete queued
 * after the insert sees the job and is refused. */
TEST(test_array_deleted_before_the_async_insert) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  for (int order = 0; order < 3; order++) { /* delete first; + end; insert first */
    store_array a;
    char sha[16];
    snprintf(sha, sizeof sha, "d%d", order);
    array_init(&a, "o", sha);
    int existing = -1;
    CHECK(store_array_insert(s, &a, &existing, &e) == 0);
    hold h;
    long long f0 = failed(s);
    hold_writer(s, &h);
    del_call d = {s, a.id, -1, NULL};
    pthread_t th;
    store_job j;
    job_init(&j, "o", "reduce");
    free(j.params);
    char params[160];
    snprintf(params, sizeof params,
             "{\"op\":\"sum\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}", a.id);
    j.params = sdup(params);
    if (order < 2) {
      pthread_create(&th, NULL, del_worker, &d);
      queued(s, 1);
      CHECK(store_job_insert_async(s, &j, &e) == 0);
    } else {
      CHECK(store_job_insert_async(s, &j, &e) == 0);
      pthread_create(&th, NULL, del_worker, &d);
      queued(s, 2);
    }
    seen f;
    memset(&f, 0, sizeof f);
    store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                       .finished_at = 1795000001000};
    if (order == 1)
      CHECK(store_job_finish_async(s, j.id, &x, on_finished, &f, &e) == 0);
    hold_release(s, &h);
    pthread_join(th, NULL);
    terr why;
    memset(&why, 0, sizeof why);
    store_job g;
    if (order < 2) {
      CHECK_MSG(d.rc == 0, "order %d: the delete failed %d", order, d.rc);
      CHECK(failed(s) - f0 == 1);
      CHECK(store_insert_error(s, j.id, &why) == 1);
      CHECK_MSG(why.code == T_ENOTFOUND &&
                    strcmp(why.field, "params.inputs.x") == 0,
                "order %d: %d %s", order, why.code, why.field);
      CHECK(store_job_get(s, j.id, NULL, &g, &e) == T_ENOTFOUND);
      if (order == 1) {
        wait_seen(&f);
        CHECK(f.rc != 0); /* the end found no row */
        store_job_clear(&f.row);
      }
    } else {
      CHECK_MSG(d.rc == T_ECONFLICT, "the delete after the insert: %d", d.rc);
      CHECK(failed(s) == f0);
      CHECK(store_insert_error(s, j.id, &why) == 0);
      CHECK(store_job_get(s, j.id, NULL, &g, &e) == 0);
      store_job_clear(&g);
    }
    free(d.path);
    store_job_clear(&j);
    store_array_clear(&a);
  }
  terr why; /* an id it never saw: nothing */
  CHECK(store_insert_error(s, "j_nosuchjob", &why) == 0);
  store_close(s);
}

static long long grouped(store *s) {
  return atomic_load(&SQ(s)->n_rows_grouped);
}

/* Rows several to an INSERT (db/sqlite/store_rows.c): one batch holds 40
 * async inserts, the ends of 20 of them (folded: ended rows), the end of a
 * job committed before (an UPDATE between them, which the run passes),
 * and an insert of a taken id. The run's rows go in with multi-row
 * INSERTs; the statement that holds the taken id fails and its rows go
 * in one by one: only that insert fails (counted, its error kept), every
 * other job is there with its status, every callback's row is the stored
 * one, the earlier job ended and the one that has the taken id is as it
 * was (queued). */
TEST(test_rows_share_inserts) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  enum { N = 40, ENDED = 20 };
  char taken[T_ID_MAX], early[T_ID_MAX], ids[N][T_ID_MAX];
  CHECK(insert_job(s, "o", "map", 0, taken) == 0);
  CHECK(insert_job(s, "o", "map", 0, early) == 0);
  long long g0 = grouped(s), x0 = failed(s);
  hold h;
  hold_writer(s, &h);
  static seen f[ENDED + 1];
  memset(f, 0, sizeof f);
  store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                     .finished_at = 1795000002000, .progress_done = 1,
                     .progress_total = 1};
  for (int i = 0; i < N; i++) {
    store_job j;
    insert_async(s, &j, i % 3 == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    if (i == N / 2) { /* a taken id in the middle of the run */
      store_job d;
      job_init(&d, "o", "map");
      snprintf(d.id, sizeof d.id, "%s", taken);
      CHECK(store_job_insert_async(s, &d, &e) == 0);
      store_job_clear(&d);
      CHECK(store_job_finish_async(s, early, &x, on_finished, &f[ENDED],
                                   &e) == 0);
    }
    if (i % 2 == 0)
      CHECK(store_job_finish_async(s, j.id, &x, on_finished, &f[i / 2],
                                   &e) == 0);
    store_job_clear(&j);
  }
  hold_release(s, &h);
  for (int i = 0; i <= ENDED; i++) {
    wait_seen(&f[i]);
    CHECK_MSG(f[i].rc == 0 && f[i].have_row, "end %d: rc %d", i, f[i].rc);
  }
  /* 41 rows: statements of 16, 16 (the taken id's: fails, its rows go
   * alone), 4, 4, and a lone row */
  CHECK_MSG(grouped(s) - g0 >= 16 && grouped(s) - g0 <= N - 1,
            "rows that shared an INSERT: %lld", grouped(s) - g0);
  CHECK(failed(s) - x0 == 1);
  terr why;
  CHECK(store_insert_error(s, taken, &why) == 1 && why.code == T_ECONFLICT);
  for (int i = 0; i < N; i++) {
    store_job g;
    CHECK_MSG(store_job_get(s, ids[i], NULL, &g, &e) == 0, "job %d", i);
    CHECK(g.status == (i % 2 == 0 ? JOB_SUCCEEDED : JOB_QUEUED));
    if (i % 2 == 0)
      CHECK_MSG(same_job(&f[i / 2].row, &g, "grouped"), "row %d", i);
    store_job_clear(&g);
  }
  for (int i = 0; i <= ENDED; i++) store_job_clear(&f[i].row);
  int64_t c[5];
  CHECK(store_job_counts(s, NULL, c, &e) == 0);
  CHECK_MSG(c[JOB_SUCCEEDED] == ENDED + 1 && c[JOB_QUEUED] == N - ENDED + 1,
            "succeeded %lld queued %lld", (long long)c[JOB_SUCCEEDED],
            (long long)c[JOB_QUEUED]);
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_fold_XXXXXX")) return 1;
  if (test_pg()) {
    printf("skip on postgresql: the SQLite writer's queue\n");
    rm_tree(root);
    return 77;
  }
  RUN(test_folded_row_is_the_unfolded_row);
  RUN(test_fold_insert_fails);
  RUN(test_fold_cancel_and_sync_start);
  RUN(test_fold_many);
  RUN(test_array_deleted_before_the_async_insert);
  RUN(test_rows_share_inserts);
  rm_tree(root);
  return check_summary();
}
