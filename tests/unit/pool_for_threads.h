/* pool_for_threads.h — a pool_for for unit tests: `width` threads (the
 * caller and width-1 new ones) take chunk numbers from an atomic counter,
 * so chunks run concurrently and in no fixed order, and a stop request is
 * seen between chunks — the contract of compute/pool.h without the
 * scheduler's pool. Include it in ONE test file (it defines pool_for; the
 * library's pool.o is then not linked into that test). ctx->pool only has
 * to be non-NULL.
 */
#ifndef TESSEL_TESTS_POOL_FOR_THREADS_H
#define TESSEL_TESTS_POOL_FOR_THREADS_H

#include <pthread.h>
#include <stdatomic.h>

#include "compute/pool.h"

typedef struct tp {
  int64_t n;
  atomic_llong next;
  pool_chunk_fn fn;
  void *arg;
  atomic_int *stop;
} tp;
typedef struct tpa {
  tp *t;
  int slot;
} tpa;
static void *tp_main(void *v) {
  tpa *a = v;
  for (;;) {
    if (a->t->stop && atomic_load(a->t->stop)) break;
    int64_t c = atomic_fetch_add(&a->t->next, 1);
    if (c >= a->t->n) break;
    a->t->fn(a->t->arg, c, a->slot);
  }
  return NULL;
}
int pool_for(pool *p, int width, int64_t nchunks, pool_chunk_fn fn, void *arg,
             atomic_int *stop) {
  (void)p;
  tp t = {.n = nchunks, .fn = fn, .arg = arg, .stop = stop};
  atomic_init(&t.next, 0);
  pthread_t th[16];
  tpa a[16];
  if (width > 16) width = 16;
  for (int i = 1; i < width; i++) {
    a[i] = (tpa){&t, i};
    pthread_create(&th[i], NULL, tp_main, &a[i]);
  }
  a[0] = (tpa){&t, 0};
  tp_main(&a[0]);
  for (int i = 1; i < width; i++) pthread_join(th[i], NULL);
  return stop ? atomic_load(stop) : 0;
}

static int pool_for_threads_dummy;
#define TEST_POOL ((pool *)&pool_for_threads_dummy)

#endif
