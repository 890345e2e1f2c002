/* jobs.c — the /v1/jobs resource: submit, list, read, cancel, delete, result.
 *
 * A handler reads the request, calls the job's owner (compute/jobs/jobs.h: the
 * check, the queue slot, the store row and the queue are its business) and
 * encodes the answer. Submit answers 202 with Location; with ?wait=S the
 * connection is suspended (no HTTP thread is held) until the job ends or S
 * seconds pass, and the answer is then 200 with the finished job, or 202.
 * GET /v1/jobs/{id}?wait=S waits the same way and answers 200 either way.
 *
 * With ?wait and no job result as input (which the insert must find still
 * there: jobs_submit; an uploaded array may be one, its insert's failure
 * answered by jobs_unrecorded) the job's row is committed with the
 * next store write (jobs_submit's async_insert), with a request_id too on
 * one node (its key checked against the committed rows and the keys in
 * flight: compute/jobs/rids.h): the answer comes only after the
 * job's end (or, at the wait's timeout, a jobs_sync) has been committed,
 * and the insert commits no later than that; so the job is still committed
 * before any answer leaves, and a tiny job costs one commit, shared with
 * others.
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
#include "util/datadir.h"
#include "util/util.h"
#include "util/tassert.h"

static void add_location(http_req *r, const char *id) {
  char loc[96];
  snprintf(loc, sizeof loc, "/v1/jobs/%s", id);
  http_add_header(r, "Location", loc);
}

static void reply_job(http_req *r, api_ctx *ctx, const char *id, int status,
                      int data) {
  job_record j;
  terr e;
  if (jobs_get(ctx->jobs, id, NULL, &j, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (status == 0) status = job_status_final(j.status) ? 200 : 202;
  add_location(r, j.id);
  api_reply_job_data(r, ctx, &j, status, data && j.status == JOB_SUCCEEDED);
  store_job_clear(&j);
}

/* ---- waiting for a job ------------------------------------------------ */

/* How a job is answered (the `get` of the functions below): REPLY_GET, a
 * GET's 200 however the job stands (else a submit's 200 or 202 with
 * Location); REPLY_DATA, ?include=result: a succeeded job's small result
 * inline as result.data (api_job_text_data). */
enum { REPLY_GET = 1, REPLY_DATA = 2 };

static void reply_job_rec(http_req *r, api_ctx *ctx, const job_record *j,
                          int status, int get) {
  api_reply_job_data(r, ctx, j, status,
                     (get & REPLY_DATA) && j->status == JOB_SUCCEEDED);
}

/* A ?wait request. Its memory is freed by whoever claims the request (the
 * end callback, the timeout, or the handler when the job had already
 * ended), once the others cannot touch it any more. */
typedef struct waiter {
  pthread_mutex_t mu; /* held while the handler sets up the wait */
  http_req *r;
  api_ctx *ctx;
  uint64_t token;
  int async_insert; /* the row was queued with store_job_insert_async */
  int get;          /* REPLY_GET | REPLY_DATA */
  char id[T_ID_MAX];
} waiter;

/* The answer to a ?wait whose job ended: built on the connection's MHD
 * thread (http_resume_call), from the committed row when the scheduler gave
 * it, else from the store. */
typedef struct wait_answer {
  api_ctx *ctx;
  int async_insert, get;
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
 * have was never recorded (its insert failed): 500, or 507 when the data
 * disk is full (its reserve given to the store). A submit's answer is
 * 200 once the job ended, else 202 with Location; a GET's (get) is 200. */
static void reply_job_stored(http_req *r, api_ctx *ctx, const char *id,
                             int async_insert, int sync, int get) {
  terr e;
  if (async_insert && sync && jobs_sync(ctx->jobs, &e)) {
    http_reply_error(r, &e);
    return;
  }
  job_record j;
  if (jobs_get(ctx->jobs, id, NULL, &j, &e)) {
    if (e.code == T_ENOTFOUND && async_insert)
      jobs_unrecorded(ctx->jobs, id, &e);
    http_reply_error(r, &e);
    return;
  }
  if (!(get & REPLY_GET)) add_location(r, j.id);
  reply_job_rec(r, ctx, &j,
                (get & REPLY_GET) || job_status_final(j.status) ? 200 : 202, get);
  store_job_clear(&j);
}

/* MHD thread, or the thread of http_resume_call when the request can no
 * longer be answered (then maybe the store's writer: no [sync] store call
 * here). The job has ended, so its end (queued after its insert) has been
 * written or has failed, and its insert with it: no store_sync needed. */
static void answer_wait(http_req *r, void *ud) {
  wait_answer *a = ud;
  if (a->have_row) {
    if (!(a->get & REPLY_GET)) add_location(r, a->row.id);
    reply_job_rec(r, a->ctx, &a->row, 200, a->get);
  } else {
    reply_job_stored(r, a->ctx, a->id, a->async_insert, 0, a->get);
  }
  wait_answer_free(a);
}

/* The store's writer thread (the job's end is committed), or the thread
 * that ended an unstarted job: no [sync] store call, nothing slow. Holds
 * one request reference. */
static void on_job_end(void *arg, const char *id, const job_record *ended) {
  waiter *w = arg;
  http_req *r = w->r;
  /* fired for the job it waits on, with its committed row when it has one */
  T_ASSERT(strcmp(id, w->id) == 0 && (!ended || strcmp(ended->id, w->id) == 0));
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
    a->get = w->get;
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
  if (jobs_unwait(w->ctx->jobs, w->token) == 1)
    http_req_unref(r); /* the callback's reference: it will never run */
  reply_job_stored(r, w->ctx, w->id, w->async_insert, 1, w->get);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static void reply_after_wait(http_req *r, api_ctx *ctx, const char *id,
                             double wait_s, int async_insert, int get) {
  waiter *w = calloc(1, sizeof *w);
  if (!w) {
    reply_job_stored(r, ctx, id, async_insert, 1, get);
    return;
  }
  pthread_mutex_init(&w->mu, NULL);
  w->r = r;
  w->ctx = ctx;
  w->async_insert = async_insert;
  w->get = get;
  snprintf(w->id, sizeof w->id, "%s", id);
  pthread_mutex_lock(&w->mu);
  http_defer(r, (int64_t)(wait_s * 1000.0), on_wait_timeout, w);
  http_req_ref(r);
  int rc = jobs_wait_end(ctx->jobs, id, on_job_end, w, &w->token);
  pthread_mutex_unlock(&w->mu);
  if (rc != 0) {
    /* Already finished: answer now, unless the timer got there first. The
     * job left the scheduler after its end's store write, which covered
     * its insert (sched.h): no store_sync, as answer_wait; out of memory
     * for the wait (-1) nothing is known: sync first. A tiny job ends
     * before its wait is set up often (~1 in 5 sync calls here): that
     * sync was a writer round trip on the answer's path. */
    http_req_unref(r);
    if (http_claim(r)) {
      reply_job_stored(r, ctx, id, async_insert, rc < 0, get);
      pthread_mutex_destroy(&w->mu);
      free(w);
    }
  }
}

/* ---- POST /v1/jobs ---------------------------------------------------- */

double api_hold_wait(double wait_s) {
  /* Tests only (never set in production): TESSEL_TEST_WAIT_HOLD_S=S holds a
   * valid wait at most S seconds, so a client's re-wait past the 60 s cap is
   * tested in seconds (clients/python/tests). */
  const char *hold = getenv("TESSEL_TEST_WAIT_HOLD_S");
  if (hold && atof(hold) > 0 && wait_s > atof(hold)) return atof(hold);
  return wait_s;
}

int api_parse_wait(http_req *r, double *wait_s, terr *e) {
  *wait_s = 0;
  const char *w = http_query(r, "wait");
  if (!w) return T_OK;
  if (t_parse_f64(w, wait_s) || !isfinite(*wait_s) || *wait_s < 0 ||
      *wait_s > API_MAX_WAIT_S)
    return terr_set(e, T_EINVAL, "wait", -1,
                    "expected seconds between 0 and %.0f", API_MAX_WAIT_S);
  T_ASSERT(*wait_s >= 0 && *wait_s <= API_MAX_WAIT_S); /* http_defer's ms fit */
  *wait_s = api_hold_wait(*wait_s);
  return T_OK;
}

/* ?include=result (the only value): REPLY_DATA, else 0; 400 naming
 * "include" for anything else. */
static int parse_include(http_req *r, int *flags, terr *e) {
  const char *v = http_query(r, "include");
  *flags = 0;
  if (!v) return T_OK;
  if (strcmp(v, "result") != 0)
    return terr_set(e, T_EINVAL, "include", -1, "expected \"result\"");
  *flags = REPLY_DATA;
  return T_OK;
}

int api_submit_prelude(http_req *r, double *wait_s, json_t **body) {
  terr e;
  terr_clear(&e);
  *body = NULL;
  int rc = api_parse_wait(r, wait_s, &e);
  if (!rc) rc = api_body_object(r, body, &e);
  if (rc) {
    json_decref(*body);
    *body = NULL;
    http_reply_error(r, &e);
  }
  return rc;
}

static void handle_submit(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  double wait_s;
  int inc = 0;
  if (parse_include(r, &inc, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (api_submit_prelude(r, &wait_s, &body)) return;
  char id[T_ID_MAX];
  int retry_after = 1, async_insert = wait_s > 0;
  int rc = jobs_submit(ctx->jobs, http_owner(r), body, &async_insert, id,
                       &retry_after, &e);
  json_decref(body);
  if (rc) {
    if (rc == T_EBUSY) {
      char ra[16];
      snprintf(ra, sizeof ra, "%d", retry_after);
      http_add_header(r, "Retry-After", ra);
    }
    http_reply_error(r, &e);
    return;
  }
  if (wait_s > 0)
    reply_after_wait(r, ctx, id, wait_s, async_insert, inc);
  else /* 202 as documented, even when a tiny job has already ended */
    reply_job(r, ctx, id, 202, inc);
}

/* ---- GET /v1/jobs ----------------------------------------------------- */

static void handle_list(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  jobs_query q = {
      .status = http_query(r, "status"), .kind = http_query(r, "kind"),
      .backend = http_query(r, "backend"), .label = http_query(r, "label"),
      .limit = http_query(r, "limit"), .cursor = http_query(r, "cursor"),
      .q = http_query(r, "q"), .order_by = http_query(r, "order_by"),
      .desc = http_query(r, "desc")};
  char *text = NULL;
  size_t len = 0;
  if (jobs_list_json(ctx->jobs, http_owner(r), &q, &text, &len, &e)) {
    http_reply_error(r, &e);
    return;
  }
  http_reply_buffer(r, 200, "application/json; charset=utf-8", text, len);
}

/* ---- /v1/jobs/{id} ---------------------------------------------------- */

/* With ?wait=S (as a submit's, AIP-151's Wait) the answer waits until the
 * job ends or S seconds pass, then gives the job as it stands (200 either
 * way): a client waits past any one request's cap by asking again. */
static void handle_get(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  job_record j;
  terr e;
  terr_clear(&e);
  double wait_s;
  int inc = 0;
  if (parse_include(r, &inc, &e) || api_parse_wait(r, &wait_s, &e) ||
      jobs_get(ctx->jobs, http_param(r, "id"), http_owner(r), &j, &e)) {
    http_reply_error(r, &e);
    return;
  }
  if (wait_s > 0 && !job_status_final(j.status)) {
    char id[T_ID_MAX];
    snprintf(id, sizeof id, "%s", j.id);
    store_job_clear(&j);
    reply_after_wait(r, ctx, id, wait_s, 0, REPLY_GET | inc);
    return;
  }
  reply_job_rec(r, ctx, &j, 200, REPLY_GET | inc);
  store_job_clear(&j);
}

static void handle_cancel(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  const char *id = http_param(r, "id");
  if (jobs_cancel(ctx->jobs, id, http_owner(r), &e)) {
    http_reply_error(r, &e);
    return;
  }
  reply_job(r, ctx, id, 0, 0);
}

static void handle_delete(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  const char *id = http_param(r, "id");
  if (jobs_delete(ctx->jobs, id, http_owner(r), &e)) {
    http_reply_error(r, &e);
    return;
  }
  api_reply_deleted(r, id);
}

/* GET /v1/jobs/{id}/result and /v1/jobs/{id}/result/{name} (a part). */
static void handle_result(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  jobs_result res;
  if (jobs_result_part_get(ctx->jobs, http_param(r, "id"), http_owner(r),
                           http_param(r, "name"), &res, &e)) {
    http_reply_error(r, &e);
    return;
  }
  const char *to = http_query(r, "layout");
  if (to && !res.layout) { /* the kind's result_layout said: one layout */
    api_reply_terr(r, T_EINVAL, "layout",
                   "this result has one layout: its kind keeps no symmetric "
                   "matrix that may be sent square or condensed");
  } else if (res.npy) {
    api_reply_array_npy(r, ctx, res.npy, res.npy_len, res.layout, to);
    res.npy = NULL; /* taken */
  } else {
    api_reply_array_file(r, ctx, res.path, res.layout, to);
  }
  jobs_result_clear(&res);
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
  rc |= http_route(srv, "GET", "/v1/jobs/{id}/result/{name}", handle_result,
                   ctx, HTTP_AUTH);
  /* The query parameters each route takes (any other is 400; openapi.json
   * lists the same). q, order_by and desc: the list's search and order. */
  static const char *const wait[] = {"wait", "include", NULL};
  static const char *const list[] = {"status", "kind", "backend", "label",
                                     "limit",  "cursor", "q", "order_by",
                                     "desc",   NULL};
  static const char *const result[] = {"format", "limit_rows", "layout", NULL};
  rc |= http_route_query(srv, "POST", "/v1/jobs", wait);
  rc |= http_route_query(srv, "GET", "/v1/jobs", list);
  rc |= http_route_query(srv, "GET", "/v1/jobs/{id}", wait);
  rc |= http_route_query(srv, "GET", "/v1/jobs/{id}/result", result);
  rc |= http_route_query(srv, "GET", "/v1/jobs/{id}/result/{name}", result);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register job routes");
  return T_OK;
}
