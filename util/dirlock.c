/* dirlock.c — the data directory's lock (see dirlock.h).
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
 */
#include "util/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

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
