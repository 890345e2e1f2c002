/* compute/array/localfile.h — the same-host path: .npy files named by path under the
 * directories of --local-dir, read by mapping (never copied) and written
 * unnamed (O_TMPFILE) and linked into place when complete.
 *
 * Off unless the daemon was given --local-dir (tlocal NULL: every path is
 * 403). Which directories a request may use ("roots"): without tokens
 * (owner "") each DIR itself; with tokens, for token `name`, DIR/name for
 * each DIR where that subdirectory exists (an owner name holding '/' or
 * being "." or ".." has none). Everything else is T_EFORBIDDEN (403)
 * naming the field.
 *
 * A path is checked as text first: absolute, at most TLOCAL_PATH_MAX bytes,
 * no NUL, no ".." component, and starting with a root followed by '/'.
 * The rest is then opened relative to a descriptor of the root with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
 * (Linux >= 5.6; where the kernel lacks it, ENOSYS, the components are
 * walked one by one with openat(O_NOFOLLOW | O_DIRECTORY)): a symlink
 * anywhere below the root, even one pointing inside it, is 403, and the
 * file reached is the one the text names, whatever renames race with it.
 * Inputs are opened O_RDONLY | O_NONBLOCK (a FIFO never blocks us) and must
 * be regular files. A missing file is 404 (not_found, as an unknown array
 * id is); a file that is not a float .npy, a bad header, or a length that
 * disagrees with the header (truncated) is 400.
 *
 * A job's inputs are pinned when it is accepted (compute/array/localpin.h): its
 * run reads the very inode its submit checked, or fails T_ECONFLICT.
 *
 * A mapped input is a guarded mapping (util/sigbus.h): a user may truncate
 * the file while a job reads it, which would raise SIGBUS; instead the
 * mapping reads zeros and is marked torn, and tlocal_log_check fails the
 * job naming the input ("file changed while the job ran"), as it does when
 * the file's size or mtime changed between the open and the end. The
 * tarray is an ordinary mapped one (data, map_base) with a->guard set.
 *
 * Output files are never visible until complete. tlocal_out_open resolves
 * the parent directory the same way, checks the final name (not a symlink,
 * not a directory; an existing regular file is replaced) and pins the
 * directory's identity (st_dev, st_ino). tlocal_out_create makes the
 * result in an unnamed file, open(O_TMPFILE) in that directory: no one can
 * open, truncate or rename it by name, and a crash (kill -9) leaves
 * nothing, its blocks freed with the last descriptor. Where the filesystem
 * refuses O_TMPFILE (EOPNOTSUPP, EISDIR, EINVAL) the temporary is a named
 * file "t<pid>.<random>" in <allowed dir>/.tessel-tmp (made by the daemon,
 * mode 0700), never in the user's directory; tlocal_create removes the
 * ones of dead processes at start (another daemon's live ones stay).
 * tlocal_out_check then checks what was written (fstat size = header +
 * data, the header read back and compared, a guarded mapping not torn, a
 * sink or written file without holes: a truncation under a write leaves
 * zeros) and tlocal_out_place puts it under the name: the parent is
 * resolved again from the root beneath the allowed directory and must be
 * the very directory pinned at open (a directory moved out of --local-dir,
 * or replaced, fails T_ECONFLICT naming the field, and nothing is written
 * anywhere), then the file is linked in: linkat (AT_EMPTY_PATH, or
 * /proc/self/fd where that needs a capability) straight to a name that
 * does not exist, else to a temporary name beside it renamed over the old
 * file (atomic: a reader sees the old file or the new, whole). After the
 * link the parent is resolved once more; had it moved out in between, the
 * placed entry is removed again and the job fails the same way. The
 * caller (compute/sched/run.c) places only after the store confirmed that its node
 * still holds the job.
 *
 * Threads: any; no shared state. Ownership: returned descriptors, arrays
 * and logs are the caller's.
 */
#ifndef TESSEL_ARRAY_LOCALFILE_H
#define TESSEL_ARRAY_LOCALFILE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "compute/array/localpin.h"
#include "compute/array/tarray.h"

#define TLOCAL_PATH_MAX 4096
#define TLOCAL_NAME_MAX 200 /* an output's final name (room for the temp's) */

typedef struct tlocal {
  int n;
  char **dirs; /* canonical (realpath), no trailing '/' except "/" */
} tlocal;

/* From the --local-dir values: each must exist and be a directory (else
 * T_EINVAL naming it). n == 0 gives *out NULL (the feature is off). */
int tlocal_create(const char *const *dirs, int n, tlocal **out, terr *e);
void tlocal_free(tlocal *l);

/* The textual checks alone, for one root: 0 with *rest pointing into path
 * (the part below the root), or T_EFORBIDDEN / T_EINVAL. Exposed for the
 * fuzz target: *rest never holds a ".." component, never starts with '/'
 * and path == root + "/" + *rest. */
int tlocal_path_below(const char *root, const char *path, const char **rest);
/* The text of allowed directory i for owner ("": the directory itself;
 * else dir/owner) into buf, when it exists now as a directory reached
 * without a symlink: 0; -1 otherwise (no such root for this owner). */
int tlocal_root(const tlocal *l, int i, const char *owner, char *buf,
                size_t cap);

/* Open the regular file `path` for reading (see above). *fd is the
 * caller's. Errors name `field`. */
int tlocal_open(const tlocal *l, const char *owner, const char *path,
                const char *field, int *fd, terr *e);

/* The same for reading and writing (a region, compute/array/region.h):
 * O_RDWR, a regular file, the same resolution and errors. */
int tlocal_open_rw(const tlocal *l, const char *owner, const char *path,
                   const char *field, int *fd, terr *e);

/* Header only (submit): dtype, shape and element count of the .npy at path,
 * checked as the mapping will check it (float32/float64, C order, length
 * exactly header + data). pins (NULL: none kept): the field's pin is
 * compared (T_ECONFLICT on any difference), or recorded when it has none. */
int tlocal_npy_meta(const tlocal *l, const char *owner, const char *path,
                    const char *field, int64_t max_elems, tlocal_pins *pins,
                    tdtype *dt, int *ndim, int64_t *shape, terr *e);

/* What a job's run opened, checked at its end. */
typedef struct tlocal_log tlocal_log;
tlocal_log *tlocal_log_new(void); /* NULL: out of memory */
/* 0, or T_ECONFLICT naming the first input that was torn or whose size or
 * mtime changed since it was opened. Call after the arrays are freed or
 * while they live; any number of times. */
int tlocal_log_check(tlocal_log *g, terr *e);
void tlocal_log_free(tlocal_log *g); /* NULL ok */
/* Another check for the end (a region a job read, compute/array/region.h):
 * tlocal_log_check calls check(arg, field, e) in its turn (non-zero fails
 * the job with e), tlocal_log_free calls drop(arg) (NULL: none). 0, or -1
 * out of memory (nothing recorded, drop not called). */
int tlocal_log_hook(tlocal_log *g, const char *field,
                    int (*check)(void *arg, const char *field, terr *e),
                    void (*drop)(void *arg), void *arg);

/* Map the .npy at path (guarded, private, read/write: writes stay in the
 * job's copy). Recorded in `log` when not NULL (then the log must outlive
 * the array). pins as for tlocal_npy_meta: the descriptor opened is
 * compared with the field's pin (identity first, then the mapped header)
 * before the array is handed out, and the element count is checked
 * against max_elems as mapped. *out is the caller's (tarray_free). */
int tlocal_map(const tlocal *l, const char *owner, const char *path,
               const char *field, int64_t max_elems, tlocal_pins *pins,
               tlocal_log *log, tarray **out, terr *e);

/* An output file's place: the parent directory (descriptor and identity),
 * the final name, and the file being written. */
typedef struct tlocal_out {
  int dirfd;                     /* -1 when closed */
  int fd;                        /* the temporary, open; -1 when none */
  int tmpdirfd;                  /* the fallback's .tessel-tmp; -1 when none */
  int mapped;                    /* the temporary is a mapping (not a sink) */
  dev_t dev;                     /* the parent's identity at open */
  ino_t ino;
  const tlocal *l;
  char *path, *owner;            /* copies: the parent is resolved again */
  char name[TLOCAL_NAME_MAX + 1];
  char tmp[64];                  /* the fallback temporary's name; "" */
  char field[64];
} tlocal_out;
/* Resolve path's parent and check its final name. The out is the
 * caller's (tlocal_out_close), also after a failure. */
int tlocal_out_open(const tlocal *l, const char *owner, const char *path,
                    const char *field, tlocal_out *out, terr *e);
/* Create the unnamed temporary .npy of dt/shape: a guarded shared mapping
 * (sink 0) or a sink (sink 1), as tarray_create_npy(_sink). One temporary
 * at a time: a second call first drops the first. */
int tlocal_out_create(tlocal_out *o, tdtype dt, int ndim, const int64_t *shape,
                      int sink, tarray **out, terr *e);
/* A heap result: the temporary written with npy_write. */
int tlocal_out_write(tlocal_out *o, const tarray *a, terr *e);
/* The temporary is complete (a sink closed, a mapping freed): check it is
 * the .npy of dt/shape (its size, its header read back, no hole: see
 * above) and that a mapping was not torn (torn: a->guard's state).
 * T_ECONFLICT naming the field, and the temporary dropped, when not. */
int tlocal_out_check(tlocal_out *o, tdtype dt, int ndim, const int64_t *shape,
                     int torn, terr *e);
/* Place the checked temporary under the name (see above). On failure the
 * temporary is dropped and the name left as it was. */
int tlocal_out_place(tlocal_out *o, terr *e);
/* Drop the temporary (if any); the directory stays open. */
void tlocal_out_discard(tlocal_out *o);
/* The complete temporary (a sink that was closed), mapped guarded and
 * private for reading back (compare). */
int tlocal_out_map(tlocal_out *o, tarray **out, terr *e);
/* Drop the temporary (if any), close the directory, free the copies. */
void tlocal_out_close(tlocal_out *o);
/* Tests only: 1 makes tlocal_out_create behave as where the filesystem
 * refuses O_TMPFILE (the named fallback under .tessel-tmp). */
extern int tlocal_test_no_tmpfile;

/* Tests only: 1 makes the resolution walk components as it does where the
 * kernel has no openat2. */
extern int tlocal_test_no_openat2;

#endif
