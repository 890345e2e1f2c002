/* tmutex.h — a mutex that knows its owner, so that lock rules written in
 * comments ("[mu]: the caller holds sched.mu"; "never held across a kind
 * callback") are checked, not only written (SQLite's habit: invariants as
 * asserts, checked in debug builds only).
 *
 * In a build without NDEBUG (Debug, the sanitizer builds, and the
 * RelWithDebInfo build `make test` uses) the lock records the owning
 * thread, and T_ASSERT_HELD / T_ASSERT_NOT_HELD abort with file and line
 * when a rule is broken. With NDEBUG (Release: what is shipped and
 * benchmarked) a tmutex is a pthread mutex and the checks compile to
 * nothing. Condition waits go through tmutex_wait / tmutex_timedwait,
 * which hand the ownership over as the wait releases and retakes the lock.
 *
 * The owner is an atomic (relaxed): any thread may ask "do I hold it?"
 * without a data race; only the owner's own answer is meaningful.
 */
#ifndef TESSEL_UTIL_TMUTEX_H
#define TESSEL_UTIL_TMUTEX_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "util/tassert.h"

typedef struct tmutex {
  pthread_mutex_t m;
#ifndef NDEBUG
  _Atomic unsigned long owner; /* pthread_self() of the holder; 0: free */
#endif
} tmutex;

/* T_ASSERT (util/tassert.h): an invariant, checked where asserts are on. */

#ifndef NDEBUG
static inline unsigned long tmutex_self_(void) {
  return (unsigned long)pthread_self();
}
static inline int tmutex_held(tmutex *t) {
  return atomic_load_explicit(&t->owner, memory_order_relaxed) ==
         tmutex_self_();
}
#define T_ASSERT_HELD(t) assert(tmutex_held(t))
#define T_ASSERT_NOT_HELD(t) assert(!tmutex_held(t))
#else
#define T_ASSERT_HELD(t) ((void)0)
#define T_ASSERT_NOT_HELD(t) ((void)0)
#endif

static inline void tmutex_init(tmutex *t) {
  pthread_mutex_init(&t->m, NULL);
#ifndef NDEBUG
  atomic_store(&t->owner, 0);
#endif
}

static inline void tmutex_destroy(tmutex *t) {
  T_ASSERT_NOT_HELD(t);
  pthread_mutex_destroy(&t->m);
}

static inline void tmutex_lock(tmutex *t) {
  T_ASSERT_NOT_HELD(t); /* not recursive */
  pthread_mutex_lock(&t->m);
#ifndef NDEBUG
  atomic_store_explicit(&t->owner, tmutex_self_(), memory_order_relaxed);
#endif
}

static inline void tmutex_unlock(tmutex *t) {
#ifndef NDEBUG
  T_ASSERT_HELD(t);
  atomic_store_explicit(&t->owner, 0, memory_order_relaxed);
#endif
  pthread_mutex_unlock(&t->m);
}

static inline void tmutex_wait(pthread_cond_t *cv, tmutex *t) {
#ifndef NDEBUG
  T_ASSERT_HELD(t);
  atomic_store_explicit(&t->owner, 0, memory_order_relaxed);
#endif
  pthread_cond_wait(cv, &t->m);
#ifndef NDEBUG
  atomic_store_explicit(&t->owner, tmutex_self_(), memory_order_relaxed);
#endif
}

/* The CLOCK_MONOTONIC time ms from now (none before now), the deadline of
 * a tmutex_timedwait on a condvar of that clock (pthread_condattr_setclock):
 * a step of the wall clock changes no deadline. */
static inline void tmutex_deadline(struct timespec *ts, double ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  long long ns = (long long)ts->tv_nsec + (long long)(ms > 0 ? ms * 1e6 : 0);
  ts->tv_sec += (time_t)(ns / 1000000000LL);
  ts->tv_nsec = (long)(ns % 1000000000LL);
}

static inline int tmutex_timedwait(pthread_cond_t *cv, tmutex *t,
                                   const struct timespec *ts) {
#ifndef NDEBUG
  T_ASSERT_HELD(t);
  atomic_store_explicit(&t->owner, 0, memory_order_relaxed);
#endif
  int rc = pthread_cond_timedwait(cv, &t->m, ts);
#ifndef NDEBUG
  atomic_store_explicit(&t->owner, tmutex_self_(), memory_order_relaxed);
#endif
  return rc;
}

#endif
