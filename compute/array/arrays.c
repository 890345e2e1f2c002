/* arrays.c — the uploaded arrays' life (arrays.h): the writer (content
 * digest, atomic file write, store row), and the id and query rules.
 *
 * Threads: any; the store takes its own locks.
 */
#include "compute/array/arrays.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
/* libxxhash's run-time dispatch picks its AVX2/AVX-512 code: 5x the
 * speed of the plain entry point (SSE2) on 32 KiB pieces. */
#include <xxh_x86dispatch.h>
#define HASH_UPDATE XXH3_128bits_update_dispatch
#else
#define HASH_UPDATE XXH3_128bits_update
#endif

#include "compute/array/codec/pdigest.h"
#include "compute/array/wbehind.h"
#include "util/datadir.h"
#include "util/util.h"

#define LIST_DEFAULT 50
#define LIST_MAX 1000

/* ---- the writer: one path from data to a stored array -------------------
 * Whatever the upload's format, its array reaches the store through here:
 * the data is appended to <data>/arrays/<id>.npy.tmp (a sink file of
 * compute/array/codec/npyfile.c: its blocks reserved first, so a full disk is a 507
 * before any data is read, and Tessel's own header already in place),
 * hashed on the way (a stream, whose blocks cannot be reserved ahead,
 * asks the data disk's reserve every 4 MiB: util/datadir.h; with the
 * reserve given up, no upload starts: 507), and renamed to its real name
 * only when complete; then the store row. A process that dies mid-write
 * leaves only a .tmp, which arrays_sweep removes at the next start.
 *
 * The content id is XXH3-128 (libxxhash) of the data as stored, then of
 * "|dtype|shape": equal arrays, equal digests, whatever the upload's
 * format. XXH3 is not cryptographic; it only has to tell one owner's arrays
 * apart (deduplication never crosses owners, so a collision an owner crafts
 * harms only that owner), and it hashes at memory speed where SHA-256 (the
 * digest before, kept as "sha256:<hex>" on older rows) took 0.4-0.6 GB/s
 * here: most of an upload's time.
 *
 * A big array's bytes (WBEHIND_MIN and up) are written by a write-behind
 * thread (compute/array/wbehind.c: the HTTP thread hashes and buffers, the writer
 * pwrites 1 MiB at a time) on a machine of 4 CPUs or more
 * (wbehind_worth), smaller ones, and every one on fewer CPUs, as they
 * come: pwrite straight from the HTTP layer's buffer. A parts upload's
 * file (POST /v1/uploads) is allocated whole and, on a machine of 4 CPUs
 * or more, mapped MAP_SHARED (parts_map; TESSEL_PARTS_MAP=0 pwrites
 * them, =1 maps them anywhere; TESSEL_PARTS_PREFILL=N, off by default,
 * also fills its pages ahead: wbehind.h's prefill): its parts, sent at
 * once, are memcpy'd side by side into the mapping.
 * A part alone in flight is pwritten even then (parts_alone below). The
 * digest is taken in file order as the parts come (pdigest.h: a piece at
 * the hashed front by its writer, the parts behind it by a chaser thread
 * from the mapping): complete hashes only what is still past the front. */
struct array_writer {
  arrays *A;
  tarray *a; /* the file being filled (tarray_create_npy_sink); NULL once
              * closed */
  uint64_t want, have; /* data bytes */
  char path[4096], tmp[4200]; /* tmp "" when there is no file to drop */
  char id[T_ID_MAX];
  XXH3_state_t *h;
  wbehind *wb; /* NULL: written as it comes */
  int stream; /* opened without its shape (arrays_writer_open_stream) */
  char *pmap; /* a parts upload's .tmp mapped MAP_SHARED (NULL: pwrite) */
  size_t pmap_len;
  uint64_t pmap_off; /* where the data starts in the mapping */
  prefill *pf;       /* its pages made present ahead of the parts, or NULL */
  /* Parts (arrays_writer_part_begin/end): how many are in flight, and
   * the digest taken in file order as they come (pdigest.h). */
  atomic_int parts_busy;
  pdigest *pd;
};

void arrays_writer_abort(array_writer *w) {
  if (!w) return;
  wbehind_abort(w->wb); /* before the file it writes is closed */
  prefill_free(w->pf);  /* its threads gone before the mapping */
  pdigest_free(w->pd);  /* its chaser reads the mapping */
  if (w->pmap) munmap(w->pmap, w->pmap_len);
  tarray_free(w->a);
  if (w->tmp[0]) unlink(w->tmp); /* "" once renamed (or never created) */
  if (w->h) XXH3_freeState(w->h);
  free(w);
}

/* The writer without its file: id, paths, digest state. */
static int writer_new(arrays *A, array_writer **out, terr *e) {
  *out = NULL;
  reserve_watch(1); /* full now? room again since? */
  if (reserve_full())
    return terr_set(e, T_ENOSPACE, "", -1,
                    "the data directory's disk is full: delete arrays or jobs "
                    "to free room");
  array_writer *w = calloc(1, sizeof *w);
  if (!w) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  w->A = A;
  if (!(w->h = XXH3_createState()) || XXH3_128bits_reset(w->h) != XXH_OK) {
    arrays_writer_abort(w);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  t_id_new('a', w->id);
  snprintf(w->path, sizeof w->path, "%s/arrays/%s.npy", A->data_dir, w->id);
  snprintf(w->tmp, sizeof w->tmp, "%s.tmp", w->path);
  *out = w;
  return T_OK;
}

int arrays_writer_open(arrays *A, tdtype dt, int ndim, const int64_t *shape,
                       array_writer **out, terr *e) {
  array_writer *w;
  int rc = writer_new(A, &w, e);
  if (rc) return rc;
  /* Sized, its blocks reserved (a full disk: 507 before any data is read)
   * and Tessel's header written; nothing is left at tmp on failure. */
  rc = tarray_create_npy_sink(w->tmp, dt, ndim, shape, &w->a, e);
  if (rc) {
    w->tmp[0] = 0;
    arrays_writer_abort(w);
    return rc;
  }
  w->want = (uint64_t)w->a->size * tdtype_size(dt);
  if (w->want >= WBEHIND_MIN && wbehind_worth()) {
    uint64_t off = 0;
    int fd = tarray_sink_fd(w->a, &off);
    if ((rc = wbehind_open(fd, off, w->want, &w->wb, e))) {
      arrays_writer_abort(w);
      return rc;
    }
  }
  *out = w;
  return T_OK;
}

/* A parts upload's file, its blocks allocated at once and mapped
 * MAP_SHARED: parts arriving at once memcpy into the mapping side by side,
 * where buffered pwrites into one file queue on its inode lock (perf on
 * the 2-core VM: rwsem_spin_on_owner the first item of 4 parallel PUTs,
 * and 4 streams slower than 1). The blocks allocated first, so that a
 * full disk is no SIGBUS at a page fault; if allocating or mapping fails,
 * the parts are pwritten as before and that error (ENOSPC) comes there.
 * Only on 4 CPUs or more: a page the copy faults in is zeroed first, so
 * every byte is written twice, and on the 2-core VM pwrites won even for
 * parts at once (the client's 800 MB over 2 parts: 1.39-1.50 s mapped,
 * 0.93 s pwritten; one stream 0.94-1.02 s). On the 16-core H200 host the
 * mapping wins (2026-11-29, 800 MB from the client, 16 HTTP threads: 8
 * parts received in 0.12 s mapped against 0.25 s pwritten, the pwrites
 * queued on the inode lock: 5 threads busy, mostly in the kernel).
 * Only the daemon's own .tmp in its data directory is mapped, and the
 * mapping goes before the writer does (the last reference of the upload:
 * no part is writing then). */
int arrays_parts_mapped(void) {
  /* "0": pwrite, "1": mapped; unset: mapped on 4 CPUs or more, or where
   * its pages are filled ahead (prefill_threads), else pwrite (above). */
  const char *knob = getenv("TESSEL_PARTS_MAP");
  if (knob && *knob) return strcmp(knob, "0") != 0;
  return sysconf(_SC_NPROCESSORS_ONLN) >= 4 || prefill_threads() > 0;
}

static void parts_map(array_writer *w) {
  uint64_t off = 0;
  int fd = tarray_sink_fd(w->a, &off);
  if (fd < 0 || w->want == 0 || off + w->want > (uint64_t)SIZE_MAX / 2 ||
      !arrays_parts_mapped())
    return;
  /* fallocate, not posix_fallocate: where the file system cannot, glibc's
   * emulation writes every block once more; pwrite is better then. */
  if (fallocate(fd, 0, (off_t)off, (off_t)w->want) != 0) return;
  size_t len = (size_t)(off + w->want);
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return;
  w->pmap = m;
  w->pmap_len = len;
  w->pmap_off = off;
  w->pf = prefill_new(m, len); /* NULL on small machines: faults as they come */
}

int arrays_writer_open_parts(arrays *A, tdtype dt, int ndim,
                             const int64_t *shape, array_writer **out,
                             terr *e) {
  array_writer *w;
  int rc = writer_new(A, &w, e);
  if (rc) return rc;
  rc = tarray_create_npy_sink(w->tmp, dt, ndim, shape, &w->a, e);
  if (rc) {
    w->tmp[0] = 0;
    arrays_writer_abort(w);
    return rc;
  }
  w->want = (uint64_t)w->a->size * tdtype_size(dt);
  parts_map(w);
  w->pd = pdigest_new(w->h, w->pmap ? w->pmap + w->pmap_off : NULL, w->want,
                      pdigest_chase_worth());
  if (!w->pd) {
    arrays_writer_abort(w);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  *out = w;
  return T_OK;
}

/* Is this the only part in flight? Then its pieces are pwritten, not
 * copied into the mapping: a page of the mapping that is not yet in the
 * page cache is read in as zeros first (fallocate's unwritten blocks),
 * so every byte was written twice, and a full-page pwrite skips that
 * (perf of one 1 GiB PUT on the 2-core VM: 64 % of the daemon's cycles in
 * the kernel's memset; the PUT took 3.0-3.3 s mapped, 1.9-2.2 s
 * pwritten). Several parts at once keep the mapping (pwrites into one
 * file queue on its inode lock). Both write the same page cache, so a
 * part may switch between them piece by piece. */
static int parts_alone(array_writer *w) {
  return atomic_load(&w->parts_busy) <= 1;
}

int arrays_writer_part_begin(array_writer *w, uint64_t off, uint64_t n) {
  atomic_fetch_add(&w->parts_busy, 1);
  if (w->pf && off <= w->want) prefill_range(w->pf, w->pmap_off + off, n);
  return pdigest_begin(w->pd, off, n);
}

void arrays_writer_part_end(array_writer *w, int slot, int failed) {
  atomic_fetch_sub(&w->parts_busy, 1);
  pdigest_end(w->pd, slot, failed);
}

int arrays_writer_pwrite(array_writer *w, int slot, uint64_t off,
                         const void *p, size_t n, terr *e) {
  if (off > w->want || n > w->want - off)
    return terr_set(e, T_EINVAL, "offset", (int64_t)off,
                    "bytes %llu..+%zu are outside the array's %llu bytes",
                    (unsigned long long)off, n, (unsigned long long)w->want);
  if (w->pmap && !parts_alone(w)) {
    memcpy(w->pmap + w->pmap_off + off, p, n);
  } else {
    int rc = tarray_write_bytes(w->a, off, p, n, e);
    if (rc) return rc;
  }
  pdigest_wrote(w->pd, slot, off, p, n);
  return T_OK;
}

uint64_t arrays_writer_bytes(const array_writer *w) { return w->want; }

int arrays_writer_commit_parts(array_writer *w, const char *owner,
                               store_array *rec, int *existing, terr *e) {
  /* Hash the data as it lies in the file, in file order: the digest a
   * one-piece upload of the same bytes computes on the way. From a
   * read-only mapping of the file (the page cache hashed in place: 400 MB
   * took 155 ms through pread into a 1 MiB buffer on the 2-core VM, most
   * of a parallel upload's lead over one stream); pread below where the
   * mapping fails. The .tmp is the daemon's own, in its data directory:
   * no neighbour truncates it under the mapping. Only the bytes past
   * those hashed as they came (pdigest_finish): none for one stream in
   * order, and for parts at once only what was past the front. */
  enum { CHUNK = 1 << 20 };
  uint64_t off = 0;
  int fd = tarray_sink_fd(w->a, &off), err = 0;
  /* The parts' own mapping, else a read-only one of the file. */
  const char *src = w->pmap ? w->pmap + w->pmap_off : NULL;
  void *ro = MAP_FAILED;
  size_t ro_len = 0;
  if (!src && fd >= 0 && w->want > 0 && off + w->want <= (uint64_t)SIZE_MAX) {
    ro_len = (size_t)(off + w->want);
    ro = mmap(NULL, ro_len, PROT_READ, MAP_SHARED, fd, 0);
    if (ro != MAP_FAILED) {
      (void)madvise(ro, ro_len, MADV_SEQUENTIAL);
      src = (const char *)ro + off;
    }
  }
  /* The bytes hashed on the way (pdigest) are not again; its chaser is
   * stopped before the mapping goes. */
  uint64_t from = pdigest_finish(w->pd);
  prefill_free(w->pf); /* every part is in: nothing left to fill ahead */
  w->pf = NULL;
  if (src) {
    HASH_UPDATE(w->h, src + from, (size_t)(w->want - from));
    if (w->pmap) {
      munmap(w->pmap, w->pmap_len);
      w->pmap = NULL;
    } else {
      munmap(ro, ro_len);
    }
    w->have = w->want;
    return arrays_writer_commit(w, owner, rec, existing, e);
  }
  char *buf = malloc(CHUNK);
  if (!buf) err = ENOMEM;
  for (uint64_t at = from; !err && at < w->want;) {
    size_t k = w->want - at < CHUNK ? (size_t)(w->want - at) : CHUNK;
    ssize_t got = pread(fd, buf, k, (off_t)(off + at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      err = got < 0 ? errno : EIO;
      break;
    }
    HASH_UPDATE(w->h, buf, (size_t)got);
    at += (uint64_t)got;
  }
  free(buf);
  if (err) {
    memset(rec, 0, sizeof *rec);
    *existing = 0;
    int rc = terr_set(e, err == ENOMEM ? T_ENOMEM : T_EIO, "", -1,
                      "cannot read back %s: %s", w->tmp, strerror(err));
    arrays_writer_abort(w);
    return rc;
  }
  w->have = w->want;
  return arrays_writer_commit(w, owner, rec, existing, e);
}

int arrays_writer_open_stream(arrays *A, tdtype dt, array_writer **out,
                              terr *e) {
  array_writer *w;
  int rc = writer_new(A, &w, e);
  if (rc) return rc;
  rc = tarray_create_npy_stream(w->tmp, dt, &w->a, e);
  if (rc) {
    w->tmp[0] = 0;
    arrays_writer_abort(w);
    return rc;
  }
  w->want = (uint64_t)w->a->size * tdtype_size(dt);
  w->stream = 1;
  *out = w;
  return T_OK;
}

void arrays_writer_restart(array_writer *w) {
  assert(w->stream);
  XXH3_128bits_reset(w->h);
  w->have = 0;
}

int arrays_writer_shape(array_writer *w, int ndim, const int64_t *shape,
                        terr *e) {
  int64_t n = tshape_size(ndim, shape, INT64_MAX);
  if (!w->stream || n < 0 ||
      (uint64_t)n * tdtype_size(w->a->dtype) != w->have)
    return terr_set(e, T_EINTERNAL, "", -1,
                    "arrays: a shape that does not hold the %llu bytes written",
                    (unsigned long long)w->have);
  int rc = tarray_stream_finish(w->a, ndim, shape, e);
  if (rc) return rc;
  w->want = w->have;
  w->stream = 0;
  return T_OK;
}

int arrays_writer_write(array_writer *w, const void *p, size_t n, terr *e) {
  if (n > w->want - w->have)
    return terr_set(e, T_EINVAL, "body", (int64_t)w->have,
                    "more data than the shape holds (%llu bytes)",
                    (unsigned long long)w->want);
  /* A stream's blocks cannot be reserved ahead: every 4 MiB it asks the
   * data disk's reserve whether the next 4 MiB may be taken. */
  if (w->stream && (w->have >> 22) != ((w->have + n) >> 22)) {
    uint64_t off = 0;
    int err = reserve_admit(tarray_sink_fd(w->a, &off), (int64_t)4 << 20);
    if (err)
      return terr_set(e, T_ENOSPACE, "body", (int64_t)w->have,
                      "the data directory's disk is full");
  }
  HASH_UPDATE(w->h, p, n);
  int rc = w->wb ? wbehind_write(w->wb, p, n, e)
                 : tarray_write_bytes(w->a, w->have, p, n, e);
  if (rc) return rc;
  w->have += n;
  return T_OK;
}

uint64_t arrays_writer_missing(const array_writer *w) {
  return w->want - w->have;
}

/* "xxh3-128:<32 hex>" of the data written, then "|dtype|shape". */
static void writer_digest(array_writer *w, char out[ARRAY_DIGEST_MAX]) {
  char shape[256], tail[300];
  tshape_str(w->a->ndim, w->a->shape, shape, sizeof shape);
  int tl = snprintf(tail, sizeof tail, "|%s|%s", tdtype_name(w->a->dtype), shape);
  HASH_UPDATE(w->h, tail, (size_t)tl);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(w->h));
  int n = snprintf(out, ARRAY_DIGEST_MAX, "xxh3-128:");
  for (size_t i = 0; i < sizeof c.digest; i++)
    n += snprintf(out + n, ARRAY_DIGEST_MAX - (size_t)n, "%02x", c.digest[i]);
}

int arrays_writer_commit(array_writer *w, const char *owner, store_array *rec,
                         int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  int rc;
  if (w->stream) {
    rc = terr_set(e, T_EINTERNAL, "", -1, "arrays: the shape was never given");
    arrays_writer_abort(w);
    return rc;
  }
  if (w->have != w->want) {
    rc = terr_set(e, T_EINVAL, "body", (int64_t)w->have,
                  "the data is %llu bytes, the shape needs %llu",
                  (unsigned long long)w->have, (unsigned long long)w->want);
    arrays_writer_abort(w);
    return rc;
  }
  int err = 0;
  if (w->wb) { /* the buffered tail written, the writer's first error */
    err = wbehind_finish(w->wb);
    w->wb = NULL;
  }
  int cerr = tarray_sink_close(w->a); /* a deferred write error: not whole */
  if (!err) err = cerr;
  if (err) {
    rc = terr_set(e, T_EIO, "", -1, "cannot write %s: %s", w->tmp,
                  strerror(err));
    rc = terr_nospace(e, rc, err);
    arrays_writer_abort(w);
    return rc;
  }
  if (rename(w->tmp, w->path) != 0) {
    rc = terr_set(e, T_EIO, "", -1, "cannot rename %s", w->tmp);
    arrays_writer_abort(w);
    return rc;
  }
  w->tmp[0] = 0;
  char digest[ARRAY_DIGEST_MAX], shape[300];
  writer_digest(w, digest);
  /* The stored shape is JSON: "[2, 3]" is already valid JSON. */
  tshape_str(w->a->ndim, w->a->shape, shape, sizeof shape);
  snprintf(rec->id, sizeof rec->id, "%s", w->id);
  /* Heap copies: the store frees them when the content is already stored. */
  rec->owner = strdup(owner);
  rec->dtype = strdup(tdtype_name(w->a->dtype));
  rec->shape = strdup(shape);
  rec->bytes = (int64_t)w->want;
  rec->digest = strdup(digest);
  rec->path = strdup(w->path);
  rec->created_at = t_wall_ms();
  if (!rec->owner || !rec->dtype || !rec->shape || !rec->digest ||
      !rec->path) {
    unlink(w->path);
    store_array_clear(rec);
    arrays_writer_abort(w);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  if ((rc = store_array_insert(w->A->st, rec, existing, e))) {
    unlink(w->path);
    store_array_clear(rec);
  } else if (*existing) {
    unlink(w->path); /* the same content is stored under its id */
  }
  arrays_writer_abort(w); /* renamed: frees only */
  return rc;
}

int arrays_put(arrays *A, const char *owner, const tarray *a,
               store_array *rec, int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  array_writer *w;
  int rc = arrays_writer_open(A, a->dtype, a->ndim, a->shape, &w, e);
  if (rc) return rc;
  size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
  if (bytes && (rc = arrays_writer_write(w, a->data, bytes, e))) {
    arrays_writer_abort(w);
    return rc;
  }
  return arrays_writer_commit(w, owner, rec, existing, e);
}

void arrays_sweep(arrays *A) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/arrays", A->data_dir);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l < 8 || strcmp(de->d_name + l - 8, ".npy.tmp") != 0) continue;
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (unlink(p) == 0) n++;
  }
  closedir(d);
  if (n) log_info("arrays: removed %d unfinished upload(s)", n);
}

int arrays_get(arrays *A, const char *id, const char *owner, store_array *rec,
               terr *e) {
  memset(rec, 0, sizeof *rec);
  if (!id || !t_id_valid('a', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "array '%s' not found",
                    id ? id : "");
  return store_array_get(A->st, id, owner, rec, e);
}

int arrays_delete(arrays *A, const char *id, const char *owner, char **path,
                  terr *e) {
  *path = NULL;
  if (!id || !t_id_valid('a', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "array '%s' not found",
                    id ? id : "");
  return store_array_delete(A->st, id, owner, path, e);
}

int arrays_list(arrays *A, const char *owner, const char *limit,
                const char *cursor, store_array **out, int *n,
                char next[T_ID_MAX], terr *e) {
  *out = NULL;
  *n = 0;
  next[0] = 0;
  int64_t lim = LIST_DEFAULT;
  if (limit && (t_parse_i64(limit, &lim) || lim < 1 || lim > LIST_MAX))
    return terr_set(e, T_EINVAL, "limit", -1,
                    "expected an integer from 1 to %d", LIST_MAX);
  if (cursor && *cursor && !t_id_valid('a', cursor))
    return terr_set(e, T_EINVAL, "cursor", -1,
                    "not a cursor from next_cursor");
  return store_array_list(A->st, owner, cursor && *cursor ? cursor : NULL,
                          (int)lim, out, n, next, e);
}
