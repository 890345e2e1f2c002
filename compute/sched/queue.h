/* queue.h — the scheduler's queue (compute/sched/queue.c): a job held here
 * (sjob) and its states, the heaps that order the queued ones (priority,
 * then FIFO) and the id table that finds any held job. The fields marked
 * [mu] are guarded by the scheduler's one lock (sched_int.h says the lock
 * rules); a job's state changes are checked against its life below.
 */
#ifndef TESSEL_SCHED_QUEUE_H
#define TESSEL_SCHED_QUEUE_H

#include <stdatomic.h>
#include <stdint.h>

#include "compute/sched/sched.h"
#include "util/heap.h"
#include "util/tassert.h"

enum { SJ_QUEUED = 0, SJ_RUNNING, SJ_ENDING };
enum { Q_CPU = 0, Q_GPU, Q_AUTO, Q__COUNT }; /* which heap holds a job */
/* stop values: 0 run, 1 canceled, 2 timed out (kinds.h), and ours: */
#define SJ_STOP_SHUTDOWN 3 /* leave the job unfinished in the store */
#define SJ_STOP_LOST 4     /* cluster: its lease went to another node; write
                            * nothing, drop what it computed */

typedef struct sjob {
  char id[T_ID_MAX];
  /* Its result files' name under <data>/results: the id, and on a cluster
   * store "<id>.r<attempt>" (the claim's attempt, unique per run: a run
   * whose lease was lost and that still writes never touches the files of
   * the run that replaced it; compute/sched/cluster.c). */
  char stem[T_ID_MAX + 16];
  char *owner, *kind, *params_text, *backend_text; /* owned copies */
  char *output_file;   /* "output": {"file"} (owned); NULL when none */
  /* Its store row as queued, less params (params_text has them; owned):
   * with this run's start and end applied, the row its end hands back
   * without a read (store_job_end.before). NULL: out of memory, read back. */
  store_job *row;
  int requested;       /* tbackend, or -1 when the stored name is unknown */
  int priority;
  uint64_t seq;        /* FIFO order within a priority */
  double timeout_s;
  int64_t created_at;  /* wall ms */
  int attempts;        /* starts recorded in the store before this run */
  int crash_test;      /* test fault switch: abort() at the start (sched.c) */
  int tile, tiles;     /* a tile of a split job (tiles > 0): its rows are
                          sched_split_rows of est.size (compute/sched/split_join.c) */
  int state;           /* [mu] SJ_* */
  int queue, heap_index; /* [mu] Q_* and position while QUEUED; -1 else */
  atomic_int stop;
  job_ctx ctx;         /* progress_done/total read by others (atomics) */
  /* Progress of earlier compare runs, so done/total grow over all runs. */
  int64_t progress_base_done, progress_base_total; /* [mu] */
  int progress_runs_left;                          /* [mu] runs after this */
  int64_t stored_done;       /* [mu] monitor: last progress written */
  double next_progress_ms;   /* [mu] monitor */
  double deadline_ms;        /* [mu] monotonic; 0: none */
  int nwaiters;              /* [mu] */
  int in_running;            /* [mu] counted in nrunning */
  int on_gpu;                /* [mu] taken by a GPU worker (while running) */
  int64_t mem_held;          /* [mu] its share of sched.mem_reserved */
  int mem_blocked;           /* [mu] sent back: waits for memory */
  uint64_t mem_wait_gen;     /* [mu] sched.mem_gen when sent back */
  /* Worker-owned, kept across a hand-over between CPU and GPU queues. */
  json_t *params;
  const kind_ops *k;
  job_estimate est;
  int have_est;
  /* What the kind's check built (the parsed and compiled expression), for
   * prepare to take instead of building it again; freed with checked_k's
   * checked_free when the job ends before it is prepared. */
  void *checked;
  const kind_ops *checked_k;
  /* Its {"file"} inputs as accepted (compute/array/localfile.h, "Pins"): read from
   * the stored estimate's "files" (sjob_new), given to the run's tenv,
   * stored again with the estimate at its start. NULL: none stored (the
   * run's check pins what it reads). */
  struct tlocal_pins *pins;
  tbackend backend; /* resolved; B_AUTO until resolved */
  char reason[256];
  char *figures; /* the router's figures: members of a JSON object
                   * (router_choose_text); NULL when not routed */
  double taken_ms;   /* monotonic, when a worker took it */
  /* A gang's (sched.c, sched_gpu_worker): the jobs taken together to
   * share one launch, and the first one's id; 0 and "" for a job taken
   * alone. Set when taken, read by its run (stored with its start). */
  int gang_n;
  char gang_first[T_ID_MAX];
  /* The batch's hold it was queued with (sched_hold_open; 0: none): a GPU
   * worker waits for the rest of the batch before it takes it into a
   * gang. [mu] */
  uint64_t hold;
  struct sjob *hnext;        /* [mu] id table chain */
  struct sjob *rprev, *rnext;/* [mu] running list */
} sjob;

/* A job's state changes, checked in debug builds against the life above:
 * QUEUED -> QUEUED (its first push), RUNNING (taken) or ENDING (canceled
 * or shut down before it started); RUNNING -> QUEUED (handed to the other
 * queue, or sent back to wait for memory) or ENDING; ENDING is final. The
 * caller holds sched.mu ([mu]). */
static inline int sjob_state_legal(int from, int to) {
  static const unsigned char legal[3][3] = {
      /* to:  QUEUED RUNNING ENDING */
      [SJ_QUEUED] = {1, 1, 1},
      [SJ_RUNNING] = {1, 0, 1},
      [SJ_ENDING] = {0, 0, 0},
  };
  return from >= 0 && from < 3 && to >= 0 && to < 3 && legal[from][to];
}

/* A queue of jobs: the heap of util/heap.h ordered by sjob_before, each
 * job's slot kept in its heap_index (-1 when in no heap). */
typedef theap sjob_heap;

/* compute/sched/queue.c */
int sjob_before(const sjob *a, const sjob *b); /* a runs first */
static inline void sjob_set_state(sjob *j, int to) {
  T_ASSERT(sjob_state_legal(j->state, to));
  j->state = to;
}

void sjob_heap_init(sjob_heap *h);
int sjob_heap_push(sjob_heap *h, sjob *j);     /* [mu] 0 or T_ENOMEM */
void sjob_heap_remove(sjob_heap *h, int i);    /* [mu] */
/* [mu] The job at the top (NULL when empty), left in place. */
static inline sjob *sjob_heap_top(const sjob_heap *h) { return theap_top(h); }
sjob *sched_find(sched *s, const char *id);    /* [mu] NULL when not held */
int sched_table_insert(sched *s, sjob *j);     /* [mu] 0 or T_ENOMEM */
void sched_table_remove(sched *s, sjob *j);    /* [mu] */
/* A job from its store row (strings copied); NULL on no memory. */
sjob *sjob_new(const store_job *sj);
void sjob_free(sjob *j);

#endif
