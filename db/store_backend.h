/* store_backend.h — what a store backend fills: one function per
 * operation of store.h, with the same meaning and arguments, the store
 * replaced by the backend's own handle (impl). db/store.c holds the
 * `store` (a backend and its handle) and dispatches; db/sqlite/ and db/pg/
 * each define one table. An entry may be NULL only where marked
 * "cluster" or "optional": the dispatcher then answers T_ENOTIMPL ("not on
 * this store"), or does without it where store.h says how.
 * Private to db/.
 */
#ifndef TESSEL_DB_STORE_BACKEND_H
#define TESSEL_DB_STORE_BACKEND_H

#include "db/store.h"
#include "db/store_common.h"

typedef struct store_backend {
  const char *name; /* "sqlite" | "postgresql" (store_kind) */
  int cluster;      /* store_is_cluster */
  int insert_chunk; /* store_insert_jobs' rows per transaction (0: the
                       STORE_INSERT_CHUNK default) */
  void (*close)(void *impl);
  int (*ready)(void *impl);
  int (*schema_version)(void *impl);
  int (*job_insert)(void *impl, store_job *j, int *existing, terr *e);
  int (*job_insert_async)(void *impl, store_job *j, terr *e);
  /* one chunk of store_insert_jobs (n <= insert_chunk), one write */
  int (*job_insert_many)(void *impl, store_job *jobs, int n, int *existing, int *rcs, terr *errs, terr *e);
  int (*sync)(void *impl, terr *e);
  /* optional (NULL: store_insert_failures answers -1) */
  int64_t (*insert_failures)(void *impl);
  /* optional (NULL: store_insert_error knows none) */
  int (*insert_error)(void *impl, const char *id, terr *out);
  int (*job_get)(void *impl, const char *id, const char *owner, store_job *out, terr *e);
  /* optional (NULL: store.c reads them one by one with job_get) */
  int (*job_get_many)(void *impl, const char *const *ids, int n, store_job *out, int *found, terr *e);
  /* optional (NULL: T_ENOTIMPL; one-node stores: an idempotent [async]
   * insert's read, compute/jobs/rids.h) */
  int (*job_by_request)(void *impl, const char *owner, const char *rid, store_job *out, terr *e);
  int (*job_list)(void *impl, const store_job_filter *f, store_job **jobs, int *n, int *has_next, store_job_pos *next, int64_t *total, terr *e);
  int (*job_start)(void *impl, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate, terr *e);
  void (*job_start_async)(void *impl, const char *id, int64_t started_at, const char *backend_used, const char *reason, const char *estimate);
  void (*job_progress)(void *impl, const char *id, int64_t done, int64_t total);
  int (*job_finish)(void *impl, const char *id, const store_job_end *end, terr *e);
  int (*job_finish_async)(void *impl, const char *id, const store_job_end *end, store_finish_fn cb, void *arg, terr *e);
  int (*job_result_npy)(void *impl, const char *id, const char *owner, void **npy, size_t *len, terr *e);
  int (*job_requeue)(void *impl, const char *id, terr *e);
  int (*job_unstart)(void *impl, const char *id, terr *e);
  int (*job_note_start)(void *impl, const char *id, int attempt, terr *e);
  int (*job_delete)(void *impl, const char *id, const char *owner, char ***paths, int *npaths, terr *e);
  int (*job_unfinished)(void *impl, store_job **jobs, int *n, terr *e);
  int (*expire)(void *impl, int64_t before_ms, char ***paths, int *npaths, terr *e);
  int (*stats)(void *impl, const char *owner, store_stat **rows, int *n, terr *e);
  int (*job_counts)(void *impl, const char *owner, int64_t counts[5], terr *e);
  int (*finished_by_step)(void *impl, const char *owner, int64_t since_ms, int64_t step_ms, int nsteps, int64_t *counts, terr *e);
  int (*array_insert)(void *impl, store_array *a, int *existing, terr *e);
  int (*array_get)(void *impl, const char *id, const char *owner, store_array *out, terr *e);
  int (*array_delete)(void *impl, const char *id, const char *owner, char **path, terr *e);
  int (*array_list)(void *impl, const char *owner, const char *cursor, int limit, store_array **arrays, int *n, char *next_cursor, terr *e);
  int (*job_children)(void *impl, const char *parent_id, store_job **jobs, int *n, terr *e);
  int (*node_register)(void *impl, store_node *n, terr *e); /* cluster */
  int (*node_heartbeat)(void *impl, const store_node *n, int64_t lease_ms, const char *const *held, int nheld, char ***cancel, int *ncancel, char ***lost, int *nlost, terr *e); /* cluster */
  int (*node_leave)(void *impl, const char *node_id, terr *e); /* cluster */
  int (*node_list)(void *impl, int64_t keep_ms, store_node **nodes, int *n, terr *e); /* cluster */
  int (*job_claim)(void *impl, const char *node_id, store_claim_room room, int parents, int64_t lease_ms, store_job **jobs, int *n, terr *e); /* cluster */
  int (*reap)(void *impl, int max_attempts, store_reaped **jobs, int *n, terr *e); /* cluster */
  int (*job_cancel_request)(void *impl, const char *id, const char *owner, int *ended, terr *e); /* cluster */
  int (*listen)(void *impl, store_event_fn cb, void *arg, uint64_t *token, terr *e); /* cluster */
  void (*unlisten)(void *impl, uint64_t token); /* cluster */
  int (*queue_depth)(void *impl, int64_t *queued, terr *e); /* cluster */
} store_backend;

/* The backend's handle of a store (for db/ and the store's own tests). */
void *store_impl(store *s);
/* A store on a backend table of one's own: tests only (a fake cluster
 * backend, tests/unit/test_sched_nodes.c). Takes impl (closed on failure). */
int store_open_backend(const store_backend *be, void *impl, store **out,
                       terr *e);

/* The backends (each in its folder). open: the handle in *impl. */
extern const store_backend store_sqlite_backend;
int store_sqlite_open(const char *data_dir, void **impl, terr *e);
extern const store_backend store_pg_backend;
/* conninfo: libpq's URI or key=value text; data_dir: see store_open_url. */
int store_pg_open(const char *conninfo, const char *data_dir, void **impl,
                  terr *e);

#endif
