/* bench_d2h_store.cu — how fast can a result go from device memory into a
 * result file? The measurement behind the GPU results path (issue 11 item 2:
 * "GPU -> pinned staging -> result storage overlapped"; target: d2h + store
 * of an 800 MB result <= 100 ms on an H100).
 *
 * One run prints, for a result of N bytes already in device memory, the time
 * until its bytes are in the page cache of a fresh result file (created,
 * fallocated, as compute/sched/run.c creates them), each way side by side:
 *   d2h -> one pinned buffer             the PCIe ceiling (no file)
 *   pinned -> file, pwrite, T threads    the page-cache write ceiling
 *   slots: d2h -> pinned slots -> mapped file, gang memcpy   (the old way)
 *   slots: d2h -> pinned slots -> pwrite by T threads         (a sink)
 *   register: mmap the file, cudaHostRegister it, d2h straight into it
 * for the directory given (the data directory's file system) and for
 * /dev/shm. Medians of R runs after a warm-up; GB/s = N / time.
 *
 *   bench_d2h_store [dir] [MB] [threads] [reps]
 *
 * Standalone on purpose: it asks the hardware and the kernel, not Tessel's
 * code, what is possible; tests/bench/README.md lists it.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CK(x)                                                              \
  do {                                                                     \
    cudaError_t e_ = (x);                                                  \
    if (e_ != cudaSuccess) {                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,            \
              cudaGetErrorString(e_));                                     \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static size_t N;       /* result bytes */
static int T;          /* host threads */
static char *dev;      /* the result on the device */
static char *pinned;   /* one big pinned buffer (N) */
#define SLOTS 4
#define SLOT_BYTES ((size_t)32 << 20)
static char *slot[SLOTS];
static cudaStream_t st;
static cudaEvent_t ev[SLOTS];

static int sparse; /* ftruncate instead of posix_fallocate */
static int new_file(const char *dir, char *path) {
  snprintf(path, 512, "%s/d2h_store.%d.tmp", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) { perror(path); exit(1); }
  int rc = sparse ? (ftruncate(fd, (off_t)N) ? errno : 0)
                  : posix_fallocate(fd, 0, (off_t)N);
  if (rc) { fprintf(stderr, "fallocate: %s\n", strerror(rc)); exit(1); }
  return fd;
}

/* ---- a tiny gang: T threads each doing part of [0, len) ---------------- */
typedef struct part {
  int k, mode, fd;
  char *dst;
  const char *src;
  size_t len;
  off_t off;
} part;

static void *part_run(void *p_) {
  part *p = (part *)p_;
  size_t per = (p->len / T + 4095) & ~(size_t)4095;
  size_t a = per * p->k, b = a + per > p->len ? p->len : a + per;
  if (a >= b) return NULL;
  if (p->mode == 0) memcpy(p->dst + a, p->src + a, b - a);
  if (p->mode == 1) {
    size_t done = 0;
    while (done < b - a) {
      ssize_t w = pwrite(p->fd, p->src + a + done, b - a - done, p->off + a + done);
      if (w <= 0) { perror("pwrite"); exit(1); }
      done += (size_t)w;
    }
  }
  if (p->mode == 2) madvise(p->dst + a, b - a, MADV_POPULATE_WRITE);
  if (p->mode == 4) {
    if (madvise(p->dst + a, b - a, MADV_POPULATE_WRITE) != 0) {
      perror("MADV_POPULATE_WRITE");
      exit(1);
    }
    memcpy(p->dst + a, p->src + a, b - a);
  }
  return NULL;
}

static void gang(int mode, int fd, char *dst, const char *src, size_t len, off_t off) {
  pthread_t th[64];
  part ps[64];
  for (int k = 0; k < T; k++) {
    ps[k] = (part){k, mode, fd, dst, src, len, off};
    if (k) pthread_create(&th[k], NULL, part_run, &ps[k]);
  }
  part_run(&ps[0]);
  for (int k = 1; k < T; k++) pthread_join(th[k], NULL);
}

/* ---- the ways ----------------------------------------------------------- */
static double way_pinned(const char *dir) {
  (void)dir;
  double t0 = now_ms();
  CK(cudaMemcpy(pinned, dev, N, cudaMemcpyDeviceToHost));
  return now_ms() - t0;
}

static double way_pwrite_only(const char *dir) {
  char path[512];
  int fd = new_file(dir, path);
  double t0 = now_ms();
  gang(1, fd, NULL, pinned, N, 0);
  double t = now_ms() - t0;
  close(fd);
  unlink(path);
  return t;
}

/* Chunks through the slots; `drain` moves slot s's chunk [off, off+len)
 * into the file. */
static double slots_run(int fd, char *map, int mode) {
  size_t nch = (N + SLOT_BYTES - 1) / SLOT_BYTES;
  size_t off_of[SLOTS], len_of[SLOTS];
  int busy[SLOTS] = {0};
  double t0 = now_ms();
  if (mode == 3) gang(2, -1, map, NULL, N, 0); /* populate first */
  for (size_t k = 0; k < nch + SLOTS; k++) {
    int s = (int)(k % SLOTS);
    if (busy[s]) {
      CK(cudaEventSynchronize(ev[s]));
      if (mode == 1)
        gang(1, fd, NULL, slot[s], len_of[s], (off_t)off_of[s]);
      else if (mode == 4)
        gang(4, -1, map + off_of[s], slot[s], len_of[s], 0);
      else
        gang(0, -1, map + off_of[s], slot[s], len_of[s], 0);
      busy[s] = 0;
    }
    if (k < nch) {
      size_t off = k * SLOT_BYTES, len = N - off < SLOT_BYTES ? N - off : SLOT_BYTES;
      CK(cudaMemcpyAsync(slot[s], dev + off, len, cudaMemcpyDeviceToHost, st));
      CK(cudaEventRecord(ev[s], st));
      off_of[s] = off;
      len_of[s] = len;
      busy[s] = 1;
    }
  }
  return now_ms() - t0;
}

/* The slots pipeline into a fresh file of dir: mode as slots_run (0 gang
 * memcpy into the mapping, 1 pwrite, 3 whole mapping prefaulted first,
 * 4 each thread prefaults its share of a chunk then copies). */
static double slots_into_file(const char *dir, int mode) {
  char path[512];
  int fd = new_file(dir, path);
  char *map = mode == 1 ? NULL
                        : (char *)mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  double t = slots_run(fd, map, mode);
  if (map) munmap(map, N);
  close(fd);
  unlink(path);
  return t;
}

static double way_slots_mapped(const char *dir) { return slots_into_file(dir, 0); }
static double way_slots_populated(const char *dir) { return slots_into_file(dir, 3); }
static double way_slots_pwrite(const char *dir) { return slots_into_file(dir, 1); }
static double way_slots_popcopy(const char *dir) { return slots_into_file(dir, 4); }

static double way_slots_popcopy_sparse(const char *dir) {
  sparse = 1;
  double t = way_slots_popcopy(dir);
  sparse = 0;
  return t;
}

static double way_register(const char *dir) {
  char path[512];
  int fd = new_file(dir, path);
  double t0 = now_ms();
  char *map = (char *)mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  cudaError_t e = cudaHostRegister(map, N, cudaHostRegisterDefault);
  double t = -1;
  if (e == cudaSuccess) {
    CK(cudaMemcpy(map, dev, N, cudaMemcpyDeviceToHost));
    CK(cudaHostUnregister(map));
    t = now_ms() - t0;
  } else {
    fprintf(stderr, "  cudaHostRegister on %s: %s\n", dir, cudaGetErrorString(e));
    (void)cudaGetLastError();
  }
  munmap(map, N);
  close(fd);
  unlink(path);
  return t;
}

static double way_register_populated(const char *dir) {
  char path[512];
  int fd = new_file(dir, path);
  double t0 = now_ms();
  char *map = (char *)mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  gang(2, -1, map, NULL, N, 0);
  cudaError_t e = cudaHostRegister(map, N, cudaHostRegisterDefault);
  double t = -1;
  if (e == cudaSuccess) {
    CK(cudaMemcpy(map, dev, N, cudaMemcpyDeviceToHost));
    CK(cudaHostUnregister(map));
    t = now_ms() - t0;
  } else {
    (void)cudaGetLastError();
  }
  munmap(map, N);
  close(fd);
  unlink(path);
  return t;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void row(const char *name, double (*f)(const char *), const char *dir, int reps) {
  double t[32];
  f(dir); /* warm-up */
  for (int i = 0; i < reps; i++) t[i] = f(dir);
  qsort(t, reps, sizeof t[0], cmpd);
  double m = t[reps / 2];
  if (m < 0)
    printf("| %-44s | %-10s | failed | |\n", name, dir);
  else
    printf("| %-44s | %-10s | %8.1f | %6.2f |\n", name, dir, m, N / m / 1e6);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  N = (size_t)(argc > 2 ? atof(argv[2]) : 800) * 1000000;
  T = argc > 3 ? atoi(argv[3]) : 16;
  int reps = argc > 4 ? atoi(argv[4]) : 5;
  if (T < 1) T = 1;
  if (T > 64) T = 64;
  if (reps < 1 || reps > 31) reps = 5;
  struct utsname u;
  uname(&u);
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("# bench_d2h_store: %s, kernel %s, %ld CPUs, %zu MB result, %d threads, median of %d\n\n",
         p.name, u.release, sysconf(_SC_NPROCESSORS_ONLN), N / 1000000, T, reps);
  CK(cudaMalloc((void **)&dev, N));
  CK(cudaMemset(dev, 0x3f, N));
  CK(cudaHostAlloc((void **)&pinned, N, cudaHostAllocPortable));
  memset(pinned, 1, N);
  for (int s = 0; s < SLOTS; s++) {
    CK(cudaHostAlloc((void **)&slot[s], SLOT_BYTES, cudaHostAllocPortable));
    CK(cudaEventCreateWithFlags(&ev[s], cudaEventDisableTiming));
  }
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("| way | dir | ms | GB/s |\n|---|---|---|---|\n");
  const char *dirs[2] = {dir, "/dev/shm"};
  row("d2h into one pinned buffer (ceiling)", way_pinned, dir, reps);
  int T0 = T;
  for (int di = 0; di < 2; di++) {
    const char *d = dirs[di];
    int ts[3] = {4, 8, T0};
    for (int i = 0; i < 3; i++) {
      T = ts[i];
      char name[64];
      snprintf(name, sizeof name, "pinned -> file, pwrite x%d", T);
      row(name, way_pwrite_only, d, reps);
    }
    T = T0;
    row("slots -> mapped file, gang memcpy (old way)", way_slots_mapped, d, reps);
    row("slots -> populated mapping, gang memcpy", way_slots_populated, d, reps);
    for (int i = 0; i < 3; i++) {
      T = ts[i];
      char name[64];
      snprintf(name, sizeof name, "slots -> per-chunk populate+copy x%d", T);
      row(name, way_slots_popcopy, d, reps);
      snprintf(name, sizeof name, "  the same, sparse file x%d", T);
      row(name, way_slots_popcopy_sparse, d, reps);
    }
    T = T0;
    for (int i = 0; i < 3; i++) {
      T = ts[i];
      char name[64];
      snprintf(name, sizeof name, "slots -> pwrite x%d (sink)", T);
      row(name, way_slots_pwrite, d, reps);
    }
    T = T0;
    row("cudaHostRegister(file mapping) + d2h", way_register, d, reps);
    row("populate + cudaHostRegister + d2h", way_register_populated, d, reps);
  }
  return 0;
}
