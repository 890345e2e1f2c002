/* pool.c — the worker pool: parallel loops first, whole jobs when idle.
 *
 * A pool_for publishes a `loop` (on the caller's stack) in the pool's list of
 * active loops, wakes at most as many sleeping workers as can help, and then
 * runs chunks itself. Chunk indices come from an atomic counter in the loop,
 * so handing out a chunk takes no lock. When the counter runs past the end
 * (or *stop is set) the caller unlists the loop and waits for the helpers
 * still inside it to leave; only then does pool_for return, so the loop
 * never outlives the caller's frame and every started chunk has finished.
 *
 * Slots: the caller is slot 0; a helper gets the next slot when it joins
 * (under the pool lock), and a loop admits at most width-1 helpers over its
 * whole life. A helper only leaves once no chunk is left to hand out, so
 * nothing is lost by not recycling slots, and they are unique outright.
 *
 * Cheapness: a loop of one chunk, or of width 1, runs inline with no lock
 * and no wake-up. Otherwise the caller signals min(width-1, nchunks-1,
 * sleeping workers) workers, never a broadcast, and does not wait for them
 * to start.
 *
 * Worker threads loop: help the oldest joinable loop; else call idle()
 * (without the lock) to run a whole job; else sleep on `wake`. A generation
 * counter bumped by pool_notify closes the gap between idle() answering "no
 * job" and the worker going to sleep (no lost wake-up).
 *
 * Locks: `mu` guards the loop list, each loop's joined/inside/waiting
 * fields, the sleeping count, the generation and quit. It is a leaf lock:
 * no callback (fn, idle) is ever called with it held, and nothing else is
 * locked while holding it. So callers may hold their own locks around
 * pool_notify (e.g. the scheduler's lock) without any ordering issue.
 */
#include "util/pool.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct pool_loop {
  pool_chunk_fn fn;
  void *arg;
  atomic_int *stop;
  int64_t nchunks;
  atomic_int_fast64_t next; /* next chunk index to hand out */
  int width;
  /* guarded by pool.mu */
  int joined;  /* threads admitted so far (caller included): next slot */
  int inside;  /* helpers (not the caller) currently running chunks */
  int waiting; /* the caller sleeps on `done` until inside == 0 */
  pthread_cond_t done;
  struct pool_loop *prev, *next_loop;
} pool_loop;

struct pool {
  pthread_mutex_t mu;
  pthread_cond_t wake;
  pool_loop *loops, *loops_tail; /* oldest first */
  int sleeping;
  uint64_t gen;
  int quit;
  int nthreads, started;
  pool_idle_fn idle;
  void *ud;
  pthread_t *threads;
};

static int loop_stopped(const pool_loop *l) {
  return l->stop && atomic_load_explicit(l->stop, memory_order_relaxed) != 0;
}

/* Run chunks until none is left or stop is set. Any thread, no lock. */
static void loop_work(pool_loop *l, int slot) {
  for (;;) {
    if (loop_stopped(l)) return;
    int64_t c = atomic_fetch_add_explicit(&l->next, 1, memory_order_relaxed);
    if (c >= l->nchunks) return;
    l->fn(l->arg, c, slot);
  }
}

/* A loop a helper may join: room for a slot and chunks left. Under mu. */
static int loop_joinable(pool_loop *l) {
  return l->joined < l->width &&
         atomic_load_explicit(&l->next, memory_order_relaxed) < l->nchunks &&
         !loop_stopped(l);
}

static void loop_unlist(pool *p, pool_loop *l) {
  if (l->prev)
    l->prev->next_loop = l->next_loop;
  else
    p->loops = l->next_loop;
  if (l->next_loop)
    l->next_loop->prev = l->prev;
  else
    p->loops_tail = l->prev;
  l->prev = l->next_loop = NULL;
}

/* Worker thread body. */
static void *pool_worker(void *arg) {
  pool *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->quit) {
    pool_loop *l = p->loops;
    while (l && !loop_joinable(l)) l = l->next_loop;
    if (l) {
      int slot = l->joined++;
      l->inside++;
      pthread_mutex_unlock(&p->mu);
      loop_work(l, slot);
      pthread_mutex_lock(&p->mu);
      /* The caller cannot return (and free l) while inside > 0. */
      if (--l->inside == 0 && l->waiting) pthread_cond_signal(&l->done);
      continue;
    }
    if (p->idle) {
      uint64_t gen = p->gen;
      pthread_mutex_unlock(&p->mu);
      int ran = p->idle(p->ud);
      pthread_mutex_lock(&p->mu);
      if (ran || p->gen != gen) continue;
    }
    if (p->quit) break;
    p->sleeping++;
    pthread_cond_wait(&p->wake, &p->mu);
    p->sleeping--;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

pool *pool_create(int nthreads, pool_idle_fn idle, void *ud) {
  if (nthreads < 1) return NULL;
  pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->threads = calloc((size_t)nthreads, sizeof *p->threads);
  if (!p->threads) goto fail_alloc;
  if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail_alloc;
  if (pthread_cond_init(&p->wake, NULL) != 0) goto fail_mutex;
  p->nthreads = nthreads;
  p->idle = idle;
  p->ud = ud;
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&p->threads[i], NULL, pool_worker, p) != 0) {
      pool_destroy(p); /* joins the ones started */
      return NULL;
    }
    p->started++;
  }
  return p;

fail_mutex:
  pthread_mutex_destroy(&p->mu);
fail_alloc:
  free(p->threads);
  free(p);
  return NULL;
}

void pool_notify(pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->gen++;
  if (p->sleeping > 0) pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->mu);
}

void pool_destroy(pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

int pool_threads(const pool *p) { return p ? p->nthreads : 1; }

int pool_for(pool *p, int width, int64_t nchunks, pool_chunk_fn fn, void *arg,
             atomic_int *stop) {
  if (nchunks <= 0) return stop ? atomic_load(stop) : 0;
  pool_loop l = {.fn = fn, .arg = arg, .stop = stop, .nchunks = nchunks,
                 .width = width < 1 ? 1 : width, .joined = 1};
  atomic_init(&l.next, 0);

  /* Inline: nothing to share, or no pool. */
  if (!p || l.width == 1 || nchunks == 1) {
    loop_work(&l, 0);
    return stop ? atomic_load(stop) : 0;
  }

  pthread_mutex_lock(&p->mu);
  l.prev = p->loops_tail;
  if (p->loops_tail)
    p->loops_tail->next_loop = &l;
  else
    p->loops = &l;
  p->loops_tail = &l;
  int64_t want = nchunks - 1 < l.width - 1 ? nchunks - 1 : l.width - 1;
  for (int64_t i = 0; i < want && i < p->sleeping; i++)
    pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->mu);

  loop_work(&l, 0);

  pthread_mutex_lock(&p->mu);
  loop_unlist(p, &l); /* no helper joins from now on */
  if (l.inside > 0) {
    pthread_cond_init(&l.done, NULL);
    l.waiting = 1;
    while (l.inside > 0) pthread_cond_wait(&l.done, &p->mu);
    pthread_cond_destroy(&l.done);
  }
  pthread_mutex_unlock(&p->mu);
  return stop ? atomic_load(stop) : 0;
}
