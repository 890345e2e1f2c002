/* pg_cluster.c — the cluster entries of the PostgreSQL store: nodes, claims,
 * leases, the reaper, cancel requests and LISTEN/NOTIFY (store.h "cluster").
 *
 * Every time here is the store's clock (PG_CLOCK: clock_timestamp() on the
 * server, in wall ms), never a node's: leases and heartbeats of nodes whose
 * clocks disagree compare on one clock.
 *
 *  - A claim is one statement: MATERIALIZED CTEs pick queued, unclaimed
 *    rows within the node's room (store_claim_room: cuda ones up to its
 *    free GPU workers, serial/cpu/compare up to its free CPU workers, auto
 *    up to what is left), each priority first, then id (ids sort by
 *    creation time); split parents — tiles > 0, no parent —
 *    only with parents, the coordinator's claim, which takes every other
 *    job too: compute/sched/cluster.c has one claimer and passes parents = 1)
 *    FOR UPDATE SKIP LOCKED, and the UPDATE stamps them with the node, the
 *    lease and attempts + 1, returning the rows. Two nodes never get the
 *    same row: a row one claimer has locked is skipped by the other, and
 *    once committed it is no longer unclaimed. (The CTE rather than
 *    `id IN (subquery)`: it is evaluated exactly once, so LIMIT holds.)
 *  - A heartbeat is one transaction: the node row (with the node's lease,
 *    by which node lists judge it alive), the renewal of every
 *    lease the node holds on an unfinished job, then the cancel requests
 *    among those and the ids it believes it holds but does not (lost: the
 *    row is claimed by another node, back in the queue, ended, or gone).
 *  - The reaper runs under pg_try_advisory_xact_lock(7243002) (one node at
 *    a time; the others return at once with nothing): unfinished claimed
 *    jobs whose lease ended end canceled when a cancel was asked for them
 *    (their node can no longer stop them), else fail "crashed" when their
 *    attempts reached max_attempts, else go back to the queue unclaimed
 *    (attempts kept: they were counted at the claim). Each sends
 *    "end:<id>" / "queued:<id>" in the same statement (pg_notify,
 *    delivered on commit) and returns the job's attempts: the run the dead
 *    node was making, whose temporaries the caller removes.
 *  - A cancel request locks the row (FOR UPDATE) and either ends a queued,
 *    unclaimed job here or sets cancel_requested and tells its node.
 *  - The listener: one thread per store on a connection of its own
 *    (pg__connect, LISTEN tessel), polling the socket and a stop pipe; each
 *    "<what>:<id>" is handed to every registered callback. A lost
 *    connection is retried with backoff (100 ms doubling to 2 s); once back
 *    every callback gets "reset" (events may have been missed). A
 *    connection quiet for PG_LISTEN_PROBE_MS gets a "SELECT 1"; unanswered
 *    as long again, it counts as lost (a server that stopped answering
 *    without closing the socket).
 *
 * Per-store state of this file (the listener, this store's last lease: it
 * judges the liveness of node rows that have none of their own) lives in a
 * `pgcl` found by the store's pointer in a small
 * registry (reg_mu), so pg_store.c's struct needs no fields of ours; it is
 * made on first use and freed by pg__listen_stop at store close.
 *
 * The [sync] entries run through pg__write (after every earlier [async]
 * write of this store committed, in one transaction) and the reads through
 * pg__read, so store.h's write order and store_ready hold for them too;
 * the claim alone runs through pg__write_now (no queued op writes the
 * committed, unclaimed rows it takes: store.h says so).
 *
 * Threads and locks: every entry may be called from any thread; each
 * borrows a pool connection for its call. reg_mu (the registry) is taken
 * before a pgcl's mu, never the other way. pgcl.mu guards the callbacks and
 * is held while the listener thread calls them, so store_unlisten returns
 * only once its callback can no longer run; a callback may store_unlisten
 * (no lock is taken on the listener thread) but not store_listen, and must
 * not block. Only
 * store_listen / store_unlisten and the listener take pgcl.mu (the lease is
 * atomic), so a caller holding its own locks elsewhere cannot meet a
 * callback that takes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/pg/pg_int.h"
#include "util/buf.h"
#include "util/vec.h"

/* The store's clock in wall ms (spec: leases and heartbeats use it). */
#define PG_CLOCK "((extract(epoch from clock_timestamp()) * 1000)::bigint)"
#define PG_REAP_LOCK "7243002"
#define PG_UNFINISHED "status IN ('queued','running')"
/* A claimed job whose node stopped renewing its lease (the reaper's). */
#define PG_LEASE_EXPIRED \
  PG_UNFINISHED " AND node IS NOT NULL AND lease_until < " PG_CLOCK
/* The columns of a job the reaper ends now (with its status and error). */
#define PG_ENDED_NOW                                                  \
  " finished_at = " PG_CLOCK ", lease_until = NULL, t_total = (" PG_CLOCK \
  " - created_at)::double precision"
/* Until a node heartbeats with its own lease: the scheduler's default. */
#define PG_LEASE_MS_DEFAULT 10000
#define PG_LISTEN_BACKOFF_MIN_MS 100
#define PG_LISTEN_BACKOFF_MAX_MS 2000
#define PG_EVENT_WHAT_MAX 16
/* After this long without a byte the listener asks the server (SELECT 1);
 * no answer within as long again: the connection is lost (a server or
 * network gone without closing it). */
#define PG_LISTEN_PROBE_MS 10000

/* ---- per-store state ----------------------------------------------------- */
typedef struct pg_sub {
  uint64_t token;
  store_event_fn cb;
  void *arg;
} pg_sub;

typedef struct pgcl {
  pgstore *p;
  struct pgcl *next; /* [reg_mu] */
  pthread_mutex_t mu;
  TVEC(pg_sub) subs;        /* [mu] */
  uint64_t next_token;      /* [mu] */
  _Atomic int64_t lease_ms; /* the last heartbeat's lease (no lock) */
  _Atomic int started;      /* set under mu, once: the listener runs */
  int stopfd[2];            /* a pipe: a byte in [0] stops the thread */
  pthread_t thread;
  PGconn *conn; /* the listener's; its thread's once started */
} pgcl;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pgcl *reg; /* [reg_mu] */

/* The store's pgcl, made when create and absent; NULL when absent (or no
 * memory: T_ENOMEM in e). */
static pgcl *cl_of(pgstore *p, int create, terr *e) {
  pthread_mutex_lock(&reg_mu);
  pgcl *c = reg;
  while (c && c->p != p) c = c->next;
  if (!c && create) {
    c = calloc(1, sizeof *c);
    if (c) {
      c->p = p;
      atomic_init(&c->lease_ms, PG_LEASE_MS_DEFAULT);
      c->stopfd[0] = c->stopfd[1] = -1;
      c->next_token = 1;
      pthread_mutex_init(&c->mu, NULL);
      c->next = reg;
      reg = c;
    } else if (e) {
      terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    }
  }
  pthread_mutex_unlock(&reg_mu);
  return c;
}

static int64_t lease_of(pgstore *p) {
  pgcl *c = cl_of(p, 0, NULL);
  return c ? atomic_load(&c->lease_ms) : PG_LEASE_MS_DEFAULT;
}

/* ---- small helpers ---------------------------------------------------------
 */
static int oom(terr *e) {
  return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
}

static int64_t col_i64(PGresult *r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0
                                  : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Column 0 of every row of the results r[0..nr) as one new array of heap
 * strings (*out NULL when none). */
static int ids_of(PGresult *const *r, int nr, char ***out, int *n, terr *e) {
  *out = NULL;
  *n = 0;
  int rows = 0;
  for (int k = 0; k < nr; k++) rows += r[k] ? PQntuples(r[k]) : 0;
  if (rows == 0) return T_OK;
  char **v = calloc((size_t)rows, sizeof *v);
  if (!v) return oom(e);
  int i = 0;
  for (int k = 0; k < nr; k++)
    for (int row = 0; r[k] && row < PQntuples(r[k]); row++, i++)
      if (!(v[i] = strdup(PQgetvalue(r[k], row, 0)))) {
        while (i > 0) free(v[--i]);
        free(v);
        return oom(e);
      }
  *out = v;
  *n = rows;
  return T_OK;
}

/* ids as a PostgreSQL text[] literal: {"a","b"} (quotes and backslashes
 * escaped). Heap; NULL on no memory. */
static char *text_array(const char *const *ids, int n) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "{");
  for (int i = 0; i < n; i++) {
    tbuf_adds(&b, i ? ",\"" : "\"");
    for (const char *s = ids[i]; *s; s++) {
      if (*s == '"' || *s == '\\') tbuf_add(&b, "\\", 1);
      tbuf_add(&b, s, 1);
    }
    tbuf_adds(&b, "\"");
  }
  tbuf_adds(&b, "}");
  return tbuf_take(&b, NULL);
}

/* One statement as a pg_txfn (pg__read / pg__write): the parameters and
 * the result (NULL when not kept) in a stmt. */
typedef struct stmt {
  const char *sql, *what;
  int n;
  const char *const *vals;
  PGresult *res;
  int keep;
} stmt;

static int stmt_fn(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  stmt *s = arg;
  return pg__exec(c, s->sql, s->n, s->vals, s->keep ? &s->res : NULL, s->what,
                  e);
}

/* ---- nodes ------------------------------------------------------------------
 */
int pg_node_register(void *impl, store_node *n, terr *e) {
  pgstore *p = impl;
  char threads[32], gpus[32], lease[32];
  t_id_new('n', n->id);
  const char *v[] = {n->id,
                     n->name ? n->name : "",
                     n->url ? n->url : "",
                     pg__i64(threads, n->threads),
                     pg__i64(gpus, n->gpus),
                     n->version ? n->version : "",
                     n->lease_ms > 0 ? pg__i64(lease, n->lease_ms) : NULL};
  stmt s = {
      "INSERT INTO nodes (id, name, url, threads, gpus, version,"
      " started_at, heartbeat_at, running, queued, lease_ms)"
      " VALUES ($1, $2, $3, $4::int, $5::int, $6, " PG_CLOCK ", " PG_CLOCK
      ", 0, 0, $7::bigint) RETURNING started_at",
      "node register",
      7,
      v,
      NULL,
      1};
  int rc = pg__write(p, stmt_fn, &s, e);
  if (rc == T_OK) {
    n->started_at = n->heartbeat_at = col_i64(s.res, 0, 0);
    n->alive = 1;
    n->running = n->queued = 0;
    n->jobs_done = 0;
    pg__set_node(p, n->id);
  }
  PQclear(s.res);
  return rc;
}

typedef struct hb_args {
  const store_node *n;
  const char *lease, *held; /* text: ms; text[] literal */
  PGresult *cancel, *lost;
} hb_args;

static int heartbeat_fn(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  hb_args *a = arg;
  char running[32], queued[32], load[32], done[32];
  const char *vn[] = {a->n->id, pg__i64(running, a->n->running),
                      pg__i64(queued, a->n->queued),
                      isfinite(a->n->load) ? pg__f64(load, a->n->load) : NULL,
                      pg__i64(done, a->n->jobs_done), a->lease};
  const char *vl[] = {a->n->id, a->lease};
  const char *vh[] = {a->n->id, a->held};
  /* Lock order: the job rows are renewed in id order and those another
   * transaction holds (a start or finish of this very node, which ends the
   * lease's need anyway) are skipped, so a heartbeat never waits on, nor
   * deadlocks with, the writer's batches; the node row is this node's
   * alone (jobs_done is its own count, not bumped by each finish). */
  int rc = pg__exec(c,
                    "UPDATE jobs SET lease_until = " PG_CLOCK " + $2::bigint"
                    " WHERE id IN (SELECT id FROM jobs WHERE node = $1 AND "
                    PG_UNFINISHED " ORDER BY id FOR UPDATE SKIP LOCKED)",
                    2, vl, NULL, "lease renewal", e);
  if (!rc)
    rc = pg__exec(c,
                  "UPDATE nodes SET heartbeat_at = " PG_CLOCK ","
                  " running = $2::int, queued = $3::int,"
                  " load = $4::double precision, jobs_done = $5::bigint,"
                  " lease_ms = $6::bigint WHERE id = $1",
                  6, vn, NULL, "heartbeat", e);
  if (!rc)
    rc = pg__exec(c,
                  "SELECT id FROM jobs WHERE node = $1 AND " PG_UNFINISHED
                  " AND cancel_requested ORDER BY id",
                  1, vl, &a->cancel, "cancel requests", e);
  if (!rc)
    rc =
        pg__exec(c,
                 "SELECT h.id FROM unnest($2::text[]) AS h(id) WHERE NOT EXISTS"
                 " (SELECT 1 FROM jobs j WHERE j.id = h.id AND j.node = $1"
                 " AND j." PG_UNFINISHED ")",
                 2, vh, &a->lost, "lost jobs", e);
  return rc;
}

int pg_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms,
                      const char *const *held, int nheld, char ***cancel,
                      int *ncancel, char ***lost, int *nlost, terr *e) {
  pgstore *p = impl;
  *cancel = *lost = NULL;
  *ncancel = *nlost = 0;
  if (lease_ms <= 0)
    return terr_set(e, T_EINVAL, "lease_ms", -1, "lease must be positive");
  pgcl *cl = cl_of(p, 1, e);
  if (!cl) return T_ENOMEM;
  atomic_store(&cl->lease_ms, lease_ms);
  char lease[32];
  hb_args a = {n, pg__i64(lease, lease_ms), text_array(held, nheld), NULL,
               NULL};
  if (!a.held) return oom(e);
  int rc = pg__write(p, heartbeat_fn, &a, e);
  free((char *)a.held);
  if (!rc) rc = ids_of(&a.cancel, 1, cancel, ncancel, e);
  if (!rc && (rc = ids_of(&a.lost, 1, lost, nlost, e))) {
    for (int i = 0; i < *ncancel; i++) free((*cancel)[i]);
    free(*cancel);
    *cancel = NULL;
    *ncancel = 0;
  }
  PQclear(a.cancel);
  PQclear(a.lost);
  return rc;
}

static int leave_fn(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  const char *v[] = {arg};
  int rc =
      pg__exec(c,
               "WITH r AS (UPDATE jobs SET node = NULL, lease_until = NULL,"
               " attempts = GREATEST(attempts - 1, 0)"
               " WHERE node = $1 AND status = 'queued' RETURNING id)"
               " SELECT pg_notify('tessel', 'queued:' || id) FROM r",
               1, v, NULL, "node leave", e);
  if (!rc)
    rc = pg__exec(c,
                  "UPDATE nodes SET gone = true, running = 0, queued = 0,"
                  " heartbeat_at = " PG_CLOCK " WHERE id = $1",
                  1, v, NULL, "node leave", e);
  return rc;
}

/* Jobs it claimed and did not start go back to the queue; the attempt the
 * claim counted is given back (the job never started here). Running ones
 * (a shutdown that did not wait for them) are left to the reaper. */
int pg_node_leave(void *impl, const char *node_id, terr *e) {
  return pg__write(impl, leave_fn, (void *)node_id, e);
}

/* alive: not gone and a heartbeat within the node's own lease (its row's
 * lease_ms: nodes of one cluster may run with different --lease-s); a row
 * without one (an older binary's, or a node not yet heartbeating) is
 * judged by this store's last heartbeat's lease. */
int pg_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n,
                 terr *e) {
  pgstore *p = impl;
  *nodes = NULL;
  *n = 0;
  char keep[32], lease[32];
  const char *v[] = {pg__i64(keep, keep_ms), pg__i64(lease, lease_of(p))};
  stmt s = {
      "SELECT id, name, url, threads, gpus, version, started_at,"
      " heartbeat_at, running, queued, load, jobs_done,"
      " (NOT gone AND heartbeat_at >= " PG_CLOCK
      " - COALESCE(lease_ms, $2::bigint)), lease_ms"
      " FROM nodes WHERE heartbeat_at >= " PG_CLOCK
      " - $1::bigint"
      " ORDER BY started_at, id",
      "node list",
      2,
      v,
      NULL,
      1};
  int rc = pg__read(p, stmt_fn, &s, e);
  if (rc) return rc;
  PGresult *r = s.res;
  int rows = PQntuples(r);
  store_node *out = rows ? calloc((size_t)rows, sizeof *out) : NULL;
  int no_mem = rows && !out;
  for (int i = 0; !no_mem && i < rows; i++) {
    store_node *x = &out[i];
    snprintf(x->id, sizeof x->id, "%s", PQgetvalue(r, i, 0));
    x->name = pg__dup(r, i, 1, &no_mem);
    x->url = pg__dup(r, i, 2, &no_mem);
    x->threads = (int)col_i64(r, i, 3);
    x->gpus = (int)col_i64(r, i, 4);
    x->version = pg__dup(r, i, 5, &no_mem);
    x->started_at = col_i64(r, i, 6);
    x->heartbeat_at = col_i64(r, i, 7);
    x->running = (int)col_i64(r, i, 8);
    x->queued = (int)col_i64(r, i, 9);
    x->load = PQgetisnull(r, i, 10) ? NAN : strtod(PQgetvalue(r, i, 10), NULL);
    x->jobs_done = col_i64(r, i, 11);
    x->alive = PQgetvalue(r, i, 12)[0] == 't';
    x->lease_ms = col_i64(r, i, 13);
  }
  PQclear(r);
  if (no_mem) {
    store_nodes_free(out, out ? rows : 0);
    return oom(e);
  }
  *nodes = out;
  *n = rows;
  return T_OK;
}

/* ---- claims -----------------------------------------------------------------
 */
static int claim_cmp(const void *a, const void *b) {
  const store_job *x = a, *y = b;
  if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
  return strcmp(x->id, y->id);
}

int pg_job_claim(void *impl, const char *node_id, store_claim_room room,
                 int parents, int64_t lease_ms, store_job **jobs, int *n,
                 terr *e) {
  pgstore *p = impl;
  *jobs = NULL;
  *n = 0;
  if (room.any <= 0) return T_OK;
  if (lease_ms <= 0)
    return terr_set(e, T_EINVAL, "lease_ms", -1, "lease must be positive");
  char sany[32], scpu[32], sgpu[32], lease[32];
  const char *v[] = {node_id, pg__i64(lease, lease_ms),
                     pg__i64(sgpu, room.gpu < room.any ? room.gpu : room.any),
                     pg__i64(scpu, room.cpu), pg__i64(sany, room.any)};
  /* When no class is short of the total (a node without a GPU: CPU room =
   * total, no cuda), one pick in priority order, cuda jobs only with GPU
   * room: the claim costs one ordered scan, not three (bench_claim: the
   * class statement gives half the claims/s on rows of one class). */
  int simple = room.cpu >= room.any && (room.gpu <= 0 || room.gpu >= room.any);
  static const char *const one[2] = {
#define CLAIM_ONE(WHICH)                                                \
  "WITH c AS MATERIALIZED (SELECT id AS cid FROM jobs"                  \
  " WHERE status = 'queued' AND node IS NULL AND " WHICH                \
  " AND (backend_requested <> 'cuda' OR $3::int > 0)"                   \
  " ORDER BY priority DESC, id LIMIT $4::int FOR UPDATE SKIP LOCKED)"   \
  " UPDATE jobs SET node = $1, lease_until = " PG_CLOCK                 \
  " + $2::bigint, attempts = attempts + 1"                              \
  " FROM c WHERE jobs.id = c.cid RETURNING " PG_JOB_COLS
      CLAIM_ONE("NOT (tiles > 0 AND parent IS NULL)"),
      CLAIM_ONE("true"),
#undef CLAIM_ONE
  };
  /* Else each class's first rows by priority (cuda up to $3, the CPU-only
   * backends up to $4, the rest, auto, up to $5), then the first $5 of them
   * all by priority, FIFO within, in one statement: a node whose CPU
   * workers are busy takes no CPU-only job to hold while a GPU worker
   * idles. A row a class picked and the final cut left is locked only
   * until this transaction ends; another claimer skips it meanwhile and
   * takes it at its next claim. */
  static const char *const sql[2] = {
#define CLAIM_PICK(WHICH, CLASS, LIMIT)                                 \
  "SELECT id, priority FROM jobs WHERE status = 'queued' AND node IS"   \
  " NULL AND " WHICH " AND " CLASS " ORDER BY priority DESC, id LIMIT " \
  LIMIT " FOR UPDATE SKIP LOCKED"
#define CPU_ONLY "backend_requested IN ('serial', 'cpu', 'compare')"
#define CLAIM_SQL(WHICH)                                                \
  "WITH g AS MATERIALIZED (" CLAIM_PICK(WHICH,                          \
      "backend_requested = 'cuda'", "$3::int") "),"                     \
  " c AS MATERIALIZED (" CLAIM_PICK(WHICH, CPU_ONLY, "$4::int") "),"    \
  " o AS MATERIALIZED (" CLAIM_PICK(WHICH, "backend_requested <> 'cuda'" \
      " AND NOT " CPU_ONLY, "$5::int") "),"                             \
  " x AS MATERIALIZED (SELECT id AS cid FROM (SELECT * FROM g UNION ALL" \
  " SELECT * FROM c UNION ALL SELECT * FROM o) AS u"                    \
  " ORDER BY priority DESC, id LIMIT $5::int)"                          \
  " UPDATE jobs SET node = $1, lease_until = " PG_CLOCK                 \
  " + $2::bigint, attempts = attempts + 1 FROM x WHERE jobs.id = x.cid" \
  " RETURNING " PG_JOB_COLS
      CLAIM_SQL("NOT (tiles > 0 AND parent IS NULL)"),
      CLAIM_SQL("true"),
#undef CLAIM_SQL
#undef CPU_ONLY
#undef CLAIM_PICK
  };
  const char *v1[] = {v[0], v[1], v[2], v[4]}; /* node, lease, gpu, total */
  stmt s = {simple ? one[parents ? 1 : 0] : sql[parents ? 1 : 0], "claim",
            simple ? 4 : 5, simple ? v1 : v, NULL, 1};
  int rc = pg__write_now(p, stmt_fn, &s, e); /* no queued op orders it */
  /* no memory for the rows: they stay claimed; the lease ends and the
   * reaper puts them back */
  if (!rc) rc = pg__job_rows(s.res, jobs, n, e);
  PQclear(s.res);
  if (!rc && *n > 1) qsort(*jobs, (size_t)*n, sizeof **jobs, claim_cmp);
  return rc;
}

/* ---- the reaper
 * --------------------------------------------------------------- */
typedef struct reap_args {
  const char *max;
  PGresult *canceled, *failed, *back;
} reap_args;

static int reap_fn(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  reap_args *a = arg;
  const char *v[] = {a->max};
  PGresult *lock;
  int rc = pg__exec(c, "SELECT pg_try_advisory_xact_lock(" PG_REAP_LOCK ")", 0,
                    NULL, &lock, "reap lock", e);
  if (rc) return rc;
  int mine = PQgetvalue(lock, 0, 0)[0] == 't';
  PQclear(lock);
  if (!mine) return T_OK; /* another node reaps now */
  rc = pg__exec(c,
                "WITH r AS (UPDATE jobs SET status = 'canceled',"
                " error_code = 'canceled', error_message = 'canceled by "
                "request'," PG_ENDED_NOW
                " WHERE " PG_LEASE_EXPIRED " AND cancel_requested"
                " RETURNING id, attempts)"
                " SELECT id, attempts, pg_notify('tessel', 'end:' || id)"
                " FROM r ORDER BY id",
                0, NULL, &a->canceled, "reap", e);
  if (!rc)
    rc = pg__exec(
        c,
        "WITH r AS (UPDATE jobs SET status = 'failed',"
        " error_code = 'crashed', error_message = 'the job was started '"
        " || attempts || ' times and its node stopped heartbeating each time;"
        " it is not run again (--max-attempts ' || $1::int || ')',"
        PG_ENDED_NOW
        " WHERE " PG_LEASE_EXPIRED " AND attempts >= $1::int"
        " RETURNING id, attempts)"
        " SELECT id, attempts, pg_notify('tessel', 'end:' || id) FROM r"
        " ORDER BY id",
        1, v, &a->failed, "reap", e);
  if (!rc)
    rc = pg__exec(
        c,
        "WITH r AS (UPDATE jobs SET status = 'queued', started_at = 0,"
        " node = NULL, lease_until = NULL, backend_used = NULL,"
        " backend_reason = NULL, progress_done = 0, progress_total = 0"
        " WHERE " PG_LEASE_EXPIRED " AND attempts < $1::int"
        " RETURNING id, attempts)"
        " SELECT id, attempts, pg_notify('tessel', 'queued:' || id) FROM r"
        " ORDER BY id",
        1, v, &a->back, "reap", e);
  return rc;
}

/* Columns 0 (id) and 1 (attempts) of every row of r[0..nr) as a new
 * array (*out NULL when none). */
static int reaped_of(PGresult *const *r, int nr, store_reaped **out, int *n,
                     terr *e) {
  *out = NULL;
  *n = 0;
  int rows = 0;
  for (int k = 0; k < nr; k++) rows += r[k] ? PQntuples(r[k]) : 0;
  if (rows == 0) return T_OK;
  store_reaped *v = calloc((size_t)rows, sizeof *v);
  if (!v) return oom(e);
  int i = 0;
  for (int k = 0; k < nr; k++)
    for (int row = 0; r[k] && row < PQntuples(r[k]); row++, i++) {
      snprintf(v[i].id, sizeof v[i].id, "%s", PQgetvalue(r[k], row, 0));
      v[i].attempt = (int)col_i64(r[k], row, 1);
    }
  *out = v;
  *n = rows;
  return T_OK;
}

int pg_reap(void *impl, int max_attempts, store_reaped **jobs, int *n,
            terr *e) {
  *jobs = NULL;
  *n = 0;
  char smax[32];
  reap_args a = {pg__i64(smax, max_attempts), NULL, NULL, NULL};
  int rc = pg__write(impl, reap_fn, &a, e);
  PGresult *all[3] = {a.canceled, a.failed, a.back};
  if (!rc) rc = reaped_of(all, 3, jobs, n, e);
  PQclear(a.canceled);
  PQclear(a.failed);
  PQclear(a.back);
  return rc;
}

/* ---- cancel through any node
 * ----------------------------------------------------- */
typedef struct cancel_args {
  const char *id, *owner;
  int ended;
} cancel_args;

static int cancel_fn(pgstore *p, PGconn *c, void *arg, terr *e) {
  (void)p;
  cancel_args *a = arg;
  const char *v[] = {a->id};
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT status, owner, node IS NULL FROM jobs WHERE id = $1"
                    " FOR UPDATE",
                    1, v, &r, "cancel", e);
  if (rc) return rc;
  if (PQntuples(r) == 0 ||
      (a->owner && strcmp(PQgetvalue(r, 0, 1), a->owner) != 0)) {
    PQclear(r);
    return terr_set(e, T_ENOTFOUND, "id", -1, "no job %s", a->id);
  }
  int st = job_status_parse(PQgetvalue(r, 0, 0));
  int unclaimed = PQgetvalue(r, 0, 2)[0] == 't';
  if (st < 0 || job_status_final((job_status)st))
    rc = terr_set(e, T_ECONFLICT, "id", -1, "job %s already %s", a->id,
                  PQgetvalue(r, 0, 0));
  PQclear(r);
  if (rc) return rc;
  if (st == JOB_QUEUED && unclaimed) {
    a->ended = 1;
    return pg__exec(c,
                    "WITH u AS (UPDATE jobs SET status = 'canceled',"
                    " finished_at = " PG_CLOCK
                    ", error_code = 'canceled',"
                    " error_message = 'canceled by request before it started',"
                    " t_queue = (" PG_CLOCK
                    " - created_at)::double precision,"
                    " t_total = (" PG_CLOCK
                    " - created_at)::double precision"
                    " WHERE id = $1 RETURNING id)"
                    " SELECT pg_notify('tessel', 'end:' || id) FROM u",
                    1, v, NULL, "cancel", e);
  }
  a->ended = 0;
  return pg__exec(c,
                  "WITH u AS (UPDATE jobs SET cancel_requested = true"
                  " WHERE id = $1 RETURNING id)"
                  " SELECT pg_notify('tessel', 'cancel:' || id) FROM u",
                  1, v, NULL, "cancel", e);
}

int pg_job_cancel_request(void *impl, const char *id, const char *owner,
                          int *ended, terr *e) {
  cancel_args a = {id, owner, 0};
  int rc = pg__write(impl, cancel_fn, &a, e);
  *ended = rc ? 0 : a.ended;
  return rc;
}

int pg_queue_depth(void *impl, int64_t *queued, terr *e) {
  *queued = 0;
  stmt s = {
      "SELECT count(*) FROM jobs WHERE status = 'queued' AND parent IS NULL",
      "queue depth",
      0,
      NULL,
      NULL,
      1};
  int rc = pg__read(impl, stmt_fn, &s, e);
  if (!rc) *queued = col_i64(s.res, 0, 0);
  PQclear(s.res);
  return rc;
}

/* ---- events: the listener thread
 * ---------------------------------------------------- */
/* Hand what/id to every callback. [mu] taken here. A callback may
 * unlisten (itself or another: pg_unlisten takes no lock on this thread),
 * so the list is walked by token (tokens grow along it), not by index. */
static void dispatch(pgcl *c, const char *what, const char *id) {
  pthread_mutex_lock(&c->mu);
  uint64_t last = 0;
  for (;;) {
    size_t i = 0;
    while (i < c->subs.n && c->subs.v[i].token <= last) i++;
    if (i == c->subs.n) break;
    pg_sub sub = c->subs.v[i];
    last = sub.token;
    sub.cb(sub.arg, what, id);
  }
  pthread_mutex_unlock(&c->mu);
}

/* A payload "<what>:<id>"; anything else is ignored (not ours). */
static void dispatch_payload(pgcl *c, const char *payload) {
  const char *colon = strchr(payload, ':');
  if (!colon || colon == payload || colon - payload >= PG_EVENT_WHAT_MAX ||
      strlen(colon + 1) >= T_ID_MAX || !colon[1])
    return;
  char what[PG_EVENT_WHAT_MAX];
  memcpy(what, payload, (size_t)(colon - payload));
  what[colon - payload] = 0;
  dispatch(c, what, colon + 1);
}

/* A connection that listens, or NULL. */
static PGconn *listen_connect(pgstore *p, terr *e) {
  PGconn *conn;
  if (pg__connect(p, &conn, e)) return NULL;
  if (pg__exec(conn, "LISTEN tessel", 0, NULL, NULL, "listen", e)) {
    PQfinish(conn);
    return NULL;
  }
  return conn;
}

/* 1 when the stop pipe has a byte within ms (-1: wait forever). */
static int stop_within(pgcl *c, int ms) {
  struct pollfd pf = {.fd = c->stopfd[0], .events = POLLIN};
  return poll(&pf, 1, ms) > 0;
}

static void *listen_main(void *arg) {
  pgcl *c = arg;
  PGconn *conn = c->conn;
  int delay = 0;   /* before the next connect: 0, then 100 ms doubling to 2 s */
  int probing = 0; /* a "SELECT 1" is out on conn */
  for (;;) {
    if (!conn) {
      if (delay && stop_within(c, delay)) break;
      delay = delay ? delay * 2 : PG_LISTEN_BACKOFF_MIN_MS;
      if (delay > PG_LISTEN_BACKOFF_MAX_MS) delay = PG_LISTEN_BACKOFF_MAX_MS;
      terr e;
      if (!(conn = listen_connect(c->p, &e))) continue;
      log_info("store: listening for events again");
      delay = 0;
      dispatch(c, "reset", NULL); /* events may have been missed */
      continue;
    }
    struct pollfd pf[2] = {{.fd = c->stopfd[0], .events = POLLIN},
                           {.fd = PQsocket(conn), .events = POLLIN}};
    int k = pf[1].fd >= 0 ? poll(pf, 2, PG_LISTEN_PROBE_MS) : -1;
    if (k < 0 && pf[1].fd >= 0 && errno == EINTR) continue;
    if (k > 0 && pf[0].revents) break;
    int ok;
    if (k == 0) { /* quiet: ask; a probe still unanswered means lost */
      ok = !probing && PQsendQuery(conn, "SELECT 1");
      probing = ok;
    } else {
      ok = k > 0 && PQconsumeInput(conn) && PQstatus(conn) == CONNECTION_OK;
      while (ok && probing && !PQisBusy(conn)) {
        PGresult *r = PQgetResult(conn);
        if (!r) probing = 0; /* answered */
        PQclear(r);
        if (!probing) break;
      }
    }
    PGnotify *nt;
    while ((nt = PQnotifies(conn))) {
      if (nt->relname && strcmp(nt->relname, "tessel") == 0 && nt->extra)
        dispatch_payload(c, nt->extra);
      PQfreemem(nt);
    }
    if (!ok) {
      log_warn("store: the event connection was lost; reconnecting");
      PQfinish(conn);
      conn = NULL;
      probing = 0;
    }
  }
  if (conn) PQfinish(conn);
  return NULL;
}

int pg_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token,
              terr *e) {
  pgstore *p = impl;
  *token = 0;
  pgcl *c = cl_of(p, 1, e);
  if (!c) return T_ENOMEM;
  pthread_mutex_lock(&c->mu);
  int started = c->started;
  pthread_mutex_unlock(&c->mu);
  PGconn *conn = NULL;
  if (!started && !(conn = listen_connect(p, e))) return e->code;
  pthread_mutex_lock(&c->mu);
  int rc = T_OK;
  if (!c->started) {
    if (pipe(c->stopfd) != 0) {
      c->stopfd[0] = c->stopfd[1] = -1;
      rc = terr_set(e, T_EINTERNAL, "", -1, "store: pipe: %s", strerror(errno));
    } else {
      fcntl(c->stopfd[0], F_SETFD, FD_CLOEXEC);
      fcntl(c->stopfd[1], F_SETFD, FD_CLOEXEC);
      c->conn = conn;
      conn = NULL;
      if (pthread_create(&c->thread, NULL, listen_main, c) != 0) {
        conn = c->conn;
        c->conn = NULL;
        close(c->stopfd[0]);
        close(c->stopfd[1]);
        c->stopfd[0] = c->stopfd[1] = -1;
        rc = terr_set(e, T_EINTERNAL, "", -1,
                      "store: cannot start the listener");
      } else {
        c->started = 1;
      }
    }
  }
  if (!rc && tvec_reserve(&c->subs, c->subs.n + 1) != 0) rc = oom(e);
  if (!rc) {
    *token = c->next_token++;
    c->subs.v[c->subs.n++] = (pg_sub){*token, cb, arg};
  }
  pthread_mutex_unlock(&c->mu);
  if (conn) PQfinish(conn); /* another call started the thread meanwhile */
  return rc;
}

void pg_unlisten(void *impl, uint64_t token) {
  pgcl *c = cl_of(impl, 0, NULL);
  if (!c) return;
  /* from a callback, on the listener thread: it holds mu already */
  int here =
      atomic_load(&c->started) && pthread_equal(pthread_self(), c->thread);
  if (!here) pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->subs.n; i++)
    if (c->subs.v[i].token == token) {
      memmove(&c->subs.v[i], &c->subs.v[i + 1],
              (c->subs.n - i - 1) * sizeof c->subs.v[0]);
      c->subs.n--;
      break;
    }
  if (!here) pthread_mutex_unlock(&c->mu);
}

void pg__listen_stop(pgstore *p) {
  pthread_mutex_lock(&reg_mu);
  pgcl **pp = &reg;
  while (*pp && (*pp)->p != p) pp = &(*pp)->next;
  pgcl *c = *pp;
  if (c) *pp = c->next;
  pthread_mutex_unlock(&reg_mu);
  if (!c) return;
  if (c->started) {
    ssize_t w;
    do w = write(c->stopfd[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(c->thread, NULL);
    close(c->stopfd[0]);
    close(c->stopfd[1]);
  }
  free(c->subs.v);
  pthread_mutex_destroy(&c->mu);
  free(c);
}
