/* test_store_threads.c — the store's threading: the writer thread's group
 * commit and the per-thread readers under concurrent callers.
 *
 * Checks: 8 threads inserting at once lose and duplicate nothing and each
 * reads its own write back at once; reader connections of exited threads are
 * closed; async progress from many threads is committed before the same
 * thread's next sync write returns, and by store_close's drain; a failing op
 * in a batch fails alone (racing starts: exactly one wins); and, made
 * deterministic with a gate op that holds the writer, four queued ops share
 * ONE transaction while two of them fail with their own codes. Each test
 * uses a fresh directory under a mkdtemp root, removed at the end. And the
 * rows of ended jobs answered from memory (db/sqlite/store_recent.c): the
 * committed row, to its owner only, gone with its delete (also one that
 * shares the finish's transaction) and with expiry. A long run of writes
 * still restarts the WAL before its hard size (db/sqlite/store_ckpt.c).
 * A committed batch's callbacks run off the writer thread, in order: the
 * writer commits on while one is held, and a later [sync] write returns
 * after all of them (db/sqlite/store_done.c).
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
#include "db/sqlite/store_int.h" /* the writer's queue and counters, for batching */
#define SQ(s) ((sqstore *)store_impl(s))
#include "store_fixture.h"

/* ---- concurrency ------------------------------------------------------------ */

typedef struct worker {
  store *s;
  int index, n;
  char (*ids)[T_ID_MAX];
  int errors;
} worker;

static void *insert_worker(void *p) {
  worker *w = p;
  for (int i = 0; i < w->n; i++) {
    store_job j;
    job_init(&j, "alice", "map");
    char rid[32];
    snprintf(rid, sizeof rid, "w%d-%d", w->index, i);
    j.request_id = sdup(rid);
    j.body_hash = sdup("h");
    terr e;
    if (store_job_insert(w->s, &j, NULL, &e) != 0) w->errors++;
    snprintf(w->ids[i], T_ID_MAX, "%s", j.id);
    /* Read back on this thread's own connection right after the commit. */
    store_job g;
    if (store_job_get(w->s, j.id, "alice", &g, &e) != 0) w->errors++;
    store_job_clear(&g);
    store_job_clear(&j);
  }
  return NULL;
}

static int cmp_id(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

TEST(test_concurrent_inserts) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  enum { T = 8, PER = 200 };
  static char ids[T * PER][T_ID_MAX];
  worker w[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    w[i] = (worker){s, i, PER, ids + i * PER, 0};
    pthread_create(&th[i], NULL, insert_worker, &w[i]);
  }
  int errors = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    errors += w[i].errors;
  }
  CHECK(errors == 0);
  qsort(ids, T * PER, T_ID_MAX, cmp_id);
  int dups = 0;
  for (int i = 1; i < T * PER; i++) dups += strcmp(ids[i - 1], ids[i]) == 0;
  CHECK(dups == 0);
  int64_t c[5];
  terr e;
  CHECK(store_job_counts(s, NULL, c, &e) == 0);
  CHECK(c[JOB_QUEUED] == T * PER);
  /* Every stored row is one of ours: list them all and look each up. */
  store_job_filter f = {.owner = "alice", .status = -1, .limit = 1000};
  int more = 0;
  store_job_pos pos;
  int seen = 0, missing = 0;
  for (int page = 0; page < 10; page++) {
    store_job *v;
    int n;
    CHECK(store_job_list(s, &f, &v, &n, &more, &pos, NULL, &e) == 0);
    for (int i = 0; i < n; i++) {
      if (!bsearch(v[i].id, ids, T * PER, T_ID_MAX, cmp_id)) missing++;
      store_job_clear(&v[i]);
    }
    free(v);
    seen += n;
    if (!more) break;
    f.after = &pos;
  }
  CHECK(seen == T * PER && missing == 0);
  /* The worker threads exited: their reader connections were closed by the
   * thread-exit destructor; only the main thread's (opened above) is left. */
  int readers = 0;
  pthread_mutex_lock(&SQ(s)->rmu);
  for (store_conn *r = SQ(s)->readers; r; r = r->next) readers++;
  pthread_mutex_unlock(&SQ(s)->rmu);
  CHECK(readers == 1);
  store_close(s);
}

/* Progress from many threads, each followed by a sync write of the same
 * thread: that later write returning means the progress is committed. */
static void *progress_worker(void *p) {
  worker *w = p;
  for (int i = 1; i <= w->n; i++) {
    store_job_progress(w->s, w->ids[0], i, w->n);
    if (i % 10 == 0) {
      terr e;
      char id[T_ID_MAX];
      if (insert_job(w->s, "p", "map", 0, id) != 0) w->errors++;
      store_job g;
      if (store_job_get(w->s, w->ids[0], NULL, &g, &e) != 0 ||
          g.progress_done != i)
        w->errors++;
      store_job_clear(&g);
    }
  }
  return NULL;
}

TEST(test_async_progress_threads) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  enum { T = 4, STEPS = 100 };
  char ids[T][T_ID_MAX];
  terr e;
  worker w[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    CHECK(insert_job(s, "", "map", 0, ids[i]) == 0);
    CHECK(store_job_start(s, ids[i], 1, "cpu", NULL, NULL, &e) == 0);
    w[i] = (worker){s, i, STEPS, &ids[i], 0};
    pthread_create(&th[i], NULL, progress_worker, &w[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(w[i].errors == 0);
  }
  /* Progress queued last is still committed by store_close's drain. */
  store_job_progress(s, ids[0], 12345, 99999);
  store_close(s);
  CHECK(store_open(dir, &s, &e) == 0);
  store_job g;
  CHECK(store_job_get(s, ids[0], NULL, &g, &e) == 0);
  CHECK(g.progress_done == 12345 && g.progress_total == 99999);
  store_job_clear(&g);
  store_close(s);
}

/* A failing op in a batch does not fail the others: many threads race
 * conflicting and valid writes; each gets its own answer. */
static void *mixed_worker(void *p) {
  worker *w = p;
  for (int i = 0; i < w->n; i++) {
    terr e;
    /* start the shared job: exactly one thread may win it */
    int rc = store_job_start(w->s, w->ids[0], 1, "cpu", NULL, NULL, &e);
    if (rc == 0) w->errors += 1000; /* counted by the caller */
    else if (rc != T_ECONFLICT) w->errors++;
    if (insert_job(w->s, "m", "map", 0, NULL) != 0) w->errors++;
  }
  return NULL;
}

TEST(test_batch_isolation) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char id[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 0, id) == 0);
  enum { T = 6, PER = 50 };
  worker w[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    w[i] = (worker){s, i, PER, &id, 0};
    pthread_create(&th[i], NULL, mixed_worker, &w[i]);
  }
  int wins = 0, errors = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    wins += w[i].errors / 1000;
    errors += w[i].errors % 1000;
  }
  CHECK(wins == 1);
  CHECK(errors == 0);
  int64_t c[5];
  terr e;
  CHECK(store_job_counts(s, "m", c, &e) == 0);
  CHECK(c[JOB_QUEUED] == T * PER);
  store_close(s);
}

/* A deterministic batch: a gate op holds the writer until four ops are
 * queued behind it, so those four share one transaction. Two of them fail
 * (a state conflict, and an SQL constraint error inside the INSERT); the
 * other two must still commit, each caller getting its own code. */
typedef struct gate {
  atomic_int started;
  int want;
} gate;

static int gate_fn(sqstore *s, store_wop *op, terr *e) {
  gate *g = op->arg;
  atomic_store(&g->started, 1);
  for (int tries = 0; tries < 5000; tries++) { /* at most ~5 s */
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (store_wop *o = s->qhead; o; o = o->next) n++;
    pthread_mutex_unlock(&s->mu);
    if (n >= g->want) break;
    usleep(1000);
  }
  return 0;
}

typedef struct batch_arg {
  store *s;
  gate *g;
  int what; /* 0 gate, 1 good start, 2 conflicting start, 3 dup insert, 4 insert */
  const char *id;
  int rc;
  char new_id[T_ID_MAX];
} batch_arg;

static void *batch_worker(void *p) {
  batch_arg *a = p;
  terr e;
  if (a->what == 0) {
    a->rc = store__write(SQ(a->s), gate_fn, a->g, &e);
  } else if (a->what == 1 || a->what == 2) {
    a->rc = store_job_start(a->s, a->id, 5, "cpu", NULL, NULL, &e);
  } else {
    store_job j;
    job_init(&j, "b", "map");
    if (a->what == 3) snprintf(j.id, sizeof j.id, "%s", a->id);
    a->rc = store_job_insert(a->s, &j, NULL, &e);
    snprintf(a->new_id, sizeof a->new_id, "%s", j.id);
    store_job_clear(&j);
  }
  return NULL;
}

TEST(test_batch_one_transaction) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char queued[T_ID_MAX], running[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "b", "map", 0, queued) == 0);
  CHECK(insert_job(s, "b", "map", 0, running) == 0);
  CHECK(store_job_start(s, running, 1, "cpu", NULL, NULL, &e) == 0);
  gate g = {.want = 4};
  batch_arg a[5];
  pthread_t th[5];
  long long b0 = atomic_load(&SQ(s)->n_batches), o0 = atomic_load(&SQ(s)->n_ops);
  a[0] = (batch_arg){.s = s, .g = &g, .what = 0};
  pthread_create(&th[0], NULL, batch_worker, &a[0]);
  while (!atomic_load(&g.started)) usleep(100);
  const char *ids[5] = {NULL, queued, running, queued, NULL};
  for (int i = 1; i < 5; i++) {
    a[i] = (batch_arg){.s = s, .g = &g, .what = i, .id = ids[i]};
    pthread_create(&th[i], NULL, batch_worker, &a[i]);
  }
  for (int i = 0; i < 5; i++) pthread_join(th[i], NULL);
  CHECK(a[0].rc == 0);
  CHECK(a[1].rc == 0);           /* started */
  CHECK(a[2].rc == T_ECONFLICT); /* already running */
  CHECK(a[3].rc == T_ECONFLICT); /* duplicate id: UNIQUE constraint */
  CHECK(a[4].rc == 0);           /* inserted */
  CHECK(atomic_load(&SQ(s)->n_batches) - b0 == 2);
  CHECK(atomic_load(&SQ(s)->n_ops) - o0 == 5);
  store_job j;
  CHECK(store_job_get(s, queued, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_RUNNING && j.started_at == 5);
  store_job_clear(&j);
  CHECK(store_job_get(s, running, NULL, &j, &e) == 0);
  CHECK(j.started_at == 1 && j.attempts == 1); /* untouched */
  store_job_clear(&j);
  CHECK(store_job_get(s, a[4].new_id, "b", &j, &e) == 0);
  store_job_clear(&j);
  int64_t c[5];
  CHECK(store_job_counts(s, "b", c, &e) == 0);
  CHECK(c[JOB_QUEUED] == 1 && c[JOB_RUNNING] == 2);
  store_close(s);
}


/* ---- ended rows from memory (db/sqlite/store_recent.c) ------------------- */

typedef struct fin_wait {
  atomic_int done;
  int rc;
} fin_wait;

static void on_fin(void *arg, int rc, const terr *e, store_job *row) {
  (void)e;
  if (row) store_job_clear(row); /* the callback owns the row (store.h) */
  fin_wait *f = arg;
  f->rc = rc;
  atomic_store(&f->done, 1);
}

static int finish_and_wait(store *s, const char *id, fin_wait *f) {
  store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = 9000,
                     .max_abs_diff = NAN};
  terr e;
  memset(f, 0, sizeof *f);
  if (store_job_finish_async(s, id, &x, on_fin, f, &e) != 0) return -1;
  while (!atomic_load(&f->done)) usleep(200);
  return f->rc;
}

typedef struct del_arg {
  store *s;
  const char *id;
  int rc;
} del_arg;

static void *delete_worker(void *p) {
  del_arg *a = p;
  char **paths = NULL;
  int n = 0;
  terr e;
  a->rc = store_job_delete(a->s, a->id, NULL, &paths, &n, &e);
  for (int i = 0; i < n; i++) free(paths[i]);
  free(paths);
  return NULL;
}

/* An ended job's row is answered from memory as committed (a hit, the
 * same row a SELECT gives), never to another owner, and never after its
 * delete or expiry, even when the delete shares the finish's transaction
 * (the gate holds the writer until both are queued: the finish's put
 * comes after the delete's forget and must be dropped). */
TEST(test_recent_rows) {
  SKIP_ON_PG("the SQLite store's memory of ended rows");
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char id[T_ID_MAX], id2[T_ID_MAX], id3[T_ID_MAX];
  terr e;
  fin_wait f;
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  store_job j;
  CHECK(store_job_get(s, id, NULL, &j, &e) == 0 && j.status == JOB_QUEUED);
  store_job_clear(&j);
  CHECK(finish_and_wait(s, id, &f) == 0);
  int64_t h0, m0, h1, m1;
  store__recent_counts(SQ(s), &h0, &m0);
  CHECK(store_job_get(s, id, "alice", &j, &e) == 0);
  CHECK(j.status == JOB_SUCCEEDED && j.finished_at == 9000);
  CHECK_STR(j.owner, "alice");
  CHECK_STR(j.params, "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}");
  store_job_clear(&j);
  store__recent_counts(SQ(s), &h1, &m1);
  CHECK(h1 == h0 + 1 && m1 == m0); /* from memory */
  CHECK(store_job_get(s, id, "bob", &j, &e) == T_ENOTFOUND);
  /* deleted: gone from memory too */
  del_arg d = {s, id, -1};
  delete_worker(&d);
  CHECK(d.rc == 0);
  CHECK(store_job_get(s, id, NULL, &j, &e) == T_ENOTFOUND);

  /* the finish and the delete in one transaction */
  CHECK(insert_job(s, "alice", "map", 0, id2) == 0);
  gate g = {.want = 2};
  batch_arg ga = {.s = s, .g = &g, .what = 0};
  pthread_t gt, dt;
  pthread_create(&gt, NULL, batch_worker, &ga);
  while (!atomic_load(&g.started)) usleep(100);
  store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = 9001,
                     .max_abs_diff = NAN};
  memset(&f, 0, sizeof f);
  CHECK(store_job_finish_async(s, id2, &x, on_fin, &f, &e) == 0);
  del_arg d2 = {s, id2, -1};
  pthread_create(&dt, NULL, delete_worker, &d2);
  pthread_join(gt, NULL);
  pthread_join(dt, NULL);
  while (!atomic_load(&f.done)) usleep(200);
  CHECK(f.rc == 0 && d2.rc == 0);
  CHECK(store_job_get(s, id2, NULL, &j, &e) == T_ENOTFOUND);

  /* expiry forgets every row */
  CHECK(insert_job(s, "alice", "map", 0, id3) == 0);
  CHECK(finish_and_wait(s, id3, &f) == 0);
  CHECK(store_job_get(s, id3, NULL, &j, &e) == 0);
  store_job_clear(&j);
  char **paths = NULL;
  int n = 0;
  CHECK(store_expire(s, 10000, &paths, &n, &e) == 0);
  for (int i = 0; i < n; i++) free(paths[i]);
  free(paths);
  CHECK(store_job_get(s, id3, NULL, &j, &e) == T_ENOTFOUND);
  store_close(s);
}

/* ---- a committed batch's aftermath (db/sqlite/store_done.c) ------------- */

typedef struct slow_fin {
  atomic_int entered, release, done;
} slow_fin;

/* An after-callback that takes its time (the first one waits until the
 * test releases it): what the callbacks did must be done when a later
 * [sync] write returns. */
static void on_slow_fin(void *arg, int rc, const terr *e, store_job *row) {
  (void)e;
  if (row) store_job_clear(row);
  slow_fin *f = arg;
  if (atomic_fetch_add(&f->entered, 1) == 0)
    while (!atomic_load(&f->release)) usleep(200);
  usleep(300);
  if (rc == 0) atomic_fetch_add(&f->done, 1);
}

/* The wake-ups and after-callbacks of a committed batch run on a thread
 * of their own, in order: while a callback is held, the writer still
 * commits the next batch (an async insert goes in: readable on another
 * connection), and a [sync] write queued after the async finishes
 * returns only once all their callbacks have run. */
TEST(test_after_callbacks_in_order) {
  SKIP_ON_PG("the SQLite writer's threads");
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  enum { K = 6 };
  char ids[K][T_ID_MAX];
  terr e;
  for (int i = 0; i < K; i++) {
    store_job j;
    job_init(&j, "o", "map");
    CHECK(store_job_insert(s, &j, NULL, &e) == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
  }
  slow_fin f;
  memset(&f, 0, sizeof f);
  store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = 9000,
                     .max_abs_diff = NAN};
  for (int i = 0; i < K; i++)
    CHECK(store_job_finish_async(s, ids[i], &x, on_slow_fin, &f, &e) == 0);
  while (!atomic_load(&f.entered)) usleep(200); /* a callback is held */
  /* The writer goes on meanwhile: an async insert commits (readable on
   * this thread's connection). It may first be held in the queue for its
   * job's end (store_fold.c: up to 20 ms while its job has not started),
   * so the test waits for the row itself, not for the next batch. */
  store_job j;
  job_init(&j, "o", "map");
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  int found = 0;
  for (int w = 0; w < 50000 && !found; w++) {
    store_job g;
    terr ge;
    if (store_job_get(s, j.id, "o", &g, &ge) == 0) {
      found = 1;
      store_job_clear(&g);
    } else {
      usleep(200);
    }
  }
  CHECK(found); /* committed while a callback is still held */
  store_job_clear(&j);
  CHECK(atomic_load(&f.done) == 0); /* none past the held one yet */
  atomic_store(&f.release, 1);
  CHECK(store_sync(s, &e) == 0);
  CHECK(atomic_load(&f.done) == K); /* every callback before the sync */
  store_close(s);
}

/* A long run of writes still restarts the WAL, and by its hard size at
 * the latest (give or take the batch that reached it: a loaded machine's
 * checkpointer lags, and the writer's FULL checkpoint then restarts it);
 * the checkpointer's own passes copy frames (they once copied none):
 * the writer finishes a checkpoint once the background ones have copied
 * all but a short tail (db/sqlite/store_ckpt.c), never copying a long
 * backlog itself while every write waits. */
TEST(test_wal_restarts) {
  SKIP_ON_PG("SQLite's WAL");
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  enum { N = 128 };
  static store_job jobs[N];
  static int existing[N], rcs[N];
  static terr errs[N];
  int top = 0, restarted = 0, copied = 0, step = 0, last = 0;
  for (int round = 0; round < 3000 && !restarted; round++) {
    for (int i = 0; i < N; i++) job_init(&jobs[i], "w", "map");
    terr e;
    CHECK(store_insert_jobs(s, jobs, N, existing, rcs, errs, &e) == 0);
    for (int i = 0; i < N; i++) store_job_clear(&jobs[i]);
    int f = atomic_load(&SQ(s)->wal_frames);
    if (f > top) top = f;
    if (f - last > step) step = f - last; /* one batch's frames, at most */
    last = f;
    int c = (int)(atomic_load(&SQ(s)->ck_done) & 0x7fffffff);
    if (c > copied) copied = c;
    restarted = top >= STORE_WAL_MAX_FRAMES && f < top;
  }
  CHECK(restarted);
  /* The background checkpoints usually restart the WAL near
   * STORE_WAL_MAX_FRAMES; on a loaded machine they lag and the writer's
   * own FULL checkpoint at STORE_WAL_HARD_FRAMES must: the WAL may pass
   * the hard bound by the batch that reached it, never by more. */
  CHECK_MSG(top < STORE_WAL_HARD_FRAMES + 2 * step, "WAL reached %d frames "
            "(a batch adds up to %d)", top, step);
  CHECK(copied > 0); /* the background checkpoints copy frames at all */
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_store_threads_XXXXXX")) return 1;
  RUN(test_concurrent_inserts);
  RUN(test_async_progress_threads);
  RUN(test_batch_isolation);
  RUN(test_batch_one_transaction);
  RUN(test_recent_rows);
  RUN(test_after_callbacks_in_order);
  RUN(test_wal_restarts);
  rm_tree(root);
  return check_summary();
}
