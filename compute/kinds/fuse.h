/* fuse.h — private to the CUDA side of compute/kinds/: fused kernels generated from a parsed
 * expression (fusegen.cu), shared by map.cu and reduce.cu.
 *
 * A fused kernel reads every input once, evaluates the whole expression in
 * registers and writes (map) or folds (reduce) the value: one pass over the
 * data, no temporaries. Its text comes from expr_emit_c (the parsed tree,
 * never the user's text) wrapped in a fixed template that this file's
 * generator writes; it is compiled by NVRTC and cached by kcache.cu under a
 * key naming everything the text depends on (fuse_key).
 *
 * How an input is read is part of the signature (the "broadcast pattern"):
 *   FM_FULL    the input has the output's (broadcast) shape: element j;
 *   FM_SCALAR  one element, read once per thread;
 *   FM_BCAST   any other NumPy broadcast: its offset is computed from the
 *              output index with per-dimension strides (0 where broadcast).
 * vec4: every FM_FULL input and the output are read/written 4 elements at a
 * time with 16-byte vector accesses (the caller checks the alignment).
 *
 * The argument block (fuse_args) is declared once, by FUSE_ARGS_DECL, for
 * the host compiler and (as text) for the generated source, so the two
 * layouts cannot drift apart.
 */
#ifndef TESSEL_KINDS_FUSE_H
#define TESSEL_KINDS_FUSE_H

#include "compute/gpu/devctx.h"
#include "compute/kinds/gpujob.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "compute/expr/expr.h"
#include "compute/kinds/ops.h"

#define FUSE_MAX_IN EXPR_MAX_INPUTS

/* The kernels' argument block. map: elements [start, start+count) of the
 * output, written to out[0..count). reduce: the chunk [o0, o0+no) x
 * [l0, l0+nl) x [0, inner) of the [outer, L, inner] view, split into
 * `parts` parts along l, states to part[], then folded by the combine
 * kernel into acc[] / out[]. Input i's element j is in[i][j - off[i]]. */
#define FUSE_ARGS_DECL(NAME)                                               \
  struct NAME {                                                            \
    const void *in[16];                                                    \
    long long off[16];                                                     \
    void *out;                                                             \
    void *part;                                                            \
    void *acc;                                                             \
    long long start, count;                                                \
    long long L, inner, o0, no, l0, nl, parts;                             \
    long long shape[8];                                                    \
    long long stride[16][8];                                               \
    int ndim, last;                                                        \
  }
FUSE_ARGS_DECL(fuse_args);
typedef struct fuse_args fuse_args;

/* The reduce kernels' per-output state (same text in the generated code):
 * sum/mean: a = Neumaier sum, b = its compensation; prod: a; min/max and
 * argmin/argmax: a = value, i = index along the reduced axis (-1: none);
 * var/std: a = count, b = mean, c = M2 (Chan's merge); norm: a = scale,
 * b = sum of squares scaled by a (LAPACK dnrm2's pair). */
typedef struct fuse_state {
  double a, b, c;
  long long i;
} fuse_state;

typedef enum { FM_FULL = 'F', FM_SCALAR = 'S', FM_BCAST = 'B' } fuse_mode;

typedef struct fuse_sig {
  const expr *x;
  int nin;
  char mode[FUSE_MAX_IN];    /* fuse_mode per input */
  tdtype in_dt[FUSE_MAX_IN]; /* each input's own dtype */
  tdtype ct;                 /* arithmetic type (map: the output's) */
  tdtype out_dt;             /* the output's dtype */
  int vec4;                  /* map: 16-byte vector accesses */
  int groups;                /* map: vec4 groups per thread per step (1, 2, 4) */
  int stream_hint;           /* map: streaming (evict-first) loads/stores */
  int ndim;                  /* output ndim, when any input is FM_BCAST */
  int reduce;                /* 0 map; 1 reduce */
  reduce_op op;              /* reduce */
  int columns;               /* reduce: inner > 1 layout (thread per column) */
} fuse_sig;

/* The cache key: a text naming the signature and the expression's
 * canonical form. Returns its length, or -1 when buf is too small. */
int fuse_key(const fuse_sig *s, char *buf, size_t len);
/* kcache_gen_fn for map (arg: a fuse_sig) / reduce. */
int fuse_gen_map(void *sig, char *buf, size_t len);
int fuse_gen_reduce(void *sig, char *buf, size_t len);

/* How one input of a fused kernel reaches the device (map.cu). */
typedef struct fuse_input {
  const void *dptr; /* on the device (scalar, broadcast, resident) */
  devbuf tmp;       /* owned upload: devmem_free it */
  int streamed;     /* full-size input copied chunk by chunk */
  size_t es;        /* element size (set by the caller) */
  size_t region;    /* its offset in a staging slot (streamed) */
  int pinned;       /* streamed from page-locked host memory: DMA from it
                       directly, no slot copy (stage_pinned) */
} fuse_input;

/* Place every input (m[i].es set by the caller): scalars copied, uploaded
 * arrays taken from / put into the resident cache, broadcast inputs
 * uploaded whole, the rest marked streamed. Sets args->in / off for the
 * placed ones; copy times go to job->t_h2d. */
int fuse_place_inputs(devctx *d, int nin, const tarray *const *inputs,
                      const char *const *ids, const fuse_sig *sig,
                      fuse_input *m, fuse_args *args, const gpu_job *job,
                      terr *e);

/* Stage elements [start, start+cnt) of every streamed input for one
 * chunk: the host copy into the pinned slot (gang threads; its time goes to
 * *t_h2d), then on d->s_h2d, between the slot's h2d_start and h2d_done
 * events, the copies into dev_slot; d->s_comp waits for them. args->in /
 * off then point at the device copies. Shared by map and reduce. */
int fuse_stage_chunk(devctx *d, int nin, const tarray *const *inputs,
                     const fuse_input *m, stage_slot *sl, void *dev_slot,
                     int64_t start, int64_t cnt, fuse_args *args,
                     double *t_h2d, terr *e);

/* Classify input `in` against the output shape (ndim, shape), fill its
 * strides (element strides per output dimension, 0 where broadcast). */
fuse_mode fuse_classify(const tarray *in, int ndim, const int64_t *shape,
                        int64_t *stride);

#ifdef __cplusplus
}
#endif

#endif
