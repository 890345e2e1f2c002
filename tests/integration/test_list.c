/* test_list.c — GET /v1/jobs through HTTP: total, q, order_by/desc and
 * their cursors, and the 400s naming each parameter (issue 15). The
 * orders' exact paging over every order and direction is in
 * tests/unit/test_store.c (test_list_orders_search_total); here the route's
 * wiring: parameters reach the store, the cursor is opaque and bound to
 * its order, bad values are refused with the right field and change
 * nothing.
 */
#include "harness.h"

static srv S;

static json_t *get_json(const char *path, long *status) {
  resp r = req(&S, "GET", path, NULL, NULL);
  *status = r.status;
  json_t *o = resp_json(&r);
  resp_free(&r);
  return o;
}

static void bad(const char *path, const char *field) {
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK_MSG(is_error(&r, 400, "invalid_argument", field), "%s: %ld %.200s",
            path, r.status, r.body);
  resp_free(&r);
}

TEST(total_search_order_cursor) {
  const char *labels[] = {"run_a", "runxa", "50%", "other", "RUN_B", NULL,
                          "run_c"};
  for (int i = 0; i < 7; i++) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"kind\":\"%s\",%s%s%s\"params\":%s}", i % 2 ? "reduce" : "map",
             labels[i] ? "\"label\":\"" : "", labels[i] ? labels[i] : "",
             labels[i] ? "\"," : "",
             i % 2 ? "{\"op\":\"sum\",\"inputs\":{\"x\":[1,2,3]}}"
                   : "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}");
    json_t *j = submit(&S, "?wait=30", body, NULL);
    CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
    json_decref(j);
  }
  long st;
  json_t *o = get_json("/v1/jobs?limit=2", &st);
  CHECK(st == 200 && json_integer_value(json_object_get(o, "total")) == 7);
  CHECK(json_array_size(json_object_get(o, "jobs")) == 2);
  json_decref(o);
  /* q: "run_" is literal (not runxa), any case (RUN_B). */
  o = get_json("/v1/jobs?q=run_", &st);
  CHECK(st == 200 && json_integer_value(json_object_get(o, "total")) == 3);
  json_decref(o);
  o = get_json("/v1/jobs?q=50%25", &st);
  CHECK(st == 200 && json_integer_value(json_object_get(o, "total")) == 1);
  json_decref(o);
  o = get_json("/v1/jobs?kind=reduce&q=run", &st); /* runxa alone */
  CHECK(st == 200 && json_integer_value(json_object_get(o, "total")) == 1);
  json_decref(o);
  /* order_by=kind ascending, pages of 3 through the cursor: map x4 then
   * reduce x3, every job once. */
  char path[512] = "/v1/jobs?order_by=kind&limit=3";
  int seen = 0, maps = 0, order_ok = 1, pages = 0;
  char first_cursor[300] = "";
  const char *prev_kind = "";
  char prevbuf[16] = "";
  for (;;) {
    o = get_json(path, &st);
    CHECK(st == 200);
    json_t *jobs = json_object_get(o, "jobs");
    for (size_t i = 0; i < json_array_size(jobs); i++) {
      const char *k = jstr(json_array_get(jobs, i), "kind");
      if (strcmp(prev_kind, k) > 0) order_ok = 0;
      snprintf(prevbuf, sizeof prevbuf, "%s", k);
      prev_kind = prevbuf;
      maps += strcmp(k, "map") == 0;
      seen++;
    }
    const char *cur = jstr(o, "next_cursor");
    if (!cur || ++pages > 5) {
      json_decref(o);
      break;
    }
    if (!first_cursor[0]) snprintf(first_cursor, sizeof first_cursor, "%s", cur);
    snprintf(path, sizeof path, "/v1/jobs?order_by=kind&limit=3&cursor=%s", cur);
    json_decref(o);
  }
  CHECK(seen == 7 && maps == 4 && order_ok);
  /* That cursor in another order or direction: 400 naming cursor. */
  snprintf(path, sizeof path, "/v1/jobs?cursor=%s", first_cursor);
  bad(path, "cursor");
  snprintf(path, sizeof path, "/v1/jobs?order_by=kind&desc=true&cursor=%s",
           first_cursor);
  bad(path, "cursor");
  bad("/v1/jobs?cursor=czz", "cursor");
  bad("/v1/jobs?order_by=size", "order_by");
  bad("/v1/jobs?desc=yes", "desc");
  char longq[200] = "/v1/jobs?q=";
  memset(longq + strlen(longq), 'a', 101);
  bad(longq, "q");
  /* Nothing changed. */
  o = get_json("/v1/jobs?order_by=duration", &st);
  CHECK(st == 200 && json_integer_value(json_object_get(o, "total")) == 7);
  json_decref(o);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_list <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[1]);
    return 1;
  }
  RUN(total_search_order_cursor);
  CHECK(srv_kill(&S, SIGTERM) == 0);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
