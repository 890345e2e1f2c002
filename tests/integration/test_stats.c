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
 *  - /v1/stats/history: three jobs finished (a fourth canceled before it
 *    ran) are counted, by status, in the step that holds each one's
 *    finished_at, and in no other; steps start at `since` and follow each
 *    other by `step_s`; since as RFC 3339 gives the same counts as the same
 *    time in Unix seconds; the start sample is there (queued, running,
 *    memory_used); a since after the last finish counts nothing;
 *  - bad since (not a time, in the future), bad step (0, -1, 1.5, text),
 *    more than 1000 steps, and an unknown parameter: 400 naming the field.
 */
#include "harness.h"
#include "util/util.h"

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

/* Sum of one status over every step; the step index of the single one. */
static long long count_status(json_t *steps, const char *st, int *at) {
  long long sum = 0;
  size_t i;
  json_t *x;
  *at = -1;
  json_array_foreach(steps, i, x) {
    long long c = json_integer_value(json_object_get(x, st));
    if (c > 0) *at = (int)i;
    sum += c;
  }
  return sum;
}

TEST(history_counts_finished_jobs) {
  int64_t t0 = t_wall_ms() - 2000; /* a whole second before any finish */
  int64_t fin[3] = {0};
  for (int i = 0; i < 3; i++) {
    json_t *j = submit(&S, "?wait=30",
                       "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":"
                       "\"x + 1\",\"inputs\":{\"x\":{\"range\":{\"start\":0,"
                       "\"stop\":1000}}}}}", NULL);
    CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
    CHECK(j && t_parse_time(jstr(j, "finished_at"), &fin[i]) == 0);
    json_decref(j);
  }
  /* Wait into the next whole second after the last finish, so that the
   * step holding it is not the answer's last (an off-by-one step shows). */
  int64_t lastf = fin[0] > fin[1] ? fin[0] : fin[1];
  if (fin[2] > lastf) lastf = fin[2];
  while (t_wall_ms() / 1000 <= lastf / 1000) usleep(20 * 1000);
  char path[256];
  /* step 1 s from t0 (whole seconds): each finish in its own step. */
  long long since_s = t0 / 1000;
  snprintf(path, sizeof path, "/v1/stats/history?since=%lld&step=1", since_s);
  json_t *h = get_json(path, 200);
  json_t *steps = json_object_get(h, "steps");
  CHECK(json_is_array(steps) && json_array_size(steps) >= 2);
  CHECK(json_integer_value(json_object_get(h, "step_s")) == 1);
  CHECK(json_number_value(json_object_get(h, "since")) == (double)since_s);
  size_t i;
  json_t *x;
  long long total = 0;
  json_array_foreach(steps, i, x) {
    CHECK(json_number_value(json_object_get(x, "t")) == (double)(since_s + (long long)i));
    long long c = json_integer_value(json_object_get(x, "succeeded"));
    long long want = 0;
    for (int k = 0; k < 3; k++)
      if (fin[k] >= (since_s + (long long)i) * 1000 && fin[k] < (since_s + (long long)i + 1) * 1000)
        want++;
    CHECK_MSG(c == want, "step %zu: %lld succeeded, want %lld", i, c, want);
    CHECK(json_integer_value(json_object_get(x, "failed")) == 0);
    total += c;
  }
  CHECK_MSG(total == 3, "%lld succeeded in all steps", total);
  json_t *samples = json_object_get(h, "samples");
  CHECK(json_array_size(samples) == 0 ||
        json_is_integer(json_object_get(json_array_get(samples, 0), "queued")));
  json_decref(h);

  /* One big step, since as RFC 3339: all three in step 0. */
  char when[40];
  t_rfc3339(since_s * 1000, when, sizeof when);
  snprintf(path, sizeof path, "/v1/stats/history?since=%s&step=3600", when);
  h = get_json(path, 200);
  int at;
  CHECK(count_status(json_object_get(h, "steps"), "succeeded", &at) == 3 && at == 0);
  CHECK(json_array_size(json_object_get(h, "steps")) == 1);
  json_decref(h);

  /* The default window (the last hour) holds the start sample: the daemon
   * took one as it started. */
  h = get_json("/v1/stats/history", 200);
  samples = json_object_get(h, "samples");
  CHECK(json_array_size(samples) >= 1);
  json_t *s0 = json_array_get(samples, 0);
  CHECK(json_is_integer(json_object_get(s0, "queued")) &&
        json_is_integer(json_object_get(s0, "running")) &&
        json_integer_value(json_object_get(s0, "memory_used")) > 0);
  CHECK(json_array_size(json_object_get(h, "steps")) == 60);
  json_decref(h);

  /* After the last finish: nothing counted. */
  int64_t last = lastf;
  snprintf(path, sizeof path, "/v1/stats/history?since=%lld.%03lld&step=60",
           (long long)(last + 1) / 1000, (long long)(last + 1) % 1000);
  h = get_json(path, 200);
  CHECK(count_status(json_object_get(h, "steps"), "succeeded", &at) == 0);
  json_decref(h);
}

TEST(history_bad_parameters) {
  static const struct { const char *q, *field; } bad[] = {
      {"since=yesterday", "since"},
      {"since=2026-13-01T00:00:00Z", "since"},
      {"since=2026-11-21T07:20:00", "since"}, /* no zone */
      {"since=99999999999", "since"},         /* in the future */
      {"step=0", "step"},
      {"step=-1", "step"},
      {"step=1.5", "step"},
      {"step=x", "step"},
      {"since=0&step=1", "step"}, /* since 1970: far more than 1000 steps */
      {"until=5", "until"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char path[160];
    snprintf(path, sizeof path, "/v1/stats/history?%s", bad[i].q);
    resp r = req(&S, "GET", path, NULL, NULL);
    CHECK_MSG(is_error(&r, 400, "invalid_argument", bad[i].field), "%s", bad[i].q);
    resp_free(&r);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_stats <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(stats_system);
  RUN(history_counts_finished_jobs);
  RUN(history_bad_parameters);
  int code = srv_kill(&S, SIGTERM);
  CHECK(code == 0);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
