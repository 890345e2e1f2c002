/* layout.h — the two layouts of a symmetric matrix with a zero diagonal
 * (a distance matrix): "square", n x n, and "condensed", the n (n - 1) / 2
 * entries above the diagonal in row order (SciPy's pdist / squareform).
 *
 * Which layout a stored result is in is its kind's business (kind_ops
 * result_layout); how the two relate is the array's, and lives here, so
 * that whoever sends an array (api/results.c streams it from its file) can
 * switch layouts without knowing which kind made it.
 *
 * Threads: any; nothing shared.
 */
#ifndef TESSEL_ARRAY_LAYOUT_H
#define TESSEL_ARRAY_LAYOUT_H

#include <stdint.h>

#include "compute/array/tarray.h"
#include "util/err.h"

typedef enum { TLAYOUT_SQUARE = 0, TLAYOUT_CONDENSED } tlayout;

/* "square" | "condensed" -> 0/1; -1 when neither. */
int tlayout_parse(const char *name);

/* The shape of an array of shape (ndim, shape) in layout `from` when sent in
 * layout `to` (from != to): out_ndim/out_shape and the matrix side *n. A
 * square must be n x n; a condensed vector must hold n (n - 1) / 2 entries
 * for some n. T_EINVAL naming "layout" otherwise. */
int tlayout_switch_shape(tlayout from, tlayout to, int ndim,
                         const int64_t *shape, int *out_ndim,
                         int64_t out_shape[T_MAXDIM], int64_t *n, terr *e);

/* Offset of entry (i, j), i < j, of an n x n matrix in its condensed
 * layout. */
static inline int64_t tlayout_condensed_index(int64_t n, int64_t i,
                                              int64_t j) {
  return i * n - i * (i + 1) / 2 + (j - i - 1);
}

#endif
