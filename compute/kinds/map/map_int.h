/* map_int.h — what map.cu (one device) and map_lane.cu (a lane of a run
 * over several, lanes.h) share: the kernel's signature and a launch. C++
 * only (the .cu files); who calls what and on which thread: map.cu's and
 * map_lane.cu's opening comments.
 */
#ifndef TESSEL_KINDS_MAP_INT_H
#define TESSEL_KINDS_MAP_INT_H

#include "compute/kinds/fuse.h"

#define MAP_KEY_MAX 8192 /* a kernel key's text, beside the expression's */

/* The signature and the arguments every launch shares, from the inputs'
 * shapes against the output's; m[i].es set. */
void map_sig_init(const expr *x, int nin, const tarray *const *inputs,
                  const tarray *out, fuse_sig *sig, fuse_args *args,
                  fuse_input *m);

/* One launch of the fused map kernel over `count` elements (args->start,
 * args->count, args->out set) on d->s_comp. */
int map_launch(devctx *d, CUfunction fn, fuse_args *args, int64_t count,
               int groups, terr *e);

#endif
