/* test_info.c — GET /v1/info against the real daemon.
 *
 * Asserts:
 *  - every field is there with its type, and each limit is the value given
 *    on the command line (a daemon started with a non-default value for
 *    every option the answer shows), the derived ones as the daemon derives
 *    them; the ?wait cap it states is the one POST /v1/jobs enforces;
 *    features.cuda agrees with /v1/devices; an unknown query parameter
 *    is 400 naming it, as on every route; POST is 405;
 *  - the served /openapi.json has the route, and its Info schema names
 *    exactly the keys of the answer (each object: properties == required ==
 *    the keys given), so the spec cannot drift from the answer;
 *  - local_dirs: without tokens every --local-dir (canonical); without
 *    --local-dir same_host is false and the list empty;
 *  - with a token file: no token or a wrong one is 401; each token sees
 *    only DIR/<its name> for the DIRs that have that subdirectory, never
 *    another token's, never DIR itself, and not a symlinked subdirectory
 *    (which the same-host path refuses too).
 */
#include <limits.h>

#include "harness.h"

static const char *daemon_path;

static json_t *get_info(srv *s, const char *query) {
  char path[256];
  snprintf(path, sizeof path, "/v1/info%s", query ? query : "");
  resp r = req(s, "GET", path, NULL, NULL);
  CHECK_MSG(r.status == 200, "GET %s: %ld %.300s", path, r.status, r.body);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  resp_free(&r);
  return j;
}

static json_int_t jint(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  CHECK_MSG(json_is_integer(v), "%s is not an integer", k);
  return json_integer_value(v);
}

static int jbool(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  CHECK_MSG(json_is_boolean(v), "%s is not a boolean", k);
  return json_is_true(v);
}

/* 1 when the array a holds exactly the strings of want (in that order). */
static int strings_are(json_t *a, const char *const *want, int n) {
  if (!json_is_array(a) || (int)json_array_size(a) != n) return 0;
  for (int i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(a, i));
    if (!s || strcmp(s, want[i]) != 0) return 0;
  }
  return 1;
}

/* 1 when the object o has exactly the keys of schema's properties, all of
 * them required (the spec's additionalProperties false shape). */
static int keys_match(json_t *o, json_t *schema, const char *what) {
  json_t *props = json_object_get(schema, "properties");
  json_t *reqd = json_object_get(schema, "required");
  if (!json_is_object(o) || !json_is_object(props) || !json_is_array(reqd) ||
      json_object_size(o) != json_object_size(props) ||
      json_array_size(reqd) != json_object_size(props) ||
      !json_is_false(json_object_get(schema, "additionalProperties"))) {
    fprintf(stderr, "%s: the answer and the Info schema disagree\n", what);
    return 0;
  }
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    if (!json_object_get(props, k)) {
      fprintf(stderr, "%s.%s is not in the Info schema\n", what, k);
      return 0;
    }
  }
  size_t i;
  json_array_foreach(reqd, i, v) {
    if (!json_object_get(o, json_string_value(v))) return 0;
  }
  return 1;
}

static void matches_spec(srv *s, json_t *info) {
  resp r = req(s, "GET", "/openapi.json", NULL, NULL);
  json_t *spec = resp_json(&r);
  resp_free(&r);
  json_t *paths = json_object_get(spec, "paths");
  CHECK(json_object_get(json_object_get(paths, "/v1/info"), "get") != NULL);
  json_t *sch = json_object_get(
      json_object_get(json_object_get(spec, "components"), "schemas"), "Info");
  CHECK(keys_match(info, sch, "info"));
  json_t *props = json_object_get(sch, "properties");
  static const char *const objs[] = {"build", "features", "limits",
                                     "spare_results"};
  for (int i = 0; i < 4; i++)
    CHECK(keys_match(json_object_get(info, objs[i]),
                     json_object_get(props, objs[i]), objs[i]));
  json_decref(spec);
}

TEST(fields_and_flags) {
  char d1[64] = "/tmp/tessel-it-info-a-XXXXXX", d2[64] = "/tmp/tessel-it-info-b-XXXXXX";
  CHECK(mkdtemp(d1) && mkdtemp(d2));
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "1", "--max-body", "2000000",
                  "--max-upload", "123456789", "--max-result", "99999999",
                  "--max-elements", "5000000", "--max-json-result", "4096",
                  "--queue-limit", "77", "--job-timeout", "123",
                  "--result-ttl", "4567", "--max-attempts", "5",
                  "--max-memory", "3000000000", "--max-transfer-memory",
                  "400000000", "--per-ip-limit", "33", "--max-connections",
                  "444", "--conn-timeout", "55", "--header-timeout", "9",
                  "--min-body-rate", "1000", "--spare-results", "134217728",
                  "--local-dir", d1, "--local-dir", d2, NULL) == 0);
  resp u = req(&s, "GET", "/v1/info?unknown=1", NULL, NULL);
  CHECK(is_error(&u, 400, "invalid_argument", "unknown"));
  resp_free(&u);
  json_t *j = get_info(&s, NULL);
  CHECK(j != NULL);
  if (!j) {
    srv_cleanup(&s);
    return;
  }
  CHECK_STR(jstr(j, "name"), "tessel");
  CHECK(jstr(j, "version") && jstr(j, "version")[0]);
  json_t *b = json_object_get(j, "build");
  CHECK(jstr(b, "type") && jstr(b, "type")[0]);
  CHECK(jstr(b, "compiler") && jstr(b, "compiler")[0]);
  jbool(b, "cuda");
  CHECK_STR(jstr(j, "store"), "sqlite");
  json_t *sp = json_object_get(j, "spare_results");
  CHECK(jint(sp, "budget") == 134217728 && jint(sp, "held") == 0 &&
        jint(sp, "ready") == 0 && jint(sp, "taken") == 0 &&
        jint(sp, "missed") == 0); /* nothing big asked for yet */

  json_t *f = json_object_get(j, "features");
  CHECK(jbool(f, "tokens") == 0);
  CHECK(jbool(f, "same_host") == 1);
  CHECK(jbool(f, "regions") == 1); /* --local-dir on SQLite: POST /v1/regions */
  CHECK(jbool(f, "chained_jobs") == 1);
  static const char *const formats[] = {"npy", "csv", "json"};
  CHECK(strings_are(json_object_get(f, "formats"), formats, 3));
  /* A usable GPU now: what /v1/devices says; and none without the build. */
  int cuda = jbool(f, "cuda");
  resp r = req(&s, "GET", "/v1/devices", NULL, NULL);
  json_t *dev = resp_json(&r);
  resp_free(&r);
  json_t *avail = json_object_get(json_object_get(dev, "cuda"), "available");
  CHECK(json_is_boolean(avail) && json_is_true(avail) == cuda);
  json_decref(dev);
  if (!json_is_true(json_object_get(b, "cuda"))) CHECK(cuda == 0);

  char r1[PATH_MAX], r2[PATH_MAX];
  CHECK(realpath(d1, r1) && realpath(d2, r2));
  const char *const dirs[] = {r1, r2};
  CHECK(strings_are(json_object_get(j, "local_dirs"), dirs, 2));

  json_t *l = json_object_get(j, "limits");
  CHECK(jint(l, "max_body") == 2000000);
  CHECK(jint(l, "max_upload") == 123456789);
  CHECK(jint(l, "max_result") == 99999999);
  CHECK(jint(l, "max_elements") == 5000000);
  CHECK(jint(l, "max_json_result") == 4096);
  CHECK(jint(l, "queue_limit") == 77);
  CHECK(jint(l, "job_timeout_s") == 123);
  CHECK(jint(l, "result_ttl_s") == 4567);
  CHECK(jint(l, "max_attempts") == 5);
  CHECK(jint(l, "max_memory") == 3000000000LL);
  CHECK(jint(l, "max_job_memory") == 99999999LL * 2 + 5000000LL * 8);
  CHECK(jint(l, "max_transfer_memory") == 400000000);
  CHECK(jint(l, "per_ip_limit") == 33);
  CHECK(jint(l, "max_connections") == 444);
  CHECK(jint(l, "conn_timeout_s") == 55);
  CHECK(jint(l, "header_timeout_s") == 9);
  CHECK(jint(l, "min_body_rate") == 1000);
  json_t *mw = json_object_get(l, "max_wait_s");
  CHECK(json_is_number(mw) && json_number_value(mw) > 0);

  /* The ?wait cap stated is the one enforced: at it accepted, past it 400. */
  const char *job = "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\","
                    "\"inputs\":{\"x\":[1,2]}}}";
  char q[64];
  snprintf(q, sizeof q, "/v1/jobs?wait=%g", json_number_value(mw) + 1);
  r = req(&s, "POST", q, "application/json", job);
  CHECK(is_error(&r, 400, "invalid_argument", "wait"));
  resp_free(&r);
  snprintf(q, sizeof q, "/v1/jobs?wait=%g", json_number_value(mw));
  r = req(&s, "POST", q, "application/json", job);
  CHECK_MSG(r.status == 200, "%ld %.300s", r.status, r.body);
  resp_free(&r);

  static const char *const kinds[] = {"map", "reduce", "matmul", "geodesic"};
  CHECK(strings_are(json_object_get(j, "kinds"), kinds, 4));
  static const char *const backends[] = {"auto", "serial", "cpu", "cuda", "compare"};
  CHECK(strings_are(json_object_get(j, "backends"), backends, 5));
  matches_spec(&s, j);
  json_decref(j);

  r = req(&s, "POST", "/v1/info", "application/json", "{}");
  CHECK(r.status == 405);
  resp_free(&r);
  srv_cleanup(&s);
  rmdir(d1);
  rmdir(d2);
}

TEST(no_local_dir) {
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "1", NULL) == 0);
  json_t *j = get_info(&s, NULL);
  CHECK(jbool(json_object_get(j, "features"), "same_host") == 0);
  CHECK(jbool(json_object_get(j, "features"), "regions") == 0);
  json_t *d = json_object_get(j, "local_dirs");
  CHECK(json_is_array(d) && json_array_size(d) == 0);
  /* The defaults of --help, as the daemon parsed them. */
  CHECK(jint(json_object_get(j, "limits"), "queue_limit") == 10000);
  json_decref(j);
  srv_cleanup(&s);
}

TEST(tokens_see_their_own_dirs) {
  char base[64] = "/tmp/tessel-it-info-tok-XXXXXX", tokens[128];
  CHECK(mkdtemp(base) != NULL);
  char b1[PATH_MAX], b2[PATH_MAX], p[PATH_MAX + 64];
  snprintf(b1, sizeof b1, "%s/one", base);
  snprintf(b2, sizeof b2, "%s/two", base);
  CHECK(mkdir(b1, 0700) == 0 && mkdir(b2, 0700) == 0);
  /* one/ has alice and bob; two/ has bob only, and carol as a symlink. */
  snprintf(p, sizeof p, "%s/alice", b1);
  CHECK(mkdir(p, 0700) == 0);
  snprintf(p, sizeof p, "%s/bob", b1);
  CHECK(mkdir(p, 0700) == 0);
  snprintf(p, sizeof p, "%s/bob", b2);
  CHECK(mkdir(p, 0700) == 0);
  char alice1[PATH_MAX + 64];
  snprintf(alice1, sizeof alice1, "%s/alice", b1);
  snprintf(p, sizeof p, "%s/carol", b2);
  CHECK(symlink(alice1, p) == 0);
  snprintf(tokens, sizeof tokens, "%s/tokens", base);
  FILE *f = fopen(tokens, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "alice:alice-secret-01234\nbob:bob-secret-0123456\n"
             "carol:carol-secret-012345\n");
  fclose(f);
  srv s;
  CHECK(srv_start(&s, daemon_path, "--threads", "1", "--token-file", tokens,
                  "--local-dir", b1, "--local-dir", b2, NULL) == 0);
  resp r = req(&s, "GET", "/v1/info", NULL, NULL);
  CHECK(is_error(&r, 401, "unauthenticated", NULL));
  resp_free(&r);
  s.token = "not-a-token-0000000";
  r = req(&s, "GET", "/v1/info", NULL, NULL);
  CHECK(is_error(&r, 401, "unauthenticated", NULL));
  resp_free(&r);

  char r1[PATH_MAX], r2[PATH_MAX];
  CHECK(realpath(b1, r1) && realpath(b2, r2));
  char a1[PATH_MAX + 16], o1[PATH_MAX + 16], o2[PATH_MAX + 16];
  snprintf(a1, sizeof a1, "%s/alice", r1);
  snprintf(o1, sizeof o1, "%s/bob", r1);
  snprintf(o2, sizeof o2, "%s/bob", r2);

  s.token = "alice-secret-01234";
  json_t *j = get_info(&s, NULL);
  CHECK(jbool(json_object_get(j, "features"), "tokens") == 1);
  CHECK(jbool(json_object_get(j, "features"), "same_host") == 1);
  const char *const alice[] = {a1};
  CHECK(strings_are(json_object_get(j, "local_dirs"), alice, 1));
  json_decref(j);

  s.token = "bob-secret-0123456";
  j = get_info(&s, NULL);
  const char *const bob[] = {o1, o2};
  CHECK(strings_are(json_object_get(j, "local_dirs"), bob, 2));
  json_decref(j);

  s.token = "carol-secret-012345";
  j = get_info(&s, NULL);
  json_t *d = json_object_get(j, "local_dirs");
  CHECK(json_is_array(d) && json_array_size(d) == 0);
  json_decref(j);

  srv_cleanup(&s);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_info <tesseld>");
  daemon_path = argv[1];
  curl_global_init(CURL_GLOBAL_ALL);
  RUN(fields_and_flags);
  RUN(no_local_dir);
  RUN(tokens_see_their_own_dirs);
  curl_global_cleanup();
  return check_summary();
}
