/* fuzz_csv_push.c — libFuzzer target for the CSV push reader, differential.
 *
 * Input: byte 0 picks allow_nonfinite (bit 0) and the element cap (bits
 * 1-3: 1 << (2 * k)), byte 1 seeds how the rest is cut into pieces (1 to
 * 64 bytes, or all at once); the rest is the body. The push reader fed
 * those pieces and csv_parse on the whole body must agree exactly: both
 * accept with the same shape and the same bytes, or both refuse with the
 * same code, field, position and message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/tarray.h"
#include "push_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int nonfinite = data[0] & 1;
  int64_t cap = (int64_t)1 << (2 * ((data[0] >> 1) & 7));
  unsigned seed = data[1];
  const char *s = (const char *)data + 2;
  size_t len = size - 2;
  terr e1, e2;
  terr_clear(&e1);
  terr_clear(&e2);
  tarray *a = NULL;
  int rc1 = csv_parse(s, len, cap, nonfinite, &a, &e1);
  mem m = {0};
  tvals_out o = {mem_write, mem_restart, &m};
  csv_push *p;
  int rc2 = csv_push_new(cap, nonfinite, &o, &p, &e2);
  size_t at = 0;
  while (!rc2 && at < len) {
    size_t k = seed == 0 ? len - at : 1 + (seed = seed * 1103515245u + 12345u) % 64;
    if (k > len - at) k = len - at;
    rc2 = csv_push_feed(p, s + at, k, &e2);
    at += k;
  }
  int ndim = 0;
  int64_t shape[T_MAXDIM];
  if (!rc2) rc2 = csv_push_end(p, &ndim, shape, &e2);
  csv_push_free(p);
  if (rc1 != rc2) __builtin_trap();
  if (rc1) {
    if (e1.code != e2.code || strcmp(e1.field, e2.field) ||
        e1.position != e2.position || strcmp(e1.message, e2.message))
      __builtin_trap();
  } else {
    if (a->ndim != ndim || m.n != (size_t)a->size * 8 ||
        memcmp(m.b, a->data, m.n) != 0)
      __builtin_trap();
    for (int i = 0; i < ndim; i++)
      if (a->shape[i] != shape[i]) __builtin_trap();
  }
  tarray_free(a);
  free(m.b);
  return 0;
}
