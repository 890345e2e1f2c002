/* compute/sched/run.c — running one job on the worker that took it.
 *
 * Steps: parse the stored params, find the kind, estimate (kind check, with a
 * tenv backed by the store), resolve the backend (the router for auto; an
 * auto job routed to the other kind of worker is handed over and this worker
 * is done with it), the start counted where a crash cannot lose it (the
 * in-flight journal, compute/sched/journal.c, or on a cluster store the claim,
 * or a [sync] store_job_start when there is neither; after max_attempts starts without an end the job fails "crashed"
 * instead of running) and store_job_start_async (not waited for: it commits
 * at the latest with the finish), prepare (timed), run on one backend or, for
 * compare, on each, then decide the end under the lock (a cancel or timeout
 * that came in wins over a late success), keep the result, and queue the end
 * with store_job_finish_async: the worker goes on with its next job while the
 * store's writer commits the end together with other jobs' writes, then
 * (srun_finished, on the store's thread for callbacks) releases the job: stats, waiters
 * (given the committed row, which the end's `before` — the job's row as
 * queued with this run's start applied, sjob.row — lets a single-node
 * store make without reading it back), free. So a waiter never hears of
 * an end that is not committed, and no worker sleeps on a commit. A finish that finds the
 * job already ended in the store (canceled before it was taken) leaves the
 * store's end as it is. The steps before the backend are srun_open, those
 * after it srun_close; a gang (sched_run_gang: tiny cuda jobs a GPU worker
 * took together, compute/sched/README.md "Gangs") opens and closes each
 * member so, on the CPU pool, around one launch (srun_backend_gang), and a
 * member's start stores "launch" in its estimate (srun_note_launch).
 *
 * Results: ctx->result_alloc gives heap memory for results of up to
 * inline_result_max bytes and, above, a mapped .npy created by
 * tarray_create_npy under a temporary name <data>/results/<id>.npy.tmp<N>
 * (kinds whose output is scattered or comes from a device: matmul,
 * geodesic, reduce, every GPU run). ctx->result_stream (a CPU map) gives
 * heap memory for a result that will be kept in the row and, for any other,
 * a sink (tarray_create_npy_sink) under the same kind of temporary name,
 * which the pool threads fill with pwrite, each its own chunks
 * (compute/array/codec/npyfile.c says why, with the measurements). Both kinds of file
 * reserve their blocks first: a full disk fails the job
 * "resource_exhausted" before anything is computed, never with SIGBUS.
 * A heap result whose .npy fits in row_result_max bytes is kept in the job's
 * store row (no file: creating one costs more than a tiny job, see
 * tests/bench/README.md); it commits with the finish. Other heap results are
 * written with npy_write to a temporary file. Either way a file is renamed
 * to <id>.npy only when complete, so a crash never leaves a partial file
 * under the final name (sched_start removes stale temporaries). No fsync: a
 * process crash is covered, a power loss right after a job is not.
 * Compare (compute/sched/compare.c, sharing run_int.h) reads its results: a sink's
 * is mapped from its file once the run has returned it (srun_readable).
 *
 * Parts (job_ctx.result_part; compute/kinds/kinds.h): a run may give several named
 * arrays, part 0 being the array it returns. srun_result_part checks each
 * call (in order, a valid and unused name, at most JOB_MAX_PARTS; a refusal
 * fails the run, and a refused part 1.. is freed here: it is the
 * scheduler's once handed over) and srun_collect gathers them with the
 * returned array into the run's sres. Part 0 is kept as any result is
 * (row or <id>.npy); parts 1.. as <results>/<id>.<name>.npy, each allocated
 * and written like a result file (blocks reserved first, temporary name,
 * renamed when complete; srun_keep_parts), then listed in the end's
 * result_parts document (compute/array/parts.h). A failure after some were kept
 * removes them; an end that does not commit removes them (srun_finished);
 * a process that dies before the commit leaves them to sched_start, which
 * removes every result file of an unfinished job. An output job
 * ("output": {"file"}) whose run gives several parts fails naming
 * output.file. Compare compares part by part, by name (int64 exactly).
 *
 * Borrowed GPUs (job_ctx.gpu_borrow / gpu_return): a non-blocking
 * gpu_trylock of a healthy device that is not the run's own (so two runs
 * borrowing each other's devices never wait for each other), held by the
 * run's thread; srun_backend gives back whatever the run kept, before its
 * own device's unlock, and logs it.
 *
 * Same-host files (--local-dir, compute/array/localfile.h). A job with "output":
 * {"file": path} has its output directory opened (and pinned) before it
 * starts (a directory gone since submit fails the job naming output.file);
 * its first file result is created there as an unnamed file instead of
 * under <data>/results, a heap result (or a later one) is written there at
 * the end; then it is checked, and placed only after the fenced "still
 * held" step, before the finish: compute/sched/run_output.c says why in that
 * order and what is left. Nothing of an output job's result is kept by
 * the service (no result_path, nothing in the row). {"file"} inputs are
 * mapped through the run's tenv, compared with their pins (j->pins) and
 * recorded (r.env.local_log); after the plan is released the log is
 * checked: an input torn or changed under the job fails it naming it.
 * A failed or canceled job leaves no temporary (srun_cleanup).
 *
 * The router's cost model estimates submit -> stored, so a run teaches it
 * (router_observe) what it estimated: a single backend's prepare + run +
 * store, once the result is kept; each backend of a compare its prepare +
 * run (its result is not stored alone).
 *
 * Threads: everything here runs on the worker that owns the job, except
 * srun_finished (the store's callback thread, store_job_finish_async: it
 * must not block nor make a [sync] store call); sched.mu is taken only briefly (see sched_int.h) and
 * never across a store write, a kind callback or a file write. result_alloc
 * must be called from the thread that called run (not from inside pool_for
 * chunks).
 */
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
#include "compute/sched/cluster.h"
#include "compute/sched/route/router.h"
#include "util/buf.h"
#include "util/sigbus.h"

#include "compute/sched/run_int.h"


/* ---- resolve: params, kind, estimate, backend ---------------------------- */
enum { RESOLVE_GO = 0, RESOLVE_HANDED_OVER = -1 };

static int srun_gpu_usable(sched *s) {
  for (int d = 0; d < s->ngpu; d++)
    if (s->gpu.healthy(d)) return 1;
  return 0;
}

static int srun_resolve(srun *r, int device, terr *e) {
  sched *s = r->s;
  sjob *j = r->j;
  if (!j->params) {
    json_error_t jerr;
    j->params = json_loads(j->params_text, 0, &jerr);
    if (!j->params)
      return terr_set(e, T_EINVAL, "params", jerr.position,
                      "stored params are not valid JSON: %s", jerr.text);
  }
  if (!j->k && !(j->k = s->cfg.kind_lookup(j->kind)))
    return terr_set(e, T_EINVAL, "kind", -1, "unknown kind '%s'", j->kind);
  if (j->requested < 0)
    return terr_set(e, T_EINVAL, "backend", -1, "unknown backend '%s'",
                    j->backend_text);
  if (!j->have_est) { /* queued from the store: checked here, once (caps too) */
    kind_checked_free(j->checked_k, j->checked);
    int rc = kind_check_keep(j->k, j->params, &r->env, &j->est, &j->checked, e);
    j->checked_k = j->k;
    if (!rc) rc = sched_check_caps(s, (tbackend)j->requested, &j->est, e);
    if (rc) return rc;
    j->have_est = 1;
  }
  if (j->backend == B_AUTO) {
    tbackend chosen;
    int usable = srun_gpu_usable(s);
    tbuf figs;
    tbuf_init(&figs, 0);
    router_choose_text(j->k, &j->est, usable, &chosen, j->reason,
                       sizeof j->reason, &figs, 9);
    free(j->figures);
    j->figures = tbuf_take(&figs, NULL); /* NULL: out of memory, none */
    if (j->requested == B_AUTO) {
      j->backend = chosen;
    } else {
      j->backend = (tbackend)j->requested;
      if (j->requested == B_COMPARE)
        snprintf(j->reason, sizeof j->reason,
                 "compare requested: serial, cpu%s", usable ? " and cuda" : "");
      else
        snprintf(j->reason, sizeof j->reason, "%s requested by the client",
                 tbackend_name(j->backend));
    }
  }
  if (j->backend == B_CUDA && device < 0) {
    if (s->ngpu == 0)
      return terr_set(e, T_EUNAVAIL, "backend", -1, "no usable GPU: %s",
                      s->gpu.unavailable_reason());
    return sched_handover(s, j, Q_GPU) == 0 ? RESOLVE_HANDED_OVER
           : atomic_load(&j->stop) ? T_ECANCELED
           : terr_set(e, T_ENOMEM, "", -1, "no memory to queue the job");
  }
  if (j->backend != B_CUDA && device >= 0)
    return sched_handover(s, j, Q_CPU) == 0 ? RESOLVE_HANDED_OVER
           : atomic_load(&j->stop) ? T_ECANCELED
           : terr_set(e, T_ENOMEM, "", -1, "no memory to queue the job");
  return RESOLVE_GO;
}

/* ---- end ------------------------------------------------------------------- */
/* This node's name on a cluster store (for the log lines of its runs, whose
 * logs are read side by side with other nodes'), else NULL (not logged). */
static const char *srun_node(const sched *s, char *buf, size_t cap) {
  if (!s->cluster) return NULL;
  char id[T_ID_MAX];
  sched_node_self((sched *)s, id, buf, cap);
  return buf[0] ? buf : NULL;
}

/* The number of this run of j: sjob.attempts counts the runs before it
 * (on a cluster store too: compute/sched/queue.c takes the claim's own back). */
static int srun_attempt(const sched *s, const sjob *j) {
  (void)s;
  return j->attempts + 1;
}

/* One log line per job end (API.md, "Logs"), written once the end is
 * committed (event "job_end"), or once the store refused it ("job_dropped":
 * the node fence, or a store error; the job runs again): id, kind, backend
 * used, final status, total ms (queue + run), the error's code and message,
 * and the run's number and span (wall ms; started 0: it never started), so
 * that the runs of a job on several nodes can be laid side by side. */
static size_t srun_log_line(const char *event, const char *node, const sjob *j,
                            int status, const char *used, double total_ms,
                            const char *code, const char *msg,
                            int64_t started_at, char *out, size_t cap) {
  t_kv kv[] = {
      T_KV_S("id", j->id),
      T_KV_S("node", node),
      T_KV_N("attempt", srun_attempt(NULL, j)),
      T_KV_N("started", started_at),
      T_KV_N("finished", t_wall_ms()),
      T_KV_S("kind", j->kind),
      T_KV_S("backend", used ? used : "-"),
      T_KV_S("spread", j->ctx.spread[0] ? j->ctx.spread : NULL),
      T_KV_S("status", job_status_name((job_status)status)),
      T_KV_N("ms", round(total_ms * 1e3) / 1e3),
      T_KV_S("error", code),
      T_KV_S("message", code ? msg : NULL),
  };
  return t_log_kv_line(status == JOB_FAILED || strcmp(event, "job_end") != 0
                           ? T_LOG_WARN
                           : T_LOG_INFO,
                       event, kv, (int)(sizeof kv / sizeof kv[0]), out, cap);
}

static void srun_log_end(const char *event, const sched *s, const sjob *j,
                         int status, const char *used, double total_ms,
                         const char *code, const char *msg,
                         int64_t started_at) {
  char line[T_LOG_LINE_MAX], node[104];
  t_log_put(line, srun_log_line(event, srun_node(s, node, sizeof node), j,
                                status, used, total_ms, code, msg, started_at,
                                line, sizeof line));
}

/* Release a job whose store row is already final (or left unfinished);
 * ended: its committed row for the waiters, or NULL; npy: the result
 * that row keeps, or NULL. j stays the caller's (srun_release frees it);
 * s may be gone on return. */
static void srun_release_keep(sched *s, sjob *j, int status, int counted,
                              const char *backend, double run_ms,
                              const store_job *ended, const void *npy,
                              size_t npy_len) {
  tmutex_lock(&s->mu);
  swaiter *chain = sched_release_locked(s, j, status, counted, backend, run_ms);
  tmutex_unlock(&s->mu);
  /* A slot is free: claim. Before sched_fire, whose end may let
   * sched_destroy free s. */
  if (s->cluster) sched_cluster_kick(s);
  sched_fire(s, chain, j->id, ended, npy, npy_len);
}

static void srun_release(sched *s, sjob *j, int status, int counted,
                         const char *backend, double run_ms,
                         const store_job *ended) {
  srun_release_keep(s, j, status, counted, backend, run_ms, ended, NULL, 0);
  sjob_free(j);
}

/* What the end of a job needs once its finish is committed. */
typedef struct srun_end {
  sched *s;
  sjob *j;
  int status, started;
  int retried; /* the end failed to commit once: a plain failure retried */
  double run_ms, total_ms; /* total: for the log line */
  int64_t started_at;      /* wall ms, 0 when it never started */
  const char *code;        /* the error's code (a static name) or NULL */
  char msg[TERR_MSG_MAX];
  char used[SRUN_USED_MAX]; /* backend.used: at the start, then the end's */
  int device;               /* the run's own GPU (a cuda job) */
  char final[SRUN_PATH_MAX]; /* the result file; "" when none */
  tparts parts; /* a result of several arrays: their files (p[1..].path) */
  /* the result kept in the row, as the end commits it (owned): for the
   * waiters that answer with it (sched_wait_result); NULL when none */
  char *npy;
  size_t npy_len;
} srun_end;

/* The finish is committed (rc 0) or failed. Runs on the store's writer
 * thread (store_job_finish_async), or on the worker when the finish could
 * not be queued; takes sched.mu briefly, never makes a [sync] store call. */
static void srun_finished(void *arg, int rc, const terr *fe, store_job *row) {
  srun_end *x = arg;
  sched *s = x->s;
  sjob *j = x->j;
  char line[T_LOG_LINE_MAX], node[104]; /* the end's log line, written last */
  const char *event, *nd;
  if (rc != T_OK && x->final[0]) unlink(x->final);
  if (rc != T_OK) srun_unlink_parts(&x->parts);
  if ((rc == T_ENOSPACE || rc == T_EIO) && !x->retried) {
    /* The end did not fit (a full disk: SQLITE_FULL, or a result too big
     * for what is left in the row): record a plain failure instead, which
     * needs next to no space, so that the job is not run again at every
     * start. Queued from this (writer) thread: it commits in the next
     * batch and comes back here. */
    char msg[TERR_MSG_MAX];
    snprintf(msg, sizeof msg, "cannot record the job's end: %s",
             fe ? fe->message : "store error");
    store_job_end end = {.status = JOB_FAILED, .finished_at = t_wall_ms(),
                         .max_abs_diff = NAN,
                         .error_code = terr_code_name((terr_code)rc),
                         .error_message = msg, .held = 1};
    x->retried = 1;
    x->final[0] = 0;
    free(x->npy); /* the plain failure keeps no result */
    x->npy = NULL;
    x->status = JOB_FAILED;
    x->code = end.error_code;
    snprintf(x->msg, sizeof x->msg, "%s", msg);
    terr qe;
    if (store_job_finish_async(s->cfg.st, j->id, &end, srun_finished, x,
                               &qe) == T_OK) {
      if (row) store_job_clear(row);
      return;
    }
  }
  nd = srun_node(s, node, sizeof node);
  if (rc == T_ECONFLICT || rc == T_ENOTFOUND) {
    /* Ended in the store before a worker took it (canceled: see
     * sched_cancel), or never recorded; the store's word stands. On a
     * cluster store also the fence: the job's lease went to another node,
     * which runs it again; this run's result files (named for this run,
     * sjob.stem) were removed above. */
    if (s->cluster)
      log_warn("scheduler: job %s: end not written, result dropped: %s",
               j->id, fe ? fe->message : "");
    else
      log_info("scheduler: job %s: %s", j->id, fe ? fe->message : "");
    event = "job_dropped";
    srun_release_keep(s, j, -1, 0, NULL, 0, NULL, NULL, 0);
  } else {
    if (rc != T_OK) /* stays running in the store: the next start reruns it */
      log_error("scheduler: cannot record the end of job %s: %s", j->id,
                fe ? fe->message : "");
    event = rc == T_OK ? "job_end" : "job_dropped";
    srun_release_keep(s, j, x->status, 1, x->started ? x->used : NULL,
                      x->run_ms, rc == T_OK ? row : NULL, x->npy, x->npy_len);
  }
  /* The waiters are woken: now the end's line, from j (still ours; s may
   * be gone) and the node's name read before. */
  t_log_put(line, srun_log_line(event, nd, j, x->status,
                                x->started ? x->used : NULL, x->total_ms,
                                x->code, x->msg, x->started_at, line,
                                sizeof line));
  sjob_free(j);
  if (row) store_job_clear(row);
  tparts_clear(&x->parts);
  free(x->npy);
  free(x);
}

void sched_end_unstarted(sched *s, sjob *j, int status, const char *code,
                         const char *msg) {
  if (status >= 0) {
    double queue_ms = sched_ms_round((double)(t_wall_ms() - j->created_at));
    store_job_end end = {.status = (job_status)status,
                         .finished_at = t_wall_ms(), .max_abs_diff = NAN,
                         .error_code = code, .error_message = msg};
    job_timings_put(&end.timings, JOB_T_QUEUE, queue_ms);
    job_timings_put(&end.timings, JOB_T_TOTAL, queue_ms);
    srun_log_end("job_end", s, j, status, NULL, queue_ms, code, msg, 0);
    terr e;
    SCHED_ASSERT_UNLOCKED(s); /* a [sync] store call */
    if (store_job_finish(s->cfg.st, j->id, &end, &e) != T_OK)
      log_error("scheduler: cannot finish job %s: %s", j->id, e.message);
  }
  srun_release(s, j, status, status >= 0, NULL, 0, NULL);
}

/* A run's state before anything is done: the job's environment for its
 * kind (the owner's store, same-host files and their pins). */
static void srun_init(srun *r, sched *s, sjob *j, int device) {
  /* All but the allocation slots (32 KiB of paths; a slot is filled
   * when taken, srun_result_alloc, and only the first nallocs are read):
   * zeroing them was a tiny job's largest memset. */
  memset(r, 0, offsetof(srun, allocs));
  memset(&r->nallocs, 0, sizeof *r - offsetof(srun, nallocs));
  r->s = s, r->j = j, r->device = device, r->max_abs_diff = NAN;
  j->ctx.lanes.n = 0; /* none until a run says (an earlier run's gone) */
  r->out.dirfd = r->out.fd = r->out.tmpdirfd = -1;
  tenv_from_store(&r->env, s->cfg.st, j->owner, s->env_max_elems);
  r->env.local = s->cfg.local;
  /* {"file"} inputs against their pins (none stored: pinned by the check) */
  if (s->cfg.local && !j->pins) j->pins = tlocal_pins_new();
  r->env.local_pins = j->pins;
  /* The same value as at submit (jobs.max_result_bytes): defaults that
   * follow it must not change between check and run. */
  r->env.max_result_bytes = s->cfg.max_result_bytes;
}

/* A run that ends without an end of its own (its lease lost, or stopped
 * by a shutdown): what it holds is dropped and the job released. */
static void srun_drop(srun *r, sres *res) {
  srun_drop_res(r, res);
  srun_cleanup(r);
  sched_mem_release(r->s, r->j);
  srun_release(r->s, r->j, -1, 0, NULL, 0, NULL);
}

/* Hands the end to the store's writer thread, which then releases the
 * job (srun_finished); t is copied. Without memory for it: the job is
 * dropped (logged, its files removed, released). */
static void srun_send_end(srun_end *t, store_job_end *end) {
  sched *s = t->s;
  sjob *j = t->j;
  char *devices = NULL; /* a cuda run's: the devices that ran it */
  if (t->started && j->backend == B_CUDA) {
    devices = stext_devices(&j->ctx, t->device, t->used, sizeof t->used);
    end->devices = devices;
    end->backend_used = t->used;
  }
  srun_end *x = malloc(sizeof *x); /* all of it from *t below: no zeroing
                                      * its 6 KiB (a tiny job's largest
                                      * memset) */
  terr fe;
  if (!x) {
    log_error("scheduler: no memory to end job %s", j->id);
    srun_log_end("job_dropped", s, j, t->status, t->started ? t->used : NULL,
                 t->total_ms, t->code, t->msg, t->started_at);
    if (t->final[0]) unlink(t->final);
    srun_unlink_parts(&t->parts);
    srun_release(s, j, t->status, 1, t->started ? t->used : NULL, t->run_ms,
                 NULL);
    free(t->npy);
    free(devices);
    return;
  }
  *x = *t;
  if (store_job_finish_async(s->cfg.st, j->id, end, srun_finished, x, &fe) !=
      T_OK) {
    int frc = store_job_finish(s->cfg.st, j->id, end, &fe);
    srun_finished(x, frc, &fe, NULL);
  }
  free(devices); /* the async finish copied it */
}

/* The job's end status from why it stopped (1 a cancel, 2 its timeout),
 * a poison job (crashed) or its run's rc; *code and msg (TERR_MSG_MAX) for
 * one that did not succeed. */
static void srun_status(const srun *r, int stop, int crashed, int rc,
                        const terr *e, int *status, const char **code,
                        char *msg) {
  const sjob *j = r->j;
  if (stop == 1) {
    *status = JOB_CANCELED, *code = "canceled";
    snprintf(msg, TERR_MSG_MAX, "canceled by request");
  } else if (stop == 2) {
    *status = JOB_FAILED, *code = terr_code_name(T_ETIMEOUT);
    double timeout = j->timeout_s > 0 ? j->timeout_s : r->s->cfg.default_timeout_s;
    snprintf(msg, TERR_MSG_MAX, "the job ran past its timeout of %s s", t_num(timeout).s);
  } else if (crashed) {
    *status = JOB_FAILED, *code = "crashed";
    snprintf(msg, TERR_MSG_MAX, "%s", e->message);
  } else if (rc) {
    *status = JOB_FAILED, *code = terr_code_name((terr_code)rc);
    snprintf(msg, TERR_MSG_MAX, "%s", e->message[0] ? e->message : *code);
  } else {
    *status = JOB_SUCCEEDED;
  }
}

/* A gang member's estimate document gains "launch": {"shared": the jobs
 * taken together for its launch, "first": the first one's id}, which the
 * job's record shows as its "launch" (compute/jobs/json.c). Left as it was
 * without memory. */
static void srun_note_launch(char **estimate, const sjob *j) {
  size_t n = strlen(*estimate);
  if (n < 2 || (*estimate)[n - 1] != '}') return;
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_add(&b, *estimate, n - 1);
  tbuf_adds(&b, ",\"launch\":{\"shared\":");
  tbuf_json_int(&b, j->gang_n);
  tbuf_adds(&b, ",\"first\":");
  tbuf_json_str(&b, j->gang_first);
  tbuf_adds(&b, "}}");
  size_t len;
  char *t = tbuf_take(&b, &len);
  if (!t) return;
  free(*estimate);
  *estimate = t;
}

/* The job's start, recorded: in the in-flight journal (*jslot) with a
 * lazy store start, or committed to the store first (see the comment at
 * the call); a cluster node logs it. used (32 bytes): the backend. An error: the job is not run. */
static int srun_start(srun *r, char *used, char **estimate,
                      int64_t *started_at, double *started_ms, int *jslot,
                      terr *e) {
  sched *s = r->s;
  sjob *j = r->j;
  int rc = T_OK;
  if (j->backend == B_CUDA)
    snprintf(used, 32, "cuda:%d", r->device);
  else
    t_scopy(used, 32, tbackend_name(j->backend));
  /* for store_job_start: the kind's figures, the router's, the pins */
  *estimate =
      j->have_est ? stext_estimate(&j->est, j->figures, j->pins) : NULL;
  if (*estimate && j->gang_n > 1) /* its record says it shared a launch */
    srun_note_launch(estimate, j);
  *started_at = t_wall_ms();
  *started_ms = t_now_ms();
  *jslot = s->journal ? sched_journal_take(s, j->id, j->attempts + 1) : -1;
  /* On a cluster store the claim counted this attempt (committed before
   * the job came here) and the lease covers the run: the start need not
   * be waited for either; the store's fence refuses the end of a run
   * whose lease went elsewhere meanwhile. */
  if (*jslot >= 0 || s->cluster) {
    store_job_start_async(s->cfg.st, j->id, *started_at, used, j->reason,
                          *estimate);
  } else {
    int delay_ms = 100;
    while ((rc = store_job_start(s->cfg.st, j->id, *started_at, used,
                                 j->reason, *estimate, e)) == T_EUNAVAIL &&
           s->cluster && !atomic_load(&j->stop)) {
      struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      delay_ms = delay_ms * 2 > 2000 ? 2000 : delay_ms * 2;
      *started_at = t_wall_ms(); /* the start is when it really starts */
      *started_ms = t_now_ms();
    }
    if (rc) return rc;
  }
  if (s->cluster) { /* a node says which runs it began (test_cluster.py) */
    char node[104];
    t_kv kv[] = {T_KV_S("id", j->id),
                 T_KV_S("node", srun_node(s, node, sizeof node)),
                 T_KV_N("attempt", srun_attempt(s, j)),
                 T_KV_N("started", *started_at), T_KV_S("backend", used)};
    t_log_kv(T_LOG_INFO, "job_start", kv, (int)(sizeof kv / sizeof kv[0]));
  }
  if (j->crash_test) { /* tests only: TESSEL_TEST_CRASH_LABEL */
    log_error("scheduler: job %s: TESSEL_TEST_CRASH_LABEL: aborting", j->id);
    abort();
  }

  return T_OK;
}

/* A succeeded run's result kept: the user's output.file, or the
 * service's file or store row (and a result of several arrays' other
 * parts); *rinfo and parts->p[0] say what it is, and the router learns
 * the run's time. 0, an error (nothing
 * kept), or SRUN_OUTPUT_LOST (another node's job now: nothing placed, res
 * freed). */
static int srun_keep(srun *r, sres *res, double backend_ms,
                     job_result_info *rinfo,
                     tparts *parts, char *final,
                     char **npy, size_t *npy_len, char **parts_doc,
                     terr *e) {
  sched *s = r->s;
  sjob *j = r->j;
  tarray *result = res->a[0];
  /* Pairs a geodesic method could not solve (Vincenty near antipodes)
   * are NaN in the result and counted there, so the job says so. */
  t_scopy(rinfo->dtype, sizeof rinfo->dtype, tdtype_name(result->dtype));
  rinfo->ndim = result->ndim;
  for (int d = 0; d < result->ndim; d++) rinfo->shape[d] = result->shape[d];
  rinfo->bytes = result->size * (int64_t)tdtype_size(result->dtype);
  parts->p[0].dtype = result->dtype; /* for a result of several arrays */
  parts->p[0].ndim = result->ndim;
  memcpy(parts->p[0].shape, result->shape, sizeof parts->p[0].shape);
  parts->p[0].bytes = rinfo->bytes;
  rinfo->nonconverged =
      j->ctx.nonconverged > 0 ? (int64_t)j->ctx.nonconverged : 0;
  size_t dl = strlen(s->results_dir), sl = strlen(j->stem);
  if (dl + sl + 6 <= SRUN_PATH_MAX) { /* "<dir>/<stem>.npy", no printf */
    memcpy(final, s->results_dir, dl);
    final[dl] = '/';
    memcpy(final + dl + 1, j->stem, sl);
    memcpy(final + dl + 1 + sl, ".npy", 5);
  } else {
    snprintf(final, SRUN_PATH_MAX, "%s/%s.npy", s->results_dir, j->stem);
  }
  double t0s = t_now_ms();
  int wrc;
  if (r->out_region[0]) { /* raw bytes into the client's region */
    wrc = srun_output_region(r, res, parts, parts_doc, e);
    final[0] = 0;
  } else if (r->out.dirfd >= 0 && res->n > 1) {
    wrc = terr_set(e, T_EINVAL, "output.file", -1,
                   "this job's result is %d arrays (%s, %s%s); output.file "
                   "takes a result of one array: submit it without "
                   "\"output\" and read each part from "
                   "/v1/jobs/{id}/result/{name}",
                   res->n, res->name[0], res->name[1], res->n > 2 ? ", ..." : "");
    srun_drop_res(r, res);
    final[0] = 0;
  } else if (r->out.dirfd >= 0) { /* the user's file; the service keeps nothing */
    wrc = srun_output(r, result, e);
    final[0] = 0;
    if (wrc == SRUN_OUTPUT_LOST) { /* another node's job: as SJ_STOP_LOST */
      memset(res, 0, sizeof *res); /* freed */
      return wrc;
    }
  } else {
    wrc = srun_keep_result(r, result, final, npy, npy_len, e);
    res->a[0] = NULL;
    if (*npy) final[0] = 0; /* in the row, not a file */
    if (wrc == T_OK && res->n > 1 &&
        (wrc = srun_keep_parts(r, res, parts, parts_doc, e))) {
      if (final[0]) unlink(final);
      free(*npy);
      *npy = NULL;
    }
  }
  memset(res, 0, sizeof *res); /* kept or freed */
  r->t_store = t_now_ms() - t0s;
  if (!wrc && j->have_est && j->backend != B_COMPARE)
    router_observe(j->k, &j->est, j->backend,
                   r->t_prepare + backend_ms + r->t_store);
  if (wrc) { /* nothing kept */
    final[0] = 0;
    memset(rinfo, 0, sizeof *rinfo);
  }
  return wrc;
}

/* Before a job starts: a poison job fails (*crashed), then its backend
 * and device (srun_resolve), its memory admission (compute/sched/mem.c:
 * run, wait in the queue, or fail) and its same-host files. *leave when
 * the job is not this worker's any more (handed over, or waiting for
 * memory in the queue); else an error ends it. */
static int srun_prelude(srun *r, int *crashed, int *leave, terr *e) {
  sched *s = r->s;
  sjob *j = r->j;
  /* A job whose every recorded start ended with the process (no finish):
   * a poison job. It fails instead of taking the service down again. */
  if (j->attempts >= s->max_attempts) {
    *crashed = 1;
    return terr_set(e, T_EINTERNAL, "", -1,
                  "the job was started %d times and the process died each "
                  "time; it is not run again (--max-attempts %d)",
                  j->attempts, s->max_attempts);
  }
  int rc = srun_resolve(r, r->device, e);
  if (rc == RESOLVE_HANDED_OVER) { /* another worker owns it now */
    *leave = 1;
    return T_OK;
  }
  if (rc || atomic_load(&j->stop)) return rc;
  /* Building the inputs (prepare) stops at a cancel, a timeout, a
   * shutdown or a lost lease like the run does, and uses the width the
   * run will (one thread for a serial job). */
  r->env.stop = &j->stop;
  r->env.pool = s->pool;
  r->env.width = j->backend == B_SERIAL ? 1 : pool_threads(s->pool);

  /* Memory admission (compute/sched/mem.c): run, wait in the queue, or fail. */
  int64_t need = j->have_est ? sched_mem_need(&j->est, j->backend) : 0;
  int64_t mem_total = -1, mem_avail = -1;
  if (need >= SCHED_MEM_PROBE_MIN) sched_mem_probe(&mem_total, &mem_avail);
  int adm = sched_mem_admit(s, j, need, mem_avail);
  if (adm == SCHED_MEM_WAIT) { /* back in the queue */
    *leave = 1;
    return T_OK;
  }
  if (adm == SCHED_MEM_NEVER) {
    return terr_set(e, T_ENOMEM, "", -1,
                  "the job needs about %lld bytes of memory; the machine has "
                  "%lld available now and the memory budget (--max-memory) is "
                  "%lld bytes",
                  (long long)need, (long long)mem_avail,
                  (long long)s->mem_budget);
  }

  /* Same-host files: the output's directory is opened now (it may be gone
   * since submit, a restart ago); mapped inputs are recorded for the end. */
  if (region_out_parse(j->output_file, r->out_region, &r->out_offset)) {
    /* a registered region (compute/array/region.h): written at the end */
  } else if (j->output_file &&
      (rc = tlocal_out_open(s->cfg.local, j->owner, j->output_file,
                            "output.file", &r->out, e)))
    return rc;
  if (s->cfg.local && !(r->env.local_log = tlocal_log_new())) {
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  return T_OK;
}

/* One job's run, its state from its start to its end (sched_run_job,
 * sched_run_gang): the steps before the backend (srun_open) and after it
 * (srun_close), so that a gang's members each take their own. */
typedef struct sone {
  srun r;
  terr e;
  void *plan;
  sres res;
  tparts parts; /* the kept parts of a result of several arrays */
  char used[32], final[SRUN_PATH_MAX];
  char *estimate, *compare_json, *npy, *parts_doc;
  job_result_info rinfo;
  size_t npy_len;
  int64_t started_at;
  double started_ms, end_ms; /* monotonic: the start, the run's end */
  int started, crashed, jslot, rc, leave;
  double backend_ms; /* a single backend's run */
} sone;

/* Everything before the backend: prelude, start, prepare. 1 when the job
 * is ready to run (o->plan), 0 when it is over before (o->leave: another
 * worker's, or back in the queue; else o->rc and srun_close ends it). */
static int srun_open(sone *o, sched *s, sjob *j, int device) {
  SCHED_ASSERT_UNLOCKED(s);
  T_ASSERT(j->state == SJ_RUNNING);
  srun_init(&o->r, s, j, device);
  terr_clear(&o->e);
  o->plan = NULL;
  memset(&o->res, 0, sizeof o->res);
  memset(&o->parts, 0, sizeof o->parts);
  o->used[0] = o->final[0] = 0;
  o->estimate = o->compare_json = o->npy = o->parts_doc = NULL;
  memset(&o->rinfo, 0, sizeof o->rinfo);
  o->npy_len = 0;
  o->started_at = 0;
  o->started_ms = o->end_ms = o->backend_ms = 0;
  o->started = o->crashed = o->leave = 0;
  o->jslot = -1;
  o->rc = srun_prelude(&o->r, &o->crashed, &o->leave, &o->e);
  if (o->leave || o->rc) return 0;
  /* Counted before the job runs, so that a job that kills the process is
   * counted even when it dies at once: after max_attempts such starts it
   * fails "crashed" above. Normally in the in-flight journal (a store into
   * a shared mapping that outlives the process, compute/sched/journal.c), and the
   * store's start is lazy: it commits with the finish below, in the same
   * transaction for a short job. Without a journal slot, the start is
   * committed first ([sync], group-committed with other writes). A job
   * canceled in the store before a worker took it (see sched_cancel) is
   * found at the finish (or answers T_ECONFLICT to the [sync] start),
   * which then changes nothing. A cluster store's server that is down
   * (T_EUNAVAIL) is waited for (100 ms doubling to 2 s) while the job is
   * not stopped: the job is claimed here, so failing it would lose an
   * accepted job to a restart of the server. Any other [sync] error (a
   * full disk): the job is not run. */
  o->rc = srun_start(&o->r, o->used, &o->estimate, &o->started_at,
                     &o->started_ms, &o->jslot, &o->e);
  if (o->rc) return 0;
  o->started = 1;
  double t0 = t_now_ms();
  void *checked = j->checked; /* prepare takes it */
  j->checked = NULL;
  SCHED_ASSERT_UNLOCKED(s); /* a kind callback */
  o->rc = kind_prepare_checked(j->k, j->params, &o->r.env, checked, &o->plan,
                               &o->e);
  o->r.t_prepare = t_now_ms() - t0;
  return !o->rc && !atomic_load(&j->stop);
}

/* Everything after the backend: the end decided, the result kept, the end
 * sent to the store; what the run holds freed. */
static void srun_close(sone *o) {
  srun *rr = &o->r;
  sched *s = rr->s;
  sjob *j = rr->j;
  int rc = o->rc, status;
  o->end_ms = t_now_ms();
  if (o->plan) j->k->release(o->plan);
  o->plan = NULL;
  /* An input file torn or changed under the job: whatever it computed is
   * not its result. */
  if (rc == T_OK && rr->env.local_log)
    rc = tlocal_log_check(rr->env.local_log, &o->e);
  sched_journal_put(s, o->jslot); /* the run is over (no-op when -1) */
  /* Decide the end under the lock: from now on cancel answers 409. */
  tmutex_lock(&s->mu);
  int stop = atomic_load(&j->stop);
  sched_running_remove(s, j);
  sjob_set_state(j, SJ_ENDING);
  int64_t pdone = j->progress_base_done + atomic_load(&j->ctx.progress_done);
  int64_t ptotal = j->progress_base_total + atomic_load(&j->ctx.progress_total);
  tmutex_unlock(&s->mu);

  if (stop == SJ_STOP_LOST) {
    /* Its lease went to another node (sched_drop_lost): the fence would
     * refuse its end, and the other node's run is the job's. */
  lost: /* or so said the fenced step before an output's placement */
    srun_drop(rr, &o->res);
    goto out;
  }
  if (stop == SJ_STOP_SHUTDOWN && (rc || !o->res.n)) {
    /* Stopped by shutdown: stays queued in the store, its start taken
     * back (a shutdown is not a crash: attempts counts only those). */
    if (o->started) {
      terr ue;
      if (store_job_unstart(s->cfg.st, j->id, &ue) != T_OK)
        log_warn("scheduler: job %s stays running in the store: %s", j->id,
                 ue.message);
    }
    srun_drop(rr, &o->res);
    goto out;
  }
  const char *code = NULL;
  char msg[TERR_MSG_MAX] = "";
  srun_status(rr, stop, o->crashed, rc, &o->e, &status, &code, msg);
  if (status != JOB_SUCCEEDED) {
    srun_drop_res(rr, &o->res);
  } else if ((rc = srun_keep(rr, &o->res, o->backend_ms, &o->rinfo, &o->parts,
                             o->final, &o->npy, &o->npy_len, &o->parts_doc,
                             &o->e)) == SRUN_OUTPUT_LOST) {
    goto lost;
  } else if (rc) {
    status = JOB_FAILED, code = terr_code_name((terr_code)rc);
    snprintf(msg, sizeof msg, "%s", o->e.message);
  }
  srun_cleanup(rr);

  /* total = queue + run, run from the start (no interval counted twice),
   * and every part of it in a phase: the end's own work — releasing the
   * plan, keeping the result, or for a job without one (canceled, failed)
   * removing what it had written — is the store phase. */
  rr->t_store = t_now_ms() - o->end_ms;
  double queue_ms = o->started ? (double)(o->started_at - j->created_at) : 0;
  double run_ms = t_now_ms() - (o->started ? o->started_ms : j->taken_ms);
  double ms[JOB_T__COUNT] = {queue_ms, rr->t_prepare, rr->t_h2d, rr->t_compute,
                             rr->t_d2h, rr->t_store, queue_ms + run_ms};
  o->compare_json = rr->compare ? json_dumps(rr->compare, SRUN_JSON) : NULL;
  store_job_end end = {
      .status = (job_status)status, .finished_at = t_wall_ms(),
      .result = o->rinfo,
      .result_path = o->final[0] ? o->final : NULL, .compare = o->compare_json,
      .max_abs_diff = rr->compare ? rr->max_abs_diff : NAN, .error_code = code,
      .error_message = code ? msg : NULL, .progress_done = pdone,
      .progress_total = ptotal, .result_npy = o->npy,
      .result_npy_len = o->npy_len, .result_parts = o->parts_doc, .held = 1};
  for (int t = 0; t < JOB_T__COUNT; t++) /* to the microsecond */
    job_timings_put(&end.timings, (job_timing)t, sched_ms_round(ms[t]));
  /* The row as this run's start left it (every column a start writes, and
   * attempts counting it): the store applies the end to it instead of
   * reading the row back (store_job_end.before). */
  store_job before;
  if (o->started && j->row) {
    before = *j->row;
    before.params = j->params_text;
    before.started_at = o->started_at;
    before.backend_used = o->used;
    before.backend_reason = j->reason;
    before.estimate = o->estimate;
    before.attempts = j->row->attempts + 1;
    end.before = &before;
  }
  /* Its memory is free (results kept or dropped, the plan released): a
   * job waiting for it may start. */
  sched_mem_release(s, j);
  /* The end commits on the store's writer thread, which then releases the
   * job (srun_finished); this worker goes on with its next job. */
  srun_end t = {.s = s, .j = j, .status = status, .started = o->started,
                .run_ms = run_ms, .total_ms = ms[JOB_T_TOTAL],
                .started_at = o->started ? o->started_at : 0, .code = code,
                .device = o->r.device, .parts = o->parts, /* its paths go with it */
                .npy = status == JOB_SUCCEEDED ? o->npy : NULL,
                .npy_len = o->npy_len}; /* and the row's result, for the waiters */
  memset(&o->parts, 0, sizeof o->parts);
  if (t.npy) o->npy = NULL;
  t_scopy(t.msg, sizeof t.msg, code ? msg : "");
  t_scopy(t.used, sizeof t.used, o->used);
  t_scopy(t.final, sizeof t.final, o->final);
  srun_send_end(&t, &end);

out:
  tlocal_out_close(&rr->out); /* no-op after srun_cleanup */
  tlocal_log_free(rr->env.local_log);
  free(o->npy);
  json_decref(rr->compare);
  free(o->estimate);
  free(o->compare_json);
  free(o->parts_doc);
}

void sched_run_job(sched *s, sjob *j, int device) {
  sone o;
  int ready = srun_open(&o, s, j, device);
  if (o.leave) return; /* another worker owns it, or back in the queue */
  if (ready) {
    if (j->backend == B_COMPARE)
      o.rc = srun_compare(&o.r, o.plan, &o.res, &o.e);
    else
      o.rc = srun_backend(&o.r, o.plan, j->backend, device, &o.res,
                          &o.backend_ms, &o.e);
  }
  srun_close(&o);
}

/* A gang's members opened and closed on the CPU pool, several at once (as
 * CPU workers run jobs side by side): on the GPU worker's thread alone,
 * 100 members' starts, prepares and ends took longer than their launch. */
typedef struct sgang {
  sched *s;
  sjob **jobs;
  sone *o;
  int *ready;
  int device;
} sgang;

static void gang_open_one(void *arg, int64_t i, int slot) {
  (void)slot;
  sgang *g = arg;
  g->ready[i] = srun_open(&g->o[i], g->s, g->jobs[i], g->device);
}

static void gang_close_one(void *arg, int64_t i, int slot) {
  (void)slot;
  sgang *g = arg;
  if (!g->o[i].leave) srun_close(&g->o[i]);
}

/* A gang (compute/sched/README.md, "Gangs"): n cuda jobs of one kind a
 * GPU worker took together. Each opens as any job does (its own start,
 * prepare and errors; on the pool, several at once); those whose prepared
 * plans share the first ready one's gang key run in one launch
 * (srun_backend_gang), the others alone, one after the other, on this
 * thread; each closes with its own end (on the pool too). */
void sched_run_gang(sched *s, sjob **jobs, int n, int device) {
  sone *o = malloc((size_t)n * sizeof *o);
  srun **rs = calloc((size_t)n, sizeof *rs);
  void **plans = calloc((size_t)n, sizeof *plans);
  int *ready = calloc((size_t)n, sizeof *ready);
  int *in = calloc((size_t)n, sizeof *in), *rcs = calloc((size_t)n, sizeof *rcs);
  sres *res = calloc((size_t)n, sizeof *res);
  terr *es = calloc((size_t)n, sizeof *es);
  char *key0 = malloc(SCHED_GANG_KEY), *key = malloc(SCHED_GANG_KEY);
  if (!o || !rs || !plans || !ready || !in || !rcs || !res || !es || !key0 ||
      !key) {
    free(o), free(rs), free(plans), free(ready), free(in), free(rcs);
    free(res), free(es), free(key0), free(key);
    for (int i = 0; i < n; i++) sched_run_job(s, jobs[i], device);
    return;
  }
  sgang ga = {.s = s, .jobs = jobs, .o = o, .ready = ready, .device = device};
  int width = s->pool ? pool_threads(s->pool) : 1, m = 0, have_key = 0;
  if (s->pool) pool_for(s->pool, width, n, gang_open_one, &ga, NULL);
  else for (int i = 0; i < n; i++) gang_open_one(&ga, i, 0);
  for (int i = 0; i < n; i++) {
    if (!ready[i] || jobs[i]->backend != B_CUDA || !jobs[i]->k->gang_key ||
        !jobs[i]->k->gang_key(o[i].plan, have_key ? key : key0,
                              SCHED_GANG_KEY))
      continue;
    if (have_key && strcmp(key, key0) != 0) continue;
    have_key = 1;
    in[i] = 1;
    rs[m] = &o[i].r;
    plans[m++] = o[i].plan;
  }
  if (m >= 2) {
    double ms = 0;
    srun_backend_gang(rs, plans, m, device, res, rcs, es, &ms);
    for (int i = 0, g = 0; i < n; i++) {
      if (!in[i]) continue;
      o[i].res = res[g];
      o[i].rc = rcs[g];
      if (rcs[g]) o[i].e = es[g];
      o[i].backend_ms = ms / m; /* its share, for the router */
      g++;
    }
  }
  /* The ones outside the launch, alone, on this thread (the device's);
   * then every end. */
  for (int i = 0; i < n; i++)
    if (!o[i].leave && ready[i] && !(in[i] && m >= 2))
      o[i].rc = srun_backend(&o[i].r, o[i].plan, jobs[i]->backend, device,
                             &o[i].res, &o[i].backend_ms, &o[i].e);
  if (s->pool) pool_for(s->pool, width, n, gang_close_one, &ga, NULL);
  else for (int i = 0; i < n; i++) gang_close_one(&ga, i, 0);
  free(o), free(rs), free(plans), free(ready), free(in), free(rcs);
  free(res), free(es), free(key0), free(key);
}
