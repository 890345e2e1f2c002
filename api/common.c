/* common.c — what every resource of the API shares: reading a JSON body,
 * answering with a job (whose JSON jobs/json.c writes), an array's metadata,
 * a deletion or an error.
 *
 * Threads: called from HTTP handlers (MHD worker threads) and from job
 * completion callbacks (scheduler workers); nothing here holds state.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "util/util.h"

int api_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = api_jobs_register(srv, ctx, e);
  if (!rc) rc = api_arrays_register(srv, ctx, e);
  if (!rc) rc = api_service_register(srv, ctx, e);
  if (!rc) rc = api_info_register(srv, ctx, e);
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

void api_reply_deleted(http_req *r, const char *id, char *path) {
  if (path) unlink(path);
  free(path);
  http_reply_json(r, 200, json_pack("{s:s, s:b}", "id", id, "deleted", 1));
}

void api_reply_job(http_req *r, api_ctx *ctx, const job_record *j,
                   int status) {
  size_t len = 0;
  char *text = jobs_json(ctx ? ctx->jobs : NULL, j, 1, &len);
  if (!text) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory for the answer");
    return;
  }
  http_reply_buffer(r, status, "application/json; charset=utf-8", text, len);
}

json_t *api_array_json(const store_array *a) {
  json_t *shape = loads(a->shape);
  char when[40];
  return json_pack("{s:s, s:s, s:o, s:I, s:s, s:s}", "id", a->id, "dtype",
                   a->dtype ? a->dtype : "float64", "shape",
                   shape ? shape : json_array(), "bytes", (json_int_t)a->bytes,
                   "digest", a->digest ? a->digest : "", "created_at",
                   t_rfc3339(a->created_at, when, sizeof when));
}
