/* bench_fill.c — what filling FRESH host memory costs, the floor under every
 * big result the service stores (issue 27's d2h targets, issue 25's uploads).
 *
 *   bench_fill [MIB=3200] [THREADS=1,8,16] [TARGETS=DIR,...|anon|anonhuge]
 *
 * A result's bytes come off the GPU into pinned slots at ~55 GB/s (H200,
 * PCIe 5), then into the result's .npy: a fresh MAP_SHARED mapping of a
 * fallocated file. Each of its pages is new to the page cache: the kernel
 * allocates, zeroes and maps it (and ext4 journals the unwritten extent)
 * before the copy can land. Per target and thread count T, each row times,
 * median of ROUNDS (3), on MIB MiB split into T contiguous shares (2 MiB
 * aligned):
 *   prefault   MADV_POPULATE_WRITE of a fresh mapping, each thread its share
 *              (compute/gpu/stage.cu's stage_prefault)
 *   copy       then memcpy of a source buffer into those populated pages
 *   p+c        the two one after the other: the store as the service does it
 *   faulting   memcpy into another fresh mapping, faults taken by the copy
 * Targets: a directory (a file there: posix_fallocate + MAP_SHARED, as
 * compute/array/codec/npyfile.c creates a result), `spare:DIR` (the same
 * file made ahead, untimed, its pages read into the page cache: a spare
 * result file), `sparew:DIR` (made ahead by writing it and syncing it: a
 * recycled file), `anon` (MAP_PRIVATE | MAP_ANONYMOUS) or `anonhuge` (the
 * same with MADV_HUGEPAGE).
 * Measured on the lent H200 host (16 cores, ext4 on /dev/vda, kernel as lent)
 * on 2026-11-29 (this program's first form), 3200 MiB: ext4 16 threads prefault 14.6-17.3 GB/s, copy
 * 56-59 GB/s, p+c 11.7-13.3 GB/s, faulting 14-16 GB/s; /dev/shm (tmpfs, no
 * huge pages) p+c 4-7 GB/s; a tmpfs mounted huge=always p+c 7.7-10.8, faulting
 * 19-28 GB/s; anonymous memory with MADV_HUGEPAGE faulting 26-28 GB/s. So a
 * fresh 7.2 GB result cannot reach the page cache of this host's disk in
 * under ~450 ms however fast the GPU hands it over (the issue asks 40 GB/s,
 * 180 ms); only pages that are already there (a registered region, reused
 * memory) take the copy at memory speed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define ROUNDS 3
#define ALIGN ((size_t)2 << 20)

typedef struct {
  char *dst;
  const char *src;
  size_t lo, hi;
  int copy;
} share;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *share_main(void *p) {
  share *s = p;
  if (s->hi <= s->lo) return NULL;
  if (s->copy)
    memcpy(s->dst + s->lo, s->src + s->lo, s->hi - s->lo);
  else
    (void)madvise(s->dst + s->lo, s->hi - s->lo, MADV_POPULATE_WRITE);
  return NULL;
}

/* Seconds for T threads to populate (copy = 0) or copy into [dst, dst + len). */
static double gang(char *dst, const char *src, size_t len, int T, int copy) {
  pthread_t th[64];
  share sh[64];
  double t0 = now_s();
  for (int k = 0; k < T; k++) {
    size_t lo = (len / (size_t)T * (size_t)k) & ~(ALIGN - 1);
    size_t hi = k == T - 1 ? len : (len / (size_t)T * (size_t)(k + 1)) & ~(ALIGN - 1);
    sh[k] = (share){dst, src, lo, hi, copy};
    if (pthread_create(&th[k], NULL, share_main, &sh[k]) != 0) {
      share_main(&sh[k]);
      th[k] = 0;
    }
  }
  for (int k = 0; k < T; k++)
    if (th[k]) pthread_join(th[k], NULL);
  return now_s() - t0;
}

/* A fresh mapping of len bytes on target; *fd and path set for a file. */
static char *fresh(const char *target, size_t len, int *fd, char *path, size_t cap) {
  *fd = -1;
  int anon = strcmp(target, "anon") == 0, huge = strcmp(target, "anonhuge") == 0;
  char *p;
  if (anon || huge) {
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && huge) (void)madvise(p, len, MADV_HUGEPAGE);
    return p == MAP_FAILED ? NULL : p;
  }
  /* spare:DIR — a file made ahead (untimed): fallocated and its pages read
   * into the page cache (zeros, clean), as a spare result file would be;
   * sparew:DIR — made ahead by writing it whole and syncing it (clean pages
   * holding data: a recycled file). The timed mapping is a fresh one. */
  int spare = strncmp(target, "spare:", 6) == 0, sparew = strncmp(target, "sparew:", 7) == 0;
  const char *dir = spare ? target + 6 : sparew ? target + 7 : target;
  snprintf(path, cap, "%s/bench_fill.%d.%ld.tmp", dir, (int)getpid(), random());
  *fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (*fd < 0) return NULL;
  if (posix_fallocate(*fd, 0, (off_t)len) != 0) {
    close(*fd);
    unlink(path);
    return NULL;
  }
  p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (p != MAP_FAILED && (spare || sparew)) {
    (void)madvise(p, len, sparew ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
    if (sparew) (void)fdatasync(*fd);
    munmap(p, len);
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  }
  return p == MAP_FAILED ? NULL : p;
}

static void drop(char *p, size_t len, int fd, const char *path) {
  if (p) munmap(p, len);
  if (fd >= 0) {
    close(fd);
    unlink(path);
  }
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double med(double *v) {
  qsort(v, ROUNDS, sizeof *v, cmp_d);
  return v[ROUNDS / 2];
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 3200;
  const char *threads = argc > 2 ? argv[2] : "1,8,16";
  const char *targets = argc > 3 ? argv[3] : "/tmp,/dev/shm,anon,anonhuge";
  size_t len = mib << 20;
  char *src = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (src == MAP_FAILED) {
    fprintf(stderr, "bench_fill: no memory for %zu MiB\n", mib);
    return 1;
  }
  memset(src, 7, len);
  printf("%zu MiB, median of %d; GB/s (ms)\n", mib, ROUNDS);
  printf("| target | threads | prefault | copy | p+c | faulting |\n|---|---|---|---|---|---|\n");
  char tl[1024];
  snprintf(tl, sizeof tl, "%s", targets);
  for (char *sv = NULL, *tg = strtok_r(tl, ",", &sv); tg; tg = strtok_r(NULL, ",", &sv)) {
    char th[256];
    snprintf(th, sizeof th, "%s", threads);
    for (char *sv2 = NULL, *ts = strtok_r(th, ",", &sv2); ts; ts = strtok_r(NULL, ",", &sv2)) {
      int T = atoi(ts);
      if (T < 1 || T > 64) continue;
      double pf[ROUNDS], cp[ROUNDS], pc[ROUNDS], fc[ROUNDS];
      int ok = 1;
      for (int r = 0; r < ROUNDS && ok; r++) {
        char pa[512], pb[512];
        int fa, fb;
        char *a = fresh(tg, len, &fa, pa, sizeof pa);
        char *b = a ? fresh(tg, len, &fb, pb, sizeof pb) : NULL;
        if (!a || !b) {
          ok = 0;
          drop(a, len, fa, pa);
          break;
        }
        pf[r] = gang(a, src, len, T, 0);
        cp[r] = gang(a, src, len, T, 1);
        pc[r] = pf[r] + cp[r];
        fc[r] = gang(b, src, len, T, 1);
        drop(a, len, fa, pa);
        drop(b, len, fb, pb);
      }
      if (!ok) {
        printf("| %s | %d | (cannot make a %zu MiB mapping there) | | | |\n", tg, T, mib);
        continue;
      }
      double v[4] = {med(pf), med(cp), med(pc), med(fc)};
      printf("| %s | %d |", tg, T);
      for (int i = 0; i < 4; i++)
        printf(" %.1f (%.0f) |", (double)len / v[i] / 1e9, v[i] * 1e3);
      printf("\n");
    }
  }
  munmap(src, len);
  return 0;
}
