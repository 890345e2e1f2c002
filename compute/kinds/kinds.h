/* kinds.h — what a job kind (map, reduce, matmul, geodesic) provides, and
 * the context a running job gets from the scheduler.
 *
 * A kind owns its whole contract in its kind_ops: its params (check,
 * prepare), its runs, its tolerance for compare, its result's layout and
 * parts, its part of the cost model (kind_cost: the unit of its work, its
 * compute terms on a CPU and a GPU, how its result is kept, its own
 * calibrated rates and how it measures them) and whether and how it splits
 * into row tiles that are joined again (kind_split). Code outside
 * compute/kinds/ asks these and never names a kind: the kinds are a table
 * (kind_find, kind_count, kind_at), to which kinds_register adds one more —
 * a test's own kind, registered by one line before anything runs.
 *
 * A job's params are checked at submit (`check`, cheap, no big allocation,
 * fills the estimate that the router and the 413 limit use) and prepared at
 * run time (`prepare`, which builds the inputs, possibly after a restart
 * from the stored params). What the check builds is not built twice: a
 * kind whose check parses or compiles something (map, reduce: the
 * expression) keeps it with check_keep and hands it to prepare_checked
 * (kind_check_keep / kind_prepare_checked below call whichever the kind
 * has). `run` computes on one backend; the scheduler may
 * call it several times on the same plan (backend "compare").
 *
 * Threads: check runs on an HTTP thread; prepare/run/release on a scheduler
 * worker. run may call pool_for on ctx->pool and must stop between chunks
 * once job_ctx_stopped(ctx) is true (returning T_ECANCELED or T_ETIMEOUT,
 * whichever job_ctx_stop_code says). prepare gets the same flag and the
 * pool in its tenv (env->stop, env->pool, env->width): what it builds by
 * arrayval_resolve and geod_plan_build_on stops between chunks already;
 * any other long loop of a prepare must look at tenv_stopped(env) too.
 */
#ifndef TESSEL_KINDS_KINDS_H
#define TESSEL_KINDS_KINDS_H

#include <jansson.h>
#include <stdatomic.h>
#include <string.h>

#include "compute/array/arrayval.h"
#include "compute/array/tarray.h"
#include "util/err.h"

typedef enum {
  B_AUTO = 0,
  B_SERIAL,
  B_CPU,
  B_CUDA,
  B_COMPARE,
  B__COUNT
} tbackend;
/* The backend names (compute/kinds/names.c): "auto", ...; -1 when unknown;
 * the list "auto, serial, cpu, cuda, compare" for "one of ..." messages. */
const char *tbackend_name(tbackend b);
int tbackend_parse(const char *s);
const char *tbackend_list(void);

struct pool;

/* One input as the cost model sees it (job_estimate.inputs): where its
 * bytes come from decides what reading them costs. */
#define JOB_EST_INPUTS 16
typedef struct job_est_input {
  int64_t bytes;     /* in the job's dtype */
  int from_file;     /* an upload or a job's result: read through a fresh
                        mapping of its file (page faults on a page-cache
                        file), not from heap memory */
  uint32_t resident; /* bit d: device d holds it already (its h2d is 0):
                        an upload or a chained job's result in the GPU's
                        resident cache when the job was checked
                        (gpu_resident_mask; it may be evicted before the
                        run, the estimate is then a little low) */
} job_est_input;

/* What the router and the limits need to know before anything runs. */
typedef struct job_estimate {
  tdtype out_dtype;
  int out_ndim;
  int64_t out_shape[T_MAXDIM];
  int64_t out_bytes;  /* result size */
  int64_t in_bytes;   /* bytes of input data to move (to a GPU) */
  int64_t mem_bytes;  /* peak host memory the job needs (inputs + result) */
  double work;        /* kind-specific unit: elements*ops, flops, pairs */
  double ops_per_elem;/* map/reduce: VM instructions per element */
  int64_t size;       /* the job's input size as people count it: elements of
                         the largest input (map/reduce), m*k*n (matmul), points
                         n (geodesic); shown per job and in performance charts */
  /* The inputs that in_bytes counts, when the kind says (map, reduce,
   * matmul); in_bytes beyond their sum is heap data (inline values, range,
   * random, a geodesic's points). Inputs past JOB_EST_INPUTS are not
   * listed (counted as heap). */
  int ninputs;
  job_est_input inputs[JOB_EST_INPUTS];
} job_estimate;

/* For a kind's check: list input `bytes` in est->inputs (from_file when
 * the value is an upload or a job's result); no-op once the list is full. */
static inline void job_estimate_input(job_estimate *est, int64_t bytes,
                                      int from_file) {
  if (est->ninputs >= JOB_EST_INPUTS || bytes <= 0) return;
  est->inputs[est->ninputs].bytes = bytes;
  est->inputs[est->ninputs].from_file = from_file != 0;
  est->inputs[est->ninputs].resident = 0;
  est->ninputs++;
}

#define JOB_MAX_PARTS 4

typedef struct job_ctx {
  const char *job_id;
  /* The run's result is the job's result (not one of compare's runs): a GPU
   * run may keep it on the device under job_id for a chained job to read
   * without a copy (compute/gpu/resident.cu). */
  int result_is_final;
  struct pool *pool;       /* CPU pool (run chunks with pool_for) */
  int threads;             /* width to use: 1 for serial, pool size for cpu */
  int device;              /* CUDA device index for B_CUDA */
  atomic_int *stop;        /* 0 run; 1 canceled; 2 timed out */
  _Atomic int64_t progress_done, progress_total;
  /* Phase times in ms, added to by run (prepare is timed by the scheduler). */
  double t_h2d, t_compute, t_d2h;
  /* Allocate the result array. The scheduler backs big results by a mapped
   * .npy file in the data dir (no extra copy to store them). The array is
   * owned by the caller of run once run returns it. */
  int (*result_alloc)(struct job_ctx *ctx, tdtype dt, int ndim,
                      const int64_t *shape, tarray **out, terr *e);
  /* Optional (NULL: call result_alloc): the result of a CPU run that
   * produces its output in contiguous runs (map). Small results are heap
   * arrays as from result_alloc; big ones are sinks (compute/array/codec/npyfile.c:
   * data NULL), which each pool thread fills straight into the result's
   * file with tarray_write from its own small buffer — no page faults on a
   * shared mapping, no full-size copy. A kind writes either kind of array
   * with tarray_write, or computes into out->data when it is not NULL. Same
   * thread and ownership rules as result_alloc. */
  int (*result_stream)(struct job_ctx *ctx, tdtype dt, int ndim,
                       const int64_t *shape, tarray **out, terr *e);
  /* Results of several named arrays (a geodesic knn: "distance" and
   * "index"; see compute/kinds/geodesic/query/query.h). NULL: this run cannot have them.
   * A run that has them returns the first part in *result as usual and,
   * before returning 0, names every part in order: index 0 with the array
   * it returns in *result, then 1, 2, ... with the others, each allocated
   * with result_alloc or result_stream. Parts 1.. belong to the scheduler
   * once result_part is called (0 or not); part 0 stays the run's *result.
   * name: a static string matching [a-z][a-z0-9_]{0,30}, unique in the
   * job. At most JOB_MAX_PARTS parts. Same thread rule as result_alloc.
   * A refused call (T_EINTERNAL, saying why) fails the run even when the
   * kind goes on. A run that names parts does not keep its result on the
   * GPU (result_is_final is for one-array results: map, matmul). */
  int (*result_part)(struct job_ctx *ctx, int index, const char *name,
                     tarray *a, terr *e);
  /* Other GPUs for one run (a job spread over the host's GPUs). ngpu: the
   * devices the process has (0 without CUDA). gpu_borrow(ctx, d): 0 when
   * device d is healthy, not the run's own and free now — it is then held
   * for this run, no other job runs on it — else -1 (busy, unhealthy, or
   * the hook is NULL: then the run uses its own device only). Every
   * borrowed device is given back with gpu_return before run returns (the
   * scheduler gives back, and logs, any the run kept). Both from the
   * run's thread (the lock is that thread's). */
  int ngpu;
  int (*gpu_borrow)(struct job_ctx *ctx, int dev);
  void (*gpu_return)(struct job_ctx *ctx, int dev);
  /* 1 when a queued single-GPU job waits for borrowed device dev: the run
   * gives it back before its next block (compute/kinds/mgpu.h; the policy
   * is compute/sched/README.md's "Lent GPUs"). NULL: never asked. A run
   * that borrows from other threads than its own (mgpu_run's lanes) calls
   * gpu_borrow, gpu_return and gpu_wanted for a device from the one
   * thread that borrowed it. */
  int (*gpu_wanted)(struct job_ctx *ctx, int dev);
  /* Set by a run spread over several GPUs (mgpu_describe): the devices
   * and the rows each wrote; the scheduler names them in the job's
   * backend.used and log. "" when the run used its own device only. */
  char spread[160];
  /* Set by a run that cut its rows over GPUs (mgpu_note): each lane's
   * device, the rows and blocks it wrote, whether it stopped on a device
   * error or gave its device back to a waiting job. The scheduler records
   * them with the job's end (backend.devices; backend.used names the
   * devices that wrote rows). n 0: the run said nothing (a cuda run then
   * records its own device alone). */
  struct {
    int n;
    struct {
      int dev, failed, taken_back;
      int64_t rows, blocks;
    } lane[32];
  } lanes;
  void *ud; /* the scheduler's */
  /* A tile of a split job (compute/sched/split.c): the run computes rows
   * [row0, row1) of the whole job's result only — exactly those rows, bit
   * for bit, every part cut the same way. row1 = 0: every row. Only kinds
   * that split (geodesic: a matrix, query knn or rowwise) read it; the
   * scheduler sets it for no other. */
  int64_t row0, row1;
  /* Set by run, recorded with the job by the scheduler (0 when unused):
   * geodesic "vincenty", the pairs whose iteration did not converge (NaN in
   * the result). */
  int64_t nonconverged;
} job_ctx;

static inline int job_ctx_stopped(const job_ctx *c) {
  return c->stop && atomic_load_explicit(c->stop, memory_order_relaxed) != 0;
}
static inline int job_ctx_stop_code(const job_ctx *c) {
  int s = c->stop ? atomic_load(c->stop) : 0;
  return s == 2 ? T_ETIMEOUT : T_ECANCELED;
}
static inline void job_ctx_progress(job_ctx *c, int64_t add) {
  atomic_fetch_add_explicit(&c->progress_done, add, memory_order_relaxed);
}

/* ---- a kind's part of the cost model (compute/sched/route/costmodel.h) -------- */

/* What the cost model measured of the machine, for a kind's terms. */
#define KIND_RATES 4 /* calibrated rates a kind may own */
typedef struct kind_machine {
  int threads;        /* the CPU pool's width the figures are for */
  double vm_1, vm_n;  /* expression VM instructions/s, one thread and all
                         `threads` together: the CPU's reference speed */
  double par_eff;     /* vm_n / (vm_1 * threads), at most 1: how well work
                         other than the VM's scales over the threads */
  double gpu_ops;     /* fused-kernel operations/s (0: no GPU measured) */
  double dev_bw;      /* device copy bytes/s, read + write */
  const double *rate; /* the kind's own rates, in kind_cost.rates' order */
} kind_machine;

/* One rate a kind measures itself: its key in the calibration file's
 * "rates" (unique among the kinds), and whether it is a GPU figure (then
 * measured and needed only where the machine has a GPU). */
typedef struct kind_rate {
  const char *name;
  int gpu;
} kind_rate;

/* Flags of kind_cost. */
enum {
  /* A CPU run writes its result into a sink in runs from the pool's
   * threads (job_ctx.result_stream: map): its store overlaps the compute. */
  KIND_COST_SINK = 1,
  /* Heap inputs are read inside the compute rate (matmul re-reads its
   * panels from cache): no separate read term for them. */
  KIND_COST_HEAP_IN_RATE = 2,
  /* On a GPU the copies in, the compute and the copies out follow each
   * other (matmul) instead of overlapping in pipelined chunks. */
  KIND_COST_GPU_PHASED = 4,
};

/* Rates as the cost model divides by them: a missing one is tiny, so that
 * what needs it costs "forever" rather than nothing. */
static inline double kind_rate_or_tiny(double x) {
  return x > 0 && x < 1e300 ? x : 1e-30;
}

typedef struct kind_cost {
  /* What job_estimate.work counts ("element-ops", "flops", "pairs") and
   * what job_estimate.size counts ("elements", "m*k*n", "points"), for the
   * router's reasons; with size_from_ops a job without a size is told in
   * work / ops_per_elem elements. */
  const char *unit, *size_words;
  int size_from_ops;
  /* The router's size rule (before calibration): ns a unit of work takes on
   * one core of a current x86 machine, an order of magnitude. */
  double unit_ns;
  unsigned flags; /* KIND_COST_* */
  /* Compute seconds on the CPU: one thread (all 0) or the pool's `threads`
   * (all 1). */
  double (*cpu_s)(const job_estimate *est, int all, const kind_machine *m);
  /* Seconds on the device; bytes: the input (resident ones included) and
   * result bytes it touches, out: the result's. */
  double (*gpu_s)(const job_estimate *est, double bytes, double out,
                  const kind_machine *m);
  /* The kind's own rates (at most KIND_RATES), and how it measures them:
   * rate[i] for rates[i], the GPU ones on device 0 when gpus > 0. Called
   * by the calibration (compute/sched/route/calibrate.c) on its thread; a rate
   * it cannot measure gets a nominal figure. NULL/0: none. */
  const kind_rate *rates;
  int nrates;
  void (*calibrate)(double *rate, int threads, int gpus);
} kind_cost;

/* The expression VM's terms (map, reduce; and any kind without a cost):
 * work is VM instructions, on a GPU fused-kernel operations or the bytes
 * at the device's copy rate, whichever takes longer (compute/kinds/cost.c). */
double kind_vm_cpu_s(const job_estimate *est, int all, const kind_machine *m);
double kind_vm_gpu_s(const job_estimate *est, double bytes, double out,
                     const kind_machine *m);
extern const kind_cost kind_cost_vm;

/* Whether a cuda run of a KIND_COST_SINK kind (map) writes a result of
 * `bytes` into a sink (pwrite from the pinned slots, one writer) rather
 * than a fresh shared mapping (prefaulted, then filled by the gang): below
 * KIND_GPU_SINK_MAX the mapping's prefault is dearer than the copies it
 * saves (issue 25; tests/bench/results/h200-2026-11-28-pipeline.md).
 * TESSEL_GPU_SINK_MAX (bytes) overrides it, for measuring. cost.c. */
#define KIND_GPU_SINK_MAX ((double)(256 << 20))
int kind_gpu_sink(double bytes);

/* ---- splitting into row tiles (compute/sched/split.c) -------------------- */

/* How the tiles' part 0 joins into the job's result (every other part is
 * always their rows concatenated). */
typedef enum {
  KIND_JOIN_ROWS = 0, /* the tiles' rows concatenated in tile order */
  KIND_JOIN_SQUARE,   /* a symmetric n x n matrix: each tile computed its
                         rows' upper part, mirrored into the whole */
  KIND_JOIN_CONDENSED /* the upper triangle condensed: the tiles' pieces
                         concatenated, their lengths checked */
} kind_join;

/* What a kind says of a job that can run as tiles: tile i of T computes
 * rows [r0, r1) of est.size rows (job_ctx.row0/row1), cut by equal rows or,
 * with tri, by equal cells of an upper triangle (row i has size - i). */
typedef struct kind_split {
  double cols;     /* cells a row costs: size x cols is what the service's
                      split threshold (split_min_pairs) is compared with */
  int tri;
  kind_join join;
  int cpu_only;    /* a band runs on serial or cpu only (the kind's CUDA
                      code takes no band): other backends do not split */
} kind_split;

typedef struct kind_ops {
  const char *name; /* [a-z][a-z0-9_]*, unique in the table */
  /* Tolerance for "compare": results agree when, elementwise,
   * |a - b| <= atol + rtol * |b|. tolerance_doc says it in words. */
  double rtol, atol;
  const char *tolerance_doc;
  int (*check)(const json_t *params, const tenv *env, job_estimate *est,
               terr *e);
  int (*prepare)(const json_t *params, const tenv *env, void **plan,
                 terr *e);
  /* b is B_SERIAL, B_CPU or B_CUDA. */
  int (*run)(void *plan, tbackend b, job_ctx *ctx, tarray **result, terr *e);
  void (*release)(void *plan);
  /* Optional (NULL: use rtol/atol above): the tolerance for this plan's
   * results when it depends on the data or the dtype (matmul: float32 or
   * float64, and the size of |a|.|b|, which a fixed rtol cannot follow where
   * sums cancel). Called on the worker after prepare; same rule
   * |a - b| <= atol + rtol * |b|. */
  void (*tolerance)(const void *plan, double *rtol, double *atol);
  /* Optional (NULL: the result has one layout): the layout of the stored
   * result of a job with these (checked, stored) params, when it may be
   * sent in another: "square" or "condensed" (a symmetric matrix; see
   * compute/array/layout.h). NULL when this job's result cannot change layout. A
   * static string. Any thread. */
  const char *(*result_layout)(const json_t *params);
  /* Optional (all three or none): check that keeps what it built in
   * *checked (NULL checked: keep nothing), and prepare that takes it
   * (checked NULL: check again). A kept value not handed to
   * prepare_checked is freed with checked_free (NULL is fine). Same
   * threads as check and prepare; ownership passes with the pointer. */
  int (*check_keep)(const json_t *params, const tenv *env, job_estimate *est,
                    void **checked, terr *e);
  int (*prepare_checked)(const json_t *params, const tenv *env, void *checked,
                         void **plan, terr *e);
  void (*checked_free)(void *checked);
  /* Optional (NULL: kind_cost_vm, work as VM instructions): the kind's
   * part of the cost model. */
  const kind_cost *cost;
  /* Optional (NULL: never splits): 1 with *sp filled when a job with these
   * checked params and estimate can run as row tiles, each computing
   * exactly its rows of every part bit for bit as the whole job would;
   * 0 when it cannot (its parts are not rows). tri and join must follow
   * from params alone: the split service asks again with est zeroed when
   * it joins. Any thread. */
  int (*split)(const json_t *params, const job_estimate *est, kind_split *sp);
  /* The names of the result parts its runs may give (job_ctx.result_part),
   * NULL-terminated; NULL: one array always. For documents and tests; a
   * stored job lists the parts it has, in its order. */
  const char *const *parts;
  /* 1: a GPU run of a one-array result may keep it on the device under the
   * job's id for a chained job to read (job_ctx.result_is_final; the
   * kind's CUDA driver keeps it, compute/gpu/resident.cu); the end of the
   * job drops it. */
  int resident_result;
  /* Optional (all three or none; issue 26): tiny cuda jobs that share one
   * GPU launch — a gang. gang_max: the largest job (est.size, elements)
   * a GPU worker takes together with the queued jobs of the same kind
   * behind it (compute/sched/README.md, "Gangs"). gang_key: 1, with key
   * (NUL-terminated, at most cap bytes) filled, when this prepared plan's
   * cuda run can share a launch with every other plan of the same key; 0
   * when it runs alone. gang_run: the cuda run of n >= 2 plans of one key
   * on ctx[0]->device, which the caller holds: results[i] allocated with
   * ctx[i]->result_alloc and filled, rc[i] and e[i] job i's own end (a
   * member that fails fails alone), each ctx's phase times its share of
   * the launch's. Each job's result is bit for bit its run alone on cuda
   * (tests/gpu/test_gang.c). A cancel of one member stops no other. */
  int64_t gang_max;
  int (*gang_key)(const void *plan, char *key, size_t cap);
  void (*gang_run)(void *const *plans, int n, job_ctx *const *ctx,
                   tarray **results, int *rc, terr *e);
} kind_ops;

/* Check, keeping what the check built when the kind can (*checked NULL
 * otherwise). */
static inline int kind_check_keep(const kind_ops *k, const json_t *params,
                                  const tenv *env, job_estimate *est,
                                  void **checked, terr *e) {
  *checked = NULL;
  return k->check_keep ? k->check_keep(params, env, est, checked, e)
                       : k->check(params, env, est, e);
}
/* Prepare with what kind_check_keep kept (taken, even on failure). */
static inline int kind_prepare_checked(const kind_ops *k, const json_t *params,
                                       const tenv *env, void *checked,
                                       void **plan, terr *e) {
  if (k->prepare_checked) return k->prepare_checked(params, env, checked, plan, e);
  return k->prepare(params, env, plan, e);
}
static inline void kind_checked_free(const kind_ops *k, void *checked) {
  if (checked && k && k->checked_free) k->checked_free(checked);
}

/* The table (compute/kinds/kinds.c): the built-in kinds, then any added
 * by kinds_register. kind_find: NULL when the name is unknown. kind_at(i)
 * for i in [0, kind_count()). kind_slot: k's index in the table, -1 when
 * it is not in it (a test's kind handed to the scheduler only by its
 * kind_lookup): the cost model keeps per-kind figures by it. kind_list:
 * "map, reduce, matmul, geodesic" for "one of ..." messages (a static
 * string of the table's). Any thread, once registration is over. */
#define KIND_MAX 16
const kind_ops *kind_find(const char *name);
int kind_count(void);
const kind_ops *kind_at(int i);
int kind_slot(const kind_ops *k);
const char *kind_list(void);
/* Add a kind to the table (a test's: one line before anything runs; not
 * thread-safe, call it before the scheduler, the router or the server
 * start). 0, or -1 when the table is full, the name is taken or invalid,
 * or its cost owns a rate another kind owns. k stays the caller's and must
 * outlive every use. */
int kinds_register(const kind_ops *k);
/* k's cost, kind_cost_vm when it has none (k may be NULL). */
static inline const kind_cost *kind_cost_of(const kind_ops *k) {
  return k && k->cost ? k->cost : &kind_cost_vm;
}

/* For a kind's check: the first key of the object params that is not in
 * the NULL-terminated list keys, or NULL when all are known. The caller
 * words the error (each kind names its field its own way). The string
 * belongs to params. Inline so a kind need not link the kind table. */
static inline const char *kind_params_unknown_key(const json_t *params,
                                                  const char *const *keys) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)params, key, v) {
    int i = 0;
    while (keys[i] && strcmp(key, keys[i]) != 0) i++;
    if (!keys[i]) return key;
  }
  return NULL;
}

/* For the end of a kind's check, once est->out_dtype/out_ndim/out_shape are
 * set: the result is an array like any other, so its shape must pass
 * tshape_extent and its element count env->max_elems (--max-elements;
 * T_ETOOLARGE, 413, field "params"): a reduce of a (0, 2^31) upload over
 * axis 0 holds nothing in, but would give 2^31 elements out. Sets
 * est->out_bytes (which then cannot overflow: see T_EXTENT_MAX). Inline
 * for the same reason as above. */
static inline int kind_result_check(const tenv *env, job_estimate *est,
                                    terr *e) {
  char sh[T_MAXDIM * 22];
  int64_t n = tshape_size(est->out_ndim, est->out_shape, INT64_MAX);
  if (n < 0)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "the result's shape %s is too big",
                    tshape_str(est->out_ndim, est->out_shape, sh, sizeof sh));
  if (env && env->max_elems > 0 && n > env->max_elems)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "the result would have %lld elements (shape %s); the "
                    "limit on any array is %lld", (long long)n,
                    tshape_str(est->out_ndim, est->out_shape, sh, sizeof sh),
                    (long long)env->max_elems);
  est->out_bytes = n * (int64_t)tdtype_size(est->out_dtype);
  return 0;
}

extern const kind_ops kind_map_ops, kind_reduce_ops, kind_matmul_ops,
    kind_geodesic_ops;

#endif
