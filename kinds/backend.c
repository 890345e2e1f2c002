/* kinds/backend.c — the backend names of kinds.h (tbackend_name/parse).
 *
 * Apart from kinds.c on purpose: the kind table references every kind's
 * ops, so anything linking it links the expression VM, geodesic and BLAS
 * code; the scheduler and its tests need only these names.
 */
#include <string.h>

#include "kinds/kinds.h"

static const char *const backend_names[B__COUNT] = {
    [B_AUTO] = "auto", [B_SERIAL] = "serial", [B_CPU] = "cpu",
    [B_CUDA] = "cuda", [B_COMPARE] = "compare",
};

const char *tbackend_name(tbackend b) {
  return (unsigned)b < B__COUNT ? backend_names[b] : "?";
}

int tbackend_parse(const char *s) {
  if (!s) return -1;
  for (int b = 0; b < B__COUNT; b++)
    if (strcmp(backend_names[b], s) == 0) return b;
  return -1;
}
