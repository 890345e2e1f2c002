/* test_layout.c — compute/array/layout.h: square <-> condensed shapes for every n up
 * to 300 (and the shapes that are neither), and the condensed index against
 * the enumeration it names (row by row above the diagonal).
 */
#include <string.h>

#include "compute/array/layout.h"
#include "check.h"

TEST(parse) {
  CHECK(tlayout_parse("square") == TLAYOUT_SQUARE);
  CHECK(tlayout_parse("condensed") == TLAYOUT_CONDENSED);
  CHECK(tlayout_parse("Square") == -1);
  CHECK(tlayout_parse("") == -1);
  CHECK(tlayout_parse(NULL) == -1);
}

TEST(shapes) {
  terr e;
  for (int64_t n = 0; n <= 300; n++) {
    int64_t sq[2] = {n, n}, cd[1] = {n * (n - 1) / 2}, out[T_MAXDIM], side;
    int nd;
    CHECK(tlayout_switch_shape(TLAYOUT_SQUARE, TLAYOUT_CONDENSED, 2, sq, &nd,
                               out, &side, &e) == 0);
    CHECK(nd == 1 && out[0] == cd[0] && side == n);
    CHECK(tlayout_switch_shape(TLAYOUT_CONDENSED, TLAYOUT_SQUARE, 1, cd, &nd,
                               out, &side, &e) == 0);
    /* n = 0 and n = 1 both condense to 0 entries: 0 reads back as 1 x 1. */
    int64_t want = n == 0 ? 1 : n;
    CHECK_MSG(nd == 2 && out[0] == want && out[1] == want && side == want,
              "n %lld", (long long)n);
  }
  int64_t bad1[1] = {4}, bad2[2] = {3, 4}, out[T_MAXDIM], side;
  int nd;
  CHECK(tlayout_switch_shape(TLAYOUT_CONDENSED, TLAYOUT_SQUARE, 1, bad1, &nd,
                             out, &side, &e) == T_EINVAL);
  CHECK_STR(e.field, "layout");
  CHECK(tlayout_switch_shape(TLAYOUT_SQUARE, TLAYOUT_CONDENSED, 2, bad2, &nd,
                             out, &side, &e) == T_EINVAL);
  CHECK(tlayout_switch_shape(TLAYOUT_SQUARE, TLAYOUT_CONDENSED, 1, bad1, &nd,
                             out, &side, &e) == T_EINVAL);
  CHECK(tlayout_switch_shape(TLAYOUT_CONDENSED, TLAYOUT_SQUARE, 2, bad2, &nd,
                             out, &side, &e) == T_EINVAL);
}

TEST(condensed_index) {
  for (int64_t n = 2; n <= 60; n++) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = i + 1; j < n; j++, k++)
        if (tlayout_condensed_index(n, i, j) != k) {
          CHECK_MSG(0, "n %lld (%lld,%lld)", (long long)n, (long long)i,
                    (long long)j);
          return;
        }
    CHECK(k == n * (n - 1) / 2);
  }
}

int main(void) {
  RUN(parse);
  RUN(shapes);
  RUN(condensed_index);
  return check_summary();
}
