/* common.c — what every resource of the API shares: reading a JSON body,
 * refusing unknown fields, and the JSON shapes of jobs and arrays.
 *
 * Threads: called from HTTP handlers (MHD worker threads) and from job
 * completion callbacks (scheduler workers); nothing here holds state.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/api_int.h"
#include "util/util.h"

int api_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = api_jobs_register(srv, ctx, e);
  if (!rc) rc = api_arrays_register(srv, ctx, e);
  if (!rc) rc = api_service_register(srv, ctx, e);
  return rc;
}

int api_body_object(http_req *r, json_t **out, terr *e) {
  *out = NULL;
  size_t len;
  const char *body = http_body(r, &len);
  if (len == 0) return terr_set(e, T_EINVAL, "body", -1, "a JSON object is required");
  json_error_t je;
  json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!v)
    return terr_set(e, T_EINVAL, "body", je.position,
                    "invalid JSON at line %d column %d: %s", je.line,
                    je.column, je.text);
  if (!json_is_object(v)) {
    json_decref(v);
    return terr_set(e, T_EINVAL, "body", 0, "expected a JSON object");
  }
  *out = v;
  return T_OK;
}

int api_only_keys(const json_t *obj, const char *field,
                  const char *const *allowed, terr *e) {
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)obj, key, val) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      if (strcmp(*a, key) == 0) ok = 1;
    if (!ok) {
      char f[TERR_FIELD_MAX];
      snprintf(f, sizeof f, "%s%s%s", field ? field : "",
               field && field[0] ? "." : "", key);
      return terr_set(e, T_EINVAL, f, -1, "unknown field");
    }
  }
  return T_OK;
}

void api_reply_terr(http_req *r, int code, const char *field, const char *fmt,
                    ...) {
  terr e;
  va_list ap;
  va_start(ap, fmt);
  terr_vset(&e, (terr_code)code, field, -1, fmt, ap);
  va_end(ap);
  http_reply_error(r, &e);
}

/* Parse stored JSON text; NULL text or bad JSON gives NULL. */
static json_t *loads(const char *text) {
  if (!text || !*text) return NULL;
  return json_loads(text, 0, NULL);
}

static json_t *time_or_null(int64_t ms) {
  if (ms <= 0) return json_null();
  char buf[40];
  return json_string(t_rfc3339(ms, buf, sizeof buf));
}

json_t *api_job_json(api_ctx *ctx, const store_job *j, int with_params) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_string(j->id));
  json_object_set_new(o, "kind", json_string(j->kind ? j->kind : ""));
  json_object_set_new(o, "status", json_string(job_status_name(j->status)));
  json_object_set_new(o, "label", j->label ? json_string(j->label) : json_null());
  json_object_set_new(o, "priority", json_integer(j->priority));
  json_object_set_new(o, "request_id",
                      j->request_id ? json_string(j->request_id) : json_null());
  json_object_set_new(o, "timeout_s", json_real(j->timeout_s));
  json_object_set_new(
      o, "backend",
      json_pack("{s:s, s:o, s:o}", "requested",
                j->backend_requested ? j->backend_requested : "auto", "used",
                j->backend_used ? json_string(j->backend_used) : json_null(),
                "reason",
                j->backend_reason ? json_string(j->backend_reason)
                                  : json_null()));
  json_t *est = loads(j->estimate);
  json_object_set_new(o, "estimate", est ? est : json_null());
  /* The input size (elements, or points for geodesic) for the dashboard's
   * performance chart. */
  json_t *size = est ? json_object_get(est, "size") : NULL;
  json_object_set(o, "size", size ? size : json_null());
  json_object_set_new(o, "created_at", time_or_null(j->created_at));
  json_object_set_new(o, "started_at", time_or_null(j->started_at));
  json_object_set_new(o, "finished_at", time_or_null(j->finished_at));
  json_t *timings = loads(j->timings);
  json_object_set_new(o, "timings_ms", timings ? timings : json_object());

  int64_t done = j->progress_done, total = j->progress_total;
  if (!job_status_final(j->status) && ctx && ctx->sc)
    sched_progress(ctx->sc, j->id, &done, &total);
  json_object_set_new(o, "progress",
                      json_pack("{s:I, s:I}", "done", (json_int_t)done,
                                "total", (json_int_t)total));
  json_t *res = loads(j->result);
  if (res && j->status == JOB_SUCCEEDED) {
    char href[96];
    snprintf(href, sizeof href, "/v1/jobs/%s/result", j->id);
    json_object_set_new(res, "href", json_string(href));
    json_object_set_new(o, "result", res);
  } else {
    json_decref(res);
    json_object_set_new(o, "result", json_null());
  }
  json_t *cmp = loads(j->compare);
  json_object_set_new(o, "compare", cmp ? cmp : json_null());
  json_object_set_new(o, "max_abs_diff", isnan(j->max_abs_diff)
                                             ? json_null()
                                             : json_real(j->max_abs_diff));
  if (j->error_code)
    json_object_set_new(
        o, "error",
        json_pack("{s:s, s:s}", "code", j->error_code, "message",
                  j->error_message ? j->error_message : ""));
  else
    json_object_set_new(o, "error", json_null());
  json_object_set_new(o, "attempts", json_integer(j->attempts));
  if (with_params) {
    json_t *p = loads(j->params);
    json_object_set_new(o, "params", p ? p : json_object());
  }
  return o;
}

json_t *api_array_json(const store_array *a) {
  json_t *shape = loads(a->shape);
  char when[40];
  return json_pack("{s:s, s:s, s:o, s:I, s:s, s:s}", "id", a->id, "dtype",
                   a->dtype ? a->dtype : "float64", "shape",
                   shape ? shape : json_array(), "bytes", (json_int_t)a->bytes,
                   "sha256", a->sha256 ? a->sha256 : "", "created_at",
                   t_rfc3339(a->created_at, when, sizeof when));
}
