/* bench_matmul.c — matmul GFLOP/s: Tessel's kind against OpenBLAS called
 * directly, in the same run.
 *
 * For each shape (squares, and the seeds' y = W @ X + b with b a column),
 * the inputs are built once from {"random"} values; then, best of REPS
 * rounds, each running the four variants in turn:
 *   tessel serial   kind_matmul_ops.run(B_SERIAL): one gemm on one thread
 *   openblas 1T     cblas_dgemm with openblas_set_num_threads(1), + bias
 *   tessel cpu      kind_matmul_ops.run(B_CPU), 2 threads, row panels
 *   openblas 2T     cblas_dgemm with openblas_set_num_threads(2), + bias
 * Every variant allocates its output each time (as a job does) and adds
 * the bias in a plain loop. Ratios: tessel / openblas at equal threads, and
 * cpu / serial. Usage: bench_matmul [reps] [max_n]  (defaults 3, 2000).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/kinds.h"
#include "util/pool.h"
#include "util/util.h"

static int alloc_heap(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  *out = tarray_new(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static const tenv env = {.owner = "", .max_elems = INT64_MAX / 16};

static tarray *gen(int64_t r, int64_t c, int seed) {
  char text[200];
  snprintf(text, sizeof text, "{\"random\": {\"shape\": [%lld, %lld], \"seed\": %d}}",
           (long long)r, (long long)c, seed);
  json_t *v = json_loads(text, 0, NULL);
  tarray *a = NULL;
  terr e;
  arrayval_resolve(&env, v, "x", T_F64, &a, &e);
  json_decref(v);
  return a;
}

/* OpenBLAS directly, with its own threads; best time in ms. */
static double direct(const tarray *A, const tarray *B, const tarray *bias,
                     int threads, int reps) {
  int64_t m = A->shape[0], k = A->shape[1], n = B->shape[1];
  openblas_set_num_threads(threads);
  double best = 1e300;
  for (int r = 0; r < reps; r++) {
    double t0 = t_now_ms();
    double *C = aligned_alloc(64, (size_t)(m * n) * sizeof(double) + 64);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n,
                (blasint)k, 1.0, A->data, (blasint)k, B->data, (blasint)n, 0.0, C,
                (blasint)n);
    if (bias) {
      const double *b = bias->data;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) C[i * n + j] += b[i];
    }
    double t = t_now_ms() - t0;
    free(C);
    if (t < best) best = t;
  }
  openblas_set_num_threads(1); /* what the kind expects */
  return best;
}

static double tessel(void *plan, tbackend b, pool *p, int reps) {
  double best = 1e300;
  atomic_int stop = 0;
  for (int r = 0; r < reps; r++) {
    job_ctx ctx = {.pool = p, .threads = b == B_CPU ? 2 : 1, .stop = &stop,
                   .result_alloc = alloc_heap};
    tarray *out = NULL;
    terr e;
    double t0 = t_now_ms();
    int rc = kind_matmul_ops.run(plan, b, &ctx, &out, &e);
    double t = t_now_ms() - t0;
    if (rc) {
      fprintf(stderr, "run failed: %s\n", e.message);
      exit(1);
    }
    tarray_free(out);
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int reps = 3;
  int64_t max_n = 2000;
  if (argc > 1) {
    int64_t v;
    if (t_parse_i64(argv[1], &v) == 0 && v > 0 && v < 100) reps = (int)v;
  }
  if (argc > 2) t_parse_i64(argv[2], &max_n);
  struct { int64_t m, k, n; int bias; const char *what; } shapes[] = {
      {500, 500, 500, 0, "square"},       {1000, 1000, 1000, 0, "square"},
      {1000, 1000, 1000, 1, "W@X+b"},     {2000, 2000, 2000, 0, "square"},
      {2000, 2000, 2000, 1, "W@X+b"},     {4000, 1000, 2000, 1, "W@X+b"},
      {3000, 3000, 3000, 1, "W@X+b"},
  };
  pool *p = pool_create(2, NULL, NULL);
  /* warm OpenBLAS up (buffers, thread start) */
  tarray *w = gen(200, 200, 1);
  direct(w, w, NULL, 2, 2);
  direct(w, w, NULL, 1, 2);
  tarray_free(w);
  printf("matmul float64, best of %d, GFLOP/s (2 m n k / time)\n", reps);
  printf("ratio = Tessel GFLOP/s / OpenBLAS GFLOP/s at the same thread count\n");
  printf("%-7s %-16s | %8s %8s %6s | %8s %8s %6s | %7s\n", "form", "m x k x n",
         "ts-ser", "ob-1T", "ratio", "ts-cpu2", "ob-2T", "ratio", "cpu/ser");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t m = shapes[s].m, k = shapes[s].k, n = shapes[s].n;
    if (m > max_n || n > max_n || k > max_n) continue;
    char text[400];
    int len = snprintf(text, sizeof text,
                       "{\"a\": {\"random\": {\"shape\": [%lld, %lld], \"seed\": 1}}, "
                       "\"b\": {\"random\": {\"shape\": [%lld, %lld], \"seed\": 2}}",
                       (long long)m, (long long)k, (long long)k, (long long)n);
    if (shapes[s].bias)
      len += snprintf(text + len, sizeof text - (size_t)len,
                      ", \"bias\": {\"random\": {\"shape\": [%lld, 1], \"seed\": 3}}",
                      (long long)m);
    snprintf(text + len, sizeof text - (size_t)len, "}");
    json_t *params = json_loads(text, 0, NULL);
    void *plan = NULL;
    terr e;
    terr_clear(&e);
    if (!params || kind_matmul_ops.prepare(params, &env, &plan, &e) != 0) {
      fprintf(stderr, "prepare failed: %s\n", e.message);
      return 1;
    }
    tarray *A = gen(m, k, 1), *B = gen(k, n, 2), *bias = NULL;
    if (shapes[s].bias) bias = gen(m, 1, 3);
    double flop = 2.0 * (double)m * (double)n * (double)k;
    /* interleaved, so that a busy machine disturbs every variant alike */
    double ts = 1e300, o1 = 1e300, tc = 1e300, o2 = 1e300;
    for (int r = 0; r < reps; r++) {
      ts = fmin(ts, tessel(plan, B_SERIAL, p, 1));
      o1 = fmin(o1, direct(A, B, bias, 1, 1));
      tc = fmin(tc, tessel(plan, B_CPU, p, 1));
      o2 = fmin(o2, direct(A, B, bias, 2, 1));
    }
    char dims[40];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)m, (long long)k, (long long)n);
    printf("%-7s %-16s | %8.1f %8.1f %6.2f | %8.1f %8.1f %6.2f | %7.2f\n",
           shapes[s].what, dims, flop / ts / 1e6, flop / o1 / 1e6, o1 / ts,
           flop / tc / 1e6, flop / o2 / 1e6, o2 / tc, ts / tc);
    fflush(stdout);
    tarray_free(A);
    tarray_free(B);
    tarray_free(bias);
    kind_matmul_ops.release(plan);
    json_decref(params);
  }
  pool_destroy(p);
  return 0;
}
