/* store_done.c — a batch's aftermath, on a thread of its own.
 *
 * Once the writer (store.c) has committed a batch, every op in it is
 * finished: a [sync] caller is woken (sem_post), an [async] op's `after`
 * callback runs (an async finish's hands the committed row to the
 * scheduler and to store_recent.c: about 8k instructions a tiny job,
 * most of it freeing the scheduler's job) and the op is freed. The writer
 * did that itself before taking the next batch; under batched load it is
 * the store's ceiling (tests/bench/README.md), so it now hands the
 * committed batch to this thread and goes on with the next one.
 *
 * Order is kept: batches are finished in commit order, and the ops of a
 * batch in queue order, all on this one thread, as the writer did. So a
 * [sync] caller is still woken only after the after-callbacks of every
 * async op committed before or with it (jobs:batch's sync finds the
 * failed inserts' errors that insert_after keeps; a ?wait's end is handed
 * over before a later sync returns). What changes: the writer may run
 * the next batch's SQL meanwhile. Nothing an after-callback does waits
 * for that (it must not make a [sync] store call, as before), and
 * store_recent.c's generation drops a row whose put comes after a delete
 * of it began (store__recent_put).
 *
 * Nothing is acknowledged earlier than before: an op reaches this thread
 * only after its batch's COMMIT returned (or failed: rc set).
 *
 * Without the thread (it could not start) the writer finishes its batches
 * itself, as before. Thread: store__done_hand on the writer; the thread
 * reads s->dhead under s->dmu; store__done_stop after the writer exited.
 */
#include <stdlib.h>

#include "db/sqlite/store_int.h"

/* Wake, call back and free each op of the chain from o, in order. After
 * sem_post the op may be gone (it lives on the caller's stack): its link
 * is read first. */
static void done_ops(sqstore *s, store_wop *o) {
  for (store_wop *next; o; o = next) {
    next = o->next;
    if (o->is_sync) {
      sem_post(o->done);
    } else {
      if (o->after)
        o->after(s, o);
      else if (o->rc)
        log_warn("store: async write failed: %s", o->err.message);
      free(o);
    }
  }
}

static void *done_main(void *arg) {
  sqstore *s = arg;
  pthread_mutex_lock(&s->dmu);
  for (;;) {
    while (!s->dhead && !s->dstop) pthread_cond_wait(&s->dcv, &s->dmu);
    store_wop *chain = s->dhead;
    if (!chain) break; /* stopping and drained */
    s->dhead = s->dtail = NULL;
    pthread_mutex_unlock(&s->dmu);
    done_ops(s, chain);
    pthread_mutex_lock(&s->dmu);
  }
  pthread_mutex_unlock(&s->dmu);
  return NULL;
}

/* See store_int.h. */
void store__done_start(sqstore *s) {
  pthread_mutex_init(&s->dmu, NULL);
  pthread_cond_init(&s->dcv, NULL);
  s->dinit = 1;
  if (pthread_create(&s->dthread, NULL, done_main, s) == 0)
    s->dlive = 1;
  else
    log_warn("store: no thread to finish batches: the writer does it");
}

/* See store_int.h. */
void store__done_hand(sqstore *s, store_wop *batch, store_wop *tail) {
  if (!batch) return;
  if (!s->dlive) {
    done_ops(s, batch);
    return;
  }
  pthread_mutex_lock(&s->dmu);
  int wake = !s->dhead; /* it sleeps, or will look again before it does */
  if (s->dtail)
    s->dtail->next = batch; /* not taken yet: the thread reads no link */
  else
    s->dhead = batch;
  s->dtail = tail;
  if (wake) pthread_cond_signal(&s->dcv);
  pthread_mutex_unlock(&s->dmu);
}

/* See store_int.h. */
void store__done_stop(sqstore *s) {
  if (!s->dinit) return;
  if (s->dlive) {
    pthread_mutex_lock(&s->dmu);
    s->dstop = 1;
    pthread_cond_signal(&s->dcv);
    pthread_mutex_unlock(&s->dmu);
    pthread_join(s->dthread, NULL); /* it drains the chain first */
    s->dlive = 0;
  }
  pthread_cond_destroy(&s->dcv);
  pthread_mutex_destroy(&s->dmu);
  s->dinit = 0;
}
