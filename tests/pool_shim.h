/* pool_shim.h — a stand-in for compute/pool.c while it is not yet merged.
 *
 * Weak definitions of the pool.h functions, for the matmul test and bench
 * only: pool_for starts width-1 threads per call, and every thread (the
 * caller is slot 0) takes chunk indices from one atomic counter until they
 * run out or *stop is set. No idle-job running. Weak, so a program that
 * links the real pool.c object explicitly gets that one; once pool.c is in
 * tessel_core, delete this file and its includes.
 */
#ifndef TESSEL_TESTS_POOL_SHIM_H
#define TESSEL_TESTS_POOL_SHIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "compute/pool.h"

struct pool {
  int n;
};

typedef struct shim_loop {
  pool_chunk_fn fn;
  void *arg;
  int64_t n;
  atomic_int_fast64_t next;
  atomic_int *stop;
} shim_loop;

typedef struct shim_arg {
  shim_loop *l;
  int slot;
} shim_arg;

static void shim_work(shim_loop *l, int slot) {
  for (;;) {
    if (l->stop && atomic_load(l->stop)) return;
    int64_t c = atomic_fetch_add(&l->next, 1);
    if (c >= l->n) return;
    l->fn(l->arg, c, slot);
  }
}

static void *shim_thread(void *p) {
  shim_arg *a = p;
  shim_work(a->l, a->slot);
  return NULL;
}

__attribute__((weak)) pool *pool_create(int nthreads, pool_idle_fn idle,
                                        void *ud) {
  pool *p = calloc(1, sizeof *p);
  if (p) p->n = nthreads;
  return p;
}
__attribute__((weak)) void pool_notify(pool *p) {}
__attribute__((weak)) void pool_destroy(pool *p) { free(p); }
__attribute__((weak)) int pool_threads(const pool *p) { return p->n; }

__attribute__((weak)) int pool_for(pool *p, int width, int64_t nchunks,
                                   pool_chunk_fn fn, void *arg,
                                   atomic_int *stop) {
  shim_loop l = {.fn = fn, .arg = arg, .n = nchunks, .stop = stop};
  atomic_init(&l.next, 0);
  if (width > 64) width = 64;
  pthread_t th[64];
  shim_arg args[64];
  int started = 0;
  for (int i = 1; i < width && i < nchunks; i++) {
    args[i].l = &l;
    args[i].slot = i;
    if (pthread_create(&th[i], NULL, shim_thread, &args[i]) != 0) break;
    started = i;
  }
  shim_work(&l, 0);
  for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
  return stop ? atomic_load(stop) : 0;
}

#endif
