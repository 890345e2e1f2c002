/* heap.c — the binary heap of heap.h: sift up and down over an array that
 * grows through the vector idiom (util/vec.h).
 *
 * Debug builds (no NDEBUG) check the whole heap after every change with
 * theap_check (order only: positions are the caller's to read); that is
 * O(n) per change, which is why it is a debug-only check.
 */
#include "util/heap.h"

#include <assert.h>
#include <stdlib.h>

#include "util/err.h"
#include "util/vec.h"

void theap_init(theap *h, int (*less)(const void *, const void *),
                void (*moved)(void *, size_t)) {
  h->v = NULL;
  h->n = h->cap = 0;
  h->less = less;
  h->moved = moved;
}

static void put(theap *h, size_t i, void *e) {
  h->v[i] = e;
  if (h->moved) h->moved(e, i);
}

static void sift_up(theap *h, size_t i) {
  void *e = h->v[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!h->less(e, h->v[parent])) break;
    put(h, i, h->v[parent]);
    i = parent;
  }
  put(h, i, e);
}

static void sift_down(theap *h, size_t i) {
  void *e = h->v[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->less(h->v[c + 1], h->v[c])) c++;
    if (!h->less(h->v[c], e)) break;
    put(h, i, h->v[c]);
    i = c;
  }
  put(h, i, e);
}

int theap_push(theap *h, void *elem) {
  if (tvec_grow(&h->v, &h->cap, sizeof *h->v, h->n + 1, 0)) return T_ENOMEM;
  h->v[h->n++] = elem;
  sift_up(h, h->n - 1);
  assert(theap_check(h, NULL));
  return T_OK;
}

void *theap_remove(theap *h, size_t i) {
  assert(i < h->n);
  void *e = h->v[i];
  void *last = h->v[--h->n];
  if (h->moved) h->moved(e, THEAP_NONE);
  if (i < h->n) {
    put(h, i, last);
    /* The last element may belong above or below slot i. */
    if (i > 0 && h->less(last, h->v[(i - 1) / 2])) sift_up(h, i);
    else sift_down(h, i);
  }
  assert(theap_check(h, NULL));
  return e;
}

void theap_free(theap *h) {
  if (!h) return;
  free(h->v);
  h->v = NULL;
  h->n = h->cap = 0;
}

int theap_check(const theap *h, size_t (*pos)(const void *elem)) {
  if (h->n > h->cap) return 0;
  for (size_t i = 0; i < h->n; i++) {
    if (i > 0 && h->less(h->v[i], h->v[(i - 1) / 2])) return 0;
    if (pos && pos(h->v[i]) != i) return 0;
  }
  return 1;
}
