/* compute/array/region.c — the registry of registered regions (region.h
 * says what a region is and promises).
 *
 * One process-wide list under one mutex: a region is a node holding the
 * descriptor it was opened with (kept for the fstat before each use), the
 * shared mapping, its SIGBUS guard and torn flag, the jobs recorded as
 * using it, and a reference count (the registry's own while listed, plus
 * one per borrowed input, per end check and per output copy). The mutex
 * is never held across a copy, a store probe or the GPU's pinning; the
 * mapping is freed (unpinned, unguarded, unmapped, closed) by whoever
 * drops the last reference. Ids are "r_" and 32 random hex digits
 * (util.h's t_id_new), so an id says nothing of another owner's regions.
 */
#include "compute/array/region.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/sigbus.h"
#include "util/util.h"

#define REGION_OWNER_MAX 128
#define REGION_JOBS_PRUNE 256 /* a list this long is pruned of ended jobs */

typedef struct region {
  struct region *next;
  char id[REGION_ID_MAX];
  char owner[REGION_OWNER_MAX];
  char *path;
  int fd;
  void *base;
  int64_t bytes;
  int64_t created_at;
  int guard;
  atomic_int torn;
  int pinned;
  int refs;   /* under g_mu */
  int listed; /* in g_list (0 once deleted) */
  char (*jobs)[T_ID_MAX];
  int njobs, capjobs;
} region;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static region *g_list;
static int g_count; /* nodes alive, listed or not */
static int64_t g_limit;
static int (*g_pin)(void *p, size_t n, terr *e);
static void (*g_unpin)(void *p);

void region_set_limit(int64_t bytes) { g_limit = bytes; }

int64_t region_limit(void) {
  if (g_limit > 0) return g_limit;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || psz <= 0) return (int64_t)1 << 32;
  return (int64_t)pages * psz / 4;
}

void region_set_pin(int (*pin)(void *p, size_t n, terr *e),
                    void (*unpin)(void *p)) {
  g_pin = pin;
  g_unpin = unpin;
}

/* The mapping and the node freed: the last reference is gone. */
static void region_destroy(region *r) {
  if (r->pinned && g_unpin) g_unpin(r->base);
  sigbus_unguard(r->guard);
  munmap(r->base, (size_t)r->bytes);
  close(r->fd);
  free(r->path);
  free(r->jobs);
  free(r);
}

static void region_unref(region *r) {
  pthread_mutex_lock(&g_mu);
  int last = --r->refs == 0;
  if (last) g_count--;
  pthread_mutex_unlock(&g_mu);
  if (last) region_destroy(r);
}

/* Owner's listed region id, under g_mu; NULL when none. */
static region *find_locked(const char *owner, const char *id) {
  for (region *r = g_list; r; r = r->next)
    if (strcmp(r->id, id) == 0 && strcmp(r->owner, owner) == 0) return r;
  return NULL;
}

static int not_found(const char *id, const char *field, terr *e) {
  return terr_set(e, T_ENOTFOUND, field, -1,
                  "region '%.60s' not found (regions are the daemon's until "
                  "it stops: register the file again after a restart)",
                  id ? id : "");
}

/* Owner's region id with a reference taken for the caller, or the error. */
static int region_ref(const char *owner, const char *id, const char *field,
                      region **out, terr *e) {
  pthread_mutex_lock(&g_mu);
  region *r = id ? find_locked(owner, id) : NULL;
  if (r) r->refs++;
  pthread_mutex_unlock(&g_mu);
  *out = r;
  return r ? 0 : not_found(id, field, e);
}

static void fill_info(const region *r, region_info *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->id, sizeof o->id, "%s", r->id);
  snprintf(o->path, sizeof o->path, "%s", r->path);
  o->bytes = r->bytes;
  o->created_at = r->created_at;
  o->pinned = r->pinned;
  o->torn = atomic_load(&r->torn);
  o->jobs = r->njobs;
}

/* The owner's count and bytes now, under g_mu. */
static void owner_use_locked(const char *owner, int *n, int64_t *bytes) {
  *n = 0, *bytes = 0;
  for (region *r = g_list; r; r = r->next)
    if (strcmp(r->owner, owner) == 0) (*n)++, *bytes += r->bytes;
}

/* The opened file mapped and guarded into a new node (not listed). */
static int region_map(int fd, const char *path, const char *field,
                      int64_t bytes, region **out, terr *e) {
  region *r = calloc(1, sizeof *r);
  if (!r || !(r->path = strdup(path))) {
    free(r);
    return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  }
  r->base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 0);
  if (r->base == MAP_FAILED) {
    free(r->path);
    free(r);
    return terr_set(e, T_EIO, field, -1, "cannot map '%.200s': %s", path,
                    strerror(errno));
  }
  r->guard = sigbus_guard(r->base, (size_t)bytes, PROT_READ | PROT_WRITE,
                          &r->torn);
  if (!r->guard) {
    munmap(r->base, (size_t)bytes);
    free(r->path);
    free(r);
    return terr_set(e, T_EBUSY, field, -1,
                    "too many guarded mappings at once: try again later");
  }
  r->fd = fd;
  r->bytes = bytes;
  r->refs = 1; /* the registry's */
  r->listed = 1;
  r->created_at = t_wall_ms();
  t_id_new('r', r->id);
  *out = r;
  return 0;
}

int region_add(const tlocal *l, const char *owner, const char *path,
               const char *field, region_info *out, terr *e) {
  if (strlen(owner) >= REGION_OWNER_MAX)
    return terr_set(e, T_EINVAL, "", -1, "the token name is too long");
  int fd;
  int rc = tlocal_open_rw(l, owner, path, field, &fd, e);
  if (rc) return rc;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return terr_set(e, T_EINVAL, field, -1,
                    "'%.200s' is empty: size the file (ftruncate) before "
                    "registering it", path);
  }
  int64_t bytes = st.st_size, limit = region_limit();
  int n;
  int64_t used;
  pthread_mutex_lock(&g_mu);
  owner_use_locked(owner, &n, &used);
  int full = g_count >= REGION_MAX_ALL;
  pthread_mutex_unlock(&g_mu);
  if (n >= REGION_MAX_PER_OWNER || full || bytes > limit - used) {
    close(fd);
    if (n >= REGION_MAX_PER_OWNER || full)
      return terr_set(e, T_ETOOLARGE, field, -1,
                      "too many regions (%d per token, %d in all): delete one "
                      "first", REGION_MAX_PER_OWNER, REGION_MAX_ALL);
    return terr_set(e, T_ETOOLARGE, field, -1,
                    "the region's %lld bytes would pass the token's limit of "
                    "%lld bytes in regions (--region-bytes; %lld in use)",
                    (long long)bytes, (long long)limit, (long long)used);
  }
  region *r = NULL;
  if ((rc = region_map(fd, path, field, bytes, &r, e))) {
    close(fd);
    return rc;
  }
  snprintf(r->owner, sizeof r->owner, "%s", owner);
  if (g_pin) { /* pinned once for every later job; unpinned works too */
    terr pe;
    r->pinned = g_pin(r->base, (size_t)bytes, &pe) == 0;
    if (!r->pinned && pe.code != T_EUNAVAIL)
      log_warn("region %s is not pinned: %s", r->id, pe.message);
  }
  pthread_mutex_lock(&g_mu); /* the limits again: a racing add may have won */
  owner_use_locked(owner, &n, &used);
  int ok = n < REGION_MAX_PER_OWNER && g_count < REGION_MAX_ALL &&
           bytes <= limit - used;
  if (ok) {
    region **tail = &g_list;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    g_count++;
    fill_info(r, out);
  }
  pthread_mutex_unlock(&g_mu);
  if (!ok) {
    region_destroy(r);
    return terr_set(e, T_ETOOLARGE, field, -1,
                    "the token's region limits were reached meanwhile "
                    "(--region-bytes, %d regions)", REGION_MAX_PER_OWNER);
  }
  return 0;
}

int region_get(const char *owner, const char *id, const char *field,
               region_info *out, terr *e) {
  pthread_mutex_lock(&g_mu);
  region *r = id ? find_locked(owner, id) : NULL;
  if (r) fill_info(r, out);
  pthread_mutex_unlock(&g_mu);
  return r ? 0 : not_found(id, field, e);
}

int region_list(const char *owner, region_info **out, int *n, terr *e) {
  *out = NULL, *n = 0;
  region_info *v = calloc(REGION_MAX_PER_OWNER + 1, sizeof *v);
  if (!v) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  pthread_mutex_lock(&g_mu);
  for (region *r = g_list; r && *n <= REGION_MAX_PER_OWNER; r = r->next)
    if (strcmp(r->owner, owner) == 0) fill_info(r, &v[(*n)++]);
  pthread_mutex_unlock(&g_mu);
  *out = v;
  return 0;
}

/* r's job list without the jobs the probe says have ended. The probe is
 * called without the lock, on a copy. */
static void prune_jobs(region *r, region_job_probe probe, void *ud) {
  pthread_mutex_lock(&g_mu);
  int n = r->njobs;
  char(*copy)[T_ID_MAX] = n ? malloc((size_t)n * T_ID_MAX) : NULL;
  if (copy) memcpy(copy, r->jobs, (size_t)n * T_ID_MAX);
  pthread_mutex_unlock(&g_mu);
  if (!copy) return;
  char *ended = calloc((size_t)n, 1);
  for (int i = 0; ended && i < n; i++) ended[i] = !probe(ud, copy[i]);
  pthread_mutex_lock(&g_mu);
  int w = 0;
  for (int i = 0; i < r->njobs; i++) {
    int gone = 0;
    for (int k = 0; ended && k < n; k++)
      if (ended[k] && strcmp(copy[k], r->jobs[i]) == 0) gone = 1;
    if (!gone) memmove(r->jobs[w++], r->jobs[i], T_ID_MAX);
  }
  r->njobs = w;
  pthread_mutex_unlock(&g_mu);
  free(ended);
  free(copy);
}

int region_use(const char *owner, const char *id, const char *job_id,
               const char *field, region_job_probe probe, void *ud, terr *e) {
  region *r;
  int rc = region_ref(owner, id, field, &r, e);
  if (rc) return rc;
  if (r->njobs >= REGION_JOBS_PRUNE && probe) prune_jobs(r, probe, ud);
  pthread_mutex_lock(&g_mu);
  if (r->njobs == r->capjobs) {
    int cap = r->capjobs * 2 + 8;
    char(*v)[T_ID_MAX] = realloc(r->jobs, (size_t)cap * T_ID_MAX);
    if (v) r->jobs = v, r->capjobs = cap;
  }
  int listed = r->listed, ok = r->njobs < r->capjobs && listed;
  if (ok) snprintf(r->jobs[r->njobs++], T_ID_MAX, "%s", job_id);
  pthread_mutex_unlock(&g_mu);
  region_unref(r);
  if (!ok)
    return listed ? terr_set(e, T_ENOMEM, field, -1, "out of memory")
                  : not_found(id, field, e);
  return 0;
}

int region_delete(const char *owner, const char *id, region_job_probe probe,
                  void *ud, terr *e) {
  region *r;
  int rc = region_ref(owner, id, "id", &r, e);
  if (rc) return rc;
  if (probe) prune_jobs(r, probe, ud);
  pthread_mutex_lock(&g_mu);
  if (r->njobs > 0 || !r->listed) {
    int n = r->njobs, listed = r->listed;
    char first[T_ID_MAX] = "";
    if (n) snprintf(first, sizeof first, "%s", r->jobs[0]);
    char list[3 * T_ID_MAX + 16] = "";
    for (int i = 0; i < n && i < 3; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
               i ? ", " : "", r->jobs[i]);
    pthread_mutex_unlock(&g_mu);
    region_unref(r);
    if (!listed) return not_found(id, "id", e);
    return terr_set(e, T_ECONFLICT, "id", -1,
                    "region %s is used by %d queued or running job%s (%s%s): "
                    "cancel or wait for them first",
                    id, n, n == 1 ? "" : "s", list, n > 3 ? ", ..." : "");
  }
  for (region **p = &g_list; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  r->listed = 0;
  r->refs--; /* the registry's: ours keeps it alive until below */
  pthread_mutex_unlock(&g_mu);
  region_unref(r);
  return 0;
}

/* 0 when r is whole: not torn, its file at least the registered size. */
static int region_whole(region *r, const char *field, terr *e) {
  struct stat st;
  memset(&st, 0, sizeof st);
  if (atomic_load(&r->torn))
    return terr_set(e, T_ECONFLICT, field, -1,
                    "region %s was truncated under the daemon: delete it and "
                    "register the file again", r->id);
  if (fstat(r->fd, &st) != 0 || st.st_size < r->bytes)
    return terr_set(e, T_ECONFLICT, field, -1,
                    "region %s's file is shorter than when it was registered "
                    "(%lld of %lld bytes): nothing of it was read",
                    r->id, (long long)st.st_size, (long long)r->bytes);
  return 0;
}

/* The range [offset, offset + bytes) of r, aligned to align. */
static int range_ok(const region *r, int64_t offset, int64_t bytes,
                    int64_t align, const char *field, terr *e) {
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.offset", field);
  if (offset < 0 || bytes < 0 || offset > r->bytes ||
      bytes > r->bytes - offset)
    return terr_set(e, T_EINVAL, f, -1,
                    "%lld bytes at offset %lld pass the end of region %s "
                    "(%lld bytes)", (long long)bytes, (long long)offset,
                    r->id, (long long)r->bytes);
  if (align > 1 && offset % align != 0)
    return terr_set(e, T_EINVAL, f, -1,
                    "must be a multiple of %lld (the element's size)",
                    (long long)align);
  return 0;
}

int region_check_range(const char *owner, const char *id, int64_t offset,
                       int64_t bytes, int64_t align, const char *field,
                       terr *e) {
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.region", field);
  region *r;
  int rc = region_ref(owner, id, f, &r, e);
  if (rc) return rc;
  rc = range_ok(r, offset, bytes, align, field, e);
  region_unref(r);
  return rc;
}

static void unref_cb(void *arg) { region_unref(arg); }

/* The end check of a job that read r (tlocal_log_hook). */
static int end_check(void *arg, const char *field, terr *e) {
  region *r = arg;
  if (atomic_load(&r->torn))
    return terr_set(e, T_ECONFLICT, field, -1,
                    "region %s was truncated while the job ran; the job's "
                    "result was dropped", r->id);
  return region_whole(r, field, e);
}

int region_input(const char *owner, const char *id, int64_t offset,
                 tdtype dt, int ndim, const int64_t *shape,
                 const char *field, tlocal_log *log, tarray **out, terr *e) {
  *out = NULL;
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.region", field);
  region *r;
  int rc = region_ref(owner, id, f, &r, e);
  if (rc) return rc;
  int64_t n = tshape_size(ndim, shape, INT64_MAX);
  int64_t isz = (int64_t)tdtype_size(dt);
  if ((rc = region_whole(r, field, e)) ||
      (rc = n < 0 ? terr_set(e, T_EINVAL, field, -1, "bad shape")
                  : range_ok(r, offset, n * isz, isz, field, e))) {
    region_unref(r);
    return rc;
  }
  tarray *a = calloc(1, sizeof *a);
  if (!a) {
    region_unref(r);
    return terr_set(e, T_ENOMEM, field, -1, "out of memory");
  }
  a->dtype = dt;
  a->ndim = ndim;
  memcpy(a->shape, shape, sizeof(int64_t) * (size_t)ndim);
  a->size = n;
  a->data = (char *)r->base + offset;
  a->release = unref_cb;
  a->release_arg = r; /* the reference taken above */
  if (log) {
    pthread_mutex_lock(&g_mu);
    r->refs++; /* the end check's */
    pthread_mutex_unlock(&g_mu);
    if (tlocal_log_hook(log, field, end_check, unref_cb, r) != 0) {
      region_unref(r);
      tarray_free(a);
      return terr_set(e, T_ENOMEM, field, -1, "out of memory");
    }
  }
  *out = a;
  return 0;
}

int region_result(const char *owner, const char *id, int64_t offset,
                  tdtype dt, int ndim, const int64_t *shape,
                  const char *field, tarray **out, terr *e) {
  return region_input(owner, id, offset, dt, ndim, shape, field, NULL, out,
                      e);
}

int region_output(const char *owner, const char *id, int64_t offset,
                  const tarray *a, const char *field, terr *e) {
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.region", field);
  region *r;
  int rc = region_ref(owner, id, f, &r, e);
  if (rc) return rc;
  int64_t bytes = a->size * (int64_t)tdtype_size(a->dtype);
  if (!(rc = range_ok(r, offset, bytes, (int64_t)tdtype_size(a->dtype), field,
                      e)) &&
      !(rc = region_whole(r, field, e))) {
    char *dst = (char *)r->base + offset;
    if (bytes > 0 && dst != (char *)a->data) /* else computed in place */
      memcpy(dst, a->data, (size_t)bytes);
    if (atomic_load(&r->torn))
      rc = terr_set(e, T_ECONFLICT, field, -1,
                    "region %s was truncated while the result was written "
                    "into it", r->id);
  }
  region_unref(r);
  return rc;
}

int region_count_all(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_count;
  pthread_mutex_unlock(&g_mu);
  return n;
}

#define REGION_OUT_PREFIX "region:"

char *region_out_text(const char *id, int64_t offset) {
  char buf[sizeof REGION_OUT_PREFIX + REGION_ID_MAX + 24];
  snprintf(buf, sizeof buf, "%s%s@%lld", REGION_OUT_PREFIX, id,
           (long long)offset);
  return strdup(buf);
}

int region_out_parse(const char *text, char *id, int64_t *offset) {
  size_t n = strlen(REGION_OUT_PREFIX);
  if (!text || strncmp(text, REGION_OUT_PREFIX, n) != 0) return 0;
  const char *at = strrchr(text, '@');
  if (!at || at < text + n || at - (text + n) >= REGION_ID_MAX) return 0;
  snprintf(id, REGION_ID_MAX, "%.*s", (int)(at - (text + n)), text + n);
  *offset = strtoll(at + 1, NULL, 10);
  return 1;
}
