/* timer.c — the deadline thread behind http_defer.
 *
 * One thread per server sleeps on a condition variable (CLOCK_MONOTONIC)
 * until the earliest deadline of a binary min-heap of deferred requests.
 * Each request records its heap slot (timer_idx, under the timer's mutex),
 * so that answering a request disarms its deadline in O(log n) and the
 * request (and its possibly large body) is not kept alive until a long
 * deadline passes.
 *
 * Every armed request holds one reference (http_req_ref), dropped when it
 * is disarmed or fired. When a deadline passes the thread pops the entry,
 * lets go of the mutex, and tries http_claim: if it wins it calls the
 * request's on_timeout (which must reply); if not, someone else is
 * answering and it only drops its reference.
 *
 * Threads: timer_arm / timer_disarm from any thread; on_timeout runs on the
 * timer thread, without any lock held, and must not block for long (it
 * delays every later deadline).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http_int.h"

struct http_timer {
  pthread_mutex_t mu; /* guards everything below and every r->timer_idx */
  pthread_cond_t cv;
  http_req **heap;
  size_t n, cap;
  int stop;
  pthread_t thread;
};

static void heap_set(http_timer *t, size_t i, http_req *r) {
  t->heap[i] = r;
  r->timer_idx = (long)i;
}

static void heap_up(http_timer *t, size_t i) {
  http_req *r = t->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (t->heap[parent]->deadline_ms <= r->deadline_ms) break;
    heap_set(t, i, t->heap[parent]);
    i = parent;
  }
  heap_set(t, i, r);
}

static void heap_down(http_timer *t, size_t i) {
  http_req *r = t->heap[i];
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    double md = r->deadline_ms;
    if (l < t->n && t->heap[l]->deadline_ms < md) {
      m = l;
      md = t->heap[l]->deadline_ms;
    }
    if (l + 1 < t->n && t->heap[l + 1]->deadline_ms < md) m = l + 1;
    if (m == i) break;
    heap_set(t, i, t->heap[m]);
    i = m;
  }
  heap_set(t, i, r);
}

/* Take r out of the heap (it must be in it). */
static void heap_remove(http_timer *t, http_req *r) {
  size_t i = (size_t)r->timer_idx;
  r->timer_idx = -1;
  t->n--;
  if (i == t->n) return;
  http_req *last = t->heap[t->n];
  heap_set(t, i, last);
  if (i > 0 && t->heap[(i - 1) / 2]->deadline_ms > last->deadline_ms)
    heap_up(t, i);
  else
    heap_down(t, i);
}

static struct timespec ms_to_timespec(double ms) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ms / 1000.0);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000.0) * 1e6);
  if (ts.tv_nsec < 0) ts.tv_nsec = 0;
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  return ts;
}

static void *timer_main(void *arg) {
  http_timer *t = arg;
  pthread_mutex_lock(&t->mu);
  while (!t->stop) {
    if (t->n == 0) {
      pthread_cond_wait(&t->cv, &t->mu);
      continue;
    }
    double now = t_now_ms();
    http_req *r = t->heap[0];
    if (r->deadline_ms > now) {
      /* t_now_ms is CLOCK_MONOTONIC, the clock of the condvar. */
      struct timespec ts = ms_to_timespec(r->deadline_ms);
      pthread_cond_timedwait(&t->cv, &t->mu, &ts);
      continue;
    }
    heap_remove(t, r);
    pthread_mutex_unlock(&t->mu);
    if (http_claim(r) && r->on_timeout) r->on_timeout(r, r->timeout_arg);
    http_req_unref(r);
    pthread_mutex_lock(&t->mu);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

int timer_create_thread(http_timer **out, terr *e) {
  *out = NULL;
  http_timer *t = calloc(1, sizeof *t);
  if (!t) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&t->thread, NULL, timer_main, t);
  if (rc != 0) {
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
    return terr_set(e, T_EINTERNAL, "", -1, "cannot start the timer thread: %s",
                    strerror(rc));
  }
  *out = t;
  return T_OK;
}

void timer_destroy(http_timer *t) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  /* Whatever is still armed is dropped without firing. */
  while (t->n) {
    http_req *r = t->heap[t->n - 1];
    r->timer_idx = -1;
    t->n--;
    http_req_unref(r);
  }
  free(t->heap);
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

void timer_arm(http_timer *t, http_req *r, double deadline_ms) {
  http_req_ref(r);
  pthread_mutex_lock(&t->mu);
  int had = r->timer_idx >= 0;
  if (had) heap_remove(t, r);
  if (t->stop) {
    pthread_mutex_unlock(&t->mu);
    http_req_unref(r);
    if (had) http_req_unref(r);
    return;
  }
  if (t->n == t->cap) {
    size_t ncap = t->cap ? 2 * t->cap : 64;
    http_req **nh = realloc(t->heap, ncap * sizeof *nh);
    if (!nh) {
      /* Cannot arm: fire at once instead of never. */
      pthread_mutex_unlock(&t->mu);
      log_error("http: out of memory arming a deadline; timing out now");
      if (had) http_req_unref(r);
      if (http_claim(r) && r->on_timeout) r->on_timeout(r, r->timeout_arg);
      http_req_unref(r);
      return;
    }
    t->heap = nh;
    t->cap = ncap;
  }
  r->deadline_ms = deadline_ms;
  heap_set(t, t->n++, r);
  heap_up(t, t->n - 1);
  if (r->timer_idx == 0) pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  if (had) http_req_unref(r);
}

int timer_disarm(http_timer *t, http_req *r) {
  if (!t) return 0;
  pthread_mutex_lock(&t->mu);
  int had = r->timer_idx >= 0;
  if (had) heap_remove(t, r);
  pthread_mutex_unlock(&t->mu);
  return had;
}
