/* fuzz_csv.c — libFuzzer target for the CSV reader.
 *
 * The first byte picks allow_nonfinite; the rest is the CSV. An accepted
 * table is never empty (a body with no values is an error, not shape [0]),
 * and is written back with csv_write and must parse again to the same
 * shape and the same values (NaN compared as NaN).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/tarray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int nonfinite = data[0] & 1;
  tarray *a = NULL, *b = NULL;
  terr e;
  if (csv_parse((const char *)data + 1, size - 1, 1 << 16, nonfinite, &a,
                &e) != 0) {
    if (a) __builtin_trap();
    return 0;
  }
  if (!a || a->size == 0) __builtin_trap(); /* accepted: holds values */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    tarray_free(a);
    return 0;
  }
  int rc = csv_write(f, a, &e);
  fclose(f);
  if (rc == 0) {
    if (csv_parse(buf, len, 1 << 16, 1, &b, &e) != 0) __builtin_trap();
    /* an [r, c] table round-trips; a 1-D one stays 1-D */
    if (b->size != a->size) __builtin_trap();
    for (int64_t i = 0; i < a->size; i++) {
      double x = tarray_get(a, i), y = tarray_get(b, i);
      if (!(x == y || (isnan(x) && isnan(y)))) __builtin_trap();
    }
  }
  free(buf);
  tarray_free(a);
  tarray_free(b);
  return 0;
}
