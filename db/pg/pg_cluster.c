/* pg_cluster.c — the cluster entries of the PostgreSQL store: nodes,
 * claims, leases, the reaper, cancel requests and LISTEN/NOTIFY events
 * (store.h, "cluster"; the schema is pg_schema.c's).
 *
 * Time is the store's clock (PGC_NOW, on the server): a lease or heartbeat
 * is never compared with a node's own clock. Each entry is one transaction
 * on a pooled connection (pg__get / pg__put):
 *   - register inserts the node row and tells the store its id (the fence
 *     of start and finish, pg__set_node);
 *   - heartbeat writes the node's counters and renews every lease it
 *     holds, then lists its jobs with cancel_requested and the ids it
 *     believes it holds (held) that are no longer claimed by it (lost);
 *   - claim is one UPDATE over a SELECT ... FOR UPDATE SKIP LOCKED, so two
 *     nodes never claim the same row; priority first, then id (ids sort by
 *     creation time): FIFO within a priority;
 *   - reap (one node at a time: pg_try_advisory_xact_lock(7243002)) ends
 *     or requeues the jobs whose lease expired;
 *   - cancel_request cancels an unclaimed queued job at once, or marks a
 *     claimed one for its node ("cancel:<id>").
 * Notifications go out in the same transaction as the write (pg_notify on
 * the channel "tessel", payload "<what>:<id>").
 *
 * The listener: a thread per store, started by the first pg_listen, on a
 * connection of its own (pg__connect) that LISTENs on "tessel". It polls
 * the socket and an eventfd (the stop signal), reads notifications
 * (PQconsumeInput / PQnotifies) and calls every registered callback with
 * "<what>", "<id>". When the connection is lost it reconnects with backoff
 * (100 ms doubling to 2 s) and then calls every callback with "reset".
 *
 * Per-store state (the listener, its callbacks, the last lease length for
 * store_node_list's alive) lives here, in a list keyed by the pgstore,
 * because pgstore is pg_store.c's: pg__listen_stop (store close) removes
 * the store's entry.
 *
 * Threads and locks: pgc_all_mu guards the list of states (a leaf, held
 * only to find, add or remove one). In a state, cbmu guards the callbacks
 * and is held while the listener thread calls them, so that store_unlisten
 * returning means its callback is not running and never runs again (an
 * unlisten from inside a callback, on the listener thread, takes no lock:
 * that thread holds it already). A callback must not block.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "db/pg/pg_int.h"
#include "util/vec.h"

/* The store's clock in ms. */
#define PGC_NOW "(extract(epoch from clock_timestamp()) * 1000)::bigint"
#define PGC_ADVISORY_REAP "7243002"
#define PGC_LEASE_DEFAULT_MS 10000
#define PGC_BACKOFF_MIN_MS 100
#define PGC_BACKOFF_MAX_MS 2000
/* A payload is "<what>:<id>"; longer ones are not ours. */
#define PGC_PAYLOAD_MAX (16 + T_ID_MAX)

typedef struct pgc_cb {
  store_event_fn fn;
  void *arg;
  uint64_t token;
} pgc_cb;

typedef struct pgc_state {
  pgstore *p;
  struct pgc_state *next;         /* [pgc_all_mu] */
  pthread_mutex_t cbmu;
  TVEC(pgc_cb) cbs;               /* [cbmu] */
  uint64_t next_token;            /* [cbmu] */
  pthread_t thread;               /* valid when started */
  _Atomic int started;            /* set under cbmu, once */
  int stopfd;                     /* eventfd; written once by stop */
  PGconn *conn;                   /* the listener's; the thread's after start */
  _Atomic int64_t lease_ms;       /* the last heartbeat's (alive in lists) */
} pgc_state;

static pthread_mutex_t pgc_all_mu = PTHREAD_MUTEX_INITIALIZER;
static pgc_state *pgc_all; /* [pgc_all_mu] */

/* The state of p, created when create != 0 (NULL: out of memory, or absent). */
static pgc_state *pgc_state_of(pgstore *p, int create) {
  pthread_mutex_lock(&pgc_all_mu);
  pgc_state *s = pgc_all;
  while (s && s->p != p) s = s->next;
  if (!s && create && (s = calloc(1, sizeof *s))) {
    s->p = p;
    s->stopfd = -1;
    s->next_token = 1;
    s->lease_ms = PGC_LEASE_DEFAULT_MS;
    pthread_mutex_init(&s->cbmu, NULL);
    s->next = pgc_all;
    pgc_all = s;
  }
  pthread_mutex_unlock(&pgc_all_mu);
  return s;
}

/* ---- small helpers ---------------------------------------------------------- */
static void free_ids(char **ids, int n) {
  for (int i = 0; i < n; i++) free(ids[i]);
  free(ids);
}

/* Column 0 of every row of r as a new array of heap strings (NULL when
 * none). 0 or T_ENOMEM. */
static int ids_of(PGresult *r, char ***ids, int *n, terr *e) {
  *ids = NULL;
  *n = 0;
  int rows = PQntuples(r);
  if (rows == 0) return 0;
  char **v = calloc((size_t)rows, sizeof *v);
  if (!v) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  for (int i = 0; i < rows; i++)
    if (!(v[i] = strdup(PQgetvalue(r, i, 0)))) {
      free_ids(v, i);
      return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
    }
  *ids = v;
  *n = rows;
  return 0;
}

/* An integer column (0 for NULL). */
static int64_t col_i64(PGresult *r, int row, int col) {
  int64_t v = 0;
  if (!PQgetisnull(r, row, col) && t_parse_i64(PQgetvalue(r, row, col), &v))
    v = 0;
  return v;
}

/* Append ids (v, n) to *ids / *nids (both heap; v's strings move). */
static int ids_append(char ***ids, int *nids, char **v, int n, terr *e) {
  if (!n) return 0;
  char **all = realloc(*ids, (size_t)(*nids + n) * sizeof *all);
  if (!all) {
    free_ids(v, n);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  memcpy(all + *nids, v, (size_t)n * sizeof *v);
  free(v);
  *ids = all;
  *nids += n;
  return 0;
}

/* A PostgreSQL text[] literal of ids: {"a","b"} (quotes and backslashes
 * escaped). Heap; NULL when out of memory. */
static char *text_array(const char *const *v, int n) {
  size_t cap = 3;
  for (int i = 0; i < n; i++) cap += 2 * strlen(v[i]) + 3;
  char *out = malloc(cap), *o = out;
  if (!out) return NULL;
  *o++ = '{';
  for (int i = 0; i < n; i++) {
    if (i) *o++ = ',';
    *o++ = '"';
    for (const char *c = v[i]; *c; c++) {
      if (*c == '"' || *c == '\\') *o++ = '\\';
      *o++ = *c;
    }
    *o++ = '"';
  }
  *o++ = '}';
  *o = 0;
  return out;
}

/* The end of a transaction on a pooled connection: commit when rc is 0,
 * else roll back; the connection goes back (closed when broken). */
static int finish_tx(pgstore *p, PGconn *c, int rc, terr *e) {
  if (!rc) rc = pg__commit(c, e);
  else if (rc != T_EUNAVAIL)
    pg__rollback(c);
  pg__put(p, c, rc == T_EUNAVAIL);
  return rc;
}

/* ---- nodes --------------------------------------------------------------------- */
int pg_node_register(void *impl, store_node *n, terr *e) {
  pgstore *p = impl;
  if (!n) return terr_set(e, T_EINVAL, "node", -1, "missing");
  t_id_new('n', n->id);
  char threads[32], gpus[32], running[32], queued[32], load[32];
  const char *vals[] = {n->id,
                        n->name ? n->name : "",
                        n->url ? n->url : "",
                        pg__i64(threads, n->threads),
                        pg__i64(gpus, n->gpus),
                        n->version ? n->version : "",
                        pg__i64(running, n->running),
                        pg__i64(queued, n->queued),
                        isfinite(n->load) ? pg__f64(load, n->load) : NULL};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  rc = pg__exec(c,
                "INSERT INTO nodes (id, name, url, threads, gpus, version,"
                " started_at, heartbeat_at, running, queued, load)"
                " VALUES ($1, $2, $3, $4::int, $5::int, $6, " PGC_NOW ", " PGC_NOW
                ", $7::int, $8::int, $9::double precision)"
                " RETURNING started_at, heartbeat_at",
                9, vals, &r, "register node", e);
  if (!rc) {
    n->started_at = col_i64(r, 0, 0);
    n->heartbeat_at = col_i64(r, 0, 1);
    n->alive = 1;
    n->jobs_done = 0;
  }
  PQclear(r);
  pg__put(p, c, rc == T_EUNAVAIL);
  if (!rc) pg__set_node(p, n->id);
  return rc;
}

int pg_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms,
                      const char *const *held, int nheld, char ***cancel,
                      int *ncancel, char ***lost, int *nlost, terr *e) {
  pgstore *p = impl;
  *cancel = *lost = NULL;
  *ncancel = *nlost = 0;
  if (!n || !n->id[0]) return terr_set(e, T_EINVAL, "node", -1, "missing");
  if (lease_ms <= 0) return terr_set(e, T_EINVAL, "lease_ms", -1, "must be > 0");
  pgc_state *st = pgc_state_of(p, 1);
  if (st) st->lease_ms = lease_ms;
  char *arr = text_array(held, nheld > 0 ? nheld : 0);
  if (!arr) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  char running[32], queued[32], load[32], lease[32];
  const char *nv[] = {n->id, pg__i64(running, n->running),
                      pg__i64(queued, n->queued),
                      isfinite(n->load) ? pg__f64(load, n->load) : NULL};
  const char *lv[] = {n->id, pg__i64(lease, lease_ms)};
  const char *hv[] = {n->id, arr};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) {
    free(arr);
    return rc;
  }
  PGresult *r = NULL;
  if (!(rc = pg__begin(c, e)))
    rc = pg__exec(c,
                  "UPDATE nodes SET heartbeat_at = " PGC_NOW ", running = $2::int,"
                  " queued = $3::int, load = $4::double precision, gone = false"
                  " WHERE id = $1",
                  4, nv, NULL, "heartbeat", e);
  if (!rc)
    rc = pg__exec(c,
                  "UPDATE jobs SET lease_until = " PGC_NOW " + $2::bigint"
                  " WHERE node = $1 AND status IN ('queued','running')",
                  2, lv, NULL, "renew leases", e);
  if (!rc &&
      !(rc = pg__exec(c,
                      "SELECT id FROM jobs WHERE node = $1 AND cancel_requested"
                      " AND status IN ('queued','running') ORDER BY id",
                      1, lv, &r, "heartbeat cancels", e)))
    rc = ids_of(r, cancel, ncancel, e);
  PQclear(r);
  r = NULL;
  /* Lost: held here, but the row is gone or another node's (or nobody's:
   * reaped back to the queue). A job this node finished keeps node = it. */
  if (!rc && nheld > 0 &&
      !(rc = pg__exec(c,
                      "SELECT h FROM unnest($2::text[]) AS h WHERE NOT EXISTS"
                      " (SELECT 1 FROM jobs WHERE jobs.id = h AND jobs.node = $1)",
                      2, hv, &r, "heartbeat lost", e)))
    rc = ids_of(r, lost, nlost, e);
  PQclear(r);
  free(arr);
  rc = finish_tx(p, c, rc, e);
  if (rc) {
    free_ids(*cancel, *ncancel);
    free_ids(*lost, *nlost);
    *cancel = *lost = NULL;
    *ncancel = *nlost = 0;
  }
  return rc;
}

/* Claimed, unstarted jobs go back to the queue (their claim's attempt taken
 * back: it never started), or end canceled when a cancel was asked for
 * them; the node is marked gone. Running rows are left to the reaper (a
 * clean shutdown has unstarted them already). */
int pg_node_leave(void *impl, const char *node_id, terr *e) {
  pgstore *p = impl;
  if (!node_id || !*node_id) return terr_set(e, T_EINVAL, "node", -1, "missing");
  const char *v[] = {node_id};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  if (!(rc = pg__begin(c, e)))
    rc = pg__exec(c,
                  "WITH x AS (UPDATE jobs SET status = 'canceled',"
                  " finished_at = " PGC_NOW ", lease_until = NULL,"
                  " error_code = 'canceled',"
                  " error_message = 'canceled by request before it started'"
                  " WHERE node = $1 AND status = 'queued' AND cancel_requested"
                  " RETURNING id)"
                  " SELECT pg_notify('tessel', 'end:' || id) FROM x",
                  1, v, NULL, "leave: cancel", e);
  if (!rc)
    rc = pg__exec(c,
                  "WITH x AS (UPDATE jobs SET node = NULL, lease_until = NULL,"
                  " attempts = GREATEST(attempts - 1, 0)"
                  " WHERE node = $1 AND status = 'queued' RETURNING id)"
                  " SELECT pg_notify('tessel', 'queued:' || id) FROM x",
                  1, v, NULL, "leave: requeue", e);
  if (!rc)
    rc = pg__exec(c, "UPDATE nodes SET gone = true WHERE id = $1", 1, v, NULL,
                  "leave", e);
  return finish_tx(p, c, rc, e);
}

int pg_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n,
                 terr *e) {
  pgstore *p = impl;
  *nodes = NULL;
  *n = 0;
  pgc_state *st = pgc_state_of(p, 0);
  int64_t lease = st ? st->lease_ms : PGC_LEASE_DEFAULT_MS;
  char keep[32], lv[32];
  const char *v[] = {pg__i64(keep, keep_ms > 0 ? keep_ms : 0),
                     pg__i64(lv, lease)};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  rc = pg__exec(c,
                "SELECT id, name, url, threads, gpus, version, started_at,"
                " heartbeat_at, running, queued, load, jobs_done,"
                " (NOT gone AND heartbeat_at >= " PGC_NOW " - $2::bigint)"
                " FROM nodes WHERE heartbeat_at >= " PGC_NOW " - $1::bigint"
                " ORDER BY started_at, id",
                2, v, &r, "list nodes", e);
  pg__put(p, c, rc == T_EUNAVAIL);
  if (rc) {
    PQclear(r);
    return rc;
  }
  int rows = PQntuples(r), oom = 0;
  store_node *out = rows ? calloc((size_t)rows, sizeof *out) : NULL;
  if (rows && !out) oom = 1;
  for (int i = 0; out && i < rows; i++) {
    store_node *x = &out[i];
    snprintf(x->id, sizeof x->id, "%s", PQgetvalue(r, i, 0));
    x->name = pg__dup(r, i, 1, &oom);
    x->url = pg__dup(r, i, 2, &oom);
    x->threads = (int)col_i64(r, i, 3);
    x->gpus = (int)col_i64(r, i, 4);
    x->version = pg__dup(r, i, 5, &oom);
    x->started_at = col_i64(r, i, 6);
    x->heartbeat_at = col_i64(r, i, 7);
    x->running = (int)col_i64(r, i, 8);
    x->queued = (int)col_i64(r, i, 9);
    x->load = NAN;
    if (!PQgetisnull(r, i, 10)) t_parse_f64(PQgetvalue(r, i, 10), &x->load);
    x->jobs_done = col_i64(r, i, 11);
    x->alive = PQgetvalue(r, i, 12)[0] == 't';
  }
  PQclear(r);
  if (oom) {
    if (out) store_nodes_free(out, rows);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  *nodes = out;
  *n = rows;
  return 0;
}

/* ---- claims and leases ------------------------------------------------------- */
static int job_before(const store_job *a, const store_job *b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return strcmp(a->id, b->id) < 0;
}

int pg_job_claim(void *impl, const char *node_id, int has_gpu, int parents,
                 int max, int64_t lease_ms, store_job **jobs, int *n,
                 terr *e) {
  pgstore *p = impl;
  *jobs = NULL;
  *n = 0;
  if (!node_id || !*node_id) return terr_set(e, T_EINVAL, "node", -1, "missing");
  if (lease_ms <= 0) return terr_set(e, T_EINVAL, "lease_ms", -1, "must be > 0");
  if (max <= 0) return 0;
  if (max > 1000) max = 1000;
  char lease[32], mx[32];
  const char *v[] = {node_id, pg__i64(lease, lease_ms), has_gpu ? "t" : "f",
                     parents ? "t" : "f", pg__i64(mx, max)};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  /* A split parent (tiles > 0, no parent of its own) is its coordinator's
   * work: claimed only with parents. The CTE locks the rows once (SKIP
   * LOCKED: rows another claim holds are passed over, not waited for);
   * a row another claim committed meanwhile is rechecked and dropped. */
  rc = pg__exec(c,
                "WITH pick AS (SELECT id AS pid FROM jobs"
                " WHERE status = 'queued' AND node IS NULL"
                " AND (backend_requested <> 'cuda' OR $3::boolean)"
                " AND ($4::boolean OR parent IS NOT NULL OR tiles = 0)"
                " ORDER BY priority DESC, id LIMIT $5::int"
                " FOR UPDATE SKIP LOCKED)"
                " UPDATE jobs SET node = $1,"
                " lease_until = " PGC_NOW " + $2::bigint,"
                " attempts = attempts + 1"
                " FROM pick WHERE jobs.id = pick.pid"
                " RETURNING " PG_JOB_COLS,
                5, v, &r, "claim jobs", e);
  pg__put(p, c, rc == T_EUNAVAIL);
  if (!rc) rc = pg__job_rows(r, jobs, n, e);
  PQclear(r);
  if (rc) return rc;
  /* RETURNING has no order: put them in run order (few rows). */
  for (int i = 1; i < *n; i++)
    for (int k = i; k > 0 && job_before(&(*jobs)[k], &(*jobs)[k - 1]); k--) {
      store_job t = (*jobs)[k];
      (*jobs)[k] = (*jobs)[k - 1];
      (*jobs)[k - 1] = t;
    }
  return 0;
}

/* The lease of a job is over: its node stopped heartbeating (or is too
 * slow to, which is the same to the others). A cancel asked for it ends it
 * canceled; max_attempts claims end it failed "crashed" (the wording of
 * sched/run.c's poison-job cap); others go back to the queue, unclaimed,
 * with their start taken back (attempts kept: the claim counted it). */
#define PGC_DEAD                                                             \
  " WHERE status IN ('queued','running') AND node IS NOT NULL"               \
  " AND lease_until < " PGC_NOW

int pg_reap(void *impl, int max_attempts, char ***ids, int *n, terr *e) {
  pgstore *p = impl;
  *ids = NULL;
  *n = 0;
  if (max_attempts < 1) max_attempts = 1;
  char mx[32];
  const char *v[] = {pg__i64(mx, max_attempts)};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  int locked = 0;
  if (!(rc = pg__begin(c, e)) &&
      !(rc = pg__exec(c, "SELECT pg_try_advisory_xact_lock(" PGC_ADVISORY_REAP ")",
                      0, NULL, &r, "reap lock", e)))
    locked = PQgetvalue(r, 0, 0)[0] == 't';
  PQclear(r);
  static const char *const steps[] = {
      "WITH x AS (UPDATE jobs SET status = 'canceled',"
      " finished_at = " PGC_NOW ", lease_until = NULL,"
      " error_code = 'canceled', error_message = 'canceled by request'"
      PGC_DEAD " AND cancel_requested RETURNING id)"
      " SELECT id, pg_notify('tessel', 'end:' || id) FROM x",
      "WITH x AS (UPDATE jobs SET status = 'failed',"
      " finished_at = " PGC_NOW ", lease_until = NULL,"
      " error_code = 'crashed', error_message = 'the job was started '"
      " || attempts || ' times and the node running it died each time;"
      " it is not run again (--max-attempts ' || $1::int || ')'"
      PGC_DEAD " AND attempts >= $1::int RETURNING id)"
      " SELECT id, pg_notify('tessel', 'end:' || id) FROM x",
      "WITH x AS (UPDATE jobs SET status = 'queued', node = NULL,"
      " lease_until = NULL, started_at = 0, backend_used = NULL,"
      " backend_reason = NULL, progress_done = 0, progress_total = 0"
      PGC_DEAD " AND attempts < $1::int RETURNING id)"
      " SELECT id, pg_notify('tessel', 'queued:' || id) FROM x",
  };
  for (int i = 0; !rc && locked && i < 3; i++) {
    char **v1 = NULL;
    int n1 = 0;
    r = NULL;
    if (!(rc = pg__exec(c, steps[i], i ? 1 : 0, i ? v : NULL, &r, "reap", e)) &&
        !(rc = ids_of(r, &v1, &n1, e)))
      rc = ids_append(ids, n, v1, n1, e);
    PQclear(r);
  }
  rc = finish_tx(p, c, rc, e);
  if (rc) {
    free_ids(*ids, *n);
    *ids = NULL;
    *n = 0;
  }
  return rc;
}

int pg_job_cancel_request(void *impl, const char *id, const char *owner,
                          int *ended, terr *e) {
  pgstore *p = impl;
  *ended = 0;
  if (!id || !*id) return terr_set(e, T_EINVAL, "id", -1, "missing");
  const char *v[] = {id};
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  if (!(rc = pg__begin(c, e)))
    rc = pg__exec(c,
                  "SELECT status, node IS NULL, owner FROM jobs WHERE id = $1"
                  " FOR UPDATE",
                  1, v, &r, "cancel job", e);
  if (!rc) {
    if (PQntuples(r) == 0 || (owner && strcmp(PQgetvalue(r, 0, 2), owner)))
      rc = terr_set(e, T_ENOTFOUND, "", -1, "job %s not found", id);
    else if (job_status_parse(PQgetvalue(r, 0, 0)) >= JOB_SUCCEEDED)
      rc = terr_set(e, T_ECONFLICT, "", -1, "job %s already %s", id,
                    PQgetvalue(r, 0, 0));
    else if (strcmp(PQgetvalue(r, 0, 0), "queued") == 0 &&
             PQgetvalue(r, 0, 1)[0] == 't')
      *ended = 1;
  }
  PQclear(r);
  if (!rc && *ended)
    rc = pg__exec(c,
                  "WITH x AS (UPDATE jobs SET status = 'canceled',"
                  " finished_at = " PGC_NOW ", error_code = 'canceled',"
                  " error_message = 'canceled by request before it started'"
                  " WHERE id = $1 RETURNING id)"
                  " SELECT pg_notify('tessel', 'end:' || id) FROM x",
                  1, v, NULL, "cancel job", e);
  else if (!rc)
    rc = pg__exec(c,
                  "WITH x AS (UPDATE jobs SET cancel_requested = true"
                  " WHERE id = $1 RETURNING id)"
                  " SELECT pg_notify('tessel', 'cancel:' || id) FROM x",
                  1, v, NULL, "cancel job", e);
  rc = finish_tx(p, c, rc, e);
  if (rc) *ended = 0;
  return rc;
}

int pg_queue_depth(void *impl, int64_t *queued, terr *e) {
  pgstore *p = impl;
  *queued = 0;
  PGconn *c;
  int rc = pg__get(p, &c, e);
  if (rc) return rc;
  PGresult *r = NULL;
  rc = pg__exec(c,
                "SELECT count(*) FROM jobs WHERE status = 'queued'"
                " AND parent IS NULL",
                0, NULL, &r, "queue depth", e);
  if (!rc) *queued = col_i64(r, 0, 0);
  PQclear(r);
  pg__put(p, c, rc == T_EUNAVAIL);
  return rc;
}

/* ---- the listener ------------------------------------------------------------- */
/* Call every callback with (what, id). The caller holds cbmu. A callback
 * may unlisten (itself or another): the list is walked by token (tokens
 * grow along it), never by a stale index. */
static void pgc_dispatch(pgc_state *s, const char *what, const char *id) {
  uint64_t last = 0;
  for (;;) {
    size_t i = 0;
    while (i < s->cbs.n && s->cbs.v[i].token <= last) i++;
    if (i == s->cbs.n) return;
    pgc_cb cb = s->cbs.v[i];
    last = cb.token;
    cb.fn(cb.arg, what, id);
  }
}

/* The server's notices on the listener's connection (a shutdown's "FATAL:
 * terminating connection") are not for stderr: the lost connection is
 * logged once. */
static void pgc_quiet(void *arg, const char *msg) {
  (void)arg, (void)msg;
}

/* A connection that LISTENs, or NULL (e set). */
static PGconn *pgc_connect(pgc_state *s, terr *e) {
  PGconn *c = NULL;
  if (pg__connect(s->p, &c, e)) return NULL;
  PQsetNoticeProcessor(c, pgc_quiet, NULL);
  if (pg__exec(c, "LISTEN tessel", 0, NULL, NULL, "listen", e)) {
    PQfinish(c);
    return NULL;
  }
  return c;
}

/* Wait up to ms for the stop signal: 1 when stopped. */
static int pgc_stopped(pgc_state *s, int ms) {
  struct pollfd pf = {.fd = s->stopfd, .events = POLLIN};
  int r = poll(&pf, 1, ms);
  return r > 0 && (pf.revents & POLLIN);
}

/* Every notification waiting on c, dispatched. 0, or -1 when c is lost. */
static int pgc_drain(pgc_state *s, PGconn *c) {
  if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK) return -1;
  PGnotify *nt;
  while ((nt = PQnotifies(c))) {
    const char *pl = nt->extra ? nt->extra : "";
    const char *colon = strchr(pl, ':');
    size_t wl = colon ? (size_t)(colon - pl) : 0;
    char what[16];
    if (colon && wl > 0 && wl < sizeof what && strlen(colon + 1) < T_ID_MAX &&
        colon[1] && strlen(pl) < PGC_PAYLOAD_MAX) {
      memcpy(what, pl, wl);
      what[wl] = 0;
      if (!strcmp(what, "queued") || !strcmp(what, "end") ||
          !strcmp(what, "cancel")) {
        pthread_mutex_lock(&s->cbmu);
        pgc_dispatch(s, what, colon + 1);
        pthread_mutex_unlock(&s->cbmu);
      }
    }
    PQfreemem(nt);
  }
  return 0;
}

static void *pgc_main(void *arg) {
  pgc_state *s = arg;
  PGconn *c = s->conn; /* connected and listening by pg_listen */
  int backoff = PGC_BACKOFF_MIN_MS, logged = 0;
  for (;;) {
    if (!c) {
      terr e;
      if ((c = pgc_connect(s, &e))) {
        log_info("store: event listener connected again");
        logged = 0;
        backoff = PGC_BACKOFF_MIN_MS;
        pthread_mutex_lock(&s->cbmu);
        pgc_dispatch(s, "reset", NULL);
        pthread_mutex_unlock(&s->cbmu);
        continue;
      }
      if (!logged++) log_warn("event listener: %s (retrying)", e.message);
      if (pgc_stopped(s, backoff)) break;
      backoff = backoff * 2 > PGC_BACKOFF_MAX_MS ? PGC_BACKOFF_MAX_MS : backoff * 2;
      continue;
    }
    struct pollfd pf[2] = {{.fd = PQsocket(c), .events = POLLIN},
                           {.fd = s->stopfd, .events = POLLIN}};
    int r = poll(pf, 2, 1000);
    if (r < 0 && errno != EINTR) r = 0;
    if (r > 0 && (pf[1].revents & POLLIN)) break;
    if (pf[0].fd < 0 || (r > 0 && pf[0].revents) || PQstatus(c) != CONNECTION_OK) {
      if (pf[0].fd < 0 || pgc_drain(s, c)) {
        log_warn("store: event listener lost its connection; reconnecting");
        PQfinish(c);
        c = NULL;
      }
    }
  }
  if (c) PQfinish(c);
  return NULL;
}

int pg_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token,
              terr *e) {
  pgstore *p = impl;
  *token = 0;
  if (!cb) return terr_set(e, T_EINVAL, "cb", -1, "missing");
  pgc_state *s = pgc_state_of(p, 1);
  if (!s) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  pthread_mutex_lock(&s->cbmu);
  int rc = 0;
  if (!s->started) {
    /* LISTEN before returning: every event after the call is seen. */
    if ((s->stopfd = eventfd(0, EFD_CLOEXEC)) < 0) {
      rc = terr_set(e, T_EIO, "", -1, "store: eventfd: %s", strerror(errno));
    } else if (!(s->conn = pgc_connect(s, e))) {
      rc = e->code;
    } else if (pthread_create(&s->thread, NULL, pgc_main, s)) {
      PQfinish(s->conn);
      s->conn = NULL;
      rc = terr_set(e, T_ENOMEM, "", -1, "store: cannot start the listener");
    } else {
      s->started = 1;
    }
    if (rc && s->stopfd >= 0) close(s->stopfd), s->stopfd = -1;
  }
  if (!rc && tvec_reserve(&s->cbs, s->cbs.n + 1))
    rc = terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  if (!rc) {
    *token = s->next_token++;
    s->cbs.v[s->cbs.n++] = (pgc_cb){cb, arg, *token};
  }
  pthread_mutex_unlock(&s->cbmu);
  return rc;
}

void pg_unlisten(void *impl, uint64_t token) {
  pgc_state *s = pgc_state_of(impl, 0);
  if (!s || !token) return;
  /* On the listener thread (from a callback) cbmu is held already. */
  int here = s->started && pthread_equal(pthread_self(), s->thread);
  if (!here) pthread_mutex_lock(&s->cbmu);
  for (size_t i = 0; i < s->cbs.n; i++)
    if (s->cbs.v[i].token == token) {
      memmove(&s->cbs.v[i], &s->cbs.v[i + 1],
              (s->cbs.n - i - 1) * sizeof s->cbs.v[0]);
      s->cbs.n--;
      break;
    }
  if (!here) pthread_mutex_unlock(&s->cbmu);
}

void pg__listen_stop(pgstore *p) {
  pthread_mutex_lock(&pgc_all_mu);
  pgc_state **pp = &pgc_all;
  while (*pp && (*pp)->p != p) pp = &(*pp)->next;
  pgc_state *s = *pp;
  if (s) *pp = s->next;
  pthread_mutex_unlock(&pgc_all_mu);
  if (!s) return;
  if (s->started) {
    uint64_t one = 1;
    while (write(s->stopfd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(s->thread, NULL);
  }
  if (s->stopfd >= 0) close(s->stopfd);
  free(s->cbs.v);
  pthread_mutex_destroy(&s->cbmu);
  free(s);
}
