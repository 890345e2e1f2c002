/* kinds.c — the table of job kinds and the backend names. */
#include "compute/kinds.h"

#include <string.h>

static const kind_ops *const kinds[K__COUNT] = {
    [K_MAP] = &kind_map_ops,
    [K_REDUCE] = &kind_reduce_ops,
    [K_MATMUL] = &kind_matmul_ops,
    [K_GEODESIC] = &kind_geodesic_ops,
};

const kind_ops *kind_get(tkind k) {
  return (unsigned)k < K__COUNT ? kinds[k] : NULL;
}

const kind_ops *kind_find(const char *name) {
  if (!name) return NULL;
  for (int k = 0; k < K__COUNT; k++)
    if (strcmp(kinds[k]->name, name) == 0) return kinds[k];
  return NULL;
}

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
