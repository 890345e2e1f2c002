/* test_tassert.c — the debug-build invariant checks fire: unlocking a
 * tmutex this thread does not hold, locking one it already holds, asking
 * for a lock that is not held, an illegal job state change (sched_int.h),
 * a buffer released beyond what was reserved (util/xfer.h). Each runs in a
 * forked child, which must die of SIGABRT when asserts are on (no NDEBUG:
 * the build `make test` uses) and must live when they are compiled out
 * (Release). The legal state changes pass in both.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "compute/sched/sched_int.h"
#include "util/tmutex.h"
#include "util/xfer.h"

#ifdef NDEBUG
#define ASSERTS_ON 0
#else
#define ASSERTS_ON 1
#endif

/* Run fn in a child: 1 when it died of SIGABRT, 0 when it exited 0. */
static int aborts(void (*fn)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* No core dumps, no ASan report noise: only the signal matters. */
    signal(SIGABRT, SIG_DFL);
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) return 1;
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  return 0;
}

static void unlock_not_held(void) {
  tmutex m;
  tmutex_init(&m);
  tmutex_unlock(&m);
}

static void lock_twice(void) {
  tmutex m;
  tmutex_init(&m);
  tmutex_lock(&m);
  tmutex_lock(&m); /* would deadlock without the check: the check aborts first */
}

static void held_but_not(void) {
  tmutex m;
  tmutex_init(&m);
  T_ASSERT_HELD(&m);
}

static void ending_to_running(void) {
  sjob j;
  memset(&j, 0, sizeof j);
  j.state = SJ_ENDING;
  sjob_set_state(&j, SJ_RUNNING);
}

static void running_to_running(void) {
  sjob j;
  memset(&j, 0, sizeof j);
  j.state = SJ_RUNNING;
  sjob_set_state(&j, SJ_RUNNING);
}

static void release_unreserved(void) {
  xfer_budget_set(1 << 20);
  xfer_release(4096);
}

static void all_legal(void) {
  tmutex m;
  tmutex_init(&m);
  tmutex_lock(&m);
  T_ASSERT_HELD(&m);
  tmutex_unlock(&m);
  T_ASSERT_NOT_HELD(&m);
  tmutex_destroy(&m);
  sjob j;
  memset(&j, 0, sizeof j);
  sjob_set_state(&j, SJ_QUEUED);
  sjob_set_state(&j, SJ_RUNNING);
  sjob_set_state(&j, SJ_QUEUED); /* handed over */
  sjob_set_state(&j, SJ_RUNNING);
  sjob_set_state(&j, SJ_ENDING);
  xfer_budget_set(1 << 20);
  CHECK(xfer_reserve(4096));
  xfer_release(4096);
}

TEST(legal_changes_pass) {
  CHECK(aborts(all_legal) == 0);
  CHECK(sjob_state_legal(SJ_QUEUED, SJ_ENDING));
  CHECK(!sjob_state_legal(SJ_ENDING, SJ_QUEUED));
  CHECK(!sjob_state_legal(SJ_RUNNING, SJ_RUNNING));
  CHECK(!sjob_state_legal(-1, SJ_QUEUED) && !sjob_state_legal(SJ_QUEUED, 3));
}

TEST(broken_rules_abort) {
  CHECK(aborts(unlock_not_held) == ASSERTS_ON);
  CHECK(aborts(held_but_not) == ASSERTS_ON);
  CHECK(aborts(ending_to_running) == ASSERTS_ON);
  CHECK(aborts(running_to_running) == ASSERTS_ON);
  CHECK(aborts(release_unreserved) == ASSERTS_ON);
  if (ASSERTS_ON) CHECK(aborts(lock_twice) == 1); /* Release would hang */
}

int main(void) {
  printf("asserts %s in this build\n", ASSERTS_ON ? "on" : "off");
  RUN(legal_changes_pass);
  RUN(broken_rules_abort);
  return check_summary();
}
