/* test_stats_parse.c — the parsers behind /v1/stats' `system` and
 * /v1/stats/history: t_parse_time (util/util.c: ?since as Unix seconds or
 * RFC 3339) and sched_sample_parse_stat (compute/sched/stats/sampler.c: the "cpu" line of
 * /proc/stat).
 *
 * Asserts: known times give their exact ms (a zone offset applied, a
 * fraction of any length cut to ms, leap day of a leap year); every form
 * that is not one of the two (no zone, a bad month or day, Feb 29 of a
 * common year, trailing text, empty, signs, an offset without a colon)
 * is refused; t_rfc3339's text reads back to the same ms; busy and total
 * ticks of a /proc/stat line (idle and iowait not busy, guest not counted
 * twice) and refusal of what is not such a line.
 */
#include "check.h"
#include "compute/sched/sched.h"
#include "util/util.h"

static int64_t ms_of(const char *s) {
  int64_t v = -7;
  CHECK_MSG(t_parse_time(s, &v) == 0, "refused: %s", s);
  return v;
}

TEST(times_read) {
  CHECK(ms_of("0") == 0);
  CHECK(ms_of("1795000000") == 1795000000000LL);
  CHECK(ms_of("1795000000.5") == 1795000000500LL);
  CHECK(ms_of("1795000000.123456") == 1795000000123LL);
  CHECK(ms_of("1970-01-01T00:00:00Z") == 0);
  CHECK(ms_of("2026-11-21T07:20:00Z") == 1795245600000LL);
  CHECK(ms_of("2026-11-21t07:20:00.123z") == 1795245600123LL);
  CHECK(ms_of("2026-11-21 09:20:00+02:00") == 1795245600000LL);
  CHECK(ms_of("2026-11-21T02:50:00-04:30") == 1795245600000LL);
  CHECK(ms_of("2024-02-29T00:00:00Z") == 1709164800000LL);
  CHECK(ms_of("2000-03-01T00:00:00Z") == 951868800000LL);
  char buf[40];
  int64_t now = t_wall_ms();
  CHECK(ms_of(t_rfc3339(now, buf, sizeof buf)) == now);
}

TEST(times_refused) {
  static const char *const bad[] = {
      "", "x", "-5", "+5", "1.", "1e9", "12 ", " 12", "1795000000x",
      "9999999999999",               /* beyond 12 digits */
      "2026-11-21T07:20:00",         /* no zone */
      "2026-11-21T07:20Z",           /* no seconds */
      "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-04-31T00:00:00Z",
      "2026-02-29T00:00:00Z",        /* not a leap year */
      "1900-02-29T00:00:00Z",        /* nor is 1900 */
      "2026-11-21T24:00:00Z", "2026-11-21T07:60:00Z",
      "2026-11-21T07:20:00.Z", "2026-11-21T07:20:00+0200",
      "2026-11-21T07:20:00Zjunk", "2026-11-21X07:20:00Z", "2026/11/21T07:20:00Z",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = 5;
    CHECK_MSG(t_parse_time(bad[i], &v) == -1 && v == 0, "accepted: '%s'", bad[i]);
  }
  int64_t v;
  CHECK(t_parse_time(NULL, &v) == -1);
}

TEST(proc_stat_line) {
  uint64_t busy, total;
  /* user nice system idle iowait irq softirq steal guest guest_nice */
  CHECK(sched_sample_parse_stat("cpu  100 5 50 1000 20 3 2 1 40 0\ncpu0 1 2 3 4\n",
                                &busy, &total) == 0);
  CHECK(total == 100 + 5 + 50 + 1000 + 20 + 3 + 2 + 1);
  CHECK(busy == 100 + 5 + 50 + 3 + 2 + 1);
  CHECK(sched_sample_parse_stat("cpu  7 0 3 90\n", &busy, &total) == 0);
  CHECK(busy == 10 && total == 100);
  CHECK(sched_sample_parse_stat("cpu0 1 2 3 4\n", &busy, &total) == -1);
  CHECK(sched_sample_parse_stat("cpu  1 2\n", &busy, &total) == -1);
  CHECK(sched_sample_parse_stat("", &busy, &total) == -1 && busy == 0 && total == 0);
}

int main(void) {
  RUN(times_read);
  RUN(times_refused);
  RUN(proc_stat_line);
  return check_summary();
}
