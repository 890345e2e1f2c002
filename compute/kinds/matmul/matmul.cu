/* matmul.cu — gpu_matmul: out = op(a) @ op(b) + bias with cuBLAS.
 *
 * Tessel's arrays are row-major and cuBLAS is column-major. A row-major
 * matrix read as column-major is its transpose, so C = A·B (row-major) is
 * computed as C^T = B^T·A^T (column-major) by passing b first and a second
 * with the dimensions swapped: no data is transposed or copied. transpose_a
 * / transpose_b flip the corresponding operation flag.
 *
 * The bias is fused into the product: a kernel first fills C with the bias
 * broadcast to C's shape (any NumPy-broadcastable shape: scalar, [n],
 * [m, 1], [m, n], with batch dimensions), then the GEMM runs with beta = 1,
 * so that C = A·B + C in one pass over C. Without a bias beta is 0.
 *
 * Batches (ndim > 2, NumPy matmul semantics): when each operand's batch
 * dimensions equal the result's or are absent, one strided-batched GEMM
 * (stride 0 for an absent side); other broadcast patterns run one GEMM per
 * batch. 1-D operands follow NumPy (a: [k] -> [1, k]; b: [k] -> [k, 1]);
 * the caller has already given `out` its shape.
 *
 * Data: operands that are uploaded arrays (ids) are taken from / kept in
 * the resident cache; others go up through the pinned slots. The whole
 * problem must fit on the device: beyond 90% of its memory the job fails
 * with T_ETOOLARGE (too large for the device) before anything is copied.
 * Arithmetic: DGEMM / SGEMM in the default math mode (no TF32), so float32
 * results are true float32 products.
 *
 * Threads: runs on the device's worker (or a compare run) under the
 * device's lock; the cuBLAS handle is per device.
 */
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gpu/devctx.h"
#include "compute/kinds/gpujob.h"
#include "compute/kinds/matmul/matmul_cuda.h"
#include "util/util.h"

#define MM_WORKSPACE ((size_t)32 << 20)

static int blas_fail(terr *e, cublasStatus_t s, const char *what, int line) {
  terr_code code = s == CUBLAS_STATUS_ALLOC_FAILED ? T_ENOMEM : T_EDEVICE;
  return terr_set(e, code, "", -1, "cuBLAS error in %s (matmul.cu:%d): %s",
                  what, line, cublasGetStatusString(s));
}
#define BLAS_TRY(call)                                                   \
  do {                                                                   \
    cublasStatus_t bs_ = (call);                                         \
    if (bs_ != CUBLAS_STATUS_SUCCESS) {                                  \
      rc = blas_fail(e, bs_, #call, __LINE__);                           \
      goto fail;                                                         \
    }                                                                    \
  } while (0)

void matmul_destroy(devctx *d) {
  if (d->cublas) cublasDestroy((cublasHandle_t)d->cublas);
  d->cublas = NULL;
  if (d->cublas_ws) cudaFree(d->cublas_ws);
  d->cublas_ws = NULL;
}

static int handle_of(devctx *d, cublasHandle_t *h, terr *e) {
  int rc = 0;
  DEV_ASSERT_HELD(d); /* the handle and its workspace are the device's */
  if (!d->cublas) {
    /* The stream and workspace are set once: cublasSetStream would reset
     * the workspace to cuBLAS's own pool on every call. */
    cublasHandle_t nh = NULL;
    BLAS_TRY(cublasCreate(&nh));
    d->cublas = nh;
    BLAS_TRY(cublasSetStream(nh, d->s_comp));
    if (cudaMalloc(&d->cublas_ws, MM_WORKSPACE) == cudaSuccess) {
      d->cublas_ws_bytes = MM_WORKSPACE;
      BLAS_TRY(cublasSetWorkspace(nh, d->cublas_ws, d->cublas_ws_bytes));
    } else {
      (void)cudaGetLastError(); /* cuBLAS then uses its own */
      d->cublas_ws = NULL;
    }
  }
  *h = (cublasHandle_t)d->cublas;
  return 0;
fail:
  return rc;
}

/* ---- bias broadcast ---------------------------------------------------- */

typedef struct bias_map {
  int ndim;
  int64_t shape[T_MAXDIM];  /* out's shape */
  int64_t stride[T_MAXDIM]; /* bias element strides, 0 where broadcast */
} bias_map;

template <typename T>
__global__ void mm_fill_bias(T *c, const T *bias, int64_t n, int64_t base,
                             bias_map bm) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rem = base + i, off = 0; /* c[i] is the result's element base + i */
    for (int dd = bm.ndim - 1; dd >= 0; dd--) {
      int64_t q = rem / bm.shape[dd];
      off += (rem - q * bm.shape[dd]) * bm.stride[dd];
      rem = q;
    }
    c[i] = bias[off];
  }
}

/* Element strides of `a` broadcast to `shape` (right-aligned). */
static int broadcast_strides(const tarray *a, int ndim, const int64_t *shape,
                             int64_t *stride) {
  if (a->ndim > ndim) return -1;
  int64_t s = 1;
  for (int i = ndim - 1, j = a->ndim - 1; i >= 0; i--, j--) {
    if (j < 0) {
      stride[i] = 0;
      continue;
    }
    if (a->shape[j] == shape[i]) {
      stride[i] = shape[i] == 1 ? 0 : s;
    } else if (a->shape[j] == 1) {
      stride[i] = 0;
    } else {
      return -1;
    }
    s *= a->shape[j];
  }
  return 0;
}

/* ---- operands ---------------------------------------------------------- */

/* Put operand x (converted to dt when needed) on the device: resident when
 * it has an id and fits, else uploaded into *tmp. */
static int operand_up(devctx *d, const tarray *x, const char *id, tdtype dt,
                      const void **dptr, devbuf *tmp, const gpu_job *job,
                      terr *e) {
  int rc = 0;
  tarray *conv = NULL;
  if (x->dtype != dt) {
    conv = tarray_convert(x, dt);
    if (!conv) return terr_set(e, T_ENOMEM, "", -1, "no memory to convert");
    x = conv;
    id = NULL; /* a converted copy is not the uploaded bytes */
  }
  size_t bytes = (size_t)x->size * tdtype_size(dt);
  *dptr = NULL;
  if (bytes == 0) bytes = tdtype_size(dt);
  if (id) T_TRY(resident_acquire(d, id, x->data, bytes, (int)dt, dptr,
                                 job->t_h2d, e));
  if (!*dptr) {
    T_TRY(devmem_alloc(d, bytes, tmp, e));
    double t0 = t_now_ms();
    if (x->size > 0) T_TRY(stage_upload(d, tmp->ptr, x->data, bytes, e));
    *job->t_h2d += t_now_ms() - t0;
    *dptr = tmp->ptr;
  }
fail:
  tarray_free(conv);
  return rc;
}

/* One GEMM (or strided batch) on row-major data; see the file comment.
 * The 32-bit entry points when every dimension fits an int (cuBLAS picks
 * its kernels the same way then as for callers of the classic API), the
 * _64 ones otherwise. */
static cublasStatus_t gemm_ld(cublasHandle_t h, tdtype dt, int ta, int tb,
                              int64_t m, int64_t n, int64_t k, const void *A,
                              int64_t lda, const void *B, void *C,
                              int64_t batch, int64_t sa, int64_t sb,
                              int64_t sc, double beta) {
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int64_t ldb = tb ? k : n;
  const int64_t big = 0x7fffffff;
  int small = m <= big && n <= big && k <= big && lda <= big && ldb <= big &&
              batch <= big;
  const double one = 1.0, bt = beta;
  const float onef = 1.0f, btf = (float)beta;
  if (dt == T_F64) {
    const double *a = (const double *)A, *b = (const double *)B;
    double *c = (double *)C;
    if (batch == 1 && small)
      return cublasDgemm(h, opb, opa, (int)n, (int)m, (int)k, &one, b, (int)ldb,
                         a, (int)lda, &bt, c, (int)n);
    if (batch == 1)
      return cublasDgemm_64(h, opb, opa, n, m, k, &one, b, ldb, a, lda, &bt, c, n);
    if (small)
      return cublasDgemmStridedBatched(h, opb, opa, (int)n, (int)m, (int)k, &one,
                                       b, (int)ldb, sb, a, (int)lda, sa, &bt, c,
                                       (int)n, sc, (int)batch);
    return cublasDgemmStridedBatched_64(h, opb, opa, n, m, k, &one, b, ldb, sb,
                                        a, lda, sa, &bt, c, n, sc, batch);
  }
  const float *a = (const float *)A, *b = (const float *)B;
  float *c = (float *)C;
  if (batch == 1 && small)
    return cublasSgemm(h, opb, opa, (int)n, (int)m, (int)k, &onef, b, (int)ldb,
                       a, (int)lda, &btf, c, (int)n);
  if (batch == 1)
    return cublasSgemm_64(h, opb, opa, n, m, k, &onef, b, ldb, a, lda, &btf, c, n);
  if (small)
    return cublasSgemmStridedBatched(h, opb, opa, (int)n, (int)m, (int)k, &onef,
                                     b, (int)ldb, sb, a, (int)lda, sa, &btf, c,
                                     (int)n, sc, (int)batch);
  return cublasSgemmStridedBatched_64(h, opb, opa, n, m, k, &onef, b, ldb, sb, a,
                                      lda, sa, &btf, c, n, sc, batch);
}

/* The whole op(A): its leading dimension is its stored row's length. */
static cublasStatus_t gemm(cublasHandle_t h, tdtype dt, int ta, int tb,
                           int64_t m, int64_t n, int64_t k, const void *A,
                           const void *B, void *C, int64_t batch, int64_t sa,
                           int64_t sb, int64_t sc, double beta) {
  return gemm_ld(h, dt, ta, tb, m, n, k, A, ta ? m : k, B, C, batch, sa, sb,
                 sc, beta);
}

int cuda_matmul(int dev, const tarray *a, const tarray *b, const tarray *bias,
                int transpose_a, int transpose_b, const char *const ids[3],
                tarray *out, const gpu_job *job, terr *e) {
  devctx *d = NULL;
  int rc = dev_begin(dev, &d, e);
  if (rc) return rc;
  tdtype dt = out->dtype;
  size_t es = tdtype_size(dt);
  devbuf ta_buf = {NULL, 0}, tb_buf = {NULL, 0}, tbias = {NULL, 0},
         cbuf = {NULL, 0};
  const void *A = NULL, *B = NULL, *Bias = NULL;
  cublasHandle_t h = NULL;
  /* Matrix dimensions, NumPy rules for 1-D operands. */
  int a1 = a->ndim == 1, b1 = b->ndim == 1;
  int64_t ar = a1 ? 1 : a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
  int64_t br = b1 ? b->shape[0] : b->shape[b->ndim - 2],
          bc = b1 ? 1 : b->shape[b->ndim - 1];
  if (a1) transpose_a = 0;
  if (b1) transpose_b = 0;
  int64_t m = transpose_a ? ac : ar, k = transpose_a ? ar : ac;
  int64_t kb = transpose_b ? bc : br, n = transpose_b ? br : bc;
  int64_t batch = (m * n != 0) ? out->size / (m * n) : 0;
  int64_t a_batch = a->ndim > 2 ? a->size / (ar * ac != 0 ? ar * ac : 1) : 1;
  int64_t b_batch = b->ndim > 2 ? b->size / (br * bc != 0 ? br * bc : 1) : 1;
  if (a->ndim < 1 || b->ndim < 1 || k != kb || (m * n != 0 && out->size % (m * n) != 0)) {
    rc = terr_set(e, T_EINVAL, "params", -1,
                  "matmul shapes do not fit (k %lld vs %lld)", (long long)k,
                  (long long)kb);
    goto fail;
  }
  {
    double need = (double)es * ((double)a_batch * m * k +
                                (double)b_batch * k * n + (double)out->size) +
                  (bias ? (double)bias->size * es : 0);
    if (need > 0.9 * (double)d->mem_total) {
      rc = terr_set(e, T_ETOOLARGE, "params", -1,
                    "matmul needs %.3g GB of GPU memory; device %d has %.3g GB",
                    need / 1e9, dev, (double)d->mem_total / 1e9);
      goto fail;
    }
  }
  /* Progress: one unit, counted by the kind (compute/kinds/matmul/matmul.c). */
  if (out->size == 0) goto done;
  T_TRY(operand_up(d, a, ids ? ids[0] : NULL, dt, &A, &ta_buf, job, e));
  T_TRY(operand_up(d, b, ids ? ids[1] : NULL, dt, &B, &tb_buf, job, e));
  if (bias) T_TRY(operand_up(d, bias, ids ? ids[2] : NULL, dt, &Bias, &tbias,
                             job, e));
  T_TRY(devmem_alloc(d, (size_t)out->size * es, &cbuf, e));
  T_TRY(handle_of(d, &h, e));
  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  if (Bias) {
    bias_map bm;
    memset(&bm, 0, sizeof bm);
    bm.ndim = out->ndim;
    memcpy(bm.shape, out->shape, sizeof bm.shape);
    if (broadcast_strides(bias, out->ndim, out->shape, bm.stride)) {
      rc = terr_set(e, T_EINVAL, "params.bias", -1,
                    "bias does not broadcast to the result");
      goto fail;
    }
    int grid = d->sms * 8;
    if (dt == T_F64)
      mm_fill_bias<double><<<grid, 256, 0, d->s_comp>>>(
          (double *)cbuf.ptr, (const double *)Bias, out->size, 0, bm);
    else
      mm_fill_bias<float><<<grid, 256, 0, d->s_comp>>>(
          (float *)cbuf.ptr, (const float *)Bias, out->size, 0, bm);
    CU_TRY(cudaGetLastError());
  }
  {
    double beta = Bias ? 1.0 : 0.0;
    int64_t sa = a_batch > 1 ? m * k : 0, sb = b_batch > 1 ? k * n : 0;
    int uniform = (a_batch == 1 || a_batch == batch) &&
                  (b_batch == 1 || b_batch == batch);
    if (uniform) {
      /* The result buffer holds the batch of m x n matrices, back to back. */
      T_ASSERT(batch * m * n == out->size);
      BLAS_TRY(gemm(h, dt, transpose_a, transpose_b, m, n, k, A, B, cbuf.ptr,
                    batch, sa, sb, m * n, beta));
    } else {
      /* General batch broadcasting: one GEMM per result matrix. */
      int bnd = out->ndim - 2;
      tarray ash = *a, bsh = *b;
      ash.ndim = a->ndim > 2 ? a->ndim - 2 : 0;
      bsh.ndim = b->ndim > 2 ? b->ndim - 2 : 0;
      int64_t sta[T_MAXDIM], stb[T_MAXDIM];
      if (broadcast_strides(&ash, bnd, out->shape, sta) ||
          broadcast_strides(&bsh, bnd, out->shape, stb)) {
        rc = terr_set(e, T_EINVAL, "params", -1,
                      "matmul batch dimensions do not broadcast");
        goto fail;
      }
      for (int64_t bi = 0; bi < batch; bi++) {
        if ((rc = job->stopped(job->ctx)) != 0) {
          terr_set(e, (terr_code)rc, "", -1, "stopped");
          goto fail;
        }
        int64_t rem = bi, oa = 0, ob = 0;
        for (int dd = bnd - 1; dd >= 0; dd--) {
          int64_t q = rem / out->shape[dd], r = rem - q * out->shape[dd];
          oa += r * sta[dd];
          ob += r * stb[dd];
          rem = q;
        }
        BLAS_TRY(gemm(h, dt, transpose_a, transpose_b, m, n, k,
                      (const char *)A + (size_t)(oa * m * k) * es,
                      (const char *)B + (size_t)(ob * k * n) * es,
                      (char *)cbuf.ptr + (size_t)(bi * m * n) * es, 1, 0, 0,
                      0, beta));
      }
    }
  }
  CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
  /* The result's pages in (stage.cu) while the GEMM runs: the gang is
   * free once the operands are up, and the prefault (~15 GB/s) no longer
   * adds to the compute. Only what it takes beyond the GEMM is d2h's. */
  {
    double pre = 0;
    stage_prefault(d, out, &pre);
    CU_TRY(cudaEventSynchronize(d->ev_b));
    double gemm = dev_event_ms(d->ev_a, d->ev_b);
    *job->t_compute += gemm;
    if (pre > gemm) *job->t_d2h += pre - gemm;
  }
  {
    double t0 = t_now_ms();
    T_TRY(stage_download(d, out->data, cbuf.ptr, (size_t)out->size * es, e));
    *job->t_d2h += t_now_ms() - t0;
  }
  if (job && job->keep_as) /* for a chained job (resident.cu) */
    resident_adopt(d, job->keep_as, (int)dt, (size_t)out->size * es, &cbuf);
done:
fail:
  devmem_free(d, &ta_buf);
  devmem_free(d, &tb_buf);
  devmem_free(d, &tbias);
  devmem_free(d, &cbuf);
  dev_end(d, rc);
  return rc;
}

/* ---- the lane session (matmul_cuda.h) ---------------------------------- */

struct mm_lane {
  devctx *d;
  mm_lane_args x;
  tdtype dt;
  size_t es;
  int64_t m, n, k;
  devbuf abuf, bbuf, biasbuf, cbuf;
  const void *A, *B, *Bias;
  bias_map bm;
  cublasHandle_t h;
  cudaEvent_t done[MM_LANE_HOLD]; /* block (nl % HOLD)'s GEMM done */
  int64_t br0[MM_LANE_HOLD], br1[MM_LANE_HOLD];
  cudaEvent_t t0, t1; /* first GEMM queued; last GEMM done */
  int have_ev;
  int64_t nl, nf, rows; /* blocks launched, finished; rows written */
  double h2d, d2h;
};

extern "C" int cuda_mm_lane_open(int dev, const mm_lane_args *x, mm_lane **out,
                                 terr *e) {
  *out = NULL;
  mm_lane *L = (mm_lane *)calloc(1, sizeof *L);
  if (!L) return terr_set(e, T_ENOMEM, "", -1, "no memory for a lane");
  int rc = dev_begin(dev, &L->d, e);
  if (rc) {
    free(L);
    return rc;
  }
  *out = L; /* from here on, close ends it on every path */
  devctx *d = L->d;
  L->x = *x;
  L->dt = x->out->dtype;
  L->es = tdtype_size(L->dt);
  const tarray *a = x->a, *b = x->b;
  L->m = x->ta ? a->shape[1] : a->shape[0];
  L->k = x->ta ? a->shape[0] : a->shape[1];
  L->n = x->tb ? b->shape[0] : b->shape[1];
  int64_t kb = x->tb ? b->shape[1] : b->shape[0];
  gpu_job up;
  memset(&up, 0, sizeof up);
  up.t_h2d = &L->h2d;
  if (a->ndim != 2 || b->ndim != 2 || x->out->ndim != 2 || kb != L->k ||
      x->out->shape[0] != L->m || x->out->shape[1] != L->n)
    return terr_set(e, T_EINVAL, "params", -1,
                    "a lane takes 2-D operands that fit (k %lld vs %lld)",
                    (long long)L->k, (long long)kb);
  {
    double need = (double)L->es * ((double)a->size + (double)b->size +
                                   (double)x->out->size +
                                   (x->bias ? (double)x->bias->size : 0));
    if (need > 0.9 * (double)d->mem_total)
      return terr_set(e, T_ETOOLARGE, "params", -1,
                      "matmul needs %.3g GB of GPU memory; device %d has "
                      "%.3g GB",
                      need / 1e9, dev, (double)d->mem_total / 1e9);
  }
  L->have_ev = 1; /* close destroys the ones made (calloc: NULL else) */
  for (int i = 0; i < MM_LANE_HOLD; i++)
    CU_TRY(cudaEventCreateWithFlags(&L->done[i], cudaEventDisableTiming));
  CU_TRY(cudaEventCreateWithFlags(&L->t0, cudaEventDefault));
  CU_TRY(cudaEventCreateWithFlags(&L->t1, cudaEventDefault));
  T_TRY(stage_ensure(d, e));
  T_TRY(operand_up(d, a, x->ids[0], L->dt, &L->A, &L->abuf, &up, e));
  T_TRY(operand_up(d, b, x->ids[1], L->dt, &L->B, &L->bbuf, &up, e));
  if (x->bias) {
    T_TRY(operand_up(d, x->bias, x->ids[2], L->dt, &L->Bias, &L->biasbuf, &up,
                     e));
    memset(&L->bm, 0, sizeof L->bm);
    L->bm.ndim = x->out->ndim;
    memcpy(L->bm.shape, x->out->shape, sizeof L->bm.shape);
    if (broadcast_strides(x->bias, x->out->ndim, x->out->shape, L->bm.stride))
      return terr_set(e, T_EINVAL, "params.bias", -1,
                      "bias does not broadcast to the result");
  }
  T_TRY(devmem_alloc(d, (size_t)x->out->size * L->es, &L->cbuf, e));
  T_TRY(handle_of(d, &L->h, e));
fail:
  return rc;
}

extern "C" void cuda_mm_lane_prefault(mm_lane *L, int rank, int nlive) {
  /* a warm mapping too (its view has map_warm 0: matmul.c, view2_out) */
  stage_prefault_share(L->d, L->x.out, rank, nlive, &L->d2h);
}

extern "C" int cuda_mm_lane_launch(mm_lane *L, int64_t r0, int64_t r1,
                                   terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int slot = (int)(L->nl % MM_LANE_HOLD);
  size_t es = L->es;
  T_ASSERT(L->nl - L->nf < MM_LANE_HOLD && 0 <= r0 && r0 < r1 && r1 <= L->m);
  CU_TRY(cudaSetDevice(d->ordinal));
  if (L->nl == 0) CU_TRY(cudaEventRecord(L->t0, d->s_comp));
  {
    void *C = (char *)L->cbuf.ptr + (size_t)(r0 * L->n) * es;
    int64_t rows = r1 - r0;
    if (L->Bias) {
      int grid = d->sms * 8;
      if (L->dt == T_F64)
        mm_fill_bias<double><<<grid, 256, 0, d->s_comp>>>(
            (double *)C, (const double *)L->Bias, rows * L->n, r0 * L->n,
            L->bm);
      else
        mm_fill_bias<float><<<grid, 256, 0, d->s_comp>>>(
            (float *)C, (const float *)L->Bias, rows * L->n, r0 * L->n,
            L->bm);
      CU_TRY(cudaGetLastError());
    }
    /* rows r0.. of op(A): of A itself, or columns r0.. of a transposed A
     * (the stored row's length stays the leading dimension) */
    const char *A = (const char *)L->A +
                    (size_t)(L->x.ta ? r0 : r0 * L->k) * es;
    BLAS_TRY(gemm_ld(L->h, L->dt, L->x.ta, L->x.tb, rows, L->n, L->k, A,
                     L->x.ta ? L->m : L->k, L->B, C, 1, 0, 0, 0,
                     L->Bias ? 1.0 : 0.0));
  }
  CU_TRY(cudaEventRecord(L->done[slot], d->s_comp));
  CU_TRY(cudaEventRecord(L->t1, d->s_comp));
  L->br0[slot] = r0;
  L->br1[slot] = r1;
  L->nl++;
fail:
  return rc;
}

extern "C" int cuda_mm_lane_finish(mm_lane *L, int64_t r0, int64_t r1,
                                   terr *e) {
  int rc = 0;
  devctx *d = L->d;
  int slot = (int)(L->nf % MM_LANE_HOLD);
  size_t off = (size_t)(r0 * L->n) * L->es, bytes = (size_t)((r1 - r0) * L->n) * L->es;
  /* the oldest launched block, and only it */
  T_ASSERT(L->nf < L->nl && L->br0[slot] == r0 && L->br1[slot] == r1);
  CU_TRY(cudaSetDevice(d->ordinal));
  CU_TRY(cudaEventSynchronize(L->done[slot]));
  {
    double t0 = t_now_ms();
    T_TRY(stage_download(d, (char *)L->x.out->data + off,
                         (const char *)L->cbuf.ptr + off, bytes, e));
    L->d2h += t_now_ms() - t0;
  }
  L->rows += r1 - r0;
  L->nf++;
fail:
  return rc;
}

extern "C" void cuda_mm_lane_close(mm_lane *L, int rc, double *t_h2d,
                                   double *t_compute, double *t_d2h) {
  if (!L) return;
  devctx *d = L->d;
  (void)cudaSetDevice(d->ordinal);
  (void)cudaStreamSynchronize(d->s_comp);
  if (rc == 0 && L->nl > 0 && t_compute) *t_compute += dev_event_ms(L->t0, L->t1);
  if (t_h2d) *t_h2d += L->h2d;
  if (t_d2h) *t_d2h += L->d2h;
  if (rc == 0 && L->x.keep_as && L->rows == L->m && L->nf == L->nl)
    resident_adopt(d, L->x.keep_as, (int)L->dt,
                   (size_t)L->x.out->size * L->es, &L->cbuf);
  devmem_free(d, &L->abuf);
  devmem_free(d, &L->bbuf);
  devmem_free(d, &L->biasbuf);
  devmem_free(d, &L->cbuf);
  if (L->have_ev) {
    for (int i = 0; i < MM_LANE_HOLD; i++)
      if (L->done[i]) (void)cudaEventDestroy(L->done[i]);
    if (L->t0) (void)cudaEventDestroy(L->t0);
    if (L->t1) (void)cudaEventDestroy(L->t1);
  }
  (void)cudaGetLastError();
  dev_end(d, rc);
  free(L);
}
