/* test_store_hold.c — the SQLite writer holds an [async] insert back
 * (db/sqlite/store_fold.c) so that its job's end folds into it even when
 * other writes commit first; and every promise a caller counts on still
 * holds.
 *
 * Made deterministic with the hold's times ($TESSEL_STORE_HOLD_MS, read at
 * open): 600000 ms, so that only what the code says ends a hold ends it
 * (no clock), or 1 ms (the deadlines, without any other write). Checks:
 *   - another job's [sync] write commits while the insert and the lazy
 *     start stay queued (the row is not in the store: a read is
 *     T_ENOTFOUND); the job's end then inserts the ended row with the
 *     start's columns, folded (n_folds), in one commit;
 *   - a barrier ends the hold of every insert queued before it:
 *     store_sync, a [sync] insert (store_insert_jobs too), so that a row
 *     is committed when they return (compute/jobs/rids.h counts on it);
 *   - an op that names the job (a [sync] start) finds its row;
 *   - without any other write, the writer commits a held insert by
 *     itself once its job has run hold_run_ms (or, not started, was
 *     queued hold_queued_ms ago);
 *   - 8 threads x 300 jobs, each ended by a [sync] finish while the others'
 *     writes commit: every end folds (without the hold the other threads'
 *     finishes take inserts first), every row is there after a reopen;
 *   - "0" turns the hold off: the row commits with the next write.
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
#include "db/sqlite/store_int.h" /* the counters */
#define SQ(s) ((sqstore *)store_impl(s))
#include "store_fixture.h"
#include "finish_seen.h"

static long long folds(store *s) { return atomic_load(&SQ(s)->n_folds); }
static long long commits(store *s) {
  return atomic_load(&SQ(s)->n_batches);
}

/* A fresh store whose holds last `hold` ("RUN[,QUEUED]" ms). */
static store *open_held(const char *hold, char *dir, size_t n) {
  setenv("TESSEL_STORE_HOLD_MS", hold, 1);
  store *s = open_fresh(dir, n);
  unsetenv("TESSEL_STORE_HOLD_MS");
  return s;
}

/* A job as a lone ?wait submit queues it [async]; its id in id. */
static void queue_job(store *s, char id[T_ID_MAX]) {
  terr e;
  store_job j;
  job_init(&j, "h", "map");
  CHECK_MSG(store_job_insert_async(s, &j, &e) == 0, "%s", e.message);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
}

/* The job's status in the store, or -1 when it has no row. */
static int status_of(store *s, const char *id) {
  terr e;
  store_job j;
  int rc = store_job_get(s, id, NULL, &j, &e);
  CHECK_MSG(rc == 0 || rc == T_ENOTFOUND, "get: %s", e.message);
  int st = rc ? -1 : (int)j.status;
  if (!rc) store_job_clear(&j);
  return st;
}

static int finish_sync(store *s, const char *id, int64_t at) {
  terr e;
  store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                     .finished_at = at};
  return store_job_finish(s, id, &x, &e);
}

TEST(test_held_until_its_end) {
  char dir[300], other[T_ID_MAX], id[T_ID_MAX];
  store *s = open_held("600000", dir, sizeof dir);
  if (!s) return;
  CHECK(insert_job(s, "h", "map", 5, other) == 0);
  long long f0 = folds(s);
  queue_job(s, id);
  store_job_start_async(s, id, 1795000000123, "cpu", "tiny", NULL);
  /* another job's end commits; ours stays queued, start included */
  CHECK(finish_sync(s, other, 1795000000200) == 0);
  CHECK(status_of(s, other) == JOB_SUCCEEDED);
  CHECK(status_of(s, id) == -1);
  long long c0 = commits(s);
  seen f = {0};
  terr e;
  store_job_end x = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                     .finished_at = 1795000000300};
  CHECK(store_job_finish_async(s, id, &x, on_finished, &f, &e) == 0);
  wait_seen(&f);
  CHECK_MSG(f.rc == 0 && f.have_row, "finish rc %d", f.rc);
  CHECK(folds(s) - f0 == 1);
  CHECK_MSG(commits(s) - c0 == 1, "commits %lld", commits(s) - c0);
  store_job_clear(&f.row);
  store_close(s);
  s = reopen(dir);
  store_job j;
  CHECK(store_job_get(s, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_SUCCEEDED && j.started_at == 1795000000123 &&
        j.finished_at == 1795000000300 && j.attempts == 1);
  CHECK(j.backend_used && strcmp(j.backend_used, "cpu") == 0);
  store_job_clear(&j);
  store_close(s);
}

TEST(test_barriers_end_holds) {
  char dir[300], a[T_ID_MAX], b[T_ID_MAX], c[T_ID_MAX], k[T_ID_MAX];
  store *s = open_held("600000", dir, sizeof dir);
  if (!s) return;
  terr e;
  queue_job(s, a);
  CHECK(store_sync(s, &e) == 0);
  CHECK(status_of(s, a) == JOB_QUEUED);
  queue_job(s, b);
  CHECK(insert_job(s, "h", "map", 5, k) == 0); /* a [sync] insert */
  CHECK(status_of(s, b) == JOB_QUEUED);
  queue_job(s, c);
  store_job many[2];
  int existing[2], rcs[2];
  terr errs[2];
  job_init(&many[0], "h", "map");
  job_init(&many[1], "h", "map");
  CHECK(store_insert_jobs(s, many, 2, existing, rcs, errs, &e) == 0);
  CHECK(rcs[0] == 0 && rcs[1] == 0);
  CHECK(status_of(s, c) == JOB_QUEUED);
  store_job_clear(&many[0]);
  store_job_clear(&many[1]);
  /* an op naming the job finds its row where the queue put it */
  char d[T_ID_MAX];
  queue_job(s, d);
  CHECK(store_job_start(s, d, 1795000000000, "cpu", "r", NULL, &e) == 0);
  CHECK(status_of(s, d) == JOB_RUNNING);
  store_close(s);
}

/* Polls (up to 10 s: not a time the test asserts) until the row is
 * there. */
static int wait_row(store *s, const char *id) {
  for (int i = 0; i < 20000; i++) {
    int st = status_of(s, id);
    if (st >= 0) return st;
    usleep(500);
  }
  return -1;
}

TEST(test_hold_deadlines) {
  char dir[300], a[T_ID_MAX], b[T_ID_MAX];
  store *s = open_held("1,5", dir, sizeof dir);
  if (!s) return;
  queue_job(s, a); /* started: committed once it ran 1 ms */
  store_job_start_async(s, a, 1795000000000, "cpu", "r", NULL);
  CHECK(wait_row(s, a) == JOB_RUNNING);
  queue_job(s, b); /* never started: committed 5 ms after it was queued */
  CHECK(wait_row(s, b) == JOB_QUEUED);
  store_close(s);
}

TEST(test_hold_off) {
  char dir[300], a[T_ID_MAX], other[T_ID_MAX];
  store *s = open_held("0", dir, sizeof dir);
  if (!s) return;
  CHECK(SQ(s)->hold_run_ms == 0);
  CHECK(insert_job(s, "h", "map", 5, other) == 0);
  queue_job(s, a);
  CHECK(finish_sync(s, other, 1795000000200) == 0);
  CHECK(status_of(s, a) == JOB_QUEUED);
  store_close(s);
}

enum { NT = 8, PER = 300 };
typedef struct worker {
  store *s;
  int bad;
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  for (int i = 0; i < PER; i++) {
    char id[T_ID_MAX];
    queue_job(w->s, id);
    store_job_start_async(w->s, id, 1795000000000 + i, "cpu", "r", NULL);
    if (finish_sync(w->s, id, 1795000000001 + i) != 0) w->bad++;
  }
  return NULL;
}

TEST(test_every_end_folds_under_load) {
  char dir[300];
  store *s = open_held("600000", dir, sizeof dir);
  if (!s) return;
  long long f0 = folds(s);
  pthread_t t[NT];
  worker w[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = (worker){s, 0};
    CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].bad == 0);
  }
  CHECK_MSG(folds(s) - f0 == NT * PER, "folds %lld of %d", folds(s) - f0,
            NT * PER);
  store_close(s);
  s = reopen(dir);
  terr e;
  int64_t c[5];
  CHECK(store_job_counts(s, "h", c, &e) == 0);
  CHECK(c[JOB_SUCCEEDED] == NT * PER && c[JOB_QUEUED] == 0 &&
        c[JOB_RUNNING] == 0);
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_hold_XXXXXX")) return 1;
  if (test_pg()) {
    printf("skip on postgresql: the SQLite writer's queue\n");
    rm_tree(root);
    return 77;
  }
  RUN(test_held_until_its_end);
  RUN(test_barriers_end_holds);
  RUN(test_hold_deadlines);
  RUN(test_hold_off);
  RUN(test_every_end_folds_under_load);
  rm_tree(root);
  return check_summary();
}
