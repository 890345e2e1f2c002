/* compute/sched/run_int.h — private to compute/sched/run.c, compare.c and run_output.c: a
 * run's state (srun: its result allocations, the parts and borrowed GPUs of the
 * current backend run, its timings and compare's record) and the few
 * calls compare (and run_output.c, the end of an output job) make into
 * run.c. Same thread rules as run.c: everything
 * here belongs to the worker that runs the job.
 */
#ifndef TESSEL_SCHED_RUN_INT_H
#define TESSEL_SCHED_RUN_INT_H

#include <math.h>

#include "compute/array/localfile.h"
#include "compute/array/parts.h"
#include "compute/array/region.h"
#include "compute/sched/sched_int.h"

#define SRUN_MAX_ALLOCS 8
/* JSON text for the store: compact, 9 significant digits (2.4, not
 * 2.3999999999999999). */
#define SRUN_JSON (JSON_COMPACT | JSON_REAL_PRECISION(9))
#define SRUN_PATH_MAX 4096
/* backend.used of a run over every GPU: "cuda:0+cuda:1+..." */
#define SRUN_USED_MAX 320
#define SRUN_STR_(x) #x
#define SRUN_STR(x) SRUN_STR_(x)

typedef struct salloc {
  tarray *a;                /* compared by address only (may be freed) */
  char path[SRUN_PATH_MAX]; /* temporary file; "" for heap or once kept */
  int out;                  /* the output file's temporary (r->out) */
} salloc;

/* A run's result: its arrays in order. One array (name[0] NULL) for most
 * kinds; a run that names parts (job_ctx.result_part) has n of them, a[0]
 * the array run returned. */
typedef struct sres {
  int n;
  const char *name[JOB_MAX_PARTS]; /* static strings (the kind's) */
  tarray *a[JOB_MAX_PARTS];
} sres;

typedef struct srun {
  sched *s;
  sjob *j;
  int device;
  /* The current run's (srun_backend): its parts as result_part named them,
   * a refused call (the run then fails, saying why), its own device (-1
   * off cuda) and the devices it borrowed (bit d). */
  sres named;
  char part_err[TERR_MSG_MAX];
  int run_device;
  _Atomic uint32_t borrowed; /* lanes of a spread run borrow from their threads */
  salloc allocs[SRUN_MAX_ALLOCS];
  int nallocs;
  tenv env;
  double t_prepare, t_h2d, t_compute, t_d2h, t_store;
  json_t *compare; /* [{"backend","ms",...}] */
  double max_abs_diff;
  double rtol, atol; /* compare's tolerance for this plan */
  tlocal_out out;    /* "output": {"file"}; out.dirfd -1 when none */
  int out_busy;      /* an allocation holds out's temporary */
  char out_region[REGION_ID_MAX]; /* "output": {"region"}; "" when none */
  int64_t out_offset;
  int out_region_busy; /* an allocation lies in the output region */
} srun;


/* A duration in ms, to the microsecond. */
static inline json_t *ms_json(double ms) {
  return json_real(round(ms * 1e3) / 1e3);
}

/* run_result.c: one backend's run of the plan into *res (srun_backend; *ms its
 * wall time); a sink result made readable (mapped from its file); every
 * array of a result freed with its temporary file. */
int srun_backend(srun *r, void *plan, tbackend b, int device, sres *res,
                 double *ms, terr *e);
int srun_readable(srun *r, tarray **a, terr *e);
/* run_result.c: a gang's one launch of n plans on device (see there). */
void srun_backend_gang(srun *const *rs, void *const *plans, int n,
                       int device, sres *res, int *rc, terr *e, double *ms);
void srun_drop_res(srun *r, sres *res);
/* run.c: the allocation of a result file (or the output's temporary)
 * holding a, or NULL (heap); a result freed with its temporary file. */
salloc *srun_find_alloc(srun *r, const tarray *a);
void srun_drop_result(srun *r, tarray *a);
/* run_output.c: an output job's result `a` (freed here) checked and placed
 * under the user's name by the node that still holds the job (see there).
 * 0; an error (the job fails with it, the name as it was); or
 * SRUN_OUTPUT_LOST: the job is another node's now, nothing was placed and
 * no end may be written. */
#define SRUN_OUTPUT_LOST (-2)
int srun_output(srun *r, tarray *a, terr *e);
/* run_output.c: a result into the job's output region (every array of res
 * freed here): every part's range checked and the region whole, else an
 * error and nothing written; a result of several arrays lists each part's
 * offset in *doc (parts filled). */
int srun_output_region(srun *r, sres *res, tparts *parts, char **doc,
                       terr *e);
/* compare.c: run the plan on serial, cpu and (when a GPU is healthy)
 * cuda, compare every run's result with serial's part by part, and keep
 * serial's in *result (empty on failure). */
int srun_compare(srun *r, void *plan, sres *result, terr *e);

/* run_result.c: the result arrays (allocation, parts, keeping). */
int srun_result_alloc(job_ctx *ctx, tdtype dt, int ndim,
                      const int64_t *shape, tarray **out, terr *e);
int srun_result_stream(job_ctx *ctx, tdtype dt, int ndim,
                       const int64_t *shape, tarray **out, terr *e);
int srun_keep_result(srun *r, tarray *a, const char *final, char **npy,
                     size_t *npy_len, terr *e);
void srun_unlink_parts(tparts *p);
int srun_keep_parts(srun *r, sres *res, tparts *parts, char **doc,
                    terr *e);
void srun_cleanup(srun *r);
int srun_result_part(job_ctx *ctx, int index, const char *name,
                     tarray *a, terr *e);

#endif
