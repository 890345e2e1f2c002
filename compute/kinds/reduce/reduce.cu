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
 * The call runs in steps (red_shape, red_kernels, red_staging,
 * red_launch_all, red_gather; red_release on every path) over one red_run.
 *
 * A big whole-array reduce may go by blocks over every lent GPU instead
 * (lanes.h, reduce_lane.cu), with this file's kernels and signature
 * (reduce_sig_init, reduce_int.h).
 *
 * Threads: runs under the device's lock on the caller's thread.
 */
#include <math.h>
#include <string.h>

#include "compute/kinds/reduce/reduce_int.h"

#define RED_MAX_OUT ((int64_t)1 << 25) /* outputs per chunk */
#define RED_RESIDENT_CHUNK ((int64_t)1 << 28)

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
  T_ASSERT(k >= 0 && k < plan_count(p));
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
static int64_t chunk_parts(const red_plan *p, const red_chunk *c, int64_t wave,
                           int rows_alone) {
  int64_t outs = c->no * p->inner, P;
  if (p->inner == 1) {
    /* rows_alone (a gang, gpu_reduce_rows): each row as a chunk of one
     * output would be cut, so that its parts, and the order of its
     * additions, are its job's alone. */
    P = wave / (rows_alone || c->no < 1 ? 1 : c->no);
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
                        int rows_alone, terr *e) {
  int rc = 0;
  int64_t wave = dev_wave_blocks(d, part_fn, RED_THREADS);
  int64_t P = chunk_parts(p, c, wave, rows_alone), nout = c->no * p->inner;
  size_t need = (size_t)(nout * P) * sizeof(fuse_state);
  if (parts->bytes < need) {
    /* Kernels still queued may read the old buffer: wait for them. */
    CU_TRY(cudaStreamSynchronize(d->s_comp));
    devmem_free(d, parts);
    T_TRY(devmem_alloc(d, need, parts, e));
  }
  /* Every part of every output of the chunk has its state slot. */
  T_ASSERT(parts->bytes >= need);
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

/* ---- cuda_reduce in steps ------------------------------------------------
 * One call's state (red_run), then the steps in the order they run: check
 * and plan the shape, the fused kernels, the inputs placed and the chunk
 * size chosen (staging), the chunks launched, the result gathered. Each
 * step leaves on the first error with rc set; red_release frees what the
 * steps took, on every path. */

typedef struct red_run {
  devctx *d;
  reduce_op op;
  const expr *x;
  const tarray *const *inputs;
  const char *const *ids;
  int axis, dev, nin, nd, nstream;
  tarray *out;
  const gpu_job *job;
  int64_t bshape[T_MAXDIM];
  fuse_input m[FUSE_MAX_IN];
  fuse_sig sig;
  fuse_args args;
  red_plan plan;
  devbuf obuf, parts, acc;
  devbuf dslot[DEV_STAGE_SLOTS];
  red_chunk rec[DEV_STAGE_SLOTS]; /* the chunk last staged in each slot */
  CUfunction part_fn, comb_fn, tree_fn;
  char *key;
  int64_t nchunks;
  size_t per_elem, oes;
} red_run;

/* The shape around the axis ([outer, L, inner] into oli), the fused
 * kernel's signature and the arguments every launch shares; m[i].es set.
 * Shared with reduce_lane.cu (reduce_int.h), so that a lane's kernels are
 * this path's: same key, same code. */
int reduce_sig_init(reduce_op op, const expr *x, int nin,
                    const tarray *const *inputs, int axis, tdtype out_dt,
                    fuse_sig *sig, fuse_args *args, fuse_input *m,
                    int64_t oli[3], int *ndim, int64_t *bshape, terr *e) {
  int nd = 0;
  if (nin < 0 || nin > FUSE_MAX_IN || (unsigned)op >= R__COUNT)
    return terr_set(e, T_EINVAL, "params", -1, "reduce of %d inputs, op %d",
                    nin, (int)op);
  broadcast_shape(nin, inputs, &nd, bshape);
  if (axis >= nd)
    return terr_set(e, T_EINVAL, "params.axis", -1, "axis %d of %d dimensions",
                    axis, nd);
  oli[0] = oli[1] = oli[2] = 1;
  for (int dd = 0; dd < nd; dd++) {
    if (axis < 0 || dd == axis) oli[1] *= bshape[dd];
    else if (dd < axis) oli[0] *= bshape[dd];
    else oli[2] *= bshape[dd];
  }
  sig->x = x;
  sig->nin = nin;
  sig->reduce = 1;
  sig->op = op;
  sig->ct = T_F64; /* values are computed and folded in float64 */
  sig->out_dt = out_dt;
  sig->columns = oli[2] > 1;
  args->ndim = nd;
  args->L = oli[1];
  args->inner = oli[2];
  for (int dd = 0; dd < nd; dd++) args->shape[dd] = bshape[dd];
  for (int i = 0; i < nin; i++) {
    int64_t st[T_MAXDIM];
    sig->mode[i] = (char)fuse_classify(inputs[i], nd, bshape, st);
    for (int dd = 0; dd < nd; dd++) args->stride[i][dd] = st[dd];
    sig->in_dt[i] = inputs[i]->dtype;
    m[i].es = tdtype_size(inputs[i]->dtype);
    if (sig->mode[i] == FM_BCAST) sig->ndim = nd;
  }
  *ndim = nd;
  return 0;
}

/* The shape around the axis, the signature (reduce_sig_init), and the
 * result's size checked against both. */
static int red_shape(red_run *r, terr *e) {
  red_plan *p = &r->plan;
  int64_t oli[3];
  int rc = reduce_sig_init(r->op, r->x, r->nin, r->inputs, r->axis,
                           r->out->dtype, &r->sig, &r->args, r->m, oli, &r->nd,
                           r->bshape, e);
  if (rc) return rc;
  p->outer = oli[0];
  p->L = oli[1];
  p->inner = oli[2];
  if (r->out->size != p->outer * p->inner)
    return terr_set(e, T_EINVAL, "params.axis", -1,
                    "result has %lld elements, expected %lld",
                    (long long)r->out->size, (long long)(p->outer * p->inner));
  if ((double)r->out->size * (r->oes + 0.0) > (double)r->d->mem_total / 4)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "a reduce result of %lld elements is too large for GPU %d",
                    (long long)r->out->size, r->dev);
  return 0;
}

/* The part, combine and tree-combine kernels of the signature (compiled
 * once, then from the kernel cache). */
static int red_kernels(red_run *r, terr *e) {
  int rc = 0;
  double cms = 0;
  r->key = (char *)malloc(RED_KEY_MAX);
  if (!r->key || fuse_key(&r->sig, r->key, RED_KEY_MAX) < 0)
    return terr_set(e, T_ENOMEM, "", -1, "kernel key");
  T_TRY(kcache_get(r->d, r->key, fuse_gen_reduce, &r->sig,
                   r->sig.columns ? "tx_cols" : "tx_rows", &r->part_fn, &cms,
                   e));
  *r->job->t_compute += cms;
  T_TRY(kcache_get(r->d, r->key, fuse_gen_reduce, &r->sig, "tx_combine",
                   &r->comb_fn, &cms, e));
  T_TRY(kcache_get(r->d, r->key, fuse_gen_reduce, &r->sig, "tx_combine_tree",
                   &r->tree_fn, &cms, e));
fail:
  return rc;
}

/* Slabs too big to stream and too wide to split along the axis: upload
 * the streamed inputs whole instead (T_ENOMEM when they do not fit). */
static int red_upload_whole(red_run *r, terr *e) {
  int rc = 0;
  for (int i = 0; i < r->nin; i++) {
    fuse_input *mi = &r->m[i];
    if (!mi->streamed) continue;
    size_t bytes = (size_t)r->inputs[i]->size * mi->es;
    T_TRY(devmem_alloc(r->d, bytes, &mi->tmp, e));
    double t0 = t_now_ms();
    T_TRY(stage_upload(r->d, mi->tmp.ptr, r->inputs[i]->data, bytes, e));
    *r->job->t_h2d += t_now_ms() - t0;
    r->args.in[i] = mi->tmp.ptr;
    r->args.off[i] = 0;
    mi->streamed = 0;
  }
  r->nstream = 0;
  r->plan.C = RED_RESIDENT_CHUNK;
fail:
  return rc;
}

/* The chunking: whole slabs (slab_o outer indices a chunk) when a slab
 * fits a chunk, else slabs cut along the axis, with `acc` carrying the
 * state of an outer index's `inner` outputs between its chunks. */
static int red_chunking(red_run *r, terr *e) {
  int rc = 0;
  red_plan *p = &r->plan;
  int64_t slab = p->L * p->inner;
  if (slab <= p->C) {
    p->split = 0;
    int64_t by_c = slab ? p->C / slab : p->outer;
    int64_t by_out = RED_MAX_OUT / p->inner;
    p->slab_o = by_c < by_out ? by_c : by_out;
    if (p->slab_o < 1) p->slab_o = 1;
    return 0;
  }
  if (p->inner > p->C || p->inner > RED_MAX_OUT) /* resident */
    return terr_set(e, T_ETOOLARGE, "params.axis", -1,
                    "reducing axis %d with %lld elements after it is too "
                    "large for the GPU's staging",
                    r->axis, (long long)p->inner);
  p->split = 1;
  T_TRY(devmem_alloc(r->d, (size_t)p->inner * sizeof(fuse_state), &r->acc, e));
  r->args.acc = r->acc.ptr;
fail:
  return rc;
}

/* Inputs placed (resident, whole on the device, or streamed), the output
 * buffer, the chunk size, and the device side of the staging slots: each
 * streamed input has a region of C elements in every slot's buffer. */
static int red_staging(red_run *r, terr *e) {
  int rc = 0;
  devctx *d = r->d;
  red_plan *p = &r->plan;
  size_t off = 0;
  T_TRY(fuse_place_inputs(d, r->nin, r->inputs, r->ids, &r->sig, r->m,
                          &r->args, r->job, e));
  T_TRY(devmem_alloc(d, (size_t)r->out->size * r->oes, &r->obuf, e));
  r->args.out = r->obuf.ptr;
  for (int i = 0; i < r->nin; i++) {
    r->nstream += r->m[i].streamed;
    if (r->m[i].streamed) r->per_elem += r->m[i].es;
  }
  if (r->nstream) {
    T_TRY(stage_ensure(d, e));
    p->C = (int64_t)(stage_chunk(d) / r->per_elem) & ~(int64_t)255;
  } else {
    p->C = RED_RESIDENT_CHUNK;
  }
  if (r->nstream && p->L * p->inner > p->C && p->inner > p->C)
    T_TRY(red_upload_whole(r, e));
  T_TRY(red_chunking(r, e));
  if (p->outer * p->L * p->inner == 0) {
    /* Nothing to fold: the combine kernel writes each output's identity
     * (sum 0, prod 1, mean/var NaN, ...). */
    red_chunk c = {0, p->outer, 0, p->L};
    T_TRY(launch_chunk(d, r->part_fn, r->comb_fn, r->tree_fn, p, &c, &r->args,
                       &r->parts, r->job->rows_alone, e));
    r->nchunks = 0;
  } else {
    r->nchunks = plan_count(p);
  }
  for (int i = 0; i < r->nin; i++)
    if (r->m[i].streamed) {
      r->m[i].region = off;
      off += (size_t)p->C * r->m[i].es;
    }
  /* Each streamed input's region holds a chunk: C of its elements. */
  T_ASSERT(!r->nstream || off == (size_t)p->C * r->per_elem);
  if (r->nstream)
    for (int s = 0; s < DEV_STAGE_SLOTS; s++)
      T_TRY(devmem_alloc(d, off, &r->dslot[s], e));
fail:
  return rc;
}

/* Slot s is reused: the kernels of the chunk staged in it before have read
 * it; count its copy time and its progress. */
static int red_slot_done(red_run *r, int s, int wait, terr *e) {
  int rc = 0;
  stage_slot *sl = &r->d->slot[s];
  const red_chunk *c = &r->rec[s];
  if (wait) CU_TRY(cudaEventSynchronize(sl->comp_done));
  *r->job->t_h2d += dev_event_ms(sl->h2d_start, sl->h2d_done);
  r->job->progress(r->job->ctx, c->no * c->nl * r->plan.inner);
fail:
  return rc;
}

/* Every chunk in order: staged through slot k % DEV_STAGE_SLOTS when
 * inputs stream, then reduced on the compute stream. */
static int red_launch_all(red_run *r, terr *e) {
  int rc = 0;
  devctx *d = r->d;
  const red_plan *p = &r->plan;
  const int64_t total = p->outer * p->L * p->inner;
  CU_TRY(cudaEventRecord(d->ev_a, d->s_comp));
  for (int64_t k = 0; k < r->nchunks; k++) {
    int s = (int)(k % DEV_STAGE_SLOTS);
    stage_slot *sl = &d->slot[s];
    if ((rc = r->job->stopped(r->job->ctx)) != 0)
      return terr_set(e, (terr_code)rc, "", -1,
                      "stopped after %lld of %lld chunks", (long long)k,
                      (long long)r->nchunks);
    red_chunk c;
    plan_chunk(p, k, &c);
    int64_t start = (c.o0 * p->L + c.l0) * p->inner;
    int64_t cnt = c.no * c.nl * p->inner;
    /* The chunk lies in the data and fits a slot's region (C elements). */
    T_ASSERT(start >= 0 && cnt > 0 && start + cnt <= total);
    T_ASSERT(!r->nstream || cnt <= p->C);
    if (r->nstream) {
      if (sl->busy) T_TRY(red_slot_done(r, s, 1, e));
      T_TRY(fuse_stage_chunk(d, r->nin, r->inputs, r->m, sl, r->dslot[s].ptr,
                             start, cnt, &r->args, r->job->t_h2d, e));
    }
    T_TRY(launch_chunk(d, r->part_fn, r->comb_fn, r->tree_fn, p, &c, &r->args,
                       &r->parts, r->job->rows_alone, e));
    if (r->nstream) {
      CU_TRY(cudaEventRecord(sl->comp_done, d->s_comp));
      sl->busy = 1;
      r->rec[s] = c;
    } else {
      r->job->progress(r->job->ctx, cnt);
    }
  }
fail:
  return rc;
}

/* The kernels done: the time, the last slots' progress, the result down. */
static int red_gather(red_run *r, terr *e) {
  int rc = 0;
  devctx *d = r->d;
  CU_TRY(cudaEventRecord(d->ev_b, d->s_comp));
  CU_TRY(cudaEventSynchronize(d->ev_b));
  *r->job->t_compute += dev_event_ms(d->ev_a, d->ev_b);
  for (int64_t k = r->nchunks - DEV_STAGE_SLOTS; r->nstream && k < r->nchunks;
       k++) {
    if (k < 0) continue;
    int s = (int)(k % DEV_STAGE_SLOTS);
    if (!d->slot[s].busy) continue;
    T_TRY(red_slot_done(r, s, 0, e));
    d->slot[s].busy = 0;
  }
  {
    double t0 = t_now_ms();
    T_TRY(stage_download(d, r->out->data, r->obuf.ptr,
                         (size_t)r->out->size * r->oes, e));
    *r->job->t_d2h += t_now_ms() - t0;
  }
fail:
  return rc;
}

/* Everything the steps took, on every path; the device ended. */
static void red_release(red_run *r, int rc) {
  devctx *d = r->d;
  if (rc) {
    cudaStreamSynchronize(d->s_h2d);
    cudaStreamSynchronize(d->s_comp);
    (void)cudaGetLastError();
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++) {
    d->slot[s].busy = 0;
    devmem_free(d, &r->dslot[s]);
  }
  free(r->key);
  devmem_free(d, &r->obuf);
  devmem_free(d, &r->parts);
  devmem_free(d, &r->acc);
  for (int i = 0; i < r->nin && i < FUSE_MAX_IN; i++)
    devmem_free(d, &r->m[i].tmp);
  dev_end(d, rc);
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
  red_run run, *r = &run;
  memset(r, 0, sizeof *r);
  r->d = d;
  r->op = op;
  r->x = x;
  r->inputs = inputs;
  r->ids = ids;
  r->axis = axis;
  r->dev = dev;
  r->out = out;
  r->job = job;
  r->nin = expr_ninputs(x);
  r->oes = tdtype_size(out->dtype);
  T_TRY(red_shape(r, e));
  job->progress_total(job->ctx, r->plan.outer * r->plan.L * r->plan.inner);
  if ((rc = job->stopped(job->ctx)) != 0) {
    terr_set(e, (terr_code)rc, "", -1, "stopped before start");
    goto fail;
  }
  T_TRY(red_kernels(r, e));
  T_TRY(red_staging(r, e));
  T_TRY(red_launch_all(r, e));
  T_TRY(red_gather(r, e));
fail:
  red_release(r, rc);
  return rc;
}
