/* timer.c — http_defer and the deadline thread behind it.
 *
 * http_defer (here, not in request.c, so that request.c and timer.c do
 * not call each other: issue 24's file circles) marks a request answered
 * later and arms its deadline.
 * One thread per server sleeps on a condition variable (CLOCK_MONOTONIC)
 * until the earliest deadline of a min-heap (util/heap.h) of deferred
 * requests.
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

#include "server/http_int.h"
#include "util/heap.h"

struct http_timer {
  pthread_mutex_t mu; /* guards everything below and every r->timer_idx */
  pthread_cond_t cv;
  theap heap;         /* of http_req, earliest deadline on top */
  int stop;
  pthread_t thread;
};

static int earlier(const void *a, const void *b) {
  return ((const http_req *)a)->deadline_ms < ((const http_req *)b)->deadline_ms;
}

static void moved(void *elem, size_t i) {
  ((http_req *)elem)->timer_idx = i == THEAP_NONE ? -1 : (long)i;
}

/* Take r out of the heap (it must be in it). */
static void heap_remove(http_timer *t, http_req *r) {
  theap_remove(&t->heap, (size_t)r->timer_idx);
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
    http_req *r = theap_top(&t->heap);
    if (!r) {
      pthread_cond_wait(&t->cv, &t->mu);
      continue;
    }
    double now = t_now_ms();
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
  theap_init(&t->heap, earlier, moved);
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
  while (t->heap.n) http_req_unref(theap_remove(&t->heap, t->heap.n - 1));
  theap_free(&t->heap);
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
  r->deadline_ms = deadline_ms;
  if (theap_push(&t->heap, r)) {
    /* Cannot arm: fire at once instead of never. */
    pthread_mutex_unlock(&t->mu);
    log_error("http: out of memory arming a deadline; timing out now");
    if (had) http_req_unref(r);
    if (http_claim(r) && r->on_timeout) r->on_timeout(r, r->timeout_arg);
    http_req_unref(r);
    return;
  }
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

void http_defer(http_req *r, int64_t timeout_ms, http_timeout_fn on_timeout,
                void *arg) {
  pthread_mutex_lock(&r->mu);
  http_server *s = r->srv;
  if (r->state != REQ_HANDLING || r->answered || r->deferred) {
    pthread_mutex_unlock(&r->mu);
    if (!r->answered)
      log_error("http: http_defer outside its handler or twice (%s %s)",
                r->method, r->path);
    return;
  }
  r->deferred = 1;
  r->on_timeout = on_timeout;
  r->timeout_arg = arg;
  pthread_mutex_unlock(&r->mu);
  /* The handler still runs, so the request is not completed: s is live. */
  if (timeout_ms >= 0) timer_arm(s->timer, r, t_now_ms() + (double)timeout_ms);
}
