/* test_log_line.c — t_log_kv_line, t_log_kv made in two steps (util/util.h)
 * so that a job's end line can be written after its waiters are woken
 * (compute/sched/run.c): a line below the log level is 0 bytes; a line's
 * length is its strlen, text and JSON alike, with every field in its form
 * (numbers, quoted strings, a NULL string left out); a cap too small for
 * the line cuts it, NUL-terminated, within the cap; a cap under 64 makes
 * nothing. t_log_put of a length 0 writes nothing (checked on a pipe).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util/util.h"

static const t_kv KV[] = {
    T_KV_S("id", "j_1"),          T_KV_N("attempt", 2),
    T_KV_S("backend", "serial"),  T_KV_S("message", "a b=c"),
    T_KV_S("none", NULL),         T_KV_N("ms", 0.25),
};
#define NKV ((int)(sizeof KV / sizeof KV[0]))

TEST(level_and_text) {
  char out[T_LOG_LINE_MAX];
  t_log_json = 0;
  t_log_level = T_LOG_WARN;
  CHECK(t_log_kv_line(T_LOG_INFO, "job_end", KV, NKV, out, sizeof out) == 0);
  size_t n = t_log_kv_line(T_LOG_WARN, "job_end", KV, NKV, out, sizeof out);
  CHECK(n > 0 && n == strlen(out));
  CHECK(strstr(out, " warn  job_end id=j_1 attempt=2 backend=serial") != NULL);
  CHECK(strstr(out, " message=\"a b=c\" ms=0.25") != NULL);
  CHECK(strstr(out, "none") == NULL);
  t_log_level = T_LOG_INFO;
}

TEST(json) {
  char out[T_LOG_LINE_MAX];
  t_log_json = 1;
  size_t n = t_log_kv_line(T_LOG_INFO, "job_end", KV, NKV, out, sizeof out);
  CHECK(n > 0 && n == strlen(out));
  CHECK(out[0] == '{' && out[n - 1] == '}');
  CHECK(strstr(out, "\"event\":\"job_end\",\"id\":\"j_1\",\"attempt\":2") != NULL);
  CHECK(strstr(out, "\"ms\":0.25}") != NULL);
  t_log_json = 0;
}

TEST(small_caps) {
  char out[80];
  memset(out, 'x', sizeof out);
  size_t n = t_log_kv_line(T_LOG_INFO, "job_end", KV, NKV, out, 64);
  CHECK(n > 0 && n < 64 && n == strlen(out));
  CHECK(out[64] == 'x'); /* nothing past the cap */
  CHECK(t_log_kv_line(T_LOG_INFO, "job_end", KV, NKV, out, 63) == 0);
  CHECK(t_log_kv_line(T_LOG_INFO, "job_end", KV, NKV, out, 0) == 0);
}

TEST(put_writes_the_line_or_nothing) {
  int p[2];
  CHECK(pipe(p) == 0);
  int saved = dup(2);
  CHECK(dup2(p[1], 2) == 2);
  t_log_put("abc", 0);
  t_log_put("one line", 3);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(p[1]);
  char got[32] = {0};
  ssize_t k = read(p[0], got, sizeof got - 1);
  close(p[0]);
  CHECK(k == 4 && strcmp(got, "one\n") == 0);
}

int main(void) {
  RUN(level_and_text);
  RUN(json);
  RUN(small_caps);
  RUN(put_writes_the_line_or_nothing);
  return check_summary();
}
