/* npyfile.c — creating .npy result files: sized, their blocks reserved, the
 * header written; then filled by slices (tarray_create_npy_sink and
 * tarray_write, the service's big results) or through a shared mapping
 * (tarray_create_npy).
 *
 * Why a sink for big map results (issue 11). A map result used to be a
 * MAP_SHARED mapping of the fallocated file that the pool threads wrote
 * into: every 4 KiB page faulted (page cache allocation, zeroing,
 * ext4_page_mkwrite with a journal handle), and with several threads the
 * faults serialise on the file, so `cpu` could be slower than `serial`.
 * Measured with tests/bench/bench_sink.c (x + 1 over N float64, the VM in
 * the map kind's chunks, the service's pool, a new file per result, ext4 on
 * the 2-core build VM shared with other builds; M elem/s, median of 5,
 * serial / 2 threads, run 1 with the cores mostly free, run 2 loaded):
 *
 *   sink                                      N=1e7        N=1e8
 *   mapped (the old way)                      189 / 326    143 / 484
 *   mapped + MADV_POPULATE_WRITE per chunk    286 / 342    312 / 493
 *   heap (THP) then pwrite per thread slice   130 / 207     49 / 256
 *   heap then npy_write (small results' way)  106 / 203     87 / 114  (run 2)
 *   chunk: own buffer, pwrite at its offset   311 / 411    324 / 518
 *   no file at all (reused memory, the floor) 791 / 1385   560 / 1190
 *
 * The chunk sink wins at every size and thread count, serial included: it
 * moves the least memory (the inputs read once, the result written once
 * into the page cache from a buffer that stays in L2: no page zeroing, no
 * second full-size copy) and takes no page faults. Its limit is the file's
 * inode lock, which ext4 holds across a buffered write's copy: threads'
 * pwrites queue on it (6 % of the run spinning on it with 2 threads, next to
 * 9 % copying), so the writes of one result are one memory copy stream at a
 * time while the computing overlaps. That caps a cheap expression near
 * one thread's buffered-write rate (here 4.2-4.6 GB/s, ~550 M float64/s:
 * dd of 512 KiB blocks into a fallocated file) however many threads run;
 * costlier expressions scale further; `cpu` does not fall behind `serial`,
 * which pays the same copy. (16 cores were not measured here.)
 * Through the daemon (POST ?wait, x + 1 over 1 GiB, a range input, six
 * results kept on disk per batch, 9 jobs each): wall time serial
 * 4780 -> 1000 ms, cpu 2919 -> 838 ms (medians; tests/bench/README.md).
 * Small results: chunk 490 / 460 against heap + npy_write 337 / 364 at
 * 1e6, 472 / 488 against 554 / 453 at 1e5; compute/sched/run.c uses the sink for
 * any map result that is not kept in the store row.
 *
 * Inputs (an upload mapped MAP_PRIVATE by tarray_map_npy) were measured in
 * the same runs with the chunk sink: a fresh mapping costs what a heap
 * array does within the noise (fault-around maps 16 pages a fault); a
 * whole-mapping MADV_POPULATE_READ, a per-chunk one by the thread about to
 * read, or MADV_WILLNEED + SEQUENTIAL moved the figures by 0-10 %, inside
 * the run-to-run spread, so the mapping is left as it was; MAP_POPULATE
 * made it 2.3x slower (the mapping is writable, so populating copies every
 * page).
 *
 * A third form is a streamed upload's file (tarray_create_npy_stream):
 * its shape is known only at the end, so its data starts after a fixed
 * NPY_HEADER_MAX-byte header area, is appended with pwrite, and the
 * header is written (padded to that length) by tarray_stream_finish; its
 * blocks cannot be reserved ahead.
 *
 * Full disk: both ways reserve every block of the file (posix_fallocate)
 * before anything is computed, so a full disk is T_ENOSPACE at creation,
 * before any work. On the data directory's disk a file must also leave
 * the reserve's low mark free (util/datadir.h: reserve_admit), so that
 * the store keeps room for its deletes and bookkeeping. A store through a shared mapping to a page with no
 * block behind it would raise SIGBUS, which no caller can handle; pwrite
 * would report ENOSPC, which tarray_write turns into T_ENOSPACE as well.
 *
 * Ownership: every tarray returned is the caller's (tarray_free, which
 * unmaps or closes the file). Threads: any thread may create; any number
 * of threads may tarray_write disjoint ranges of one array at once (pwrite
 * at their own offsets; nothing is locked here).
 */
#include "compute/array/tarray.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compute/array/codec/spare.h"
#include "util/datadir.h"
#include "util/util.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif


/* Allocate len bytes of fd's blocks: 0 or an errno. posix_fallocate, retried
 * on EINTR; where the file system cannot (EOPNOTSUPP, EINVAL), one byte
 * written in every block does the same. */
static int reserve_space(int fd, off_t len) {
  int err;
  do err = posix_fallocate(fd, 0, len);
  while (err == EINTR);
  if (err != EOPNOTSUPP && err != EINVAL) return err;
  struct stat sb;
  long blk = fstat(fd, &sb) == 0 && sb.st_blksize > 0 ? (long)sb.st_blksize
                                                       : 4096;
  char zero = 0;
  for (off_t off = 0; off < len; off += blk) {
    char cur;
    ssize_t n = pread(fd, &cur, 1, off); /* keep what is there (the header) */
    if (n != 1) cur = zero;
    while ((n = pwrite(fd, &cur, 1, off)) < 0 && errno == EINTR) {
    }
    if (n != 1) return n < 0 ? errno : EIO;
  }
  return 0;
}

/* Make the empty file open at f a .npy of dt/shape: sized, its blocks
 * reserved and its header written. *hdr the header's length, *total the
 * file's, *size the elements. `name` is for messages. */
static int npy_file_init(int f, const char *name, tdtype dt, int ndim,
                         const int64_t *shape, size_t *hdr, size_t *total,
                         int64_t *size, terr *e) {
  int64_t n = tshape_size(ndim, shape, INT64_MAX / 8);
  if (n < 0) return terr_set(e, T_EINVAL, "", -1, "npy: bad shape for %s", name);
  char h[NPY_HEADER_MAX];
  size_t hl = npy_header(dt, ndim, shape, h);
  size_t len = hl + (size_t)n * tdtype_size(dt);
  int rc, err;
  if (ftruncate(f, (off_t)len) != 0) {
    err = errno;
    rc = terr_set(e, T_EIO, "", -1, "npy: cannot size %s to %zu bytes: %s",
                  name, len, strerror(err));
    return terr_nospace(e, rc, err);
  }
  if ((err = reserve_admit(f, (int64_t)len)) != 0 ||
      (err = reserve_space(f, (off_t)len)) != 0) {
    rc = terr_set(e, T_EIO, "", -1, "npy: cannot reserve %zu bytes for %s: %s",
                  len, name, strerror(err));
    return terr_nospace(e, rc, err);
  }
  if ((err = t_pwrite_all(f, h, hl, 0)) != 0) {
    rc = terr_set(e, T_EIO, "", -1, "npy: cannot write header of %s: %s",
                  name, strerror(err));
    return terr_nospace(e, rc, err);
  }
  *hdr = hl;
  *total = len;
  *size = n;
  return 0;
}

static tarray *array_shell(tdtype dt, int ndim, const int64_t *shape,
                           int64_t n) {
  tarray *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->dtype = dt;
  a->ndim = ndim;
  for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
  a->size = n;
  return a;
}

/* The .npy file's length for dt/shape, or -1. */
static int64_t npy_file_len(tdtype dt, int ndim, const int64_t *shape) {
  int64_t n = tshape_size(ndim, shape, INT64_MAX / 8);
  if (n < 0) return -1;
  char h[NPY_HEADER_MAX];
  return (int64_t)npy_header(dt, ndim, shape, h) + n * (int64_t)tdtype_size(dt);
}

/* Create `path` (truncated) and make it a .npy (tarray_create_npy_fd). A
 * big one takes a spare file (spare.h: its pages already in the page
 * cache) when one is ready; its mapping is then marked map_warm: a copy
 * into pages that are there runs faster taking its own faults than after a
 * prefault (3,200 MiB on the H200 host, 16 threads: 33.8 GB/s, against
 * 14.0 GB/s with a MADV_POPULATE_WRITE first; bench_fill `spare:`). On failure nothing is
 * left at path. */
static int npy_path_create(const char *path, tdtype dt, int ndim,
                           const int64_t *shape, int sink, tarray **out,
                           terr *e) {
  *out = NULL;
  int64_t len = npy_file_len(dt, ndim, shape);
  int spare = len >= SPARE_MIN && spare_take(path, len), fd = -1;
  if (spare && (fd = open(path, O_RDWR | O_CLOEXEC)) >= 0)
    (void)fchmod(fd, 0644); /* a spare is made 0600 */
  if (fd < 0) {
    spare = 0;
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    int err = errno;
    int rc = terr_set(e, T_EIO, "", -1, "npy: cannot create %s: %s", path,
                      strerror(err));
    return terr_nospace(e, rc, err);
  }
  int rc = tarray_create_npy_fd(fd, path, dt, ndim, shape, sink, out, e);
  close(fd); /* a mapping or the sink's own descriptor keeps the file */
  if (rc) unlink(path);
  else if (spare) (*out)->map_warm = 1;
  return rc;
}

int tarray_create_npy(const char *path, tdtype dt, int ndim,
                      const int64_t *shape, tarray **out, terr *e) {
  return npy_path_create(path, dt, ndim, shape, 0, out, e);
}

int tarray_create_npy_sink(const char *path, tdtype dt, int ndim,
                           const int64_t *shape, tarray **out, terr *e) {
  return npy_path_create(path, dt, ndim, shape, 1, out, e);
}

int tarray_create_npy_stream(const char *path, tdtype dt, tarray **out,
                             terr *e) {
  *out = NULL;
  int64_t n = T_EXTENT_MAX;
  tarray *a = array_shell(dt, 1, &n, n);
  struct tarray_sink *s = malloc(sizeof *s);
  int f = a && s ? open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                 : -1;
  if (f < 0) {
    int err = errno;
    free(a);
    free(s);
    if (!a || !s) return terr_set(e, T_ENOMEM, "", -1, "npy: out of memory");
    int rc = terr_set(e, T_EIO, "", -1, "npy: cannot create %s: %s", path,
                      strerror(err));
    return terr_nospace(e, rc, err);
  }
  s->fd = f;
  s->data_off = NPY_HEADER_MAX;
  a->sink = s;
  *out = a;
  return 0;
}

int tarray_stream_finish(tarray *a, int ndim, const int64_t *shape,
                         terr *e) {
  int64_t n = tshape_size(ndim, shape, INT64_MAX);
  char h[NPY_HEADER_MAX];
  if (!a->sink || a->sink->data_off != NPY_HEADER_MAX || n < 0 ||
      npy_header_pad(a->dtype, ndim, shape, h, NPY_HEADER_MAX) == 0)
    return terr_set(e, T_EINTERNAL, "", -1, "npy: cannot finish this file");
  size_t len = NPY_HEADER_MAX + (size_t)n * tdtype_size(a->dtype);
  int err = t_pwrite_all(a->sink->fd, h, NPY_HEADER_MAX, 0);
  if (!err && ftruncate(a->sink->fd, (off_t)len) != 0) err = errno;
  if (err) {
    int rc = terr_set(e, T_EIO, "", -1, "npy: cannot write a header: %s",
                      strerror(err));
    return terr_nospace(e, rc, err);
  }
  a->ndim = ndim;
  for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
  a->size = n;
  return 0;
}

int tarray_write_bytes(tarray *a, uint64_t off, const void *src, size_t len,
                       terr *e) {
  if (len == 0) return 0;
  uint64_t bytes = (uint64_t)a->size * tdtype_size(a->dtype);
  if (off > bytes || len > bytes - off)
    return terr_set(e, T_EINTERNAL, "", -1,
                    "tarray_write: bytes [%llu, +%zu) are outside [0, %llu)",
                    (unsigned long long)off, len, (unsigned long long)bytes);
  if (!a->sink) {
    memcpy((char *)a->data + off, src, len);
    return 0;
  }
  int err = t_pwrite_all(a->sink->fd, src, len,
                      (off_t)(a->sink->data_off + off));
  if (!err) return 0;
  int rc = terr_set(e, T_EIO, "", -1, "cannot write the result: %s",
                    strerror(err));
  return terr_nospace(e, rc, err);
}

int tarray_write(tarray *a, int64_t start, int64_t count, const void *src,
                 terr *e) {
  if (count <= 0) return 0;
  size_t is = tdtype_size(a->dtype);
  if (start < 0 || start > a->size || count > a->size - start)
    return terr_set(e, T_EINTERNAL, "", -1,
                    "tarray_write: elements [%lld, +%lld) are outside [0, %lld)",
                    (long long)start, (long long)count, (long long)a->size);
  return tarray_write_bytes(a, (uint64_t)start * is, src, (size_t)count * is, e);
}

int tarray_sink_fd(const tarray *a, uint64_t *data_off) {
  if (!a || !a->sink) return -1;
  *data_off = a->sink->data_off;
  return a->sink->fd;
}

int tarray_create_npy_fd(int fd, const char *name, tdtype dt, int ndim,
                         const int64_t *shape, int sink, tarray **out,
                         terr *e) {
  *out = NULL;
  size_t h = 0, total = 0;
  int64_t n = 0;
  int rc = npy_file_init(fd, name, dt, ndim, shape, &h, &total, &n, e);
  if (rc) return rc;
  tarray *a = array_shell(dt, ndim, shape, n);
  if (!a) return terr_set(e, T_ENOMEM, "", -1, "npy: out of memory");
  if (sink) {
    struct tarray_sink *s = malloc(sizeof *s);
    int d = s ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (d < 0) {
      free(s);
      free(a);
      return terr_set(e, T_ENOMEM, "", -1, "npy: out of memory or descriptors");
    }
    s->fd = d;
    s->data_off = h;
    a->sink = s;
  } else {
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      free(a);
      return terr_set(e, T_ENOMEM, "", -1, "npy: cannot map %s: %s", name,
                      strerror(errno));
    }
    struct statfs fs;
    a->data = (char *)base + h;
    a->map_base = base;
    a->map_len = total;
    a->map_prefault = fstatfs(fd, &fs) == 0 && fs.f_type != TMPFS_MAGIC;
  }
  *out = a;
  return 0;
}
