/* db/store.c — the store interface: a backend and its handle, and one
 * dispatching function per operation (store_backend.h). Nothing here knows
 * SQL. The one operation with logic of its own is store_insert_jobs: it
 * cuts a batch into the backend's chunks and hands them over one at a
 * time, each after the one before committed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/store_backend.h"

struct store {
  const store_backend *be;
  void *impl;
};

static int store_wrap(const store_backend *be, void *impl, store **out,
                      terr *e) {
  store *s = calloc(1, sizeof *s);
  if (!s) {
    be->close(impl);
    return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  }
  s->be = be;
  s->impl = impl;
  *out = s;
  return 0;
}

int store_open(const char *data_dir, store **out, terr *e) {
  *out = NULL;
  void *impl = NULL;
  int rc = store_sqlite_open(data_dir, &impl, e);
  if (rc) return rc;
  return store_wrap(&store_sqlite_backend, impl, out, e);
}

static int has_prefix(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

int store_open_url(const char *url, const char *data_dir, store **out,
                   terr *e) {
  *out = NULL;
  if (!url || !*url || strcmp(url, "sqlite:") == 0)
    return store_open(data_dir, out, e);
  if (has_prefix(url, "postgresql://") || has_prefix(url, "postgres://") ||
      strchr(url, '=')) {
#ifndef TESSEL_HAVE_PG
    (void)data_dir;
    return terr_set(e, T_EINVAL, "store", -1,
                    "this tesseld was built without PostgreSQL "
                    "(libpq)");
#else
    void *impl = NULL;
    int rc = store_pg_open(url, data_dir, &impl, e);
    if (rc) return rc;
    return store_wrap(&store_pg_backend, impl, out, e);
#endif
  }
  return terr_set(e, T_EINVAL, "store", -1,
                  "unknown kind of store (want sqlite: or "
                  "postgresql://...)");
}

void *store_impl(store *s) { return s ? s->impl : NULL; }

int store_open_backend(const store_backend *be, void *impl, store **out,
                       terr *e) {
  *out = NULL;
  return store_wrap(be, impl, out, e);
}

const char *store_kind(store *s) { return s ? s->be->name : "none"; }
int store_is_cluster(store *s) { return s && s->be->cluster; }

void store_close(store *s) {
  if (!s) return;
  s->be->close(s->impl);
  free(s);
}

static int not_here(terr *e) {
  return terr_set(e, T_ENOTIMPL, "store", -1,
                  "only a cluster store (PostgreSQL) does this");
}

int store_ready(store *s) {
  return s && s->be->ready(s->impl);
}

int store_schema_version(store *s) {
  return s ? s->be->schema_version(s->impl) : 0;
}

int store_job_insert(store *s, store_job *j, int *existing, terr *e) {
  return s->be->job_insert(s->impl, j, existing, e);
}

int store_job_insert_async(store *s, store_job *j, terr *e) {
  return s->be->job_insert_async(s->impl, j, e);
}

/* Chunk by chunk, each queued only once the one before committed: a write
 * queued meanwhile (a lone submit, a job's end) waits for one chunk at most,
 * never for the whole batch. */
int store_insert_jobs(store *s, store_job *jobs, int n, int *existing,
                      int *rcs, terr *errs, terr *e) {
  if (!s || n < 0 || (n > 0 && (!jobs || !existing || !rcs || !errs)))
    return terr_set(e, T_EINVAL, "", -1, "store: insert jobs: bad arguments");
  int rc = 0, chunk = s->be->insert_chunk > 0 ? s->be->insert_chunk
                                               : STORE_INSERT_CHUNK;
  for (int i = 0; i < n; i += chunk) {
    int k = n - i < chunk ? n - i : chunk;
    if (rc) { /* an earlier chunk failed whole: the rest is not tried */
      for (int r = i; r < i + k; r++) {
        existing[r] = 0;
        rcs[r] = rc;
        if (e) errs[r] = *e;
      }
      continue;
    }
    if (!s->be->job_insert_many) {
      rc = terr_set(e, T_ENOTIMPL, "", -1, "store: insert jobs: not on this store");
      i -= chunk; /* every row gets it */
      continue;
    }
    rc = s->be->job_insert_many(s->impl, jobs + i, k, existing + i, rcs + i,
                                errs + i, e);
  }
  return rc;
}

int store_sync(store *s, terr *e) {
  return s->be->sync(s->impl, e);
}

int64_t store_insert_failures(store *s) {
  return s && s->be->insert_failures ? s->be->insert_failures(s->impl) : -1;
}

int store_insert_error(store *s, const char *id, terr *out) {
  return s && id && s->be->insert_error ? s->be->insert_error(s->impl, id, out)
                                        : 0;
}

int store_job_get(store *s, const char *id, const char *owner, store_job *out, terr *e) {
  return s->be->job_get(s->impl, id, owner, out, e);
}

int store_job_by_request(store *s, const char *owner, const char *rid,
                         store_job *out, terr *e) {
  memset(out, 0, sizeof *out);
  out->max_abs_diff = NAN;
  if (!s->be->job_by_request)
    return terr_set(e, T_ENOTIMPL, "store", -1,
                    "store: a read by request_id: not on this store");
  return s->be->job_by_request(s->impl, owner, rid, out, e);
}

int store_job_get_many(store *s, const char *const *ids, int n,
                       store_job *out, int *found, terr *e) {
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].max_abs_diff = NAN;
    found[i] = 0;
  }
  if (s->be->job_get_many)
    return s->be->job_get_many(s->impl, ids, n, out, found, e);
  for (int i = 0; i < n; i++) {
    terr ge;
    int rc = s->be->job_get(s->impl, ids[i], NULL, &out[i], &ge);
    if (rc == T_OK) {
      found[i] = 1;
    } else if (rc == T_ENOTFOUND) {
      store_job_clear(&out[i]);
    } else {
      for (int k = 0; k < i; k++) store_job_clear(&out[k]);
      for (int k = 0; k < n; k++) found[k] = 0;
      if (e) *e = ge;
      return rc;
    }
  }
  return T_OK;
}

int store_job_list(store *s, const store_job_filter *f, store_job **jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e) {
  return s->be->job_list(s->impl, f, jobs, n, has_next, next, total, e);
}

int store_job_start(store *s, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate, terr *e) {
  return s->be->job_start(s->impl, id, started_at, backend_used, reason, estimate, e);
}

void store_job_start_async(store *s, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate) {
  s->be->job_start_async(s->impl, id, started_at, backend_used, reason, estimate);
}

void store_job_progress(store *s, const char *id, int64_t done, int64_t total) {
  s->be->job_progress(s->impl, id, done, total);
}

int store_job_finish(store *s, const char *id, const store_job_end *end, terr *e) {
  return s->be->job_finish(s->impl, id, end, e);
}

int store_job_finish_async(store *s, const char *id, const store_job_end *end, store_finish_fn cb, void *arg, terr *e) {
  return s->be->job_finish_async(s->impl, id, end, cb, arg, e);
}

int store_job_result_npy(store *s, const char *id, const char *owner, void **npy, size_t *len, terr *e) {
  return s->be->job_result_npy(s->impl, id, owner, npy, len, e);
}

int store_job_requeue(store *s, const char *id, terr *e) {
  return s->be->job_requeue(s->impl, id, e);
}

int store_job_unstart(store *s, const char *id, terr *e) {
  return s->be->job_unstart(s->impl, id, e);
}

int store_job_note_start(store *s, const char *id, int attempt, terr *e) {
  return s->be->job_note_start(s->impl, id, attempt, e);
}

int store_job_delete(store *s, const char *id, const char *owner, char ***paths, int *npaths, terr *e) {
  return s->be->job_delete(s->impl, id, owner, paths, npaths, e);
}

int store_job_unfinished(store *s, store_job **jobs, int *n, terr *e) {
  return s->be->job_unfinished(s->impl, jobs, n, e);
}

int store_expire(store *s, int64_t before_ms, char ***paths, int *npaths, terr *e) {
  return s->be->expire(s->impl, before_ms, paths, npaths, e);
}

int store_stats(store *s, const char *owner, store_stat **rows, int *n, terr *e) {
  return s->be->stats(s->impl, owner, rows, n, e);
}

int store_job_counts(store *s, const char *owner, int64_t counts[5], terr *e) {
  return s->be->job_counts(s->impl, owner, counts, e);
}

int store_finished_by_step(store *s, const char *owner, int64_t since_ms, int64_t step_ms, int nsteps, int64_t *counts, terr *e) {
  return s->be->finished_by_step(s->impl, owner, since_ms, step_ms, nsteps, counts, e);
}

int store_array_insert(store *s, store_array *a, int *existing, terr *e) {
  return s->be->array_insert(s->impl, a, existing, e);
}

int store_array_get(store *s, const char *id, const char *owner, store_array *out, terr *e) {
  return s->be->array_get(s->impl, id, owner, out, e);
}

int store_array_delete(store *s, const char *id, const char *owner, char **path, terr *e) {
  return s->be->array_delete(s->impl, id, owner, path, e);
}

int store_array_list(store *s, const char *owner, const char *cursor, int limit, store_array **arrays, int *n, char *next_cursor, terr *e) {
  return s->be->array_list(s->impl, owner, cursor, limit, arrays, n, next_cursor, e);
}

int store_job_children(store *s, const char *parent_id, store_job **jobs, int *n, terr *e) {
  return s->be->job_children(s->impl, parent_id, jobs, n, e);
}

int store_node_register(store *s, store_node *n, terr *e) {
  if (!s->be->node_register) return not_here(e);
  return s->be->node_register(s->impl, n, e);
}

int store_node_heartbeat(store *s, const store_node *n, int64_t lease_ms, const char *const *held, int nheld, char ***cancel, int *ncancel, char ***lost, int *nlost, terr *e) {
  if (!s->be->node_heartbeat) return not_here(e);
  return s->be->node_heartbeat(s->impl, n, lease_ms, held, nheld, cancel, ncancel, lost, nlost, e);
}

int store_node_leave(store *s, const char *node_id, terr *e) {
  if (!s->be->node_leave) return not_here(e);
  return s->be->node_leave(s->impl, node_id, e);
}

int store_node_list(store *s, int64_t keep_ms, store_node **nodes, int *n, terr *e) {
  if (!s->be->node_list) return not_here(e);
  return s->be->node_list(s->impl, keep_ms, nodes, n, e);
}

int store_job_claim(store *s, const char *node_id, store_claim_room room, int parents, int64_t lease_ms, store_job **jobs, int *n, terr *e) {
  if (!s->be->job_claim) return not_here(e);
  return s->be->job_claim(s->impl, node_id, room, parents, lease_ms, jobs, n, e);
}

int store_reap(store *s, int max_attempts, store_reaped **jobs, int *n,
               terr *e) {
  if (!s->be->reap) return not_here(e);
  return s->be->reap(s->impl, max_attempts, jobs, n, e);
}

int store_job_cancel_request(store *s, const char *id, const char *owner, int *ended, terr *e) {
  if (!s->be->job_cancel_request) return not_here(e);
  return s->be->job_cancel_request(s->impl, id, owner, ended, e);
}

int store_listen(store *s, store_event_fn cb, void *arg, uint64_t *token, terr *e) {
  if (!s->be->listen) return not_here(e);
  return s->be->listen(s->impl, cb, arg, token, e);
}

void store_unlisten(store *s, uint64_t token) {
  if (s->be->unlisten) s->be->unlisten(s->impl, token);
}

int store_queue_depth(store *s, int64_t *queued, terr *e) {
  if (!s->be->queue_depth) return not_here(e);
  return s->be->queue_depth(s->impl, queued, e);
}
