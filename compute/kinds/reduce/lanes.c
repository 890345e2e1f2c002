/* compute/kinds/reduce/lanes.c — a big reduce (whole-array, or along the
 * last axis) by blocks over every lent GPU (lanes.h): the switch, the
 * block cut, the decision, the host's merge of a whole job's blocks'
 * states, and the glue of a lane session (red_lane_fns) onto mgpu_run's
 * ops.
 *
 * The glue: lane_begin opens the lane's session (a lent device that cannot
 * hold two blocks is a device error there, so the others go on; the run's
 * own device failing so fails the job) and keeps one block primed; launch
 * / block are the session's launch / finish (finish writes the block's
 * state into its own entry of J->states, so a block redone by another
 * lane after a failure overwrites the same entry with the same bits);
 * lane_end closes it and keeps its times. When every block of a whole job
 * is in, the worker merges the states in block order (a rows job's lanes
 * wrote each row's value into its place). The job's times are the
 * slowest lane's. Threads: red_lanes_run on the worker; the callbacks on
 * the lanes' threads, each touching only its own lane's entries and its
 * own blocks' states.
 */
#include "compute/kinds/reduce/lanes.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/reduce/fold.h"

int red_lanes_switch(void) {
  const char *v = getenv("TESSEL_GPU_LANES");
  if (v && strcmp(v, "0") == 0) return 0;
  if (v && strcmp(v, "1") == 0) return 1;
  return RED_LANES_DEFAULT;
}

int64_t red_lanes_per_elem(const expr *x, const tarray *const *inputs,
                           int64_t n) {
  int64_t b = 0;
  int nin = expr_ninputs(x);
  for (int i = 0; i < nin; i++)
    if (inputs[i]->size == n && n > 1)
      b += (int64_t)tdtype_size(inputs[i]->dtype);
  return b;
}

int64_t red_lanes_block(int64_t n, int64_t per_elem) {
  if (per_elem < 1) per_elem = 1;
  int64_t want = n / RED_LANES_SPLIT * per_elem;
  if (want < RED_LANES_BLOCK_MIN) want = RED_LANES_BLOCK_MIN;
  if (want > RED_LANES_BLOCK_MAX) want = RED_LANES_BLOCK_MAX;
  int64_t b = want / per_elem / RED_LANES_ALIGN * RED_LANES_ALIGN;
  if (b < RED_LANES_ALIGN) b = RED_LANES_ALIGN;
  return b < n ? b : (n > 0 ? n : 1);
}

int64_t red_lanes_rows(int64_t outer, int64_t L, int64_t per_elem) {
  if (L < 1) return outer > 0 ? outer : 1;
  int64_t r = red_lanes_block(outer * L, per_elem) / L;
  if (r < 1) r = 1;
  return r < outer ? r : (outer > 0 ? outer : 1);
}

int red_lanes_wants(reduce_op op, const expr *x, const tarray *const *inputs,
                    int axis, int ndim, const int64_t *shape,
                    red_lanes_cut *cut) {
  if (!red_lanes_switch() || (unsigned)op >= R__COUNT) return 0;
  if (ndim < 0 || ndim > T_MAXDIM || axis >= ndim) return 0;
  int64_t n = 1, outer = 1, L = 1, inner = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] > 0 && n > INT64_MAX / shape[d])) return 0;
    n *= shape[d];
    if (axis < 0 || d == axis) L *= shape[d];
    else if (d < axis) outer *= shape[d];
    else inner *= shape[d];
  }
  if (inner != 1 || n <= 1 || L < 1) return 0;
  int nin = expr_ninputs(x);
  if (nin < 1) return 0;
  for (int i = 0; i < nin; i++)
    if (!inputs[i] || !inputs[i]->data) return 0;
  int64_t per = red_lanes_per_elem(x, inputs, n);
  if (per < 1 || n > INT64_MAX / per || n * per < RED_LANES_MIN) return 0;
  int64_t block;
  if (outer == 1) {
    block = red_lanes_block(n, per);
    if (block >= n) return 0;
  } else {
    if (L > RED_LANES_BLOCK_MAX / per) return 0; /* a row over a block */
    block = red_lanes_rows(outer, L, per);
    if (block >= outer) return 0;
  }
  cut->n = n;
  cut->outer = outer;
  cut->L = L;
  cut->block = block;
  return 1;
}

/* ---- the host's side of the fold (fusegen.cu's red_state, in C) --------- */

void red_state_init(reduce_op op, red_state *s) {
  s->a = op == R_PROD ? 1.0 : 0.0;
  s->b = s->c = 0;
  s->i = -1;
}

void red_state_merge(reduce_op op, red_state *s, const red_state *o) {
  int is_max = op == R_MAX || op == R_ARGMAX;
  switch (op) {
    case R_SUM:
    case R_MEAN:
      fold_neumaier_add(&s->a, &s->b, o->a);
      fold_neumaier_add(&s->a, &s->b, o->b);
      return;
    case R_PROD: s->a *= o->a; return;
    case R_VAR:
    case R_STD: {
      if (o->a == 0) return;
      double n = s->a + o->a, d = o->b - s->b;
      s->b += d * (o->a / n);
      s->c += o->c + d * d * (s->a * o->a / n);
      s->a = n;
      return;
    }
    case R_NORM:
      s->c += o->c;
      fold_norm_merge(&s->a, &s->b, o->a, o->b);
      return;
    default: break;
  }
  /* min, max, argmin, argmax: the first extreme, the first NaN */
  if (o->i < 0) return;
  if (s->i < 0) {
    *s = *o;
    return;
  }
  int sn = s->a != s->a, on = o->a != o->a;
  if (sn || on) {
    if (on && (!sn || o->i < s->i)) *s = *o;
    return;
  }
  if (is_max ? o->a > s->a : o->a < s->a) *s = *o;
  else if (o->a == s->a && o->i < s->i) *s = *o;
}

double red_state_final(reduce_op op, red_state s, int64_t n) {
  switch (op) {
    case R_SUM: return isfinite(s.a) ? s.a + s.b : s.a;
    case R_MEAN:
      return n ? (isfinite(s.a) ? s.a + s.b : s.a) / (double)n : NAN;
    case R_PROD: return s.a;
    case R_MIN:
    case R_MAX: return s.i >= 0 ? s.a : NAN;
    case R_ARGMIN:
    case R_ARGMAX: return (double)s.i;
    case R_VAR:
    case R_STD: {
      if (s.a == 0) return NAN;
      double v = s.c / s.a;
      return op == R_STD ? sqrt(v) : v;
    }
    default: break;
  }
  if (s.c > 0) fold_norm_merge(&s.a, &s.b, 1.0, s.c);
  return (s.a == 0 || !isfinite(s.a)) ? s.a : s.a * sqrt(s.b);
}

/* ---- the glue ------------------------------------------------------------ */

typedef struct rl_run {
  const red_lanes_job *J;
  const red_lane_fns *f;
  red_lane *lane[MGPU_MAX];
  red_lane_times t[MGPU_MAX];
} rl_run;

static int rl_begin(void *u, int lane, int dev, int *prime, terr *e) {
  rl_run *R = u;
  int rc = R->f->open(R->J, dev, &R->lane[lane], e);
  rc = mgpu_open_rc(rc, lane, e);
  *prime = 1; /* two buffers: one primed, then one launched ahead */
  return rc;
}

static int rl_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  rl_run *R = u;
  (void)dev;
  return R->f->launch(R->lane[lane], r0, r1, e);
}

static int rl_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  rl_run *R = u;
  (void)dev;
  return R->f->finish(R->lane[lane], r0, r1, e);
}

static void rl_end(void *u, int lane, int dev, int rc) {
  rl_run *R = u;
  (void)dev;
  if (R->lane[lane]) R->f->close(R->lane[lane], rc, &R->t[lane]);
  R->lane[lane] = NULL;
}

int red_lanes_run(int own, const red_lanes_job *J, int max_lanes,
                  const mgpu_lend *lend, const red_lane_fns *fns,
                  tarray *out, mgpu_report *rep, red_lane_times *T, terr *e) {
  int rows = J && J->outer > 1;
  if (!J || J->n < 1 || J->block < 1 || J->outer < 1 ||
      J->outer * J->L != J->n || (!rows && (!J->states || out->size != 1)) ||
      (rows && (out != J->out || !out || out->size != J->outer)))
    return terr_set(e, T_EINVAL, "", -1, "reduce lanes: bad arguments");
  rl_run *R = calloc(1, sizeof *R);
  if (!R) return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  R->J = J;
  R->f = fns;
  mgpu_ops ops = {R, rl_block, rl_end, rl_begin, NULL, rl_launch, 1, 0};
  int rc = mgpu_run(own, rows ? J->outer : J->n, J->block, max_lanes, lend,
                    &ops, rep, e);
  if (!rc && !rows) {
    /* every block's state is in: merged in block order */
    int64_t nb = (J->n + J->block - 1) / J->block;
    red_state s;
    red_state_init(J->op, &s);
    for (int64_t k = 0; k < nb; k++) red_state_merge(J->op, &s, &J->states[k]);
    tarray_set(out, 0, red_state_final(J->op, s, J->n));
  }
  if (T) mgpu_slowest(R->t, MGPU_MAX, T);
  free(R);
  return rc;
}

/* ---- the CUDA build's entry ------------------------------------------------ */

#if TESSEL_HAVE_CUDA
#include "compute/gpu/gpu.h"

static const red_lane_fns rl_cuda = {cuda_reduce_lane_open,
                                     cuda_reduce_lane_launch,
                                     cuda_reduce_lane_finish,
                                     cuda_reduce_lane_close};

/* Lanes worth lending: 1 when every full-size input is an upload the own
 * device holds and no other device does (the own device reads it from its
 * memory; a lent one would stream it over PCIe), else all. */
static int rl_max_lanes(const expr *x, const tarray *const *inputs,
                        const char *const *ids, int64_t n, int own) {
  int nin = expr_ninputs(x), full = 0, here = 0;
  for (int i = 0; i < nin; i++) {
    if (inputs[i]->size != n) continue;
    full++;
    if (!ids || !ids[i]) continue;
    size_t bytes = (size_t)n * tdtype_size(inputs[i]->dtype);
    uint32_t m = gpu_resident_mask(ids[i], (int)inputs[i]->dtype, bytes);
    if (((m >> own) & 1u) && (m & ~(1u << own)) == 0) here++;
  }
  return full > 0 && here == full ? 1 : 0;
}

int red_lanes_gpu(reduce_op op, const expr *x, const tarray *const *inputs,
                  const char *const *ids, int axis, int ndim,
                  const int64_t *shape, tarray *out, job_ctx *ctx, terr *e) {
  red_lanes_cut cut;
  if (!red_lanes_wants(op, x, inputs, axis, ndim, shape, &cut) ||
      out->size != cut.outer || !out->data)
    return gpu_reduce(ctx->device, op, x, inputs, ids, axis, out, ctx, e);
  int rows = cut.outer > 1;
  int64_t nb = rows ? 0 : (cut.n + cut.block - 1) / cut.block;
  red_state *states = rows ? NULL : calloc((size_t)nb, sizeof *states);
  if (!rows && !states)
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  red_lanes_job J = {op,          out->dtype, x,      inputs,
                     ids,         axis,       cut.n,  cut.outer,
                     cut.L,       cut.block,  ctx->device, states,
                     rows ? out : NULL, mgpu_stopped, ctx};
  mgpu_lend lend;
  mgpu_report rep;
  red_lane_times T;
  mgpu_lend_of(ctx, &lend);
  atomic_store(&ctx->progress_done, 0);
  atomic_store(&ctx->progress_total, rows ? cut.outer : cut.n);
  int maxl = rl_max_lanes(x, inputs, ids, cut.n, ctx->device);
  int rc = red_lanes_run(ctx->device, &J, maxl, &lend, &rl_cuda, out, &rep, &T,
                         e);
  mgpu_note_times(&T, ctx);
  mgpu_note(&rep, ctx);
  free(states);
  return rc;
}
#else
int red_lanes_gpu(reduce_op op, const expr *x, const tarray *const *inputs,
                  const char *const *ids, int axis, int ndim,
                  const int64_t *shape, tarray *out, job_ctx *ctx, terr *e) {
  (void)ndim, (void)shape;
  return gpu_reduce(ctx->device, op, x, inputs, ids, axis, out, ctx, e);
}
#endif
