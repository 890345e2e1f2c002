/* store_int.h — what the files of db/ share and nobody else sees.
 *
 * The store is split by concern: schema.c (migrations), store.c (open/close,
 * the writer thread, connections and their statement caches), store_jobs.c
 * and store_lifecycle.c (job rows and their transitions), store_rows.c (job
 * rows several to an INSERT), store_arrays.c and
 * store_stats.c (the operations), store_ops.c (steps those share),
 * store_ckpt.c (checkpoints). They meet here.
 *
 * Writes: an operation fills a store_wop (its function and a pointer to its
 * arguments) and hands it to store__write (sync: the caller waits on the op's
 * own semaphore until the writer has committed the batch holding it;
 * the arguments may live on the caller's stack) or, allocated on the heap
 * with its arguments, to store__write_async (async: the writer frees it).
 * The op function runs on the writer thread, inside a SAVEPOINT of the
 * batch's transaction (none for a one-statement op, see one_stmt), with
 * the writer connection s->w; it returns 0 or a terr code (and then its
 * savepoint is rolled back, nothing else).
 *
 * Reads: store__reader gives the calling thread's read-only connection to this
 * store (opened on first use, closed at thread exit or store_close).
 *
 * Both kinds of connection cache prepared statements: store__stmt returns a
 * reset statement with cleared bindings for an SQL text; call sqlite3_reset
 * when done so that a read transaction never outlives the call.
 */
#ifndef TESSEL_DB_STORE_INT_H
#define TESSEL_DB_STORE_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <string.h>

#include "db/store_backend.h"

/* A connection and its prepared statements (one thread uses it at a time). */
typedef struct sqstore sqstore;
typedef struct store_fold store_fold; /* store_fold.c */

typedef struct store_conn {
  sqlite3 *db;
  struct store_stmt *stmts; /* growable array, searched by hash + text */
  int nstmts;
  size_t capstmts;
  struct sqstore *owner_store; /* readers: for the registry */
  struct store_conn *prev, *next; /* readers: registry links (s->rmu) */
} store_conn;

typedef struct store_wop store_wop;
typedef int (*store_wfn)(sqstore *s, store_wop *op, terr *e);

/* A job row as one INSERT writes it (store_rows.c): the job (status and
 * devices included; its strings the op's) and the result's .npy bytes. */
typedef struct store_row {
  store_job j;
  const void *npy; /* NULL: none */
  size_t npy_len;
} store_row;

struct store_wop {
  store_wfn fn;
  void *arg;             /* operation arguments (caller owned) */
  int rc;                /* result, set by the writer */
  terr err;              /* detail of rc */
  int is_sync;           /* 1: a caller waits on done */
  sem_t *done;           /* the waiting caller's; posted after the commit */
  int one_stmt;          /* writes with at most one statement, which undoes
                            itself when it fails: no savepoint needed */
  int lazy;              /* async: need not wake the writer (STORE_LAZY_MS) */
  /* An [async] insert the writer may hold back in the queue while later
   * ops commit (store_fold.c: until its job ends, a barrier, an op that
   * names its job, or the hold's deadlines), so that its job's end folds
   * into it. Cleared when it may no longer be held. */
  int hold;
  unsigned hold_gen;     /* s->hold_gen when queued (a barrier bumps it) */
  /* A barrier: every insert queued before it commits no later than it
   * (store_sync, the [sync] inserts: rids.h's marks count on it). */
  int barrier;
  int keep;              /* writer, under s->mu: stays in the queue */
  double queued_ms;      /* t_now_ms when queued */
  /* async: called once the batch holding the op has committed (rc 0) or
   * failed, just before the op is freed, on store_done.c's thread (in
   * commit and queue order; the writer meanwhile runs the next batch);
   * NULL: a failure is logged. Must not block nor make a [sync] store
   * call. */
  void (*after)(sqstore *s, store_wop *op);
  /* A job's lazy start and its finish meet in the queue: a start op names
   * its job in start_id (listed in s->starts while queued); a finish op
   * names its job in absorb_id, and when it is queued while that job's
   * start still waits in the queue, the start op is emptied and its
   * arguments handed to the finish in `absorbed` (one UPDATE instead of
   * two; both are in the same batch, so they stay valid). */
  const char *start_id;
  const char *absorb_id;
  void *absorbed;
  /* The same for a job's async insert (store_jobs.c): an insert op names
   * its job in insert_id (in s->fold while queued); a finish queued while
   * it waits takes it over too (`absorbed_insert`, the op itself, emptied
   * in the queue): the writer then inserts the ended row, one INSERT and
   * no UPDATE. An op that names its job in touch_id (a [sync] start,
   * requeue, unstart, note) needs the row where the insert put it in the
   * queue: the insert is no longer taken over. */
  const char *insert_id;
  const char *touch_id;
  store_wop *absorbed_insert;
  /* An op whose whole write is one INSERT of a job row (an async insert;
   * a finish that took its insert over) may share a multi-row INSERT with
   * the like ops next to it in its batch (store_rows.c): row_of fills *out
   * and returns 0, or returns nonzero when the op must run alone (fn);
   * once the shared INSERT went in, row_done does what fn does after its
   * own INSERT (0 or a terr code). NULL: the op always runs alone. Writer
   * thread; the row's strings stay valid until the op is done. */
  int (*row_of)(store_wop *op, store_row *out);
  int (*row_done)(sqstore *s, store_wop *op, terr *e);
  int (*rows_fn)(sqstore *s, store_wop *op); /* store__run_rows, or NULL */
  int grouped;           /* writer: done by a shared INSERT, rc set */
  /* The op changes only the row of one job whose insert was queued
   * before it (a start, progress, finish, requeue): a multi-row INSERT of
   * later ops' rows (other jobs') may go in before it (store_rows.c). */
  int passable;
  store_wop *next;       /* queue link (s->mu) */
  /* async progress payload (heap ops, owned by the queue then the writer) */
  char job_id[T_ID_MAX];
  int64_t pdone, ptotal;
  store_wop *pnext;      /* s->progress or s->starts link (s->mu) */
};

struct sqstore {
  char path[4096];
  int version;                 /* schema version after migration */
  store_conn w;                /* the writer's connection: writer thread only
                                  (and store_open/close around it) */
  pthread_t writer;
  atomic_int alive;            /* writer thread running */

  pthread_mutex_t mu;          /* guards the queue fields below */
  pthread_cond_t work;         /* signalled when the queue gets an urgent op
                                  (CLOCK_MONOTONIC, for the lazy wait) */
  store_wop *qhead, *qtail;    /* FIFO of ops not yet taken by the writer */
  int nurgent;                 /* ops in the queue that are not lazy */
  int wsleep;                  /* the writer waits: 1 for any op, 2 for an
                                  urgent one or the lazy deadline, 3 for an
                                  urgent one or its linger's end (store.c's
                                  writer_main); 0 not */
  double due;                  /* t_now_ms by which the writer takes the
                                  queue without an urgent op (INFINITY:
                                  nothing lazy queued) */
  unsigned hold_gen;           /* bumped by every barrier op queued */
  double hold_run_ms;          /* the holds (store_fold.c): set at open */
  double hold_queued_ms;
  store_wop *progress;         /* async progress ops in the queue, by job */
  store_fold *fold;            /* lazy start and insert ops in the queue,
                                  by job (store.c); NULL: no memory, no
                                  take-over */
  int stopping;                /* store_close asked; drain then exit */
  int writer_gone;             /* the writer exited: writes fail at once */

  pthread_key_t rkey;          /* this store's reader connection per thread */
  pthread_mutex_t rmu;         /* guards the reader registry */
  store_conn *readers;         /* every open reader connection */

  /* the checkpointer (store_ckpt.c) */
  sqlite3 *ckdb;               /* its own connection: checkpointer thread */
  pthread_t ckpt_thread;
  pthread_mutex_t ckmu;        /* guards ck_want, ck_stop, ck_busy, ck_hold */
  pthread_cond_t ckcv;
  int ck_want, ck_stop;
  int ck_busy; /* the checkpointer thread is inside a pass */
  int ck_hold; /* the writer finishes one: no pass may start */
  atomic_int wal_frames;       /* written by the writer thread only (read
                                  by tests) */
  int ck_next;                 /* writer thread only */
  atomic_int wal_gen;          /* bumped by the writer when the WAL restarts */
  atomic_llong ck_done;        /* the last background checkpoint: the
                                  wal_gen it began in << 32 | frames it
                                  had copied */

  /* counters for the benchmark and tests (relaxed atomics) */
  atomic_llong n_batches, n_ops, n_checkpoints;
  /* inserts a finish took over (at enqueue), and async inserts that
   * failed (their own or the finish's that took them over) */
  atomic_llong n_folds, n_insert_failed;
  /* rows that went in through a multi-row INSERT (store_rows.c) */
  atomic_llong n_rows_grouped;
  /* The last STORE_INSERT_ERRS failed async inserts' errors by job id (a
   * ring; under mu): so an answer names why (sq_insert_error). */
  struct {
    char id[T_ID_MAX];
    terr err;
  } ins_err[STORE_INSERT_ERRS];
  unsigned ins_err_next;

  /* store_done.c: committed batches waiting for their wake-ups and
   * after-callbacks (one chain, in commit order; under dmu), and the
   * thread that does them. */
  pthread_mutex_t dmu;
  pthread_cond_t dcv;
  store_wop *dhead, *dtail;
  int dstop;             /* under dmu: drain, then exit */
  int dinit, dlive;      /* lock made; thread running (open/close only) */
  pthread_t dthread;

  struct store_recent *recent; /* store_recent.c; NULL: none (no memory) */
  /* store_rows.c: the multi-row INSERTs' texts, built on first use by
   * the writer thread (writer only; freed by sq_close). */
  char *rows_sql[4];
  store_row *rows; /* a run's rows, STORE_ROWS_RUN of them */
};

/* schema.c: migrate the writer connection to the newest version. */
int store__migrate(sqlite3 *db, int *version, terr *e);
/* Apply the connection pragmas common to readers and the writer. */
int store__pragmas(sqlite3 *db, int writer, terr *e);

/* store_ckpt.c: the WAL size (frames) at which the writer itself finishes
 * a checkpoint (the WAL then restarts), once the background checkpoints
 * have copied all but STORE_WAL_TAIL_FRAMES (its copy and sync then take
 * a few ms, not the hundreds of ms of a lagging checkpointer's backlog
 * that every write would wait for: issue 26's single submit behind a batch
 * of 10,000), or at STORE_WAL_HARD_FRAMES however far behind they are. */
#define STORE_WAL_MAX_FRAMES 8000
#define STORE_WAL_TAIL_FRAMES 256
#define STORE_WAL_HARD_FRAMES (4 * STORE_WAL_MAX_FRAMES)
/* store_ckpt.c: start the checkpointer thread and route the writer
 * connection's checkpoints to it (before the writer thread starts); stop it
 * (after the writer thread exited). */
int store__ckpt_start(sqstore *s, terr *e);
void store__ckpt_stop(sqstore *s);
/* Writer thread, between batches: when the WAL is long, finish a checkpoint
 * so that the next transaction restarts the WAL. */
void store__ckpt_writer(sqstore *s);

/* store_done.c: the thread that finishes committed batches (wakes each
 * [sync] caller, runs each [async] op's after-callback, frees it), in
 * commit order. start before the writer thread (without a thread the
 * writer finishes its batches itself); hand, on the writer, a committed
 * batch (its ops from batch to tail, linked by next; tail->next NULL);
 * stop after the writer thread exited (drains first). */
void store__done_start(sqstore *s);
void store__done_hand(sqstore *s, store_wop *batch, store_wop *tail);
void store__done_stop(sqstore *s);

/* store_recent.c: the committed rows of recently ended jobs (see there).
 * init at open (T_ENOMEM leaves it off), free at close; gen on the writer
 * when a finish reads its row back, put on the writer once that commit
 * is done (dropped when a forget came between); forget (id, or NULL: all)
 * on the writer inside a delete's or expiry's op, before its commit; get
 * on any thread: 1 when it answered (*rc: T_OK with *out filled, or
 * T_ENOTFOUND for another owner's job), 0 to read the store. */
typedef struct store_recent store_recent;
int store__recent_init(sqstore *s);
void store__recent_free(sqstore *s);
uint64_t store__recent_gen(sqstore *s);
void store__recent_put(sqstore *s, const store_job *row, uint64_t gen);
int store__recent_get(sqstore *s, const char *id, const char *owner,
                      store_job *out, int *rc, terr *e);
void store__recent_forget(sqstore *s, const char *id);
void store__recent_counts(sqstore *s, int64_t *hits, int64_t *misses);

/* store.c */
int store__stmt(store_conn *c, const char *sql, sqlite3_stmt **out, terr *e);
int store__reader(sqstore *s, store_conn **out, terr *e);
int store__write(sqstore *s, store_wfn fn, void *arg, terr *e);
/* [sync] with an op the caller prepared (fn, arg, one_stmt, absorb_id). */
int store__write_op(sqstore *s, store_wop *op, terr *e);
/* The same for an op that writes with at most one statement (see
 * store_wop.one_stmt): it skips the savepoint. */
int store__write_one(sqstore *s, store_wfn fn, void *arg, terr *e);
/* Queue o (malloc()ed, the op first in its allocation so that free(o)
 * frees its arguments too; fn, arg, one_stmt, lazy and after set) and
 * return at once; the writer runs it in a later batch, calls o->after (or
 * logs a failure), and frees it. A lazy op does not wake the writer: it
 * goes with the next urgent op's batch, or after STORE_LAZY_MS at the
 * latest. When the store is closing, o is freed here (after not called)
 * and T_EUNAVAIL returned. */
#define STORE_LAZY_MS 5.0
int store__write_async(sqstore *s, store_wop *o);
/* How long the writer holds back an [async] insert (store_wop.hold) whose
 * job has not ended: until the job has run STORE_HOLD_RUN_MS (its start
 * op queued that long ago), and never past STORE_HOLD_QUEUED_MS after the
 * insert was queued; $TESSEL_STORE_HOLD_MS="RUN[,QUEUED]" sets them at
 * open ("0": no hold). store_fold.c says why these. */
#define STORE_HOLD_RUN_MS 2.0
#define STORE_HOLD_QUEUED_MS 20.0

/* store_fold.c: the fold table (the lazy starts and async inserts in the
 * queue by job id, for a finish to take over) and the held inserts.
 * [s->mu] for all. */
enum { STORE_FOLD_START = 1, STORE_FOLD_INSERT = 2 };
store_fold *store__fold_new(void); /* NULL: no memory (no take-over) */
void store__fold_free(store_fold *f);
/* List o under (its id, kind): 0; -1 when out of memory (not listed). */
int store__fold_put(store_fold *f, store_wop *o, int kind);
/* The op of (id, kind) taken out of the table (take) or left there
 * (peek); NULL if none. */
store_wop *store__fold_take(store_fold *f, const char *id, int kind);
store_wop *store__fold_peek(store_fold *f, const char *id, int kind);
/* The writer took the queue: every entry goes. */
void store__fold_clear(store_fold *f);
/* The writer takes the queue (s->qhead..., already unlinked from s):
 * the ops that stay queued (held inserts and their jobs' starts) go back
 * to the queue, listed again, and s->due is set; returns the rest, the
 * batch to run. Clears the fold table. */
store_wop *store__hold_take(sqstore *s, store_wop *q, double now);
/* Read $TESSEL_STORE_HOLD_MS into s (at open). */
void store__hold_config(sqstore *s);
/* SQLite's error as the store's: SQLITE_FULL (the disk or the data dir's
 * file system is full) is T_ENOSPACE, 507 at submit, "resource_exhausted"
 * for a job; anything else T_EIO. Inline here, not in store.c, so that
 * schema.c and store_ckpt.c, which store.c calls, do not call it back
 * (issue 24's file circles). */
static inline int store__dberr(terr *e, sqlite3 *db, const char *what) {
  int full = db && (sqlite3_errcode(db) & 0xff) == SQLITE_FULL;
  return terr_set(e, full ? T_ENOSPACE : T_EIO, "", -1, "store: %s: %s", what,
                  db ? sqlite3_errmsg(db) : "no database");
}
/* Step a statement that returns no row: 0 or T_EIO (statement is reset). */
int store__exec_stmt(store_conn *c, sqlite3_stmt *st, const char *what,
                     terr *e);
/* Writer thread: step a bound INSERT on s->w (statement is reset). 0;
 * T_ECONFLICT on a constraint (a taken id), "<noun> <id>: <sqlite
 * message>" on field "id"; else T_EIO "insert <noun>". */
int store__exec_insert(sqstore *s, sqlite3_stmt *st, const char *noun,
                       const char *id, terr *e);
/* The calling thread's reader connection (*c) and its cached statement for
 * sql (*st, reset, bindings cleared): store__reader then store__stmt. */
int store__read_stmt(sqstore *s, const char *sql, store_conn **c,
                     sqlite3_stmt **st, terr *e);

/* A delete by id (store_job_delete, store_array_delete): fn's op->arg is a
 * store_del_args on the caller's stack; fn checks id and owner (NULL: any),
 * deletes the row and sets path (heap) to the file the caller removes. */
typedef struct store_del_args {
  const char *id, *owner;
  char *path; /* out, heap */
  /* out (a job's delete): more files, each heap, in a heap array */
  char **more;
  int nmore;
  size_t cap;
} store_del_args;
/* [sync] Run fn (with store__write_one when one_stmt, else store__write).
 * On success *path (path may be NULL: then freed) is the caller's; on
 * failure *path is NULL. */
int store__delete(sqstore *s, store_wfn fn, int one_stmt, const char *id,
                  const char *owner, char **path, terr *e);
/* Writer thread, in such an fn: select a->id's row with sql (?1 the id,
 * column 0 the owner). 0: *st is on the row (read it, then sqlite3_reset);
 * else a terr code, statement reset: T_ENOTFOUND "no <noun> <id>" when
 * absent or another owner's (a->owner NULL: any), T_EIO "delete <noun>". */
int store__del_find(sqstore *s, const store_del_args *a, const char *sql,
                    const char *noun, sqlite3_stmt **st, terr *e);
/* Writer thread: how many queued or running jobs' params mention id (an
 * array, or a job whose result is a chained input), 0 when none, negative
 * (e filled) on a database error; first[T_ID_MAX] gets the smallest such
 * job's id (the earliest: ids sort by creation), for the 409 that names
 * what blocks a delete. Ids are unique random-tailed strings, so a
 * substring search of the params text finds exactly the references; the
 * index jobs_unfinished keeps the scan to the unfinished jobs. */
int store__referenced(sqstore *s, const char *id, char *first, terr *e);
/* Step st (its parameters bound) and append column 0 of every row that is
 * not NULL to (*paths, *n, *cap) as heap strings; resets st. 0, T_ENOMEM
 * or T_EIO ("what"). The part files of jobs: store_job_delete, store_expire. */
int store__collect_paths(sqstore *s, sqlite3_stmt *st, char ***paths, int *n,
                         size_t *cap, const char *what, terr *e);
/* The part files ("path" of result_parts' entries) of the jobs `old`
 * that the condition appended to this text selects. */
#define STORE_PART_PATHS_SQL                                                  \
  "SELECT json_extract(p.value, '$.path') FROM jobs AS old,"                  \
  " json_each(old.result_parts) AS p WHERE old.result_parts IS NOT NULL"      \
  " AND json_valid(old.result_parts) AND "
/* Writer thread: run the DELETE sql with ?1 bound to id; 0 or T_EIO
 * "delete <noun>". */
int store__del_exec(sqstore *s, const char *sql, const char *id,
                    const char *noun, terr *e);

/* Bind helpers: NULL strings bind NULL; text is copied (SQLITE_TRANSIENT is
 * not needed: statements are stepped before the caller's string goes). */
static inline int store__bind_text(sqlite3_stmt *st, int i, const char *v) {
  return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC)
           : sqlite3_bind_null(st, i);
}
/* A heap copy of a text column; NULL for SQL NULL. Sets *oom on failure. */
char *store__col_dup(sqlite3_stmt *st, int i, int *oom);

/* A job's start as the start op carries it (store_lifecycle.c), for the
 * finish that takes it over. */
typedef struct store_start_args {
  const char *id, *backend_used, *reason, *estimate;
  int64_t started_at;
} store_start_args;
/* store_jobs.c, writer thread, in a finish's op that took over the async
 * insert `ins` (and maybe the start sa): insert the row as the insert,
 * the start and the end x would have left it. 0; or the insert's error,
 * also set on ins (so that its after-callback counts and logs it), and
 * the statement undone: the caller then runs the finish as if it had
 * taken nothing over (its row is missing: the same outcome as before). */
int store__insert_ended(sqstore *s, store_wop *ins, const store_start_args *sa,
                        const store_job_end *x, terr *e);

/* store_rows.c, writer thread, run_batch's store_wop.rows_fn of the ops
 * that may lead a run: from o on, the ops whose rows may share a multi-row
 * INSERT, inserted together (see store_rows.c). 0 (each op it did is
 * grouped, its rc set; the others untouched); -1 when an error ended the
 * whole transaction (the ops that went in failed, grouped). */
#define STORE_ROWS_MAX 64
#define STORE_ROWS_RUN (4 * STORE_ROWS_MAX) /* rows per run, at most */
int store__run_rows(sqstore *s, store_wop *o);
/* store.c: 1 for an op that writes nothing (emptied by a take-over, a
 * sync). */
int store__op_empty(const store_wop *o);
/* store_rows.c, writer thread: insert one row with the one-row statement;
 * 0, or store__exec_insert's error. */
int store__insert_row(sqstore *s, const store_row *r, terr *e);
/* store_rows.c: bind r's job at the job INSERT's parameters ?base+1 ..
 * ?base+43 in the column order of STORE_ROWS_COLS (status, devices and the
 * .npy bytes included; r's strings bound SQLITE_STATIC). */
#define STORE_ROWS_COLS STORE_JOB_COLS ", result_npy"
#define STORE_ROW_PARAMS 43
void store__bind_row(sqlite3_stmt *st, int base, const store_row *r);
/* store_jobs.c: the row the async insert `ins` (and the start sa, and the
 * end x) leave, in *out (shallow: its strings are ins's, sa's and x's).
 * Nonzero when the insert must run as its own op (its params reference an
 * array or a job: refs_exist). */
int store__ended_row(store_wop *ins, const store_start_args *sa,
                     const store_job_end *x, store_row *out);

/* store_jobs.c: a row selected with the job column list (STORE_JOB_COLS,
 * db/store_common.h) is read into *j by store__job_row. store_rows.c: the
 * typed timings and result of a job: bind them at the
 * statement's parameters t[i] (the JOB_T_* order) and r[4] (dtype, shape,
 * bytes, nonconverged); read them from the STORE_JOB_COLS columns. */
void store__bind_timings(sqlite3_stmt *st, const job_timings *t,
                         const int idx[JOB_T__COUNT]);
void store__bind_result(sqlite3_stmt *st, const job_result_info *r,
                        const int idx[4]);
int store__job_row(sqlite3_stmt *st, store_job *j);

/* The async ops keep their strings in the op's own allocation: the bytes
 * s needs (0 for NULL), and copying it to *p (advancing it; NULL for
 * NULL). */
static inline size_t store__str_size(const char *s) {
  return s ? strlen(s) + 1 : 0;
}
static inline const char *store__pack_str(char **p, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  memcpy(*p, s, n);
  const char *out = *p;
  *p += n;
  return out;
}

/* The SQLite backend's operations (store.h's, on the SQLite handle). */
int sq_open(const char *data_dir, sqstore **out, terr *e);
void sq_close(sqstore *s);
int sq_ready(sqstore *s);
int sq_schema_version(sqstore *s);
int sq_job_insert(sqstore *s, store_job *j, int *existing, terr *e);
int sq_job_insert_async(sqstore *s, store_job *j, terr *e);
int sq_insert_error(sqstore *s, const char *id, terr *out);
int sq_job_insert_many(sqstore *s, store_job *jobs, int n, int *existing, int *rcs, terr *errs, terr *e);
int sq_sync(sqstore *s, terr *e);
int sq_job_get(sqstore *s, const char *id, const char *owner, store_job *out, terr *e);
int sq_job_by_request(sqstore *s, const char *owner, const char *rid, store_job *out, terr *e);
int sq_job_list(sqstore *s, const store_job_filter *f, store_job **jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e);
int sq_job_start(sqstore *s, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate, terr *e);
void sq_job_start_async(sqstore *s, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate);
void sq_job_progress(sqstore *s, const char *id, int64_t done, int64_t total);
int sq_job_finish(sqstore *s, const char *id, const store_job_end *end, terr *e);
int sq_job_finish_async(sqstore *s, const char *id, const store_job_end *end, store_finish_fn cb, void *arg, terr *e);
int sq_job_result_npy(sqstore *s, const char *id, const char *owner, void **npy, size_t *len, terr *e);
int sq_job_requeue(sqstore *s, const char *id, terr *e);
int sq_job_unstart(sqstore *s, const char *id, terr *e);
int sq_job_note_start(sqstore *s, const char *id, int attempt, terr *e);
int sq_job_delete(sqstore *s, const char *id, const char *owner, char ***paths, int *npaths, terr *e);
int sq_job_unfinished(sqstore *s, store_job **jobs, int *n, terr *e);
int sq_expire(sqstore *s, int64_t before_ms, char ***paths, int *npaths, terr *e);
int sq_stats(sqstore *s, const char *owner, store_stat **rows, int *n, terr *e);
int sq_job_counts(sqstore *s, const char *owner, int64_t counts[5], terr *e);
int sq_finished_by_step(sqstore *s, const char *owner, int64_t since_ms, int64_t step_ms, int nsteps, int64_t *counts, terr *e);
int sq_array_insert(sqstore *s, store_array *a, int *existing, terr *e);
int sq_array_get(sqstore *s, const char *id, const char *owner, store_array *out, terr *e);
int sq_array_delete(sqstore *s, const char *id, const char *owner, char **path, terr *e);
int sq_array_list(sqstore *s, const char *owner, const char *cursor, int limit, store_array **arrays, int *n, char *next_cursor, terr *e);
int sq_job_children(sqstore *s, const char *parent_id, store_job **jobs, int *n, terr *e);

#endif
