/* jtext.c — a jansson value written as JSON text into a tbuf (jtext.h). */
#include "compute/array/codec/jtext.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define DEPTH_MAX 32

/* Jansson's own text of v, its reals as asked (jtext.h). */
static void dumped(tbuf *b, const json_t *v, int digits) {
  size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
  if (digits > 0) flags |= JSON_REAL_PRECISION(digits);
  char *raw = json_dumps(v, flags);
  char *t = raw && digits == 0 ? tjson_short_reals(raw, NULL) : raw;
  if (t) tbuf_adds(b, t);
  else if (!b->err) b->err = T_ENOMEM; /* sticky: tbuf_take gives NULL */
  if (t != raw) free(t);
  free(raw);
}

static void value(tbuf *b, const json_t *v, int digits, int depth) {
  if (depth > DEPTH_MAX ||
      (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v))) {
    dumped(b, v, digits);
    return;
  }
  switch (json_typeof(v)) {
    case JSON_OBJECT: {
      const char *k;
      json_t *x;
      int first = 1;
      tbuf_add(b, "{", 1);
      json_object_foreach((json_t *)v, k, x) {
        if (!first) tbuf_add(b, ",", 1);
        first = 0;
        tbuf_json_str(b, k);
        tbuf_add(b, ":", 1);
        value(b, x, digits, depth + 1);
      }
      tbuf_add(b, "}", 1);
      break;
    }
    case JSON_ARRAY:
      tbuf_add(b, "[", 1);
      for (size_t i = 0; i < json_array_size(v); i++) {
        if (i) tbuf_add(b, ",", 1);
        value(b, json_array_get(v, i), digits, depth + 1);
      }
      tbuf_add(b, "]", 1);
      break;
    case JSON_STRING: tbuf_json_str(b, json_string_value(v)); break;
    case JSON_INTEGER: tbuf_json_int(b, (long long)json_integer_value(v)); break;
    case JSON_REAL: tbuf_json_real(b, json_real_value(v), digits); break;
    case JSON_TRUE: tbuf_add(b, "true", 4); break;
    case JSON_FALSE: tbuf_add(b, "false", 5); break;
    default: tbuf_add(b, "null", 4); break;
  }
}

void tjson_tree(tbuf *b, const json_t *v, int digits) { value(b, v, digits, 0); }
