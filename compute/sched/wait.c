/* compute/sched/wait.c — waiters, live progress, counters, the duration histogram
 * (the submit-time check is submit_check.c).
 *
 * Waiters: every registration is an swaiter in one list (s->waiters, under
 * sched.mu); a job only counts its own (nwaiters) so that ending a job with
 * none costs nothing. When a job ends, the thread that releases it (the
 * store's writer, after the commit; see compute/sched/run.c) marks its waiters
 * `firing` under the lock, then for each in turn marks it `calling`, calls
 * it with no lock held, unlists and frees it and broadcasts fired_cv.
 * Every release counts in s->nfiring from sched_release_locked to the end
 * of sched_fire, and sched_destroy waits for it to reach 0: a job stops
 * counting as running (so sched_shutdown returns) before its releasing
 * thread is done with the scheduler, and a caller woken by the job's end
 * (a waiter callback, or a poll of the store) may destroy it at once.
 * sched_unwait: a pending registration is removed (1); a firing one whose
 * call has not begun is marked `skip` and never called (1); one being
 * called is waited for on fired_cv until its callback returned (0), unless
 * sched_unwait runs inside that very callback, where waiting would
 * deadlock (0 at once). So once sched_unwait returns, the callback is not
 * running and will never be called, and the caller may free `arg`.
 * Remote waiters (a cluster store, compute/sched/cluster.c): a wait on a job this
 * node does not hold is registered with job NULL and the job's id (rid)
 * and fired by sched_fire_remote — on the job's "end" event (the store's
 * listener thread), by the node thread's read of the store (at once after
 * the registration, so that an end that came before it is not missed, then
 * every second and on "reset"), or when this node ends the job itself
 * (sched_release_locked, with the committed row). A split parent run by a
 * coordinator here (compute/sched/split.c) is waited for the same way on any
 * store: fired when its coordinator has ended it (or quits).
 * Finding a token walks the list: it holds one entry per request that is
 * waiting right now. A job's remote waiters are found through s->rhash
 * (buckets by id) instead: every node hears every "end", and a node
 * answering batches waits for thousands of jobs at once — walking them
 * all under sched.mu at each end was O(waiters) per end
 * (tests/bench/results/pg-2core-2026-11-29b.md).
 *
 * Histogram: per (kind, backend) a row of bucket counts of run time (from a
 * worker taking the job to its end; queue time excluded), for /metrics.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/sched/cluster.h"
#include "compute/sched/queue.h"
#include "compute/sched/sched_int.h"
#include "util/vec.h"

const double sched_hist_bounds_ms[SCHED_HIST_BUCKETS] = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 30000, 120000};

/* ---- histogram -------------------------------------------------------------- */
/* "cuda:0" -> "cuda" into buf. */
static void backend_family(const char *backend, char *buf, size_t len) {
  size_t n = strcspn(backend, ":");
  if (n >= len) n = len - 1;
  memcpy(buf, backend, n);
  buf[n] = 0;
}

static void hist_observe(sched *s, const char *kind, const char *backend,
                         int status, double ms) { /* [mu] */
  char fam[24];
  backend_family(backend, fam, sizeof fam);
  shist *h = NULL;
  for (int i = 0; i < s->nhist && !h; i++)
    if (s->hist[i].status == status && strcmp(s->hist[i].kind, kind) == 0 &&
        strcmp(s->hist[i].backend, fam) == 0)
      h = &s->hist[i];
  if (!h) {
    if (tvec_grow(&s->hist, &s->caphist, sizeof *s->hist,
                  (size_t)s->nhist + 1, 0))
      return; /* a lost observation, not an error */
    h = &s->hist[s->nhist++];
    memset(h, 0, sizeof *h);
    snprintf(h->kind, sizeof h->kind, "%s", kind);
    snprintf(h->backend, sizeof h->backend, "%s", fam);
    h->status = status;
  }
  for (int b = 0; b < SCHED_HIST_BUCKETS; b++) {
    if (ms <= sched_hist_bounds_ms[b]) {
      h->counts[b]++;
      break;
    }
  }
  h->sum_ms += ms;
  h->count++;
}

void sched_histogram(sched *s, const char *kind, const char *backend,
                     int status, int64_t counts[SCHED_HIST_BUCKETS],
                     double *sum_ms, int64_t *count) {
  char fam[24] = "";
  if (backend) backend_family(backend, fam, sizeof fam);
  memset(counts, 0, SCHED_HIST_BUCKETS * sizeof counts[0]);
  *sum_ms = 0;
  *count = 0;
  tmutex_lock(&s->mu);
  for (int i = 0; i < s->nhist; i++) {
    const shist *h = &s->hist[i];
    if (kind && strcmp(h->kind, kind) != 0) continue;
    if (backend && strcmp(h->backend, fam) != 0) continue;
    if (status >= 0 && h->status != status) continue;
    for (int b = 0; b < SCHED_HIST_BUCKETS; b++) counts[b] += h->counts[b];
    *sum_ms += h->sum_ms;
    *count += h->count;
  }
  tmutex_unlock(&s->mu);
  for (int b = 1; b < SCHED_HIST_BUCKETS; b++) counts[b] += counts[b - 1];
}

/* ---- the remote waiters' buckets (s->rhash) -------------------------------- */
static size_t rh_slot(const char *id) {
  uint64_t h = 1469598103934665603ull;
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 1099511628211ull;
  return (size_t)(h % SCHED_RHASH);
}

static void rh_add(sched *s, swaiter *w) { /* [mu] */
  swaiter **b = &s->rhash[rh_slot(w->rid)];
  w->rprev = NULL;
  w->rnext = *b;
  if (*b) (*b)->rprev = w;
  *b = w;
}

static void rh_del(sched *s, swaiter *w) { /* [mu] */
  if (w->rprev)
    w->rprev->rnext = w->rnext;
  else
    s->rhash[rh_slot(w->rid)] = w->rnext;
  if (w->rnext) w->rnext->rprev = w->rprev;
  w->rprev = w->rnext = NULL;
}

/* Mark the pending remote waiters of id firing, onto *chain. [mu] */
static void rh_take(sched *s, const char *id, swaiter **chain) {
  for (swaiter *w = s->rhash[rh_slot(id)], *next; w; w = next) {
    next = w->rnext;
    if (w->firing || strcmp(w->rid, id) != 0) continue;
    rh_del(s, w);
    w->firing = 1;
    s->nremote--;
    w->fnext = *chain;
    *chain = w;
  }
}

/* ---- release and fire ------------------------------------------------------ */
swaiter *sched_release_locked(sched *s, sjob *j, int status, int counted,
                              const char *backend, double run_ms) {
  SCHED_ASSERT_LOCKED(s);
  T_ASSERT(j->state == SJ_ENDING);
  sched_table_remove(s, j);
  if (j->in_running) {
    j->in_running = 0;
    if (--s->nrunning == 0) pthread_cond_broadcast(&s->idle_cv);
  }
  /* A tile of a split job is no job to the counts, the latency histogram
   * and the rate (API.md: its tiles are in no count nor statistic); the
   * job's own end is counted by compute/sched/split.c (sched_count_split_end). */
  int tile = j->tiles > 0;
  if (counted && status >= 0 && status < 5) {
    if (tile)
      s->tiles_done++;
    else
      s->finished_total[status]++;
  }
  if (backend && status >= 0 && !tile) {
    hist_observe(s, j->kind, backend, status, run_ms);
    s->finish_ms[s->finish_pos] = t_now_ms();
    s->finish_pos = (s->finish_pos + 1) % SCHED_RATE_RING;
    s->nfinish++;
  }
  s->nfiring++; /* until sched_fire ends: sched_destroy waits for it */
  swaiter *chain = NULL;
  if (j->nwaiters) {
    for (swaiter *w = s->waiters; w; w = w->next) {
      if (w->job != j) continue;
      w->firing = 1;
      w->job = NULL;
      w->fnext = chain;
      chain = w;
    }
    j->nwaiters = 0;
  }
  if (s->nremote) /* waits registered before this node claimed the job */
    rh_take(s, j->id, &chain);
  return chain;
}

void sched_fire_remote(sched *s, const char *id, const store_job *ended) {
  swaiter *chain = NULL;
  tmutex_lock(&s->mu);
  if (s->nremote) rh_take(s, id, &chain);
  if (chain) s->nfiring++; /* sched_fire's end takes it back */
  tmutex_unlock(&s->mu);
  if (chain) sched_fire(s, chain, id, ended, NULL, 0);
}

static void waiter_unlist(sched *s, swaiter *w) { /* [mu] */
  SCHED_ASSERT_LOCKED(s);
  if (w->prev)
    w->prev->next = w->next;
  else
    s->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
}

void sched_fire(sched *s, swaiter *chain, const char *id,
                const store_job *ended, const void *npy, size_t npy_len) {
  SCHED_ASSERT_UNLOCKED(s); /* waiter callbacks run with no scheduler lock */
  for (swaiter *w = chain, *next; w; w = next) {
    next = w->fnext;
    tmutex_lock(&s->mu);
    int skip = w->skip; /* unwaited while queued to fire: never call it */
    if (!skip) {
      w->calling = 1;
      w->thread = pthread_self();
    }
    tmutex_unlock(&s->mu);
    if (!skip) {
      if (w->cbr)
        w->cbr(w->arg, id, ended, ended ? npy : NULL, ended ? npy_len : 0);
      else if (w->cbe)
        w->cbe(w->arg, id, ended);
      else
        w->cb(w->arg, id);
    }
    tmutex_lock(&s->mu);
    waiter_unlist(s, w);
    pthread_cond_broadcast(&s->fired_cv);
    tmutex_unlock(&s->mu);
    free(w);
  }
  /* The last touch of s by this release: once nfiring is 0 and the lock
   * is dropped, sched_destroy may free the scheduler. */
  tmutex_lock(&s->mu);
  T_ASSERT(s->nfiring > 0);
  if (--s->nfiring == 0) pthread_cond_broadcast(&s->fired_cv);
  tmutex_unlock(&s->mu);
}

/* ---- wait / unwait ------------------------------------------------------------ */
static int wait_add(sched *s, const char *id, sched_wait_fn cb,
                    sched_end_fn cbe, sched_result_fn cbr, void *arg,
                    uint64_t *token) {
  *token = 0;
  swaiter *w = calloc(1, sizeof *w);
  if (!w) return -1; /* not known: the caller answers from the store */
  tmutex_lock(&s->mu);
  sjob *j = sched_find(s, id);
  if (!j && (!s->cluster || s->shut) && !s->up.split_held_locked(s, id)) {
    tmutex_unlock(&s->mu);
    free(w);
    return 1;
  }
  w->token = ++s->next_token;
  w->job = j;
  if (!j) { /* held elsewhere, queued in the store, or ended: see above */
    w->remote = 1;
    snprintf(w->rid, sizeof w->rid, "%s", id);
    s->nremote++;
    rh_add(s, w);
  }
  w->cb = cb;
  w->cbe = cbe;
  w->cbr = cbr;
  w->arg = arg;
  w->next = s->waiters;
  if (s->waiters) s->waiters->prev = w;
  s->waiters = w;
  if (j) j->nwaiters++;
  *token = w->token;
  tmutex_unlock(&s->mu);
  if (!j) s->up.cluster_recheck(s); /* read the store now: it may have ended */
  return 0;
}

int sched_wait(sched *s, const char *id, sched_wait_fn cb, void *arg,
               uint64_t *token) {
  return wait_add(s, id, cb, NULL, NULL, arg, token);
}

int sched_wait_end(sched *s, const char *id, sched_end_fn cb, void *arg,
                   uint64_t *token) {
  return wait_add(s, id, NULL, cb, NULL, arg, token);
}

int sched_wait_result(sched *s, const char *id, sched_result_fn cb,
                      void *arg, uint64_t *token) {
  return wait_add(s, id, NULL, NULL, cb, arg, token);
}

static swaiter *waiter_find(sched *s, uint64_t token) { /* [mu] */
  SCHED_ASSERT_LOCKED(s);
  for (swaiter *w = s->waiters; w; w = w->next)
    if (w->token == token) return w;
  return NULL;
}

int sched_unwait(sched *s, uint64_t token) {
  if (!token) return 0;
  tmutex_lock(&s->mu);
  swaiter *w = waiter_find(s, token);
  int rc = 0;
  if (w && !w->firing) { /* pending: remove it */
    waiter_unlist(s, w);
    if (w->job) w->job->nwaiters--;
    if (w->remote) {
      s->nremote--;
      rh_del(s, w);
    }
    free(w);
    rc = 1;
  } else if (w && !w->calling && !w->skip) { /* about to fire: stop it */
    w->skip = 1;
    rc = 1;
  } else if (w && w->calling && !pthread_equal(w->thread, pthread_self())) {
    while (waiter_find(s, token)) tmutex_wait(&s->fired_cv, &s->mu);
  } /* else: gone, skipped already, or called from inside its own cb */
  tmutex_unlock(&s->mu);
  return rc;
}

/* ---- progress and counters --------------------------------------------------- */
int sched_progress(sched *s, const char *id, int64_t *done, int64_t *total) {
  tmutex_lock(&s->mu);
  sjob *j = sched_find(s, id);
  if (j) {
    *done = j->progress_base_done + atomic_load(&j->ctx.progress_done);
    *total = j->progress_base_total +
             atomic_load(&j->ctx.progress_total) * (1 + j->progress_runs_left);
  }
  tmutex_unlock(&s->mu);
  return j ? T_OK : T_ENOTFOUND;
}

int sched_holds(sched *s, const char *id, const char *owner) {
  tmutex_lock(&s->mu);
  sjob *j = sched_find(s, id);
  int held = j && (!owner || strcmp(j->owner, owner) == 0);
  tmutex_unlock(&s->mu);
  return held;
}

void sched_count_split_end(sched *s, const char *kind, int status,
                           double run_ms) {
  if (status < 0 || status >= 5) return;
  tmutex_lock(&s->mu);
  s->finished_total[status]++;
  hist_observe(s, kind, "split", status, run_ms);
  s->finish_ms[s->finish_pos] = t_now_ms();
  s->finish_pos = (s->finish_pos + 1) % SCHED_RATE_RING;
  s->nfinish++;
  tmutex_unlock(&s->mu);
}

void sched_get_stats(sched *s, sched_stats *out) {
  memset(out, 0, sizeof *out);
  tmutex_lock(&s->mu);
  /* the counts the API shows are never negative (a job counted twice out) */
  T_ASSERT(s->nqueued >= 0 && s->nrunning >= 0);
  out->queued = s->nqueued;
  out->running = s->nrunning;
  out->workers = s->pool ? pool_threads(s->pool) : 0;
  out->gpu_workers = s->gpu_started;
  memcpy(out->finished_total, s->finished_total, sizeof out->finished_total);
  out->tiles_done = s->tiles_done;
  out->accepting = s->accepting && s->started;
  tmutex_unlock(&s->mu);
}
