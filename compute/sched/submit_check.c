/* compute/sched/submit_check.c — the submit-time check: the kind's check and
 * estimate of a job, then the limits the scheduler keeps — a GPU for cuda
 * (on a cluster, a live GPU node will do), the result cap (--max-result),
 * the per-job memory cap and --max-memory, a service that still accepts
 * jobs. compute/jobs/submit.c calls it before the row is inserted; a run
 * that checks its job again (one queued from the store) applies the caps
 * through sched_check_caps. Moved out of wait.c (issue 24), whose name
 * said waiting.
 */
#include <string.h>

#include "compute/sched/cluster.h"
#include "compute/sched/sched_int.h"

int sched_check(sched *s, const kind_ops *k, const json_t *params,
                const tenv *env, tbackend b, job_estimate *est, terr *e) {
  void *checked = NULL;
  int rc = sched_check_keep(s, k, params, env, b, est, &checked, e);
  kind_checked_free(k, checked);
  return rc;
}

static int check_limits(sched *s, tbackend b, const job_estimate *est,
                        terr *e);

int sched_check_keep(sched *s, const kind_ops *k, const json_t *params,
                     const tenv *env, tbackend b, job_estimate *est,
                     void **checked, terr *e) {
  memset(est, 0, sizeof *est);
  int rc = kind_check_keep(k, params, env, est, checked, e);
  if (!rc) rc = check_limits(s, b, est, e);
  if (rc) {
    kind_checked_free(k, *checked);
    *checked = NULL;
  }
  return rc;
}

/* The limits a checked job must keep: a GPU for cuda, the result and
 * memory caps, a service that accepts jobs. */
static int check_limits(sched *s, tbackend b, const job_estimate *est,
                        terr *e) {
  /* A cluster with a live GPU node takes it: that node claims it. */
  if (b == B_CUDA && s->ngpu == 0 &&
      !(s->cluster && sched_cluster_gpu_nodes(s) > 0))
    return terr_set(e, T_EUNAVAIL, "backend", -1,
                    "cuda requested but no usable GPU: %s",
                    s->gpu.unavailable_reason());
  int rc = sched_check_caps(s, b, est, e);
  if (rc) return rc;
  tmutex_lock(&s->mu);
  int accepting = s->accepting;
  tmutex_unlock(&s->mu);
  if (!accepting)
    return terr_set(e, T_EUNAVAIL, "", -1, "the service is shutting down");
  return T_OK;
}

int sched_check_caps(sched *s, tbackend b, const job_estimate *est,
                     terr *e) {
  if (s->cfg.max_result_bytes > 0 && est->out_bytes > s->cfg.max_result_bytes)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "the result would take %lld bytes; the limit is %lld",
                    (long long)est->out_bytes,
                    (long long)s->cfg.max_result_bytes);
  /* compare holds the kept result and one more at a time. A job that
   * needs more than all running jobs together may hold (--max-memory)
   * could never start: refused now, not queued. */
  int64_t mem = sched_mem_need(est, b);
  int64_t cap = s->cfg.max_job_mem_bytes;
  if (s->mem_budget > 0 && (cap <= 0 || s->mem_budget < cap))
    cap = s->mem_budget;
  if (cap > 0 && mem > cap)
    return terr_set(e, T_ETOOLARGE, "params", -1,
                    "the job would need about %lld bytes of memory; the "
                    "limit is %lld (%s)", (long long)mem, (long long)cap,
                    cap == s->mem_budget ? "--max-memory" : "per job");
  return T_OK;
}
