/* test_sched_nodes.c — two scheduler nodes (compute/sched/cluster.c) on one store,
 * in one process, without PostgreSQL.
 *
 * The store is a fake cluster backend (store_open_backend): every job
 * operation goes to one SQLite store; the cluster operations keep their
 * state here, under one lock: claims (node, lease, cancel request), nodes,
 * and the store's events, delivered by a listener thread of the fake's own
 * as PostgreSQL's LISTEN would. Each node has its own store handle, which
 * knows its node id after store_node_register, and the fence of store.h:
 * start and finish of a job claimed by another node answer T_ECONFLICT.
 *
 * Asserts:
 *  - both nodes register and list each other; a job submitted to a node
 *    whose one worker is busy is claimed and run by the other, and a wait
 *    registered on the submitting node (a remote waiter) fires with the job
 *    succeeded in the store;
 *  - a wait registered after the job ended still fires (it reads the store);
 *  - a cancel through the node that does not hold a running job reaches
 *    the holder (the "cancel" event) and the job ends canceled;
 *  - the fence: a running job whose claim goes to the other node (its lease
 *    was lost) writes nothing when it ends — the row is left to the new
 *    holder — and its result file (named for its run) is removed;
 *  - no node claims more jobs than it has workers (claims only up to the
 *    free slots), and every job ends once;
 *  - a job the reaper took back from a dead node: the temporaries of the
 *    run it died in are removed, other runs' files and results stay;
 *  - a stale node (its job went to the other node, which placed the
 *    output) ends its run late: it places nothing over the finished output
 *    and writes no end; a node that holds its output job places the file;
 *  - admission counts the cluster's queued jobs: its 429 names that count
 *    (not this node's own queue), and a queue emptied since is admitted;
 *  - 900 remote waits on 300 jobs: each end calls every wait not taken back
 *    once, none taken back (the remote waiters' buckets).
 */
#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include "compute/array/localfile.h"
#include "db/store_backend.h"
#include "compute/sched/sched_int.h"
#include "sched_fixture.h"

/* ---- the fake cluster store ----------------------------------------------------- */
#define FMAX 256
typedef struct fclaim {
  char id[T_ID_MAX], node[T_ID_MAX];
  int64_t lease_until;
  int cancel;
  int moved; /* moved by the test (fence_case): not a claim of the node's */
} fclaim;
typedef struct fev {
  char what[16], id[T_ID_MAX];
} fev;
typedef struct flistener {
  store_event_fn cb;
  void *arg;
  uint64_t token;
} flistener;

static struct {
  void *q; /* the SQLite backend's handle */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  fclaim claims[FMAX];
  int nclaims;
  store_node nodes[4];
  int nnodes;
  flistener ls[8];
  int nls;
  uint64_t tokens;
  fev evs[FMAX];
  int nevs, quit;
  pthread_mutex_t deliver; /* held while a callback runs: unlisten waits */
  pthread_t thread;
  int max_claimed[4]; /* the most jobs a node held claimed at once */
  store_reaped reap;  /* the next reap's answer (id "": none) */
} F;

typedef struct fnode {
  char self[T_ID_MAX];
} fnode;

#define Q (&store_sqlite_backend)

static fclaim *fclaim_find(const char *id) { /* F.mu */
  for (int i = 0; i < F.nclaims; i++)
    if (strcmp(F.claims[i].id, id) == 0) return &F.claims[i];
  return NULL;
}
static void fclaim_drop(const char *id) { /* F.mu */
  fclaim *c = fclaim_find(id);
  if (c) *c = F.claims[--F.nclaims];
}
static void femit(const char *what, const char *id) {
  pthread_mutex_lock(&F.mu);
  if (F.nevs < FMAX) {
    snprintf(F.evs[F.nevs].what, sizeof F.evs[0].what, "%s", what);
    snprintf(F.evs[F.nevs].id, sizeof F.evs[0].id, "%s", id ? id : "");
    F.nevs++;
    pthread_cond_signal(&F.cv);
  }
  pthread_mutex_unlock(&F.mu);
}
static void *fdeliver(void *arg) {
  (void)arg;
  pthread_mutex_lock(&F.mu);
  while (!F.quit) {
    if (!F.nevs) {
      pthread_cond_wait(&F.cv, &F.mu);
      continue;
    }
    fev ev = F.evs[0];
    memmove(F.evs, F.evs + 1, (size_t)(--F.nevs) * sizeof F.evs[0]);
    flistener ls[8];
    int n = F.nls;
    memcpy(ls, F.ls, sizeof ls);
    pthread_mutex_lock(&F.deliver);
    pthread_mutex_unlock(&F.mu);
    for (int i = 0; i < n; i++) ls[i].cb(ls[i].arg, ev.what, ev.id[0] ? ev.id : NULL);
    pthread_mutex_unlock(&F.deliver);
    pthread_mutex_lock(&F.mu);
  }
  pthread_mutex_unlock(&F.mu);
  return NULL;
}

/* 1 when id is claimed by a node other than self. */
static int fenced(fnode *me, const char *id) {
  pthread_mutex_lock(&F.mu);
  fclaim *c = fclaim_find(id);
  int other = c && strcmp(c->node, me->self) != 0;
  pthread_mutex_unlock(&F.mu);
  return other;
}

static void f_close(void *impl) { free(impl); }
static int f_ready(void *impl) { (void)impl; return Q->ready(F.q); }
static int f_schema_version(void *impl) { (void)impl; return Q->schema_version(F.q); }
static int f_job_insert(void *impl, store_job *j, int *existing, terr *e) {
  (void)impl;
  int rc = Q->job_insert(F.q, j, existing, e);
  if (!rc && !*existing) femit("queued", j->id);
  return rc;
}
static int f_job_insert_async(void *impl, store_job *j, terr *e) {
  (void)impl;
  return Q->job_insert_async(F.q, j, e);
}
static int f_sync(void *impl, terr *e) { (void)impl; return Q->sync(F.q, e); }
static int f_job_get(void *impl, const char *id, const char *owner, store_job *out, terr *e) {
  (void)impl;
  int rc = Q->job_get(F.q, id, owner, out, e);
  if (rc) return rc;
  pthread_mutex_lock(&F.mu);
  fclaim *c = fclaim_find(id);
  if (c) out->node = strdup(c->node);
  pthread_mutex_unlock(&F.mu);
  return rc;
}
static int f_job_list(void *impl, const store_job_filter *f, store_job **out_jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e) {
  (void)impl;
  return Q->job_list(F.q, f, out_jobs, n, has_next, next, total, e);
}
static int f_job_start(void *impl, const char *id, int64_t at, const char *used, const char *reason, const char *est, terr *e) {
  if (fenced(impl, id)) return terr_set(e, T_ECONFLICT, "", -1, "job %s is held by another node", id);
  return Q->job_start(F.q, id, at, used, reason, est, e);
}
static void f_job_start_async(void *impl, const char *id, int64_t at, const char *used, const char *reason, const char *est) {
  if (!fenced(impl, id)) Q->job_start_async(F.q, id, at, used, reason, est);
}
static void f_job_progress(void *impl, const char *id, int64_t d, int64_t t) {
  (void)impl;
  Q->job_progress(F.q, id, d, t);
}
static int f_job_finish(void *impl, const char *id, const store_job_end *end, terr *e) {
  if (fenced(impl, id)) return terr_set(e, T_ECONFLICT, "", -1, "job %s is held by another node", id);
  int rc = Q->job_finish(F.q, id, end, e);
  if (!rc) {
    pthread_mutex_lock(&F.mu);
    fclaim_drop(id);
    pthread_mutex_unlock(&F.mu);
    femit("end", id);
  }
  return rc;
}
typedef struct ffin {
  store_finish_fn cb;
  void *arg;
  char id[T_ID_MAX];
} ffin;
static void f_finished(void *arg, int rc, const terr *e, store_job *row) {
  ffin x = *(ffin *)arg;
  free(arg);
  if (!rc) {
    pthread_mutex_lock(&F.mu);
    fclaim_drop(x.id);
    pthread_mutex_unlock(&F.mu);
    femit("end", x.id);
  }
  x.cb(x.arg, rc, e, row);
}
static int f_job_finish_async(void *impl, const char *id, const store_job_end *end, store_finish_fn cb, void *arg, terr *e) {
  if (fenced(impl, id)) {
    terr fe;
    terr_set(&fe, T_ECONFLICT, "", -1, "job %s is held by another node", id);
    cb(arg, T_ECONFLICT, &fe, NULL);
    return T_OK;
  }
  ffin *x = calloc(1, sizeof *x);
  x->cb = cb, x->arg = arg;
  snprintf(x->id, sizeof x->id, "%s", id);
  int rc = Q->job_finish_async(F.q, id, end, f_finished, x, e);
  if (rc) free(x);
  return rc;
}
static int f_job_result_npy(void *impl, const char *id, const char *owner, void **npy, size_t *len, terr *e) {
  (void)impl;
  return Q->job_result_npy(F.q, id, owner, npy, len, e);
}
static int f_job_requeue(void *impl, const char *id, terr *e) { (void)impl; return Q->job_requeue(F.q, id, e); }
static int f_job_unstart(void *impl, const char *id, terr *e) { (void)impl; return Q->job_unstart(F.q, id, e); }
static int f_job_note_start(void *impl, const char *id, int a, terr *e) { (void)impl; return Q->job_note_start(F.q, id, a, e); }
static int f_job_delete(void *impl, const char *id, const char *owner, char ***p, int *np, terr *e) { (void)impl; return Q->job_delete(F.q, id, owner, p, np, e); }
static int f_job_unfinished(void *impl, store_job **out_jobs, int *n, terr *e) { (void)impl; return Q->job_unfinished(F.q, out_jobs, n, e); }
static int f_expire(void *impl, int64_t b, char ***p, int *np, terr *e) { (void)impl; return Q->expire(F.q, b, p, np, e); }
static int f_stats(void *impl, const char *owner, store_stat **rows, int *n, terr *e) { (void)impl; return Q->stats(F.q, owner, rows, n, e); }
static int f_job_counts(void *impl, const char *owner, int64_t c[5], terr *e) { (void)impl; return Q->job_counts(F.q, owner, c, e); }
static int f_finished_by_step(void *impl, const char *owner, int64_t since, int64_t step, int nsteps, int64_t *c, terr *e) { (void)impl; return Q->finished_by_step(F.q, owner, since, step, nsteps, c, e); }
static int f_array_insert(void *impl, store_array *a, int *ex, terr *e) { (void)impl; return Q->array_insert(F.q, a, ex, e); }
static int f_array_get(void *impl, const char *id, const char *owner, store_array *out, terr *e) { (void)impl; return Q->array_get(F.q, id, owner, out, e); }
static int f_array_delete(void *impl, const char *id, const char *owner, char **path, terr *e) { (void)impl; return Q->array_delete(F.q, id, owner, path, e); }
static int f_array_list(void *impl, const char *owner, const char *cur, int limit, store_array **a, int *n, char *next, terr *e) { (void)impl; return Q->array_list(F.q, owner, cur, limit, a, n, next, e); }
static int f_job_children(void *impl, const char *pid, store_job **out_jobs, int *n, terr *e) { (void)impl; return Q->job_children(F.q, pid, out_jobs, n, e); }

static int f_node_register(void *impl, store_node *n, terr *e) {
  fnode *me = impl;
  t_id_new('n', n->id);
  snprintf(me->self, sizeof me->self, "%s", n->id);
  n->started_at = n->heartbeat_at = t_wall_ms();
  pthread_mutex_lock(&F.mu);
  if (F.nnodes == 4) {
    pthread_mutex_unlock(&F.mu);
    return terr_set(e, T_EINTERNAL, "", -1, "fake: too many nodes");
  }
  store_node *x = &F.nodes[F.nnodes++];
  *x = *n;
  x->name = strdup(n->name);
  x->url = strdup(n->url);
  x->version = strdup(n->version);
  pthread_mutex_unlock(&F.mu);
  return T_OK;
}
static int f_node_index(const char *id) { /* F.mu */
  for (int i = 0; i < F.nnodes; i++)
    if (strcmp(F.nodes[i].id, id) == 0) return i;
  return -1;
}
static char **ids_dup(char ids[][T_ID_MAX], int n) {
  char **out = n ? calloc((size_t)n, sizeof *out) : NULL;
  for (int i = 0; i < n; i++) out[i] = strdup(ids[i]);
  return out;
}
static int f_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms, const char *const *held, int nheld, char ***cancel, int *ncancel, char ***lost, int *nlost, terr *e) {
  fnode *me = impl;
  (void)e;
  char c[FMAX][T_ID_MAX], l[FMAX][T_ID_MAX];
  int nc = 0, nl = 0;
  pthread_mutex_lock(&F.mu);
  int k = f_node_index(me->self);
  if (k >= 0) {
    F.nodes[k].heartbeat_at = t_wall_ms();
    F.nodes[k].running = n->running;
    F.nodes[k].queued = n->queued;
  }
  for (int i = 0; i < F.nclaims; i++)
    if (strcmp(F.claims[i].node, me->self) == 0) {
      F.claims[i].lease_until = t_wall_ms() + lease_ms;
      if (F.claims[i].cancel && nc < FMAX) snprintf(c[nc++], T_ID_MAX, "%s", F.claims[i].id);
    }
  for (int i = 0; i < nheld && nl < FMAX; i++) {
    fclaim *x = fclaim_find(held[i]);
    if (x && strcmp(x->node, me->self) != 0) snprintf(l[nl++], T_ID_MAX, "%s", held[i]);
  }
  pthread_mutex_unlock(&F.mu);
  *cancel = ids_dup(c, nc), *ncancel = nc;
  *lost = ids_dup(l, nl), *nlost = nl;
  return T_OK;
}
static int f_node_leave(void *impl, const char *node_id, terr *e) {
  (void)impl, (void)e;
  pthread_mutex_lock(&F.mu);
  for (int i = 0; i < F.nclaims;)
    if (strcmp(F.claims[i].node, node_id) == 0) F.claims[i] = F.claims[--F.nclaims];
    else i++;
  int k = f_node_index(node_id);
  if (k >= 0) F.nodes[k].heartbeat_at = 0;
  pthread_mutex_unlock(&F.mu);
  return T_OK;
}
static int f_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n, terr *e) {
  (void)impl, (void)keep_ms, (void)e;
  pthread_mutex_lock(&F.mu);
  *nodes = calloc((size_t)F.nnodes + 1, sizeof **nodes);
  *n = F.nnodes;
  for (int i = 0; i < F.nnodes; i++) {
    store_node *x = &(*nodes)[i];
    *x = F.nodes[i];
    x->name = strdup(F.nodes[i].name);
    x->url = strdup(F.nodes[i].url);
    x->version = strdup(F.nodes[i].version);
    x->alive = F.nodes[i].heartbeat_at > 0;
  }
  pthread_mutex_unlock(&F.mu);
  return T_OK;
}
static int f_job_claim(void *impl, const char *node_id, store_claim_room room, int parents, int64_t lease_ms, store_job **out_jobs, int *n, terr *e) {
  (void)impl, (void)parents;
  int max = room.any; /* the fake's jobs are all cpu: room.cpu <= room.any */
  store_job *all = NULL;
  int nall = 0;
  *out_jobs = NULL;
  *n = 0;
  int rc = Q->job_unfinished(F.q, &all, &nall, e);
  if (rc) return rc;
  *out_jobs = calloc((size_t)max + 1, sizeof **out_jobs);
  pthread_mutex_lock(&F.mu);
  for (int i = 0; i < nall; i++) {
    if (*n < max && all[i].status == JOB_QUEUED && !fclaim_find(all[i].id) &&
        F.nclaims < FMAX) {
      fclaim *c = &F.claims[F.nclaims++];
      memset(c, 0, sizeof *c);
      snprintf(c->id, sizeof c->id, "%s", all[i].id);
      snprintf(c->node, sizeof c->node, "%s", node_id);
      c->lease_until = t_wall_ms() + lease_ms;
      store_job *j = &(*out_jobs)[(*n)++];
      *j = all[i];
      memset(&all[i], 0, sizeof all[i]);
      j->node = strdup(node_id);
      j->attempts += 1; /* the claim counts the attempt */
    }
    store_job_clear(&all[i]);
  }
  int held = 0, k = f_node_index(node_id);
  for (int i = 0; i < F.nclaims; i++)
    held += !F.claims[i].moved && strcmp(F.claims[i].node, node_id) == 0;
  if (k >= 0 && held > F.max_claimed[k]) F.max_claimed[k] = held;
  pthread_mutex_unlock(&F.mu);
  free(all);
  return T_OK;
}
static int f_reap(void *impl, int max_attempts, store_reaped **out, int *n, terr *e) {
  (void)impl, (void)max_attempts, (void)e;
  *out = NULL, *n = 0; /* leases are moved by the test itself; */
  pthread_mutex_lock(&F.mu);
  if (F.reap.id[0]) { /* a reap the test planted, answered once */
    *out = malloc(sizeof **out);
    if (*out) **out = F.reap, *n = 1;
    F.reap.id[0] = 0;
  }
  pthread_mutex_unlock(&F.mu);
  return T_OK;
}
static int f_job_cancel_request(void *impl, const char *id, const char *owner, int *ended, terr *e) {
  store_job j;
  memset(&j, 0, sizeof j);
  int rc = f_job_get(impl, id, owner, &j, e);
  if (rc) return rc;
  *ended = 0;
  if (job_status_final(j.status)) {
    store_job_clear(&j);
    return terr_set(e, T_ECONFLICT, "", -1, "job %s already ended", id);
  }
  store_job_clear(&j);
  pthread_mutex_lock(&F.mu);
  fclaim *c = fclaim_find(id);
  if (c) c->cancel = 1;
  pthread_mutex_unlock(&F.mu);
  if (c) {
    femit("cancel", id);
    return T_OK;
  }
  store_job_end end = {.status = JOB_CANCELED, .finished_at = t_wall_ms(),
                       .max_abs_diff = NAN, .error_code = "canceled",
                       .error_message = "canceled by request"};
  rc = Q->job_finish(F.q, id, &end, e);
  if (!rc) femit("end", id), *ended = 1;
  return rc;
}
static int f_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token, terr *e) {
  (void)impl, (void)e;
  pthread_mutex_lock(&F.mu);
  F.ls[F.nls].cb = cb, F.ls[F.nls].arg = arg, F.ls[F.nls].token = ++F.tokens;
  *token = F.ls[F.nls++].token;
  pthread_mutex_unlock(&F.mu);
  return T_OK;
}
static void f_unlisten(void *impl, uint64_t token) {
  (void)impl;
  pthread_mutex_lock(&F.mu);
  for (int i = 0; i < F.nls; i++)
    if (F.ls[i].token == token) F.ls[i] = F.ls[--F.nls];
  pthread_mutex_unlock(&F.mu);
  pthread_mutex_lock(&F.deliver); /* a callback under way has returned */
  pthread_mutex_unlock(&F.deliver);
}
static int f_queue_depth(void *impl, int64_t *queued, terr *e) {
  (void)impl;
  int64_t c[5];
  int rc = Q->job_counts(F.q, NULL, c, e);
  *queued = rc ? 0 : c[JOB_QUEUED];
  return rc;
}

static const store_backend fake_backend = {
    .name = "postgresql", .cluster = 1, .close = f_close, .ready = f_ready,
    .schema_version = f_schema_version, .job_insert = f_job_insert,
    .job_insert_async = f_job_insert_async, .sync = f_sync,
    .job_get = f_job_get, .job_list = f_job_list, .job_start = f_job_start,
    .job_start_async = f_job_start_async, .job_progress = f_job_progress,
    .job_finish = f_job_finish, .job_finish_async = f_job_finish_async,
    .job_result_npy = f_job_result_npy, .job_requeue = f_job_requeue,
    .job_unstart = f_job_unstart, .job_note_start = f_job_note_start,
    .job_delete = f_job_delete, .job_unfinished = f_job_unfinished,
    .expire = f_expire, .stats = f_stats, .job_counts = f_job_counts,
    .finished_by_step = f_finished_by_step, .array_insert = f_array_insert,
    .array_get = f_array_get, .array_delete = f_array_delete,
    .array_list = f_array_list, .job_children = f_job_children,
    .node_register = f_node_register, .node_heartbeat = f_node_heartbeat,
    .node_leave = f_node_leave, .node_list = f_node_list,
    .job_claim = f_job_claim, .reap = f_reap,
    .job_cancel_request = f_job_cancel_request, .listen = f_listen,
    .unlisten = f_unlisten, .queue_depth = f_queue_depth};

/* ---- two nodes ------------------------------------------------------------------- */
typedef struct node {
  store *st;
  sched *s;
  char id[T_ID_MAX];
} node;
static char dir[300];
static const tlocal *node_local; /* --local-dir of the nodes opened next */

static int fake_open(void) {
  memset(&F, 0, sizeof F);
  pthread_mutex_init(&F.mu, NULL);
  pthread_mutex_init(&F.deliver, NULL);
  pthread_cond_init(&F.cv, NULL);
  snprintf(dir, sizeof dir, "%s/d%d", root, dir_seq++);
  terr e;
  if (t_mkdirs(dir) || store_sqlite_open(dir, &F.q, &e)) return -1;
  return pthread_create(&F.thread, NULL, fdeliver, NULL);
}

static void fake_close(void) {
  pthread_mutex_lock(&F.mu);
  F.quit = 1;
  pthread_cond_signal(&F.cv);
  pthread_mutex_unlock(&F.mu);
  pthread_join(F.thread, NULL);
  Q->close(F.q);
  for (int i = 0; i < F.nnodes; i++) store_node_clear(&F.nodes[i]);
}

static int node_open(node *n, const char *name, int threads) {
  memset(n, 0, sizeof *n);
  terr e;
  if (store_open_backend(&fake_backend, calloc(1, sizeof(fnode)), &n->st, &e))
    return -1;
  sched_config cfg = {.st = n->st, .data_dir = dir, .threads = threads,
                      .queue_limit = 100, .inline_result_max = 64,
                      .kind_lookup = test_kinds, .local = node_local};
  int rc = sched_create(&cfg, &n->s, &e);
  CHECK_MSG(rc == 0, "sched_create: %s", e.message);
  if (!rc) rc = sched_start(n->s, &e);
  sched_node_config nc = {.name = name, .url = "http://x/", .version = "t",
                          .lease_ms = 600};
  if (!rc) rc = sched_join(n->s, &nc, &e);
  CHECK_MSG(rc == 0, "start/join %s: %s", name, e.message);
  char nm[64];
  sched_node_self(n->s, n->id, nm, sizeof nm);
  return rc;
}

static void node_close(node *n) {
  sched_destroy(n->s);
  store_close(n->st);
}

/* The API's submit on node n: reserve, insert, enqueue (a cluster store
 * leaves the row to the claimers). */
static void nsubmit(node *n, const char *kind, const char *params, char id[T_ID_MAX]) {
  int retry;
  terr e;
  CHECK(sched_reserve(n->s, &retry, &e) == 0);
  CHECK(insert_job(n->st, kind, params, "cpu", 0, 60, id) == 0);
  store_job j;
  CHECK(store_job_get(n->st, id, NULL, &j, &e) == 0);
  CHECK(sched_enqueue(n->s, &j, &e) == 0);
  store_job_clear(&j);
}

/* The claim's node of a job ("" when none), waiting up to ~10 s for one. */
static void claimed_by(const char *id, char out[T_ID_MAX]) {
  out[0] = 0;
  for (int i = 0; i < 5000 && !out[0]; i++) {
    pthread_mutex_lock(&F.mu);
    fclaim *c = fclaim_find(id);
    if (c) snprintf(out, T_ID_MAX, "%s", c->node);
    pthread_mutex_unlock(&F.mu);
    if (!out[0]) sleep_ms(2);
  }
}

static int wait_running(node *n, const char *id) {
  for (int i = 0; i < 5000; i++) {
    store_job j;
    terr e;
    memset(&j, 0, sizeof j);
    int running = store_job_get(n->st, id, NULL, &j, &e) == 0 && j.status == JOB_RUNNING;
    store_job_clear(&j);
    if (running) return 1;
    sleep_ms(2);
  }
  return 0;
}

typedef struct wres {
  atomic_int fired;
  char id[T_ID_MAX];
} wres;
static void on_end(void *arg, const char *id, const store_job *ended) {
  wres *w = arg;
  (void)ended;
  snprintf(w->id, sizeof w->id, "%s", id);
  atomic_store(&w->fired, 1);
}
static int wait_fired(wres *w) {
  for (int i = 0; i < 10000 && !atomic_load(&w->fired); i++) sleep_ms(2);
  return atomic_load(&w->fired);
}

static int final_status(node *n, const char *id, store_job *out) {
  for (int i = 0; i < 10000; i++) {
    terr e;
    memset(out, 0, sizeof *out);
    if (store_job_get(n->st, id, NULL, out, &e) == 0 && job_status_final(out->status))
      return 1;
    store_job_clear(out);
    sleep_ms(2);
  }
  return 0;
}

/* The claim of a running gate job moves to the other node (its lease
 * went there); the gate opens wait_ms later. Nothing of the old holder's
 * run may be written, and no result file of its run may stay. */
static void fence_case(node *a, node *b, int wait_ms) {
  terr e;
  char f[T_ID_MAX], holder[T_ID_MAX];
  atomic_store(&gate_open, 0);
  nsubmit(a, "gate", "{\"n\":1}", f);
  claimed_by(f, holder);
  CHECK(wait_running(a, f));
  node *h = strcmp(holder, a->id) == 0 ? a : b;
  node *other = h == a ? b : a;
  pthread_mutex_lock(&F.mu);
  fclaim *c = fclaim_find(f);
  if (c) snprintf(c->node, sizeof c->node, "%s", other->id), c->moved = 1;
  pthread_mutex_unlock(&F.mu);
  if (wait_ms) sleep_ms(wait_ms); /* heartbeats every 200 ms */
  atomic_store(&gate_open, 1);
  /* the old holder is done with it once it holds no job */
  for (int i = 0; i < 5000; i++) {
    sched_stats st;
    sched_get_stats(h->s, &st);
    if (st.running == 0 && st.queued == 0) break;
    sleep_ms(2);
  }
  sleep_ms(100); /* an end it might (wrongly) have queued commits */
  store_job row;
  memset(&row, 0, sizeof row);
  CHECK(store_job_get(a->st, f, NULL, &row, &e) == 0);
  CHECK_MSG(row.status == JOB_RUNNING, "status %s", job_status_name(row.status));
  CHECK(row.result_path == NULL);
  store_job_clear(&row);
  char path[400];
  snprintf(path, sizeof path, "%s/results", dir);
  DIR *d = opendir(path);
  struct dirent *de;
  while (d && (de = readdir(d)))
    CHECK_MSG(strncmp(de->d_name, f, strlen(f)) != 0, "%s stayed", de->d_name);
  if (d) closedir(d);
}

TEST(test_two_nodes) {
  if (fake_open()) {
    CHECK(0);
    return;
  }
  atomic_store(&gate_open, 0);
  node a, b;
  if (node_open(&a, "a", 1) || node_open(&b, "b", 1)) return;
  /* b joined after a's last node list: a names it at once all the same
   * (a job b ran is shown with b's name, not its id), and an id no node
   * has is no name */
  char nm[64] = "";
  CHECK_MSG(sched_node_name(a.s, b.id, nm, sizeof nm) && strcmp(nm, "b") == 0,
            "b's name on a: '%s'", nm);
  CHECK(!sched_node_name(a.s, "n_00000000000000000000000000", nm, sizeof nm));
  store_node *ns = NULL;
  int nn = 0;
  terr e;
  CHECK(sched_nodes(a.s, &ns, &nn, &e) == 0 && nn == 2);
  store_nodes_free(ns, nn);

  /* a gate job holds one node's only worker */
  char g[T_ID_MAX], holder[T_ID_MAX];
  nsubmit(&a, "gate", "{\"n\":1}", g);
  claimed_by(g, holder);
  CHECK(holder[0]);
  CHECK(wait_running(&a, g));
  node *busy = strcmp(holder, a.id) == 0 ? &a : &b;
  node *free_ = busy == &a ? &b : &a;

  /* a job submitted to the busy node runs on the other; a wait on the
   * busy node (which does not hold it) fires */
  char q[T_ID_MAX], qholder[T_ID_MAX];
  nsubmit(busy, "sleepy", "{\"n\":3}", q);
  wres w1;
  memset(&w1, 0, sizeof w1);
  uint64_t tok = 0;
  CHECK(sched_wait_end(busy->s, q, on_end, &w1, &tok) == 0);
  CHECK(wait_fired(&w1));
  CHECK(strcmp(w1.id, q) == 0);
  store_job row;
  CHECK(final_status(busy, q, &row) && row.status == JOB_SUCCEEDED);
  store_job_clear(&row);
  claimed_by(q, qholder); /* the claim is gone once it ended */
  CHECK(qholder[0] == 0);

  /* a wait registered after the end fires too (it reads the store) */
  wres w2;
  memset(&w2, 0, sizeof w2);
  CHECK(sched_wait_end(busy->s, q, on_end, &w2, &tok) == 0);
  CHECK(wait_fired(&w2));

  /* cancel through the node that does not hold the gate job */
  CHECK(sched_cancel(free_->s, g, NULL, &e) == 0);
  CHECK(final_status(free_, g, &row) && row.status == JOB_CANCELED);
  store_job_clear(&row);

  /* the fence, twice: the old holder hears of it at a heartbeat (the job
   * stops), or only at its finish (refused: its result file is removed) */
  fence_case(&a, &b, 500);
  fence_case(&a, &b, 0);

  /* claims never beyond the free slots: one worker each */
  atomic_store(&gate_open, 1);
  char many[12][T_ID_MAX];
  for (int i = 0; i < 12; i++)
    nsubmit(i % 2 ? &a : &b, "sleepy", "{\"n\":2,\"ms\":2}", many[i]);
  for (int i = 0; i < 12; i++) {
    CHECK(final_status(&a, many[i], &row) && row.status == JOB_SUCCEEDED);
    store_job_clear(&row);
  }
  for (int k = 0; k < 2; k++)
    CHECK_MSG(F.max_claimed[k] == 1, "node %d held %d claims", k,
              F.max_claimed[k]); /* one worker: one claim at a time */
  node_close(&a);
  node_close(&b);
  fake_close();
}

/* nsubmit with "output": {"file": out}. */
static void nsubmit_out(node *n, const char *kind, const char *params,
                        const char *out, char id[T_ID_MAX]) {
  int retry;
  terr e;
  CHECK(sched_reserve(n->s, &retry, &e) == 0);
  store_job j;
  memset(&j, 0, sizeof j);
  j.owner = strdup("");
  j.kind = strdup(kind);
  j.params = strdup(params);
  j.backend_requested = strdup("cpu");
  j.body_hash = strdup("0");
  j.output_file = strdup(out);
  j.timeout_s = 60;
  j.max_abs_diff = NAN;
  int existing;
  CHECK(store_job_insert(n->st, &j, &existing, &e) == 0);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
  CHECK(store_job_get(n->st, id, NULL, &j, &e) == 0);
  CHECK(sched_enqueue(n->s, &j, &e) == 0);
  store_job_clear(&j);
}

static size_t held_jobs(node *n) {
  tmutex_lock(&n->s->mu);
  size_t k = n->s->njobs;
  tmutex_unlock(&n->s->mu);
  return k;
}

/* Issue 23, case 6: a node whose job went to another node (it was paused
 * past its lease; the other node finished the job and placed its output)
 * ends its run late: it must not place its own output over the finished
 * one (the fenced "still held" step comes before the placement), and it
 * writes no end. An output job of a node that still holds it is placed. */
TEST(test_stale_node_output) {
  if (fake_open()) {
    CHECK(0);
    return;
  }
  char ldir[400], out[500], f[T_ID_MAX], holder[T_ID_MAX];
  snprintf(ldir, sizeof ldir, "%s/local", dir);
  CHECK(t_mkdirs(ldir) == 0);
  const char *dirs[] = {ldir};
  tlocal *l = NULL;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  node_local = l;
  node a, b;
  if (node_open(&a, "a", 1) || node_open(&b, "b", 1)) return;
  snprintf(out, sizeof out, "%s/o.npy", ldir);
  const char finished[] = "the output the other node placed";
  FILE *fp = fopen(out, "w");
  CHECK(fp && fputs(finished, fp) >= 0);
  if (fp) fclose(fp);

  atomic_store(&gate_open, 0);
  nsubmit_out(&a, "gate", "{\"n\":1}", out, f);
  claimed_by(f, holder);
  CHECK(wait_running(&a, f));
  node *h = strcmp(holder, a.id) == 0 ? &a : &b;
  node *other = h == &a ? &b : &a;
  pthread_mutex_lock(&F.mu); /* the job is the other node's now */
  fclaim *c = fclaim_find(f);
  if (c) snprintf(c->node, sizeof c->node, "%s", other->id), c->moved = 1;
  pthread_mutex_unlock(&F.mu);
  atomic_store(&gate_open, 1); /* the stale node resumes and ends its run */
  for (int i = 0; i < 5000 && held_jobs(h) > 0; i++) sleep_ms(2);
  CHECK(held_jobs(h) == 0);
  char buf[128] = "";
  fp = fopen(out, "r");
  size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
  buf[n] = 0;
  if (fp) fclose(fp);
  CHECK_MSG(strcmp(buf, finished) == 0, "the output was replaced (%zu bytes)",
            n);
  DIR *d = opendir(ldir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    CHECK_MSG(de->d_name[0] != '.' || !strstr(de->d_name, ".tmp"),
              "%s stayed", de->d_name);
  if (d) closedir(d);
  store_job row;
  memset(&row, 0, sizeof row);
  CHECK(store_job_get(a.st, f, NULL, &row, &e) == 0 &&
        row.status == JOB_RUNNING); /* no end written either */
  store_job_clear(&row);

  /* held to the end: placed */
  char g[T_ID_MAX], out2[500];
  snprintf(out2, sizeof out2, "%s/o2.npy", ldir);
  nsubmit_out(&b, "gate", "{\"n\":1}", out2, g);
  CHECK(final_status(&b, g, &row) && row.status == JOB_SUCCEEDED);
  store_job_clear(&row);
  tarray *r = NULL;
  CHECK(tarray_map_npy(out2, &r, &e) == 0 && r && r->size == 1 &&
        ((double *)r->data)[0] == 42);
  tarray_free(r);
  node_close(&a);
  node_close(&b);
  node_local = NULL;
  tlocal_free(l);
  fake_close();
}

/* Touch <dir>/results/<name>. */
static void plant(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/results/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK_MSG(f != NULL, "cannot create %s", path);
  if (f) fclose(f);
}
static int planted(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/results/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* A job taken back from a dead node by the reaper: the files of the run it
 * died in are removed, its temporaries (<id>.r<attempt>.npy.tmp<N>, a
 * part's too) and the result files it completed before its end was
 * recorded; another attempt's files, another job's and finished results
 * stay. */
TEST(test_reap_removes_dead_run_temporaries) {
  if (fake_open()) {
    CHECK(0);
    return;
  }
  node a;
  if (node_open(&a, "a", 1)) return;
  char id[T_ID_MAX], other[T_ID_MAX], name[10][128];
  t_id_new('j', id);
  t_id_new('j', other);
  snprintf(name[0], sizeof name[0], "%s.r2.npy.tmp7", id);      /* goes */
  snprintf(name[1], sizeof name[1], "%s.r2.dist.npy.tmp8", id);  /* goes */
  snprintf(name[2], sizeof name[2], "%s.r1.npy.tmp3", id);       /* stays */
  snprintf(name[3], sizeof name[3], "%s.r12.npy.tmp4", id);      /* stays */
  snprintf(name[4], sizeof name[4], "%s.r1.npy", id);            /* stays */
  snprintf(name[5], sizeof name[5], "%s.r2.npy.tmp1", other);    /* stays */
  snprintf(name[6], sizeof name[6], "%s.npy", other);            /* stays */
  /* written whole by the dead run, its end never recorded: go too */
  snprintf(name[7], sizeof name[7], "%s.r2.npy", id);
  snprintf(name[8], sizeof name[8], "%s.r2.dist.npy", id);
  for (int i = 0; i < 9; i++) plant(name[i]);
  pthread_mutex_lock(&F.mu);
  snprintf(F.reap.id, sizeof F.reap.id, "%s", id);
  F.reap.attempt = 2;
  pthread_mutex_unlock(&F.mu);
  /* the reaper runs every lease/2 (300 ms): a bound, not a speed */
  for (int i = 0; i < 5000 && (planted(name[0]) || planted(name[1]) ||
                              planted(name[7]) || planted(name[8]));
       i++)
    sleep_ms(2);
  for (int i = 0; i < 2; i++) CHECK_MSG(!planted(name[i]), "%s stayed", name[i]);
  for (int i = 7; i < 9; i++) CHECK_MSG(!planted(name[i]), "%s stayed", name[i]);
  for (int i = 2; i < 7; i++) CHECK_MSG(planted(name[i]), "%s was removed", name[i]);
  node_close(&a);
  fake_close();
}

/* Admission on a cluster counts the store's queued jobs (every node's),
 * not this node's own queue (what it claimed): a refusal names that
 * count, and once the store's queue empties a submit is taken again
 * (admission's refusal has the depth read again; a bound, not a speed). */
#define NFULL 101
TEST(test_queue_full_names_the_cluster_count) {
  if (fake_open()) {
    CHECK(0);
    return;
  }
  atomic_store(&gate_open, 0);
  node a;
  if (node_open(&a, "a", 1)) return; /* queue_limit 100, one worker */
  static char ids[NFULL][T_ID_MAX];
  for (int i = 0; i < NFULL; i++)
    CHECK(insert_job(a.st, "gate", "{\"n\":1}", "cpu", 0, 60, ids[i]) == 0);
  /* one runs (held by the gate); the rest wait in the store */
  int retry = 0, rc = 0;
  terr e;
  for (int i = 0; i < 5000; i++) {
    if ((rc = sched_reserve(a.s, &retry, &e)) != 0) break;
    sched_unreserve(a.s);
    sleep_ms(2);
  }
  CHECK_MSG(rc == T_EBUSY, "never refused: rc %d", rc);
  long long named = -1;
  const char *at = rc ? strstr(e.message, "(") : NULL;
  if (at) sscanf(at, "(%lld jobs queued", &named);
  CHECK_MSG(named >= 99 && strstr(e.message, "in the cluster"),
            "the refusal names another count: %s", e.message);
  CHECK(retry >= 1);
  /* the store's queue empties (canceled while queued): taken again */
  for (int i = 0; i < NFULL; i++) {
    int ended;
    store_job_cancel_request(a.st, ids[i], NULL, &ended, &e);
  }
  for (int i = 0; i < 5000 && (rc = sched_reserve(a.s, &retry, &e)) != 0; i++)
    sleep_ms(2);
  CHECK_MSG(rc == 0, "still refused: %s", e.message);
  if (rc == 0) sched_unreserve(a.s);
  atomic_store(&gate_open, 1);
  node_close(&a);
  fake_close();
}

/* Many remote waiters (s->rhash, compute/sched/wait.c): three waits on
 * each of 300 jobs no node holds, every third unwaited before its end;
 * the "end" of each job (sched_fire_remote, as the listener calls it)
 * calls every wait not taken back exactly once, with its own id, and
 * never one sched_unwait took back (the waiter thread's read may fire
 * them first: either way once). A second "end" calls nothing more. */
#define NRW 300
typedef struct rwait {
  atomic_int calls;
  int bad;
  char id[T_ID_MAX];
} rwait;
static void on_rwait(void *arg, const char *id, const store_job *ended) {
  rwait *w = arg;
  (void)ended;
  if (strcmp(id, w->id) != 0) w->bad = 1;
  atomic_fetch_add(&w->calls, 1);
}

TEST(test_many_remote_waiters) {
  if (fake_open()) {
    CHECK(0);
    return;
  }
  node a;
  if (node_open(&a, "a", 1)) return;
  static rwait w[NRW * 3];
  static uint64_t tok[NRW * 3];
  static int taken[NRW * 3];
  for (int i = 0; i < NRW * 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    if (i % 3 == 0) t_id_new('j', w[i].id);
    else /* the first of its three: memmove, as -Wrestrict cannot see i % 3 > 0 */
      memmove(w[i].id, w[i - i % 3].id, sizeof w[i].id);
    CHECK(sched_wait_end(a.s, w[i].id, on_rwait, &w[i], &tok[i]) == 0);
  }
  for (int i = 2; i < NRW * 3; i += 3) taken[i] = sched_unwait(a.s, tok[i]);
  for (int i = 0; i < NRW * 3; i += 3) sched_fire_remote(a.s, w[i].id, NULL);
  int left = 1;
  for (int k = 0; k < 5000 && left; k++) {
    left = 0;
    for (int i = 0; i < NRW * 3; i++)
      left += !taken[i] && atomic_load(&w[i].calls) == 0;
    if (left) sleep_ms(2);
  }
  for (int i = 0; i < NRW * 3; i += 3) sched_fire_remote(a.s, w[i].id, NULL);
  int wrong = 0;
  for (int i = 0; i < NRW * 3; i++)
    wrong += w[i].bad || atomic_load(&w[i].calls) != (taken[i] ? 0 : 1);
  CHECK_MSG(wrong == 0, "%d of %d waits called wrongly", wrong, NRW * 3);
  node_close(&a);
  fake_close();
}

int main(void) {
  t_log_level = T_LOG_ERROR;
  snprintf(root, sizeof root, "/tmp/tessel_schednodes_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_two_nodes);
  RUN(test_reap_removes_dead_run_temporaries);
  RUN(test_stale_node_output);
  RUN(test_queue_full_names_the_cluster_count);
  RUN(test_many_remote_waiters);
  rm_tree(root);
  return check_summary();
}
