/* compute/array/localpin.c — the pins of a job's {"file"} inputs (see
 * compute/array/localpin.h for what they hold and when they are compared).
 *
 * A job's pins are a small array searched linearly by field (a job reads
 * at most 16 inputs; LF_PINS_MAX bounds a stored list); pin_add grows it,
 * pin_same_file compares a file's identity, tlocal_pin_use records or
 * compares identity and header, tlocal_pin_failed turns a pinned file that
 * can no longer be opened or read into a T_ECONFLICT. The stored text is
 * built and read with jansson (only jobs with {"file"} inputs have any).
 *
 * Threads: any; a pins object is used by one thread at a time (the
 * submit's HTTP thread, then the job's worker). Ownership: see the header.
 */
#include "compute/array/localpin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

typedef struct lf_pin {
  char field[TERR_FIELD_MAX];
  int64_t dev, ino, size, mtime_ns, ctime_ns;
  tdtype dtype;
  int ndim;
  int64_t shape[T_MAXDIM];
} lf_pin;

struct tlocal_pins {
  lf_pin *v;
  int n, cap;
};

/* At most this many pins in one job (a kind reads at most 16 inputs; a
 * stored list longer than this is refused as not ours). */
#define LF_PINS_MAX 64

tlocal_pins *tlocal_pins_new(void) { return calloc(1, sizeof(tlocal_pins)); }

void tlocal_pins_free(tlocal_pins *p) {
  if (!p) return;
  free(p->v);
  free(p);
}

int tlocal_pins_count(const tlocal_pins *p) { return p ? p->n : 0; }

static int64_t ts_ns(struct timespec t) {
  return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;
}

static lf_pin *pin_find(tlocal_pins *p, const char *field) {
  for (int i = 0; p && i < p->n; i++)
    if (strcmp(p->v[i].field, field) == 0) return &p->v[i];
  return NULL;
}

/* A new pin for field: NULL when out of memory or when p holds
 * LF_PINS_MAX already. */
static lf_pin *pin_add(tlocal_pins *p, const char *field) {
  if (p->n >= LF_PINS_MAX) return NULL;
  if (p->n == p->cap) {
    int cap = p->cap * 2 + 4 < LF_PINS_MAX ? p->cap * 2 + 4 : LF_PINS_MAX;
    lf_pin *v = realloc(p->v, (size_t)cap * sizeof *v);
    if (!v) return NULL;
    p->v = v;
    p->cap = cap;
  }
  lf_pin *x = &p->v[p->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->field, sizeof x->field, "%s", field);
  return x;
}

static int pin_conflict(const char *field, const char *path, const char *why,
                        terr *e) {
  return terr_set(e, T_ECONFLICT, field, -1,
                  "'%.200s' changed since the job was accepted: %s; the job "
                  "does not read it", path, why);
}

/* The file opened now (st) against pin x: 0 when it is the same inode,
 * unchanged; T_ECONFLICT naming the field otherwise. */
static int pin_same_file(const lf_pin *x, const char *path,
                         const struct stat *st, terr *e) {
  const char *why = NULL;
  if (x->dev != (int64_t)st->st_dev || x->ino != (int64_t)st->st_ino)
    why = "the path names another file now (replaced or renamed over)";
  else if (x->size != (int64_t)st->st_size)
    why = "its size changed";
  else if (x->mtime_ns != ts_ns(st->st_mtim) ||
           x->ctime_ns != ts_ns(st->st_ctim))
    why = "it was written, touched or its attributes changed";
  return why ? pin_conflict(x->field, path, why, e) : 0;
}

int tlocal_pin_same(tlocal_pins *p, const char *field, const char *path,
                    const struct stat *st, terr *e) {
  const lf_pin *x = pin_find(p, field);
  return x ? pin_same_file(x, path, st, e) : 0;
}

int tlocal_pin_use(tlocal_pins *p, const char *field, const char *path,
                   const struct stat *st, tdtype dt, int ndim,
                   const int64_t *shape, terr *e) {
  if (!p) return 0;
  lf_pin *x = pin_find(p, field);
  if (!x) {
    if (!(x = pin_add(p, field)))
      return p->n >= LF_PINS_MAX
                 ? terr_set(e, T_EINVAL, field, -1,
                            "more than %d same-host files in one job",
                            LF_PINS_MAX)
                 : terr_set(e, T_ENOMEM, field, -1, "out of memory");
    x->dev = (int64_t)st->st_dev;
    x->ino = (int64_t)st->st_ino;
    x->size = (int64_t)st->st_size;
    x->mtime_ns = ts_ns(st->st_mtim);
    x->ctime_ns = ts_ns(st->st_ctim);
    x->dtype = dt;
    x->ndim = ndim;
    for (int i = 0; i < ndim && i < T_MAXDIM; i++) x->shape[i] = shape[i];
    return 0;
  }
  int rc = pin_same_file(x, path, st, e);
  if (rc) return rc;
  int same = x->dtype == dt && x->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = x->shape[i] == shape[i];
  return same ? 0
              : pin_conflict(field, path, "its dtype or shape changed", e);
}

int tlocal_pin_failed(tlocal_pins *p, const char *field, int rc, terr *e) {
  if (!rc || rc == T_ECONFLICT || rc == T_ENOMEM || rc == T_EUNAVAIL ||
      !pin_find(p, field))
    return rc;
  if (!e) return T_ECONFLICT;
  char why[TERR_MSG_MAX];
  const char *rest = e->message; /* "<field>: <why>" */
  size_t fl = strlen(e->field);
  if (fl && strncmp(rest, e->field, fl) == 0 && rest[fl] == ':') rest += fl + 2;
  snprintf(why, sizeof why, "%s", rest); /* it names the path already */
  return terr_set(e, T_ECONFLICT, field, -1,
                  "changed since the job was accepted: %s", why);
}

char *tlocal_pins_text(const tlocal_pins *p) {
  if (!p || p->n == 0) return NULL;
  json_t *a = json_array();
  for (int i = 0; a && i < p->n; i++) {
    const lf_pin *x = &p->v[i];
    json_t *sh = json_array();
    for (int d = 0; sh && d < x->ndim; d++)
      json_array_append_new(sh, json_integer(x->shape[d]));
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:o}",
                          "field", x->field, "dev", (json_int_t)x->dev,
                          "ino", (json_int_t)x->ino, "size",
                          (json_int_t)x->size, "mtime_ns",
                          (json_int_t)x->mtime_ns, "ctime_ns",
                          (json_int_t)x->ctime_ns, "dtype",
                          tdtype_name(x->dtype), "shape", sh);
    if (!o || json_array_append_new(a, o) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  char *t = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  return t;
}

/* One stored pin into x: 0, or -1 when it is not one. */
static int pin_parse(const json_t *o, lf_pin *x) {
  static const char *const ints[] = {"dev", "ino", "size", "mtime_ns",
                                     "ctime_ns"};
  int64_t *dst[] = {&x->dev, &x->ino, &x->size, &x->mtime_ns, &x->ctime_ns};
  const char *f = json_string_value(json_object_get(o, "field"));
  const char *dt = json_string_value(json_object_get(o, "dtype"));
  const json_t *sh = json_object_get(o, "shape");
  if (!f || strlen(f) >= sizeof x->field || !dt ||
      tdtype_parse(dt, &x->dtype) ||
      !json_is_array(sh) || json_array_size(sh) > T_MAXDIM)
    return -1;
  snprintf(x->field, sizeof x->field, "%s", f);
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    const json_t *v = json_object_get(o, ints[i]);
    if (!json_is_integer(v)) return -1;
    *dst[i] = (int64_t)json_integer_value(v);
  }
  x->ndim = (int)json_array_size(sh);
  for (int d = 0; d < x->ndim; d++) {
    const json_t *v = json_array_get(sh, (size_t)d);
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    x->shape[d] = (int64_t)json_integer_value(v);
  }
  return 0;
}

tlocal_pins *tlocal_pins_from_json(const void *json_v) {
  const json_t *a = json_v;
  if (!json_is_array(a) || json_array_size(a) > LF_PINS_MAX) return NULL;
  tlocal_pins *p = tlocal_pins_new();
  for (size_t i = 0; p && i < json_array_size(a); i++) {
    const json_t *o = json_array_get(a, i);
    const char *f = json_string_value(json_object_get(o, "field"));
    lf_pin tmp, *x;
    memset(&tmp, 0, sizeof tmp);
    if (!f || pin_find(p, f) || pin_parse(o, &tmp) != 0 ||
        !(x = pin_add(p, f))) {
      tlocal_pins_free(p);
      return NULL;
    }
    *x = tmp;
  }
  return p;
}
