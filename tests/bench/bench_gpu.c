/* bench_gpu.c — array jobs on serial, cpu and cuda, and what auto chose.
 *
 *   bench_gpu [--max-exp E] [--quick]
 *
 * Measures, in one run on one machine:
 *   ceilings   device copy bandwidth (cudaMemcpy device->device of 1 GiB,
 *              bytes read + written), pinned PCIe host->device and
 *              device->host (512 MiB from cudaHostAlloc'd memory), and
 *              cuBLAS dgemm called directly on each matmul shape (same
 *              operands; each product read back before the next, as in
 *              Tessel's runs);
 *   cases      map (the seeds' expressions x**2 + 2*x + 1, w*x + b, -b / a),
 *              reduce (sum over everything; sum per row of [100, n/100], the
 *              seeds' "100 datasets"), matmul n x n x n; n from 10^4 to
 *              10^E elements (E = 9 by default);
 *   backends   serial and cpu (the kinds' CPU code on this machine's
 *              threads) and cuda end to end (the kind on B_CUDA: copies in,
 *              kernel, copies out, fresh result memory, as a job runs), all
 *              run through the kinds on the same plan; cuda on device (the
 *              inputs resident on the GPU, kernel time only, from the job's
 *              compute phase); cuda end to end into a warm result buffer
 *              (the pipeline's own rate, without first-touch page faults);
 *   auto       the router's calibrated cost model (self-benchmark run here)
 *              picks a backend for each case; "ok" when that backend's
 *              measured time is within 10% of the best measured one.
 * Ratios, never lone seconds: dev% = on-device bytes/s over the device copy
 * bandwidth; pcie% = (in/h2d + out/d2h at the pinned rates) over the warm
 * end-to-end time (so 100% = as fast as copying the data in and out once,
 * back to back; above 100% when the two directions overlap); blas% =
 * cuBLAS-direct time over Tessel's compute phase. Medians of 15 runs for
 * jobs predicted under 2 ms, 5 under 0.3 s, fewer for longer ones; backends predicted to exceed 20 s are skipped
 * ("-"). Inputs are ranges (1, 2, 3, ...: non-zero), matmul operands
 * uniform random. Prints the table last.
 */
#include <stdio.h>
#if !TESSEL_HAVE_CUDA
int main(void) {
  printf("bench_gpu: CUDA support not built; nothing to measure\n");
  return 0;
}
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/sched/route/costmodel.h"
#include "compute/gpu/devctx.h"
#include "compute/expr/expr.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/kinds.h"
#include "util/pool.h"
#include "util/util.h"

#define MAXROWS 96
#define SKIP_S 20.0

typedef struct row {
  char kind[16], name[40];
  double n;
  double ms[B__COUNT]; /* serial, cpu, cuda (e2e job); NAN when skipped */
  double dev_ms, warm_ms, blas_ms;
  double bytes_in, bytes_out;
  tbackend chose;
  double est_ms[B__COUNT];
} row;

static row g_rows[MAXROWS];
static int g_nrows;
static pool *g_pool;
static int g_threads;
static cm_model g_model;
static double g_copy_bw, g_h2d, g_d2h, g_duplex;

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int alloc_fresh(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                       tarray **out, terr *e) {
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static void ctx_init(job_ctx *c, atomic_int *stop, tbackend b) {
  memset(c, 0, sizeof *c);
  atomic_store(stop, 0);
  c->job_id = "j_bench";
  c->pool = g_pool;
  c->threads = b == B_SERIAL ? 1 : g_threads;
  c->device = 0;
  c->stop = stop;
  c->result_alloc = alloc_fresh;
}

/* Median wall ms of running the plan on b (result freed each time). */
static double time_kind(const kind_ops *k, void *plan, tbackend b, double predict_ms) {
  if (predict_ms > SKIP_S * 1e3) return NAN;
  /* short runs are noisy: more of them */
  int reps = predict_ms > 2000 ? 1 : predict_ms > 300 ? 3 : predict_ms > 2 ? 5 : 15;
  double t[15];
  atomic_int stop;
  for (int i = 0; i < reps + (b == B_CUDA); i++) { /* cuda: one warm-up */
    job_ctx c;
    ctx_init(&c, &stop, b);
    tarray *res = NULL;
    terr e;
    terr_clear(&e);
    if (b == B_CUDA) gpu_lock(0);
    double t0 = t_now_ms();
    int rc = k->run(plan, b, &c, &res, &e);
    double ms = t_now_ms() - t0;
    if (b == B_CUDA) gpu_unlock(0);
    tarray_free(res);
    if (rc) {
      printf("  %s on %s failed: %s\n", k->name, tbackend_name(b), e.message);
      return NAN;
    }
    if (b == B_CUDA && i == 0) continue;
    t[b == B_CUDA ? i - 1 : i] = ms;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmpd);
  return t[reps / 2];
}

/* ---- ceilings ----------------------------------------------------------- */

static double ev_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

static void measure_ceilings(void) {
  size_t big = (size_t)1 << 30, pin = (size_t)512 << 20;
  void *d1 = NULL, *d2 = NULL, *h = NULL;
  cudaSetDevice(0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaStream_t s1, s2;
  cudaStreamCreate(&s1);
  cudaStreamCreate(&s2);
  if (cudaMalloc(&d1, big) || cudaMalloc(&d2, big) || cudaHostAlloc(&h, pin, 0)) {
    printf("ceilings: allocation failed\n");
    return;
  }
  cudaMemset(d1, 1, big);
  memset(h, 3, pin);
  double t[5];
  for (int i = 0; i < 6; i++) {
    cudaEventRecord(a, s1);
    cudaMemcpyAsync(d2, d1, big, cudaMemcpyDeviceToDevice, s1);
    cudaEventRecord(b, s1);
    cudaEventSynchronize(b);
    if (i) t[i - 1] = ev_ms(a, b);
  }
  qsort(t, 5, sizeof t[0], cmpd);
  g_copy_bw = 2.0 * (double)big / (t[2] * 1e-3);
  for (int dir = 0; dir < 2; dir++) {
    for (int i = 0; i < 6; i++) {
      cudaEventRecord(a, s1);
      if (dir == 0)
        cudaMemcpyAsync(d1, h, pin, cudaMemcpyHostToDevice, s1);
      else
        cudaMemcpyAsync(h, d1, pin, cudaMemcpyDeviceToHost, s1);
      cudaEventRecord(b, s1);
      cudaEventSynchronize(b);
      if (i) t[i - 1] = ev_ms(a, b);
    }
    qsort(t, 5, sizeof t[0], cmpd);
    if (dir == 0)
      g_h2d = (double)pin / (t[2] * 1e-3);
    else
      g_d2h = (double)pin / (t[2] * 1e-3);
  }
  /* both directions at once (two streams), half the buffer each way */
  for (int i = 0; i < 6; i++) {
    double t0 = t_now_ms();
    cudaMemcpyAsync(d1, h, pin / 2, cudaMemcpyHostToDevice, s1);
    cudaMemcpyAsync((char *)h + pin / 2, d2, pin / 2, cudaMemcpyDeviceToHost, s2);
    cudaStreamSynchronize(s1);
    cudaStreamSynchronize(s2);
    if (i) t[i - 1] = t_now_ms() - t0;
  }
  qsort(t, 5, sizeof t[0], cmpd);
  g_duplex = (double)pin / (t[2] * 1e-3);
  cudaFree(d1);
  cudaFree(d2);
  cudaFreeHost(h);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

/* cuBLAS dgemm n^3 on device-resident copies of the same operands Tessel
 * multiplies (the data's bit patterns change the power draw, hence the
 * clocks), median ms of 5 (after 1). */
static double cublas_direct_ms(int64_t n, const double *ha, const double *hb) {
  double *A = NULL, *B = NULL, *C = NULL, t[5];
  size_t bytes = (size_t)(n * n) * sizeof(double);
  cublasHandle_t h = NULL;
  cudaEvent_t a, b;
  double r = NAN;
  cudaSetDevice(0);
  if (cudaMalloc((void **)&A, bytes) || cudaMalloc((void **)&B, bytes) ||
      cudaMalloc((void **)&C, bytes) || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
    goto done;
  cudaMemcpy(A, ha, bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(B, hb, bytes, cudaMemcpyHostToDevice);
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const double one = 1, zero = 0;
  double *hc = malloc(bytes);
  for (int i = 0; i < 6; i++) {
    cudaEventRecord(a, 0);
    cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, B,
                (int)n, A, (int)n, &zero, C, (int)n);
    cudaEventRecord(b, 0);
    cudaEventSynchronize(b);
    if (i) t[i - 1] = ev_ms(a, b);
    /* as a job does: the product is read back before the next one (so
     * the caches hold what they hold between Tessel's runs) */
    if (hc) cudaMemcpy(hc, C, bytes, cudaMemcpyDeviceToHost);
  }
  free(hc);
  qsort(t, 5, sizeof t[0], cmpd);
  r = t[2];
  cudaEventDestroy(a);
  cudaEventDestroy(b);
done:
  if (h) cublasDestroy(h);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaGetLastError();
  return r;
}

/* ---- one case ------------------------------------------------------------ */

static tarray *range_array(int64_t n) {
  tarray *a = tarray_new(T_F64, 1, &n);
  for (int64_t i = 0; a && i < n; i++) ((double *)a->data)[i] = (double)(i + 1);
  return a;
}

/* On-device and warm end-to-end runs of gpu_map / gpu_reduce / gpu_matmul
 * on the bench's own copy of the inputs. kind: 0 map, 1 reduce, 2 matmul. */
typedef struct direct {
  int kind;
  const expr *x;
  int nin;
  tarray *in[3];
  int axis;
  tarray *out;
} direct;

static int direct_run(direct *d, int resident, double *compute_ms, double *wall_ms) {
  static const char *const ids[3] = {"a_BENCH0000000000000000000", "a_BENCH0000000000000000001",
                                     "a_BENCH0000000000000000002"};
  atomic_int stop;
  job_ctx c;
  ctx_init(&c, &stop, B_CUDA);
  terr e;
  terr_clear(&e);
  double t0 = t_now_ms();
  int rc;
  if (d->kind == 0)
    rc = gpu_map(0, d->x, (const tarray *const *)d->in, resident ? ids : NULL, d->out, &c, &e);
  else if (d->kind == 1)
    rc = gpu_reduce(0, R_SUM, d->x, (const tarray *const *)d->in, resident ? ids : NULL,
                    d->axis, d->out, &c, &e);
  else
    rc = gpu_matmul(0, d->in[0], d->in[1], NULL, 0, 0, resident ? ids : NULL, d->out, &c, &e);
  *wall_ms = t_now_ms() - t0;
  *compute_ms = c.t_compute;
  if (rc) printf("  direct cuda run failed: %s\n", e.message);
  return rc;
}

static void direct_times(direct *d, row *r) {
  double c, w, tc[5], tw[5];
  /* on device: resident inputs (first run uploads), kernel time */
  direct_run(d, 1, &c, &w);
  for (int i = 0; i < 5; i++) {
    direct_run(d, 1, &tc[i], &w);
  }
  qsort(tc, 5, sizeof tc[0], cmpd);
  r->dev_ms = tc[2];
  for (int i = 0; i < 3; i++) gpu_resident_drop(i == 0 ? "a_BENCH0000000000000000000"
                                                : i == 1 ? "a_BENCH0000000000000000001"
                                                         : "a_BENCH0000000000000000002");
  /* warm end to end: streamed, result into the same (touched) buffer */
  int reps = r->n >= 1e9 ? 3 : 5;
  for (int i = 0; i < reps; i++) direct_run(d, 0, &c, &tw[i]);
  qsort(tw, (size_t)reps, sizeof tw[0], cmpd);
  r->warm_ms = tw[reps / 2];
}

static void run_case(const char *kind, const char *name, const char *params_text,
                     direct *d, double n, double bytes_in, double bytes_out) {
  if (g_nrows >= MAXROWS) return;
  row *r = &g_rows[g_nrows];
  memset(r, 0, sizeof *r);
  snprintf(r->kind, sizeof r->kind, "%s", kind);
  snprintf(r->name, sizeof r->name, "%s", name);
  r->n = n;
  r->bytes_in = bytes_in;
  r->bytes_out = bytes_out;
  r->dev_ms = r->warm_ms = r->blas_ms = NAN;
  const kind_ops *k = kind_find(kind);
  json_t *params = json_loads(params_text, 0, NULL);
  tenv env;
  memset(&env, 0, sizeof env);
  env.owner = "";
  env.max_elems = INT64_MAX;
  job_estimate est;
  terr e;
  terr_clear(&e);
  void *plan = NULL;
  if (!k || !params || k->check(params, &env, &est, &e) ||
      k->prepare(params, &env, &plan, &e)) {
    printf("  %s %s: setup failed: %s\n", kind, name, e.message);
    json_decref(params);
    return;
  }
  for (int b = 0; b < B__COUNT; b++) {
    r->ms[b] = NAN;
    r->est_ms[b] = cm_model_ms(&g_model, k, &est, (tbackend)b);
  }
  char why[160];
  cm_model_choose(&g_model, k, &est, 1, &r->chose, why, sizeof why, NULL);
  r->ms[B_SERIAL] = time_kind(k, plan, B_SERIAL, r->est_ms[B_SERIAL]);
  r->ms[B_CPU] = time_kind(k, plan, B_CPU, r->est_ms[B_CPU]);
  r->ms[B_CUDA] = time_kind(k, plan, B_CUDA, r->est_ms[B_CUDA]);
  k->release(plan);
  json_decref(params);
  if (d) direct_times(d, r);
  printf("  %-7s %-16s n=%.0e  serial %9.3f  cpu %9.3f  cuda %9.3f  dev %8.3f  "
         "warm %9.3f ms | auto %s (%s)\n",
         kind, name, n, r->ms[B_SERIAL], r->ms[B_CPU], r->ms[B_CUDA], r->dev_ms,
         r->warm_ms, tbackend_name(r->chose), why);
  fflush(stdout);
  g_nrows++;
}

static void map_cases(int maxe) {
  static const char *const ex[3] = {"x**2 + 2*x + 1", "w*x + b", "-b / a"};
  for (int k = 0; k < 3; k++) {
    terr e;
    expr *x = NULL;
    expr_compile(ex[k], &x, &e);
    int nin = expr_ninputs(x);
    for (int p = 4; p <= maxe; p++) {
      if (k > 0 && p > 8) break; /* 10^9 only for the first */
      int64_t n = 1;
      for (int i = 0; i < p; i++) n *= 10;
      char params[1024], rng[160];
      snprintf(rng, sizeof rng, "{\"range\": {\"start\": 1, \"stop\": %lld, \"step\": 1}}",
               (long long)n + 1);
      size_t off = (size_t)snprintf(params, sizeof params,
                                    "{\"expr\": \"%s\", \"dtype\": \"float64\", \"inputs\": {", ex[k]);
      for (int i = 0; i < nin; i++)
        off += (size_t)snprintf(params + off, sizeof params - off, "%s\"%s\": %s",
                                i ? ", " : "", expr_input_name(x, i), rng);
      snprintf(params + off, sizeof params - off, "}}");
      direct d;
      memset(&d, 0, sizeof d);
      d.kind = 0;
      d.x = x;
      d.nin = nin;
      d.in[0] = range_array(n);
      for (int i = 1; i < nin; i++) d.in[i] = d.in[0];
      d.out = tarray_new(T_F64, 1, &n);
      memset(d.out->data, 0, (size_t)n * 8); /* touch: a warm buffer */
      char nm[40];
      snprintf(nm, sizeof nm, "%s", ex[k]);
      run_case("map", nm, params, &d, (double)n, 8.0 * n * nin, 8.0 * n);
      tarray_free(d.in[0]);
      tarray_free(d.out);
    }
    expr_free(x);
  }
}

static void reduce_cases(int maxe) {
  terr e;
  expr *x = NULL;
  expr_compile("x", &x, &e);
  for (int axis = -1; axis <= 1; axis += 2)
    for (int p = 4; p <= maxe; p++) {
      if (axis == 1 && p > 8) break;
      int64_t n = 1;
      for (int i = 0; i < p; i++) n *= 10;
      char params[512];
      if (axis < 0)
        snprintf(params, sizeof params,
                 "{\"op\": \"sum\", \"inputs\": {\"x\": {\"range\": {\"start\": 1, "
                 "\"stop\": %lld, \"step\": 1}}}}", (long long)n + 1);
      else
        snprintf(params, sizeof params,
                 "{\"op\": \"sum\", \"axis\": 1, \"inputs\": {\"x\": {\"random\": "
                 "{\"shape\": [100, %lld], \"seed\": 3, \"low\": 1, \"high\": 2}}}}",
                 (long long)n / 100);
      direct d;
      memset(&d, 0, sizeof d);
      d.kind = 1;
      d.x = x;
      d.nin = 1;
      d.axis = axis;
      if (axis < 0) {
        d.in[0] = range_array(n);
        d.out = tarray_new(T_F64, 0, NULL);
      } else {
        int64_t sh[2] = {100, n / 100}, o = 100;
        d.in[0] = tarray_new(T_F64, 2, sh);
        for (int64_t i = 0; i < n; i++) ((double *)d.in[0]->data)[i] = 1.0 + (double)(i % 977) / 977;
        d.out = tarray_new(T_F64, 1, &o);
      }
      run_case("reduce", axis < 0 ? "sum" : "sum axis1 [100,n/100]", params, &d,
               (double)n, 8.0 * n, 8.0 * (double)d.out->size);
      tarray_free(d.in[0]);
      tarray_free(d.out);
    }
  expr_free(x);
}

static void matmul_cases(int maxe) {
  static const int64_t ns[5] = {100, 316, 1000, 3162, 10000};
  for (int i = 0; i < 5; i++) {
    int64_t n = ns[i];
    if ((double)n * n > pow(10, maxe) * 1.01) break;
    if (n > 10000) break; /* 3 x 8 GB operands: not in this bench */
    char params[512];
    snprintf(params, sizeof params,
             "{\"a\": {\"random\": {\"shape\": [%lld, %lld], \"seed\": 1}}, "
             "\"b\": {\"random\": {\"shape\": [%lld, %lld], \"seed\": 2}}}",
             (long long)n, (long long)n, (long long)n, (long long)n);
    direct d;
    memset(&d, 0, sizeof d);
    d.kind = 2;
    int64_t sh[2] = {n, n};
    d.in[0] = tarray_new(T_F64, 2, sh);
    d.in[1] = tarray_new(T_F64, 2, sh);
    d.out = tarray_new(T_F64, 2, sh);
    for (int64_t k = 0; k < n * n; k++) {
      ((double *)d.in[0]->data)[k] = 0.5 + (double)(k % 101) / 101;
      ((double *)d.in[1]->data)[k] = 1.5 - (double)(k % 89) / 89;
    }
    memset(d.out->data, 0, (size_t)(n * n) * 8);
    char nm[40];
    snprintf(nm, sizeof nm, "%lldx%lldx%lld", (long long)n, (long long)n, (long long)n);
    run_case("matmul", nm, params, &d, (double)(n * n), 16.0 * n * n, 8.0 * n * n);
    g_rows[g_nrows - 1].blas_ms =
        cublas_direct_ms(n, (const double *)d.in[0]->data, (const double *)d.in[1]->data);
    tarray_free(d.in[0]);
    tarray_free(d.in[1]);
    tarray_free(d.out);
  }
}

/* What a fused kernel costs to make: the first run of a new expression
 * (NVRTC compile), a run that loads the cubin from the disk cache, and a
 * warm run, on 4096 elements. */
static double g_compile_ms, g_disk_ms, g_warm_ms;
static void measure_compile(void) {
  terr e;
  expr *x = NULL;
  expr_compile("sqrt(x*x + 1) * 0.5 - x / 3", &x, &e);
  int64_t n = 4096;
  tarray *in = range_array(n), *out = tarray_new(T_F64, 1, &n);
  const tarray *ins[1] = {in};
  double *slot[3] = {&g_compile_ms, &g_disk_ms, &g_warm_ms};
  for (int k = 0; k < 3; k++) {
    if (k == 1) kcache_reset_memory();
    atomic_int stop;
    job_ctx c;
    ctx_init(&c, &stop, B_CUDA);
    double t0 = t_now_ms();
    gpu_map(0, x, ins, NULL, out, &c, &e);
    *slot[k] = t_now_ms() - t0;
  }
  tarray_free(in);
  tarray_free(out);
  expr_free(x);
}

/* The map kernel's shape, measured: groups of 4 elements per thread per
 * step and streaming accesses (TESSEL_GPU_MAP_GROUPS / _STREAMING), on
 * device-resident inputs of 10^8 elements. */
static char g_variants[2048];
static void map_variants(void) {
  static const char *const ex[2] = {"x**2 + 2*x + 1", "w*x + b"};
  int64_t n = 100000000;
  size_t off = 0;
  tarray *in = range_array(n), *out = tarray_new(T_F64, 1, &n);
  for (int k = 0; k < 2; k++) {
    terr e;
    expr *x = NULL;
    expr_compile(ex[k], &x, &e);
    direct d;
    memset(&d, 0, sizeof d);
    d.kind = 0;
    d.x = x;
    d.nin = expr_ninputs(x);
    for (int i = 0; i < d.nin; i++) d.in[i] = in;
    d.out = out;
    off += (size_t)snprintf(g_variants + off, sizeof g_variants - off, "  %-16s", ex[k]);
    for (int g = 1; g <= 4; g *= 2)
      for (int cs = 0; cs < 2; cs++) {
        char gs[8], css[8];
        snprintf(gs, sizeof gs, "%d", g);
        snprintf(css, sizeof css, "%d", cs);
        setenv("TESSEL_GPU_MAP_GROUPS", gs, 1);
        setenv("TESSEL_GPU_MAP_STREAMING", css, 1);
        double c, w, t[5];
        direct_run(&d, 1, &c, &w);
        for (int i = 0; i < 5; i++) direct_run(&d, 1, &t[i], &w);
        qsort(t, 5, sizeof t[0], cmpd);
        double bw = 8.0 * n * (d.nin + 1) / (t[2] * 1e-3);
        off += (size_t)snprintf(g_variants + off, sizeof g_variants - off,
                                " g%d%s %3.0f%%", g, cs ? "cs" : "  ", 100 * bw / g_copy_bw);
      }
    off += (size_t)snprintf(g_variants + off, sizeof g_variants - off, "\n");
    for (int i = 0; i < 3; i++)
      gpu_resident_drop(i == 0 ? "a_BENCH0000000000000000000"
                        : i == 1 ? "a_BENCH0000000000000000001"
                                 : "a_BENCH0000000000000000002");
    expr_free(x);
  }
  unsetenv("TESSEL_GPU_MAP_GROUPS");
  unsetenv("TESSEL_GPU_MAP_STREAMING");
  tarray_free(in);
  tarray_free(out);
}

static void print_table(void) {
  printf("\nGPU benchmark (%s; %d CPU threads)\n", "device 0", g_threads);
  printf("ceilings: device copy %.0f GB/s (read+write), pinned h2d %.1f GB/s, "
         "d2h %.1f GB/s, both at once %.1f GB/s\n",
         g_copy_bw / 1e9, g_h2d / 1e9, g_d2h / 1e9, g_duplex / 1e9);
  printf("%-6s %-22s %7s | %10s %10s %10s %10s | %6s %7s | %6s %7s | %-6s %s\n",
         "kind", "case", "n", "serial ms", "cpu ms", "cuda e2e", "cuda dev",
         "dev%", "GB/s", "pcie%", "blas%", "auto", "ok");
  int scored = 0, ok = 0;
  for (int i = 0; i < g_nrows; i++) {
    row *r = &g_rows[i];
    double best = INFINITY;
    for (int b = B_SERIAL; b <= B_CUDA; b++)
      if (isfinite(r->ms[b]) && r->ms[b] < best) best = r->ms[b];
    double chosen = r->ms[r->chose];
    int good = isfinite(chosen) ? chosen <= 1.1 * best : 0;
    /* a skipped serial run was predicted > 20 s: never the best */
    if (!isfinite(chosen) && r->chose == B_SERIAL) good = 0;
    scored++;
    ok += good;
    double dev_bw = (r->bytes_in + r->bytes_out) / (r->dev_ms * 1e-3);
    double ideal = r->bytes_in / g_h2d + r->bytes_out / g_d2h;
    char devpct[16] = "-", pcie[16] = "-", blas[16] = "-", gbs[16] = "-";
    if (strcmp(r->kind, "matmul") != 0 && isfinite(r->dev_ms) && r->dev_ms > 0) {
      snprintf(devpct, sizeof devpct, "%.0f%%", 100 * dev_bw / g_copy_bw);
      snprintf(gbs, sizeof gbs, "%.0f", dev_bw / 1e9);
    }
    if (isfinite(r->warm_ms) && r->warm_ms > 0)
      snprintf(pcie, sizeof pcie, "%.0f%%", 100 * ideal / (r->warm_ms * 1e-3));
    if (isfinite(r->blas_ms) && r->dev_ms > 0)
      snprintf(blas, sizeof blas, "%.0f%%", 100 * r->blas_ms / r->dev_ms);
    printf("%-6s %-22.22s %7.0e | %10.3f %10.3f %10.3f %10.3f | %6s %7s | %6s %7s | %-6s %s\n",
           r->kind, r->name, r->n, r->ms[B_SERIAL], r->ms[B_CPU], r->ms[B_CUDA],
           r->dev_ms, devpct, gbs, pcie, blas, tbackend_name(r->chose),
           good ? "yes" : "NO");
  }
  printf("map kernel variants on device, 1e8 elements, %% of copy bandwidth "
         "(gN: N groups of 4 per thread; cs: streaming loads/stores):\n%s",
         g_variants);
  printf("fused kernel for a new expression (4096 elements): first run %.1f ms "
         "(NVRTC compile), from the disk cache %.2f ms, warm %.3f ms\n",
         g_compile_ms, g_disk_ms, g_warm_ms);
  printf("auto within 10%% of the best measured backend: %d of %d cases (%.0f%%)\n",
         ok, scored, scored ? 100.0 * ok / scored : 0);
  printf("dev%%: on-device bytes/s / device copy bandwidth. pcie%%: (in/h2d + "
         "out/d2h, pinned) / warm end-to-end time. blas%%: cuBLAS direct / Tessel "
         "compute phase. cuda e2e: the kind's job run (fresh result memory).\n");
}

int main(int argc, char **argv) {
  int maxe = 9;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--max-exp") == 0 && i + 1 < argc) {
      int64_t v;
      if (t_parse_i64(argv[++i], &v) == 0 && v >= 4 && v <= 9) maxe = (int)v;
    } else if (strcmp(argv[i], "--quick") == 0) {
      maxe = 6;
    }
  }
  char dir[] = "/tmp/tessel-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  gpu_config cfg = {dir, 0.5, 0};
  gpu_configure(&cfg);
  gpu_init();
  if (gpu_count() == 0) {
    printf("SKIPPED: no CUDA device (%s)\n", gpu_unavailable_reason());
    return 0;
  }
  json_t *dj = gpu_devices_json();
  json_t *d0 = json_array_get(json_object_get(dj, "devices"), 0);
  printf("device 0: %s, cc %s, %lld SMs; driver %s, runtime %s\n",
         json_string_value(json_object_get(d0, "name")),
         json_string_value(json_object_get(d0, "compute_capability")),
         (long long)json_integer_value(json_object_get(d0, "multiprocessors")),
         json_string_value(json_object_get(dj, "driver_version")),
         json_string_value(json_object_get(dj, "runtime_version")));
  json_decref(dj);
  long nc = sysconf(_SC_NPROCESSORS_ONLN);
  g_threads = nc > 0 ? (int)nc : 1;
  g_pool = pool_create(g_threads, NULL, NULL);
  terr e;
  terr_clear(&e);
  cm_rates rates;
  double t0 = t_now_ms();
  if (cm_calibrate(&rates, g_threads, &e)) {
    printf("calibration failed: %s\n", e.message);
    return 1;
  }
  printf("calibration (%.0f ms): VM %.3g ops/s x1, %.3g x%d; copy %.3g B/s; "
         "dgemm %.3g flop/s x1; h2d %.3g, d2h %.3g, dev %.3g B/s; cuBLAS %.3g flop/s\n",
         t_now_ms() - t0, rates.vm_ops_1, rates.vm_ops_n, g_threads, rates.copy_n,
         cm_rate_get(&rates, "gemm_1"), rates.h2d, rates.d2h, rates.dev_bw, cm_rate_get(&rates, "gpu_flops"));
  cm_model_init(&g_model, &rates);
  measure_ceilings();
  measure_compile();
  map_variants();
  map_cases(maxe);
  reduce_cases(maxe);
  matmul_cases(maxe);
  print_table();
  pool_destroy(g_pool);
  gpu_shutdown();
  return 0;
}
#endif /* TESSEL_HAVE_CUDA */
