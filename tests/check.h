/* check.h — the tiny test harness every C test uses.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-12); ... }
 *   int main(void) { RUN(name); ...; return check_summary(); }
 *
 * A failed CHECK prints file:line and the expression, marks the test failed
 * and goes on. check_summary prints "N passed, N failed" (the closing line
 * CI reads) and returns the exit status. SKIP_ALL("why") prints that the
 * whole program was skipped and exits 77 (CTest reports it as skipped).
 */
#ifndef TESSEL_TESTS_CHECK_H
#define TESSEL_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failed_now __attribute__((unused)), check_passed __attribute__((unused)),
    check_failed __attribute__((unused));

#define TEST(name) static void name(void)
#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,    \
              #cond);                                                     \
      check_failed_now = 1;                                               \
    }                                                                     \
  } while (0)
#define CHECK_MSG(cond, ...)                                              \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,    \
              #cond);                                                     \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
      check_failed_now = 1;                                               \
    }                                                                     \
  } while (0)
#define CHECK_NEAR(a, b, tol)                                             \
  do {                                                                    \
    double check_a_ = (a), check_b_ = (b);                                \
    if (!(fabs(check_a_ - check_b_) <= (tol))) {                          \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, %s = %.17g\n", \
              __FILE__, __LINE__, #a, check_a_, #b, check_b_);            \
      check_failed_now = 1;                                               \
    }                                                                     \
  } while (0)
#define CHECK_STR(a, b)                                                   \
  do {                                                                    \
    const char *check_sa_ = (a), *check_sb_ = (b);                        \
    if (!check_sa_ || !check_sb_ || strcmp(check_sa_, check_sb_) != 0) {  \
      fprintf(stderr, "%s:%d: CHECK_STR failed: \"%s\" != \"%s\"\n",      \
              __FILE__, __LINE__, check_sa_ ? check_sa_ : "(null)",       \
              check_sb_ ? check_sb_ : "(null)");                           \
      check_failed_now = 1;                                               \
    }                                                                     \
  } while (0)
#define RUN(name)                                                         \
  do {                                                                    \
    check_failed_now = 0;                                                 \
    name();                                                               \
    if (check_failed_now) {                                               \
      check_failed++;                                                     \
      fprintf(stderr, "FAIL %s\n", #name);                                \
    } else {                                                              \
      check_passed++;                                                     \
      printf("ok   %s\n", #name);                                         \
    }                                                                     \
    fflush(stdout);                                                       \
  } while (0)
#define SKIP_ALL(...)                                                     \
  do {                                                                    \
    printf("SKIPPED: ");                                                  \
    printf(__VA_ARGS__);                                                  \
    printf("\n");                                                         \
    exit(77);                                                             \
  } while (0)

static inline int check_summary(void) {
  printf("%d passed, %d failed\n", check_passed, check_failed);
  return check_failed ? 1 : 0;
}

#endif
