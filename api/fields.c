/* fields.c — partial job records for the batch calls (a read mask, as
 * Google's AIP-157 "partial responses"): `"fields": ["status", "result"]`
 * in the body of POST /v1/jobs:batch or POST /v1/jobs:get answers each job
 * with only those members (its "id" always first), so a client of
 * thousands of tiny jobs neither waits for nor parses their estimates,
 * params and timings (about 1.3 KB of a tiny map's 1.5 KB record).
 *
 * api_fields_parse checks the list: an array of at most API_FIELDS_MAX
 * names, each one of the job object's members (API.md "The job object");
 * anything else is 400 naming "fields" or "fields[i]".
 *
 * api_fields_put copies the wanted members out of a job's text. The text
 * is jobs_json's (compute/jobs/json.c), one JSON object this process wrote,
 * so a scan suffices: it walks the top-level members, skipping each value
 * by its nesting and its strings (their escapes included), without reading
 * what they mean. Written by hand because every JSON library would parse
 * the whole record into a tree and write it again, which costs what writing
 * it did in the first place. Text that is not an object, or ends inside a
 * value, is copied whole (never cut mid-way).
 *
 * Threads: no state; called from HTTP handlers and resumed answers.
 */
#include <string.h>

#include "api/api_int.h"

/* The job object's members (compute/jobs/json.c writes them in this order). */
static const char *const k_members[] = {
    "id",          "kind",       "status",     "label",        "priority",
    "request_id",  "timeout_s",  "backend",    "estimate",     "size",
    "launch",      "created_at", "started_at", "finished_at",  "timings_ms",
    "progress",    "result",     "output",     "compare",      "max_abs_diff",
    "error",       "attempts",   "node",       "params",       NULL};

int api_fields_parse(json_t *v, api_fields *f, terr *e) {
  memset(f, 0, sizeof *f);
  if (!v) return T_OK;
  if (!json_is_array(v) || json_array_size(v) == 0 ||
      json_array_size(v) > API_FIELDS_MAX)
    return terr_set(e, T_EINVAL, "fields", -1,
                    "expected a list of 1 to %d job members (\"status\", "
                    "\"result\", ...)",
                    API_FIELDS_MAX);
  for (size_t i = 0; i < json_array_size(v); i++) {
    const char *s = json_string_value(json_array_get(v, i));
    int k = -1;
    for (int m = 0; s && k_members[m]; m++)
      if (strcmp(s, k_members[m]) == 0) k = m;
    if (k < 0) {
      char field[32];
      snprintf(field, sizeof field, "fields[%zu]", i);
      return terr_set(e, T_EINVAL, field, -1,
                      "expected a member of the job object (API.md \"The "
                      "job object\")");
    }
    f->want |= 1ull << k;
  }
  f->want |= 1ull; /* "id" */
  f->on = 1;
  return T_OK;
}

/* Where the JSON value starting at p ends: the ',' or the enclosing '}'
 * after it (at its own level), or NULL when the text ends first. */
static const char *skip_value(const char *p, const char *end) {
  int depth = 0;
  for (; p < end; p++) {
    char c = *p;
    if (c == '"') {
      for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
      if (p >= end) return NULL;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return p;
      depth--;
    } else if (c == ',' && depth == 0) {
      return p;
    }
  }
  return NULL;
}

/* Which k_members entry the key [k, k + n) is, or -1. */
static int member_of(const char *k, size_t n) {
  for (int m = 0; k_members[m]; m++)
    if (strlen(k_members[m]) == n && memcmp(k_members[m], k, n) == 0) return m;
  return -1;
}

void api_fields_put(tbuf *b, const char *text, size_t len, const api_fields *f) {
  const char *p = text, *end = text + len;
  if (!f->on || len < 2 || text[0] != '{') goto whole;
  size_t mark = b->len;
  int first = 1;
  p++;
  while (p < end && *p == '"') {
    const char *k = p + 1, *q = k;
    while (q < end && *q != '"') q += (*q == '\\') ? 2 : 1;
    if (q + 1 >= end || q[1] != ':') goto undo;
    const char *v = q + 2, *ve = skip_value(v, end);
    if (!ve || ve <= v) goto undo;
    int m = member_of(k, (size_t)(q - k));
    if (m >= 0 && (f->want >> m) & 1) {
      tbuf_adds(b, first ? "{" : ",");
      tbuf_add(b, p, (size_t)(ve - p));
      first = 0;
    }
    p = ve;
    if (p < end && *p == ',') p++;
  }
  if (p >= end || *p != '}') goto undo;
  tbuf_adds(b, first ? "{}" : "}");
  return;
undo:
  b->len = mark;
whole:
  tbuf_add(b, text, len);
}
