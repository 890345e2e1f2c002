/* test_stats.c — /v1/stats' `system` (the load now) and
 * /v1/stats/history against the real daemon.
 *
 * Asserts:
 *  - `system` has exactly its five fields, each of its type: the CPU
 *    percentages numbers (not null once an interval has passed since the
 *    daemon's sampler started) within sane ranges (the process's between 0
 *    and 100 per core of this machine, with slack; the machine's 0..100),
 *    memory_total equal to this machine's MemTotal, 0 < memory_used <=
 *    memory_total, 0 < process_rss <= memory_total.
 */
#include "harness.h"

static srv S;

/* MemTotal of /proc/meminfo in bytes; -1 when unreadable. */
static long long mem_total(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

static json_t *get_json(const char *path, long want) {
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK_MSG(r.status == want, "GET %s: %ld %.300s", path, r.status, r.body);
  json_t *j = r.status == want ? resp_json(&r) : NULL;
  resp_free(&r);
  return j;
}

TEST(stats_system) {
  /* Give the sampler's first reading (taken at start) an interval to
   * measure against: this waits for a condition, it asserts no time. */
  usleep(300 * 1000);
  json_t *o = get_json("/v1/stats", 200);
  json_t *sys = json_object_get(o, "system");
  CHECK(json_is_object(sys) && json_object_size(sys) == 5);
  json_t *cpu = json_object_get(sys, "cpu_percent");
  json_t *mcpu = json_object_get(sys, "machine_cpu_percent");
  CHECK(json_is_number(cpu) && json_is_number(mcpu));
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double c = json_number_value(cpu), m = json_number_value(mcpu);
  CHECK_MSG(c >= 0 && c <= 100.0 * (double)cores * 1.5 + 10, "cpu_percent %g", c);
  CHECK_MSG(m >= 0 && m <= 100.0 + 1e-9, "machine_cpu_percent %g", m);
  json_t *used = json_object_get(sys, "memory_used");
  json_t *total = json_object_get(sys, "memory_total");
  json_t *rss = json_object_get(sys, "process_rss");
  CHECK(json_is_integer(used) && json_is_integer(total) && json_is_integer(rss));
  long long u = json_integer_value(used), t = json_integer_value(total),
            p = json_integer_value(rss);
  CHECK_MSG(t == mem_total(), "memory_total %lld, MemTotal %lld", t, mem_total());
  CHECK_MSG(u > 0 && u <= t, "memory_used %lld of %lld", u, t);
  CHECK_MSG(p > 0 && p <= t, "process_rss %lld of %lld", p, t);
  json_decref(o);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_stats <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(stats_system);
  int code = srv_kill(&S, SIGTERM);
  CHECK(code == 0);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
