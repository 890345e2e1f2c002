/* datadir.c — the data directory's lock and its disk's reserve (see
 * datadir.h).
 *
 * The lock.
 *
 * Taking it: open (create) <dir>/tesseld.lock close-on-exec, F_OFD_SETLK a
 * write lock (shared: a read lock) on its whole length, and, for the
 * exclusive lock only, replace the file's text with "<pid>\n". The pid is
 * for people and for the refusal message only; the kernel's lock decides.
 * A failed write of the pid (a full disk) costs the message its pid, never
 * the start.
 *
 * Refused (EAGAIN/EACCES): F_OFD_GETLK says whether the holder's lock is
 * shared (a cluster node) or exclusive, and the file's text gives the
 * exclusive holder's pid; the winner may not have written it yet when the
 * two start together, so the text is read again for up to a second. The
 * descriptor of a refused attempt is closed at once (it holds nothing).
 *
 * Threads: the main thread only (a static descriptor).
 *
 * The reserve.
 *
 * One reserve per process: a descriptor on <data>/tesseld.reserve, the
 * file system's st_dev, the sizes, and `given` (0 held, 1 given up). The
 * free space is fstatvfs of that descriptor (f_bavail: what an unprivileged
 * writer may still take). Holding is posix_fallocate of the whole size (no
 * byte is ever written, so the blocks cost nothing but their count);
 * giving up is ftruncate to 0, which frees them at once. A failed re-take
 * truncates again, so a half-allocated reserve never sits in the way.
 *
 * Threads: `mu` serializes the file's changes and the transitions; `given`
 * and the sizes are atomics that every reader loads without it. The rate
 * limit of reserve_watch is a relaxed atomic (two threads that both pass it
 * at once only look twice).
 */
#include "util/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/util.h"

/* ---- the lock ---- */

static int lock_fd = -1;

/* The pid written in the lock file, or 0 when there is none (yet). */
static long read_pid(int fd) {
  char buf[32];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *end = NULL;
  long pid = strtol(buf, &end, 10);
  return end != buf && *end == '\n' && pid > 0 ? pid : 0;
}

/* The refusal: who holds dir, as well as can be said. */
static int refused(int fd, const char *dir, const char *path, int shared,
                   terr *e) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  int held_shared = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_RDLCK;
  long pid = 0;
  for (int i = 0; i < 20 && !held_shared && !pid; i++) {
    pid = read_pid(fd);
    if (!pid) usleep(50000);
  }
  close(fd);
  if (held_shared)
    return terr_set(e, T_ECONFLICT, "data-dir", -1,
                    "%s is in use by the nodes of a cluster store (%s is "
                    "locked shared); a single-node tesseld needs a data "
                    "directory of its own",
                    dir, path);
  if (pid)
    return terr_set(e, T_ECONFLICT, "data-dir", -1,
                    "%s is in use by another tesseld (pid %ld, which holds "
                    "%s)%s",
                    dir, pid, path,
                    shared ? "; cluster nodes cannot share a single-node "
                             "daemon's data directory"
                           : "; stop it first, or give this one another "
                             "--data-dir");
  return terr_set(e, T_ECONFLICT, "data-dir", -1,
                  "%s is in use by another process (it holds %s; its pid "
                  "is not recorded)",
                  dir, path);
}

int dirlock_take(const char *dir, int shared, terr *e) {
  char path[4200];
  if ((size_t)snprintf(path, sizeof path, "%s/tesseld.lock", dir) >= sizeof path)
    return terr_set(e, T_EINVAL, "data-dir", -1, "path too long");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return terr_set(e, T_EIO, "data-dir", -1, "cannot open %s: %s", path,
                    strerror(errno));
  struct flock fl = {.l_type = shared ? F_RDLCK : F_WRLCK,
                     .l_whence = SEEK_SET};
  if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
    int err = errno;
    if (err == EAGAIN || err == EACCES) return refused(fd, dir, path, shared, e);
    /* No locks here (some network file systems): as before, unguarded. */
    log_warn("cannot lock %s (%s): nothing stops a second tesseld on %s",
             path, strerror(err), dir);
    close(fd);
    return 0;
  }
  if (!shared) {
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)
      log_warn("cannot write the pid into %s: %s", path, strerror(errno));
  }
  dirlock_release();
  lock_fd = fd;
  return 0;
}

void dirlock_release(void) {
  if (lock_fd >= 0) close(lock_fd);
  lock_fd = -1;
}

/* ---- the reserve ---- */

#define RESERVE_DEFAULT_MAX ((int64_t)64 << 20)
#define RESERVE_LOW_MIN ((int64_t)1 << 20)
/* reserve_watch looks at most this often unless asked to now. */
#define RESERVE_WATCH_MS 5.0

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int res_fd = -1; /* set once at open, before any other thread */
static dev_t res_dev;
static char res_path[4200];
static _Atomic int64_t size_b, low_b;
static _Atomic int given;
static _Atomic int64_t last_look_us;

static int64_t free_bytes(void) {
  struct statvfs v;
  if (fstatvfs(res_fd, &v) != 0) return INT64_MAX; /* unknown: not full */
  return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

/* [mu] Allocate the reserve's blocks: 0 or an errno (nothing kept then). */
static int take_locked(void) {
  int err;
  do err = posix_fallocate(res_fd, 0, (off_t)atomic_load(&size_b));
  while (err == EINTR);
  if (err) {
    if (ftruncate(res_fd, 0) != 0)
      log_warn("disk reserve: cannot empty %s: %s", res_path, strerror(errno));
    return err;
  }
  atomic_store(&given, 0);
  return 0;
}

/* [mu] Free the reserve's blocks for the store. */
static void give_locked(void) {
  if (ftruncate(res_fd, 0) != 0)
    log_warn("disk reserve: cannot empty %s: %s", res_path, strerror(errno));
  atomic_store(&given, 1);
}

int64_t reserve_default_bytes(const char *dir) {
  struct statvfs v;
  if (statvfs(dir, &v) != 0) return RESERVE_DEFAULT_MAX;
  int64_t total = (int64_t)v.f_blocks * (int64_t)v.f_frsize;
  int64_t b = total / 20;
  if (b > RESERVE_DEFAULT_MAX) b = RESERVE_DEFAULT_MAX;
  return b & ~(int64_t)4095;
}

int reserve_open(const char *dir, int64_t bytes, terr *e) {
  reserve_close();
  if ((size_t)snprintf(res_path, sizeof res_path, "%s/tesseld.reserve", dir) >=
      sizeof res_path)
    return terr_set(e, T_EINVAL, "data-dir", -1, "path too long");
  if (bytes <= 0) { /* none; a reserve of an earlier run holds blocks */
    unlink(res_path);
    return 0;
  }
  struct statvfs v;
  if (statvfs(dir, &v) == 0 &&
      bytes > (int64_t)v.f_blocks * (int64_t)v.f_frsize / 2)
    return terr_set(e, T_EINVAL, "", -1,
                    "%lld bytes is more than half of %s's file system "
                    "(%lld bytes): the daemon would refuse all work",
                    (long long)bytes, dir,
                    (long long)v.f_blocks * (long long)v.f_frsize);
  int fd = open(res_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return terr_set(e, T_EIO, "", -1, "cannot create %s: %s",
                    res_path, strerror(err));
  }
  /* An earlier run's bigger reserve: give the difference back first. */
  if (sb.st_size > bytes && ftruncate(fd, (off_t)bytes) != 0)
    log_warn("disk reserve: cannot shrink %s: %s", res_path, strerror(errno));
  int64_t low = bytes / 4 < RESERVE_LOW_MIN ? RESERVE_LOW_MIN : bytes / 4;
  if (low > bytes) low = bytes;
  pthread_mutex_lock(&mu);
  res_fd = fd;
  res_dev = sb.st_dev;
  atomic_store(&size_b, bytes);
  atomic_store(&low_b, low);
  int err = take_locked();
  if (err) {
    atomic_store(&given, 1);
    log_warn("disk reserve: no room for %lld bytes on %s's disk (%s): "
             "starting with the disk full (new work 507 until deletes free "
             "room)",
             (long long)bytes, dir, strerror(err));
  }
  pthread_mutex_unlock(&mu);
  return 0;
}

void reserve_close(void) {
  pthread_mutex_lock(&mu);
  if (res_fd >= 0) close(res_fd); /* the blocks stay for the next start */
  res_fd = -1;
  atomic_store(&size_b, 0);
  atomic_store(&low_b, 0);
  atomic_store(&given, 0);
  pthread_mutex_unlock(&mu);
}

int64_t reserve_size(void) { return atomic_load(&size_b); }

int64_t reserve_low_mark(void) { return atomic_load(&low_b); }

int reserve_full(void) { return atomic_load(&given); }

void reserve_watch(int now) {
  if (atomic_load(&size_b) <= 0) return;
  int64_t t = (int64_t)(t_now_ms() * 1000.0);
  if (!now) {
    int64_t last = atomic_load_explicit(&last_look_us, memory_order_relaxed);
    if (t - last < (int64_t)(RESERVE_WATCH_MS * 1000.0)) return;
  }
  atomic_store_explicit(&last_look_us, t, memory_order_relaxed);
  int64_t size = atomic_load(&size_b), low = atomic_load(&low_b);
  int64_t f = free_bytes();
  int is_given = atomic_load(&given);
  if (!is_given && f >= low) return;
  if (is_given && f < size + 2 * low) return;
  pthread_mutex_lock(&mu);
  if (res_fd >= 0 && !atomic_load(&given) && free_bytes() < low) {
    give_locked();
    log_warn("disk reserve: the data disk is full (%lld bytes free, under "
             "%lld): its %lld-byte reserve is given to the store; new work "
             "is refused 507 until deletes free room",
             (long long)f, (long long)low, (long long)size);
  } else if (res_fd >= 0 && atomic_load(&given) &&
             free_bytes() >= size + 2 * low && take_locked() == 0) {
    log_info("disk reserve: room again (%lld bytes free): the %lld-byte "
             "reserve is taken back, new work is accepted",
             (long long)f, (long long)size);
  }
  pthread_mutex_unlock(&mu);
}

int reserve_release(void) {
  if (atomic_load(&size_b) <= 0 || atomic_load(&given)) return 0;
  int freed = 0;
  pthread_mutex_lock(&mu);
  if (res_fd >= 0 && !atomic_load(&given)) {
    give_locked();
    freed = 1;
  }
  pthread_mutex_unlock(&mu);
  if (freed)
    log_warn("disk reserve: a store write found the data disk full: its "
             "%lld-byte reserve is given to the store; new work is refused "
             "507 until deletes free room",
             (long long)atomic_load(&size_b));
  return freed;
}

int reserve_admit(int fd, int64_t bytes) {
  if (atomic_load(&size_b) <= 0) return 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || sb.st_dev != res_dev) return 0;
  if (atomic_load(&given)) reserve_watch(1); /* room again since? */
  if (atomic_load(&given)) return ENOSPC;
  return free_bytes() - bytes < atomic_load(&low_b) ? ENOSPC : 0;
}
