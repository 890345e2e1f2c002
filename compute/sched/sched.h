/* sched.h — the job scheduler: queue, workers, lifecycle, recovery.
 *
 * Accepted jobs are queued by priority (higher first, FIFO within). CPU
 * workers (the pool) take serial/cpu/compare jobs; one GPU worker per usable
 * device takes cuda jobs. auto is resolved by the router when a job starts.
 * A job's life: store row inserted by the API (queued) -> sched_enqueue -> a
 * worker: the start counted in the in-flight journal (compute/sched/journal.c),
 * store_job_start_async (see max_attempts), kind prepare, run (once per
 * backend for compare), result written to <data>/results/<id>.npy (or, up to
 * cfg.row_result_max bytes, kept in the job's row), store_job_finish_async;
 * once the end is committed the job is released and its waiters are called: a
 * waiter never sees a job end that is not committed. Cancel and timeout set
 * the job's stop flag; a running job stops at its next chunk or tile.
 *
 * At start (sched_start) every job the store has left queued or running is
 * queued again: no accepted job is lost when the process dies. (On a
 * cluster store the nodes share the queue instead: see "the node" below.)
 *
 * Threads: every function may be called from any thread. Waiter callbacks
 * run with no scheduler lock held, on the store's writer thread (a worker
 * ends a job with store_job_finish_async and takes its next job at once;
 * the job is released and its waiters called once the end is committed) or
 * on the thread that ended a job that never started (cancel, shutdown).
 * They must not block and must not make a [sync] store call.
 *
 * The API's calls (see compute/array/store_source.h for the tenv):
 *   submit  sched_check_keep (400/413/503) -> sched_reserve (429 + Retry-After,
 *           503) -> store_job_insert (or _async with ?wait) ->
 *           sched_enqueue_checked (the check is not repeated); an insert that
 *           fails, or finds the request_id's job (existing = 1), is
 *           followed by sched_unreserve instead.
 *   ?wait   sched_wait_end; 1 means finished: read the store. The
 *           callback gets the job as committed at its end, and only hands
 *           the answer to the connection. On the wait's timeout call
 *           sched_unwait; once it returns, the callback never runs again.
 *   cancel  sched_cancel, then read the store: canceled -> 200, still
 *           running (stopping) -> 202; T_ECONFLICT -> 409.
 *   get     a running job's live progress: sched_progress (the store's
 *           copy lags by up to 200 ms).
 */
#ifndef TESSEL_SCHED_SCHED_H
#define TESSEL_SCHED_SCHED_H

#include <stdint.h>

#include "compute/kinds/kinds.h"
#include "db/store.h"
#include "util/err.h"

typedef struct sched sched;

#define SCHED_MAX_ATTEMPTS_DEFAULT 3

/* The GPU facade calls the scheduler makes (gpu.h). NULL in sched_config:
 * the real ones; tests pass fakes to drive the GPU paths without a GPU. */
typedef struct sched_gpu_ops {
  int (*count)(void);
  int (*healthy)(int dev);
  void (*note_result)(int dev, int rc);
  void (*lock)(int dev);
  void (*unlock)(int dev);
  const char *(*unavailable_reason)(void);
  /* gpu_trylock: 0 with the lock held, -1 busy (a run's borrowed GPUs,
   * job_ctx.gpu_borrow). NULL (an older fake): nothing can be borrowed. */
  int (*trylock)(int dev);
} sched_gpu_ops;

typedef struct sched_config {
  store *st;
  const char *data_dir;     /* results go to <data_dir>/results */
  int threads;              /* CPU workers; <= 0: number of cores */
  int queue_limit;          /* queued jobs beyond this -> T_EBUSY (429) */
  double default_timeout_s; /* for jobs that give none */
  int64_t max_result_bytes; /* larger estimated results -> 413 at submit */
  int64_t max_job_mem_bytes;/* larger estimated memory -> 413 at submit */
  /* Memory all running jobs together may hold (their estimates): a job
   * needing more is refused at submit (413); one that fits but not next to
   * the running ones waits in the queue (compute/sched/mem.c). 0: 80 % of the
   * smaller of RAM and the cgroup limit; < 0: no budget. */
  int64_t max_memory_bytes;
  int64_t inline_result_max;/* results up to this many bytes stay in memory */
  /* Results whose .npy (header + data) is at most this many bytes are kept
   * in the job's store row instead of a file of their own (a file costs
   * more than a tiny job: store_job_end.result_npy); 0: always a file. */
  int64_t row_result_max;
  const char *calibration_path; /* router cost-model cache; NULL: none */
  /* A job whose start was recorded this many times without an end (the
   * process died while running it each time) fails with error code
   * "crashed" instead of running again; <= 0: the default. */
  int max_attempts;
  /* Kind table lookup (kind_find in the daemon; tests pass their own). */
  const kind_ops *(*kind_lookup)(const char *name);
  const sched_gpu_ops *gpu_ops; /* NULL: gpu.h's functions */
  /* Split jobs (compute/sched/split.c): geodesic jobs with at least this many
   * pairs are split into tiles (0: never), `tiles` of them (0: 2 x live
   * nodes). */
  int64_t split_min_pairs;
  int tiles;
  /* --local-dir (compute/array/localfile.h): {"file"} inputs and "output" files;
   * NULL: off. Borrowed; outlives the scheduler. */
  const struct tlocal *local;
  /* Bytes of big result files made ahead in <data_dir>/spare
   * (compute/array/codec/spare.h); -1: its default; 0: none (the tests'
   * zeroed config: the spares are one per process). */
  int64_t spare_results;
} sched_config;

int sched_create(const sched_config *cfg, sched **out, terr *e);
/* Queue the store's unfinished jobs again, then start the workers. */
int sched_start(sched *s, terr *e);
/* Stop taking jobs; wait up to deadline_s for running ones, then ask them
 * to stop (status stays queued/running in the store so that the next start
 * runs them again); join workers. */
void sched_shutdown(sched *s, double deadline_s);
void sched_destroy(sched *s);

/* Take a queue slot before the job is inserted into the store: 0, or
 * T_EBUSY with *retry_after_s set when the queue is full, or T_EUNAVAIL when
 * shutting down. Every successful reserve is followed by exactly one
 * sched_enqueue or sched_unreserve. */
int sched_reserve(sched *s, int *retry_after_s, terr *e);
void sched_unreserve(sched *s);
/* Queue a job that is in the store (status queued). Uses the reserved slot. */
int sched_enqueue(sched *s, const store_job *j, terr *e);
/* The same for a job the caller has just checked with sched_check_keep:
 * the scheduler keeps a reference to `params` (its parsed j->params, which
 * nobody changes from now on), a copy of `est`, and takes `checked` (what
 * kind k's check built, or NULL), so that a worker neither checks the job
 * again nor parses and compiles its expression a second time. */
int sched_enqueue_checked(sched *s, const store_job *j, json_t *params,
                          const job_estimate *est, const kind_ops *k,
                          void *checked, terr *e);

/* A batch's jobs queued as one unit for the GPU's gangs (issue 26 item 6;
 * compute/sched/README.md, "Gangs"). A batch opens a hold before it
 * queues its first item and closes it after its last (every opened hold
 * is closed once, by the same caller); each item is queued with it
 * (sched_enqueue_held). While a hold is open, a GPU worker leaves a job of
 * it that may share a launch at the top of its queue (and so every job
 * behind it) until the hold closes or a full gang (256) waits there:
 * the gang it then takes holds the batch's alike items together (one
 * launch for 100), where taking the first item at once started gangs of
 * what was queued so far (8, 16, 32, 44). Any other job is taken as
 * before. sched_hold_open returns the hold's id (> 0), or 0 when none
 * can be opened (SCHED_HOLDS_MAX open already, or the daemon started
 * with TESSEL_GPU_GANG_HOLD=0, for measuring: the jobs are queued as any;
 * closing 0 does nothing). */
#define SCHED_HOLDS_MAX 64 /* holds open at once */
uint64_t sched_hold_open(sched *s);
void sched_hold_close(sched *s, uint64_t hold);
/* sched_enqueue_checked's, for a job of an open hold (0: none). */
int sched_enqueue_held(sched *s, const store_job *j, json_t *params,
                       const job_estimate *est, const kind_ops *k,
                       void *checked, uint64_t hold, terr *e);

/* Cancel: a queued job ends canceled at once; a running job gets its stop
 * flag set and ends canceled at its next chunk. T_ECONFLICT when finished,
 * T_ENOTFOUND when unknown (or another owner's). */
int sched_cancel(sched *s, const char *id, const char *owner, terr *e);

/* Live progress of a queued or running job: 0, or T_ENOTFOUND when the
 * scheduler does not hold it (finished: read the store). */
int sched_progress(sched *s, const char *id, int64_t *done, int64_t *total);

/* 1 when job `id` is queued or running here, or ending with its end not
 * yet committed (so the store's row is not final), and is owner's (NULL:
 * anyone's); else 0 (ended, unknown, or another owner's). A cheap "exists
 * and is not final" for a reader that already holds an earlier copy of the
 * row (compute/jobs: a batch's answer). */
int sched_holds(sched *s, const char *id, const char *owner);

/* Call cb(arg, id) once when job `id` ends. Returns 0 when registered, 1
 * when the job is not running or queued here (already finished: the caller
 * reads the store; a job of this node leaves the scheduler only after its
 * end's store write has returned, so that commit covers its insert), -1
 * when out of memory (nothing known: the caller reads the store, after a
 * store_sync where the job's insert may still be queued). *token
 * identifies the registration for sched_unwait. */
typedef void (*sched_wait_fn)(void *arg, const char *id);
int sched_wait(sched *s, const char *id, sched_wait_fn cb, void *arg,
               uint64_t *token);
/* The same with a callback that also gets the job's row as committed at
 * its end (`ended`, valid during the call only), or NULL when the scheduler
 * does not have it (the job ended before it started: canceled, or left to
 * the next start by a shutdown; or its end could not be written): the
 * caller then reads the store. */
typedef void (*sched_end_fn)(void *arg, const char *id,
                             const store_job *ended);
int sched_wait_end(sched *s, const char *id, sched_end_fn cb, void *arg,
                   uint64_t *token);
/* sched_wait_end's, with the job's result: cb(arg, id, ended, npy,
 * npy_len), npy the .npy of a succeeded job's result kept in its row,
 * the bytes its end committed (borrowed for the call), or NULL (no result
 * in the row, the end not this node's run, or not known here: read the
 * store). A waiter that answers with the result inline (jobs:batch and
 * jobs:get with "include") copies it instead of reading it back. */
typedef void (*sched_result_fn)(void *arg, const char *id,
                                const store_job *ended, const void *npy,
                                size_t npy_len);
int sched_wait_result(sched *s, const char *id, sched_result_fn cb,
                      void *arg, uint64_t *token);
/* Remove a registration: 1 when removed before it fired, 0 when it has
 * fired (or is firing: sched_unwait then returns after cb has returned). */
int sched_unwait(sched *s, uint64_t token);

/* ---- split jobs (compute/sched/split.c) ---------------------------------------
 * The tiles a new job of kind k is split into (its store row's tiles), or
 * 0 when it is not split: a job its kind can split (kind_ops.split: a
 * geodesic matrix or query knn/rowwise) of at least cfg.split_min_pairs
 * rows x columns, kept by the service (output 0), not compare (backend: a
 * tbackend). Any thread. */
int sched_split_tiles(const sched *s, const kind_ops *k, const json_t *params,
                      const job_estimate *est, int backend, int output);
/* Rows [*r0, *r1) of n that tile `tile` of `tiles` computes: n / tiles
 * rows each, or with tri (a matrix without targets, sched_split_tri: row i
 * costs about n - i pairs, square or condensed) bands of equal pairs,
 * never empty (tiles <= n). Every node cuts the same way (integers). */
void sched_split_rows(int64_t n, int tile, int tiles, int tri, int64_t *r0,
                      int64_t *r1);
/* 1 when the kind cuts a job with these params in bands of equal cells of
 * an upper triangle (kind_split.tri: a geodesic matrix without targets,
 * square or condensed: its rows cost less the further down they are).
 * Any thread. */
int sched_split_tri(const kind_ops *k, const json_t *params);

/* ---- the node (compute/sched/cluster.c) ------------------------------------------
 * On a cluster store (store_is_cluster: PostgreSQL) this tesseld is one node
 * of several on one store and one data directory. sched_start then neither
 * reads the in-flight journal nor queues the store's unfinished jobs (other
 * nodes run them); sched_join registers the node and starts its thread:
 * heartbeat every lease/3 (renewing its leases; jobs it lost stop and write
 * nothing, jobs with a cancel request are canceled), reap every lease/2
 * (store_reap with max_attempts; the dead runs' files removed), and
 * the claimer (up to the free worker slots, woken by "queued" events, by
 * local job ends and every 500 ms). A
 * submit inserts the row and wakes the claimer instead of queueing it here;
 * a cancel of a job held elsewhere is a store_job_cancel_request (the holder
 * stops it at its "cancel" event); a wait on a job held elsewhere fires on
 * its "end" event (the callback then gets ended = NULL: read the store).
 * sched_shutdown leaves (store_node_leave) once no job runs here.
 * On SQLite sched_join only records the name and url for sched_nodes. */
#define SCHED_LEASE_MS_DEFAULT 10000
typedef struct sched_node_config {
  const char *name;    /* --node-name */
  const char *url;     /* where this node answers */
  const char *version; /* tesseld's */
  int lease_ms;        /* <= 0: SCHED_LEASE_MS_DEFAULT */
} sched_node_config;
/* After sched_start. 0, or the store's error (registration failed). */
int sched_join(sched *s, const sched_node_config *nc, terr *e);
/* The nodes for GET /v1/nodes: on a cluster store every node seen within
 * 10 minutes (store_node_list), else one entry: this process. Same
 * allocation rule as store_node_list (store_nodes_free). */
int sched_nodes(sched *s, store_node **nodes, int *n, terr *e);
/* This node's id and name ("" before sched_join; on SQLite an id new at
 * every start, as sched_nodes gives it). */
void sched_node_self(sched *s, char id[T_ID_MAX], char *name, size_t cap);
/* The name of node `id` (a store_job.node) into name: 1, or 0 when not
 * known here (a node not seen for a week). */
int sched_node_name(sched *s, const char *id, char *name, size_t cap);
/* Live nodes as of the last heartbeat (1 on SQLite or before it). */
int sched_live_nodes(sched *s);
/* What the claimer may take (store_claim_room): per kind of worker, its
 * slots not filled by the jobs queued for it or running on it, and in all
 * those less the auto jobs queued here (which either kind takes); never
 * below 0. No node hoards the queue, nor takes a job that only its busy
 * CPU workers could run because a GPU worker is free (or the reverse).
 * gpu_workers: the GPU workers of healthy devices (0: none). */
store_claim_room sched_claim_room(int cpu_workers, int gpu_workers, int q_cpu,
                                  int q_gpu, int q_auto, int run_cpu,
                                  int run_gpu);

/* Counters for /metrics, /v1/stats and /readyz. */
typedef struct sched_stats {
  int queued, running, workers, gpu_workers;
  int64_t finished_total[5]; /* by job_status since start; a split job
                                counts once, its tiles not */
  int64_t tiles_done;        /* tiles of split jobs ended here */
  int accepting;
} sched_stats;
void sched_get_stats(sched *s, sched_stats *out);

/* The daemon's load over time (compute/sched/stats/sampler.c): a sampler thread takes one
 * sample every SCHED_SAMPLE_EVERY_MS into a ring of SCHED_SAMPLES (2 hours).
 * Percentages are NaN where unknown (the first sample), bytes -1. */
#define SCHED_SAMPLE_EVERY_MS 5000
#define SCHED_SAMPLES 1440
typedef struct sched_sample {
  int64_t t_wall_ms;          /* when taken, unix ms */
  double cpu_percent;         /* this process, all threads, over the interval
                                 since the previous reading (> 100: threads) */
  double machine_cpu_percent; /* the machine, all cores, 0..100 */
  int64_t memory_used;        /* the machine: MemTotal - MemAvailable */
  int64_t memory_total;       /* the machine: MemTotal */
  int64_t process_rss;        /* this process's resident set */
  int queued, running;        /* the scheduler's, when taken */
} sched_sample;
/* Now, without waiting: CPU over the interval since the sampler's last
 * reading. 0, or -1 when no sampler runs (then the percentages are NaN). */
int sched_sample_now(sched *s, sched_sample *out);
/* Copies the kept samples taken at or after since_wall_ms, oldest first,
 * into out (at most cap); returns how many. */
int sched_samples(sched *s, int64_t since_wall_ms, sched_sample *out, int cap);
/* The "cpu " line of /proc/stat: busy (all but idle and iowait) and total
 * ticks. 0, or -1 when the text is not such a line. */
int sched_sample_parse_stat(const char *text, uint64_t *busy, uint64_t *total);

/* Estimate a job at submit (compute/sched/submit_check.c): kind check +
 * limits (413) + backend availability (503 for cuda without a GPU). Fills
 * est. */
int sched_check(sched *s, const kind_ops *k, const json_t *params,
                const tenv *env, tbackend b, job_estimate *est, terr *e);
/* The same, keeping what the kind's check built in *checked (see
 * kind_check_keep; NULL on failure, else the caller's: hand it to
 * sched_enqueue_checked or free it with kind_checked_free). */
int sched_check_keep(sched *s, const kind_ops *k, const json_t *params,
                     const tenv *env, tbackend b, job_estimate *est,
                     void **checked, terr *e);

/* Observe finished-job durations (for /metrics' histogram): fills counts
 * for the buckets' upper bounds in ms (cumulative) of the jobs of that
 * kind, backend family ("cuda" for "cuda:0") and final status (a
 * job_status; -1: any); NULL kind or backend: any. */
#define SCHED_HIST_BUCKETS 12
extern const double sched_hist_bounds_ms[SCHED_HIST_BUCKETS];
void sched_histogram(sched *s, const char *kind, const char *backend,
                     int status, int64_t counts[SCHED_HIST_BUCKETS],
                     double *sum_ms, int64_t *count);

#endif
