/* fuzz_parts.c — libFuzzer target for the stored result-parts document
 * (compute/array/parts.h: tparts_parse), which comes back from the database file.
 *
 * Any input parses or is refused (T_EIO) without a crash or a leak; an
 * accepted document is written again with tparts_text and must parse to
 * the same parts (names, dtypes, shapes, bytes, paths), and every name
 * must pass tpart_name_valid and be found by tparts_find at its index.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/parts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  tparts a, b;
  terr e;
  int rc = tparts_parse(text, &a, &e);
  free(text);
  if (rc) {
    if (a.n != 0) __builtin_trap(); /* cleared on failure */
    return 0;
  }
  for (int i = 0; i < a.n; i++)
    if (!tpart_name_valid(a.p[i].name) || tparts_find(&a, a.p[i].name) != i)
      __builtin_trap();
  char *again = tparts_text(&a);
  if (again && a.n > 0) {
    if (tparts_parse(again, &b, &e) != 0 || b.n != a.n) __builtin_trap();
    for (int i = 0; i < a.n; i++) {
      const tpart *x = &a.p[i], *y = &b.p[i];
      if (strcmp(x->name, y->name) || x->dtype != y->dtype ||
          x->ndim != y->ndim || x->bytes != y->bytes ||
          memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) ||
          (!x->path) != (!y->path) || (x->path && strcmp(x->path, y->path)))
        __builtin_trap();
    }
    tparts_clear(&b);
  }
  free(again);
  tparts_clear(&a);
  return 0;
}
