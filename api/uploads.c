/* uploads.c — the /v1/uploads resource: an array uploaded in parts sent at
 * once (compute/array/codec/parts_upload.h does the work; this file only
 * translates HTTP to its calls and its answers back).
 *
 *   POST   /v1/uploads {"dtype", "shape"}     201 the upload (id, bytes, expires)
 *   GET    /v1/uploads/{id}                   200 the upload (received, missing)
 *   PUT    /v1/uploads/{id}?offset=O          200 the upload after this part
 *   POST   /v1/uploads/{id}/complete          201 the array (200: content already stored)
 *   DELETE /v1/uploads/{id}                   200 {"id", "deleted": true}
 *
 * A part's body is streamed (http_route_sink): its pieces are written at
 * offset + the bytes before them as they come off the socket, nothing
 * held. A part needs a Content-Length (its range is claimed before a byte
 * is read: an overlap is refused then); the route's body cap is
 * --max-upload. The end of an upload (delete, expiry) goes through
 * compute/jobs/lifecycle.h.
 *
 * Threads: MHD worker threads; a part's pieces on its connection's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "compute/array/arrays.h"
#include "compute/array/codec/parts_upload.h"
#include "util/util.h"

/* The parts a client should send at once ("streams" in every answer):
 * where parts are copied side by side into the file's mapping
 * (arrays_parts_mapped: 4 CPUs or more), as many as the server takes big
 * bodies at once, at most 8 (the H200 host, 2026-11-29, 800 MB from the
 * Python client: one stream 0.20-0.25 s, 8 parts 0.15-0.18 s, 16 no
 * better); elsewhere 1 (pwrites into one file queue on its inode lock:
 * parts at once are no faster than one). Set once at registration. */
static int advised_streams = 1;

static json_t *upload_json(const parts_info *u) {
  char when[40];
  json_t *o = json_pack(
      "{s:s, s:s, s:I, s:I, s:i}", "id", u->id, "dtype", u->dtype, "bytes",
      (json_int_t)u->bytes, "received", (json_int_t)u->received, "streams",
      advised_streams);
  json_t *shape = json_loads(u->shape, 0, NULL);
  json_object_set_new(o, "shape", shape ? shape : json_array());
  json_object_set_new(o, "expires",
                      u->expires_ms >= 0
                          ? json_string(t_rfc3339(u->expires_ms, when, sizeof when))
                          : json_null());
  json_object_set_new(
      o, "missing",
      u->missing_from < u->missing_to
          ? json_pack("[I, I]", (json_int_t)u->missing_from,
                      (json_int_t)(u->missing_to - 1))
          : json_null());
  return o;
}

/* {"dtype": "float64"|"float32", "shape": [n, ...]} */
static int parse_create(json_t *body, tdtype *dt, int *ndim, int64_t *shape,
                        terr *e) {
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0)
      return terr_set(e, T_EINVAL, key, -1, "unknown field");
  }
  json_t *d = json_object_get(body, "dtype"), *s = json_object_get(body, "shape");
  *dt = T_F64;
  if (d && (!json_is_string(d) || tdtype_parse(json_string_value(d), dt)))
    return terr_set(e, T_EINVAL, "dtype", -1, "expected float64 or float32");
  if (!json_is_array(s) || json_array_size(s) > T_MAXDIM)
    return terr_set(e, T_EINVAL, "shape", -1,
                    "expected a list of at most %d sizes", T_MAXDIM);
  *ndim = (int)json_array_size(s);
  for (int i = 0; i < *ndim; i++) {
    json_t *x = json_array_get(s, (size_t)i);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return terr_set(e, T_EINVAL, "shape", i, "sizes are integers >= 0");
    shape[i] = json_integer_value(x);
  }
  return T_OK;
}

static void handle_create(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  tdtype dt;
  int ndim = 0;
  int64_t shape[T_MAXDIM];
  parts_info u;
  if (api_body_object(r, &body, &e) ||
      parse_create(body, &dt, &ndim, shape, &e) ||
      parts_upload_create(ctx->arrays, http_owner(r), dt, ndim, shape, &u, &e)) {
    json_decref(body);
    http_reply_error(r, &e);
    return;
  }
  json_decref(body);
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/uploads/%s", u.id);
  http_add_header(r, "Location", loc);
  http_reply_json(r, 201, upload_json(&u));
}

static void handle_get(http_req *r, void *ud) {
  (void)ud;
  terr e;
  parts_info u;
  if (parts_upload_info(http_param(r, "id"), http_owner(r), &u, &e))
    http_reply_error(r, &e);
  else
    http_reply_json(r, 200, upload_json(&u));
}

/* ---- a part: the streamed body ------------------------------------------ */

static int part_open(http_req *r, void *ud, void **st, terr *e) {
  (void)ud;
  *st = NULL;
  const char *o = http_query(r, "offset"), *cl = http_header(r, "Content-Length");
  int64_t off = -1, len = -1;
  if (!o || t_parse_i64(o, &off) || off < 0)
    return terr_set(e, T_EINVAL, "offset", -1,
                    "?offset= the part's first data byte, an integer >= 0");
  if (!cl || http_header(r, "Transfer-Encoding") || t_parse_i64(cl, &len))
    return terr_set(e, T_EINVAL, "Content-Length", -1,
                    "a part needs a Content-Length (no chunked body)");
  parts_put *p = NULL;
  int rc = parts_put_begin(http_param(r, "id"), http_owner(r), off, len, &p, e);
  if (rc) return rc;
  *st = p;
  return T_OK;
}

static int part_write(void *st, const char *p, size_t n, terr *e) {
  return parts_put_write(st, p, n, e);
}

static void part_close(void *st) { parts_put_abort(st); }

static const http_sink part_sink = {part_open, part_write, part_close};

static void handle_put(http_req *r, void *ud) {
  (void)ud;
  terr e;
  terr_clear(&e);
  parts_put *p = http_sink_state(r);
  parts_info u;
  if (!p) { /* cannot be: part_open takes every body or refuses it */
    http_reply_error(r, (terr_set(&e, T_EINTERNAL, "", -1, "no part"), &e));
    return;
  }
  http_sink_clear(r); /* ended here: close finds nothing */
  if (parts_put_end(p, &u, &e))
    http_reply_error(r, &e);
  else
    http_reply_json(r, 200, upload_json(&u));
}

static void handle_complete(http_req *r, void *ud) {
  (void)ud;
  terr e;
  terr_clear(&e);
  store_array rec;
  int existing = 0;
  if (parts_upload_complete(http_param(r, "id"), http_owner(r), &rec,
                            &existing, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (!existing) {
    char loc[96];
    snprintf(loc, sizeof loc, "/v1/arrays/%s", rec.id);
    http_add_header(r, "Location", loc);
  }
  http_reply_json(r, existing ? 200 : 201, api_array_json(&rec));
  store_array_clear(&rec);
}

static void handle_delete(http_req *r, void *ud) {
  (void)ud;
  terr e;
  const char *id = http_param(r, "id");
  if (jobs_upload_delete(id, http_owner(r), &e))
    http_reply_error(r, &e);
  else
    api_reply_deleted(r, id);
}

int api_uploads_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  int big = http_big_bodies(srv);
  advised_streams = arrays_parts_mapped() ? (big < 8 ? big : 8) : 1;
  rc |= http_route(srv, "POST", "/v1/uploads", handle_create, ctx,
                   HTTP_AUTH | HTTP_JSON);
  rc |= http_route(srv, "GET", "/v1/uploads/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route_sink(srv, "PUT", "/v1/uploads/{id}", handle_put, &part_sink,
                        ctx, HTTP_AUTH | HTTP_UPLOAD);
  rc |= http_route(srv, "POST", "/v1/uploads/{id}/complete", handle_complete,
                   ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/uploads/{id}", handle_delete, ctx,
                   HTTP_AUTH);
  static const char *const put[] = {"offset", NULL};
  rc |= http_route_query(srv, "PUT", "/v1/uploads/{id}", put);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register upload routes");
  return T_OK;
}
