/* compute/kinds/exprkind.h — what the map and reduce kinds share: their params' "expr",
 * "inputs" and "dtype", checked at submit and resolved at run time, and
 * the CPU code of reductions (reduce_cpu.c).
 *
 * kexpr_check validates (no big allocation): the expression compiles
 * (errors on "params.expr" with the character position), every name it
 * uses is supplied ("params.expr: unknown name 'y' at 5"), every supplied
 * input is used ("params.inputs.z: not used by the expression"), each value
 * passes arrayval_check, and the shapes broadcast. kexpr_resolve then
 * builds the inputs in the job's dtype, in the expression's input order.
 *
 * Ownership: a kexpr owns its compiled expr; the json_t values it points
 * at belong to the params, which must outlive it.
 */
#ifndef TESSEL_KINDS_EXPRKIND_H
#define TESSEL_KINDS_EXPRKIND_H

#include <jansson.h>

#include "compute/array/arrayval.h"
#include "compute/expr/expr.h"
#include "compute/kinds/kinds.h"
#include "compute/kinds/ops.h"

typedef struct kexpr {
  expr *x;                   /* owned */
  tdtype dt;                 /* the job's dtype (params.dtype, else
                              * kexpr_infer_dtype of the inputs) */
  int nin;                   /* = expr_ninputs(x) */
  const json_t *val[EXPR_MAX_INPUTS];  /* params.inputs[name], by input */
  arrayval_info info[EXPR_MAX_INPUTS];
  int ndim;                  /* broadcast shape of the inputs */
  int64_t shape[T_MAXDIM];
  int64_t size;
  int64_t largest;           /* elements of the largest input */
} kexpr;

/* Check params (an object) for a kind whose other keys are `extra`
 * (NULL-terminated; "expr", "inputs", "dtype" are always allowed). When
 * default_single is set and "expr" is absent, the expression is the name of
 * the single input. On success k->x is owned by k (kexpr_free). */
int kexpr_check(const json_t *params, const tenv *env,
                const char *const *extra, int default_single, kexpr *k,
                terr *e);
void kexpr_free(kexpr *k);

/* The job's dtype when params.dtype is absent, as NumPy promotes the
 * inputs (checked infos, in input order): float32 when every input but
 * the bare numbers is float32, else float64 (API.md "Result dtypes"). */
tdtype kexpr_infer_dtype(int n, const arrayval_info *info);

/* Parse and compile once per job: a kind's check_keep hands its checked
 * kexpr on with kexpr_keep (moved to the heap into *checked, or freed when
 * checked is NULL); its prepare_checked gets it back with kexpr_take, which
 * checks params again only when there is nothing to take (a job queued
 * again after a restart). kexpr_checked_free is the kinds' checked_free. */
int kexpr_keep(kexpr *k, void **checked, terr *e);
int kexpr_take(const json_t *params, const tenv *env, const char *const *extra,
               int default_single, void *checked, kexpr *k, terr *e);
void kexpr_checked_free(void *checked);

/* Build the inputs (in[i] owned by the caller, tarray_free) and the ids of
 * uploaded inputs kept in their own dtype (ids[i] malloc'd, or NULL). On
 * failure nothing is left allocated. */
int kexpr_resolve(const kexpr *k, const tenv *env, tarray **in, char **ids,
                  terr *e);

/* Free what kexpr_resolve built (in[i], ids[i] for all EXPR_MAX_INPUTS
 * slots; NULL slots are fine) and k's expr: a plan's release. */
void kexpr_release(kexpr *k, tarray **in, char **ids);

/* The input side of a job_estimate: in_bytes (every input in the job's
 * dtype), mem_bytes (= in_bytes + est->out_bytes, so set out_bytes first),
 * ops_per_elem, work (= broadcast size * ops_per_elem), size (the
 * largest input) and the inputs list (where each input's bytes come from,
 * for the cost model). */
void kexpr_estimate(const kexpr *k, double ops_per_elem, job_estimate *est);

/* ---- reductions on the CPU (reduce_cpu.c) -------------------------------- */
typedef struct reduce_spec {
  const expr *x;
  const tarray *const *inputs;
  int ndim;                 /* broadcast shape of the inputs */
  const int64_t *shape;
  reduce_op op;
  int axis;                 /* -1: everything (out 0-d); else 0..ndim-1 */
  double ddof;              /* var/std */
} reduce_spec;

/* Shape of the result: `shape` without `axis` (0-d for -1). */
void reduce_out_shape(const reduce_spec *r, int *ndim, int64_t *shape);

/* Compute into out (allocated with reduce_out_shape's shape; float64 or
 * float32; argmin/argmax write indices). Work is split into chunks whose
 * boundaries do not depend on `width`, and partial results are combined in
 * chunk order, so serial and cpu give the same bits. Runs chunks with
 * pool_for(ctx->pool, width, ...) or, when ctx->pool is NULL or width is 1,
 * in order on the calling thread. Progress is counted per chunk into ctx;
 * a stop request ends between chunks (T_ECANCELED / T_ETIMEOUT). */
int reduce_cpu_run(const reduce_spec *r, tarray *out, job_ctx *ctx, int width,
                   terr *e);

/* Chunks the run will use (for the progress total). */
int64_t reduce_cpu_chunks(const reduce_spec *r);

#endif
