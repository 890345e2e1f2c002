/* test_store_cluster.c — the cluster section of db/store.h on PostgreSQL
 * (db/pg/pg_cluster.c): two stores opened on one database play two nodes.
 *
 * Runs when $TESSEL_TEST_PG names a server (ctest store_cluster_pg starts
 * one through tests/cluster/with_pg.sh); else skipped (77). Each test
 * empties the jobs and nodes tables first through a libpq connection of
 * its own, which also sets up what the API cannot (a job's attempts, a
 * split parent) and reads what it does not show. Cases: register / list /
 * leave; each node alive by its own lease whichever node lists it, and the
 * migration that added that lease upgrading a schema-1 store; 500 jobs
 * claimed by 4 threads over both stores, each exactly once;
 * the per-class room (CPU-only, cuda, the total) and split-parent filters; priority order; a claimed job's
 * attempt counted once (at the claim, not again at its start); heartbeat
 * renewal with its cancel and lost lists; the reaper (back to the queue,
 * "crashed" at max_attempts, each job with its dead run's attempt, two
 * reapers at once); cancel requests both ways;
 * a finish run again after its commit (the writer's retry when the
 * COMMIT's answer was lost) succeeds for the same node and outcome only;
 * an array delete and a job insert referencing it on two nodes at once
 * (interleaved through the test's own locks): exactly one wins; expiry
 * skips an array an insert in flight holds; the same three for a job
 * whose result another job's insert takes ({"result": id});
 * events across stores, "reset" after the listener's backend stops
 * answering (SIGSTOP: its probe) and after a server restart (with_pg.sh's
 * $TESSEL_TEST_PGSERVER and $TESSEL_TEST_PG_DIR). Deadlines are bounds
 * only, never asserted as speed.
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "store_fixture.h"

static const char *url;
static store *sa, *sb; /* two nodes' stores on one database */
static PGconn *db;     /* the test's own connection */
static char data_dir[300]; /* the stores' data directory */

/* Run q on the test's connection; the first row's first column (static
 * copy, "" when none). */
static const char *sql(const char *q) {
  static char out[256];
  PGresult *r = PQexec(db, q);
  int st = PQresultStatus(r);
  CHECK_MSG(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", q,
            PQerrorMessage(db));
  snprintf(out, sizeof out, "%s",
           st == PGRES_TUPLES_OK && PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
  PQclear(r);
  return out;
}

static const char *sqlf(const char *fmt, const char *id) {
  char q[512];
  snprintf(q, sizeof q, fmt, id);
  return sql(q);
}

static void reset_tables(void) {
  sql("DELETE FROM jobs; DELETE FROM nodes");
}

static void node_init(store_node *n, const char *name, int gpus) {
  memset(n, 0, sizeof *n);
  n->name = strdup(name);
  n->url = strdup("http://127.0.0.1:1");
  n->version = strdup("test");
  n->threads = 4;
  n->gpus = gpus;
  n->load = NAN;
}

static int insert_backend(store *s, const char *backend, int priority,
                          char id[T_ID_MAX]) {
  store_job j;
  job_init(&j, "alice", "map");
  free(j.backend_requested);
  j.backend_requested = strdup(backend);
  j.priority = priority;
  int existing;
  terr e;
  int rc = store_job_insert(s, &j, &existing, &e);
  CHECK_MSG(rc == 0, "insert: %s", e.message);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
  return rc;
}

/* Claim up to max for node; the ids into ids (T_ID_MAX each); the count. */
static int claim(store *s, const char *node, int gpu, int parents, int max,
                 int64_t lease, char (*ids)[T_ID_MAX]) {
  store_job *v = NULL;
  int n = -1;
  terr e;
  store_claim_room room = {max, gpu ? max : 0, max};
  int rc = store_job_claim(s, node, room, parents, lease, &v, &n, &e);
  CHECK_MSG(rc == 0, "claim: %s", e.message);
  if (rc) return 0;
  for (int i = 0; i < n; i++) {
    CHECK(v[i].node && strcmp(v[i].node, node) == 0);
    CHECK(v[i].lease_until > 0);
    if (ids) snprintf(ids[i], T_ID_MAX, "%s", v[i].id);
    store_job_clear(&v[i]);
  }
  free(v);
  return n;
}

static void free_strs(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

static int has(char **v, int n, const char *id) {
  for (int i = 0; i < n; i++)
    if (strcmp(v[i], id) == 0) return 1;
  return 0;
}

/* ---- nodes ------------------------------------------------------------------
 */
TEST(nodes_register_list_leave) {
  reset_tables();
  store_node a, b;
  node_init(&a, "alpha", 0);
  node_init(&b, "beta", 1);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  CHECK(store_node_register(sb, &b, &e) == 0);
  CHECK(strncmp(a.id, "n_", 2) == 0 && strcmp(a.id, b.id) != 0);
  CHECK(a.started_at > 0 && a.heartbeat_at == a.started_at);

  a.running = 3;
  a.queued = 2;
  a.load = 42.5;
  a.jobs_done = 17; /* the node's own count: the heartbeat writes it */
  char **cancel, **lost;
  int nc, nl;
  CHECK(store_node_heartbeat(sa, &a, 60000, NULL, 0, &cancel, &nc, &lost, &nl,
                             &e) == 0);
  CHECK(nc == 0 && nl == 0 && !cancel && !lost);

  char id[T_ID_MAX];
  insert_backend(sa, "auto", 0, id);
  CHECK(claim(sb, b.id, 1, 1, 5, 60000, NULL) == 1);
  CHECK(strcmp(sqlf("SELECT attempts FROM jobs WHERE id = '%s'", id), "1") ==
        0);
  CHECK(store_node_leave(sb, b.id, &e) == 0);
  /* claimed, never started: back to the queue, the claim's attempt given back
   */
  CHECK(strcmp(sqlf("SELECT coalesce(node, 'none') || attempts || status FROM "
                    "jobs WHERE id = '%s'",
                    id),
               "none0queued") == 0);

  store_node *v = NULL;
  int n = 0;
  CHECK(store_node_list(sa, 600000, &v, &n, &e) == 0);
  CHECK(n == 2);
  int seen = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(v[i].id, a.id) == 0) {
      seen |= 1;
      CHECK(v[i].alive == 1);
      CHECK(strcmp(v[i].name, "alpha") == 0 && v[i].threads == 4);
      CHECK(v[i].running == 3 && v[i].queued == 2);
      CHECK(fabs(v[i].load - 42.5) < 1e-9);
      CHECK(v[i].jobs_done == 17);
      CHECK(v[i].heartbeat_at >= v[i].started_at);
    } else if (strcmp(v[i].id, b.id) == 0) {
      seen |= 2;
      CHECK(v[i].alive == 0); /* left */
      CHECK(v[i].gpus == 1 && isnan(v[i].load));
    }
  }
  CHECK(seen == 3);
  store_nodes_free(v, n);
  store_node_clear(&a);
  store_node_clear(&b);
}

/* The alive flag of node id in s's list (-1: not listed); its lease into
 * *lease. */
static int alive_in(store *s, const char *id, int64_t *lease) {
  store_node *v = NULL;
  int n = 0, alive = -1;
  terr e;
  CHECK(store_node_list(s, 600000, &v, &n, &e) == 0);
  for (int i = 0; i < n; i++)
    if (strcmp(v[i].id, id) == 0) {
      alive = v[i].alive;
      if (lease) *lease = v[i].lease_ms;
    }
  store_nodes_free(v, n);
  return alive;
}

/* Nodes with different --lease-s: each is judged by its own lease, whichever
 * node lists them. */
TEST(nodes_alive_by_their_own_lease) {
  reset_tables();
  store_node a, b;
  node_init(&a, "slow-lease", 0);
  node_init(&b, "fast-lease", 0);
  a.lease_ms = 3600000;
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  CHECK(store_node_register(sb, &b, &e) == 0); /* no lease yet */
  int64_t lease = -1;
  CHECK(alive_in(sb, a.id, &lease) == 1 && lease == 3600000);
  CHECK(alive_in(sa, b.id, &lease) == 1 && lease == 0);
  char **cancel, **lost;
  int nc, nl;
  CHECK(store_node_heartbeat(sa, &a, 3600000, NULL, 0, &cancel, &nc, &lost,
                             &nl, &e) == 0);
  CHECK(store_node_heartbeat(sb, &b, 500, NULL, 0, &cancel, &nc, &lost, &nl,
                             &e) == 0);
  /* b's lease passes on the store's clock (bounded wait), a's does not */
  int passed = 0;
  for (int i = 0; i < 1000 && !passed; i++) {
    passed = strcmp(sqlf("SELECT heartbeat_at < (extract(epoch from "
                         "clock_timestamp()) * 1000)::bigint - 600 FROM nodes"
                         " WHERE id = '%s'",
                         b.id),
                    "t") == 0;
    if (!passed) usleep(10000);
  }
  CHECK(passed);
  /* listed by b (whose own lease is 500 ms): a is alive by its hour */
  CHECK(alive_in(sb, a.id, &lease) == 1 && lease == 3600000);
  /* listed by a (whose own lease is an hour): b is dead by its 500 ms */
  CHECK(alive_in(sa, b.id, &lease) == 0 && lease == 500);
  CHECK(alive_in(sb, b.id, NULL) == 0);
  store_node_clear(&a);
  store_node_clear(&b);
}

/* A store of schema 1 (no nodes.lease_ms, no jobs.devices) is upgraded
 * at open; its old rows, without a lease, are judged by the listing
 * store's lease. */
TEST(nodes_lease_migration_upgrades) {
  reset_tables();
  store_node a;
  node_init(&a, "old", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  sql("ALTER TABLE nodes DROP COLUMN lease_ms;"
      " ALTER TABLE jobs DROP COLUMN devices;"
      " DELETE FROM schema_migrations WHERE version >= 2");
  store *sc = NULL;
  CHECK_MSG(store_open_url(url, data_dir, &sc, &e) == 0, "reopen: %s", e.message);
  if (!sc) return;
  CHECK(store_schema_version(sc) >= 2);
  CHECK(strcmp(sql("SELECT count(*) FROM schema_migrations WHERE version = 2"),
               "1") == 0);
  /* and migration 3: jobs.devices back */
  CHECK(strcmp(sql("SELECT count(*) FROM information_schema.columns WHERE"
                   " table_name = 'jobs' AND column_name = 'devices'"),
               "1") == 0);
  CHECK(strcmp(sqlf("SELECT coalesce(lease_ms::text, 'null') FROM nodes WHERE"
                    " id = '%s'",
                    a.id),
               "null") == 0);
  int64_t lease = -1;
  CHECK(alive_in(sc, a.id, &lease) == 1 && lease == 0);
  store_close(sc);
  store_node_clear(&a);
}

/* ---- claims
 * ------------------------------------------------------------------ */
#define NCLAIM 500
typedef struct claimer {
  store *s;
  const char *node;
  char (*got)[T_ID_MAX];
  int n;
  int max; /* jobs a claim (0: 7) */
} claimer;

static void *claim_main(void *arg) {
  claimer *c = arg;
  for (int idle = 0; idle < 3;) {
    int k = claim(c->s, c->node, 0, 0, c->max ? c->max : 7, 60000,
                  c->got + c->n);
    c->n += k;
    idle = k ? 0 : idle + 1;
  }
  return NULL;
}

static int cmp_id(const void *a, const void *b) {
  return strcmp(a, b);
}

TEST(claim_each_job_once) {
  reset_tables();
  terr e;
  for (int i = 0; i < NCLAIM; i++) {
    store_job j;
    job_init(&j, "alice", "map");
    CHECK(store_job_insert_async(sa, &j, &e) == 0);
    store_job_clear(&j);
  }
  CHECK(store_sync(sa, &e) == 0);
  int64_t depth = -1;
  CHECK(store_queue_depth(sb, &depth, &e) == 0 && depth == NCLAIM);

  static char got[4][NCLAIM][T_ID_MAX];
  /* claims of 7 and of 64 (a node claiming ahead for tiny jobs,
   * compute/sched/cluster.c) race on both stores */
  claimer c[4] = {{sa, "n_A", got[0], 0, 7},
                  {sb, "n_B", got[1], 0, 64},
                  {sa, "n_A", got[2], 0, 64},
                  {sb, "n_B", got[3], 0, 7}};
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, claim_main, &c[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  static char all[NCLAIM * 4][T_ID_MAX];
  int total = 0;
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < c[i].n && total < NCLAIM * 4; k++)
      memcpy(all[total++], got[i][k], T_ID_MAX);
  CHECK_MSG(total == NCLAIM, "claimed %d of %d", total, NCLAIM);
  qsort(all, (size_t)total, T_ID_MAX, cmp_id);
  int dups = 0;
  for (int i = 1; i < total; i++) dups += strcmp(all[i - 1], all[i]) == 0;
  CHECK_MSG(dups == 0, "%d jobs claimed twice", dups);
  CHECK(strcmp(sql("SELECT count(*) FROM jobs WHERE node IS NULL OR "
                   "attempts <> 1 OR lease_until IS NULL"),
               "0") == 0);
  /* still queued (a claim is not a start): the depth counts them */
  CHECK(store_queue_depth(sa, &depth, &e) == 0 && depth == NCLAIM);
}

TEST(claim_filters_and_order) {
  reset_tables();
  char low1[T_ID_MAX], high[T_ID_MAX], low2[T_ID_MAX], cuda[T_ID_MAX],
      parent[T_ID_MAX], child[T_ID_MAX];
  insert_backend(sa, "auto", 0, low1);
  insert_backend(sa, "cpu", 5, high);
  insert_backend(sa, "auto", 0, low2);
  insert_backend(sa, "cuda", 9, cuda);
  insert_backend(sa, "auto", 7, parent);
  insert_backend(sa, "auto", 8, child);
  sqlf("UPDATE jobs SET tiles = 2 WHERE id = '%s'", parent);
  char q[256];
  snprintf(q, sizeof q,
           "UPDATE jobs SET tiles = 2, tile = 1, parent = '%s' "
           "WHERE id = '%s'",
           parent, child);
  sql(q);

  int64_t depth = -1;
  terr e;
  CHECK(store_queue_depth(sb, &depth, &e) == 0 && depth == 5); /* no tile */
  char ids[8][T_ID_MAX];
  /* no GPU, not the coordinator: the tile, then by priority, FIFO within */
  CHECK(claim(sa, "n_A", 0, 0, 1, 60000, ids) == 1 &&
        strcmp(ids[0], child) == 0);
  CHECK(claim(sa, "n_A", 0, 0, 1, 60000, ids) == 1 &&
        strcmp(ids[0], high) == 0);
  CHECK(claim(sa, "n_A", 0, 0, 1, 60000, ids) == 1 &&
        strcmp(ids[0], low1) == 0);
  CHECK(claim(sa, "n_A", 0, 0, 1, 60000, ids) == 1 &&
        strcmp(ids[0], low2) == 0);
  /* left: the cuda job (no GPU here) and the split parent (not coordinator) */
  CHECK(claim(sb, "n_B", 0, 0, 10, 60000, ids) == 0);
  CHECK(claim(sb, "n_B", 0, 1, 10, 60000, ids) == 1 &&
        strcmp(ids[0], parent) == 0);
  CHECK(claim(sb, "n_B", 1, 0, 10, 60000, ids) == 1 &&
        strcmp(ids[0], cuda) == 0);
  CHECK(claim(sb, "n_B", 1, 1, 10, 60000, ids) == 0);
}

/* Claim with a room per kind of worker (store_claim_room). */
static int claim_room(store *s, int cpu, int gpu, int any,
                      char (*ids)[T_ID_MAX]) {
  store_job *v = NULL;
  int n = -1;
  terr e;
  store_claim_room room = {cpu, gpu, any};
  CHECK_MSG(store_job_claim(s, "n_R", room, 0, 60000, &v, &n, &e) == 0,
            "claim: %s", e.message);
  for (int i = 0; i < n; i++) {
    snprintf(ids[i], T_ID_MAX, "%s", v[i].id);
    store_job_clear(&v[i]);
  }
  free(v);
  return n;
}

/* A node's room per kind of worker: a CPU-only job (serial, cpu, compare)
 * only within its CPU room, a cuda job only within its GPU room, auto
 * within the total; among what the classes allow, priority first. */
TEST(claim_within_each_kind_of_room) {
  reset_tables();
  char cpu1[T_ID_MAX], ser[T_ID_MAX], cuda1[T_ID_MAX], auto1[T_ID_MAX],
      cmp[T_ID_MAX], ids[8][T_ID_MAX];
  insert_backend(sa, "cpu", 9, cpu1);
  insert_backend(sa, "serial", 8, ser);
  insert_backend(sa, "cuda", 1, cuda1);
  insert_backend(sa, "auto", 2, auto1);
  insert_backend(sa, "compare", 7, cmp);
  /* CPU busy, one GPU worker free: no CPU-only job, though theirs are the
   * highest priorities; of the auto (2) and the cuda (1) job, the auto */
  CHECK(claim_room(sa, 0, 1, 1, ids) == 1 && strcmp(ids[0], auto1) == 0);
  CHECK(claim_room(sa, 0, 1, 1, ids) == 1 && strcmp(ids[0], cuda1) == 0);
  /* only CPU-only jobs left: none for a room without CPU slots */
  CHECK(claim_room(sa, 0, 0, 1, ids) == 0);
  CHECK(claim_room(sa, 0, 5, 5, ids) == 0); /* compare is CPU-only too */
  /* CPU room 2: the two CPU-only jobs of highest priority */
  CHECK(claim_room(sa, 2, 0, 2, ids) == 2 &&
        ((strcmp(ids[0], cpu1) == 0 && strcmp(ids[1], ser) == 0) ||
         (strcmp(ids[1], cpu1) == 0 && strcmp(ids[0], ser) == 0)));
  CHECK(claim_room(sa, 1, 0, 1, ids) == 1 && strcmp(ids[0], cmp) == 0);
  CHECK(strcmp(sql("SELECT count(*) FROM jobs WHERE node IS NULL"), "0") ==
        0);
}

TEST(claim_counts_the_attempt_once) {
  reset_tables();
  store_node a;
  node_init(&a, "alpha", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  char id[T_ID_MAX], plain[T_ID_MAX];
  insert_backend(sa, "auto", 1, id);
  CHECK(claim(sa, a.id, 0, 0, 1, 60000, NULL) == 1);
  insert_backend(sa, "auto", 0, plain); /* never claimed */
  CHECK(store_job_start(sa, id, 1, "cpu", NULL, NULL, &e) == 0);
  CHECK(store_job_start(sa, plain, 1, "cpu", NULL, NULL, &e) == 0);
  store_job j;
  memset(&j, 0, sizeof j);
  CHECK(store_job_get(sa, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_RUNNING && j.attempts == 1); /* the claim's, once */
  store_job_clear(&j);
  CHECK(store_job_unstart(sa, id, &e) == 0);
  CHECK(store_job_get(sa, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_QUEUED && j.attempts == 1 && j.node &&
        strcmp(j.node, a.id) == 0);
  store_job_clear(&j);
  CHECK(store_job_get(sa, plain, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_RUNNING && j.attempts == 1); /* counted at start */
  store_job_clear(&j);
  CHECK(store_job_unstart(sa, plain, &e) == 0);
  CHECK(strcmp(sqlf("SELECT attempts FROM jobs WHERE id = '%s'", plain), "0") ==
        0);
  store_node_clear(&a);
}

/* ---- heartbeat
 * ------------------------------------------------------------------- */
TEST(heartbeat_renews_cancels_lost) {
  reset_tables();
  store_node a, b;
  node_init(&a, "alpha", 0);
  node_init(&b, "beta", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  CHECK(store_node_register(sb, &b, &e) == 0);
  char j1[T_ID_MAX], j2[T_ID_MAX], jb[T_ID_MAX];
  insert_backend(sa, "auto", 2, j1);
  insert_backend(sa, "auto", 1, j2);
  CHECK(claim(sa, a.id, 0, 0, 2, 1000, NULL) == 2);
  insert_backend(sa, "auto", 0, jb);
  CHECK(claim(sb, b.id, 0, 0, 1, 60000, NULL) == 1);

  int ended = -1;
  CHECK(store_job_cancel_request(sb, j1, "alice", &ended, &e) == 0 &&
        ended == 0);
  const char *held[] = {j1, j2, jb};
  char **cancel = NULL, **lost = NULL;
  int nc = -1, nl = -1;
  CHECK(store_node_heartbeat(sa, &a, 3600000, held, 3, &cancel, &nc, &lost, &nl,
                             &e) == 0);
  CHECK(nc == 1 && has(cancel, nc, j1));
  CHECK(nl == 1 && has(lost, nl, jb)); /* claimed by the other node */
  free_strs(cancel, nc);
  free_strs(lost, nl);
  /* renewed to about an hour from now, far past the claim's second */
  CHECK(
      strcmp(sqlf("SELECT lease_until > (extract(epoch from clock_timestamp())"
                  " * 1000)::bigint + 600000 FROM jobs WHERE id = '%s'",
                  j2),
             "t") == 0);
  CHECK(
      strcmp(sqlf("SELECT lease_until < (extract(epoch from clock_timestamp())"
                  " * 1000)::bigint + 600000 FROM jobs WHERE id = '%s'",
                  jb),
             "t") == 0); /* another node's lease untouched */

  /* ended (or deleted) jobs are lost too */
  sqlf("UPDATE jobs SET status = 'succeeded' WHERE id = '%s'", j2);
  const char *held2[] = {j1, j2, "j_0000000000000000000000gone"};
  CHECK(store_node_heartbeat(sa, &a, 3600000, held2, 3, &cancel, &nc, &lost,
                             &nl, &e) == 0);
  CHECK(nc == 1 && nl == 2 && has(lost, nl, j2) &&
        has(lost, nl, "j_0000000000000000000000gone"));
  free_strs(cancel, nc);
  free_strs(lost, nl);
  store_node_clear(&a);
  store_node_clear(&b);
}

/* ---- reaper
 * --------------------------------------------------------------------- */
/* Wait (bounded) until every claimed lease has passed on the store's clock. */
static void leases_pass(void) {
  for (int i = 0; i < 1000; i++) {
    if (strcmp(sql("SELECT count(*) FROM jobs WHERE lease_until >= "
                   "(extract(epoch from clock_timestamp()) * 1000)::bigint"),
               "0") == 0)
      return;
    usleep(10000);
  }
  CHECK_MSG(0, "leases did not pass within 10 s");
}

/* The attempt a reap returned for id; -1 when id was not reaped. */
static int reaped_at(const store_reaped *v, int n, const char *id) {
  for (int i = 0; i < n; i++)
    if (strcmp(v[i].id, id) == 0) return v[i].attempt;
  return -1;
}

TEST(reap_requeues_and_fails_crashed) {
  reset_tables();
  char j1[T_ID_MAX], j2[T_ID_MAX], j3[T_ID_MAX], jkeep[T_ID_MAX];
  insert_backend(sa, "auto", 1, j1);
  insert_backend(sa, "auto", 1, j2);
  insert_backend(sa, "auto", 1, j3);
  sqlf("UPDATE jobs SET attempts = 2 WHERE id = '%s'", j2);
  CHECK(claim(sa, "n_dead", 0, 0, 3, 1, NULL) == 3); /* a 1 ms lease */
  sqlf("UPDATE jobs SET cancel_requested = true WHERE id = '%s'", j3);
  sqlf("UPDATE jobs SET status = 'running', started_at = 5 WHERE id = '%s'",
       j1);
  leases_pass();
  insert_backend(sa, "auto", 0, jkeep);
  CHECK(claim(sb, "n_live", 0, 0, 1, 3600000, NULL) == 1);

  store_reaped *ids = NULL;
  int n = -1;
  terr e;
  CHECK(store_reap(sb, 3, &ids, &n, &e) == 0);
  /* each with the attempt its dead node ran (the claim's count) */
  CHECK(n == 3 && reaped_at(ids, n, j1) == 1 && reaped_at(ids, n, j2) == 3 &&
        reaped_at(ids, n, j3) == 1);
  free(ids);
  store_job j;
  memset(&j, 0, sizeof j);
  CHECK(store_job_get(sa, j1, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_QUEUED && !j.node && j.lease_until == 0 &&
        j.started_at == 0 && j.attempts == 1);
  store_job_clear(&j);
  CHECK(store_job_get(sa, j2, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_FAILED && j.attempts == 3 && j.finished_at > 0);
  CHECK(j.error_code && strcmp(j.error_code, "crashed") == 0);
  store_job_clear(&j);
  /* a cancel asked for while its node died: ended, not run again */
  CHECK(store_job_get(sa, j3, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_CANCELED && j.error_code &&
        strcmp(j.error_code, "canceled") == 0);
  store_job_clear(&j);
  CHECK(strcmp(sqlf("SELECT node FROM jobs WHERE id = '%s'", jkeep),
               "n_live") == 0);
  /* nothing left to reap */
  CHECK(store_reap(sa, 3, &ids, &n, &e) == 0 && n == 0 && !ids);
}

typedef struct reaper {
  store *s;
  store_reaped *ids;
  int n, rc;
} reaper;

static void *reap_main(void *arg) {
  reaper *r = arg;
  terr e;
  r->rc = store_reap(r->s, 5, &r->ids, &r->n, &e);
  return NULL;
}

TEST(reap_twice_at_once_moves_each_once) {
  reset_tables();
  terr e;
  for (int i = 0; i < 40; i++) {
    store_job j;
    job_init(&j, "alice", "map");
    CHECK(store_job_insert_async(sa, &j, &e) == 0);
    store_job_clear(&j);
  }
  CHECK(store_sync(sa, &e) == 0);
  CHECK(claim(sa, "n_dead", 0, 0, 40, 1, NULL) == 40);
  leases_pass();
  reaper r[2] = {{sa, NULL, 0, -1}, {sb, NULL, 0, -1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, reap_main, &r[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(r[0].rc == 0 && r[1].rc == 0);
  CHECK_MSG(r[0].n + r[1].n == 40, "%d + %d moved", r[0].n, r[1].n);
  for (int i = 0; i < r[0].n; i++)
    CHECK(reaped_at(r[1].ids, r[1].n, r[0].ids[i].id) < 0);
  free(r[0].ids);
  free(r[1].ids);
  CHECK(strcmp(sql("SELECT count(*) FROM jobs WHERE status = 'queued' AND "
                   "node IS NULL AND attempts = 1"),
               "40") == 0);
}

/* ---- cancel requests
 * --------------------------------------------------------------- */
TEST(cancel_request_both_ways) {
  reset_tables();
  char q1[T_ID_MAX], c1[T_ID_MAX];
  insert_backend(sa, "auto", 0, q1);
  insert_backend(sa, "auto", 0, c1);
  sqlf("UPDATE jobs SET node = 'n_X', lease_until = 1 WHERE id = '%s'", c1);
  terr e;
  int ended = -1;
  CHECK(store_job_cancel_request(sb, q1, "mallory", &ended, &e) == T_ENOTFOUND);
  CHECK(store_job_cancel_request(sb, "j_0000000000000000000000none", NULL,
                                 &ended, &e) == T_ENOTFOUND);
  CHECK(store_job_cancel_request(sb, q1, "alice", &ended, &e) == 0 &&
        ended == 1);
  store_job j;
  memset(&j, 0, sizeof j);
  CHECK(store_job_get(sa, q1, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_CANCELED && j.finished_at > 0 && j.error_code &&
        strcmp(j.error_code, "canceled") == 0 && j.error_message);
  store_job_clear(&j);
  CHECK(store_job_cancel_request(sb, q1, NULL, &ended, &e) == T_ECONFLICT);

  CHECK(store_job_cancel_request(sb, c1, NULL, &ended, &e) == 0 && ended == 0);
  CHECK(store_job_get(sa, c1, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_QUEUED && j.cancel_requested == 1);
  store_job_clear(&j);
}

/* ---- an array delete against a job insert on another node
 * ----------------------------------------------------------- */
/* Wait (bounded) until n backends wait for a lock; 1 when they do. */
static int lock_waiters(int n) {
  char want[16];
  snprintf(want, sizeof want, "%d", n);
  for (int i = 0; i < 1000; i++) {
    if (strcmp(sql("SELECT count(*) FROM pg_stat_activity WHERE"
                   " wait_event_type = 'Lock'"),
               want) == 0)
      return 1;
    usleep(10000);
  }
  return 0;
}

static char *array_new(store *s, const char *digest, char id[T_ID_MAX]) {
  store_array a;
  memset(&a, 0, sizeof a);
  a.owner = strdup("alice");
  a.dtype = strdup("float64");
  a.shape = strdup("[2]");
  a.bytes = 16;
  a.digest = strdup(digest);
  a.path = strdup("/data/arrays/x.npy");
  terr e;
  CHECK_MSG(store_array_insert(s, &a, NULL, &e) == 0, "array: %s", e.message);
  snprintf(id, T_ID_MAX, "%s", a.id);
  store_array_clear(&a);
  return id;
}

typedef struct racer {
  store *s;
  const char *array, *request_id;
  const char *result; /* instead of array: the job whose result is taken */
  char job[T_ID_MAX];
  int rc;
  terr e;
} racer;

static void *insert_main(void *arg) {
  racer *r = arg;
  store_job j;
  job_init(&j, "alice", "map");
  free(j.params);
  char params[160];
  snprintf(params, sizeof params,
           "{\"expr\":\"x\",\"inputs\":{\"x\":{\"%s\":\"%s\"}}}",
           r->result ? "result" : "array", r->result ? r->result : r->array);
  j.params = strdup(params);
  if (r->request_id) j.request_id = strdup(r->request_id);
  int existing;
  r->rc = store_job_insert(r->s, &j, &existing, &r->e);
  snprintf(r->job, sizeof r->job, "%s", j.id);
  store_job_clear(&j);
  return NULL;
}

static void *delete_main(void *arg) {
  racer *r = arg;
  if (r->result) {
    char **paths = NULL;
    int n = 0;
    r->rc = store_job_delete(r->s, r->result, "alice", &paths, &n, &r->e);
    free_strs(paths, n);
    return NULL;
  }
  char *path = NULL;
  r->rc = store_array_delete(r->s, r->array, "alice", &path, &r->e);
  free(path);
  return NULL;
}

/* The delete of row `id` of `table` locked it first (the test's
 * connection does what the store's delete does: FOR UPDATE, then DELETE):
 * the insert *ins on another node waits for it, then fails naming the
 * field, and no job is left. */
static void delete_first(const char *table, const char *id, racer *ins) {
  char q[160];
  sql("BEGIN");
  snprintf(q, sizeof q, "SELECT 1 FROM %s WHERE id = '%s' FOR UPDATE", table,
           id);
  sql(q);
  pthread_t t;
  pthread_create(&t, NULL, insert_main, ins);
  CHECK_MSG(lock_waiters(1), "the insert did not wait for the %s lock", table);
  snprintf(q, sizeof q, "DELETE FROM %s WHERE id = '%s'", table, id);
  sql(q);
  sql("COMMIT");
  pthread_join(t, NULL);
  CHECK_MSG(ins->rc == T_ENOTFOUND, "insert: %d %s", ins->rc, ins->e.message);
  CHECK(strcmp(ins->e.field, "params.inputs.x") == 0);
  CHECK(strcmp(sql("SELECT count(*) FROM jobs"), "0") == 0);
}

/* The insert *ins locked what it reads first: it is held (its INSERT waits
 * on the test's uncommitted row of the same request_id) while the delete
 * *del on the other node starts; the delete waits, then sees the
 * committed job and is refused. */
static void insert_first(racer *ins, racer *del) {
  sql("BEGIN");
  sql("INSERT INTO jobs (id, owner, kind, params, status, backend_requested,"
      " created_at, request_id) VALUES ('j_0000000000000000000000hold',"
      " 'alice', 'map', '{}', 'queued', 'auto', 1, 'race-rid')");
  ins->request_id = "race-rid";
  pthread_t ti, td;
  pthread_create(&ti, NULL, insert_main, ins);
  CHECK(lock_waiters(1)); /* the insert, on the request_id's row */
  pthread_create(&td, NULL, delete_main, del);
  CHECK_MSG(lock_waiters(2), "the delete did not wait for the insert");
  sql("ROLLBACK");
  pthread_join(ti, NULL);
  pthread_join(td, NULL);
  CHECK_MSG(ins->rc == 0, "insert: %d %s", ins->rc, ins->e.message);
  CHECK_MSG(del->rc == T_ECONFLICT, "delete: %d %s", del->rc,
            del->e.message);
}

/* An array's delete locked it first: the insert fails naming the field. */
TEST(array_delete_first_fails_the_insert) {
  reset_tables();
  sql("DELETE FROM arrays");
  char aid[T_ID_MAX];
  array_new(sa, "race1", aid);
  racer ins = {.s = sb, .array = aid, .rc = -1};
  delete_first("arrays", aid, &ins);
}

/* The insert locked the array first: it is held (its INSERT waits on the
 * test's uncommitted row of the same request_id) while a delete on the
 * other node starts; the delete waits, then sees the committed job and is
 * refused. Exactly one wins, and no queued job names a deleted array. */
TEST(job_insert_first_refuses_the_delete) {
  reset_tables();
  sql("DELETE FROM arrays");
  char aid[T_ID_MAX];
  array_new(sa, "race2", aid);
  racer ins = {.s = sa, .array = aid, .rc = -1};
  racer del = {.s = sb, .array = aid, .rc = -1};
  insert_first(&ins, &del);
  CHECK(strcmp(sqlf("SELECT count(*) FROM arrays WHERE id = '%s'", aid),
               "1") == 0);
  CHECK(strcmp(sql("SELECT count(*) FROM jobs j WHERE status = 'queued' AND"
                   " NOT EXISTS (SELECT 1 FROM arrays a WHERE"
                   " strpos(j.params, a.id) > 0)"),
               "0") == 0);
}

typedef struct expirer {
  store *s;
  char **paths;
  int n, rc;
  _Atomic int done;
} expirer;

static void *expire_main(void *arg) {
  expirer *x = arg;
  terr e;
  x->rc = store_expire(x->s, INT64_MAX / 2, &x->paths, &x->n, &e);
  atomic_store(&x->done, 1);
  return NULL;
}

/* Expiry (*x, on store sb) while the test's transaction holds what
 * pg_jobs.c's insert of a job taking `held` as its `key` ("array" or
 * "result") holds: the job row and FOR KEY SHARE on the array's or the
 * job's row. The expiry must neither wait for it nor fail. */
static void expire_beside_insert(const char *key, const char *held,
                                 expirer *x) {
  sql("BEGIN");
  char q[400];
  snprintf(q, sizeof q,
           "INSERT INTO jobs (id, owner, kind, params, status,"
           " backend_requested, created_at) VALUES"
           " ('j_0000000000000000000000held', 'alice', 'map',"
           " '{\"x\":{\"%s\":\"%s\"}}', 'queued', 'auto', 1)",
           key, held);
  sql(q);
  snprintf(q, sizeof q, "SELECT 1 FROM %s WHERE id = '%s' FOR KEY SHARE",
           strcmp(key, "array") == 0 ? "arrays" : "jobs", held);
  sql(q);
  pthread_t t;
  pthread_create(&t, NULL, expire_main, x);
  int waited = 0;
  for (int i = 0; i < 1000 && !atomic_load(&x->done) && !waited; i++) {
    waited = strcmp(sql("SELECT count(*) FROM pg_stat_activity WHERE"
                        " wait_event_type = 'Lock'"),
                    "0") != 0;
    usleep(10000);
  }
  CHECK_MSG(!waited, "the expiry waited for the insert's lock");
  sql("COMMIT");
  pthread_join(t, NULL);
  CHECK(x->rc == 0);
}

/* Expiry against a job insert in flight (the test's transaction holds what
 * pg_jobs.c's insert holds: its job row and FOR KEY SHARE on the array):
 * the array is skipped, not waited for nor deleted; an unreferenced old
 * array still goes. */
TEST(expire_skips_an_array_an_insert_holds) {
  reset_tables();
  sql("DELETE FROM arrays");
  char held[T_ID_MAX], free_[T_ID_MAX];
  array_new(sa, "exp-held", held);
  array_new(sa, "exp-free", free_);
  sql("UPDATE arrays SET path = '/data/arrays/' || digest || '.npy'");
  expirer x = {.s = sb, .rc = -1};
  expire_beside_insert("array", held, &x);
  int gone_free = 0, gone_held = 0;
  for (int i = 0; i < x.n; i++) {
    gone_free += strcmp(x.paths[i], "/data/arrays/exp-free.npy") == 0;
    gone_held += strcmp(x.paths[i], "/data/arrays/exp-held.npy") == 0;
  }
  free_strs(x.paths, x.n);
  CHECK(gone_free == 1 && gone_held == 0);
  CHECK(strcmp(sqlf("SELECT count(*) FROM arrays WHERE id = '%s'", held),
               "1") == 0);
  CHECK(strcmp(sqlf("SELECT count(*) FROM arrays WHERE id = '%s'", free_),
               "0") == 0);
}

/* ---- a job's delete or expiry against an insert taking its result
 * ------------------------------------------------------------------ */
/* A succeeded job of alice's, finished at 1 ms (old for any expiry),
 * its result at `path` (parts: `parts`, a JSON text, or NULL). */
static char *finished_new(const char *path, const char *parts,
                          char id[T_ID_MAX]) {
  insert_backend(sa, "auto", 0, id);
  char q[512];
  snprintf(q, sizeof q,
           "UPDATE jobs SET status = 'succeeded', started_at = 1,"
           " finished_at = 1, result_path = '%s', result_parts = %s%s%s"
           " WHERE id = '%s'",
           path, parts ? "'" : "", parts ? parts : "NULL", parts ? "'" : "",
           id);
  sql(q);
  return id;
}

/* The delete locked the job first (the test's connection does what
 * pg_lifecycle.c's delete does: FOR UPDATE, then DELETE): the insert on
 * another node that takes its result waits for it, then fails naming the
 * field. */
TEST(result_delete_first_fails_the_insert) {
  reset_tables();
  char jid[T_ID_MAX];
  finished_new("/r/race1.npy", NULL, jid);
  racer ins = {.s = sb, .result = jid, .rc = -1};
  delete_first("jobs", jid, &ins);
  char want[64];
  snprintf(want, sizeof want, "job %s not found", jid);
  CHECK_MSG(strstr(ins.e.message, want) != NULL, "%s", ins.e.message);
}

/* The insert locked the job first: it is held (its INSERT waits on the
 * test's uncommitted row of the same request_id) while a delete of the
 * job on the other node starts; the delete waits, then sees the committed
 * job that takes the result and is refused; the job is still there. */
TEST(insert_first_refuses_the_result_delete) {
  reset_tables();
  char jid[T_ID_MAX];
  finished_new("/r/race2.npy", NULL, jid);
  racer ins = {.s = sa, .result = jid, .rc = -1};
  racer del = {.s = sb, .result = jid, .rc = -1};
  insert_first(&ins, &del);
  CHECK(strcmp(sqlf("SELECT status FROM jobs WHERE id = '%s'", jid),
               "succeeded") == 0);
  CHECK(strcmp(sqlf("SELECT count(*) FROM jobs WHERE status = 'queued' AND"
                    " strpos(params, '%s') > 0",
                    jid),
               "1") == 0);
}

/* Expiry against a job insert in flight (the test's transaction holds what
 * pg_jobs.c's insert holds: its job row and FOR KEY SHARE on the job whose
 * result it takes): that job is skipped, not waited for nor deleted; an
 * unreferenced old job still goes, and the files returned are its result's
 * and its parts' only. */
TEST(expire_skips_a_job_an_insert_holds) {
  reset_tables();
  sql("DELETE FROM arrays");
  char held[T_ID_MAX], free_[T_ID_MAX];
  finished_new("/r/held.npy", "[{\"name\":\"a\",\"path\":\"/r/held.a.npy\"}]",
               held);
  finished_new("/r/free.npy",
               "[{\"name\":\"a\",\"path\":\"/r/free.a.npy\"},"
               "{\"name\":\"b\",\"path\":\"/r/free.b.npy\"}]",
               free_);
  expirer x = {.s = sb, .rc = -1};
  expire_beside_insert("result", held, &x);
  static const char *const want[] = {"/r/free.npy", "/r/free.a.npy",
                                     "/r/free.b.npy"};
  int seen = 0;
  for (int i = 0; i < x.n; i++) {
    CHECK_MSG(strstr(x.paths[i], "held") == NULL, "expired %s", x.paths[i]);
    for (int k = 0; k < 3; k++)
      if (strcmp(x.paths[i], want[k]) == 0) seen |= 1 << k;
  }
  CHECK_MSG(x.n == 3 && seen == 7, "%d paths", x.n);
  free_strs(x.paths, x.n);
  CHECK(strcmp(sqlf("SELECT count(*) FROM jobs WHERE id = '%s'", held),
               "1") == 0);
  CHECK(strcmp(sqlf("SELECT count(*) FROM jobs WHERE id = '%s'", free_),
               "0") == 0);
}

/* ---- a finish retried after its COMMIT's answer was lost
 * ------------------------------------------------------------- */
typedef struct fin_cb {
  _Atomic int done;
  int rc;
  job_status status;
} fin_cb;

static void on_finished(void *arg, int rc, const terr *e, store_job *row) {
  fin_cb *f = arg;
  (void)e;
  f->rc = rc;
  f->status = row ? row->status : (job_status)-1;
  if (row) store_job_clear(row);
  atomic_store(&f->done, 1);
}

/* The writer retries a batch whose COMMIT answer was lost (pg_store.c):
 * the same finish then meets a row it ended itself. Simulated by running
 * the identical finish again, [sync] and [async]. */
TEST(finish_retry_after_lost_commit_answer) {
  reset_tables();
  store_node a, b;
  node_init(&a, "alpha", 0);
  node_init(&b, "beta", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  CHECK(store_node_register(sb, &b, &e) == 0);
  char id[T_ID_MAX];
  insert_backend(sa, "auto", 0, id);
  CHECK(claim(sa, a.id, 0, 0, 1, 60000, NULL) == 1);
  CHECK(store_job_start(sa, id, 1, "cpu", NULL, NULL, &e) == 0);
  char path[300];
  snprintf(path, sizeof path, "/data/results/%s.r1.npy", id);
  store_job_end end = {.status = JOB_SUCCEEDED, .finished_at = 123456,
                       .result_path = path, .max_abs_diff = NAN};
  CHECK(store_job_finish(sa, id, &end, &e) == 0);
  /* the retry: the row holds this very finish -> success, nothing changed */
  int rc = store_job_finish(sa, id, &end, &e);
  CHECK_MSG(rc == 0, "retry: %d %s", rc, e.message);
  fin_cb f = {0};
  CHECK(store_job_finish_async(sa, id, &end, on_finished, &f, &e) == 0);
  CHECK(store_sync(sa, &e) == 0);
  for (int i = 0; i < 1000 && !atomic_load(&f.done); i++) usleep(10000);
  CHECK(atomic_load(&f.done) && f.rc == 0 && f.status == JOB_SUCCEEDED);
  /* another outcome, or another node: still a conflict */
  store_job_end other = end;
  other.status = JOB_FAILED;
  other.result_path = NULL;
  other.error_code = "internal";
  CHECK(store_job_finish(sa, id, &other, &e) == T_ECONFLICT);
  other = end;
  other.finished_at = end.finished_at + 1;
  CHECK(store_job_finish(sa, id, &other, &e) == T_ECONFLICT);
  other = end;
  other.result_path = "/data/results/elsewhere.npy";
  CHECK(store_job_finish(sa, id, &other, &e) == T_ECONFLICT);
  CHECK(store_job_finish(sb, id, &end, &e) == T_ECONFLICT);
  store_job j;
  memset(&j, 0, sizeof j);
  CHECK(store_job_get(sa, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_SUCCEEDED && j.finished_at == 123456 && j.node &&
        strcmp(j.node, a.id) == 0 && j.result_path &&
        strcmp(j.result_path, path) == 0);
  store_job_clear(&j);
  store_node_clear(&a);
  store_node_clear(&b);
}

/* Many claimed jobs started and finished [async] at once (the writer's
 * batch: a start still queued is folded into its finish, pg_store.c): each
 * row ends with its own status, result path, end time, start time and
 * backend, counted once (the claim's attempt), and each finish's callback
 * gets its own row. */
#define NFIN 40
TEST(batch_finish_rows_each_their_own) {
  reset_tables();
  store_node a;
  node_init(&a, "alpha", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  static char ids[NFIN][T_ID_MAX];
  for (int i = 0; i < NFIN; i++) insert_backend(sa, "auto", 0, ids[i]);
  CHECK(claim(sa, a.id, 0, 0, NFIN, 60000, ids) == NFIN);
  static char paths[NFIN][300];
  static fin_cb f[NFIN];
  for (int i = 0; i < NFIN; i++) {
    store_job_start_async(sa, ids[i], 1000 + i, i % 2 ? "cpu" : "serial",
                          "why", NULL);
    snprintf(paths[i], sizeof paths[i], "/data/results/%s.r1.npy", ids[i]);
    store_job_end end = {.status = i % 4 == 3 ? JOB_FAILED : JOB_SUCCEEDED,
                         .finished_at = 5000 + i,
                         .result_path = i % 4 == 3 ? NULL : paths[i],
                         .error_code = i % 4 == 3 ? "internal" : NULL,
                         .held = 1,
                         .max_abs_diff = NAN};
    /* a small result in the row: bytes a text array must carry intact */
    unsigned char npy[6] = {0, '\\', '"', ',', (unsigned char)i, 0xff};
    if (i % 4 == 0) {
      end.result_npy = npy;
      end.result_npy_len = sizeof npy;
    }
    memset(&f[i], 0, sizeof f[i]);
    CHECK(store_job_finish_async(sa, ids[i], &end, on_finished, &f[i], &e) ==
          0);
  }
  CHECK(store_sync(sa, &e) == 0);
  int wrong = 0;
  for (int i = 0; i < NFIN; i++) {
    for (int k = 0; k < 1000 && !atomic_load(&f[i].done); k++) usleep(10000);
    job_status want = i % 4 == 3 ? JOB_FAILED : JOB_SUCCEEDED;
    wrong += !atomic_load(&f[i].done) || f[i].rc != 0 || f[i].status != want;
    store_job j;
    memset(&j, 0, sizeof j);
    if (store_job_get(sa, ids[i], NULL, &j, &e) != 0) {
      wrong++;
      continue;
    }
    int bad = j.status != want || j.finished_at != 5000 + i ||
              j.started_at != 1000 + i || j.attempts != 1 ||
              !j.backend_used ||
              strcmp(j.backend_used, i % 2 ? "cpu" : "serial") != 0 ||
              (want == JOB_SUCCEEDED
                   ? !j.result_path || strcmp(j.result_path, paths[i]) != 0
                   : j.result_path != NULL || !j.error_code);
    void *got = NULL;
    size_t glen = 0;
    if (i % 4 == 0) {
      unsigned char want_npy[6] = {0, '\\', '"', ',', (unsigned char)i, 0xff};
      bad |= store_job_result_npy(sa, ids[i], NULL, &got, &glen, &e) != 0 ||
              glen != sizeof want_npy || memcmp(got, want_npy, glen) != 0;
      free(got);
    }
    if (bad)
      printf("  row %d: status %d finished %lld started %lld attempts %d\n",
             i, (int)j.status, (long long)j.finished_at,
             (long long)j.started_at, j.attempts);
    wrong += bad;
    store_job_clear(&j);
  }
  CHECK_MSG(wrong == 0, "%d of %d rows wrong", wrong, NFIN);
  store_node_clear(&a);
}

/* A node paused past its lease: the reaper put its running job back in the
 * queue (node NULL). The paused run's end (held) is refused, the row left
 * as the reaper left it; so is it once another node claimed the job. An
 * end any node may write (a cancel, held 0) still ends it. */
TEST(stale_run_end_after_reap_is_refused) {
  reset_tables();
  store_node a, b;
  node_init(&a, "alpha", 0);
  node_init(&b, "beta", 0);
  terr e;
  CHECK(store_node_register(sa, &a, &e) == 0);
  CHECK(store_node_register(sb, &b, &e) == 0);
  char id[T_ID_MAX], id2[T_ID_MAX];
  insert_backend(sa, "auto", 0, id);
  CHECK(claim(sa, a.id, 0, 0, 1, 1, NULL) == 1); /* a 1 ms lease */
  CHECK(store_job_start(sa, id, 1, "cpu", NULL, NULL, &e) == 0);
  leases_pass();
  store_reaped *r = NULL;
  int n = -1;
  CHECK(store_reap(sb, 3, &r, &n, &e) == 0 && n == 1);
  free(r);
  store_job_end end = {.status = JOB_FAILED, .finished_at = 99,
                       .max_abs_diff = NAN, .error_code = "io",
                       .error_message = "its temporary was removed",
                       .held = 1};
  int rc = store_job_finish(sa, id, &end, &e);
  CHECK_MSG(rc == T_ECONFLICT && strstr(e.message, "no longer held"),
            "stale end: %d %s", rc, e.message);
  fin_cb f = {0}; /* the same through the writer */
  CHECK(store_job_finish_async(sa, id, &end, on_finished, &f, &e) == 0);
  CHECK(store_sync(sa, &e) == 0);
  for (int i = 0; i < 1000 && !atomic_load(&f.done); i++) usleep(10000);
  CHECK(atomic_load(&f.done) && f.rc == T_ECONFLICT);
  store_job j;
  memset(&j, 0, sizeof j);
  CHECK(store_job_get(sa, id, NULL, &j, &e) == 0);
  CHECK(j.status == JOB_QUEUED && !j.node && j.finished_at == 0 &&
        !j.error_code);
  store_job_clear(&j);
  /* claimed by b now: a's stale end is refused still, b's own end is not */
  CHECK(claim(sb, b.id, 0, 0, 1, 60000, NULL) == 1);
  CHECK(store_job_finish(sa, id, &end, &e) == T_ECONFLICT);
  end.status = JOB_SUCCEEDED;
  end.error_code = end.error_message = NULL;
  CHECK(store_job_finish(sb, id, &end, &e) == 0);
  /* held 0 (a cancel of a queued job) needs no claim */
  insert_backend(sa, "auto", 0, id2);
  store_job_end cancel = {.status = JOB_CANCELED, .finished_at = 100,
                          .max_abs_diff = NAN, .error_code = "canceled",
                          .error_message = "canceled by request"};
  CHECK(store_job_finish(sa, id2, &cancel, &e) == 0);
  store_node_clear(&a);
  store_node_clear(&b);
}

/* ---- events
 * -------------------------------------------------------------------------- */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static char events[256][64];
static int nevents;

static void on_event(void *arg, const char *what, const char *id) {
  (void)arg;
  pthread_mutex_lock(&ev_mu);
  if (nevents < 256)
    snprintf(events[nevents++], 64, "%s:%s", what, id ? id : "");
  pthread_mutex_unlock(&ev_mu);
}

static _Atomic int count2; /* a second subscriber's events */
static void on_event2(void *arg, const char *what, const char *id) {
  (void)arg, (void)what, (void)id;
  count2++;
}

/* A subscriber that unlistens itself from its first event. */
static _Atomic int count3;
static uint64_t tok3;
static void on_event3(void *arg, const char *what, const char *id) {
  (void)what, (void)id;
  count3++;
  store_unlisten(arg, tok3);
}

/* Wait (at most secs, a bound) until the event "what:id" came n times. */
static int got_event_n(const char *what, const char *id, int n, int secs) {
  char want[64];
  snprintf(want, sizeof want, "%s:%s", what, id ? id : "");
  for (int i = 0; i < secs * 100; i++) {
    pthread_mutex_lock(&ev_mu);
    int found = 0;
    for (int k = 0; k < nevents; k++) found += strcmp(events[k], want) == 0;
    pthread_mutex_unlock(&ev_mu);
    if (found >= n) return 1;
    usleep(10000);
  }
  return 0;
}

static int got_event(const char *what, const char *id) {
  return got_event_n(what, id, 1, 20);
}

/* A [sync] call, retried (bounded) while the restarted server is not back. */
static int insert_retry(store *s, char id[T_ID_MAX]) {
  for (int i = 0; i < 200; i++) {
    store_job j;
    job_init(&j, "alice", "map");
    int existing;
    terr e;
    int rc = store_job_insert(s, &j, &existing, &e);
    if (rc == 0) snprintf(id, T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
    if (rc == 0) return 0;
    usleep(100000);
  }
  return -1;
}

TEST(listen_across_stores_and_reset) {
  reset_tables();
  terr e;
  uint64_t tok = 0;
  uint64_t tok2 = 0;
  /* first in the list: it leaves during the first dispatch, the others
   * still get that event */
  CHECK(store_listen(sb, on_event3, sb, &tok3, &e) == 0);
  CHECK(store_listen(sb, on_event, NULL, &tok, &e) == 0 && tok != 0);
  CHECK(store_listen(sb, on_event2, NULL, &tok2, &e) == 0 && tok2 != tok);
  char q1[T_ID_MAX], c1[T_ID_MAX];
  insert_backend(sa, "auto", 0, q1);
  CHECK(got_event("queued", q1));
  store_unlisten(sb, tok2);
  int seen2 = count2;
  CHECK(seen2 >= 1);
  int ended;
  CHECK(store_job_cancel_request(sa, q1, NULL, &ended, &e) == 0 && ended == 1);
  CHECK(got_event("end", q1));
  insert_backend(sa, "auto", 0, c1);
  CHECK(claim(sa, "n_A", 0, 0, 1, 60000, NULL) == 1);
  CHECK(store_job_cancel_request(sa, c1, NULL, &ended, &e) == 0 && ended == 0);
  CHECK(got_event("cancel", c1));

  /* a server that stops answering without closing the connection (its
   * backend stopped): the listener's probe finds it lost and reconnects */
  char pid[32];
  snprintf(pid, sizeof pid, "%s",
           sql("SELECT pid FROM pg_stat_activity WHERE query = "
               "'LISTEN tessel'"));
  CHECK(pid[0] != 0);
  if (pid[0]) {
    CHECK(kill(atoi(pid), SIGSTOP) == 0);
    CHECK(got_event_n("reset", NULL, 1, 60));
    kill(atoi(pid), SIGCONT);
    char q4[T_ID_MAX];
    insert_backend(sa, "auto", 0, q4);
    CHECK(got_event("queued", q4)); /* on the new connection */
  }

  const char *pgserver = getenv("TESSEL_TEST_PGSERVER");
  const char *pgdir = getenv("TESSEL_TEST_PG_DIR");
  if (!pgserver || !pgdir) {
    printf(
        "listen_across_stores_and_reset: no restart (TESSEL_TEST_PGSERVER "
        "or TESSEL_TEST_PG_DIR unset)\n");
  } else {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "'%s' restart '%s'", pgserver, pgdir);
    CHECK(system(cmd) == 0);
    CHECK(got_event_n("reset", NULL, 2, 60));
    PQfinish(db);
    db = PQconnectdb(url);
    CHECK(PQstatus(db) == CONNECTION_OK);
    char q2[T_ID_MAX] = "";
    CHECK(insert_retry(sa, q2) == 0);
    CHECK(got_event("queued", q2)); /* listening again */
  }
  store_unlisten(sb, tok);
  CHECK(count2 == seen2); /* no callback after store_unlisten */
  CHECK(count3 == 1);
}

int main(void) {
  url = getenv("TESSEL_TEST_PG");
  if (!url || !*url)
    SKIP_ALL("TESSEL_TEST_PG is not set (ctest store_cluster_pg)");
  if (fixture_root("/tmp/tessel_store_cluster_XXXXXX")) return 1;
  char *dir = data_dir;
  fresh_dir(dir, sizeof data_dir);
  mkdir(dir, 0755);
  terr e;
  if (store_open_url(url, dir, &sa, &e) || store_open_url(url, dir, &sb, &e)) {
    fprintf(stderr, "store_open_url: %s\n", e.message);
    return 1;
  }
  db = PQconnectdb(url);
  if (PQstatus(db) != CONNECTION_OK) {
    fprintf(stderr, "connect: %s\n", PQerrorMessage(db));
    return 1;
  }
  RUN(nodes_register_list_leave);
  RUN(nodes_alive_by_their_own_lease);
  RUN(nodes_lease_migration_upgrades);
  RUN(claim_each_job_once);
  RUN(claim_filters_and_order);
  RUN(claim_within_each_kind_of_room);
  RUN(claim_counts_the_attempt_once);
  RUN(heartbeat_renews_cancels_lost);
  RUN(reap_requeues_and_fails_crashed);
  RUN(reap_twice_at_once_moves_each_once);
  RUN(cancel_request_both_ways);
  RUN(finish_retry_after_lost_commit_answer);
  RUN(batch_finish_rows_each_their_own);
  RUN(stale_run_end_after_reap_is_refused);
  RUN(array_delete_first_fails_the_insert);
  RUN(job_insert_first_refuses_the_delete);
  RUN(expire_skips_an_array_an_insert_holds);
  RUN(result_delete_first_fails_the_insert);
  RUN(insert_first_refuses_the_result_delete);
  RUN(expire_skips_a_job_an_insert_holds);
  RUN(listen_across_stores_and_reset); /* last: restarts the server */
  store_close(sb);
  store_close(sa);
  PQfinish(db);
  rm_tree(root);
  return check_summary();
}
