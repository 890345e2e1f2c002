/* bench_map.c — map and reduce throughput against NumPy and numexpr.
 *
 *   bench_map [MAX_SIZE=1e8] [THREADS=2] [SERVICE_MIN=1e6]
 *
 * Prints TWO tables. The first, the engine: for x*x, x**2 + 2*x + 1, -b/a,
 * sin(x)*exp(-x) (map) and
 * sum(x**2), per-row sum of [100, N/100] (reduce), at 10^3 .. MAX_SIZE
 * elements, the throughput in million elements per second of tessel serial,
 * tessel cpu (THREADS threads), NumPy and numexpr (set_num_threads THREADS),
 * and the ratios cpu/numexpr and cpu/numpy. The peers run in
 * tests/bench/peers_map.py under /usr/bin/python3 (popen), on inputs of the
 * same distributions (x, b uniform [0, 1), a uniform [1, 2)).
 * Map results go to one reused output array on every side (numexpr and
 * NumPy with out=): the page faults of fresh allocations, very costly in
 * a VM, are not what is measured.
 *
 * Each figure is the median of 5 samples; a sample repeats the call until
 * 20 ms have passed. Each tessel map call splits the output into the map
 * kind's chunks
 * (clamp(n / (4 * threads), 32 Ki, 64 Ki) elements); the chunks run on the
 * service's own pool (util/pool.c) with THREADS workers, called directly
 * (the engine and the pool are measured, not the scheduler or HTTP).
 *
 * The second, the service's path, from SERVICE_MIN elements up: the same
 * six cases as jobs, submitted with jobs_submit to an in-process scheduler
 * (THREADS workers, its default result limits) over a store in a new
 * directory under /tmp, on backend serial and on backend cpu, inputs
 * uploaded with arrays_put (so a job maps them from their .npy files as
 * the daemon does) and each map job's result written where the daemon
 * writes it (<data>/results/<id>.npy; removed after each job). A cell is
 * the median of 7 jobs of the job's own time on its worker: prepare (the
 * inputs mapped), compute and the result kept (timings total - queue); the
 * serial and cpu jobs of a case alternate, so that the machine's drift
 * hits both alike. Columns: M elem/s of serial and cpu, cpu/serial, and
 * the engine's cpu figure of the first table for the same case.
 * BENCH_SERVICE_ONLY=1 skips the first table (and the peers): the
 * before/after check of a change to the service's path.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/array/arrays.h"
#include "compute/jobs/jobs.h"
#include "compute/kinds/exprkind.h"
#include "util/pool.h"
#include "util/util.h"

/* ---- the service's own pool, made once with THREADS workers -------------- */
static pool *g_pool;
static void team_start(int width) { g_pool = pool_create(width, NULL, NULL); }

/* ---- tessel map as the map kind runs it ----------------------------------- */
typedef struct mrun {
  const expr *x;
  const tarray *const *in;
  tarray *out;
  int64_t chunk;
  char *scratch;
  size_t stride;
} mrun;

static void map_chunk(void *arg, int64_t c, int slot) {
  mrun *m = arg;
  int64_t s = c * m->chunk, n = m->out->size - s;
  if (n > m->chunk) n = m->chunk;
  expr_eval(m->x, m->in, m->out, s, n, m->scratch + (size_t)slot * m->stride);
}

static char *g_scratch;
static tarray *g_out; /* reused output */
static void tessel_map(const expr *x, const tarray *const *in, int nd,
                       const int64_t *sh, int width) {
  (void)nd, (void)sh;
  tarray *out = g_out;
  int64_t chunk = out->size / (4 * width);
  if (chunk < 32768) chunk = 32768;
  if (chunk > 65536) chunk = 65536;
  int64_t nch = (out->size + chunk - 1) / chunk;
  mrun m = {x, in, out, chunk, g_scratch,
            (expr_scratch_size(x) + 63) & ~(size_t)63};
  if (width == 1 || nch == 1)
    for (int64_t c = 0; c < nch; c++) map_chunk(&m, c, 0);
  else
    pool_for(g_pool, width < nch ? width : (int)nch, nch, map_chunk, &m, NULL);
}

static void tessel_reduce(const expr *x, const tarray *const *in, int nd,
                          const int64_t *sh, int axis, int width) {
  reduce_spec r = {.x = x, .inputs = in, .ndim = nd, .shape = sh,
                   .op = R_SUM, .axis = axis};
  int ond;
  int64_t osh[T_MAXDIM];
  reduce_out_shape(&r, &ond, osh);
  tarray *out = tarray_new(T_F64, ond, osh);
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.pool = width > 1 ? g_pool : NULL;
  ctx.threads = width;
  terr e;
  reduce_cpu_run(&r, out, &ctx, width, &e);
  tarray_free(out);
}

/* ---- timing ---------------------------------------------------------------- */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct job {
  int kind; /* 0 map, 1 reduce all, 2 reduce rows */
  const expr *x;
  const tarray *const *in;
  int nd;
  int64_t sh[2];
  int width;
} job;

static void job_run(const job *j) {
  if (j->kind == 0) tessel_map(j->x, j->in, j->nd, j->sh, j->width);
  else tessel_reduce(j->x, j->in, j->nd, j->sh, j->kind == 1 ? -1 : 1, j->width);
}

/* Million elements per second, median of 5 samples of >= 20 ms. */
static double measure(const job *j, int64_t n) {
  double s[5];
  for (int k = 0; k < 5; k++) {
    int64_t calls = 0;
    double t0 = now_s(), el;
    do {
      job_run(j);
      calls++;
      el = now_s() - t0;
    } while (el < 0.02);
    s[k] = el / (double)calls;
  }
  qsort(s, 5, sizeof *s, cmpd);
  return (double)n / s[2] / 1e6;
}

/* ---- how many cores this run really had ------------------------------------ */
/* The machine may be shared: time a fixed amount of work per thread on 1
 * and on `threads` threads; the ratio is the parallelism available now
 * (threads when the cores are free). Printed with the table. */
static void probe_chunk(void *arg, int64_t c, int slot) {
  (void)slot;
  volatile double *sink = arg, acc = 0;
  for (int i = 0; i < 3000000; i++) acc += (double)(i ^ (int)c) * 1e-9;
  sink[0] += acc;
}
static double probe_parallelism(int threads) {
  static volatile double sink[1];
  double t0 = now_s();
  for (int c = 0; c < threads; c++) probe_chunk((void *)sink, c, 0);
  double t1 = now_s();
  pool_for(g_pool, threads, threads, probe_chunk, (void *)sink, NULL);
  double t2 = now_s();
  return (t1 - t0) / (t2 - t1);
}

/* ---- peers ---------------------------------------------------------------- */
#define MAXROWS 256
typedef struct peer_row {
  char peer[16], cas[48];
  int64_t n;
  double mps;
} peer_row;
static peer_row peers[MAXROWS];
static int npeers;

static double peer_get(const char *peer, const char *cas, int64_t n) {
  for (int i = 0; i < npeers; i++)
    if (!strcmp(peers[i].peer, peer) && !strcmp(peers[i].cas, cas) &&
        peers[i].n == n)
      return peers[i].mps;
  return NAN;
}

/* The peers at size n, measured right after tessel at that size so that
 * both see the same machine load. */
static void peers_run(int threads, int64_t n) {
  char cmd[512], line[256];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 %s/tests/bench/peers_map.py %d %lld %lld",
           TESSEL_SOURCE_DIR, threads, (long long)n, (long long)n);
  FILE *p = popen(cmd, "r");
  if (!p) {
    fprintf(stderr, "cannot run %s\n", cmd);
    return;
  }
  while (fgets(line, sizeof line, p) && npeers < MAXROWS) {
    peer_row *r = &peers[npeers];
    char *f[4], *q = line;
    int k = 0;
    line[strcspn(line, "\n")] = 0;
    while (k < 4 && q) {
      f[k++] = q;
      q = strchr(q, '|');
      if (q) *q++ = 0;
    }
    if (k != 4) continue;
    snprintf(r->peer, sizeof r->peer, "%s", f[0]);
    snprintf(r->cas, sizeof r->cas, "%s", f[1]);
    r->n = strtoll(f[2], NULL, 10);
    r->mps = strtod(f[3], NULL);
    npeers++;
  }
  if (pclose(p) != 0) fprintf(stderr, "peers_map.py failed (no peers)\n");
}

/* ---- the service's path: jobs through an in-process scheduler ------------ */
typedef struct svc {
  char dir[64];
  store *st;
  sched *sc;
  jobs J;
  arrays A;
} svc;

static int svc_open(svc *v, int threads) {
  terr e;
  memset(v, 0, sizeof *v);
  snprintf(v->dir, sizeof v->dir, "/tmp/bench_map_XXXXXX");
  if (!mkdtemp(v->dir)) return -1;
  char sub[96];
  snprintf(sub, sizeof sub, "%s/arrays", v->dir);
  if (t_mkdirs(sub) != 0) return -1;
  t_log_level = T_LOG_WARN;
  if (store_open(v->dir, &v->st, &e)) goto fail;
  sched_config cfg = {.st = v->st, .data_dir = v->dir, .threads = threads,
                      .kind_lookup = kind_find, .max_memory_bytes = -1};
  if (sched_create(&cfg, &v->sc, &e) || sched_start(v->sc, &e)) goto fail;
  v->J = (jobs){.st = v->st, .sc = v->sc, .max_elems = INT64_MAX / 8};
  v->A = (arrays){.st = v->st, .data_dir = v->dir};
  return 0;
fail:
  fprintf(stderr, "bench_map: service: %s\n", e.message);
  return -1;
}

static void svc_close(svc *v) {
  char cmd[128];
  if (v->sc) sched_destroy(v->sc);
  if (v->st) store_close(v->st);
  snprintf(cmd, sizeof cmd, "rm -rf %s", v->dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", v->dir);
}

/* Upload a as an array of the service; its id into id. */
static int svc_put(svc *v, const tarray *a, char id[T_ID_MAX]) {
  store_array rec;
  int existing;
  terr e;
  if (arrays_put(&v->A, "", a, &rec, &existing, &e)) {
    fprintf(stderr, "bench_map: upload: %s\n", e.message);
    return -1;
  }
  snprintf(id, T_ID_MAX, "%s", rec.id);
  store_array_clear(&rec);
  return 0;
}

typedef struct svc_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, ok;
  double run_ms;
  char path[512];
} svc_wait;

static void svc_ended(void *arg, const char *id, const store_job *row) {
  svc_wait *w = arg;
  pthread_mutex_lock(&w->mu);
  w->ok = row && row->status == JOB_SUCCEEDED;
  if (w->ok)
    w->run_ms = row->timings.ms[JOB_T_TOTAL] - row->timings.ms[JOB_T_QUEUE];
  if (row && row->result_path)
    snprintf(w->path, sizeof w->path, "%s", row->result_path);
  if (!row) fprintf(stderr, "bench_map: job %s: no row\n", id);
  if (row && !w->ok)
    fprintf(stderr, "bench_map: job %s: %s\n", id,
            row->error_message ? row->error_message : "failed");
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* One job of `body` (JSON text); its time on the worker in ms, or -1. */
static double svc_job(svc *v, const char *body) {
  json_error_t jerr;
  json_t *b = json_loads(body, 0, &jerr);
  char id[T_ID_MAX];
  int async = 0, retry;
  terr e;
  svc_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
                ""};
  uint64_t tok;
  if (!b || jobs_submit(&v->J, "", b, &async, id, &retry, &e)) {
    fprintf(stderr, "bench_map: submit %s: %s\n", body,
            b ? e.message : jerr.text);
    json_decref(b);
    return -1;
  }
  json_decref(b);
  if (sched_wait_end(v->sc, id, svc_ended, &w, &tok) != 0) return -1;
  pthread_mutex_lock(&w.mu);
  while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  if (w.path[0]) unlink(w.path); /* 10^8 float64 is 800 MB: keep the disk */
  return w.ok ? w.run_ms : -1;
}

/* Million elements per second of case c as jobs on serial (*ser) and on
 * cpu (*cpu): the medians of 7 jobs each, alternating. ids: x, a, b, x as
 * [100, n/100]. */
#define SVC_JOBS 7
static void svc_measure(svc *v, int c, int64_t n, char ids[4][T_ID_MAX],
                        double *ser, double *cpu) {
  static const char *const exprs[] = {"x*x", "x**2 + 2*x + 1", "-b/a",
                                      "sin(x)*exp(-x)"};
  char body[2][1024], in[256];
  if (c == 2)
    snprintf(in, sizeof in, "\"a\": {\"array\": \"%s\"}, \"b\": {\"array\": "
             "\"%s\"}", ids[1], ids[2]);
  else
    snprintf(in, sizeof in, "\"x\": {\"array\": \"%s\"}", ids[0]);
  for (int b = 0; b < 2; b++) {
    const char *backend = b ? "cpu" : "serial";
    if (c < 4)
      snprintf(body[b], sizeof body[b],
               "{\"kind\": \"map\", \"backend\": \"%s\", \"params\": "
               "{\"expr\": \"%s\", \"inputs\": {%s}}}", backend, exprs[c],
               in);
    else
      snprintf(body[b], sizeof body[b],
               "{\"kind\": \"reduce\", \"backend\": \"%s\", \"params\": "
               "{\"op\": \"sum\", \"expr\": \"%s\", \"axis\": %s, "
               "\"inputs\": {\"x\": {\"array\": \"%s\"}}}}",
               backend, c == 4 ? "x**2" : "x", c == 4 ? "null" : "1",
               ids[c == 4 ? 0 : 3]);
  }
  double ms[2][SVC_JOBS];
  int failed = 0;
  for (int k = 0; k < SVC_JOBS; k++)
    for (int i = 0; i < 2; i++) { /* serial first, then cpu first, ... */
      int b = (k + i) % 2;
      if ((ms[b][k] = svc_job(v, body[b])) < 0) failed = 1;
    }
  for (int b = 0; b < 2; b++) qsort(ms[b], SVC_JOBS, sizeof ms[b][0], cmpd);
  *ser = failed ? NAN : (double)n / ms[0][SVC_JOBS / 2] / 1e3;
  *cpu = failed ? NAN : (double)n / ms[1][SVC_JOBS / 2] / 1e3;
}

int main(int argc, char **argv) {
  int64_t max = argc > 1 ? (int64_t)strtod(argv[1], NULL) : 100000000;
  int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 2;
  int64_t svc_min = argc > 3 ? (int64_t)strtod(argv[3], NULL) : 1000000;
  if (threads < 1 || threads > 256) threads = 2;
  /* the service's table, printed after the engine's */
  char svc_rows[64][160];
  int nsvc = 0;
  svc v;
  int have_svc = svc_min <= max && svc_open(&v, threads) == 0;
  int engine = !getenv("BENCH_SERVICE_ONLY");
  team_start(threads);
  double par0 = probe_parallelism(threads);
  const char *maps[] = {"x*x", "x**2 + 2*x + 1", "-b/a", "sin(x)*exp(-x)"};
  const char *reds[] = {"sum(x**2)", "sum axis=1 [100,N/100]"};
  if (engine) {
    printf("%-24s %10s %9s %9s %9s %9s %8s %8s\n", "case", "N", "serial",
           "cpu", "numpy", "numexpr", "cpu/nex", "cpu/np");
    printf("%-24s %10s %9s %9s %9s %9s %8s %8s\n", "(M elem/s, median)", "",
           "", "", "", "", "", "");
  }
  g_scratch = aligned_alloc(64, (size_t)256 * 1024 * 1024);
  for (int64_t n = 1000; n <= max; n *= 10) {
    if (!engine && n < svc_min) continue;
    int64_t sh[1] = {n};
    tarray *x = tarray_new(T_F64, 1, sh), *a = tarray_new(T_F64, 1, sh),
           *b = tarray_new(T_F64, 1, sh);
    g_out = tarray_zeros(T_F64, 1, sh);
    uint64_t s = 7;
    for (int64_t i = 0; i < n; i++) {
      double u[3];
      for (int k = 0; k < 3; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        u[k] = (double)(s >> 11) * 0x1p-53;
      }
      ((double *)x->data)[i] = u[0];
      ((double *)a->data)[i] = 1 + u[1];
      ((double *)b->data)[i] = u[2];
    }
    double ser[6], cpu[6];
    for (int c = 0; c < 6; c++) {
      const char *src = c < 4 ? maps[c] : c == 4 ? "x**2" : "x";
      expr *ex = NULL;
      terr e;
      if (expr_compile(src, &ex, &e)) return 1;
      const tarray *in[2];
      for (int i = 0; i < expr_ninputs(ex); i++) {
        const char *nm = expr_input_name(ex, i);
        in[i] = nm[0] == 'x' ? x : nm[0] == 'a' ? a : b;
      }
      job j = {.kind = c < 4 ? 0 : c - 3, .x = ex, .in = in, .nd = 1,
               .sh = {n, 0}};
      if (c == 5) j.nd = 2, j.sh[0] = 100, j.sh[1] = n / 100;
      j.width = 1;
      ser[c] = engine ? measure(&j, n) : NAN;
      j.width = threads;
      cpu[c] = engine ? measure(&j, n) : NAN;
      expr_free(ex);
    }
    if (engine && !getenv("BENCH_NO_PEERS")) peers_run(threads, n);
    for (int c = 0; engine && c < 6; c++) {
      const char *cas = c < 4 ? maps[c] : reds[c - 4];
      double np = peer_get("numpy", cas, n), nex = peer_get("numexpr", cas, n);
      printf("%-24s %10lld %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f\n", cas,
             (long long)n, ser[c], cpu[c], np, nex, cpu[c] / nex, cpu[c] / np);
    }
    fflush(stdout);
    char ids[4][T_ID_MAX];
    int64_t sh2[2] = {100, n / 100};
    tarray x2 = *x; /* a view: x's data as [100, n/100] */
    x2.ndim = 2, x2.shape[0] = sh2[0], x2.shape[1] = sh2[1];
    x2.map_base = NULL;
    if (have_svc && n >= svc_min && n % 100 == 0 &&
        !svc_put(&v, x, ids[0]) && !svc_put(&v, a, ids[1]) &&
        !svc_put(&v, b, ids[2]) && !svc_put(&v, &x2, ids[3]))
      for (int c = 0; c < 6 && nsvc < 64; c++) {
        double js, jc;
        svc_measure(&v, c, n, ids, &js, &jc);
        snprintf(svc_rows[nsvc++], sizeof svc_rows[0],
                 "%-24s %10lld %9.1f %9.1f %9.2f %9.1f",
                 c < 4 ? maps[c] : reds[c - 4], (long long)n, js, jc, jc / js,
                 cpu[c]);
      }
    tarray_free(x);
    tarray_free(a);
    tarray_free(b);
    tarray_free(g_out);
  }
  if (engine) {
    printf("threads: %d (cpu, numexpr); ratios > 1: tessel faster\n",
           threads);
    printf("parallelism available (of %d): %.2f at the start, %.2f at the "
           "end\n", threads, par0, probe_parallelism(threads));
  }
  if (nsvc) {
    printf("\nthe service's path: jobs (inputs mapped from uploads, results "
           "to <data>/results), M elem/s, median of %d\n", SVC_JOBS);
    printf("%-24s %10s %9s %9s %9s %9s\n", "case", "N", "serial", "cpu",
           "cpu/ser", "engine");
    for (int i = 0; i < nsvc; i++) printf("%s\n", svc_rows[i]);
    printf("parallelism available (of %d): %.2f before, %.2f after\n",
           threads, par0, probe_parallelism(threads));
  }
  if (have_svc) svc_close(&v);
  return 0;
}
