/* compute/jobs/batch.c — many submissions in one request (POST /v1/jobs:batch).
 *
 * Each item goes through jobs_submit's own two halves (submit.h), the one
 * submit path: the envelope, the kind's check, the limits, the pins, the
 * queue slot, request_id's meaning.
 * Before any item is submitted the batch as a whole is checked: "jobs" an
 * array of at most JOBS_BATCH_MAX items (more: 413 naming "jobs") and no
 * request_id twice among its objects (400 naming "jobs[i].request_id"): a
 * refused batch leaves the store as it was. An item that is not an object,
 * or that its own submit refuses, gets its error with the field prefixed by
 * "jobs[i]" and the other items go on.
 *
 * The items go in chunks of 8, 16, ... up to STORE_INSERT_CHUNK (the first
 * jobs start while the rest are checked: issue 26's submit->start): each
 * item of a chunk is prepared as jobs_submit would (submit.h), in two
 * steps. The chunk's checks (jobs_submit_check: the envelope, the
 * kind's check with its array reads and estimate, the row without its id)
 * run at once on J->checkers and this thread (pool_for; they take
 * nothing shared and only read the body). Each checked item is admitted
 * (jobs_submit_admit: the full disk, the queue slot, the id, the regions,
 * the request_id's key) in item order, under the chunk's lock, by
 * whichever of those threads finds the next item ready, so the first
 * items are admitted and queued while the later ones are still checked,
 * and ids, slots and keys go as a serial batch's did. An item jobs_submit would insert [async]
 * (async_ok: no request_id, no job result as input, no region, not a cluster
 * store; and a store that counts its failed async inserts) is inserted
 * so (store_job_insert_async) and enqueued at once: when the writer is
 * behind, the job ends before its insert is taken and its finish takes the
 * insert over (one INSERT of the ended row, db/sqlite/store.c). The other
 * rows of the chunk are inserted by one store_insert_jobs (one
 * transaction; a row that fails, a request_id's earlier job, undoes or
 * finds only itself), then each is enqueued or its slot given back.
 *
 * The whole batch is queued as one unit for the GPU's gangs: a scheduler
 * hold (sched_hold_open) opened before the first item and closed after
 * the last, before the async commit is waited for; a GPU worker takes no
 * gang-able item of it before the close (or a full gang), so the seeds'
 * 100 tiny cuda sums run in one launch, not in the chunks' steps.
 *
 * Still "acknowledged => durable": every row is committed before the
 * caller answers. The async ones by one store_sync at the end (and one
 * after each chunk once BATCH_ASYNC_AHEAD of them wait, so that the
 * writer's queue, which a lone submit or /healthz's store waits behind,
 * holds fewer than BATCH_ASYNC_AHEAD + STORE_INSERT_CHUNK of this batch's
 * rows and their ends: 512 ahead measured lone submits waiting up to
 * 226 ms behind a batch of 10,000 on 2 loaded cores, 128 as before the
 * change; the [sync] chunks likewise at most one chunk). An
 * async insert that fails on the writer is learnt from the store's count
 * of such failures (store_insert_failures): when it moved during the batch
 * (anyone's failure, or the sync's own), each async item is read back and
 * one the store lacks is answered as failed (500 "could not be recorded",
 * 507 on a full disk: what a lone ?wait submit answers); its job, queued
 * already, ends with its finish failing (no row), as a lone submit's does.
 *
 * Threads: the caller's HTTP thread, and J->checkers (a pool of its own:
 * util/pool.h, no idle work; made at start, jobs_checkers_new; one
 * request at a time has it, jobs_checkers_take, the others check on their
 * own thread) for the
 * checks and the admits, inserts and enqueues they find ready; a chunk's
 * lock (chunk_run.mu) is held through each admit, no other lock here.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/jobs/jobs.h"
#include "compute/jobs/submit.h"
#include "util/datadir.h"
#include "util/pool.h"
#include "util/util.h"

#define BATCH_FIRST_CHUNK 8
/* Async inserts a batch queues before it waits for their commit. */
#define BATCH_ASYNC_AHEAD 128
/* The checkers by default: a quarter of the online CPUs, at most this
 * many, beside the HTTP thread. None on 2 cores, where the one other core
 * is running the batch's first jobs: a checker there made jobs:batch
 * slower (tests/bench/results/batch-2core-2026-11-29.md). */
#define BATCH_CHECKERS_MAX 7

/* e's field as "jobs[i]" or "jobs[i].<field>". */
static void prefix_field(terr *e, int i) {
  char f[sizeof e->field];
  if (e->field[0])
    snprintf(f, sizeof f, "jobs[%d].%s", i, e->field);
  else
    snprintf(f, sizeof f, "jobs[%d]", i);
  snprintf(e->field, sizeof e->field, "%s", f);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 400 naming the later item when two objects share a request_id. */
static int check_request_ids(json_t *items, terr *e) {
  size_t n = json_array_size(items), m = 0;
  const char **ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *rid = json_object_get(json_array_get(items, i), "request_id");
    if (json_is_string(rid)) ids[m++] = json_string_value(rid);
  }
  qsort(ids, m, sizeof *ids, cmp_str);
  const char *dup = NULL;
  for (size_t i = 1; i < m && !dup; i++)
    if (strcmp(ids[i - 1], ids[i]) == 0) dup = ids[i];
  free(ids);
  if (!dup) return T_OK;
  size_t at = 0, seen = 0; /* name its second use */
  for (size_t i = 0; i < n && seen < 2; i++) {
    json_t *rid = json_object_get(json_array_get(items, i), "request_id");
    if (json_is_string(rid) && strcmp(json_string_value(rid), dup) == 0) {
      seen++;
      at = i;
    }
  }
  char field[48];
  snprintf(field, sizeof field, "jobs[%zu].request_id", at);
  return terr_set(e, T_EINVAL, field, -1,
                  "request_id '%s' is used twice in this batch", dup);
}

/* The batch's async inserts (see the opening comment), and its hold. */
typedef struct batch_async {
  uint64_t hold;    /* the scheduler's (sched_hold_open), or 0 */
  int on;           /* the store counts failed async inserts */
  int64_t failures; /* store_insert_failures before the first */
  int ahead;        /* queued since the last [sync] write */
  int any, unsure;  /* some were queued; a sync failed */
  char *is_async;   /* per item */
} batch_async;

/* Item i (prepared in *p) inserted [async] and enqueued at once. */
static void submit_async(jobs *J, jobs_pending *p, int i, jobs_batch_item *it,
                         batch_async *ba) {
  int rc = store_job_insert_async(J->st, &p->row, &it->err);
  /* the row as queued, for the answer (without memory: read the store) */
  if (rc == 0 && store_job_copy(&it->row, &p->row) != 0)
    memset(&it->row, 0, sizeof it->row);
  it->rc = jobs_submit_inserted(J, p, rc, 0, it->id, &it->err);
  if (rc == 0) { /* queued: its commit is checked before the answer */
    ba->is_async[i] = 1;
    ba->any = 1;
    ba->ahead++;
  }
  if (it->rc) {
    store_job_clear(&it->row);
    prefix_field(&it->err, i);
  }
}

/* One chunk on the checkers and the caller at once: item at+c checked
 * (jobs_submit_check) into chk[c], rcs[c], errs[c] by whichever thread
 * takes it, then marked ready; the items are admitted in item order by
 * whichever thread holds mu when the next one is ready (the admits of
 * the first items overlap the checks of the later ones). */
typedef struct chunk_run {
  jobs *J;
  const char *owner;
  json_t *items;
  size_t at, k;
  jobs_batch_item *out;
  batch_async *ba;
  jobs_pending *chk, *p; /* checked; admitted for the [sync] insert */
  int *rcs, *idx;
  terr *errs;
  atomic_int *ready;     /* chk[c] checked */
  pthread_mutex_t mu;
  size_t next, m;        /* [mu] the next item to admit; p's count */
} chunk_run;

/* Item c admitted: its slot, id, key (jobs_submit_admit); then inserted
 * [async] and enqueued, or kept for the chunk's [sync] insert. [mu] */
static void admit_one(chunk_run *cr, size_t c) {
  size_t i = cr->at + c;
  jobs_batch_item *it = &cr->out[i];
  memset(it, 0, sizeof *it);
  it->err = cr->errs[c];
  int retry_after = 1;
  cr->chk[c].hold = cr->ba->hold;
  if (!(it->rc = cr->rcs[c]) &&
      !(it->rc = jobs_submit_admit(cr->J, &cr->chk[c], &retry_after,
                                   &it->err))) {
    if (cr->ba->on && cr->chk[c].async_ok) {
      submit_async(cr->J, &cr->chk[c], (int)i, it, cr->ba);
    } else {
      cr->p[cr->m] = cr->chk[c];
      cr->idx[cr->m++] = (int)i;
    }
    return;
  }
  prefix_field(&it->err, (int)i);
}

/* Admit the ready items from next on. wait 0: only when mu is free (its
 * holder admits them; one marked ready just as the holder let go is
 * admitted by the caller's last call, wait 1). */
static void admit_ready(chunk_run *cr, int wait) {
  for (;;) {
    if (wait)
      pthread_mutex_lock(&cr->mu);
    else if (pthread_mutex_trylock(&cr->mu) != 0)
      return;
    while (cr->next < cr->k && atomic_load(&cr->ready[cr->next]))
      admit_one(cr, cr->next++);
    int more = cr->next < cr->k && atomic_load(&cr->ready[cr->next]);
    pthread_mutex_unlock(&cr->mu);
    if (!more) return;
  }
}

static void check_one(void *arg, int64_t c, int slot) {
  (void)slot;
  chunk_run *cr = arg;
  json_t *body = json_array_get(cr->items, cr->at + (size_t)c);
  terr_clear(&cr->errs[c]);
  if (!json_is_object(body))
    cr->rcs[c] = terr_set(&cr->errs[c], T_EINVAL, "", -1,
                          "expected a job object");
  else
    cr->rcs[c] = jobs_submit_check(cr->J, cr->owner, body, &cr->chk[c],
                                   &cr->errs[c]);
  atomic_store(&cr->ready[c], 1);
  admit_ready(cr, 0);
}

/* Every item of the chunk checked and admitted, in item order. */
static void check_and_admit(chunk_run *cr) {
  pool *pl = cr->k > 1 ? jobs_checkers_take(cr->J) : NULL;
  if (pl)
    (void)pool_for(pl, pool_threads(pl) + 1, (int64_t)cr->k, check_one, cr,
                   NULL);
  else
    for (size_t c = 0; c < cr->k; c++) check_one(cr, (int64_t)c, 0);
  jobs_checkers_give(cr->J, pl);
  admit_ready(cr, 1);
}

/* Items at..at+k-1: checked (on the checkers too) and in item order
 * admitted (slot, id, key: jobs_submit_admit); the async ones inserted
 * [async] and enqueued at once, the others inserted in one
 * store_insert_jobs, then enqueued. Returns only an error that is not an
 * item's (out of memory). */
static int submit_chunk(jobs *J, const char *owner, json_t *items, size_t at,
                        size_t k, jobs_batch_item *out, batch_async *ba,
                        terr *e) {
  jobs_pending *p = calloc(k, sizeof *p), *chk = calloc(k, sizeof *chk);
  store_job *rows = calloc(k, sizeof *rows);
  int *idx = calloc(k, sizeof *idx), *existing = calloc(k, sizeof *existing),
      *rcs = calloc(k, sizeof *rcs);
  terr *errs = calloc(k, sizeof *errs);
  atomic_int *ready = calloc(k, sizeof *ready);
  int rc = T_OK;
  if (!p || !chk || !rows || !idx || !existing || !rcs || !errs || !ready) {
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    goto done;
  }
  chunk_run cr = {.J = J, .owner = owner, .items = items, .at = at, .k = k,
                  .out = out, .ba = ba, .chk = chk, .p = p, .rcs = rcs,
                  .idx = idx, .errs = errs, .ready = ready};
  pthread_mutex_init(&cr.mu, NULL);
  check_and_admit(&cr);
  pthread_mutex_destroy(&cr.mu);
  size_t m = cr.m; /* the admitted ones for the [sync] insert */
  if (m == 0) goto done;
  for (size_t j = 0; j < m; j++) rows[j] = p[j].row;
  /* its own error is in rcs/errs of every row it did not commit */
  terr whole;
  terr_clear(&whole);
  (void)store_insert_jobs(J->st, rows, (int)m, existing, rcs, errs, &whole);
  ba->ahead = 0; /* a [sync] write: the async ones before it are done */
  for (size_t j = 0; j < m; j++) {
    jobs_batch_item *it = &out[idx[j]];
    p[j].row = rows[j]; /* a request_id's earlier row replaced it */
    it->err = errs[j];
    /* the row as committed, for the answer (a copy: the enqueue takes
     * the original); without memory for it the answer reads the store */
    if (rcs[j] == 0 && store_job_copy(&it->row, &rows[j]) != 0)
      memset(&it->row, 0, sizeof it->row);
    it->rc = jobs_submit_inserted(J, &p[j], rcs[j], existing[j], it->id,
                                  &it->err);
    if (it->rc) {
      store_job_clear(&it->row);
      prefix_field(&it->err, idx[j]);
    }
  }
done:
  free(p);
  free(chk);
  free(ready);
  free(rows);
  free(idx);
  free(existing);
  free(rcs);
  free(errs);
  return rc;
}

/* Every async item committed before the answer: one store_sync, and when
 * an async insert failed meanwhile (anyone's: the store counts them all)
 * or the sync did, each async item is read: one the store lacks failed. */
static void async_settle(jobs *J, size_t n, jobs_batch_item *out,
                         batch_async *ba) {
  terr e;
  if (!ba->any) return;
  if (store_sync(J->st, &e) != 0) ba->unsure = 1;
  if (!ba->unsure && store_insert_failures(J->st) == ba->failures) return;
  for (size_t i = 0; i < n; i++) {
    jobs_batch_item *it = &out[i];
    if (!ba->is_async[i] || it->rc) continue;
    job_record g;
    int rc = store_job_get(J->st, it->id, NULL, &g, &e);
    if (rc == 0) {
      store_job_clear(&g);
      continue;
    }
    if (rc == T_ENOTFOUND) jobs_unrecorded(J, it->id, &e);
    it->rc = e.code;
    it->err = e;
    store_job_clear(&it->row);
    prefix_field(&it->err, (int)i);
  }
}

struct pool *jobs_checkers_new(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
  if (n > BATCH_CHECKERS_MAX) n = BATCH_CHECKERS_MAX;
  const char *v = getenv("TESSEL_BATCH_CHECKERS");
  if (v && *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end == 0 && x >= 0 && x <= 64) n = x;
  }
  return n > 0 ? pool_create((int)n, NULL, NULL) : NULL;
}

void jobs_checkers_free(struct pool *p) { pool_destroy(p); }

struct pool *jobs_checkers_take(jobs *J) {
  int free_ = 0;
  if (!J || !J->checkers ||
      !atomic_compare_exchange_strong(&J->checkers_taken, &free_, 1))
    return NULL;
  return J->checkers;
}

void jobs_checkers_give(jobs *J, struct pool *p) {
  if (p) atomic_store(&J->checkers_taken, 0);
}

void jobs_batch_item_clear(jobs_batch_item *it) {
  if (it) store_job_clear(&it->row);
}

int jobs_holds(jobs *J, const char *id, const char *owner) {
  return sched_holds(J->sc, id, owner);
}

int jobs_submit_batch(jobs *J, const char *owner, json_t *items,
                      jobs_batch_item *out, terr *e) {
  if (!json_is_array(items))
    return terr_set(e, T_EINVAL, "jobs", -1,
                    "required: an array of job bodies");
  size_t n = json_array_size(items);
  if (n > JOBS_BATCH_MAX)
    return terr_set(e, T_ETOOLARGE, "jobs", -1,
                    "%zu items: a batch holds at most %d", n, JOBS_BATCH_MAX);
  int rc = check_request_ids(items, e);
  if (rc) return rc;
  batch_async ba = {.failures = store_insert_failures(J->st)};
  ba.on = ba.failures >= 0 && n > 0 && (ba.is_async = calloc(n, 1)) != NULL;
  /* The items queued as one unit: a GPU worker gangs them together (one
   * launch for the seeds' 100 tiny sums) instead of in the chunks' steps. */
  ba.hold = n > 1 ? sched_hold_open(J->sc) : 0;
  /* The first chunks are small and grow (8, 16, ... STORE_INSERT_CHUNK):
   * the first jobs are queued, and a worker starts them, while the rest of
   * the batch is still being checked, instead of after 128 items. */
  size_t k = BATCH_FIRST_CHUNK;
  for (size_t at = 0; at < n && !rc; at += k,
              k = k * 2 < STORE_INSERT_CHUNK ? k * 2 : STORE_INSERT_CHUNK) {
    rc = submit_chunk(J, owner, items, at, n - at < k ? n - at : k, out, &ba,
                      e);
    if (ba.ahead >= BATCH_ASYNC_AHEAD) { /* bound the writer's queue */
      terr se;
      if (store_sync(J->st, &se) != 0) ba.unsure = 1;
      ba.ahead = 0;
    }
  }
  sched_hold_close(J->sc, ba.hold); /* queued, all of them: take them */
  /* Also on an error: the items queued so far are answered by nobody,
   * but their jobs run; their rows must not be left behind a lost sync. */
  async_settle(J, n, out, &ba);
  free(ba.is_async);
  return rc;
}
