/* arrayval.h — the array value forms of API.md, checked and resolved.
 *
 *   3.5 | [[1,2],[3,4]]                            inline JSON
 *   {"array": "a_..."}                             an uploaded array
 *   {"result": "j_..."}                            a finished job's result
 *                                                  (chained jobs): its first
 *                                                  part, or with
 *                                                  "part": name that part
 *   {"file": "/abs/path.npy"}                      a .npy on this host, under
 *                                                  --local-dir (mapped, never
 *                                                  copied; compute/array/localfile.h)
 *   {"region": "r_...", "offset": 0, "dtype": "float64", "shape": [n]}
 *                                                  a range of a registered
 *                                                  region, read in place
 *                                                  (compute/array/region.h)
 *   {"range": {"start": 0, "stop": 10, "step": 1}} numpy.arange (float64)
 *   {"random": {"shape": [n], "dist": "uniform"|"normal", "low": 0,
 *               "high": 1, "mean": 0, "std": 1, "seed": 42}}
 *
 * Two steps, because a job is checked when it is submitted and run later
 * (possibly after a restart, from the stored params):
 *   arrayval_check    at submit: the form is valid, the shape is known,
 *                     the referenced array exists and belongs to the owner;
 *                     nothing big is built.
 *   arrayval_resolve  at run time: builds (or maps) the data. A {"file"}
 *                     is compared with its pin (env->local_pins) first,
 *                     and a run that kept its check's info compares the
 *                     built shape with it (arrayval_as_planned).
 * Random values come from a counter-based generator, so element i is the
 * same whatever the thread count or backend, and the GPU can generate the
 * same values. Exactly (all arithmetic mod 2^64, G = 0x9E3779B97F4A7C15,
 * mix = SplitMix64's output function):
 *   key  = mix(seed + G)                      (SplitMix64's first output)
 *   u(i) = (mix(key + (i + 1) * G) >> 11) * 2^-53          in [0, 1)
 *   uniform: low + (high - low) * u(i)
 *   normal:  Box-Muller over the pair p = i & ~1: r = sqrt(-2 ln(1 - u(p))),
 *            t = 2 pi u(p + 1); even i -> mean + std r cos t,
 *            odd i -> mean + std r sin t.
 * Defaults: dist "uniform", low 0, high 1, mean 0, std 1, seed 0.
 */
#ifndef TESSEL_ARRAY_ARRAYVAL_H
#define TESSEL_ARRAY_ARRAYVAL_H

#include <jansson.h>
#include <stdatomic.h>

#include "compute/array/tarray.h"
#include "util/err.h"

struct pool;

/* Where uploaded arrays come from: the API fills this with store lookups
 * that also check ownership (an array of another owner is "not found"). */
typedef struct tenv {
  void *ud;
  const char *owner; /* token name, or "" when the service is open */
  /* Shape and dtype of array `id`: 0, or T_ENOTFOUND. */
  int (*array_meta)(void *ud, const char *owner, const char *id, tdtype *dt,
                    int *ndim, int64_t *shape, terr *e);
  /* The array's data (mapped read-only from its file). Caller frees. */
  int (*array_load)(void *ud, const char *owner, const char *id, tarray **out,
                    terr *e);
  /* The same for job `id`'s result, part `part` (NULL: the first; a
   * result of several arrays, compute/array/parts.h): T_ENOTFOUND for an unknown
   * job (or another owner's), T_ECONFLICT (its message saying why) for a
   * job that has not succeeded, T_EINVAL (message only) for a part the
   * result does not have. NULL: the form is refused as not found. */
  int (*result_meta)(void *ud, const char *owner, const char *id,
                     const char *part, tdtype *dt, int *ndim, int64_t *shape,
                     terr *e);
  /* The result's data. An int64 result is given as stored (T_I64), though
   * result_meta says float64 (what a job reads of it): arrayval_resolve
   * converts it by chunks, stoppable like any other build. */
  int (*result_load)(void *ud, const char *owner, const char *id,
                     const char *part, tarray **out, terr *e);
  int64_t max_elems; /* cap on any one input's element count */
  /* The cap on one job's result in bytes (--max-result), for a kind whose
   * defaults follow it (a geodesic radius query's max_pairs); 0: not
   * known, the kind assumes the option's default. */
  int64_t max_result_bytes;
  /* The same-host files of {"file": path} (compute/array/localfile.h): the allowed
   * directories (NULL: --local-dir not given, the form is 403), and where
   * a run records what it mapped for the check at its end (NULL: not
   * recorded; the check at submit maps nothing). */
  const struct tlocal *local;
  struct tlocal_log *local_log;
  /* Each {"file"} input as the job was accepted (compute/array/localfile.h,
   * "Pins"): the check at submit records it, the run compares what it
   * opens and maps with it (T_ECONFLICT naming the input on any
   * difference). NULL: nothing recorded nor compared (a check that keeps
   * nothing, a test). */
  struct tlocal_pins *local_pins;
  /* A run's building of its inputs (arrayval_resolve, a geodesic plan):
   * the job's stop flag (job_ctx.stop: 0 go on, 2 timed out, any other
   * value stop), looked at between chunks of TENV_CHUNK elements, so that
   * a cancel during a long build (10^8 random values, a big conversion)
   * ends it within a chunk's time instead of after the whole build; and
   * the CPU pool with the width the job may use (1: the calling thread
   * only, a serial job's). All NULL / 0 at check (the HTTP thread builds
   * only small values then). */
  atomic_int *stop;
  struct pool *pool;
  int width;
} tenv;

/* Elements per chunk of a build: ~1-40 ms of one core's work (a normal
 * random value ~40 ns, a conversion ~1 ns), so a stop is seen well inside
 * the ~1 s a cancel may take. Even: normal values come in pairs. */
#define TENV_CHUNK ((int64_t)1 << 20)

/* The stop flag's value now (0 when there is none). */
static inline int tenv_stopped(const tenv *env) {
  return env && env->stop
             ? atomic_load_explicit(env->stop, memory_order_relaxed)
             : 0;
}
/* The error a build stopped by flag value st returns: T_ETIMEOUT for 2,
 * else T_ECANCELED, naming field. */
int tenv_stop_error(int st, const char *field, terr *e);
/* Call fn(arg, chunk, slot) for every chunk in [0, nchunks) on env's pool
 * at env's width (the calling thread alone without a pool or at width 1),
 * no chunk started once the stop flag is set. 0, or tenv_stop_error's
 * code when it stopped. */
typedef void (*tenv_chunk_fn)(void *arg, int64_t chunk, int slot);
int tenv_for(const tenv *env, int64_t nchunks, tenv_chunk_fn fn, void *arg,
             const char *field, terr *e);

typedef enum {
  AV_INLINE, AV_ARRAY, AV_RANGE, AV_RANDOM, AV_RESULT, AV_FILE, AV_REGION
} arrayval_form;

typedef struct arrayval_info {
  arrayval_form form;
  tdtype dtype; /* the source dtype (uploads keep theirs; others float64) */
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t size;
} arrayval_info;

/* Check value `v` found at `field` (e.g. "params.inputs.x"). */
int arrayval_check(const tenv *env, const json_t *v, const char *field,
                   arrayval_info *info, terr *e);
/* Build the array, converted to `dt`. Caller owns *out. */
int arrayval_resolve(const tenv *env, const json_t *v, const char *field,
                     tdtype dt, tarray **out, terr *e);

/* For a run that kept its check's info (a plan): 0 when the built array a
 * has the shape the check found, else T_ECONFLICT naming field (the value
 * changed since the job was accepted: nothing of a is to be read). */
int arrayval_as_planned(const arrayval_info *planned, const tarray *a,
                        const char *field, terr *e);

/* The generator behind {"random"}: element i of the stream `seed`. */
double arrayval_uniform(uint64_t seed, uint64_t i, double low, double high);
double arrayval_normal(uint64_t seed, uint64_t i, double mean, double std);

#endif
