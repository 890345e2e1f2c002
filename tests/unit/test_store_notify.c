/* test_store_notify.c — the PostgreSQL store's events after their commit
 * (db/pg/pg_conn.c, pg__note): an insert's "queued" and a finish's "end"
 * are sent once the transaction that wrote them committed, in a
 * transaction of their own, and never for what was rolled back. Two stores
 * on one database play two nodes: the events written through one are
 * heard through the other.
 *
 * Cases: a batch of async finishes in which one is refused (its job was
 * taken by another node: the writer's batch without savepoints fails, is
 * rolled back and runs again op by op) gives exactly one "end" for each
 * finish that committed and none for the refused one; a chunk of
 * store_insert_jobs gives its "queued"; every job an "end" names reads as
 * ended when its event is heard. Absence is judged after a later marker
 * event (a later transaction's notifications come after an earlier one's),
 * never after a sleep.
 *
 * Runs when $TESSEL_TEST_PG names a server (ctest store_notify_pg starts
 * one through tests/cluster/with_pg.sh); else skipped (77). Deadlines are
 * bounds only, never asserted as speed.
 */
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "store_fixture.h"

static store *sa, *sb;
static PGconn *db; /* the test's own connection */
static char data_dir[300];

static void sql(const char *q) {
  PGresult *r = PQexec(db, q);
  int st = PQresultStatus(r);
  CHECK_MSG(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", q,
            PQerrorMessage(db));
  PQclear(r);
}

/* ---- events heard through sb ------------------------------------------- */
#define NEV 512
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static char events[NEV][64];
static int nevents;

static void on_event(void *arg, const char *what, const char *id) {
  (void)arg;
  pthread_mutex_lock(&ev_mu);
  if (nevents < NEV) snprintf(events[nevents++], 64, "%s:%s", what, id ? id : "");
  pthread_mutex_unlock(&ev_mu);
}

static int count_event(const char *what, const char *id) {
  char want[64];
  snprintf(want, sizeof want, "%s:%s", what, id);
  int n = 0;
  pthread_mutex_lock(&ev_mu);
  for (int k = 0; k < nevents; k++) n += strcmp(events[k], want) == 0;
  pthread_mutex_unlock(&ev_mu);
  return n;
}

/* Wait (a bound, not a speed) until "what:id" was heard. */
static int heard(const char *what, const char *id) {
  for (int i = 0; i < 3000; i++) {
    if (count_event(what, id) > 0) return 1;
    usleep(10000);
  }
  return 0;
}

static void insert(store *s, char id[T_ID_MAX]) {
  store_job j;
  job_init(&j, "alice", "map");
  int existing;
  terr e;
  CHECK_MSG(store_job_insert(s, &j, &existing, &e) == 0, "insert: %s",
            e.message);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
}

typedef struct fin_cb {
  _Atomic int done;
  int rc;
} fin_cb;

static void on_finished(void *arg, int rc, const terr *e, store_job *row) {
  fin_cb *f = arg;
  (void)e;
  f->rc = rc;
  if (row) store_job_clear(row);
  atomic_store(&f->done, 1);
}

#define NJ 6
#define REFUSED 2 /* the job another node took */

TEST(end_once_per_committed_finish) {
  sql("DELETE FROM jobs; DELETE FROM nodes");
  terr e;
  store_node a;
  memset(&a, 0, sizeof a);
  a.name = strdup("alpha");
  a.url = strdup("http://127.0.0.1:1");
  a.version = strdup("test");
  a.threads = 4;
  a.load = NAN;
  CHECK(store_node_register(sa, &a, &e) == 0);
  uint64_t tok = 0;
  CHECK(store_listen(sb, on_event, NULL, &tok, &e) == 0);

  /* a chunk of store_insert_jobs: one "queued" naming one of its rows */
  store_job rows[NJ];
  int existing[NJ], rcs[NJ];
  terr errs[NJ];
  for (int i = 0; i < NJ; i++) job_init(&rows[i], "alice", "map");
  CHECK(store_insert_jobs(sa, rows, NJ, existing, rcs, errs, &e) == 0);
  char ids[NJ][T_ID_MAX];
  int queued = 0;
  for (int i = 0; i < NJ; i++) {
    CHECK(rcs[i] == 0);
    snprintf(ids[i], T_ID_MAX, "%s", rows[i].id);
    store_job_clear(&rows[i]);
  }
  for (int i = 0; i < 3000 && !queued; i++) {
    for (int k = 0; k < NJ; k++) queued += count_event("queued", ids[k]);
    if (!queued) usleep(10000);
  }
  CHECK_MSG(queued >= 1, "no \"queued\" for the chunk");

  store_claim_room room = {NJ, 0, NJ};
  store_job *v = NULL;
  int n = 0;
  CHECK(store_job_claim(sa, a.id, room, 0, 60000, &v, &n, &e) == 0 && n == NJ);
  for (int i = 0; i < n; i++) store_job_clear(&v[i]);
  free(v);
  char q[200];
  snprintf(q, sizeof q, "UPDATE jobs SET node = 'n_other' WHERE id = '%s'",
           ids[REFUSED]);
  sql(q);

  static fin_cb f[NJ];
  for (int i = 0; i < NJ; i++) {
    store_job_end end = {.status = JOB_SUCCEEDED, .finished_at = 5000 + i,
                         .held = 1, .max_abs_diff = NAN};
    memset(&f[i], 0, sizeof f[i]);
    CHECK(store_job_finish_async(sa, ids[i], &end, on_finished, &f[i], &e) ==
          0);
  }
  CHECK(store_sync(sa, &e) == 0);
  for (int i = 0; i < NJ; i++) {
    for (int k = 0; k < 3000 && !atomic_load(&f[i].done); k++) usleep(10000);
    CHECK(atomic_load(&f[i].done));
    CHECK_MSG(i == REFUSED ? f[i].rc == T_ECONFLICT : f[i].rc == 0,
              "finish %d: rc %d", i, f[i].rc);
  }
  for (int i = 0; i < NJ; i++) {
    if (i == REFUSED) continue;
    CHECK_MSG(heard("end", ids[i]), "no \"end\" for job %d", i);
    store_job j;
    memset(&j, 0, sizeof j);
    CHECK(store_job_get(sb, ids[i], NULL, &j, &e) == 0 &&
          j.status == JOB_SUCCEEDED); /* heard only once committed */
    store_job_clear(&j);
  }
  /* a later transaction's event: every earlier one was delivered before */
  char marker[T_ID_MAX];
  insert(sa, marker);
  CHECK(heard("queued", marker));
  for (int i = 0; i < NJ; i++)
    CHECK_MSG(count_event("end", ids[i]) == (i == REFUSED ? 0 : 1),
              "job %d: %d \"end\" events (the rolled-back batch's sent too?)",
              i, count_event("end", ids[i]));
  store_unlisten(sb, tok);
  store_node_clear(&a);
}

int main(void) {
  const char *url = getenv("TESSEL_TEST_PG");
  if (!url || !*url) SKIP_ALL("TESSEL_TEST_PG is not set (ctest store_notify_pg)");
  if (fixture_root("/tmp/tessel_store_notify_XXXXXX")) return 1;
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
  RUN(end_once_per_committed_finish);
  store_close(sb);
  store_close(sa);
  PQfinish(db);
  rm_tree(root);
  return check_summary();
}
