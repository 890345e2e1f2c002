/* test_store_schema.c — migration 8 of the SQLite store (db/sqlite/
 * schema.c): the jobs table's status CHECK written as comparisons instead
 * of an IN list, edited in sqlite_schema's text, on a fresh file and on a
 * file of schema 7 that holds jobs.
 *
 * Checks, on both: the version is the newest (9: migration 9, the devices column, follows) and the history says so; the table's
 * text holds the comparisons and no IN list; a statement that sets the
 * status builds no temporary b-tree (EXPLAIN has no OpenEphemeral: what
 * the migration is for, tests/bench/README.md); the constraint still
 * refuses a status that is not one of the five, through a connection of
 * its own; the jobs written before are read and finished through the
 * store; PRAGMA integrity_check is "ok". SQLite only (PostgreSQL's CHECK
 * is its own, db/pg/pg_schema.c).
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "db/store.h"
#include "store_fixture.h"

static sqlite3 *open_file(const char *dir) {
  char path[400];
  snprintf(path, sizeof path, "%s/tessel.db", dir);
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  return db;
}

/* One integer from sql (-1 on an error). */
static long long number(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  long long v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* The file as a build of schema 7 left it: no devices column (migration
 * 9), the CHECK's old text (put back the way migration 8 edits it), no
 * history rows 8 and 9, user_version 7. */
static void back_to_v7(const char *dir) {
  sqlite3 *db = open_file(dir);
  long long cookie = number(db, "PRAGMA schema_version");
  CHECK(cookie > 0);
  CHECK(sqlite3_exec(db, "ALTER TABLE jobs DROP COLUMN devices;", NULL, NULL,
                     NULL) == SQLITE_OK);
  cookie = number(db, "PRAGMA schema_version");
  char sql[1024];
  snprintf(sql, sizeof sql,
           "PRAGMA writable_schema = ON;"
           "UPDATE sqlite_schema SET sql = replace(sql, 'status = ''queued'' OR"
           " status = ''running'' OR status = ''succeeded'' OR status ="
           " ''failed'' OR status = ''canceled''', '%s')"
           " WHERE name = 'jobs';"
           "PRAGMA writable_schema = OFF;"
           "PRAGMA schema_version = %lld;"
           "DELETE FROM schema_migrations WHERE version >= 8;"
           "PRAGMA user_version = 7;",
           "status IN\n    (''queued'',''running'',''succeeded'',''failed'','"
           "'canceled'')",
           cookie + 1);
  CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
  CHECK(number(db, "SELECT instr(sql, 'status IN') > 0 FROM sqlite_schema"
                   " WHERE name = 'jobs'") == 1);
  sqlite3_close(db);
}

/* EXPLAIN of sql: does its program build a temporary b-tree? */
static int ephemeral(sqlite3 *db, const char *sql) {
  char ex[512];
  snprintf(ex, sizeof ex, "EXPLAIN %s", sql);
  sqlite3_stmt *st = NULL;
  CHECK(sqlite3_prepare_v2(db, ex, -1, &st, NULL) == SQLITE_OK);
  int found = 0;
  while (st && sqlite3_step(st) == SQLITE_ROW)
    found |= strcmp((const char *)sqlite3_column_text(st, 1),
                    "OpenEphemeral") == 0;
  sqlite3_finalize(st);
  return found;
}

/* What migration 8 promises (and the newest version, 9), on the file in dir (closed). */
static void check_latest(const char *dir, const char *queued_id) {
  sqlite3 *db = open_file(dir);
  CHECK(number(db, "PRAGMA user_version") == 9);
  CHECK(number(db, "SELECT max(version) FROM schema_migrations") == 9);
  CHECK(number(db, "SELECT instr(sql, 'status IN') FROM sqlite_schema"
                   " WHERE name = 'jobs'") == 0);
  CHECK(number(db, "SELECT instr(sql, 'status = ''canceled''') > 0"
                   " FROM sqlite_schema WHERE name = 'jobs'") == 1);
  CHECK(!ephemeral(db, "UPDATE jobs SET status = 'succeeded' WHERE id = 'x'"
                       " AND status IN ('queued','running')"));
  CHECK(!ephemeral(db, "INSERT INTO jobs (id, owner, kind, params, status,"
                       " backend_requested, created_at) VALUES"
                       " ('x', '', 'map', '{}', 'queued', 'auto', 1)"));
  char sql[200];
  snprintf(sql, sizeof sql, "UPDATE jobs SET status = 'bogus' WHERE id = '%s'",
           queued_id);
  CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_CONSTRAINT);
  CHECK(sqlite3_extended_errcode(db) == SQLITE_CONSTRAINT_CHECK);
  CHECK(sqlite3_exec(db,
                     "INSERT INTO jobs (id, owner, kind, params, status,"
                     " backend_requested, created_at) VALUES"
                     " ('x', '', 'map', '{}', 'done', 'auto', 1)",
                     NULL, NULL, NULL) == SQLITE_CONSTRAINT);
  sqlite3_stmt *st = NULL;
  CHECK(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) ==
        SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(st, 0), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(test_fresh_file) {
  SKIP_ON_PG("reads tessel.db's schema");
  char dir[300], id[T_ID_MAX];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  CHECK(store_schema_version(s) == 9);
  CHECK(insert_job(s, "", "map", 0, id) == 0);
  store_close(s);
  check_latest(dir, id);
}

TEST(test_from_v7_keeps_jobs) {
  SKIP_ON_PG("writes a SQLite file of schema 7");
  char dir[300], queued[T_ID_MAX], done[T_ID_MAX];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  terr e;
  CHECK(insert_job(s, "", "map", 0, queued) == 0);
  CHECK(insert_job(s, "", "map", 0, done) == 0);
  store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = 5,
                     .max_abs_diff = NAN};
  CHECK(store_job_finish(s, done, &x, &e) == 0);
  store_close(s);
  back_to_v7(dir);
  s = reopen(dir);
  if (!s) return;
  CHECK(store_schema_version(s) == 9);
  store_job g;
  CHECK(store_job_get(s, done, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.finished_at == 5);
  store_job_clear(&g);
  /* The writer's statements run against the edited table. */
  x.finished_at = 6;
  CHECK(store_job_finish(s, queued, &x, &e) == 0);
  CHECK(store_job_get(s, queued, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.finished_at == 6);
  store_job_clear(&g);
  char another[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 0, another) == 0);
  store_close(s);
  check_latest(dir, another);
  /* Opened again at the newest: nothing to apply, the text as it was. */
  s = reopen(dir);
  if (s) CHECK(store_schema_version(s) == 9);
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_store_schema_XXXXXX")) return 1;
  RUN(test_fresh_file);
  RUN(test_from_v7_keeps_jobs);
  rm_tree(root);
  return check_summary();
}
