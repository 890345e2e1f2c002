/* reduce.cu — cuda_reduce (gpu_reduce): a reduction of an expression, over
 * everything or one axis, on the GPU.
 *
 * The data is seen as [outer, L, inner] around the reduced axis (axis -1:
 * [1, N, 1]); there are outer*inner outputs, each folding L values. The
 * expression is fused into the reduction kernel (fusegen.cu), so the
 * values are never stored: each element is read once. Two layouts:
 *   rows     inner == 1 (the whole array, or the last axis): an output's
 *            values are contiguous; `parts` blocks share each output, so a
 *            single big sum still fills the GPU;
 *   columns  inner > 1: one thread per output column (coalesced across
 *            columns) and part of the axis.
 * Each part leaves a float64 state (fuse.h); tx_combine folds an output's
 * parts in order — together with the state carried from earlier chunks —
 * and writes the final value (tx_combine_tree does the same with a block
 * per output when there are many parts, as for a whole-array reduction). So the order of every addition is fixed by
 * the shapes alone: the result does not change from run to run.
 *
 * Chunks: the work is cut into chunks of whole [L, inner] slabs (several
 * outputs' worth), or, when one slab is too big, into ranges of the axis
 * for one outer index (the state of its `inner` outputs is carried between
 * chunks in `acc`). Inputs not on the device are streamed through the
 * pinned slots: the gang fills slot k % DEV_STAGE_SLOTS, the copy-in stream
 * moves it up, the compute stream waits for it and reduces; the host reuses
 * a slot once the kernels that read it are done, so copies and reductions
 * of different chunks overlap. Limits (T_ETOOLARGE): the result must fit in
 * a quarter of the device memory, and, for a slab split along the axis,
 * `inner` must fit a staging chunk.
 *
 * Threads: runs under the device's lock on the caller's thread.
 */
#include <math.h>
#include <string.h>

#include "compute/kinds/fuse.h"

#define RED_THREADS 256
#define RED_KEY_MAX (8192 + EXPR_MAX_SRC * 8)
#define RED_MAX_OUT ((int64_t)1 << 25) /* outputs per chunk */
#define RED_RESIDENT_CHUNK ((int64_t)1 << 28)
#define RED_TREE_PARTS 32 /* parts per output from which the fold is a tree */

typedef struct red_chunk {
  int64_t o0, no, l0, nl;
} red_chunk;

typedef struct red_plan {
  int64_t outer, L, inner;
  int64_t C;      /* elements per chunk */
  int split;      /* slabs cut along the axis */
  int64_t slab_o; /* outputs (outer indices) per whole-slab chunk */
} red_plan;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Chunk k of the plan. */
static int64_t plan_count(const red_plan *p) {
  if (!p->split) return ceil_div(p->outer, p->slab_o);
  int64_t per = p->C / p->inner;
  return p->outer * ceil_div(p->L, per);
}
static void plan_chunk(const red_plan *p, int64_t k, red_chunk *c) {
  if (!p->split) {
    c->o0 = k * p->slab_o;
    c->no = p->outer - c->o0 < p->slab_o ? p->outer - c->o0 : p->slab_o;
    c->l0 = 0;
    c->nl = p->L;
    return;
  }
  int64_t per = p->C / p->inner, pieces = ceil_div(p->L, per);
  c->o0 = k / pieces;
  c->no = 1;
  c->l0 = (k % pieces) * per;
  c->nl = p->L - c->l0 < per ? p->L - c->l0 : per;
}

/* Parts per output: as many as fill one wave of the device (`wave`
 * blocks; never more, so that no partial second wave doubles the time),
 * each part long enough to be worth it. */
static int64_t chunk_parts(const red_plan *p, const red_chunk *c, int64_t wave) {
  int64_t outs = c->no * p->inner, P;
  if (p->inner == 1) {
    P = wave / (c->no > 0 ? c->no : 1);
    int64_t cap = c->nl / 2048;
    if (P > cap) P = cap;
  } else {
    P = wave * RED_THREADS / (outs > 0 ? outs : 1);
    int64_t cap = c->nl / 32;
    if (P > cap) P = cap;
  }
  return P < 1 ? 1 : P;
}

static unsigned grid_of(int64_t work, int64_t cap) {
  if (work > cap) work = cap;
  return (unsigned)(work < 1 ? 1 : work);
}

/* The part and combine kernels for one chunk, on the compute stream. */
static int launch_chunk(devctx *d, CUfunction part_fn, CUfunction comb_fn,
                        CUfunction tree_fn, const red_plan *p,
                        const red_chunk *c, fuse_args *a, devbuf *parts,
                        terr *e) {
  int rc = 0;
  int64_t wave = dev_wave_blocks(d, part_fn, RED_THREADS);
  int64_t P = chunk_parts(p, c, wave), nout = c->no * p->inner;
  size_t need = (size_t)(nout * P) * sizeof(fuse_state);
  if (parts->bytes < need) {
    /* Kernels still queued may read the old buffer: wait for them. */
    CU_TRY(cudaStreamSynchronize(d->s_comp));
    devmem_free(d, parts);
    T_TRY(devmem_alloc(d, need, parts, e));
  }
  a->part = parts->ptr;
  a->o0 = c->o0;
  a->no = c->no;
  a->l0 = c->l0;
  a->nl = c->nl;
  a->parts = P;
  a->last = (c->l0 + c->nl == p->L);
  {
    void *params[] = {a};
    unsigned g = p->inner == 1
                     ? grid_of(c->no * P, wave)
                     : grid_of(ceil_div(nout * P, RED_THREADS), wave);
    CU_TRY_DRV(dev_drv.LaunchKernel(part_fn, g, 1, 1, RED_THREADS, 1, 1, 0,
                                    d->s_comp, params, NULL));
    if (P >= RED_TREE_PARTS) {
      g = grid_of(nout, (int64_t)d->sms * 16);
      CU_TRY_DRV(dev_drv.LaunchKernel(tree_fn, g, 1, 1, RED_THREADS, 1, 1, 0,
                                      d->s_comp, params, NULL));
    } else {
      g = grid_of(ceil_div(nout, RED_THREADS), (int64_t)d->sms * 8);
      CU_TRY_DRV(dev_drv.LaunchKernel(comb_fn, g, 1, 1, RED_THREADS, 1, 1, 0,
                                      d->s_comp, params, NULL));
    }
  }
fail:
  return rc;
}

/* NumPy broadcast shape of the inputs (the kind has validated them). */
static void broadcast_shape(int nin, const tarray *const *in, int *ndim,
                            int64_t *shape) {
  int nd = 0;
  for (int i = 0; i < nin; i++)
    if (in[i]->ndim > nd) nd = in[i]->ndim;
  for (int dd = 0; dd < nd; dd++) shape[dd] = 1;
  for (int i = 0; i < nin; i++)
    for (int k = 0; k < in[i]->ndim; k++) {
      int dd = nd - in[i]->ndim + k;
      if (in[i]->shape[k] != 1) shape[dd] = in[i]->shape[k];
    }
  *ndim = nd;
}

/* NumPy's value of a reduction over nothing (sum 0, prod 1, norm 0; the
 * mean, var and std of nothing are NaN). min/max/argmin/argmax have none:
 * the kind refuses them at submit; NaN and -1 here if one gets through. */
static double empty_value(reduce_op op) {
  switch (op) {
    case R_SUM:
    case R_NORM: return 0;
    case R_PROD: return 1;
    case R_ARGMIN:
    case R_ARGMAX: return -1;
    default: return NAN;
  }
}

/* Zero-size work (no output, or outputs that each fold no value) is
 * answered on the host before the device is touched: a grid of 0 blocks
 * is an invalid launch, and there is nothing to compute. 1 when done. */
static int reduce_zero_size(reduce_op op, const tarray *const *inputs, int nin,
                            int axis, tarray *out, const gpu_job *job) {
  int nd = 0;
  int64_t bshape[T_MAXDIM], L = 1;
  broadcast_shape(nin, inputs, &nd, bshape);
  for (int dd = 0; dd < nd; dd++)
    if (axis < 0 || dd == axis) L *= bshape[dd];
  if (out->size > 0 && L > 0) return 0;
  for (int64_t i = 0; i < out->size; i++) tarray_set(out, i, empty_value(op));
  job->progress_total(job->ctx, 0);
  return 1;
}

int cuda_reduce(int dev, reduce_op op, const expr *x,
                const tarray *const *inputs, const char *const *ids, int axis,
                tarray *out, const gpu_job *job, terr *e) {
  if (x) { /* x NULL: a caller probing availability; dev_begin answers */
    int zn = expr_ninputs(x);
    if (zn >= 0 && zn <= FUSE_MAX_IN && (unsigned)op < R__COUNT &&
        reduce_zero_size(op, inputs, zn, axis, out, job))
      return 0;
  }
  devctx *d = NULL;
  int rc = dev_begin(dev, &d, e);
  if (rc) return rc;
  /* Result pages in before the first byte comes down (stage.cu). */
  stage_prefault(d, out, job ? job->t_d2h : NULL);
  int nin = expr_ninputs(x), nd = 0, nstream = 0;
  int64_t bshape[T_MAXDIM];
  fuse_input m[FUSE_MAX_IN];
  fuse_sig sig;
  fuse_args args;
  red_plan plan;
  devbuf obuf = {NULL, 0}, parts = {NULL, 0}, acc = {NULL, 0};
  devbuf dslot[DEV_STAGE_SLOTS];
  red_chunk rec[DEV_STAGE_SLOTS];
  CUfunction part_fn = NULL, comb_fn = NULL, tree_fn = NULL;
  char *key = NULL;
  int64_t nchunks = 0, k = 0;
  size_t per_elem = 0, oes = tdtype_size(out->dtype);
  memset(m, 0, sizeof m);
  memset(&sig, 0, sizeof sig);
  memset(&args, 0, sizeof args);
  memset(&plan, 0, sizeof plan);
  memset(dslot, 0, sizeof dslot);
  memset(rec, 0, sizeof rec);
  if (nin < 0 || nin > FUSE_MAX_IN || (unsigned)op >= R__COUNT) {
    rc = terr_set(e, T_EINVAL, "params", -1, "reduce of %d inputs, op %d", nin,
                  (int)op);
    goto fail;
  }
  broadcast_shape(nin, inputs, &nd, bshape);
  if (axis >= nd) {
    rc = terr_set(e, T_EINVAL, "params.axis", -1, "axis %d of %d dimensions",
                  axis, nd);
    goto fail;
  }
  plan.outer = plan.L = plan.inner = 1;
  for (int dd = 0; dd < nd; dd++) {
    if (axis < 0 || dd == axis) plan.L *= bshape[dd];
    else if (dd < axis) plan.outer *= bshape[dd];
    else plan.inner *= bshape[dd];
  }
  sig.x = x;
  sig.nin = nin;
  sig.reduce = 1;
  sig.op = op;
  sig.ct = T_F64; /* values are computed and folded in float64 */
  sig.out_dt = out->dtype;
  sig.columns = plan.inner > 1;
  args.ndim = nd;
  args.L = plan.L;
  args.inner = plan.inner;
  for (int dd = 0; dd < nd; dd++) args.shape[dd] = bshape[dd];
  for (int i = 0; i < nin; i++) {
    int64_t st[T_MAXDIM];
    sig.mode[i] = (char)fuse_classify(inputs[i], nd, bshape, st);
    for (int dd = 0; dd < nd; dd++) args.stride[i][dd] = st[dd];
    sig.in_dt[i] = inputs[i]->dtype;
    m[i].es = tdtype_size(inputs[i]->dtype);
    if (sig.mode[i] == FM_BCAST) sig.ndim = nd;
  }
  if (out->size != plan.outer * plan.inner) {
    rc = terr_set(e, T_EINVAL, "params.axis", -1,
                  "result has %lld elements, expected %lld",
                  (long long)out->size, (long long)(plan.outer * plan.inner));
    goto fail;
  }
  if ((double)out->size * (oes + 0.0) > (double)d->mem_total / 4) {
    rc = terr_set(e, T_ETOOLARGE, "params", -1,
                  "a reduce result of %lld elements is too large for GPU %d",
                  (long long)out->size, dev);
    goto fail;
  }
  job->progress_total(job->ctx, plan.outer * plan.L * plan.inner);
  if ((rc = job->stopped(job->ctx)) != 0) {
    terr_set(e, (terr_code)rc, "", -1, "stopped before start");
    goto fail;
  }
  key = (char *)malloc(RED_KEY_MAX);
  if (!key || fuse_key(&sig, key, RED_KEY_MAX) < 0) {
    rc = terr_set(e, T_ENOMEM, "", -1, "kernel key");
    goto fail;
  }
  {
    double cms = 0;
    T_TRY(kcache_get(d, key, fuse_gen_reduce, &sig,
                     sig.columns ? "tx_cols" : "tx_rows", &part_fn, &cms, e));
    *job->t_compute += cms;
    T_TRY(kcache_get(d, key, fuse_gen_reduce, &sig, "tx_combine", &comb_fn,
                     &cms, e));
    T_TRY(kcache_get(d, key, fuse_gen_reduce, &sig, "tx_combine_tree",
                     &tree_fn, &cms, e));
  }
  T_TRY(fuse_place_inputs(d, nin, inputs, ids, &sig, m, &args, job, e));
  T_TRY(devmem_alloc(d, (size_t)out->size * oes, &obuf, e));
  args.out = obuf.ptr;
  for (int i = 0; i < nin; i++) {
    nstream += m[i].streamed;
    if (m[i].streamed) per_elem += m[i].es;
  }
  if (nstream) {
    T_TRY(stage_ensure(d, e));
    plan.C = (int64_t)(d->slot[0].bytes / per_elem) & ~(int64_t)255;
  } else {
    plan.C = RED_RESIDENT_CHUNK;
  }
  if (nstream && plan.L * plan.inner > plan.C && plan.inner > plan.C) {
    /* Slabs too big to stream and too wide to split along the axis:
     * upload the inputs whole instead (T_ENOMEM when they do not fit). */
    for (int i = 0; i < nin; i++) {
      if (!m[i].streamed) continue;
      size_t bytes = (size_t)inputs[i]->size * m[i].es;
      T_TRY(devmem_alloc(d, bytes, &m[i].tmp, e));
      double t0 = t_now_ms();
      T_TRY(stage_upload(d, m[i].tmp.ptr, inputs[i]->data, bytes, e));
      *job->t_h2d += t_now_ms() - t0;
      args.in[i] = m[i].tmp.ptr;
      args.off[i] = 0;
      m[i].streamed = 0;
    }
    nstream = 0;
    plan.C = RED_RESIDENT_CHUNK;
  }
  {
    int64_t slab = plan.L * plan.inner;
    if (slab <= plan.C) {
      plan.split = 0;
      int64_t by_c = slab ? plan.C / slab : plan.outer;
      int64_t by_out = RED_MAX_OUT / plan.inner;
      plan.slab_o = by_c < by_out ? by_c : by_out;
      if (plan.slab_o < 1) plan.slab_o = 1;
    } else {
      if (plan.inner > plan.C || plan.inner > RED_MAX_OUT) { /* resident */
        rc = terr_set(e, T_ETOOLARGE, "params.axis", -1,
                      "reducing axis %d with %lld elements after it is too "
                      "large for the GPU's staging",
                      axis, (long long)plan.inner);
        goto fail;
      }
      plan.split = 1;
      T_TRY(devmem_alloc(d, (size_t)plan.inner * sizeof(fuse_state), &acc, e));
      args.acc = acc.ptr;
    }
  }
  if (plan.outer * plan.L * plan.inner == 0) {
    /* Nothing to fold: the combine kernel writes each output's identity
     * (sum 0, prod 1, mean/var NaN, ...). */
    red_chunk c = {0, plan.outer, 0, plan.L};
    T_TRY(launch_chunk(d, part_fn, comb_fn, tree_fn, &plan, &c, &args, &parts, e));
    nchunks = 0;
  } else {
    nchunks = plan_count(&plan);
  }
  {
    size_t off = 0;
    for (int i = 0; i < nin; i++)
      if (m[i].streamed) {
        m[i].region = off;
        off += (size_t)plan.C * m[i].es;
      }
    if (nstream)
      for (int s = 0; s < DEV_STAGE_SLOTS; s++)
        T_TRY(devmem_alloc(d, off, &dslot[s], e));
  }
  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  for (k = 0; k < nchunks; k++) {
    int s = (int)(k % DEV_STAGE_SLOTS);
    stage_slot *sl = &d->slot[s];
    if ((rc = job->stopped(job->ctx)) != 0) {
      terr_set(e, (terr_code)rc, "", -1, "stopped after %lld of %lld chunks",
               (long long)k, (long long)nchunks);
      goto fail;
    }
    red_chunk c;
    plan_chunk(&plan, k, &c);
    int64_t start = (c.o0 * plan.L + c.l0) * plan.inner;
    int64_t cnt = c.no * c.nl * plan.inner;
    if (nstream) {
      if (sl->busy) { /* its last chunk's kernels have read the slot */
        CU_TRY(cudaEventSynchronize(sl->comp_done));
        *job->t_h2d += dev_event_ms(sl->h2d_start, sl->h2d_done);
        job->progress(job->ctx, rec[s].no * rec[s].nl * plan.inner);
      }
      T_TRY(fuse_stage_chunk(d, nin, inputs, m, sl, dslot[s].ptr, start, cnt,
                             &args, job->t_h2d, e));
    }
    T_TRY(launch_chunk(d, part_fn, comb_fn, tree_fn, &plan, &c, &args, &parts, e));
    if (nstream) {
      CU_TRY(cudaEventRecord(sl->comp_done, d->s_comp));
      sl->busy = 1;
      rec[s] = c;
    } else {
      job->progress(job->ctx, cnt);
    }
  }
  CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
  CU_TRY(cudaEventSynchronize(d->ev_b));
  *job->t_compute += dev_event_ms(d->ev_a, d->ev_b);
  for (k = nchunks - DEV_STAGE_SLOTS; nstream && k < nchunks; k++) {
    if (k < 0) continue;
    int s = (int)(k % DEV_STAGE_SLOTS);
    if (!d->slot[s].busy) continue;
    *job->t_h2d += dev_event_ms(d->slot[s].h2d_start, d->slot[s].h2d_done);
    job->progress(job->ctx, rec[s].no * rec[s].nl * plan.inner);
    d->slot[s].busy = 0;
  }
  {
    double t0 = t_now_ms();
    T_TRY(stage_download(d, out->data, obuf.ptr, (size_t)out->size * oes, e));
    *job->t_d2h += t_now_ms() - t0;
  }
fail:
  if (rc) {
    cudaStreamSynchronize(d->s_h2d);
    cudaStreamSynchronize(d->s_comp);
    (void)cudaGetLastError();
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++) {
    d->slot[s].busy = 0;
    devmem_free(d, &dslot[s]);
  }
  free(key);
  devmem_free(d, &obuf);
  devmem_free(d, &parts);
  devmem_free(d, &acc);
  for (int i = 0; i < nin && i < FUSE_MAX_IN; i++) devmem_free(d, &m[i].tmp);
  dev_end(d, rc);
  return rc;
}
