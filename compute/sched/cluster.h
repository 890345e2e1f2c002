/* cluster.h — the cluster node (compute/sched/cluster.c): on a cluster
 * store the scheduler registers as a node, heartbeats (renewing its leases),
 * reaps dead nodes' jobs and claims queued ones per kind of worker. What
 * the node needs of the rest of the scheduler (sched_add_claimed,
 * sched_cancel_held, sched_drop_lost, sched_fire_remote) is in sched_int.h.
 */
#ifndef TESSEL_SCHED_CLUSTER_H
#define TESSEL_SCHED_CLUSTER_H

#include <stdint.h>

#include "compute/sched/sched.h"
#include "util/util.h"

/* compute/sched/cluster.c: the node (see there). create/destroy with the
 * scheduler; stop (from sched_shutdown, once no job runs) ends the node
 * thread, the listener and, with store_node_leave, the node's claims. */
int sched_cluster_create(sched *s, terr *e);
void sched_cluster_stop(sched *s);
void sched_cluster_destroy(sched *s);
/* Wake the claimer (a job was submitted, or a local job ended). Any thread,
 * no lock held or [mu]; never blocks. */
void sched_cluster_kick(sched *s);
/* The fenced "still held" step of a run's end, before it touches anything
 * outside the store (an output file, compute/sched/run.c): a heartbeat of this
 * node naming the job (which renews its leases, as every heartbeat does).
 * 0 when this node still holds the job; T_ECONFLICT when it went to
 * another node or ended there (this node was paused past its lease); the
 * store's error otherwise. 0 at once on a single-node store. A worker
 * thread, no lock held ([sync] store call). */
int sched_cluster_hold(sched *s, const char *id, terr *e);
/* The same, to read the store for the remote waiters registered since. */
void sched_cluster_recheck(sched *s);
/* The cluster's view for admission: queued jobs in the whole store, live
 * nodes with a GPU (both as of the last heartbeat; 0 before the first). */
int64_t sched_cluster_depth(sched *s);
/* Admission refused a submit by the cluster's queue depth: the node thread
 * reads the depth again soon (at most every SCHED_DEPTH_EVERY_MS), not at
 * its next heartbeat. May be called with sched.mu held. */
void sched_cluster_depth_stale(sched *s);
int sched_cluster_gpu_nodes(sched *s);

#endif
