/* sched.c — the scheduler's queue, workers and lifecycle (see sched.h and,
 * for the locking rules, sched_int.h).
 *
 * Queue: three binary heaps keyed (priority desc, sequence asc): Q_CPU
 * (serial, cpu, compare, and everything when there is no GPU), Q_GPU (cuda)
 * and Q_AUTO (auto, when there are GPU workers). A CPU worker takes the
 * better of the tops of Q_CPU and Q_AUTO; a GPU worker the better of Q_GPU
 * and (while its device is healthy) Q_AUTO. An auto job is routed when it is
 * taken; if the router picks the other kind of worker it is handed over,
 * keeping its sequence number, so it keeps its place. An id table (chained
 * hash) finds queued and running jobs for cancel, progress and wait. (The
 * heaps and the table are in compute/sched/queue.c.)
 *
 * Workers: the CPU workers are the pool's threads; the pool's idle callback
 * (sched_idle) takes a CPU job and runs it on the worker, which may split it
 * over the whole pool with pool_for. One thread per GPU device runs cuda
 * jobs; one that takes a tiny cuda job of a kind with gang ops takes the
 * alike queued cuda jobs behind it too, to share one launch (sched_take_gang;
 * compute/sched/README.md, "Gangs"). A monitor thread sets stop = 2 on jobs past their deadline (it wakes
 * at least every 25 ms while jobs run, and sleeps while none do) and writes
 * progress [async] at most every 200 ms per job.
 *
 * Deadlines count from when a worker takes the job (queue time excluded).
 */
#include "compute/array/codec/spare.h"
#include "compute/sched/cluster.h"
#include "compute/sched/queue.h"
#include "compute/sched/sched_int.h"
#include "compute/sched/stats/sampler.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/sched/route/router.h"

#define MONITOR_TICK_MS 25.0
#define PROGRESS_EVERY_MS 200.0

/* 1 when heap h has a top that may be taken now: not one sent back for
 * memory that no job has released since (it keeps its place, and the jobs
 * behind it wait too, so that a big job is not passed over for ever). */
static int heap_ready(const sched *s, const sjob_heap *h) {
  const sjob *j = h ? sjob_heap_top(h) : NULL;
  if (!j) return 0;
  return !(j->mem_blocked && j->mem_wait_gen == s->mem_gen &&
           s->mem_reserved > 0);
}

/* Pop the better top of two heaps (b may be -1); NULL when neither has a
 * top to take. */
static sjob *sched_pop(sched *s, int a, int b) {
  sjob_heap *ha = &s->q[a], *hb = b >= 0 ? &s->q[b] : NULL;
  sjob_heap *h = heap_ready(s, ha) ? ha : NULL;
  if (heap_ready(s, hb) &&
      (!h || sjob_before(sjob_heap_top(hb), sjob_heap_top(h))))
    h = hb;
  if (!h) return NULL;
  sjob *j = sjob_heap_top(h);
  sjob_heap_remove(h, 0);
  return j;
}

/* A worker takes j: RUNNING, in the running list, deadline armed. [mu] */
static void sched_take(sched *s, sjob *j, int on_gpu) {
  SCHED_ASSERT_LOCKED(s);
  s->nqueued--;
  j->on_gpu = on_gpu;
  j->queue = -1;
  sjob_set_state(j, SJ_RUNNING);
  j->taken_ms = t_now_ms();
  double timeout = j->timeout_s > 0 ? j->timeout_s : s->cfg.default_timeout_s;
  j->deadline_ms = timeout > 0 ? j->taken_ms + timeout * 1e3 : 0;
  j->next_progress_ms = j->taken_ms + PROGRESS_EVERY_MS;
  sched_running_add(s, j);
  j->in_running = 1;
  if (s->mon_idle) {
    s->mon_idle = 0;
    pthread_cond_signal(&s->mon_cv);
  }
}

/* ---- workers ------------------------------------------------------------- */
/* The pool's idle callback: run one CPU job on this worker. */
static int sched_idle(void *ud) {
  sched *s = ud;
  tmutex_lock(&s->mu);
  sjob *j = s->taking ? sched_pop(s, Q_CPU, Q_AUTO) : NULL;
  if (j) sched_take(s, j, 0);
  tmutex_unlock(&s->mu);
  if (!j) return 0;
  sched_run_job(s, j, -1);
  return 1;
}

typedef struct gpu_arg {
  sched *s;
  int dev;
} gpu_arg;

/* Gangs (compute/sched/README.md, "Gangs"): a queued cuda job that may
 * share its launch with others — its kind has gang ops, it is at most the
 * kind's gang_max elements, is no tile and has no "output", and was never
 * started before (a job that killed the process takes no other with it).
 * [mu] */
static const kind_ops *sched_gang_kind(const sched *s, const sjob *j) {
  /* TESSEL_GPU_GANG=0: every job alone (for measuring, bench_gang.py) */
  static int off = -1;
  if (off < 0) {
    const char *v = getenv("TESSEL_GPU_GANG");
    off = v && strcmp(v, "0") == 0;
  }
  if (off || !j->have_est || j->tiles > 0 || j->output_file || j->attempts > 0 ||
      atomic_load(&j->stop) || j->mem_blocked ||
      !(j->backend == B_CUDA ||
        (j->backend == B_AUTO && j->requested == B_CUDA)))
    return NULL;
  const kind_ops *k = j->k ? j->k : s->cfg.kind_lookup(j->kind);
  if (!k || !k->gang_run || !k->gang_key || k->gang_max <= 0 ||
      j->est.size > k->gang_max)
    return NULL;
  return k;
}

/* With j taken: the queued cuda jobs right behind it that may share its
 * launch (same kind, size and result dtype; the kind's key, once
 * prepared, decides), taken too, in queue order: at most SCHED_GANG_MAX
 * in all, the first that may not ends the gang. *n: the gang's size (1:
 * j alone). [mu] */
static void sched_take_gang(sched *s, sjob *j, sjob **gang, int *n) {
  gang[0] = j;
  *n = 1;
  const kind_ops *k = sched_gang_kind(s, j);
  if (!k) return;
  sjob_heap *h = &s->q[Q_GPU];
  while (*n < SCHED_GANG_MAX && heap_ready(s, h)) {
    sjob *b = sjob_heap_top(h);
    if (sched_gang_kind(s, b) != k || b->est.size != j->est.size ||
        b->est.out_dtype != j->est.out_dtype)
      break;
    sjob_heap_remove(h, 0);
    sched_take(s, b, 1);
    gang[(*n)++] = b;
  }
  for (int i = 0; *n > 1 && i < *n; i++) {
    gang[i]->gang_n = *n;
    snprintf(gang[i]->gang_first, sizeof gang[i]->gang_first, "%s", j->id);
  }
}

/* 1 when the GPU worker leaves the queue as it is for now (sched.h,
 * sched_hold_open): the job it would take is a Q_GPU job that may share
 * a launch, queued by a batch that is still queueing its items, and fewer
 * than a full gang wait in Q_GPU. The hold's close, or the next job
 * queued, wakes the worker. auto_ok: it may take Q_AUTO's top. [mu] */
static int sched_gang_gathering(sched *s, int auto_ok) {
  sjob_heap *g = &s->q[Q_GPU], *a = &s->q[Q_AUTO];
  if (!heap_ready(s, g) || g->n >= SCHED_GANG_MAX) return 0;
  sjob *j = sjob_heap_top(g);
  if (!j->hold || !sched_hold_is_open(s, j->hold) || !sched_gang_kind(s, j))
    return 0;
  return !(auto_ok && heap_ready(s, a) && sjob_before(sjob_heap_top(a), j));
}

static void *sched_gpu_worker(void *arg) {
  gpu_arg a = *(gpu_arg *)arg;
  free(arg);
  sched *s = a.s;
  sjob *gang[SCHED_GANG_MAX];
  tmutex_lock(&s->mu);
  while (!s->quit) {
    sjob *j = NULL;
    int auto_ok = s->gpu.healthy(a.dev);
    if (s->taking && !sched_gang_gathering(s, auto_ok))
      j = sched_pop(s, Q_GPU, auto_ok ? Q_AUTO : -1);
    if (!j) {
      tmutex_wait(&s->gpu_cv, &s->mu);
      continue;
    }
    sched_take(s, j, 1);
    int n = 1;
    sched_take_gang(s, j, gang, &n);
    tmutex_unlock(&s->mu);
    if (n > 1) sched_run_gang(s, gang, n, a.dev);
    else sched_run_job(s, j, a.dev);
    tmutex_lock(&s->mu);
  }
  tmutex_unlock(&s->mu);
  return NULL;
}

/* Deadlines and progress. Holds mu except while sleeping. */
static void *sched_monitor(void *arg) {
  sched *s = arg;
  tmutex_lock(&s->mu);
  while (!s->quit) {
    double now = t_now_ms(), wake = now + MONITOR_TICK_MS;
    for (sjob *j = s->running; j; j = j->rnext) {
      if (j->deadline_ms > 0) {
        if (now >= j->deadline_ms) {
          int zero = 0;
          atomic_compare_exchange_strong(&j->stop, &zero, 2);
        } else if (j->deadline_ms < wake) {
          wake = j->deadline_ms;
        }
      }
      if (now >= j->next_progress_ms) {
        j->next_progress_ms = now + PROGRESS_EVERY_MS;
        int64_t d = atomic_load(&j->ctx.progress_done);
        int64_t t = atomic_load(&j->ctx.progress_total);
        d += j->progress_base_done;
        t = j->progress_base_total + t * (1 + j->progress_runs_left);
        if (d != j->stored_done && j->state == SJ_RUNNING) {
          j->stored_done = d;
          store_job_progress(s->cfg.st, j->id, d, t); /* [async] */
        }
      }
    }
    if (!s->running) {
      s->mon_idle = 1;
      tmutex_wait(&s->mon_cv, &s->mu);
      continue;
    }
    struct timespec ts;
    tmutex_deadline(&ts, wake - now < 1 ? 1 : wake - now);
    tmutex_timedwait(&s->mon_cv, &s->mu, &ts);
  }
  tmutex_unlock(&s->mu);
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------ */
int sched_create(const sched_config *cfg, sched **out, terr *e) {
  *out = NULL;
  if (!cfg || !cfg->st || !cfg->data_dir || !cfg->kind_lookup)
    return terr_set(e, T_EINVAL, "", -1,
                    "scheduler: store, data_dir and kind_lookup are required");
  sched *s = calloc(1, sizeof *s);
  if (!s) return terr_set(e, T_ENOMEM, "", -1, "scheduler: out of memory");
  for (int q = 0; q < Q__COUNT; q++) sjob_heap_init(&s->q[q]);
  s->cfg = *cfg;
  s->holds_off = sched_holds_off_env();
  s->up = (sched_up){.add_claimed = sched_add_claimed,
                     .cancel_held = sched_cancel_held,
                     .cancel = sched_cancel,
                     .drop_lost = sched_drop_lost,
                     .results_sweep = sched_results_sweep,
                     .split_held_locked = sched_split_held_locked,
                     .cluster_recheck = sched_cluster_recheck};
  s->data_dir = strdup(cfg->data_dir);
  size_t len = strlen(cfg->data_dir) + sizeof "/results";
  s->results_dir = malloc(len);
  s->calibration_path =
      cfg->calibration_path ? strdup(cfg->calibration_path) : NULL;
  if (!s->data_dir || !s->results_dir ||
      (cfg->calibration_path && !s->calibration_path)) {
    sched_destroy(s);
    return terr_set(e, T_ENOMEM, "", -1, "scheduler: out of memory");
  }
  snprintf(s->results_dir, len, "%s/results", cfg->data_dir);
  int64_t spare = cfg->spare_results < 0 ? spare_default_budget() : cfg->spare_results;
  if (spare > 0) {
    int rc = spare_start(cfg->data_dir, spare, e);
    if (rc) {
      sched_destroy(s);
      return rc;
    }
    s->spare_on = 1;
  }
  s->cfg.data_dir = s->data_dir;
  s->cfg.calibration_path = s->calibration_path;
  long ncores = sysconf(_SC_NPROCESSORS_ONLN);
  s->nthreads = cfg->threads > 0 ? cfg->threads : (ncores > 0 ? (int)ncores : 1);
  if (cfg->gpu_ops) {
    s->gpu = *cfg->gpu_ops;
  } else {
    s->gpu = (sched_gpu_ops){gpu_count, gpu_healthy, gpu_note_result,
                             gpu_lock, gpu_unlock, gpu_unavailable_reason,
                             gpu_trylock};
  }
  s->cfg.gpu_ops = &s->gpu;
  s->ngpu = s->gpu.count();
  if (s->ngpu > GPU_MAX_DEVICES) s->ngpu = GPU_MAX_DEVICES;
  s->inline_max = cfg->inline_result_max > 0 ? cfg->inline_result_max
                                              : SCHED_INLINE_RESULT_DEFAULT;
  s->row_max = cfg->row_result_max > 0 ? cfg->row_result_max : 0;
  s->max_attempts =
      cfg->max_attempts > 0 ? cfg->max_attempts : SCHED_MAX_ATTEMPTS_DEFAULT;
  if (cfg->max_memory_bytes > 0) {
    s->mem_budget = cfg->max_memory_bytes;
  } else if (cfg->max_memory_bytes == 0) {
    int64_t total, avail;
    sched_mem_probe(&total, &avail);
    s->mem_budget = sched_mem_default_budget(total);
  }
  s->env_max_elems =
      cfg->max_job_mem_bytes > 0 ? cfg->max_job_mem_bytes / 4 : INT64_MAX;
  atomic_init(&s->tmp_counter, 0);
  tmutex_init(&s->mu);
  pthread_condattr_t mono;
  pthread_condattr_init(&mono);
  pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
  pthread_cond_init(&s->gpu_cv, NULL);
  pthread_cond_init(&s->idle_cv, &mono);
  pthread_cond_init(&s->mon_cv, &mono);
  pthread_cond_init(&s->fired_cv, NULL);
  pthread_condattr_destroy(&mono);
  s->accepting = 1; /* reserve/enqueue work before start; workers wait */
  s->cluster = store_is_cluster(cfg->st);
  if (sched_cluster_create(s, e) != T_OK) {
    sched_destroy(s);
    return e->code;
  }
  *out = s;
  return T_OK;
}

void sched_results_sweep(sched *s, int (*match)(const char *name,
                                                 const void *arg),
                         const void *arg, const char *why) {
  DIR *d = opendir(s->results_dir);
  if (!d) return;
  struct dirent *de;
  char path[4096];
  while ((de = readdir(d))) {
    if (!match(de->d_name, arg)) continue;
    snprintf(path, sizeof path, "%s/%s", s->results_dir, de->d_name);
    if (unlink(path) == 0) log_info("scheduler: removed %s (%s)", path, why);
  }
  closedir(d);
}

static int is_temp(const char *name, const void *arg) {
  (void)arg;
  return strstr(name, ".npy.tmp") != NULL;
}

/* Remove <results>/<id>.npy.tmp* left by a process that died mid-write. */
static void sched_clean_temp(sched *s) {
  sched_results_sweep(s, is_temp, NULL, "stale");
}

typedef struct unfinished {
  const store_job *jobs;
  int n;
} unfinished;

/* <id>.npy or <id>.<part>.npy of one of the jobs */
static int of_unfinished(const char *name, const void *arg) {
  const unfinished *u = arg;
  const char *dot = strchr(name, '.');
  size_t len = strlen(name);
  if (!dot || len < 4 || strcmp(name + len - 4, ".npy") != 0) return 0;
  size_t idlen = (size_t)(dot - name);
  for (int i = 0; i < u->n; i++)
    if (strlen(u->jobs[i].id) == idlen && memcmp(u->jobs[i].id, name, idlen) == 0)
      return 1;
  return 0;
}

/* Remove the result files of jobs that did not end (<id>.npy and every
 * part's <id>.<name>.npy): a process that died between renaming them and
 * committing the end left them, and the job runs again from nothing, so
 * none is ever listed half-kept. One pass over the folder. */
static void sched_clean_unfinished(sched *s, const store_job *jobs, int n) {
  if (n <= 0) return;
  unfinished u = {jobs, n};
  sched_results_sweep(s, of_unfinished, &u, "of an unfinished job");
}

/* Queue one job from the store. reserved: it holds a reserve slot. */
static int sched_add(sched *s, const store_job *sj, int reserved,
                     json_t *params, const job_estimate *est,
                     const kind_ops *k, void *checked, uint64_t hold,
                     terr *e) {
  if (sj->tiles > 0 && !sj->parent && !(reserved && s->cluster)) {
    /* A split parent: its coordinator runs it, in no queue (compute/sched/split.c);
     * on a cluster store once claimed (a submit only inserts the row). */
    kind_checked_free(k, checked);
    if (reserved) sched_unreserve(s);
    return sched_split_run(s, sj, e);
  }
  sjob *j = sjob_new(sj);
  if (!j) {
    kind_checked_free(k, checked);
    if (reserved) sched_unreserve(s);
    return terr_set(e, T_ENOMEM, "", -1, "scheduler: out of memory");
  }
  if (reserved && s->cluster) {
    /* A submit on a cluster store: the row is in the store, and whichever
     * node has a free slot claims it (this one is woken first). */
    kind_checked_free(k, checked);
    sjob_free(j);
    sched_unreserve(s);
    sched_cluster_kick(s);
    return T_OK;
  }
  if (params && est) { /* checked at submit: the worker skips it */
    j->params = json_incref(params);
    j->est = *est;
    j->have_est = 1;
    j->checked = checked; /* prepare takes it: parsed once per job */
    j->checked_k = k;
  }
  tmutex_lock(&s->mu);
  if (reserved && s->reserved > 0) s->reserved--;
  if (s->shut) { /* stays queued in the store for the next start */
    tmutex_unlock(&s->mu);
    sjob_free(j);
    return terr_set(e, T_EUNAVAIL, "", -1, "the service is shutting down");
  }
  if (sched_find(s, j->id)) { /* already held: enqueue is idempotent */
    tmutex_unlock(&s->mu);
    sjob_free(j);
    return T_OK;
  }
  j->seq = ++s->seq;
  j->hold = hold;
  int queue = sched_queue_for(s, j);
  int rc = sched_table_insert(s, j);
  if (rc == T_OK) {
    rc = sched_queue_push(s, j, queue);
    if (rc) sched_table_remove(s, j);
  }
  /* A batch's item the GPU worker would leave queued (its hold is open):
   * no wake for it; the hold's close, or a full gang's last item, wakes
   * the worker (100 wakes a batch of the seeds' sums, each taking mu) */
  int quiet = rc == T_OK && queue == Q_GPU && sched_gang_gathering(s, 1);
  tmutex_unlock(&s->mu);
  if (rc) {
    sjob_free(j);
    return terr_set(e, rc, "", -1, "scheduler: out of memory queueing %s",
                    sj->id);
  }
  if (!quiet) sched_wake(s, queue);
  return T_OK;
}

int sched_add_claimed(sched *s, const store_job *row, terr *e) {
  return sched_add(s, row, 0, NULL, NULL, NULL, NULL, 0, e);
}

int sched_start(sched *s, terr *e) {
  store_job *jobs = NULL;
  int n = 0, rc;
  if (s->started)
    return terr_set(e, T_ECONFLICT, "", -1, "scheduler already started");
  if (t_mkdirs(s->results_dir) != 0)
    return terr_set(e, T_EIO, "", -1, "cannot create %s: %s", s->results_dir,
                    strerror(errno));
  /* On a cluster store the data directory is shared: another node's
   * temporaries and unfinished results are not ours to remove, no journal
   * (its starts are counted at claim), and the store's unfinished jobs are
   * claimed through the queue and the reaper, not queued here. */
  if (!s->cluster) {
    sched_clean_temp(s);
    sched_journal_open(s); /* first: it raises attempts of jobs read next */
    if ((rc = store_job_unfinished(s->cfg.st, &jobs, &n, e))) return rc;
  }
  sched_clean_unfinished(s, jobs, n);
  int requeued = 0;
  for (int i = 0; i < n; i++) {
    terr e2;
    if (jobs[i].status == JOB_RUNNING &&
        store_job_requeue(s->cfg.st, jobs[i].id, &e2) != T_OK) {
      log_error("scheduler: cannot requeue %s: %s", jobs[i].id, e2.message);
      continue;
    }
    if (sched_add(s, &jobs[i], 0, NULL, NULL, NULL, NULL, 0, &e2) == T_OK) requeued++;
  }
  for (int i = 0; i < n; i++) store_job_clear(&jobs[i]);
  free(jobs);
  if (n) log_info("scheduler: %d unfinished job(s) queued again", requeued);

  /* The router's cost model: loaded from the data dir, or measured once
   * (a fraction of a second) before any job runs. Without it auto keeps
   * the size rule. */
  if (s->calibration_path) {
    terr ce;
    terr_clear(&ce);
    if (router_init(s->calibration_path, s->results_dir, s->nthreads,
                    s->row_max, s->inline_max, &ce) != T_OK)
      log_warn("scheduler: router calibration failed (%s); auto uses the "
               "size rule", ce.message);
  }
  /* Workers start with taking == 0 (they find nothing), so that no job runs
   * before s->pool is set; then they are let in and woken. */
  pool *p = pool_create(s->nthreads, sched_idle, s);
  if (!p) goto fail_threads;
  tmutex_lock(&s->mu);
  s->pool = p;
  s->started = 1;
  s->taking = 1;
  int wake = s->nqueued < s->nthreads ? s->nqueued : s->nthreads;
  tmutex_unlock(&s->mu);
  for (int i = 0; i < wake; i++) pool_notify(p);
  if (pthread_create(&s->monitor, NULL, sched_monitor, s) != 0)
    goto fail_threads;
  s->monitor_started = 1;
  for (int d = 0; d < s->ngpu; d++) {
    gpu_arg *a = malloc(sizeof *a);
    if (!a) goto fail_threads;
    a->s = s;
    a->dev = d;
    if (pthread_create(&s->gpu_threads[d], NULL, sched_gpu_worker, a) != 0) {
      free(a);
      goto fail_threads;
    }
    tmutex_lock(&s->mu);
    s->gpu_started++;
    tmutex_unlock(&s->mu);
  }
  if (sched_sampler_start(s) != 0) /* history is not worth refusing to run */
    log_warn("scheduler: cannot start the load sampler");
  log_info("scheduler: %d CPU worker(s), %d GPU worker(s), memory budget "
           "%lld bytes, max attempts %d", s->nthreads, s->ngpu,
           (long long)s->mem_budget, s->max_attempts);
  return T_OK;

fail_threads:
  s->started = 1;
  sched_shutdown(s, 0);
  return terr_set(e, T_EINTERNAL, "", -1, "scheduler: cannot start threads");
}

void sched_shutdown(sched *s, double deadline_s) {
  if (!s) return;
  tmutex_lock(&s->mu);
  if (s->shut) {
    tmutex_unlock(&s->mu);
    return;
  }
  s->shut = 1;
  s->accepting = 0;
  s->taking = 0;
  double until = t_now_ms() + (deadline_s > 0 ? deadline_s * 1e3 : 0);
  while (s->nrunning > 0 && t_now_ms() < until) {
    struct timespec ts;
    tmutex_deadline(&ts, until - t_now_ms());
    tmutex_timedwait(&s->idle_cv, &s->mu, &ts);
  }
  /* Still running: stop them, leaving them unfinished in the store. */
  for (sjob *j = s->running; j; j = j->rnext) {
    int zero = 0;
    atomic_compare_exchange_strong(&j->stop, &zero, SJ_STOP_SHUTDOWN);
  }
  while (s->nrunning > 0) tmutex_wait(&s->idle_cv, &s->mu);
  s->quit = 1;
  pthread_cond_broadcast(&s->gpu_cv);
  pthread_cond_broadcast(&s->mon_cv);
  tmutex_unlock(&s->mu);

  /* The GPU workers first: a gang's worker may still be inside pool_for
   * on s->pool (its members' prepares and ends, run.c) after the last of
   * its jobs ended; the pool goes once nobody can call it (TSan caught
   * pool_destroy racing that pool_for in test_sched_gang). */
  for (int d = 0; d < s->gpu_started; d++) pthread_join(s->gpu_threads[d], NULL);
  s->gpu_started = 0;
  if (s->monitor_started) pthread_join(s->monitor, NULL); /* it may wake the pool */
  s->monitor_started = 0;
  pool_destroy(s->pool);
  s->pool = NULL;

  /* Queued jobs stay queued in the store; release them here (those sent
   * back for memory too: nothing runs now, so none is held back). */
  tmutex_lock(&s->mu);
  s->mem_gen++;
  tmutex_unlock(&s->mu);
  for (;;) {
    tmutex_lock(&s->mu);
    sjob *j = sched_pop(s, Q_CPU, Q_GPU);
    if (!j) j = sched_pop(s, Q_AUTO, -1);
    if (j) {
      s->nqueued--;
      sjob_set_state(j, SJ_ENDING);
    }
    tmutex_unlock(&s->mu);
    if (!j) break;
    sched_end_unstarted(s, j, -1, NULL, NULL);
  }
  /* Nothing runs here now: the node stops heartbeating and leaves (its
   * claimed, unstarted jobs go back to the queue). */
  sched_split_stop(s); /* parents left running: resumed at the next start */
  sched_cluster_stop(s);
}

void sched_destroy(sched *s) {
  if (!s) return;
  sched_shutdown(s, 0); /* no-op when already shut down */
  sched_sampler_stop(s);
  tmutex_lock(&s->mu); /* releases still firing (see compute/sched/wait.c) */
  while (s->nfiring > 0) tmutex_wait(&s->fired_cv, &s->mu);
  tmutex_unlock(&s->mu);
  if (s->calibration_path) router_shutdown(); /* saves its corrections */
  sched_journal_close(s); /* no worker runs: every slot is free */
  sched_cluster_destroy(s);
  if (s->spare_on) spare_stop();
  for (int q = 0; q < Q__COUNT; q++) theap_free(&s->q[q]);
  free(s->buckets);
  while (s->waiters) { /* registrations of jobs never finished here */
    swaiter *w = s->waiters;
    s->waiters = w->next;
    free(w);
  }
  free(s->hist);
  pthread_cond_destroy(&s->fired_cv);
  pthread_cond_destroy(&s->mon_cv);
  pthread_cond_destroy(&s->idle_cv);
  pthread_cond_destroy(&s->gpu_cv);
  tmutex_destroy(&s->mu);
  free(s->data_dir);
  free(s->results_dir);
  free(s->calibration_path);
  free(s);
}

/* ---- admission ------------------------------------------------------------ */
/* Seconds until a queue slot is likely free, from recent finishes, with
 * queued jobs counted as admission counts them. [mu] */
static int sched_retry_after(sched *s, int64_t queued) {
  SCHED_ASSERT_LOCKED(s);
  int n = s->nfinish < SCHED_RATE_RING ? s->nfinish : SCHED_RATE_RING;
  if (n == 0) return 5; /* nothing finished yet: no rate to go by */
  int oldest = s->nfinish < SCHED_RATE_RING ? 0 : s->finish_pos;
  double span_ms = t_now_ms() - s->finish_ms[oldest];
  double per_s = (double)n / (span_ms > 1 ? span_ms / 1e3 : 1e-3);
  double ahead = (double)(queued + s->reserved - s->cfg.queue_limit + 1);
  double secs = ceil((ahead < 1 ? 1 : ahead) / per_s);
  return secs < 1 ? 1 : secs > 3600 ? 3600 : (int)secs;
}

int sched_reserve(sched *s, int *retry_after_s, terr *e) {
  if (retry_after_s) *retry_after_s = 0;
  tmutex_lock(&s->mu);
  int rc = T_OK;
  /* On a cluster the queue is the store's (every node's queued jobs, read
   * by compute/sched/cluster.c); this node's own queue holds only what it
   * claimed. The message names the counts that refused. */
  int64_t queued = s->cluster ? (int64_t)sched_cluster_depth(s)
                              : (int64_t)s->nqueued;
  if (!s->accepting) {
    rc = terr_set(e, T_EUNAVAIL, "", -1, "the service is shutting down");
  } else if (s->cfg.queue_limit > 0 &&
             queued + s->reserved >= s->cfg.queue_limit) {
    int ra = sched_retry_after(s, queued);
    if (retry_after_s) *retry_after_s = ra;
    rc = terr_set(e, T_EBUSY, "", -1,
                  "the job queue is full (%lld jobs queued%s and %d being "
                  "submitted, limit %d); retry in %d s",
                  (long long)queued, s->cluster ? " in the cluster" : "",
                  s->reserved, s->cfg.queue_limit, ra);
    if (s->cluster) sched_cluster_depth_stale(s);
  } else {
    s->reserved++;
  }
  tmutex_unlock(&s->mu);
  return rc;
}

void sched_unreserve(sched *s) {
  tmutex_lock(&s->mu);
  if (s->reserved > 0) s->reserved--;
  tmutex_unlock(&s->mu);
}

int sched_enqueue(sched *s, const store_job *j, terr *e) {
  return sched_add(s, j, 1, NULL, NULL, NULL, NULL, 0, e);
}

int sched_enqueue_checked(sched *s, const store_job *j, json_t *params,
                          const job_estimate *est, const kind_ops *k,
                          void *checked, terr *e) {
  return sched_add(s, j, 1, params, est, k, checked, 0, e);
}

int sched_enqueue_held(sched *s, const store_job *j, json_t *params,
                       const job_estimate *est, const kind_ops *k,
                       void *checked, uint64_t hold, terr *e) {
  return sched_add(s, j, 1, params, est, k, checked, hold, e);
}

/* ---- cancel --------------------------------------------------------------- */
int sched_cancel_held(sched *s, const char *id, const char *owner, terr *e) {
  tmutex_lock(&s->mu);
  sjob *j = sched_find(s, id);
  if (j && owner && strcmp(j->owner, owner) != 0) j = NULL;
  if (j && j->state == SJ_QUEUED) {
    sjob_heap_remove(&s->q[j->queue], j->heap_index);
    s->nqueued--;
    sjob_set_state(j, SJ_ENDING);
    tmutex_unlock(&s->mu);
    sched_end_unstarted(s, j, JOB_CANCELED, "canceled",
                        "canceled by request before it started");
    return T_OK;
  }
  if (j && j->state == SJ_RUNNING) {
    int zero = 0; /* a timed-out job stays timed out */
    atomic_compare_exchange_strong(&j->stop, &zero, 1);
    tmutex_unlock(&s->mu);
    return T_OK;
  }
  tmutex_unlock(&s->mu);
  if (j) return terr_set(e, T_ECONFLICT, "", -1, "job %s is finishing", id);
  return T_ENOTFOUND;
}

void sched_drop_lost(sched *s, const char *id) {
  tmutex_lock(&s->mu);
  sjob *j = sched_find(s, id);
  if (j && j->state == SJ_QUEUED) {
    sjob_heap_remove(&s->q[j->queue], j->heap_index);
    s->nqueued--;
    sjob_set_state(j, SJ_ENDING);
    tmutex_unlock(&s->mu);
    log_warn("scheduler: job %s: its lease went to another node; dropped "
             "before it started", id);
    sched_end_unstarted(s, j, -1, NULL, NULL); /* nothing written */
    return;
  }
  if (j && j->state == SJ_RUNNING) {
    atomic_store(&j->stop, SJ_STOP_LOST);
    log_warn("scheduler: job %s: its lease went to another node; stopping "
             "it, its end is not written", id);
  }
  tmutex_unlock(&s->mu);
}

int sched_cancel(sched *s, const char *id, const char *owner, terr *e) {
  int rc = sched_cancel_held(s, id, owner, e);
  if (rc != T_ENOTFOUND) return rc;
  if (s->cluster) {
    /* Held by another node, queued in the store, or finished: the store
     * decides; the holder stops it at its "cancel" event. */
    int ended = 0;
    return store_job_cancel_request(s->cfg.st, id, owner, &ended, e);
  }

  /* Not held here: finished, unknown, or in the store but not (yet or any
   * more) queued here — between the API's insert and enqueue, or after a
   * shutdown. The last kind is canceled in the store directly; a worker
   * that later takes it finds it no longer queued and drops it. */
  store_job sj;
  memset(&sj, 0, sizeof sj);
  rc = store_job_get(s->cfg.st, id, owner, &sj, e);
  if (rc == T_OK && job_status_final(sj.status)) {
    rc = terr_set(e, T_ECONFLICT, "", -1, "job %s already %s", id,
                  job_status_name(sj.status));
  } else if (rc == T_OK) {
    store_job_end end = {.status = JOB_CANCELED, .finished_at = t_wall_ms(),
                         .max_abs_diff = NAN, .error_code = "canceled",
                         .error_message = "canceled by request"};
    rc = store_job_finish(s->cfg.st, id, &end, e);
  }
  store_job_clear(&sj);
  return rc;
}
