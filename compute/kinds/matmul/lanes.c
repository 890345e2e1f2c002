/* lanes.c — a product's rows over every lent GPU (lanes.h says what and
 * why): the cut, and the glue between compute/kinds/mgpu.h's lanes and
 * the lane sessions of compute/kinds/matmul/matmul.cu (matmul_cuda.h).
 * The glue is C because job_ctx's atomics are unreadable from C++; it is
 * empty without CUDA but for mm_block_rows, which the unit tests check.
 * Threads: mm_lanes_run on the run's worker; the ops on the lanes'
 * threads (mgpu.h), each lane's on its own.
 */
#include "compute/kinds/matmul/lanes.h"

#include <stdlib.h>
#include <string.h>

#include "compute/kinds/mgpu.h"

int64_t mm_block_rows(int64_t m, int64_t n, size_t es) {
  return mm_block_rows_of(m, n, es, MM_BLOCK_BYTES, MM_BLOCKS_MAX);
}

int64_t mm_block_rows_of(int64_t m, int64_t n, size_t es, int64_t block,
                         int64_t most) {
  if (m <= 0 || n <= 0 || es == 0 || n > INT64_MAX / (int64_t)es ||
      block <= 0 || most <= 0)
    return 0;
  int64_t row = n * (int64_t)es; /* bytes of a row of C */
  if (row < MM_LANES_MIN && m < (MM_LANES_MIN + row - 1) / row) return 0;
  int64_t rows = (block + row - 1) / row;
  int64_t fewest = (m + most - 1) / most;
  if (rows < fewest) rows = fewest;
  if (rows >= MM_ROW_ALIGN)
    rows = (rows + MM_ROW_ALIGN - 1) / MM_ROW_ALIGN * MM_ROW_ALIGN;
  return rows < m ? rows : 0;
}

int mm_lanes_wanted(int64_t m, int64_t n, size_t es) {
  const char *v = getenv("TESSEL_MM_LANES");
  if (v && strcmp(v, "0") == 0) return 0;
  return mm_block_rows(m, n, es) > 0;
}

#if TESSEL_HAVE_CUDA

#include "compute/kinds/matmul/matmul_cuda.h"

_Static_assert(MM_LANE_HOLD >= MGPU_PRIME_MAX + 2,
               "a lane session holds every block its lane may launch");

typedef struct ml_run {
  const mm_lane_args *x;
  int prefault;
  mm_lane *lane[MGPU_MAX];
  lane_times t[MGPU_MAX]; /* each lane's */
} ml_run;

/* A lent device that cannot open its lane (no memory for the product, or
 * the device is gone) is no lane: a device error, the others go on. The
 * run's own device fails the job as one GEMM would (T_ETOOLARGE ...). */
static int ml_begin(void *u, int lane, int dev, int *prime, terr *e) {
  ml_run *R = u;
  (void)prime;
  int rc = cuda_mm_lane_open(dev, R->x, &R->lane[lane], e);
  if (rc && lane > 0) rc = e->code = T_EDEVICE;
  return rc;
}

static void ml_prepare(void *u, int lane, int dev, int rank, int nlive) {
  ml_run *R = u;
  (void)dev;
  if (R->prefault) cuda_mm_lane_prefault(R->lane[lane], rank, nlive);
}

static int ml_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  ml_run *R = u;
  (void)dev;
  return cuda_mm_lane_launch(R->lane[lane], r0, r1, e);
}

static int ml_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  ml_run *R = u;
  (void)dev;
  return cuda_mm_lane_finish(R->lane[lane], r0, r1, e);
}

static void ml_end(void *u, int lane, int dev, int rc) {
  ml_run *R = u;
  (void)dev;
  cuda_mm_lane_close(R->lane[lane], rc, &R->t[lane].h2d, &R->t[lane].compute,
                     &R->t[lane].d2h);
  R->lane[lane] = NULL;
}

int mm_lanes_exec(int own, const mm_lane_args *x, const mgpu_lend *lend,
                  int64_t block_rows, mgpu_report *rep, double *t_h2d,
                  double *t_compute, double *t_d2h, terr *e) {
  ml_run *R = calloc(1, sizeof *R);
  if (!R) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  const char *pf = getenv("TESSEL_MM_PREFAULT");
  R->prefault = pf && strcmp(pf, "1") == 0;
  R->x = x;
  mgpu_ops ops = {R,          ml_block,  ml_end, ml_begin,
                  ml_prepare, ml_launch, MGPU_PRIME_MAX, 0};
  int rc = mgpu_run(own, x->out->shape[0], block_rows, 0, lend, &ops, rep, e);
  x->out->map_prefault = 0; /* the lanes did their shares, or the copies did */
  lane_times T; /* the slowest lane's, phase by phase */
  mgpu_slowest(R->t, MGPU_MAX, &T);
  if (t_h2d) *t_h2d += T.h2d;
  if (t_compute) *t_compute += T.compute;
  if (t_d2h) *t_d2h += T.d2h;
  free(R);
  return rc;
}

int mm_lanes_run(job_ctx *ctx, const tarray *a, const tarray *b,
                 const tarray *bias, int ta, int tb, const char *const ids[3],
                 tarray *out, terr *e) {
  int64_t m = out->shape[0], n = out->ndim == 2 ? out->shape[1] : 1;
  int64_t br = mm_block_rows(m, n, tdtype_size(out->dtype));
  /* TESSEL_MM_BLOCK_MIB: another block size (and at most 2 GiB of
   * blocks' worth of count), for the benchmarks' A/B */
  const char *bm = getenv("TESSEL_MM_BLOCK_MIB");
  long mib = bm ? strtol(bm, NULL, 10) : 0;
  if (br > 0 && mib >= 8 && mib <= 1024)
    br = mm_block_rows_of(m, n, tdtype_size(out->dtype), (int64_t)mib << 20,
                          2048 / mib);
  if (br <= 0 || out->ndim != 2)
    return terr_set(e, T_EINTERNAL, "", -1, "matmul lanes: no cut");
  mm_lane_args x;
  memset(&x, 0, sizeof x);
  x.a = a;
  x.b = b;
  x.bias = bias;
  x.ta = ta;
  x.tb = tb;
  for (int i = 0; i < 3; i++) x.ids[i] = ids ? ids[i] : NULL;
  x.out = out;
  x.keep_as = ctx->result_is_final ? ctx->job_id : NULL;
  mgpu_lend lend;
  mgpu_report rep;
  mgpu_lend_of(ctx, &lend);
  atomic_store(&ctx->progress_done, 0);
  atomic_store(&ctx->progress_total, m);
  int rc = mm_lanes_exec(ctx->device, &x, &lend, br, &rep, &ctx->t_h2d,
                         &ctx->t_compute, &ctx->t_d2h, e);
  mgpu_note(&rep, ctx);
  return rc;
}

#else

int mm_lanes_run(job_ctx *ctx, const tarray *a, const tarray *b,
                 const tarray *bias, int ta, int tb, const char *const ids[3],
                 tarray *out, terr *e) {
  (void)ctx, (void)a, (void)b, (void)bias, (void)ta, (void)tb, (void)ids;
  (void)out;
  return terr_set(e, T_EUNAVAIL, "backend", -1, "no CUDA in this build");
}

#endif
