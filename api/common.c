/* common.c — what every resource of the API shares: reading a JSON body,
 * answering with a job (whose JSON compute/jobs/json.c writes), an array's metadata,
 * a deletion or an error.
 *
 * A JSON body's parsed tree counts in the transfer budget
 * (--max-transfer-memory) beside the body itself: Jansson's tree takes 10
 * to 75 times the text (16 bytes of tree per byte of "[0,0,...]", 75 for
 * "[{},{},...]"), so a 16 MB body parsed into ~300 MB that nothing
 * counted. Jansson allocates through meter_malloc / meter_free
 * (json_set_alloc_funcs, installed by api_body_meter_install from
 * api_register); while
 * api_body_object parses, a thread-local meter adds up what the tree
 * takes and reserves it for the request (http_reserve_more) a MiB at a
 * time, so the parse fails the moment the budget cannot hold more: 413
 * (field "body") when the budget could never hold it, 503 + Retry-After
 * when other requests hold it now. The reservation is given back with the
 * request (server/request.c also returns the freed pages to the system).
 * Outside a parse the two functions are malloc and free.
 *
 * Threads: called from HTTP handlers (MHD worker threads) and from job
 * completion callbacks (scheduler workers); nothing here holds state.
 */
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "util/util.h"
#include "util/xfer.h"
#include "util/tassert.h"

#define METER_STEP ((int64_t)1024 * 1024)

typedef struct parse_meter {
  http_req *r;
  int64_t held;  /* bytes reserved for the tree so far */
  int64_t used;  /* bytes the tree takes now */
  int refused;   /* the budget said no: every later allocation fails */
  terr err;      /* what it said */
} parse_meter;
static __thread parse_meter *meter_cur;

static void *meter_malloc(size_t n) {
  void *p = malloc(n);
  parse_meter *m = meter_cur;
  if (!p || !m) return p;
  int64_t sz = (int64_t)malloc_usable_size(p);
  if (m->used + sz > m->held) {
    int64_t more = m->used + sz - m->held;
    if (more < METER_STEP) more = METER_STEP;
    if (m->refused || http_reserve_more(m->r, more, &m->err) != T_OK) {
      m->refused = 1;
      free(p);
      return NULL;
    }
    m->held += more;
  }
  m->used += sz;
  T_ASSERT(m->used <= m->held); /* the budget holds what the tree takes */
  return p;
}

static void meter_free(void *p) {
  parse_meter *m = meter_cur;
  if (p && m) m->used -= (int64_t)malloc_usable_size(p);
  /* a tree freed within its parse was counted by it */
  T_ASSERT(!m || m->used >= 0);
  free(p);
}

void api_body_meter_install(void) {
  /* Idempotent, and equivalent to Jansson's own malloc/free outside a
   * parse, so memory allocated before this call may be freed after it. */
  json_set_alloc_funcs(meter_malloc, meter_free);
}

int api_body_object(http_req *r, json_t **out, terr *e) {
  *out = NULL;
  size_t len;
  const char *body = http_body(r, &len);
  if (len == 0) return terr_set(e, T_EINVAL, "body", -1, "a JSON object is required");
  json_error_t je;
  parse_meter m = {.r = r};
  terr_clear(&m.err);
  T_ASSERT(meter_cur == NULL); /* one parse at a time on a thread */
  meter_cur = &m;
  json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  meter_cur = NULL;
  if (m.refused) {
    json_decref(v); /* NULL: the parse failed with the allocation */
    if (m.err.code == T_EUNAVAIL)
      return terr_set(e, T_EUNAVAIL, "", -1,
                      "parsing this %zu byte JSON body takes more than %lld "
                      "bytes, which the server's transfer budget "
                      "(--max-transfer-memory, %lld bytes) cannot hold now: "
                      "retry shortly",
                      len, (long long)m.held, (long long)xfer_budget_limit());
    return terr_set(e, m.err.code ? m.err.code : T_ENOMEM, "body", -1,
                    "this %zu byte JSON body parses into more than %lld bytes, "
                    "more than the server's transfer budget "
                    "(--max-transfer-memory, %lld bytes) holds: send the "
                    "values as an array upload (POST /v1/arrays) instead",
                    len, (long long)m.held, (long long)xfer_budget_limit());
  }
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

void api_reply_deleted(http_req *r, const char *id) {
  http_reply_json(r, 200, json_pack("{s:s, s:b}", "id", id, "deleted", 1));
}

/* The values of a (C order) as nested lists, from dimension d on. */
static void put_values(tbuf *b, const tarray *a, int d, int64_t *at) {
  if (d == a->ndim) {
    if (a->dtype == T_I64) {
      tbuf_json_int(b, ((const int64_t *)a->data)[*at]);
    } else {
      double v = a->dtype == T_F32 ? ((const float *)a->data)[*at]
                                   : ((const double *)a->data)[*at];
      tbuf_json_real(b, v, 0); /* non-finite: null */
    }
    (*at)++;
    return;
  }
  tbuf_adds(b, "[");
  for (int64_t i = 0; i < a->shape[d]; i++) {
    if (i) tbuf_adds(b, ",");
    put_values(b, a, d + 1, at);
  }
  tbuf_adds(b, "]");
}

/* The job's text (jobs_json's of the row j, len bytes) with "data" added
 * to its "result" object when the result is kept in the row and small:
 * nested lists as put_values writes them. The text as it was otherwise
 * (its "result" is a link already). The row in hand is the one read under
 * its owner: only the result's bytes are read (jobs_result_row_npy). */
void api_job_text_data(tbuf *b, api_ctx *ctx, const char *text, size_t len,
                       const job_record *j) {
  api_job_text_data_npy(b, ctx, text, len, j, NULL, 0);
}

void api_job_text_data_npy(tbuf *b, api_ctx *ctx, const char *text,
                           size_t len, const job_record *j, const void *given,
                           size_t given_len) {
  char needle[T_ID_MAX + 40];
  snprintf(needle, sizeof needle, "\"href\":\"/v1/jobs/%s/result\"}", j->id);
  const char *at = strstr(text, needle);
  void *npy = NULL;
  size_t npy_len = 0;
  terr e;
  tarray *a = NULL;
  /* the end's own bytes only for the row they were kept in: a succeeded
   * job without a result file or an output of its own */
  int in_row = j->status == JOB_SUCCEEDED && !j->result_path &&
               j->result.dtype[0] && !j->output_file;
  const void *bytes = given && in_row ? given : NULL;
  size_t nbytes = bytes ? given_len : 0;
  if (at && !bytes &&
      jobs_result_row_npy(ctx->jobs, j, &npy, &npy_len, &e) == 0) {
    bytes = npy;
    nbytes = npy_len;
  }
  if (at && bytes && nbytes <= API_INLINE_RESULT &&
      npy_parse_result(bytes, nbytes, API_INLINE_RESULT, &a, &e) == 0) {
    size_t cut = (size_t)(at - text) + strlen(needle) - 1; /* before '}' */
    tbuf_add(b, text, cut);
    tbuf_adds(b, ",\"data\":");
    int64_t pos = 0;
    put_values(b, a, 0, &pos);
    tbuf_add(b, text + cut, len - cut);
    tarray_free(a);
  } else {
    tbuf_add(b, text, len);
  }
  free(npy);
}

void api_reply_job(http_req *r, api_ctx *ctx, const job_record *j,
                   int status) {
  api_reply_job_data(r, ctx, j, status, 0);
}

void api_reply_job_data(http_req *r, api_ctx *ctx, const job_record *j,
                        int status, int data) {
  size_t len = 0;
  char *text = jobs_json(ctx ? ctx->jobs : NULL, j, 1, &len);
  if (text && data && ctx) {
    tbuf b;
    tbuf_init(&b, 0); /* no cap: the job's text and at most 64 KiB of values */
    api_job_text_data(&b, ctx, text, len, j);
    free(text);
    text = tbuf_take(&b, &len);
  }
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
