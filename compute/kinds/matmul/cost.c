/* compute/kinds/matmul/cost.c — matmul's part of the cost model (kinds.h,
 * kind_cost) and the two rates it measures itself.
 *
 * Work is flops (2 m k n). On the CPU a product runs at OpenBLAS's dgemm
 * rate on one thread (gemm_1, measured on 192^3; matmul.c keeps OpenBLAS
 * single-threaded and spreads panels itself), on the pool at that rate
 * times the threads, scaled by how well the VM's work scaled over them
 * (kind_machine.par_eff). Its heap inputs are re-read from cache inside
 * that rate (KIND_COST_HEAP_IN_RATE). On a GPU cuBLAS does the flops at
 * gpu_flops (measured: dgemm 1024^3 through gpu_matmul's compute phase)
 * while its bytes pass through device memory once; the copies in, the
 * product and the copies out follow each other (KIND_COST_GPU_PHASED).
 *
 * Threads: matmul_calibrate runs on the calibration's thread (it sets
 * OpenBLAS to one thread, as matmul.c does); the terms are pure.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/kinds.h"
#include "util/util.h"

enum { MM_GEMM_1 = 0, MM_GPU_FLOPS };

static double mm_work(const job_estimate *est) {
  return est->work > 0 && isfinite(est->work) ? est->work : 0;
}

static double mm_cpu_s(const job_estimate *est, int all,
                       const kind_machine *m) {
  double per = m->rate[MM_GEMM_1];
  double par = per * (m->threads > 0 ? m->threads : 1) * m->par_eff;
  return mm_work(est) / kind_rate_or_tiny(all ? par : per);
}

static double mm_gpu_s(const job_estimate *est, double bytes, double out,
                       const kind_machine *m) {
  return mm_work(est) / kind_rate_or_tiny(m->rate[MM_GPU_FLOPS]) +
         bytes / kind_rate_or_tiny(m->dev_bw);
}

/* dgemm 192^3 on one thread, the best of three after a warm-up; 10
 * GFLOP/s when there is no memory to measure. */
static double measure_gemm(void) {
  enum { N = 192 };
  double *a = malloc(sizeof(double) * N * N),
         *b = malloc(sizeof(double) * N * N),
         *c = malloc(sizeof(double) * N * N);
  double rate = 1e10;
  if (a && b && c) {
    for (int i = 0; i < N * N; i++) {
      a[i] = 1.0 + (i % 7) * 0.125;
      b[i] = 2.0 - (i % 5) * 0.25;
    }
    openblas_set_num_threads(1);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, a, N,
                b, N, 0.0, c, N);
    double t0 = t_now_ms();
    for (int k = 0; k < 3; k++)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, a, N,
                  b, N, 0.0, c, N);
    double s = (t_now_ms() - t0) * 1e-3;
    if (s > 0) rate = 3 * 2.0 * N * N * N / s;
  }
  free(a);
  free(b);
  free(c);
  return rate;
}

static int alloc_none(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  return terr_set(e, T_EINTERNAL, "", -1, "not used");
}

/* cuBLAS dgemm 1024^3 on device 0 through gpu_matmul's compute phase (the
 * first call creates the handle and warms up); 10 TFLOP/s when it fails. */
static double measure_gpu_gemm(void) {
  int64_t sh[2] = {1024, 1024};
  tarray *a = tarray_new(T_F64, 2, sh), *c = tarray_new(T_F64, 2, sh);
  double rate = 1e13;
  if (a && c) {
    for (int64_t i = 0; i < a->size; i++)
      ((double *)a->data)[i] = 1.0 + (i % 9) * 0.0625;
    job_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.result_alloc = alloc_none;
    for (int k = 0; k < 2; k++) {
      terr e;
      terr_clear(&e);
      ctx.t_compute = 0;
      if (gpu_matmul(0, a, a, NULL, 0, 0, NULL, c, &ctx, &e) != 0) break;
      if (k == 1 && ctx.t_compute > 0)
        rate = 2.0 * 1024 * 1024 * 1024 / (ctx.t_compute * 1e-3);
    }
  }
  tarray_free(a);
  tarray_free(c);
  return rate;
}

static void matmul_calibrate(double *rate, int threads, int gpus) {
  rate[MM_GEMM_1] = measure_gemm();
  if (gpus > 0) rate[MM_GPU_FLOPS] = measure_gpu_gemm();
}

static const kind_rate mm_rates[] = {
    [MM_GEMM_1] = {"gemm_1", 0},       /* OpenBLAS dgemm flops/s, one thread */
    [MM_GPU_FLOPS] = {"gpu_flops", 1}, /* cuBLAS dgemm flops/s */
};

const kind_cost kind_matmul_cost = {
    .unit = "flops",
    .size_words = "m*k*n",
    .unit_ns = 0.05, /* ~20 GFLOP/s BLAS on one core */
    .flags = KIND_COST_HEAP_IN_RATE | KIND_COST_GPU_PHASED,
    .cpu_s = mm_cpu_s,
    .gpu_s = mm_gpu_s,
    .rates = mm_rates,
    .nrates = 2,
    .calibrate = matmul_calibrate,
};
