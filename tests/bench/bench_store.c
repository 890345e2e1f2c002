/* bench_store.c — job throughput of the store against a naive SQLite peer.
 *
 * Each "job" is what the service does per tiny job: insert [sync] + start
 * [sync] + finish [sync]. For 1, 4 and 16 threads, each looping for the given
 * seconds, it measures:
 *   store  — db/store.h: one writer thread, group commit, savepoint per op;
 *   naive  — the obvious design: a connection per thread with the same
 *            pragmas (WAL, synchronous=NORMAL, busy_timeout) and the same
 *            schema and SQL, one transaction (autocommit) per write.
 * Both run in the same process, alternating, on fresh databases in a
 * mkdtemp directory (removed at the end). The table prints the median over
 * the rounds of jobs/s side by side with the ratio, the CPU time (user +
 * system, all threads) per job of each — steadier than wall time on a shared
 * machine — and the store's mean writes per commit (group commit at work).
 *
 *   ./build/bench_store [seconds per cell, default 2] [rounds, default 1]
 *                       [parent dir of the databases, default /tmp]
 */
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "db/store.h"
#include "db/sqlite/store_int.h" /* the writer's batch counters */
#define SQ(s) ((sqstore *)store_impl(s))

static double g_seconds = 2.0;
static char g_root[256];
static int g_seq;

static const char *params =
    "{\"expr\":\"x*2\",\"inputs\":{\"x\":[1,2,3,4]},\"dtype\":\"float64\"}";
/* The end record of such a job: its timings (ms) and result. */
static const double timings[JOB_T__COUNT] = {0.1, 0.01, 0, 0.02, 0, 0.01, 0.2};
static const job_result_info result = {.dtype = "float64", .ndim = 1,
                                       .shape = {4}, .bytes = 32};

typedef struct arg {
  store *s;
  const char *dbpath;
  long jobs;
  long errors;
  pthread_barrier_t *go;
} arg;

/* ---- the store --------------------------------------------------------- */

static void *store_worker(void *p) {
  arg *a = p;
  pthread_barrier_wait(a->go);
  double end = t_now_ms() + g_seconds * 1e3;
  while (t_now_ms() < end) {
    store_job j;
    memset(&j, 0, sizeof j);
    j.owner = "";
    j.kind = "map";
    j.params = (char *)params;
    j.backend_requested = "auto";
    j.body_hash = "0123456789abcdef";
    j.max_abs_diff = NAN;
    terr e;
    /* The strings are ours (not heap): insert copies them; no request_id so
     * *j is never replaced. */
    if (store_job_insert(a->s, &j, NULL, &e) != 0 ||
        store_job_start(a->s, j.id, t_wall_ms(), "cpu", "bench", NULL, &e) !=
            0) {
      a->errors++;
      continue;
    }
    store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = t_wall_ms(),
                       .result = result, .max_abs_diff = NAN,
                       .progress_done = 4, .progress_total = 4};
    for (int t = 0; t < JOB_T__COUNT; t++)
      job_timings_put(&x.timings, (job_timing)t, timings[t]);
    if (store_job_finish(a->s, j.id, &x, &e) != 0) a->errors++;
    else a->jobs++;
  }
  return NULL;
}

/* ---- the naive peer ------------------------------------------------------ */

static int step_done(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

static void *naive_worker(void *p) {
  arg *a = p;
  sqlite3 *db = NULL;
  sqlite3_stmt *ins = NULL, *start = NULL, *fin = NULL;
  if (sqlite3_open_v2(a->dbpath, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK ||
      sqlite3_exec(db,
                   "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL;"
                   " PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                   NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db,
                         "INSERT INTO jobs (id, owner, kind, params, status,"
                         " backend_requested, priority, body_hash, timeout_s,"
                         " created_at) VALUES (?1, '', 'map', ?2, 'queued',"
                         " 'auto', 0, '0123456789abcdef', 0, ?3)",
                         -1, &ins, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db,
                         "UPDATE jobs SET status = 'running', started_at = ?2,"
                         " backend_used = 'cpu', backend_reason = 'bench',"
                         " estimate = NULL, attempts = attempts + 1"
                         " WHERE id = ?1 AND status = 'queued'",
                         -1, &start, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db,
                         "UPDATE jobs SET status = 'succeeded', finished_at = ?2,"
                         " t_queue = ?3, t_total = ?4, result_dtype = 'float64',"
                         " result_shape = '[4]', result_bytes = 32, result_path = NULL,"
                         " compare = NULL, max_abs_diff = NULL,"
                         " error_code = NULL, error_message = NULL,"
                         " progress_done = 4, progress_total = 4"
                         " WHERE id = ?1 AND status IN ('queued','running')",
                         -1, &fin, NULL) != SQLITE_OK) {
    fprintf(stderr, "naive: %s\n", db ? sqlite3_errmsg(db) : "open failed");
    a->errors++;
    pthread_barrier_wait(a->go);
    goto out;
  }
  pthread_barrier_wait(a->go);
  double end = t_now_ms() + g_seconds * 1e3;
  while (t_now_ms() < end) {
    char id[T_ID_MAX];
    t_id_new('j', id);
    sqlite3_bind_text(ins, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 2, params, -1, SQLITE_STATIC);
    sqlite3_bind_int64(ins, 3, t_wall_ms());
    if (step_done(ins)) {
      a->errors++;
      continue;
    }
    sqlite3_bind_text(start, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(start, 2, t_wall_ms());
    if (step_done(start)) {
      a->errors++;
      continue;
    }
    sqlite3_bind_text(fin, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(fin, 2, t_wall_ms());
    sqlite3_bind_double(fin, 3, timings[JOB_T_QUEUE]);
    sqlite3_bind_double(fin, 4, timings[JOB_T_TOTAL]);
    if (step_done(fin)) a->errors++;
    else a->jobs++;
  }
out:
  sqlite3_finalize(ins);
  sqlite3_finalize(start);
  sqlite3_finalize(fin);
  sqlite3_close(db);
  return NULL;
}

/* ---- driver -------------------------------------------------------------- */

typedef struct cell {
  double jobs_per_s;
  double cpu_us_per_job;
  long errors;
  double ops_per_commit;
} cell;

static double cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static cell run(int threads, int naive) {
  cell c = {.errors = 0};
  char dir[300], dbpath[400];
  snprintf(dir, sizeof dir, "%s/r%d", g_root, g_seq++);
  snprintf(dbpath, sizeof dbpath, "%s/tessel.db", dir);
  store *s = NULL;
  terr e;
  if (store_open(dir, &s, &e) != 0) { /* creates the schema for both */
    fprintf(stderr, "store_open: %s\n", e.message);
    c.errors = 1;
    return c;
  }
  if (naive) {
    store_close(s);
    s = NULL;
  }
  arg *a = calloc((size_t)threads, sizeof *a);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) {
    a[i] = (arg){s, dbpath, 0, 0, &go};
    pthread_create(&th[i], NULL, naive ? naive_worker : store_worker, &a[i]);
  }
  long long b0 = s ? atomic_load(&SQ(s)->n_batches) : 0;
  long long o0 = s ? atomic_load(&SQ(s)->n_ops) : 0;
  pthread_barrier_wait(&go);
  double t0 = t_now_ms(), c0 = cpu_us();
  long jobs = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    jobs += a[i].jobs;
    c.errors += a[i].errors;
  }
  double ms = t_now_ms() - t0;
  c.jobs_per_s = (double)jobs / (ms / 1e3);
  c.cpu_us_per_job = jobs ? (cpu_us() - c0) / (double)jobs : 0;
  if (s) {
    long long b = atomic_load(&SQ(s)->n_batches) - b0;
    long long o = atomic_load(&SQ(s)->n_ops) - o0;
    c.ops_per_commit = b ? (double)o / (double)b : 0;
    store_close(s);
  }
  pthread_barrier_destroy(&go);
  free(a);
  free(th);
  return c;
}

static int cmp_cell(const void *a, const void *b) {
  double x = ((const cell *)a)->jobs_per_s, y = ((const cell *)b)->jobs_per_s;
  return (x > y) - (x < y);
}

/* The median round by jobs/s (errors summed over the rounds). */
static cell median(cell *v, int n) {
  long errors = 0;
  for (int i = 0; i < n; i++) errors += v[i].errors;
  qsort(v, (size_t)n, sizeof *v, cmp_cell);
  cell m = v[n / 2];
  m.errors = errors;
  return m;
}

int main(int argc, char **argv) {
  int64_t rounds = 1;
  if ((argc > 1 && (t_parse_f64(argv[1], &g_seconds) != 0 || g_seconds <= 0 ||
                    g_seconds > 60)) ||
      (argc > 2 && (t_parse_i64(argv[2], &rounds) != 0 || rounds < 1 ||
                    rounds > 15))) {
    fprintf(stderr, "usage: %s [seconds 0..60] [rounds 1..15] [parent dir]\n",
            argv[0]);
    return 2;
  }
  snprintf(g_root, sizeof g_root, "%s/tessel_bench_store_XXXXXX",
           argc > 3 ? argv[3] : "/tmp");
  if (!mkdtemp(g_root)) {
    perror("mkdtemp");
    return 1;
  }
  t_log_level = T_LOG_WARN;
  printf("store throughput: jobs/s, each job = insert + start + finish, all"
         " [sync]; %.1f s per cell, median of %d round(s); SQLite %s\n",
         g_seconds, (int)rounds, sqlite3_libversion());
  printf("%7s | %9s | %9s | %7s | %12s | %12s | %13s | %s\n", "threads",
         "store/s", "naive/s", "ratio", "store cpu/job", "naive cpu/job",
         "writes/commit", "errors");
  printf("--------+-----------+-----------+---------+---------------+"
         "---------------+---------------+-------\n");
  int counts[] = {1, 4, 16};
  for (int i = 0; i < 3; i++) {
    cell st[15], nv[15];
    for (int r = 0; r < rounds; r++) {
      st[r] = run(counts[i], 0);
      nv[r] = run(counts[i], 1);
    }
    cell a = median(st, (int)rounds), b = median(nv, (int)rounds);
    printf("%7d | %9.0f | %9.0f | %6.2fx | %10.0f us | %10.0f us | %13.1f |"
           " %ld/%ld\n",
           counts[i], a.jobs_per_s, b.jobs_per_s,
           b.jobs_per_s > 0 ? a.jobs_per_s / b.jobs_per_s : INFINITY,
           a.cpu_us_per_job, b.cpu_us_per_job, a.ops_per_commit, a.errors,
           b.errors);
    fflush(stdout);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
  return 0;
}
