/* spare.c — big result files made ahead (spare.h has the why, the policy
 * and the measurements).
 *
 * The table holds the ready spares (path, size), oldest first. The keeper thread waits
 * until a result asked for a size (`want`) for which there is room (fewer
 * than SPARE_MAX spares, their bytes plus this one within the budget, and
 * the disk's free space beyond it at least SPARE_DISK_FREE % of the file
 * system), then makes one outside the mutex: open under a name starting
 * with '.', fallocate, then ("written") write zeros over it 64 MiB at a
 * time, each piece's writeback started, and fdatasync; or ("read") map it
 * read-only and MADV_POPULATE_READ it 64 MiB at a time, unmap (stop is
 * looked at between pieces); rename to s<seq>, add it.
 * A spare it cannot make (no room, an error) clears `want` until the next
 * result asks again, so a full disk does not spin it.
 *
 * Written by hand: keeping files ready in a directory is this service's
 * own bookkeeping; the kernel does the work (fallocate, madvise).
 */
#include "compute/array/codec/spare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/util.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels: pages read by hand */
#endif

#define PIECE ((size_t)64 << 20)

typedef struct spare {
  char path[4200];
  int64_t size;
} spare;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct {
  char dir[4200];
  int64_t budget, want, held, taken, missed;
  int on, stop, n, fill;
  unsigned long seq;
  pthread_t th;
  spare s[SPARE_MAX];
} S; /* under mu */

int64_t spare_default_budget(void) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 4) return 0;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  int64_t mem = pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;
  int64_t b = mem / 8, cap = (int64_t)8 << 30;
  return b < cap ? b : cap;
}

static int64_t rounded(int64_t len) {
  return (len + SPARE_ROUND - 1) / SPARE_ROUND * SPARE_ROUND;
}

/* Under mu: may a spare of size be made now? */
static int room_for(int64_t size) {
  return S.n < SPARE_MAX && S.held + size <= S.budget;
}

/* Is there room on the disk for size more, keeping SPARE_DISK_FREE %? */
static int disk_room(int64_t size) {
  struct statvfs v;
  if (statvfs(S.dir, &v) != 0) return 0;
  int64_t total = (int64_t)v.f_blocks * (int64_t)v.f_frsize;
  int64_t avail = (int64_t)v.f_bavail * (int64_t)v.f_frsize;
  return avail - size >= total / 100 * SPARE_DISK_FREE;
}

static int stopped(void) {
  pthread_mutex_lock(&mu);
  int stop = S.stop;
  pthread_mutex_unlock(&mu);
  return stop;
}

/* Read [0, size) of fd into the page cache, a piece at a time (clean zero
 * pages over fallocate's unwritten extents); 0, or -1 when stopped. */
static int populate(int fd, int64_t size) {
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return -1;
  int rc = 0;
  for (size_t at = 0; at < (size_t)size; at += PIECE) {
    if (stopped()) {
      rc = -1;
      break;
    }
    size_t n = (size_t)size - at < PIECE ? (size_t)size - at : PIECE;
    if (madvise((char *)m + at, n, MADV_POPULATE_READ) != 0) {
      volatile const char *p = (const char *)m + at; /* older kernels */
      for (size_t i = 0; i < n; i += 4096) (void)p[i];
    }
  }
  munmap(m, (size_t)size);
  return rc;
}

/* Write zeros over [0, size) of fd, a piece at a time, each piece's
 * writeback started as it is written, then wait for all of it (SPARE_FILL_
 * WRITTEN): the spare's pages are then clean, their blocks written, so a
 * copy into them takes no unwritten-extent work. 0, or -1 (stopped, an
 * error). */
static int write_zeros(int fd, int64_t size) {
  static const char zero[1 << 20];
  for (int64_t at = 0; at < size; at += (int64_t)PIECE) {
    if (stopped()) return -1;
    int64_t end = at + (int64_t)PIECE < size ? at + (int64_t)PIECE : size;
    for (int64_t o = at; o < end; o += (int64_t)sizeof zero) {
      size_t n = end - o < (int64_t)sizeof zero ? (size_t)(end - o) : sizeof zero;
      if (t_pwrite_all(fd, zero, n, (off_t)o) != 0) return -1;
    }
    (void)sync_file_range(fd, at, end - at, SYNC_FILE_RANGE_WRITE);
  }
  return fdatasync(fd) == 0 ? 0 : -1;
}

/* Make one spare of size; 0 and its path, or -1. */
static int make(int64_t size, unsigned long seq, char *path, size_t cap) {
  if (!disk_room(size)) return -1;
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s/.s%lu", S.dir, seq);
  snprintf(path, cap, "%s/s%lu", S.dir, seq);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int ok = fallocate(fd, 0, 0, (off_t)size) == 0 &&
           (S.fill == SPARE_FILL_WRITTEN ? write_zeros(fd, size)
                                         : populate(fd, size)) == 0;
  close(fd);
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void *keeper(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (!S.stop && !(S.want > 0 && room_for(rounded(S.want))))
      pthread_cond_wait(&cv, &mu);
    if (S.stop) break;
    int64_t size = rounded(S.want);
    unsigned long seq = ++S.seq;
    pthread_mutex_unlock(&mu);
    char path[4200];
    int rc = make(size, seq, path, sizeof path);
    pthread_mutex_lock(&mu);
    if (rc != 0 || S.stop || !room_for(size)) {
      if (rc == 0) unlink(path);
      if (rc != 0) S.want = 0; /* until a result asks again */
      continue;
    }
    snprintf(S.s[S.n].path, sizeof S.s[S.n].path, "%s", path);
    S.s[S.n].size = size;
    S.n++;
    S.held += size;
    log_debug("spare: %lld bytes ready (%d held, %lld bytes)", (long long)size,
              S.n, (long long)S.held);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

/* Remove every file in dir (an earlier run's spares, made or half made). */
static void empty_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char p[4400];
  while ((de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    unlink(p);
  }
  closedir(d);
}

int spare_start(const char *data_dir, int64_t budget, terr *e) {
  pthread_mutex_lock(&mu);
  snprintf(S.dir, sizeof S.dir, "%s/spare", data_dir);
  S.budget = budget > 0 ? budget : 0;
  S.want = S.held = S.taken = S.missed = 0;
  S.n = S.stop = S.on = 0;
  S.fill = spare_fill_of(getenv("TESSEL_SPARE_FILL"));
  pthread_mutex_unlock(&mu);
  if (t_mkdirs(S.dir) != 0)
    return terr_set(e, T_EIO, "spare-results", -1, "cannot create %s: %s",
                    S.dir, strerror(errno));
  empty_dir(S.dir);
  if (budget <= 0) return T_OK;
  if (pthread_create(&S.th, NULL, keeper, NULL) != 0)
    return terr_set(e, T_ENOMEM, "spare-results", -1,
                    "cannot start the spare keeper");
  pthread_mutex_lock(&mu);
  S.on = 1;
  pthread_mutex_unlock(&mu);
  return T_OK;
}

void spare_stop(void) {
  pthread_mutex_lock(&mu);
  int on = S.on;
  S.stop = 1;
  S.on = 0;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  if (on) pthread_join(S.th, NULL);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < S.n; i++) unlink(S.s[i].path);
  S.n = 0;
  S.held = 0;
  pthread_mutex_unlock(&mu);
  if (S.dir[0]) empty_dir(S.dir);
}

/* Under mu: take the oldest spares out of the table into gone (their files
 * are the caller's to unlink, outside mu): all of them, or until a spare
 * of `need` bytes has room (none when need is over the budget). Returns
 * how many. */
static int evict(spare *gone, int all, int64_t need) {
  int k = 0;
  while (S.n > 0 && (all || (!room_for(need) && need <= S.budget))) {
    gone[k++] = S.s[0];
    S.held -= S.s[0].size;
    memmove(&S.s[0], &S.s[1], (size_t)(S.n - 1) * sizeof S.s[0]);
    S.n--;
  }
  return k;
}

int spare_take(const char *path, int64_t len) {
  if (len < SPARE_MIN) return 0;
  pthread_mutex_lock(&mu);
  if (!S.on) {
    pthread_mutex_unlock(&mu);
    return 0;
  }
  spare got = {{0}, 0}, gone[SPARE_MAX];
  /* The disk is short (under SPARE_DISK_FREE % free): the spares' blocks
   * go back to it, every one, before a result competes with them. */
  if (!disk_room(0)) {
    int ngone = evict(gone, 1, 0);
    S.missed++;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < ngone; i++) unlink(gone[i].path);
    return 0;
  }
  int best = -1;
  for (int i = 0; i < S.n; i++)
    if (S.s[i].size >= len && S.s[i].size <= 2 * len + SPARE_ROUND &&
        (best < 0 || S.s[i].size < S.s[best].size))
      best = i;
  int ngone = 0;
  if (best >= 0) {
    got = S.s[best];
    memmove(&S.s[best], &S.s[best + 1], (size_t)(S.n - best - 1) * sizeof S.s[0]);
    S.n--;
    S.held -= got.size;
  } else {
    /* None fits: the spares follow the latest big result's size, so the
     * oldest go until one of this size has room (spares of another size
     * would otherwise hold the budget for good). */
    ngone = evict(gone, 0, rounded(len));
  }
  S.want = len;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < ngone; i++) unlink(gone[i].path);
  int ok = best >= 0 && rename(got.path, path) == 0;
  if (best >= 0 && !ok) unlink(got.path); /* another file system: not usable */
  pthread_mutex_lock(&mu);
  if (ok)
    S.taken++;
  else
    S.missed++;
  pthread_mutex_unlock(&mu);
  return ok;
}

int spare_fill_of(const char *v) {
  if (v && strcmp(v, "read") == 0) return SPARE_FILL_READ;
  if (v && strcmp(v, "written") == 0) return SPARE_FILL_WRITTEN;
  if (v && *v)
    log_warn("spare: TESSEL_SPARE_FILL='%s' is neither read nor written: "
             "the default, read", v);
  return SPARE_FILL_DEFAULT;
}

void spare_get_stats(spare_stats *out) {
  pthread_mutex_lock(&mu);
  out->fill = S.fill;
  out->budget = S.budget;
  out->held = S.held;
  out->count = S.n;
  out->taken = S.taken;
  out->missed = S.missed;
  pthread_mutex_unlock(&mu);
}
