/* batch.c — many jobs per request: POST /v1/jobs:batch and POST /v1/jobs:get.
 *
 * jobs:batch hands its "jobs" array to compute/jobs (jobs_submit_batch: each
 * item through the one submit path, the batch refused whole only for its
 * shape) and answers 200 {"jobs": [...]}, item i the job record or
 * {"error": {...}} (its field "jobs[i]..."), in the order sent. jobs:get
 * answers the records of "ids" in order, an id not found (or another
 * owner's) as {"id", "error": not_found}, the others unharmed.
 *
 * Both may wait ("?wait=S" on jobs:batch, "wait": S in jobs:get's body, S
 * at most API_MAX_WAIT_S): the connection is suspended (http_defer) and one
 * end callback is registered per job not yet ended (jobs_wait_end); the
 * last callback to run, or the timer, claims the request and the answer
 * is read from the store then: a wait ends when every job has ended, not
 * after a time. "Read" costs no SELECT for most tiny jobs: an ended job's
 * row comes from the store's memory of ended rows (db/sqlite), a batch's
 * item not ended yet is its row as committed at submit (jobs_batch_item.row,
 * shown while the scheduler holds the job, so never older than the
 * store's), and a final row jobs:get read once is not read again. On a
 * cluster store (PostgreSQL), where every read is a round trip and the
 * rows of jobs other nodes ended are not in memory, the items the answer
 * must read are read together (jobs_get_many: one SELECT per 256; it was
 * one SELECT an item, a job's commonest statement). A multi-wait (mwait)
 * is freed by whoever claims the request, once no callback can touch it:
 * the handler holds mu while it registers, a callback takes mu to count
 * itself down, and the timer removes every registration (jobs_unwait
 * returns only after a firing callback has returned) before it frees.
 *
 * "include": ["result"] in either body adds "data" to the "result" object
 * ({"dtype", "shape", "bytes", "href"}) of each succeeded job whose result
 * is kept in its row (util: small results, compute/sched) in at most
 * API_INLINE_RESULT bytes: its values as nested lists (non-finite values
 * as null, as the JSON format of GET .../result writes them; common.c's
 * api_job_text_data); any other result stays a link (its "href"). A job
 * waited for here hands its end's own bytes of that result to its
 * callback (jobs_wait_result), which keeps a copy for the answer: the
 * answer reads none back (one SELECT a job was ~45 % of the answer's
 * CPU for the seeds' 100 tiny sums).
 * "fields" in either body is a read mask (fields.c): each job answered
 * with only the members named.
 *
 * The answer's items are written apart on the batch checkers
 * (jobs.checkers, compute/jobs/batch.c) and the answering thread, each
 * into its own buffer, then joined in order.
 *
 * Threads: handlers on MHD threads; end callbacks on the store's writer
 * (they only count down and claim); the timeout on the timer thread; the
 * items' texts also on the checkers.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "util/buf.h"
#include "util/pool.h"
#include "util/util.h"

#define API_GET_MAX JOBS_BATCH_MAX

struct mwait;
/* One waited item: the arg of its end callback. */
typedef struct mwait_one {
  struct mwait *m;
  int i;
} mwait_one;

typedef struct mwait {
  pthread_mutex_t mu;
  http_req *r;
  api_ctx *ctx;
  char owner[128];
  int n, pending, include_result;
  int submitted; /* jobs:batch (its ids were just submitted) */
  api_fields fields; /* "fields": the members each job is answered with */
  jobs_batch_item *items; /* ids (rc 0) or errors, in the order asked */
  uint64_t *tokens;
  int *waiting; /* tokens[i] is registered */
  int ended;    /* every waited job's end fired (on_one_end) [mu] */
  mwait_one *ones; /* per item: its callback's arg */
  /* per item: the result its end kept in the row (on_one_end's copy, with
   * include only), so that the answer does not read it back; NULL: none */
  void **npy;
  size_t *npy_len;
} mwait;

static void mwait_free(mwait *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->mu);
  for (int i = 0; i < m->n; i++) jobs_batch_item_clear(&m->items[i]);
  for (int i = 0; m->npy && i < m->n; i++) free(m->npy[i]);
  free(m->items);
  free(m->tokens);
  free(m->waiting);
  free(m->ones);
  free(m->npy);
  free(m->npy_len);
  free(m);
}

static mwait *mwait_new(http_req *r, api_ctx *ctx, int n) {
  mwait *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->mu, NULL);
  m->r = r;
  m->ctx = ctx;
  m->n = n;
  const char *o = http_owner(r);
  snprintf(m->owner, sizeof m->owner, "%s", o ? o : "");
  m->items = calloc((size_t)(n ? n : 1), sizeof *m->items);
  m->tokens = calloc((size_t)(n ? n : 1), sizeof *m->tokens);
  m->waiting = calloc((size_t)(n ? n : 1), sizeof *m->waiting);
  m->ones = calloc((size_t)(n ? n : 1), sizeof *m->ones);
  m->npy = calloc((size_t)(n ? n : 1), sizeof *m->npy);
  m->npy_len = calloc((size_t)(n ? n : 1), sizeof *m->npy_len);
  if (!m->items || !m->tokens || !m->waiting || !m->ones || !m->npy ||
      !m->npy_len) {
    mwait_free(m);
    return NULL;
  }
  return m;
}

/* ---- the answer ------------------------------------------------------- */

static void put_error(tbuf *b, const char *id, const terr *e) {
  tbuf_adds(b, "{");
  if (id) {
    tbuf_adds(b, "\"id\":");
    tbuf_json_str(b, id);
    tbuf_adds(b, ",");
  }
  tbuf_addf(b, "\"error\":{\"code\":\"%s\",\"message\":",
            terr_code_name(e->code));
  tbuf_json_str(b, e->message);
  if (e->field[0]) {
    tbuf_adds(b, ",\"field\":");
    tbuf_json_str(b, e->field);
  }
  tbuf_adds(b, "}}");
}

/* One item: the job as stored, or its error. The row the item holds (a
 * batch's as committed at submit, or a final one jobs:get read) stands
 * for the store's while it cannot be older than it: final, or its job
 * still not ended here (jobs_holds: its end not committed). Else a read
 * (an ended job's row comes from the store's memory, db/sqlite). */
/* The item's row must be read from the store: it has none, or it is not
 * final and may be older than the store's. After every end fired
 * (m->ended) a row that is not final is read: on a cluster a job waited
 * for as another node's may have been claimed here meanwhile, and its
 * "end" event (its end committed) can come before this node lets go of it
 * (jobs_holds still true). */
static int item_stale(const mwait *m, const jobs_batch_item *it) {
  const char *owner = m->owner[0] ? m->owner : NULL;
  return !it->rc && (!it->row.id[0] ||
                     (!job_status_final(it->row.status) &&
                      (m->ended || !jobs_holds(m->ctx->jobs, it->id, owner))));
}

/* pre: the item's row read for it with the others (put_items), or NULL:
 * read it here when item_stale. */
static void put_item(tbuf *b, const mwait *m, const jobs_batch_item *it,
                     const job_record *pre) {
  if (it->rc) {
    put_error(b, m->submitted ? NULL : it->id, &it->err);
    return;
  }
  const char *owner = m->owner[0] ? m->owner : NULL;
  job_record j;
  const job_record *jr = pre ? pre : &it->row;
  if (!pre && item_stale(m, it)) {
    terr e;
    if (jobs_get(m->ctx->jobs, it->id, owner, &j, &e)) {
      if (m->submitted && e.code == T_ENOTFOUND) { /* its insert failed */
        jobs_unrecorded(m->ctx->jobs, it->id, &e);
        if (e.field[0]) { /* named as the batch names its items' fields */
          char f[TERR_FIELD_MAX];
          snprintf(f, sizeof f, "jobs[%td].%s", it - m->items, e.field);
          t_scopy(e.field, sizeof e.field, f);
        }
      }
      put_error(b, it->id, &e);
      return;
    }
    jr = &j;
  }
  size_t len = 0;
  char *text = jobs_json(m->ctx->jobs, jr, 1, &len);
  if (text && m->include_result && jr->status == JOB_SUCCEEDED &&
      (!m->fields.on || (m->fields.want & API_FIELD_RESULT))) {
    tbuf t;
    tbuf_init(&t, 0);
    size_t i = (size_t)(it - m->items);
    api_job_text_data_npy(&t, m->ctx, text, len, jr, m->npy[i], m->npy_len[i]);
    free(text);
    text = tbuf_take(&t, &len);
  }
  if (text)
    api_fields_put(b, text, len, &m->fields);
  else
    b->err = T_ENOMEM;
  free(text);
  if (jr == &j) store_job_clear(&j);
}

/* The items written apart (each into its own buffer) on several threads:
 * put_item only reads m and the store. */
typedef struct item_texts {
  const mwait *m;
  tbuf *t;
  const job_record **pre; /* per item: its row read ahead, or NULL */
} item_texts;

static void put_item_apart(void *arg, int64_t i, int slot) {
  (void)slot;
  item_texts *x = arg;
  tbuf_init(&x->t[i], 0);
  put_item(&x->t[i], x->m, &x->m->items[i], x->pre ? x->pre[i] : NULL);
}

/* The rows read ahead: every stale item's (item_stale) in one store read
 * per PRE_READ items (one SELECT on PostgreSQL), not one read an item —
 * on a cluster store every item of a waited batch is stale once all
 * ended, and 100 single-row SELECTs per batch of 100 were the backends'
 * most common state (idle in ClientRead after a job read,
 * tests/bench/results/h200-2026-11-29-s35.md). pre[i] points into rows;
 * an item not found there (deleted, another owner's, a failed read) keeps
 * NULL and put_item reads it alone, as before. */
#define PRE_READ 256
typedef struct pre_read {
  const job_record **pre; /* per item */
  job_record *rows;
  int nrows;
} pre_read;

static void pre_read_free(pre_read *p) {
  for (int i = 0; p->rows && i < p->nrows; i++) store_job_clear(&p->rows[i]);
  free(p->rows);
  free(p->pre);
}

static void pre_read_items(const mwait *m, pre_read *p) {
  memset(p, 0, sizeof *p);
  int k = 0;
  for (int i = 0; i < m->n && k < 2; i++) k += item_stale(m, &m->items[i]);
  if (k < 2 || !jobs_is_cluster(m->ctx->jobs)) return; /* one read either way */
  int *at = calloc((size_t)m->n, sizeof *at);
  const char **ids = calloc((size_t)m->n, sizeof *ids);
  int *found = calloc((size_t)m->n, sizeof *found);
  p->pre = calloc((size_t)m->n, sizeof *p->pre);
  p->rows = calloc((size_t)m->n, sizeof *p->rows);
  if (!at || !ids || !found || !p->pre || !p->rows) goto done;
  for (int i = 0; i < m->n; i++)
    if (item_stale(m, &m->items[i])) {
      at[p->nrows] = i;
      ids[p->nrows++] = m->items[i].id;
    }
  const char *owner = m->owner[0] ? m->owner : NULL;
  for (int s = 0; s < p->nrows; s += PRE_READ) {
    int c = p->nrows - s < PRE_READ ? p->nrows - s : PRE_READ;
    terr e;
    if (jobs_get_many(m->ctx->jobs, ids + s, c, owner, p->rows + s,
                      found + s, &e))
      break; /* those left are read one by one */
    for (int r = s; r < s + c; r++)
      if (found[r]) p->pre[at[r]] = &p->rows[r];
  }
done:
  free(at);
  free(ids);
  free(found);
}

/* The items in order into b: on the batch checkers too (compute/jobs:
 * jobs.checkers) when there are any, each item apart, then joined. */
static void put_items(tbuf *b, const mwait *m) {
  pre_read p;
  pre_read_items(m, &p);
  struct pool *pl = m->n > 1 ? jobs_checkers_take(m->ctx->jobs) : NULL;
  item_texts x = {m, pl ? calloc((size_t)m->n, sizeof *x.t) : NULL, p.pre};
  if (!x.t) jobs_checkers_give(m->ctx->jobs, pl);
  if (x.t) {
    (void)pool_for(pl, pool_threads(pl) + 1, m->n, put_item_apart, &x, NULL);
    jobs_checkers_give(m->ctx->jobs, pl);
    for (int i = 0; i < m->n; i++) {
      if (i) tbuf_adds(b, ",");
      if (x.t[i].err && !b->err) b->err = x.t[i].err;
      tbuf_add(b, x.t[i].p, x.t[i].len);
      tbuf_free(&x.t[i]);
    }
    free(x.t);
    pre_read_free(&p);
    return;
  }
  for (int i = 0; i < m->n; i++) {
    if (i) tbuf_adds(b, ",");
    put_item(b, m, &m->items[i], p.pre ? p.pre[i] : NULL);
  }
  pre_read_free(&p);
}

static void reply_items(http_req *r, const mwait *m) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "{\"jobs\":[");
  put_items(&b, m);
  tbuf_adds(&b, "]}");
  size_t len = 0;
  char *text = tbuf_take(&b, &len);
  if (!text) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory for the answer");
    return;
  }
  http_reply_buffer(r, 200, "application/json; charset=utf-8", text, len);
}

/* ---- waiting for many jobs -------------------------------------------- */

static void answer_mwait(http_req *r, void *ud) {
  mwait *m = ud;
  reply_items(r, m);
  mwait_free(m);
}

/* The store's writer: one of the jobs ended; with include, the result its
 * row keeps copied for the answer (a few bytes for a tiny job's: the
 * answer then reads nothing back; without memory for it, it reads). */
static void on_one_end(void *arg, const char *id, const job_record *ended,
                       const void *npy, size_t npy_len) {
  (void)id;
  (void)ended;
  mwait_one *one = arg;
  mwait *m = one->m;
  http_req *r = m->r;
  void *copy = m->include_result && npy ? malloc(npy_len ? npy_len : 1) : NULL;
  if (copy) memcpy(copy, npy, npy_len);
  pthread_mutex_lock(&m->mu);
  m->npy[one->i] = copy;
  m->npy_len[one->i] = copy ? npy_len : 0;
  int last = --m->pending == 0;
  if (last) m->ended = 1;
  pthread_mutex_unlock(&m->mu);
  if (last && http_claim(r)) /* no callback left, the timer cannot fire */
    http_resume_call(r, answer_mwait, m);
  http_req_unref(r);
}

static void on_mwait_timeout(http_req *r, void *arg) {
  mwait *m = arg;
  pthread_mutex_lock(&m->mu);
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < m->n; i++)
    if (m->waiting[i] && jobs_unwait(m->ctx->jobs, m->tokens[i]) == 1)
      http_req_unref(r); /* that callback's reference: it will never run */
  reply_items(r, m);
  mwait_free(m);
}

/* Answer m's items once each job has ended or wait_s has passed. Takes m. */
static void reply_after_mwait(http_req *r, mwait *m, double wait_s) {
  if (wait_s <= 0) {
    reply_items(r, m);
    mwait_free(m);
    return;
  }
  pthread_mutex_lock(&m->mu);
  http_defer(r, (int64_t)(wait_s * 1000.0), on_mwait_timeout, m);
  for (int i = 0; i < m->n; i++) {
    if (m->items[i].rc) continue;
    http_req_ref(r);
    m->pending++;
    m->ones[i] = (mwait_one){m, i};
    if (jobs_wait_result(m->ctx->jobs, m->items[i].id, on_one_end,
                         &m->ones[i], &m->tokens[i]) == 0) {
      m->waiting[i] = 1;
    } else { /* ended already (or not here): read it now */
      m->pending--;
      http_req_unref(r);
    }
  }
  int none = m->pending == 0;
  pthread_mutex_unlock(&m->mu);
  if (none && http_claim(r)) answer_mwait(r, m);
}

/* "include": ["result"] (jobs:get, jobs:batch): *inc 1; absent: 0; else
 * 400 naming "include" or "include[i]". */
static int parse_include(json_t *v, int *inc, terr *e) {
  *inc = 0;
  if (v && !json_is_array(v))
    return terr_set(e, T_EINVAL, "include", -1, "expected [\"result\"]");
  for (size_t i = 0; i < json_array_size(v); i++) {
    const char *s = json_string_value(json_array_get(v, i));
    if (!s || strcmp(s, "result") != 0) {
      char field[32];
      snprintf(field, sizeof field, "include[%zu]", i);
      return terr_set(e, T_EINVAL, field, -1, "expected \"result\"");
    }
    *inc = 1;
  }
  return T_OK;
}

/* ---- POST /v1/jobs:batch ---------------------------------------------- */

static void handle_batch(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  double wait_s;
  if (api_submit_prelude(r, &wait_s, &body)) return;
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) if (strcmp(key, "jobs") != 0 &&
                                        strcmp(key, "fields") != 0 &&
                                        strcmp(key, "include") != 0) {
    terr_set(&e, T_EINVAL, key, -1, "unknown field (a batch is {\"jobs\": "
                                    "[...], \"fields\": [...], \"include\": "
                                    "[\"result\"]})");
    break;
  }
  api_fields fields;
  int inc = 0;
  if (!e.code) api_fields_parse(json_object_get(body, "fields"), &fields, &e);
  if (!e.code) parse_include(json_object_get(body, "include"), &inc, &e);
  json_t *items = json_object_get(body, "jobs");
  size_t n = json_array_size(items);
  mwait *m = e.code ? NULL : mwait_new(r, ctx, n <= JOBS_BATCH_MAX ? (int)n : 0);
  if (!e.code && !m) terr_set(&e, T_ENOMEM, "", -1, "out of memory");
  if (m) {
    m->submitted = 1;
    m->fields = fields;
    m->include_result = inc;
  }
  if (e.code ||
      jobs_submit_batch(ctx->jobs, http_owner(r), items, m->items, &e)) {
    json_decref(body);
    mwait_free(m);
    http_reply_error(r, &e);
    return;
  }
  json_decref(body);
  reply_after_mwait(r, m, wait_s);
}

/* ---- POST /v1/jobs:get ------------------------------------------------ */

static int parse_get(json_t *body, api_ctx *ctx, http_req *r, mwait **out,
                     double *wait_s, terr *e) {
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) if (strcmp(key, "ids") &&
                                        strcmp(key, "wait") &&
                                        strcmp(key, "include") &&
                                        strcmp(key, "fields")) return
      terr_set(e, T_EINVAL, key, -1, "unknown field");
  api_fields fields;
  if (api_fields_parse(json_object_get(body, "fields"), &fields, e))
    return e->code;
  json_t *ids = json_object_get(body, "ids");
  if (!json_is_array(ids))
    return terr_set(e, T_EINVAL, "ids", -1, "required: an array of job ids");
  if (json_array_size(ids) > API_GET_MAX)
    return terr_set(e, T_ETOOLARGE, "ids", -1, "at most %d ids",
                    API_GET_MAX);
  *wait_s = 0;
  v = json_object_get(body, "wait");
  if (v && (!json_is_number(v) || !isfinite(json_number_value(v)) ||
            json_number_value(v) < 0 ||
            json_number_value(v) > API_MAX_WAIT_S))
    return terr_set(e, T_EINVAL, "wait", -1,
                    "expected seconds between 0 and %.0f", API_MAX_WAIT_S);
  if (v) *wait_s = json_number_value(v);
  int inc = 0;
  if (parse_include(json_object_get(body, "include"), &inc, e)) return e->code;
  for (size_t i = 0; i < json_array_size(ids); i++) {
    const char *s = json_string_value(json_array_get(ids, i));
    if (!s || !*s || strlen(s) >= T_ID_MAX) {
      char field[32];
      snprintf(field, sizeof field, "ids[%zu]", i);
      return terr_set(e, T_EINVAL, field, -1,
                      "expected a job id (a string of 1 to %d characters)",
                      T_ID_MAX - 1);
    }
  }
  mwait *m = mwait_new(r, ctx, (int)json_array_size(ids));
  if (!m) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  m->include_result = inc;
  m->fields = fields;
  for (int i = 0; i < m->n; i++) {
    const char *s = json_string_value(json_array_get(ids, (size_t)i));
    t_scopy(m->items[i].id, T_ID_MAX, s);
    /* not this owner's or unknown: per id, and not waited for; a job
     * queued or running here exists (no read); a final row is kept for
     * the answer (it changes no more) */
    if (jobs_holds(ctx->jobs, s, http_owner(r))) continue;
    job_record j;
    terr ge;
    if (jobs_get(ctx->jobs, s, http_owner(r), &j, &ge)) {
      char field[32];
      snprintf(field, sizeof field, "ids[%d]", i);
      m->items[i].rc = ge.code;
      if (ge.code == T_ENOTFOUND)
        terr_set(&m->items[i].err, T_ENOTFOUND, field, -1,
                 "job '%s' not found", s);
      else
        terr_set(&m->items[i].err, ge.code, field, -1, "%s", ge.message);
    } else if (job_status_final(j.status)) {
      m->items[i].row = j;
    } else {
      store_job_clear(&j);
    }
  }
  *out = m;
  return T_OK;
}

static void handle_get_many(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  terr_clear(&e);
  json_t *body = NULL;
  mwait *m = NULL;
  double wait_s = 0;
  int rc = api_body_object(r, &body, &e);
  if (!rc) rc = parse_get(body, ctx, r, &m, &wait_s, &e);
  json_decref(body);
  if (rc) {
    http_reply_error(r, &e);
    return;
  }
  wait_s = api_hold_wait(wait_s);
  reply_after_mwait(r, m, wait_s);
}

int api_batch_register(http_server *srv, api_ctx *ctx, terr *e) {
  static const char *const wait[] = {"wait", NULL};
  int rc = 0;
  rc |= http_route(srv, "POST", "/v1/jobs:batch", handle_batch, ctx,
                   HTTP_AUTH | HTTP_JSON);
  rc |= http_route(srv, "POST", "/v1/jobs:get", handle_get_many, ctx,
                   HTTP_AUTH | HTTP_JSON);
  rc |= http_route_query(srv, "POST", "/v1/jobs:batch", wait);
  if (rc)
    return terr_set(e, T_EINTERNAL, "", -1, "cannot register batch routes");
  return T_OK;
}
