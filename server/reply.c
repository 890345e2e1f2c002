/* reply.c — building answers and handing them to the connection.
 *
 * Every http_reply_* builds an MHD_Response (which needs no connection and
 * may be built on any thread) and gives it to reply_store. reply_store
 * adds the common headers and stores it on the request under r->mu; then:
 *  - while the handler still runs (the common case) http.c queues it when
 *    the handler returns;
 *  - when the connection is suspended (a deferred request) it calls
 *    MHD_resume_connection; MHD then calls the access handler again on one
 *    of its threads, and http.c queues the stored response there (MHD only
 *    accepts a response from inside that callback).
 * http_resume_call resumes a suspended connection without an answer yet:
 * http.c then calls the given function on the connection's thread, which
 * replies as a handler does (so an answer that costs CPU to build is built
 * there, not on the thread that learned it is due).
 * A second answer is dropped with a log line; so is an answer that comes
 * after MHD completed the request (the client is gone).
 *
 * Ownership: http_reply_json steals `body`; http_reply_buffer takes `buf`
 * (free()d by MHD when sent); http_reply_fd takes `fd` (closed by MHD);
 * http_reply_stream calls done(arg) once, when MHD is finished with it or
 * at once when the response cannot be created.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http_int.h"
#include "util/buf.h"

#define JSON_TYPE "application/json; charset=utf-8"
#define STREAM_BLOCK (256 * 1024)

void reply_store(http_req *r, int status, struct MHD_Response *resp) {
  int unref_timer = 0;
  http_req_ref(r); /* r may complete as soon as the connection resumes */
  pthread_mutex_lock(&r->mu);
  if (r->answered || r->state == REQ_DONE || r->state == REQ_EARLY ||
      r->state == REQ_HELD) {
    int dup = r->answered;
    pthread_mutex_unlock(&r->mu);
    MHD_destroy_response(resp);
    if (dup)
      log_warn("http: second answer to %s %s dropped (request %s)", r->method,
               r->path, r->rid);
    else
      log_info("http: answer to %s %s dropped: the client is gone (%s)",
               r->method, r->path, r->rid);
    http_req_unref(r);
    return;
  }
  MHD_add_response_header(resp, "X-Request-Id", r->rid);
  for (size_t i = 0; i < r->out_headers.n; i++)
    if (MHD_add_response_header(resp, r->out_headers.v[i].k,
                                r->out_headers.v[i].v) != MHD_YES)
      log_warn("http: header %s refused by MHD", r->out_headers.v[i].k);
  if (r->srv && atomic_load(&r->srv->quiescing))
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  r->resp = resp;
  r->status = status;
  r->answered = 1;
  atomic_store(&r->claimed, 1);
  if (r->state == REQ_SUSPENDED) {
    r->state = REQ_RESUMING;
    MHD_resume_connection(r->conn);
  }
  if (r->srv) unref_timer = timer_disarm(r->srv->timer, r);
  pthread_mutex_unlock(&r->mu);
  if (unref_timer) http_req_unref(r);
  http_req_unref(r);
}

void http_resume_call(http_req *r, http_handler fn, void *ud) {
  int unref_timer = 0, now = 0;
  http_req_ref(r); /* r may complete as soon as the connection resumes */
  pthread_mutex_lock(&r->mu);
  if (r->answered || r->call_fn ||
      (r->state != REQ_SUSPENDED && r->state != REQ_HANDLING)) {
    now = 1; /* cannot go through the connection: its answer is dropped */
  } else {
    r->call_fn = fn;
    r->call_ud = ud;
    atomic_store(&r->claimed, 1);
    if (r->state == REQ_SUSPENDED) {
      r->state = REQ_CALLING;
      MHD_resume_connection(r->conn);
    } /* else the handler still runs: http.c calls fn when it returns */
    if (r->srv) unref_timer = timer_disarm(r->srv->timer, r);
  }
  pthread_mutex_unlock(&r->mu);
  if (unref_timer) http_req_unref(r);
  if (now) fn(r, ud);
  http_req_unref(r);
}

void http_add_header(http_req *r, const char *name, const char *value) {
  if (!name || !value || strpbrk(name, "\r\n:") || strpbrk(value, "\r\n")) {
    log_error("http: header refused (empty or with CR/LF): %s",
              name ? name : "(null)");
    return;
  }
  pthread_mutex_lock(&r->mu);
  int late = r->answered, rc = late ? 0 : hdrs_add(&r->out_headers, name, value);
  pthread_mutex_unlock(&r->mu);
  if (late) log_warn("http: header %s added after the answer: ignored", name);
  if (rc) log_error("http: out of memory adding header %s", name);
}

/* A response that owns buf (NULL + 0 allowed). NULL on failure (buf freed). */
static struct MHD_Response *resp_from_buffer(char *buf, size_t len) {
  struct MHD_Response *resp;
  if (!buf || !len) {
    free(buf);
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  } else {
    resp = MHD_create_response_from_buffer_with_free_callback(len, buf, free);
    if (!resp) free(buf);
  }
  return resp;
}

/* Last resort when even an error response cannot be built: MHD then closes
 * the connection (http.c answers MHD_NO). */
static void reply_fail(http_req *r, const char *what) {
  log_error("http: cannot build the %s response for %s %s (%s)", what,
            r->method, r->path, r->rid);
}

static void reply_bytes(http_req *r, int status, const char *ctype, char *buf,
                        size_t len) {
  struct MHD_Response *resp = resp_from_buffer(buf, len);
  if (!resp) {
    reply_fail(r, "buffer");
    return;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                          ctype ? ctype : "application/octet-stream");
  atomic_store(&r->bytes_out, (uint64_t)len);
  reply_store(r, status, resp);
}

void http_reply_buffer(http_req *r, int status, const char *content_type,
                       char *buf, size_t len) {
  reply_bytes(r, status, content_type, buf, len);
}

void http_reply_json(http_req *r, int status, json_t *body) {
  char *raw = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(body);
  char *s = raw ? tjson_short_reals(raw, NULL) : NULL; /* 823.754, not 17 digits */
  free(raw);
  if (!s) {
    reply_error(r, T_EINTERNAL, "", -1, "the answer could not be encoded");
    return;
  }
  size_t len = strlen(s);
  /* jansson's allocator is malloc unless someone changed it. */
  reply_bytes(r, status, JSON_TYPE, s, len);
}

static const short status_of[T__COUNT] = {
    [T_OK] = 200,
    [T_EINVAL] = 400,
    [T_EUNAUTH] = 401,
    [T_ENOTFOUND] = 404,
    [T_EMETHOD] = 405,
    [T_ENOTACCEPT] = 406,
    [T_ECONFLICT] = 409,
    [T_ETOOLARGE] = 413,
    [T_EMEDIA] = 415,
    [T_EBUSY] = 429,
    [T_EUNAVAIL] = 503,
    [T_EINTERNAL] = 500,
    [T_ECANCELED] = 409,
    [T_ETIMEOUT] = 504,
    [T_ENOMEM] = 500,
    [T_EIO] = 500,
    [T_EDEVICE] = 500,
    [T_ENOSPACE] = 507,
    [T_EFORBIDDEN] = 403,
    [T_EMISDIRECTED] = 421,
    [T_ENOTIMPL] = 501,
    [T_ERANGE] = 416,
};

int http_status_of(terr_code code) {
  return (unsigned)code < T__COUNT && status_of[code] ? status_of[code] : 500;
}

char *reply_error_body(http_req *r, const terr *e, int *status) {
  terr_code code = e ? e->code : T_EINTERNAL;
  if (code == T_OK) code = T_EINTERNAL;
  *status = http_status_of(code);
  const char *msg = e && e->message[0] ? e->message : terr_code_name(code);
  char buf[TERR_MSG_MAX + 96];
  if (*status == 500) { /* a bug or a broken disk, not a refusal */
    snprintf(buf, sizeof buf, "%s (request id %s)", msg, r->rid);
    log_error("http: %s %s -> %d %s: %s (request %s)", r->method, r->path,
              *status, terr_code_name(code), msg, r->rid);
  } else {
    snprintf(buf, sizeof buf, "%s", msg);
  }
  char *out = NULL;
  json_t *err = json_object(), *root = json_object();
  if (!err || !root) goto done;
  json_object_set_new(err, "code", json_string(terr_code_name(code)));
  json_object_set_new(err, "message", json_string(buf));
  if (e && e->field[0]) json_object_set_new(err, "field", json_string(e->field));
  if (e && e->position >= 0)
    json_object_set_new(err, "position", json_integer(e->position));
  json_object_set(root, "error", err);
  out = json_dumps(root, JSON_COMPACT);
done:
  json_decref(err);
  json_decref(root);
  return out;
}

void http_reply_error(http_req *r, const terr *e) {
  int status;
  char *s = reply_error_body(r, e, &status);
  if (s) {
    reply_bytes(r, status, JSON_TYPE, s, strlen(s));
    return;
  }
  /* Out of memory: a fixed body still says what happened. */
  static const char oom[] =
      "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    reply_fail(r, "error");
    return;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, JSON_TYPE);
  atomic_store(&r->bytes_out, (uint64_t)(sizeof oom - 1));
  reply_store(r, 500, resp);
}

void reply_error(http_req *r, terr_code code, const char *field, int64_t pos,
                 const char *fmt, ...) {
  terr e;
  va_list ap;
  va_start(ap, fmt);
  terr_vset(&e, code, field, pos, fmt, ap);
  va_end(ap);
  http_reply_error(r, &e);
}

void http_reply_fd(http_req *r, int status, const char *content_type, int fd,
                   uint64_t offset, uint64_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_fd_at_offset64(len, fd, offset);
  if (!resp) {
    close(fd);
    reply_error(r, T_EINTERNAL, "", -1, "cannot stream the file");
    return;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                          content_type ? content_type
                                       : "application/octet-stream");
  atomic_store(&r->bytes_out, len);
  reply_store(r, status, resp);
}

typedef struct stream_ctx {
  http_fill_fn fill;
  void (*done)(void *arg);
  void *arg;
  http_req *r; /* a reference, for the byte count of the access log */
} stream_ctx;

/* Runs on an MHD thread each time the socket can take more. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  stream_ctx *c = cls;
  long n = c->fill(c->arg, pos, buf, max);
  if (n == 0) return MHD_CONTENT_READER_END_OF_STREAM;
  if (n < 0 || (size_t)n > max) {
    log_error("http: stream of %s %s failed at byte %llu (request %s)",
              c->r->method, c->r->path, (unsigned long long)pos, c->r->rid);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  atomic_fetch_add(&c->r->bytes_out, (uint64_t)n);
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  stream_ctx *c = cls;
  if (c->done) c->done(c->arg);
  http_req_unref(c->r);
  free(c);
}

void http_reply_stream(http_req *r, int status, const char *content_type,
                       http_fill_fn fill, void (*done)(void *arg), void *arg) {
  stream_ctx *c = calloc(1, sizeof *c);
  struct MHD_Response *resp = NULL;
  if (c) {
    c->fill = fill;
    c->done = done;
    c->arg = arg;
    c->r = r;
    http_req_ref(r);
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                             stream_read, c, stream_free);
    if (!resp) http_req_unref(r);
  }
  if (!resp) {
    free(c);
    if (done) done(arg);
    reply_error(r, T_EINTERNAL, "", -1, "cannot create the stream");
    return;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                          content_type ? content_type
                                       : "application/octet-stream");
  reply_store(r, status, resp);
}
