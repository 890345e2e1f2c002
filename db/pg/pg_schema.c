/* pg_schema.c — the PostgreSQL schema as numbered migrations, and the tie
 * between a store and its data directory.
 *
 * pg__migrate takes pg_advisory_lock(7243001) (a session lock: every node
 * opening at once waits for the first), refuses a store whose newest
 * schema_migrations version is above this binary's (T_EINVAL, before it
 * changes anything), applies each newer migration in a transaction of its
 * own, then ties the data directory: meta.store_id (random hex) and
 * <data_dir>/store-id must agree. The first node writes both; a directory
 * with another id, or none while the store has one, or one while the store
 * has none, is refused (T_EINVAL, nothing written). The lock is released
 * before it returns, whatever happened.
 *
 * Columns mirror the SQLite backend's (db/sqlite/schema.c; the same names,
 * so that PG_JOB_COLS is STORE_JOB_COLS) plus the cluster ones of
 * spec14: node, lease_until, cancel_requested, parent, tile, tiles (and,
 * since migration 2, nodes.lease_ms: each node's own lease). Ids and
 * kinds sort bytewise (COLLATE "C") as SQLite's do: ids sort by creation
 * time, and list cursors compare them. Times are BIGINT wall ms; timings
 * DOUBLE PRECISION; a small result's .npy bytes are BYTEA.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/pg/pg_int.h"

#define PG_MIGRATE_LOCK "7243001"

static const char *const migrations[] = {
    /* 1: everything SQLite's seven migrations built, and the cluster. */
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);\n"
    "CREATE TABLE jobs (\n"
    "  id TEXT COLLATE \"C\" PRIMARY KEY,\n"
    "  owner TEXT NOT NULL,\n"
    "  kind TEXT COLLATE \"C\" NOT NULL,\n"
    "  params TEXT NOT NULL,\n"
    "  status TEXT NOT NULL CHECK (status IN\n"
    "    ('queued','running','succeeded','failed','canceled')),\n"
    "  backend_requested TEXT COLLATE \"C\" NOT NULL,\n"
    "  backend_used TEXT COLLATE \"C\",\n"
    "  backend_reason TEXT,\n"
    "  estimate TEXT,\n"
    "  priority INT NOT NULL DEFAULT 0,\n"
    "  label TEXT,\n"
    "  request_id TEXT,\n"
    "  body_hash TEXT,\n"
    "  timeout_s DOUBLE PRECISION NOT NULL DEFAULT 0,\n"
    "  created_at BIGINT NOT NULL,\n"
    "  started_at BIGINT NOT NULL DEFAULT 0,\n"
    "  finished_at BIGINT NOT NULL DEFAULT 0,\n"
    "  progress_done BIGINT NOT NULL DEFAULT 0,\n"
    "  progress_total BIGINT NOT NULL DEFAULT 0,\n"
    "  error_code TEXT,\n"
    "  error_message TEXT,\n"
    "  result_path TEXT,\n"
    "  compare TEXT,\n"
    "  max_abs_diff DOUBLE PRECISION,\n"
    "  attempts INT NOT NULL DEFAULT 0,\n"
    "  result_npy BYTEA,\n"
    "  t_queue DOUBLE PRECISION, t_prepare DOUBLE PRECISION,\n"
    "  t_h2d DOUBLE PRECISION, t_compute DOUBLE PRECISION,\n"
    "  t_d2h DOUBLE PRECISION, t_store DOUBLE PRECISION,\n"
    "  t_total DOUBLE PRECISION,\n"
    "  result_dtype TEXT, result_shape TEXT, result_bytes BIGINT,\n"
    "  result_nonconverged BIGINT,\n"
    "  output_file TEXT,\n"
    "  result_parts TEXT,\n"
    "  node TEXT,\n"
    "  lease_until BIGINT,\n"
    "  cancel_requested BOOLEAN NOT NULL DEFAULT false,\n"
    "  parent TEXT COLLATE \"C\",\n"
    "  tile INT NOT NULL DEFAULT 0,\n"
    "  tiles INT NOT NULL DEFAULT 0\n"
    ");\n"
    "CREATE INDEX jobs_queue ON jobs (priority DESC, id)\n"
    "  WHERE status = 'queued' AND node IS NULL;\n"
    "CREATE INDEX jobs_node ON jobs (node)\n"
    "  WHERE status IN ('queued','running');\n"
    "CREATE INDEX jobs_parent ON jobs (parent, tile) WHERE parent IS NOT NULL;\n"
    "CREATE UNIQUE INDEX jobs_owner_request ON jobs (owner, request_id)\n"
    "  WHERE request_id IS NOT NULL;\n"
    "CREATE INDEX jobs_finished_at ON jobs (finished_at) WHERE finished_at > 0;\n"
    "CREATE INDEX jobs_created_at ON jobs (created_at);\n"
    "CREATE INDEX jobs_owner_id ON jobs (owner, id);\n"
    "CREATE INDEX jobs_unfinished ON jobs (priority DESC, created_at, id)\n"
    "  WHERE status IN ('queued','running');\n"
    "CREATE TABLE arrays (\n"
    "  id TEXT COLLATE \"C\" PRIMARY KEY,\n"
    "  owner TEXT NOT NULL,\n"
    "  dtype TEXT NOT NULL,\n"
    "  shape TEXT NOT NULL,\n"
    "  bytes BIGINT NOT NULL,\n"
    "  digest TEXT NOT NULL,\n"
    "  path TEXT NOT NULL,\n"
    "  created_at BIGINT NOT NULL\n"
    ");\n"
    "CREATE UNIQUE INDEX arrays_owner_digest ON arrays (owner, digest);\n"
    "CREATE INDEX arrays_owner_id ON arrays (owner, id);\n"
    "CREATE INDEX arrays_created_at ON arrays (created_at);\n"
    "CREATE TABLE nodes (\n"
    "  id TEXT PRIMARY KEY, name TEXT, url TEXT, threads INT, gpus INT,\n"
    "  version TEXT, started_at BIGINT, heartbeat_at BIGINT, running INT,\n"
    "  queued INT, load DOUBLE PRECISION,\n"
    "  gone BOOLEAN NOT NULL DEFAULT false,\n"
    "  jobs_done BIGINT NOT NULL DEFAULT 0\n"
    ");\n",
    /* 2: each node's own lease (ms), by which its liveness is judged:
     * nodes of one cluster may run with different --lease-s. NULL for a
     * node that has not written one (older binaries, before its first
     * heartbeat): the listing store's own lease judges it. */
    "ALTER TABLE nodes ADD COLUMN lease_ms BIGINT;\n",
    /* 3: a cuda run's devices, written with its end (store.h,
     * store_job.devices; SQLite's migration 8). */
    "ALTER TABLE jobs ADD COLUMN devices TEXT;\n",
};
#define NMIG ((int)(sizeof migrations / sizeof migrations[0]))

/* <data_dir>/store-id's id into id (cap bytes): 1 read, 0 absent, <0 error. */
static int read_id_file(const char *path, char *id, size_t cap, terr *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT) return 0;
    terr_set(e, T_EIO, "data_dir", -1, "cannot read %s: %s", path,
             strerror(errno));
    return -1;
  }
  id[0] = 0;
  if (!fgets(id, (int)cap, f)) id[0] = 0;
  fclose(f);
  id[strcspn(id, "\r\n ")] = 0;
  return 1;
}

static int write_id_file(const char *dir, const char *path, const char *id,
                         terr *e) {
  if (t_mkdirs(dir) != 0)
    return terr_set(e, T_EIO, "data_dir", -1, "cannot create %s: %s", dir,
                    strerror(errno));
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%s\n", id) < 0 || fflush(f) != 0) {
    int err = errno;
    if (f) fclose(f);
    return terr_set(e, T_EIO, "data_dir", -1, "cannot write %s: %s", tmp,
                    strerror(err));
  }
  fclose(f);
  if (rename(tmp, path) != 0)
    return terr_set(e, T_EIO, "data_dir", -1, "cannot write %s: %s", path,
                    strerror(errno));
  return 0;
}

/* Under the lock, after the migrations: see the opening comment. */
static int tie_data_dir(PGconn *c, const char *data_dir, terr *e) {
  PGresult *r;
  int rc = pg__exec(c, "SELECT value FROM meta WHERE key = 'store_id'", 0,
                    NULL, &r, "store id", e);
  if (rc) return rc;
  char have[80] = "";
  if (PQntuples(r) == 1)
    snprintf(have, sizeof have, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  char path[4200], file[80];
  if ((size_t)snprintf(path, sizeof path, "%s/store-id", data_dir) >=
      sizeof path)
    return terr_set(e, T_EINVAL, "data_dir", -1, "path too long");
  int got = read_id_file(path, file, sizeof file, e);
  if (got < 0) return T_EIO;
  if (have[0] && got && strcmp(have, file) == 0) return 0;
  if (have[0] && got)
    return terr_set(e, T_EINVAL, "data_dir", -1,
                    "%s belongs to another store (store-id %s, this store's "
                    "is %s)",
                    data_dir, file, have);
  if (have[0])
    return terr_set(e, T_EINVAL, "data_dir", -1,
                    "%s has no store-id but the store has one (%s): every "
                    "node must share the first node's data directory",
                    data_dir, have);
  if (got)
    return terr_set(e, T_EINVAL, "data_dir", -1,
                    "%s belongs to another store (store-id %s); this store "
                    "has none",
                    data_dir, file);
  char id[T_ID_MAX];
  t_id_new('s', id);
  const char *v[] = {id};
  if ((rc = write_id_file(data_dir, path, id, e))) return rc;
  rc = pg__exec(c, "INSERT INTO meta (key, value) VALUES ('store_id', $1)", 1,
                v, NULL, "store id", e);
  if (rc) remove(path);
  return rc;
}

static int migrate_locked(PGconn *c, const char *data_dir, int *version,
                          terr *e) {
  PGresult *r;
  int rc = pg__exec(c,
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version INT PRIMARY KEY, applied_at BIGINT)",
                    0, NULL, NULL, "migrate", e);
  if (rc) return rc;
  if ((rc = pg__exec(c, "SELECT coalesce(max(version), 0) FROM"
                        " schema_migrations",
                     0, NULL, &r, "migrate", e)))
    return rc;
  int v = atoi(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (v > NMIG)
    return terr_set(e, T_EINVAL, "store", -1,
                    "store schema version %d is newer than this tesseld (%d)",
                    v, NMIG);
  for (int i = v; i < NMIG; i++) {
    char num[32], what[48];
    snprintf(num, sizeof num, "%d", i + 1);
    snprintf(what, sizeof what, "migration %d", i + 1);
    const char *p[] = {num};
    if ((rc = pg__begin(c, e))) return rc;
    if ((rc = pg__exec(c, migrations[i], 0, NULL, NULL, what, e)) ||
        (rc = pg__exec(c,
                       "INSERT INTO schema_migrations (version, applied_at)"
                       " VALUES ($1::int, (extract(epoch from"
                       " clock_timestamp()) * 1000)::bigint)",
                       1, p, NULL, what, e)) ||
        (rc = pg__commit(c, e))) {
      pg__rollback(c);
      return rc;
    }
    log_info("store: applied PostgreSQL schema migration %d", i + 1);
  }
  *version = NMIG;
  return tie_data_dir(c, data_dir, e);
}

int pg__migrate(PGconn *c, const char *data_dir, int *version, terr *e) {
  int rc = pg__exec(c, "SELECT pg_advisory_lock(" PG_MIGRATE_LOCK ")", 0,
                    NULL, NULL, "migrate: lock", e);
  if (rc) return rc;
  rc = migrate_locked(c, data_dir, version, e);
  terr e2;
  pg__exec(c, "SELECT pg_advisory_unlock(" PG_MIGRATE_LOCK ")", 0, NULL, NULL,
           "migrate: unlock", &e2);
  return rc;
}
