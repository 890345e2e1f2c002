/* test_spare_results.c — spare result files (--spare-results,
 * compute/array/codec/spare.h) through the real daemon:
 *  - the first big result (72 MB: x + 1 over 9e6) finds no spare (missed
 *    1), then the keeper makes two of its size (waited for as a state in
 *    GET /v1/info's spare_results);
 *  - the next big result takes one (taken 1) and is the right result: a
 *    chained sum over it is n(n+1)/2 exactly, and max |x - (i + 1)| over
 *    all of it is 0 — no byte of the spare's zeros left in it;
 *  - a small result takes none; after a restart (SIGKILL, so the spares
 *    are left behind) the daemon starts clean: no spare held, the old
 *    files gone from <data dir>/spare, and a big result is right again;
 *  - --spare-results 0: none made, none taken, however many big results.
 */
#include <dirent.h>

#include "harness.h"

static const char *daemon_path;
static srv S;

static json_t *spare_info(void) {
  resp r = req(&S, "GET", "/v1/info", NULL, NULL);
  json_t *j = r.status == 200 ? resp_json(&r) : NULL;
  resp_free(&r);
  json_t *sp = json_incref(json_object_get(j, "spare_results"));
  json_decref(j);
  return sp;
}

static long long spare_n(const char *k) {
  json_t *sp = spare_info();
  long long v = (long long)json_integer_value(json_object_get(sp, k));
  json_decref(sp);
  return v;
}

/* Submit and wait for the end; the job (new ref) or NULL. */
static json_t *run_job(const char *body) {
  long st;
  json_t *j = submit(&S, "?wait=60", body, &st);
  if (j && strcmp(jstr(j, "status"), "succeeded") != 0 &&
      strcmp(jstr(j, "status"), "failed") != 0) {
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(j, "id"));
    json_decref(j);
    j = wait_job(&S, id, 120);
  }
  return j;
}

#define N 9000000LL

/* x + 1 over 0..n-1 (n float64), succeeded; its id into id. */
static int big_map(long long n, char *id, size_t cap) {
  char body[300];
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"cpu\",\"params\":{\"expr\":\"x + 1\","
           "\"inputs\":{\"x\":{\"range\":{\"start\":0,\"stop\":%lld}}}}}", n);
  json_t *j = run_job(body);
  int ok = j && strcmp(jstr(j, "status"), "succeeded") == 0;
  CHECK_MSG(ok, "map over %lld: %s", n, j ? jstr(j, "status") : "no job");
  if (ok) snprintf(id, cap, "%s", jstr(j, "id"));
  json_decref(j);
  return ok;
}

/* The result of job id is i + 1 for i < N: its sum exactly (a chained
 * reduce), and values at a few places. */
static void right_result(const char *id) {
  char body[300];
  snprintf(body, sizeof body,
           "{\"kind\":\"reduce\",\"backend\":\"cpu\",\"params\":{\"op\":\"sum\","
           "\"expr\":\"x\",\"inputs\":{\"x\":{\"result\":\"%s\"}}}}", id);
  json_t *j = run_job(body);
  json_t *v = j ? result_data(&S, j) : NULL;
  double want = (double)N * (double)(N + 1) / 2; /* exact in float64 */
  CHECK_MSG(json_is_number(v) && json_number_value(v) == want, "sum %.17g",
            json_number_value(v));
  json_decref(v);
  json_decref(j);
  /* Every value: max |x - (i + 1)| over the whole result is 0. */
  snprintf(body, sizeof body,
           "{\"kind\":\"reduce\",\"backend\":\"cpu\",\"params\":{\"op\":\"max\","
           "\"expr\":\"abs(x - y)\",\"inputs\":{\"x\":{\"result\":\"%s\"},"
           "\"y\":{\"range\":{\"start\":1,\"stop\":%lld}}}}}", id, N + 1);
  j = run_job(body);
  v = j ? result_data(&S, j) : NULL;
  CHECK_MSG(json_is_number(v) && json_number_value(v) == 0.0, "max |x - (i+1)| %.17g",
            json_number_value(v));
  json_decref(v);
  json_decref(j);
}

static int wait_ready(int ready) {
  WAIT_FOR(spare_n("ready") == ready, 60);
  return spare_n("ready") == ready;
}

static int files_in(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")))
      n++;
  closedir(d);
  return n;
}

TEST(big_results_take_spares) {
  CHECK(srv_start(&S, daemon_path, "--threads", "2", "--spare-results",
                  "268435456", NULL) == 0);
  char id[64];
  CHECK(big_map(N, id, sizeof id));
  CHECK(spare_n("missed") == 1 && spare_n("taken") == 0);
  CHECK(wait_ready(2)); /* 72 MB rounds to 128 MiB: two in 256 MiB */
  CHECK(spare_n("held") == 268435456LL);
  CHECK(big_map(N, id, sizeof id));
  CHECK(spare_n("taken") == 1);
  right_result(id);
  char small[64];
  CHECK(big_map(1000, small, sizeof small)); /* asks for none */
  CHECK(spare_n("taken") == 1 && spare_n("missed") == 1);
  /* Killed: the spares stay on disk; the next start removes them. */
  CHECK(wait_ready(2));
  char sp[4200];
  snprintf(sp, sizeof sp, "%s/spare", S.dir);
  CHECK(files_in(sp) == 2);
  srv_kill(&S, SIGKILL);
  CHECK(srv_restart(&S) == 0);
  CHECK(spare_n("ready") == 0 && spare_n("held") == 0);
  CHECK(files_in(sp) == 0);
  right_result(id); /* the result taken from a spare survived the kill */
  srv_cleanup(&S);
}

TEST(budget_zero) {
  CHECK(srv_start(&S, daemon_path, "--threads", "2", "--spare-results", "0",
                  NULL) == 0);
  char id[64];
  CHECK(big_map(N, id, sizeof id));
  CHECK(big_map(N, id, sizeof id));
  CHECK(spare_n("budget") == 0 && spare_n("ready") == 0 &&
        spare_n("taken") == 0 && spare_n("missed") == 0);
  right_result(id);
  srv_cleanup(&S);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_spare_results <tesseld>");
  daemon_path = argv[1];
  curl_global_init(CURL_GLOBAL_ALL);
  RUN(big_results_take_spares);
  RUN(budget_zero);
  curl_global_cleanup();
  return check_summary();
}
