/* jobs/jobs.c — a submitted job's life after its submit: read, list,
 * cancel, delete, its result, and waiting for its end (jobs.h).
 *
 * Every lookup of a job by id goes through jobs_get, so that a malformed
 * id, an unknown job and another owner's job answer alike (404 naming
 * "id"); the rules of the list query (status, kind and backend names, the
 * page size, the cursor) are here, not in the API.
 *
 * Threads: any; no lock here (the store and the scheduler take theirs).
 */
#include <stdlib.h>
#include <string.h>

#include "array/parts.h"
#include "jobs/jobs.h"
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

static int parse_query(const char *owner, const jobs_query *q,
                       store_job_filter *f, terr *e) {
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
    if (tkind_parse(q->kind) < 0)
      return terr_set(e, T_EINVAL, "kind", -1, "'%s' is not one of %s",
                      q->kind, tkind_list());
    f->kind = q->kind;
  }
  if (q->backend) {
    if (tbackend_parse(q->backend) < 0)
      return terr_set(e, T_EINVAL, "backend", -1, "'%s' is not one of %s",
                      q->backend, tbackend_list());
    f->backend = q->backend;
  }
  f->label = q->label;
  if (q->limit) {
    int64_t lim;
    if (t_parse_i64(q->limit, &lim) || lim < 1 || lim > LIST_MAX)
      return terr_set(e, T_EINVAL, "limit", -1,
                      "expected an integer from 1 to %d", LIST_MAX);
    f->limit = (int)lim;
  }
  if (q->cursor && *q->cursor) {
    if (!t_id_valid('j', q->cursor))
      return terr_set(e, T_EINVAL, "cursor", -1,
                      "not a cursor from next_cursor");
    f->cursor = q->cursor;
  }
  return T_OK;
}

int jobs_list_json(jobs *J, const char *owner, const jobs_query *q,
                   char **text, size_t *len, terr *e) {
  *text = NULL;
  store_job_filter f;
  int rc = parse_query(owner, q, &f, e);
  if (rc) return rc;
  store_job *rows = NULL;
  int n = 0;
  char next[T_ID_MAX] = "";
  if ((rc = store_job_list(J->st, &f, &rows, &n, next, e))) return rc;
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
  tbuf_adds(&b, "],\"next_cursor\":");
  tbuf_json_str(&b, next[0] ? next : NULL);
  tbuf_add(&b, "}", 1);
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

int jobs_delete(jobs *J, const char *id, const char *owner, char ***paths,
                int *npaths, terr *e) {
  *paths = NULL;
  *npaths = 0;
  if (!id || !t_id_valid('j', id))
    return terr_set(e, T_ENOTFOUND, "id", -1, "job '%s' not found",
                    id ? id : "");
  int rc = store_job_delete(J->st, id, owner, paths, npaths, e);
  if (rc == T_ECONFLICT)
    terr_set(e, T_ECONFLICT, "id", -1,
             "job %s has not finished: cancel it first", id);
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
  if (j.output_file) { /* the service keeps no copy (sched/run.c) */
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
    /* A small result lives in the job's row (sched/run.c). */
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

void jobs_result_clear(jobs_result *r) {
  if (!r) return;
  free(r->path);
  free(r->npy);
  memset(r, 0, sizeof *r);
}

int jobs_sync(jobs *J, terr *e) { return store_sync(J->st, e); }

int jobs_wait_end(jobs *J, const char *id, jobs_end_fn cb, void *arg,
                  uint64_t *token) {
  return sched_wait_end(J->sc, id, cb, arg, token);
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

int jobs_store_ready(jobs *J) { return store_ready(J->st); }

void jobs_histogram(jobs *J, tkind kind, tbackend backend, int status,
                    int64_t counts[SCHED_HIST_BUCKETS], double *sum_ms,
                    int64_t *count) {
  sched_histogram(J->sc, tkind_name(kind), tbackend_name(backend), status,
                  counts, sum_ms, count);
}
