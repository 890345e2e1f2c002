/* test_jobs_rids.c — the table of idempotency keys with an insert in flight
 * (compute/jobs/rids.h).
 *
 * Checked: a claim is refused while anything of its key is in the table
 * (another claim, a queued insert not yet known committed, a [sync]
 * insert's hold) and granted again once it is gone; keys are per owner;
 * stamps grow and rids_committed drops exactly the entries stamped at or
 * below its mark, while a queued entry whose job end is not reported yet
 * (rids_ended) keeps its key busy; a job end known committed drops every
 * older queued entry too; a hold waits while a claim of its key has not
 * queued its job, and not otherwise, and says when the claim's insert is
 * queued and not known committed (the caller commits it first); the bound
 * refuses claims, never holds. Then threads claim, queue, hold and commit on a
 * few keys at once (run under TSan by `make test-tsan`): no claim is granted
 * while its key is held or claimed, no hold returns while a claim of its key is
 * pending, and the table is empty at the end.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "compute/jobs/rids.h"

static int keys_of(jobs_rids *t) {
  int k;
  rids_count(t, &k, NULL);
  return k;
}

TEST(claim_refused_while_busy) {
  jobs_rids *t = rids_new(0);
  rids_entry *a = rids_claim(t, "alice", "k1");
  CHECK(a != NULL);
  CHECK(rids_claim(t, "alice", "k1") == NULL); /* claimed */
  rids_entry *b = rids_claim(t, "bob", "k1");  /* another owner's key */
  CHECK(b != NULL);
  rids_entry *c = rids_claim(t, "alice", "k2");
  CHECK(c != NULL);
  CHECK(keys_of(t) == 3);
  rids_unclaim(t, a); /* the store had it */
  CHECK(keys_of(t) == 2);
  a = rids_claim(t, "alice", "k1");
  CHECK(a != NULL);
  /* a [sync] hold keeps the key busy for claims */
  rids_unclaim(t, a);
  int queued = -1;
  rids_entry *h = rids_hold(t, "alice", "k1", &queued);
  CHECK(h != NULL && queued == 0);
  CHECK(rids_claim(t, "alice", "k1") == NULL);
  rids_entry *h2 = rids_hold(t, "alice", "k1", &queued); /* shared */
  CHECK(h2 == h);
  rids_release(t, h);
  CHECK(rids_claim(t, "alice", "k1") == NULL);
  rids_release(t, h2);
  CHECK(keys_of(t) == 2);
  rids_unclaim(t, b);
  rids_unclaim(t, c);
  CHECK(keys_of(t) == 0);
  /* an empty owner and a NULL one are the same key */
  a = rids_claim(t, NULL, "k");
  CHECK(a && rids_claim(t, "", "k") == NULL);
  rids_unclaim(t, a);
  rids_free(t);
}

TEST(queued_until_committed_and_ended) {
  jobs_rids *t = rids_new(0);
  rids_entry *a = rids_claim(t, "o", "a"), *b = rids_claim(t, "o", "b");
  CHECK(a && b);
  uint64_t m0 = rids_mark(t);
  uint64_t sa = rids_queued(t, a);
  rids_enqueued(a);
  uint64_t m1 = rids_mark(t);
  uint64_t sb = rids_queued(t, b);
  rids_enqueued(b);
  CHECK(sa > m0 && sa == m1 && sb > sa && rids_mark(t) == sb);
  int keys, async;
  rids_count(t, &keys, &async);
  CHECK(keys == 2 && async == 2);
  rids_committed(t, m0); /* before either was queued: nothing */
  rids_count(t, &keys, &async);
  CHECK(keys == 2 && async == 2);
  rids_committed(t, m1); /* a's insert, not b's */
  rids_count(t, &keys, &async);
  CHECK(keys == 2 && async == 1);
  CHECK(rids_claim(t, "o", "a") == NULL); /* its job end not reported */
  rids_ended(a, 0);
  CHECK(keys_of(t) == 1);
  rids_entry *a2 = rids_claim(t, "o", "a");
  CHECK(a2 != NULL);
  /* a later job's committed end covers every older queued insert */
  uint64_t sa2 = rids_queued(t, a2);
  rids_enqueued(a2);
  CHECK(sa2 > sb);
  rids_ended(a2, 1);
  rids_count(t, &keys, &async);
  CHECK(keys == 1 && async == 0); /* b: committed, its end still due */
  rids_ended(b, 1);
  CHECK(keys_of(t) == 0);
  rids_free(t);
}

typedef struct holder {
  jobs_rids *t;
  rids_entry *en;
  int queued;
  atomic_int returned;
} holder;

static void *hold_main(void *arg) {
  holder *h = arg;
  h->en = rids_hold(h->t, "o", "k", &h->queued);
  atomic_store(&h->returned, 1);
  return NULL;
}

TEST(hold_waits_for_a_pending_claim) {
  jobs_rids *t = rids_new(0);
  rids_entry *c = rids_claim(t, "o", "k");
  CHECK(c != NULL);
  holder h = {.t = t};
  atomic_init(&h.returned, 0);
  pthread_t th;
  pthread_create(&th, NULL, hold_main, &h);
  /* Blocked while the claim is pending: however long we look, it must not
   * return (a hold that does not wait fails here, never the other way). */
  for (int i = 0; i < 20; i++) {
    CHECK(atomic_load(&h.returned) == 0);
    usleep(1000);
  }
  (void)rids_queued(t, c); /* the insert queued, the job not yet */
  for (int i = 0; i < 5; i++) {
    CHECK(atomic_load(&h.returned) == 0);
    usleep(1000);
  }
  rids_enqueued(c);
  pthread_join(th, NULL);
  /* the claim's insert is queued, not known committed: commit it first */
  CHECK(h.en != NULL && h.queued == 1);
  /* a hold of a key whose claim is queued returns at once */
  int queued = 0;
  rids_entry *h2 = rids_hold(t, "o", "k", &queued);
  CHECK(h2 == h.en && queued == 1);
  rids_release(t, h2);
  rids_committed(t, rids_mark(t)); /* committed: the key stays (its end) */
  h2 = rids_hold(t, "o", "k", &queued);
  CHECK(h2 == h.en && queued == 0);
  rids_release(t, h2);
  rids_release(t, h.en);
  CHECK(keys_of(t) == 1); /* its job's end not reported */
  rids_ended(c, 0);
  CHECK(keys_of(t) == 0);
  /* an unclaim frees a waiting hold too */
  c = rids_claim(t, "o", "k");
  atomic_store(&h.returned, 0);
  pthread_create(&th, NULL, hold_main, &h);
  rids_unclaim(t, c);
  pthread_join(th, NULL);
  CHECK(h.en != NULL && h.queued == 0);
  rids_release(t, h.en);
  CHECK(keys_of(t) == 0);
  rids_free(t);
}

TEST(bound_refuses_claims_not_holds) {
  jobs_rids *t = rids_new(4);
  rids_entry *en[4];
  char k[8];
  for (int i = 0; i < 4; i++) {
    snprintf(k, sizeof k, "k%d", i);
    en[i] = rids_claim(t, "o", k);
    CHECK(en[i] != NULL);
  }
  CHECK(rids_claim(t, "o", "k9") == NULL);
  int queued;
  rids_entry *h = rids_hold(t, "o", "k9", &queued);
  CHECK(h != NULL);
  rids_release(t, h);
  rids_unclaim(t, en[0]);
  en[0] = rids_claim(t, "o", "k9");
  CHECK(en[0] != NULL);
  for (int i = 0; i < 4; i++) rids_unclaim(t, en[i]);
  CHECK(keys_of(t) == 0);
  rids_free(t);
}

/* ---- threads at once ----------------------------------------------------- */

#define NKEYS 6
#define NTHREADS 4
#define ITERS 3000

static jobs_rids *g_t;
static atomic_int g_holding[NKEYS]; /* holds returned, not released */
static atomic_int g_claimed[NKEYS]; /* claims granted, entry not ended */
static atomic_int g_pending[NKEYS]; /* claims granted, job not enqueued */
static atomic_int g_bad;

static void *stress_main(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  char key[8];
  for (int i = 0; i < ITERS; i++) {
    int k = (int)(rand_r(&seed) % NKEYS);
    snprintf(key, sizeof key, "k%d", k);
    int op = (int)(rand_r(&seed) % 3);
    if (op == 0) {
      rids_entry *en = rids_claim(g_t, "o", key);
      if (!en) continue;
      if (atomic_fetch_add(&g_claimed[k], 1) != 0 ||
          atomic_load(&g_holding[k]) != 0)
        atomic_fetch_add(&g_bad, 1);
      atomic_store(&g_pending[k], 1);
      if (rand_r(&seed) % 4 == 0) { /* the store had it */
        atomic_store(&g_pending[k], 0);
        atomic_fetch_sub(&g_claimed[k], 1);
        rids_unclaim(g_t, en);
        continue;
      }
      (void)rids_queued(g_t, en);
      atomic_store(&g_pending[k], 0);
      rids_enqueued(en);
      atomic_fetch_sub(&g_claimed[k], 1);
      rids_ended(en, (int)(rand_r(&seed) % 2));
    } else if (op == 1) {
      uint64_t m = rids_mark(g_t);
      int queued;
      rids_entry *en = rids_hold(g_t, "o", key, &queued);
      if (!en) continue;
      atomic_fetch_add(&g_holding[k], 1);
      if (atomic_load(&g_pending[k]) != 0) atomic_fetch_add(&g_bad, 1);
      atomic_fetch_sub(&g_holding[k], 1);
      rids_release(g_t, en);
      rids_committed(g_t, m);
    } else {
      rids_committed(g_t, rids_mark(g_t));
    }
  }
  return NULL;
}

TEST(threads_at_once) {
  g_t = rids_new(0);
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    pthread_create(&th[i], NULL, stress_main, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  CHECK_MSG(atomic_load(&g_bad) == 0, "%d broken rules", atomic_load(&g_bad));
  rids_committed(g_t, rids_mark(g_t));
  int keys, async;
  rids_count(g_t, &keys, &async);
  CHECK_MSG(keys == 0 && async == 0, "left: %d keys, %d async", keys, async);
  rids_free(g_t);
}

int main(void) {
  RUN(claim_refused_while_busy);
  RUN(queued_until_committed_and_ended);
  RUN(hold_waits_for_a_pending_claim);
  RUN(bound_refuses_claims_not_holds);
  RUN(threads_at_once);
  return check_summary();
}
