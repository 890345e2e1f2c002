/* kinds.c — the table of job kinds (the backend names are in compute/kinds/backend.c,
 * so that code naming backends does not link every kind). */
#include "compute/kinds/kinds.h"

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
