/* store_recent.c — the rows of recently ended jobs, kept in memory as
 * committed, so that reading one (GET /v1/jobs/{id}, jobs:get, a ?wait's
 * answer) costs a copy instead of a SELECT on the reader's connection.
 *
 * What goes in: the row an async finish reads back inside its transaction
 * (store_lifecycle.c, finish_fn), or makes from the caller's row and the
 * end when the caller gives it (store.h, store_job_end.before: the writer
 * is the row's only writer, so it is the row a read would give; tested by
 * test_store_ended and test_sched_ended), put here by finish_after once
 * that transaction has committed; nothing else. A job's row is final from then
 * on: the only writes that touch an ended job are its delete and expiry,
 * both on the writer thread, and both forget here inside their own
 * operation, before their commit (store__recent_forget). So a read that
 * finds a row here answers what a SELECT would answer at that moment, and
 * a row is never older than the store's: between the forget and the
 * commit a reader misses and reads the store, where the row still is.
 * A delete that lands in the same batch as a finish, before its commit,
 * would otherwise be undone by the finish's later put: every forget bumps
 * a generation, the finish notes the generation inside its transaction
 * (where it reads its row back, or would), and a put whose generation is not the current one is dropped (a
 * miss later, never a stale row).
 *
 * Bounded: at most RECENT_SLOTS rows and RECENT_BYTES bytes of their
 * strings; the oldest go first (a ring). Rows of more than RECENT_ROW_MAX
 * bytes (big inline params) and tiles of split jobs (deleted with their
 * parent, by a statement that does not name them) are not kept. Owner
 * checks are the store's: another owner's row is "no job".
 *
 * Threads: forget on the writer thread, put on the thread that finishes
 * committed batches (store_done.c: it may run while the writer runs the
 * next batch, whose delete's forget then drops the put by its
 * generation), get on any reader thread;
 * one mutex (held for a hash lookup and a copy of the strings, never
 * across a store call).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"
#include "util/tassert.h"

#define RECENT_SLOTS 8192
#define RECENT_BUCKETS (2 * RECENT_SLOTS) /* a power of two */
#define RECENT_BYTES ((size_t)32 << 20)
#define RECENT_ROW_MAX ((size_t)64 << 10)

typedef struct rslot {
  store_job row; /* row.id[0] == 0: empty (evicted or forgotten) */
  size_t bytes;
  int next; /* the bucket chain: a slot index, -1 at its end */
} rslot;

struct store_recent {
  pthread_mutex_t mu;
  rslot *slots;      /* RECENT_SLOTS, used as a ring from head */
  int *buckets;      /* RECENT_BUCKETS chain heads, -1 when empty */
  int head, count;   /* the ring: oldest slot, slots in use (holes too) */
  size_t bytes;      /* of the rows held */
  uint64_t gen;      /* bumped by every forget */
  atomic_llong hits, misses;
};

static unsigned rhash(const char *id) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
  return h & (RECENT_BUCKETS - 1);
}

static size_t row_bytes(const store_job *j) {
  const char *f[] = {j->owner,         j->kind,          j->params,
                     j->backend_requested, j->backend_used, j->backend_reason,
                     j->estimate,      j->label,         j->request_id,
                     j->body_hash,     j->error_code,    j->error_message,
                     j->result_path,   j->compare,       j->output_file,
                     j->result_parts,  j->node,          j->parent,
                     j->devices};
  size_t n = sizeof *j;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i]) n += strlen(f[i]) + 1;
  return n;
}

int store__recent_init(sqstore *s) {
  store_recent *r = calloc(1, sizeof *r);
  if (!r) return T_ENOMEM;
  r->slots = calloc(RECENT_SLOTS, sizeof *r->slots);
  r->buckets = malloc(RECENT_BUCKETS * sizeof *r->buckets);
  if (!r->slots || !r->buckets) {
    free(r->slots);
    free(r->buckets);
    free(r);
    return T_ENOMEM;
  }
  for (int i = 0; i < RECENT_BUCKETS; i++) r->buckets[i] = -1;
  pthread_mutex_init(&r->mu, NULL);
  s->recent = r;
  return T_OK;
}

void store__recent_free(sqstore *s) {
  store_recent *r = s ? s->recent : NULL;
  if (!r) return;
  for (int i = 0; i < RECENT_SLOTS; i++) store_job_clear(&r->slots[i].row);
  pthread_mutex_destroy(&r->mu);
  free(r->slots);
  free(r->buckets);
  free(r);
  s->recent = NULL;
}

/* The slot holding id, or -1. [r->mu] */
static int find(store_recent *r, const char *id) {
  for (int i = r->buckets[rhash(id)]; i >= 0; i = r->slots[i].next)
    if (strcmp(r->slots[i].row.id, id) == 0) return i;
  return -1;
}

/* Empty slot i (in use): off its chain, its row freed. [r->mu] */
static void drop(store_recent *r, int i) {
  rslot *sl = &r->slots[i];
  T_ASSERT(sl->row.id[0] != 0);
  int *pp = &r->buckets[rhash(sl->row.id)];
  while (*pp != i) {
    T_ASSERT(*pp >= 0); /* a used slot is on its bucket's chain */
    pp = &r->slots[*pp].next;
  }
  *pp = sl->next;
  r->bytes -= sl->bytes;
  store_job_clear(&sl->row);
  sl->bytes = 0;
  sl->next = -1;
}

/* The oldest slot leaves the ring (emptied first when in use). [r->mu] */
static void pop_oldest(store_recent *r) {
  T_ASSERT(r->count > 0);
  if (r->slots[r->head].row.id[0]) drop(r, r->head);
  r->head = (r->head + 1) % RECENT_SLOTS;
  r->count--;
}

uint64_t store__recent_gen(sqstore *s) {
  store_recent *r = s->recent;
  if (!r) return 0;
  pthread_mutex_lock(&r->mu);
  uint64_t g = r->gen;
  pthread_mutex_unlock(&r->mu);
  return g;
}

void store__recent_put(sqstore *s, const store_job *row, uint64_t gen) {
  store_recent *r = s->recent;
  if (!r || !row->id[0] || !job_status_final(row->status) || row->parent)
    return;
  size_t n = row_bytes(row);
  if (n > RECENT_ROW_MAX) return;
  store_job copy;
  if (store_job_copy(&copy, row) != 0) return; /* a miss later, no more */
  pthread_mutex_lock(&r->mu);
  if (gen != r->gen) { /* a forget came after its read-back */
    pthread_mutex_unlock(&r->mu);
    store_job_clear(&copy);
    return;
  }
  int old = find(r, row->id);
  if (old >= 0) drop(r, old);
  while (r->count == RECENT_SLOTS || (r->count && r->bytes + n > RECENT_BYTES))
    pop_oldest(r);
  int i = (r->head + r->count) % RECENT_SLOTS;
  rslot *sl = &r->slots[i];
  T_ASSERT(sl->row.id[0] == 0); /* outside the ring: empty */
  sl->row = copy;
  sl->bytes = n;
  unsigned b = rhash(copy.id);
  sl->next = r->buckets[b];
  r->buckets[b] = i;
  r->bytes += n;
  r->count++;
  pthread_mutex_unlock(&r->mu);
}

int store__recent_get(sqstore *s, const char *id, const char *owner,
                      store_job *out, int *rc, terr *e) {
  store_recent *r = s->recent;
  if (!r) return 0;
  pthread_mutex_lock(&r->mu);
  int i = find(r, id);
  if (i < 0) {
    atomic_fetch_add_explicit(&r->misses, 1, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&r->hits, 1, memory_order_relaxed);
    const store_job *j = &r->slots[i].row;
    if (owner && (!j->owner || strcmp(j->owner, owner) != 0))
      *rc = terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", id);
    else if (store_job_copy(out, j) != 0)
      *rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    else
      *rc = T_OK;
  }
  pthread_mutex_unlock(&r->mu);
  return i >= 0;
}

void store__recent_forget(sqstore *s, const char *id) {
  store_recent *r = s->recent;
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->gen++;
  if (id) {
    int i = find(r, id);
    if (i >= 0) drop(r, i);
  } else {
    while (r->count) pop_oldest(r);
    r->head = 0;
  }
  pthread_mutex_unlock(&r->mu);
}

void store__recent_counts(sqstore *s, int64_t *hits, int64_t *misses) {
  store_recent *r = s ? s->recent : NULL;
  *hits = r ? atomic_load(&r->hits) : 0;
  *misses = r ? atomic_load(&r->misses) : 0;
}
