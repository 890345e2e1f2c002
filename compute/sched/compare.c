/* compute/sched/compare.c — backend "compare": the same plan on serial, cpu and
 * (when a device is healthy) cuda, each run's result compared with
 * serial's, part by part and by name (a result of several arrays), and
 * serial's kept as the job's result. Float parts agree within the kind's
 * tolerance |a - b| <= atol + rtol*|b| (numpy.isclose with equal_nan; the
 * plan may set its own, compute/kinds/kinds.h), int64 parts only when equal (a
 * difference of 1 beyond 2^53 counts); a different shape, dtype class or
 * list of parts disagrees. A disagreement fails the job, naming the
 * backend, the part, the count and the first index. The elementwise check
 * runs over the pool in chunks.
 *
 * Threads: the worker that runs the job (run.c), the pool's threads for
 * the chunks; sched.mu only to fold progress between runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/sched/route/router.h"
#include "compute/sched/run_int.h"

typedef struct cmp_arg {
  const tarray *ref, *b;
  int exact; /* int64 parts: equal or not, no tolerance */
  double rtol, atol;
  int64_t chunk, n;
  double maxdiff[64];
  int64_t bad[64], first_bad[64];
} cmp_arg;

/* Does x (a backend's) agree with r (the reference's)? Finite pairs:
 * |x - r| <= atol + rtol*|r| (numpy.isclose with equal_nan). A NaN or an
 * infinity on either side agrees only with the same on the other: NaN with
 * NaN (in the same place: a NaN sqrt(-1), Vincenty's documented NaN), +inf
 * with +inf; so NaN vs a number, inf vs a finite number (where rtol*|inf|
 * would excuse any difference) and +inf vs -inf disagree. *d is the
 * difference reported: 0 when they agree that way, inf when not. */
static int cmp_close(double x, double r, double atol, double rtol, double *d) {
  if (isfinite(x) && isfinite(r)) {
    *d = x == r ? 0 : fabs(x - r);
    return *d <= atol + rtol * fabs(r);
  }
  int same = (isnan(x) && isnan(r)) || x == r;
  *d = same ? 0 : INFINITY;
  return same;
}

/* Elementwise cmp_close over chunk c; per-slot worst difference, count and
 * first index of the disagreements. */
static void cmp_chunk(void *arg, int64_t c, int slot) {
  cmp_arg *a = arg;
  int64_t lo = c * a->chunk, hi = lo + a->chunk < a->n ? lo + a->chunk : a->n;
  double md = a->maxdiff[slot];
  const int64_t *xi = a->b->data, *ri = a->ref->data;
  for (int64_t i = lo; i < hi; i++) {
    double d;
    int ok;
    if (a->exact) { /* a difference of 1 beyond 2^53 still counts */
      ok = xi[i] == ri[i];
      d = ok ? 0 : fmax(fabs((double)xi[i] - (double)ri[i]), 1);
    } else {
      ok = cmp_close(tarray_get(a->b, i), tarray_get(a->ref, i), a->atol,
                     a->rtol, &d);
    }
    if (!ok) {
      if (a->bad[slot]++ == 0 || i < a->first_bad[slot]) a->first_bad[slot] = i;
    }
    if (d > md) md = d;
  }
  a->maxdiff[slot] = md;
}

/* 1 when b agrees with ref; *maxdiff, *bad (count), *first (index). An
 * int64 array agrees only with an int64 array holding the same values. */
static int srun_agree(srun *r, const tarray *ref, const tarray *b,
                      double *maxdiff, int64_t *bad, int64_t *first) {
  *maxdiff = 0;
  *bad = 0;
  *first = -1;
  int exact = ref->dtype == T_I64;
  int same = ref->ndim == b->ndim && ref->size == b->size &&
             exact == (b->dtype == T_I64);
  for (int i = 0; same && i < ref->ndim; i++) same = ref->shape[i] == b->shape[i];
  if (!same) {
    *maxdiff = INFINITY;
    *bad = 1;
    return 0;
  }
  cmp_arg *a = calloc(1, sizeof *a);
  if (!a) { /* no scratch: compare serially in a stack copy */
    cmp_arg local;
    memset(&local, 0, sizeof local);
    local.ref = ref, local.b = b, local.rtol = r->rtol, local.atol = r->atol;
    local.exact = exact;
    local.n = ref->size, local.chunk = ref->size;
    cmp_chunk(&local, 0, 0);
    *maxdiff = local.maxdiff[0];
    *bad = local.bad[0];
    *first = local.first_bad[0];
    return *bad == 0;
  }
  a->ref = ref, a->b = b, a->rtol = r->rtol, a->atol = r->atol;
  a->exact = exact;
  a->n = ref->size;
  a->chunk = 1 << 16;
  int width = pool_threads(r->s->pool);
  if (width > 64) width = 64;
  pool_for(r->s->pool, width, (a->n + a->chunk - 1) / a->chunk, cmp_chunk, a,
           NULL);
  for (int i = 0; i < width; i++) {
    if (a->maxdiff[i] > *maxdiff) *maxdiff = a->maxdiff[i];
    if (a->bad[i] && (*first < 0 || a->first_bad[i] < *first))
      *first = a->first_bad[i];
    *bad += a->bad[i];
  }
  free(a);
  return *bad == 0;
}

/* First healthy device for compare's cuda run; -1 when none. */
static int srun_compare_device(sched *s) {
  for (int d = 0; d < s->ngpu; d++)
    if (s->gpu.healthy(d)) return d;
  return -1;
}

/* Progress over several runs: fold the last run into the base. */
static void srun_progress_next(srun *r, int runs_left) {
  sjob *j = r->j;
  tmutex_lock(&r->s->mu);
  j->progress_base_done += atomic_exchange(&j->ctx.progress_done, 0);
  j->progress_base_total += atomic_exchange(&j->ctx.progress_total, 0);
  j->progress_runs_left = runs_left;
  tmutex_unlock(&r->s->mu);
}

/* Append to dis (at *dlen) how run `name`'s result disagrees with the
 * reference's, if it does; *md gets the largest difference. Parts are
 * compared one by one, by name (a different list disagrees). */
static void srun_agree_res(srun *r, const sres *ref, const sres *res,
                           const char *name, char *dis, size_t *dlen,
                           double *md) {
  size_t cap = TERR_MSG_MAX;
  int same = ref->n == res->n;
  for (int p = 0; same && p < ref->n; p++)
    same = (!ref->name[p] && !res->name[p]) ||
           (ref->name[p] && res->name[p] && !strcmp(ref->name[p], res->name[p]));
  *md = 0;
  if (!same) {
    *md = INFINITY;
    *dlen += (size_t)snprintf(dis + *dlen, *dlen < cap ? cap - *dlen : 0,
                              "%s%s gave %d part(s) and serial %d, or other "
                              "names", *dlen ? "; " : "", name, res->n, ref->n);
  }
  for (int p = 0; same && p < ref->n; p++) {
    double d;
    int64_t bad, first;
    if (!srun_agree(r, ref->a[p], res->a[p], &d, &bad, &first)) {
      char part[64] = "";
      if (ref->n > 1)
        snprintf(part, sizeof part, " on part '%s'", ref->name[p]);
      *dlen += (size_t)snprintf(
          dis + *dlen, *dlen < cap ? cap - *dlen : 0,
          "%s%s and serial disagree%s at %lld element(s) (first at index "
          "%lld), max |a-b| = %.3g",
          *dlen ? "; " : "", name, part, (long long)bad, (long long)first, d);
    }
    if (d > *md) *md = d;
  }
  if (*dlen >= cap) *dlen = cap - 1;
}

int srun_compare(srun *r, void *plan, sres *result, terr *e) {
  struct { tbackend b; int dev; char name[16]; } runs[3];
  int n = 0;
  runs[n].b = B_SERIAL, runs[n].dev = -1;
  snprintf(runs[n++].name, sizeof runs[0].name, "serial");
  runs[n].b = B_CPU, runs[n].dev = -1;
  snprintf(runs[n++].name, sizeof runs[0].name, "cpu");
  int dev = srun_compare_device(r->s);
  if (dev >= 0) {
    runs[n].b = B_CUDA, runs[n].dev = dev;
    snprintf(runs[n++].name, sizeof runs[0].name, "cuda:%d", dev);
  }
  r->compare = json_array();
  r->max_abs_diff = 0;
  r->rtol = r->j->k->rtol;
  r->atol = r->j->k->atol;
  if (r->j->k->tolerance) /* data- or dtype-dependent (matmul) */
    r->j->k->tolerance(plan, &r->rtol, &r->atol);
  sres ref;
  memset(&ref, 0, sizeof ref);
  char disagree[TERR_MSG_MAX] = "";
  size_t dlen = 0;
  int rc = T_OK;
  for (int i = 0; i < n; i++) {
    if (i > 0) srun_progress_next(r, n - 1 - i);
    sres res;
    double ms;
    rc = srun_backend(r, plan, runs[i].b, runs[i].dev, &res, &ms, e);
    for (int p = 0; rc == T_OK && p < res.n; p++)
      rc = srun_readable(r, &res.a[p], e); /* a failure frees that one */
    if (rc) {
      srun_drop_res(r, &res);
      if (!job_ctx_stopped(&r->j->ctx)) {
        char msg[TERR_MSG_MAX];
        snprintf(msg, sizeof msg, "compare: %s failed: %s", runs[i].name,
                 e->message);
        snprintf(e->message, sizeof e->message, "%s", msg);
      }
      break;
    }
    json_t *entry = json_pack("{s:s, s:o}", "backend", runs[i].name, "ms",
                              ms_json(ms));
    if (runs[i].b == B_CPU)
      json_object_set_new(entry, "threads", json_integer(r->j->ctx.threads));
    if (i == 0) {
      ref = res;
    } else {
      double md;
      srun_agree_res(r, &ref, &res, runs[i].name, disagree, &dlen, &md);
      if (md > r->max_abs_diff) r->max_abs_diff = md;
      json_object_set_new(entry, "max_abs_diff",
                          isfinite(md) ? json_real(md) : json_null());
      srun_drop_res(r, &res);
    }
    json_array_append_new(r->compare, entry);
  }
  if (rc == T_OK && disagree[0])
    rc = terr_set(e, T_EINTERNAL, "", -1,
                  "compare: %s (tolerance |a-b| <= %g + %g*|b|%s)", disagree,
                  r->atol, r->rtol, ref.n > 1 ? "; int64 parts exactly" : "");
  if (rc) srun_drop_res(r, &ref);
  *result = ref;
  return rc;
}
