/* bench_claim.c — the claim rate of the cluster store alone: how many jobs
 * per second PostgreSQL hands out through store_job_claim (SELECT ... FOR
 * UPDATE SKIP LOCKED), with K claimers at once, each its own store (as K
 * nodes are) and batch sizes of 1 (a node with one free slot) and 8.
 *
 *   bench_claim CONNINFO [jobs per run, default 4000] [claimers, default 1,2,4,8]
 *
 * Each run inserts its jobs ([async] inserts, one sync), then the claimers
 * claim until the queue is empty; the table gives claims/s and the ratio to
 * one claimer with batches of 1. The database is the caller's (a scratch
 * one: tests/cluster/pgserver.sh); rows are left there. bench_cluster.py
 * runs this next to its HTTP figures.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/store.h"
#include "util/util.h"

typedef struct claimer {
  store *st;
  char node[T_ID_MAX];
  int batch;
  atomic_long *claimed;
  int64_t jobs;
  int failed;
} claimer;

static void *claim_loop(void *p) {
  claimer *c = p;
  terr e;
  for (;;) {
    store_job *v = NULL;
    int n = 0;
    store_claim_room room = {c->batch, 0, c->batch};
    if (store_job_claim(c->st, c->node, room, 0, 60000, &v, &n, &e)) {
      fprintf(stderr, "claim: %s\n", e.message);
      c->failed = 1;
      return NULL;
    }
    for (int i = 0; i < n; i++) store_job_clear(&v[i]);
    free(v);
    if (n == 0) return NULL; /* the queue is empty */
    atomic_fetch_add(c->claimed, n);
  }
}

static int insert_jobs(store *st, int64_t n) {
  terr e;
  for (int64_t i = 0; i < n; i++) {
    store_job j;
    memset(&j, 0, sizeof j);
    j.owner = (char *)"";
    j.kind = (char *)"map";
    j.params = (char *)"{\"expr\":\"x+1\",\"inputs\":{\"x\":[1]}}";
    j.backend_requested = (char *)"cpu";
    if (store_job_insert_async(st, &j, &e)) {
      fprintf(stderr, "insert: %s\n", e.message);
      return -1;
    }
  }
  return store_sync(st, &e) ? -1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CONNINFO [jobs] [claimers,...]\n", argv[0]);
    return 2;
  }
  const char *url = argv[1];
  int64_t jobs = argc > 2 ? atoll(argv[2]) : 4000;
  const char *list = argc > 3 ? argv[3] : "1,2,4,8";
  char dir[] = "/tmp/tessel-claim-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  int ks[16], nk = 0;
  for (const char *p = list; *p && nk < 16;) {
    ks[nk++] = atoi(p);
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  store *st[16] = {0};
  terr e;
  for (int i = 0; i < 16; i++) {
    if (store_open_url(url, dir, &st[i], &e)) {
      fprintf(stderr, "open: %s\n", e.message);
      return 1;
    }
  }
  printf("claim rate of the store alone (%lld jobs a run, %ld cores)\n",
         (long long)jobs, sysconf(_SC_NPROCESSORS_ONLN));
  printf("%-9s %-6s %12s %12s %8s\n", "claimers", "batch", "claims/s",
         "ms/claim", "ratio");
  double base = 0;
  int rc = 0;
  int batches[2] = {1, 8};
  for (int b = 0; b < 2; b++) {
    for (int ki = 0; ki < nk; ki++) {
      int k = ks[ki] < 1 ? 1 : ks[ki] > 16 ? 16 : ks[ki];
      if (insert_jobs(st[0], jobs)) return 1;
      atomic_long claimed = 0;
      claimer c[16];
      pthread_t th[16];
      for (int i = 0; i < k; i++) {
        c[i] = (claimer){.st = st[i], .batch = batches[b], .claimed = &claimed};
        store_node n = {0};
        n.name = (char *)"bench";
        n.threads = 1;
        if (store_node_register(st[i], &n, &e)) {
          fprintf(stderr, "register: %s\n", e.message);
          return 1;
        }
        memcpy(c[i].node, n.id, sizeof n.id);
      }
      double t0 = t_now_ms();
      for (int i = 0; i < k; i++) pthread_create(&th[i], NULL, claim_loop, &c[i]);
      for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        rc |= c[i].failed;
      }
      double ms = t_now_ms() - t0;
      long got = atomic_load(&claimed);
      double rate = got / (ms / 1e3);
      if (!base) base = rate;
      printf("%-9d %-6d %12.0f %12.3f %8.2f%s\n", k, batches[b], rate,
             got ? ms * k / got : 0.0, rate / base,
             got == jobs ? "" : "  (not every job claimed!)");
      if (got != jobs) rc = 1;
    }
  }
  for (int i = 0; i < 16; i++) store_close(st[i]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return rc;
}
