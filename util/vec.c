/* vec.c — the growth routine of vec.h. */
#include "util/vec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int tvec_grow(void *pv, size_t *cap, size_t elem, size_t need, size_t max) {
  if (need <= *cap) return 0;
  size_t limit = elem ? SIZE_MAX / elem : 0;
  if (max && max < limit) limit = max;
  if (need > limit) return T_ETOOLARGE;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) ncap = ncap > limit / 2 ? limit : ncap * 2;
  if (ncap > limit) ncap = limit;
  void *old;
  memcpy(&old, pv, sizeof old);
  void *nv = realloc(old, ncap * elem);
  if (!nv) return T_ENOMEM;
  memcpy(pv, &nv, sizeof nv);
  *cap = ncap;
  return 0;
}
