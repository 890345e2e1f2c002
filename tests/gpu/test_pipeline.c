/* test_pipeline.c — the pipelined GPU data path (issue 25, item 2) on a real
 * GPU: map and reduce with inputs and outputs in page-locked host memory
 * (cudaHostAlloc here; a registered shared-memory region is the same kind
 * of memory to the DMA engines), which go by DMA straight from / into them,
 * against the same jobs on pageable memory (through the pinned slots) and
 * against the CPU backend.
 *
 * The staging buffers are made small (4 MiB, slots of 1 MiB) so that a few
 * thousand elements already make many chunks, and the sizes are picked
 * around the chunk length C of each job: 0, 1, C-1, C, C+1, 3C+7, a size
 * below one chunk and one of many chunks. Every output is NaN-poisoned
 * first. What must hold:
 *   - map +, -, * and / on float64 give the CPU's bits (the kernels are
 *     compiled without FMA contraction: kcache.cu), for every mix of pinned
 *     and pageable inputs and outputs, a broadcasting row input included,
 *     and with the inputs resident (the whole path, d2h straight into the
 *     pinned output);
 *   - a result sink (a file written by slices, as a cuda map's smaller
 *     results are) gets the same bits from the chunked and whole paths;
 *   - reduce min and max give the CPU's bits; sum gives the same bits from
 *     pinned and pageable inputs (the same chunks, the same order) and the
 *     CPU's within the reduce kind's tolerance.
 * Overlap of the copies and the kernels is a timing, not a test: the
 * benchmark (tests/bench/bench_pipeline.c) reports it. Exits 77 ("SKIPPED:
 * no CUDA device") without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if TESSEL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "compute/expr/expr.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/gpu_kernels.h"
#include "gpu_test_util.h"

#define STAGE_BYTES (4 << 20) /* 4 slots of 1 MiB (DEV_STAGE_SLOTS = 4) */
#define SLOT_BYTES (STAGE_BYTES / 4)

/* An array over memory the test owns (pinned or heap): never tarray_free'd. */
typedef struct ext {
  tarray t;
  int pinned;
} ext;

static void ext_make(ext *a, int ndim, const int64_t *shape, int pinned) {
  memset(a, 0, sizeof *a);
  a->t.dtype = T_F64;
  a->t.ndim = ndim;
  a->t.size = 1;
  for (int d = 0; d < ndim; d++) {
    a->t.shape[d] = shape[d];
    a->t.size *= shape[d];
  }
  size_t bytes = (size_t)(a->t.size > 0 ? a->t.size : 1) * 8;
  a->pinned = pinned;
  if (pinned)
    CHECK(cudaHostAlloc(&a->t.data, bytes, cudaHostAllocPortable) == cudaSuccess);
  else
    a->t.data = malloc(bytes);
  CHECK(a->t.data != NULL);
}

static void ext_free(ext *a) {
  if (a->pinned) cudaFreeHost(a->t.data);
  else free(a->t.data);
  a->t.data = NULL;
}

static void ext_fill(ext *a, uint64_t seed) {
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  double *p = (double *)a->t.data;
  for (int64_t i = 0; i < a->t.size; i++) p[i] = tu_uniform(&s, -3, 3);
}

static void ext_poison(ext *a) {
  double *p = (double *)a->t.data;
  for (int64_t i = 0; i < a->t.size; i++) p[i] = NAN;
}

static int64_t differing(const tarray *a, const tarray *b, int64_t *first) {
  int64_t bad = 0;
  *first = -1;
  for (int64_t i = 0; i < a->size; i++)
    if (memcmp((const char *)a->data + i * 8, (const char *)b->data + i * 8, 8) &&
        bad++ == 0)
      *first = i;
  return bad;
}

static tarray *cpu_map(const expr *x, const tarray *const *in, int ndim,
                       const int64_t *shape) {
  int64_t one = 1;
  tarray *out = tarray_new(T_F64, ndim, ndim ? shape : &one);
  void *scratch = aligned_alloc(64, (expr_scratch_size(x) + 63) / 64 * 64);
  for (int64_t s = 0; s < out->size; s += EXPR_BLOCK) {
    int64_t n = out->size - s < EXPR_BLOCK ? out->size - s : EXPR_BLOCK;
    expr_eval(x, in, out, s, n, scratch);
  }
  free(scratch);
  return out;
}

/* The chunk length of a map with `streamed` full-size float64 inputs (as
 * map.cu cuts it): a slot holds a chunk of each and of the output. */
static int64_t map_chunk(int streamed) {
  return (int64_t)(SLOT_BYTES / (8 * (streamed + 1))) & ~(int64_t)255;
}

/* src over n elements; pin: bit i set = input i pinned, bit 7 = output
 * pinned; row: the last input is a row of `cols` broadcast over n/cols
 * rows. ids: resident upload ids (or NULL). */
static void check_map(const char *src, int64_t n, int64_t cols, unsigned pin,
                      const char *const *ids, uint64_t seed) {
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK_MSG(expr_compile(src, &x, &e) == 0, "%s", e.message);
  if (!x) return;
  int nin = expr_ninputs(x);
  int64_t shape[2] = {cols ? n / cols : n, cols}, rowsh[1] = {cols};
  int ndim = cols ? 2 : 1;
  ext in[4], out;
  const tarray *ins[4];
  for (int i = 0; i < nin; i++) {
    int row = cols && i == nin - 1;
    ext_make(&in[i], row ? 1 : ndim, row ? rowsh : shape, (pin >> i) & 1);
    ext_fill(&in[i], seed + (uint64_t)i);
    ins[i] = &in[i].t;
  }
  ext_make(&out, ndim, shape, (pin >> 7) & 1);
  ext_poison(&out);
  tarray *ref = cpu_map(x, ins, ndim, shape);
  tu_job j;
  tu_job_init(&j, 0);
  int rc = gpu_map(0, x, ins, ids, &out.t, &j.ctx, &e);
  CHECK_MSG(rc == 0, "%s n=%lld pin=%#x: %s", src, (long long)n, pin, e.message);
  int64_t first = -1, bad = rc ? -1 : differing(&out.t, ref, &first);
  CHECK_MSG(bad == 0,
            "map %s n=%lld cols=%lld pin=%#x%s: %lld of %lld differ, first [%lld] "
            "gpu %.17g cpu %.17g",
            src, (long long)n, (long long)cols, pin, ids ? " resident" : "",
            (long long)bad, (long long)out.t.size, (long long)first,
            first >= 0 ? ((double *)out.t.data)[first] : 0.0,
            first >= 0 ? ((double *)ref->data)[first] : 0.0);
  tarray_free(ref);
  for (int i = 0; i < nin; i++) ext_free(&in[i]);
  ext_free(&out);
  expr_free(x);
}

TEST(map_pinned_and_pageable_like_the_cpu) {
  static const char *const ex[] = {"a*b - a", "(a + b)*b - a/b", "a*a*a + 2*a + 1"};
  for (size_t k = 0; k < sizeof ex / sizeof *ex; k++) {
    int nin = k == 2 ? 1 : 2;
    int64_t C = map_chunk(nin);
    const int64_t sizes[] = {0, 1, 1000, C - 1, C, C + 1, 3 * C + 7, 20 * C + 3};
    /* every mix of pinned / pageable inputs and output */
    for (unsigned m = 0; m < (1u << (nin + 1)); m++) {
      unsigned pin = (m & ((1u << nin) - 1)) | ((m >> nin) & 1u) << 7;
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        check_map(ex[k], sizes[s], 0, pin, NULL, 10 * k + s);
    }
  }
}

TEST(map_broadcast_row_pinned) {
  /* b is a row of 1000 broadcast over the rows; a streamed, pinned or not */
  int64_t C = map_chunk(1);
  const int64_t rows[] = {1, 7, C / 1000 + 1, 3 * C / 1000 + 5};
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
    for (unsigned pin = 0; pin < 4; pin++)
      check_map("a*b - b", rows[r] * 1000, 1000, (pin & 1) | (pin & 2) << 6,
                NULL, 70 + r);
}

TEST(map_resident_whole_into_pinned) {
  /* Uploaded arrays (ids): on the device after the first run, so the
   * second run is the whole path and its d2h goes straight into out. */
  const char *const ids[2] = {"a_pipe_test_a", "a_pipe_test_b"};
  int64_t n = 10 * map_chunk(2) + 11;
  for (int rep = 0; rep < 2; rep++) {
    check_map("a*b - a", n, 0, 0x83, ids, 90);
    check_map("a*b - a", n, 0, 0x00, ids, 90);
  }
  gpu_resident_drop(ids[0]);
  gpu_resident_drop(ids[1]);
}

/* A result file written by slices (a sink: what a cuda map writes below
 * KIND_GPU_SINK_MAX), from the chunked path (streamed inputs) and the
 * whole path (resident inputs): read back, the CPU's bits. */
static char g_dir[64];
TEST(map_into_a_sink) {
  const char *const ids[1] = {"a_pipe_sink"};
  int64_t C = map_chunk(1);
  const int64_t sizes[] = {1, C - 1, C + 1, 9 * C + 5};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int resident = 0; resident < 2; resident++)
      for (int pinned = 0; pinned < 2; pinned++) {
        int64_t n = sizes[s];
        terr e;
        expr *x = NULL;
        CHECK(expr_compile("a*a - a", &x, &e) == 0);
        ext in;
        ext_make(&in, 1, &n, pinned);
        ext_fill(&in, 300 + (uint64_t)s);
        const tarray *ins[1] = {&in.t};
        tarray *ref = cpu_map(x, ins, 1, &n), *out = NULL, *back = NULL;
        char path[128];
        snprintf(path, sizeof path, "%s/sink-%zu-%d-%d.npy", g_dir, s, resident, pinned);
        CHECK_MSG(tarray_create_npy_sink(path, T_F64, 1, &n, &out, &e) == 0, "%s",
                  e.message);
        tu_job j;
        tu_job_init(&j, 0);
        CHECK_MSG(gpu_map(0, x, ins, resident ? ids : NULL, out, &j.ctx, &e) == 0,
                  "sink n=%lld: %s", (long long)n, e.message);
        tarray_free(out);
        CHECK_MSG(tarray_map_npy(path, &back, &e) == 0, "%s", e.message);
        int64_t first = -1;
        CHECK_MSG(back && back->size == n && differing(back, ref, &first) == 0,
                  "sink n=%lld resident %d pinned %d: first differing [%lld]",
                  (long long)n, resident, pinned, (long long)first);
        tarray_free(back);
        tarray_free(ref);
        unlink(path);
        ext_free(&in);
        expr_free(x);
        gpu_resident_drop(ids[0]);
      }
}

/* One reduce over all of a (op), on `pinned` input; result in *v. */
static int run_reduce(int op, int64_t n, int pinned, int use_cpu, double *v) {
  terr e;
  expr *x = NULL;
  CHECK(expr_compile("a*a - a", &x, &e) == 0);
  if (!x) return -1;
  ext a;
  ext_make(&a, 1, &n, pinned);
  ext_fill(&a, 500 + (uint64_t)n);
  const tarray *ins[1] = {&a.t};
  int64_t shape[1] = {n};
  reduce_spec r = {.x = x, .inputs = ins, .ndim = 1, .shape = shape,
                   .op = (reduce_op)op, .axis = -1, .ddof = 0};
  int64_t one = 1;
  tarray *out = tu_poisoned(T_F64, 0, &one);
  tu_job j;
  tu_job_init(&j, 0);
  int rc = use_cpu ? reduce_cpu_run(&r, out, &j.ctx, 1, &e)
                   : gpu_reduce(0, (reduce_op)op, x, ins, NULL, -1, out, &j.ctx, &e);
  CHECK_MSG(rc == 0, "reduce %s n=%lld: %s", reduce_op_name((reduce_op)op),
            (long long)n, e.message);
  *v = tarray_get(out, 0);
  tarray_free(out);
  ext_free(&a);
  expr_free(x);
  return rc;
}

TEST(reduce_pinned_and_pageable) {
  int64_t C = map_chunk(1);
  const int64_t sizes[] = {1, 1000, C - 1, C, C + 1, 3 * C + 7, 20 * C + 3};
  const int ops[] = {R_SUM, R_MIN, R_MAX};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
      double pin = NAN, page = NAN, cpu = NAN;
      run_reduce(ops[o], sizes[s], 1, 0, &pin);
      run_reduce(ops[o], sizes[s], 0, 0, &page);
      run_reduce(ops[o], sizes[s], 0, 1, &cpu);
      const char *name = reduce_op_name((reduce_op)ops[o]);
      CHECK_MSG(memcmp(&pin, &page, 8) == 0,
                "reduce %s n=%lld: pinned %.17g, pageable %.17g", name,
                (long long)sizes[s], pin, page);
      if (ops[o] == R_SUM)
        CHECK_MSG(fabs(pin - cpu) <= 1e-12 + 1e-9 * fabs(cpu),
                  "reduce sum n=%lld: gpu %.17g cpu %.17g", (long long)sizes[s],
                  pin, cpu);
      else
        CHECK_MSG(memcmp(&pin, &cpu, 8) == 0, "reduce %s n=%lld: gpu %.17g cpu %.17g",
                  name, (long long)sizes[s], pin, cpu);
    }
}

TEST(registered_heap_output) {
  /* A heap buffer registered with cudaHostRegister (what a registered
   * shared-memory region is) is taken as page-locked: the map's DMA writes
   * into it directly, every element, with the CPU's bits. */
  size_t bytes = 3u << 20;
  void *p = aligned_alloc(4096, bytes);
  CHECK(p != NULL);
  CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess);
  ext in, out;
  int64_t n = (int64_t)(bytes / 8);
  ext_make(&in, 1, &n, 1);
  ext_fill(&in, 7);
  memset(&out, 0, sizeof out);
  out.t.dtype = T_F64;
  out.t.ndim = 1;
  out.t.shape[0] = n;
  out.t.size = n;
  out.t.data = p; /* a registered heap buffer, as a registered region */
  ext_poison(&out);
  expr *x = NULL;
  terr e;
  CHECK(expr_compile("a*a - a", &x, &e) == 0);
  const tarray *ins[1] = {&in.t};
  tarray *ref = cpu_map(x, ins, 1, &n);
  tu_job j;
  tu_job_init(&j, 0);
  CHECK_MSG(gpu_map(0, x, ins, NULL, &out.t, &j.ctx, &e) == 0, "%s", e.message);
  int64_t first;
  CHECK(differing(&out.t, ref, &first) == 0);
  tarray_free(ref);
  expr_free(x);
  ext_free(&in);
  CHECK(cudaHostUnregister(p) == cudaSuccess);
  free(p);
}

int main(void) {
  char dir[] = "/tmp/tessel-gpu-pipe-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(g_dir, sizeof g_dir, "%s", dir);
  gpu_config cfg = {dir, 0.5, STAGE_BYTES};
  gpu_configure(&cfg);
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(map_pinned_and_pageable_like_the_cpu);
  RUN(map_broadcast_row_pinned);
  RUN(map_resident_whole_into_pinned);
  RUN(map_into_a_sink);
  RUN(reduce_pinned_and_pageable);
  RUN(registered_heap_output);
  gpu_shutdown();
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA */
#include "check.h"
int main(void) { SKIP_ALL("CUDA support not built"); }
#endif
