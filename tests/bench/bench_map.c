/* bench_map.c — map and reduce throughput against NumPy and numexpr.
 *
 *   bench_map [MAX_SIZE=1e8] [THREADS=2]
 *
 * Prints ONE table: for x*x, x**2 + 2*x + 1, -b/a, sin(x)*exp(-x) (map) and
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
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kinds/exprkind.h"
#include "util/pool.h"

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

int main(int argc, char **argv) {
  int64_t max = argc > 1 ? (int64_t)strtod(argv[1], NULL) : 100000000;
  int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 2;
  if (threads < 1 || threads > 256) threads = 2;
  team_start(threads);
  double par0 = probe_parallelism(threads);
  const char *maps[] = {"x*x", "x**2 + 2*x + 1", "-b/a", "sin(x)*exp(-x)"};
  const char *reds[] = {"sum(x**2)", "sum axis=1 [100,N/100]"};
  printf("%-24s %10s %9s %9s %9s %9s %8s %8s\n", "case", "N", "serial",
         "cpu", "numpy", "numexpr", "cpu/nex", "cpu/np");
  printf("%-24s %10s %9s %9s %9s %9s %8s %8s\n", "(M elem/s, median)", "", "",
         "", "", "", "", "");
  g_scratch = aligned_alloc(64, (size_t)256 * 1024 * 1024);
  for (int64_t n = 1000; n <= max; n *= 10) {
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
      ser[c] = measure(&j, n);
      j.width = threads;
      cpu[c] = measure(&j, n);
      expr_free(ex);
    }
    if (!getenv("BENCH_NO_PEERS")) peers_run(threads, n);
    for (int c = 0; c < 6; c++) {
      const char *cas = c < 4 ? maps[c] : reds[c - 4];
      double np = peer_get("numpy", cas, n), nex = peer_get("numexpr", cas, n);
      printf("%-24s %10lld %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f\n", cas,
             (long long)n, ser[c], cpu[c], np, nex, cpu[c] / nex, cpu[c] / np);
    }
    fflush(stdout);
    tarray_free(x);
    tarray_free(a);
    tarray_free(b);
    tarray_free(g_out);
  }
  printf("threads: %d (cpu, numexpr); ratios > 1: tessel faster\n", threads);
  printf("parallelism available (of %d): %.2f at the start, %.2f at the "
         "end\n", threads, par0, probe_parallelism(threads));
  return 0;
}
