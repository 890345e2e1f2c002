/* parts_upload.c — uploads in parts (parts_upload.h).
 *
 * The table: a list of open uploads under one mutex. Each holds its array
 * writer (arrays_writer_open_parts: the .tmp file, sized), the ranges
 * received (sorted, merged) and the ranges being received (one per PUT in
 * flight), and a reference count: one for being listed, one per part in
 * flight. A delete or an expiry unlists it and sets `cut`; parts in flight
 * then fail at their next write, and the last reference aborts the writer
 * (which removes the file) outside the mutex. Writes never take the mutex:
 * the parts' ranges are disjoint by construction (begin refuses an
 * overlap), and pwrite at distinct offsets of one file is safe from any
 * threads.
 *
 * Hostile parts: the ranges received are merged as they come, and an
 * upload holds at most MAX_RANGES separate ones (a client sending every
 * other byte is refused, 400, instead of growing the list without end);
 * parts in flight per upload are at most MAX_BUSY.
 */
#include "compute/array/codec/parts_upload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define MAX_RANGES 4096
#define MAX_BUSY 256

typedef struct prange {
  uint64_t a, b; /* [a, b) */
} prange;

typedef struct upl {
  struct upl *next;
  char id[T_ID_MAX];
  char *owner;
  array_writer *w;
  uint64_t bytes;
  int64_t touched_ms;
  prange done[MAX_RANGES];
  size_t ndone;
  prange busy[MAX_BUSY];
  size_t nbusy;
  int refs;
  atomic_int cut;
  char dtype[16], shape[256];
} upl;

struct parts_put {
  upl *u;
  uint64_t off, len, got;
  int slot; /* its slot in the writer's digest (arrays_writer_part_begin) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static upl *head;
static parts_limits lim = {3600, 16, (int64_t)16 << 30, (int64_t)4 << 30,
                           2000000000};

void parts_upload_setup(const parts_limits *l) {
  pthread_mutex_lock(&mu);
  lim = *l;
  pthread_mutex_unlock(&mu);
}

static void upl_free(upl *u) {
  if (!u) return;
  arrays_writer_abort(u->w); /* removes the .tmp file (NULL: nothing) */
  free(u->owner);
  free(u);
}

/* Under mu: drop a reference; the upload to free (outside mu) or NULL. */
static upl *upl_unref(upl *u) {
  return --u->refs == 0 ? u : NULL;
}

/* Under mu: take u out of the list (it keeps its other references). */
static upl *upl_unlist(upl *u) {
  for (upl **pp = &head; *pp; pp = &(*pp)->next)
    if (*pp == u) {
      *pp = u->next;
      u->next = NULL;
      atomic_store(&u->cut, 1);
      return upl_unref(u);
    }
  return NULL;
}

static int expired(const upl *u, int64_t now) {
  return lim.ttl_s > 0 && now - u->touched_ms > lim.ttl_s * 1000;
}

/* Under mu: the owner's live upload `id`, or NULL. */
static upl *upl_find(const char *id, const char *owner) {
  int64_t now = t_wall_ms();
  for (upl *u = head; u; u = u->next)
    if (strcmp(u->id, id) == 0 && strcmp(u->owner, owner ? owner : "") == 0)
      return expired(u, now) ? NULL : u;
  return NULL;
}

static int not_found(const char *id, terr *e) {
  return terr_set(e, T_ENOTFOUND, "id", -1,
                  "no open upload '%.40s' (never made, completed, deleted "
                  "or expired)", id ? id : "");
}

/* Under mu: the first range of [0, bytes) not received, [*from, *to);
 * 0 when nothing is missing. */
static int first_gap(const upl *u, uint64_t *from, uint64_t *to) {
  uint64_t at = 0;
  for (size_t i = 0; i < u->ndone; i++) {
    if (u->done[i].a > at) {
      *from = at;
      *to = u->done[i].a;
      return 1;
    }
    at = u->done[i].b;
  }
  if (at < u->bytes) {
    *from = at;
    *to = u->bytes;
    return 1;
  }
  return 0;
}

static void info_fill(const upl *u, parts_info *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->id, sizeof o->id, "%s", u->id);
  o->bytes = u->bytes;
  for (size_t i = 0; i < u->ndone; i++)
    o->received += u->done[i].b - u->done[i].a;
  o->expires_ms = lim.ttl_s > 0 ? u->touched_ms + lim.ttl_s * 1000 : -1;
  if (!first_gap(u, &o->missing_from, &o->missing_to))
    o->missing_from = o->missing_to = u->bytes;
  memcpy(o->dtype, u->dtype, sizeof o->dtype);
  memcpy(o->shape, u->shape, sizeof o->shape);
}

int parts_upload_create(arrays *A, const char *owner, tdtype dt, int ndim,
                        const int64_t *shape, parts_info *out, terr *e) {
  owner = owner ? owner : "";
  pthread_mutex_lock(&mu);
  parts_limits l = lim;
  int64_t open = 0, pending = 0;
  for (upl *u = head; u; u = u->next)
    if (strcmp(u->owner, owner) == 0) {
      open++;
      pending += (int64_t)u->bytes;
    }
  pthread_mutex_unlock(&mu);
  int64_t n = tshape_size(ndim, shape, l.max_elems);
  if (n < 0)
    return terr_set(e, T_EINVAL, "shape", -1,
                    "not a shape of at most %lld elements",
                    (long long)l.max_elems);
  int64_t bytes = n * (int64_t)tdtype_size(dt);
  if (bytes > l.max_bytes)
    return terr_set(e, T_ETOOLARGE, "shape", -1,
                    "%lld bytes: uploads take at most %lld", (long long)bytes,
                    (long long)l.max_bytes);
  if (open >= l.max_open)
    return terr_set(e, T_ETOOLARGE, "shape", -1,
                    "%lld uploads are open, the most one token may hold: "
                    "complete or delete one", (long long)open);
  if (pending + bytes > l.max_pending)
    return terr_set(e, T_ETOOLARGE, "shape", -1,
                    "open uploads would hold %lld bytes, over the %lld one "
                    "token may hold", (long long)(pending + bytes),
                    (long long)l.max_pending);
  upl *u = calloc(1, sizeof *u);
  if (!u || !(u->owner = strdup(owner))) {
    upl_free(u);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  int rc = arrays_writer_open_parts(A, dt, ndim, shape, &u->w, e);
  if (rc) {
    upl_free(u);
    return rc;
  }
  t_id_new('u', u->id);
  u->bytes = arrays_writer_bytes(u->w);
  u->touched_ms = t_wall_ms();
  u->refs = 1;
  snprintf(u->dtype, sizeof u->dtype, "%s", tdtype_name(dt));
  tshape_str(ndim, shape, u->shape, sizeof u->shape);
  /* Counted again under the lock: two creates at once must not both pass
   * the checks above on the same last slot. */
  pthread_mutex_lock(&mu);
  open = pending = 0;
  for (upl *o = head; o; o = o->next)
    if (strcmp(o->owner, owner) == 0) {
      open++;
      pending += (int64_t)o->bytes;
    }
  int full = open >= lim.max_open || pending + bytes > lim.max_pending;
  if (!full) {
    u->next = head;
    head = u;
    info_fill(u, out);
  }
  pthread_mutex_unlock(&mu);
  if (full) {
    upl_free(u);
    return terr_set(e, T_ETOOLARGE, "shape", -1,
                    "this token's open uploads are at their limit "
                    "(--max-open-uploads, --max-upload-pending): complete "
                    "or delete one");
  }
  return T_OK;
}

int parts_upload_info(const char *id, const char *owner, parts_info *out,
                      terr *e) {
  pthread_mutex_lock(&mu);
  upl *u = upl_find(id, owner);
  if (u) info_fill(u, out);
  pthread_mutex_unlock(&mu);
  return u ? T_OK : not_found(id, e);
}

/* Under mu: does [a, b) meet a range of list r[0..n)? The one it meets. */
static const prange *overlap(const prange *r, size_t n, uint64_t a,
                             uint64_t b) {
  for (size_t i = 0; i < n; i++)
    if (r[i].a < b && a < r[i].b) return &r[i];
  return NULL;
}

/* Under mu: the checks of a new part; T_OK or the error. */
static int put_check(const upl *u, int64_t offset, int64_t len, terr *e) {
  if (offset < 0 || (uint64_t)offset >= u->bytes)
    return terr_set(e, T_EINVAL, "offset", offset,
                    "%lld is not within the upload's %llu data bytes",
                    (long long)offset, (unsigned long long)u->bytes);
  if (len <= 0)
    return terr_set(e, T_EINVAL, "body", -1, "an empty part");
  if ((uint64_t)len > u->bytes - (uint64_t)offset)
    return terr_set(e, T_EINVAL, "offset", offset,
                    "bytes %lld..%lld end past the upload's %llu data bytes",
                    (long long)offset, (long long)(offset + len - 1),
                    (unsigned long long)u->bytes);
  uint64_t a = (uint64_t)offset, b = a + (uint64_t)len;
  const prange *o = overlap(u->done, u->ndone, a, b);
  const char *what = "received";
  if (!o) {
    o = overlap(u->busy, u->nbusy, a, b);
    what = "still arriving";
  }
  if (o)
    return terr_set(e, T_EINVAL, "offset", offset,
                    "bytes %llu..%llu overlap bytes %llu..%llu of a part %s",
                    (unsigned long long)a, (unsigned long long)(b - 1),
                    (unsigned long long)o->a, (unsigned long long)(o->b - 1),
                    what);
  if (u->nbusy >= MAX_BUSY)
    return terr_set(e, T_EBUSY, "offset", offset,
                    "%d parts of this upload are arriving at once: wait for "
                    "one", MAX_BUSY);
  if (u->ndone + u->nbusy >= MAX_RANGES)
    return terr_set(e, T_EINVAL, "offset", offset,
                    "the upload holds %d separate ranges: send parts that "
                    "join the ones received", MAX_RANGES);
  return T_OK;
}

int parts_put_begin(const char *id, const char *owner, int64_t offset,
                    int64_t len, parts_put **out, terr *e) {
  *out = NULL;
  parts_put *p = calloc(1, sizeof *p);
  if (!p) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  pthread_mutex_lock(&mu);
  upl *u = upl_find(id, owner);
  int rc = u ? put_check(u, offset, len, e) : not_found(id, e);
  if (rc == T_OK) {
    u->busy[u->nbusy++] = (prange){(uint64_t)offset, (uint64_t)(offset + len)};
    u->refs++;
    u->touched_ms = t_wall_ms();
    p->slot = arrays_writer_part_begin(u->w, (uint64_t)offset, (uint64_t)len);
    p->u = u;
    p->off = (uint64_t)offset;
    p->len = (uint64_t)len;
  }
  pthread_mutex_unlock(&mu);
  if (rc) {
    free(p);
    return rc;
  }
  *out = p;
  return T_OK;
}

int parts_put_write(parts_put *p, const void *buf, size_t n, terr *e) {
  if (atomic_load(&p->u->cut))
    return terr_set(e, T_ENOTFOUND, "id", -1,
                    "the upload was deleted or expired while this part arrived");
  if (n > p->len - p->got)
    return terr_set(e, T_EINVAL, "body", (int64_t)(p->got + n),
                    "the part is longer than its Content-Length");
  int rc = arrays_writer_pwrite(p->u->w, p->slot, p->off + p->got, buf, n, e);
  if (rc) return rc;
  p->got += n;
  return T_OK;
}

/* Under mu: take the part's range out of the busy list. */
static void busy_drop(upl *u, uint64_t a) {
  for (size_t i = 0; i < u->nbusy; i++)
    if (u->busy[i].a == a) {
      u->busy[i] = u->busy[--u->nbusy];
      return;
    }
}

/* Under mu: add [a, b) to the sorted, merged list of received ranges
 * (put_check left room for it). */
static void done_add(upl *u, uint64_t a, uint64_t b) {
  size_t i = 0;
  while (i < u->ndone && u->done[i].b < a) i++;
  /* ranges i.. that touch [a, b) merge with it */
  size_t j = i;
  while (j < u->ndone && u->done[j].a <= b) {
    if (u->done[j].a < a) a = u->done[j].a;
    if (u->done[j].b > b) b = u->done[j].b;
    j++;
  }
  size_t removed = j - i;
  if (removed == 0) {
    memmove(&u->done[i + 1], &u->done[i], (u->ndone - i) * sizeof u->done[0]);
    u->ndone++;
  } else if (removed > 1) {
    memmove(&u->done[i + 1], &u->done[j], (u->ndone - j) * sizeof u->done[0]);
    u->ndone -= removed - 1;
  }
  u->done[i] = (prange){a, b};
}

int parts_put_end(parts_put *p, parts_info *out, terr *e) {
  int rc = T_OK;
  upl *u = p->u, *gone;
  pthread_mutex_lock(&mu);
  busy_drop(u, p->off);
  if (atomic_load(&u->cut))
    rc = terr_set(e, T_ENOTFOUND, "id", -1,
                  "the upload was deleted or expired while this part arrived");
  else if (p->got != p->len)
    rc = terr_set(e, T_EINVAL, "body", (int64_t)p->got,
                  "the part is %llu bytes, its Content-Length said %llu",
                  (unsigned long long)p->got, (unsigned long long)p->len);
  /* Under mu: complete cannot take the writer meanwhile. */
  arrays_writer_part_end(u->w, p->slot, rc != T_OK);
  if (rc == T_OK) {
    done_add(u, p->off, p->off + p->len);
    u->touched_ms = t_wall_ms();
    info_fill(u, out);
  }
  gone = upl_unref(u);
  pthread_mutex_unlock(&mu);
  upl_free(gone);
  free(p);
  return rc;
}

void parts_put_abort(parts_put *p) {
  if (!p) return;
  pthread_mutex_lock(&mu);
  arrays_writer_part_end(p->u->w, p->slot, 1);
  busy_drop(p->u, p->off);
  upl *gone = upl_unref(p->u);
  pthread_mutex_unlock(&mu);
  upl_free(gone);
  free(p);
}

int parts_upload_complete(const char *id, const char *owner,
                          store_array *rec, int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  uint64_t from = 0, to = 0;
  int rc = T_OK;
  array_writer *w = NULL;
  upl *gone = NULL;
  pthread_mutex_lock(&mu);
  upl *u = upl_find(id, owner);
  if (!u)
    rc = not_found(id, e);
  else if (u->nbusy)
    rc = terr_set(e, T_ECONFLICT, "offset", (int64_t)u->busy[0].a,
                  "%zu parts are still arriving (bytes %llu..%llu among "
                  "them): complete once they are answered",
                  u->nbusy, (unsigned long long)u->busy[0].a,
                  (unsigned long long)(u->busy[0].b - 1));
  else if (first_gap(u, &from, &to))
    rc = terr_set(e, T_ECONFLICT, "offset", (int64_t)from,
                  "bytes %llu..%llu (of %llu) were never received",
                  (unsigned long long)from, (unsigned long long)(to - 1),
                  (unsigned long long)u->bytes);
  else {
    w = u->w;
    u->w = NULL;
    gone = upl_unlist(u);
  }
  pthread_mutex_unlock(&mu);
  upl_free(gone);
  if (rc) return rc;
  return arrays_writer_commit_parts(w, owner ? owner : "", rec, existing, e);
}

int parts_upload_delete(const char *id, const char *owner, terr *e) {
  pthread_mutex_lock(&mu);
  upl *u = upl_find(id, owner), *gone = u ? upl_unlist(u) : NULL;
  pthread_mutex_unlock(&mu);
  upl_free(gone);
  return u ? T_OK : not_found(id, e);
}

void parts_upload_expire(int64_t now_ms, int *n) {
  upl *doomed = NULL;
  int count = 0;
  pthread_mutex_lock(&mu);
  for (upl **pp = &head; *pp;) {
    upl *u = *pp;
    if (!expired(u, now_ms)) {
      pp = &u->next;
      continue;
    }
    *pp = u->next;
    atomic_store(&u->cut, 1);
    count++;
    if (upl_unref(u)) { /* no part in flight: free it below */
      u->next = doomed;
      doomed = u;
    }
  }
  pthread_mutex_unlock(&mu);
  while (doomed) {
    upl *u = doomed;
    doomed = u->next;
    upl_free(u);
  }
  if (n) *n = count;
}
