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
 */
#include <malloc.h>
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
  snprintf(j->id, sizeof j->id, "%s", sj->id);
  snprintf(j->stem, sizeof j->stem, "%s", sj->id);
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
  kind_checked_free(j->checked_k, j->checked);
  tlocal_pins_free(j->pins);
  json_decref(j->params);
  json_decref(j->estimates);
  free(j);
  if (big) malloc_trim(0);
}

