/* store_fixture.h — shared by the store tests (test_store.c and
 * test_store_threads.c): a mkdtemp root with one fresh data dir per test
 * (fresh_dir, open_fresh), a queued job with the usual fields (job_init,
 * insert_job), an array row (array_init) and the final rm_tree of the root.
 *
 * PostgreSQL: when $TESSEL_TEST_PG holds a conninfo (tests/cluster/
 * with_pg.sh sets it), open_fresh opens that store instead, on a fresh
 * schema (pg_reset drops and recreates schema public through a
 * maintenance connection of its own), with the test's data dir tied to
 * it; reopen opens the same store again. Cases that poke SQLite files
 * call SKIP_ON_PG("why") first.
 *
 * The including file's main starts with fixture_root (the mkdtemp root)
 * and ends with rm_tree(root). Single-threaded helpers (dir_seq is not
 * guarded): call them from the test's main thread. Static functions: each
 * test file uses a subset.
 */
#ifndef TESSEL_TESTS_STORE_FIXTURE_H
#define TESSEL_TESTS_STORE_FIXTURE_H
#pragma GCC diagnostic ignored "-Wunused-function"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "check.h"
#include "db/store.h"

static char root[256];
static int dir_seq;

/* main's start: make the root from tmpl ("/tmp/name_XXXXXX") and quiet the
 * log to warnings. 0, or -1 (reported) when mkdtemp fails. */
static int fixture_root(const char *tmpl) {
  snprintf(root, sizeof root, "%s", tmpl);
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return -1;
  }
  t_log_level = T_LOG_WARN;
  return 0;
}

/* A fresh data dir for one test. */
static void fresh_dir(char *buf, size_t n) {
  snprintf(buf, n, "%s/d%d", root, dir_seq++);
}

/* The PostgreSQL store under test, or NULL (SQLite). */
static const char *test_pg(void) {
  const char *u = getenv("TESSEL_TEST_PG");
  return u && *u ? u : NULL;
}

/* A case that cannot run on PostgreSQL says why and returns. */
#define SKIP_ON_PG(why)                                                   \
  do {                                                                    \
    if (test_pg()) {                                                      \
      printf("skip on postgresql: %s\n", why);                            \
      return;                                                             \
    }                                                                     \
  } while (0)

static void pg_quiet(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}

/* Run sql on the test's PostgreSQL through a connection of its own. */
static void pg_admin(const char *sql) {
  PGconn *c = PQconnectdb(test_pg());
  CHECK_MSG(PQstatus(c) == CONNECTION_OK, "pg: %s", PQerrorMessage(c));
  PQsetNoticeProcessor(c, pg_quiet, NULL);
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  CHECK_MSG(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "pg: %s: %s",
            sql, PQresultErrorMessage(r));
  PQclear(r);
  PQfinish(c);
}

/* A fresh, empty PostgreSQL store (no tables). */
static void pg_reset(void) {
  pg_admin("DROP SCHEMA public CASCADE; CREATE SCHEMA public");
}

/* Open the store under test again on dir (SQLite: dir's file). */
static store *reopen(const char *dir) {
  store *s = NULL;
  terr e;
  terr_clear(&e);
  int rc = store_open_url(test_pg(), dir, &s, &e);
  CHECK_MSG(rc == 0, "store_open_url: %s", e.message);
  return s;
}

static store *open_fresh(char *dir, size_t n) {
  fresh_dir(dir, n);
  if (test_pg()) pg_reset();
  return reopen(dir);
}

/* open_fresh for a test that never names its directory again: the
 * directory's name lives here, one test at a time. */
static inline store *open_fresh_store(void) {
  static char dir[300];
  return open_fresh(dir, sizeof dir);
}

static char *sdup(const char *x) { return x ? strdup(x) : NULL; }

/* A queued job of `owner` with the usual fields. */
static void job_init(store_job *j, const char *owner, const char *kind) {
  memset(j, 0, sizeof *j);
  j->owner = sdup(owner);
  j->kind = sdup(kind);
  j->params = sdup("{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}");
  j->backend_requested = sdup("auto");
  j->max_abs_diff = NAN;
}

static int insert_job(store *s, const char *owner, const char *kind,
                      int priority, char id_out[T_ID_MAX]) {
  store_job j;
  job_init(&j, owner, kind);
  j.priority = priority;
  int existing = -1;
  terr e;
  int rc = store_job_insert(s, &j, &existing, &e);
  if (rc == 0 && id_out) snprintf(id_out, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
  return rc;
}

/* An array row with the usual fields, its digest and file named sha. */
static void array_init(store_array *a, const char *owner, const char *sha) {
  memset(a, 0, sizeof *a);
  a->owner = sdup(owner);
  a->dtype = sdup("float64");
  a->shape = sdup("[100,10]");
  a->bytes = 8000;
  a->digest = sdup(sha);
  char p[128];
  snprintf(p, sizeof p, "/data/arrays/%s.npy", sha);
  a->path = sdup(p);
}

static void rm_tree(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

#endif
