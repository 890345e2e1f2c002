/* test_pool.c — the worker pool: chunks run exactly once, slots are unique
 * among concurrent threads of a loop, stop stops handing out chunks, a job
 * on a worker can split itself even when every other worker is busy (no
 * deadlock), idle() jobs run, and many tiny loops stay correct.
 *
 * A tiny job queue (mutex + array) stands in for the scheduler: the pool's
 * idle callback pops a job from it and runs it on the worker.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "util/pool.h"

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* ---- a toy job queue for idle() ---------------------------------------- */
typedef void (*job_fn)(void *);
typedef struct {
  pthread_mutex_t mu;
  job_fn fn[64];
  void *arg[64];
  int head, tail;
  atomic_int ran;
} jobq;

static int jobq_idle(void *ud) {
  jobq *q = ud;
  pthread_mutex_lock(&q->mu);
  if (q->head == q->tail) {
    pthread_mutex_unlock(&q->mu);
    return 0;
  }
  job_fn fn = q->fn[q->head % 64];
  void *arg = q->arg[q->head % 64];
  q->head++;
  pthread_mutex_unlock(&q->mu);
  fn(arg);
  atomic_fetch_add(&q->ran, 1);
  return 1;
}

static void jobq_push(jobq *q, pool *p, job_fn fn, void *arg) {
  pthread_mutex_lock(&q->mu);
  q->fn[q->tail % 64] = fn;
  q->arg[q->tail % 64] = arg;
  q->tail++;
  pthread_mutex_unlock(&q->mu);
  pool_notify(p);
}

/* Wait (polling) until *v >= want or ~10 s pass; 1 when reached. */
static int wait_for(atomic_int *v, int want) {
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(v) >= want) return 1;
    sleep_us(1000);
  }
  return 0;
}

/* ---- every chunk once, slots unique ------------------------------------ */
typedef struct {
  int64_t n;
  int width;
  atomic_int *count;  /* per chunk */
  atomic_int busy[16];/* per slot: threads inside a chunk with this slot */
  atomic_int bad_slot, overlap;
  atomic_int started, finished;
  atomic_int *stop;
  int64_t stop_at;
  int spin;
} loop_t;

static void chunk_count(void *arg, int64_t c, int slot) {
  loop_t *t = arg;
  atomic_fetch_add(&t->started, 1);
  if (slot < 0 || slot >= t->width || slot >= 16) {
    atomic_fetch_add(&t->bad_slot, 1);
  } else if (atomic_fetch_add(&t->busy[slot], 1) != 0) {
    atomic_fetch_add(&t->overlap, 1);
  }
  atomic_fetch_add(&t->count[c], 1);
  if (t->stop && c == t->stop_at) atomic_store(t->stop, 1);
  for (volatile int i = 0; i < t->spin; i++) {
  }
  if (slot >= 0 && slot < 16) atomic_fetch_sub(&t->busy[slot], 1);
  atomic_fetch_add(&t->finished, 1);
}

static loop_t *loop_new(int64_t n, int width) {
  loop_t *t = calloc(1, sizeof *t);
  t->n = n;
  t->width = width;
  t->count = calloc((size_t)n, sizeof *t->count);
  return t;
}
static void loop_free(loop_t *t) {
  free(t->count);
  free(t);
}

TEST(test_every_chunk_once) {
  pool *p = pool_create(4, NULL, NULL);
  CHECK(p != NULL);
  CHECK(pool_threads(p) == 4);
  int widths[] = {1, 2, 3, 5, 8};
  for (int w = 0; w < 5; w++) {
    loop_t *t = loop_new(5000, widths[w]);
    t->spin = 200;
    int rc = pool_for(p, widths[w], t->n, chunk_count, t, NULL);
    CHECK(rc == 0);
    int64_t wrong = 0;
    for (int64_t i = 0; i < t->n; i++) wrong += atomic_load(&t->count[i]) != 1;
    CHECK_MSG(wrong == 0, "width %d: %lld chunks not run exactly once",
              widths[w], (long long)wrong);
    CHECK(atomic_load(&t->bad_slot) == 0);
    CHECK(atomic_load(&t->overlap) == 0);
    CHECK(atomic_load(&t->started) == 5000);
    CHECK(atomic_load(&t->finished) == 5000);
    loop_free(t);
  }
  /* nchunks 0 runs nothing; NULL pool runs inline. */
  loop_t *t = loop_new(10, 4);
  CHECK(pool_for(p, 4, 0, chunk_count, t, NULL) == 0);
  CHECK(atomic_load(&t->started) == 0);
  CHECK(pool_for(NULL, 4, 10, chunk_count, t, NULL) == 0);
  CHECK(atomic_load(&t->finished) == 10);
  loop_free(t);
  pool_destroy(p);
  pool_destroy(NULL);
}

/* ---- stop ----------------------------------------------------------- */
TEST(test_stop) {
  pool *p = pool_create(3, NULL, NULL);
  atomic_int stop;
  atomic_init(&stop, 0);
  loop_t *t = loop_new(100000, 4);
  t->stop = &stop;
  t->stop_at = 100;
  t->spin = 2000;
  int rc = pool_for(p, 4, t->n, chunk_count, t, &stop);
  CHECK(rc == 1);
  int started = atomic_load(&t->started);
  CHECK_MSG(started < 1000, "%d chunks started after stop at chunk 100",
            started);
  /* Returned only after every started chunk finished. */
  CHECK(atomic_load(&t->finished) == started);
  int64_t twice = 0;
  for (int64_t i = 0; i < t->n; i++) twice += atomic_load(&t->count[i]) > 1;
  CHECK(twice == 0);
  /* Already stopped: nothing starts. */
  loop_t *u = loop_new(50, 4);
  CHECK(pool_for(p, 4, u->n, chunk_count, u, &stop) == 1);
  CHECK(atomic_load(&u->started) == 0);
  loop_free(u);
  loop_free(t);
  pool_destroy(p);
}

/* ---- several external callers at once --------------------------------- */
typedef struct {
  pool *p;
  int ok;
} caller_arg;

static void *caller_thread(void *arg) {
  caller_arg *a = arg;
  a->ok = 1;
  for (int r = 0; r < 20; r++) {
    loop_t *t = loop_new(777, 3);
    pool_for(a->p, 3, t->n, chunk_count, t, NULL);
    for (int64_t i = 0; i < t->n; i++)
      if (atomic_load(&t->count[i]) != 1) a->ok = 0;
    if (atomic_load(&t->overlap) || atomic_load(&t->bad_slot)) a->ok = 0;
    loop_free(t);
  }
  return NULL;
}

TEST(test_concurrent_callers) {
  pool *p = pool_create(3, NULL, NULL);
  pthread_t th[4];
  caller_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i].p = p;
    pthread_create(&th[i], NULL, caller_thread, &a[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].ok);
  }
  pool_destroy(p);
}

/* ---- nested: a job on a worker splits itself while others are busy ----- */
typedef struct {
  atomic_int release, started_blockers, nested_done, nested_ok;
  pool *p;
  int width;
} nest_t;

static void job_blocker(void *arg) {
  nest_t *n = arg;
  atomic_fetch_add(&n->started_blockers, 1);
  while (!atomic_load(&n->release)) sleep_us(500);
}

/* A chunk that itself runs a parallel loop (loop inside a loop). */
typedef struct {
  pool *p;
  atomic_int sum;
} inner_t;
static void chunk_inner(void *arg, int64_t c, int slot) {
  inner_t *in = arg;
  atomic_fetch_add(&in->sum, (int)c + 1);
}
static void chunk_outer(void *arg, int64_t c, int slot) {
  inner_t *in = arg;
  pool_for(in->p, 3, 10, chunk_inner, in, NULL); /* adds 55 */
}

static void job_nested(void *arg) {
  nest_t *n = arg;
  loop_t *t = loop_new(3000, n->width);
  pool_for(n->p, n->width, t->n, chunk_count, t, NULL);
  int ok = atomic_load(&t->finished) == 3000 && !atomic_load(&t->overlap) &&
           !atomic_load(&t->bad_slot);
  for (int64_t i = 0; i < t->n; i++) ok &= atomic_load(&t->count[i]) == 1;
  loop_free(t);
  inner_t in = {.p = n->p};
  atomic_init(&in.sum, 0);
  pool_for(n->p, 3, 20, chunk_outer, &in, NULL);
  ok &= atomic_load(&in.sum) == 20 * 55;
  atomic_store(&n->nested_ok, ok);
  atomic_store(&n->nested_done, 1);
}

TEST(test_nested_no_deadlock) {
  jobq q = {.mu = PTHREAD_MUTEX_INITIALIZER};
  atomic_init(&q.ran, 0);
  nest_t n;
  memset(&n, 0, sizeof n);
  n.width = 3;
  pool *p = pool_create(3, jobq_idle, &q);
  n.p = p;
  jobq_push(&q, p, job_blocker, &n);
  jobq_push(&q, p, job_blocker, &n);
  CHECK(wait_for(&n.started_blockers, 2));
  /* Two workers are stuck in jobs; the third takes this one, whose loops
   * find no free helper: the caller must run every chunk itself. */
  jobq_push(&q, p, job_nested, &n);
  int done = wait_for(&n.nested_done, 1);
  CHECK_MSG(done, "nested pool_for did not finish while other workers were busy");
  CHECK(atomic_load(&n.nested_ok));
  CHECK(atomic_load(&n.started_blockers) == 2);
  atomic_store(&n.release, 1);
  CHECK(wait_for(&q.ran, 3));
  pool_destroy(p);
}

/* ---- idle jobs and notify ---------------------------------------------- */
static atomic_int simple_runs;
static void job_simple(void *arg) {
  (void)arg;
  sleep_us(200);
  atomic_fetch_add(&simple_runs, 1);
}

TEST(test_idle_jobs) {
  jobq q = {.mu = PTHREAD_MUTEX_INITIALIZER};
  atomic_init(&q.ran, 0);
  pool *p = pool_create(2, jobq_idle, &q);
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < 10; i++) jobq_push(&q, p, job_simple, NULL);
    CHECK(wait_for(&q.ran, 10 * (round + 1)));
    sleep_us(2000); /* let the workers fall asleep again */
  }
  CHECK(atomic_load(&simple_runs) == 50);
  pool_destroy(p);
}

/* ---- many tiny loops, from the main thread and from a worker's job ----- */
typedef struct {
  atomic_long sum;
} tiny_t;
static void chunk_tiny(void *arg, int64_t c, int slot) {
  tiny_t *t = arg;
  atomic_fetch_add(&t->sum, (long)c + 1);
}
typedef struct {
  pool *p;
  atomic_int done;
  long bad;
} tinyjob_t;
static void job_tiny_loops(void *arg) {
  tinyjob_t *j = arg;
  for (int i = 0; i < 20000; i++) {
    tiny_t t;
    atomic_init(&t.sum, 0);
    int64_t n = 1 + i % 4;
    pool_for(j->p, 2, n, chunk_tiny, &t, NULL);
    if (atomic_load(&t.sum) != n * (n + 1) / 2) j->bad++;
  }
  atomic_store(&j->done, 1);
}

TEST(test_many_tiny_loops) {
  jobq q = {.mu = PTHREAD_MUTEX_INITIALIZER};
  atomic_init(&q.ran, 0);
  pool *p = pool_create(2, jobq_idle, &q);
  tinyjob_t j = {.p = p};
  atomic_init(&j.done, 0);
  jobq_push(&q, p, job_tiny_loops, &j);
  long bad = 0;
  for (int i = 0; i < 20000; i++) {
    tiny_t t;
    atomic_init(&t.sum, 0);
    int64_t n = 1 + i % 5;
    pool_for(p, 3, n, chunk_tiny, &t, NULL);
    if (atomic_load(&t.sum) != n * (n + 1) / 2) bad++;
  }
  CHECK(bad == 0);
  CHECK(wait_for(&j.done, 1));
  CHECK(j.bad == 0);
  pool_destroy(p);
}

/* ---- destroy waits for the running job --------------------------------- */
static atomic_int long_done;
static void job_long(void *arg) {
  atomic_int *started = arg;
  atomic_store(started, 1);
  sleep_us(50000);
  atomic_store(&long_done, 1);
}

TEST(test_destroy_waits_for_job) {
  jobq q = {.mu = PTHREAD_MUTEX_INITIALIZER};
  atomic_init(&q.ran, 0);
  atomic_int started;
  atomic_init(&started, 0);
  pool *p = pool_create(2, jobq_idle, &q);
  jobq_push(&q, p, job_long, &started);
  CHECK(wait_for(&started, 1));
  pool_destroy(p);
  CHECK(atomic_load(&long_done) == 1);
  CHECK(pool_create(0, NULL, NULL) == NULL);
}

int main(void) {
  RUN(test_every_chunk_once);
  RUN(test_stop);
  RUN(test_concurrent_callers);
  RUN(test_nested_no_deadlock);
  RUN(test_idle_jobs);
  RUN(test_many_tiny_loops);
  RUN(test_destroy_waits_for_job);
  return check_summary();
}
