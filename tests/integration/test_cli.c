/* test_cli.c — tesseld's command line (app/options.c), without starting
 * the server: each run stops at --help, --version or a bad option.
 *
 * Asserts:
 *  - `--help` exits 0 and lists every option once, each with its variable
 *    (TESSEL_ and the flag's name in capitals) and exactly one
 *    "(default: ...)" (issue 28: --web-dir and --node-name said two, and
 *    --store said "none" where README says sqlite:); --store's default is
 *    sqlite:; the options are README's table's, no more and no fewer;
 *  - an unknown option, a stray argument and a flag without its value
 *    exit 2 with a message naming them and the usage;
 *  - a bad value exits 2 naming the flag and its variable, whether it
 *    came from the flag or the variable; a flag beats the variable.
 */
#include <ctype.h>

#include "harness.h"

static const char *daemon_path;

/* Run tesseld with args (NULL-terminated) and env ("NAME=value" or NULL);
 * its exit status, stdout+stderr in out. */
static int run(char *out, size_t cap, const char *env, const char *const *args) {
  static const char *const pre[] = {"--data-dir", "/nonexistent/tessel-cli-test", /* never reached */
                                    NULL};
  return daemon_run_capture(daemon_path, pre, args, env, out, cap);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The flags of README.md's options table (its rows open "| `--"), one
 * string "--a --b ... " in out. */
static int readme_flags(char *out, size_t cap) {
  FILE *f = fopen(TESSEL_SOURCE_DIR "/README.md", "r");
  if (!f) return -1;
  char line[4096];
  size_t len = 0;
  out[0] = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "| `--", 5) != 0) continue;
    char *end = strchr(line + 2, '|'); /* the first cell only */
    if (end) *end = 0;
    for (char *p = strstr(line, "`--"); p; p = strstr(p + 1, "`--")) {
      char *q = strchr(p + 1, '`');
      if (!q) break;
      len += (size_t)snprintf(out + len, cap - len, "%.*s ", (int)(q - p - 1), p + 1);
    }
  }
  fclose(f);
  return 0;
}

TEST(help_lists_each_option_once) {
  static char out[65536], all[65536], readme[8192];
  const char *args[] = {"--help", NULL};
  CHECK(run(out, sizeof out, NULL, args) == 0);
  snprintf(all, sizeof all, "\n%s", out);
  CHECK(readme_flags(readme, sizeof readme) == 0);
  CHECK(count(readme, "--") > 30);
  int rows = 0;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "  --", 4) != 0) continue;
    char flag[64], env[64];
    CHECK(sscanf(line + 2, "%63s", flag) == 1);
    int meta = strcmp(flag, "--help") == 0 || strcmp(flag, "--version") == 0;
    char listed[80];
    snprintf(listed, sizeof listed, "\n  %s ", flag);
    CHECK_MSG(count(all, listed) == 1, "%s listed %d times", flag, count(all, listed));
    CHECK_MSG(count(line, "default:") == (meta ? 0 : 1), "%s: %s", flag, line);
    if (meta) continue;
    rows++;
    snprintf(env, sizeof env, "TESSEL_");
    for (const char *p = flag + 2; *p; p++)
      env[strlen(env) + 1] = 0, env[strlen(env)] = *p == '-' ? '_' : (char)toupper(*p);
    CHECK_MSG(strstr(line, env) != NULL, "%s: no %s in: %s", flag, env, line);
    char word[80];
    snprintf(word, sizeof word, "%s ", flag);
    CHECK_MSG(count(readme, word) == 1, "%s is not in README.md's options table", flag);
    if (strcmp(flag, "--store") == 0)
      CHECK_MSG(strstr(line, "(default: sqlite:") != NULL, "%s", line);
  }
  CHECK_MSG(rows == count(readme, "--"), "--help lists %d options, README %d", rows,
            count(readme, "--"));
}

TEST(unknown_option_fails) {
  char out[16384];
  const char *a1[] = {"--no-such-option", "1", NULL};
  CHECK(run(out, sizeof out, NULL, a1) == 2);
  CHECK(strstr(out, "no-such-option") && strstr(out, "usage: tesseld"));
  const char *a2[] = {"stray", NULL};
  CHECK(run(out, sizeof out, NULL, a2) == 2);
  CHECK(strstr(out, "unexpected argument 'stray'") != NULL);
  const char *a3[] = {"--port", NULL};
  CHECK(run(out, sizeof out, NULL, a3) == 2);
  CHECK(strstr(out, "port") && strstr(out, "usage: tesseld"));
  const char *a4[] = {"--version", NULL};
  CHECK(run(out, sizeof out, NULL, a4) == 0);
  CHECK(strncmp(out, "tesseld ", 8) == 0);
}

TEST(bad_values_name_flag_and_variable) {
  static const struct {
    const char *env, *flag, *value, *want;
  } cases[] = {
      {NULL, "--port", "70000", "--port (TESSEL_PORT) must be an integer from 0 to 65535"},
      {"TESSEL_PORT=abc", NULL, NULL, "--port (TESSEL_PORT) must be an integer from 0 to 65535, not 'abc'"},
      {NULL, "--threads", "-1", "--threads (TESSEL_THREADS)"},
      {NULL, "--tiles", "1", "--tiles (TESSEL_TILES) must be an integer from 2 to 256"},
      {"TESSEL_LEASE_S=0", NULL, NULL, "--lease-s (TESSEL_LEASE_S)"},
      {NULL, "--log-level", "loud", "--log-level must be debug, info, warn or error"},
      {NULL, "--log-format", "xml", "--log-format must be text or json"},
      /* the flag beats the variable: the port is fine, the tiles are not */
      {"TESSEL_PORT=abc", "--port", "0", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[16384];
    const char *args[5] = {NULL};
    int n = 0;
    if (cases[i].flag) args[n++] = cases[i].flag, args[n++] = cases[i].value;
    if (!cases[i].want) args[n++] = "--tiles", args[n++] = "0";
    CHECK(run(out, sizeof out, cases[i].env, args) == 2);
    const char *want = cases[i].want ? cases[i].want : "--tiles (TESSEL_TILES)";
    CHECK_MSG(strstr(out, want) != NULL, "case %zu: no '%s' in: %s", i, want, out);
    if (!cases[i].want) CHECK_MSG(!strstr(out, "TESSEL_PORT"), "case %zu: %s", i, out);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/tesseld\n", argv[0]);
    return 2;
  }
  daemon_path = argv[1];
  RUN(help_lists_each_option_once);
  RUN(unknown_option_fails);
  RUN(bad_values_name_flag_and_variable);
  return check_summary();
}
