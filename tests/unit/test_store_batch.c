/* test_store_batch.c — group commit's promise and store_insert_jobs, on
 * SQLite and (run through tests/cluster/with_pg.sh as store_batch_pg) on
 * PostgreSQL.
 *
 * Checks: store_insert_jobs over several chunks stores every good row
 * (present after a reopen) while the bad ones fail alone, each with its own
 * code and field (a missing kind, a request_id used for another body, an
 * array that is not there), a request_id seen before answers the stored
 * job (existing), and a repeat inside one batch answers the first row;
 * the same batch again answers the same ids; store_job_get_many reads
 * each asked id (twice, unknown);
 * "acknowledged => durable" under SIGKILL: a forked child runs 8 threads
 * that submit single jobs and batches at once and writes each acknowledged
 * id to a pipe right after its call returned; the parent kills the child
 * with SIGKILL once enough ids came, reopens the store and finds every
 * acknowledged id there.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "store_fixture.h"

static int present(store *s, const char *id) {
  store_job g;
  terr e;
  int rc = store_job_get(s, id, NULL, &g, &e);
  if (rc == 0) store_job_clear(&g);
  return rc == 0;
}

TEST(test_insert_jobs_rows_fail_alone) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  terr e;
  /* A job with request_id "seen", inserted before the batch. */
  store_job pre;
  job_init(&pre, "alice", "map");
  pre.request_id = sdup("seen");
  pre.body_hash = sdup("h1");
  CHECK(store_job_insert(s, &pre, NULL, &e) == 0);

  enum { N = 600 }; /* several chunks (STORE_INSERT_CHUNK), the last one short */
  static store_job jobs[N];
  static int existing[N], rcs[N];
  static terr errs[N];
  for (int i = 0; i < N; i++) job_init(&jobs[i], "alice", "map");
  free(jobs[5].kind); /* refused before the store */
  jobs[5].kind = NULL;
  jobs[300].request_id = sdup("seen"); /* the same body: the stored job */
  jobs[300].body_hash = sdup("h1");
  jobs[301].request_id = sdup("seen"); /* another body: a conflict */
  jobs[301].body_hash = sdup("h2");
  free(jobs[520].params); /* an array nobody stored */
  jobs[520].params = sdup("{\"inputs\":{\"x\":{\"array\":\"a_nothere\"}}}");
  jobs[10].request_id = sdup("twice"); /* twice in one batch */
  jobs[10].body_hash = sdup("h3");
  jobs[11].request_id = sdup("twice");
  jobs[11].body_hash = sdup("h3");
  CHECK(store_insert_jobs(s, jobs, N, existing, rcs, errs, &e) == 0);
  CHECK(rcs[5] == T_EINVAL && strcmp(errs[5].field, "kind") == 0);
  CHECK(rcs[300] == 0 && existing[300] == 1 &&
        strcmp(jobs[300].id, pre.id) == 0);
  CHECK(rcs[301] == T_ECONFLICT && strcmp(errs[301].field, "request_id") == 0);
  CHECK_MSG(rcs[520] == T_ENOTFOUND &&
                strcmp(errs[520].field, "params.inputs.x") == 0,
            "rc %d field %s", rcs[520], errs[520].field);
  CHECK(rcs[10] == 0 && existing[10] == 0);
  CHECK(rcs[11] == 0 && existing[11] == 1 &&
        strcmp(jobs[11].id, jobs[10].id) == 0);
  int good = 0;
  for (int i = 0; i < N; i++)
    if (rcs[i] == 0 && !existing[i]) good++;
  CHECK(good == N - 5);
  store_close(s);

  s = reopen(dir);
  if (!s) return;
  int found = 0, wrong = 0;
  for (int i = 0; i < N; i++) {
    if (rcs[i] != 0) continue;
    store_job g;
    if (store_job_get(s, jobs[i].id, "alice", &g, &e) == 0) {
      found++;
      if (g.status != JOB_QUEUED) wrong++;
      store_job_clear(&g);
    }
  }
  CHECK_MSG(found == N - 3 && wrong == 0, "found %d of %d, %d wrong", found,
            N - 3, wrong);
  int64_t c[5];
  CHECK(store_job_counts(s, "alice", c, &e) == 0);
  CHECK_MSG(c[JOB_QUEUED] == 1 + good, "queued %lld, want %d",
            (long long)c[JOB_QUEUED], 1 + good);
  for (int i = 0; i < N; i++) store_job_clear(&jobs[i]);
  store_job_clear(&pre);
  CHECK(store_insert_jobs(s, NULL, 0, NULL, NULL, NULL, &e) == 0);
  store_close(s);
}

/* The same rows again (PostgreSQL: one INSERT a chunk, db/pg/pg_bulk.c,
 * and one read of the request_ids already taken): every row sent before
 * answers its first id and nothing new is made; each stored row holds its
 * own values, quotes, backslashes and non-ASCII bytes included. */
TEST(test_insert_jobs_again_same_ids) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  terr e;
  enum { N = 100, M = 150 };
  static store_job a[N], b[M];
  static int ex[M], rcs[M];
  static terr errs[M];
  char txt[200];
  for (int i = 0; i < N; i++) {
    job_init(&a[i], "alice", "map");
    snprintf(txt, sizeof txt, "rid-%d", i);
    a[i].request_id = sdup(txt);
    snprintf(txt, sizeof txt, "hash-%d", i);
    a[i].body_hash = sdup(txt);
    free(a[i].params);
    snprintf(txt, sizeof txt,
             "{\"expr\":\"x+%d\",\"note\":\"q\\\"\\\\ \u00e9 {,}\",\"inputs\":{\"x\":[%d]}}",
             i, i);
    a[i].params = sdup(txt);
    a[i].priority = i % 5;
    if (i % 3) {
      snprintf(txt, sizeof txt, "lab\"el,%d", i);
      a[i].label = sdup(txt);
    }
  }
  CHECK(store_insert_jobs(s, a, N, ex, rcs, errs, &e) == 0);
  for (int i = 0; i < N; i++)
    CHECK_MSG(rcs[i] == 0 && ex[i] == 0, "row %d: %d %s", i, rcs[i],
              errs[i].message);
  /* again, reversed, with 50 new rows among them */
  for (int i = 0; i < M; i++) {
    job_init(&b[i], "alice", "map");
    int k = i < N ? N - 1 - i : i;
    snprintf(txt, sizeof txt, "rid-%d", k);
    b[i].request_id = sdup(txt);
    snprintf(txt, sizeof txt, "hash-%d", k);
    b[i].body_hash = sdup(txt);
  }
  CHECK(store_insert_jobs(s, b, M, ex, rcs, errs, &e) == 0);
  int same = 0, fresh = 0;
  for (int i = 0; i < M; i++) {
    if (rcs[i]) continue;
    if (i < N)
      same += ex[i] == 1 && strcmp(b[i].id, a[N - 1 - i].id) == 0;
    else
      fresh += ex[i] == 0;
  }
  CHECK_MSG(same == N && fresh == M - N, "same %d of %d, new %d of %d", same,
            N, fresh, M - N);
  int64_t c[5];
  CHECK(store_job_counts(s, "alice", c, &e) == 0 && c[JOB_QUEUED] == M);
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    store_job g;
    if (store_job_get(s, a[i].id, "alice", &g, &e) != 0) {
      wrong++;
      continue;
    }
    wrong += strcmp(g.params, a[i].params) != 0 ||
             g.priority != a[i].priority ||
             !((!g.label && !a[i].label) ||
               (g.label && a[i].label && strcmp(g.label, a[i].label) == 0)) ||
             strcmp(g.request_id, a[i].request_id) != 0 ||
             g.status != JOB_QUEUED;
    store_job_clear(&g);
  }
  CHECK_MSG(wrong == 0, "%d rows differ from what was sent", wrong);
  for (int i = 0; i < N; i++) store_job_clear(&a[i]);
  for (int i = 0; i < M; i++) store_job_clear(&b[i]);
  store_close(s);
}

/* store_job_get_many (PostgreSQL: one SELECT; SQLite: one by one): each
 * asked id its own row, an id twice gets it twice, an unknown id (one
 * with a quote and a backslash too) found 0 and its row cleared. */
TEST(test_get_many) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  enum { N = 6 };
  static char ids[4][T_ID_MAX];
  for (int i = 0; i < 4; i++) {
    store_job j;
    job_init(&j, i % 2 ? "bob" : "alice", "map");
    j.priority = 10 + i;
    CHECK(store_job_insert(s, &j, NULL, &e) == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
  }
  const char *ask[N] = {ids[2], "j_nothere", ids[0], ids[2], "j_\"x\\", ids[3]};
  int want[N] = {2, -1, 0, 2, -1, 3};
  store_job out[N];
  int found[N];
  CHECK(store_job_get_many(s, ask, N, out, found, &e) == 0);
  for (int i = 0; i < N; i++) {
    if (want[i] < 0) {
      CHECK_MSG(!found[i] && out[i].owner == NULL, "ask %d", i);
      continue;
    }
    CHECK_MSG(found[i] && strcmp(out[i].id, ids[want[i]]) == 0 &&
                  out[i].priority == 10 + want[i] &&
                  strcmp(out[i].owner, want[i] % 2 ? "bob" : "alice") == 0,
              "ask %d", i);
    store_job_clear(&out[i]);
  }
  CHECK(store_job_get_many(s, ask, 0, out, found, &e) == 0);
  store_close(s);
}

/* ---- acknowledged => durable under SIGKILL ------------------------------- */

typedef struct child_worker {
  store *s;
  int index, fd;
} child_worker;

/* Each record on the pipe is one id of T_ID_MAX bytes (under PIPE_BUF, so
 * the threads' writes never interleave). */
static void ack(int fd, const char *id) {
  char rec[T_ID_MAX];
  memset(rec, 0, sizeof rec);
  snprintf(rec, sizeof rec, "%s", id);
  if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec) _exit(3);
}

static void *child_submit(void *p) {
  child_worker *w = p;
  terr e;
  for (int round = 0;; round++) {
    if (w->index % 2) { /* single submits */
      store_job j;
      job_init(&j, "crash", "map");
      if (store_job_insert(w->s, &j, NULL, &e) == 0) ack(w->fd, j.id);
      store_job_clear(&j);
      continue;
    }
    enum { B = 40 }; /* batches */
    store_job jobs[B];
    int ex[B], rcs[B];
    terr errs[B];
    for (int i = 0; i < B; i++) job_init(&jobs[i], "crash", "map");
    store_insert_jobs(w->s, jobs, B, ex, rcs, errs, &e);
    for (int i = 0; i < B; i++) {
      if (rcs[i] == 0) ack(w->fd, jobs[i].id);
      store_job_clear(&jobs[i]);
    }
  }
  return NULL;
}

static void child_main(const char *dir, int fd) {
  store *s = NULL;
  terr e;
  if (store_open_url(test_pg(), dir, &s, &e) != 0) _exit(2);
  enum { T = 8 };
  child_worker w[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    w[i] = (child_worker){s, i, fd};
    pthread_create(&th[i], NULL, child_submit, &w[i]);
  }
  for (;;) pause(); /* until SIGKILL */
}

TEST(test_kill9_keeps_acknowledged) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  store_close(s); /* the schema exists; the child opens it */
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    child_main(dir, pfd[1]);
  }
  close(pfd[1]);
  enum { WANT = 3000, CAP = 400000 };
  static char ids[CAP][T_ID_MAX];
  long n = 0;
  char rec[T_ID_MAX];
  size_t got = 0;
  int killed = 0;
  for (;;) {
    ssize_t r = read(pfd[0], rec + got, sizeof rec - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* the child is gone: every write end closed */
    got += (size_t)r;
    if (got < sizeof rec) continue;
    got = 0;
    if (n < CAP) memcpy(ids[n++], rec, T_ID_MAX);
    if (n >= WANT && !killed) {
      kill(pid, SIGKILL); /* records already in the pipe are still read */
      killed = 1;
    }
  }
  int st = 0;
  waitpid(pid, &st, 0);
  close(pfd[0]);
  CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
            "child ended otherwise (status %d)", st);
  CHECK(n >= WANT);
  s = reopen(dir);
  if (!s) return;
  long lost = 0;
  for (long i = 0; i < n; i++)
    if (!present(s, ids[i])) {
      if (lost < 3) printf("  lost: %s\n", ids[i]);
      lost++;
    }
  CHECK_MSG(lost == 0, "%ld of %ld acknowledged jobs lost", lost, n);
  printf("  %ld acknowledged jobs, all present after SIGKILL\n", n);
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_store_batch_XXXXXX")) return 1;
  RUN(test_insert_jobs_rows_fail_alone);
  RUN(test_insert_jobs_again_same_ids);
  RUN(test_get_many);
  RUN(test_kill9_keeps_acknowledged);
  rm_tree(root);
  return check_summary();
}
