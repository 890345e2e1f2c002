/* heap.h — the one binary heap: a min-heap of pointers under a caller's
 * order, with positions reported back so that any element can be removed
 * in O(log n) (a canceled job, a disarmed deadline).
 *
 * `less(a, b)` is the order (the top is an element no other is less than);
 * `moved(elem, i)`, when given, is called whenever an element takes slot i
 * of the heap, and with THEAP_NONE when it leaves it: the caller keeps i in
 * the element to pass to theap_remove. In debug builds every change checks
 * the heap property and the reported positions (theap_check under assert).
 *
 * Ownership: the heap owns its array, never the elements. theap_free(NULL)
 * is a no-op. Threads: one thread at a time (callers hold their lock).
 */
#ifndef TESSEL_UTIL_HEAP_H
#define TESSEL_UTIL_HEAP_H

#include <stddef.h>

#define THEAP_NONE ((size_t)-1)

typedef struct theap {
  void **v;
  size_t n, cap;
  int (*less)(const void *a, const void *b);
  void (*moved)(void *elem, size_t i);
} theap;

void theap_init(theap *h, int (*less)(const void *, const void *),
                void (*moved)(void *, size_t));
/* 0, or T_ENOMEM (the heap unchanged). */
int theap_push(theap *h, void *elem);
/* The top (NULL when empty), left in place. */
static inline void *theap_top(const theap *h) { return h->n ? h->v[0] : NULL; }
/* Take the element at slot i out (i < n) and return it. */
void *theap_remove(theap *h, size_t i);
static inline void *theap_pop(theap *h) {
  return h->n ? theap_remove(h, 0) : NULL;
}
void theap_free(theap *h);
/* 1 when the heap property and every reported position hold (for asserts
 * and tests; O(n)). `pos(elem)` reads an element's recorded slot, NULL to
 * check the order only. */
int theap_check(const theap *h, size_t (*pos)(const void *elem));

#endif
