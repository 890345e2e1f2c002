/* arrays.c — the /v1/arrays resource: upload, read, download, delete, list.
 *
 * An upload is read by its Content-Type (application/x-npy, text/csv,
 * application/json; anything else 415), checked strictly (NaN and Inf are
 * refused in CSV and JSON; .npy keeps them) and stored through
 * compute/array/arrays.h (the file, the store row, the content id). The same
 * content from the same owner gives the same id, whatever the format: the
 * first upload answers 201, a repeat 200 with the existing array.
 *
 * Every body is streamed (http_route_sink): compute/array/codec/upload.h reads it as it
 * arrives — an .npy header as soon as it is in, CSV and JSON through their
 * push readers — and writes the data straight into the array's file,
 * hashing on the way, so the server never holds the body: an upload of
 * any size and format costs the reader's state (64 KiB of values, one
 * cell's or number's text, or the .npy 64 KiB conversion buffer), which
 * the connection limit bounds, so nothing is reserved in the transfer
 * budget. A wrong Content-Type or dtype, or a full disk for .npy, is
 * answered before the body is read; a bad body as soon as its bytes show
 * it.
 *
 * Threads: handlers and the sink on MHD worker threads (a streamed body's
 * pieces arrive on its connection's thread, one at a time).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "compute/array/codec/upload.h"
#include "util/util.h"

static int content_is(const char *ct, const char *want) {
  if (!ct) return 0;
  size_t n = strlen(want);
  return strncasecmp(ct, want, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

/* Answer an upload stored (201, or 200 for content already stored) or
 * refused. */
static void reply_stored(http_req *r, int rc, store_array *rec, int existing,
                         const terr *e) {
  if (rc) {
    http_reply_error(r, e);
    return;
  }
  if (!existing) {
    char loc[96];
    snprintf(loc, sizeof loc, "/v1/arrays/%s", rec->id);
    http_add_header(r, "Location", loc);
  }
  http_reply_json(r, existing ? 200 : 201, api_array_json(rec));
  store_array_clear(rec);
}

/* ---- the streamed body ------------------------------------------------- */
static int is_npy(const char *ct) {
  return content_is(ct, "application/x-npy") ||
         content_is(ct, "application/octet-stream");
}

/* A streamed upload: one of the two readers. */
typedef struct upload_st {
  npy_upload *npy;
  text_upload *text;
} upload_st;

static void sink_close(void *st) {
  upload_st *u = st;
  if (!u) return;
  npy_upload_abort(u->npy);
  text_upload_abort(u->text);
  free(u);
}

/* Headers in: the body's reader by its Content-Type (415 for others),
 * its file created; every error here is answered before the body. */
static int sink_open(http_req *r, void *ud, void **st, terr *e) {
  api_ctx *ctx = ud;
  *st = NULL;
  const char *ct = http_header(r, "Content-Type");
  int npy = is_npy(ct), csv = content_is(ct, "text/csv"),
      json = content_is(ct, "application/json");
  int64_t declared = -1;
  const char *cl = http_header(r, "Content-Length");
  if (cl && !http_header(r, "Transfer-Encoding") &&
      t_parse_i64(cl, &declared) != 0)
    declared = -1;
  if (declared == 0)
    return terr_set(e, T_EINVAL, "body", -1, "empty upload");
  if (!npy && !csv && !json)
    return terr_set(e, T_EMEDIA, "Content-Type", -1,
                    "'%s' is not application/x-npy, text/csv or "
                    "application/json",
                    ct ? ct : "(none)");
  tdtype dt = T_F64;
  const char *q = json ? http_query(r, "dtype") : NULL;
  if (q && tdtype_parse(q, &dt))
    return terr_set(e, T_EINVAL, "dtype", -1, "expected float64 or float32");
  upload_st *u = calloc(1, sizeof *u);
  if (!u) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  int rc = npy ? npy_upload_begin(ctx->arrays, ctx->max_elems, declared,
                                  &u->npy, e)
               : text_upload_begin(ctx->arrays, json, dt, ctx->max_elems,
                                   &u->text, e);
  if (rc) {
    sink_close(u);
    return rc;
  }
  *st = u;
  return T_OK;
}

static int sink_write(void *st, const char *p, size_t n, terr *e) {
  upload_st *u = st;
  return u->npy ? npy_upload_feed(u->npy, p, n, e)
                : text_upload_feed(u->text, p, n, e);
}

static const http_sink upload_sink = {sink_open, sink_write, sink_close};

static void handle_upload(http_req *r, void *ud) {
  (void)ud;
  upload_st *u = http_sink_state(r);
  terr e;
  terr_clear(&e);
  store_array rec;
  int existing = 0, rc;
  if (!u) { /* cannot be: the sink takes every body or refuses it */
    http_reply_error(r, (terr_set(&e, T_EINTERNAL, "", -1, "no upload"), &e));
    return;
  }
  if ((u->npy ? npy_upload_bytes(u->npy) : text_upload_bytes(u->text)) == 0) {
    rc = terr_set(&e, T_EINVAL, "body", -1, "empty upload");
  } else {
    /* The upload is ended here and freed (the reader with it): the sink's
     * close finds nothing left to drop. */
    rc = u->npy ? npy_upload_end(u->npy, http_owner(r), &rec, &existing, &e)
                : text_upload_end(u->text, http_owner(r), &rec, &existing,
                                  &e);
    u->npy = NULL;
    u->text = NULL;
  }
  reply_stored(r, rc, &rec, existing, &e);
}

/* The array named by the path, or the error answered (404 for a malformed
 * id or another owner's array): returns non-zero when it answered. */
static int load_array(http_req *r, api_ctx *ctx, store_array *a) {
  terr e;
  int rc = arrays_get(ctx->arrays, http_param(r, "id"), http_owner(r), a, &e);
  if (rc) http_reply_error(r, &e);
  return rc;
}

static void handle_get(http_req *r, void *ud) {
  store_array a;
  if (load_array(r, ud, &a)) return;
  http_reply_json(r, 200, api_array_json(&a));
  store_array_clear(&a);
}

static void handle_data(http_req *r, void *ud) {
  store_array a;
  if (load_array(r, ud, &a)) return;
  api_reply_array_file(r, ud, a.path, NULL, NULL);
  store_array_clear(&a);
}

static void handle_delete(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  const char *id = http_param(r, "id");
  if (jobs_array_delete(ctx->arrays, id, http_owner(r), &e)) {
    http_reply_error(r, &e);
    return;
  }
  api_reply_deleted(r, id);
}

static void handle_list(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  store_array *arrs = NULL;
  int n = 0;
  char next[T_ID_MAX];
  if (arrays_list(ctx->arrays, http_owner(r), http_query(r, "limit"),
                  http_query(r, "cursor"), &arrs, &n, next, &e)) {
    http_reply_error(r, &e);
    return;
  }
  json_t *list = json_array();
  for (int i = 0; i < n; i++) {
    json_array_append_new(list, api_array_json(&arrs[i]));
    store_array_clear(&arrs[i]);
  }
  free(arrs);
  http_reply_json(r, 200, json_pack("{s:o, s:o}", "arrays", list, "next_cursor",
                                    next[0] ? json_string(next) : json_null()));
}

int api_arrays_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  rc |= http_route_sink(srv, "POST", "/v1/arrays", handle_upload, &upload_sink,
                        ctx, HTTP_AUTH | HTTP_UPLOAD);
  rc |= http_route(srv, "GET", "/v1/arrays", handle_list, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/arrays/{id}", handle_delete, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}/data", handle_data, ctx, HTTP_AUTH);
  /* The query parameters each route takes (any other is 400). */
  static const char *const upload[] = {"dtype", NULL};
  static const char *const list[] = {"limit", "cursor", NULL};
  static const char *const data[] = {"format", "limit_rows", NULL};
  rc |= http_route_query(srv, "POST", "/v1/arrays", upload);
  rc |= http_route_query(srv, "GET", "/v1/arrays", list);
  rc |= http_route_query(srv, "GET", "/v1/arrays/{id}/data", data);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register array routes");
  return T_OK;
}
