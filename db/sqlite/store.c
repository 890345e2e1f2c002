/* store.c — opening and closing the store, the writer thread, connections.
 *
 * The writer thread owns the only write connection (s->w). Callers queue
 * write ops (store__write for [sync] ones, store_job_progress for the async
 * progress); the writer takes EVERY op queued while it committed the previous
 * batch, runs them in one transaction with a SAVEPOINT around each (so one
 * failing op rolls back only itself), commits once, and then hands the
 * batch to store_done.c's thread, which wakes each [sync] caller with its
 * own result code and runs the async ops' after-callbacks, in order,
 * while the writer goes on with the next batch. Under load, N concurrent writers
 * thus share one commit (group commit); a lone writer pays one commit per op.
 *
 * Async ops (store__write_async: a job's start; progress) are heap ops
 * freed by the writer. Progress ops are coalesced per job while they wait
 * in the queue (the newest numbers win, at the queue position of the first
 * one), so a job that reports progress often costs at most one UPDATE per
 * batch. Since the queue is FIFO, a thread's earlier async ops commit no
 * later than its next [sync] op, usually in the same transaction.
 *
 * Readers: each thread gets its own read-only connection per store, opened on
 * first use and kept in a pthread key whose destructor closes it when the
 * thread exits; every reader connection is also in a registry (s->rmu) so
 * that store_close closes those of threads still alive. Contract: store_close
 * runs after every other thread has stopped calling into this store.
 *
 * WAL checkpoints (and so the fsyncs) run on a thread of their own, see
 * store_ckpt.c, so that commits never wait for the disk.
 *
 * A full disk (util/datadir.h): before each batch the writer looks at the
 * free space (reserve_watch, rate-limited), which gives the data disk's
 * reserve to the store below its low mark; a batch that failed SQLITE_FULL
 * anyway gives it up at once, and the deletes and expiry retry once
 * (store__delete, sq_job_delete, sq_expire), so that the way out of a full
 * disk is never blocked by it.
 *
 * Wake-ups: only an urgent op (every [sync] one, and the async ops whose
 * completion someone awaits) wakes the writer, and only the first one queued
 * while it sleeps: the writer takes the whole queue. Lazy async ops (a job's
 * start and insert, progress) wait for the next urgent op's batch, or at most
 * STORE_LAZY_MS, so that a tiny job's writes share one commit without a
 * wake-up each.
 *
 * Take-overs (the fold table, store_fold.c): a lazy start op and an async
 * insert op wait in the queue listed by their job's id (a hash table,
 * emptied in O(1) when the writer takes the queue). A finish queued meanwhile takes them
 * over: the start's arguments go with the finish (one UPDATE sets both),
 * and the insert op is emptied and the finish inserts the ended row
 * instead (one INSERT, no UPDATE: under load, when the writer is behind,
 * a tiny job's whole life is one row written once). Both stay in their
 * batch, so the arguments stay valid. An op that must find the row where
 * the queue put it (a [sync] start, requeue, unstart, note: touch_id)
 * takes the job's entries out of the table, so nothing moves past it.
 * Holds (store_fold.c): when the writer takes the queue it leaves there the
 * [async] inserts whose job may still end soon (and their starts), listed
 * again, so that the end folds in even when other jobs' writes commit
 * first; a barrier op (store_sync, a [sync] insert) ends the holds of the
 * inserts queued before it.
 *
 * Runs of rows: ops whose whole write is one job row (row_of) go in
 * several to an INSERT (store_wop.rows_fn, store_rows.c), moving only past empty
 * ops and ops that change rows of jobs inserted before them (passable).
 *
 * Savepoints: an op that writes with one statement (store_wop.one_stmt: the
 * job lifecycle ops) needs none, since SQLite undoes a failing statement
 * itself; the others get one when they share a batch.
 *
 * Locks: s->mu guards the queue (qhead/qtail/nurgent/due/hold_gen/progress/
 * fold/stopping/writer_gone);
 * s->rmu guards the reader registry. Neither is held while SQL runs, and they
 * are never held together (nor with s->dmu, store_done.c's). A [sync]
 * caller sleeps on a semaphore of its own that store_done.c's thread posts
 * after the commit (no lock, one wake-up per caller).
 */
#include <errno.h>
#include <math.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/sqlite/store_int.h"
#include "util/datadir.h"
#include "util/tmutex.h"
#include "util/vec.h"

struct store_stmt {
  uint64_t hash;
  const char *sql; /* the caller's text when static, else our copy */
  char *own;       /* our copy (for dynamic SQL), or NULL */
  sqlite3_stmt *st;
  const char *key; /* the caller's pointer when prepared: a first guess */
};

/* ---- helpers --------------------------------------------------------------- */

char *store__col_dup(sqlite3_stmt *st, int i, int *oom) {
  const unsigned char *t = sqlite3_column_text(st, i);
  if (!t) return NULL;
  int n = sqlite3_column_bytes(st, i);
  char *p = malloc((size_t)n + 1);
  if (!p) {
    *oom = 1;
    return NULL;
  }
  memcpy(p, t, (size_t)n);
  p[n] = 0;
  return p;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* The statements are few and fixed (dynamic list SQL has a bounded number of
 * shapes), so a linear search by hash is enough. */
int store__stmt(store_conn *c, const char *sql, sqlite3_stmt **out, terr *e) {
  *out = NULL;
  /* Most calls pass a string literal, the same pointer every time: found
   * by the pointer and confirmed by the text, without hashing it (the
   * hash of a 600-byte statement was a tenth of a tiny job's store
   * calls: tests/bench/README.md, 2026-11-29). */
  for (int i = 0; i < c->nstmts; i++) {
    struct store_stmt *x = &c->stmts[i];
    if (x->key == sql && strcmp(x->sql, sql) == 0) {
      sqlite3_reset(x->st);
      sqlite3_clear_bindings(x->st);
      *out = x->st;
      return 0;
    }
  }
  uint64_t h = fnv1a(sql);
  for (int i = 0; i < c->nstmts; i++) {
    struct store_stmt *x = &c->stmts[i];
    if (x->hash == h && (x->sql == sql || strcmp(x->sql, sql) == 0)) {
      sqlite3_reset(x->st);
      sqlite3_clear_bindings(x->st);
      *out = x->st;
      return 0;
    }
  }
  if (tvec_grow(&c->stmts, &c->capstmts, sizeof *c->stmts,
                (size_t)c->nstmts + 1, 0))
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st,
                         NULL) != SQLITE_OK)
    return store__dberr(e, c->db, "prepare");
  char *own = strdup(sql);
  if (!own) {
    sqlite3_finalize(st);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  c->stmts[c->nstmts++] = (struct store_stmt){h, own, own, st, sql};
  *out = st;
  return 0;
}

int store__exec_stmt(store_conn *c, sqlite3_stmt *st, const char *what,
                     terr *e) {
  int rc = sqlite3_step(st);
  int r = 0;
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) r = store__dberr(e, c->db, what);
  sqlite3_reset(st);
  return r;
}

static void conn_close(store_conn *c) {
  for (int i = 0; i < c->nstmts; i++) {
    sqlite3_finalize(c->stmts[i].st);
    free(c->stmts[i].own);
  }
  free(c->stmts);
  c->stmts = NULL;
  c->nstmts = c->capstmts = 0;
  if (c->db) sqlite3_close(c->db);
  c->db = NULL;
}

/* ---- readers ------------------------------------------------------------- */

/* pthread key destructor: the thread exits; close its connection. */
static void reader_destroy(void *p) {
  store_conn *c = p;
  sqstore *s = c->owner_store;
  pthread_mutex_lock(&s->rmu);
  if (c->prev) c->prev->next = c->next;
  else s->readers = c->next;
  if (c->next) c->next->prev = c->prev;
  pthread_mutex_unlock(&s->rmu);
  conn_close(c);
  free(c);
}

int store__reader(sqstore *s, store_conn **out, terr *e) {
  store_conn *c = pthread_getspecific(s->rkey);
  if (c) {
    *out = c;
    return 0;
  }
  *out = NULL;
  c = calloc(1, sizeof *c);
  if (!c) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  c->owner_store = s;
  int rc;
  if (sqlite3_open_v2(s->path, &c->db,
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK) {
    rc = store__dberr(e, c->db, "open reader");
    goto fail;
  }
  if ((rc = store__pragmas(c->db, 0, e))) goto fail;
  if (pthread_setspecific(s->rkey, c) != 0) {
    rc = terr_set(e, T_ENOMEM, "", -1, "store: pthread_setspecific failed");
    goto fail;
  }
  pthread_mutex_lock(&s->rmu);
  c->next = s->readers;
  if (s->readers) s->readers->prev = c;
  s->readers = c;
  pthread_mutex_unlock(&s->rmu);
  *out = c;
  return 0;
fail:
  conn_close(c);
  free(c);
  return rc;
}

/* ---- the writer ------------------------------------------------------------ */

static int wexec(sqstore *s, const char *sql) {
  sqlite3_stmt *st;
  if (store__stmt(&s->w, sql, &st, NULL)) return SQLITE_ERROR;
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Fail every op from `from` up to (not including) `to` with the last error
 * of the write connection: their transaction is gone. So are the rows of
 * the ops after `to` that went in with a run (rows_fn) before it. */
static void fail_range(sqstore *s, store_wop *from, store_wop *to,
                       const char *what) {
  for (store_wop *o = from; o != to; o = o->next)
    if (o->rc == 0) o->rc = store__dberr(&o->err, s->w.db, what);
  for (store_wop *o = to; o; o = o->next)
    if (o->grouped && o->rc == 0)
      o->rc = store__dberr(&o->err, s->w.db, what);
}

/* Run one batch (a list taken from the queue) in one transaction. */
static void run_batch(sqstore *s, store_wop *head) {
  store_wop *txn_first = head; /* first op of the current transaction */
  int in_txn = wexec(s, "BEGIN IMMEDIATE") == SQLITE_OK;
  if (!in_txn) {
    fail_range(s, head, NULL, "begin");
    return;
  }
  for (store_wop *o = head; o; o = o->next) {
    if (o->grouped) continue; /* its row went in with an earlier op's run */
    terr_clear(&o->err);
    if (in_txn && o->rows_fn && o->rows_fn(s, o) < 0) {
      /* The run's error ended the transaction: the ops before lost. */
      fail_range(s, txn_first, o, "transaction rolled back");
      in_txn = 0;
    }
    if (o->grouped) continue;
    if (!in_txn) {
      /* A previous op's error ended the transaction: start another one. */
      if (wexec(s, "BEGIN IMMEDIATE") != SQLITE_OK) {
        fail_range(s, o, NULL, "begin");
        return;
      }
      in_txn = 1;
      txn_first = o;
    }
    /* A lone op needs no savepoint: its failure rolls back the whole
     * transaction, which holds nothing else; nor does an op that writes
     * with one statement, which undoes itself when it fails. */
    int sp = (o != head || o->next != NULL) && !o->one_stmt;
    if (sp && wexec(s, "SAVEPOINT op") != SQLITE_OK) {
      o->rc = store__dberr(&o->err, s->w.db, "savepoint");
      continue;
    }
    o->rc = o->fn(s, o, &o->err);
    if (sqlite3_get_autocommit(s->w.db)) {
      /* An I/O or full-disk error rolled the whole transaction back: the
       * ops before this one in it are lost too. */
      fail_range(s, txn_first, o, "transaction rolled back");
      if (o->rc == 0) o->rc = store__dberr(&o->err, s->w.db, "rolled back");
      in_txn = 0;
      continue;
    }
    if (!sp) {
      if (o->rc != 0 && !o->one_stmt) { /* undo its partial work */
        wexec(s, "ROLLBACK");
        in_txn = 0;
      }
      continue;
    }
    if (o->rc != 0) wexec(s, "ROLLBACK TO op");
    wexec(s, "RELEASE op");
  }
  if (in_txn && wexec(s, "COMMIT") != SQLITE_OK) {
    fail_range(s, txn_first, NULL, "commit");
    if (!sqlite3_get_autocommit(s->w.db)) wexec(s, "ROLLBACK");
  }
}

static void *writer_main(void *arg) {
  sqstore *s = arg;
  /* After a batch an empty queue is watched for `linger` ms (wsleep 3)
   * before the writer sleeps with no deadline (wsleep 1): a lazy op queued
   * meanwhile (a tiny job's insert) is due no sooner than that, so it
   * needs no wake-up of its own; the job's end wakes the writer once. */
  double linger =
      s->hold_run_ms > 0 ? fmin(s->hold_run_ms, STORE_LAZY_MS) : STORE_LAZY_MS;
  int lingered = 1; /* nothing committed yet */
  pthread_mutex_lock(&s->mu);
  for (;;) {
    /* Sleep until an urgent op comes, or the oldest lazy one is due. */
    while (!s->stopping && !s->nurgent) {
      if (!s->qhead) {
        s->wsleep = lingered ? 1 : 3;
        if (lingered) {
          pthread_cond_wait(&s->work, &s->mu);
        } else {
          struct timespec ts;
          tmutex_deadline(&ts, linger);
          pthread_cond_timedwait(&s->work, &s->mu, &ts);
          lingered = 1;
        }
        s->wsleep = 0;
        continue;
      }
      double due = s->due;
      if (t_now_ms() >= due) break;
      struct timespec ts;
      tmutex_deadline(&ts, due - t_now_ms()); /* t_now_ms is monotonic */
      s->wsleep = 2;
      pthread_cond_timedwait(&s->work, &s->mu, &ts);
      s->wsleep = 0;
    }
    if (!s->qhead) break; /* stopping and drained */
    store_wop *q = s->qhead;
    s->qhead = s->qtail = NULL;
    s->nurgent = 0;
    s->progress = NULL; /* ops taken: later progress starts a new entry */
    /* held inserts (and their starts) stay queued, listed again; a later
     * finish no longer finds the others */
    store_wop *batch = store__hold_take(s, q, t_now_ms());
    pthread_mutex_unlock(&s->mu);
    lingered = 0;
    if (!batch) { /* every op held: sleep until the holds are looked at */
      pthread_mutex_lock(&s->mu);
      continue;
    }

    store__ckpt_writer(s);
    reserve_watch(0); /* a full disk: the reserve's room before the commit */
    run_batch(s, batch);
    for (store_wop *o = batch; o; o = o->next)
      if (o->rc == T_ENOSPACE) { /* full anyway: the room for the retries */
        reserve_release();
        break;
      }

    long long n = 0;
    store_wop *tail = batch;
    for (store_wop *o = batch; o; o = o->next) {
      n++;
      tail = o;
    }
    /* Counted before the wake-ups, so a caller sees its batch counted. */
    atomic_fetch_add_explicit(&s->n_batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->n_ops, n, memory_order_relaxed);
    /* The wake-ups and after-callbacks, in order, on store_done.c's
     * thread, while this one goes on with the next batch. */
    store__done_hand(s, batch, tail);
    pthread_mutex_lock(&s->mu);
  }
  s->writer_gone = 1;
  atomic_store(&s->alive, 0);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Append o. Wake the writer for the first urgent op (it takes the whole
 * queue), or for a lazy op when it sleeps with no deadline (it then sleeps
 * until the op is due). [s->mu] */
static int nothing_fn(sqstore *s, store_wop *o, terr *e) { return 0; }

/* See store_int.h. */
int store__op_empty(const store_wop *o) { return o->fn == nothing_fn; }

static void enqueue_locked(sqstore *s, store_wop *o) {
  o->next = NULL;
  o->absorbed = NULL;
  o->absorbed_insert = NULL;
  o->grouped = 0;
  o->queued_ms = t_now_ms();
  double due = o->queued_ms + STORE_LAZY_MS;
  if (o->absorb_id) { /* a finish: its job's start and insert may wait */
    store_wop *st = store__fold_take(s->fold, o->absorb_id, STORE_FOLD_START);
    if (st) {
      o->absorbed = st->arg;
      st->fn = nothing_fn;
    }
    store_wop *in = store__fold_take(s->fold, o->absorb_id, STORE_FOLD_INSERT);
    if (in) {
      o->absorbed_insert = in;
      in->fn = nothing_fn;
      in->row_of = NULL;
      in->hold = 0;
      atomic_fetch_add_explicit(&s->n_folds, 1, memory_order_relaxed);
    }
  } else if (o->start_id) {
    store_wop *in = store__fold_peek(s->fold, o->start_id, STORE_FOLD_INSERT);
    if (store__fold_put(s->fold, o, STORE_FOLD_START) != 0) {
      if (in) in->hold = 0; /* its finish could not take both */
    } else if (in && in->hold) { /* looked at with its insert */
      due = o->queued_ms + s->hold_run_ms;
    }
  } else if (o->insert_id) {
    int listed = store__fold_put(s->fold, o, STORE_FOLD_INSERT) == 0;
    o->hold = o->hold && listed && s->hold_run_ms > 0;
    o->hold_gen = s->hold_gen;
    if (o->hold) due = o->queued_ms + s->hold_run_ms;
  } else if (o->touch_id) { /* the row must be where the queue has it */
    (void)store__fold_take(s->fold, o->touch_id, STORE_FOLD_START);
    store_wop *in = store__fold_take(s->fold, o->touch_id, STORE_FOLD_INSERT);
    if (in) in->hold = 0;
  }
  if (o->barrier) s->hold_gen++; /* the inserts before it go with it */
  if (s->qtail) s->qtail->next = o;
  else s->qhead = o;
  s->qtail = o;
  if (o->lazy) {
    int sooner = due < s->due;
    if (sooner) s->due = due;
    if (s->wsleep == 1 || (sooner && s->wsleep == 2))
      pthread_cond_signal(&s->work);
  } else if (s->nurgent++ == 0) {
    pthread_cond_signal(&s->work);
  }
}

int store__write_op(sqstore *s, store_wop *o, terr *e) {
  sem_t done;
  store_wop op = *o;
  op.is_sync = 1;
  op.done = &done;
  sem_init(&done, 0, 0);
  pthread_mutex_lock(&s->mu);
  if (s->writer_gone || s->stopping) {
    pthread_mutex_unlock(&s->mu);
    sem_destroy(&done);
    return terr_set(e, T_EUNAVAIL, "", -1, "store: closing");
  }
  enqueue_locked(s, &op);
  pthread_mutex_unlock(&s->mu);
  while (sem_wait(&done) != 0) { /* EINTR: wait on */
  }
  sem_destroy(&done);
  if (op.rc && e) *e = op.err;
  return op.rc;
}

int store__write(sqstore *s, store_wfn fn, void *arg, terr *e) {
  store_wop op = {.fn = fn, .arg = arg};
  return store__write_op(s, &op, e);
}

int store__write_one(sqstore *s, store_wfn fn, void *arg, terr *e) {
  store_wop op = {.fn = fn, .arg = arg, .one_stmt = 1};
  return store__write_op(s, &op, e);
}

/* [sync] See store.h: an empty write; the queue is FIFO and batches commit
 * in order, so everything queued before it is committed (or failed) when it
 * returns. */
int sq_sync(sqstore *s, terr *e) {
  if (!s) return terr_set(e, T_EINVAL, "", -1, "store: not open");
  store_wop op = {.fn = nothing_fn, .one_stmt = 1, .barrier = 1};
  return store__write_op(s, &op, e);
}

/* Queue a heap op without waiting (see store_int.h). */
int store__write_async(sqstore *s, store_wop *o) {
  o->is_sync = 0;
  o->done = NULL;
  o->rc = 0;
  pthread_mutex_lock(&s->mu);
  if (s->writer_gone || s->stopping) {
    pthread_mutex_unlock(&s->mu);
    free(o);
    return T_EUNAVAIL;
  }
  enqueue_locked(s, o);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int progress_fn(sqstore *s, store_wop *o, terr *e) {
  sqlite3_stmt *st;
  int rc = store__stmt(&s->w,
                       "UPDATE jobs SET progress_done = ?2, progress_total = ?3"
                       " WHERE id = ?1 AND status = 'running'",
                       &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, o->job_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, o->pdone);
  sqlite3_bind_int64(st, 3, o->ptotal);
  return store__exec_stmt(&s->w, st, "progress", e);
}

/* [async] See store.h. Any thread; never blocks on the database. Coalesced
 * with the job's pending update; applied only while the job is running (a
 * late report after the finish changes nothing). Dropped when the store is
 * closing or memory is short. */
void sq_job_progress(sqstore *s, const char *id, int64_t done,
                        int64_t total) {
  if (!s || !id || strlen(id) >= T_ID_MAX) return;
  pthread_mutex_lock(&s->mu);
  if (s->writer_gone || s->stopping) goto out;
  /* Coalesce with this job's pending entry (few jobs run at once). */
  for (store_wop *o = s->progress; o; o = o->pnext) {
    if (strcmp(o->job_id, id) == 0) {
      o->pdone = done;
      o->ptotal = total;
      goto out;
    }
  }
  store_wop *o = calloc(1, sizeof *o);
  if (!o) goto out; /* loss-tolerant by contract */
  o->fn = progress_fn;
  o->one_stmt = 1;
  o->passable = 1;
  o->lazy = 1;
  snprintf(o->job_id, sizeof o->job_id, "%s", id);
  o->pdone = done;
  o->ptotal = total;
  o->pnext = s->progress;
  s->progress = o;
  enqueue_locked(s, o);
out:
  pthread_mutex_unlock(&s->mu);
}

/* SQLite's own memory statistics off, once, before its first connection:
 * with them every allocation and free inside SQLite took a global mutex
 * and updated counters (~20k instructions of a tiny job's INSERT and
 * UPDATE went to SQLite's allocator; tests/bench/README.md). Nothing here
 * reads them (sqlite3_memory_used, soft heap limits). Too late (SQLite
 * initialized by someone else first): SQLITE_MISUSE, harmless. */
static pthread_once_t sq_config_once = PTHREAD_ONCE_INIT;
static void sq_config(void) { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

/* ---- open / close ------------------------------------------------------- */

/* See store.h. Creates data_dir (and parents) when missing. Errors: T_EINVAL
 * (path), T_EIO (cannot create/open/migrate, with SQLite's words; also a
 * database written by a newer build), T_EINTERNAL (threads). */
int sq_open(const char *data_dir, sqstore **out, terr *e) {
  *out = NULL;
  if (!data_dir || !*data_dir)
    return terr_set(e, T_EINVAL, "data_dir", -1, "empty path");
  sqstore *s = calloc(1, sizeof *s);
  if (!s) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  int rc, have_key = 0, have_locks = 0;
  if ((size_t)snprintf(s->path, sizeof s->path, "%s/tessel.db", data_dir) >=
      sizeof s->path) {
    rc = terr_set(e, T_EINVAL, "data_dir", -1, "path too long");
    goto fail;
  }
  if (t_mkdirs(data_dir) != 0) {
    rc = terr_set(e, T_EIO, "data_dir", -1, "cannot create %s: %s", data_dir,
                  strerror(errno));
    goto fail;
  }
  pthread_once(&sq_config_once, sq_config);
  if (sqlite3_open_v2(s->path, &s->w.db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK) {
    rc = store__dberr(e, s->w.db, "open");
    goto fail;
  }
  sqlite3_extended_result_codes(s->w.db, 1);
  if ((rc = store__pragmas(s->w.db, 1, e))) goto fail;
  if ((rc = store__migrate(s->w.db, &s->version, e))) goto fail;
  if (pthread_key_create(&s->rkey, reader_destroy) != 0) {
    rc = terr_set(e, T_EINTERNAL, "", -1, "store: pthread_key_create failed");
    goto fail;
  }
  have_key = 1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->rmu, NULL);
  pthread_condattr_t mono;
  pthread_condattr_init(&mono);
  pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
  pthread_cond_init(&s->work, &mono);
  pthread_condattr_destroy(&mono);
  have_locks = 1;
  (void)store__recent_init(s); /* without memory for it: every read a SELECT */
  s->fold = store__fold_new(); /* without memory for it: no take-over */
  s->due = INFINITY;
  store__hold_config(s);
  if ((rc = store__ckpt_start(s, e))) goto fail;
  store__done_start(s); /* without its thread: the writer does it */
  atomic_store(&s->alive, 1);
  if (pthread_create(&s->writer, NULL, writer_main, s) != 0) {
    atomic_store(&s->alive, 0);
    rc = terr_set(e, T_EINTERNAL, "", -1, "store: cannot start the writer");
    goto fail;
  }
  /* named, so that top -H, perf and /proc/<pid>/task show its share
   * (tests/bench/README.md: the writer's CPU per job) */
  (void)pthread_setname_np(s->writer, "store-writer");
  *out = s;
  return 0;
fail:
  store__done_stop(s);
  store__ckpt_stop(s);
  if (have_locks) {
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->rmu);
    pthread_mutex_destroy(&s->mu);
  }
  if (have_key) pthread_key_delete(s->rkey);
  store__recent_free(s);
  store__fold_free(s->fold);
  conn_close(&s->w);
  free(s);
  return rc;
}

/* See store.h. Waits for the queued writes (async progress included) to
 * commit, stops the writer and the checkpointer, closes every connection
 * (readers of threads still alive too) and truncates the WAL. Call it once no
 * other thread uses the store. NULL ok. */
void sq_close(sqstore *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->writer, NULL); /* drains the queue first */
  /* the writer's figures (tests/bench/README.md: commits and folds per
   * job) */
  log_info("store: %lld commits of %lld writes, %lld ends folded into "
           "their insert", (long long)atomic_load(&s->n_batches),
           (long long)atomic_load(&s->n_ops),
           (long long)atomic_load(&s->n_folds));
  store__done_stop(s);           /* and the committed batches' callbacks */
  store__ckpt_stop(s);
  /* No destructor runs for this key after this; close what is left. */
  pthread_key_delete(s->rkey);
  pthread_mutex_lock(&s->rmu);
  store_conn *r = s->readers;
  s->readers = NULL;
  pthread_mutex_unlock(&s->rmu);
  while (r) {
    store_conn *next = r->next;
    conn_close(r);
    free(r);
    r = next;
  }
  /* A final checkpoint keeps the WAL small for the next start. */
  sqlite3_wal_checkpoint_v2(s->w.db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL,
                            NULL);
  conn_close(&s->w);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->rmu);
  pthread_mutex_destroy(&s->mu);
  store__recent_free(s);
  for (int i = 0; i < 4; i++) free(s->rows_sql[i]); /* store_rows.c's */
  free(s->rows);
  store__fold_free(s->fold);
  free(s);
}

/* 1 while the writer thread runs (any thread; for /readyz). */
int sq_ready(sqstore *s) { return s && atomic_load(&s->alive); }

/* The schema version the database was migrated to; 0 for NULL. */
int sq_schema_version(sqstore *s) { return s ? s->version : 0; }
