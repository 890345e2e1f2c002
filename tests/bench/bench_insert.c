/* bench_insert.c — what a submit costs the store: a lone [sync] insert,
 * N concurrent ones (group commit), store_insert_jobs in batches, and how
 * long a lone insert waits while a batch of 10,000 is being written.
 *
 * Cells (each S seconds, on a fresh store; SQLite in a mkdtemp directory
 * under PARENT, or the PostgreSQL store at --pg URL, its schema dropped and
 * made again per cell):
 *   lone        one thread, store_job_insert in a loop: inserts/s, the
 *               latency's p50/p99 and the process's CPU per insert;
 *   threads N   N threads doing the same at once (the writer's group
 *               commit shares each commit among those that came together);
 *   batch B     one thread, store_insert_jobs of B rows in a loop (absent
 *               from a tree without store_insert_jobs: "-");
 *   10k+lone    one thread writes batches of 10,000 rows with
 *               store_insert_jobs while another inserts lone jobs: the lone
 *               ones' p50/p99/max latency (the bound is one chunk of
 *               STORE_INSERT_CHUNK rows, not the batch).
 * The same file builds against an older tree (no store_insert_jobs: its
 * cells print "-"), so that the two can run side by side in one session.
 *
 *   bench_insert [--seconds S=2] [--pg URL] [--dir PARENT=/tmp]
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "db/store.h"
#include "util/util.h"

static double g_seconds = 2.0;
static const char *g_pg;
static char g_root[256];
static int g_seq;

static const char *params = "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}";

static double cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void job_init(store_job *j) {
  memset(j, 0, sizeof *j);
  j->owner = strdup("bench");
  j->kind = strdup("map");
  j->params = strdup(params);
  j->backend_requested = strdup("auto");
  j->max_abs_diff = NAN;
}

static void pg_reset(void) {
  PGconn *c = PQconnectdb(g_pg);
  PGresult *r = PQexec(c, "SET client_min_messages = warning;"
                          "DROP SCHEMA public CASCADE; CREATE SCHEMA public");
  PQclear(r);
  PQfinish(c);
}

static store *fresh(void) {
  char dir[400];
  snprintf(dir, sizeof dir, "%s/s%d", g_root, g_seq++);
  if (g_pg) pg_reset();
  store *s = NULL;
  terr e;
  if (store_open_url(g_pg, dir, &s, &e) != 0) {
    fprintf(stderr, "bench_insert: open: %s\n", e.message);
    exit(1);
  }
  return s;
}

/* ---- latencies ------------------------------------------------------------ */
typedef struct lat {
  double *v;
  long n, cap;
} lat;

static void lat_add(lat *l, double ms) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 4096;
    l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    if (!l->v) exit(1);
  }
  l->v[l->n++] = ms;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double q(lat *l, double p) {
  if (!l->n) return NAN;
  qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_d);
  long i = (long)ceil(p * (double)l->n) - 1;
  return l->v[i < 0 ? 0 : i];
}

/* ---- cells ---------------------------------------------------------------- */
typedef struct runner {
  store *s;
  int batch; /* 0: lone inserts */
  atomic_int *stop;
  long rows, errors;
  lat l;
} runner;

static void *insert_loop(void *p) {
  runner *r = p;
  while (!atomic_load(r->stop)) {
    store_job j;
    job_init(&j);
    terr e;
    double t0 = t_now_ms();
    if (store_job_insert(r->s, &j, NULL, &e) != 0) r->errors++;
    else r->rows++;
    lat_add(&r->l, t_now_ms() - t0);
    store_job_clear(&j);
  }
  return NULL;
}

#ifdef STORE_INSERT_CHUNK
static void *batch_loop(void *p) {
  runner *r = p;
  int B = r->batch;
  store_job *jobs = calloc((size_t)B, sizeof *jobs);
  int *ex = calloc((size_t)B, sizeof *ex), *rcs = calloc((size_t)B, sizeof *rcs);
  terr *errs = calloc((size_t)B, sizeof *errs);
  if (!jobs || !ex || !rcs || !errs) exit(1);
  while (!atomic_load(r->stop)) {
    for (int i = 0; i < B; i++) job_init(&jobs[i]);
    terr e;
    double t0 = t_now_ms();
    store_insert_jobs(r->s, jobs, B, ex, rcs, errs, &e);
    lat_add(&r->l, t_now_ms() - t0);
    for (int i = 0; i < B; i++) {
      if (rcs[i]) r->errors++;
      else r->rows++;
      store_job_clear(&jobs[i]);
    }
  }
  free(jobs);
  free(ex);
  free(rcs);
  free(errs);
  return NULL;
}
#endif

/* nlone threads of lone inserts, and (batch > 0) one thread of batches. */
static void cell(const char *name, int nlone, int batch) {
#ifndef STORE_INSERT_CHUNK
  if (batch) {
    printf("%-12s %10s %9s %9s %9s %9s\n", name, "-", "-", "-", "-", "-");
    return;
  }
#endif
  store *s = fresh();
  atomic_int stop = 0;
  enum { MAXT = 65 };
  runner r[MAXT];
  pthread_t th[MAXT];
  int nt = nlone + (batch ? 1 : 0);
  double c0 = cpu_ms(), t0 = t_now_ms();
  for (int i = 0; i < nt; i++) {
    r[i] = (runner){.s = s, .batch = i < nlone ? 0 : batch, .stop = &stop};
#ifdef STORE_INSERT_CHUNK
    pthread_create(&th[i], NULL, r[i].batch ? batch_loop : insert_loop, &r[i]);
#else
    pthread_create(&th[i], NULL, insert_loop, &r[i]);
#endif
  }
  usleep((useconds_t)(g_seconds * 1e6));
  atomic_store(&stop, 1);
  long rows = 0, errors = 0;
  lat lone = {0};
  for (int i = 0; i < nt; i++) {
    pthread_join(th[i], NULL);
    rows += r[i].rows;
    errors += r[i].errors;
    if (!r[i].batch)
      for (long k = 0; k < r[i].l.n; k++) lat_add(&lone, r[i].l.v[k]);
  }
  double wall = (t_now_ms() - t0) / 1e3, cpu = cpu_ms() - c0;
  lat *shown = nlone ? &lone : &r[0].l;
  printf("%-12s %10.0f %9.3f %9.3f %9.3f %9.1f%s\n", name, rows / wall,
         q(shown, 0.5), q(shown, 0.99), q(shown, 1.0),
         rows ? cpu * 1e3 / (double)rows : NAN,
         errors ? "  (errors!)" : "");
  for (int i = 0; i < nt; i++) free(r[i].l.v);
  free(lone.v);
  store_close(s);
}

int main(int argc, char **argv) {
  const char *parent = "/tmp";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) g_seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--pg") && i + 1 < argc) g_pg = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) parent = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--seconds S] [--pg URL] [--dir PARENT]\n",
              argv[0]);
      return 2;
    }
  }
  t_log_level = T_LOG_WARN;
  snprintf(g_root, sizeof g_root, "%s/bench_insert_XXXXXX", parent);
  if (!mkdtemp(g_root)) {
    perror("mkdtemp");
    return 1;
  }
  printf("store: %s, %.1f s per cell; latencies in ms (of the lone inserts "
         "where there are any, else of the batch calls)\n",
         g_pg ? "postgresql" : "sqlite", g_seconds);
  printf("%-12s %10s %9s %9s %9s %9s\n", "cell", "rows/s", "p50", "p99", "max",
         "cpu us/row");
  cell("lone", 1, 0);
  if (getenv("BENCH_INSERT_LONE")) return 0; /* profiling the lone insert */
  cell("threads 8", 8, 0);
  cell("threads 64", 64, 0);
  cell("batch 100", 0, 100);
  cell("batch 1000", 0, 1000);
  cell("10k+lone", 1, 10000);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
  return 0;
}
