/* tarray.c — allocation, copying and conversion of tarrays, and the one
 * text form of an element (tnum_fmt). (The wire formats live in npy.c,
 * csv.c and jarray.c.) */
#include "compute/array/tarray.h"

#include <errno.h>
#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/sigbus.h"
#include "util/tassert.h"
#include "util/util.h"

#define HUGE_ALIGN ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

size_t tdtype_size(tdtype dt) { return dt == T_F32 ? 4 : 8; }
const char *tdtype_name(tdtype dt) {
  return dt == T_F32 ? "float32" : dt == T_I64 ? "int64" : "float64";
}

int tdtype_parse(const char *name, tdtype *dt) {
  if (!name) return -1;
  if (strcmp(name, "float64") == 0) *dt = T_F64;
  else if (strcmp(name, "float32") == 0) *dt = T_F32;
  else return -1;
  return 0;
}

int64_t tshape_extent(int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > T_MAXDIM) return -1;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] == 0) continue; /* NumPy skips zeros here too */
    if (n > T_EXTENT_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

int64_t tshape_size(int ndim, const int64_t *shape, int64_t max_elems) {
  if (tshape_extent(ndim, shape) < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i]; /* <= the extent: no overflow */
  return n > max_elems ? -1 : n;
}

char *tshape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
  T_ASSERT(buf && len > 0);
  size_t off = 0;
  off += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "",
                            (long long)shape[i]);
  if (off < len) snprintf(buf + off, len - off, "]");
  return buf;
}

/* The invariants every tarray keeps (checked by T_ASSERT): size is the
 * product of the shape, and data held in a file mapping lies wholly inside
 * it. No side effect: it is read only inside asserts. */
#ifndef NDEBUG /* else T_ASSERT compiles to nothing and it is unused */
static int tarray_consistent(const tarray *a) {
  if (a->ndim < 0 || a->ndim > T_MAXDIM) return 0;
  int64_t n = 1;
  for (int i = 0; i < a->ndim; i++) n *= a->shape[i];
  if (n != a->size) return 0;
  if (!a->map_base || !a->data) return 1;
  const char *d = a->data, *b = a->map_base;
  size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
  return d >= b && (size_t)(d - b) <= a->map_len &&
         bytes <= a->map_len - (size_t)(d - b);
}
#endif

tarray *tarray_new(tdtype dt, int ndim, const int64_t *shape) {
  int64_t n = tshape_size(ndim, shape, INT64_MAX / 8);
  if (n < 0) return NULL;
  tarray *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->dtype = dt;
  a->ndim = ndim;
  for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
  a->size = n;
  /* 64-byte alignment for the VM and BLAS; at least one element so that
   * data is never NULL. Big arrays are 2 MiB aligned and ask for
   * transparent huge pages, as NumPy does: a first touch then faults once
   * per 2 MiB instead of once per 4 KiB, which is most of the cost of a
   * fresh result on a VM. */
  size_t bytes = (size_t)(n ? n : 1) * tdtype_size(dt);
  bytes = (bytes + 63) & ~(size_t)63;
  if (bytes >= HUGE_MIN) {
    bytes = (bytes + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    if (posix_memalign(&a->data, HUGE_ALIGN, bytes) != 0) a->data = NULL;
    if (a->data) madvise(a->data, bytes, MADV_HUGEPAGE);
  } else {
    a->data = aligned_alloc(64, bytes);
  }
  if (!a->data) {
    free(a);
    return NULL;
  }
  T_ASSERT(((uintptr_t)a->data & 63) == 0); /* the VM's alignment */
  T_ASSERT(tarray_consistent(a));
  return a;
}

tarray *tarray_zeros(tdtype dt, int ndim, const int64_t *shape) {
  tarray *a = tarray_new(dt, ndim, shape);
  if (a) memset(a->data, 0, (size_t)a->size * tdtype_size(dt));
  return a;
}

tarray *tarray_clone(const tarray *a) {
  T_ASSERT(tarray_consistent(a));
  tarray *c = tarray_new(a->dtype, a->ndim, a->shape);
  if (c) memcpy(c->data, a->data, (size_t)a->size * tdtype_size(a->dtype));
  return c;
}

tarray *tarray_convert(const tarray *a, tdtype dt) {
  T_ASSERT(tarray_consistent(a));
  if (a->dtype == dt) return tarray_clone(a);
  tarray *c = tarray_new(dt, a->ndim, a->shape);
  if (!c) return NULL;
  if (dt == T_F32 && a->dtype == T_F64) {
    const double *s = a->data;
    float *d = c->data;
    for (int64_t i = 0; i < a->size; i++) d[i] = (float)s[i];
  } else if (dt == T_F64 && a->dtype == T_F32) {
    const float *s = a->data;
    double *d = c->data;
    for (int64_t i = 0; i < a->size; i++) d[i] = s[i];
  } else {
    for (int64_t i = 0; i < a->size; i++) tarray_set(c, i, tarray_get(a, i));
  }
  return c;
}

int tarray_sink_close(tarray *a) {
  if (!a || !a->sink) return 0;
  int err = close(a->sink->fd) != 0 ? errno : 0;
  free(a->sink);
  a->sink = NULL;
  return err;
}

static int unmap_behind(void *base, size_t len);

/* tarray_free; behind: a big mapping unmapped on a thread of its own. */
static void free_array(tarray *a, int behind) {
  if (!a) return;
  tarray_sink_close(a);
  sigbus_unguard(a->guard); /* before the unmap: the range may be reused */
  if (a->release)
    a->release(a->release_arg);
  else if (a->map_base && !(behind && unmap_behind(a->map_base, a->map_len)))
    munmap(a->map_base, a->map_len);
  else if (!a->map_base)
    free(a->data);
  free(a);
}

void tarray_free(tarray *a) { free_array(a, 0); }

/* ---- unmapping behind ---------------------------------------------------
 * munmap of a big MAP_SHARED result walks every page-table entry (moving
 * the dirty bits to the page cache, dropping the reverse maps): for the
 * 3.2 GB of a 20,000-point float64 matrix ~70 ms of the job's "store" on an
 * H200 host, after every byte is already in the file. tarray_free_behind
 * does that on a detached thread of its own: the caller (a job being
 * stored) goes on at once. At most UNMAP_BEHIND_MAX such threads at a time;
 * past that, or for a small mapping, or when no thread starts, the unmap is
 * done here as tarray_free does. The pages stay in the page cache either
 * way; what waits is only the tearing down of this process's view. */
#define UNMAP_BEHIND_MIN ((size_t)64 << 20)
#define UNMAP_BEHIND_MAX 8

static atomic_int g_unmapping;

typedef struct {
  void *base;
  size_t len;
} unmap_job;

static void *unmap_main(void *p) {
  unmap_job *u = p;
  munmap(u->base, u->len);
  free(u);
  atomic_fetch_sub(&g_unmapping, 1);
  return NULL;
}

static int unmap_behind(void *base, size_t len) {
  if (len < UNMAP_BEHIND_MIN) return 0;
  if (atomic_fetch_add(&g_unmapping, 1) >= UNMAP_BEHIND_MAX) goto here;
  unmap_job *u = malloc(sizeof *u);
  if (!u) goto here;
  u->base = base;
  u->len = len;
  pthread_attr_t at;
  pthread_t th;
  if (pthread_attr_init(&at) == 0) {
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, unmap_main, u);
    pthread_attr_destroy(&at);
    if (rc == 0) return 1;
  }
  free(u);
here:
  atomic_fetch_sub(&g_unmapping, 1);
  return 0;
}

int tarray_unmapping(void) { return atomic_load(&g_unmapping); }

void tarray_free_behind(tarray *a) { free_array(a, 1); }

size_t tnum_fmt(char *buf, size_t cap, tdtype dt, const void *elem, int json) {
  int n;
  if (dt == T_I64) {
    int64_t v;
    memcpy(&v, elem, 8);
    n = snprintf(buf, cap, "%lld", (long long)v);
  } else {
    double v;
    if (dt == T_F32) {
      float f;
      memcpy(&f, elem, 4);
      v = f;
    } else {
      memcpy(&v, elem, 8);
    }
    if (isnan(v))
      n = snprintf(buf, cap, "%s", json ? "null" : "nan");
    else if (isinf(v))
      n = snprintf(buf, cap, "%s", json ? "null" : v > 0 ? "inf" : "-inf");
    else
      n = t_fmt_shortest(buf, cap, v, dt == T_F32);
  }
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
