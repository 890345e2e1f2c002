/* compute/array/parts.c — the result-parts document (compute/array/parts.h): written with
 * util/buf.h's JSON writers, read with jansson and checked entry by entry
 * against what the writer could have produced.
 */
#include "compute/array/parts.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

int tpart_name_valid(const char *name) {
  if (!name || name[0] < 'a' || name[0] > 'z') return 0;
  size_t i = 1;
  for (; name[i]; i++) {
    char c = name[i];
    if (i >= TPART_NAME_MAX - 1 ||
        !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  return 1;
}

char *tparts_text(const tparts *p) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_add(&b, "[", 1);
  for (int i = 0; i < p->n; i++) {
    const tpart *t = &p->p[i];
    tbuf_adds(&b, i ? ",{\"name\":" : "{\"name\":");
    tbuf_json_str(&b, t->name);
    tbuf_adds(&b, ",\"dtype\":");
    tbuf_json_str(&b, tdtype_name(t->dtype));
    tbuf_adds(&b, ",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) tbuf_add(&b, ",", 1);
      tbuf_json_int(&b, (long long)t->shape[d]);
    }
    tbuf_adds(&b, "],\"bytes\":");
    tbuf_json_int(&b, (long long)t->bytes);
    if (t->path) {
      tbuf_adds(&b, ",\"path\":");
      tbuf_json_str(&b, t->path);
    } else if (t->in_region) {
      tbuf_adds(&b, ",\"offset\":");
      tbuf_json_int(&b, (long long)t->offset);
    }
    tbuf_add(&b, "}", 1);
  }
  tbuf_add(&b, "]", 1);
  return tbuf_take(&b, NULL);
}

void tparts_clear(tparts *p) {
  if (!p) return;
  for (int i = 0; i < p->n && i < TPARTS_MAX; i++) free(p->p[i].path);
  memset(p, 0, sizeof *p);
}

int tparts_find(const tparts *p, const char *name) {
  for (int i = 0; name && i < p->n; i++)
    if (strcmp(p->p[i].name, name) == 0) return i;
  return -1;
}

/* One entry; the message of a failure in why. */
static const char *part_read(const json_t *v, int index, tpart *t) {
  if (!json_is_object(v)) return "an entry is not an object";
  const char *key;
  json_t *x;
  json_object_foreach((json_t *)v, key, x) {
    if (strcmp(key, "name") && strcmp(key, "dtype") && strcmp(key, "shape") &&
        strcmp(key, "bytes") && strcmp(key, "path") && strcmp(key, "offset"))
      return "an entry has an unknown key";
  }
  const char *name = json_string_value(json_object_get(v, "name"));
  if (!tpart_name_valid(name)) return "a part's name is not [a-z][a-z0-9_]{0,30}";
  snprintf(t->name, sizeof t->name, "%s", name);
  const char *dt = json_string_value(json_object_get(v, "dtype"));
  if (!dt) return "a part has no dtype";
  if (strcmp(dt, "int64") == 0) t->dtype = T_I64;
  else if (tdtype_parse(dt, &t->dtype) != 0) return "a part's dtype is unknown";
  const json_t *sh = json_object_get(v, "shape");
  if (!json_is_array(sh) || json_array_size(sh) > T_MAXDIM)
    return "a part's shape is not a list of at most 8 sizes";
  t->ndim = (int)json_array_size(sh);
  for (int d = 0; d < t->ndim; d++) {
    const json_t *s = json_array_get(sh, (size_t)d);
    if (!json_is_integer(s) || json_integer_value(s) < 0)
      return "a part's shape holds something other than a size";
    t->shape[d] = (int64_t)json_integer_value(s);
  }
  int64_t n = tshape_size(t->ndim, t->shape, INT64_MAX);
  const json_t *by = json_object_get(v, "bytes");
  if (n < 0 || !json_is_integer(by) ||
      json_integer_value(by) != n * (int64_t)tdtype_size(t->dtype))
    return "a part's bytes are not its shape's";
  t->bytes = n * (int64_t)tdtype_size(t->dtype);
  const json_t *pv = json_object_get(v, "path");
  const json_t *ov = json_object_get(v, "offset");
  if (ov) { /* in an output region: an offset, never a path */
    if (pv || !json_is_integer(ov) || json_integer_value(ov) < 0)
      return "a part's offset is not a byte offset (or it has a path too)";
    t->in_region = 1;
    t->offset = (int64_t)json_integer_value(ov);
    return NULL;
  }
  if (pv && (index == 0 || !json_is_string(pv) ||
             strlen(json_string_value(pv)) != json_string_length(pv) ||
             json_string_value(pv)[0] != '/'))
    return "a part's path is not an absolute path (or it is part 0's)";
  if (!pv && index > 0) return "a part after the first has no path";
  if (pv && !(t->path = strdup(json_string_value(pv)))) return "out of memory";
  return NULL;
}

int tparts_parse(const char *text, tparts *out, terr *e) {
  memset(out, 0, sizeof *out);
  if (!text || !*text) return T_OK;
  json_error_t jerr;
  json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  const char *why = NULL;
  if (!doc) why = "not JSON";
  else if (!json_is_array(doc) || json_array_size(doc) < 1 ||
           json_array_size(doc) > TPARTS_MAX)
    why = "not a list of 1 to 8 parts";
  for (size_t i = 0; !why && i < json_array_size(doc); i++) {
    tpart *t = &out->p[out->n++];
    why = part_read(json_array_get(doc, i), (int)i, t);
    for (size_t k = 0; !why && k < i; k++)
      if (strcmp(out->p[k].name, t->name) == 0) why = "two parts have one name";
    if (!why && i > 0 && t->in_region != out->p[0].in_region)
      why = "some parts have an offset and others not";
  }
  json_decref(doc);
  if (!why) return T_OK;
  tparts_clear(out);
  return terr_set(e, T_EIO, "", -1, "stored result parts: %s", why);
}
