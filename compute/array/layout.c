/* layout.c — square and condensed layouts of a symmetric matrix (layout.h). */
#include "compute/array/layout.h"

#include <math.h>
#include <string.h>

int tlayout_parse(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "square") == 0) return TLAYOUT_SQUARE;
  if (strcmp(name, "condensed") == 0) return TLAYOUT_CONDENSED;
  return -1;
}

int tlayout_switch_shape(tlayout from, tlayout to, int ndim,
                         const int64_t *shape, int *out_ndim,
                         int64_t out_shape[T_MAXDIM], int64_t *n, terr *e) {
  memset(out_shape, 0, T_MAXDIM * sizeof out_shape[0]);
  if (from == to) {
    *out_ndim = ndim;
    memcpy(out_shape, shape, (size_t)ndim * sizeof shape[0]);
    *n = ndim == 2 ? shape[0] : 0;
    return T_OK;
  }
  if (to == TLAYOUT_SQUARE) {
    int64_t m = ndim == 1 ? shape[0] : -1;
    int64_t side = m < 0 ? 0
                         : (int64_t)llround((1.0 + sqrt(1.0 + 8.0 * (double)m)) / 2.0);
    if (ndim != 1 || side * (side - 1) / 2 != m)
      return terr_set(e, T_EINVAL, "layout", -1,
                      "result is not a condensed matrix");
    *n = side;
    *out_ndim = 2;
    out_shape[0] = out_shape[1] = side;
    return T_OK;
  }
  if (ndim != 2 || shape[0] != shape[1])
    return terr_set(e, T_EINVAL, "layout", -1,
                    "only a square matrix has a condensed layout");
  *n = shape[0];
  *out_ndim = 1;
  out_shape[0] = *n * (*n - 1) / 2;
  return T_OK;
}
