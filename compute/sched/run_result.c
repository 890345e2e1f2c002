/* compute/sched/run_result.c — a run's result arrays (the worker loop's,
 * run.c): the memory or file each is written into (job_ctx.result_alloc /
 * result_stream: heap, a mapped file or a sink under a temporary name),
 * the named parts of a result of several arrays (job_ctx.result_part),
 * and keeping a result once the run succeeded (an output region's first
 * big array allocated in the region itself, compute/array/region.h) (in the store row, or its
 * file renamed into place; the other parts' files and their document).
 * What a run left behind is freed or unlinked by srun_cleanup and
 * srun_drop_res. And one backend's run of the plan (srun_backend: the
 * job_ctx set up, the GPUs the run borrows given back, the result gathered
 * into its parts, the phases timed), which run.c calls once and compare.c
 * once per backend; it calls neither (no file circle); and a gang's one
 * launch of several jobs' plans (srun_backend_gang), which run.c calls for
 * a gang. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/array/localfile.h"
#include "compute/array/parts.h"
#include "compute/array/store_source.h"
#include "compute/sched/route/router.h"
#include "util/sigbus.h"

#include "compute/sched/run_int.h"

/* ---- result arrays --------------------------------------------------------- */
/* A result array. result_alloc's: heap up to inline_max bytes, else a
 * mapped file under a temporary name. result_stream's: heap when the
 * result will be kept in the store row (its .npy fits in row_max), else a
 * sink under a temporary name, whatever its size: a sink beat heap +
 * npy_write from 8 MB up (1.5x at 1e6 and 2e6 float64 on the 2-core VM,
 * bench_sink) and matched it at 800 KB, and it never holds the result in
 * memory. */
static int srun_result_new(job_ctx *ctx, tdtype dt, int ndim,
                           const int64_t *shape, int sink, tarray **out,
                           terr *e) {
  srun *r = ctx->ud;
  *out = NULL;
  int64_t n = tshape_size(ndim, shape, INT64_MAX);
  if (n < 0 || n > INT64_MAX / 8)
    return terr_set(e, T_ETOOLARGE, "", -1, "result shape is too large");
  if (r->nallocs == SRUN_MAX_ALLOCS)
    return terr_set(e, T_EINTERNAL, "", -1, "too many result allocations");
  salloc *al = &r->allocs[r->nallocs];
  al->a = NULL; /* srun_init leaves the slots as they were */
  al->out = 0;
  al->path[0] = 0;
  int64_t bytes = n * (int64_t)tdtype_size(dt);
  int heap = sink ? r->s->row_max > 0 && bytes + NPY_HEADER_MAX <= r->s->row_max
                  : bytes <= r->s->inline_max;
  terr re;
  if (!heap && r->out_region[0] && !r->out_region_busy &&
      region_result(r->j->owner, r->out_region, r->out_offset, dt, ndim,
                    shape, "output", &al->a, &re) == T_OK) {
    /* The first big result array lies in the job's output region: the
     * kind (or the GPU's copy back) writes it in place, a map's threads
     * each their own chunks (a memory array, as a heap result: never a
     * sink here, whose file would be copied in); srun_output_region
     * then checks it and copies nothing. A range that does not fit:
     * allocated as usual, the error said at the end. */
    r->out_region_busy = 1;
  } else if (heap) {
    al->a = tarray_new(dt, ndim, shape);
    if (!al->a)
      return terr_set(e, T_ENOMEM, "", -1, "no memory for a result of %lld bytes",
                      (long long)bytes);
  } else if (r->out.dirfd >= 0 && !r->out_busy) {
    int rc = tlocal_out_create(&r->out, dt, ndim, shape, sink, &al->a, e);
    if (rc) return rc;
    al->out = r->out_busy = 1;
  } else {
    snprintf(al->path, sizeof al->path, "%s/%s.npy.tmp%u", r->s->results_dir,
             r->j->stem, atomic_fetch_add(&r->s->tmp_counter, 1));
    int rc = sink ? tarray_create_npy_sink(al->path, dt, ndim, shape, &al->a, e)
                  : tarray_create_npy(al->path, dt, ndim, shape, &al->a, e);
    if (rc) {
      unlink(al->path);
      al->path[0] = 0;
      return rc;
    }
  }
  r->nallocs++;
  *out = al->a;
  return T_OK;
}

int srun_result_alloc(job_ctx *ctx, tdtype dt, int ndim,
                      const int64_t *shape, tarray **out, terr *e) {
  return srun_result_new(ctx, dt, ndim, shape, 0, out, e);
}

int srun_result_stream(job_ctx *ctx, tdtype dt, int ndim,
                       const int64_t *shape, tarray **out, terr *e) {
  return srun_result_new(ctx, dt, ndim, shape, 1, out, e);
}

salloc *srun_find_alloc(srun *r, const tarray *a) {
  for (int i = 0; i < r->nallocs; i++)
    if (r->allocs[i].a == a && (r->allocs[i].path[0] || r->allocs[i].out))
      return &r->allocs[i];
  return NULL;
}

/* Remove an allocation's temporary file and forget it. */
static void srun_forget(srun *r, salloc *al) {
  if (al->out) {
    tlocal_out_discard(&r->out);
    al->out = r->out_busy = 0;
  } else if (al->path[0]) {
    unlink(al->path);
  }
  al->path[0] = 0;
}

/* Compare reads results: a sink's elements are in its file only, so *a
 * (complete: run returned it) becomes a mapping of that file, listed in
 * its place. A failure drops the result. */
int srun_readable(srun *r, tarray **a, terr *e) {
  if (!(*a)->sink) return T_OK;
  salloc *al = srun_find_alloc(r, *a);
  if (!al)
    return terr_set(e, T_EINTERNAL, "", -1, "a result file has no record");
  tarray *m = NULL;
  tarray_free(*a); /* closes the file; the page cache has every slice */
  *a = NULL;
  int rc = al->out ? tlocal_out_map(&r->out, &m, e)
                   : tarray_map_npy(al->path, &m, e);
  if (rc) {
    srun_forget(r, al);
    return rc;
  }
  al->a = *a = m;
  return T_OK;
}

/* Free a result that is not kept (and its temporary file). */
void srun_drop_result(srun *r, tarray *a) {
  if (!a) return;
  salloc *al = srun_find_alloc(r, a);
  tarray_free(a);
  if (al) srun_forget(r, al);
}

/* Keep the result `a` (and free it): as the .npy bytes *npy (new heap
 * buffer, *npy_len bytes) for the store row when they fit in row_max
 * (npy non-NULL: part 0 only), else as the file `final` (<results>/<id>.npy,
 * or <results>/<id>.<name>.npy for a later part). */
int srun_keep_result(srun *r, tarray *a, const char *final, char **npy,
                     size_t *npy_len, terr *e) {
  salloc *al = srun_find_alloc(r, a);
  int rc = T_OK;
  if (npy) {
    *npy = NULL;
    *npy_len = 0;
  }
  if (npy && !al && r->s->row_max > 0 &&
      a->size * (int64_t)tdtype_size(a->dtype) + NPY_HEADER_MAX <=
          r->s->row_max) {
    rc = npy_to_buffer(a, npy, npy_len, e);
    tarray_free(a);
    return rc;
  }
  if (al) { /* mapped or a sink: the data is already in the file */
    int err = tarray_sink_close(a); /* a deferred write error: not whole */
    tarray_free_behind(a); /* a big mapping's unmap off the job's time */
    if (err) {
      rc = terr_set(e, T_EIO, "", -1, "cannot write the result: %s",
                    strerror(err));
      rc = terr_nospace(e, rc, err);
      unlink(al->path);
      al->path[0] = 0;
      return rc;
    }
    if (rename(al->path, final) != 0)
      rc = terr_set(e, T_EIO, "", -1, "cannot rename the result to %s: %s",
                    final, strerror(errno));
    else
      al->path[0] = 0;
    return rc;
  }
  char tmp[SRUN_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/%s.npy.tmp%u", r->s->results_dir, r->j->stem,
           atomic_fetch_add(&r->s->tmp_counter, 1));
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int err = errno;
    rc = terr_set(e, T_EIO, "", -1, "cannot create %s: %s", tmp,
                  strerror(err));
    rc = terr_nospace(e, rc, err);
    goto done;
  }
  rc = npy_write(f, a, e);
  int err = rc ? errno : 0;
  if (fclose(f) != 0 && rc == T_OK) {
    err = errno;
    rc = terr_set(e, T_EIO, "", -1, "cannot write %s: %s", tmp, strerror(err));
  }
  rc = terr_nospace(e, rc, err); /* a full disk: "resource_exhausted" */
  if (rc == T_OK && rename(tmp, final) != 0)
    rc = terr_set(e, T_EIO, "", -1, "cannot rename the result to %s: %s",
                  final, strerror(errno));
  if (rc) unlink(tmp);
done:
  tarray_free(a);
  return rc;
}

/* Remove the files of parts 1.. (a job that failed after keeping them, or
 * whose end did not commit) and forget them. */
void srun_unlink_parts(tparts *p) {
  for (int i = 1; i < p->n; i++)
    if (p->p[i].path) unlink(p->p[i].path);
  tparts_clear(p);
}

/* Keep parts 1.. of res (freed here, kept or not) as
 * <results>/<id>.<name>.npy, each as srun_keep_result keeps a file (its
 * temporary renamed when complete), and list every part in *parts (their
 * paths; parts->p[0]'s figures filled by the caller, which keeps part 0)
 * and *doc (the store's text, new heap string). A failure removes the
 * part files already kept. */
int srun_keep_parts(srun *r, sres *res, tparts *parts, char **doc,
                    terr *e) {
  int rc = T_OK, i;
  *doc = NULL;
  for (i = 0; i < res->n; i++) {
    const tarray *a = i == 0 ? NULL : res->a[i];
    tpart *t = &parts->p[i];
    snprintf(t->name, sizeof t->name, "%s", res->name[i]);
    parts->n = i + 1;
    if (i == 0) continue; /* kept by the caller: its figures are the job's */
    t->dtype = a->dtype;
    t->ndim = a->ndim;
    memcpy(t->shape, a->shape, sizeof t->shape);
    t->bytes = a->size * (int64_t)tdtype_size(a->dtype);
    size_t len = strlen(r->s->results_dir) + strlen(r->j->stem) + strlen(t->name) + 8;
    if (!(t->path = malloc(len))) {
      rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
      break;
    }
    snprintf(t->path, len, "%s/%s.%s.npy", r->s->results_dir, r->j->stem, t->name);
    rc = srun_keep_result(r, res->a[i], t->path, NULL, NULL, e);
    res->a[i] = NULL;
    if (rc) {
      free(t->path);
      t->path = NULL;
      break;
    }
  }
  for (int k = i + 1; k < res->n; k++) srun_drop_result(r, res->a[k]);
  if (rc == T_OK && !(*doc = tparts_text(parts)))
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
  if (rc) srun_unlink_parts(parts);
  return rc;
}

/* Remove every temporary file still listed (failed or dropped runs), the
 * output's included, and close the output directory. */
void srun_cleanup(srun *r) {
  for (int i = 0; i < r->nallocs; i++)
    if (r->allocs[i].path[0]) unlink(r->allocs[i].path);
  r->nallocs = 0;
  tlocal_out_close(&r->out);
  r->out_busy = 0;
}

/* ---- named parts and borrowed GPUs (job_ctx hooks) ---------------------------- */
/* Free every array of res (and its temporary file); res is emptied. */
void srun_drop_res(srun *r, sres *res) {
  for (int i = 0; i < res->n; i++) srun_drop_result(r, res->a[i]);
  memset(res, 0, sizeof *res);
}

/* job_ctx.result_part: record part `index`. A refused call (out of
 * order, a bad or repeated name, too many) fails the run with the reason;
 * a part 1.. it hands over is freed here then (it is the scheduler's). */
int srun_result_part(job_ctx *ctx, int index, const char *name,
                     tarray *a, terr *e) {
  srun *r = ctx->ud;
  sres *p = &r->named;
  const char *why = NULL;
  int known = 0; /* a is already recorded: never freed twice */
  for (int k = 0; a && k < p->n; k++) known |= p->a[k] == a;
  if (index < 0 || index >= JOB_MAX_PARTS)
    why = "a job has at most " SRUN_STR(JOB_MAX_PARTS) " parts";
  else if (index != p->n) why = "parts are named in order, 0 first";
  else if (!a || known) why = "no array, or one already named";
  else if (!tpart_name_valid(name)) why = "the name is not [a-z][a-z0-9_]{0,30}";
  for (int k = 0; !why && k < p->n; k++)
    if (strcmp(p->name[k], name) == 0) why = "the name is taken";
  if (why) {
    if (index > 0 && a && !known) srun_drop_result(r, a);
    if (!r->part_err[0])
      snprintf(r->part_err, sizeof r->part_err,
               "kind %s: result part %d ('%.40s'): %s", r->j->k->name, index,
               name ? name : "", why);
    return terr_set(e, T_EINTERNAL, "", -1, "%s", r->part_err);
  }
  p->name[index] = name;
  p->a[index] = a;
  p->n++;
  return T_OK;
}

/* ---- one backend's run of the plan (run.c once, compare.c per backend) ---- */

/* job_ctx.gpu_borrow: device dev held for this run when it is another
 * healthy device that nobody holds now and no GPU worker waits for (a
 * non-blocking try of its lock: never waits, so two runs borrowing each
 * other's devices cannot deadlock). Runs on the thread that will use the
 * device (the run's, or a lane of a spread run: compute/kinds/mgpu.h),
 * which then owns the lock; r->borrowed is atomic for those threads. */
static int srun_gpu_borrow(job_ctx *ctx, int dev) {
  srun *r = ctx->ud;
  sched *s = r->s;
  if (dev < 0 || dev >= s->ngpu || dev >= 32 || dev == r->run_device ||
      (atomic_load(&r->borrowed) >> dev & 1u) || !s->gpu.trylock ||
      !s->gpu.healthy(dev) || atomic_load(&s->gpu_want[dev]) > 0)
    return -1;
  if (s->gpu.trylock(dev) != 0) return -1;
  atomic_fetch_or(&r->borrowed, 1u << dev);
  return 0;
}

static void srun_gpu_return(job_ctx *ctx, int dev) {
  srun *r = ctx->ud;
  if (dev < 0 || dev >= 32 || !(atomic_load(&r->borrowed) >> dev & 1u))
    return;
  atomic_fetch_and(&r->borrowed, ~(1u << dev));
  r->s->gpu.unlock(dev);
}

/* job_ctx.gpu_wanted: a GPU worker has taken a job for dev and waits for
 * its lock (srun_backend counts it in gpu_want). */
static int srun_gpu_wanted(job_ctx *ctx, int dev) {
  srun *r = ctx->ud;
  return dev >= 0 && dev < 32 && atomic_load(&r->s->gpu_want[dev]) > 0;
}

/* After a run: give back what it kept of the borrowed devices. */
static void srun_return_borrowed(srun *r, job_ctx *ctx) {
  for (int d = 0; atomic_load(&r->borrowed) && d < 32; d++)
    if (atomic_load(&r->borrowed) >> d & 1u) {
      log_warn("scheduler: job %s: kind %s kept borrowed GPU %d after its "
               "run; given back", r->j->id, r->j->k->name, d);
      srun_gpu_return(ctx, d);
    }
}

/* ---- one backend ------------------------------------------------------------ */
static void ctx_setup(srun *r, job_ctx *ctx, tbackend b, int device) {
  ctx->job_id = r->j->id;
  ctx->result_is_final = r->j->backend != B_COMPARE;
  ctx->pool = r->s->pool;
  ctx->threads = b == B_SERIAL ? 1 : pool_threads(r->s->pool);
  ctx->device = device;
  ctx->stop = &r->j->stop;
  ctx->t_h2d = ctx->t_compute = ctx->t_d2h = 0;
  ctx->result_alloc = srun_result_alloc;
  ctx->result_stream = srun_result_stream;
  ctx->result_part = srun_result_part;
  ctx->ngpu = r->s->ngpu;
  ctx->gpu_borrow = r->s->gpu.trylock ? srun_gpu_borrow : NULL;
  ctx->gpu_return = r->s->gpu.trylock ? srun_gpu_return : NULL;
  ctx->gpu_wanted = r->s->gpu.trylock ? srun_gpu_wanted : NULL;
  ctx->spread[0] = 0;
  ctx->lanes.n = 0;
  ctx->ud = r;
  ctx->row0 = ctx->row1 = 0;
  if (r->j->tiles > 0) /* a tile of a split job: its band of the rows */
    sched_split_rows(r->j->est.size, r->j->tile, r->j->tiles,
                     sched_split_tri(r->j->k, r->j->params), &ctx->row0,
                     &ctx->row1);
  memset(&r->named, 0, sizeof r->named);
  r->part_err[0] = 0;
  r->run_device = b == B_CUDA ? device : -1;
  atomic_store(&r->borrowed, 0);
}

/* The run's *result and the parts it named, checked, into res (emptied
 * and everything freed on failure). */
static int srun_collect(srun *r, int rc, tarray *result, sres *res, terr *e) {
  sres *p = &r->named;
  memset(res, 0, sizeof *res);
  if (rc == T_OK && r->part_err[0]) /* the kind went on after a refusal */
    rc = terr_set(e, T_EINTERNAL, "", -1, "%s", r->part_err);
  else if (rc == T_OK && !result)
    rc = terr_set(e, T_EINTERNAL, "", -1, "kind %s returned no result",
                  r->j->k->name);
  else if (rc == T_OK && p->n > 0 && p->a[0] != result)
    rc = terr_set(e, T_EINTERNAL, "", -1,
                  "kind %s: result part 0 is not the array its run returned",
                  r->j->k->name);
  for (int i = 1; rc == T_OK && i < p->n; i++)
    if (p->a[i] == result)
      rc = terr_set(e, T_EINTERNAL, "", -1,
                    "kind %s: result part %d is the array its run returned",
                    r->j->k->name, i);
  if (rc) {
    srun_drop_result(r, result); /* a kind should not return one, but */
    for (int i = 1; i < p->n; i++)
      if (p->a[i] != result) srun_drop_result(r, p->a[i]);
    memset(p, 0, sizeof *p);
    return rc;
  }
  if (p->n > 1) *res = *p;
  else res->n = 1; /* one array, even when the kind named it */
  res->a[0] = result;
  memset(p, 0, sizeof *p);
  return T_OK;
}

/* Run the plan on b; adds the phases to r; *ms gets the wall time. */
int srun_backend(srun *r, void *plan, tbackend b, int device,
                        sres *res, double *ms, terr *e) {
  job_ctx *ctx = &r->j->ctx;
  ctx_setup(r, ctx, b, device);
  tarray *result = NULL;
  /* Never held across a kind callback or gpu_lock (sched_int.h). */
  SCHED_ASSERT_UNLOCKED(r->s);
  if (b == B_CUDA) { /* a spread run that borrowed it gives it back */
    atomic_fetch_add(&r->s->gpu_want[device], 1);
    r->s->gpu.lock(device);
    atomic_fetch_sub(&r->s->gpu_want[device], 1);
  }
  double t0 = t_now_ms();
  int rc = r->j->k->run(plan, b, ctx, &result, e);
  *ms = t_now_ms() - t0;
  srun_return_borrowed(r, ctx); /* every one, even after a failure */
  if (b == B_CUDA) {
    r->s->gpu.unlock(device);
    r->s->gpu.note_result(device, rc); /* once per cuda run */
  }
  rc = srun_collect(r, rc, result, res, e);
  /* Recorded timings correct the router's cost model, which estimates
   * submit -> stored: a single run is observed once its result is stored
   * (srun), each backend a compare runs here with the prepare it would
   * have paid (its result is not stored: a small error in the store term,
   * which the next single run corrects). */
  if (rc == T_OK && r->j->have_est && r->j->backend == B_COMPARE)
    router_observe(r->j->k, &r->j->est, b, r->t_prepare + *ms);
  /* A run that gave no result (canceled, timed out, failed) is all
   * compute but its copies: what a kind times is its loop, and the rest of
   * its return (freeing a big result mapping: ~0.1 s per 2 GB) would
   * otherwise belong to no phase. */
  double phases = ctx->t_h2d + ctx->t_d2h;
  r->t_h2d += ctx->t_h2d;
  r->t_d2h += ctx->t_d2h;
  r->t_compute += rc == T_OK && ctx->t_compute > 0
                      ? ctx->t_compute
                      : (*ms > phases ? *ms - phases : 0);
  return rc;
}

/* A gang's launch (kind_ops.gang_run; compute/sched/README.md, "Gangs"):
 * the n runs' plans on their one device, under its lock once; each run's
 * result collected into its res[i] and its own rc[i]/e[i]; each run's
 * phases its share. *ms: the launch's wall time. */
void srun_backend_gang(srun *const *rs, void *const *plans, int n,
                       int device, sres *res, int *rc, terr *e, double *ms) {
  sched *s = rs[0]->s;
  job_ctx **ctx = calloc((size_t)n, sizeof *ctx);
  tarray **out = calloc((size_t)n, sizeof *out);
  if (!ctx || !out) {
    for (int i = 0; i < n; i++) {
      rc[i] = terr_set(&e[i], T_ENOMEM, "", -1, "out of memory");
      memset(&res[i], 0, sizeof res[i]);
    }
    free(ctx);
    free(out);
    return;
  }
  for (int i = 0; i < n; i++) {
    ctx[i] = &rs[i]->j->ctx;
    ctx_setup(rs[i], ctx[i], B_CUDA, device);
    terr_clear(&e[i]);
  }
  SCHED_ASSERT_UNLOCKED(s);
  atomic_fetch_add(&s->gpu_want[device], 1);
  s->gpu.lock(device);
  atomic_fetch_sub(&s->gpu_want[device], 1);
  double t0 = t_now_ms();
  rs[0]->j->k->gang_run(plans, n, ctx, out, rc, e);
  *ms = t_now_ms() - t0;
  int dev_rc = T_OK; /* the device's health: a device error of any run */
  for (int i = 0; i < n; i++)
    if (rc[i] == T_EDEVICE) dev_rc = rc[i];
  s->gpu.unlock(device);
  s->gpu.note_result(device, dev_rc);
  for (int i = 0; i < n; i++) {
    srun *r = rs[i];
    rc[i] = srun_collect(r, rc[i], out[i], &res[i], &e[i]);
    r->t_h2d += ctx[i]->t_h2d;
    r->t_d2h += ctx[i]->t_d2h;
    r->t_compute += ctx[i]->t_compute;
  }
  free(ctx);
  free(out);
}
