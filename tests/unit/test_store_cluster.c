/* test_store_cluster.c — the cluster operations of the PostgreSQL store
 * (store.h "cluster"; db/pg/pg_cluster.c) with two stores on one database,
 * as two nodes would have them.
 *
 * Checks: nodes register and list (alive, gone after leave); 500 queued
 * jobs claimed by 4 threads over both stores go to exactly one claimer
 * each, recorded as that node's with attempts 1; cuda jobs only for a
 * node with a GPU; split parents only with parents; claims in priority
 * order, FIFO within; a heartbeat renews leases and returns cancel
 * requests and lost jobs; a node that stops heartbeating has its jobs
 * reaped back to the queue after the lease, and a job at max_attempts
 * fails "crashed"; two stores reaping at once move each job once; a
 * cancel request ends an unclaimed job at once and marks a claimed one
 * (not found / conflict otherwise); leave puts unstarted claims back; the
 * listener of one store gets "queued", "end" and "cancel" from the other,
 * and "reset" once the server restarted (then events again).
 *
 * Runs only with a server: $TESSEL_TEST_PG (tests/cluster/with_pg.sh sets
 * it; ctest store_cluster_pg); without it the program is skipped (77).
 * Each test makes a database of its own (createdb on the server's socket
 * folder, the conninfo's host) and a data directory under the mkdtemp
 * root. Waits have deadlines only as bounds (nothing is timed).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "store_fixture.h"

static const char *pg_url;  /* $TESSEL_TEST_PG */
static char pg_host[256];   /* its host= (the socket folder) */
static int db_seq;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A fresh database and data directory: url (conninfo) and dir filled. */
static int fresh_db(char *url, size_t un, char *dir, size_t dn) {
  char name[32], cmd[700];
  snprintf(name, sizeof name, "tc%d_%d", (int)getpid(), db_seq++);
  const char *bin = getenv("PG_BIN") ? getenv("PG_BIN") : "/usr/lib/postgresql/15/bin";
  snprintf(cmd, sizeof cmd, "'%s/createdb' -h '%s' -U postgres %s", bin,
           pg_host, name);
  if (system(cmd) != 0) {
    CHECK_MSG(0, "createdb %s failed", name);
    return -1;
  }
  const char *tail = strstr(pg_url, "/tessel?");
  if (!tail) return -1;
  snprintf(url, un, "%.*s/%s%s", (int)(tail - pg_url), pg_url, name,
           tail + strlen("/tessel"));
  fresh_dir(dir, dn);
  return 0;
}

static store *open_pg(const char *url, const char *dir) {
  store *s = NULL;
  terr e;
  terr_clear(&e);
  int rc = store_open_url(url, dir, &s, &e);
  CHECK_MSG(rc == 0, "store_open_url: %s", e.message);
  return s;
}

/* Two stores on one fresh database: the test's two nodes. */
static int open_pair(store **a, store **b) {
  char url[600], dir[300];
  *a = *b = NULL;
  if (fresh_db(url, sizeof url, dir, sizeof dir)) return -1;
  *a = open_pg(url, dir);
  *b = *a ? open_pg(url, dir) : NULL;
  if (!*b) {
    store_close(*a);
    return -1;
  }
  return 0;
}

static int reg(store *s, store_node *n, const char *name, int gpus) {
  memset(n, 0, sizeof *n);
  n->name = sdup(name);
  n->url = sdup("http://127.0.0.1:1");
  n->version = sdup("test");
  n->threads = 4;
  n->gpus = gpus;
  n->load = NAN;
  terr e;
  int rc = store_node_register(s, n, &e);
  CHECK_MSG(rc == 0, "register: %s", e.message);
  return rc;
}

static int insert_full(store *s, const char *backend, int priority, int tiles,
                       char id[T_ID_MAX]) {
  store_job j;
  job_init(&j, "alice", "map");
  free(j.backend_requested);
  j.backend_requested = sdup(backend);
  j.priority = priority;
  j.tiles = tiles;
  terr e;
  int rc = store_job_insert(s, &j, NULL, &e);
  CHECK_MSG(rc == 0, "insert: %s", e.message);
  if (!rc) snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
  return rc;
}

static void free_jobs(store_job *jobs, int n) {
  for (int i = 0; i < n; i++) store_job_clear(&jobs[i]);
  free(jobs);
}

static void free_ids(char **ids, int n) {
  for (int i = 0; i < n; i++) free(ids[i]);
  free(ids);
}

static int has_id(char **ids, int n, const char *id) {
  for (int i = 0; i < n; i++)
    if (strcmp(ids[i], id) == 0) return 1;
  return 0;
}

/* The job's status, its row in *out (always to store_job_clear; zeroed
 * when the read failed: status -1). */
static job_status status_of(store *s, const char *id, store_job *out) {
  store_job j;
  terr e;
  memset(&j, 0, sizeof j);
  int rc = store_job_get(s, id, NULL, &j, &e);
  job_status st = rc ? (job_status)-1 : j.status;
  if (rc) memset(&j, 0, sizeof j);
  if (out) *out = j;
  else store_job_clear(&j);
  return st;
}

/* Claim exactly one job (max 1) for node: its id in id ("" when none). */
static void claim_one(store *s, const char *node, int gpu, int parents,
                      int64_t lease, char id[T_ID_MAX]) {
  store_job *jobs = NULL;
  int n = -1;
  terr e;
  int rc = store_job_claim(s, node, gpu, parents, 1, lease, &jobs, &n, &e);
  CHECK_MSG(rc == 0, "claim: %s", e.message);
  id[0] = 0;
  if (rc == 0 && n == 1) snprintf(id, T_ID_MAX, "%s", jobs[0].id);
  if (rc == 0) CHECK(n == 0 || n == 1);
  free_jobs(jobs, rc == 0 ? n : 0);
}

/* Wait (bounded) until wall time passes ms. */
static void wait_past(int64_t ms) {
  for (int i = 0; i < 1000 && t_wall_ms() <= ms + 20; i++) sleep_ms(10);
}

/* ---- nodes ------------------------------------------------------------------- */
TEST(test_nodes) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  CHECK(store_is_cluster(a));
  store_node na, nb;
  reg(a, &na, "alpha", 0);
  reg(b, &nb, "beta", 1);
  CHECK(strncmp(na.id, "n_", 2) == 0 && strcmp(na.id, nb.id) != 0);
  CHECK(na.started_at > 0 && na.heartbeat_at >= na.started_at);
  store_node *nodes = NULL;
  int n = 0;
  terr e;
  CHECK(store_node_list(a, 600000, &nodes, &n, &e) == 0);
  CHECK(n == 2);
  for (int i = 0; i < n; i++) {
    int isa = strcmp(nodes[i].id, na.id) == 0;
    CHECK(isa || strcmp(nodes[i].id, nb.id) == 0);
    CHECK_STR(nodes[i].name, isa ? "alpha" : "beta");
    CHECK(nodes[i].gpus == (isa ? 0 : 1) && nodes[i].threads == 4);
    CHECK(nodes[i].alive == 1);
  }
  store_nodes_free(nodes, n);
  /* A heartbeat writes the counters. */
  nb.running = 3, nb.queued = 2, nb.load = 12.5;
  char **c = NULL, **l = NULL;
  int nc = -1, nl = -1;
  CHECK(store_node_heartbeat(b, &nb, 10000, NULL, 0, &c, &nc, &l, &nl, &e) == 0);
  CHECK(nc == 0 && nl == 0 && !c && !l);
  CHECK(store_node_leave(a, na.id, &e) == 0);
  CHECK(store_node_list(b, 600000, &nodes, &n, &e) == 0);
  CHECK(n == 2);
  for (int i = 0; i < n; i++) {
    if (strcmp(nodes[i].id, na.id) == 0) {
      CHECK(nodes[i].alive == 0); /* gone */
    } else {
      CHECK(nodes[i].alive == 1);
      CHECK(nodes[i].running == 3 && nodes[i].queued == 2);
      CHECK_NEAR(nodes[i].load, 12.5, 1e-9);
    }
  }
  store_nodes_free(nodes, n);
  store_node_clear(&na);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
}

/* ---- concurrent claims ------------------------------------------------------- */
enum { NJOBS = 500, NTHREADS = 4 };

typedef struct claimer {
  store *s;
  const char *node;
  char (*got)[T_ID_MAX];
  int n, errors, wrong;
} claimer;

static void *claim_loop(void *p) {
  claimer *c = p;
  for (int empty = 0; empty < 3;) {
    store_job *jobs = NULL;
    int n = 0;
    terr e;
    if (store_job_claim(c->s, c->node, 0, 1, 7, 60000, &jobs, &n, &e)) {
      c->errors++;
      if (c->errors > 20) break;
      continue;
    }
    empty = n ? 0 : empty + 1;
    for (int i = 0; i < n && c->n < NJOBS; i++) {
      if (!jobs[i].node || strcmp(jobs[i].node, c->node) || jobs[i].attempts != 1)
        c->wrong++;
      snprintf(c->got[c->n++], T_ID_MAX, "%s", jobs[i].id);
    }
    free_jobs(jobs, n);
  }
  return NULL;
}

static int cmp_id(const void *x, const void *y) {
  return strcmp((const char *)x, (const char *)y);
}

TEST(test_claim_concurrent) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  store_node na, nb;
  reg(a, &na, "alpha", 0);
  reg(b, &nb, "beta", 0);
  static char ids[NJOBS][T_ID_MAX];
  for (int i = 0; i < NJOBS; i++)
    if (insert_full(i % 2 ? a : b, "cpu", 0, 0, ids[i])) goto out;
  static char got[NTHREADS][NJOBS][T_ID_MAX];
  claimer c[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    c[i] = (claimer){i % 2 ? a : b, i % 2 ? na.id : nb.id, got[i], 0, 0, 0};
    pthread_create(&th[i], NULL, claim_loop, &c[i]);
  }
  static char all[NTHREADS * NJOBS][T_ID_MAX];
  int total = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    CHECK(c[i].errors == 0 && c[i].wrong == 0);
    for (int k = 0; k < c[i].n; k++) memcpy(all[total++], got[i][k], T_ID_MAX);
  }
  CHECK_MSG(total == NJOBS, "claimed %d of %d", total, NJOBS);
  qsort(all, (size_t)total, T_ID_MAX, cmp_id);
  qsort(ids, NJOBS, T_ID_MAX, cmp_id);
  int dups = 0, diff = 0;
  for (int i = 1; i < total; i++) dups += strcmp(all[i], all[i - 1]) == 0;
  for (int i = 0; i < total && i < NJOBS; i++) diff += strcmp(all[i], ids[i]) != 0;
  CHECK(dups == 0 && diff == 0);
  /* Every row says which node holds it; none is claimable any more. */
  char none[T_ID_MAX];
  claim_one(a, na.id, 1, 1, 60000, none);
  CHECK(none[0] == 0);
  int64_t depth = -1;
  terr e;
  CHECK(store_queue_depth(a, &depth, &e) == 0 && depth == NJOBS);
out:
  store_node_clear(&na);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
}

/* ---- filters and order ------------------------------------------------------- */
TEST(test_claim_filters_order) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  store_node na, nb;
  reg(a, &na, "cpu-node", 0);
  reg(b, &nb, "gpu-node", 1);
  char cuda[T_ID_MAX], parent[T_ID_MAX], p0a[T_ID_MAX], p5[T_ID_MAX],
      p0b[T_ID_MAX], p1[T_ID_MAX], got[T_ID_MAX];
  insert_full(a, "cuda", 9, 0, cuda);
  insert_full(a, "cpu", 8, 2, parent); /* a split parent */
  insert_full(a, "cpu", 0, 0, p0a);
  insert_full(b, "auto", 5, 0, p5);
  insert_full(a, "cpu", 0, 0, p0b);
  insert_full(b, "cpu", 1, 0, p1);
  /* No GPU, no parents: priority first, then FIFO; cuda and the parent
   * are passed over. */
  const char *want[] = {p5, p1, p0a, p0b};
  for (int i = 0; i < 4; i++) {
    claim_one(a, na.id, 0, 0, 60000, got);
    CHECK_STR(got, want[i]);
  }
  claim_one(a, na.id, 0, 0, 60000, got);
  CHECK(got[0] == 0);
  /* Parents (still no GPU): the split parent. */
  claim_one(a, na.id, 0, 1, 60000, got);
  CHECK_STR(got, parent);
  claim_one(a, na.id, 0, 1, 60000, got);
  CHECK(got[0] == 0);
  /* The GPU node takes the cuda job. */
  claim_one(b, nb.id, 1, 0, 60000, got);
  CHECK_STR(got, cuda);
  store_job j;
  CHECK(status_of(a, cuda, &j) == JOB_QUEUED);
  CHECK_STR(j.node, nb.id);
  CHECK(j.attempts == 1 && j.lease_until > t_wall_ms() + 30000);
  store_job_clear(&j);
  store_node_clear(&na);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
}

/* ---- heartbeat, cancel requests, lost jobs, reaping ------------------------ */
TEST(test_heartbeat_cancel_lost_reap) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  store_node na, nb;
  reg(a, &na, "alpha", 0);
  reg(b, &nb, "beta", 0);
  terr e;
  char x[T_ID_MAX], y[T_ID_MAX], z[T_ID_MAX], got[T_ID_MAX];
  insert_full(a, "cpu", 0, 0, x);
  insert_full(a, "cpu", 0, 0, y);
  claim_one(a, na.id, 0, 0, 500, got);
  CHECK_STR(got, x);
  claim_one(a, na.id, 0, 0, 500, got);
  CHECK_STR(got, y);
  store_job j;
  int64_t lease0 = 0;
  CHECK(status_of(a, x, &j) == JOB_QUEUED);
  lease0 = j.lease_until;
  store_job_clear(&j);
  CHECK(lease0 > 0);

  /* A heartbeat renews both leases; a bogus held id is lost. */
  const char *held[] = {x, y, "j_NOTAJOBATALL"};
  char **c = NULL, **l = NULL;
  int nc = 0, nl = 0;
  CHECK(store_node_heartbeat(a, &na, 60000, held, 3, &c, &nc, &l, &nl, &e) == 0);
  CHECK(nc == 0);
  CHECK(nl == 1 && l && strcmp(l[0], "j_NOTAJOBATALL") == 0);
  free_ids(c, nc), free_ids(l, nl);
  CHECK(status_of(b, x, &j) == JOB_QUEUED);
  CHECK(j.lease_until >= lease0 + 50000);
  store_job_clear(&j);

  /* Cancel through the other node: x is claimed -> requested; a's next
   * heartbeat lists it. */
  int ended = -1;
  CHECK(store_job_cancel_request(b, x, "alice", &ended, &e) == 0 && ended == 0);
  CHECK(status_of(b, x, &j) == JOB_QUEUED);
  CHECK(j.cancel_requested == 1);
  store_job_clear(&j);
  CHECK(store_node_heartbeat(a, &na, 60000, held, 2, &c, &nc, &l, &nl, &e) == 0);
  CHECK(nc == 1 && c && strcmp(c[0], x) == 0 && nl == 0);
  free_ids(c, nc), free_ids(l, nl);
  /* An unclaimed queued job ends at once. */
  insert_full(b, "cpu", 0, 0, z);
  ended = -1;
  CHECK(store_job_cancel_request(a, z, NULL, &ended, &e) == 0 && ended == 1);
  CHECK(status_of(a, z, &j) == JOB_CANCELED);
  CHECK_STR(j.error_code, "canceled");
  CHECK(j.finished_at > 0);
  store_job_clear(&j);
  CHECK(store_job_cancel_request(a, z, NULL, &ended, &e) == T_ECONFLICT);
  CHECK(store_job_cancel_request(a, y, "bob", &ended, &e) == T_ENOTFOUND);
  CHECK(store_job_cancel_request(a, "j_00000000000000000000000000", NULL,
                                 &ended, &e) == T_ENOTFOUND);

  /* a stops heartbeating: after the lease, b's reap puts y back (x had a
   * cancel request: it ends canceled). */
  CHECK(store_node_heartbeat(a, &na, 300, held, 2, &c, &nc, &l, &nl, &e) == 0);
  free_ids(c, nc), free_ids(l, nl);
  CHECK(status_of(b, y, &j) == JOB_QUEUED);
  wait_past(j.lease_until);
  store_job_clear(&j);
  char **ids = NULL;
  int n = 0;
  CHECK(store_reap(b, 3, &ids, &n, &e) == 0);
  CHECK(n == 2 && has_id(ids, n, x) && has_id(ids, n, y));
  free_ids(ids, n);
  CHECK(status_of(b, x, NULL) == JOB_CANCELED);
  CHECK(status_of(b, y, &j) == JOB_QUEUED);
  CHECK(j.node == NULL && j.lease_until == 0 && j.attempts == 1);
  store_job_clear(&j);
  /* b takes y; a's heartbeat says a lost it. */
  claim_one(b, nb.id, 0, 0, 60000, got);
  CHECK_STR(got, y);
  CHECK(store_node_heartbeat(a, &na, 60000, held + 1, 1, &c, &nc, &l, &nl, &e) == 0);
  CHECK(nl == 1 && l && strcmp(l[0], y) == 0 && nc == 0);
  free_ids(c, nc), free_ids(l, nl);
  CHECK(status_of(a, y, &j) == JOB_QUEUED);
  CHECK(j.attempts == 2);
  CHECK_STR(j.node, nb.id);
  store_job_clear(&j);

  /* b dies too with y at its second claim: max_attempts 2 -> "crashed". */
  CHECK(store_node_heartbeat(b, &nb, 200, held + 1, 1, &c, &nc, &l, &nl, &e) == 0);
  free_ids(c, nc), free_ids(l, nl);
  CHECK(status_of(b, y, &j) == JOB_QUEUED);
  wait_past(j.lease_until);
  store_job_clear(&j);
  CHECK(store_reap(a, 2, &ids, &n, &e) == 0);
  CHECK(n == 1 && ids && strcmp(ids[0], y) == 0);
  free_ids(ids, n);
  CHECK(status_of(a, y, &j) == JOB_FAILED);
  CHECK_STR(j.error_code, "crashed");
  CHECK(j.error_message && strstr(j.error_message, "2 times") &&
        strstr(j.error_message, "died"));
  store_job_clear(&j);
  CHECK(store_reap(a, 2, &ids, &n, &e) == 0 && n == 0);
  store_node_clear(&na);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
}

/* ---- two reapers ------------------------------------------------------------ */
typedef struct reaper {
  store *s;
  char **ids;
  int n, rc;
  atomic_int *go;
} reaper;

static void *reap_once(void *p) {
  reaper *r = p;
  while (!atomic_load(r->go)) {
  }
  terr e;
  r->rc = store_reap(r->s, 5, &r->ids, &r->n, &e);
  return NULL;
}

TEST(test_reap_twice) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  store_node na;
  reg(a, &na, "dying", 0);
  enum { N = 50 };
  char ids[N][T_ID_MAX];
  for (int i = 0; i < N; i++) insert_full(b, "cpu", 0, 0, ids[i]);
  store_job *jobs = NULL;
  int n = 0;
  terr e;
  CHECK(store_job_claim(a, na.id, 0, 0, N, 200, &jobs, &n, &e) == 0 && n == N);
  int64_t last = 0;
  for (int i = 0; i < n; i++)
    if (jobs[i].lease_until > last) last = jobs[i].lease_until;
  free_jobs(jobs, n);
  wait_past(last);
  /* Both at once, several rounds: each job moves once in all. */
  int moved[N] = {0}, total = 0;
  for (int round = 0; round < 3; round++) {
    atomic_int go = 0;
    reaper r[2] = {{a, NULL, 0, -1, &go}, {b, NULL, 0, -1, &go}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, reap_once, &r[i]);
    atomic_store(&go, 1);
    for (int i = 0; i < 2; i++) {
      pthread_join(th[i], NULL);
      CHECK(r[i].rc == 0);
      for (int k = 0; k < r[i].n; k++)
        for (int m = 0; m < N; m++)
          if (strcmp(r[i].ids[k], ids[m]) == 0) moved[m]++, total++;
      free_ids(r[i].ids, r[i].n);
    }
  }
  CHECK_MSG(total == N, "moved %d", total);
  for (int m = 0; m < N; m++) CHECK(moved[m] == 1);
  int64_t depth = 0;
  CHECK(store_queue_depth(b, &depth, &e) == 0 && depth == N);
  char got[T_ID_MAX];
  claim_one(b, na.id, 0, 0, 60000, got); /* unclaimed again */
  CHECK(got[0] != 0);
  store_node_clear(&na);
  store_close(a);
  store_close(b);
}

/* ---- leave ---------------------------------------------------------------- */
TEST(test_leave_requeues) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  store_node na, nb;
  reg(a, &na, "leaving", 0);
  reg(b, &nb, "staying", 0);
  char x[T_ID_MAX], got[T_ID_MAX];
  insert_full(a, "cpu", 0, 0, x);
  claim_one(a, na.id, 0, 0, 60000, got);
  CHECK_STR(got, x);
  claim_one(b, nb.id, 0, 0, 60000, got);
  CHECK(got[0] == 0);
  terr e;
  CHECK(store_node_leave(a, na.id, &e) == 0);
  store_job j;
  CHECK(status_of(b, x, &j) == JOB_QUEUED);
  CHECK(j.node == NULL && j.attempts == 0); /* it never started */
  store_job_clear(&j);
  claim_one(b, nb.id, 0, 0, 60000, got);
  CHECK_STR(got, x);
  store_node_clear(&na);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
}

/* ---- events ----------------------------------------------------------------- */
typedef struct events {
  pthread_mutex_t mu;
  char seen[64][64];
  int n, resets;
} events;

static void on_event(void *arg, const char *what, const char *id) {
  events *ev = arg;
  pthread_mutex_lock(&ev->mu);
  if (strcmp(what, "reset") == 0) {
    CHECK(id == NULL);
    ev->resets++;
  } else if (ev->n < 64) {
    snprintf(ev->seen[ev->n++], 64, "%s:%s", what, id ? id : "(null)");
  }
  pthread_mutex_unlock(&ev->mu);
}

/* Wait (bounded: 20 s) for "what:id"; 1 when seen. */
static int wait_event(events *ev, const char *what, const char *id) {
  char want[64];
  snprintf(want, sizeof want, "%s:%s", what, id);
  for (int t = 0; t < 2000; t++) {
    pthread_mutex_lock(&ev->mu);
    int found = 0;
    for (int i = 0; i < ev->n && !found; i++) found = !strcmp(ev->seen[i], want);
    pthread_mutex_unlock(&ev->mu);
    if (found) return 1;
    sleep_ms(10);
  }
  return 0;
}

TEST(test_listen) {
  store *a, *b;
  if (open_pair(&a, &b)) return;
  events ev = {.n = 0};
  pthread_mutex_init(&ev.mu, NULL);
  events other = {.n = 0};
  pthread_mutex_init(&other.mu, NULL);
  uint64_t tok = 0, tok2 = 0;
  terr e;
  CHECK(store_listen(a, on_event, &ev, &tok, &e) == 0 && tok != 0);
  CHECK(store_listen(a, on_event, &other, &tok2, &e) == 0 && tok2 != tok);
  store_node nb;
  reg(b, &nb, "beta", 0);
  char x[T_ID_MAX], y[T_ID_MAX], got[T_ID_MAX];
  insert_full(b, "cpu", 0, 0, x);
  CHECK(wait_event(&ev, "queued", x));
  CHECK(wait_event(&other, "queued", x));
  store_unlisten(a, tok2);
  int ended = 0;
  CHECK(store_job_cancel_request(b, x, NULL, &ended, &e) == 0 && ended == 1);
  CHECK(wait_event(&ev, "end", x));
  insert_full(b, "cpu", 0, 0, y);
  claim_one(b, nb.id, 0, 0, 60000, got);
  CHECK_STR(got, y);
  CHECK(store_job_cancel_request(b, y, NULL, &ended, &e) == 0 && ended == 0);
  CHECK(wait_event(&ev, "cancel", y));
  pthread_mutex_lock(&other.mu);
  int other_n = other.n;
  pthread_mutex_unlock(&other.mu);
  CHECK(other_n == 1); /* unlistened: queued:x only */

  /* The server restarts: the listener reconnects and says "reset"; events
   * flow again. */
  char cmd[600];
  const char *script = getenv("TESSEL_PGSERVER");
  if (!script) {
    fprintf(stderr, "test_listen: no TESSEL_PGSERVER: restart not tested\n");
  } else {
    snprintf(cmd, sizeof cmd, "'%s' restart '%s'", script, pg_host);
    CHECK(system(cmd) == 0);
    int resets = 0;
    for (int t = 0; t < 3000 && !resets; t++) {
      pthread_mutex_lock(&ev.mu);
      resets = ev.resets;
      pthread_mutex_unlock(&ev.mu);
      if (!resets) sleep_ms(10);
    }
    CHECK(resets >= 1);
    char z[T_ID_MAX] = "";
    for (int t = 0; t < 100; t++) { /* b's pooled connections reconnect */
      store_job j;
      job_init(&j, "alice", "map");
      if (store_job_insert(b, &j, NULL, &e) == 0) {
        snprintf(z, sizeof z, "%s", j.id);
        store_job_clear(&j);
        break;
      }
      store_job_clear(&j);
      sleep_ms(100);
    }
    CHECK(z[0] != 0);
    if (z[0]) CHECK(wait_event(&ev, "queued", z));
  }
  store_unlisten(a, tok);
  store_node_clear(&nb);
  store_close(a);
  store_close(b);
  pthread_mutex_destroy(&ev.mu);
  pthread_mutex_destroy(&other.mu);
}

int main(void) {
  pg_url = getenv("TESSEL_TEST_PG");
  if (!pg_url || !*pg_url) {
    printf("skipped: no $TESSEL_TEST_PG (ctest store_cluster_pg starts a server)\n");
    return 77;
  }
  const char *h = strstr(pg_url, "host=");
  if (!h || !strstr(pg_url, "/tessel?")) {
    printf("skipped: $TESSEL_TEST_PG is not pgserver.sh's postgresql:///tessel?host=DIR\n");
    return 77;
  }
  snprintf(pg_host, sizeof pg_host, "%.*s", (int)strcspn(h + 5, "&"), h + 5);
  if (fixture_root("/tmp/tessel_store_cluster_XXXXXX")) return 1;
  RUN(test_nodes);
  RUN(test_claim_concurrent);
  RUN(test_claim_filters_order);
  RUN(test_heartbeat_cancel_lost_reap);
  RUN(test_reap_twice);
  RUN(test_leave_requeues);
  RUN(test_listen);
  rm_tree(root);
  return check_summary();
}
