/* mgpu_test_util.h — shared helpers of the tests of a job over several
 * GPUs (test_map_mgpu.c, test_reduce_mgpu.c, test_matmul_mgpu.c,
 * test_geodesic_mgpu.c): the lending hooks on the real device locks (as
 * mgpu_lend's void * callbacks, and as job_ctx's), a "ghost" lend that
 * lends a device that may not exist (its lane's open fails), a stop after
 * so many rows written (tu_stop_rows, counted by tu_count_rows), every
 * device free, byte equality, a result in an anonymous mapping marked for
 * prefault as a fresh result file's is, the tests' SplitMix64 uniform
 * draw, and a main's start (tu_mgpu_start). Each test program includes it once (static functions). */
#ifndef TESSEL_TESTS_MGPU_TEST_UTIL_H
#define TESSEL_TESTS_MGPU_TEST_UTIL_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "compute/array/tarray.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/kinds.h"
#include "gpu_test_util.h"
#include "util/err.h"

/* Uniform in [0, 1) from the SplitMix64 stream *rng (gpu_test_util.h's
 * tu_next: the same draws as the tests' own copies gave). */
static inline double tu_urand(uint64_t *rng) {
  return (double)(tu_next(rng) >> 11) * 0x1p-53;
}

/* A run over every visible GPU (N of them, any N >= 2): N lanes ran, each
 * wrote some rows, none failed, and their rows add up to total. */
static inline int tu_every_lane_wrote(const mgpu_report *rep, int64_t total) {
  int64_t sum = 0;
  if (rep->lanes != gpu_count()) return 0;
  for (int k = 0; k < rep->lanes; k++) {
    if (rep->rows[k] <= 0 || rep->failed[k]) return 0;
    sum += rep->rows[k];
  }
  return sum == total;
}

static inline int tu_lend_borrow(void *c, int dev) {
  (void)c;
  return gpu_trylock(dev);
}
static inline void tu_lend_give_back(void *c, int dev) {
  (void)c;
  gpu_unlock(dev);
}
static inline int tu_ctx_borrow(job_ctx *c, int dev) {
  (void)c;
  return gpu_trylock(dev);
}
static inline void tu_ctx_return(job_ctx *c, int dev) {
  (void)c;
  gpu_unlock(dev);
}
/* "device 1" lent, though it may not exist: its lane's open fails */
static inline int tu_ghost_borrow(void *c, int dev) {
  (void)c, (void)dev;
  return 0;
}
static inline void tu_ghost_give_back(void *c, int dev) { (void)c, (void)dev; }

/* mgpu_lend's progress and stopped: T_ECANCELED once tu_rows_done reaches
 * a positive tu_stop_rows. */
static atomic_long tu_rows_done;
static atomic_int tu_stop_rows;
static inline void tu_count_rows(void *c, int64_t r) {
  (void)c;
  atomic_fetch_add(&tu_rows_done, r);
}
static inline int tu_stop_at(void *c) {
  (void)c;
  int s = atomic_load(&tu_stop_rows);
  return s > 0 && atomic_load(&tu_rows_done) >= s ? T_ECANCELED : 0;
}

/* Every device free (after a run: each lent one given back). */
static inline void tu_all_free(const char *what) {
  for (int d = 0; d < gpu_count(); d++) {
    CHECK_MSG(gpu_trylock(d) == 0, "%s: device %d held", what, d);
    gpu_unlock(d);
  }
}

static inline int tu_same_bytes(const tarray *a, const tarray *b) {
  return a->size == b->size && a->dtype == b->dtype &&
         memcmp(a->data, b->data, (size_t)a->size * tdtype_size(a->dtype)) == 0;
}

/* A result of shape [s0] (ndim 1) or [s0, s1] in an anonymous mapping
 * marked for prefault, as a fresh result file's is (the lanes populate
 * their shares first); poison: every byte 0xA5 (the pages then populated:
 * the flag still asks). data NULL when the mapping failed. */
static inline tarray tu_mapped(tdtype dt, int ndim, int64_t s0, int64_t s1,
                               int poison) {
  tarray t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.ndim = ndim;
  t.shape[0] = s0;
  t.shape[1] = ndim == 2 ? s1 : 0;
  t.size = s0 * (ndim == 2 ? s1 : 1);
  size_t len = ((size_t)t.size * tdtype_size(dt) + 4095) & ~(size_t)4095;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return t;
  if (poison) memset(p, 0xA5, len);
  t.data = t.map_base = p;
  t.map_len = len;
  t.map_prefault = 1;
  return t;
}

/* A main's start: the kernel cache in a fresh temp dir, the devices
 * probed (none: a skip, or a failure where nvidia-smi lists a GPU), their
 * count printed, with note where there are fewer than two. */
static inline void tu_mgpu_start(const char *note) {
  static char dir[] = "/tmp/tessel-gpu-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  gpu_config cfg = {dir, 0.5, 0};
  gpu_configure(&cfg);
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0)
    SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  printf("%d GPU(s)%s\n", gpu_count(), gpu_count() < 2 ? note : "");
}

#endif
