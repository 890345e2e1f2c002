/* pdigest.c — an upload in parts hashed in file order as it arrives
 * (pdigest.h has the why and the rules).
 *
 * The slots are a fixed table (PD_SLOTS): a slot is free, busy (its part
 * in flight, `got` bytes written from its front) or done (whole). The
 * written extent from the front is found by walking the slots from the
 * front: the slot that holds it, then the one that holds its written end,
 * and so on, stopping inside a busy part or at a gap. Done slots wholly
 * behind the front are freed as the front passes them; a table full of
 * parts that are not yet behind the front makes begin answer -1 (that
 * part is hashed at complete: correct, only later).
 *
 * Written by hand: a digest that follows out-of-order writes is this
 * service's own bookkeeping; libxxhash does the hashing.
 */
#include "compute/array/codec/pdigest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#define HASH_UPDATE XXH3_128bits_update_dispatch
#else
#define HASH_UPDATE XXH3_128bits_update
#endif

#define PD_SLOTS 256
#define PD_CHUNK ((uint64_t)8 << 20) /* the chaser's bite: the mutex is free between */

enum { FREE = 0, BUSY, DONE };

typedef struct pslot {
  uint64_t off, end, got;
  int state;
} pslot;

struct pdigest {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the chaser: parts came or went, or stop */
  pthread_cond_t idle; /* chasing went to 0 */
  XXH3_state_t *h;
  const char *data;
  uint64_t bytes, front;
  int chase, started, stop, finished, chasing, busy;
  pthread_t th;
  pslot s[PD_SLOTS];
};

int pdigest_chase_worth(void) {
  const char *k = getenv("TESSEL_PARTS_CHASE");
  if (k && *k) return strcmp(k, "0") != 0;
  return sysconf(_SC_NPROCESSORS_ONLN) >= 4;
}

pdigest *pdigest_new(XXH3_state_t *h, const char *data, uint64_t bytes,
                     int chase) {
  pdigest *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->wake, &ca);
  pthread_cond_init(&d->idle, NULL);
  pthread_condattr_destroy(&ca);
  d->h = h;
  d->data = data;
  d->bytes = bytes;
  d->chase = chase && data != NULL;
  return d;
}

/* Under mu: the end of what is written contiguously from the front. */
static uint64_t extent(const pdigest *d) {
  uint64_t f = d->front;
  for (;;) {
    int moved = 0;
    for (int i = 0; i < PD_SLOTS; i++) {
      const pslot *s = &d->s[i];
      if (s->state == FREE) continue;
      uint64_t w = s->state == DONE ? s->end : s->off + s->got;
      if (s->off <= f && f < w) {
        f = w;
        moved = 1;
        break;
      }
    }
    if (!moved) return f;
  }
}

/* Under mu: free the done slots the front has passed. */
static void sweep(pdigest *d) {
  for (int i = 0; i < PD_SLOTS; i++)
    if (d->s[i].state == DONE && d->s[i].end <= d->front) d->s[i].state = FREE;
}

static void *chaser(void *arg) {
  pdigest *d = arg;
  pthread_mutex_lock(&d->mu);
  while (!d->stop) {
    uint64_t e = extent(d);
    if (e > d->front) {
      uint64_t a = d->front, n = e - a < PD_CHUNK ? e - a : PD_CHUNK;
      d->chasing = 1;
      pthread_mutex_unlock(&d->mu);
      HASH_UPDATE(d->h, d->data + a, (size_t)n);
      pthread_mutex_lock(&d->mu);
      d->chasing = 0;
      d->front = a + n; /* nobody else moves it while chasing */
      sweep(d);
      pthread_cond_broadcast(&d->idle);
      continue;
    }
    if (d->busy > 0) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      t.tv_nsec += 1000000;
      if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&d->wake, &d->mu, &t);
    } else {
      pthread_cond_wait(&d->wake, &d->mu);
    }
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

int pdigest_begin(pdigest *d, uint64_t off, uint64_t n) {
  pthread_mutex_lock(&d->mu);
  int slot = -1;
  for (int i = 0; i < PD_SLOTS && slot < 0; i++)
    if (d->s[i].state == FREE) slot = i;
  if (slot >= 0) d->s[slot] = (pslot){off, off + n, 0, BUSY};
  d->busy++;
  /* The chaser only pays once two parts are in flight: one alone is
   * hashed by its writer as it comes. */
  if (d->chase && !d->started && !d->finished && d->busy >= 2 &&
      pthread_create(&d->th, NULL, chaser, d) == 0)
    d->started = 1;
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->mu);
  return slot;
}

int pdigest_wrote(pdigest *d, int slot, uint64_t off, const void *p,
                  size_t n) {
  int hashed = 0;
  pthread_mutex_lock(&d->mu);
  if (slot >= 0 && slot < PD_SLOTS && d->s[slot].state == BUSY &&
      d->s[slot].off + d->s[slot].got == off)
    d->s[slot].got += n;
  /* While the chaser hashes, the front is before its bite and this piece
   * past it (the bite holds only bytes written before), so never here. */
  if (!d->chasing && !d->finished && off == d->front) {
    HASH_UPDATE(d->h, p, n);
    d->front += n;
    hashed = 1;
  }
  pthread_mutex_unlock(&d->mu);
  return hashed;
}

void pdigest_end(pdigest *d, int slot, int failed) {
  pthread_mutex_lock(&d->mu);
  if (d->busy > 0) d->busy--;
  uint64_t off = UINT64_MAX;
  if (slot >= 0 && slot < PD_SLOTS && d->s[slot].state == BUSY) {
    off = d->s[slot].off;
    if (failed || d->s[slot].got != d->s[slot].end - d->s[slot].off)
      d->s[slot].state = FREE; /* its bytes may be sent again, other ones */
    else
      d->s[slot].state = DONE;
  }
  if (failed && !d->finished) {
    while (d->chasing) pthread_cond_wait(&d->idle, &d->mu);
    /* An untracked part (slot -1) may have been hashed on the way too:
     * start over whenever the front has passed where it could begin. */
    if (off < d->front || (off == UINT64_MAX && d->front > 0)) {
      XXH3_128bits_reset(d->h);
      d->front = 0;
    }
  }
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->mu);
}

uint64_t pdigest_finish(pdigest *d) {
  pthread_mutex_lock(&d->mu);
  int join = d->started && !d->finished;
  d->stop = 1;
  d->finished = 1;
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->mu);
  if (join) pthread_join(d->th, NULL);
  return pdigest_front(d);
}

uint64_t pdigest_front(pdigest *d) {
  pthread_mutex_lock(&d->mu);
  uint64_t f = d->front;
  pthread_mutex_unlock(&d->mu);
  return f;
}

void pdigest_free(pdigest *d) {
  if (!d) return;
  pdigest_finish(d);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->wake);
  pthread_cond_destroy(&d->idle);
  free(d);
}
