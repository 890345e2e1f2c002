/* pg_store.c — the PostgreSQL store's handle: open/close, the connection
 * pool, the writer thread of the [async] operations, readiness, and the
 * backend table (store_pg_backend).
 *
 * Pool: up to PG_POOL connections, made on demand; pg__get blocks while
 * all are lent, pg__put closes a connection that is broken or left inside
 * a transaction. The conninfo stays in this file (never logged; errors
 * mask its password, pg_conn.c).
 *
 * Writer: [async] ops (insert, start, progress, finish) wait in a FIFO
 * (p->mu). The writer takes the whole queue, runs it in one transaction
 * (first without savepoints, its finishes in one UPDATE: pg_bulk.c; when
 * an op fails, that transaction is rolled
 * back and the batch runs again with a SAVEPOINT per op, so an op that
 * fails alone is rolled back alone and reported: logged, or to a finish's
 * callback), commits, then calls the
 * finish callbacks and marks the ops done (p->done_seq). A batch that
 * fails with T_EUNAVAIL (the server is gone) is retried whole, with
 * backoff 100 ms doubling to 2 s, until it commits or the store closes:
 * a finish is never dropped because the server restarted. Progress ops
 * are coalesced per job while they wait, and a start still waiting when
 * its job's finish comes is folded into the finish (one UPDATE). [sync] writes (pg__write) first
 * wait until every op queued before them is done (pg__flush), so writes
 * commit in the order they were queued, as store.h says.
 *
 * Group commit of [sync] writes: a job's insert (and store_insert_jobs'
 * chunks) go through the same queue as an OP_TX op that lives on its
 * caller's stack (pg__write_grouped): the writer runs it in its batch, and
 * the caller returns after that batch's COMMIT, so submits that arrive
 * together share one transaction and one WAL flush. A batch of one op
 * runs without a savepoint. While the server is gone (the writer retrying
 * a batch), an OP_TX is not held: its caller gets T_EUNAVAIL at once, as
 * pg__write's callers do, and leaves the queue if it is still there.
 *
 * Readiness: store_ready is 0 when the last connection attempt or
 * statement failed with a lost server and none succeeded since; it probes
 * with SELECT 1 at most once a second when asked.
 *
 * Locks: p->mu guards the pool and the queue; never held while SQL runs.
 * node_id is written once by store_node_register (pg__set_node, under
 * p->mu) before the node starts jobs, then only read.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/pg/pg_int.h"
#include "util/tassert.h"

#define PG_POOL 8
/* How long the writer holds a queue of starts alone (hold_starts). */
#define PG_START_HOLD_MS 2

enum { OP_INSERT, OP_START, OP_PROGRESS, OP_FINISH, OP_TX };

typedef struct pg_op {
  int type;
  struct pg_op *next;
  uint64_t seq;
  char id[T_ID_MAX];
  store_job job;            /* insert: the row (heap strings) */
  char *s1, *s2, *s3;       /* start: backend_used, reason, estimate; a
                               finish: those of a start folded into it */
  int64_t a, b;             /* start: started_at; progress: done, total;
                               finish: a folded start's started_at */
  int folded;               /* finish: s1..s3 and a hold a start */
  store_job_end end;        /* finish: strings and npy heap copies */
  store_finish_fn cb;
  void *cb_arg;
  store_job row;            /* finish: as committed */
  pg_txfn fn;               /* OP_TX: a [sync] write (pg__write_grouped) */
  void *fn_arg;
  int done;                 /* OP_TX: committed or failed (p->mu); the op
                               is the waiting caller's, never freed here */
  int rc;
  terr err;
} pg_op;

struct pgstore {
  char *conninfo;           /* private: never logged */
  char data_dir[4096];
  char node_id[T_ID_MAX];
  int version;
  pthread_mutex_t mu;
  pthread_cond_t pool_cv, work_cv, done_cv;
  PGconn *free_conns[PG_POOL];
  int nfree, nmade;
  pg_op *qhead, *qtail;
  uint64_t enq_seq, done_seq;
  int stopping, writer_gone;
  int retrying;             /* writes the writer holds while the server is
                               gone (0: none) */
  int flushers;             /* pg__flush callers waiting (hold_starts) */
  pthread_t writer;
  atomic_int down;          /* the last attempt found the server gone */
  atomic_llong probed_ms;   /* monotonic ms of the last readiness probe */
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pg__set_node(pgstore *p, const char *node_id) {
  pthread_mutex_lock(&p->mu);
  snprintf(p->node_id, sizeof p->node_id, "%s", node_id ? node_id : "");
  pthread_mutex_unlock(&p->mu);
}

const char *pg__node(pgstore *p) { return p->node_id; }
const char *pg__data_dir(pgstore *p) { return p->data_dir; }

int pg__connect(pgstore *p, PGconn **c, terr *e) {
  int rc = pg__open_conn(p->conninfo, c, e);
  atomic_store(&p->down, rc == T_EUNAVAIL);
  return rc;
}

int pg__get(pgstore *p, PGconn **c, terr *e) {
  *c = NULL;
  pthread_mutex_lock(&p->mu);
  while (p->nfree == 0 && p->nmade >= PG_POOL)
    pthread_cond_wait(&p->pool_cv, &p->mu);
  /* the pool's counts: idle ones are made ones, never more than PG_POOL */
  T_ASSERT(p->nfree >= 0 && p->nfree <= p->nmade && p->nmade <= PG_POOL);
  while (p->nfree > 0) {
    *c = p->free_conns[--p->nfree];
    pthread_mutex_unlock(&p->mu);
    /* A server that restarted closed our idle sockets: reading what is
     * there (nothing blocks) finds that, so the caller gets a live
     * connection instead of a T_EUNAVAIL after the server is back. */
    if (PQconsumeInput(*c) && PQstatus(*c) == CONNECTION_OK) return 0;
    PQfinish(*c); /* gone while idle: make a new one in its slot */
    *c = NULL;
    pthread_mutex_lock(&p->mu);
    p->nmade--;
  }
  p->nmade++; /* the slot is ours while we connect */
  pthread_mutex_unlock(&p->mu);
  int rc = pg__connect(p, c, e);
  if (rc) {
    pthread_mutex_lock(&p->mu);
    p->nmade--;
    pthread_cond_signal(&p->pool_cv);
    pthread_mutex_unlock(&p->mu);
  }
  return rc;
}

void pg__put(pgstore *p, PGconn *c, int broken) {
  if (!c) return;
  if (PQstatus(c) != CONNECTION_OK) {
    broken = 1;
    atomic_store(&p->down, 1);
  }
  if (!broken && PQtransactionStatus(c) != PQTRANS_IDLE) broken = 1;
  pthread_mutex_lock(&p->mu);
  if (broken) {
    PQfinish(c);
    p->nmade--;
  } else {
    T_ASSERT(p->nfree < p->nmade && p->nfree < PG_POOL); /* c was lent */
    p->free_conns[p->nfree++] = c;
  }
  pthread_cond_signal(&p->pool_cv);
  pthread_mutex_unlock(&p->mu);
}

int pg__read(pgstore *p, pg_txfn fn, void *arg, terr *e) {
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  rc = fn(p, c, arg, e);
  if (rc != T_EUNAVAIL) atomic_store(&p->down, 0);
  pg__put(p, c, rc == T_EUNAVAIL);
  return rc;
}

int pg__write(pgstore *p, pg_txfn fn, void *arg, terr *e) {
  int rc = pg__flush(p, e);
  if (rc) return rc;
  return pg__write_now(p, fn, arg, e);
}

int pg__write_now(pgstore *p, pg_txfn fn, void *arg, terr *e) {
  int rc;
  PGconn *c;
  if ((rc = pg__get(p, &c, e))) return rc;
  /* Not run again here on a deadlock (T_EBUSY): fn may have filled its
   * outputs (paths to remove, rows read) before the statement that lost;
   * the caller answers 429 or, for the node's own calls (claim, heartbeat,
   * reap), tries at its next tick. */
  if (!(rc = pg__begin(c, e))) {
    rc = fn(p, c, arg, e);
    if (!rc) {
      rc = pg__commit(c, e);
    } else {
      pg__rollback(c);
    }
  }
  if (rc != T_EUNAVAIL) atomic_store(&p->down, 0);
  pg__put(p, c, rc == T_EUNAVAIL);
  return rc;
}

/* ---- the writer ------------------------------------------------------------ */

static void op_free(pg_op *o) {
  store_job_clear(&o->job);
  store_job_clear(&o->row);
  free(o->s1);
  free(o->s2);
  free(o->s3);
  free((void *)o->end.result_path);
  free((void *)o->end.compare);
  free((void *)o->end.error_code);
  free((void *)o->end.error_message);
  free((void *)o->end.result_parts);
  free((void *)o->end.devices);
  free((void *)o->end.backend_used);
  free((void *)o->end.result_npy);
  free(o);
}

static int run_op(pgstore *p, PGconn *c, pg_op *o, terr *e) {
  switch (o->type) {
  case OP_INSERT: {
    int existing = 0;
    return pg__insert_on(p, c, &o->job, NULL, &existing, e);
  }
  case OP_START: {
    int rc = pg__start_on(p, c, o->id, o->a, o->s1, o->s2, o->s3, e);
    if (rc == T_ECONFLICT || rc == T_ENOTFOUND) { /* canceled meanwhile */
      log_debug("store: async start of %s skipped: %s", o->id, e->message);
      terr_clear(e);
      return 0;
    }
    return rc;
  }
  case OP_PROGRESS: return pg__progress_on(c, o->id, o->a, o->b, e);
  case OP_TX: return o->fn(p, c, o->fn_arg, e);
  default: {
    store_job_clear(&o->row);
    pg_start st = {o->a, o->s1, o->s2, o->s3};
    return pg__finish_on(p, c, o->id, &o->end, o->folded ? &st : NULL,
                         &o->row, e);
  }
  }
}

/* The batch's finishes (nfin of them) in one UPDATE (pg__finish_bulk);
 * those it did not end one by one (run_op: they say why). Ops after
 * others of the batch: a finish depends only on its job's row, which no
 * other op of a batch writes after it (a start still queued was folded
 * into it; a progress after an end changes nothing). 0, T_EUNAVAIL, or
 * 1 when one failed. */
static int run_finishes(pgstore *p, PGconn *c, pg_op *batch, int nfin) {
  pg_fin *f = nfin > 1 ? calloc((size_t)nfin, sizeof *f) : NULL;
  pg_start *st = nfin > 1 ? calloc((size_t)nfin, sizeof *st) : NULL;
  int i = 0;
  if (f && st) {
    for (pg_op *o = batch; o; o = o->next) {
      if (o->type != OP_FINISH) continue;
      store_job_clear(&o->row);
      st[i] = (pg_start){o->a, o->s1, o->s2, o->s3};
      f[i] = (pg_fin){o->id, &o->end, o->folded ? &st[i] : NULL, &o->row, 0};
      i++;
    }
    terr e;
    terr_clear(&e);
    int rc = pg__finish_bulk(p, c, f, nfin, &e);
    if (rc) {
      free(f);
      free(st);
      return rc == T_EUNAVAIL ? T_EUNAVAIL : 1;
    }
  }
  i = 0;
  int rc = 0;
  for (pg_op *o = batch; !rc && o; o = o->next) {
    if (o->type != OP_FINISH) continue;
    if (!(f && st && f[i++].done)) {
      o->rc = run_op(p, c, o, &o->err);
      if (o->rc) rc = o->rc == T_EUNAVAIL ? T_EUNAVAIL : 1;
    }
  }
  free(f);
  free(st);
  return rc;
}

/* Every op of the batch in one transaction without savepoints (two round
 * trips an op fewer than run_batch_safe): 0 committed (every op's rc 0),
 * T_EUNAVAIL to retry it whole, 1 when an op failed or the COMMIT did
 * (rolled back: nothing of the batch stands; run it again op by op with
 * savepoints, which gives each op its own answer). Ops clear their outputs
 * when they run, so running them again is safe. */
static int run_batch_fast(pgstore *p, pg_op *batch) {
  PGconn *c;
  terr e;
  terr_clear(&e);
  if (pg__get(p, &c, &e)) return T_EUNAVAIL;
  int rc = pg__begin(c, &e);
  int nfin = 0;
  for (pg_op *o = batch; !rc && o; o = o->next) {
    terr_clear(&o->err);
    o->rc = 0;
    if (o->type == OP_FINISH) { /* together below */
      nfin++;
      continue;
    }
    o->rc = run_op(p, c, o, &o->err);
    if (o->rc) rc = o->rc == T_EUNAVAIL ? T_EUNAVAIL : 1;
  }
  if (!rc && nfin) rc = run_finishes(p, c, batch, nfin);
  if (!rc && (rc = pg__commit(c, &e)) && rc != T_EUNAVAIL) rc = 1;
  if (rc) pg__rollback(c);
  pg__put(p, c, rc == T_EUNAVAIL);
  if (!rc) atomic_store(&p->down, 0);
  for (pg_op *o = batch; rc == 1 && o; o = o->next) o->rc = 0;
  return rc;
}

/* One attempt at the batch: 0 committed (each op's rc set), T_EUNAVAIL to
 * retry it whole. */
static int run_batch_safe(pgstore *p, pg_op *batch) {
  PGconn *c;
  terr e;
  terr_clear(&e);
  if (pg__get(p, &c, &e)) return T_EUNAVAIL;
  int rc = pg__begin(c, &e);
  /* A lone op needs no savepoint (two round trips less for a lone
   * submit): the transaction holds nothing else, so a deadlock is undone
   * by a new transaction and an op that fails ends it. */
  int lone = batch && !batch->next;
  for (pg_op *o = batch; !rc && o; o = o->next) {
    terr_clear(&o->err);
    if (!lone &&
        (rc = pg__exec(c, "SAVEPOINT op", 0, NULL, NULL, "savepoint", &e)))
      break;
    o->rc = run_op(p, c, o, &o->err);
    /* A deadlock victim (with another node's or this node's heartbeat):
     * undo to the savepoint and run the op again. */
    for (int tries = 0; o->rc == T_EBUSY && tries < PG_RETRIES; tries++) {
      if (lone) {
        pg__rollback(c);
        rc = pg__begin(c, &e);
      } else {
        rc = pg__exec(c, "ROLLBACK TO SAVEPOINT op", 0, NULL, NULL,
                      "savepoint", &e);
      }
      if (rc) break;
      terr_clear(&o->err);
      o->rc = run_op(p, c, o, &o->err);
    }
    if (rc) break;
    if (o->rc == T_EUNAVAIL) {
      rc = T_EUNAVAIL;
      break;
    }
    if (lone) {
      if (o->rc) { /* nothing to commit: the op's failure is its answer */
        pg__rollback(c);
        pg__put(p, c, 0);
        return 0;
      }
      break;
    }
    rc = pg__exec(c, o->rc ? "ROLLBACK TO SAVEPOINT op" : "RELEASE SAVEPOINT op",
                  0, NULL, NULL, "savepoint", &e);
  }
  if (!rc) rc = pg__commit(c, &e);
  if (rc) pg__rollback(c);
  pg__put(p, c, rc == T_EUNAVAIL);
  if (rc && rc != T_EUNAVAIL) {
    /* The transaction itself failed: every op fails with it. */
    for (pg_op *o = batch; o; o = o->next)
      if (!o->rc) {
        o->rc = rc;
        o->err = e;
      }
    return 0;
  }
  if (!rc) atomic_store(&p->down, 0);
  return rc;
}

/* The batch without savepoints first; op by op with them when one of
 * its ops failed. */
static int run_batch(pgstore *p, pg_op *batch) {
  if (batch && batch->next) {
    int rc = run_batch_fast(p, batch);
    if (rc != 1) return rc;
  }
  return run_batch_safe(p, batch);
}

/* Only starts (and progress) wait in the queue: nobody waits for them, and
 * a tiny job's finish follows within a millisecond or two, folding its
 * start into it (enqueue). So the writer waits up to PG_START_HOLD_MS for
 * another op, or until a [sync] write waits for the queue (pg__flush).
 * [mu] held. */
static void hold_starts(pgstore *p) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += PG_START_HOLD_MS * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  for (;;) {
    if (p->stopping || p->flushers > 0) return;
    for (pg_op *o = p->qhead; o; o = o->next)
      if (o->type != OP_START && o->type != OP_PROGRESS) return;
    if (pthread_cond_timedwait(&p->work_cv, &p->mu, &until) != 0) return;
  }
}

static void *writer_main(void *arg) {
  pgstore *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->qhead && !p->stopping) pthread_cond_wait(&p->work_cv, &p->mu);
    hold_starts(p);
    pg_op *batch = p->qhead;
    p->qhead = p->qtail = NULL;
    int stopping = p->stopping;
    pthread_mutex_unlock(&p->mu);
    if (!batch && stopping) break;
    int delay = 100, nops = 0;
    uint64_t last = 0; /* the batch's newest seq, OP_TX ops answered early
                          included */
    for (pg_op *o = batch; o; o = o->next) {
      nops++;
      if (o->seq > last) last = o->seq;
    }
    while (run_batch(p, batch) == T_EUNAVAIL) {
      atomic_store(&p->down, 1);
      pthread_mutex_lock(&p->mu);
      /* A [sync] write is not held while the server is gone (as
       * pg__write): its caller gets T_EUNAVAIL now and the rest waits. */
      for (pg_op **pp = &batch; *pp;) {
        pg_op *o = *pp;
        if (o->type != OP_TX) {
          pp = &o->next;
          continue;
        }
        *pp = o->next;
        nops--;
        o->rc = terr_set(&o->err, T_EUNAVAIL, "store", -1,
                         "PostgreSQL unreachable");
        o->done = 1;
      }
      stopping = p->stopping;
      p->retrying = nops;
      pthread_cond_broadcast(&p->done_cv); /* flush answers T_EUNAVAIL */
      pthread_mutex_unlock(&p->mu);
      if (stopping || !batch) {
        for (pg_op *o = batch; o; o = o->next) {
          o->rc = terr_set(&o->err, T_EUNAVAIL, "store", -1,
                           "closed while PostgreSQL was unreachable");
          store_job_clear(&o->row);
        }
        break;
      }
      log_warn("store: PostgreSQL unreachable; retrying %d queued write(s) in "
               "%d ms", nops, delay);
      struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      delay = delay * 2 > 2000 ? 2000 : delay * 2;
    }
    pg_op *waiters = NULL; /* OP_TX ops, told after the loop */
    while (batch) {
      pg_op *o = batch;
      batch = o->next;
      if (o->type == OP_TX) {
        o->next = waiters;
        waiters = o;
        continue;
      }
      if (o->type == OP_FINISH && o->cb) {
        store_job row = o->row;
        memset(&o->row, 0, sizeof o->row);
        o->cb(o->cb_arg, o->rc, &o->err, o->rc ? NULL : &row);
        if (o->rc) store_job_clear(&row);
      } else if (o->rc) {
        log_warn("store: a queued write of %s failed: %s", o->id,
                 o->err.message);
      }
      op_free(o);
    }
    pthread_mutex_lock(&p->mu);
    for (pg_op *o = waiters, *next; o; o = next) {
      next = o->next; /* after done = 1 the op may be gone */
      o->done = 1;
    }
    p->retrying = 0;
    if (last > p->done_seq) p->done_seq = last;
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_lock(&p->mu);
  p->writer_gone = 1;
  p->done_seq = p->enq_seq;
  pthread_cond_broadcast(&p->done_cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Queue o (heap; freed by the writer). T_EUNAVAIL (o freed) when closing. */
static int enqueue(pgstore *p, pg_op *o, terr *e) {
  pthread_mutex_lock(&p->mu);
  if (p->stopping || p->writer_gone) {
    pthread_mutex_unlock(&p->mu);
    if (o->type != OP_TX) op_free(o);
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  }
  if (o->type == OP_PROGRESS) /* coalesce: the newest numbers win */
    for (pg_op *q = p->qhead; q; q = q->next)
      if (q->type == OP_PROGRESS && strcmp(q->id, o->id) == 0) {
        q->a = o->a;
        q->b = o->b;
        pthread_mutex_unlock(&p->mu);
        op_free(o);
        return 0;
      }
  /* A finish whose job's start still waits here takes it over: one
   * UPDATE instead of two for a job that ended before its start was
   * written (a tiny job). The start's number is below the finish's, so
   * pg__flush still waits for both. */
  if (o->type == OP_FINISH)
    for (pg_op *q = p->qhead, *prev = NULL; q; prev = q, q = q->next) {
      if (q->type != OP_START || strcmp(q->id, o->id) != 0) continue;
      if (prev) prev->next = q->next;
      else p->qhead = q->next;
      if (p->qtail == q) p->qtail = prev;
      o->folded = 1;
      o->a = q->a;
      o->s1 = q->s1;
      o->s2 = q->s2;
      o->s3 = q->s3;
      q->s1 = q->s2 = q->s3 = NULL;
      op_free(q);
      break;
    }
  /* An OP_TX takes no number: pg__flush need not wait for it (its caller
   * does), and it may leave the queue unrun (pg__write_grouped). */
  if (o->type != OP_TX) o->seq = ++p->enq_seq;
  if (p->qtail) p->qtail->next = o;
  else p->qhead = o;
  p->qtail = o;
  pthread_cond_signal(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* [sync] fn in the writer's next batch (its own savepoint, retried from it
 * on a deadlock as the async ops are), committed with whatever else is
 * queued: N callers at once share one transaction and one commit (group
 * commit), and a lone caller pays what pg__write pays. Returns after that
 * commit (or failure); T_EUNAVAIL at once while the server is gone. fn must
 * clear its outputs when it starts (it may run again). */
int pg__write_grouped(pgstore *p, pg_txfn fn, void *arg, terr *e) {
  pg_op o;
  memset(&o, 0, sizeof o);
  o.type = OP_TX;
  o.fn = fn;
  o.fn_arg = arg;
  pthread_mutex_lock(&p->mu);
  int held = p->retrying;
  pthread_mutex_unlock(&p->mu);
  if (held)
    return terr_set(e, T_EUNAVAIL, "store", -1,
                    "PostgreSQL unreachable (%d queued write(s) wait for it)",
                    held);
  int rc = enqueue(p, &o, e);
  if (rc) return rc;
  pthread_mutex_lock(&p->mu);
  while (!o.done) {
    if (p->retrying) { /* the server went away: leave the queue if still in
                          it (else the writer answers it) */
      pg_op *prev = NULL;
      for (pg_op *q = p->qhead; q; prev = q, q = q->next) {
        if (q != &o) continue;
        if (prev) prev->next = q->next;
        else p->qhead = q->next;
        if (p->qtail == q) p->qtail = prev;
        o.done = 1;
        o.rc = terr_set(&o.err, T_EUNAVAIL, "store", -1,
                        "PostgreSQL unreachable");
        break;
      }
      if (o.done) break;
    }
    pthread_cond_wait(&p->done_cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  if (o.rc && e) *e = o.err;
  return o.rc;
}

/* While the writer retries a batch (the server is gone), a [sync] write
 * would wait for it without end: it answers T_EUNAVAIL instead (503), and
 * the queued writes still commit when the server is back. */
int pg__flush(pgstore *p, terr *e) {
  pthread_mutex_lock(&p->mu);
  uint64_t want = p->enq_seq;
  int waits = p->done_seq < want;
  if (waits) {
    p->flushers++;
    pthread_cond_signal(&p->work_cv); /* a held start goes now */
  }
  while (p->done_seq < want && !p->writer_gone && !p->retrying)
    pthread_cond_wait(&p->done_cv, &p->mu);
  if (waits) p->flushers--;
  int held = p->done_seq < want && p->retrying ? p->retrying : 0;
  pthread_mutex_unlock(&p->mu);
  if (held)
    return terr_set(e, T_EUNAVAIL, "store", -1,
                    "PostgreSQL unreachable (%d queued write(s) wait "
                    "for it)",
                    held);
  return 0;
}

static pg_op *op_new(int type, const char *id) {
  pg_op *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->type = type;
  snprintf(o->id, sizeof o->id, "%s", id);
  o->row.max_abs_diff = NAN;
  o->job.max_abs_diff = NAN;
  return o;
}

static int sdup(char **dst, const char *s) {
  *dst = NULL;
  if (!s) return 0;
  return (*dst = strdup(s)) ? 0 : -1;
}

/* ---- the [async] entries ------------------------------------------------- */

static int pg_job_insert_async(void *impl, store_job *j, terr *e) {
  pgstore *p = impl;
  if (!p) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  if (j && j->request_id)
    return terr_set(e, T_EINVAL, "request_id", -1,
                    "store: an idempotent insert must be [sync]");
  int prc = store__job_insert_prep(j, e);
  if (prc) return prc;
  pg_op *o = op_new(OP_INSERT, j->id);
  if (!o || store_job_copy(&o->job, j)) {
    free(o);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  if ((!o->job.owner && sdup(&o->job.owner, "")) ||
      (!o->job.backend_requested && sdup(&o->job.backend_requested, "auto"))) {
    op_free(o);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  free(o->job.result_parts);
  o->job.result_parts = NULL;
  return enqueue(p, o, e);
}

static int pg_sync(void *impl, terr *e) { return pg__flush(impl, e); }

static void pg_job_start_async(void *impl, const char *id, int64_t started_at,
                               const char *backend_used, const char *reason,
                               const char *estimate) {
  pgstore *p = impl;
  if (!p || !id) return;
  pg_op *o = op_new(OP_START, id);
  if (!o || sdup(&o->s1, backend_used) || sdup(&o->s2, reason) ||
      sdup(&o->s3, estimate)) {
    if (o) op_free(o);
    log_warn("store: no memory to record the start of %s", id);
    return;
  }
  o->a = started_at;
  terr e;
  if (enqueue(p, o, &e))
    log_warn("store: closing; the start of %s is not recorded", id);
}

static void pg_job_progress(void *impl, const char *id, int64_t done,
                            int64_t total) {
  pgstore *p = impl;
  if (!p || !id) return;
  pg_op *o = op_new(OP_PROGRESS, id);
  if (!o) return;
  o->a = done;
  o->b = total;
  terr e;
  enqueue(p, o, &e);
}

static int pg_job_finish_async(void *impl, const char *id,
                               const store_job_end *end, store_finish_fn cb,
                               void *arg, terr *e) {
  pgstore *p = impl;
  if (!p || !id || !end || !cb)
    return terr_set(e, T_EINVAL, "id", -1, "missing");
  if (!job_status_final(end->status) || end->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "%d is not a final status",
                    (int)end->status);
  pg_op *o = op_new(OP_FINISH, id);
  if (!o) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  o->end = *end;
  o->end.result_path = o->end.compare = o->end.error_code = NULL;
  o->end.error_message = o->end.result_parts = NULL;
  o->end.devices = o->end.backend_used = NULL;
  o->end.result_npy = NULL;
  o->end.before = NULL; /* the caller's row: not kept, PostgreSQL reads the row back */
  char *s[7];
  int bad = sdup(&s[0], end->result_path) | sdup(&s[1], end->compare) |
            sdup(&s[2], end->error_code) | sdup(&s[3], end->error_message) |
            sdup(&s[4], end->result_parts) | sdup(&s[5], end->devices) |
            sdup(&s[6], end->backend_used);
  o->end.result_path = s[0];
  o->end.compare = s[1];
  o->end.error_code = s[2];
  o->end.error_message = s[3];
  o->end.result_parts = s[4];
  o->end.devices = s[5];
  o->end.backend_used = s[6];
  if (end->result_npy) {
    void *b = malloc(end->result_npy_len ? end->result_npy_len : 1);
    if (b) memcpy(b, end->result_npy, end->result_npy_len);
    else bad = 1;
    o->end.result_npy = b;
  }
  if (bad) {
    op_free(o);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  o->cb = cb;
  o->cb_arg = arg;
  return enqueue(p, o, e);
}

/* ---- open, close, ready ---------------------------------------------------- */

static void pg_close(void *impl) {
  pgstore *p = impl;
  if (!p) return;
  pg__listen_stop(p);
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_signal(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->writer, NULL); /* drains the queue first */
  pthread_mutex_lock(&p->mu);
  while (p->nmade > p->nfree) pthread_cond_wait(&p->pool_cv, &p->mu);
  for (int i = 0; i < p->nfree; i++) PQfinish(p->free_conns[i]);
  p->nfree = p->nmade = 0;
  pthread_mutex_unlock(&p->mu);
  pthread_cond_destroy(&p->pool_cv);
  pthread_cond_destroy(&p->work_cv);
  pthread_cond_destroy(&p->done_cv);
  pthread_mutex_destroy(&p->mu);
  free(p->conninfo);
  free(p);
}

int store_pg_open(const char *conninfo, const char *data_dir, void **impl,
                  terr *e) {
  *impl = NULL;
  if (!data_dir || !*data_dir)
    return terr_set(e, T_EINVAL, "data_dir", -1, "empty path");
  pgstore *p = calloc(1, sizeof *p);
  if (!p || !(p->conninfo = strdup(conninfo))) {
    free(p);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  if ((size_t)snprintf(p->data_dir, sizeof p->data_dir, "%s", data_dir) >=
      sizeof p->data_dir) {
    free(p->conninfo);
    free(p);
    return terr_set(e, T_EINVAL, "data_dir", -1, "path too long");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->pool_cv, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (!rc) {
    rc = pg__migrate(c, data_dir, &p->version, e);
    pg__put(p, c, rc == T_EUNAVAIL);
  }
  if (!rc && pthread_create(&p->writer, NULL, writer_main, p) != 0)
    rc = terr_set(e, T_EINTERNAL, "", -1, "store: cannot start the writer");
  if (rc) {
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nfree; i++) PQfinish(p->free_conns[i]);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&p->pool_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->conninfo);
    free(p);
    return rc;
  }
  atomic_store(&p->probed_ms, mono_ms());
  *impl = p;
  return 0;
}

static int probe(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  (void)arg;
  return pg__exec(c, "SELECT 1", 0, NULL, NULL, "ready", e);
}

static int pg_ready(void *impl) {
  pgstore *p = impl;
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  int gone = p->writer_gone || p->stopping;
  pthread_mutex_unlock(&p->mu);
  if (gone) return 0;
  int64_t now = mono_ms();
  if (now - atomic_load(&p->probed_ms) >= 1000) {
    atomic_store(&p->probed_ms, now);
    terr e;
    pg__read(p, probe, NULL, &e); /* sets or clears p->down */
  }
  return !atomic_load(&p->down);
}

static int pg_schema_version(void *impl) {
  return impl ? ((pgstore *)impl)->version : 0;
}

const store_backend store_pg_backend = {
    .name = "postgresql",
    .cluster = 1,
    .close = pg_close,
    .ready = pg_ready,
    .schema_version = pg_schema_version,
    .job_insert = pg_job_insert,
    .job_insert_async = pg_job_insert_async,
    .job_insert_many = pg_job_insert_many,
    /* a chunk is one INSERT (pg_bulk.c) and one turn of the writer: a
     * batch of 100 in chunks of 32 waited for four of the writer's
     * commits one after another; 100 rows: twice the rows/s at half the
     * CPU a row of 32, a lone submit beside 10,000-row batches p99 19 ms,
     * max 43 ms on the loaded 2-core VM (32: 10 and 12; 128: 19 and 48)
     * (bench_insert; tests/bench/results/pg-2core-2026-11-29b.md) */
    .insert_chunk = 100,
    .sync = pg_sync,
    .job_get = pg_job_get,
    .job_get_many = pg_job_get_many,
    .job_list = pg_job_list,
    .job_start = pg_job_start,
    .job_start_async = pg_job_start_async,
    .job_progress = pg_job_progress,
    .job_finish = pg_job_finish,
    .job_finish_async = pg_job_finish_async,
    .job_result_npy = pg_job_result_npy,
    .job_requeue = pg_job_requeue,
    .job_unstart = pg_job_unstart,
    .job_note_start = pg_job_note_start,
    .job_delete = pg_job_delete,
    .job_unfinished = pg_job_unfinished,
    .expire = pg_expire,
    .stats = pg_stats,
    .job_counts = pg_job_counts,
    .finished_by_step = pg_finished_by_step,
    .array_insert = pg_array_insert,
    .array_get = pg_array_get,
    .array_delete = pg_array_delete,
    .array_list = pg_array_list,
    .job_children = pg_job_children,
    .node_register = pg_node_register,
    .node_heartbeat = pg_node_heartbeat,
    .node_leave = pg_node_leave,
    .node_list = pg_node_list,
    .job_claim = pg_job_claim,
    .reap = pg_reap,
    .job_cancel_request = pg_job_cancel_request,
    .listen = pg_listen,
    .unlisten = pg_unlisten,
    .queue_depth = pg_queue_depth,
};
