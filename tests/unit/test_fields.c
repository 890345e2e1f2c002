/* test_fields.c — api/fields.c: the read mask of jobs:batch / jobs:get.
 *
 * The oracle is Jansson: for a job text T and a mask M, api_fields_put must
 * write an object equal (json_equal) to T parsed with every member outside
 * M (and "id") deleted, in T's order. Checked on hand-made records whose
 * strings hold quotes, braces, commas, colons and backslashes, and on 2,000
 * random records (members in the writer's order, values nested to depth 4).
 * Text that is not one object (truncated, an array, garbage) comes out
 * whole. api_fields_parse: unknown names, an empty list, a non-list, too
 * many names are 400 naming "fields" or "fields[i]"; API_FIELD_RESULT is
 * the bit of "result".
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "check.h"

static const char *const k_names[] = {
    "id",         "kind",       "status",     "label",       "priority",
    "request_id", "timeout_s",  "backend",    "estimate",    "size",
    "launch",     "created_at", "started_at", "finished_at", "timings_ms",
    "progress",   "result",     "output",     "compare",     "max_abs_diff",
    "error",      "attempts",   "node",       "params"};
#define NNAMES ((int)(sizeof k_names / sizeof k_names[0]))

static api_fields mask_of(const char *csv) {
  json_t *a = json_array();
  char buf[256];
  snprintf(buf, sizeof buf, "%s", csv);
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
    json_array_append_new(a, json_string(t));
  api_fields f;
  terr e;
  CHECK(api_fields_parse(a, &f, &e) == 0);
  json_decref(a);
  return f;
}

/* What api_fields_put must give: text parsed, unwanted members deleted. */
static void check_against_jansson(const char *text, const api_fields *f) {
  tbuf b;
  tbuf_init(&b, 0);
  api_fields_put(&b, text, strlen(text), f);
  CHECK(b.err == 0);
  json_error_t je;
  json_t *want = json_loads(text, 0, &je);
  json_t *got = json_loadb(b.p ? b.p : "", b.len, 0, &je);
  CHECK(want != NULL && got != NULL);
  if (want && json_is_object(want)) {
    for (int k = 0; k < NNAMES; k++)
      if (!((f->want >> k) & 1)) json_object_del(want, k_names[k]);
  }
  CHECK(json_equal(want, got));
  if (!json_equal(want, got)) fprintf(stderr, "in:  %s\nout: %.*s\n", text, (int)b.len, b.p);
  json_decref(want);
  json_decref(got);
  tbuf_free(&b);
}

TEST(hand_made_records) {
  const char *t =
      "{\"id\":\"j_1\",\"kind\":\"map\",\"status\":\"succeeded\","
      "\"label\":\"a\\\"},{\\\\\\\":[\",\"priority\":5,\"request_id\":null,"
      "\"backend\":{\"requested\":\"auto\",\"reason\":\"x, y: {z}\"},"
      "\"estimate\":{\"out_shape\":[2,[3,{\"q\":\"]\"}]]},\"size\":2,"
      "\"result\":{\"dtype\":\"float64\",\"data\":[[1.0,-2e-300],[3,4]]},"
      "\"error\":null,\"params\":{\"expr\":\"x*\\\"\",\"inputs\":{}}}";
  api_fields f = mask_of("status,result");
  check_against_jansson(t, &f);
  f = mask_of("label,params");
  check_against_jansson(t, &f);
  f = mask_of("backend,estimate,error");
  check_against_jansson(t, &f);
  f = mask_of("id");
  check_against_jansson(t, &f);
  /* a member the text lacks is simply absent */
  f = mask_of("node,attempts");
  check_against_jansson(t, &f);
  /* off: the whole text, byte for byte */
  api_fields off = {0};
  tbuf b;
  tbuf_init(&b, 0);
  api_fields_put(&b, t, strlen(t), &off);
  CHECK(b.len == strlen(t) && memcmp(b.p, t, b.len) == 0);
  tbuf_free(&b);
}

TEST(not_one_object_comes_whole) {
  const char *bad[] = {"", "[1,2]", "{\"id\":\"j\",\"status\":\"su",
                       "{\"id\":\"j\",\"status\":", "{\"id\":\"j\"",
                       "{\"id\" \"j\"}", "nul", "{\"id\":{\"a\":[1,2}"};
  api_fields f = mask_of("status");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tbuf b;
    tbuf_init(&b, 0);
    api_fields_put(&b, bad[i], strlen(bad[i]), &f);
    CHECK(b.len == strlen(bad[i]) && (b.len == 0 || memcmp(b.p, bad[i], b.len) == 0));
    tbuf_free(&b);
  }
}

static unsigned long long g_seed = 88172645463325252ull;
static unsigned rnd(void) {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return (unsigned)(g_seed >> 11);
}

static json_t *rnd_value(int depth) {
  static const char *const strs[] = {"", "a", "\"", "\\", "{", "}", "[", "]",
                                     ",", ":", "\"},{\"", "x\\\"y", "é", "\n"};
  switch (rnd() % (depth > 3 ? 4 : 6)) {
  case 0: return json_integer((json_int_t)(rnd() % 2000) - 1000);
  case 1: return json_real((double)rnd() / 7.0);
  case 2: {
    char s[64] = "";
    for (int i = 0, n = (int)(rnd() % 4); i < n; i++)
      strncat(s, strs[rnd() % 14], sizeof s - strlen(s) - 1);
    return json_string(s);
  }
  case 3: return rnd() % 2 ? json_null() : json_true();
  case 4: {
    json_t *a = json_array();
    for (int i = 0, n = (int)(rnd() % 4); i < n; i++)
      json_array_append_new(a, rnd_value(depth + 1));
    return a;
  }
  default: {
    json_t *o = json_object();
    for (int i = 0, n = (int)(rnd() % 4); i < n; i++) {
      char k[8];
      snprintf(k, sizeof k, "%s%d", i % 2 ? "\"" : "k", i);
      json_object_set_new(o, k, rnd_value(depth + 1));
    }
    return o;
  }
  }
}

TEST(random_records_against_jansson) {
  for (int it = 0; it < 2000; it++) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string("j_x"));
    for (int k = 1; k < NNAMES; k++)
      if (rnd() % 3) json_object_set_new(o, k_names[k], rnd_value(0));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_t *names = json_array();
    for (int i = 0, n = 1 + (int)(rnd() % 5); i < n; i++)
      json_array_append_new(names, json_string(k_names[rnd() % NNAMES]));
    api_fields f;
    terr e;
    CHECK(api_fields_parse(names, &f, &e) == 0);
    check_against_jansson(text, &f);
    json_decref(names);
    free(text);
    json_decref(o);
  }
}

TEST(parse_refuses) {
  api_fields f;
  terr e;
  json_t *v = json_loads("[\"status\",\"estimates\"]", 0, NULL);
  CHECK(api_fields_parse(v, &f, &e) == T_EINVAL);
  CHECK_STR(e.field, "fields[1]");
  json_decref(v);
  v = json_loads("[]", 0, NULL);
  CHECK(api_fields_parse(v, &f, &e) == T_EINVAL);
  CHECK_STR(e.field, "fields");
  json_decref(v);
  v = json_loads("\"status\"", JSON_DECODE_ANY, NULL);
  CHECK(api_fields_parse(v, &f, &e) == T_EINVAL);
  CHECK_STR(e.field, "fields");
  json_decref(v);
  v = json_loads("[3]", 0, NULL);
  CHECK(api_fields_parse(v, &f, &e) == T_EINVAL);
  CHECK_STR(e.field, "fields[0]");
  json_decref(v);
  v = json_array();
  for (int i = 0; i <= API_FIELDS_MAX; i++) json_array_append_new(v, json_string("status"));
  CHECK(api_fields_parse(v, &f, &e) == T_EINVAL);
  json_decref(v);
  CHECK(api_fields_parse(NULL, &f, &e) == 0 && !f.on);
  f = mask_of("result");
  CHECK(f.want == (API_FIELD_RESULT | 1ull));
}

int main(void) {
  RUN(hand_made_records);
  RUN(not_one_object_comes_whole);
  RUN(random_records_against_jansson);
  RUN(parse_refuses);
  return check_summary();
}
