/* arrays.c — the /v1/arrays resource: upload, read, download, delete, list.
 *
 * An upload is parsed by its Content-Type (application/x-npy, text/csv,
 * application/json; anything else 415), checked strictly (NaN and Inf are
 * refused in CSV and JSON; .npy keeps them), written to
 * <data>/arrays/<id>.npy (temp name, then rename: a crash never leaves half
 * a file under a real name) and recorded in the store. The same content
 * from the same owner gives the same id (sha256 of dtype, shape and data):
 * the first upload answers 201, a repeat 200 with the existing array.
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
#include <nettle/sha2.h>
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
static void array_digest(const tarray *a, char hex[65]) {
  char shape[256], head[300];
  tshape_str(a->ndim, a->shape, shape, sizeof shape);
  int hl = snprintf(head, sizeof head, "%s|%s|", tdtype_name(a->dtype), shape);
  size_t dlen = (size_t)a->size * tdtype_size(a->dtype);
  struct sha256_ctx h;
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_init(&h);
  sha256_update(&h, (size_t)hl, (const uint8_t *)head);
  if (dlen) sha256_update(&h, dlen, a->data);
  sha256_digest(&h, sizeof digest, digest);
  for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
    snprintf(hex + 2 * i, 3, "%02x", digest[i]);
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

static int write_npy_atomically(const tarray *a, const char *path, terr *e) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return terr_set(e, T_EIO, "", -1, "cannot create %s", tmp);
  int rc = npy_write(f, a, e);
  int err = rc ? errno : 0;
  if (fclose(f) != 0 && !rc) {
    err = errno;
    rc = terr_set(e, T_EIO, "", -1, "cannot write %s", tmp);
  }
  rc = terr_nospace(e, rc, err); /* a full disk: 507 */
  if (!rc && rename(tmp, path) != 0)
    rc = terr_set(e, T_EIO, "", -1, "cannot rename %s", tmp);
  if (rc) unlink(tmp);
  return rc;
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
  store_array rec;
  memset(&rec, 0, sizeof rec);
  t_id_new('a', rec.id);
  if (npy_native_view(r, ctx, &view)) {
    a = &view;
  } else {
    int64_t cost = upload_cost(r);
    if (cost > *held) {
      if (!upload_reserve(r, cost, cost - *held)) return;
      *held = cost;
    }
    if (parse_upload(r, ctx, &a, &e)) goto fail;
  }

  char hex[65], shape[300], path[4096];
  array_digest(a, hex);
  /* The stored shape is JSON: "[2, 3]" is already valid JSON. */
  tshape_str(a->ndim, a->shape, shape, sizeof shape);
  snprintf(path, sizeof path, "%s/arrays/%s.npy", ctx->data_dir, rec.id);
  if (write_npy_atomically(a, path, &e)) goto fail;

  /* Heap copies: the store frees them when the content is already stored. */
  rec.owner = strdup(http_owner(r));
  rec.dtype = strdup(tdtype_name(a->dtype));
  rec.shape = strdup(shape);
  rec.bytes = a->size * (int64_t)tdtype_size(a->dtype);
  rec.sha256 = strdup(hex);
  rec.path = strdup(path);
  rec.created_at = t_wall_ms();
  if (a != &view) tarray_free(a);
  a = NULL;
  if (!rec.owner || !rec.dtype || !rec.shape || !rec.sha256 || !rec.path) {
    unlink(path);
    terr_set(&e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }
  int existing = 0;
  if (store_array_insert(ctx->st, &rec, &existing, &e)) {
    unlink(path);
    goto fail;
  }
  if (existing) {
    unlink(path); /* the same content is already stored under its id */
    http_reply_json(r, 200, api_array_json(&rec));
    store_array_clear(&rec);
    return;
  }
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/arrays/%s", rec.id);
  http_add_header(r, "Location", loc);
  http_reply_json(r, 201, api_array_json(&rec));
  store_array_clear(&rec);
  return;
fail:
  store_array_clear(&rec);
  if (a != &view) tarray_free(a);
  http_reply_error(r, &e);
}

/* The array named by the path, or the error answered (404 for a malformed
 * id or another owner's array): returns non-zero when it answered. */
static int load_array(http_req *r, api_ctx *ctx, store_array *a) {
  const char *id = http_param(r, "id");
  terr e;
  memset(a, 0, sizeof *a);
  int rc = (!id || !t_id_valid('a', id))
               ? terr_set(&e, T_ENOTFOUND, "id", -1, "array '%s' not found",
                          id ? id : "")
               : store_array_get(ctx->st, id, http_owner(r), a, &e);
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
  if (!id || !t_id_valid('a', id)) {
    api_reply_terr(r, T_ENOTFOUND, "id", "array '%s' not found", id ? id : "");
    return;
  }
  char *path = NULL;
  if (store_array_delete(ctx->st, id, http_owner(r), &path, &e)) {
    http_reply_error(r, &e);
    return;
  }
  gpu_resident_drop(id); /* its copy in GPU memory, if any (never blocks) */
  api_reply_deleted(r, id, path);
}

static void handle_list(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  int64_t limit = 50;
  const char *v = http_query(r, "limit");
  if (v && (t_parse_i64(v, &limit) || limit < 1 || limit > 1000)) {
    api_reply_terr(r, T_EINVAL, "limit", "expected an integer from 1 to 1000");
    return;
  }
  const char *cursor = http_query(r, "cursor");
  if (cursor && *cursor && !t_id_valid('a', cursor)) {
    api_reply_terr(r, T_EINVAL, "cursor", "not a cursor from next_cursor");
    return;
  }
  store_array *arrs = NULL;
  int n = 0;
  char next[T_ID_MAX] = "";
  if (store_array_list(ctx->st, http_owner(r), cursor && *cursor ? cursor : NULL,
                       (int)limit, &arrs, &n, next, &e)) {
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
