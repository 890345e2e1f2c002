/* request.c — the request object handed to handlers.
 *
 * A request is created on MHD's first callback for it. Everything a
 * handler may read (method, path, decoded path segments, headers, query
 * arguments, request id, owner) is copied out of MHD at that point, so a
 * deferred request stays readable from any thread after MHD has let go of
 * the connection. The body is appended by http.c while it is read.
 *
 * Lifetime: a reference count starts at 1, owned by MHD (dropped in the
 * completion callback); the deadline timer holds one while armed, a
 * streaming response one until MHD frees it, and handlers may take more
 * with http_req_ref. The last unref frees the request and whatever answer
 * it still holds.
 *
 * http_claim is an atomic once-flag shared by whoever wants to answer a
 * deferred request: the first caller wins and must reply. Replying also
 * sets it, so a deadline that fires after an answer does nothing.
 *
 * Memory given back: a request that held TRIM_MIN or more of the transfer
 * budget (a large body and the JSON tree parsed from it: tens to hundreds
 * of MB in small blocks) calls malloc_trim when freed. glibc keeps freed
 * small blocks in its arenas for reuse, so without it an idle daemon kept
 * ~1.3 GB after four 16 MB inline-JSON bodies; malloc_trim returns every
 * free page of every arena to the system (a few ms, only after such
 * requests).
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http_int.h"
#include "util/xfer.h"
#include "util/vec.h"

#define TRIM_MIN ((int64_t)8 * 1024 * 1024)

int hdrs_add(http_hdrs *h, const char *k, const char *v) {
  if (tvec_reserve(h, h->n + 1)) return -1;
  char *kk = strdup(k), *vv = strdup(v ? v : "");
  if (!kk || !vv) {
    free(kk);
    free(vv);
    return -1;
  }
  h->v[h->n].k = kk;
  h->v[h->n++].v = vv;
  return 0;
}

void hdrs_free(http_hdrs *h) {
  for (size_t i = 0; i < h->n; i++) {
    free(h->v[i].k);
    free(h->v[i].v);
  }
  free(h->v);
  memset(h, 0, sizeof *h);
}

const char *hdrs_get(const http_hdrs *h, const char *k, int icase) {
  for (size_t i = 0; i < h->n; i++)
    if ((icase ? strcasecmp(h->v[i].k, k) : strcmp(h->v[i].k, k)) == 0)
      return h->v[i].v;
  return NULL;
}

typedef struct copy_ctx {
  http_hdrs *h;
  int decode; /* query arguments arrive %-encoded (see http.c) */
  int failed;
} copy_ctx;

static enum MHD_Result copy_kv(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *value) {
  copy_ctx *c = cls;
  (void)kind;
  if (hdrs_add(c->h, key ? key : "", value ? value : "") != 0) {
    c->failed = 1;
    return MHD_NO;
  }
  if (c->decode) {
    http_kv *kv = &c->h->v[c->h->n - 1];
    if (url_decode_inplace(kv->k) != 0 || url_decode_inplace(kv->v) != 0)
      c->failed = 2;
  }
  return MHD_YES;
}

/* 1 when the client's X-Request-Id can be echoed: 1-64 of [A-Za-z0-9._-]. */
static int rid_sane(const char *s) {
  size_t n = 0;
  for (; s[n]; n++) {
    char c = s[n];
    if (n >= 64) return 0;
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return n > 0;
}

http_req *req_new(http_server *s, struct MHD_Connection *c, const char *url,
                  const char *method) {
  http_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  atomic_init(&r->refs, 1);
  atomic_init(&r->claimed, 0);
  atomic_init(&r->bytes_out, 0);
  pthread_mutex_init(&r->mu, NULL);
  r->srv = s;
  r->conn = c;
  r->state = REQ_READING;
  r->timer_idx = -1;
  r->declared = -1;
  r->t0 = t_now_ms();
  r->method = strdup(method ? method : "");
  /* With the identity unescape callback MHD leaves the path %-encoded. */
  r->path = strdup(url ? url : "");
  if (!r->method || !r->path) goto fail;
  copy_ctx hc = {&r->headers, 0, 0}, qc = {&r->query, 1, 0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, copy_kv, &hc);
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, copy_kv, &qc);
  if (hc.failed || qc.failed == 1) goto fail;
  if (qc.failed == 2) r->bad_query = 1;
  const char *rid = hdrs_get(&r->headers, "X-Request-Id", 1);
  if (rid && rid_sane(rid))
    memcpy(r->rid, rid, strlen(rid) + 1);
  else
    t_id_new('r', r->rid);
  return r;
fail:
  http_req_unref(r);
  return NULL;
}

static void req_free(http_req *r) {
  if (r->sink_st) r->sink->close(r->sink_st);
  if (r->resp) MHD_destroy_response(r->resp);
  free(r->method);
  free(r->path);
  path_segs_free(&r->segs);
  for (int i = 0; i < ROUTE_MAX_PARAMS; i++) free(r->pname_own[i]);
  hdrs_free(&r->headers);
  hdrs_free(&r->query);
  hdrs_free(&r->out_headers);
  free(r->body);
  xfer_release(r->xfer_held);
  if (r->xfer_held >= TRIM_MIN) malloc_trim(0);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

void *http_sink_state(const http_req *r) { return r->sink_st; }
void http_sink_clear(http_req *r) { r->sink_st = NULL; }

void http_req_ref(http_req *r) {
  atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void http_req_unref(http_req *r) {
  if (!r) return;
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
    req_free(r);
}

int http_claim(http_req *r) {
  return atomic_exchange_explicit(&r->claimed, 1, memory_order_acq_rel) == 0;
}

const char *http_method(const http_req *r) { return r->method; }
const char *http_path(const http_req *r) { return r->path; }

const char *http_param(const http_req *r, const char *name) {
  for (int i = 0; i < r->match.nparam; i++)
    if (strcmp(r->match.pname[i], name) == 0) return r->match.pval[i];
  return NULL;
}

const char *http_query(const http_req *r, const char *name) {
  return hdrs_get(&r->query, name, 0);
}

const char *http_header(const http_req *r, const char *name) {
  return hdrs_get(&r->headers, name, 1);
}

const char *http_body(const http_req *r, size_t *len) {
  if (len) *len = r->body_len;
  return r->body ? r->body : "";
}

const char *http_owner(const http_req *r) { return r->owner; }
const char *http_request_id(const http_req *r) { return r->rid; }
