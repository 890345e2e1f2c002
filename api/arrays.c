/* arrays.c — the /v1/arrays resource: upload, read, download, delete, list.
 *
 * An upload is parsed by its Content-Type (application/x-npy, text/csv,
 * application/json; anything else 415), checked strictly (NaN and Inf are
 * refused in CSV and JSON; .npy keeps them) and handed to arrays_put
 * (array/arrays.h: the file, the store row, the content id). The same
 * content from the same owner gives the same id: the first upload answers
 * 201, a repeat 200 with the existing array.
 *
 * Memory: a float64/float32 .npy is not copied at all: the array is a view
 * of the body's data section (npy_native_view), hashed and written from
 * there under a fresh header. Other bodies have one parsed copy. The digest
 * is fed from the array's own buffer. Before parsing, what the upload may
 * hold at most (body + parsed array, + jansson's tree for JSON) is
 * reserved in the transfer budget (util/xfer.h): 413 when it could never
 * fit, 503 + Retry-After while other transfers hold it.
 *
 * Threads: handlers on MHD worker threads; the upload body is already in
 * memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
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
  if (content_is(ct, "application/x-npy") || content_is(ct, "application/octet-stream")) {
    int rc = npy_parse(body, len, ctx->max_elems, out, e);
    if (rc && !e->field[0]) { /* the reader names no field: it is the body */
      char msg[TERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", e->message);
      terr_set(e, e->code, "body", e->position, "%s", msg);
    }
    return rc;
  }
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

/* sha256 over "dtype|shape|" + data: equal arrays, equal digests. Fed to
 * the hash in two pieces, straight from the array's own buffer (the same
 * digest as hashing one concatenated copy, so existing ids stay). */
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

/* Bytes a .npy body's parsed array takes per byte of its data: 1 for
 * float32/float64, 8/itemsize for integers and bools (they become
 * float64), 8 when the descr cannot be read here. Read from the descr of
 * the header (a light look: npy_parse does the strict check, and refuses
 * before it allocates when there is no descr at all: then 0). */
static int64_t npy_growth(const char *b, size_t len) {
  size_t end = len < 16384 ? len : 16384; /* the header is <= 10,012 bytes */
  for (size_t i = 0; i + 5 < end; i++) {
    if (memcmp(b + i, "descr", 5) != 0) continue;
    size_t j = i + 6; /* past the closing quote of the key */
    while (j < end && (b[j] == ' ' || b[j] == '\t' || b[j] == ':')) j++;
    if (j + 3 >= end || (b[j] != '\'' && b[j] != '"')) return 8;
    char kind = b[j + 2], size = b[j + 3];
    if (kind == 'f' && (size == '4' || size == '8')) return 1;
    return size >= '1' && size <= '8' ? 8 / (size - '0') : 8;
  }
  return 0; /* no descr: npy_parse refuses it before allocating */
}

/* What an upload of this body may hold at most, bytes. */
static int64_t upload_cost(http_req *r) {
  size_t len = 0;
  const char *body = http_body(r, &len);
  const char *ct = http_header(r, "Content-Type");
  int64_t cost = (int64_t)len;
  if (content_is(ct, "application/x-npy") ||
      content_is(ct, "application/octet-stream"))
    cost += (int64_t)len * npy_growth(body, len);
  else if (content_is(ct, "text/csv")) /* values growing by doubling + the array */
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
                   "(float64 or float32) or in smaller arrays",
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

/* Is the body a .npy that may be stored with no parsed copy (float)? */
static int npy_maybe_native(http_req *r) {
  size_t len = 0;
  const char *body = http_body(r, &len);
  const char *ct = http_header(r, "Content-Type");
  return (content_is(ct, "application/x-npy") ||
          content_is(ct, "application/octet-stream")) &&
         npy_growth(body, len) == 1;
}

static void handle_upload_body(http_req *r, api_ctx *ctx, int64_t *held);

/* A float .npy needs nothing beyond its body (npy_native_view); other
 * bodies reserve what parsing them may hold beyond the body, and the parsed
 * copy of a float .npy is reserved when it turns out to be needed. */
static void handle_upload(http_req *r, void *ud) {
  size_t len = 0;
  http_body(r, &len);
  /* The body itself was reserved by the server as it was read. */
  int64_t body = (int64_t)len;
  int64_t cost = npy_maybe_native(r) ? body : upload_cost(r);
  if (!upload_reserve(r, cost, cost - body)) return;
  int64_t held = cost;
  handle_upload_body(r, ud, &held);
  xfer_release(held - body);
}

/* A float64/float32 .npy body whose data is aligned needs no parsed copy:
 * the array is a view of the body's own data section (npy_view: npy_parse's
 * strict checks, no copy). 1 with *view filled (its data points into the
 * body: never tarray_free it); 0 when the body is anything else: npy_parse
 * then copies it, or says what is wrong with the usual message. */
static int npy_native_view(http_req *r, api_ctx *ctx, tarray *view) {
  size_t len = 0;
  const char *body = http_body(r, &len);
  return npy_maybe_native(r) && npy_view(body, len, ctx->max_elems, view);
}

static void handle_upload_body(http_req *r, api_ctx *ctx, int64_t *held) {
  terr e;
  terr_clear(&e);
  tarray *a = NULL, view;
  if (npy_native_view(r, ctx, &view)) {
    a = &view;
  } else {
    int64_t cost = upload_cost(r);
    if (cost > *held) {
      if (!upload_reserve(r, cost, cost - *held)) return;
      *held = cost;
    }
    if (parse_upload(r, ctx, &a, &e)) {
      http_reply_error(r, &e);
      return;
    }
  }
  store_array rec;
  int existing = 0;
  int rc = arrays_put(ctx->arrays, http_owner(r), a, &rec, &existing, &e);
  if (a != &view) tarray_free(a);
  if (rc) {
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
  rc |= http_route(srv, "POST", "/v1/arrays", handle_upload, ctx,
                   HTTP_AUTH | HTTP_UPLOAD);
  rc |= http_route(srv, "GET", "/v1/arrays", handle_list, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/arrays/{id}", handle_delete, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/arrays/{id}/data", handle_data, ctx, HTTP_AUTH);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register array routes");
  return T_OK;
}
