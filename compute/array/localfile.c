/* compute/array/localfile.c — same-host .npy files under --local-dir (see
 * compute/array/localfile.h for the rules and the security model).
 *
 * How a path is opened: tlocal_path_below does the textual part for one
 * root (prefix, '/', no ".." component, no NUL, length); root_fd opens the
 * root (DIR, or DIR/owner with O_NOFOLLOW so a symlinked token directory
 * is refused); open_beneath opens the rest with openat2 and
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, or, where
 * the kernel says ENOSYS, walks the components with openat(O_NOFOLLOW),
 * every directory with O_DIRECTORY. Either way no symlink is followed and
 * nothing outside the root is reached, and errno tells the caller why:
 * ELOOP (a symlink) and EXDEV (an escape) are 403, ENOENT/ENOTDIR 404.
 *
 * The log of a run's inputs keeps for each mapped file its descriptor (a
 * dup), the fstat taken at open, the field, and an atomic torn flag that
 * util/sigbus sets if the mapping is torn; tlocal_log_check compares.
 *
 * Inputs are compared with their pins (compute/array/localpin.h): tlocal_npy_meta
 * compares the identity on the descriptor it opened before it reads the
 * header, tlocal_map before it maps, then the mapped header.
 *
 * Outputs (the last section) hold one descriptor from creation to
 * placement: the unnamed temporary (O_TMPFILE in the output's directory,
 * or the named fallback under <allowed dir>/.tessel-tmp), checked through
 * it and linked into place through it; the directory is pinned by
 * st_dev/st_ino at open and resolved again, from the root, at placement
 * (and once more after it: a move between the check and the link takes
 * the entry back). Nothing reopens the file by name.
 *
 * Threads: any; no shared state. Ownership: see the header.
 */
#include "compute/array/localfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/sigbus.h"
#include "util/util.h"

int tlocal_test_no_openat2;

static void out_sweep(const char *dir); /* outputs, below */

/* ---- configuration ----------------------------------------------------- */

int tlocal_create(const char *const *dirs, int n, tlocal **out, terr *e) {
  *out = NULL;
  if (n <= 0) return 0;
  tlocal *l = calloc(1, sizeof *l);
  if (!l || !(l->dirs = calloc((size_t)n, sizeof *l->dirs))) {
    free(l);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    struct stat st;
    char *c = realpath(dirs[i], NULL);
    if (!c || stat(c, &st) != 0 || !S_ISDIR(st.st_mode)) {
      int err = c ? ENOTDIR : errno;
      free(c);
      tlocal_free(l);
      return terr_set(e, T_EINVAL, "local-dir", -1,
                      "'%s' is not an existing directory: %s", dirs[i],
                      strerror(err));
    }
    if (strlen(c) >= TLOCAL_PATH_MAX / 2) {
      free(c);
      tlocal_free(l);
      return terr_set(e, T_EINVAL, "local-dir", -1, "'%s' is too long",
                      dirs[i]);
    }
    l->dirs[l->n++] = c;
    out_sweep(c);
  }
  *out = l;
  return 0;
}

void tlocal_free(tlocal *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) free(l->dirs[i]);
  free(l->dirs);
  free(l);
}

/* ---- the text ------------------------------------------------------------ */

int tlocal_path_below(const char *root, const char *path, const char **rest) {
  *rest = NULL;
  size_t rl = strlen(root), pl = strnlen(path, TLOCAL_PATH_MAX + 1);
  if (pl > TLOCAL_PATH_MAX) return T_EINVAL;
  if (path[0] != '/') return T_EFORBIDDEN;
  if (rl == 1 && root[0] == '/') rl = 0; /* "/": everything is below */
  if (strncmp(path, root, rl) != 0 || path[rl] != '/') return T_EFORBIDDEN;
  const char *r = path + rl;
  while (*r == '/') r++;
  if (!*r) return T_EFORBIDDEN; /* the root itself */
  for (const char *c = r; *c;) { /* no ".." component */
    const char *end = strchr(c, '/');
    size_t len = end ? (size_t)(end - c) : strlen(c);
    if (len == 2 && c[0] == '.' && c[1] == '.') return T_EFORBIDDEN;
    if (!end) break;
    c = end + 1;
  }
  *rest = r;
  return 0;
}

/* A name usable as one path component (a token's subdirectory). */
static int plain_name(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The root's text for dir i: dir, or dir/owner. 0, or -1 (no such root). */
static int root_text(const tlocal *l, int i, const char *owner, char *buf,
                     size_t cap) {
  if (!owner || !owner[0])
    return snprintf(buf, cap, "%s", l->dirs[i]) < (int)cap ? 0 : -1;
  if (!plain_name(owner)) return -1;
  const char *d = strcmp(l->dirs[i], "/") == 0 ? "" : l->dirs[i];
  return snprintf(buf, cap, "%s/%s", d, owner) < (int)cap ? 0 : -1;
}

/* A descriptor of root i for owner (O_PATH); -1 with errno. */
static int root_fd(const tlocal *l, int i, const char *owner) {
  int d = open(l->dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d < 0 || !owner || !owner[0]) return d;
  int r = openat(d, owner, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int err = errno;
  close(d);
  errno = err;
  return r;
}

int tlocal_root(const tlocal *l, int i, const char *owner, char *buf,
                size_t cap) {
  if (!l || i < 0 || i >= l->n || root_text(l, i, owner, buf, cap) != 0)
    return -1;
  int fd = root_fd(l, i, owner);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

/* ---- opening beneath a root ---------------------------------------------- */

/* Walk rest from dirfd one component at a time, never following a
 * symlink (each component is looked at with AT_SYMLINK_NOFOLLOW and opened
 * with O_NOFOLLOW, so a link swapped in between fails the open instead of
 * being followed); the last component is opened with `flags`. -1 with
 * errno (ELOOP for a symlink, EXDEV for ".."). */
static int walk_beneath(int dirfd, const char *rest, int flags) {
  char comp[NAME_MAX + 1];
  int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  const char *c = rest;
  while (cur >= 0) {
    while (*c == '/') c++;
    size_t len = strcspn(c, "/");
    const char *after = c + len;
    while (*after == '/') after++;
    int last = !*after, next = -1, err;
    struct stat st;
    if (len > NAME_MAX) {
      err = ENAMETOOLONG;
    } else {
      memcpy(comp, c, len);
      comp[len] = 0;
      if (len == 0) snprintf(comp, sizeof comp, ".");
      if (strcmp(comp, "..") == 0)
        err = EXDEV;
      else if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) != 0)
        err = errno;
      else if (S_ISLNK(st.st_mode))
        err = ELOOP;
      else if ((next = openat(cur, comp,
                              last ? flags | O_NOFOLLOW
                                   : O_PATH | O_DIRECTORY | O_NOFOLLOW |
                                         O_CLOEXEC)) < 0)
        err = errno;
      else
        err = 0;
    }
    close(cur);
    if (err) {
      errno = err;
      return -1;
    }
    if (last) return next;
    cur = next;
    c = after;
  }
  return -1;
}

static int open_beneath(int dirfd, const char *rest, int flags) {
  if (!tlocal_test_no_openat2) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd;
    do fd = syscall(SYS_openat2, dirfd, rest, &how, sizeof how);
    while (fd < 0 && (errno == EAGAIN || errno == EINTR));
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return (int)fd;
    /* ENOSYS: an older kernel; EPERM: a seccomp filter that knows no
     * openat2 (some container runtimes). */
  }
  return walk_beneath(dirfd, rest, flags);
}

/* The error of a failed open of path (errno err) for field. */
static int open_error(int err, const char *path, const char *field, terr *e) {
  switch (err) {
    case ENOENT:
      return terr_set(e, T_ENOTFOUND, field, -1, "'%s' does not exist", path);
    case ENOTDIR:
      return terr_set(e, T_ENOTFOUND, field, -1,
                      "'%s' does not exist (a component is not a directory)",
                      path);
    case ELOOP:
      return terr_set(e, T_EFORBIDDEN, field, -1,
                      "'%s' goes through a symbolic link; links are not "
                      "followed under --local-dir", path);
    case EXDEV:
      return terr_set(e, T_EFORBIDDEN, field, -1,
                      "'%s' leads outside the allowed directories", path);
    case EACCES:
    case EPERM:
      return terr_set(e, T_EFORBIDDEN, field, -1,
                      "'%s': the server may not open it: %s", path,
                      strerror(err));
    case ENAMETOOLONG:
      return terr_set(e, T_EINVAL, field, -1, "'%s': a name is too long", path);
    default:
      return terr_set(e, T_EIO, field, -1, "cannot open '%s': %s", path,
                      strerror(err));
  }
}

/* Find the root path lies below and open `rest` (the whole rest, or its
 * parent when parent is set: then *name gets the last component) with
 * flags. *fd; errors name field. */
static int resolve(const tlocal *l, const char *owner, const char *path,
                   const char *field, int flags, int parent, int *fd,
                   char *name, size_t name_cap, terr *e) {
  *fd = -1;
  if (!l)
    return terr_set(e, T_EFORBIDDEN, field, -1,
                    "this server has no --local-dir: same-host files are off");
  if (!path)
    return terr_set(e, T_EINVAL, field, -1, "must be an absolute path string");
  char root[TLOCAL_PATH_MAX];
  const char *rest = NULL;
  int i, why = T_EFORBIDDEN;
  for (i = 0; i < l->n; i++) {
    if (root_text(l, i, owner, root, sizeof root) != 0) continue;
    why = tlocal_path_below(root, path, &rest);
    if (why == 0 || why == T_EINVAL) break;
  }
  if (why == T_EINVAL)
    return terr_set(e, T_EINVAL, field, -1, "path is over %d bytes",
                    TLOCAL_PATH_MAX);
  if (why)
    return terr_set(e, T_EFORBIDDEN, field, -1,
                    "'%.200s' is not an absolute path below an allowed "
                    "directory (--local-dir%s), or it has a '..'", path,
                    owner && owner[0] ? ", the token's own subdirectory" : "");
  int rfd = root_fd(l, i, owner);
  if (rfd < 0) {
    int err = errno;
    return err == ELOOP || err == ENOTDIR
               ? open_error(ELOOP, path, field, e)
               : terr_set(e, err == ENOENT ? T_EFORBIDDEN : T_EIO, field, -1,
                          "the allowed directory %s cannot be opened: %s",
                          root, strerror(err));
  }
  char sub[TLOCAL_PATH_MAX];
  snprintf(sub, sizeof sub, "%s", rest);
  size_t sl = strlen(sub);
  while (sl > 1 && sub[sl - 1] == '/') sub[--sl] = 0;
  int rc = 0;
  if (parent) {
    char *slash = strrchr(sub, '/');
    const char *last = slash ? slash + 1 : sub;
    if (strlen(last) > TLOCAL_NAME_MAX || !plain_name(last) ||
        strlen(last) >= name_cap) {
      close(rfd);
      return terr_set(e, T_EINVAL, field, -1,
                      "'%.200s': the file name must be 1 to %d bytes", path,
                      TLOCAL_NAME_MAX);
    }
    snprintf(name, name_cap, "%s", last);
    if (slash) {
      *slash = 0;
      *fd = open_beneath(rfd, sub, O_PATH | O_DIRECTORY | O_CLOEXEC);
    } else {
      *fd = fcntl(rfd, F_DUPFD_CLOEXEC, 0);
    }
  } else {
    *fd = open_beneath(rfd, sub, flags);
  }
  if (*fd < 0) rc = open_error(errno, path, field, e);
  close(rfd);
  return rc;
}

int tlocal_open(const tlocal *l, const char *owner, const char *path,
                const char *field, int *fd, terr *e) {
  int rc = resolve(l, owner, path, field,
                   O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0, fd, NULL,
                   0, e);
  if (rc) return rc;
  struct stat st;
  if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*fd);
    *fd = -1;
    return terr_set(e, T_EINVAL, field, -1, "'%.200s' is not a regular file",
                    path);
  }
  return 0;
}

int tlocal_open_rw(const tlocal *l, const char *owner, const char *path,
                   const char *field, int *fd, terr *e) {
  int rc = resolve(l, owner, path, field,
                   O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0, fd, NULL, 0,
                   e);
  if (rc) return rc;
  struct stat st;
  if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(*fd);
    *fd = -1;
    return terr_set(e, T_EINVAL, field, -1, "'%.200s' is not a regular file",
                    path);
  }
  return 0;
}

/* ---- inputs ---------------------------------------------------------------- */

int tlocal_npy_meta(const tlocal *l, const char *owner, const char *path,
                    const char *field, int64_t max_elems, tlocal_pins *pins,
                    tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  int fd;
  int rc = tlocal_open(l, owner, path, field, &fd, e);
  if (rc) return tlocal_pin_failed(pins, field, rc, e);
  struct stat st;
  if (fstat(fd, &st) == 0 &&
      (rc = tlocal_pin_same(pins, field, path, &st, e))) {
    close(fd); /* not the file accepted: nothing of it is read */
    return rc;
  }
  unsigned char *buf = malloc(10 + 65536 + 16);
  size_t have = 0;
  if (!buf) {
    close(fd);
    return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  }
  npy_head h;
  terr sub;
  terr_clear(&sub);
  for (;;) {
    size_t need = npy_head_need(buf, have);
    if (need <= have || need > 10 + 65536) break;
    ssize_t n = pread(fd, buf + have, need - have, (off_t)have);
    if (n <= 0) break;
    have += (size_t)n;
  }
  rc = npy_head_read(buf, have, max_elems, &h, &sub);
  free(buf);
  if (rc == T_OK && (fstat(fd, &st) != 0 ||
                     (uint64_t)st.st_size != h.data_off + h.src_bytes)) {
    rc = terr_set(&sub, T_EINVAL, "", -1,
                  "the file has %lld bytes; its header says %llu",
                  (long long)st.st_size,
                  (unsigned long long)(h.data_off + h.src_bytes));
  } else if (rc == T_OK && !npy_head_native(&h)) {
    rc = terr_set(&sub, T_EINVAL, "", -1,
                  "only float32 and float64 files are mapped (this one holds "
                  "integers or booleans)");
  } else if (rc == T_OK && h.data_off % (size_t)h.src_itemsize != 0) {
    rc = terr_set(&sub, T_EINVAL, "", -1, "its data is not aligned");
  }
  close(fd);
  if (rc)
    return tlocal_pin_failed(
        pins, field,
        terr_set(e, rc == T_ETOOLARGE ? T_ETOOLARGE : T_EINVAL, field,
                 sub.position, "'%.200s' is not a usable .npy: %s", path,
                 sub.message),
        e);
  if ((rc = tlocal_pin_use(pins, field, path, &st, h.dtype, h.ndim, h.shape,
                           e)))
    return rc;
  *dt = h.dtype;
  *ndim = h.ndim;
  for (int i = 0; i < h.ndim; i++) shape[i] = h.shape[i];
  return 0;
}

typedef struct lf_rec {
  char field[TERR_FIELD_MAX];
  int fd; /* -1: a hook's record (tlocal_log_hook) */
  struct stat st;
  atomic_int torn;
  int (*check)(void *arg, const char *field, terr *e);
  void (*drop)(void *arg);
  void *arg;
} lf_rec;

struct tlocal_log {
  lf_rec **v;
  size_t n, cap;
};

tlocal_log *tlocal_log_new(void) { return calloc(1, sizeof(tlocal_log)); }

void tlocal_log_free(tlocal_log *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n; i++) {
    if (g->v[i]->fd >= 0) close(g->v[i]->fd);
    if (g->v[i]->drop) g->v[i]->drop(g->v[i]->arg);
    free(g->v[i]);
  }
  free(g->v);
  free(g);
}

int tlocal_log_check(tlocal_log *g, terr *e) {
  for (size_t i = 0; g && i < g->n; i++) {
    lf_rec *r = g->v[i];
    if (r->check) {
      int rc = r->check(r->arg, r->field, e);
      if (rc) return rc;
      continue;
    }
    struct stat now;
    int torn = atomic_load(&r->torn);
    if (torn || fstat(r->fd, &now) != 0 || now.st_size != r->st.st_size ||
        now.st_mtim.tv_sec != r->st.st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != r->st.st_mtim.tv_nsec)
      return terr_set(e, T_ECONFLICT, r->field, -1,
                      "file changed while the job ran (%s); the job's result "
                      "was dropped", torn ? "it was truncated under the job"
                                          : "its size or time changed");
  }
  return 0;
}

/* Room for one more record in log (NULL: none needed): 0 or -1. */
static int log_room(tlocal_log *log) {
  if (!log || log->n < log->cap) return 0;
  size_t cap = log->cap * 2 + 4;
  lf_rec **v = realloc(log->v, cap * sizeof *v);
  if (!v) return -1;
  log->v = v;
  log->cap = cap;
  return 0;
}

int tlocal_log_hook(tlocal_log *g, const char *field,
                    int (*check)(void *arg, const char *field, terr *e),
                    void (*drop)(void *arg), void *arg) {
  lf_rec *r = calloc(1, sizeof *r);
  if (!r || log_room(g) != 0) {
    free(r);
    return -1;
  }
  snprintf(r->field, sizeof r->field, "%s", field);
  r->fd = -1;
  r->check = check, r->drop = drop, r->arg = arg;
  g->v[g->n++] = r;
  return 0;
}

int tlocal_map(const tlocal *l, const char *owner, const char *path,
               const char *field, int64_t max_elems, tlocal_pins *pins,
               tlocal_log *log, tarray **out, terr *e) {
  *out = NULL;
  int fd;
  int rc = tlocal_open(l, owner, path, field, &fd, e);
  if (rc) return tlocal_pin_failed(pins, field, rc, e);
  lf_rec *r = calloc(1, sizeof *r);
  if (!r || log_room(log) != 0) {
    free(r);
    close(fd);
    return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  }
  snprintf(r->field, sizeof r->field, "%s", field);
  r->fd = fd;
  terr sub;
  terr_clear(&sub);
  tarray *a = NULL;
  /* The inode accepted, unchanged, before anything of it is mapped. */
  if (fstat(fd, &r->st) != 0)
    rc = terr_set(e, T_EIO, field, -1, "cannot stat '%.200s': %s", path,
                  strerror(errno));
  else
    rc = tlocal_pin_same(pins, field, path, &r->st, e);
  if (rc) {
    close(fd);
    free(r);
    return rc;
  }
  rc = tarray_map_npy_fd(fd, path, 1, log ? &r->torn : NULL, &a, &sub);
  if (rc == T_OK && a->size > max_elems)
    rc = terr_set(&sub, T_ETOOLARGE, "", -1, "more than %lld elements",
                  (long long)max_elems);
  if (rc)
    rc = tlocal_pin_failed(pins, field,
                    terr_set(e, rc, field, sub.position, "%s", sub.message), e);
  /* The header as mapped is the one the plan was checked against. */
  else
    rc = tlocal_pin_use(pins, field, path, &r->st, a->dtype, a->ndim,
                        a->shape, e);
  if (rc) {
    tarray_free(a);
    close(fd);
    free(r);
    return rc;
  }
  if (log) {
    log->v[log->n++] = r;
  } else { /* nobody checks it at the end: sigbus_torn(a->guard) alone */
    close(fd);
    free(r);
  }
  *out = a;
  return 0;
}

/* ---- outputs --------------------------------------------------------------- */
/* The result is written into an unnamed file (O_TMPFILE) in the output's
 * own directory, or, where that filesystem refuses one, into a named file
 * under <allowed dir>/.tessel-tmp; it gets the user's name only in
 * tlocal_out_place, after tlocal_out_check, by a link (or a rename) into
 * the directory found again from the root. The descriptor o->fd is the
 * file from creation to placement: nothing reopens it by name. */

int tlocal_test_no_tmpfile;

#define TLOCAL_TMPDIR ".tessel-tmp"

/* Drop the temporary: an unnamed one is gone with its descriptor, a named
 * one is unlinked. */
static void out_drop(tlocal_out *o) {
  if (o->dirfd < 0) return; /* never opened: fd and tmpdirfd mean nothing */
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  if (o->tmp[0] && o->tmpdirfd >= 0) unlinkat(o->tmpdirfd, o->tmp, 0);
  o->tmp[0] = 0;
}

/* Remove the named temporaries of processes that are gone from
 * dir/.tessel-tmp ("t<pid>.<hex>"; a live daemon's stay). */
static void out_sweep(const char *dir) {
  int d = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int t = d < 0 ? -1
                : openat(d, TLOCAL_TMPDIR,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d >= 0) close(d);
  DIR *dp = t < 0 ? NULL : fdopendir(t);
  if (!dp) {
    if (t >= 0) close(t);
    return;
  }
  struct dirent *de;
  while ((de = readdir(dp))) {
    char *end = NULL;
    long pid = de->d_name[0] == 't' ? strtol(de->d_name + 1, &end, 10) : 0;
    if (pid <= 0 || !end || *end != '.') continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    if (unlinkat(dirfd(dp), de->d_name, 0) == 0)
      log_warn("local files: removed %s/" TLOCAL_TMPDIR "/%s, the temporary "
               "output of a process that died (pid %ld)", dir, de->d_name,
               pid);
  }
  closedir(dp);
}

int tlocal_out_open(const tlocal *l, const char *owner, const char *path,
                    const char *field, tlocal_out *o, terr *e) {
  memset(o, 0, sizeof *o);
  o->dirfd = o->fd = o->tmpdirfd = -1;
  o->l = l;
  snprintf(o->field, sizeof o->field, "%s", field);
  int rc = resolve(l, owner, path, field, 0, 1, &o->dirfd, o->name,
                   sizeof o->name, e);
  if (rc) return rc;
  struct stat st;
  if (fstat(o->dirfd, &st) != 0) {
    rc = terr_set(e, T_EIO, field, -1, "cannot look at the directory of "
                  "'%.200s': %s", path, strerror(errno));
  } else {
    o->dev = st.st_dev;
    o->ino = st.st_ino;
    if (!(o->path = strdup(path)) || !(o->owner = strdup(owner ? owner : "")))
      rc = terr_set(e, T_ENOMEM, field, -1, "out of memory");
  }
  if (rc == 0 && fstatat(o->dirfd, o->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode))
      rc = terr_set(e, T_EFORBIDDEN, field, -1,
                    "'%.200s' is a symbolic link; it is not replaced", path);
    else if (!S_ISREG(st.st_mode))
      rc = terr_set(e, T_EINVAL, field, -1,
                    "'%.200s' exists and is not a regular file", path);
  } else if (rc == 0 && errno != ENOENT) {
    rc = open_error(errno, path, field, e);
  }
  if (rc) tlocal_out_close(o);
  return rc;
}

/* The fallback's directory: .tessel-tmp in the allowed directory that
 * o->path lies below (made 0700 when missing), into o->tmpdirfd. */
static int out_tmpdir(tlocal_out *o, int why, terr *e) {
  char root[TLOCAL_PATH_MAX];
  const char *rest;
  int err = ENOENT;
  for (int i = 0; o->tmpdirfd < 0 && i < o->l->n; i++) {
    if (root_text(o->l, i, o->owner, root, sizeof root) != 0 ||
        tlocal_path_below(root, o->path, &rest) != 0)
      continue;
    int d = open(o->l->dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0 && (mkdirat(d, TLOCAL_TMPDIR, 0700) == 0 || errno == EEXIST))
      o->tmpdirfd = openat(d, TLOCAL_TMPDIR,
                           O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    err = errno;
    if (d >= 0) close(d);
    break;
  }
  if (o->tmpdirfd >= 0) return 0;
  int rc = terr_set(e, T_EIO, o->field, -1,
                    "the filesystem of '%.200s' refuses unnamed files "
                    "(O_TMPFILE: %s) and the allowed directory's "
                    TLOCAL_TMPDIR " cannot be used: %s", o->path,
                    strerror(why), strerror(err));
  return terr_nospace(e, rc, err);
}

/* Create the temporary (o->fd). 0, or an error naming the field. */
static int out_tmp(tlocal_out *o, terr *e) {
  out_drop(o);
  int err = EOPNOTSUPP;
  if (!tlocal_test_no_tmpfile) {
    o->fd = openat(o->dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (o->fd >= 0) return 0;
    err = errno;
  }
  if (err == EOPNOTSUPP || err == EISDIR || err == EINVAL) {
    int rc = out_tmpdir(o, err, e);
    if (rc) return rc;
    for (int tries = 0; tries < 8; tries++) {
      uint64_t r = 0;
      if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint64_t)(uintptr_t)o ^ (uint64_t)tries * 0x9E3779B97F4A7C15ULL;
      snprintf(o->tmp, sizeof o->tmp, "t%ld.%016llx", (long)getpid(),
               (unsigned long long)r);
      o->fd = openat(o->tmpdirfd, o->tmp,
                     O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (o->fd >= 0) return 0;
      if ((err = errno) != EEXIST) break;
    }
    o->tmp[0] = 0;
  }
  int rc = terr_set(e, err == EACCES || err == EPERM ? T_EFORBIDDEN : T_EIO,
                    o->field, -1, "cannot create the output file for "
                    "'%.200s': %s", o->path, strerror(err));
  return terr_nospace(e, rc, err);
}

int tlocal_out_create(tlocal_out *o, tdtype dt, int ndim, const int64_t *shape,
                      int sink, tarray **out, terr *e) {
  *out = NULL;
  int rc = out_tmp(o, e);
  if (rc) return rc;
  tarray *a = NULL;
  rc = tarray_create_npy_fd(o->fd, o->name, dt, ndim, shape, sink, &a, e);
  if (rc == T_OK && !sink) {
    /* A mapping reads zeros where the file was cut (only the daemon's own
     * user can reach an unnamed file, through /proc): the check sees it. */
    a->guard = sigbus_guard(a->map_base, a->map_len, PROT_READ | PROT_WRITE,
                            NULL);
    if (!a->guard) {
      tarray_free(a);
      a = NULL;
      rc = terr_set(e, T_EUNAVAIL, o->field, -1,
                    "too many same-host files mapped at once");
    }
  }
  if (rc) {
    if (e && !e->field[0]) terr_prefix(e, o->field);
    out_drop(o);
    return rc;
  }
  o->mapped = !sink;
  *out = a;
  return 0;
}

int tlocal_out_write(tlocal_out *o, const tarray *a, terr *e) {
  int rc = out_tmp(o, e);
  if (rc) return rc;
  int fd = fcntl(o->fd, F_DUPFD_CLOEXEC, 0);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
  if (!f) {
    if (fd >= 0) close(fd);
    rc = terr_set(e, T_ENOMEM, o->field, -1, "out of memory");
  } else {
    rc = npy_write(f, a, e);
    int err = rc ? errno : 0;
    if (fclose(f) != 0 && rc == T_OK) {
      err = errno;
      rc = terr_set(e, T_EIO, o->field, -1, "cannot write the output file "
                    "for '%.200s': %s", o->path, strerror(err));
    }
    rc = terr_nospace(e, rc, err);
  }
  o->mapped = 0;
  if (rc) out_drop(o);
  return rc;
}

int tlocal_out_check(tlocal_out *o, tdtype dt, int ndim, const int64_t *shape,
                     int torn, terr *e) {
  if (o->dirfd < 0 || o->fd < 0)
    return terr_set(e, T_EINTERNAL, o->field, -1, "no output file was made");
  char want[NPY_HEADER_MAX], got[NPY_HEADER_MAX];
  size_t hl = npy_header(dt, ndim, shape, want);
  int64_t expect = (int64_t)hl + tshape_size(ndim, shape, INT64_MAX) *
                                     (int64_t)tdtype_size(dt);
  struct stat st;
  const char *why = NULL;
  off_t hole;
  if (torn)
    why = "it was cut while the job wrote it (its mapping was torn)";
  else if (fstat(o->fd, &st) != 0 || st.st_size != expect)
    why = "its length is not its header's and data's";
  else if (pread(o->fd, got, hl, 0) != (ssize_t)hl || memcmp(got, want, hl))
    why = "its header was overwritten";
  else if (!o->mapped && (hole = lseek(o->fd, 0, SEEK_HOLE)) >= 0 &&
           hole < st.st_size)
    /* Every byte of a sink or a written file was written: a hole is what
     * a truncation under the write left (a mapping's untouched pages may
     * be holes of a reserved file, so it is judged by its guard). */
    why = "part of it was cut away while the job wrote it";
  if (!why) return 0;
  out_drop(o);
  return terr_set(e, T_ECONFLICT, o->field, -1,
                  "file changed while the job ran: the output for '%.200s' "
                  "was not whole (%s); nothing was placed", o->path, why);
}

/* path's parent resolved again from the root into *fd: 0 when it is still
 * the directory pinned at open, else -1 (moved out, replaced, gone). */
static int out_same_dir(tlocal_out *o, int *fd) {
  char name[TLOCAL_NAME_MAX + 1];
  terr sub;
  struct stat st;
  if (resolve(o->l, o->owner, o->path, o->field, 0, 1, fd, name, sizeof name,
              &sub) != 0)
    return -1;
  if (fstat(*fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino)
    return 0;
  close(*fd);
  *fd = -1;
  return -1;
}

static int out_moved(tlocal_out *o, terr *e) {
  return terr_set(e, T_ECONFLICT, o->field, -1,
                  "the directory of '%.200s' was moved or replaced while the "
                  "job ran (an output is written only into the directory that "
                  "was checked, below the allowed directory); nothing was "
                  "written", o->path);
}

/* Link the unnamed file fd into dirfd as name: 0, or -1 with errno.
 * AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; without it (ENOENT) the
 * /proc/self/fd link does the same. */
static int out_link(int fd, int dirfd, const char *name) {
  if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0) return 0;
  if (errno != ENOENT && errno != EPERM) return -1;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW);
}

/* Put the temporary under o->name in d (the pinned directory): 0, or -1
 * with errno (nothing placed, the name as it was). */
static int out_put(tlocal_out *o, int d) {
  if (o->tmp[0]) { /* the named fallback: a rename replaces atomically */
    if (renameat(o->tmpdirfd, o->tmp, d, o->name) != 0) return -1;
    o->tmp[0] = 0;
    return 0;
  }
  if (out_link(o->fd, d, o->name) == 0) return 0;
  if (errno != EEXIST) return -1; /* else an old file: replaced by a rename */
  char side[TLOCAL_NAME_MAX + 40];
  for (int tries = 0; tries < 8; tries++) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
      r = (uint64_t)(uintptr_t)o ^ (uint64_t)tries * 0x9E3779B97F4A7C15ULL;
    snprintf(side, sizeof side, ".%s.tmp%016llx", o->name,
             (unsigned long long)r);
    if (out_link(o->fd, d, side) == 0) {
      if (renameat(d, side, d, o->name) == 0) return 0;
      int err = errno;
      unlinkat(d, side, 0);
      errno = err;
      return -1;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

int tlocal_out_place(tlocal_out *o, terr *e) {
  if (o->dirfd < 0 || o->fd < 0)
    return terr_set(e, T_EINTERNAL, o->field, -1, "no output file was made");
  int d = -1, rc = 0;
  if (out_same_dir(o, &d) != 0) {
    out_drop(o);
    return out_moved(o, e);
  }
  if (out_put(o, d) != 0) {
    int err = errno;
    rc = terr_set(e, err == EACCES || err == EPERM ? T_EFORBIDDEN : T_EIO,
                  o->field, -1, "cannot put the output at '%.200s': %s%s",
                  o->path, strerror(err),
                  err == EXDEV ? " (it is on another filesystem than the "
                                 "allowed directory's " TLOCAL_TMPDIR ")"
                               : "");
    rc = terr_nospace(e, rc, err);
  } else {
    /* Moved out between the check and the link: take the entry back (if
     * it is still ours) and fail as if it had moved before. */
    int d2 = -1;
    struct stat mine, there;
    if (out_same_dir(o, &d2) != 0) {
      if (fstat(o->fd, &mine) == 0 &&
          fstatat(d, o->name, &there, AT_SYMLINK_NOFOLLOW) == 0 &&
          there.st_dev == mine.st_dev && there.st_ino == mine.st_ino)
        unlinkat(d, o->name, 0);
      rc = out_moved(o, e);
    }
    if (d2 >= 0) close(d2);
  }
  close(d);
  out_drop(o);
  return rc;
}

void tlocal_out_discard(tlocal_out *o) { out_drop(o); }

int tlocal_out_map(tlocal_out *o, tarray **out, terr *e) {
  *out = NULL;
  if (o->dirfd < 0 || o->fd < 0)
    return terr_set(e, T_EINTERNAL, o->field, -1, "no output file was made");
  int rc = tarray_map_npy_fd(o->fd, o->name, 1, NULL, out, e);
  if (rc && e && !e->field[0]) terr_prefix(e, o->field);
  return rc;
}

void tlocal_out_close(tlocal_out *o) {
  if (!o) return;
  if (o->dirfd >= 0) {
    out_drop(o);
    if (o->tmpdirfd >= 0) close(o->tmpdirfd);
    close(o->dirfd);
  }
  o->dirfd = o->fd = o->tmpdirfd = -1;
  free(o->path);
  free(o->owner);
  o->path = o->owner = NULL;
}
