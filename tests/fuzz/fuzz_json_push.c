/* fuzz_json_push.c — libFuzzer target for the JSON push reader,
 * differential.
 *
 * Input: byte 0 picks the dtype (bit 0: float32) and the element cap (bits
 * 1-3: 1 << (2 * k)), byte 1 seeds how the rest is cut into pieces (1 to
 * 64 bytes, or all at once); the rest is the body. The push reader fed
 * those pieces and jansson + jarray_parse on the whole body must agree:
 * both accept with the same shape and the same bytes, or both refuse. The
 * refusals of the push reader alone (jsonpush.c): a number longer than its
 * 512 characters, and a NUL byte, which Jansson 2.14 takes for the end of
 * the text after a number ("0\0" and even "[1\0]" are read as 0 and [1]).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/tarray.h"
#include "push_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  tdtype dt = data[0] & 1 ? T_F32 : T_F64;
  int64_t cap = (int64_t)1 << (2 * ((data[0] >> 1) & 7));
  unsigned seed = data[1];
  const char *s = (const char *)data + 2;
  size_t len = size - 2;
  terr e1, e2;
  tarray *a = NULL;
  json_error_t je;
  json_t *v = json_loadb(s, len, JSON_DECODE_ANY, &je);
  int rc1 = v ? jarray_parse(v, dt, cap, "body", &a, &e1) : T_EINVAL;
  json_decref(v);
  mem m = {0};
  tvals_out o = {mem_write, NULL, &m};
  json_push *p;
  int rc2 = json_push_new(dt, cap, &o, &p, &e2);
  size_t at = 0;
  while (!rc2 && at < len) {
    size_t k = seed == 0 ? len - at : 1 + (seed = seed * 1103515245u + 12345u) % 64;
    if (k > len - at) k = len - at;
    rc2 = json_push_feed(p, s + at, k, &e2);
    at += k;
  }
  int ndim = 0;
  int64_t shape[T_MAXDIM];
  if (!rc2) rc2 = json_push_end(p, &ndim, shape, &e2);
  json_push_free(p);
  if (rc2 && strcmp(e2.field, "body") != 0) __builtin_trap();
  int push_only = rc2 && (strstr(e2.message, "a number longer than") ||
                          memchr(s, 0, len) != NULL);
  if (!rc1 != !rc2 && !(rc1 == 0 && push_only)) __builtin_trap();
  if (!rc1 && !rc2) {
    size_t bytes = (size_t)a->size * tdtype_size(dt);
    if (a->ndim != ndim || m.n != bytes || (bytes && memcmp(m.b, a->data, bytes)))
      __builtin_trap();
    for (int i = 0; i < ndim; i++)
      if (a->shape[i] != shape[i]) __builtin_trap();
  }
  tarray_free(a);
  free(m.b);
  return 0;
}
