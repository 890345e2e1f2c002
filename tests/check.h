/* check.h — the tiny test harness every C test uses.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-12); ... }
 *   int main(void) { RUN(name); ...; return check_summary(); }
 *
 * A failed CHECK prints file:line and the expression, marks the test failed
 * and goes on. check_summary prints "N passed, N failed" (the closing line
 * CI reads; ", N skipped" added when a test skipped) and returns the exit
 * status. SKIP_ALL("why") prints that the whole program was skipped and
 * exits 77 (CTest reports it as skipped). SKIP_TEST("why") inside a test
 * ends that test as skipped (printed "SKIP name: why"); a program with a
 * skipped test and no failed one exits 77 too, so CTest reports a skip and
 * never a pass for a test that did not run. Use it only for what a machine
 * may lack; deps/install.sh installs what CI needs so that there it runs.
 * SKIP_ALL_NO_GPU is SKIP_ALL for a GPU probe that failed, and a failure
 * instead where nvidia-smi sees a GPU.
 *
 * WAIT_FOR(cond, timeout_s) re-evaluates cond every 10 ms until it holds
 * or timeout_s seconds pass (its value is then whatever cond is): tests of
 * the service's background work wait for the state they check, with a
 * bound generous enough for a loaded machine, never for a fixed time.
 */
#ifndef TESSEL_TESTS_CHECK_H
#define TESSEL_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int check_failed_now __attribute__((unused)), check_passed __attribute__((unused)),
    check_failed __attribute__((unused)), check_skipped_now __attribute__((unused)),
    check_skipped __attribute__((unused));

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
    check_skipped_now = 0;                                                \
    name();                                                               \
    if (check_failed_now) {                                               \
      check_failed++;                                                     \
      fprintf(stderr, "FAIL %s\n", #name);                                \
    } else if (check_skipped_now) {                                       \
      check_skipped++;                                                    \
      printf("SKIP %s\n", #name);                                         \
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
/* For a GPU test whose device probe failed: a CTest skip where no GPU is
 * there, but a failure (exit 1) where `nvidia-smi -L` lists one, so that a
 * broken driver or build never reads as "no GPU" on a GPU machine. */
#define SKIP_ALL_NO_GPU(...)                                              \
  do {                                                                    \
    if (system("nvidia-smi -L 2>/dev/null | grep -q '^GPU '") == 0) {     \
      printf("FAIL: nvidia-smi lists a GPU but the probe failed: ");      \
      printf(__VA_ARGS__);                                                \
      printf("\n");                                                       \
      exit(1);                                                            \
    }                                                                     \
    SKIP_ALL(__VA_ARGS__);                                                \
  } while (0)
/* Inside a TEST: say why, count the test as skipped and return from it. */
#define SKIP_TEST(...)                                                    \
  do {                                                                    \
    printf("SKIP %s: ", __func__);                                        \
    printf(__VA_ARGS__);                                                  \
    printf("\n");                                                         \
    check_skipped_now = 1;                                                \
    return;                                                               \
  } while (0)

/* Seconds on the monotonic clock since *t0. */
static inline double check_since_(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}
#define WAIT_FOR(cond, timeout_s)                                         \
  do {                                                                    \
    struct timespec check_t0_;                                            \
    clock_gettime(CLOCK_MONOTONIC, &check_t0_);                           \
    while (!(cond) && check_since_(&check_t0_) < (double)(timeout_s))     \
      usleep(10000);                                                      \
  } while (0)

static inline int check_summary(void) {
  if (check_skipped)
    printf("%d passed, %d failed, %d skipped\n", check_passed, check_failed, check_skipped);
  else
    printf("%d passed, %d failed\n", check_passed, check_failed);
  if (check_failed) return 1;
  return check_skipped ? 77 : 0;
}

#endif
