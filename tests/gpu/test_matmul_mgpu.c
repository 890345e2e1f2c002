/* test_matmul_mgpu.c — a product over GPUs in row blocks
 * (compute/kinds/matmul/lanes.h: a lane session a device, matmul.cu; block
 * k + 1's GEMM launched before block k is copied back) is the same bytes on
 * one device and on two, and agrees with one whole GEMM.
 *
 * Exits 77 without CUDA in the build or a device. For each case (float64
 * and float32; transposed operands; a bias row, column and full matrix;
 * a block size that leaves a short last block):
 *   - the whole product as one GEMM (cuda_matmul on device 0), checked
 *     against a float64 product on the host within the rounding bound of a
 *     length-k dot product;
 *   - the blocks on device 0 alone (no lending), into a poisoned heap
 *     result: within that bound of the one GEMM, every element written;
 *   - with one GPU: beside a lent "device 1" that does not exist, whose
 *     lane cannot open and is reported failed: the same bytes as device 0
 *     alone, every row from lane 0;
 *   - with two GPUs: the blocks over both (lent as a run's lanes borrow:
 *     gpu_trylock on the lane's own thread) into a poisoned mapping marked
 *     for prefault: both lanes wrote rows, the mapping's prefault was
 *     done, and the bytes equal device 0 alone's bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "compute/array/tarray.h"

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"
#include "compute/kinds/gpujob.h"
#include "compute/kinds/matmul/lanes.h"
#include "mgpu_test_util.h"

static uint64_t rng = 0x243F6A8885A308D3ULL;

static tarray *random_array(tdtype dt, int64_t r, int64_t c) {
  int64_t shape[2] = {r, c};
  tarray *t = tarray_new(dt, 2, shape);
  for (int64_t i = 0; t && i < t->size; i++)
    tarray_set(t, i, tu_urand(&rng) * 2 - 1);
  return t;
}

static int job_stopped(void *c) {
  (void)c;
  return 0;
}
static void job_total(void *c, int64_t t) { (void)c, (void)t; }
static void job_progress(void *c, int64_t a) { (void)c, (void)a; }

typedef struct mm_case {
  tdtype dt;
  int64_t m, n, k;
  int ta, tb;
  int bias; /* 0 none, 1 row [1, n], 2 column [m, 1], 3 full [m, n] */
  int64_t block_rows;
  const char *what;
} mm_case;

/* op(x)[i][l] of a 2-D array */
static double op_at(const tarray *x, int t, int64_t i, int64_t l) {
  return t ? tarray_get(x, l * x->shape[1] + i) : tarray_get(x, i * x->shape[1] + l);
}

static double bias_at(const tarray *b, int form, int64_t i, int64_t j) {
  if (!b) return 0;
  if (form == 1) return tarray_get(b, j);
  if (form == 2) return tarray_get(b, i);
  return tarray_get(b, i * b->shape[1] + j);
}

/* The host product in float64, and the bound |x - y| <= t (|y| + S). */
static int near_host(const mm_case *c, const tarray *a, const tarray *b,
                     const tarray *bias, const tarray *out) {
  double u = c->dt == T_F64 ? 0x1p-53 : 0x1p-24, t = 4.0 * (c->k + 2) * u;
  int64_t bad = 0;
  for (int64_t i = 0; i < c->m; i += 7) {     /* every 7th row */
    for (int64_t j = 0; j < c->n; j += 3) {   /* every 3rd column */
      double s = 0, sa = 0;
      for (int64_t l = 0; l < c->k; l++) {
        double x = op_at(a, c->ta, i, l), y = op_at(b, c->tb, l, j);
        s += x * y;
        sa += fabs(x * y);
      }
      double want = s + bias_at(bias, c->bias, i, j);
      double got = tarray_get(out, i * c->n + j);
      if (!(fabs(got - want) <= t * (fabs(want) + sa + 1))) bad++;
    }
  }
  return bad == 0;
}

static void run_case(const mm_case *c) {
  const char *what = c->what;
  size_t es = tdtype_size(c->dt);
  tarray *a = c->ta ? random_array(c->dt, c->k, c->m) : random_array(c->dt, c->m, c->k);
  tarray *b = c->tb ? random_array(c->dt, c->n, c->k) : random_array(c->dt, c->k, c->n);
  tarray *bias = c->bias == 1   ? random_array(c->dt, 1, c->n)
                 : c->bias == 2 ? random_array(c->dt, c->m, 1)
                 : c->bias == 3 ? random_array(c->dt, c->m, c->n)
                                : NULL;
  int64_t shape[2] = {c->m, c->n};
  tarray *one = tarray_new(c->dt, 2, shape), *alone = tarray_new(c->dt, 2, shape);
  tarray two = tu_mapped(c->dt, 2, c->m, c->n, 1);
  size_t bytes = (size_t)c->m * c->n * es;
  CHECK(a && b && (c->bias == 0 || bias) && one && alone && two.data);
  if (!(a && b && one && alone && two.data)) goto done;
  terr e;
  terr_clear(&e);
  double h2d = 0, comp = 0, d2h = 0;
  gpu_job job = {NULL, job_stopped, job_total, job_progress, &h2d, &comp,
                 &d2h, NULL, 0};
  CHECK_MSG(cuda_matmul(0, a, b, bias, c->ta, c->tb, NULL, one, &job, &e) == 0,
            "%s: one GEMM: %s", what, e.message);
  CHECK_MSG(near_host(c, a, b, bias, one), "%s: one GEMM off the host's", what);

  mm_lane_args x;
  memset(&x, 0, sizeof x);
  x.a = a;
  x.b = b;
  x.bias = bias;
  x.ta = c->ta;
  x.tb = c->tb;
  x.out = alone;
  memset(alone->data, 0xA5, bytes);
  mgpu_lend solo = {NULL, 1, NULL, NULL, NULL, NULL, NULL};
  mgpu_report rep;
  CHECK_MSG(mm_lanes_exec(0, &x, &solo, c->block_rows, &rep, NULL, NULL, NULL,
                          &e) == 0,
            "%s: blocks on device 0: %s", what, e.message);
  CHECK(rep.lanes == 1 && rep.rows[0] == c->m && rep.depth == 2 &&
        rep.nblocks == (c->m + c->block_rows - 1) / c->block_rows);
  CHECK_MSG(near_host(c, a, b, bias, alone), "%s: blocks off the host's", what);
  {
    /* within the bound of the whole GEMM everywhere (no poison left) */
    double u = c->dt == T_F64 ? 0x1p-53 : 0x1p-24, t = 8.0 * (c->k + 2) * u;
    int64_t bad = 0;
    for (int64_t i = 0; i < one->size; i++) {
      double p = tarray_get(one, i), q = tarray_get(alone, i);
      if (!(fabs(p - q) <= t * ((double)c->k + fabs(p) + 2))) bad++;
    }
    CHECK_MSG(bad == 0, "%s: %lld elements of the blocks far from one GEMM",
              what, (long long)bad);
  }

  if (gpu_count() < 2) {
    mgpu_lend ghost = {NULL, 2, tu_ghost_borrow, tu_ghost_give_back, NULL, NULL, NULL};
    tarray *g = tarray_new(c->dt, 2, shape);
    CHECK(g != NULL);
    if (!g) goto done;
    memset(g->data, 0xA5, bytes);
    x.out = g;
    CHECK_MSG(mm_lanes_exec(0, &x, &ghost, c->block_rows, &rep, NULL, NULL,
                            NULL, &e) == 0,
              "%s: beside a missing device: %s", what, e.message);
    CHECK(rep.lanes == 2 && rep.failed[1] && rep.rows[0] == c->m);
    CHECK_MSG(memcmp(g->data, alone->data, bytes) == 0,
              "%s: beside a missing device: other bytes", what);
    tarray_free(g);
    printf("  %s: one GPU: the two-GPU run skipped\n", what);
    goto done;
  }
  x.out = &two;
  mgpu_lend lend = {NULL, gpu_count(), tu_lend_borrow, tu_lend_give_back, NULL,
                    NULL, NULL};
  CHECK_MSG(mm_lanes_exec(0, &x, &lend, c->block_rows, &rep, NULL, NULL, NULL,
                          &e) == 0,
            "%s: two GPUs: %s", what, e.message);
  char desc[200];
  mgpu_describe(&rep, desc, sizeof desc);
  printf("  %s: %s\n", what, desc);
  CHECK_MSG(tu_every_lane_wrote(&rep, c->m) && two.map_prefault == 0,
            "%s: %s", what, desc);
  CHECK_MSG(memcmp(two.data, alone->data, bytes) == 0,
            "%s: two GPUs differ from one", what);
done:
  tarray_free(a);
  tarray_free(b);
  tarray_free(bias);
  tarray_free(one);
  tarray_free(alone);
  if (two.map_base) munmap(two.map_base, two.map_len);
}

TEST(blocks_same_bytes) {
  mm_case c[] = {
      {T_F64, 2003, 1536, 512, 0, 0, 0, 200, "f64 plain"},
      {T_F32, 1777, 1024, 700, 1, 1, 1, 160, "f32 both transposed, bias row"},
      {T_F64, 1500, 900, 333, 1, 0, 2, 128, "f64 a transposed, bias column"},
      {T_F64, 1000, 640, 256, 0, 1, 3, 96, "f64 b transposed, full bias"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) run_case(&c[i]);
}

int main(void) {
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  printf("%d GPU(s)%s\n", gpu_count(),
         gpu_count() < 2 ? ": the two-GPU runs are skipped" : "");
  RUN(blocks_same_bytes);
  return check_summary();
}

#else

int main(void) {
  (void)check_failed_now, (void)check_passed, (void)check_failed;
  SKIP_ALL("no CUDA device: CUDA support not built");
}

#endif
