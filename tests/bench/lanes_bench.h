/* lanes_bench.h — shared by the benchmarks of a job over every GPU
 * (bench_lanes.c: the geodesic matrix, bench_map_lanes.c, bench_reduce_lanes.c),
 * CUDA builds only (include it after compute/gpu/gpu.h): a fresh result
 * file as the scheduler gives a big result (fallocated, mapped shared,
 * marked for prefault unless it is on tmpfs, unlinked at once), the
 * lending hooks on the real device locks (a non-blocking gpu_trylock a
 * lane, as a run's lanes borrow), a table row (median wall ms and the
 * phase times of the median run; value: a reduce's result) ordered by
 * wall time, and a job context for a one-GPU run. Static functions: each
 * benchmark uses a subset.
 */
#ifndef TESSEL_TESTS_LANES_BENCH_H
#define TESSEL_TESTS_LANES_BENCH_H
#pragma GCC diagnostic ignored "-Wunused-function"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compute/array/tarray.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/kinds.h"

#define TMPFS_MAGIC_ 0x01021994

typedef struct res {
  tarray t;
  int fd;
} res;

/* A fresh fallocated file of dt and shape (ndim 1 or 2) mapped shared, as
 * npyfile.c maps a result: <dir>/<tag>_<pid>_<k>.bin, unlinked once open. */
static int res_open(res *r, tdtype dt, int ndim, const int64_t *shape,
                    const char *dir, const char *tag, int k) {
  char path[512];
  memset(r, 0, sizeof *r);
  r->fd = -1;
  r->t.dtype = dt;
  r->t.ndim = ndim;
  r->t.size = 1;
  for (int i = 0; i < ndim; i++) {
    r->t.shape[i] = shape[i];
    r->t.size *= shape[i];
  }
  size_t len = (size_t)r->t.size * tdtype_size(dt);
  snprintf(path, sizeof path, "%s/%s_%d_%d.bin", dir, tag, (int)getpid(), k);
  r->fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (r->fd < 0) return -1;
  unlink(path);
  if (posix_fallocate(r->fd, 0, (off_t)len) != 0) return -1;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (p == MAP_FAILED) return -1;
  struct statfs sf;
  r->t.data = r->t.map_base = p;
  r->t.map_len = len;
  r->t.map_prefault = !(fstatfs(r->fd, &sf) == 0 &&
                        (unsigned long)sf.f_type == TMPFS_MAGIC_);
  return 0;
}

static void res_close(res *r) {
  if (r->t.map_base) munmap(r->t.map_base, r->t.map_len);
  if (r->fd >= 0) close(r->fd);
  r->t.map_base = NULL;
  r->fd = -1;
}

static int lend_borrow(void *c, int dev) {
  (void)c;
  return gpu_trylock(dev);
}
static void lend_give_back(void *c, int dev) {
  (void)c;
  gpu_unlock(dev);
}

typedef struct row {
  double ms, h2d, comp, d2h, value;
  char split[200];
} row;

static int cmp_ms(const void *a, const void *b) {
  double x = ((const row *)a)->ms, y = ((const row *)b)->ms;
  return x < y ? -1 : x > y;
}

/* A job context for a one-GPU run (id, threads; stop never set). */
static void bench_ctx(job_ctx *ctx, atomic_int *stop, const char *id,
                      int threads) {
  memset(ctx, 0, sizeof *ctx);
  atomic_init(stop, 0);
  ctx->job_id = id;
  ctx->threads = threads;
  ctx->stop = stop;
}

#endif
