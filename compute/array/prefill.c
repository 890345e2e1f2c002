/* prefill.c — a parts upload's mapping populated ahead of its parts
 * (prefill.h).
 *
 * Why (issue 25: the client's upload over parallel parts was slower than
 * over one stream on the 16-core H200 host: 8 parts 0.305 s, one stream
 * 0.227 s for 800 MB). Parts sent at once are copied into a MAP_SHARED
 * mapping of the array's file (arrays.c), and each page of it is new to
 * the page cache: the copy faults, and the kernel allocates, zeroes and
 * maps the page before the copy lands. One thread takes fresh ext4 pages
 * that way at ~1 GB/s on that host, 16 threads at 14-16 GB/s
 * (tests/bench/bench_fill.c), and the parts are copied by the daemon's
 * few HTTP threads (--http-threads, 4) that also receive them. So the
 * faults are taken ahead, by threads of the upload's own
 * (MADV_POPULATE_WRITE, 4 MiB at a time, the parts' ranges in turn, each
 * from its front where its bytes arrive first), and the HTTP threads only
 * receive and copy into pages already there. Only ranges a part announced
 * (its Content-Length, checked) are filled, when the part begins: an
 * upload created and never sent costs no memory.
 *
 * Off below 4 CPUs (the 2-core VM: the same faults, only on threads that
 * compete with the receiving one) and with TESSEL_PARTS_PREFILL=0; =N
 * sets the threads (default: half the CPUs, at most 8).
 *
 * Threads: mu guards every field below it; madvise runs outside it on a
 * chunk the thread claimed. free sets stop and waits until running is 0.
 */
#include "compute/array/prefill.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels: EINVAL, skipped */
#endif

#define CHUNK ((uint64_t)4 << 20)
#define MAX_RANGES 64

typedef struct pf_range {
  uint64_t next, end;
} pf_range;

struct prefill {
  char *base;
  size_t len;
  int max_threads;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  pf_range r[MAX_RANGES];
  int nr;
  int turn;    /* the range the next chunk comes from */
  int running; /* threads started and not yet gone */
  int stop;
};

int prefill_threads(void) {
  static atomic_int cached = -1;
  int n = atomic_load(&cached);
  if (n >= 0) return n;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  n = cpus >= 4 ? (int)(cpus / 2 > 8 ? 8 : cpus / 2) : 0;
  const char *knob = getenv("TESSEL_PARTS_PREFILL");
  if (knob && *knob) {
    long k = strtol(knob, NULL, 10);
    n = k < 0 ? 0 : k > 64 ? 64 : (int)k;
  }
  atomic_store(&cached, n);
  return n;
}

/* Under mu: claim the next chunk, the ranges taken in turn; 0 when none. */
static int claim(prefill *p, uint64_t *off, uint64_t *n) {
  while (p->nr > 0) {
    if (p->turn >= p->nr) p->turn = 0;
    pf_range *r = &p->r[p->turn];
    if (r->next >= r->end) { /* done: drop it */
      *r = p->r[--p->nr];
      continue;
    }
    *off = r->next;
    *n = r->end - r->next < CHUNK ? r->end - r->next : CHUNK;
    r->next += *n;
    p->turn++;
    return 1;
  }
  return 0;
}

static void *filler(void *arg) {
  prefill *p = arg;
  pthread_mutex_lock(&p->mu);
  uint64_t off, n;
  while (!p->stop && claim(p, &off, &n)) {
    pthread_mutex_unlock(&p->mu);
    (void)madvise(p->base + off, (size_t)n, MADV_POPULATE_WRITE);
    pthread_mutex_lock(&p->mu);
  }
  if (--p->running == 0) pthread_cond_broadcast(&p->idle);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

prefill *prefill_new(char *base, size_t len) {
  int t = prefill_threads();
  if (t <= 0 || !base || len == 0) return NULL;
  prefill *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->base = base;
  p->len = len;
  p->max_threads = t;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->idle, NULL);
  return p;
}

void prefill_range(prefill *p, uint64_t off, uint64_t n) {
  if (!p || off >= p->len) return;
  if (n > p->len - off) n = p->len - off;
  /* Page-aligned: madvise wants its start aligned; the page before the
   * range's first full page is the neighbour's or filled by the copy. */
  uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t a = (off + pg - 1) / pg * pg, b = off + n;
  if (b <= a + CHUNK / 4) return; /* small parts: the copy's faults do */
  pthread_mutex_lock(&p->mu);
  if (!p->stop && p->nr < MAX_RANGES) {
    p->r[p->nr++] = (pf_range){a, b};
    int want = p->max_threads;
    while (p->running < want) {
      pthread_t th;
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      int err = pthread_create(&th, &at, filler, p);
      pthread_attr_destroy(&at);
      if (err) break; /* fewer threads, or none: the copy faults */
      p->running++;
    }
  }
  pthread_mutex_unlock(&p->mu);
}

void prefill_free(prefill *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  while (p->running > 0) pthread_cond_wait(&p->idle, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->idle);
  free(p);
}
