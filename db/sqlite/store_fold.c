/* store_fold.c — the writer queue's take-overs: the fold table, and the
 * [async] inserts the writer holds back so that their job's end folds in.
 *
 * The fold table lists the lazy starts and [async] inserts waiting in the
 * writer's queue by job id, so that a finish queued meanwhile takes them
 * over (store.c's enqueue: one UPDATE for start and end, or one INSERT of
 * the ended row instead of an INSERT and an UPDATE). Open addressing with
 * linear probes; a slot is live when its gen is the table's, so that the
 * writer empties the table in O(1) when it takes the queue (gen++); a taken
 * entry stays as a tombstone (op NULL) until then. A long queue (a batch of
 * 10,000 async inserts) costs a finish one probe, not a scan.
 *
 * Holds. Without them a lone ?wait job's insert folded only when its end
 * came before the writer took the queue; under load another job's urgent
 * write took it first (about 57 % of single ?wait jobs in stop 35), and the
 * end was then a second write of the same row (an UPDATE of the row and
 * its indexes, ~48k instructions), at concurrency 1 a second transaction.
 * An [async] insert is answered to no one until a later commit covers it
 * (store.h), so it need not commit before its job's end: when the writer
 * takes the queue it leaves such an insert there (store__hold_take), with
 * its job's lazy start, while
 *   - its job has run less than hold_run_ms (its start op was queued that
 *     recently) — STORE_HOLD_RUN_MS, 2 ms: a tiny job's run is tens of
 *     microseconds, so its end nearly always comes inside it; a longer job
 *     gets its row, as running, within ~2 ms of its start, as before;
 *   - or, not started, it was queued less than hold_queued_ms ago —
 *     STORE_HOLD_QUEUED_MS, 20 ms: a job waiting behind others is seen
 *     queued in the store soon, and the wait's timeout needs nothing from
 *     this (its answer's store_sync is a barrier);
 * and no barrier was queued since it (store_wop.barrier: store_sync and
 * the [sync] inserts, which callers count on to commit every insert
 * queued before them: compute/jobs/rids.h's marks, a ?wait's timeout, a
 * batch's answer). An op that names the job (touch_id: a [sync] start,
 * requeue, unstart, note) ends its hold at once, and its finish takes it
 * over. The writer wakes for a held insert every hold_run_ms at most (the
 * op's due): the job's start, queued later, needs no wake-up of its own.
 * While held, the job's row is not in the store: a GET of its id (known to
 * no client before its answer, which comes after the commit) is 404, and
 * lists and counts lack it, as in the moment before any [async] insert
 * commits. Inserts whose params name a stored array or job are never held
 * (their ordering against a delete is the queue's: store_jobs.c).
 *
 * Threads: everything here runs under s->mu (the enqueuers' and the
 * writer's lock).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/sqlite/store_int.h"

typedef struct fold_slot {
  uint32_t gen, h;
  store_wop *op; /* NULL: taken (a tombstone) */
} fold_slot;
struct store_fold {
  fold_slot *v;
  uint32_t cap, used, gen; /* used: live and tombstones */
};

static const char *fold_id(const store_wop *o, int kind) {
  return kind == STORE_FOLD_START ? o->start_id : o->insert_id;
}

static uint32_t fold_hash(const char *id, int kind) {
  uint32_t h = 2166136261u ^ (uint32_t)kind;
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
  return h;
}

/* The slot of (id, kind): live, or the first empty one after its chain. */
static fold_slot *fold_find(store_fold *f, const char *id, int kind,
                            uint32_t h) {
  for (uint32_t i = h & (f->cap - 1);; i = (i + 1) & (f->cap - 1)) {
    fold_slot *x = &f->v[i];
    if (x->gen != f->gen) return x;
    if (x->op && x->h == h && fold_id(x->op, kind) &&
        strcmp(fold_id(x->op, kind), id) == 0)
      return x;
  }
}

static store_wop *fold_get(store_fold *f, const char *id, int kind,
                           int take) {
  if (!f || !f->used) return NULL;
  fold_slot *x = fold_find(f, id, kind, fold_hash(id, kind));
  if (x->gen != f->gen) return NULL;
  store_wop *o = x->op;
  if (take) x->op = NULL;
  return o;
}

store_wop *store__fold_take(store_fold *f, const char *id, int kind) {
  return fold_get(f, id, kind, 1);
}

store_wop *store__fold_peek(store_fold *f, const char *id, int kind) {
  return fold_get(f, id, kind, 0);
}

/* A newer op of the same job replaces the older, which stays an ordinary
 * op. Without memory to grow: not listed (it runs where it is). */
int store__fold_put(store_fold *f, store_wop *o, int kind) {
  if (!f) return -1;
  if ((f->used + 1) * 2 > f->cap) { /* grow, keeping the live ones */
    uint32_t cap = f->cap * 2;
    fold_slot *v = calloc(cap, sizeof *v);
    if (!v) return -1;
    store_fold g = {v, cap, 0, 1};
    for (uint32_t i = 0; i < f->cap; i++) {
      fold_slot *x = &f->v[i];
      if (x->gen != f->gen || !x->op) continue;
      int k = x->op->start_id ? STORE_FOLD_START : STORE_FOLD_INSERT;
      fold_slot *y = fold_find(&g, fold_id(x->op, k), k, x->h);
      *y = (fold_slot){g.gen, x->h, x->op};
      g.used++;
    }
    free(f->v);
    *f = g;
  }
  uint32_t h = fold_hash(fold_id(o, kind), kind);
  fold_slot *x = fold_find(f, fold_id(o, kind), kind, h);
  if (x->gen != f->gen) f->used++;
  *x = (fold_slot){f->gen, h, o};
  return 0;
}

void store__fold_clear(store_fold *f) {
  if (!f || !f->used) return;
  f->used = 0;
  if (++f->gen == 0) { /* wrapped: old slots could look live */
    memset(f->v, 0, (size_t)f->cap * sizeof *f->v);
    f->gen = 1;
  }
}

store_fold *store__fold_new(void) {
  store_fold *f = malloc(sizeof *f);
  fold_slot *v = calloc(256, sizeof *v);
  if (!f || !v) {
    free(f);
    free(v);
    return NULL;
  }
  *f = (store_fold){v, 256, 0, 1};
  return f;
}

void store__fold_free(store_fold *f) {
  if (f) free(f->v);
  free(f);
}

/* ---- holds ---------------------------------------------------------------- */

void store__hold_config(sqstore *s) {
  s->hold_run_ms = STORE_HOLD_RUN_MS;
  s->hold_queued_ms = STORE_HOLD_QUEUED_MS;
  const char *v = getenv("TESSEL_STORE_HOLD_MS");
  if (!v || !*v) return;
  char *end;
  double run = strtod(v, &end), queued = run;
  if (*end == ',') queued = strtod(end + 1, &end);
  if (*end || !(run >= 0) || !(queued >= 0)) {
    log_warn("store: TESSEL_STORE_HOLD_MS='%s' is not RUN[,QUEUED] in ms: "
             "the defaults (%g,%g)", v, s->hold_run_ms, s->hold_queued_ms);
    return;
  }
  s->hold_run_ms = run;
  s->hold_queued_ms = run > 0 ? queued : 0;
}

/* Marks the held inserts of q that stay (and their jobs' starts) keep,
 * ends the holds that are over; the earliest time the kept ones must be
 * looked at again. */
static double hold_mark(sqstore *s, store_wop *q, double now) {
  double due = INFINITY;
  for (store_wop *o = q; o; o = o->next) o->keep = 0;
  for (store_wop *o = q; o; o = o->next) {
    if (!o->hold) continue;
    store_wop *st = store__fold_peek(s->fold, o->insert_id, STORE_FOLD_START);
    double until = o->queued_ms + s->hold_queued_ms;
    if (st && st->queued_ms + s->hold_run_ms < until)
      until = st->queued_ms + s->hold_run_ms;
    if (o->hold_gen != s->hold_gen || s->stopping || now >= until) {
      o->hold = 0; /* over: it goes with this batch */
      continue;
    }
    o->keep = 1;
    if (st) st->keep = 1;
    double next = st ? until : fmin(until, now + s->hold_run_ms);
    if (next < due) due = next;
  }
  return due;
}

store_wop *store__hold_take(sqstore *s, store_wop *q, double now) {
  double due = s->hold_run_ms > 0 ? hold_mark(s, q, now) : INFINITY;
  store__fold_clear(s->fold);
  s->due = due;
  if (due == INFINITY) return q; /* nothing kept */
  store_wop *batch = NULL, **bt = &batch;
  for (store_wop *o = q, *next; o; o = next) {
    next = o->next;
    o->next = NULL;
    if (!o->keep) {
      *bt = o;
      bt = &o->next;
      continue;
    }
    if (s->qtail) s->qtail->next = o;
    else s->qhead = o;
    s->qtail = o;
    /* listed again, so that the job's finish still finds them; without
     * memory for it the insert's hold ends (it runs where it is) */
    int kind = o->start_id ? STORE_FOLD_START : STORE_FOLD_INSERT;
    if (store__fold_put(s->fold, o, kind) != 0) o->hold = 0;
  }
  return batch;
}
