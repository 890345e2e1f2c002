/* push_mem.h — a push reader's value sink (compute/array/tarray.h tvals_out) that
 * collects the values in memory: what the CSV and JSON push readers'
 * unit tests and fuzz targets compare with the one-shot parsers' arrays.
 * Included once per test program (static functions). The caller frees b.
 */
#ifndef TESSEL_TESTS_PUSH_MEM_H
#define TESSEL_TESTS_PUSH_MEM_H

#include <stdlib.h>
#include <string.h>

#include "compute/array/tarray.h"

typedef struct mem {
  char *b;
  size_t n, cap;
  int restarts; /* times the reader asked to start over (CSV's header) */
} mem;

static inline int mem_write(void *ud, const void *p, size_t n, terr *e) {
  (void)e;
  mem *m = ud;
  if (m->n + n > m->cap) {
    m->cap = (m->n + n) * 2;
    m->b = realloc(m->b, m->cap);
    if (!m->b) abort(); /* a test: no memory is not a result */
  }
  memcpy(m->b + m->n, p, n);
  m->n += n;
  return 0;
}

static inline void mem_restart(void *ud) {
  mem *m = ud;
  m->n = 0;
  m->restarts++;
}

#endif
