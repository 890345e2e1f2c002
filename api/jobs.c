/* jobs.c — the /v1/jobs resource: submit, list, read, cancel, delete, result.
 *
 * Submit (POST /v1/jobs[?wait=S]): the body is checked field by field
 * (unknown fields refused), the kind checks its params and estimates the
 * job (sched_check: 400, 413, 503), a queue slot is reserved (429 with
 * Retry-After), the job is committed to the store (idempotent by
 * request_id: the same body returns the original job, another body is 409)
 * and only then queued and answered 202 with Location. With ?wait the
 * connection is suspended (no HTTP thread is held) until the job ends or
 * S seconds pass; the answer is then 200 with the finished job, or 202.
 *
 * With ?wait and no request_id the insert is [async]
 * (store_job_insert_async): the answer comes only after the job's end (or,
 * at the wait's timeout, a store_sync) has been committed, and the insert
 * commits no later than that; so the job is still committed before any
 * answer leaves, and a tiny job costs one commit, shared with others.
 *
 * Threads: handlers run on MHD worker threads; on_job_end runs on the
 * store's writer thread once the job's end is committed (it only claims
 * the request and hands it a copy of the row: the JSON is built by
 * answer_wait on the connection's own MHD thread); on_wait_timeout on the
 * server's timer thread. A waiter's memory is freed by whichever of those
 * claims the request (see reply_after_wait).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "array/store_source.h"
#include "util/util.h"

#define MAX_WAIT_S 60.0
#define DEFAULT_PRIORITY 5

static void reply_job(http_req *r, api_ctx *ctx, const char *id, int status) {
  store_job j;
  terr e;
  memset(&j, 0, sizeof j);
  if (store_job_get(ctx->st, id, NULL, &j, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (status == 0) status = job_status_final(j.status) ? 200 : 202;
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/jobs/%s", j.id);
  http_add_header(r, "Location", loc);
  api_reply_job(r, ctx, &j, status);
  store_job_clear(&j);
}

/* ---- waiting for a job ------------------------------------------------ */

/* A ?wait request. Its memory is freed by whoever claims the request (the
 * end callback, the timeout, or the handler when the job had already
 * ended), once the others cannot touch it any more. */
typedef struct waiter {
  pthread_mutex_t mu; /* held while the handler sets up the wait */
  http_req *r;
  api_ctx *ctx;
  uint64_t token;
  int async_insert; /* the row was queued with store_job_insert_async */
  char id[T_ID_MAX];
} waiter;

/* The answer to a ?wait whose job ended: built on the connection's MHD
 * thread (http_resume_call), from the committed row when the scheduler gave
 * it, else from the store. */
typedef struct wait_answer {
  api_ctx *ctx;
  int async_insert;
  int have_row;
  store_job row;
  char id[T_ID_MAX];
} wait_answer;

static void wait_answer_free(wait_answer *a) {
  if (a->have_row) store_job_clear(&a->row);
  free(a);
}

/* Answer from the store. With an async insert: after a store_sync when
 * `sync` (the insert may still be queued), and a job the store does not
 * have was never recorded (its insert failed): 500. */
static void reply_job_stored(http_req *r, api_ctx *ctx, const char *id,
                             int async_insert, int sync) {
  terr e;
  if (async_insert && sync && store_sync(ctx->st, &e)) {
    http_reply_error(r, &e);
    return;
  }
  store_job j;
  memset(&j, 0, sizeof j);
  if (store_job_get(ctx->st, id, NULL, &j, &e)) {
    if (e.code == T_ENOTFOUND && async_insert)
      terr_set(&e, T_EINTERNAL, "", -1, "job %s could not be recorded", id);
    http_reply_error(r, &e);
    return;
  }
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/jobs/%s", j.id);
  http_add_header(r, "Location", loc);
  api_reply_job(r, ctx, &j, job_status_final(j.status) ? 200 : 202);
  store_job_clear(&j);
}

/* MHD thread, or the thread of http_resume_call when the request can no
 * longer be answered (then maybe the store's writer: no [sync] store call
 * here). The job has ended, so its end (queued after its insert) has been
 * written or has failed, and its insert with it: no store_sync needed. */
static void answer_wait(http_req *r, void *ud) {
  wait_answer *a = ud;
  if (a->have_row) {
    char loc[96];
    snprintf(loc, sizeof loc, "/v1/jobs/%s", a->row.id);
    http_add_header(r, "Location", loc);
    api_reply_job(r, a->ctx, &a->row, 200);
  } else {
    reply_job_stored(r, a->ctx, a->id, a->async_insert, 0);
  }
  wait_answer_free(a);
}

/* The store's writer thread (the job's end is committed), or the thread
 * that ended an unstarted job: no [sync] store call, nothing slow. Holds
 * one request reference. */
static void on_job_end(void *arg, const char *id, const store_job *ended) {
  waiter *w = arg;
  http_req *r = w->r;
  /* The handler may still be setting the wait up (it holds w->mu from
   * http_defer to sched_wait_end's return): w is freed below. */
  pthread_mutex_lock(&w->mu);
  pthread_mutex_unlock(&w->mu);
  if (!http_claim(r)) {
    /* The timeout claimed the request first; it frees w once sched_unwait
     * has seen this callback return. */
    http_req_unref(r);
    return;
  }
  wait_answer *a = calloc(1, sizeof *a);
  if (a) {
    a->ctx = w->ctx;
    a->async_insert = w->async_insert;
    snprintf(a->id, sizeof a->id, "%s", w->id);
    a->have_row = ended && store_job_copy(&a->row, ended) == 0;
    http_resume_call(r, answer_wait, a);
  } else {
    api_reply_terr(r, T_ENOMEM, "", "out of memory for the answer");
  }
  http_req_unref(r);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* Timer thread: the wait ran out (the server claimed the request for us). */
static void on_wait_timeout(http_req *r, void *arg) {
  waiter *w = arg;
  pthread_mutex_lock(&w->mu);
  pthread_mutex_unlock(&w->mu);
  if (sched_unwait(w->ctx->sc, w->token) == 1)
    http_req_unref(r); /* the callback's reference: it will never run */
  reply_job_stored(r, w->ctx, w->id, w->async_insert, 1);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static void reply_after_wait(http_req *r, api_ctx *ctx, const char *id,
                             double wait_s, int async_insert) {
  waiter *w = calloc(1, sizeof *w);
  if (!w) {
    reply_job_stored(r, ctx, id, async_insert, 1);
    return;
  }
  pthread_mutex_init(&w->mu, NULL);
  w->r = r;
  w->ctx = ctx;
  w->async_insert = async_insert;
  snprintf(w->id, sizeof w->id, "%s", id);
  pthread_mutex_lock(&w->mu);
  http_defer(r, (int64_t)(wait_s * 1000.0), on_wait_timeout, w);
  http_req_ref(r);
  int rc = sched_wait_end(ctx->sc, id, on_job_end, w, &w->token);
  pthread_mutex_unlock(&w->mu);
  if (rc == 1) {
    /* Already finished: answer now, unless the timer got there first. */
    http_req_unref(r);
    if (http_claim(r)) {
      reply_job_stored(r, ctx, id, async_insert, 1);
      pthread_mutex_destroy(&w->mu);
      free(w);
    }
  }
}

/* ---- POST /v1/jobs ---------------------------------------------------- */

static int parse_wait(http_req *r, double *wait_s, terr *e) {
  *wait_s = 0;
  const char *w = http_query(r, "wait");
  if (!w) return T_OK;
  if (t_parse_f64(w, wait_s) || !isfinite(*wait_s) || *wait_s < 0 ||
      *wait_s > MAX_WAIT_S)
    return terr_set(e, T_EINVAL, "wait", -1,
                    "expected seconds between 0 and %.0f", MAX_WAIT_S);
  return T_OK;
}

/* An optional string field of minlen..maxlen characters: *out is NULL when
 * absent. */
static int opt_string(json_t *body, const char *key, size_t minlen,
                      size_t maxlen, const char **out, terr *e) {
  json_t *v = json_object_get(body, key);
  *out = NULL;
  if (!v) return T_OK;
  if (!json_is_string(v) || json_string_length(v) < minlen ||
      json_string_length(v) > maxlen)
    return terr_set(e, T_EINVAL, key, -1,
                    "expected a string of %zu to %zu characters", minlen,
                    maxlen);
  *out = json_string_value(v);
  return T_OK;
}

/* The envelope of a job submission, checked. */
typedef struct submission {
  const kind_ops *kind;
  tbackend backend;
  int priority;
  double timeout_s;
  const char *request_id, *label;
  json_t *params;
} submission;

static int parse_submission(json_t *body, submission *s, terr *e) {
  static const char *const keys[] = {"kind", "backend", "priority", "timeout_s",
                                     "request_id", "label", "params", NULL};
  int rc = api_only_keys(body, "", keys, e);
  if (rc) return rc;
  json_t *v = json_object_get(body, "kind");
  if (!json_is_string(v))
    return terr_set(e, T_EINVAL, "kind", -1,
                    "required: one of map, reduce, matmul, geodesic");
  s->kind = kind_find(json_string_value(v));
  if (!s->kind)
    return terr_set(e, T_EINVAL, "kind", -1,
                    "'%s' is not one of map, reduce, matmul, geodesic",
                    json_string_value(v));
  s->backend = B_AUTO;
  v = json_object_get(body, "backend");
  if (v) {
    int b = json_is_string(v) ? tbackend_parse(json_string_value(v)) : -1;
    if (b < 0)
      return terr_set(e, T_EINVAL, "backend", -1,
                      "expected one of auto, serial, cpu, cuda, compare");
    s->backend = (tbackend)b;
  }
  s->priority = DEFAULT_PRIORITY;
  v = json_object_get(body, "priority");
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 9)
      return terr_set(e, T_EINVAL, "priority", -1,
                      "expected an integer from 0 to 9 (higher runs first)");
    s->priority = (int)json_integer_value(v);
  }
  s->timeout_s = 0;
  v = json_object_get(body, "timeout_s");
  if (v) {
    if (!json_is_number(v) || !(json_number_value(v) > 0) ||
        json_number_value(v) > 86400)
      return terr_set(e, T_EINVAL, "timeout_s", -1,
                      "expected seconds, more than 0 and at most 86400");
    s->timeout_s = json_number_value(v);
  }
  if (opt_string(body, "request_id", 1, 64, &s->request_id, e) ||
      opt_string(body, "label", 0, 200, &s->label, e))
    return e->code;
  s->params = json_object_get(body, "params");
  if (!json_is_object(s->params))
    return terr_set(e, T_EINVAL, "params", -1, "required: a JSON object");
  return T_OK;
}

static void handle_submit(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  char *params_text = NULL, *canon = NULL, *estimate = NULL;
  store_job j;
  memset(&j, 0, sizeof j);
  int reserved = 0;
  double wait_s;
  submission s;
  memset(&s, 0, sizeof s);

  if (parse_wait(r, &wait_s, &e) || api_body_object(r, &body, &e) ||
      parse_submission(body, &s, &e))
    goto fail;

  tenv env;
  tenv_from_store(&env, ctx->st, http_owner(r), ctx->max_elems);
  job_estimate est;
  memset(&est, 0, sizeof est);
  if (sched_check(ctx->sc, s.kind, s.params, &env, s.backend, &est, &e))
    goto fail;

  int retry_after = 1;
  if (sched_reserve(ctx->sc, &retry_after, &e)) {
    if (e.code == T_EBUSY) {
      char ra[16];
      snprintf(ra, sizeof ra, "%d", retry_after);
      http_add_header(r, "Retry-After", ra);
    }
    goto fail;
  }
  reserved = 1;

  params_text = json_dumps(s.params, JSON_COMPACT);
  /* The body's hash tells a retry (same request_id, same body) from a
   * reuse of the key; without a key nothing compares it. */
  canon = s.request_id ? json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  if (!params_text || (s.request_id && !canon)) {
    terr_set(&e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }
  char hash[65] = "";
  if (canon) t_sha256_hex(canon, strlen(canon), hash);
  /* The submit-time estimate; the router adds its per-backend figures when
   * the job starts. "size" feeds the dashboard's performance chart. */
  json_t *ej = json_pack("{s:I, s:f, s:I, s:I}", "size", (json_int_t)est.size,
                         "work", est.work, "out_bytes",
                         (json_int_t)est.out_bytes, "in_bytes",
                         (json_int_t)est.in_bytes);
  estimate = json_dumps(ej, JSON_COMPACT);
  json_decref(ej);

  /* The store frees these strings (and replaces the job) when the
   * request_id names an earlier job, so they are all heap copies. */
  t_id_new('j', j.id);
  j.owner = strdup(http_owner(r));
  j.kind = strdup(s.kind->name);
  j.params = params_text;
  params_text = NULL;
  j.status = JOB_QUEUED;
  j.backend_requested = strdup(tbackend_name(s.backend));
  j.estimate = estimate;
  estimate = NULL;
  j.priority = s.priority;
  j.label = s.label ? strdup(s.label) : NULL;
  j.request_id = s.request_id ? strdup(s.request_id) : NULL;
  j.body_hash = canon ? strdup(hash) : NULL;
  j.timeout_s = s.timeout_s > 0 ? s.timeout_s : ctx->default_timeout_s;
  j.created_at = t_wall_ms();
  j.max_abs_diff = NAN;
  if (!j.owner || !j.kind || !j.backend_requested || (canon && !j.body_hash) ||
      (s.label && !j.label) || (s.request_id && !j.request_id)) {
    terr_set(&e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }

  int existing = 0;
  store_job stored = j; /* insert may replace it with the original job */
  memset(&j, 0, sizeof j); /* stored owns the strings now */
  /* With ?wait (and no idempotency key to check) nothing is answered
   * before the job's end, or the wait's end, has been committed, which
   * commits the insert too: it need not be waited for here, and then
   * usually shares the end's transaction. */
  int async_insert = wait_s > 0 && !s.request_id;
  if ((async_insert ? store_job_insert_async(ctx->st, &stored, &e)
                    : store_job_insert(ctx->st, &stored, &existing, &e))) {
    store_job_clear(&stored);
    goto fail;
  }
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "%s", stored.id);
  if (existing) {
    sched_unreserve(ctx->sc);
    reserved = 0;
  } else {
    reserved = 0; /* enqueue takes the slot, whatever it answers */
    if (sched_enqueue_checked(ctx->sc, &stored, s.params, &est, &e)) {
      store_job_clear(&stored);
      goto fail;
    }
  }
  store_job_clear(&stored);
  free(params_text);
  free(canon);
  free(estimate);
  json_decref(body);
  if (wait_s > 0)
    reply_after_wait(r, ctx, id, wait_s, async_insert);
  else /* 202 as documented, even when a tiny job has already ended */
    reply_job(r, ctx, id, 202);
  return;

fail:
  if (reserved) sched_unreserve(ctx->sc);
  store_job_clear(&j);
  free(params_text);
  free(canon);
  free(estimate);
  json_decref(body);
  http_reply_error(r, &e);
}

/* ---- GET /v1/jobs ----------------------------------------------------- */

static void handle_list(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  store_job_filter f = {.owner = http_owner(r), .status = -1, .limit = 50};
  const char *v;
  if ((v = http_query(r, "status"))) {
    f.status = job_status_parse(v);
    if (f.status < 0) {
      api_reply_terr(r, T_EINVAL, "status",
                     "'%s' is not one of queued, running, succeeded, failed, "
                     "canceled", v);
      return;
    }
  }
  if ((v = http_query(r, "kind"))) {
    if (!kind_find(v)) {
      api_reply_terr(r, T_EINVAL, "kind",
                     "'%s' is not one of map, reduce, matmul, geodesic", v);
      return;
    }
    f.kind = v;
  }
  if ((v = http_query(r, "backend"))) {
    if (tbackend_parse(v) < 0) {
      api_reply_terr(r, T_EINVAL, "backend",
                     "'%s' is not one of auto, serial, cpu, cuda, compare", v);
      return;
    }
    f.backend = v;
  }
  if ((v = http_query(r, "label"))) f.label = v;
  if ((v = http_query(r, "limit"))) {
    int64_t lim;
    if (t_parse_i64(v, &lim) || lim < 1 || lim > 1000) {
      api_reply_terr(r, T_EINVAL, "limit", "expected an integer from 1 to 1000");
      return;
    }
    f.limit = (int)lim;
  }
  if ((v = http_query(r, "cursor")) && *v) {
    if (!t_id_valid('j', v)) {
      api_reply_terr(r, T_EINVAL, "cursor", "not a cursor from next_cursor");
      return;
    }
    f.cursor = v;
  }
  store_job *jobs = NULL;
  int n = 0;
  char next[T_ID_MAX] = "";
  if (store_job_list(ctx->st, &f, &jobs, &n, next, &e)) {
    http_reply_error(r, &e);
    return;
  }
  json_t *arr = json_array();
  for (int i = 0; i < n; i++) {
    json_array_append_new(arr, api_job_json(ctx, &jobs[i], 0));
    store_job_clear(&jobs[i]);
  }
  free(jobs);
  http_reply_json(r, 200,
                  json_pack("{s:o, s:o}", "jobs", arr, "next_cursor",
                            next[0] ? json_string(next) : json_null()));
}

/* ---- /v1/jobs/{id} ---------------------------------------------------- */

/* The job named by the path, or the error answered (404 for a malformed
 * id or another owner's job): returns non-zero when it answered. */
static int load_job(http_req *r, api_ctx *ctx, store_job *j) {
  const char *id = http_param(r, "id");
  terr e;
  memset(j, 0, sizeof *j);
  int rc = (!id || !t_id_valid('j', id))
               ? terr_set(&e, T_ENOTFOUND, "id", -1, "job '%s' not found",
                          id ? id : "")
               : store_job_get(ctx->st, id, http_owner(r), j, &e);
  if (rc) http_reply_error(r, &e);
  return rc;
}

static void handle_get(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  store_job j;
  if (load_job(r, ctx, &j)) return;
  api_reply_job(r, ctx, &j, 200);
  store_job_clear(&j);
}

static void handle_cancel(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  store_job j;
  terr e;
  if (load_job(r, ctx, &j)) return;
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "%s", j.id);
  job_status was = j.status;
  store_job_clear(&j);
  if (job_status_final(was)) {
    api_reply_terr(r, T_ECONFLICT, "id", "job %s has already %s", id,
                   job_status_name(was));
    return;
  }
  int rc = sched_cancel(ctx->sc, id, http_owner(r), &e);
  if (rc == T_ENOTFOUND || rc == T_ECONFLICT) {
    api_reply_terr(r, T_ECONFLICT, "id", "job %s has already finished", id);
    return;
  }
  if (rc) {
    http_reply_error(r, &e);
    return;
  }
  reply_job(r, ctx, id, 0);
}

static void handle_delete(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  const char *id = http_param(r, "id");
  if (!id || !t_id_valid('j', id)) {
    api_reply_terr(r, T_ENOTFOUND, "id", "job '%s' not found", id ? id : "");
    return;
  }
  char *path = NULL;
  if (store_job_delete(ctx->st, id, http_owner(r), &path, &e)) {
    if (e.code == T_ECONFLICT)
      terr_set(&e, T_ECONFLICT, "id", -1,
               "job %s has not finished: cancel it first", id);
    http_reply_error(r, &e);
    return;
  }
  api_reply_deleted(r, id, path);
}

static void handle_result(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  store_job j;
  if (load_job(r, ctx, &j)) return;
  if (j.status != JOB_SUCCEEDED || (!j.result_path && !j.result)) {
    api_reply_terr(r, j.status == JOB_SUCCEEDED ? T_ENOTFOUND : T_ECONFLICT,
                   "id", "job %s is %s: it has no result", j.id,
                   job_status_name(j.status));
    store_job_clear(&j);
    return;
  }
  /* A small result lives in the job's row (sched/run.c). */
  char *npy = NULL;
  size_t npy_len = 0;
  if (!j.result_path) {
    terr e2;
    void *buf = NULL;
    int rc = store_job_result_npy(ctx->st, j.id, NULL, &buf, &npy_len, &e2);
    npy = buf;
    if (rc) {
      if (e2.code == T_ENOTFOUND)
        terr_set(&e2, T_ENOTFOUND, "id", -1, "job %s has no result", j.id);
      http_reply_error(r, &e2);
      store_job_clear(&j);
      return;
    }
  }
  const char *from = NULL, *to = http_query(r, "layout");
  json_t *params = NULL;
  if (strcmp(j.kind, "geodesic") == 0) {
    params = json_loads(j.params, 0, NULL);
    json_t *targets = params ? json_object_get(params, "targets") : NULL;
    const char *l = params ? json_string_value(json_object_get(params, "layout")) : NULL;
    from = (targets && !json_is_null(targets)) ? NULL : (l ? l : "square");
  }
  if (to && !from) {
    api_reply_terr(r, T_EINVAL, "layout",
                   "only a geodesic matrix without targets can change layout");
  } else if (npy) {
    api_reply_array_npy(r, ctx, npy, npy_len, from, to);
    npy = NULL;
  } else {
    api_reply_array_file(r, ctx, j.result_path, from, to);
  }
  free(npy);
  json_decref(params);
  store_job_clear(&j);
}

int api_jobs_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  rc |= http_route(srv, "POST", "/v1/jobs", handle_submit, ctx, HTTP_AUTH | HTTP_JSON);
  rc |= http_route(srv, "GET", "/v1/jobs", handle_list, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/jobs/{id}", handle_get, ctx, HTTP_AUTH);
  rc |= http_route(srv, "DELETE", "/v1/jobs/{id}", handle_delete, ctx, HTTP_AUTH);
  rc |= http_route(srv, "POST", "/v1/jobs/{id}/cancel", handle_cancel, ctx,
                   HTTP_AUTH | HTTP_JSON);
  rc |= http_route(srv, "GET", "/v1/jobs/{id}/result", handle_result, ctx,
                   HTTP_AUTH);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register job routes");
  return T_OK;
}
