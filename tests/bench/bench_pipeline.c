/* bench_pipeline.c — the pipelined GPU data path (issue 25, item 2): a map
 * from host memory to host memory, page-locked or pageable, beside the
 * physical floor and the CPU doing the same work on this machine.
 *
 *   bench_pipeline [N=1e8] [REPS=5]
 *
 * In one run (medians of REPS after one warm-up, float64, N elements):
 *   floor     pinned PCIe: cudaMemcpy of the inputs' bytes host -> device
 *             and of the result's bytes device -> host, back to back (what
 *             moving the bytes costs with nothing overlapped); memcpy of
 *             the result's bytes on one host thread;
 *   d2h       an 800 MB-class result already on the device into pinned host
 *             memory: cudaMemcpy alone, and a map whose inputs are resident
 *             (the whole path: its d2h phase is the DMA into the pinned
 *             output, no staging copy) — GB/s of each;
 *   cases     gpu_map of `x**2 + 2*x + 1` (one input) and `-b/a` (two) with
 *             inputs and output pinned (the DMA straight from / into them),
 *             pageable (through the pinned slots, the gang's copies
 *             overlapped), and the two mixes; then the CPU: expr_eval on
 *             every core into a warm output (the cpu backend's loop without
 *             its result file).
 * Overlap: the job's h2d, compute and d2h phases add each chunk's copy and
 * kernel times (CUDA events); "phases/wall" above 1 says the copies of some
 * chunks ran while others computed (the sum can exceed the wall time only
 * when they overlap). Peers (CuPy asarray + compute + asnumpy, PyTorch) run
 * from tests/bench/peers_pipeline.py in the same device command; see
 * tests/bench/results/h200-2026-11-28-pipeline.md.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if TESSEL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "check.h"
#include "compute/expr/expr.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/kinds.h"
#include "util/util.h"

static int g_reps = 5;

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *host_buf(size_t bytes, int pinned) {
  void *p = NULL;
  if (pinned) {
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) return NULL;
  } else {
    p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  }
  if (p) memset(p, 0, bytes); /* pages in: first-touch faults are not measured */
  return p;
}

static tarray wrap(void *data, int64_t n) {
  tarray t;
  memset(&t, 0, sizeof t);
  t.dtype = T_F64;
  t.ndim = 1;
  t.shape[0] = n;
  t.size = n;
  t.data = data;
  return t;
}

/* ---- the CPU: expr_eval on every core ---------------------------------- */
typedef struct cpu_arg {
  const expr *x;
  const tarray *const *in;
  tarray *out;
  int64_t lo, hi;
} cpu_arg;

static void *cpu_part(void *p) {
  cpu_arg *a = p;
  void *scratch = aligned_alloc(64, (expr_scratch_size(a->x) + 63) / 64 * 64);
  for (int64_t s = a->lo; s < a->hi; s += EXPR_BLOCK) {
    int64_t n = a->hi - s < EXPR_BLOCK ? a->hi - s : EXPR_BLOCK;
    expr_eval(a->x, a->in, a->out, s, n, scratch);
  }
  free(scratch);
  return NULL;
}

static double cpu_map(const expr *x, const tarray *const *in, tarray *out) {
  int nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nt < 1) nt = 1;
  if (nt > 64) nt = 64;
  pthread_t th[64];
  cpu_arg arg[64];
  int64_t blocks = (out->size + EXPR_BLOCK - 1) / EXPR_BLOCK;
  double t0 = t_now_ms();
  for (int k = 0; k < nt; k++) {
    arg[k] = (cpu_arg){x, in, out, blocks * k / nt * EXPR_BLOCK,
                       blocks * (k + 1) / nt * EXPR_BLOCK};
    if (arg[k].hi > out->size) arg[k].hi = out->size;
    if (arg[k].lo > out->size) arg[k].lo = out->size;
    pthread_create(&th[k], NULL, cpu_part, &arg[k]);
  }
  for (int k = 0; k < nt; k++) pthread_join(th[k], NULL);
  return t_now_ms() - t0;
}

/* ---- one gpu_map, timed ------------------------------------------------ */
typedef struct run_t {
  double wall, h2d, comp, d2h;
} run_t;

static int gpu_once(const expr *x, const tarray *const *in, const char *const *ids,
                    tarray *out, run_t *r) {
  job_ctx ctx;
  atomic_int stop;
  atomic_init(&stop, 0);
  memset(&ctx, 0, sizeof ctx);
  ctx.job_id = "j_bench";
  ctx.threads = 1;
  ctx.stop = &stop;
  terr e;
  terr_clear(&e);
  double t0 = t_now_ms();
  int rc = gpu_map(0, x, in, ids, out, &ctx, &e);
  r->wall = t_now_ms() - t0;
  r->h2d = ctx.t_h2d;
  r->comp = ctx.t_compute;
  r->d2h = ctx.t_d2h;
  if (rc) fprintf(stderr, "gpu_map: %s\n", e.message);
  return rc;
}

/* Median of REPS after a warm-up; med gets the medians of each field. */
static int gpu_case(const expr *x, const tarray *const *in, const char *const *ids,
                    tarray *out, run_t *med) {
  run_t r;
  double w[64], h[64], c[64], d[64];
  if (gpu_once(x, in, ids, out, &r)) return -1;
  for (int k = 0; k < g_reps; k++) {
    if (gpu_once(x, in, ids, out, &r)) return -1;
    w[k] = r.wall, h[k] = r.h2d, c[k] = r.comp, d[k] = r.d2h;
  }
  med->wall = median(w, g_reps);
  med->h2d = median(h, g_reps);
  med->comp = median(c, g_reps);
  med->d2h = median(d, g_reps);
  return 0;
}

static double ev_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

/* Pinned copies of `bytes` each way, and a device -> pinned host copy. */
static void floors(size_t in_bytes, size_t out_bytes, void *pin_in, void *pin_out,
                   void *dev, double *h2d, double *d2h) {
  cudaEvent_t a, b, c;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventCreate(&c);
  double hv[64], dv[64];
  for (int k = -1; k < g_reps; k++) {
    cudaEventRecord(a, 0);
    for (size_t o = 0; o < in_bytes; o += out_bytes) /* each input once */
      cudaMemcpy((char *)dev + o, pin_in, out_bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(b, 0);
    cudaMemcpy(pin_out, dev, out_bytes, cudaMemcpyDeviceToHost);
    cudaEventRecord(c, 0);
    cudaEventSynchronize(c);
    if (k >= 0) hv[k] = ev_ms(a, b), dv[k] = ev_ms(b, c);
  }
  *h2d = median(hv, g_reps);
  *d2h = median(dv, g_reps);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaEventDestroy(c);
}

static void fill(double *p, int64_t n, double lo, double hi, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) * 0x1.0p-53;
    p[i] = lo + (hi - lo) * u;
    if (p[i] == 0) p[i] = 1;
  }
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? (int64_t)atof(argv[1]) : 100000000;
  if (argc > 2) g_reps = atoi(argv[2]);
  if (g_reps < 1 || g_reps > 64) g_reps = 5;
  char dir[] = "/tmp/tessel-bench-pipe-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  gpu_config cfg = {dir, 0.5, 0};
  gpu_configure(&cfg);
  if (gpu_init() != 0 || gpu_count() == 0) {
    printf("SKIPPED: no CUDA device (%s)\n", gpu_unavailable_reason());
    return 77;
  }
  size_t bytes = (size_t)n * 8;
  void *pa = host_buf(bytes, 1), *pb = host_buf(bytes, 1), *po = host_buf(bytes, 1);
  void *ga = host_buf(bytes, 0), *gb = host_buf(bytes, 0), *go = host_buf(bytes, 0);
  void *dev = NULL;
  if (!pa || !pb || !po || !ga || !gb || !go ||
      cudaMalloc(&dev, 2 * bytes) != cudaSuccess) { /* two inputs' room */
    printf("not enough memory for n = %lld\n", (long long)n);
    return 1;
  }
  fill(pa, n, -3, 3, 1);
  fill(pb, n, 0.5, 4, 2);
  memcpy(ga, pa, bytes);
  memcpy(gb, pb, bytes);
  printf("# bench_pipeline: n = %lld float64 (%.0f MB per array), medians of %d, %ld host threads\n\n",
         (long long)n, bytes / 1e6, g_reps, sysconf(_SC_NPROCESSORS_ONLN));

  /* floors */
  double fh1, fd1, fh2, fd2;
  floors(bytes, bytes, pa, po, dev, &fh1, &fd1);
  floors(2 * bytes, bytes, pa, po, dev, &fh2, &fd2); /* two inputs (pa twice) */
  double mc[64];
  for (int k = -1; k < g_reps; k++) {
    double t0 = t_now_ms();
    memcpy(go, ga, bytes);
    if (k >= 0) mc[k] = t_now_ms() - t0;
  }
  double memcpy_ms = median(mc, g_reps);
  printf("## floors\n\n| what | ms | GB/s |\n|---|---:|---:|\n");
  printf("| pinned h2d %.0f MB | %.1f | %.1f |\n", bytes / 1e6, fh1, bytes / fh1 / 1e6);
  printf("| pinned d2h %.0f MB (cudaMemcpy into pinned host memory) | %.1f | %.1f |\n",
         bytes / 1e6, fd1, bytes / fd1 / 1e6);
  printf("| pinned h2d + d2h, one input (back to back) | %.1f | |\n", fh1 + fd1);
  printf("| pinned h2d + d2h, two inputs (back to back) | %.1f | |\n", fh2 + fd2);
  printf("| memcpy %.0f MB, one host thread (pageable, warm) | %.1f | %.1f |\n\n",
         bytes / 1e6, memcpy_ms, bytes / memcpy_ms / 1e6);

  static const char *const ex[] = {"x**2 + 2*x + 1", "-b/a"};
  printf("## map, host memory in -> host memory out\n\n");
  printf("| expression | inputs -> output | wall ms | h2d | compute | d2h | phases/wall | GB/s moved | floor ms |\n");
  printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int k = 0; k < 2; k++) {
    expr *x = NULL;
    terr e;
    if (expr_compile(ex[k], &x, &e)) {
      printf("compile %s: %s\n", ex[k], e.message);
      return 1;
    }
    int nin = expr_ninputs(x);
    double floor_ms = nin == 1 ? fh1 + fd1 : fh2 + fd2;
    /* inputs in expression order: x -> pa; a -> pa, b -> pb */
    struct { const char *name; void *a, *b, *o; const char *ids[2]; } mode[] = {
        {"pinned -> pinned", pa, pb, po, {NULL, NULL}},
        {"pageable -> pageable", ga, gb, go, {NULL, NULL}},
        {"pinned -> pageable", pa, pb, go, {NULL, NULL}},
        {"pageable -> pinned", ga, gb, po, {NULL, NULL}},
        {"resident (uploaded) -> pinned", pa, pb, po, {"a_bench_a", "a_bench_b"}},
        {"resident (uploaded) -> pageable", pa, pb, go, {"a_bench_a", "a_bench_b"}},
    };
    for (size_t m = 0; m < sizeof mode / sizeof *mode; m++) {
      tarray in[2], out = wrap(mode[m].o, n);
      const tarray *ins[2];
      for (int i = 0; i < nin; i++) {
        const char *nm = expr_input_name(x, i);
        in[i] = wrap(nm[0] == 'b' ? mode[m].b : mode[m].a, n);
        ins[i] = &in[i];
      }
      const char *ids[2] = {NULL, NULL};
      for (int i = 0; i < nin; i++)
        ids[i] = mode[m].ids[0] ? mode[m].ids[expr_input_name(x, i)[0] == 'b'] : NULL;
      run_t r;
      if (gpu_case(x, ins, mode[m].ids[0] ? ids : NULL, &out, &r)) continue;
      double moved = (double)bytes * (nin + 1);
      printf("| `%s` | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f |\n",
             ex[k], mode[m].name, r.wall, r.h2d, r.comp, r.d2h,
             (r.h2d + r.comp + r.d2h) / r.wall, moved / r.wall / 1e6,
             mode[m].ids[0] ? fd1 : floor_ms);
      if (mode[m].ids[0] && strstr(mode[m].name, "pinned"))
        printf("| | (its d2h into pinned: %.1f GB/s) | | | | | | | |\n",
               bytes / r.d2h / 1e6);
    }
    {
      tarray in[2], out = wrap(go, n);
      const tarray *ins[2];
      for (int i = 0; i < nin; i++) {
        in[i] = wrap(expr_input_name(x, i)[0] == 'b' ? gb : ga, n);
        ins[i] = &in[i];
      }
      double cv[64];
      cpu_map(x, ins, &out);
      for (int r = 0; r < g_reps; r++) cv[r] = cpu_map(x, ins, &out);
      printf("| `%s` | cpu, every core, warm output | %.1f | | | | | %.1f | |\n", ex[k],
             median(cv, g_reps), (double)bytes * (nin + 1) / median(cv, g_reps) / 1e6);
    }
    expr_free(x);
  }
  gpu_resident_drop("a_bench_a");
  gpu_resident_drop("a_bench_b");
  cudaFree(dev);
  gpu_shutdown();
  return 0;
}

#else
#include <stdio.h>
int main(void) {
  printf("SKIPPED: CUDA support not built\n");
  return 77;
}
#endif
