/* db/store_rec.c — the store's records, whatever the backend: status and
 * timing names, and the clear/copy of store_job, store_array, store_stat
 * and store_node (store.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

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
                &dst->result_parts, &dst->node, &dst->parent};
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
