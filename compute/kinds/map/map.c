/* compute/kinds/map/map.c — the "map" job kind: an elementwise expression over named,
 * broadcast inputs (API.md).
 *
 *   params {"expr": "x**2 + 2*x + 1", "inputs": {"x": <array value>},
 *           "dtype": "float64" | "float32"}
 *
 * Without "dtype" the job's dtype is NumPy's promotion of the inputs
 * (kexpr_infer_dtype): x float32 in "x*2" stays float32, as NumPy keeps
 * it; a float64 array among them makes it float64. It is fixed at check,
 * so the CPU VM and the GPU kernels (map.cu, fed by the same plan) compute
 * and store in the same dtype.
 *
 * check compiles the expression and checks the inputs (compute/kinds/exprkind.c) and
 * fills the estimate; prepare resolves the inputs in the job's dtype; run
 * evaluates on the CPU in chunks of output elements (each chunk runs the
 * block VM with its thread's own scratch, so no full-size temporary is
 * made) or hands the whole job to the GPU: map_lanes_gpu (lanes.h), which
 * runs a big one over every GPU the scheduler lends (blocks of elements,
 * a lane a device, mgpu.h) and any other on ctx->device (gpu_map).
 *
 * Where a CPU run's result goes: ctx->result_stream (when the scheduler
 * offers it) gives a heap array for a small result, computed into in
 * place, and for a big one a sink (compute/array/codec/npyfile.c): each chunk is then
 * evaluated into its slot's buffer (one chunk, at most 512 KiB: it stays
 * in the core's L2) and written at its offset in the result's file by the
 * thread that computed it, so threads never fault pages of a shared
 * mapping and the result is not held twice. A GPU run takes result_stream
 * too when the result is below KIND_GPU_SINK_MAX (kind_gpu_sink: its
 * chunks are written from the pinned slots, compute/kinds/map/map.cu), and
 * result_alloc's memory for bigger ones (a mapping the GPU's gang
 * prefaults, then fills; issue 25's measurements say where each wins).
 *
 * Threads: check on an HTTP thread; prepare/run/release on a scheduler
 * worker; run's chunks on pool threads, each writing only its own range of
 * the result and its own slot's scratch and buffer. The plan is read-only
 * during run, so "compare" may run it several times.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/gpu_kernels.h"
#include "compute/kinds/exprkind.h"
#include "compute/kinds/map/lanes.h"
#include "util/pool.h"
#include "util/util.h"

/* Output elements per chunk: the unit of parallel work, progress and
 * cancellation. Results do not depend on it (every element is computed
 * the same way wherever the chunk boundaries fall). */
#define MAP_CHUNK_MAX 65536
#define MAP_CHUNK_MIN 32768

typedef struct map_plan {
  kexpr k;
  tarray *in[EXPR_MAX_INPUTS]; /* owned */
  char *ids[EXPR_MAX_INPUTS];  /* owned; NULL for non-uploaded inputs */
} map_plan;

static const char *const map_keys[] = {NULL};

static int map_check_keep(const json_t *params, const tenv *env,
                          job_estimate *est, void **checked, terr *e) {
  if (checked) *checked = NULL;
  kexpr k;
  int rc = kexpr_check(params, env, map_keys, 0, &k, e);
  if (rc) return rc;
  memset(est, 0, sizeof *est);
  est->out_dtype = k.dt;
  est->out_ndim = k.ndim;
  for (int d = 0; d < k.ndim; d++) est->out_shape[d] = k.shape[d];
  if ((rc = kind_result_check(env, est, e))) {
    kexpr_free(&k);
    return rc;
  }
  kexpr_estimate(&k, (double)expr_program_length(k.x), est);
  return kexpr_keep(&k, checked, e);
}

static int map_check(const json_t *params, const tenv *env, job_estimate *est,
                     terr *e) {
  return map_check_keep(params, env, est, NULL, e);
}

static void map_release(void *plan) {
  map_plan *p = plan;
  if (!p) return;
  kexpr_release(&p->k, p->in, p->ids);
  free(p);
}

static int map_prepare_checked(const json_t *params, const tenv *env,
                               void *checked, void **plan, terr *e) {
  *plan = NULL;
  map_plan *p = calloc(1, sizeof *p);
  if (!p) {
    kexpr_checked_free(checked);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  int rc = kexpr_take(params, env, map_keys, 0, checked, &p->k, e);
  if (!rc) rc = kexpr_resolve(&p->k, env, p->in, p->ids, e);
  if (rc) {
    map_release(p);
    return rc;
  }
  *plan = p;
  return 0;
}

static int map_prepare(const json_t *params, const tenv *env, void **plan,
                       terr *e) {
  return map_prepare_checked(params, env, NULL, plan, e);
}

typedef struct map_work {
  const map_plan *p;
  tarray *out;
  int64_t chunk;
  char *scratch; /* slot s at scratch + s * stride: the VM's registers, */
  size_t stride; /* then (sinks only) the chunk's values */
  size_t buf_off;
  job_ctx *ctx;
  atomic_int failed; /* a write failed: the chunks left do nothing */
  terr err;          /* the first failure's, set by its thread */
} map_work;

/* One chunk, on a pool thread (or the caller). */
static void map_chunk(void *arg, int64_t c, int slot) {
  map_work *w = arg;
  int64_t start = c * w->chunk, n = w->out->size - start;
  if (n > w->chunk) n = w->chunk;
  char *scratch = w->scratch + (size_t)slot * w->stride;
  const tarray *const *in = (const tarray *const *)w->p->in;
  if (w->out->data) {
    expr_eval(w->p->k.x, in, w->out, start, n, scratch);
  } else {
    if (atomic_load_explicit(&w->failed, memory_order_relaxed)) return;
    char *buf = scratch + w->buf_off;
    expr_eval_into(w->p->k.x, in, w->out, start, n, buf, scratch);
    terr e;
    if (tarray_write(w->out, start, n, buf, &e) != 0) {
      int none = 0;
      if (atomic_compare_exchange_strong(&w->failed, &none, 1)) w->err = e;
      return;
    }
  }
  job_ctx_progress(w->ctx, 1);
}

static int map_run_cpu(const map_plan *p, tarray *out, job_ctx *ctx,
                       int width, terr *e) {
  if (width < 1) width = 1;
  int64_t chunk = out->size / ((int64_t)width * 4);
  if (chunk < MAP_CHUNK_MIN) chunk = MAP_CHUNK_MIN;
  if (chunk > MAP_CHUNK_MAX) chunk = MAP_CHUNK_MAX;
  int64_t nchunks = (out->size + chunk - 1) / chunk;
  if (nchunks < (int64_t)width) width = (int)(nchunks ? nchunks : 1);
  size_t buf_off = (expr_scratch_size(p->k.x) + 63) & ~(size_t)63;
  size_t stride = buf_off;
  if (!out->data) /* a sink: room for the chunk's values */
    stride += ((size_t)chunk * tdtype_size(out->dtype) + 63) & ~(size_t)63;
  char *scratch = aligned_alloc(64, stride * (size_t)width);
  if (!scratch) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  atomic_store(&ctx->progress_total, nchunks);
  atomic_store(&ctx->progress_done, 0);
  map_work w = {.p = p, .out = out, .chunk = chunk, .scratch = scratch,
                .stride = stride, .buf_off = buf_off, .ctx = ctx};
  atomic_init(&w.failed, 0);
  int stopped = 0;
  if (!ctx->pool || width == 1) {
    for (int64_t c = 0; c < nchunks; c++) {
      if (job_ctx_stopped(ctx)) {
        stopped = 1;
        break;
      }
      map_chunk(&w, c, 0);
    }
  } else {
    stopped = pool_for(ctx->pool, width, nchunks, map_chunk, &w, ctx->stop) != 0;
  }
  free(scratch);
  if (stopped)
    return terr_set(e, job_ctx_stop_code(ctx), "", -1, "stopped");
  if (atomic_load(&w.failed)) {
    *e = w.err;
    return e->code;
  }
  return 0;
}

static int map_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                   terr *e) {
  *result = NULL;
  map_plan *p = plan;
  tarray *out = NULL;
  /* A CPU run streams its result into a sink from the pool's threads; a
   * cuda run too when the result is small enough that a fresh mapping's
   * prefault would cost more than writing from the pinned slots
   * (kind_gpu_sink). */
  double bytes = (double)tdtype_size(p->k.dt) *
                 (double)tshape_size(p->k.ndim, p->k.shape, INT64_MAX);
  int sink = b != B_CUDA || kind_gpu_sink(bytes);
  int rc = sink && ctx->result_stream
               ? ctx->result_stream(ctx, p->k.dt, p->k.ndim, p->k.shape, &out, e)
               : ctx->result_alloc(ctx, p->k.dt, p->k.ndim, p->k.shape, &out, e);
  if (rc) return rc;
  if (out->size == 0) {
    /* zero-size: nothing to evaluate on any backend */
  } else if (b == B_CUDA) {
    /* one GPU, or a big job over every lent one (lanes.h) */
    rc = map_lanes_gpu(p->k.x, (const tarray *const *)p->in,
                       (const char *const *)p->ids, out, ctx, e);
  } else {
    double t0 = t_now_ms();
    rc = map_run_cpu(p, out, ctx, b == B_SERIAL ? 1 : ctx->threads, e);
    ctx->t_compute += t_now_ms() - t0;
  }
  if (rc) {
    tarray_free(out);
    return rc;
  }
  *result = out;
  return 0;
}

/* float32 results get float32 tolerances (see tolerance_doc). */
static void map_tolerance(const void *plan, double *rtol, double *atol) {
  const map_plan *p = plan;
  int f32 = p->k.dt == T_F32;
  *rtol = f32 ? 1e-5 : 1e-12;
  *atol = f32 ? 1e-5 : 1e-12;
}

/* Why these tolerances (compare: |a - b| <= atol + rtol*|b|): serial and
 * cpu give identical bits (the same VM on the same elements). A GPU
 * differs by its libm (CUDA's sin/exp/pow are within 1-2 ulp; the CPU's
 * sin/cos/exp/log within 4, libmvec, the rest within 1) and by fused
 * multiply-adds, so well-conditioned expressions
 * agree to a few ulp; rtol leaves room for a chain of such operations, and
 * atol for results near zero that come from cancelling terms of order one
 * (x**2 + 2*x + 1 near x = -1). */
/* The VM's terms; a CPU run streams its result into a sink from the
 * pool's threads (map_run with result_stream), so its store overlaps the
 * compute. */
static const kind_cost map_cost = {
    .unit = "element-ops",
    .size_words = "elements",
    .size_from_ops = 1,
    .unit_ns = 1.0,
    .flags = KIND_COST_SINK,
    .cpu_s = kind_vm_cpu_s,
    .gpu_s = kind_vm_gpu_s,
};

const kind_ops kind_map_ops = {
    .name = "map",
    .rtol = 1e-12,
    .atol = 1e-12,
    .tolerance_doc =
        "float64: |a-b| <= 1e-12 + 1e-12*|b|; float32: |a-b| <= 1e-5 + "
        "1e-5*|b|. CPU backends agree bit for bit; GPU math functions and "
        "fused multiply-adds differ by a few ulp per operation (float64 ulp "
        "2.2e-16, float32 1.2e-7), and atol covers results near zero made "
        "by cancelling terms of order 1.",
    .check = map_check,
    .prepare = map_prepare,
    .check_keep = map_check_keep,
    .prepare_checked = map_prepare_checked,
    .checked_free = kexpr_checked_free,
    .run = map_run,
    .release = map_release,
    .tolerance = map_tolerance,
    .cost = &map_cost,
    .resident_result = 1,
};
