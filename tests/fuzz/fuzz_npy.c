/* fuzz_npy.c — libFuzzer target for the strict .npy reader.
 *
 * Any bytes go to npy_parse with a 1 Mi-element cap; an accepted file is
 * written back with npy_to_buffer and must parse again to the same dtype,
 * shape and bytes (the writer and reader agree on everything accepted).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/tarray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tarray *a = NULL, *b = NULL;
  terr e;
  if (npy_parse(data, size, 1 << 20, &a, &e) != 0) {
    if (a) __builtin_trap(); /* failure must leave *out NULL */
    return 0;
  }
  char *buf = NULL;
  size_t len = 0;
  if (npy_to_buffer(a, &buf, &len, &e) == 0) {
    if (npy_parse(buf, len, 1 << 20, &b, &e) != 0) __builtin_trap();
    if (b->dtype != a->dtype || b->ndim != a->ndim || b->size != a->size ||
        memcmp(b->shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim) != 0 ||
        memcmp(a->data, b->data, (size_t)a->size * tdtype_size(a->dtype)) != 0)
      __builtin_trap();
  }
  free(buf);
  tarray_free(a);
  tarray_free(b);
  return 0;
}
