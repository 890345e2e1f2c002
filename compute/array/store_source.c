/* compute/array/store_source.c — tenv callbacks backed by the store (see compute/array/store_source.h).
 *
 * array_meta reads the array's row (dtype name, shape as JSON text) and
 * parses it; array_load maps the row's .npy file read-only (no copy: pages
 * come in as the job reads them) and checks that the file still says what
 * the row says, so a replaced or truncated file is an I/O error, never
 * silently different data. A small array is then kept mapped
 * (the arrcache below, store_source.h: one node's store only): the next job that reads it, and
 * the next submit's check, find it there without a store read or a map.
 * The element cap (env->max_elems) is applied by
 * arrayval to the shape that array_meta reports. result_meta / result_load
 * do the same for a finished job's result (a chained input): the job must
 * have succeeded (T_ECONFLICT saying its status otherwise). A job's input
 * is its result's first part, or the part it names ({"result", "part"}: a
 * result of several arrays, compute/array/parts.h; parts 1.. are always files).
 * An int64 result is read as float64 (NumPy's promotion; arrays are never
 * integers inside a job): result_meta says float64, and result_load gives
 * the int64 array as stored, which arrayval_resolve converts by chunks on
 * the job's pool, stopping at its flag (a conversion of 10^8 indices is
 * as cancelable as any other build of an input).
 */
#include "compute/array/store_source.h"
#include "compute/array/region.h"
#include "compute/array/parts.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- arrays kept mapped between jobs (arrcache, store_source.h) -------
 *
 * A table of entries chained in ARRCACHE_BUCKETS hash buckets by (store, owner,
 * id), and one list from the most to the least recently used. An entry
 * owns the mapped tarray its first job loaded and counts its references:
 * one for the table while it is listed, one per view a job holds. A view
 * is a tarray of its own whose data points into the entry's mapping and
 * whose release hook (tarray.h) gives its reference back; the last one
 * gone (the table's included) unmaps. Eviction (over the bytes or the
 * entries allowed) and a drop only unlist an entry: a job still reading it
 * keeps its mapping until its view is freed.
 */
#define ARRCACHE_BUCKETS 1024

typedef struct ent {
  struct ent *hnext;      /* its bucket's chain */
  struct ent *prev, *next; /* the LRU list, most recent at the head */
  const void *st;
  char *owner, *id;
  tarray *a; /* the mapping, owned */
  size_t bytes;
  int refs;   /* the table's (while listed) + one per view */
} ent;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ent *g_bucket[ARRCACHE_BUCKETS];
static ent *g_head, *g_tail;
static int g_n;
static size_t g_bytes;
static uint64_t g_gen;
static size_t g_total_max = ARRCACHE_TOTAL_MAX;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
  const char *v = getenv("TESSEL_ARRAY_CACHE_MB");
  if (!v || !*v) return;
  char *end;
  unsigned long long mb = strtoull(v, &end, 10);
  if (*end == 0 && mb < ((size_t)1 << 24)) g_total_max = (size_t)mb << 20;
}

static unsigned kc_hash(const void *st, const char *owner, const char *id) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)st;
  for (const char *s = owner; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull; /* "ab"+"c" is not "a"+"bc" */
  for (const char *s = id; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (unsigned)(h ^ (h >> 32)) % ARRCACHE_BUCKETS;
}

static ent *kc_find(const void *st, const char *owner, const char *id) { /* [mu] */
  for (ent *x = g_bucket[kc_hash(st, owner, id)]; x; x = x->hnext)
    if (x->st == st && strcmp(x->id, id) == 0 && strcmp(x->owner, owner) == 0)
      return x;
  return NULL;
}

static void lru_unlink(ent *x) { /* [mu] */
  if (x->prev) x->prev->next = x->next; else g_head = x->next;
  if (x->next) x->next->prev = x->prev; else g_tail = x->prev;
  x->prev = x->next = NULL;
}

static void lru_push(ent *x) { /* [mu] */
  x->next = g_head;
  x->prev = NULL;
  if (g_head) g_head->prev = x; else g_tail = x;
  g_head = x;
}

static void kc_free(ent *x) { /* no lock: it is unreachable */
  tarray_free(x->a);
  free(x->owner);
  free(x->id);
  free(x);
}

/* Out of the table and the list; 1 when that was its last reference (the
 * caller frees it once the lock is dropped). [mu] */
static int kc_unlist(ent *x) {
  ent **p = &g_bucket[kc_hash(x->st, x->owner, x->id)];
  while (*p != x) p = &(*p)->hnext;
  *p = x->hnext;
  lru_unlink(x);
  g_n--;
  g_bytes -= x->bytes;
  return --x->refs == 0;
}

static void view_release(void *arg) {
  ent *x = arg;
  pthread_mutex_lock(&g_mu);
  int last = --x->refs == 0;
  pthread_mutex_unlock(&g_mu);
  if (last) kc_free(x);
}

/* A view of x's array, its reference taken; NULL without memory. [mu] */
static tarray *view_of(ent *x) {
  tarray *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->dtype = x->a->dtype;
  v->ndim = x->a->ndim;
  memcpy(v->shape, x->a->shape, sizeof v->shape);
  v->size = x->a->size;
  v->data = x->a->data;
  v->release = view_release;
  v->release_arg = x;
  x->refs++;
  return v;
}

int arrcache_get(const void *st, const char *owner, const char *id,
                 tarray **out) {
  *out = NULL;
  pthread_mutex_lock(&g_mu);
  ent *x = g_n ? kc_find(st, owner, id) : NULL;
  if (x) {
    lru_unlink(x);
    lru_push(x);
    *out = view_of(x);
  }
  pthread_mutex_unlock(&g_mu);
  return *out != NULL;
}

int arrcache_meta(const void *st, const char *owner, const char *id,
                  tdtype *dt, int *ndim, int64_t *shape) {
  pthread_mutex_lock(&g_mu);
  ent *x = g_n ? kc_find(st, owner, id) : NULL;
  if (x) {
    *dt = x->a->dtype;
    *ndim = x->a->ndim;
    memcpy(shape, x->a->shape, sizeof(int64_t) * (size_t)x->a->ndim);
  }
  pthread_mutex_unlock(&g_mu);
  return x != NULL;
}

uint64_t arrcache_gen(void) {
  pthread_mutex_lock(&g_mu);
  uint64_t g = g_gen;
  pthread_mutex_unlock(&g_mu);
  return g;
}

/* Unlist the least recently used until `need` more bytes and one more
 * entry fit; their last references go on *freed. [mu] */
static void make_room(size_t need, ent **freed) {
  while (g_tail && (g_bytes + need > g_total_max || g_n + 1 > ARRCACHE_ENTRIES_MAX)) {
    ent *x = g_tail;
    if (kc_unlist(x)) {
      x->hnext = *freed;
      *freed = x;
    }
  }
}

static void kc_free_chain(ent *x) {
  for (ent *next; x; x = next) {
    next = x->hnext;
    kc_free(x);
  }
}

tarray *arrcache_adopt(const void *st, const char *owner, const char *id,
                       uint64_t gen, tarray *a) {
  pthread_once(&g_once, read_env);
  if (!a || !a->map_base || a->release || a->sink || a->guard ||
      a->map_len > ARRCACHE_ONE_MAX || a->map_len > g_total_max)
    return a;
  ent *x = calloc(1, sizeof *x);
  if (x) {
    x->owner = strdup(owner);
    x->id = strdup(id);
  }
  if (!x || !x->owner || !x->id) {
    if (x) {
      free(x->owner);
      free(x->id);
      free(x);
    }
    return a;
  }
  x->st = st;
  x->a = a;
  x->bytes = a->map_len;
  ent *freed = NULL;
  tarray *v = NULL;
  pthread_mutex_lock(&g_mu);
  if (gen == g_gen && !kc_find(st, owner, id)) {
    make_room(x->bytes, &freed);
    v = view_of(x);
    if (v) {
      unsigned b = kc_hash(st, owner, id);
      x->hnext = g_bucket[b];
      g_bucket[b] = x;
      lru_push(x);
      x->refs++; /* the table's */
      g_n++;
      g_bytes += x->bytes;
    }
  }
  pthread_mutex_unlock(&g_mu);
  kc_free_chain(freed);
  if (v) return v;
  x->a = NULL; /* not kept: the caller keeps its own */
  kc_free(x);
  return a;
}

void arrcache_drop(const char *id) {
  ent *freed = NULL;
  pthread_mutex_lock(&g_mu);
  g_gen++; /* a load that began before this keeps nothing */
  for (ent *x = g_head, *next; x; x = next) {
    next = x->next;
    if (strcmp(x->id, id) == 0 && kc_unlist(x)) {
      x->hnext = freed;
      freed = x;
    }
  }
  pthread_mutex_unlock(&g_mu);
  kc_free_chain(freed);
}

void arrcache_clear(void) {
  ent *freed = NULL;
  pthread_mutex_lock(&g_mu);
  g_gen++;
  while (g_tail) {
    ent *x = g_tail;
    if (kc_unlist(x)) {
      x->hnext = freed;
      freed = x;
    }
  }
  pthread_mutex_unlock(&g_mu);
  kc_free_chain(freed);
}

void arrcache_stats(int *entries, size_t *bytes) {
  pthread_mutex_lock(&g_mu);
  if (entries) *entries = g_n;
  if (bytes) *bytes = g_bytes;
  pthread_mutex_unlock(&g_mu);
}

/* ---- uploaded arrays -------------------------------------------------------- */

/* Parse the row's dtype and shape JSON ("[100,10000]"). 0 or T_EIO. */
static int env_parse_meta(const store_array *a, tdtype *dt, int *ndim,
                          int64_t *shape, terr *e) {
  int rc = T_OK;
  json_t *v = NULL;
  if (tdtype_parse(a->dtype ? a->dtype : "", dt) != 0) {
    rc = terr_set(e, T_EIO, "", -1, "array %s: stored dtype '%s' is unknown",
                  a->id, a->dtype ? a->dtype : "");
    goto done;
  }
  json_error_t jerr;
  v = json_loads(a->shape ? a->shape : "", 0, &jerr);
  if (!json_is_array(v) || json_array_size(v) > T_MAXDIM) {
    rc = terr_set(e, T_EIO, "", -1, "array %s: stored shape '%s' is not valid",
                  a->id, a->shape ? a->shape : "");
    goto done;
  }
  *ndim = (int)json_array_size(v);
  for (int i = 0; i < *ndim; i++) {
    json_t *d = json_array_get(v, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 0) {
      rc = terr_set(e, T_EIO, "", i,
                    "array %s: stored shape '%s' has a bad dimension %d",
                    a->id, a->shape, i);
      goto done;
    }
    shape[i] = (int64_t)json_integer_value(d);
  }
done:
  json_decref(v);
  return rc;
}

/* Whether the arrays of this store may be kept (arrcache.h): not on a
 * cluster, where another node may delete one. */
static int cacheable(void *ud) { return !store_is_cluster(ud); }

static int env_array_meta(void *ud, const char *owner, const char *id,
                          tdtype *dt, int *ndim, int64_t *shape, terr *e) {
  if (cacheable(ud) && arrcache_meta(ud, owner, id, dt, ndim, shape))
    return T_OK;
  store_array a;
  memset(&a, 0, sizeof a);
  int rc = store_array_get(ud, id, owner, &a, e);
  if (rc == T_OK) rc = env_parse_meta(&a, dt, ndim, shape, e);
  store_array_clear(&a);
  return rc;
}

static int env_array_load(void *ud, const char *owner, const char *id,
                          tarray **out, terr *e) {
  *out = NULL;
  store_array a;
  memset(&a, 0, sizeof a);
  tarray *arr = NULL;
  tdtype dt;
  int ndim = 0;
  int64_t shape[T_MAXDIM];
  int keep = cacheable(ud);
  if (keep && arrcache_get(ud, owner, id, out)) return T_OK;
  uint64_t gen = keep ? arrcache_gen() : 0; /* before the row is read */
  int rc = store_array_get(ud, id, owner, &a, e);
  if (rc) goto fail;
  if ((rc = env_parse_meta(&a, &dt, &ndim, shape, e))) goto fail;
  if (!a.path) {
    rc = terr_set(e, T_EIO, "", -1, "array %s has no data file", id);
    goto fail;
  }
  if ((rc = tarray_map_npy(a.path, &arr, e))) goto fail;
  int same = arr->dtype == dt && arr->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = arr->shape[i] == shape[i];
  if (!same) {
    rc = terr_set(e, T_EIO, "", -1,
                  "array %s: data file does not match the stored %s %s", id,
                  a.dtype, a.shape);
    goto fail;
  }
  store_array_clear(&a);
  *out = keep ? arrcache_adopt(ud, owner, id, gen, arr) : arr;
  return T_OK;

fail:
  tarray_free(arr);
  store_array_clear(&a);
  return rc;
}

/* ---- a finished job's result (chained jobs) -------------------------------- */

/* The job, which must have succeeded: T_ENOTFOUND, T_ECONFLICT saying its
 * status, or 0 with *j filled (store_job_clear). A tile of a split job is
 * not a job of the API (its parent's result holds its rows; expiry and
 * delete go by the parent): T_ECONFLICT naming the parent, as a job that
 * cannot be taken yet. */
static int env_result_job(void *ud, const char *owner, const char *id,
                          store_job *j, terr *e) {
  memset(j, 0, sizeof *j);
  int rc = store_job_get(ud, id, owner, j, e);
  if (rc) return rc;
  if (j->parent) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s is a tile of split job %s, not a job of its own: "
                  "take {\"result\": \"%s\"}", id, j->parent, j->parent);
    store_job_clear(j);
    return rc;
  }
  char rid[REGION_ID_MAX];
  int64_t roff;
  if (j->status == JOB_SUCCEEDED &&
      region_out_parse(j->output_file, rid, &roff)) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s wrote its result into region %s at offset %lld "
                  "and the service keeps no copy: take it as {\"region\": "
                  "...}", id, rid, (long long)roff);
    store_job_clear(j);
    return rc;
  }
  if (j->status == JOB_SUCCEEDED && j->output_file) {
    rc = terr_set(e, T_ECONFLICT, "", -1,
                  "job %s wrote its result to %.200s (output.file) and the "
                  "service keeps no copy: take it as {\"file\": ...}", id,
                  j->output_file);
    store_job_clear(j);
    return rc;
  }
  if (j->status == JOB_SUCCEEDED) return T_OK;
  rc = terr_set(e, T_ECONFLICT, "", -1,
                j->status == JOB_QUEUED || j->status == JOB_RUNNING
                    ? "job %s is %s: submit the job that takes its result "
                      "once it has succeeded"
                    : "job %s %s: it has no result to take",
                id, job_status_name(j->status));
  store_job_clear(j);
  return rc;
}

/* What the job's row says of its result (its first part). 0 or T_EIO.
 * An int64 result (a geodesic query's indices) is T_I64 here; what a job
 * reads of it is float64 (env_result_meta; arrayval_resolve converts what
 * env_result_load gives). */
static int result_shape(const store_job *j, tdtype *dt, int *ndim,
                        int64_t *shape, terr *e) {
  int i64 = strcmp(j->result.dtype, "int64") == 0;
  if (!j->result.dtype[0]) /* a succeeded job always has one */
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its stored result is not an array", j->id);
  if (i64) *dt = T_I64;
  if ((!i64 && tdtype_parse(j->result.dtype, dt) != 0) || j->result.ndim < 0 ||
      j->result.ndim > T_MAXDIM)
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its stored result is not an array", j->id);
  *ndim = j->result.ndim;
  for (int i = 0; i < *ndim; i++) shape[i] = j->result.shape[i];
  return T_OK;
}

/* Which part of j's result `part` names (NULL: the first): 0, or > 0
 * with *path its file (new heap string) and dt/ndim/shape its record.
 * T_EINVAL (message only) when the result has no such part. */
static int result_part(const store_job *j, const char *part, int *index,
                       char **path, tdtype *dt, int *ndim, int64_t *shape,
                       terr *e) {
  *index = 0;
  *path = NULL;
  if (!part) return T_OK;
  tparts p;
  int rc = tparts_parse(j->result_parts, &p, e);
  if (rc) return rc;
  int i = tparts_find(&p, part);
  if (i < 0) {
    rc = terr_set(e, T_EINVAL, "", -1, "job %s's result has no part '%s'%s",
                  j->id, part, p.n ? "" : " (it is one array)");
  } else if (i > 0) {
    *index = i;
    *path = p.p[i].path;
    p.p[i].path = NULL;
    *dt = p.p[i].dtype;
    *ndim = p.p[i].ndim;
    memcpy(shape, p.p[i].shape, sizeof p.p[i].shape);
  }
  tparts_clear(&p);
  return rc;
}

static int env_result_meta(void *ud, const char *owner, const char *id,
                           const char *part, tdtype *dt, int *ndim,
                           int64_t *shape, terr *e) {
  store_job j;
  int rc = env_result_job(ud, owner, id, &j, e);
  if (rc) return rc;
  int index;
  char *path = NULL;
  rc = result_part(&j, part, &index, &path, dt, ndim, shape, e);
  free(path);
  if (rc == T_OK && index == 0) rc = result_shape(&j, dt, ndim, shape, e);
  if (rc == T_OK && *dt == T_I64) *dt = T_F64; /* read as float64 */
  store_job_clear(&j);
  return rc;
}

/* The result from its file (mapped, no copy) or, for a small one kept in
 * the job's row, parsed from the row's .npy bytes; either way checked
 * against what the row says, and given as stored: an int64 result stays
 * T_I64 here (arrayval_resolve converts it by chunks, stoppable). */
static int env_result_load(void *ud, const char *owner, const char *id,
                           const char *part, tarray **out, terr *e) {
  *out = NULL;
  tdtype dt;
  int ndim = 0, index = 0;
  int64_t shape[T_MAXDIM];
  store_job j;
  int rc = env_result_job(ud, owner, id, &j, e);
  if (rc) return rc;
  tarray *a = NULL;
  char *path = NULL;
  if ((rc = result_part(&j, part, &index, &path, &dt, &ndim, shape, e))) {
  } else if (index > 0) { /* a later part: always its own file */
    rc = tarray_map_npy(path, &a, e);
  } else if ((rc = result_shape(&j, &dt, &ndim, shape, e))) {
  } else if (j.result_path) {
    rc = tarray_map_npy(j.result_path, &a, e);
  } else {
    void *npy = NULL;
    size_t len = 0;
    rc = store_job_result_npy(ud, id, owner, &npy, &len, e);
    if (rc == T_OK) rc = npy_parse_result(npy, len, INT64_MAX, &a, e);
    free(npy);
  }
  store_job_clear(&j);
  free(path);
  if (rc) return rc;
  int same = a->dtype == dt && a->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = a->shape[i] == shape[i];
  if (!same) {
    tarray_free(a);
    return terr_set(e, T_EIO, "", -1,
                    "job %s: its result file does not match its record", id);
  }
  *out = a;
  return T_OK;
}

void tenv_from_store(tenv *env, store *st, const char *owner,
                     int64_t max_elems) {
  memset(env, 0, sizeof *env);
  env->ud = st;
  env->owner = owner ? owner : "";
  env->array_meta = env_array_meta;
  env->array_load = env_array_load;
  env->result_meta = env_result_meta;
  env->result_load = env_result_load;
  env->max_elems = max_elems > 0 ? max_elems : INT64_MAX;
}
