/* compute/sched/cluster.c — this tesseld as one node of a cluster store.
 *
 * On a cluster store (PostgreSQL: store_is_cluster) several tesseld share
 * the store and the data directory (sched.h, "the node"). This file is the
 * node: sched_join registers it (store_node_register: threads, GPUs,
 * version, url), subscribes to the store's events (store_listen) and starts
 * the node thread, which does in turn, whenever it wakes:
 *   - cancels that arrived as "cancel" events for jobs held here
 *     (sched_cancel_held; the listener thread only queues the id: a cancel
 *     of a queued job makes a [sync] store write);
 *   - the claimer: store_job_claim within sched_claim_room (per kind of
 *     worker, the slots not filled by jobs queued or running here, so no
 *     node hoards the queue nor takes a job only its busy CPU workers can
 *     run because its GPU worker is free; cuda jobs only while a GPU here
 *     is healthy; the CPU slots grow by claim_ahead, the jobs this node
 *     finishes in SCHED_CLAIM_AHEAD_MS at its recent pace, so tiny jobs
 *     come dozens to a claim), each
 *     queued here (sched_add_claimed). The claim counts the attempt in the
 *     store, so the poison-job cap holds across nodes (sjob_new takes the
 *     run's attempt and result-file name from the claimed row);
 *   - the heartbeat, every lease/3: counters, lease renewal of every job
 *     held here; jobs it lost (the lease expired and the job went
 *     elsewhere) stop and write nothing (sched_drop_lost; the store's fence
 *     refuses their end anyway, and compute/sched/run.c then drops the result);
 *     jobs with a cancel request are canceled; then the node list (live
 *     nodes, GPU nodes) and the cluster's queue depth, kept for admission
 *     (read again every SCHED_DEPTH_EVERY_MS while it is at half the
 *     queue limit or more, and soon after admission refused by it);
 *     a worker makes one too, naming its job, as the fenced "still held"
 *     step before a run's end writes outside the store (sched_cluster_hold:
 *     an output file is placed only by the node that holds the job);
 *   - the reaper, every lease/2: store_reap (one node at a time: the
 *     store's advisory lock); the files of each reaped run
 *     (<results>/<id>.r<attempt>.*, in the shared data directory:
 *     temporaries, and results whose end was never recorded) are removed
 *     at once, not left until expiry;
 * It wakes when kicked (a submit, a local job end, a "queued" event, a
 * cancel, admission's refusal), else at the next of those deadlines or
 * after SCHED_CLAIM_EVERY_MS. A second thread, the waiter thread, serves
 * remote waiters (compute/sched/wait.c): their jobs read from the store
 * (store_job_get_many, SCHED_WAIT_READ a call), those registered since its
 * last pass at once (woken by the registration), every one every second,
 * and all after a "reset" event (the listener reconnected: events were
 * lost); on its own thread so that no claim waits behind those reads. The listener's callback (node_event) never blocks:
 * it takes cl.mu or, to fire remote waiters on "end", sched.mu, briefly.
 * On SQLite nothing here runs: sched_join records the name and url, and
 * sched_nodes answers this process alone.
 *
 * Threads and locks: cl.mu guards the fields marked [cl]; it is a leaf
 * (nothing else is taken while it is held) and may be taken with sched.mu
 * held (sched_cluster_kick from a release). The node and waiter threads
 * make store calls with no lock held. sched_cluster_stop (from sched_shutdown,
 * once no job runs) joins the thread, unlistens, and leaves
 * (store_node_leave: claimed, unstarted jobs go back to the queue).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/sched/cluster.h"
#include "compute/sched/sched_int.h"
#include "util/vec.h"

#define SCHED_CLAIM_EVERY_MS 500.0
#define SCHED_CLAIM_AHEAD_MS 50.0 /* claim_ahead: the work held ahead */
#define SCHED_CLAIM_AHEAD_MAX 128
#define SCHED_WAIT_POLL_MS 1000.0
/* The queue depth is read at every heartbeat, and every this often while
 * it is at half the queue limit or more, or after admission refused a
 * submit by it (a depth read seconds before counted jobs long claimed:
 * 429s "queue full" with nothing queued, tests/bench/results/
 * pg-2core-2026-11-29b.md) */
#define SCHED_DEPTH_EVERY_MS 250.0
#define SCHED_WAIT_READ 256 /* waited jobs read a store call */
#define SCHED_NODES_KEEP_MS (10 * 60 * 1000) /* GET /v1/nodes: 10 minutes */
#define SCHED_CANCELS_MAX 4096 /* queued cancel ids; more wait for a heartbeat */

typedef char node_id[T_ID_MAX];
typedef struct node_name {
  char id[T_ID_MAX];
  char name[104];
} node_name;
#define SCHED_NAMES_KEEP_MS ((int64_t)7 * 24 * 3600 * 1000) /* id -> name */
#define SCHED_NAMES_MISS_MS 1000 /* an unknown id reads the list at most so often */

typedef struct sched_cluster {
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* CLOCK_MONOTONIC: the node thread's wake-up */
  pthread_cond_t wcv; /* CLOCK_MONOTONIC: the waiter thread's */
  int kick, recheck, reset, quit;     /* [cl] */
  int depth_stale;                    /* [cl] admission asked for a read */
  double depth_at;                    /* the node thread's last depth read */
  TVEC(node_id) cancels;              /* [cl] */
  TVEC(node_name) names;              /* [cl] every node's name, by id */
  atomic_llong names_read_at; /* monotonic ms of the last read on a miss */
  pthread_t thread, wthread;
  int thread_started, wthread_started, joined, listening;
  uint64_t listen_token;
  store_node self; /* id set by store_node_register; strings owned */
  int64_t lease_ms;
  int64_t joined_at; /* wall ms */
  atomic_llong depth;
  atomic_int live_nodes, gpu_nodes;
  int store_down; /* the node thread's last store call failed (log once) */
} sched_cluster;

static int nonneg(int v) { return v > 0 ? v : 0; }

store_claim_room sched_claim_room(int cpu_workers, int gpu_workers, int q_cpu,
                                  int q_gpu, int q_auto, int run_cpu,
                                  int run_gpu) {
  store_claim_room r;
  r.cpu = nonneg(cpu_workers - run_cpu - q_cpu);
  r.gpu = nonneg(gpu_workers - run_gpu - q_gpu);
  r.any = nonneg(r.cpu + r.gpu - q_auto);
  if (r.cpu > r.any) r.cpu = r.any;
  if (r.gpu > r.any) r.gpu = r.any;
  return r;
}

/* ---- create / kick ---------------------------------------------------------- */
int sched_cluster_create(sched *s, terr *e) {
  sched_cluster *c = calloc(1, sizeof *c);
  if (!c) return terr_set(e, T_ENOMEM, "", -1, "scheduler: out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t mono;
  pthread_condattr_init(&mono);
  pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &mono);
  pthread_cond_init(&c->wcv, &mono);
  pthread_condattr_destroy(&mono);
  c->self.load = NAN;
  c->lease_ms = SCHED_LEASE_MS_DEFAULT;
  atomic_init(&c->depth, 0);
  atomic_init(&c->live_nodes, 1);
  atomic_init(&c->names_read_at, -(long long)SCHED_NAMES_MISS_MS);
  atomic_init(&c->gpu_nodes, 0);
  s->cl = c;
  return T_OK;
}

static void cl_signal(sched *s, int *flag, pthread_cond_t *cv) {
  sched_cluster *c = s->cl;
  if (!c || !s->cluster) return;
  pthread_mutex_lock(&c->mu);
  *flag = 1;
  pthread_cond_signal(cv);
  pthread_mutex_unlock(&c->mu);
}

void sched_cluster_kick(sched *s) {
  if (s->cl) cl_signal(s, &s->cl->kick, &s->cl->cv);
}

void sched_cluster_recheck(sched *s) {
  if (s->cl) cl_signal(s, &s->cl->recheck, &s->cl->wcv);
}

int64_t sched_cluster_depth(sched *s) {
  return s->cl ? (int64_t)atomic_load(&s->cl->depth) : 0;
}

void sched_cluster_depth_stale(sched *s) {
  sched_cluster *c = s->cl;
  if (!c || !s->cluster) return;
  pthread_mutex_lock(&c->mu);
  if (!c->depth_stale) {
    c->depth_stale = 1;
    pthread_cond_signal(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

int sched_cluster_gpu_nodes(sched *s) {
  return s->cl ? atomic_load(&s->cl->gpu_nodes) : 0;
}

int sched_live_nodes(sched *s) {
  if (!s->cluster || !s->cl) return 1;
  int n = atomic_load(&s->cl->live_nodes);
  return n > 0 ? n : 1;
}

/* ---- the listener (the store's thread: never blocks) ------------------------ */
static void node_event(void *arg, const char *what, const char *id) {
  sched *s = arg;
  sched_cluster *c = s->cl;
  if (strcmp(what, "queued") == 0) {
    sched_cluster_kick(s);
  } else if (strcmp(what, "end") == 0 && id) {
    sched_fire_remote(s, id, NULL); /* the API reads the store */
  } else if (strcmp(what, "cancel") == 0 && id && strlen(id) < T_ID_MAX) {
    pthread_mutex_lock(&c->mu);
    if (c->cancels.n < SCHED_CANCELS_MAX && tvec_reserve(&c->cancels, c->cancels.n + 1) == 0) {
      snprintf(c->cancels.v[c->cancels.n], T_ID_MAX, "%s", id);
      c->cancels.n++;
    } /* else: the next heartbeat lists it */
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
  } else if (strcmp(what, "reset") == 0) {
    cl_signal(s, &c->reset, &c->wcv);
  }
}

/* ---- the node thread's steps --------------------------------------------------- */
/* A store call failed: logged when the store goes down and comes back, not
 * at every tick. */
static void node_store_result(sched_cluster *c, int rc, const char *what,
                              const terr *e) {
  if (rc && !c->store_down)
    log_warn("node: %s failed: %s", what, e->message);
  else if (!rc && c->store_down)
    log_info("node: the store answers again");
  c->store_down = rc != 0;
}

/* Read the node list: every node's name by id (c->names), and with
 * counts the live nodes and those with a GPU (admission's view). */
static void node_list_read(sched *s, int counts) {
  sched_cluster *c = s->cl;
  store_node *nodes = NULL;
  int nn = 0;
  terr e;
  if (store_node_list(s->cfg.st, SCHED_NAMES_KEEP_MS, &nodes, &nn, &e) !=
      T_OK)
    return;
  if (counts) {
    int live = 0, gpu = 0;
    for (int i = 0; i < nn; i++) {
      live += nodes[i].alive;
      gpu += nodes[i].alive && nodes[i].gpus > 0;
    }
    atomic_store(&c->live_nodes, live);
    atomic_store(&c->gpu_nodes, gpu);
  }
  pthread_mutex_lock(&c->mu);
  if (tvec_reserve(&c->names, (size_t)nn) == 0) {
    c->names.n = 0;
    for (int i = 0; i < nn; i++) {
      node_name *x = &c->names.v[c->names.n++];
      snprintf(x->id, sizeof x->id, "%s", nodes[i].id);
      snprintf(x->name, sizeof x->name, "%s",
               nodes[i].name ? nodes[i].name : "");
    }
  }
  pthread_mutex_unlock(&c->mu);
  store_nodes_free(nodes, nn);
}

static int node_has_gpu(sched *s) {
  for (int d = 0; d < s->ngpu; d++)
    if (s->gpu.healthy(d)) return 1;
  return 0;
}

/* Jobs this node finishes in SCHED_CLAIM_AHEAD_MS at its recent pace (the
 * last SCHED_RATE_RING finishes), at most SCHED_CLAIM_AHEAD_MAX: the CPU
 * room a claim may take beyond the free workers. Tiny jobs then come many
 * to a claim (one store round trip and commit for a few dozen, not one
 * each: tests/bench/results/pg-2core-2026-11-29.md), while a node running
 * long jobs (a pace of a few a second) claims no more than its free
 * workers: what it holds ahead is about SCHED_CLAIM_AHEAD_MS of its work.
 * After a quiet spell the pace is low again (the span reaches now).
 * [mu] held. */
static int claim_ahead(sched *s) {
  int n = s->nfinish < SCHED_RATE_RING ? s->nfinish : SCHED_RATE_RING;
  if (n < SCHED_RATE_RING) return 0; /* too few finishes to judge a pace */
  double span_ms = t_now_ms() - s->finish_ms[s->finish_pos];
  if (span_ms < 1) span_ms = 1;
  double ahead = (double)n * SCHED_CLAIM_AHEAD_MS / span_ms;
  return ahead > SCHED_CLAIM_AHEAD_MAX ? SCHED_CLAIM_AHEAD_MAX : (int)ahead;
}

/* Claims take split parents too (parents = 1; db/pg/pg_cluster.c): a
 * claimed parent goes to its coordinator (sched_add_claimed ->
 * compute/sched/split.c), not to a worker. */
static void node_claim(sched *s) {
  sched_cluster *c = s->cl;
  for (int round = 0; round < 64; round++) {
    int gpus = node_has_gpu(s) ? s->gpu_started : 0;
    store_claim_room room = {0, 0, 0};
    int ahead = 0;
    tmutex_lock(&s->mu);
    if (s->taking && !s->shut) {
      int run_gpu = 0;
      for (sjob *j = s->running; j; j = j->rnext) run_gpu += j->on_gpu;
      ahead = claim_ahead(s);
      room = sched_claim_room(s->nthreads + ahead, gpus, (int)s->q[Q_CPU].n,
                              (int)s->q[Q_GPU].n, (int)s->q[Q_AUTO].n,
                              s->nrunning - run_gpu, run_gpu);
    }
    tmutex_unlock(&s->mu);
    /* While half of what it holds ahead is still queued here, the next
     * claim waits (a job's end kicks the claimer again): claims of many
     * jobs, not one per end. */
    if (room.any <= 0 || (ahead > 1 && room.any < ahead / 2)) return;
    store_job *jobs = NULL;
    int n = 0;
    terr e;
    int rc = store_job_claim(s->cfg.st, c->self.id, room, 1, c->lease_ms,
                             &jobs, &n, &e);
    node_store_result(c, rc, "claim", &e);
    if (rc) return;
    for (int i = 0; i < n; i++) {
      terr ae;
      if (s->up.add_claimed(s, &jobs[i], &ae) != T_OK)
        log_warn("node: claimed job %s not queued: %s (it goes back to the "
                 "queue when this node leaves or its lease ends)",
                 jobs[i].id, ae.message);
      else if (jobs[i].cancel_requested)
        s->up.cancel_held(s, jobs[i].id, NULL, &ae);
      store_job_clear(&jobs[i]);
    }
    free(jobs);
    if (n < room.any) return; /* the queue has no more for us now */
  }
}

/* The ids of every job held here (queued or running). [mu] held. */
static int held_ids(sched *s, char ***out) {
  *out = NULL;
  if (!s->njobs) return 0;
  char **ids = calloc(s->njobs, sizeof *ids);
  if (!ids) return -1;
  int n = 0;
  for (size_t b = 0; b < s->nbuckets; b++)
    for (sjob *j = s->buckets[b]; j && (size_t)n < s->njobs; j = j->hnext)
      if (!(ids[n] = strdup(j->id))) {
        while (n > 0) free(ids[--n]);
        free(ids);
        return -1;
      } else {
        n++;
      }
  *out = ids;
  return n;
}

static void free_ids(char **ids, int n) {
  for (int i = 0; i < n; i++) free(ids[i]);
  free(ids);
}

/* This node's heartbeat figures: c->self (shallow: the strings stay
 * c->self's) with its load and counters now. */
static store_node node_me(sched *s) {
  store_node me = s->cl->self;
  sched_sample smp;
  me.load = sched_sample_now(s, &smp) == 0 ? smp.machine_cpu_percent : NAN;
  sched_stats st;
  sched_get_stats(s, &st); /* jobs this node ended (the store's jobs_done) */
  me.jobs_done = 0;
  for (int i = JOB_SUCCEEDED; i < 5; i++) me.jobs_done += st.finished_total[i];
  me.jobs_done += st.tiles_done; /* a tile is work this node did */
  tmutex_lock(&s->mu);
  me.running = s->nrunning;
  me.queued = s->nqueued;
  tmutex_unlock(&s->mu);
  return me;
}

int sched_cluster_hold(sched *s, const char *id, terr *e) {
  sched_cluster *c = s->cl;
  /* A node that never joined claimed nothing: no job of its runs. */
  if (!s->cluster || !c || !c->self.id[0]) return 0;
  store_node me = node_me(s);
  const char *held[1] = {id};
  char **cancel = NULL, **lost = NULL;
  int ncancel = 0, nlost = 0;
  /* Its cancels are left to the node thread's next heartbeat (a cancel
   * request stays listed until the job ends). */
  int rc = store_node_heartbeat(s->cfg.st, &me, c->lease_ms, held, 1, &cancel,
                                &ncancel, &lost, &nlost, e);
  if (rc == T_OK && nlost > 0)
    rc = terr_set(e, T_ECONFLICT, "id", -1,
                  "job %s is no longer held by this node: its lease went to "
                  "another node, or it ended there", id);
  free_ids(lost, nlost);
  free_ids(cancel, ncancel);
  return rc;
}

static void node_read_depth(sched *s) {
  sched_cluster *c = s->cl;
  int64_t depth;
  terr e;
  c->depth_at = t_now_ms();
  if (store_queue_depth(s->cfg.st, &depth, &e) == T_OK)
    atomic_store(&c->depth, (long long)depth);
}

/* 1 when the depth is to be read before the next heartbeat: admission
 * asked (stale), or it is at half the limit or more. */
static int depth_wanted(sched *s, int stale) {
  int64_t limit = s->cfg.queue_limit;
  return stale || (limit > 0 && (int64_t)atomic_load(&s->cl->depth) * 2 >= limit);
}

static void node_heartbeat(sched *s) {
  sched_cluster *c = s->cl;
  store_node me = node_me(s);
  tmutex_lock(&s->mu);
  char **held = NULL;
  int nheld = held_ids(s, &held);
  tmutex_unlock(&s->mu);
  if (nheld < 0) return; /* no memory: the next heartbeat renews */
  char **cancel = NULL, **lost = NULL;
  int ncancel = 0, nlost = 0;
  terr e;
  int rc = store_node_heartbeat(s->cfg.st, &me, c->lease_ms,
                                (const char *const *)held, nheld, &cancel,
                                &ncancel, &lost, &nlost, &e);
  node_store_result(c, rc, "heartbeat", &e);
  free_ids(held, nheld);
  if (rc) return;
  for (int i = 0; i < nlost; i++) s->up.drop_lost(s, lost[i]);
  for (int i = 0; i < ncancel; i++) s->up.cancel_held(s, cancel[i], NULL, &e);
  free_ids(lost, nlost);
  free_ids(cancel, ncancel);

  node_list_read(s, 1);
  node_read_depth(s);
}

/* 1 when name is a file of the run <id>.r<attempt> of a reaped job: it
 * begins "<id>.r<attempt>." (its temporaries <stem>.npy.tmp<N> and
 * <stem>.<part>.npy.tmp<N>, and the files it completed, <stem>.npy and
 * <stem>.<part>.npy; compute/sched/run.c, compute/sched/split.c). No job's record names
 * them: a run's end names its files in the transaction that ends the job,
 * and the store refuses the end of a run it took back (store_job_end.held),
 * so the job is run again under another attempt's name. */
typedef struct reaped {
  const store_reaped *v;
  int n;
} reaped;

static int reaped_file(const char *name, const void *arg) {
  const reaped *r = arg;
  const store_reaped *v = r->v;
  for (int i = 0; i < r->n; i++) {
    char stem[T_ID_MAX + 16];
    int len = snprintf(stem, sizeof stem, "%s.r%d.", v[i].id, v[i].attempt);
    if (len > 0 && (size_t)len < sizeof stem &&
        strncmp(name, stem, (size_t)len) == 0)
      return 1;
  }
  return 0;
}

/* Remove the files of the runs the reaper took back: their node died
 * while writing them in the shared results directory, or after writing
 * them and before its end was recorded, and no run will finish or name
 * them (a live node's own are removed by its run). One pass over the
 * folder; finished results and other runs' files stay. */
static void remove_reaped_files(sched *s, const store_reaped *v, int n) {
  if (n <= 0) return;
  reaped r = {v, n};
  s->up.results_sweep(s, reaped_file, &r, "a dead node's run");
}

static void node_reap(sched *s) {
  store_reaped *v = NULL;
  int n = 0;
  terr e;
  int rc = store_reap(s->cfg.st, s->max_attempts, &v, &n, &e);
  node_store_result(s->cl, rc, "reap", &e);
  if (rc) return;
  for (int i = 0; i < n; i++)
    log_warn("node: job %s: its node stopped heartbeating in attempt %d; back "
             "to the queue (or failed 'crashed' after %d attempts)", v[i].id,
             v[i].attempt, s->max_attempts);
  remove_reaped_files(s, v, n);
  free(v);
  if (n) sched_cluster_kick(s);
}

/* Read the jobs of remote waiters (all, or those not read yet) and fire
 * those that ended. */
static void node_check_waiters(sched *s, int all) {
  tmutex_lock(&s->mu);
  char **ids = NULL;
  int n = 0;
  if (s->nremote) ids = calloc((size_t)s->nremote, sizeof *ids);
  for (swaiter *w = s->waiters; ids && w && n < s->nremote; w = w->next) {
    if (!w->remote || w->firing || (w->checked && !all)) continue;
    w->checked = 1;
    if ((ids[n] = strdup(w->rid))) n++;
  }
  tmutex_unlock(&s->mu);
  /* read SCHED_WAIT_READ at a time: one store call (one SELECT on
   * PostgreSQL) for many waited jobs */
  store_job *rows = n ? calloc(SCHED_WAIT_READ, sizeof *rows) : NULL;
  int found[SCHED_WAIT_READ];
  for (int at = 0; rows && at < n; at += SCHED_WAIT_READ) {
    int k = n - at < SCHED_WAIT_READ ? n - at : SCHED_WAIT_READ;
    terr e;
    if (store_job_get_many(s->cfg.st, (const char *const *)ids + at, k, rows,
                           found, &e) != T_OK)
      break; /* the next pass reads them again */
    for (int i = 0; i < k; i++) {
      if (found[i] && job_status_final(rows[i].status))
        sched_fire_remote(s, ids[at + i], &rows[i]);
      else if (!found[i]) /* deleted: the API answers 404 */
        sched_fire_remote(s, ids[at + i], NULL);
      store_job_clear(&rows[i]);
    }
  }
  free(rows);
  free_ids(ids, n);
}

/* The waiter thread: the store reads of remote waiters, off the node
 * thread, so that a claim never waits behind them (with thousands of
 * waited jobs, the reads of a pass took as long as several claims:
 * tests/bench/results/pg-2core-2026-11-29b.md). */
static void *waiters_main(void *arg) {
  sched *s = arg;
  sched_cluster *c = s->cl;
  double next_poll = t_now_ms() + SCHED_WAIT_POLL_MS;
  pthread_mutex_lock(&c->mu);
  while (!c->quit) {
    double now = t_now_ms();
    int all = c->reset || now >= next_poll;
    if (all || c->recheck) {
      c->recheck = c->reset = 0;
      if (all) next_poll = now + SCHED_WAIT_POLL_MS;
      pthread_mutex_unlock(&c->mu);
      node_check_waiters(s, all);
      pthread_mutex_lock(&c->mu);
      continue;
    }
    struct timespec ts;
    tmutex_deadline(&ts, next_poll - now < 1 ? 1 : next_poll - now);
    pthread_cond_timedwait(&c->wcv, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void *node_main(void *arg) {
  sched *s = arg;
  sched_cluster *c = s->cl;
  double now = t_now_ms();
  double next_hb = now + (double)c->lease_ms / 3;
  double next_reap = now + (double)c->lease_ms / 2;
  pthread_mutex_lock(&c->mu);
  while (!c->quit) {
    int stale = c->depth_stale;
    c->kick = 0;
    node_id *cancels = c->cancels.v;
    size_t ncancel = c->cancels.n;
    c->cancels.v = NULL;
    c->cancels.n = c->cancels.cap = 0;
    pthread_mutex_unlock(&c->mu);

    terr e;
    for (size_t i = 0; i < ncancel; i++)
      s->up.cancel_held(s, cancels[i], NULL, &e); /* not held: ignored */
    free(cancels);
    node_claim(s);
    now = t_now_ms();
    if (now >= next_hb) {
      node_heartbeat(s);
      next_hb = t_now_ms() + (double)c->lease_ms / 3;
    }
    if (now >= next_reap) {
      node_reap(s);
      next_reap = t_now_ms() + (double)c->lease_ms / 2;
    }
    int want_depth = depth_wanted(s, stale);
    if (want_depth && t_now_ms() - c->depth_at >= SCHED_DEPTH_EVERY_MS) {
      pthread_mutex_lock(&c->mu);
      c->depth_stale = 0; /* a refusal after this read asks again */
      pthread_mutex_unlock(&c->mu);
      node_read_depth(s);
      want_depth = depth_wanted(s, 0);
    }

    pthread_mutex_lock(&c->mu);
    if (c->quit || c->kick || c->cancels.n) continue;
    now = t_now_ms();
    double wake = now + SCHED_CLAIM_EVERY_MS;
    if (next_hb < wake) wake = next_hb;
    if (next_reap < wake) wake = next_reap;
    if ((want_depth || c->depth_stale) &&
        c->depth_at + SCHED_DEPTH_EVERY_MS < wake)
      wake = c->depth_at + SCHED_DEPTH_EVERY_MS;
    struct timespec ts;
    tmutex_deadline(&ts, wake - now < 1 ? 1 : wake - now);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- join / leave ------------------------------------------------------------ */
static int dup_to(char **dst, const char *src) {
  *dst = strdup(src ? src : "");
  return *dst ? 0 : -1;
}

int sched_join(sched *s, const sched_node_config *nc, terr *e) {
  sched_cluster *c = s->cl;
  if (c->joined || c->thread_started)
    return terr_set(e, T_ECONFLICT, "", -1, "node already joined");
  store_node_clear(&c->self);
  if (dup_to(&c->self.name, nc->name) || dup_to(&c->self.url, nc->url) ||
      dup_to(&c->self.version, nc->version))
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  c->self.threads = s->nthreads;
  c->self.gpus = s->ngpu;
  c->lease_ms = nc->lease_ms > 0 ? nc->lease_ms : SCHED_LEASE_MS_DEFAULT;
  c->self.lease_ms = c->lease_ms; /* the store judges this node by it */
  c->joined_at = t_wall_ms();
  if (!s->cluster) {
    t_id_new('n', c->self.id); /* this process, for sched_nodes */
    return T_OK;
  }
  int rc = store_node_register(s->cfg.st, &c->self, e);
  if (rc) return rc;
  c->joined = 1;
  if ((rc = store_listen(s->cfg.st, node_event, s, &c->listen_token, e)))
    return rc; /* sched_cluster_stop leaves */
  c->listening = 1;
  if (pthread_create(&c->thread, NULL, node_main, s) != 0)
    return terr_set(e, T_EINTERNAL, "", -1, "cannot start the node thread");
  c->thread_started = 1;
  if (pthread_create(&c->wthread, NULL, waiters_main, s) != 0)
    return terr_set(e, T_EINTERNAL, "", -1, "cannot start the waiter thread");
  c->wthread_started = 1;
  log_info("node %s (%s) joined the cluster: lease %lld ms", c->self.name,
           c->self.id, (long long)c->lease_ms);
  sched_cluster_kick(s);
  return T_OK;
}

void sched_cluster_stop(sched *s) {
  sched_cluster *c = s->cl;
  if (!c) return;
  if (c->thread_started || c->wthread_started) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_signal(&c->cv);
    pthread_cond_signal(&c->wcv);
    pthread_mutex_unlock(&c->mu);
  }
  if (c->thread_started) {
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
  }
  if (c->wthread_started) {
    pthread_join(c->wthread, NULL);
    c->wthread_started = 0;
  }
  if (c->listening) {
    store_unlisten(s->cfg.st, c->listen_token);
    c->listening = 0;
  }
  if (c->joined) {
    terr e;
    if (store_node_leave(s->cfg.st, c->self.id, &e) != T_OK)
      log_warn("node: cannot leave the cluster: %s (its jobs go back to the "
               "queue when its lease ends)", e.message);
    else
      log_info("node %s left the cluster", c->self.name);
    c->joined = 0;
  }
}

void sched_cluster_destroy(sched *s) {
  sched_cluster *c = s->cl;
  if (!c) return;
  sched_cluster_stop(s);
  free(c->cancels.v);
  free(c->names.v);
  store_node_clear(&c->self);
  pthread_cond_destroy(&c->cv);
  pthread_cond_destroy(&c->wcv);
  pthread_mutex_destroy(&c->mu);
  free(c);
  s->cl = NULL;
}

/* ---- GET /v1/nodes ------------------------------------------------------------- */
void sched_node_self(sched *s, char id[T_ID_MAX], char *name, size_t cap) {
  sched_cluster *c = s->cl;
  snprintf(id, T_ID_MAX, "%s", c ? c->self.id : "");
  snprintf(name, cap, "%s", c && c->self.name ? c->self.name : "");
}

static int name_of(sched_cluster *c, const char *id, char *name, size_t cap) {
  int found = 0;
  pthread_mutex_lock(&c->mu);
  if (c->self.name && strcmp(id, c->self.id) == 0) {
    snprintf(name, cap, "%s", c->self.name);
    found = 1;
  }
  for (size_t i = 0; !found && i < c->names.n; i++)
    if (strcmp(c->names.v[i].id, id) == 0) {
      snprintf(name, cap, "%s", c->names.v[i].name);
      found = 1;
    }
  pthread_mutex_unlock(&c->mu);
  return found;
}

/* A node that joined since the last heartbeat's node list is not in
 * c->names yet: on a miss the list is read at once (a store read, no lock
 * held), at most once per SCHED_NAMES_MISS_MS, so that a job it ran is
 * shown with its name, not its id. */
int sched_node_name(sched *s, const char *id, char *name, size_t cap) {
  sched_cluster *c = s->cl;
  if (!c || !id) return 0;
  if (name_of(c, id, name, cap)) return 1;
  if (!s->cluster) return 0;
  long long now = (long long)t_now_ms(), last = atomic_load(&c->names_read_at);
  if (now - last < SCHED_NAMES_MISS_MS ||
      !atomic_compare_exchange_strong(&c->names_read_at, &last, now))
    return 0;
  node_list_read(s, 0);
  return name_of(c, id, name, cap);
}

int sched_nodes(sched *s, store_node **nodes, int *n, terr *e) {
  *nodes = NULL;
  *n = 0;
  if (s->cluster)
    return store_node_list(s->cfg.st, SCHED_NODES_KEEP_MS, nodes, n, e);
  sched_cluster *c = s->cl;
  store_node *me = calloc(1, sizeof *me);
  if (!me) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  snprintf(me->id, sizeof me->id, "%s", c->self.id);
  if (dup_to(&me->name, c->self.name) || dup_to(&me->url, c->self.url) ||
      dup_to(&me->version, c->self.version)) {
    store_nodes_free(me, 1);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  sched_stats st;
  sched_get_stats(s, &st);
  sched_sample smp;
  me->threads = s->nthreads;
  me->gpus = s->ngpu;
  me->started_at = c->joined_at;
  me->heartbeat_at = t_wall_ms();
  me->running = st.running;
  me->queued = st.queued;
  me->load = sched_sample_now(s, &smp) == 0 ? smp.machine_cpu_percent : NAN;
  me->alive = 1;
  me->lease_ms = c->lease_ms;
  for (int i = JOB_SUCCEEDED; i < 5; i++) me->jobs_done += st.finished_total[i];
  me->jobs_done += st.tiles_done; /* a tile is work this node did */
  *nodes = me;
  *n = 1;
  return T_OK;
}
