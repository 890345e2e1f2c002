/* sched_int.h — the scheduler's private state (struct sched, its waiters
 * and histogram rows) and the calls between its files that have no header
 * of their own. By concern (compute/sched/README.md has each file's line):
 *
 *   queue.h         a job (sjob), its states, the heaps and the id table
 *   cluster.h       the cluster node: leases, heartbeats, claims
 *   stats/sampler.h the /v1/stats sampler; split.h, run_int.h, route/router.h
 *   here            sched.c (queueing, workers, monitor, start/shutdown),
 *                   run.c's entry, wait.c (waiters, counters), text.c,
 *                   mem.c (memory admission), journal.c (in-flight journal),
 *                   submit_check.c (the submit-time check)
 *
 * Locks: ONE mutex, sched.mu, guards every field below marked [mu] and every
 * sjob field marked [mu]. Lock order: sched.mu may be held while taking the
 * pool's lock (pool_notify) and the store's async queue lock
 * (store_job_progress, from the monitor); it is NEVER held across a [sync]
 * store call, a kind callback, a waiter callback, gpu_lock or a file write.
 * gpu_lock(dev) is taken by a worker with no scheduler lock held.
 *
 * A job's states: QUEUED (in a heap) -> RUNNING (taken by a worker; in the
 * running list that the monitor scans) -> ENDING (its final store write is
 * under way; no longer cancelable; the worker has moved on) -> gone from the
 * id table, waiters fired, freed: by the store's writer thread once the end
 * is committed (compute/sched/run.c), or by the thread that ended an unstarted job.
 * The job struct is only touched under sched.mu by anyone but the worker
 * that owns it while RUNNING, and the thread that releases it.
 */
#ifndef TESSEL_SCHED_SCHED_INT_H
#define TESSEL_SCHED_SCHED_INT_H

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>

#include "compute/gpu/gpu.h"
#include "util/heap.h"
#include "util/pool.h"
#include "util/tmutex.h"
#include "compute/sched/queue.h"
#include "compute/sched/sched.h"

/* Results of result_alloc up to this many bytes are heap arrays written
 * with npy_write at the end; larger ones are mapped .npy files
 * (tarray_create_npy). Used when cfg.inline_result_max <= 0. Measured with
 * bench_sched on ext4 (this 2-core VM, and a 16-core H200 host): heap +
 * write takes 0.3-0.95x the time of a mapped file from 8 B to 8 MiB (first
 * writes to a shared file mapping fault page by page), but 1.6-1.7x at 64
 * MiB, where a mapping also spares a second, unreclaimable copy of the
 * result in memory. result_stream's results (map) do not use it: they are
 * sinks from the row's size up (compute/sched/run.c, compute/array/codec/npyfile.c). */
#define SCHED_INLINE_RESULT_DEFAULT (16 << 20)

typedef struct swaiter {
  uint64_t token;
  sjob *job;
  sched_wait_fn cb;  /* one of cb, cbe, cbr */
  sched_end_fn cbe;
  sched_result_fn cbr;
  void *arg;
  int firing;       /* [mu] its job ended: in a worker's chain to call */
  int calling;      /* [mu] cb is being called (or has been) */
  int skip;         /* [mu] unwaited while firing: not to be called */
  pthread_t thread; /* [mu] the thread calling cb, once calling */
  /* A job not held here on a cluster store (compute/sched/cluster.c): job NULL,
   * fired by the job's "end" event or a read of the store. */
  int remote;
  int checked;      /* [mu] the node thread has read its job once */
  char rid[T_ID_MAX];
  struct swaiter *prev, *next, *fnext;
  /* [mu] its chain in s->rhash while remote and not firing (wait.c) */
  struct swaiter *rprev, *rnext;
} swaiter;

/* Buckets of the pending remote waiters by job id (wait.c): an "end"
 * event or a job's end finds its remote waiters without walking them all
 * (every node hears every end; a node may wait for thousands of jobs). */
#define SCHED_RHASH 4096

#define SCHED_RATE_RING 32
typedef struct shist {
  char kind[24], backend[24];
  int status; /* job_status: succeeded, failed, canceled */
  int64_t counts[SCHED_HIST_BUCKETS]; /* per bucket, not cumulative */
  double sum_ms;
  int64_t count;
} shist;

/* The calls that go up the room, set once by sched_create (sched.c) and
 * read-only after: the cluster node (cluster.c), the split coordinator
 * (split.c) and the waits (wait.c) call the worker side and the node
 * through these, not by name, so that the files have no circle
 * (tests/layout/check_layout.py rule 10; the README's table). */
typedef struct sched_up {
  int (*add_claimed)(sched *s, const store_job *row, terr *e);
  int (*cancel_held)(sched *s, const char *id, const char *owner, terr *e);
  int (*cancel)(sched *s, const char *id, const char *owner, terr *e);
  void (*drop_lost)(sched *s, const char *id);
  void (*results_sweep)(sched *s, int (*match)(const char *name, const void *arg),
                        const void *arg, const char *why);
  int (*split_held_locked)(sched *s, const char *id);
  void (*cluster_recheck)(sched *s);
} sched_up;

struct sched {
  sched_up up; /* sched_create's; read-only after */
  sched_config cfg; /* strings point at the copies below */
  sched_gpu_ops gpu; /* cfg.gpu_ops or the real facade */
  /* GPU workers waiting for device d's lock (a job taken, about to run
   * on it): a spread run gives a borrowed device back before its next
   * block while its count is not 0, and none is lent then (run.c,
   * README.md "Lent GPUs"). Atomic: read by other runs' lane threads. */
  atomic_int gpu_want[32];
  char *data_dir, *results_dir, *calibration_path;
  int spare_on; /* this scheduler started the spare result files (spare.h) */
  int nthreads, ngpu;
  int64_t inline_max;   /* bytes; results up to this are heap + npy_write */
  int64_t row_max;      /* bytes of .npy kept in the store row; 0: none */
  int64_t env_max_elems;
  int max_attempts;     /* starts that never finished before "crashed" */
  /* A cluster store (store_is_cluster): no journal, no recovery at start,
   * submitted jobs are claimed from the store (compute/sched/cluster.c). */
  int cluster;
  struct sched_cluster *cl; /* compute/sched/cluster.c; always set after create */
  /* compute/sched/split.c: coordinator threads running, and their stop flag */
  atomic_int split_threads, split_quit;
  struct split_run *splits; /* [mu] the parents they run (a list) */
  void *journal;        /* compute/sched/journal.c: the mapped slots; NULL: none */
  int journal_slots;
  atomic_int *journal_used; /* per slot: 1 while a worker holds it */
  int64_t mem_budget;   /* bytes running jobs may hold; 0: no budget */
  pool *pool;
  pthread_t gpu_threads[GPU_MAX_DEVICES];
  int gpu_started;
  pthread_t monitor;
  int monitor_started;
  struct sched_sampler *sampler; /* compute/sched/stats/sampler.c; NULL: none */
  atomic_uint tmp_counter;

  tmutex mu;
  pthread_cond_t gpu_cv;   /* GPU workers sleep on it */
  pthread_cond_t idle_cv;  /* shutdown waits for nrunning == 0 */
  pthread_cond_t mon_cv;   /* the monitor sleeps on it */
  pthread_cond_t fired_cv; /* sched_unwait waits for a firing callback;
                           * sched_destroy for nfiring == 0 */
  /* everything below: [mu] */
  sjob_heap q[Q__COUNT];
  sjob **buckets;
  size_t nbuckets, njobs;
  sjob *running;
  int nqueued, nrunning, reserved;
  int nremote; /* pending remote waiters (not yet firing) */
  int nfiring; /* releases between sched_release_locked and sched_fire's end:
                * sched_destroy waits for 0 (the releasing thread still
                * reads the scheduler after a job stops counting as running) */
  int64_t mem_reserved; /* bytes the running jobs' estimates hold */
  uint64_t mem_gen;     /* bumped whenever memory is released */
  uint64_t seq, next_token;
  int started, accepting, taking, quit, shut;
  int mon_idle;
  /* the open holds (sched_hold_open: batches queueing their items), and
   * the last id given */
  uint64_t holds[SCHED_HOLDS_MAX];
  int nholds;
  int holds_off; /* TESSEL_GPU_GANG_HOLD=0 at sched_create: no holds */
  uint64_t hold_seq;
  swaiter *waiters;
  swaiter *rhash[SCHED_RHASH]; /* pending remote waiters by rid (wait.c) */
  int64_t finished_total[5]; /* jobs as the API counts them: no tile */
  int64_t tiles_done;        /* tiles of split jobs run here (node work) */
  double finish_ms[SCHED_RATE_RING]; /* monotonic finish times, a ring */
  int nfinish, finish_pos;
  shist *hist;
  int nhist;
  size_t caphist;
};

/* compute/sched/mem.c: memory admission (see there). */
enum { SCHED_MEM_RUN = 0, SCHED_MEM_WAIT, SCHED_MEM_NEVER };
/* Jobs needing less than this are admitted on the budget alone (reading
 * /proc costs more than such a job's memory is worth). */
#define SCHED_MEM_PROBE_MIN ((int64_t)32 << 20)
/* Bytes job needs on backend (a tbackend): mem_bytes, + out_bytes for
 * compare. */
int64_t sched_mem_need(const job_estimate *est, int backend);
/* budget <= 0: none; reserved: what running jobs hold; avail < 0: unknown.
 * SCHED_MEM_RUN when need fits both the budget's room and avail; WAIT when
 * it does not but running jobs hold memory; NEVER otherwise. */
int sched_mem_decide(int64_t need, int64_t budget, int64_t reserved,
                     int64_t avail);
/* A small file (/proc, /sys) into buf, NUL-terminated, truncated to cap - 1
 * bytes: 0, or -1 when it cannot be read or is empty (compute/sched/mem.c; the
 * sampler reads /proc with it too). */
int sched_read_small(const char *path, char *buf, size_t cap);
void sched_mem_parse_meminfo(const char *text, int64_t *total,
                             int64_t *avail);       /* -1: absent */
int64_t sched_mem_parse_cgroup_value(const char *text); /* -1: "max"/bad */
/* The machine's figures now: total = min(MemTotal, cgroup memory.max);
 * avail = min(MemAvailable, memory.max - working set); -1 unknown. */
void sched_mem_probe(int64_t *total, int64_t *avail);
int64_t sched_mem_default_budget(int64_t total); /* 80 %; 0 when unknown */

/* compute/sched/journal.c: the in-flight journal (see there). open: count the
 * starts a dead process left in it (store_job_note_start), then map a fresh
 * one (none on failure: s->journal stays NULL). take: a slot naming job id
 * and its start number, or -1 when none (the caller then commits the start
 * before running). put: free it. */
void sched_journal_open(sched *s);
void sched_journal_close(sched *s);
int sched_journal_take(sched *s, const char *id, int attempt);
void sched_journal_put(sched *s, int slot);

/* compute/sched/split.c (see there): run a split parent (a store row with tiles >
 * 0 and no parent) on a coordinator thread; stop them all (shutdown: the
 * parents stay running in the store, resumed at the next start). */
int sched_split_run(sched *s, const store_job *parent, terr *e);
/* A split job's end, counted as one job of backend "split" (finished
 * total, the duration histogram, the rate); takes mu. */
void sched_count_split_end(sched *s, const char *kind, int status,
                           double run_ms);
void sched_split_stop(sched *s);
/* [mu] 1 when a coordinator here runs parent id: a wait on it is a remote
 * waiter (compute/sched/wait.c), fired when the coordinator ends or quits. */
int sched_split_held_locked(sched *s, const char *id);
/* The whole n x n matrix of a square split job without targets from its
 * tiles' results a[0 .. tiles) (borrowed, by tile index): each the upper
 * part of its rows as sched_split_rows cuts them with tri, mirrored, or
 * (a tile that the version before upper bands finished) its rows whole as
 * that version cut them (tri 0), copied as they are; any other shape, a
 * missing tile, or rows in no tile (old and new cuts that leave a gap) is
 * T_EIO saying which. Written on s's pool (s->pool, s->row_max and
 * s->tmp_counter are all it reads) to path (a temporary renamed over it)
 * or, when npy is not NULL and it fits s->row_max, into *npy (the .npy
 * bytes, the caller's to free); *info its part record, *nonconv its NaN
 * pairs j > i (Vincenty's non-converged, once a pair). */
struct tpart;
/* The rows of each tile of a condensed split job (n points, `tiles`
 * tiles), told from its result's length len[t] (pairs j > i of its rows):
 * a band of equal pairs as this version cuts it (sched_split_rows, tri 1)
 * or one of equal rows as the version before cut it (tri 0; a tile it
 * finished before an upgrade), whichever starts where tile t - 1 ended and
 * holds len[t] pairs. T_EIO saying which tile when none does or the bands
 * end before row n (old and new cuts that leave a gap or overlap): the
 * join concatenates the tiles, which is the matrix only then. */
int sched_split_condensed_check(const int64_t *len, int tiles, int64_t n,
                                terr *e);
int sched_split_join_square(sched *s, tarray **a, int tiles, int64_t n,
                            const char *path, void **npy, size_t *npy_len,
                            struct tpart *info, int64_t *nonconv, terr *e);

/* Remove every file of the results directory whose name match(name, arg)
 * accepts, logging each with `why`. One pass; a file that cannot be
 * removed is left (the next sweep or expiry tries again). */
void sched_results_sweep(sched *s, int (*match)(const char *name,
                                                 const void *arg),
                         const void *arg, const char *why);

/* ---- queue.c: the queue's state under s->mu ---- */
/* Which heap a job waits in. [mu] */
int sched_queue_for(const sched *s, const sjob *j);
/* Push j into a queue (the caller wakes its workers). [mu] */
int sched_queue_push(sched *s, sjob *j, int queue);
/* Wake the workers of a queue. Takes s->mu for the GPU workers' cv. */
void sched_wake(sched *s, int queue);
/* Add j to the running list, counting nrunning; the caller sets in_running. [mu] */
void sched_running_add(sched *s, sjob *j);

/* Fire the remote waiters of job id (ended: its committed row, or NULL).
 * No lock held. */
void sched_fire_remote(sched *s, const char *id, const store_job *ended);
/* A job held here: canceled (0), T_ENOTFOUND when not held, T_ECONFLICT
 * when finishing (sched.c). */
int sched_cancel_held(sched *s, const char *id, const char *owner, terr *e);
/* Claimed jobs in: a row from store_job_claim queued here (sched.c). */
int sched_add_claimed(sched *s, const store_job *row, terr *e);
/* A job whose lease was lost: a queued one is dropped (nothing written),
 * a running one stops (SJ_STOP_LOST) and writes nothing. */
void sched_drop_lost(sched *s, const char *id);

/* Debug builds: the scheduler's lock rules (see the top of this file). */
#define SCHED_ASSERT_LOCKED(s) T_ASSERT_HELD(&(s)->mu)
#define SCHED_ASSERT_UNLOCKED(s) T_ASSERT_NOT_HELD(&(s)->mu)

/* queue.c (the queue's state; sched.c's workers and run.c call these) */
/* 1 when TESSEL_TEST_CRASH_LABEL is set (read once, at the first call) and
 * equals label: a test-only fault switch, the job aborts the process right
 * after its start is committed. Any thread. */
int sched_test_crash_label(const char *label);
void sched_running_remove(sched *s, sjob *j);           /* [mu] */
/* Put a taken job back into a queue (auto job routed to the other kind of
 * worker). Takes the lock. 0, or 1 when the job was canceled meanwhile (the
 * caller then ends it). */
int sched_handover(sched *s, sjob *j, int queue);
/* Memory admission of a taken job (compute/sched/mem.c has the rule): RUN with
 * its need reserved; WAIT with the job back in its queue (like a
 * handover: the caller is done with it); NEVER: the caller fails it. Takes
 * the lock. */
int sched_mem_admit(sched *s, sjob *j, int64_t need, int64_t avail);
/* Give back the job's reservation and wake workers waiting for it. Takes
 * the lock. */
void sched_mem_release(sched *s, sjob *j);

/* compute/sched/run.c: run a job taken by a worker; device -1 on a CPU worker. */
void sched_run_job(sched *s, sjob *j, int device);
/* compute/sched/run.c: n cuda jobs taken together by the GPU worker of
 * device (a gang: compute/sched/README.md, "Gangs"), each RUNNING. */
#define SCHED_GANG_KEY 8192 /* a kind's gang key, at most */
#define SCHED_GANG_MAX 256  /* jobs a GPU worker takes together */
void sched_run_gang(sched *s, sjob **jobs, int n, int device);
/* compute/sched/queue.c: 1 when TESSEL_GPU_GANG_HOLD is "0" (holds off). */
int sched_holds_off_env(void);
/* compute/sched/queue.c: 1 while hold (sched_hold_open) is open. [mu] */
int sched_hold_is_open(const sched *s, uint64_t hold);
/* End a job that never started (queued cancel, shutdown): store write when
 * status >= 0, then release. No lock held. */
void sched_end_unstarted(sched *s, sjob *j, int status, const char *code,
                         const char *msg);

/* A duration in ms as stored: rounded to the microsecond. */
static inline double sched_ms_round(double ms) { return round(ms * 1e3) / 1e3; }
/* compute/sched/submit_check.c: the result and memory caps (--max-result, the per-job and
 * --max-memory limits) against est for backend b: 0 or T_ETOOLARGE
 * naming "params". The submit's check applies them; so does a run that
 * checks its job again (one queued from the store). */
int sched_check_caps(sched *s, tbackend b, const job_estimate *est, terr *e);
/* compute/sched/text.c: the stored estimate document, a new string (NULL: no
 * memory): the kind's figures, then the router's (router: the members text
 * router_choose_text wrote; NULL or "": none), then "files": the job's
 * pins (compute/array/localfile.h; none: no "files"). */
char *stext_estimate(const job_estimate *est, const char *router,
                     const struct tlocal_pins *pins);
/* A cuda run's devices for its end (API.md, backend.devices): JSON text
 * [{"device","rows","blocks"[,"failed"][,"taken_back"]}], a lane each as
 * ctx->lanes has them (the run's own first), or [{"device": own}] for a
 * run that said nothing of lanes; and backend.used into used (cap bytes):
 * "cuda:0+cuda:2", the devices that wrote rows, in that order, or
 * "cuda:<own>" when none did. A new string; NULL: no memory. */
char *stext_devices(const job_ctx *ctx, int own, char *used, size_t cap);

/* compute/sched/wait.c */
/* With mu held: remove j from the id table, count it, detach its waiters;
 * returns the chain to fire (fnext-linked). */
swaiter *sched_release_locked(sched *s, sjob *j, int status, int counted,
                              const char *backend, double run_ms);
/* Without mu: call the chain's callbacks (ended: the job's committed row,
 * or NULL; npy: the result kept in that row, or NULL), then unlist and
 * free them. */
void sched_fire(sched *s, swaiter *chain, const char *id,
                const store_job *ended, const void *npy, size_t npy_len);

#endif
