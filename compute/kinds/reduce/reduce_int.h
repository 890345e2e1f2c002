/* reduce_int.h — what reduce.cu (one device) and reduce_lane.cu (a lane of
 * a reduce by blocks over several, lanes.h) share: the kernels' signature.
 * C++ only (the .cu files); who calls what and on which thread: reduce.cu's
 * and reduce_lane.cu's opening comments.
 */
#ifndef TESSEL_KINDS_REDUCE_INT_H
#define TESSEL_KINDS_REDUCE_INT_H

#include "compute/kinds/fuse.h"

#define RED_THREADS 256
#define RED_KEY_MAX (8192 + EXPR_MAX_SRC * 8)
#define RED_TREE_PARTS 32 /* parts per output from which the fold is a tree */

/* The shape around the axis ([outer, L, inner] into oli; axis -1: [1, N,
 * 1]), the fused kernels' signature and the arguments every launch
 * shares, from the inputs' broadcast shape (its rank and extents into
 * ndim / bshape); m[i].es set. */
int reduce_sig_init(reduce_op op, const expr *x, int nin,
                    const tarray *const *inputs, int axis, tdtype out_dt,
                    fuse_sig *sig, fuse_args *args, fuse_input *m,
                    int64_t oli[3], int *ndim, int64_t *bshape, terr *e);

#endif
