/* regions.c — the /v1/regions resource: register a file under --local-dir
 * as a shared-memory region, list the caller's, read one, delete one.
 *
 * HTTP in, one call down, a reply out: the registry and its rules are
 * compute/array/region.h's, the store's and the GPU's part (cluster
 * refusal, the jobs that still use a region, the page-locking)
 * compute/jobs/regions.c's.
 *
 *   POST   /v1/regions        {"path": "/abs/file"} -> 201 the region
 *   GET    /v1/regions        {"regions": [...]}, the caller's own
 *   GET    /v1/regions/{id}   the region (404 for another owner's)
 *   DELETE /v1/regions/{id}   200, 409 naming the jobs that use it
 *
 * Threads: MHD worker threads.
 */
#include <stdio.h>
#include <stdlib.h>

#include "api/api_int.h"
#include "compute/array/region.h"

static json_t *region_json(const region_info *g) {
  return json_pack("{s:s, s:s, s:I, s:I, s:b, s:b, s:I}", "id", g->id, "path",
                   g->path, "bytes", (json_int_t)g->bytes, "created_at_ms",
                   (json_int_t)g->created_at, "pinned", g->pinned, "torn",
                   g->torn, "limit_bytes", (json_int_t)region_limit());
}

static void handle_add(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  if (api_body_object(r, &body, &e)) {
    http_reply_error(r, &e);
    return;
  }
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    if (strcmp(key, "path") != 0) {
      terr_set(&e, T_EINVAL, key, -1, "unknown field (expected \"path\")");
      json_decref(body);
      http_reply_error(r, &e);
      return;
    }
  }
  v = json_object_get(body, "path");
  region_info g;
  int rc = !json_is_string(v) || strlen(json_string_value(v)) !=
                                     json_string_length(v)
               ? terr_set(&e, T_EINVAL, "path", -1,
                          "required: an absolute path (a string with no NUL)")
               : jobs_region_add(ctx->jobs, http_owner(r),
                                 json_string_value(v), &g, &e);
  json_decref(body);
  if (rc) {
    http_reply_error(r, &e);
    return;
  }
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/regions/%s", g.id);
  http_add_header(r, "Location", loc);
  http_reply_json(r, 201, region_json(&g));
}

static void handle_list(http_req *r, void *ud) {
  (void)ud;
  terr e;
  region_info *v = NULL;
  int n = 0;
  if (region_list(http_owner(r), &v, &n, &e)) {
    http_reply_error(r, &e);
    return;
  }
  json_t *list = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(list, region_json(&v[i]));
  free(v);
  http_reply_json(r, 200, json_pack("{s:o}", "regions", list));
}

static void handle_get(http_req *r, void *ud) {
  (void)ud;
  terr e;
  region_info g;
  if (region_get(http_owner(r), http_param(r, "id"), "id", &g, &e)) {
    http_reply_error(r, &e);
    return;
  }
  http_reply_json(r, 200, region_json(&g));
}

static void handle_delete(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  const char *id = http_param(r, "id");
  if (jobs_region_delete(ctx->jobs, http_owner(r), id, &e)) {
    http_reply_error(r, &e);
    return;
  }
  api_reply_deleted(r, id);
}

int api_regions_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  rc |= http_route(srv, "POST", "/v1/regions", handle_add, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/regions", handle_list, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/regions/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/regions/{id}", handle_delete, ctx,
                   HTTP_AUTH);
  if (rc)
    return terr_set(e, T_EINTERNAL, "", -1, "cannot register region routes");
  return T_OK;
}
