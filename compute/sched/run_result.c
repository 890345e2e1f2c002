/* compute/sched/run_result.c — a run's result arrays (the worker loop's,
 * run.c): the memory or file each is written into (job_ctx.result_alloc /
 * result_stream: heap, a mapped file or a sink under a temporary name),
 * the named parts of a result of several arrays (job_ctx.result_part),
 * and keeping a result once the run succeeded (an output region's first
 * big array allocated in the region itself, compute/array/region.h) (in the store row, or its
 * file renamed into place; the other parts' files and their document).
 * What a run left behind is freed or unlinked by srun_cleanup and
 * srun_drop_res. */
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
    tarray_free(a);
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
