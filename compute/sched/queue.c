/* compute/sched/queue.c — the scheduler's containers: binary heaps of jobs keyed
 * (priority desc, sequence asc) on util/heap.h, the id table (a chained hash that doubles
 * when it holds as many jobs as buckets), and making / freeing a job from
 * its store row. All [mu]: the caller holds sched.mu (see sched_int.h),
 * except sjob_new/sjob_free, which touch only the job.
 *
 * sjob_free of a job whose params text is TRIM_MIN or more (inline JSON
 * values: its parsed params take 10 to 75 times that in small blocks)
 * calls malloc_trim, so that the pages go back to the system rather than
 * stay in glibc's arenas (server/request.c does the same for the request's
 * own copy of the tree).
 *
 * And the queue's state on top of them (sched_int.h, "queue.c"): which
 * heap a job waits in, pushing and waking its workers, the running list, a
 * run's hand-back to a queue (sched_handover) and memory admission
 * (sched_mem_admit / sched_mem_release; compute/sched/mem.c has the rule),
 * each taking sched.mu itself or asserting it held, as marked; and the
 * test-only crash switch. sched.c's workers take from the queue; run.c
 * hands jobs back to it. It calls nothing above it (no file circle).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "compute/array/localfile.h"
#include "compute/sched/queue.h"
#include "compute/sched/sched_int.h"

/* ---- heaps ----------------------------------------------------------------- */
int sjob_before(const sjob *a, const sjob *b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->seq < b->seq;
}

static int before(const void *a, const void *b) { return sjob_before(a, b); }

static void moved(void *elem, size_t i) {
  ((sjob *)elem)->heap_index = i == THEAP_NONE ? -1 : (int)i;
}

void sjob_heap_init(sjob_heap *h) { theap_init(h, before, moved); }

int sjob_heap_push(sjob_heap *h, sjob *j) { return theap_push(h, j); }

void sjob_heap_remove(sjob_heap *h, int i) { theap_remove(h, (size_t)i); }

/* ---- the id table ------------------------------------------------------- */
static size_t id_hash(const char *id) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 1099511628211ULL;
  return (size_t)h;
}

sjob *sched_find(sched *s, const char *id) {
  SCHED_ASSERT_LOCKED(s);
  if (!s->nbuckets) return NULL;
  for (sjob *j = s->buckets[id_hash(id) & (s->nbuckets - 1)]; j; j = j->hnext)
    if (strcmp(j->id, id) == 0) return j;
  return NULL;
}

int sched_table_insert(sched *s, sjob *j) {
  SCHED_ASSERT_LOCKED(s);
  if (s->njobs + 1 > s->nbuckets) { /* grow to keep chains short */
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 256;
    sjob **b = calloc(nb, sizeof *b);
    if (!b) return T_ENOMEM;
    for (size_t i = 0; i < s->nbuckets; i++) {
      for (sjob *x = s->buckets[i], *next; x; x = next) {
        next = x->hnext;
        size_t k = id_hash(x->id) & (nb - 1);
        x->hnext = b[k];
        b[k] = x;
      }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
  }
  size_t k = id_hash(j->id) & (s->nbuckets - 1);
  j->hnext = s->buckets[k];
  s->buckets[k] = j;
  s->njobs++;
  return T_OK;
}

void sched_table_remove(sched *s, sjob *j) {
  SCHED_ASSERT_LOCKED(s);
  sjob **pp = &s->buckets[id_hash(j->id) & (s->nbuckets - 1)];
  for (; *pp; pp = &(*pp)->hnext) {
    if (*pp == j) {
      *pp = j->hnext;
      s->njobs--;
      return;
    }
  }
}

/* ---- jobs ----------------------------------------------------------------- */
static char *dup_or_empty(const char *x) { return strdup(x ? x : ""); }

sjob *sjob_new(const store_job *sj) {
  sjob *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  t_scopy(j->id, sizeof j->id, sj->id);
  t_scopy(j->stem, sizeof j->stem, sj->id);
  j->owner = dup_or_empty(sj->owner);
  j->kind = dup_or_empty(sj->kind);
  j->params_text = dup_or_empty(sj->params);
  j->backend_text = dup_or_empty(sj->backend_requested);
  j->output_file = sj->output_file ? strdup(sj->output_file) : NULL;
  if (!j->owner || !j->kind || !j->params_text || !j->backend_text ||
      (sj->output_file && !j->output_file)) {
    sjob_free(j);
    return NULL;
  }
  store_job r = *sj;
  r.params = NULL; /* possibly big, and in params_text already */
  if ((j->row = malloc(sizeof *j->row)) && store_job_copy(j->row, &r)) {
    free(j->row);
    j->row = NULL;
  }
  j->requested = tbackend_parse(sj->backend_requested ? sj->backend_requested
                                                      : "auto");
  j->priority = sj->priority;
  j->timeout_s = sj->timeout_s;
  j->created_at = sj->created_at;
  j->attempts = sj->attempts;
  if (sj->parent && sj->tiles > 0) { /* a tile of a split job */
    j->tile = sj->tile;
    j->tiles = sj->tiles;
  }
  if (sj->node && sj->node[0]) {
    /* Claimed from a cluster store (compute/sched/cluster.c): the claim counted
     * this run's attempt already; attempts means those before it, and the
     * result files are named for this run. */
    j->attempts = sj->attempts > 0 ? sj->attempts - 1 : 0;
    snprintf(j->stem, sizeof j->stem, "%s.r%d", sj->id, sj->attempts);
  }
  /* The pins its submit stored (compute/array/localfile.h): a run compares its
   * {"file"} inputs with them wherever it runs. Parsed only for a job
   * that has them. */
  if (sj->estimate && strstr(sj->estimate, "\"files\"")) {
    json_t *est = json_loads(sj->estimate, 0, NULL);
    j->pins = tlocal_pins_from_json(json_object_get(est, "files"));
    json_decref(est);
  }
  j->crash_test = sched_test_crash_label(sj->label);
  j->heap_index = -1;
  j->queue = -1;
  j->backend = B_AUTO;
  atomic_init(&j->stop, 0);
  atomic_init(&j->ctx.progress_done, 0);
  atomic_init(&j->ctx.progress_total, 0);
  return j;
}

#define TRIM_MIN ((size_t)8 * 1024 * 1024)

void sjob_free(sjob *j) {
  if (!j) return;
  int big = j->params_text && strlen(j->params_text) >= TRIM_MIN;
  free(j->owner);
  free(j->kind);
  free(j->params_text);
  free(j->backend_text);
  free(j->output_file);
  if (j->row) store_job_clear(j->row);
  free(j->row);
  kind_checked_free(j->checked_k, j->checked);
  tlocal_pins_free(j->pins);
  json_decref(j->params);
  free(j->figures);
  free(j);
  if (big) malloc_trim(0);
}

/* The test-only fault switch (sched_int.h): TESSEL_TEST_CRASH_LABEL, read
 * once; unset or empty in production, where it costs one pointer test. */
static pthread_once_t crash_once = PTHREAD_ONCE_INIT;
static char crash_label[201];
static void crash_label_read(void) {
  const char *v = getenv("TESSEL_TEST_CRASH_LABEL");
  if (v && *v) snprintf(crash_label, sizeof crash_label, "%s", v);
}

int sched_test_crash_label(const char *label) {
  pthread_once(&crash_once, crash_label_read);
  return crash_label[0] && label && strcmp(label, crash_label) == 0;
}

/* ---- the queue's state under s->mu (sched.c's workers take from it; a run
 * hands a job back to it or gives back its memory) ------------------------- */

/* Which heap a job waits in. [mu] */
int sched_queue_for(const sched *s, const sjob *j) {
  SCHED_ASSERT_LOCKED((sched *)s);
  if (s->ngpu == 0) return Q_CPU; /* cuda then fails "unavailable" on a CPU worker */
  if (j->backend == B_CUDA || (j->backend == B_AUTO && j->requested == B_CUDA))
    return Q_GPU;
  if (j->backend == B_AUTO && j->requested == B_AUTO) return Q_AUTO;
  return Q_CPU;
}

/* Push j into a queue (the caller wakes its workers). [mu] */
int sched_queue_push(sched *s, sjob *j, int queue) {
  SCHED_ASSERT_LOCKED(s);
  int rc = sjob_heap_push(&s->q[queue], j);
  if (rc) return rc;
  j->queue = queue;
  sjob_set_state(j, SJ_QUEUED);
  s->nqueued++;
  return T_OK;
}

void sched_wake(sched *s, int queue) {
  if (queue != Q_GPU) pool_notify(s->pool);
  if (queue != Q_CPU) {
    tmutex_lock(&s->mu);
    pthread_cond_broadcast(&s->gpu_cv);
    tmutex_unlock(&s->mu);
  }
}

/* Also counts nrunning; the caller sets in_running. */
void sched_running_add(sched *s, sjob *j) {
  j->rprev = NULL;
  j->rnext = s->running;
  if (s->running) s->running->rprev = j;
  s->running = j;
  s->nrunning++;
}

void sched_running_remove(sched *s, sjob *j) {
  SCHED_ASSERT_LOCKED(s);
  if (j->rprev)
    j->rprev->rnext = j->rnext;
  else if (s->running == j)
    s->running = j->rnext;
  if (j->rnext) j->rnext->rprev = j->rprev;
  j->rprev = j->rnext = NULL;
}

int sched_handover(sched *s, sjob *j, int queue) {
  tmutex_lock(&s->mu);
  if (atomic_load(&j->stop) != 0) {
    tmutex_unlock(&s->mu);
    return 1;
  }
  if (sched_queue_push(s, j, queue) != T_OK) {
    tmutex_unlock(&s->mu); /* no memory for the heap: end it here */
    return 1;
  }
  sched_running_remove(s, j);
  s->nrunning--;
  j->in_running = 0;
  if (s->nrunning == 0) pthread_cond_broadcast(&s->idle_cv);
  tmutex_unlock(&s->mu);
  sched_wake(s, queue);
  return 0;
}

int sched_mem_admit(sched *s, sjob *j, int64_t need, int64_t avail) {
  tmutex_lock(&s->mu);
  int d = sched_mem_decide(need, s->mem_budget, s->mem_reserved, avail);
  if (d == SCHED_MEM_RUN) {
    s->mem_reserved += need;
    j->mem_held = need;
    j->mem_blocked = 0;
  } else if (d == SCHED_MEM_WAIT && atomic_load(&j->stop) == 0 &&
             sched_queue_push(s, j, sched_queue_for(s, j)) == T_OK) {
    j->mem_blocked = 1;
    j->mem_wait_gen = s->mem_gen;
    sched_running_remove(s, j);
    s->nrunning--;
    j->in_running = 0;
    if (s->nrunning == 0) pthread_cond_broadcast(&s->idle_cv);
  } else if (d == SCHED_MEM_WAIT) {
    d = SCHED_MEM_NEVER; /* canceled meanwhile, or no memory for the heap */
  }
  tmutex_unlock(&s->mu);
  return d;
}

void sched_mem_release(sched *s, sjob *j) {
  tmutex_lock(&s->mu);
  int64_t held = j->mem_held;
  j->mem_held = 0;
  if (held > 0) {
    s->mem_reserved -= held;
    s->mem_gen++;
  }
  int blocked = 0; /* a job sent back for memory may go now */
  for (int q = 0; q < Q__COUNT; q++)
    if (sjob_heap_top(&s->q[q]) && sjob_heap_top(&s->q[q])->mem_blocked)
      blocked |= 1 << q;
  if (held > 0 && blocked) {
    if (s->pool && (blocked & ~(1 << Q_GPU)))
      for (int i = 0; i < s->nthreads; i++) pool_notify(s->pool);
    if (blocked & ~(1 << Q_CPU)) pthread_cond_broadcast(&s->gpu_cv);
  }
  tmutex_unlock(&s->mu);
}

/* ---- holds: a batch's jobs queued as one unit (sched.h) ------------------ */

/* TESSEL_GPU_GANG_HOLD=0: no holds (a batch's items queued as any; for
 * measuring, tests/bench/bench_gang.py), read by each sched_create. */
int sched_holds_off_env(void) {
  const char *v = getenv("TESSEL_GPU_GANG_HOLD");
  return v && strcmp(v, "0") == 0;
}

uint64_t sched_hold_open(sched *s) {
  if (s->holds_off) return 0;
  tmutex_lock(&s->mu);
  uint64_t id = 0;
  if (s->nholds < SCHED_HOLDS_MAX) {
    id = ++s->hold_seq;
    s->holds[s->nholds++] = id;
  }
  tmutex_unlock(&s->mu);
  return id;
}

void sched_hold_close(sched *s, uint64_t hold) {
  if (!hold) return;
  tmutex_lock(&s->mu);
  for (int i = 0; i < s->nholds; i++)
    if (s->holds[i] == hold) {
      s->holds[i] = s->holds[--s->nholds];
      break;
    }
  /* the GPU workers leave the hold's jobs queued while it is open */
  pthread_cond_broadcast(&s->gpu_cv);
  tmutex_unlock(&s->mu);
}

int sched_hold_is_open(const sched *s, uint64_t hold) {
  SCHED_ASSERT_LOCKED((sched *)s);
  for (int i = 0; hold && i < s->nholds; i++)
    if (s->holds[i] == hold) return 1;
  return 0;
}
