/* compute/kinds/names.c — the names of the backends (kinds.h), in one
 * place: parsing, printing, and the "one of ..." list that error messages
 * and the service's metrics use. The kinds' names are their kind_ops'
 * (the table, kinds.c).
 *
 * Apart from kinds.c on purpose: the kind table references every kind's
 * ops, so anything linking it links the expression VM, geodesic and BLAS
 * code; code that only names backends needs none of it.
 */
#include <stdio.h>
#include <string.h>

#include "compute/kinds/kinds.h"

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

/* "auto, serial, ...", built once (the table is constant). */
const char *tbackend_list(void) {
  static char buf[128];
  if (buf[0]) return buf;
  size_t len = 0;
  for (int i = 0; i < B__COUNT && len < sizeof buf; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                            i ? ", " : "", backend_names[i]);
  return buf;
}
