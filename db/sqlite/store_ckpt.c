/* store_ckpt.c — WAL checkpoints on a thread of their own.
 *
 * SQLite's default checkpoints run inside a COMMIT once the WAL passes 1000
 * pages, on the committing thread; with synchronous=NORMAL that is where the
 * only fsyncs happen (of the WAL and of the database), so the writer thread —
 * and every [sync] caller waiting on it — would stall for them. Instead the
 * writer connection has auto-checkpoints off and a WAL hook that, after a
 * commit leaves the WAL at STORE_CKPT_FRAMES frames or more, wakes this
 * thread, which runs a PASSIVE checkpoint on its own connection. In WAL mode
 * a checkpoint runs beside the writer and the readers without blocking them;
 * the WAL restarts from its beginning once a checkpoint has copied all of it.
 *
 * On a full data disk the writer finishes one every STORE_WAL_FULL_FRAMES
 * instead, which bounds the room the store's writes take from the reserve.
 * Otherwise the writer finishes one (the WAL then restarts) only once the
 * checkpointer's passes, asked for again after every batch while the WAL is
 * long, have left at most STORE_WAL_TAIL_FRAMES to copy: a writer that
 * copied a lagging checkpointer's backlog itself held every write for
 * 180-320 ms on the 2-core VM (issue 26's bound: 50 ms).
 *
 * Threads: ckpt_main runs on s->ckpt_thread; wal_hook (inside COMMIT) and
 * store__ckpt_writer (between batches) run on the writer thread and alone
 * touch wal_frames and ck_next. s->ckmu guards ck_want, ck_stop, ck_busy
 * and ck_hold.
 *
 * The writer's own checkpoint waits for a pass of the checkpointer thread
 * that is under way, and holds the next off until it is done (ck_busy,
 * ck_hold): two checkpoints cannot run at once, and a PASSIVE one that
 * meets another answers SQLITE_BUSY having copied nothing. Once the
 * writer stopped doing its batches' wake-ups and callbacks itself
 * (store_done.c), the thread, asked again after every batch while the WAL
 * was long, was nearly always inside a pass when the writer tried: the
 * writer's checkpoints copied nothing, the WAL never restarted and grew
 * past 100,000 frames with three test programs on 2 cores
 * (test_store_threads' test_wal_restarts). At the tail, a pass under way
 * has little left to copy (the WAL is within STORE_WAL_TAIL_FRAMES of
 * what the last pass copied), so the wait is short; at
 * STORE_WAL_HARD_FRAMES it is the bound's price.
 */
#include "db/sqlite/store_int.h"
#include "util/datadir.h"

/* Pages of WAL (4 KiB each) between two background checkpoints: SQLite's
 * default auto-checkpoint size. */
#define STORE_CKPT_FRAMES 1000
/* The WAL size at which the writer itself finishes a checkpoint:
 * STORE_WAL_MAX_FRAMES and its companions, store_int.h. The same while the data disk is full (util/datadir.h: its reserve given
 * to the store): the WAL restarts from its beginning every 64 pages, so
 * that deletes and bookkeeping on the reserve need at most ~256 KiB of WAL
 * however many they are (the sq_close before had truncated it to 0, and a
 * delete only frees pages of the database file). */
#define STORE_WAL_FULL_FRAMES 64

/* Ask the checkpointer thread for a pass (any thread). */
static void ckpt_ask(sqstore *s) {
  pthread_mutex_lock(&s->ckmu);
  if (!s->ck_want) {
    s->ck_want = 1;
    pthread_cond_broadcast(&s->ckcv);
  }
  pthread_mutex_unlock(&s->ckmu);
}

/* Writer thread, after each commit: frames = the WAL's size in pages. A
 * checkpoint copies frames to the database but the WAL only restarts from
 * its beginning when a write transaction starts with ALL frames copied, which
 * a checkpointer racing a busy writer never sees; so the hook asks for one
 * background checkpoint per STORE_CKPT_FRAMES of growth (not one per commit),
 * and store__ckpt_writer lets the writer finish the job when the WAL gets
 * long. */
static int wal_hook(void *ctx, sqlite3 *db, const char *name, int frames) {
  sqstore *s = ctx;
  if (frames < s->wal_frames) { /* restarted */
    s->ck_next = STORE_CKPT_FRAMES;
    atomic_fetch_add(&s->wal_gen, 1);
  }
  s->wal_frames = frames;
  if (frames < s->ck_next) return SQLITE_OK;
  s->ck_next = frames + STORE_CKPT_FRAMES;
  ckpt_ask(s);
  return SQLITE_OK;
}

void store__ckpt_writer(sqstore *s) {
  int full = reserve_full();
  if (s->wal_frames < (full ? STORE_WAL_FULL_FRAMES : STORE_WAL_MAX_FRAMES))
    return;
  /* A long backlog is the checkpointer's to copy, beside the writer; the
   * writer takes over only the last few frames (or a WAL far too long). */
  long long ck = atomic_load(&s->ck_done); /* copied of this WAL's run */
  int copied = (int)(ck >> 32) == atomic_load(&s->wal_gen)
                   ? (int)(ck & 0x7fffffff)
                   : 0;
  if (!full && s->wal_frames < STORE_WAL_HARD_FRAMES &&
      s->wal_frames - copied > STORE_WAL_TAIL_FRAMES) {
    ckpt_ask(s);
    return;
  }
  /* Most frames are already copied by the background checkpoints, so this
   * copies the tail and syncs; the next write transaction then restarts the
   * WAL (readers permitting), which wal_hook sees at that commit. */
  pthread_mutex_lock(&s->ckmu);
  s->ck_hold = 1;
  while (s->ck_busy) pthread_cond_wait(&s->ckcv, &s->ckmu);
  pthread_mutex_unlock(&s->ckmu);
  (void)sqlite3_wal_checkpoint_v2(s->w.db, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                  NULL, NULL);
  pthread_mutex_lock(&s->ckmu);
  s->ck_hold = 0;
  pthread_cond_broadcast(&s->ckcv);
  pthread_mutex_unlock(&s->ckmu);
  atomic_fetch_add_explicit(&s->n_checkpoints, 1, memory_order_relaxed);
}

static void *ckpt_main(void *arg) {
  sqstore *s = arg;
  pthread_mutex_lock(&s->ckmu);
  for (;;) {
    while (!(s->ck_want && !s->ck_hold) && !s->ck_stop)
      pthread_cond_wait(&s->ckcv, &s->ckmu);
    if (s->ck_stop) break;
    s->ck_want = 0;
    s->ck_busy = 1;
    pthread_mutex_unlock(&s->ckmu);
    int log = 0, done = 0, gen = atomic_load(&s->wal_gen);
    int rc = sqlite3_wal_checkpoint_v2(s->ckdb, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                       &log, &done);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
      log_warn("store: checkpoint: %s", sqlite3_errmsg(s->ckdb));
    if (rc == SQLITE_OK && done > 0 && gen == atomic_load(&s->wal_gen))
      atomic_store(&s->ck_done, (long long)gen << 32 | done);
    atomic_fetch_add_explicit(&s->n_checkpoints, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->ckmu);
    s->ck_busy = 0;
    pthread_cond_broadcast(&s->ckcv);
  }
  pthread_mutex_unlock(&s->ckmu);
  return NULL;
}

int store__ckpt_start(sqstore *s, terr *e) {
  if (sqlite3_open_v2(s->path, &s->ckdb,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK) {
    int rc = store__dberr(e, s->ckdb, "open checkpointer");
    sqlite3_close(s->ckdb);
    s->ckdb = NULL;
    return rc;
  }
  sqlite3_busy_timeout(s->ckdb, 5000);
  /* A connection that has read nothing has not opened the WAL: its
   * checkpoints answered SQLITE_OK with -1 frames and copied nothing, so
   * the writer copied the whole WAL itself (found measuring issue 26). */
  sqlite3_exec(s->ckdb, "SELECT count(*) FROM sqlite_master", NULL, NULL,
               NULL);
  pthread_mutex_init(&s->ckmu, NULL);
  pthread_cond_init(&s->ckcv, NULL);
  if (pthread_create(&s->ckpt_thread, NULL, ckpt_main, s) != 0) {
    pthread_cond_destroy(&s->ckcv);
    pthread_mutex_destroy(&s->ckmu);
    sqlite3_close(s->ckdb);
    s->ckdb = NULL;
    return terr_set(e, T_EINTERNAL, "", -1,
                    "store: cannot start the checkpointer");
  }
  /* Only now hand checkpoints over: until here SQLite's own ran. */
  s->ck_next = STORE_CKPT_FRAMES;
  sqlite3_wal_hook(s->w.db, wal_hook, s);
  return 0;
}

void store__ckpt_stop(sqstore *s) {
  if (!s->ckdb) return;
  sqlite3_wal_hook(s->w.db, NULL, NULL); /* the writer has exited */
  pthread_mutex_lock(&s->ckmu);
  s->ck_stop = 1;
  pthread_cond_broadcast(&s->ckcv);
  pthread_mutex_unlock(&s->ckmu);
  pthread_join(s->ckpt_thread, NULL);
  pthread_cond_destroy(&s->ckcv);
  pthread_mutex_destroy(&s->ckmu);
  sqlite3_close(s->ckdb);
  s->ckdb = NULL;
}
