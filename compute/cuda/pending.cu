/* pending.cu — TEMPORARY: map and reduce entry points until map.cu and
 * reduce.cu land on this branch (they answer "unavailable", so auto and
 * compare fall back to the CPU). Deleted by the commit that adds them. */
#include "compute/cuda/devctx.h"

int cuda_map(int dev, const expr *x, const tarray *const *inputs,
            const char *const *ids, tarray *out, const gpu_job *job, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "GPU map not built yet");
}

int cuda_reduce(int dev, reduce_op op, const expr *x,
               const tarray *const *inputs, const char *const *ids, int axis,
               tarray *out, const gpu_job *job, terr *e) {
  return terr_set(e, T_EUNAVAIL, "backend", -1, "GPU reduce not built yet");
}
