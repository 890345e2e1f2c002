/* test_heap.c — util/heap.h against a brute-force model: random pushes,
 * pops and removals from the middle, checking after every step that the
 * top is the model's minimum, that every element's reported slot is its
 * slot (theap_check with positions), and that removed elements are told
 * they left. Also the empty heap, one element, ties, and growth.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/err.h"
#include "util/heap.h"

typedef struct item {
  int key;
  int seq;     /* ties broken by insertion order, as the scheduler does */
  size_t slot; /* reported by the heap */
  int in;      /* in the model */
} item;

static int less(const void *a, const void *b) {
  const item *x = a, *y = b;
  return x->key != y->key ? x->key < y->key : x->seq < y->seq;
}
static void moved(void *e, size_t i) { ((item *)e)->slot = i; }
static size_t pos(const void *e) { return ((const item *)e)->slot; }

static uint64_t rng = 88172645463325252ULL;
static unsigned next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)rng;
}

/* The model's minimum among items in the heap; NULL when none. */
static item *model_min(item *v, int n) {
  item *m = NULL;
  for (int i = 0; i < n; i++)
    if (v[i].in && (!m || less(&v[i], m))) m = &v[i];
  return m;
}

TEST(empty_and_one) {
  theap h;
  theap_init(&h, less, moved);
  CHECK(theap_top(&h) == NULL);
  CHECK(theap_pop(&h) == NULL);
  item a = {.key = 5, .seq = 0};
  CHECK(theap_push(&h, &a) == 0);
  CHECK(a.slot == 0 && theap_top(&h) == &a);
  CHECK(theap_pop(&h) == &a);
  CHECK(a.slot == THEAP_NONE && h.n == 0);
  theap_free(&h);
  theap_free(&h); /* twice is fine */
  theap_free(NULL);
}

TEST(random_against_model) {
  enum { N = 3000 };
  item *v = calloc(N, sizeof *v);
  theap h;
  theap_init(&h, less, moved);
  int used = 0, in = 0;
  for (int step = 0; step < 40000; step++) {
    unsigned r = next() % 10;
    if ((r < 5 || in == 0) && used < N) { /* push; keys collide often */
      item *x = &v[used];
      x->key = (int)(next() % 50);
      x->seq = used++;
      x->in = 1;
      in++;
      CHECK(theap_push(&h, x) == 0);
    } else if (r < 7 && in > 0) { /* pop */
      item *want = model_min(v, used);
      item *got = theap_pop(&h);
      CHECK(got == want);
      if (got) {
        got->in = 0;
        CHECK(got->slot == THEAP_NONE);
      }
      in--;
    } else if (in > 0) { /* remove one from anywhere */
      int k = (int)(next() % (unsigned)used);
      while (!v[k].in) k = (k + 1) % used;
      size_t slot = v[k].slot;
      CHECK(slot < h.n && h.v[slot] == &v[k]);
      CHECK(theap_remove(&h, slot) == &v[k]);
      v[k].in = 0;
      CHECK(v[k].slot == THEAP_NONE);
      in--;
    }
    CHECK((int)h.n == in);
    CHECK(theap_top(&h) == model_min(v, used));
    if (step % 97 == 0) CHECK(theap_check(&h, pos));
    if (check_failed_now) break;
  }
  CHECK(theap_check(&h, pos));
  CHECK(h.cap >= h.n);
  /* Drain in order. */
  item *prev = NULL;
  while (h.n) {
    item *x = theap_pop(&h);
    if (prev) CHECK(!less(x, prev));
    prev = x;
  }
  theap_free(&h);
  free(v);
}

int main(void) {
  RUN(empty_and_one);
  RUN(random_against_model);
  return check_summary();
}
