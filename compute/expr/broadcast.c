/* compute/expr/broadcast.c — NumPy broadcasting, and the strides the VM walks.
 *
 * expr_broadcast follows NumPy: shapes are aligned at their last
 * dimension; each output dimension is the common size, where a size of 1
 * stretches (and a 0 meets only 0 or 1). The first input that does not fit
 * the inputs before it is named in the error.
 *
 * expr_layout_build prepares one evaluation: each input's element stride
 * per output dimension (0 where it is broadcast), then merges neighbouring
 * dimensions that every input walks the same way (dims d and d+1 merge when
 * stride[d] == stride[d+1] * shape[d+1] for every input), so that a
 * [1000, 1000] + [1000, 1000] sum is one flat run and [1000, 1000] + [1000]
 * keeps two dimensions. An input whose strides are the output's own
 * C-order strides is read in place ("contig"); a one-element input is a
 * scalar.
 */
#include <string.h>

#include "compute/expr/expr_int.h"

int expr_broadcast(int n, const int *ndims, const int64_t *const *shapes,
                   const char *const *names, int *out_ndim, int64_t *out_shape,
                   terr *e) {
  int nd = 0;
  for (int i = 0; i < n; i++) {
    if (ndims[i] < 0 || ndims[i] > T_MAXDIM)
      return terr_set(e, T_EINVAL, names ? names[i] : "", -1,
                      "too many dimensions (%d, max %d)", ndims[i], T_MAXDIM);
    if (ndims[i] > nd) nd = ndims[i];
  }
  int64_t res[T_MAXDIM];
  for (int d = 0; d < nd; d++) res[d] = 1;
  for (int i = 0; i < n; i++) {
    int off = nd - ndims[i];
    for (int d = 0; d < ndims[i]; d++) {
      int64_t s = shapes[i][d], *r = &res[off + d];
      if (s == *r || s == 1) continue;
      if (*r == 1) {
        *r = s;
        continue;
      }
      /* report against the shape accumulated so far */
      char a[96], b[96];
      int64_t acc[T_MAXDIM];
      for (int k = 0; k < nd; k++) acc[k] = 1;
      for (int j = 0; j < i; j++) {
        int o = nd - ndims[j];
        for (int k = 0; k < ndims[j]; k++)
          if (shapes[j][k] != 1) acc[o + k] = shapes[j][k];
      }
      int accnd = 0;
      for (int j = 0; j < i; j++)
        if (ndims[j] > accnd) accnd = ndims[j];
      tshape_str(accnd, acc + (nd - accnd), a, sizeof a);
      tshape_str(ndims[i], shapes[i], b, sizeof b);
      return terr_set(e, T_EINVAL, names ? names[i] : "", -1,
                      "shapes %s and %s do not broadcast", a, b);
    }
  }
  *out_ndim = nd;
  for (int d = 0; d < nd; d++) out_shape[d] = res[d];
  return 0;
}

void expr_layout_build(int nin, const tarray *const *inputs, int ndim,
                       const int64_t *shape, expr_layout *l) {
  memset(l, 0, sizeof *l);
  /* drop size-1 output dimensions: they never advance an index */
  int keep[T_MAXDIM], nk = 0;
  for (int d = 0; d < ndim; d++)
    if (shape[d] != 1) keep[nk++] = d;
  int64_t st[EXPR_MAX_INPUTS][T_MAXDIM];
  for (int i = 0; i < nin; i++) {
    const tarray *a = inputs[i];
    if (!a) continue;
    int off = ndim - a->ndim;
    int64_t s = 1, full[T_MAXDIM];
    for (int d = ndim - 1; d >= 0; d--) {
      int ad = d - off;
      if (ad < 0 || a->shape[ad] == 1) {
        full[d] = 0;
      } else {
        full[d] = s;
        s *= a->shape[ad];
      }
    }
    for (int k = 0; k < nk; k++) st[i][k] = full[keep[k]];
    l->scalar[i] = a->size == 1;
  }
  /* merge dims, from the last one backwards */
  int64_t msh[T_MAXDIM];
  int64_t mst[EXPR_MAX_INPUTS][T_MAXDIM];
  int m = 0;
  for (int k = nk - 1; k >= 0; k--) {
    int64_t sz = shape[keep[k]];
    if (m > 0) {
      int ok = 1;
      for (int i = 0; i < nin && ok; i++)
        if (inputs[i] && st[i][k] != mst[i][m - 1] * msh[m - 1]) ok = 0;
      if (ok) {
        msh[m - 1] *= sz;
        continue;
      }
    }
    msh[m] = sz;
    for (int i = 0; i < nin; i++) mst[i][m] = inputs[i] ? st[i][k] : 0;
    m++;
  }
  /* reverse into C order */
  l->ndim = m;
  for (int d = 0; d < m; d++) {
    l->shape[d] = msh[m - 1 - d];
    for (int i = 0; i < nin; i++) l->stride[i][d] = mst[i][m - 1 - d];
  }
  /* contiguous: the input's strides are the output's C-order strides */
  for (int i = 0; i < nin; i++) {
    if (!inputs[i]) continue;
    int64_t s = 1;
    int ok = 1;
    for (int d = m - 1; d >= 0 && ok; d--) {
      if (l->stride[i][d] != s) ok = 0;
      s *= l->shape[d];
    }
    l->contig[i] = ok;
  }
}
