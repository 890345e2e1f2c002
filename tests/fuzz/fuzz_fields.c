/* fuzz_fields.c — libFuzzer target for the read mask's scan
 * (api/fields.c, api_fields_put) on any bytes: it never reads past the
 * text, and what it writes is either the text whole or, when the text is
 * one JSON object Jansson reads, an object Jansson reads too with a subset
 * of its members. The first byte picks the mask. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  api_fields f = {1, 1ull | ((unsigned long long)data[0] << 1) |
                         ((unsigned long long)data[0] << 12)};
  char *text = malloc(size);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  tbuf b;
  tbuf_init(&b, 0);
  api_fields_put(&b, text, size - 1, &f);
  if (b.err) abort();
  int whole = b.len == size - 1 && (b.len == 0 || memcmp(b.p, text, b.len) == 0);
  json_t *in = json_loadb(text, size - 1, 0, NULL);
  if (!whole) {
    json_t *out = json_loadb(b.p, b.len, 0, NULL);
    if (in && json_is_object(in)) {
      if (!out || !json_is_object(out)) abort();
      const char *k;
      json_t *v;
      json_object_foreach(out, k, v) {
        json_t *w = json_object_get(in, k);
        if (!w || !json_equal(v, w)) abort();
      }
    }
    json_decref(out);
  }
  json_decref(in);
  tbuf_free(&b);
  free(text);
  return 0;
}
