/* bench_rows.c — what one tiny job's row costs SQLite to insert, and what
 * each part of that cost is: the statement (one row, or 16 or 64 rows to
 * an INSERT, as db/sqlite/store_rows.c writes them) and each index of the
 * jobs table (the same inserts with that index dropped).
 *
 * The database is made by the store itself (store_open: the real schema
 * and pragmas, migrations included); the rows are then inserted with the
 * SQLite library directly on that file, in transactions of 128 rows, as
 * the writer commits: the ended row of a tiny map job (x+1 over 3 values:
 * params, the router's estimate and reason, timings, a 152-byte .npy in
 * the row), after WARM rows already there. Each variant gets a fresh
 * database. Prints the median µs per row over REPS; under callgrind, a
 * figure the machine's load does not move:
 *
 *   build/bench_rows [WARM=5000] [ROWS=2048] [REPS=3] [VARIANT]
 *   valgrind --tool=callgrind --toggle-collect=measure \
 *     build/bench_rows 5000 2048 1 multi64   # instructions / 2048 rows
 *
 * Variants: one, multi16, multi64, and multi64 with one index dropped:
 * -kind (jobs_owner_kind_id), -status (jobs_owner_status_id), -owner
 * (jobs_owner_id), -finished (jobs_finished_at). And the end of a job
 * whose row went in queued (an end that did not fold into its insert):
 * update1, the finish's one-row UPDATE (db/sqlite/store_lifecycle.c's
 * columns), and update16 / update64, the same ends several to an
 * `UPDATE … FROM (VALUES …)` (measured, not used: 2026-11-30). There the
 * ROWS rows go in queued after WARM ended ones, and the UPDATEs of the
 * ROWS are measured. A benchmark, not a test.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "util/util.h"

typedef struct variant {
  const char *name;
  int per_stmt;     /* rows per INSERT, or per UPDATE (update) */
  const char *drop; /* an index dropped first, or NULL */
  int update;       /* 1: measure the ends' UPDATEs, not the INSERTs */
} variant;

static const variant variants[] = {
    {"one", 1, NULL, 0},
    {"multi16", 16, NULL, 0},
    {"multi64", 64, NULL, 0},
    {"multi64-kind", 64, "jobs_owner_kind_id", 0},
    {"multi64-status", 64, "jobs_owner_status_id", 0},
    {"multi64-owner", 64, "jobs_owner_id", 0},
    {"multi64-finished", 64, "jobs_finished_at", 0},
    {"update1", 1, NULL, 1},
    {"update16", 16, NULL, 1},
    {"update64", 64, NULL, 1},
};

#define COLS                                                                 \
  "id, owner, kind, params, status, backend_requested, backend_used, "       \
  "backend_reason, estimate, priority, timeout_s, created_at, started_at, "  \
  "finished_at, progress_done, progress_total, attempts, t_queue, "          \
  "t_prepare, t_h2d, t_compute, t_d2h, t_store, t_total, result_dtype, "     \
  "result_shape, result_bytes, result_npy"
#define NCOLS 28

static const char *EST =
    "{\"size\":3,\"work\":3.0,\"out_dtype\":\"float64\",\"out_shape\":[3],"
    "\"out_bytes\":24,\"in_bytes\":24,\"mem_bytes\":48,\"model\":"
    "\"calibrated\",\"serial_ms\":0.30500315,\"cpu_ms\":0.354012782,"
    "\"cuda_ms\":null,\"choice\":\"serial\",\"corrections\":{\"serial\":1.0,"
    "\"cpu\":1.0,\"cuda\":1.0},\"parts_ms\":{\"serial\":{\"fixed\":0.305,"
    "\"read\":0.0,\"compute\":3.15040398e-6,\"store\":0.0},\"cpu\":{"
    "\"fixed\":0.354,\"read\":0.0,\"compute\":1.27820563e-5,\"store\":0.0}}}";
static unsigned char npy[152] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
static long long seq;
static const char *status = "succeeded"; /* of the rows bind_job makes */

static void die(sqlite3 *db, const char *what) {
  fprintf(stderr, "bench_rows: %s: %s\n", what, sqlite3_errmsg(db));
  exit(1);
}

/* One ended tiny job's row at parameters ?b+1 .. ?b+NCOLS. */
static void bind_job(sqlite3_stmt *st, int b) {
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "j_01m8m%010llx%010llx", seq,
           (seq * 2654435761ULL) & 0xffffffffffULL);
  long long t = 1795970763572LL + seq++ / 8;
  const char *txt[] = {id, "", "map", "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}",
                       status, "auto", "serial",
                       "estimate serial 0.31 ms, cpu 0.35 ms; no usable GPU", EST};
  for (int i = 0; i < 9; i++)
    sqlite3_bind_text(st, b + 1 + i, txt[i], -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, b + 10, 5);
  sqlite3_bind_double(st, b + 11, 600.0);
  sqlite3_bind_int64(st, b + 12, t);
  int queued = status[0] == 'q'; /* a row as its insert writes it */
  sqlite3_bind_int64(st, b + 13, queued ? 0 : t + 4);
  sqlite3_bind_int64(st, b + 14, queued ? 0 : t + 5);
  sqlite3_bind_int64(st, b + 15, !queued);
  sqlite3_bind_int64(st, b + 16, !queued);
  sqlite3_bind_int(st, b + 17, 1);
  const double ms[7] = {4.0, 0.011, 0.0, 0.04, 0.0, 0.351, 4.529};
  for (int i = 0; i < 7; i++)
    if (queued) sqlite3_bind_null(st, b + 18 + i);
    else sqlite3_bind_double(st, b + 18 + i, ms[i]);
  if (queued) {
    for (int i = 25; i <= 28; i++) sqlite3_bind_null(st, b + i);
    return;
  }
  sqlite3_bind_text(st, b + 25, "float64", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, b + 26, "[3]", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, b + 27, 24);
  sqlite3_bind_blob(st, b + 28, npy, sizeof npy, SQLITE_STATIC);
}

static void exec(sqlite3 *db, const char *sql) {
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) die(db, sql);
}

static void insert(sqlite3 *db, sqlite3_stmt *st, int per, int rows) {
  for (int done = 0; done < rows;) {
    exec(db, "BEGIN IMMEDIATE");
    for (int k = 0; k < 128 && done < rows; k += per, done += per) {
      for (int r = 0; r < per; r++) bind_job(st, r * NCOLS);
      if (sqlite3_step(st) != SQLITE_DONE) die(db, "insert");
      sqlite3_reset(st);
    }
    exec(db, "COMMIT");
  }
}

/* The end's columns, as the finish's UPDATE writes them (status,
 * finished_at, the seven timings, the result's type, shape and size, its
 * .npy bytes, progress): ?1 the id, then UCOLS values. */
#define UCOLS 15
#define USET(p)                                                               \
  "status = " p "2, finished_at = " p "3, t_queue = " p "4, t_prepare = " p   \
  "5, t_h2d = " p "6, t_compute = " p "7, t_d2h = " p "8, t_store = " p "9,"  \
  " t_total = " p "10, result_dtype = " p "11, result_shape = " p "12,"       \
  " result_bytes = " p "13, result_npy = " p "14, progress_done = " p "15,"   \
  " progress_total = " p "16"

/* The end of the job made as number `n` (bind_job's ids) at ?b+1 ... */
static void bind_end(sqlite3_stmt *st, int b, long long n) {
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "j_01m8m%010llx%010llx", n,
           (n * 2654435761ULL) & 0xffffffffffULL);
  sqlite3_bind_text(st, b + 1, id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, b + 2, "succeeded", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, b + 3, 1795970763572LL + n / 8 + 5);
  const double ms[7] = {4.0, 0.011, 0.0, 0.04, 0.0, 0.351, 4.529};
  for (int i = 0; i < 7; i++) sqlite3_bind_double(st, b + 4 + i, ms[i]);
  sqlite3_bind_text(st, b + 11, "float64", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, b + 12, "[3]", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, b + 13, 24);
  sqlite3_bind_blob(st, b + 14, npy, sizeof npy, SQLITE_STATIC);
  sqlite3_bind_int64(st, b + 15, 1);
  sqlite3_bind_int64(st, b + 16, 1);
}

/* The ends of the jobs made as numbers from .. from+rows, per to a
 * statement, in transactions of 128. */
static void update(sqlite3 *db, sqlite3_stmt *st, int per, long long from,
                   int rows) {
  for (int done = 0; done < rows;) {
    exec(db, "BEGIN IMMEDIATE");
    for (int k = 0; k < 128 && done < rows; k += per, done += per) {
      for (int r = 0; r < per; r++)
        bind_end(st, r * (UCOLS + 1), from + done + r);
      if (sqlite3_step(st) != SQLITE_DONE) die(db, "update");
      if (sqlite3_changes(db) != per) die(db, "update: rows changed");
      sqlite3_reset(st);
    }
    exec(db, "COMMIT");
  }
}

/* The UPDATE of k ends: the finish's one-row statement, or one over a
 * VALUES list of k rows. */
static void update_text(char *sql, size_t cap, int k) {
  if (k == 1) {
    snprintf(sql, cap, "UPDATE jobs SET " USET("?")
             " WHERE id = ?1 AND status IN ('queued','running')");
    return;
  }
  size_t n = (size_t)snprintf(sql, cap, "UPDATE jobs SET " USET("v.column")
                              " FROM (VALUES ");
  for (int r = 0; r < k; r++) {
    n += (size_t)snprintf(sql + n, cap - n, "%s(", r ? "," : "");
    for (int c = 1; c <= UCOLS + 1; c++)
      n += (size_t)snprintf(sql + n, cap - n, "%s?%d", c > 1 ? "," : "",
                            r * (UCOLS + 1) + c);
    n += (size_t)snprintf(sql + n, cap - n, ")");
  }
  snprintf(sql + n, cap - n, ") AS v WHERE jobs.id = v.column1"
           " AND jobs.status IN ('queued','running')");
}

/* The timed part (callgrind: --toggle-collect=measure). */
__attribute__((noinline)) void measure(sqlite3 *db, sqlite3_stmt *st,
                                       int per, int rows, long long from,
                                       int upd) {
  if (upd) update(db, st, per, from, rows);
  else insert(db, st, per, rows);
}

static double run(const variant *v, const char *dir, int warm, int rows) {
  store *s;
  terr e;
  if (store_open(dir, &s, &e)) {
    fprintf(stderr, "bench_rows: %s\n", e.message);
    exit(1);
  }
  store_close(s); /* the schema, migrated */
  char path[600], sql[64 + 40 * 64 * NCOLS];
  snprintf(path, sizeof path, "%s/tessel.db", dir);
  sqlite3 *db;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK)
    die(db, "open");
  exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
           "PRAGMA cache_size = -16384; PRAGMA wal_autocheckpoint = 0");
  if (v->drop) {
    snprintf(sql, sizeof sql, "DROP INDEX %s", v->drop);
    exec(db, sql);
  }
  size_t n = (size_t)snprintf(sql, sizeof sql, "INSERT INTO jobs (" COLS ") VALUES ");
  for (int r = 0; r < v->per_stmt; r++) {
    n += (size_t)snprintf(sql + n, sizeof sql - n, "%s(", r ? "," : "");
    for (int c = 1; c <= NCOLS; c++)
      n += (size_t)snprintf(sql + n, sizeof sql - n, "%s?%d", c > 1 ? "," : "",
                            r * NCOLS + c);
    n += (size_t)snprintf(sql + n, sizeof sql - n, ")");
  }
  sqlite3_stmt *st;
  long long from = 0;
  if (v->update) { /* WARM ended rows, then ROWS queued ones by one-row */
    n = (size_t)snprintf(sql, sizeof sql, "INSERT INTO jobs (" COLS ") VALUES (");
    for (int c = 1; c <= NCOLS; c++)
      n += (size_t)snprintf(sql + n, sizeof sql - n, "%s?%d", c > 1 ? "," : "", c);
    snprintf(sql + n, sizeof sql - n, ")");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die(db, "prepare");
    seq = 0;
    status = "succeeded";
    insert(db, st, 1, warm);
    from = seq;
    status = "queued";
    insert(db, st, 1, rows);
    status = "succeeded";
    sqlite3_finalize(st);
    update_text(sql, sizeof sql, v->per_stmt);
  }
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die(db, "prepare");
  if (!v->update) insert(db, st, v->per_stmt, warm);
  double t0 = t_now_ms();
  measure(db, st, v->per_stmt, rows, from, v->update);
  double us = (t_now_ms() - t0) * 1000.0 / rows;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return us;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int warm = argc > 1 ? atoi(argv[1]) : 5000;
  int rows = argc > 2 ? atoi(argv[2]) : 2048;
  int reps = argc > 3 ? atoi(argv[3]) : 3;
  const char *only = argc > 4 ? argv[4] : NULL;
  if (rows % 128 || rows <= 0 || warm % 128 || reps < 1 || reps > 15) {
    fprintf(stderr, "usage: bench_rows [WARM] [ROWS] [REPS] [VARIANT]"
                    " (WARM, ROWS multiples of 128; REPS 1-15)\n");
    return 2;
  }
  t_log_level = T_LOG_WARN;
  char root[] = "/tmp/bench_rows_XXXXXX";
  if (!mkdtemp(root)) return 1;
  printf("%-18s %10s   (%d rows after %d, median of %d)\n", "variant",
         "us/row", rows, warm, reps);
  int dirs = 0;
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    const variant *v = &variants[i];
    if (only && strcmp(only, v->name) != 0) continue;
    double t[15];
    for (int r = 0; r < reps; r++) {
      char dir[300];
      snprintf(dir, sizeof dir, "%s/d%d", root, dirs++);
      t[r] = run(v, dir, warm, rows);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    printf("%-18s %10.2f\n", v->name, t[reps / 2]);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : 1;
}
