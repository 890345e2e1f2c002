/* compute/jobs/jobs.c — a submitted job's life after its submit: read, list,
 * cancel, delete, its result, and waiting for its end (jobs.h).
 *
 * Every lookup of a job by id goes through jobs_get, so that a malformed
 * id, an unknown job and another owner's job answer alike (404 naming
 * "id"); the rules of the list query (status, kind and backend names, the
 * page size, the cursor) are here, not in the API.
 *
 * Threads: any; no lock here (the store and the scheduler take theirs).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/parts.h"
#include "compute/array/region.h"
#include "compute/jobs/jobs.h"
#include "compute/jobs/rids.h"
#include "util/datadir.h"
#include "util/buf.h"
#include "util/util.h"

#define LIST_DEFAULT 50
#define LIST_MAX 1000

int jobs_get(jobs *J, const char *id, const char *owner, job_record *out,
             terr *e) {
  memset(out, 0, sizeof *out);
  if (!id || !t_id_valid('j', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "job '%s' not found",
                    id ? id : "");
  return store_job_get(J->st, id, owner, out, e);
}

int jobs_get_many(jobs *J, const char *const *ids, int n, const char *owner,
                  job_record *out, int *found, terr *e) {
  if (!store_is_cluster(J->st))
    return terr_set(e, T_ENOTIMPL, "", -1,
                    "a batch read: only on a cluster store");
  int rc = store_job_get_many(J->st, ids, n, out, found, e);
  if (rc) return rc;
  for (int i = 0; i < n; i++) {
    if (!found[i]) continue;
    if (!t_id_valid('j', ids[i]) ||
        (owner && strcmp(out[i].owner ? out[i].owner : "", owner) != 0)) {
      store_job_clear(&out[i]);
      found[i] = 0;
    }
  }
  return T_OK;
}

/* ---- the list's cursor ------------------------------------------------------
 * Opaque to clients: "c" then the hex of "1|<order>|<d or a>|<key>|<id>"
 * (key: status's rank, kind's name, duration's ms as %.17g, empty for
 * created). A plain job id, next_cursor's old form, is still taken for
 * the default order (created, newest first). */
static const char *const order_names[STORE_ORDER__COUNT] = {
    "created", "status", "kind", "duration"};
static const int order_desc_default[STORE_ORDER__COUNT] = {1, 0, 0, 1};
#define CURSOR_MAX 256

static void cursor_encode(store_job_order o, int desc, const store_job_pos *p,
                          char out[CURSOR_MAX]) {
  char plain[CURSOR_MAX / 2 - 2], key[40] = "";
  if (o == STORE_ORDER_STATUS) snprintf(key, sizeof key, "%d", (int)p->num);
  if (o == STORE_ORDER_KIND) snprintf(key, sizeof key, "%s", p->text);
  if (o == STORE_ORDER_DURATION) snprintf(key, sizeof key, "%.17g", p->num);
  int n = snprintf(plain, sizeof plain, "1|%s|%c|%s|%s", order_names[o],
                   desc ? 'd' : 'a', key, p->id);
  if (n < 0 || (size_t)n >= sizeof plain) n = 0; /* cannot happen: bounded */
  static const char hex[] = "0123456789abcdef";
  out[0] = 'c';
  for (int i = 0; i < n; i++) {
    out[1 + 2 * i] = hex[(unsigned char)plain[i] >> 4];
    out[2 + 2 * i] = hex[(unsigned char)plain[i] & 15];
  }
  out[1 + 2 * n] = 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* The position in `cur` for order o and direction desc; T_EINVAL naming
 * "cursor" for anything that next_cursor of this order did not give. */
static int cursor_decode(const char *cur, store_job_order o, int desc,
                         store_job_pos *p, terr *e) {
  memset(p, 0, sizeof *p);
  if (o == STORE_ORDER_CREATED && desc && t_id_valid('j', cur)) {
    snprintf(p->id, sizeof p->id, "%s", cur); /* the old form */
    return T_OK;
  }
  size_t n = strlen(cur);
  char plain[CURSOR_MAX / 2];
  if (cur[0] != 'c' || n > CURSOR_MAX || (n - 1) % 2 != 0) goto bad;
  size_t m = (n - 1) / 2;
  for (size_t i = 0; i < m; i++) {
    int hi = hexval(cur[1 + 2 * i]), lo = hexval(cur[2 + 2 * i]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) goto bad;
    plain[i] = (char)(hi << 4 | lo);
  }
  plain[m] = 0;
  char *f[5], *save = plain;
  for (int i = 0; i < 5; i++) {
    f[i] = save;
    char *bar = strchr(save, '|');
    if (i < 4 && !bar) goto bad;
    if (bar) *bar = 0;
    save = bar ? bar + 1 : save + strlen(save);
  }
  if (strcmp(f[0], "1") != 0 || !t_id_valid('j', f[4])) goto bad;
  if (strcmp(f[1], order_names[o]) != 0 ||
      strcmp(f[2], desc ? "d" : "a") != 0)
    return terr_set(e, T_EINVAL, "cursor", -1,
                    "this cursor is from a list in another order: ask for "
                    "the first page again (no cursor) with order_by=%s",
                    order_names[o]);
  snprintf(p->id, sizeof p->id, "%s", f[4]);
  if (o == STORE_ORDER_CREATED) {
    if (f[3][0]) goto bad;
  } else if (o == STORE_ORDER_KIND) {
    if (!kind_find(f[3])) goto bad;
    snprintf(p->text, sizeof p->text, "%s", f[3]);
  } else {
    double v;
    if (t_parse_f64(f[3], &v) || !isfinite(v)) goto bad;
    if (o == STORE_ORDER_STATUS && (v != floor(v) || v < 0 || v > 4)) goto bad;
    p->num = v;
  }
  return T_OK;
bad:
  return terr_set(e, T_EINVAL, "cursor", -1, "not a cursor from next_cursor");
}

static int parse_query(const char *owner, const jobs_query *q,
                       store_job_filter *f, store_job_pos *after, terr *e) {
  memset(f, 0, sizeof *f);
  f->owner = owner;
  f->status = -1;
  f->limit = LIST_DEFAULT;
  if (q->status) {
    f->status = job_status_parse(q->status);
    if (f->status < 0)
      return terr_set(e, T_EINVAL, "status", -1,
                      "'%s' is not one of queued, running, succeeded, "
                      "failed, canceled", q->status);
  }
  if (q->kind) {
    if (!kind_find(q->kind))
      return terr_set(e, T_EINVAL, "kind", -1, "'%s' is not one of %s",
                      q->kind, kind_list());
    f->kind = q->kind;
  }
  if (q->backend) {
    if (tbackend_parse(q->backend) < 0)
      return terr_set(e, T_EINVAL, "backend", -1, "'%s' is not one of %s",
                      q->backend, tbackend_list());
    f->backend = q->backend;
  }
  f->label = q->label;
  if (q->q && *q->q) {
    if (strlen(q->q) > STORE_JOB_Q_MAX)
      return terr_set(e, T_EINVAL, "q", -1,
                      "a search of at most %d bytes", STORE_JOB_Q_MAX);
    f->q = q->q;
  }
  if (q->limit) {
    int64_t lim;
    if (t_parse_i64(q->limit, &lim) || lim < 1 || lim > LIST_MAX)
      return terr_set(e, T_EINVAL, "limit", -1,
                      "expected an integer from 1 to %d", LIST_MAX);
    f->limit = (int)lim;
  }
  f->order = STORE_ORDER_CREATED;
  if (q->order_by) {
    int o = -1;
    for (int i = 0; i < STORE_ORDER__COUNT; i++)
      if (strcmp(q->order_by, order_names[i]) == 0) o = i;
    if (o < 0)
      return terr_set(e, T_EINVAL, "order_by", -1,
                      "'%s' is not one of created, status, kind, duration",
                      q->order_by);
    f->order = (store_job_order)o;
  }
  int desc = order_desc_default[f->order];
  if (q->desc) {
    if (strcmp(q->desc, "true") == 0) desc = 1;
    else if (strcmp(q->desc, "false") == 0) desc = 0;
    else
      return terr_set(e, T_EINVAL, "desc", -1, "expected true or false");
  }
  f->asc = !desc;
  if (q->cursor && *q->cursor) {
    int rc = cursor_decode(q->cursor, f->order, desc, after, e);
    if (rc) return rc;
    f->after = after;
  }
  return T_OK;
}

int jobs_list_json(jobs *J, const char *owner, const jobs_query *q,
                   char **text, size_t *len, terr *e) {
  *text = NULL;
  store_job_filter f;
  store_job_pos after, next;
  int rc = parse_query(owner, q, &f, &after, e);
  if (rc) return rc;
  store_job *rows = NULL;
  int n = 0, has_next = 0;
  int64_t total = 0;
  if ((rc = store_job_list(J->st, &f, &rows, &n, &has_next, &next, &total,
                           e)))
    return rc;
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "{\"jobs\":[");
  for (int i = 0; i < n; i++) {
    size_t jl = 0;
    char *jt = jobs_json(J, &rows[i], 0, &jl);
    if (!jt) b.err = T_ENOMEM;
    if (i) tbuf_add(&b, ",", 1);
    if (jt) tbuf_add(&b, jt, jl);
    free(jt);
    store_job_clear(&rows[i]);
  }
  free(rows);
  char cur[CURSOR_MAX + 1] = "";
  if (has_next) cursor_encode(f.order, !f.asc, &next, cur);
  tbuf_adds(&b, "],\"next_cursor\":");
  tbuf_json_str(&b, has_next ? cur : NULL);
  tbuf_addf(&b, ",\"total\":%lld}", (long long)total);
  *text = tbuf_take(&b, len);
  if (!*text) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  return T_OK;
}

int jobs_cancel(jobs *J, const char *id, const char *owner, terr *e) {
  job_record j;
  int rc = jobs_get(J, id, owner, &j, e);
  if (rc) return rc;
  job_status was = j.status;
  store_job_clear(&j);
  if (job_status_final(was))
    return terr_set(e, T_ECONFLICT, "id", -1, "job %s has already %s", id,
                    job_status_name(was));
  rc = sched_cancel(J->sc, id, owner, e);
  if (rc == T_ENOTFOUND || rc == T_ECONFLICT)
    return terr_set(e, T_ECONFLICT, "id", -1, "job %s has already finished",
                    id);
  return rc;
}

/* The layout a kind gives its stored result, from the stored params. */
static const char *result_layout(const job_record *j) {
  const kind_ops *k = kind_find(j->kind);
  if (!k || !k->result_layout || !j->params) return NULL;
  json_t *params = json_loads(j->params, 0, NULL);
  const char *l = params ? k->result_layout(params) : NULL;
  json_decref(params);
  return l;
}

int jobs_result_get(jobs *J, const char *id, const char *owner,
                    jobs_result *out, terr *e) {
  return jobs_result_part_get(J, id, owner, NULL, out, e);
}

/* Part `name` (index > 0) of j's result: its file. T_ENOTFOUND naming the
 * part when the result has none of that name; 0 with *index 0 for the
 * first part (read as a one-array result is). */
static int result_part_file(const job_record *j, const char *name,
                            int *index, jobs_result *out, terr *e) {
  *index = 0;
  tparts p;
  int rc = tparts_parse(j->result_parts, &p, e);
  if (rc) return rc;
  int i = tparts_find(&p, name);
  if (i < 0) {
    char names[TPARTS_MAX * TPART_NAME_MAX + 16] = "";
    size_t n = 0;
    for (int k = 0; k < p.n && n < sizeof names; k++)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "",
                            p.p[k].name);
    rc = terr_set(e, T_ENOTFOUND, "name", -1,
                  "job %s's result has no part '%.40s'%s%s%s", j->id, name,
                  p.n ? " (its parts: " : " (it is one array: read /v1/jobs/",
                  p.n ? names : j->id, p.n ? ")" : "/result)");
  } else if (i > 0) {
    *index = i;
    out->path = p.p[i].path; /* taken */
    p.p[i].path = NULL;
  }
  tparts_clear(&p);
  return rc;
}

int jobs_result_part_get(jobs *J, const char *id, const char *owner,
                         const char *name, jobs_result *out, terr *e) {
  memset(out, 0, sizeof *out);
  if (name && !tpart_name_valid(name))
    return terr_set(e, T_ENOTFOUND, "name", -1,
                    "no result part '%.40s': a part's name is "
                    "[a-z][a-z0-9_]{0,30}", name);
  job_record j;
  int rc = jobs_get(J, id, owner, &j, e);
  if (rc) return rc;
  if (j.status != JOB_SUCCEEDED || (!j.result_path && !j.result.dtype[0])) {
    rc = terr_set(e, j.status == JOB_SUCCEEDED ? T_ENOTFOUND : T_ECONFLICT,
                  "id", -1, "job %s is %s: it has no result", j.id,
                  job_status_name(j.status));
    store_job_clear(&j);
    return rc;
  }
  char rid[REGION_ID_MAX];
  int64_t roff;
  if (region_out_parse(j.output_file, rid, &roff)) { /* raw bytes there */
    rc = terr_set(e, T_ECONFLICT, "id", -1,
                  "job %s wrote its result into region %s at offset %lld "
                  "(output.region); the service keeps no copy: read it there",
                  j.id, rid, (long long)roff);
    store_job_clear(&j);
    return rc;
  }
  if (j.output_file) { /* the service keeps no copy (compute/sched/run.c) */
    rc = terr_set(e, T_ECONFLICT, "id", -1,
                  "job %s wrote its result to %.200s (output.file); the "
                  "service keeps no copy: read that file", j.id,
                  j.output_file);
    store_job_clear(&j);
    return rc;
  }
  int part = 0;
  if (name && (rc = result_part_file(&j, name, &part, out, e))) {
    store_job_clear(&j);
    return rc;
  }
  if (part > 0) { /* a later part: its own file, one layout */
    store_job_clear(&j);
    return T_OK;
  }
  out->layout = result_layout(&j);
  if (j.result_path) {
    out->path = j.result_path; /* taken from the row */
    j.result_path = NULL;
  } else {
    /* A small result lives in the job's row (compute/sched/run.c). */
    void *buf = NULL;
    rc = store_job_result_npy(J->st, j.id, NULL, &buf, &out->npy_len, e);
    out->npy = buf;
    if (rc == T_ENOTFOUND)
      terr_set(e, T_ENOTFOUND, "id", -1, "job %s has no result", j.id);
  }
  store_job_clear(&j);
  if (rc) jobs_result_clear(out);
  return rc;
}

int jobs_result_row_npy(jobs *J, const job_record *j, void **npy,
                        size_t *len, terr *e) {
  *npy = NULL;
  *len = 0;
  /* an "output" (a file or a region) is where the result went: none kept */
  if (j->status != JOB_SUCCEEDED || j->result_path || !j->result.dtype[0] ||
      j->output_file)
    return terr_set(e, T_ENOTFOUND, "id", -1,
                    "job %s keeps no result in its row", j->id);
  return store_job_result_npy(J->st, j->id, NULL, npy, len, e);
}

void jobs_result_clear(jobs_result *r) {
  if (!r) return;
  free(r->path);
  free(r->npy);
  memset(r, 0, sizeof *r);
}

/* Every write queued before it committed: so is every keyed [async]
 * insert stamped before it (rids.h), whose keys leave the table. */
int jobs_sync(jobs *J, terr *e) {
  uint64_t mark = J->rids ? rids_mark(J->rids) : 0;
  int rc = store_sync(J->st, e);
  if (!rc && J->rids) rids_committed(J->rids, mark);
  return rc;
}

int jobs_unrecorded(jobs *J, const char *id, terr *out) {
  /* Only an input found gone is the client's to know (404 naming it); any
   * other failure of the insert is the service's own. */
  if (store_insert_error(J->st, id, out) && out->code == T_ENOTFOUND &&
      out->field[0])
    return out->code;
  if (reserve_full())
    return terr_set(out, T_ENOSPACE, "", -1,
                    "job %s could not be recorded: the data directory's disk "
                    "is full",
                    id);
  return terr_set(out, T_EINTERNAL, "", -1, "job %s could not be recorded",
                  id);
}

int jobs_wait_end(jobs *J, const char *id, jobs_end_fn cb, void *arg,
                  uint64_t *token) {
  return sched_wait_end(J->sc, id, cb, arg, token);
}

int jobs_wait_result(jobs *J, const char *id, jobs_result_fn cb, void *arg,
                     uint64_t *token) {
  return sched_wait_result(J->sc, id, cb, arg, token);
}

int jobs_unwait(jobs *J, uint64_t token) { return sched_unwait(J->sc, token); }

int jobs_stats_get(jobs *J, const char *owner, jobs_stats *out, terr *e) {
  memset(out, 0, sizeof *out);
  int rc = store_stats(J->st, owner, &out->groups, &out->ngroups, e);
  if (!rc) rc = store_job_counts(J->st, owner, out->by_status, e);
  if (rc) {
    jobs_stats_clear(out);
    return rc;
  }
  sched_get_stats(J->sc, &out->sched);
  return T_OK;
}

void jobs_stats_clear(jobs_stats *s) {
  if (!s) return;
  store_stats_free(s->groups, s->ngroups);
  memset(s, 0, sizeof *s);
}

void jobs_sched_stats(jobs *J, sched_stats *out) { sched_get_stats(J->sc, out); }

int jobs_sample_now(jobs *J, sched_sample *out) { return sched_sample_now(J->sc, out); }

int jobs_samples(jobs *J, int64_t since_wall_ms, sched_sample *out, int cap) {
  return sched_samples(J->sc, since_wall_ms, out, cap);
}

int jobs_finished_by_step(jobs *J, const char *owner, int64_t since_ms,
                          int64_t step_ms, int nsteps, int64_t *counts, terr *e) {
  return store_finished_by_step(J->st, owner, since_ms, step_ms, nsteps, counts, e);
}

int jobs_store_ready(jobs *J) { return store_ready(J->st); }

const char *jobs_store_kind(jobs *J) { return store_kind(J->st); }

int jobs_is_cluster(jobs *J) { return store_is_cluster(J->st); }

int jobs_nodes(jobs *J, store_node **nodes, int *n, terr *e) {
  return sched_nodes(J->sc, nodes, n, e);
}

void jobs_node_self(jobs *J, char id[T_ID_MAX], char *name, size_t cap) {
  sched_node_self(J->sc, id, name, cap);
}

void jobs_histogram(jobs *J, const char *kind, const char *backend, int status,
                    int64_t counts[SCHED_HIST_BUCKETS], double *sum_ms,
                    int64_t *count) {
  sched_histogram(J->sc, kind, backend, status, counts, sum_ms,
                  count);
}
