/* test_store_flags.c — the store and node flags of tesseld (issue 14),
 * against the real daemon, without a PostgreSQL server.
 *
 * Asserts:
 *  - bad configuration exits 2 at start with a message naming the flag, and
 *    leaves the data directory without a store (no tessel.db): a missing or
 *    empty --store-file, --store and --store-file together, a URL that is
 *    neither sqlite: nor postgresql://, an unreachable PostgreSQL server
 *    (or a build without libpq), --lease-s / --tiles / --split-min-pairs
 *    out of range, a --node-name over 100 bytes;
 *  - no message ever shows the URL's password (from --store or from the
 *    file);
 *  - on SQLite (--store sqlite:) the daemon runs as one node: /v1/info says
 *    store "sqlite" and node.name is --node-name; GET /v1/nodes answers one
 *    live entry, this process, with the same id, its name, threads (= the workers)
 *    and version; a finished job's node is null (SQLite claims nothing).
 */
#include <fcntl.h>

#include "harness.h"
#include "util/util.h"

static const char *daemon_path;

/* Run tesseld with args (NULL-terminated) on a fresh data dir; its exit
 * status, its stdout+stderr in out, and whether the store file appeared. */
static int run_bad(char *out, size_t cap, int *made_db, const char *const *args) {
  char dir[] = "/tmp/tessel-flags-XXXXXX";
  if (!mkdtemp(dir)) return -1;
  const char *const pre[] = {"--data-dir", dir, "--port", "0", NULL};
  int rc = daemon_run_capture(daemon_path, pre, args, NULL, out, cap);
  char db[300];
  snprintf(db, sizeof db, "%s/tessel.db", dir);
  struct stat sb;
  *made_db = stat(db, &sb) == 0;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return rc;
}

static void bad(const char *want, const char *const *args) {
  char out[8192];
  int made_db = 0;
  int rc = run_bad(out, sizeof out, &made_db, args);
  CHECK_MSG(rc == 2, "%s: exit %d, want 2: %s", args[0], rc, out);
  CHECK_MSG(strstr(out, want) != NULL, "%s: no '%s' in: %s", args[0], want, out);
  CHECK_MSG(!strstr(out, "sekrit"), "%s: the password shows: %s", args[0], out);
  CHECK_MSG(!made_db, "%s: a store was created", args[0]);
}

TEST(bad_configuration) {
  char file[] = "/tmp/tessel-storefile-XXXXXX";
  int fd = mkstemp(file);
  CHECK(fd >= 0);
  const char *url = "postgresql://tessel:sekrit@127.0.0.1:1/tessel\n";
  CHECK(write(fd, url, strlen(url)) == (ssize_t)strlen(url));
  close(fd);
  char empty[] = "/tmp/tessel-storefile-XXXXXX";
  fd = mkstemp(empty);
  CHECK(fd >= 0);
  close(fd);

  bad("--store-file", (const char *[]){"--store-file", "/nonexistent/url", NULL});
  bad("--store-file", (const char *[]){"--store-file", empty, NULL});
  bad("not both", (const char *[]){"--store-file", file, "--store", "sqlite:", NULL});
  bad("--store", (const char *[]){"--store", "mysql://u:sekrit@h/db", NULL});
  bad("--store", (const char *[]){"--store", "mysql://h/db?password=sekrit", NULL});
  /* a key=value conninfo goes to PostgreSQL: unreachable, password unsaid */
  bad("store", (const char *[]){"--store", "host=/nonexistent dbname=tessel password=sekrit", NULL});
  /* unreachable (or no libpq in this build): refused, password unsaid */
  bad("store", (const char *[]){"--store", "postgresql://tessel:sekrit@127.0.0.1:1/tessel", NULL});
  bad("store", (const char *[]){"--store-file", file, NULL});
  bad("--lease-s", (const char *[]){"--lease-s", "0", NULL});
  bad("--lease-s", (const char *[]){"--lease-s", "301", NULL});
  bad("--tiles", (const char *[]){"--tiles", "1", NULL});
  bad("--tiles", (const char *[]){"--tiles", "257", NULL});
  bad("--split-min-pairs", (const char *[]){"--split-min-pairs", "-1", NULL});
  char longname[160];
  memset(longname, 'n', 150);
  longname[150] = 0;
  bad("--node-name", (const char *[]){"--node-name", longname, NULL});
  unlink(file);
  unlink(empty);
}

TEST(sqlite_is_one_node) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--store", "sqlite:", "--node-name",
                  "alpha", "--threads", "2", NULL) == 0);
  resp r = req(&s, "GET", "/v1/info", NULL, NULL);
  CHECK(r.status == 200);
  json_t *info = resp_json(&r);
  resp_free(&r);
  CHECK(info && strcmp(jstr(info, "store"), "sqlite") == 0);
  json_t *node = json_object_get(info, "node");
  CHECK(node && strcmp(jstr(node, "name"), "alpha") == 0);
  const char *self_id = node ? jstr(node, "id") : NULL;
  CHECK(self_id && t_id_valid('n', self_id));

  r = req(&s, "GET", "/v1/nodes", NULL, NULL);
  CHECK(r.status == 200);
  json_t *nodes = resp_json(&r);
  resp_free(&r);
  CHECK(nodes && strcmp(jstr(nodes, "store"), "sqlite") == 0);
  json_t *arr = json_object_get(nodes, "nodes");
  CHECK(json_array_size(arr) == 1);
  json_t *me = json_array_get(arr, 0);
  CHECK(me && strcmp(jstr(me, "name"), "alpha") == 0);
  CHECK(me && self_id && strcmp(jstr(me, "id"), self_id) == 0);
  CHECK(me && json_is_true(json_object_get(me, "alive")));
  CHECK(me && json_integer_value(json_object_get(me, "threads")) == 2);
  CHECK(me && json_is_string(json_object_get(me, "version")));
  CHECK(me && json_is_string(json_object_get(me, "heartbeat_at")));

  long st = 0;
  json_t *job = submit(&s, "?wait=30",
                       "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\","
                       "\"inputs\":{\"x\":[1,2,3]}}}", &st);
  CHECK(st == 200 && job);
  CHECK(job && strcmp(jstr(job, "status"), "succeeded") == 0);
  CHECK(job && json_is_null(json_object_get(job, "node")));
  json_decref(job);
  json_decref(nodes);
  json_decref(info);
  srv_cleanup(&s);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/tesseld\n", argv[0]);
    return 2;
  }
  daemon_path = argv[1];
  RUN(bad_configuration);
  RUN(sqlite_is_one_node);
  return check_summary();
}
