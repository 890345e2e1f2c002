/* pg_int.h — what the files of db/pg/ share (private to db/pg/).
 *
 * The PostgreSQL backend (store_pg_backend): a pool of libpq connections
 * (borrowed per call: pg__get / pg__put), a writer thread for the [async]
 * operations of store.h (a FIFO; each batch in one transaction; a [sync]
 * write first waits until every async write queued before it committed —
 * pg__flush), numbered migrations under an advisory lock (pg_schema.c),
 * and the cluster operations (pg_cluster.c: nodes, claims, leases,
 * LISTEN/NOTIFY).
 *
 * Every statement goes through pg__exec (text parameters, $1..$n), which
 * maps a failure to a terr code: connection lost or server gone ->
 * T_EUNAVAIL (and the connection is marked broken: pg__put closes it);
 * unique violation (23505) -> T_ECONFLICT; disk full (53100) -> T_ENOSPACE;
 * else T_EIO. Messages never contain the conninfo (no password leaks).
 *
 * Notifications: one channel, "tessel"; the payload is "<what>:<id>" with
 * what one of "queued", "end", "cancel" (store_listen). A job's insert sends
 * "queued" and its finish "end" in the same transaction as the write
 * (delivered only on commit).
 */
#ifndef TESSEL_DB_PG_INT_H
#define TESSEL_DB_PG_INT_H

#include <libpq-fe.h>

#include "db/store_backend.h"

typedef struct pgstore pgstore; /* defined in pg_store.c */

/* A connection of the pool; blocks while every one is in use. T_EUNAVAIL
 * when the server cannot be reached. */
int pg__get(pgstore *p, PGconn **c, terr *e);
/* Give it back; broken != 0 (or a connection libpq says is bad): closed. */
void pg__put(pgstore *p, PGconn *c, int broken);
/* A connection of its own, outside the pool (the listener's): PQfinish it. */
int pg__connect(pgstore *p, PGconn **c, terr *e);
/* Run sql with n text parameters (NULL values are SQL NULL). *res (when
 * res is not NULL) gets the result to PQclear; else it is cleared here.
 * 0, or a terr code as above with "<what>: <server message>". */
int pg__exec(PGconn *c, const char *sql, int n, const char *const *vals,
             PGresult **res, const char *what, terr *e);
/* BEGIN / COMMIT / ROLLBACK on c. */
int pg__begin(PGconn *c, terr *e);
int pg__commit(PGconn *c, terr *e);
void pg__rollback(PGconn *c);
/* [sync] Wait until every async write queued before the call committed. */
int pg__flush(pgstore *p, terr *e);
/* Read a row selected with PG_JOB_COLS (the same names and order as the
 * SQLite backend's job columns, then the cluster ones) into *j. */
int pg__job_row(PGresult *r, int row, store_job *j);
/* The store's clock (wall ms): now() on the server, for leases. */
int pg__now_ms(PGconn *c, int64_t *ms, terr *e);

/* The node this store registered as (pg_node_register sets it): start and
 * finish then only touch rows unclaimed or claimed by it (pg_store.c). */
void pg__set_node(pgstore *p, const char *node_id);

/* pg_cluster.c: the cluster entries of store_pg_backend. */
int pg_node_register(void *impl, store_node *n, terr *e);
int pg_node_heartbeat(void *impl, const store_node *n, int64_t lease_ms,
                      const char *const *held, int nheld, char ***cancel,
                      int *ncancel, char ***lost, int *nlost, terr *e);
int pg_node_leave(void *impl, const char *node_id, terr *e);
int pg_node_list(void *impl, int64_t keep_ms, store_node **nodes, int *n,
                 terr *e);
int pg_job_claim(void *impl, const char *node_id, int has_gpu, int parents,
                 int max, int64_t lease_ms, store_job **jobs, int *n,
                 terr *e);
int pg_reap(void *impl, int max_attempts, char ***ids, int *n, terr *e);
int pg_job_cancel_request(void *impl, const char *id, const char *owner,
                          int *ended, terr *e);
int pg_listen(void *impl, store_event_fn cb, void *arg, uint64_t *token,
              terr *e);
void pg_unlisten(void *impl, uint64_t token);
int pg_queue_depth(void *impl, int64_t *queued, terr *e);
/* Stop the listener thread (store close). */
void pg__listen_stop(pgstore *p);

#endif
