/* schema.c — the database schema as numbered migrations, and the pragmas.
 *
 * Each migration is one SQL text with a number; the database records the
 * highest applied number in PRAGMA user_version and keeps a history row per
 * migration in schema_migrations. store__migrate runs, in one IMMEDIATE
 * transaction, every migration newer than the file's version, so a database
 * is always at a whole version. A file newer than this build is refused
 * (T_EIO) rather than misread. Migrations are append-only: never edit a
 * released one, add the next number. A migration that only rewrites a
 * constraint's text (8: the status CHECK) edits sqlite_schema in place
 * (edit_schema) instead of copying the table.
 *
 * Durability: journal_mode=WAL with synchronous=NORMAL. A commit is in the
 * WAL file when it returns, so a killed process loses nothing committed; on a
 * power loss or OS crash the last commits before the loss may be lost (the
 * WAL is fsynced only at checkpoints) but the database stays consistent.
 *
 * Times are integer wall-clock milliseconds; JSON documents (params, timings,
 * result, compare, estimate) are stored as text; status as its name, so that
 * the file reads well in the sqlite3 shell. A small result's .npy bytes are
 * a BLOB in its job row (result_npy, migration 2); a result of several
 * arrays lists them in result_parts (migration 6); a cuda run's GPUs and
 * the rows each wrote are in devices (migration 9). There are no foreign
 * keys: the only relation (a job's params naming an array) lives inside
 * JSON text and is checked by the array operations, not by the schema.
 */
#include <stdio.h>

#include "db/sqlite/store_int.h"

typedef struct migration {
  int version;
  const char *sql;
  int edits_schema; /* sql rewrites sqlite_schema's text (edit_schema) */
} migration;

static const migration migrations[] = {
    {1,
     "CREATE TABLE schema_migrations (\n"
     "  version INTEGER PRIMARY KEY,\n"
     "  applied_at INTEGER NOT NULL\n"
     ");\n"
     "CREATE TABLE jobs (\n"
     "  id TEXT NOT NULL UNIQUE,\n"
     "  owner TEXT NOT NULL,\n"
     "  kind TEXT NOT NULL,\n"
     "  params TEXT NOT NULL,\n"
     "  status TEXT NOT NULL CHECK (status IN\n"
     "    ('queued','running','succeeded','failed','canceled')),\n"
     "  backend_requested TEXT NOT NULL,\n"
     "  backend_used TEXT,\n"
     "  backend_reason TEXT,\n"
     "  estimate TEXT,\n"
     "  priority INTEGER NOT NULL DEFAULT 0,\n"
     "  label TEXT,\n"
     "  request_id TEXT,\n"
     "  body_hash TEXT,\n"
     "  timeout_s REAL NOT NULL DEFAULT 0,\n"
     "  created_at INTEGER NOT NULL,\n"
     "  started_at INTEGER NOT NULL DEFAULT 0,\n"
     "  finished_at INTEGER NOT NULL DEFAULT 0,\n"
     "  timings TEXT,\n"
     "  progress_done INTEGER NOT NULL DEFAULT 0,\n"
     "  progress_total INTEGER NOT NULL DEFAULT 0,\n"
     "  error_code TEXT,\n"
     "  error_message TEXT,\n"
     "  result TEXT,\n"
     "  result_path TEXT,\n"
     "  compare TEXT,\n"
     "  max_abs_diff REAL,\n" /* NULL: not compared */
     "  attempts INTEGER NOT NULL DEFAULT 0\n"
     ");\n"
     /* Listing, newest first (ids sort by creation time), per filter. The
      * backend filter (requested = b OR used = b OR used LIKE 'b:%') is an
      * OR over two columns that no index can order by id, so it walks
      * jobs_owner_id (or the owner's status/kind/label index) newest first
      * and stops at the page's limit: an index of its own measured unused
      * by the planner and would only slow every insert. */
     "CREATE INDEX jobs_owner_id ON jobs(owner, id);\n"
     "CREATE INDEX jobs_owner_status_id ON jobs(owner, status, id);\n"
     "CREATE INDEX jobs_owner_kind_id ON jobs(owner, kind, id);\n"
     "CREATE INDEX jobs_owner_label_id ON jobs(owner, label, id)\n"
     "  WHERE label IS NOT NULL;\n"
     /* Idempotency: one job per (owner, request_id). */
     "CREATE UNIQUE INDEX jobs_owner_request ON jobs(owner, request_id)\n"
     "  WHERE request_id IS NOT NULL;\n"
     /* Recovery and the scheduler: the unfinished ones, in run order. */
     "CREATE INDEX jobs_unfinished ON jobs(priority DESC, created_at, id)\n"
     "  WHERE status IN ('queued','running');\n"
     /* Expiry. */
     "CREATE INDEX jobs_finished_at ON jobs(finished_at)\n"
     "  WHERE finished_at > 0;\n"
     "CREATE TABLE arrays (\n"
     "  id TEXT NOT NULL UNIQUE,\n"
     "  owner TEXT NOT NULL,\n"
     "  dtype TEXT NOT NULL,\n"
     "  shape TEXT NOT NULL,\n"
     "  bytes INTEGER NOT NULL,\n"
     "  sha256 TEXT NOT NULL,\n"
     "  path TEXT NOT NULL,\n"
     "  created_at INTEGER NOT NULL\n"
     ");\n"
     "CREATE UNIQUE INDEX arrays_owner_sha ON arrays(owner, sha256);\n"
     "CREATE INDEX arrays_owner_id ON arrays(owner, id);\n"
     "CREATE INDEX arrays_created_at ON arrays(created_at);\n", 0},
    /* Small results are kept in the job's row as their .npy bytes instead
     * of a file of their own (creating a file costs far more than a tiny
     * job; see db/store.h, store_job_end.result_npy). NULL otherwise. */
    {2, "ALTER TABLE jobs ADD COLUMN result_npy BLOB;\n", 0},
    /* A job's timings and result metadata as typed columns instead of JSON
     * documents: the store queries them (stats) and the service writes
     * their JSON in one place (compute/jobs/json.c). Old rows are carried over from
     * their documents, which are then dropped. */
    {3, "ALTER TABLE jobs ADD COLUMN t_queue REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_prepare REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_h2d REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_compute REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_d2h REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_store REAL;\n"
        "ALTER TABLE jobs ADD COLUMN t_total REAL;\n"
        "ALTER TABLE jobs ADD COLUMN result_dtype TEXT;\n"
        "ALTER TABLE jobs ADD COLUMN result_shape TEXT;\n"
        "ALTER TABLE jobs ADD COLUMN result_bytes INTEGER;\n"
        "ALTER TABLE jobs ADD COLUMN result_nonconverged INTEGER;\n"
        "UPDATE jobs SET t_queue = json_extract(timings, '$.queue'),"
        " t_prepare = json_extract(timings, '$.prepare'),"
        " t_h2d = json_extract(timings, '$.h2d'),"
        " t_compute = json_extract(timings, '$.compute'),"
        " t_d2h = json_extract(timings, '$.d2h'),"
        " t_store = json_extract(timings, '$.store'),"
        " t_total = json_extract(timings, '$.total')"
        " WHERE timings IS NOT NULL AND json_valid(timings);\n"
        "UPDATE jobs SET result_dtype = json_extract(result, '$.dtype'),"
        " result_shape = json_extract(result, '$.shape'),"
        " result_bytes = json_extract(result, '$.bytes'),"
        " result_nonconverged = json_extract(result, '$.nonconverged')"
        " WHERE result IS NOT NULL AND json_valid(result);\n"
        "ALTER TABLE jobs DROP COLUMN timings;\n"
        "ALTER TABLE jobs DROP COLUMN result;\n", 0},
    /* An array's content id names its hash: XXH3-128 for new uploads
     * (compute/array/arrays.c says why), "sha256:" before the old rows' digests. */
    {4, "DROP INDEX arrays_owner_sha;\n"
        "ALTER TABLE arrays RENAME COLUMN sha256 TO digest;\n"
        "UPDATE arrays SET digest = 'sha256:' || digest"
        " WHERE instr(digest, ':') = 0;\n"
        "CREATE UNIQUE INDEX arrays_owner_digest ON arrays(owner, digest);\n", 0},
    /* A job's "output": {"file": path} (same-host results under
     * --local-dir, compute/array/localfile.h): the path as submitted; NULL for a
     * job whose result the service keeps. */
    {5, "ALTER TABLE jobs ADD COLUMN output_file TEXT;\n", 0},
    /* A result of several named arrays (a geodesic knn: "distance" and
     * "index"): JSON text [{"name","dtype","shape","bytes"[,"path"]}], one
     * entry per part in order, the first's included (its data is where
     * result_path / result_npy say; the others' in their "path" files).
     * NULL for a result of one array. Written by the scheduler
     * (compute/sched/text.c); the store reads only the paths (json_each), to
     * remove the files with the row. */
    {6, "ALTER TABLE jobs ADD COLUMN result_parts TEXT;\n", 0},
    /* Split jobs and the cluster's columns (store.h): a tile's parent and
     * index, a split parent's tile count; node, lease and cancel request
     * are the PostgreSQL backend's (one node here: always NULL/0, kept so
     * that both backends read the same columns). Children are found by
     * parent. */
    {7, "ALTER TABLE jobs ADD COLUMN node TEXT;\n"
        "ALTER TABLE jobs ADD COLUMN lease_until INTEGER;\n"
        "ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL"
        " DEFAULT 0;\n"
        "ALTER TABLE jobs ADD COLUMN parent TEXT;\n"
        "ALTER TABLE jobs ADD COLUMN tile INTEGER NOT NULL DEFAULT 0;\n"
        "ALTER TABLE jobs ADD COLUMN tiles INTEGER NOT NULL DEFAULT 0;\n"
        "CREATE INDEX jobs_parent ON jobs(parent, tile)"
        " WHERE parent IS NOT NULL;\n", 0},
    /* The status CHECK as comparisons instead of an IN list: SQLite codes
     * an IN over more than two constants as a temporary b-tree, built for
     * every statement that checks the constraint: every insert and every
     * status change (about a fifth of the store writer's instructions per
     * tiny job: tests/bench/README.md, 2026-11-29b). The same constraint,
     * so no row needs checking; only the table's text changes, SQLite's
     * documented way to change a CHECK without copying the table. */
    {8,
     "UPDATE sqlite_schema SET sql = replace(sql,"
     " 'status IN' || char(10) || '    (''queued'',''running'',"
     "''succeeded'',''failed'',''canceled'')',"
     " 'status = ''queued'' OR status = ''running'' OR"
     " status = ''succeeded'' OR status = ''failed'' OR"
     " status = ''canceled''')"
     " WHERE type = 'table' AND name = 'jobs';\n",
     1},
    /* A cuda run's devices, written with its end (store.h,
     * store_job.devices): JSON text, a lane a GPU with the rows and blocks
     * it wrote (a job over every GPU, compute/kinds/mgpu.h); NULL for a
     * job that ran on none and for the rows of older runs. */
    {9, "ALTER TABLE jobs ADD COLUMN devices TEXT;\n", 0},
};
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store__pragmas(sqlite3 *db, int writer, terr *e) {
  /* busy_timeout: readers may meet a checkpoint or recovery; another process
   * opening the file may hold the write lock for a moment. */
  const char *common =
      "PRAGMA busy_timeout = 5000;"
      "PRAGMA foreign_keys = ON;"
      "PRAGMA temp_store = MEMORY;";
  /* WAL + NORMAL: see the comment at the top of this file. The WAL is
   * truncated to 64 MiB after checkpoints so it does not stay large. */
  const char *wsql =
      "PRAGMA journal_mode = WAL;"
      "PRAGMA synchronous = NORMAL;"
      "PRAGMA journal_size_limit = 67108864;"
      "PRAGMA cache_size = -16384;";
  const char *rsql = "PRAGMA query_only = ON;";
  char *msg = NULL;
  if (sqlite3_exec(db, common, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(db, writer ? wsql : rsql, NULL, NULL, &msg) != SQLITE_OK) {
    terr_set(e, T_EIO, "", -1, "store: pragmas: %s",
             msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return T_EIO;
  }
  return 0;
}

static int exec(sqlite3 *db, const char *sql, terr *e, const char *what) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
  terr_set(e, T_EIO, "", -1, "store: %s: %s", what,
           msg ? msg : sqlite3_errmsg(db));
  sqlite3_free(msg);
  return T_EIO;
}

static int user_version(sqlite3 *db, int *v, terr *e) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) !=
      SQLITE_OK)
    return store__dberr(e, db, "read schema version");
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    store__dberr(e, db, "read schema version");
    sqlite3_finalize(st);
    return T_EIO;
  }
  *v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return 0;
}

/* A migration that edits sqlite_schema's text (a CHECK): with
 * writable_schema on, then the schema cookie raised by one so that every
 * connection, this one included, reads the new text before its next
 * statement (https://sqlite.org/lang_altertable.html, "otheralter"). */
static int edit_schema(sqlite3 *db, const char *sql, terr *e,
                       const char *what) {
  sqlite3_stmt *st = NULL;
  int cookie = -1;
  if (sqlite3_prepare_v2(db, "PRAGMA schema_version", -1, &st, NULL) ==
          SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    cookie = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (cookie < 0) return store__dberr(e, db, "read schema cookie");
  /* A library built with SQLITE_DEFAULT_DEFENSIVE refuses writable_schema:
   * off for the edit, as it was after. */
  int defensive = 0;
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, -1, &defensive);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 0, NULL);
  int rc = exec(db, "PRAGMA writable_schema = ON", e, what);
  if (!rc) rc = exec(db, sql, e, what);
  sqlite3_exec(db, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, defensive, NULL);
  char bump[64];
  snprintf(bump, sizeof bump, "PRAGMA schema_version = %d", cookie + 1);
  if (!rc) rc = exec(db, bump, e, what);
  return rc;
}

int store__migrate(sqlite3 *db, int *version, terr *e) {
  int rc = exec(db, "BEGIN IMMEDIATE", e, "migrate: begin");
  if (rc) return rc;
  int v = 0;
  if ((rc = user_version(db, &v, e))) goto fail;
  int newest = migrations[NMIGRATIONS - 1].version;
  if (v > newest) {
    rc = terr_set(e, T_EIO, "", -1,
                  "store: database schema version %d is newer than this "
                  "build's %d", v, newest);
    goto fail;
  }
  for (int i = 0; i < NMIGRATIONS; i++) {
    const migration *m = &migrations[i];
    if (m->version <= v) continue;
    char what[64], sql[160];
    snprintf(what, sizeof what, "migration %d", m->version);
    rc = m->edits_schema ? edit_schema(db, m->sql, e, what)
                         : exec(db, m->sql, e, what);
    if (rc) goto fail;
    snprintf(sql, sizeof sql,
             "INSERT INTO schema_migrations(version, applied_at) "
             "VALUES (%d, %lld); PRAGMA user_version = %d;",
             m->version, (long long)t_wall_ms(), m->version);
    if ((rc = exec(db, sql, e, what))) goto fail;
    log_info("store: applied schema migration %d", m->version);
    v = m->version;
  }
  if ((rc = exec(db, "COMMIT", e, "migrate: commit"))) goto fail;
  *version = v;
  return 0;
fail:
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}
