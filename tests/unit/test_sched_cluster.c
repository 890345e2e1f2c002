/* test_sched_cluster.c — the parts of the node (compute/sched/cluster.c) that need
 * no PostgreSQL server.
 *
 * Asserts:
 *  - the claimer's room, per kind of worker: its slots minus the jobs
 *    queued for it and running on it, the total less the queued auto jobs,
 *    never below 0 (a node never claims more than it can start, nor a
 *    CPU-only job for a free GPU worker);
 *  - a claimed row (node set: a cluster store's claim, which counted this
 *    run's attempt) becomes a job whose attempts are those before this run
 *    and whose result files are named for the run ("<id>.r<attempt>"), so a
 *    run whose lease was lost never writes or removes its successor's
 *    files; a row without a node keeps the id and its attempts;
 *  - on SQLite the scheduler is one node: sched_join records name and url,
 *    sched_nodes answers this process alone (alive, its threads, the same
 *    id as sched_node_self), sched_live_nodes is 1, and sched_wait_end on a
 *    job the scheduler does not hold answers 1 at once (no remote waiter:
 *    the caller reads the store).
 */
#include "compute/sched/sched_int.h"
#include "sched_fixture.h"

static int room_is(store_claim_room r, int cpu, int gpu, int any) {
  return r.cpu == cpu && r.gpu == gpu && r.any == any;
}

/* (cpu workers, gpu workers, queued cpu, gpu, auto, running cpu, gpu) */
TEST(test_claim_room) {
  /* no GPU: every job queues for the CPU workers, as one pool of slots */
  CHECK(room_is(sched_claim_room(4, 0, 0, 0, 0, 0, 0), 4, 0, 4));
  CHECK(room_is(sched_claim_room(4, 0, 1, 0, 0, 2, 0), 1, 0, 1));
  CHECK(room_is(sched_claim_room(4, 0, 2, 0, 0, 2, 0), 0, 0, 0));
  /* over (memory waits): never below 0 */
  CHECK(room_is(sched_claim_room(4, 0, 3, 0, 0, 2, 0), 0, 0, 0));
  CHECK(room_is(sched_claim_room(0, 0, 0, 0, 0, 0, 0), 0, 0, 0));
  /* 1 CPU + 1 GPU worker, the CPU one busy: room for a cuda or an auto
   * job, none for a CPU-only one (it would wait for the busy worker while
   * another node idles: tests/cluster/test_two_nodes.sh on the GPU host) */
  CHECK(room_is(sched_claim_room(1, 1, 0, 0, 0, 1, 0), 0, 1, 1));
  /* the GPU worker busy instead: a CPU-only or an auto job, no cuda one */
  CHECK(room_is(sched_claim_room(1, 1, 0, 0, 0, 0, 1), 1, 0, 1));
  /* 16 CPU + 1 GPU, 16 running on CPU: as above */
  CHECK(room_is(sched_claim_room(16, 1, 0, 0, 0, 16, 0), 0, 1, 1));
  /* queued auto jobs take either kind's slot: the total shrinks, and each
   * kind's room is at most the total */
  CHECK(room_is(sched_claim_room(2, 1, 0, 0, 2, 0, 0), 1, 1, 1));
  CHECK(room_is(sched_claim_room(2, 1, 0, 0, 3, 0, 0), 0, 0, 0));
  /* queued cuda jobs fill the GPU slots only */
  CHECK(room_is(sched_claim_room(2, 1, 0, 1, 0, 0, 0), 2, 0, 2));
  /* an unhealthy GPU (0 GPU workers): cuda never, the rest by CPU slots */
  CHECK(room_is(sched_claim_room(2, 0, 0, 0, 0, 1, 0), 1, 0, 1));
}

TEST(test_claimed_row_names_its_run) {
  store_job row;
  memset(&row, 0, sizeof row);
  snprintf(row.id, sizeof row.id, "j_01m7yjgaqf000005ep7bc8rce7");
  row.kind = "map";
  row.params = "{}";
  row.backend_requested = "cpu";
  row.attempts = 2;
  sjob *j = sjob_new(&row);
  CHECK(j && strcmp(j->stem, row.id) == 0 && j->attempts == 2);
  sjob_free(j);
  row.node = "n_01m7yjgaqf000005ep7bc8rce7";
  j = sjob_new(&row);
  CHECK(j && strcmp(j->stem, "j_01m7yjgaqf000005ep7bc8rce7.r2") == 0);
  CHECK(j && j->attempts == 1);
  sjob_free(j);
}

static void never(void *arg, const char *id, const store_job *ended) {
  (void)id, (void)ended;
  atomic_fetch_add((atomic_int *)arg, 1);
}

TEST(test_sqlite_is_one_node) {
  fx f;
  if (fx_open(&f, 3)) return;
  terr e;
  sched_node_config nc = {.name = "alpha", .url = "http://127.0.0.1:1/",
                          .version = "test", .lease_ms = 0};
  CHECK(sched_join(f.s, &nc, &e) == 0);
  CHECK(sched_live_nodes(f.s) == 1);
  char id[T_ID_MAX], name[64];
  sched_node_self(f.s, id, name, sizeof name);
  CHECK(strcmp(name, "alpha") == 0 && t_id_valid('n', id));
  store_node *nodes = NULL;
  int n = 0;
  CHECK(sched_nodes(f.s, &nodes, &n, &e) == 0);
  CHECK(n == 1);
  if (n == 1) {
    CHECK(strcmp(nodes[0].id, id) == 0);
    CHECK(strcmp(nodes[0].name, "alpha") == 0);
    CHECK(strcmp(nodes[0].url, "http://127.0.0.1:1/") == 0);
    CHECK(nodes[0].alive == 1 && nodes[0].threads == 3);
    CHECK(nodes[0].heartbeat_at > 0 && nodes[0].started_at > 0);
  }
  store_nodes_free(nodes, n);
  atomic_int calls;
  atomic_init(&calls, 0);
  uint64_t token = 0;
  CHECK(sched_wait_end(f.s, "j_01m7yjgaqf000005ep7bc8rce7", never, &calls,
                       &token) == 1);
  CHECK(sched_unwait(f.s, token) == 0);
  fx_close(&f);
  CHECK(atomic_load(&calls) == 0);
}

int main(void) {
  t_log_level = T_LOG_WARN;
  snprintf(root, sizeof root, "/tmp/tessel_schedcl_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_claim_room);
  RUN(test_claimed_row_names_its_run);
  RUN(test_sqlite_is_one_node);
  rm_tree(root);
  return check_summary();
}
