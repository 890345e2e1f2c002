/* compute/sched/run_output.c — the end of an output job's run ("output": {"file"},
 * compute/array/localfile.h): its result checked whole in the unnamed temporary it
 * was written to, then placed under the user's name, by the node that
 * still holds the job.
 *
 * Order, and why: (1) the check (tlocal_out_check: length, header read
 * back, a mapping not torn, no hole; else the job fails conflict naming
 * output.file); (2) the fenced "still held" step (sched_cluster_hold: a
 * heartbeat naming the job, which renews its lease; 0 at once on a single
 * node): a node that lost the job (paused past its lease while another
 * node ran it, perhaps to the end and placed its output) places nothing,
 * writes no end (as a run stopped by sched_drop_lost; compute/sched/run.c) and
 * logs why; (3) the placement (tlocal_out_place: the directory found
 * again from the root and still the pinned one, else conflict and nothing
 * written anywhere; a link, and a rename over an existing file); then
 * compute/sched/run.c's finish (4), fenced by the store, records what (3) did:
 * succeeded, or failed saying why the file could not be placed. So a job
 * that says succeeded has its file in place. Finishing first and placing
 * after was the other choice, and the worse: a placement failing after a
 * committed "succeeded" could no longer be recorded (the job has ended).
 * What is left: a crash between (3) and (4) leaves the job running in the
 * store; it runs again and places the same result again. A node stopped
 * for longer than a lease between (2) and (3) (a few syscalls apart)
 * could still place after another node has: no filesystem takes a fencing
 * token, so a lease can only narrow that window to the pause itself.
 *
 * An output region ("output": {"region"}) is simpler: srun_output_region
 * copies the result's bytes in at the offset; the region is checked whole
 * (its size, not torn) before and after, and a range past its end writes
 * nothing. Regions exist on a single node only (compute/jobs/regions.c).
 *
 * Threads: the worker that runs the job (compute/sched/run.c), no lock held.
 */
#include <stdio.h>
#include <string.h>

#include "util/sigbus.h"

#include "compute/sched/cluster.h"
#include "compute/sched/run_int.h"

/* An output job's result `a` (freed here) into its output's unnamed
 * temporary, checked whole (tlocal_out_check): its own temporary (after
 * the tear check), or, for a heap result or one that went elsewhere,
 * written there first. Placed under the name by srun_output. */
static int srun_keep_output(srun *r, tarray *a, terr *e) {
  tdtype dt = a->dtype;
  int ndim = a->ndim;
  int64_t shape[T_MAXDIM];
  memcpy(shape, a->shape, sizeof shape);
  salloc *al = srun_find_alloc(r, a);
  int rc;
  if (al && al->out) {
    int torn = a->guard ? sigbus_torn(a->guard) : 0;
    int err = tarray_sink_close(a); /* a deferred write error: not whole */
    tarray_free(a);
    al->out = r->out_busy = 0;
    if (err) {
      tlocal_out_discard(&r->out);
      rc = terr_set(e, T_EIO, "output.file", -1,
                    "cannot write the result: %s", strerror(err));
      return terr_nospace(e, rc, err);
    }
    return tlocal_out_check(&r->out, dt, ndim, shape, torn, e);
  }
  if (a->sink && (rc = srun_readable(r, &a, e))) return rc;
  rc = tlocal_out_write(&r->out, a, e);
  srun_drop_result(r, a);
  if (rc == T_OK) rc = tlocal_out_check(&r->out, dt, ndim, shape, 0, e);
  return rc;
}

int srun_output(srun *r, tarray *a, terr *e) {
  int rc = srun_keep_output(r, a, e);
  if (rc) return rc;
  rc = sched_cluster_hold(r->s, r->j->id, e);
  if (rc == T_ECONFLICT) {
    log_warn("scheduler: job %s: its output is not placed and its result is "
             "dropped: %s", r->j->id, e->message);
    tlocal_out_discard(&r->out);
    return SRUN_OUTPUT_LOST;
  }
  if (rc) {
    char why[TERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", e->message);
    tlocal_out_discard(&r->out);
    return terr_set(e, rc, "output.file", -1,
                    "the output was not placed: the store could not confirm "
                    "that this node still holds the job: %s", why);
  }
  return tlocal_out_place(&r->out, e);
}

/* "output": {"region": id, "offset": o} (compute/array/region.h): the
 * result's raw bytes copied into the region, no .npy header. A result of
 * several arrays: part 0 at o, each next part at the first multiple of
 * REGION_ALIGN after the one before, every range checked before a byte is
 * written, and the offsets listed in *doc (compute/array/parts.h). */
int srun_output_region(srun *r, sres *res, tparts *parts, char **doc,
                       terr *e) {
  int rc = T_OK, n = res->n > 0 ? res->n : 1;
  int64_t off = r->out_offset;
  *doc = NULL;
  for (int i = 0; rc == T_OK && i < n; i++) {
    tarray *a = res->a[i];
    if (!a) {
      rc = terr_set(e, T_EINTERNAL, "output", -1, "no result");
      break;
    }
    if (a->sink && (rc = srun_readable(r, &a, e))) {
      res->a[i] = a; /* NULL: dropped */
      break;
    }
    res->a[i] = a;
    tpart *t = &parts->p[i];
    snprintf(t->name, sizeof t->name, "%s", res->name[i] ? res->name[i] : "");
    t->dtype = a->dtype;
    t->ndim = a->ndim;
    memcpy(t->shape, a->shape, sizeof t->shape);
    t->bytes = a->size * (int64_t)tdtype_size(a->dtype);
    t->in_region = 1;
    t->offset = off;
    parts->n = i + 1;
    rc = region_check_range(r->j->owner, r->out_region, off, t->bytes,
                            (int64_t)tdtype_size(a->dtype), "output", e);
    off += t->bytes;
    off += (REGION_ALIGN - off % REGION_ALIGN) % REGION_ALIGN;
  }
  for (int i = 0; rc == T_OK && i < n; i++)
    rc = region_output(r->j->owner, r->out_region, parts->p[i].offset,
                       res->a[i], "output", e);
  if (rc == T_OK && n > 1 && !(*doc = tparts_text(parts)))
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
  if (n == 1 || rc) { /* nothing to list: no parts document */
    memset(parts->p + 1, 0, sizeof(tpart) * (TPARTS_MAX - 1));
    parts->n = 0;
  }
  srun_drop_res(r, res);
  return rc;
}
