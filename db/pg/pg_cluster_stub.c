/* pg_cluster_stub.c — placeholders for the cluster entries of
 * store_pg_backend (pg_int.h) until db/pg/pg_cluster.c (branch
 * wip/pgcluster2) is merged: each answers T_ENOTIMPL, so the backend links
 * and its non-cluster entries can be tested. Delete this file when
 * pg_cluster.c comes. No state, any thread.
 */
#include "db/pg/pg_int.h"

static int later(terr *e) {
  return terr_set(e, T_ENOTIMPL, "store", -1,
                  "store: the cluster operations are not built yet");
}

int pg_node_register(void *impl, store_node *n, terr *e) {
  (void)impl;
  (void)n;
  return later(e);
}

int pg_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms,
                      const char *const *held, int nheld, char ***cancel,
                      int *ncancel, char ***lost, int *nlost, terr *e) {
  (void)impl, (void)n, (void)lease_ms, (void)held, (void)nheld;
  *cancel = *lost = NULL;
  *ncancel = *nlost = 0;
  return later(e);
}

int pg_node_leave(void *impl, const char *node_id, terr *e) {
  (void)impl, (void)node_id;
  return later(e);
}

int pg_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n,
                 terr *e) {
  (void)impl, (void)keep_ms;
  *nodes = NULL;
  *n = 0;
  return later(e);
}

int pg_job_claim(void *impl, const char *node_id, int has_gpu, int parents,
                 int max, int64_t lease_ms, store_job **jobs, int *n,
                 terr *e) {
  (void)impl, (void)node_id, (void)has_gpu, (void)parents, (void)max,
      (void)lease_ms;
  *jobs = NULL;
  *n = 0;
  return later(e);
}

int pg_reap(void *impl, int max_attempts, char ***ids, int *n, terr *e) {
  (void)impl, (void)max_attempts;
  *ids = NULL;
  *n = 0;
  return later(e);
}

int pg_job_cancel_request(void *impl, const char *id, const char *owner,
                          int *ended, terr *e) {
  (void)impl, (void)id, (void)owner;
  *ended = 0;
  return later(e);
}

int pg_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token,
              terr *e) {
  (void)impl, (void)cb, (void)arg;
  *token = 0;
  return later(e);
}

void pg_unlisten(void *impl, uint64_t token) { (void)impl, (void)token; }

int pg_queue_depth(void *impl, int64_t *queued, terr *e) {
  (void)impl;
  *queued = 0;
  return later(e);
}

void pg__listen_stop(pgstore *p) { (void)p; }
