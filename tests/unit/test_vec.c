/* test_vec.c — util/vec.h: growth keeps the elements, doubles, honours the
 * cap, refuses sizes whose byte count would overflow, leaves the vector
 * unchanged on failure; zero elements need no allocation. (Out of memory
 * itself is not provoked: an allocation that size aborts under ASan.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/err.h"
#include "util/vec.h"

TEST(push_and_grow) {
  TVEC(int) v = {0};
  size_t grows = 0, last = 0;
  for (int i = 0; i < 100000; i++) {
    CHECK(tvec_push(&v, i) == 0);
    if (v.cap != last) grows++, last = v.cap;
  }
  CHECK(v.n == 100000 && v.cap >= v.n);
  CHECK(grows <= 14); /* 16 .. 131072 by doubling */
  int ok = 1;
  for (int i = 0; i < 100000; i++) ok &= v.v[i] == i;
  CHECK(ok);
  free(v.v);
}

TEST(zero_and_reserve) {
  TVEC(double) v = {0};
  CHECK(tvec_reserve(&v, 0) == 0);
  CHECK(v.v == NULL && v.cap == 0);
  CHECK(tvec_reserve(&v, 1000) == 0);
  CHECK(v.cap >= 1000 && v.v != NULL);
  size_t cap = v.cap;
  CHECK(tvec_reserve(&v, 10) == 0 && v.cap == cap); /* never shrinks */
  free(v.v);
}

TEST(caps_and_overflow) {
  char *p = NULL;
  size_t cap = 0;
  CHECK(tvec_grow(&p, &cap, 1, 100, 64) == T_ETOOLARGE);
  CHECK(p == NULL && cap == 0); /* unchanged */
  CHECK(tvec_grow(&p, &cap, 1, 40, 64) == 0);
  CHECK(cap >= 40 && cap <= 64);
  CHECK(tvec_grow(&p, &cap, 1, 64, 64) == 0 && cap == 64); /* up to the cap */
  CHECK(tvec_grow(&p, &cap, 1, 65, 64) == T_ETOOLARGE && cap == 64);
  free(p);
  /* n * elem would overflow size_t: refused before any allocation. */
  uint64_t *q = NULL;
  size_t qcap = 0;
  CHECK(tvec_grow(&q, &qcap, sizeof *q, SIZE_MAX / 4, 0) == T_ETOOLARGE);
  CHECK(q == NULL && qcap == 0);
}

int main(void) {
  RUN(push_and_grow);
  RUN(zero_and_reserve);
  RUN(caps_and_overflow);
  return check_summary();
}
