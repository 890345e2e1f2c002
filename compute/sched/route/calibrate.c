/* calibrate.c — the self-benchmark behind the cost model (costmodel.h):
 * the rates of this machine, measured in a few tens of milliseconds.
 *
 *   vm_ops_1   the expression VM (expr_eval) on a 64K-element block of
 *              "x*x + 2*x + 1", one thread, as instructions per second;
 *   vm_ops_n   the same on `threads` threads at once (each its own data),
 *              which includes what they share (memory bandwidth, caches);
 *   memory     one thread, then all at once: first writes to fresh memory
 *              (page faults included: how results are filled), a read
 *              pass (inputs), memcpy (the GPU path's staging copies);
 *              64 MiB for one thread, 16 MiB each for all;
 *   files      in `dir` (the data dir's results folder, where results are
 *              written): the fixed cost of a result file (create,
 *              fallocate, a small write, rename, unlink); pwrite of 8 MiB
 *              in 512 KiB slices from one small buffer into a fallocated
 *              file (how a map's result sink is filled), by one thread
 *              and by all, each its own slices (the file's inode lock caps
 *              this near one thread's rate: compute/array/codec/npyfile.c); reading that
 *              file back through a fresh read-only mapping (how an uploaded
 *              array or a chained result is read: page faults on page-cache
 *              pages), one thread and all; first writes through a fresh
 *              shared mapping of a fallocated file (how every other result
 *              is filled, a GPU's included), one thread and all;
 *   GPU        gpu_measure_rates on device 0 (pinned and pageable PCIe,
 *              device copy, launch); the fused kernels' op rate is a
 *              nominal 64 lanes x 1.5 GHz per multiprocessor;
 *   kinds      then every kind in the table with rates of its own measures
 *              them (kind_cost.calibrate: matmul's OpenBLAS dgemm on one
 *              thread and cuBLAS dgemm, compute/kinds/matmul/cost.c). This
 *              file names no kind and calls no kind's code directly.
 * Fixed overheads (thread hand-off, job set-up on a GPU, a job's own
 * submit -> stored cost) are nominal figures; the corrections from
 * recorded timings absorb their error. The file figures (6 x 8 MiB, the
 * mapped writes most of it) add ~20-50 ms to the 160-500 ms the rest took
 * on the shared 2-core VM (tests/bench/results/auto-2core-*.md); the log
 * line of cm_init says how long the whole took.
 *
 * Threads: runs on the caller's thread plus `threads` short-lived helper
 * threads; touches no global state (a kind's calibrate may: matmul sets
 * OpenBLAS to one thread, as its runs do). Its files are named calib-<pid>.npy.tmp<n>
 * and removed before it returns (should the process die meanwhile, the
 * scheduler's sweep of *.npy.tmp* at start removes them).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compute/sched/route/costmodel.h"
#include "compute/expr/expr.h"
#include "compute/gpu/gpu.h"
#include "util/util.h"

#define CAL_N 65536
#define CAL_MEM_1 ((size_t)64 << 20) /* one thread's memory test */
#define CAL_MEM_T ((size_t)16 << 20)  /* each thread's, all at once */

static volatile double g_sink; /* keeps the measured reads and copies */

typedef struct cal_thread {
  const expr *x;
  int evals;        /* blocks of CAL_N to evaluate */
  double ms;        /* VM: wall of this thread's part */
  double fault_ms, read_ms, copy_ms;
  pthread_barrier_t *bar;
} cal_thread;

/* Evaluate `evals` blocks; 0 or -1 on no memory. */
static int vm_run(const expr *x, int evals, double *ms) {
  int64_t n = CAL_N;
  tarray *in = tarray_new(T_F64, 1, &n), *out = tarray_new(T_F64, 1, &n);
  size_t ss = (expr_scratch_size(x) + 63) / 64 * 64;
  void *scratch = aligned_alloc(64, ss ? ss : 64);
  int rc = -1;
  if (in && out && scratch) {
    for (int64_t i = 0; i < n; i++) ((double *)in->data)[i] = 0.5 + (double)i * 1e-6;
    const tarray *ins[1] = {in};
    expr_eval(x, ins, out, 0, n, scratch); /* warm */
    double t0 = t_now_ms();
    for (int k = 0; k < evals; k++) expr_eval(x, ins, out, 0, n, scratch);
    *ms = t_now_ms() - t0;
    rc = 0;
  }
  free(scratch);
  tarray_free(in);
  tarray_free(out);
  return rc;
}

/* First writes to fresh memory, a read pass, a copy: ms of each. */
static void mem_run(size_t bytes, double *fault_ms, double *read_ms,
                    double *copy_ms, pthread_barrier_t *bar) {
  double *a = NULL, *b = NULL;
  size_t n = bytes / sizeof(double);
  if (bar) pthread_barrier_wait(bar);
  double t0 = t_now_ms();
  a = malloc(bytes);
  if (a) memset(a, 1, bytes);
  *fault_ms = t_now_ms() - t0;
  b = malloc(bytes);
  if (b) memset(b, 2, bytes);
  if (bar) pthread_barrier_wait(bar);
  t0 = t_now_ms();
  double s = 0;
  for (size_t i = 0; a && i < n; i++) s += a[i];
  *read_ms = t_now_ms() - t0;
  if (bar) pthread_barrier_wait(bar);
  t0 = t_now_ms();
  if (a && b) memcpy(b, a, bytes);
  *copy_ms = t_now_ms() - t0;
  g_sink = s + (b ? b[n / 2] : 0);
  free(a);
  free(b);
}

static void *cal_main(void *p) {
  cal_thread *t = p;
  pthread_barrier_wait(t->bar);
  double ms = 0;
  if (vm_run(t->x, t->evals, &ms) == 0) t->ms = ms;
  mem_run(CAL_MEM_T, &t->fault_ms, &t->read_ms, &t->copy_ms, t->bar);
  return NULL;
}

static double per_s(double bytes, double ms) {
  return bytes / (ms > 1e-3 ? ms * 1e-3 : 1e-6);
}

static int measure_cpu(cm_rates *r, int threads, terr *e) {
  expr *x = NULL;
  int rc = expr_compile("x*x + 2*x + 1", &x, e);
  if (rc) return rc;
  double ops = (double)expr_program_length(x) * CAL_N, ms = 0;
  /* one thread: as many blocks as take ~3 ms */
  int evals = 4;
  if (vm_run(x, evals, &ms)) goto oom;
  if (ms > 0 && ms < 3) evals = (int)(evals * 3 / ms) + 1;
  if (evals > 2000) evals = 2000;
  /* the best of three: a busy machine slows some, never speeds them up */
  double best = 0;
  for (int k = 0; k < 3; k++) {
    if (vm_run(x, evals, &ms)) goto oom;
    if (k == 0 || ms < best) best = ms;
  }
  r->vm_ops_1 = ops * evals / (best > 1e-3 ? best * 1e-3 : 1e-6);
  {
    double f, rd, cp;
    mem_run(CAL_MEM_1, &f, &rd, &cp, NULL);
    r->fault_1 = per_s((double)CAL_MEM_1, f);
    r->stream_1 = per_s((double)CAL_MEM_1, rd);
  }
  {
    cal_thread *t = calloc((size_t)threads, sizeof *t);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    pthread_barrier_t bar;
    int started = 0;
    if (!t || !th) {
      free(t);
      free(th);
      goto oom;
    }
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
      t[i] = (cal_thread){.x = x, .evals = evals, .bar = &bar};
      if (i > 0 && pthread_create(&th[i], NULL, cal_main, &t[i]) == 0) started++;
    }
    if (started == threads - 1) {
      cal_main(&t[0]);
      for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
      double wall = 0, fw = 0, rw = 0, cw = 0;
      for (int i = 0; i < threads; i++) {
        wall = t[i].ms > wall ? t[i].ms : wall;
        fw = t[i].fault_ms > fw ? t[i].fault_ms : fw;
        rw = t[i].read_ms > rw ? t[i].read_ms : rw;
        cw = t[i].copy_ms > cw ? t[i].copy_ms : cw;
      }
      double all = (double)CAL_MEM_T * threads;
      r->vm_ops_n = ops * evals * threads / (wall > 1e-3 ? wall * 1e-3 : 1e-6);
      r->fault_n = per_s(all, fw);
      r->stream_n = per_s(all, rw);
      r->copy_n = per_s(all, cw);
    } else { /* threads would not start (the barrier cannot be used) */
      pthread_barrier_destroy(&bar);
      free(t);
      free(th);
      expr_free(x);
      return terr_set(e, T_EINTERNAL, "", -1, "calibration threads did not start");
    }
    pthread_barrier_destroy(&bar);
    free(t);
    free(th);
  }
  expr_free(x);
  return 0;
oom:
  expr_free(x);
  return terr_set(e, T_ENOMEM, "", -1, "no memory to calibrate");
}

/* ---- files ----------------------------------------------------------------
 */
#define CAL_FILE ((size_t)8 << 20)
#define CAL_SLICE ((size_t)512 << 10)

typedef enum { FOP_PWRITE, FOP_MAP_READ, FOP_MAP_WRITE, FOP_MAP_PREFAULT } fop;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct fjob {
  fop op;
  int fd;
  unsigned char *map;       /* FOP_MAP_*: the whole file's mapping */
  size_t off, len;          /* this thread's part */
  const unsigned char *buf; /* FOP_PWRITE: CAL_SLICE bytes */
  atomic_int *go;           /* all start when it turns 1 */
  double ms;
  int failed;
} fjob;

static void *fjob_run(void *p) {
  fjob *f = p;
  while (!atomic_load(f->go)) sched_yield();
  double t0 = t_now_ms(), s = 0;
  if (f->op == FOP_PWRITE) {
    for (size_t o = 0; o < f->len; o += CAL_SLICE) {
      size_t n = f->len - o < CAL_SLICE ? f->len - o : CAL_SLICE;
      if (pwrite(f->fd, f->buf, n, (off_t)(f->off + o)) != (ssize_t)n) {
        f->failed = 1;
        break;
      }
    }
  } else if (f->op == FOP_MAP_READ) {
    const double *d = (const double *)(f->map + f->off);
    for (size_t i = 0; i < f->len / sizeof(double); i++) s += d[i];
  } else {
    /* FOP_MAP_PREFAULT: the pages made present first, as the GPU's copy
     * gang does for a result file (compute/gpu/stage.cu); then the writes. */
    if (f->op == FOP_MAP_PREFAULT)
      (void)madvise(f->map + f->off, f->len, MADV_POPULATE_WRITE);
    memset(f->map + f->off, 3, f->len);
  }
  f->ms = t_now_ms() - t0;
  g_sink = s;
  return NULL;
}

/* op over the file's CAL_FILE bytes by `threads` threads, each its own
 * contiguous part: bytes/s, or 0 when something failed. */
static double fjob_rate(fop op, int fd, unsigned char *map,
                        const unsigned char *buf, int threads) {
  fjob f[64];
  pthread_t th[64];
  int ok[64];
  atomic_int go = 0;
  if (threads > 64) threads = 64;
  size_t part = CAL_FILE / (size_t)threads / 4096 * 4096;
  int failed = 0;
  for (int i = 0; i < threads; i++) {
    f[i] = (fjob){.op = op,
                  .fd = fd,
                  .map = map,
                  .buf = buf,
                  .off = part * (size_t)i,
                  .len = i == threads - 1 ? CAL_FILE - part * (size_t)i : part,
                  .go = &go};
    ok[i] = i == 0 || pthread_create(&th[i], NULL, fjob_run, &f[i]) == 0;
    failed |= !ok[i];
  }
  atomic_store(&go, 1); /* a gate, not a barrier: a thread that did not
                         * start leaves none of the others waiting */
  fjob_run(&f[0]);
  double wall = 0;
  for (int i = 0; i < threads; i++) {
    if (i > 0 && ok[i]) pthread_join(th[i], NULL);
    wall = f[i].ms > wall ? f[i].ms : wall;
    failed |= f[i].failed;
  }
  return failed ? 0 : per_s((double)CAL_FILE, wall);
}

/* A new fallocated file of `bytes` in dir; -1 on failure. */
static int cal_file(const char *dir, int n, size_t bytes, char *path,
                    size_t len) {
  snprintf(path, len, "%s/calib-%ld.npy.tmp%d", dir, (long)getpid(), n);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    close(fd);
    unlink(path);
    return -1;
  }
  return fd;
}

/* The file figures (see the opening comment); nominal ones where dir is
 * NULL or a file cannot be made there (said in the log). */
static void measure_files(cm_rates *r, int threads, const char *dir) {
  r->file_fixed_s = 1e-4;
  r->write_1 = r->write_n = 2e9;
  r->map_read_1 = r->map_read_n = 2e9;
  r->mwrite_1 = r->mwrite_n = 1.5e9;
  r->mwrite_pf = 1.5e9;
  if (!dir || !dir[0]) return;
  char path[1200], path2[1300];
  unsigned char *buf = malloc(CAL_SLICE);
  if (!buf) return;
  memset(buf, 5, CAL_SLICE);
  /* A result file's fixed cost: the fastest of three small ones. */
  double best = -1;
  for (int k = 0; k < 3; k++) {
    double t0 = t_now_ms();
    int fd = cal_file(dir, 0, 65536, path, sizeof path);
    if (fd < 0) break;
    int ok = pwrite(fd, buf, 4096, 0) == 4096;
    close(fd);
    snprintf(path2, sizeof path2, "%s.done", path);
    ok = ok && rename(path, path2) == 0;
    unlink(ok ? path2 : path);
    double ms = t_now_ms() - t0;
    if (ok && (best < 0 || ms < best)) best = ms;
  }
  if (best < 0) {
    log_warn("router: cannot write a file in %s (%s); nominal file rates", dir,
             strerror(errno));
    free(buf);
    return;
  }
  r->file_fixed_s = best > 1e-3 ? best * 1e-3 : 1e-6;
  for (int all = 0; all < 2; all++) {
    int t = all ? threads : 1;
    double w = 0, rd = 0, mw = 0;
    int fd = cal_file(dir, 1, CAL_FILE, path, sizeof path);
    if (fd >= 0) {
      w = fjob_rate(FOP_PWRITE, fd, NULL, buf, t);
      unsigned char *m =
          w > 0 ? mmap(NULL, CAL_FILE, PROT_READ, MAP_PRIVATE, fd, 0)
                : MAP_FAILED;
      if (m != MAP_FAILED) {
        rd = fjob_rate(FOP_MAP_READ, fd, m, NULL, t);
        munmap(m, CAL_FILE);
      }
      close(fd);
      unlink(path);
    }
    fd = cal_file(dir, 2, CAL_FILE, path, sizeof path);
    if (fd >= 0) {
      unsigned char *m =
          mmap(NULL, CAL_FILE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        mw = fjob_rate(FOP_MAP_WRITE, fd, m, NULL, t);
        munmap(m, CAL_FILE);
      }
      close(fd);
      unlink(path);
    }
    fd = all ? cal_file(dir, 3, CAL_FILE, path, sizeof path) : -1;
    if (fd >= 0) { /* the GPU gang's way, all threads only */
      unsigned char *m =
          mmap(NULL, CAL_FILE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        double pf = fjob_rate(FOP_MAP_PREFAULT, fd, m, NULL, t);
        if (pf > 0) r->mwrite_pf = pf;
        munmap(m, CAL_FILE);
      }
      close(fd);
      unlink(path);
    }
    if (w > 0) *(all ? &r->write_n : &r->write_1) = w;
    if (rd > 0) *(all ? &r->map_read_n : &r->map_read_1) = rd;
    if (mw > 0) *(all ? &r->mwrite_n : &r->mwrite_1) = mw;
  }
  free(buf);
}

static void measure_gpu(cm_rates *r) {
  gpu_rates g;
  terr e;
  terr_clear(&e);
  r->gpus = gpu_count();
  if (r->gpus <= 0) return;
  if (gpu_measure_rates(0, &g, &e) != 0) {
    log_warn("router: GPU rates not measured (%s); no cuda estimates", e.message);
    r->gpus = 0;
    return;
  }
  r->h2d = g.h2d_pinned;
  r->d2h = g.d2h_pinned;
  r->h2d_pageable = g.h2d_pageable;
  r->d2h_pageable = g.d2h_pageable;
  r->dev_bw = g.d2d;
  r->gpu_fixed_s = g.launch_s + 3e-5;
  r->gang = g.stage_threads;
  r->chunk_bytes = 32 << 20;
  json_t *dj = gpu_devices_json();
  json_int_t sms = json_integer_value(
      json_object_get(json_array_get(json_object_get(dj, "devices"), 0),
                      "multiprocessors"));
  json_decref(dj);
  r->gpu_ops = (double)(sms > 0 ? sms : 16) * 64 * 1.5e9;
}

/* Each kind in the table measures its own rates, at its slot. */
static void measure_kinds(cm_rates *r, int threads) {
  for (int k = 0; k < kind_count() && k < KIND_MAX; k++) {
    const kind_cost *c = kind_at(k)->cost;
    if (c && c->nrates > 0 && c->calibrate)
      c->calibrate(r->kind_rate[k], threads, r->gpus);
  }
}

int cm_calibrate(cm_rates *r, int threads, terr *e) {
  return cm_calibrate_in(r, threads, NULL, e);
}

int cm_calibrate_in(cm_rates *r, int threads, const char *dir, terr *e) {
  memset(r, 0, sizeof *r);
  if (threads < 1) threads = 1;
  r->threads = threads;
  int rc = measure_cpu(r, threads, e);
  if (rc) return rc;
  measure_files(r, threads, dir);
  r->serial_fixed_s = 5e-6;
  r->cpu_fixed_s = 5e-5 + 2e-6 * threads; /* waking the pool's threads */
  /* What every job pays from submit to stored whatever its backend: the
   * queue hand-off, the start and end in the store (0.3-0.8 ms for a tiny
   * job on the 2-core VM, tests/bench/results/auto-2core-*.md). */
  r->job_fixed_s = 3e-4;
  measure_gpu(r);
  measure_kinds(r, threads);
  return 0;
}
