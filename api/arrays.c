/* arrays.c — the /v1/arrays resource: upload, read, download, delete, list.
 *
 * An upload is read by its Content-Type (application/x-npy, text/csv,
 * application/json; anything else 415), checked strictly (NaN and Inf are
 * refused in CSV and JSON; .npy keeps them) and stored through
 * array/arrays.h (the file, the store row, the content id). The same
 * content from the same owner gives the same id: the first upload answers
 * 201, a repeat 200 with the existing array.
 *
 * An .npy body is streamed (http_route_sink): array/upload.h reads its
 * header as soon as it arrives and writes the data straight into the
 * array's file, hashing on the way, so the server never holds the body:
 * an upload of any size costs a 64 KiB conversion buffer at most, and a
 * bad header or a full disk is answered before the data is read.
 *
 * CSV and JSON bodies are collected (the sink declines them) and parsed
 * into one copy. Before parsing, what the upload may hold at most (body +
 * parsed array, + jansson's tree for JSON) is reserved in the transfer
 * budget (util/xfer.h): 413 when it could never fit, 503 + Retry-After
 * while other transfers hold it.
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
#include "array/upload.h"
#include "gpu/gpu.h"
#include "util/util.h"
#include "util/xfer.h"

static int content_is(const char *ct, const char *want) {
  if (!ct) return 0;
  size_t n = strlen(want);
  return strncasecmp(ct, want, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

static int parse_upload(http_req *r, api_ctx *ctx, tarray **out, terr *e) {
  size_t len;
  const char *body = http_body(r, &len);
  const char *ct = http_header(r, "Content-Type");
  *out = NULL;
  if (len == 0) return terr_set(e, T_EINVAL, "body", -1, "empty upload");
  if (content_is(ct, "text/csv"))
    return csv_parse(body, len, ctx->max_elems, 0, out, e);
  if (content_is(ct, "application/json")) {
    tdtype dt = T_F64;
    const char *q = http_query(r, "dtype");
    if (q && tdtype_parse(q, &dt))
      return terr_set(e, T_EINVAL, "dtype", -1, "expected float64 or float32");
    json_error_t je;
    json_t *v = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!v)
      return terr_set(e, T_EINVAL, "body", je.position,
                      "invalid JSON at line %d column %d: %s", je.line,
                      je.column, je.text);
    int rc = jarray_parse(v, dt, ctx->max_elems, "body", out, e);
    json_decref(v);
    return rc;
  }
  return terr_set(e, T_EMEDIA, "Content-Type", -1,
                  "'%s' is not application/x-npy, text/csv or application/json",
                  ct ? ct : "(none)");
}

/* ---- the transfer budget of an upload ----------------------------------
 * The body is in memory; parsing makes the array (and, for CSV and JSON,
 * intermediate values). What that costs at most is estimated from the
 * body before any of it is parsed, and reserved in the transfer budget
 * (util/xfer.h) for as long as the upload is handled. */

/* Separators of a text body: an upper bound on the numbers it holds. */
static int64_t count_cells(const char *b, size_t len, int json) {
  int64_t n = 1;
  for (size_t i = 0; i < len; i++)
    n += b[i] == ',' || (!json && (b[i] == '\n' || b[i] == '\r'));
  return n;
}

/* What an upload of this body may hold at most, bytes. */
static int64_t upload_cost(http_req *r) {
  size_t len = 0;
  const char *body = http_body(r, &len);
  const char *ct = http_header(r, "Content-Type");
  int64_t cost = (int64_t)len;
  if (content_is(ct, "text/csv")) /* values growing by doubling + the array */
    cost += count_cells(body, len, 0) * 24;
  else if (content_is(ct, "application/json")) /* jansson's tree + the array */
    cost += count_cells(body, len, 1) * 80;
  return cost;
}

/* Reserve `more` bytes of the transfer budget for an upload that needs
 * `total` in all, or answer 413 (it could never fit) / 503 + Retry-After
 * (not now). 1 when reserved. */
static int upload_reserve(http_req *r, int64_t total, int64_t more) {
  if (!xfer_fits(total)) {
    api_reply_terr(r, T_ETOOLARGE, "body",
                   "this upload needs about %lld bytes of memory to parse, "
                   "more than the server's transfer budget "
                   "(--max-transfer-memory, %lld bytes): send it as .npy "
                   "(streamed, never held in memory) or in smaller arrays",
                   (long long)total, (long long)xfer_budget_limit());
    return 0;
  }
  if (!xfer_reserve(more)) {
    http_add_header(r, "Retry-After", XFER_RETRY_AFTER_S);
    api_reply_terr(r, T_EUNAVAIL, "",
                   "this upload needs about %lld bytes of memory and the "
                   "server's transfer budget (--max-transfer-memory, %lld "
                   "bytes) is in use: retry shortly",
                   (long long)total, (long long)xfer_budget_limit());
    return 0;
  }
  return 1;
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

/* A collected (CSV or JSON) body: reserve what parsing it may hold beyond
 * the body (which the server reserved as it read it), parse, store. */
static void handle_upload_collected(http_req *r, api_ctx *ctx) {
  size_t len = 0;
  http_body(r, &len);
  int64_t body = (int64_t)len;
  int64_t cost = upload_cost(r);
  if (!upload_reserve(r, cost, cost - body)) return;
  terr e;
  terr_clear(&e);
  tarray *a = NULL;
  store_array rec;
  int existing = 0;
  int rc = parse_upload(r, ctx, &a, &e);
  if (rc == T_OK) {
    rc = arrays_put(ctx->arrays, http_owner(r), a, &rec, &existing, &e);
    tarray_free(a);
  }
  xfer_release(cost - body);
  reply_stored(r, rc, &rec, existing, &e);
}

/* ---- the streamed .npy body ---------------------------------------------- */
static int is_npy(const char *ct) {
  return content_is(ct, "application/x-npy") ||
         content_is(ct, "application/octet-stream");
}

/* Headers in: an .npy body is streamed into its file; other types are
 * collected (declined) and parsed by handle_upload. */
static int sink_open(http_req *r, void *ud, void **st, terr *e) {
  api_ctx *ctx = ud;
  *st = NULL;
  if (!is_npy(http_header(r, "Content-Type"))) return T_OK;
  int64_t declared = -1;
  const char *cl = http_header(r, "Content-Length");
  if (cl && !http_header(r, "Transfer-Encoding") &&
      t_parse_i64(cl, &declared) != 0)
    declared = -1;
  if (declared == 0)
    return terr_set(e, T_EINVAL, "body", -1, "empty upload");
  npy_upload *u;
  int rc = npy_upload_begin(ctx->arrays, ctx->max_elems, declared, &u, e);
  if (rc) return rc;
  *st = u;
  return T_OK;
}

static int sink_write(void *st, const char *p, size_t n, terr *e) {
  return npy_upload_feed(st, p, n, e);
}

static void sink_close(void *st) { npy_upload_abort(st); }

static const http_sink npy_sink = {sink_open, sink_write, sink_close};

static void handle_upload(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  npy_upload *u = http_sink_state(r);
  if (!u) {
    handle_upload_collected(r, ctx);
    return;
  }
  terr e;
  terr_clear(&e);
  store_array rec;
  int existing = 0, rc;
  if (npy_upload_bytes(u) == 0) {
    rc = terr_set(&e, T_EINVAL, "body", -1, "empty upload");
  } else {
    /* The upload is ended here and freed: the sink's close finds nothing
     * left to drop. */
    rc = npy_upload_end(u, http_owner(r), &rec, &existing, &e);
    http_sink_clear(r);
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
  char *path = NULL;
  if (arrays_delete(ctx->arrays, id, http_owner(r), &path, &e)) {
    http_reply_error(r, &e);
    return;
  }
  gpu_resident_drop(id); /* its copy in GPU memory, if any (never blocks) */
  api_reply_deleted(r, id, path);
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
  rc |= http_route_sink(srv, "POST", "/v1/arrays", handle_upload, &npy_sink,
                        ctx, HTTP_AUTH | HTTP_UPLOAD);
  rc |= http_route(srv, "GET", "/v1/arrays", handle_list, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/arrays/{id}", handle_delete, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}/data", handle_data, ctx, HTTP_AUTH);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register array routes");
  return T_OK;
}
