/* compute/jobs/rids.c — the table of idempotency keys with an insert in
 * flight (rids.h says what it is for and the rules).
 *
 * A chained hash of RIDS_BUCKETS buckets, keyed by "owner\0rid" (FNV-1a);
 * each entry knows its [async] state (claimed, queued, or none) and how
 * many [sync] inserts hold it, and is freed when it has neither (nor a
 * job end still to be reported, rids_ended). Queued
 * entries are also on a list in stamp order, so rids_committed drops them
 * from its head without a scan. One mutex; a hold waits on one condition
 * variable, broadcast when a claim ends (its job queued, or unclaimed).
 *
 * Threads: any (the mutex); nothing here blocks but a hold's wait.
 */
#include "compute/jobs/rids.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compute/jobs/jobs.h"

#define RIDS_BUCKETS 1024 /* a power of two */

enum { RID_NONE = 0, RID_CLAIMED, RID_QUEUED };

struct rids_entry {
  jobs_rids *t;      /* its table (rids_ended gets the entry only) */
  rids_entry *next;  /* in its bucket */
  rids_entry *qnext; /* the queued list, in stamp order */
  uint32_t hash;
  int state;      /* RID_* */
  int holds;      /* [sync] inserts in flight */
  int watched;    /* queued: rids_ended not yet called */
  int pending;    /* claimed, its job not yet in the queue:
                     holds wait */
  uint64_t stamp; /* RID_QUEUED: when its insert was queued */
  size_t len;     /* of key: owner, NUL, rid */
  char key[];
};

struct jobs_rids {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a claim ended */
  int max, nasync, nkeys;
  uint64_t gen; /* the latest stamp */
  rids_entry *qhead, *qtail;
  rids_entry *b[RIDS_BUCKETS];
};

jobs_rids *rids_new(int max) {
  jobs_rids *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  t->max = max > 0 ? max : RIDS_MAX_DEFAULT;
  return t;
}

void rids_free(jobs_rids *t) {
  if (!t) return;
  for (int i = 0; i < RIDS_BUCKETS; i++)
    while (t->b[i]) {
      rids_entry *en = t->b[i];
      t->b[i] = en->next;
      free(en);
    }
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* "owner\0rid" into buf (2 + at most 2 * 4 KiB: longer keys are cut to
 * that, which only makes two keys share an entry: a wait, never a wrong
 * answer). */
#define RIDS_PART_MAX 4096
static size_t make_key(const char *owner, const char *rid, char *buf) {
  size_t a = owner ? strnlen(owner, RIDS_PART_MAX) : 0;
  size_t b = strnlen(rid, RIDS_PART_MAX);
  if (a) memcpy(buf, owner, a);
  buf[a] = 0;
  memcpy(buf + a + 1, rid, b);
  buf[a + 1 + b] = 0;
  return a + b + 2;
}

static uint32_t fnv1a(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
  return h;
}

/* The entry of the key, or NULL. [mu] */
static rids_entry *find(jobs_rids *t, const char *key, size_t len, uint32_t h) {
  for (rids_entry *en = t->b[h & (RIDS_BUCKETS - 1)]; en; en = en->next)
    if (en->hash == h && en->len == len && memcmp(en->key, key, len) == 0)
      return en;
  return NULL;
}

/* A new entry of the key, in its bucket; NULL when out of memory. [mu] */
static rids_entry *add(jobs_rids *t, const char *key, size_t len, uint32_t h) {
  rids_entry *en = calloc(1, sizeof *en + len);
  if (!en) return NULL;
  en->t = t;
  en->hash = h;
  en->len = len;
  memcpy(en->key, key, len);
  rids_entry **slot = &t->b[h & (RIDS_BUCKETS - 1)];
  en->next = *slot;
  *slot = en;
  t->nkeys++;
  return en;
}

/* Free the entry when nothing of it is in flight any more. [mu] */
static void maybe_drop(jobs_rids *t, rids_entry *en) {
  if (en->state != RID_NONE || en->holds > 0 || en->watched) return;
  rids_entry **p = &t->b[en->hash & (RIDS_BUCKETS - 1)];
  while (*p != en) p = &(*p)->next;
  *p = en->next;
  t->nkeys--;
  free(en);
}

rids_entry *rids_claim(jobs_rids *t, const char *owner, const char *rid) {
  char key[2 * RIDS_PART_MAX + 2];
  size_t len = make_key(owner, rid, key);
  uint32_t h = fnv1a(key, len);
  rids_entry *en = NULL;
  pthread_mutex_lock(&t->mu);
  if (t->nasync < t->max && !find(t, key, len, h) &&
      (en = add(t, key, len, h))) {
    en->state = RID_CLAIMED;
    en->pending = 1;
    t->nasync++;
  }
  pthread_mutex_unlock(&t->mu);
  return en;
}

uint64_t rids_queued(jobs_rids *t, rids_entry *en) {
  pthread_mutex_lock(&t->mu);
  en->state = RID_QUEUED;
  en->watched = 1;
  en->stamp = ++t->gen;
  en->qnext = NULL;
  if (t->qtail)
    t->qtail->qnext = en;
  else
    t->qhead = en;
  t->qtail = en;
  uint64_t stamp = en->stamp;
  pthread_mutex_unlock(&t->mu);
  return stamp;
}

void rids_enqueued(rids_entry *en) {
  jobs_rids *t = en->t;
  pthread_mutex_lock(&t->mu);
  en->pending = 0;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

/* Drop queued entries stamped <= upto, oldest first. [mu] */
static void sweep(jobs_rids *t, uint64_t upto) {
  while (t->qhead && t->qhead->stamp <= upto) {
    rids_entry *en = t->qhead;
    t->qhead = en->qnext;
    if (!t->qhead) t->qtail = NULL;
    en->qnext = NULL;
    en->state = RID_NONE;
    t->nasync--;
    maybe_drop(t, en);
  }
}

void rids_ended(rids_entry *en, int committed) {
  jobs_rids *t = en->t;
  pthread_mutex_lock(&t->mu);
  /* still watched: the sweep keeps it, and it is dropped once, here */
  if (committed && en->state == RID_QUEUED) sweep(t, en->stamp);
  en->watched = 0;
  maybe_drop(t, en);
  pthread_mutex_unlock(&t->mu);
}

void rids_unclaim(jobs_rids *t, rids_entry *en) {
  pthread_mutex_lock(&t->mu);
  en->state = RID_NONE;
  en->pending = 0;
  t->nasync--;
  pthread_cond_broadcast(&t->cv);
  maybe_drop(t, en);
  pthread_mutex_unlock(&t->mu);
}

rids_entry *rids_hold(jobs_rids *t, const char *owner, const char *rid,
                      int *queued) {
  char key[2 * RIDS_PART_MAX + 2];
  size_t len = make_key(owner, rid, key);
  uint32_t h = fnv1a(key, len);
  pthread_mutex_lock(&t->mu);
  rids_entry *en;
  /* a claim reading the store: wait for its insert to be queued (ours
   * then comes after it) or for it to go (the store had the key) */
  while ((en = find(t, key, len, h)) && en->pending)
    pthread_cond_wait(&t->cv, &t->mu);
  *queued = en && en->state == RID_QUEUED;
  if (!en) en = add(t, key, len, h);
  if (en) en->holds++;
  pthread_mutex_unlock(&t->mu);
  return en;
}

void rids_release(jobs_rids *t, rids_entry *en) {
  pthread_mutex_lock(&t->mu);
  en->holds--;
  maybe_drop(t, en);
  pthread_mutex_unlock(&t->mu);
}

uint64_t rids_mark(jobs_rids *t) {
  pthread_mutex_lock(&t->mu);
  uint64_t g = t->gen;
  pthread_mutex_unlock(&t->mu);
  return g;
}

void rids_committed(jobs_rids *t, uint64_t upto) {
  pthread_mutex_lock(&t->mu);
  sweep(t, upto);
  pthread_mutex_unlock(&t->mu);
}

void rids_count(jobs_rids *t, int *keys, int *async) {
  pthread_mutex_lock(&t->mu);
  if (keys) *keys = t->nkeys;
  if (async) *async = t->nasync;
  pthread_mutex_unlock(&t->mu);
}

struct jobs_rids *jobs_rids_new(void) {
  return rids_new(0);
}
void jobs_rids_free(struct jobs_rids *t) {
  rids_free(t);
}
