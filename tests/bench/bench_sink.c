/* bench_sink.c — where a big map result should be written: the measured
 * alternatives behind compute/array/codec/npyfile.c's choice.
 *
 *   bench_sink [SIZES=1e7,1e8] [THREADS=2] [DIR=/tmp] [ROUNDS=5] [CELL]
 *
 * CELL ("chunk/heap", ...) runs that one cell only (for a profiler).
 * Each cell is one job's result as the service makes it: `x + 1` over N
 * float64 (the expression VM, in the map kind's chunks of
 * clamp(N / (4 T), 32 Ki, 64 Ki) elements, on util/pool.c with T threads),
 * written to a new .npy under DIR and renamed to its final name, all timed;
 * the file is then removed (not timed). Sinks (the result's side):
 *   mapped    tarray_create_npy: a MAP_SHARED mapping of the fallocated
 *             file; chunks evaluate into it (the sink before issue 11)
 *   populate  the same, each chunk first MADV_POPULATE_WRITE its pages
 *             (pre-faulted in parallel by the threads that then write them)
 *   anon      a heap array (2 MiB aligned, MADV_HUGEPAGE: tarray_new),
 *             then each thread pwrites its slices into the fallocated file
 *   heapwrite a heap array, then npy_write through stdio by one thread
 *             (compute/sched/run.c's way for results up to inline_result_max)
 *   chunk     tarray_create_npy_sink: each chunk evaluates into its slot's
 *             buffer and pwrites it at its offset (no big intermediate)
 *   memory    the floor: chunks evaluate into one reused heap array, no file
 * Inputs (the input's side, with the chunk sink): x read from a heap array
 * (`heap`), or from a fresh MAP_PRIVATE mapping of a .npy in the page cache
 * as the service maps an upload (`map`), with MAP_POPULATE (`populate`),
 * with MADV_POPULATE_READ of the whole mapping at once (`popall`) or of
 * each chunk's pages by the thread about to read them (`popread`), or with
 * MADV_WILLNEED + MADV_SEQUENTIAL (`willneed`).
 * Cells: million elements per second, the median of ROUNDS rounds; every
 * round runs every cell once, in turn (drift hits all alike). The machine
 * may be shared: the parallelism the pool really got is printed too.
 */
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/expr/expr.h"
#include "util/pool.h"
#include "util/util.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { S_MAPPED, S_POPULATE, S_ANON, S_HEAPWRITE, S_CHUNK, S_MEMORY, S__COUNT };
static const char *const sink_names[S__COUNT] = {
    "mapped", "populate", "anon", "heapwrite", "chunk", "memory"};
enum { I_HEAP, I_MAP, I_POPULATE, I_POPALL, I_POPREAD, I_WILLNEED, I__COUNT };
static const char *const in_names[I__COUNT] = {
    "heap", "map", "populate", "popall", "popread", "willneed"};

static pool *g_pool;
static expr *g_x;
static const char *g_dir;

typedef struct run {
  int sink, input;
  const tarray *in;      /* x */
  tarray *out;           /* memory, or the sink's array */
  int64_t n, chunk;
  char *scratch;         /* per slot: VM registers, then a chunk's values */
  size_t stride, buf_off;
  atomic_int failed;
} run;

/* Page-aligned [p, p + len) shrunk to whole pages, madvised. */
static void advise_pages(const void *p, size_t len, int advice) {
  uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
  uintptr_t b = ((uintptr_t)p + len) & ~(uintptr_t)4095;
  if (b > a) madvise((void *)a, b - a, advice);
}

static void chunk_fn(void *arg, int64_t c, int slot) {
  run *r = arg;
  int64_t s = c * r->chunk, n = r->n - s < r->chunk ? r->n - s : r->chunk;
  char *scr = r->scratch + (size_t)slot * r->stride;
  const tarray *in[1] = {r->in};
  if (r->input == I_POPREAD)
    advise_pages((const double *)r->in->data + s, (size_t)n * 8,
                 MADV_POPULATE_READ);
  if (r->sink == S_CHUNK) {
    char *buf = scr + r->buf_off;
    terr e;
    expr_eval_into(g_x, in, r->out, s, n, buf, scr);
    if (tarray_write(r->out, s, n, buf, &e)) atomic_store(&r->failed, 1);
    return;
  }
  if (r->sink == S_POPULATE)
    advise_pages((double *)r->out->data + s, (size_t)n * 8,
                 MADV_POPULATE_WRITE);
  expr_eval(g_x, in, r->out, s, n, scr);
}

/* anon's second pass: chunk c of the heap result into the sink file. */
typedef struct copy_arg {
  const tarray *from;
  tarray *to;
  int64_t chunk;
  atomic_int failed;
} copy_arg;
static void copy_fn(void *arg, int64_t c, int slot) {
  copy_arg *a = arg;
  int64_t s = c * a->chunk, n = a->to->size - s;
  if (n > a->chunk) n = a->chunk;
  terr e;
  if (tarray_write(a->to, s, n, (const double *)a->from->data + s, &e))
    atomic_store(&a->failed, 1);
}

/* The input x: a view of a fresh mapping of `path` (an uploaded .npy) as
 * the service maps it, with the input variant's flags. */
static tarray *map_input(const char *path, int input) {
  tarray *a = NULL;
  terr e;
  if (input == I_MAP) return tarray_map_npy(path, &a, &e) ? NULL : a;
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st)) return NULL;
  int flags = MAP_PRIVATE | (input == I_POPULATE ? MAP_POPULATE : 0);
  void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, flags,
                    fd, 0);
  close(fd);
  if (base == MAP_FAILED) return NULL;
  if (input == I_POPALL) madvise(base, (size_t)st.st_size, MADV_POPULATE_READ);
  if (input == I_WILLNEED) {
    madvise(base, (size_t)st.st_size, MADV_WILLNEED);
    madvise(base, (size_t)st.st_size, MADV_SEQUENTIAL);
  }
  char hdr[NPY_HEADER_MAX];
  a = calloc(1, sizeof *a);
  a->dtype = T_F64;
  a->ndim = 1;
  a->shape[0] = (int64_t)(st.st_size - 128) / 8; /* near enough for: */
  size_t h = npy_header(T_F64, 1, a->shape, hdr);
  a->size = a->shape[0] = (int64_t)(st.st_size - (off_t)h) / 8;
  a->data = (char *)base + h;
  a->map_base = base;
  a->map_len = (size_t)st.st_size;
  return a;
}

/* One job's result with this sink and input; ms, or -1 on failure. */
static double one(int sink, int input, const tarray *heap_x, const char *xpath,
                  tarray *mem_out, int width, int64_t n) {
  static unsigned seq;
  char tmp[512], fin[512];
  snprintf(tmp, sizeof tmp, "%s/sink%u.npy.tmp", g_dir, seq);
  snprintf(fin, sizeof fin, "%s/sink%u.npy", g_dir, seq++);
  terr e;
  double t0 = t_now_ms();
  tarray *x = input == I_HEAP ? (tarray *)heap_x : map_input(xpath, input);
  if (!x) return -1;
  run r = {.sink = sink, .input = input, .in = x, .n = n};
  atomic_init(&r.failed, 0);
  int rc = 0;
  tarray *heap = NULL;
  if (sink == S_MAPPED || sink == S_POPULATE)
    rc = tarray_create_npy(tmp, T_F64, 1, &n, &r.out, &e);
  else if (sink == S_CHUNK)
    rc = tarray_create_npy_sink(tmp, T_F64, 1, &n, &r.out, &e);
  else if (sink == S_ANON || sink == S_HEAPWRITE)
    rc = !(r.out = heap = tarray_new(T_F64, 1, &n));
  else
    r.out = mem_out;
  if (rc) return -1;
  r.chunk = n / (4 * width);
  r.chunk = r.chunk < 32768 ? 32768 : r.chunk > 65536 ? 65536 : r.chunk;
  r.buf_off = (expr_scratch_size(g_x) + 63) & ~(size_t)63;
  r.stride = r.buf_off + (size_t)r.chunk * 8;
  r.scratch = aligned_alloc(64, r.stride * (size_t)width);
  int64_t nch = (n + r.chunk - 1) / r.chunk;
  pool_for(g_pool, width, nch, chunk_fn, &r, NULL);
  if (sink == S_ANON) { /* then every thread pwrites its slices */
    copy_arg c = {.from = heap, .chunk = 1 << 20};
    atomic_init(&c.failed, 0);
    if (tarray_create_npy_sink(tmp, T_F64, 1, &n, &c.to, &e)) return -1;
    pool_for(g_pool, width, (n + c.chunk - 1) / c.chunk, copy_fn, &c, NULL);
    rc |= atomic_load(&c.failed);
    tarray_free(c.to);
    tarray_free(heap);
  } else if (sink == S_HEAPWRITE) {
    FILE *f = fopen(tmp, "wb");
    if (!f || npy_write(f, heap, &e)) rc = 1;
    if (f && fclose(f)) rc = 1;
    tarray_free(heap);
  } else if (sink != S_MEMORY) {
    tarray_free(r.out);
  }
  if (sink != S_MEMORY && rename(tmp, fin)) rc = 1;
  if (x != heap_x) tarray_free(x);
  double ms = t_now_ms() - t0;
  free(r.scratch);
  unlink(fin);
  return rc || atomic_load(&r.failed) ? -1 : ms;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Same probe as bench_map: the parallelism the pool really gets now. */
static void probe_chunk(void *arg, int64_t c, int slot) {
  volatile double *sink = arg, acc = 0;
  for (int i = 0; i < 3000000; i++) acc += (double)(i ^ (int)c) * 1e-9;
  sink[0] += acc;
}
static double parallelism(int threads) {
  static volatile double sink[1];
  double t0 = t_now_ms();
  for (int c = 0; c < threads; c++) probe_chunk((void *)sink, c, 0);
  double t1 = t_now_ms();
  pool_for(g_pool, threads, threads, probe_chunk, (void *)sink, NULL);
  return (t1 - t0) / (t_now_ms() - t1);
}

int main(int argc, char **argv) {
  const char *sizes = argc > 1 ? argv[1] : "1e7,1e8";
  int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 2;
  g_dir = argc > 3 ? argv[3] : "/tmp";
  int rounds = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 5;
  const char *only = argc > 5 ? argv[5] : NULL;
  if (threads < 1 || threads > 256) threads = 2;
  if (rounds < 1 || rounds > 101) rounds = 5;
  terr e;
  g_pool = pool_create(threads, NULL, NULL);
  if (!g_pool || expr_compile("x + 1", &g_x, &e)) return 1;
  int widths[2] = {1, threads};
  printf("x + 1, float64, results in %s; M elem/s, median of %d rounds; "
         "parallelism available (of %d) at the start: %.2f\n\n", g_dir,
         rounds, threads, parallelism(threads));
  printf("%-10s %-9s %-9s %3s %9s %9s\n", "N", "sink", "input", "T",
         "Melem/s", "vs T=1");
  for (const char *p = sizes; *p;) {
    int64_t n = (int64_t)strtod(p, NULL);
    const char *comma = strchr(p, ',');
    p = comma ? comma + 1 : p + strlen(p);
    tarray *x = tarray_new(T_F64, 1, &n), *mem = tarray_new(T_F64, 1, &n);
    if (!x || !mem) return 1;
    for (int64_t i = 0; i < n; i++) ((double *)x->data)[i] = (double)i * 1e-3;
    memset(mem->data, 0, (size_t)n * 8);
    char xpath[512];
    snprintf(xpath, sizeof xpath, "%s/sink_x.npy", g_dir);
    FILE *f = fopen(xpath, "wb");
    if (!f || npy_write(f, x, &e) || fclose(f)) return 1;
    /* cells: every sink on heap input, then every input on the chunk sink */
    int cells[S__COUNT + I__COUNT - 1][2], nc = 0;
    for (int s = 0; s < S__COUNT; s++) cells[nc][0] = s, cells[nc++][1] = I_HEAP;
    for (int i = 1; i < I__COUNT; i++) cells[nc][0] = S_CHUNK, cells[nc++][1] = i;
    for (int c = 0; only && c < nc; c++) {
      char name[32];
      snprintf(name, sizeof name, "%s/%s", sink_names[cells[c][0]],
               in_names[cells[c][1]]);
      if (!strcmp(name, only)) {
        cells[0][0] = cells[c][0], cells[0][1] = cells[c][1], nc = 1;
        break;
      }
    }
    double *t = calloc((size_t)nc * 2 * (size_t)rounds, sizeof *t);
    for (int k = 0; k < rounds; k++)
      for (int c = 0; c < nc; c++)
        for (int w = 0; w < 2; w++)
          t[((size_t)c * 2 + (size_t)w) * (size_t)rounds + (size_t)k] =
              one(cells[c][0], cells[c][1], x, xpath, mem, widths[w], n);
    for (int c = 0; c < nc; c++) {
      double med[2];
      for (int w = 0; w < 2; w++) {
        double *v = t + ((size_t)c * 2 + (size_t)w) * (size_t)rounds;
        qsort(v, (size_t)rounds, sizeof *v, cmpd);
        med[w] = v[0] < 0 ? NAN : (double)n / v[rounds / 2] / 1e3;
      }
      for (int w = 0; w < 2; w++)
        printf("%-10lld %-9s %-9s %3d %9.1f %9.2f\n", (long long)n,
               sink_names[cells[c][0]], in_names[cells[c][1]], widths[w],
               med[w], med[w] / med[0]);
    }
    fflush(stdout);
    free(t);
    unlink(xpath);
    tarray_free(x);
    tarray_free(mem);
  }
  printf("\nparallelism available (of %d) at the end: %.2f\n", threads,
         parallelism(threads));
  expr_free(g_x);
  pool_destroy(g_pool);
  return 0;
}
