/* compute/kinds/names.c — the names of the kinds and backends (kinds.h), in one
 * place: parsing, printing, and the "one of ..." lists that error messages
 * and the service's metrics use.
 *
 * Apart from kinds.c on purpose: the kind table references every kind's
 * ops, so anything linking it links the expression VM, geodesic and BLAS
 * code; the scheduler, the cost model and their tests need only these
 * names.
 */
#include <stdio.h>
#include <string.h>

#include "compute/kinds/kinds.h"

static const char *const kind_names[K__COUNT] = {
    [K_MAP] = "map", [K_REDUCE] = "reduce", [K_MATMUL] = "matmul",
    [K_GEODESIC] = "geodesic",
};

static const char *const backend_names[B__COUNT] = {
    [B_AUTO] = "auto", [B_SERIAL] = "serial", [B_CPU] = "cpu",
    [B_CUDA] = "cuda", [B_COMPARE] = "compare",
};

const char *tkind_name(tkind k) {
  return (unsigned)k < K__COUNT ? kind_names[k] : "?";
}

int tkind_parse(const char *s) {
  if (!s) return -1;
  for (int k = 0; k < K__COUNT; k++)
    if (strcmp(kind_names[k], s) == 0) return k;
  return -1;
}

const char *tbackend_name(tbackend b) {
  return (unsigned)b < B__COUNT ? backend_names[b] : "?";
}

int tbackend_parse(const char *s) {
  if (!s) return -1;
  for (int b = 0; b < B__COUNT; b++)
    if (strcmp(backend_names[b], s) == 0) return b;
  return -1;
}

/* "a, b, c" from a table, built once (the tables are constant). */
static const char *list(const char *const *names, int n, char *buf,
                        size_t cap) {
  if (buf[0]) return buf;
  size_t len = 0;
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                            names[i]);
  return buf;
}

const char *tkind_list(void) {
  static char buf[128];
  return list(kind_names, K__COUNT, buf, sizeof buf);
}

const char *tbackend_list(void) {
  static char buf[128];
  return list(backend_names, B__COUNT, buf, sizeof buf);
}
