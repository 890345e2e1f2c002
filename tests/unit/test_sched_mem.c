/* test_sched_mem.c — memory admission arithmetic (compute/sched/mem.c) with
 * injected figures: the budget, what running jobs hold, what the machine
 * has available; and the parsers of /proc/meminfo and cgroup v2 files.
 */
#include "check.h"
#include "compute/sched/sched_int.h"

#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)

TEST(decide_against_budget) {
  /* More than the whole budget: never (submit answers 413). */
  CHECK(sched_mem_decide(57 * GiB, 19 * GiB, 0, -1) == SCHED_MEM_NEVER);
  /* Fits an idle budget. */
  CHECK(sched_mem_decide(10 * GiB, 19 * GiB, 0, -1) == SCHED_MEM_RUN);
  /* Fits alone, not next to what runs: wait for it. */
  CHECK(sched_mem_decide(10 * GiB, 19 * GiB, 10 * GiB, -1) == SCHED_MEM_WAIT);
  /* Exactly the room left: runs. */
  CHECK(sched_mem_decide(9 * GiB, 19 * GiB, 10 * GiB, -1) == SCHED_MEM_RUN);
  /* No budget at all: only the machine's figure counts. */
  CHECK(sched_mem_decide(100 * GiB, 0, 0, -1) == SCHED_MEM_RUN);
  CHECK(sched_mem_decide(0, 1, 0, -1) == SCHED_MEM_RUN);
}

TEST(decide_against_available_memory) {
  /* The budget allows it but the machine has less free now. */
  CHECK(sched_mem_decide(8 * GiB, 19 * GiB, 2 * GiB, 4 * GiB) ==
        SCHED_MEM_WAIT); /* our jobs hold memory: wait for them */
  CHECK(sched_mem_decide(8 * GiB, 19 * GiB, 0, 4 * GiB) ==
        SCHED_MEM_NEVER); /* others hold it: nothing of ours to wait for */
  CHECK(sched_mem_decide(3 * GiB, 19 * GiB, 2 * GiB, 4 * GiB) ==
        SCHED_MEM_RUN);
  /* The smaller of the two rooms decides. */
  CHECK(sched_mem_decide(5 * GiB, 6 * GiB, 2 * GiB, 100 * GiB) ==
        SCHED_MEM_WAIT);
  /* No overflow at the extremes. */
  CHECK(sched_mem_decide(INT64_MAX, INT64_MAX, INT64_MAX - 1, -1) ==
        SCHED_MEM_WAIT);
  CHECK(sched_mem_decide(INT64_MAX, 0, 0, INT64_MAX) == SCHED_MEM_RUN);
}

TEST(need_counts_compare_twice) {
  job_estimate est = {0};
  est.mem_bytes = 100 * MiB;
  est.out_bytes = 40 * MiB;
  CHECK(sched_mem_need(&est, B_CPU) == 100 * MiB);
  CHECK(sched_mem_need(&est, B_COMPARE) == 140 * MiB);
  est.mem_bytes = INT64_MAX - 1;
  CHECK(sched_mem_need(&est, B_COMPARE) == INT64_MAX);
}

TEST(parse_meminfo_and_cgroup) {
  int64_t total, avail;
  sched_mem_parse_meminfo("MemTotal:       24576000 kB\n"
                          "MemFree:         1000000 kB\n"
                          "MemAvailable:   20000000 kB\n",
                          &total, &avail);
  CHECK(total == 24576000LL * 1024 && avail == 20000000LL * 1024);
  sched_mem_parse_meminfo("MemTotalX: 5 kB\nMemFree: 1 kB\n", &total, &avail);
  CHECK(total == -1 && avail == -1);
  CHECK(sched_mem_parse_cgroup_value("max\n") == -1);
  CHECK(sched_mem_parse_cgroup_value("2684354560\n") == 2684354560LL);
  CHECK(sched_mem_parse_cgroup_value("") == -1);
  CHECK(sched_mem_parse_cgroup_value("-5") == -1);
  /* The default budget: 80 % of the total; none when unknown. */
  CHECK(sched_mem_default_budget(24 * GiB) == 24 * GiB / 5 * 4);
  CHECK(sched_mem_default_budget(-1) == 0);
  /* This machine's figures are plausible. */
  sched_mem_probe(&total, &avail);
  CHECK(total > 0 && avail > 0 && avail <= total);
}

int main(void) {
  RUN(decide_against_budget);
  RUN(decide_against_available_memory);
  RUN(need_counts_compare_twice);
  RUN(parse_meminfo_and_cgroup);
  return check_summary();
}
