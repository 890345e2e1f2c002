/* db/store_rec.c — the store's records, whatever the backend: status and
 * timing names, and the clear/copy of store_job, store_array, store_stat
 * and store_node (store.h); and what both backends do the same way
 * (store_common.h: the list orders, insert checks, shape text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store_common.h"

static const char *const status_names[] = {"queued", "running", "succeeded",
                                           "failed", "canceled"};

/* "queued", "running", ... ("unknown" out of range); static strings. */
const char *job_status_name(job_status s) {
  return (unsigned)s < 5 ? status_names[s] : "unknown";
}

/* The job_status of a name, -1 when unknown or NULL. */
int job_status_parse(const char *s) {
  if (!s) return -1;
  for (int i = 0; i < 5; i++)
    if (strcmp(s, status_names[i]) == 0) return i;
  return -1;
}

/* Free every string of *j and zero it (max_abs_diff NaN). NULL ok. */
void store_job_clear(store_job *j) {
  if (!j) return;
  free(j->owner);
  free(j->kind);
  free(j->params);
  free(j->backend_requested);
  free(j->backend_used);
  free(j->backend_reason);
  free(j->estimate);
  free(j->label);
  free(j->request_id);
  free(j->body_hash);
  free(j->error_code);
  free(j->error_message);
  free(j->result_path);
  free(j->compare);
  free(j->output_file);
  free(j->result_parts);
  free(j->node);
  free(j->parent);
  free(j->devices);
  memset(j, 0, sizeof *j);
  j->max_abs_diff = NAN;
}

/* See store.h. */
int store_job_copy(store_job *dst, const store_job *src) {
  *dst = *src; /* numbers and the id */
  char **f[] = {&dst->owner, &dst->kind, &dst->params,
                &dst->backend_requested, &dst->backend_used,
                &dst->backend_reason, &dst->estimate, &dst->label,
                &dst->request_id, &dst->body_hash,
                &dst->error_code, &dst->error_message,
                &dst->result_path, &dst->compare, &dst->output_file,
                &dst->result_parts, &dst->node, &dst->parent,
                &dst->devices};
  int oom = 0;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (!*f[i]) continue;
    /* After a failure the rest become NULL, never src's strings. */
    char *c = oom ? NULL : strdup(*f[i]);
    if (!c) oom = 1;
    *f[i] = c;
  }
  if (oom) {
    store_job_clear(dst); /* frees the copies made */
    return T_ENOMEM;
  }
  return 0;
}

/* See store.h. What a read gives back: an unset timing and every field of
 * an absent result are 0, a shape only its ndim entries, nonconverged 0
 * unless positive (stored NULL). */
void store_job_apply_end(store_job *row, const store_job_end *x) {
  row->status = x->status;
  row->finished_at = x->finished_at;
  memset(&row->timings, 0, sizeof row->timings);
  for (int i = 0; i < JOB_T__COUNT; i++)
    if (x->timings.set & (1u << i))
      job_timings_put(&row->timings, (job_timing)i, x->timings.ms[i]);
  memset(&row->result, 0, sizeof row->result);
  if (x->result.dtype[0]) {
    t_scopy(row->result.dtype, sizeof row->result.dtype, x->result.dtype);
    int nd = x->result.ndim < 0             ? 0
             : x->result.ndim > STORE_MAXDIM ? STORE_MAXDIM
                                             : x->result.ndim;
    row->result.ndim = nd;
    for (int i = 0; i < nd; i++) row->result.shape[i] = x->result.shape[i];
    row->result.bytes = x->result.bytes;
    row->result.nonconverged =
        x->result.nonconverged > 0 ? x->result.nonconverged : 0;
  }
  row->result_path = (char *)x->result_path;
  row->compare = (char *)x->compare;
  row->max_abs_diff = x->max_abs_diff;
  row->error_code = (char *)x->error_code;
  row->error_message = (char *)x->error_message;
  row->progress_done = x->progress_done;
  row->progress_total = x->progress_total;
  row->result_parts = (char *)x->result_parts;
  row->devices = (char *)x->devices;
  if (x->backend_used) row->backend_used = (char *)x->backend_used;
}

/* See store.h. */
int store_job_ended(store_job *dst, const store_job *before,
                    const store_job_end *x) {
  store_job t = *before; /* shallow: copied below */
  store_job_apply_end(&t, x);
  return store_job_copy(dst, &t);
}

static const char *const timing_names[JOB_T__COUNT] = {
    "queue", "prepare", "h2d", "compute", "d2h", "store", "total"};

const char *job_timing_name(job_timing t) {
  return (unsigned)t < JOB_T__COUNT ? timing_names[t] : "?";
}

/* Free every string of *a and zero it. NULL ok. */
void store_array_clear(store_array *a) {
  if (!a) return;
  free(a->owner);
  free(a->dtype);
  free(a->shape);
  free(a->digest);
  free(a->path);
  memset(a, 0, sizeof *a);
}

void store_stats_free(store_stat *rows, int n) {
  if (!rows) return;
  for (int i = 0; i < n; i++) {
    free(rows[i].kind);
    free(rows[i].backend);
  }
  free(rows);
}

void store_node_clear(store_node *n) {
  if (!n) return;
  free(n->name);
  free(n->url);
  free(n->version);
  memset(n, 0, sizeof *n);
  n->load = NAN;
}

void store_nodes_free(store_node *nodes, int n) {
  if (!nodes) return;
  for (int i = 0; i < n; i++) store_node_clear(&nodes[i]);
  free(nodes);
}

/* ---- what both backends share (store_common.h) ----------------------------- */

int store_refused_by_dependents(terr *e, const char *noun, const char *id,
                                int n, const char *first) {
  const char *what = noun[0] == 'j' ? "'s result is the input of"
                                    : " is an input of";
  if (n == 1)
    return terr_set(e, T_ECONFLICT, "id", -1,
                    "%s %s%s queued or running job %s: cancel it or wait for "
                    "it to finish",
                    noun, id, what, first);
  return terr_set(e, T_ECONFLICT, "id", -1,
                  "%s %s%s %d queued or running jobs (%s and %d more): "
                  "cancel them or wait for them to finish",
                  noun, id, what, n, first, n - 1);
}

int store__same_str(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

void store__shape_text(const job_result_info *r, char *buf, size_t cap) {
  char t[STORE_MAXDIM * 22 + 4];
  size_t n = 0;
  t[n++] = '[';
  for (int d = 0; d < r->ndim && d < STORE_MAXDIM; d++) {
    if (d) t[n++] = ',';
    n += t_fmt_int(t + n, (long long)r->shape[d]);
  }
  t[n++] = ']';
  t[n] = 0;
  t_scopy(buf, cap, t); /* cut to cap as snprintf did */
}

const char *store__order_key_sql(store_job_order o, int desc) {
  switch (o) {
  case STORE_ORDER_STATUS:
    return "(CASE status WHEN 'queued' THEN 0 WHEN 'running' THEN 1"
           " WHEN 'succeeded' THEN 2 WHEN 'failed' THEN 3 ELSE 4 END)";
  case STORE_ORDER_KIND: return "kind";
  case STORE_ORDER_DURATION:
    return desc ? "COALESCE(t_total, -1.0)" : "COALESCE(t_total, 1e300)";
  default: return NULL; /* created: the id alone */
  }
}

void store__job_pos(const store_job *j, store_job_order o, int desc,
                    store_job_pos *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->id, sizeof p->id, "%s", j->id);
  if (o == STORE_ORDER_STATUS) p->num = (double)j->status;
  if (o == STORE_ORDER_KIND) snprintf(p->text, sizeof p->text, "%s", j->kind);
  if (o == STORE_ORDER_DURATION)
    p->num = j->timings.set & (1u << JOB_T_TOTAL) ? j->timings.ms[JOB_T_TOTAL]
             : desc                               ? STORE_DUR_NONE_DESC
                                                  : STORE_DUR_NONE_ASC;
}

int store__job_insert_prep(store_job *j, terr *e) {
  if (!j) return terr_set(e, T_EINVAL, "", -1, "store: no job");
  if (!j->kind || !*j->kind)
    return terr_set(e, T_EINVAL, "kind", -1, "missing");
  if (!j->params) return terr_set(e, T_EINVAL, "params", -1, "missing");
  if (!j->id[0]) t_id_new('j', j->id);
  if (!j->created_at) j->created_at = t_wall_ms();
  j->status = JOB_QUEUED;
  return 0;
}

int store__array_insert_prep(store_array *a, terr *e) {
  if (!a) return terr_set(e, T_EINVAL, "", -1, "store: no array");
  if (!a->dtype) return terr_set(e, T_EINVAL, "dtype", -1, "missing");
  if (!a->shape) return terr_set(e, T_EINVAL, "shape", -1, "missing");
  if (!a->digest) return terr_set(e, T_EINVAL, "digest", -1, "missing");
  if (!a->path) return terr_set(e, T_EINVAL, "path", -1, "missing");
  if (!a->id[0]) t_id_new('a', a->id);
  if (!a->created_at) a->created_at = t_wall_ms();
  return 0;
}

int store__job_filter_check(const store_job_filter *f, terr *e) {
  if (f->limit < 1 || f->limit > 1000)
    return terr_set(e, T_EINVAL, "limit", f->limit, "must be 1..1000, got %d",
                    f->limit);
  if (f->status < -1 || f->status > JOB_CANCELED)
    return terr_set(e, T_EINVAL, "status", -1, "unknown status %d", f->status);
  if ((unsigned)f->order >= STORE_ORDER__COUNT)
    return terr_set(e, T_EINVAL, "order_by", -1, "unknown order %d",
                    (int)f->order);
  return 0;
}
