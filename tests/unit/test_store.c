/* test_store.c — unit tests of the SQLite job and array store (db/).
 *
 * Each test opens a store in its own fresh directory under a mkdtemp root
 * (removed at the end) and checks one behaviour through the public API of
 * db/store.h: migration and reopen, every field's round trip, owner
 * isolation, idempotency, listing filters and paging, the job lifecycle
 * (with the async start and results kept in the row), recovery order,
 * deletes and conflicts, arrays, expiry, stats. The writer
 * thread under concurrent callers is tested in test_store_threads.c.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "server/http.h"
#include "store_fixture.h"
#include "db/pg/pg_int.h" /* pg__set_node: the node fence, without pg_cluster.c */

/* Typed timings and results compared field by field (the records hold
 * no pointers, so equal values are equal bytes once zeroed the same way). */

/* store_job_delete with one file at most (these jobs have no parts): *path
 * the file or NULL. */
static int job_delete1(store *s, const char *id, const char *owner,
                       char **path, terr *e) {
  char **v = NULL;
  int n = -1;
  int rc = store_job_delete(s, id, owner, &v, &n, e);
  *path = n > 0 ? v[0] : NULL;
  CHECK(rc ? v == NULL && n == 0 : n <= 1);
  free(v);
  return rc;
}

static int same_timings(const job_timings *a, const job_timings *b) {
  if (a->set != b->set) return 0;
  for (int i = 0; i < JOB_T__COUNT; i++)
    if ((a->set & (1u << i)) && a->ms[i] != b->ms[i]) return 0;
  return 1;
}
static int same_result(const job_result_info *a, const job_result_info *b) {
  if (strcmp(a->dtype, b->dtype) != 0 || a->ndim != b->ndim ||
      a->bytes != b->bytes || a->nonconverged != b->nonconverged)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* A cancel's end, as the scheduler writes it. */
static store_job_end end_canceled(int64_t at, const char *message) {
  store_job_end x = {.status = JOB_CANCELED, .finished_at = at, .max_abs_diff = NAN,
                     .error_code = "canceled", .error_message = message};
  return x;
}

static store_job_end end_ok(int64_t at, const char *path) {
  store_job_end x = {.status = JOB_SUCCEEDED,
                     .finished_at = at,
                     .result = {.dtype = "float64", .ndim = 1, .shape = {3},
                                .bytes = 24},
                     .result_path = path,
                     .max_abs_diff = NAN,
                     .progress_done = 3,
                     .progress_total = 3};
  job_timings_put(&x.timings, JOB_T_COMPUTE, 1.5);
  job_timings_put(&x.timings, JOB_T_TOTAL, 2.0);
  return x;
}

/* ---------------------------------------------------------------------- */

TEST(test_open_migrate_reopen) {
  SKIP_ON_PG("reads tessel.db's pragmas (test_pg_open is its twin)");
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  CHECK(store_ready(s));
  int v = store_schema_version(s);
  CHECK(v >= 1);
  char id[T_ID_MAX];
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  store_close(s);
  store_close(NULL); /* no-op */

  /* The file records the version and the migration history. */
  char path[400];
  snprintf(path, sizeof path, "%s/tessel.db", dir);
  sqlite3 *db;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "SELECT (SELECT user_version FROM pragma_user_version),"
                           " (SELECT max(version) FROM schema_migrations),"
                           " (SELECT journal_mode FROM pragma_journal_mode)",
                           -1, &st, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK(sqlite3_column_int(st, 0) == v);
  CHECK(sqlite3_column_int(st, 1) == v);
  CHECK_STR((const char *)sqlite3_column_text(st, 2), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);

  terr e;
  CHECK(store_open(dir, &s, &e) == 0);
  CHECK(store_schema_version(s) == v);
  store_job j;
  CHECK(store_job_get(s, id, "alice", &j, &e) == 0);
  CHECK_STR(j.kind, "map");
  store_job_clear(&j);
  store_close(s);

  /* A database from a newer build is refused, not misread. */
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL) ==
        SQLITE_OK);
  sqlite3_close(db);
  s = NULL;
  CHECK(store_open(dir, &s, &e) == T_EIO);
  CHECK(s == NULL);
  CHECK(strstr(e.message, "999") != NULL);
}

TEST(test_roundtrip_every_field) {
  store *s = open_fresh_store();
  if (!s) return;
  store_job j;
  memset(&j, 0, sizeof j);
  j.owner = sdup("alice");
  j.kind = sdup("geodesic");
  j.params = sdup("{\"points\":[[0,0],[1,1]]}");
  j.status = JOB_RUNNING; /* ignored: inserts are queued */
  j.backend_requested = sdup("compare");
  j.backend_used = sdup("cuda:0");
  j.backend_reason = sdup("estimate cuda 12 ms, cpu 840 ms");
  j.estimate = sdup("{\"cuda\":12,\"cpu\":840}");
  j.priority = 7;
  j.label = sdup("nightly \"run\" é");
  j.request_id = sdup("req-1");
  j.body_hash = sdup("abc123");
  j.timeout_s = 12.5;
  j.created_at = 1700000000123;
  j.started_at = 1700000000200;
  j.finished_at = 1700000000300;
  job_timings_put(&j.timings, JOB_T_COMPUTE, 9.8);
  j.progress_done = 48;
  j.progress_total = 64;
  j.error_code = sdup("io_error");
  j.error_message = sdup("disk full");
  j.result = (job_result_info){.dtype = "float64", .ndim = 2, .shape = {2, 2},
                               .bytes = 32, .nonconverged = 7};
  j.result_path = sdup("/data/results/x.npy");
  j.compare = sdup("[{\"backend\":\"cpu\",\"ms\":1.0}]");
  j.max_abs_diff = 3.7e-9;
  j.attempts = 2;
  int existing = -1;
  terr e;
  CHECK(store_job_insert(s, &j, &existing, &e) == 0);
  CHECK(existing == 0);
  CHECK(t_id_valid('j', j.id));
  CHECK(j.status == JOB_QUEUED);

  store_job g;
  CHECK(store_job_get(s, j.id, NULL, &g, &e) == 0);
  CHECK_STR(g.id, j.id);
  CHECK_STR(g.owner, "alice");
  CHECK_STR(g.kind, "geodesic");
  CHECK_STR(g.params, j.params);
  CHECK(g.status == JOB_QUEUED);
  CHECK_STR(g.backend_requested, "compare");
  CHECK_STR(g.backend_used, "cuda:0");
  CHECK_STR(g.backend_reason, j.backend_reason);
  CHECK_STR(g.estimate, j.estimate);
  CHECK(g.priority == 7);
  CHECK_STR(g.label, j.label);
  CHECK_STR(g.request_id, "req-1");
  CHECK_STR(g.body_hash, "abc123");
  CHECK(g.timeout_s == 12.5);
  CHECK(g.created_at == 1700000000123);
  CHECK(g.started_at == 1700000000200);
  CHECK(g.finished_at == 1700000000300);
  CHECK(same_timings(&g.timings, &j.timings));
  CHECK(g.progress_done == 48 && g.progress_total == 64);
  CHECK_STR(g.error_code, "io_error");
  CHECK_STR(g.error_message, "disk full");
  CHECK(same_result(&g.result, &j.result));
  CHECK_STR(g.result_path, j.result_path);
  CHECK_STR(g.compare, j.compare);
  CHECK(g.max_abs_diff == 3.7e-9);
  CHECK(g.attempts == 2);
  store_job_clear(&g);
  store_job_clear(&j);

  /* NULLs stay NULL, NaN stays NaN, defaults fill the rest. */
  store_job m;
  memset(&m, 0, sizeof m);
  m.kind = sdup("map");
  m.params = sdup("{}");
  m.max_abs_diff = NAN;
  int64_t before = t_wall_ms();
  CHECK(store_job_insert(s, &m, NULL, &e) == 0);
  CHECK(store_job_get(s, m.id, "", &g, &e) == 0); /* NULL owner is "" */
  CHECK_STR(g.owner, "");
  CHECK_STR(g.backend_requested, "auto");
  CHECK(g.backend_used == NULL && g.label == NULL && g.request_id == NULL);
  CHECK(g.timings.set == 0 && !g.result.dtype[0] && g.compare == NULL);
  CHECK(isnan(g.max_abs_diff));
  CHECK(g.created_at >= before && g.created_at <= t_wall_ms());
  store_job_clear(&g);
  store_job_clear(&m);

  /* Bad input. */
  memset(&m, 0, sizeof m);
  m.params = sdup("{}");
  CHECK(store_job_insert(s, &m, NULL, &e) == T_EINVAL);
  CHECK_STR(e.field, "kind");
  store_job_clear(&m);
  store_close(s);
}

TEST(test_owner_isolation) {
  store *s = open_fresh_store();
  if (!s) return;
  char id[T_ID_MAX];
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  store_job g;
  terr e;
  CHECK(store_job_get(s, id, "bob", &g, &e) == T_ENOTFOUND);
  CHECK(e.code == T_ENOTFOUND);
  CHECK(store_job_get(s, id, "alice", &g, &e) == 0);
  store_job_clear(&g);
  CHECK(store_job_get(s, "j_00000000000000000000000000", NULL, &g, &e) ==
        T_ENOTFOUND);
  /* Finished, but bob still cannot delete it. */
  store_job_end x = end_ok(t_wall_ms(), NULL);
  CHECK(store_job_finish(s, id, &x, &e) == 0);
  char *path = (char *)1;
  CHECK(job_delete1(s, id, "bob", &path, &e) == T_ENOTFOUND);
  CHECK(path == NULL);
  store_job_filter f = {.owner = "bob", .status = -1, .limit = 10};
  store_job *v;
  int n;
  int more = 0;
  store_job_pos pos;
  CHECK(store_job_list(s, &f, &v, &n, &more, &pos, NULL, &e) == 0);
  CHECK(n == 0);
  free(v);
  int64_t counts[5];
  CHECK(store_job_counts(s, "bob", counts, &e) == 0);
  CHECK(counts[JOB_SUCCEEDED] == 0);
  CHECK(store_job_counts(s, "alice", counts, &e) == 0);
  CHECK(counts[JOB_SUCCEEDED] == 1);
  store_close(s);
}

TEST(test_idempotency) {
  store *s = open_fresh_store();
  if (!s) return;
  store_job a;
  job_init(&a, "alice", "map");
  a.request_id = sdup("r1");
  a.body_hash = sdup("h1");
  a.label = sdup("first");
  int existing = -1;
  terr e;
  CHECK(store_job_insert(s, &a, &existing, &e) == 0);
  CHECK(existing == 0);

  /* Same key, same body: the original job comes back, no second row. */
  store_job b;
  job_init(&b, "alice", "map");
  b.request_id = sdup("r1");
  b.body_hash = sdup("h1");
  CHECK(store_job_insert(s, &b, &existing, &e) == 0);
  CHECK(existing == 1);
  CHECK_STR(b.id, a.id);
  CHECK_STR(b.label, "first");

  /* Same key, another body: 409. */
  store_job c;
  job_init(&c, "alice", "map");
  c.request_id = sdup("r1");
  c.body_hash = sdup("h2");
  CHECK(store_job_insert(s, &c, &existing, &e) == T_ECONFLICT);
  CHECK(http_status_of(e.code) == 409);
  CHECK_STR(e.field, "request_id");
  CHECK(existing == 0);

  /* Same key under another owner: a separate job. */
  store_job d;
  job_init(&d, "bob", "map");
  d.request_id = sdup("r1");
  d.body_hash = sdup("h2");
  CHECK(store_job_insert(s, &d, &existing, &e) == 0);
  CHECK(existing == 0);
  CHECK(strcmp(d.id, a.id) != 0);

  int64_t counts[5];
  CHECK(store_job_counts(s, NULL, counts, &e) == 0);
  CHECK(counts[JOB_QUEUED] == 2);
  /* A duplicate explicit id is a conflict too. */
  store_job dupj;
  job_init(&dupj, "alice", "map");
  snprintf(dupj.id, sizeof dupj.id, "%s", a.id);
  CHECK(store_job_insert(s, &dupj, NULL, &e) == T_ECONFLICT);
  store_job_clear(&dupj);
  store_job_clear(&a);
  store_job_clear(&b);
  store_job_clear(&c);
  store_job_clear(&d);
  store_close(s);
}

/* 25 jobs of alice in a known mix; checks each filter against a count
 * computed here, and that paging visits every job once, newest first. */
TEST(test_list_filters_paging) {
  store *s = open_fresh_store();
  if (!s) return;
  enum { N = 25 };
  char ids[N][T_ID_MAX];
  const char *kinds[] = {"map", "reduce", "matmul"};
  const char *used[] = {"cpu", "cuda:0", "cuda:1", "serial", NULL};
  terr e;
  int want_kind_map = 0, want_cuda = 0, want_label = 0, want_failed = 0;
  int want_queued_map = 1; /* bob's */
  for (int i = 0; i < N; i++) {
    store_job j;
    job_init(&j, "alice", kinds[i % 3]);
    free(j.backend_requested);
    j.backend_requested = sdup(i % 7 == 0 ? "cuda" : "auto");
    if (i % 4 == 0) j.label = sdup("L");
    CHECK(store_job_insert(s, &j, NULL, &e) == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
    if (i > 0) CHECK(strcmp(ids[i], ids[i - 1]) > 0);
    const char *u = used[i % 5];
    if (u) CHECK(store_job_start(s, ids[i], t_wall_ms(), u, "r", NULL, &e) == 0);
    if (i % 6 == 0 && u) {
      store_job_end x = end_ok(t_wall_ms(), NULL);
      x.status = JOB_FAILED;
      x.error_code = "internal";
      CHECK(store_job_finish(s, ids[i], &x, &e) == 0);
      want_failed++;
    }
    want_kind_map += i % 3 == 0;
    want_cuda += i % 7 == 0 || (u && strncmp(u, "cuda", 4) == 0);
    want_label += i % 4 == 0;
    want_queued_map += i % 3 == 0 && !u;
  }
  CHECK(insert_job(s, "bob", "map", 0, NULL) == 0);

  /* Paging over > 2 pages, newest first, no gap and no repeat. */
  store_job_filter f = {.owner = "alice", .status = -1, .limit = 7};
  int more = 0;
  store_job_pos pos;
  int seen = 0, pages = 0;
  for (;;) {
    store_job *v;
    int n;
    CHECK(store_job_list(s, &f, &v, &n, &more, &pos, NULL, &e) == 0);
    pages++;
    for (int i = 0; i < n; i++) {
      CHECK(seen < N);
      if (seen < N) CHECK_STR(v[i].id, ids[N - 1 - seen]);
      seen++;
      store_job_clear(&v[i]);
    }
    free(v);
    if (!more || pages > 10) break;
    f.after = &pos;
  }
  CHECK(seen == N);
  CHECK(pages == 4);

  struct {
    store_job_filter f;
    int want;
  } cases[] = {
      {{.owner = "alice", .status = -1, .kind = "map", .limit = 1000},
       want_kind_map},
      {{.owner = "alice", .status = -1, .backend = "cuda", .limit = 1000},
       want_cuda},
      {{.owner = "alice", .status = -1, .backend = "cuda:1", .limit = 1000},
       N / 5},
      {{.owner = "alice", .status = -1, .backend = "cud", .limit = 1000}, 0},
      {{.owner = "alice", .status = -1, .label = "L", .limit = 1000},
       want_label},
      {{.owner = "alice", .status = JOB_FAILED, .limit = 1000}, want_failed},
      {{.owner = NULL, .status = -1, .limit = 1000}, N + 1},
      {{.owner = NULL, .status = JOB_QUEUED, .kind = "map", .limit = 1000},
       want_queued_map},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    store_job *v;
    int n;
    CHECK(store_job_list(s, &cases[c].f, &v, &n, &more, &pos, NULL, &e) == 0);
    CHECK_MSG(n == cases[c].want, "case %zu: %d != %d", c, n, cases[c].want);
    CHECK(!more);
    for (int i = n - 1; i >= 0; i--) { /* cleared from the end */
      if (i > 0) CHECK(strcmp(v[i - 1].id, v[i].id) > 0);
      if (cases[c].f.kind) CHECK_STR(v[i].kind, cases[c].f.kind);
      if (cases[c].f.status >= 0) CHECK((int)v[i].status == cases[c].f.status);
      if (cases[c].f.label) CHECK_STR(v[i].label, cases[c].f.label);
      store_job_clear(&v[i]);
    }
    free(v);
  }
  store_job *v;
  int n;
  f.limit = 0;
  CHECK(store_job_list(s, &f, &v, &n, &more, &pos, NULL, &e) == T_EINVAL);
  CHECK_STR(e.field, "limit");
  f.limit = 1001;
  CHECK(store_job_list(s, &f, &v, &n, &more, &pos, NULL, &e) == T_EINVAL);
  store_close(s);
}

TEST(test_lifecycle) {
  store *s = open_fresh_store();
  if (!s) return;
  char id[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "", "map", 0, id) == 0);
  /* Finishing needs a final status. */
  store_job_end bad = end_ok(1, NULL);
  bad.status = JOB_RUNNING;
  CHECK(store_job_finish(s, id, &bad, &e) == T_EINVAL);
  /* Progress before the start is ignored (the job is not running). */
  store_job_progress(s, id, 5, 10);
  CHECK(store_job_start(s, id, 1000, "cpu", "only cpu", "{\"cpu\":1}", &e) ==
        0);
  CHECK(store_job_start(s, id, 1001, "cpu", NULL, NULL, &e) == T_ECONFLICT);
  CHECK(strstr(e.message, "running") != NULL);
  CHECK(store_job_start(s, "j_nope", 1, "cpu", NULL, NULL, &e) == T_ENOTFOUND);
  store_job g;
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_RUNNING && g.started_at == 1000 && g.attempts == 1);
  CHECK(g.progress_done == 0);
  CHECK_STR(g.backend_used, "cpu");
  CHECK_STR(g.backend_reason, "only cpu");
  CHECK_STR(g.estimate, "{\"cpu\":1}");
  store_job_clear(&g);

  store_job_progress(s, id, 2, 10);
  store_job_progress(s, id, 7, 10); /* coalesced with the previous one */
  char other[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 0, other) == 0); /* a later sync write */
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.progress_done == 7 && g.progress_total == 10);
  store_job_clear(&g);

  store_job_end x = end_ok(2000, "/tmp/r.npy");
  x.compare = "[{\"backend\":\"cpu\",\"ms\":1}]";
  x.max_abs_diff = 1e-12;
  CHECK(store_job_finish(s, id, &x, &e) == 0);
  /* Another end of an ended job is refused; the same end again is the
   * PostgreSQL writer's retry after a lost COMMIT answer: accepted there. */
  store_job_end x2 = x;
  x2.finished_at = 2001;
  CHECK(store_job_finish(s, id, &x2, &e) == T_ECONFLICT);
  CHECK(store_job_finish(s, id, &x, &e) == (test_pg() ? 0 : T_ECONFLICT));
  store_job_progress(s, id, 1, 10); /* after the end: ignored */
  CHECK(store_job_requeue(s, id, &e) == T_ECONFLICT);
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.finished_at == 2000);
  CHECK(g.progress_done == 3 && g.progress_total == 3);
  CHECK(same_timings(&g.timings, &x.timings));
  CHECK(same_result(&g.result, &x.result));
  CHECK_STR(g.result_path, "/tmp/r.npy");
  CHECK_STR(g.compare, x.compare);
  CHECK(g.max_abs_diff == 1e-12);
  CHECK(g.error_code == NULL);
  store_job_clear(&g);

  /* A queued job may be canceled directly. */
  store_job_end cx = end_canceled(3000, "canceled by the client");
  CHECK(store_job_finish(s, other, &cx, &e) == 0);
  CHECK(store_job_get(s, other, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_CANCELED);
  CHECK_STR(g.error_code, "canceled");
  CHECK(isnan(g.max_abs_diff));
  CHECK(g.started_at == 0);
  store_job_clear(&g);
  store_close(s);
}

/* store_job_start_async: queued, not waited for; visible once a later
 * [sync] write of the same thread returned, or after store_close; a job no
 * longer queued is left alone; the finish keeps the start's fields. */
TEST(test_start_async) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char a[T_ID_MAX], b[T_ID_MAX], c[T_ID_MAX], d[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "", "map", 0, a) == 0);
  CHECK(insert_job(s, "", "map", 0, b) == 0);
  CHECK(insert_job(s, "", "map", 0, c) == 0);
  store_job_start_async(s, a, 1234, "serial", "small job", "{\"size\":3}");
  CHECK(insert_job(s, "", "map", 0, d) == 0); /* a later sync write */
  store_job g;
  CHECK(store_job_get(s, a, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_RUNNING && g.started_at == 1234 && g.attempts == 1);
  CHECK_STR(g.backend_used, "serial");
  CHECK_STR(g.backend_reason, "small job");
  CHECK_STR(g.estimate, "{\"size\":3}");
  store_job_clear(&g);

  /* Finished after its start was committed: the start's fields stay. */
  store_job_end xa = end_ok(1300, NULL);
  CHECK(store_job_finish(s, a, &xa, &e) == 0);
  CHECK(store_job_get(s, a, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.started_at == 1234 &&
        g.finished_at == 1300 && g.attempts == 1);
  CHECK_STR(g.backend_reason, "small job");
  store_job_clear(&g);

  /* Started and finished back to back (a tiny job): the finish takes the
   * still queued start over; the end has both, counted once. */
  store_job_start_async(s, b, 2000, "cpu", "r", NULL);
  store_job_end x = end_ok(2001, NULL);
  CHECK(store_job_finish(s, b, &x, &e) == 0);
  CHECK(store_job_get(s, b, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.started_at == 2000 &&
        g.finished_at == 2001 && g.attempts == 1);
  CHECK_STR(g.backend_used, "cpu");
  store_job_clear(&g);

  /* Canceled before the start lands: the start changes nothing, and the
   * worker's finish is refused. */
  store_job_end cx = end_canceled(3000, "canceled");
  CHECK(store_job_finish(s, c, &cx, &e) == 0);
  store_job_start_async(s, c, 3001, "cpu", NULL, NULL);
  store_job_start_async(s, "j_nope", 3001, "cpu", NULL, NULL);
  x = end_ok(3002, NULL);
  CHECK(store_job_finish(s, c, &x, &e) == T_ECONFLICT);
  CHECK(store_job_get(s, c, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_CANCELED && g.started_at == 0 && g.attempts == 0);
  store_job_clear(&g);

  /* Pending at close: committed by the drain. */
  store_job_start_async(s, d, 4000, "serial", NULL, NULL);
  store_close(s);
  CHECK((s = reopen(dir)) != NULL);
  CHECK(store_job_get(s, d, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_RUNNING && g.started_at == 4000 && g.attempts == 1);
  store_job_clear(&g);
  store_close(s);
}

/* store_job_insert_async + store_job_finish_async: nothing waited for;
 * the finish's callback runs on the writer thread with the committed row
 * (or the error); a lazy insert alone is committed within a few ms;
 * store_sync is a barrier. */
typedef struct fin_seen {
  atomic_int calls;
  int rc;
  int other_thread;
  pthread_t caller;
  store_job row;
  int have_row;
} fin_seen;
static void on_finished(void *arg, int rc, const terr *e, store_job *row) {
  fin_seen *f = arg;
  f->rc = rc;
  f->other_thread = !pthread_equal(f->caller, pthread_self());
  f->have_row = row != NULL;
  if (row) f->row = *row; /* ours now */
  atomic_fetch_add(&f->calls, 1);
}
static int wait_calls(fin_seen *f) {
  for (int i = 0; i < 2000 && atomic_load(&f->calls) == 0; i++) usleep(1000);
  return atomic_load(&f->calls);
}
TEST(test_async_insert_finish) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  store_job j;
  job_init(&j, "carol", "map");
  j.request_id = sdup("k1");
  j.body_hash = sdup("h1");
  store_job r;
  if (store_is_cluster(s)) { /* a cluster's idempotent inserts are [sync] */
    CHECK(store_job_insert_async(s, &j, &e) == T_EINVAL);
    CHECK(store_job_by_request(s, "carol", "k1", &r, &e) == T_ENOTIMPL);
  } else { /* one node: keyed [async] inserts (compute/jobs/rids.h) */
    CHECK(store_job_by_request(s, "carol", "k1", &r, &e) == T_ENOTFOUND);
    CHECK(store_job_insert_async(s, &j, &e) == 0);
    char kid[T_ID_MAX];
    snprintf(kid, sizeof kid, "%s", j.id);
    CHECK(store_sync(s, &e) == 0);
    CHECK(store_job_by_request(s, "carol", "k1", &r, &e) == 0);
    CHECK_STR(r.id, kid);
    CHECK_STR(r.request_id, "k1");
    CHECK_STR(r.body_hash, "h1");
    store_job_clear(&r);
    CHECK(store_job_by_request(s, "dave", "k1", &r, &e) == T_ENOTFOUND);
    CHECK(store_job_by_request(s, "carol", "k2", &r, &e) == T_ENOTFOUND);
    /* the [sync] insert of the key finds that row */
    store_job_clear(&j);
    job_init(&j, "carol", "map");
    j.request_id = sdup("k1");
    j.body_hash = sdup("h1");
    int existing = 0;
    CHECK(store_job_insert(s, &j, &existing, &e) == 0 && existing == 1);
    CHECK_STR(j.id, kid);
    store_job_clear(&j);
    job_init(&j, "carol", "map");
  }
  free(j.request_id);
  free(j.body_hash);
  j.request_id = j.body_hash = NULL;
  j.label = sdup("tiny");
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  CHECK(t_id_valid('j', j.id) && j.created_at > 0);
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "%s", j.id);
  store_job_clear(&j); /* the store copied what it needs */
  store_job_start_async(s, id, 7000, "serial", "small", NULL);
  unsigned char npy[3] = {9, 8, 7};
  store_job_end x = end_ok(7001, NULL);
  x.result_npy = npy;
  x.result_npy_len = 3;
  fin_seen f;
  memset(&f, 0, sizeof f);
  f.caller = pthread_self();
  CHECK(store_job_finish_async(s, id, &x, on_finished, &f, &e) == 0);
  CHECK(wait_calls(&f) == 1);
  CHECK(f.rc == 0 && f.have_row && f.other_thread);
  if (f.have_row) {
    CHECK_STR(f.row.id, id);
    CHECK(f.row.status == JOB_SUCCEEDED && f.row.started_at == 7000 &&
          f.row.finished_at == 7001 && f.row.attempts == 1);
    CHECK_STR(f.row.owner, "carol");
    CHECK_STR(f.row.label, "tiny");
    CHECK_STR(f.row.backend_used, "serial");
    CHECK(same_result(&f.row.result, &x.result));
    CHECK(same_timings(&f.row.timings, &x.timings));
    store_job_clear(&f.row);
  }
  /* The row the callback saw is what a reader sees. */
  store_job g;
  CHECK(store_job_get(s, id, "carol", &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.finished_at == 7001);
  store_job_clear(&g);
  void *buf = NULL;
  size_t len = 0;
  CHECK(store_job_result_npy(s, id, NULL, &buf, &len, &e) == 0 && len == 3);
  free(buf);
  /* A second finish (another end) is refused through the callback. */
  memset(&f, 0, sizeof f);
  f.caller = pthread_self();
  store_job_end x2 = x;
  x2.status = JOB_FAILED;
  x2.error_code = "internal";
  CHECK(store_job_finish_async(s, id, &x2, on_finished, &f, &e) == 0);
  CHECK(wait_calls(&f) == 1 && f.rc == T_ECONFLICT && !f.have_row);
  memset(&f, 0, sizeof f);
  CHECK(store_job_finish_async(s, "j_nope", &x, on_finished, &f, &e) == 0);
  CHECK(wait_calls(&f) == 1 && f.rc == T_ENOTFOUND);
  store_job_end bad = end_ok(1, NULL);
  bad.status = JOB_RUNNING;
  CHECK(store_job_finish_async(s, id, &bad, on_finished, &f, &e) == T_EINVAL);

  /* A lazy insert with nothing after it still commits, within a few ms. */
  job_init(&j, "", "map");
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  snprintf(id, sizeof id, "%s", j.id);
  store_job_clear(&j);
  int seen = 0;
  for (int i = 0; i < 2000 && !seen; i++) {
    if (store_job_get(s, id, NULL, &g, &e) == 0) {
      seen = 1;
      store_job_clear(&g);
    } else {
      usleep(1000);
    }
  }
  CHECK(seen);
  /* store_sync: everything queued before it is committed when it returns. */
  job_init(&j, "", "map");
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  snprintf(id, sizeof id, "%s", j.id);
  store_job_clear(&j);
  CHECK(store_sync(s, &e) == 0);
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  store_job_clear(&g);
  store_close(s);
}

/* A small result kept in the row: committed with the end, read back with
 * store_job_result_npy (owner checked), gone with the row. */
/* A cuda run's devices and its backend_used as it ended
 * (store_job_end.devices, .backend_used): written with the finish and read
 * back after a reopen; an end without them keeps the start's backend_used
 * and has no devices; a lazy start taken over by its finish (SQLite's
 * store_wop.absorbed) takes the end's backend_used. */
TEST(test_devices_recorded) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  terr e;
  char a[T_ID_MAX], b[T_ID_MAX], c[T_ID_MAX];
  CHECK(insert_job(s, "", "geodesic", 0, a) == 0);
  CHECK(insert_job(s, "", "geodesic", 0, b) == 0);
  CHECK(insert_job(s, "", "geodesic", 0, c) == 0);
  const char *two = "[{\"device\":0,\"rows\":600,\"blocks\":6},"
                    "{\"device\":1,\"rows\":400,\"blocks\":4}]";
  CHECK(store_job_start(s, a, 10, "cuda:0", NULL, NULL, &e) == 0);
  store_job_end x = end_ok(11, NULL);
  x.devices = two;
  x.backend_used = "cuda:0+cuda:1";
  CHECK(store_job_finish(s, a, &x, &e) == 0);
  CHECK(store_job_start(s, b, 10, "cuda:1", NULL, NULL, &e) == 0);
  store_job_end y = end_ok(11, NULL);
  CHECK(store_job_finish(s, b, &y, &e) == 0);
  store_job_start_async(s, c, 10, "cuda:2", NULL, NULL);
  store_job_end z = end_ok(12, NULL);
  z.devices = "[{\"device\":2,\"rows\":0,\"blocks\":0,\"failed\":true},"
              "{\"device\":3,\"rows\":5,\"blocks\":1}]";
  z.backend_used = "cuda:3";
  fin_seen f;
  memset(&f, 0, sizeof f);
  f.caller = pthread_self();
  CHECK(store_job_finish_async(s, c, &z, on_finished, &f, &e) == 0);
  CHECK(wait_calls(&f) == 1 && f.rc == 0 && f.have_row);
  if (f.have_row) {
    CHECK_STR(f.row.devices, z.devices);
    CHECK_STR(f.row.backend_used, "cuda:3");
    CHECK(f.row.started_at == 10 && f.row.attempts == 1);
    store_job_clear(&f.row);
  }
  store_close(s);
  s = reopen(dir);
  if (!s) return;
  store_job g;
  CHECK(store_job_get(s, a, NULL, &g, &e) == 0);
  CHECK_STR(g.devices, two);
  CHECK_STR(g.backend_used, "cuda:0+cuda:1");
  store_job_clear(&g);
  CHECK(store_job_get(s, b, NULL, &g, &e) == 0);
  CHECK(g.devices == NULL);
  CHECK_STR(g.backend_used, "cuda:1");
  store_job_clear(&g);
  CHECK(store_job_get(s, c, NULL, &g, &e) == 0);
  CHECK_STR(g.devices, z.devices);
  CHECK_STR(g.backend_used, "cuda:3");
  store_job_clear(&g);
  store_close(s);
}

TEST(test_result_in_row) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char id[T_ID_MAX], plain[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  CHECK(insert_job(s, "alice", "map", 0, plain) == 0);
  unsigned char npy[200];
  for (size_t i = 0; i < sizeof npy; i++) npy[i] = (unsigned char)(i * 7 + 1);
  npy[50] = 0; /* binary: NUL bytes survive */
  store_job_end x = end_ok(10, NULL);
  x.result_npy = npy;
  x.result_npy_len = sizeof npy;
  CHECK(store_job_finish(s, id, &x, &e) == 0);
  x = end_ok(11, "/data/results/p.npy");
  CHECK(store_job_finish(s, plain, &x, &e) == 0);

  void *buf = NULL;
  size_t len = 0;
  CHECK(store_job_result_npy(s, id, "alice", &buf, &len, &e) == 0);
  CHECK(len == sizeof npy && buf && memcmp(buf, npy, len) == 0);
  free(buf);
  CHECK(store_job_result_npy(s, id, NULL, &buf, &len, &e) == 0);
  free(buf);
  CHECK(store_job_result_npy(s, id, "bob", &buf, &len, &e) == T_ENOTFOUND);
  CHECK(buf == NULL && len == 0);
  CHECK(store_job_result_npy(s, plain, NULL, &buf, &len, &e) == T_ENOTFOUND);
  CHECK(store_job_result_npy(s, "j_nope", NULL, &buf, &len, &e) ==
        T_ENOTFOUND);
  store_job g;
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.result_path == NULL);
  CHECK(same_result(&g.result, &x.result));
  store_job_clear(&g);

  /* Survives a reopen; a delete names no file. */
  store_close(s);
  CHECK((s = reopen(dir)) != NULL);
  CHECK(store_job_result_npy(s, id, NULL, &buf, &len, &e) == 0);
  CHECK(len == sizeof npy && buf && memcmp(buf, npy, len) == 0);
  free(buf);
  char *path = (char *)"unset";
  CHECK(job_delete1(s, id, "alice", &path, &e) == 0);
  CHECK(path == NULL);
  CHECK(store_job_result_npy(s, id, NULL, &buf, &len, &e) == T_ENOTFOUND);
  store_close(s);
}

/* A database of schema 1 (before results in rows, with timings and result
 * as JSON documents) is migrated on open and keeps its jobs: a finished
 * job's documents become its typed timings and result (migration 3). */
TEST(test_migrate_from_v1) {
  SKIP_ON_PG("writes a SQLite file of schema 1");
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  char id[T_ID_MAX], done[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "", "map", 0, id) == 0);
  CHECK(insert_job(s, "", "map", 0, done) == 0);
  store_close(s);
  char path[400], sql[2048];
  snprintf(path, sizeof path, "%s/tessel.db", dir);
  sqlite3 *db;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  snprintf(sql, sizeof sql,
           "ALTER TABLE jobs DROP COLUMN result_npy;"
           "ALTER TABLE jobs DROP COLUMN output_file;"
           "ALTER TABLE jobs DROP COLUMN result_parts;"
           "DROP INDEX jobs_parent;"
           "ALTER TABLE jobs DROP COLUMN node; ALTER TABLE jobs DROP COLUMN lease_until;"
           "ALTER TABLE jobs DROP COLUMN cancel_requested; ALTER TABLE jobs DROP COLUMN parent;"
           "ALTER TABLE jobs DROP COLUMN tile; ALTER TABLE jobs DROP COLUMN tiles;"
           "ALTER TABLE jobs DROP COLUMN devices;"
           "ALTER TABLE jobs DROP COLUMN t_queue; ALTER TABLE jobs DROP COLUMN t_prepare;"
           "ALTER TABLE jobs DROP COLUMN t_h2d; ALTER TABLE jobs DROP COLUMN t_compute;"
           "ALTER TABLE jobs DROP COLUMN t_d2h; ALTER TABLE jobs DROP COLUMN t_store;"
           "ALTER TABLE jobs DROP COLUMN t_total;"
           "ALTER TABLE jobs DROP COLUMN result_dtype; ALTER TABLE jobs DROP COLUMN result_shape;"
           "ALTER TABLE jobs DROP COLUMN result_bytes;"
           "ALTER TABLE jobs DROP COLUMN result_nonconverged;"
           "ALTER TABLE jobs ADD COLUMN timings TEXT; ALTER TABLE jobs ADD COLUMN result TEXT;"
           "UPDATE jobs SET status = 'succeeded', finished_at = 9,"
           " timings = '{\"queue\":0.5,\"compute\":1.25,\"total\":3.0}',"
           " result = '{\"dtype\":\"float32\",\"shape\":[2,5],\"bytes\":40,"
           "\"nonconverged\":3}' WHERE id = '%s';"
           "DROP INDEX arrays_owner_digest;"
           "ALTER TABLE arrays RENAME COLUMN digest TO sha256;"
           "CREATE UNIQUE INDEX arrays_owner_sha ON arrays(owner, sha256);"
           "INSERT INTO arrays(id, owner, dtype, shape, bytes, sha256, path,"
           " created_at) VALUES ('a_0123456789abcdefghjkmnpqrs', 'bob',"
           " 'float64', '[1]', 8, 'ab12', '/nowhere.npy', 1);"
           "DELETE FROM schema_migrations WHERE version >= 2;"
           "PRAGMA user_version = 1;", done);
  CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  CHECK(store_open(dir, &s, &e) == 0);
  CHECK(store_schema_version(s) == 9);
  /* Migration 4: an old array's digest says it is a sha256. */
  store_array oa;
  CHECK(store_array_get(s, "a_0123456789abcdefghjkmnpqrs", "bob", &oa,
                        &e) == 0);
  CHECK_STR(oa.digest, "sha256:ab12");
  store_array_clear(&oa);
  store_job g;
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.timings.set == 0 && !g.result.dtype[0]);
  store_job_clear(&g);
  CHECK(store_job_get(s, done, NULL, &g, &e) == 0);
  job_timings wt;
  memset(&wt, 0, sizeof wt);
  job_timings_put(&wt, JOB_T_QUEUE, 0.5);
  job_timings_put(&wt, JOB_T_COMPUTE, 1.25);
  job_timings_put(&wt, JOB_T_TOTAL, 3.0);
  job_result_info wr = {.dtype = "float32", .ndim = 2, .shape = {2, 5},
                        .bytes = 40, .nonconverged = 3};
  CHECK(same_timings(&g.timings, &wt));
  CHECK(same_result(&g.result, &wr));
  store_job_clear(&g);
  unsigned char npy[4] = {1, 2, 3, 4};
  store_job_end x = end_ok(5, NULL);
  x.result_npy = npy;
  x.result_npy_len = sizeof npy;
  CHECK(store_job_finish(s, id, &x, &e) == 0);
  void *buf = NULL;
  size_t len = 0;
  CHECK(store_job_result_npy(s, id, NULL, &buf, &len, &e) == 0);
  CHECK(len == 4 && buf && memcmp(buf, npy, 4) == 0);
  free(buf);
  store_close(s);
}

TEST(test_requeue_and_unfinished_order) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  /* priorities in insert order; expect (priority desc, FIFO). */
  int prio[] = {1, 5, 1, 9, 5, 1};
  char ids[6][T_ID_MAX];
  for (int i = 0; i < 6; i++) CHECK(insert_job(s, "", "map", prio[i], ids[i]) == 0);
  char done_id[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 100, done_id) == 0);
  store_job_end x = end_ok(t_wall_ms(), NULL);
  CHECK(store_job_finish(s, done_id, &x, &e) == 0);
  /* One runs (a dead process left it so): still unfinished. */
  CHECK(store_job_start(s, ids[4], 10, "cuda:0", "r", NULL, &e) == 0);
  store_job_progress(s, ids[4], 3, 9);

  store_job *v;
  int n;
  CHECK(store_job_unfinished(s, &v, &n, &e) == 0);
  int order[] = {3, 1, 4, 0, 2, 5};
  CHECK(n == 6);
  for (int i = 0; i < n && i < 6; i++) {
    CHECK_STR(v[i].id, ids[order[i]]);
    store_job_clear(&v[i]);
  }
  free(v);

  CHECK(store_job_requeue(s, ids[4], &e) == 0);
  store_job g;
  CHECK(store_job_get(s, ids[4], NULL, &g, &e) == 0);
  CHECK(g.status == JOB_QUEUED && g.started_at == 0 && g.backend_used == NULL);
  CHECK(g.progress_done == 0 && g.attempts == 1);
  store_job_clear(&g);
  CHECK(store_job_start(s, ids[4], 20, "cpu", NULL, NULL, &e) == 0);
  CHECK(store_job_get(s, ids[4], NULL, &g, &e) == 0);
  CHECK(g.attempts == 2 && g.started_at == 20);
  store_job_clear(&g);
  CHECK(store_job_requeue(s, "j_missing", &e) == T_ENOTFOUND);
  store_close(s);
}

/* The poison-job bookkeeping: a start the process died in (noted from the
 * scheduler's journal) raises attempts, never lowers it, and leaves ended
 * jobs alone; a start taken back by a shutdown lowers it again. */
TEST(test_note_start_and_unstart) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  char id[T_ID_MAX], done_id[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 5, id) == 0);
  CHECK(insert_job(s, "", "map", 5, done_id) == 0);
  store_job g;
  /* Lazy start never committed, journal says start 1: attempts 1. */
  CHECK(store_job_note_start(s, id, 1, &e) == 0);
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_QUEUED && g.attempts == 1);
  store_job_clear(&g);
  /* Noted again (a crash during recovery): idempotent. */
  CHECK(store_job_note_start(s, id, 1, &e) == 0);
  CHECK(store_job_start(s, id, 10, "cpu", NULL, NULL, &e) == 0); /* 2 */
  CHECK(store_job_note_start(s, id, 2, &e) == 0); /* committed already */
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.attempts == 2);
  store_job_clear(&g);
  /* A shutdown takes the start back: queued, attempts 1. */
  CHECK(store_job_unstart(s, id, &e) == 0);
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_QUEUED && g.attempts == 1 && g.started_at == 0);
  store_job_clear(&g);
  CHECK(store_job_unstart(s, id, &e) == T_ECONFLICT); /* not running */
  /* An ended job is not touched. */
  store_job_end x = end_ok(t_wall_ms(), NULL);
  CHECK(store_job_finish(s, done_id, &x, &e) == 0);
  CHECK(store_job_note_start(s, done_id, 3, &e) == 0);
  CHECK(store_job_get(s, done_id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.attempts == 0); /* never started */
  store_job_clear(&g);
  CHECK(store_job_note_start(s, "j_missing", 3, &e) == 0);
  store_close(s);
}

TEST(test_delete_job) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  char id[T_ID_MAX];
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  CHECK(store_job_start(s, id, 1, "cpu", NULL, NULL, &e) == 0);
  char *path = NULL;
  CHECK(job_delete1(s, id, "alice", &path, &e) == T_ECONFLICT);
  CHECK(http_status_of(e.code) == 409);
  store_job_end x = end_ok(5, "/data/results/r1.npy");
  CHECK(store_job_finish(s, id, &x, &e) == 0);
  CHECK(job_delete1(s, id, "alice", &path, &e) == 0);
  CHECK_STR(path, "/data/results/r1.npy");
  free(path);
  store_job g;
  CHECK(store_job_get(s, id, NULL, &g, &e) == T_ENOTFOUND);
  CHECK(job_delete1(s, id, NULL, &path, &e) == T_ENOTFOUND);
  /* A failed job without a result: path NULL. */
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  store_job_end f = {.status = JOB_FAILED, .finished_at = 9,
                     .max_abs_diff = NAN, .error_code = "internal"};
  CHECK(store_job_finish(s, id, &f, &e) == 0);
  path = (char *)1;
  CHECK(job_delete1(s, id, NULL, &path, &e) == 0);
  CHECK(path == NULL);

  /* A job deleted between a submit's check and its insert: an insert that
   * takes its result ({"result": id}, with a part too) fails naming the
   * field, and no row is left (never a queued job on a deleted result). */
  char kept[T_ID_MAX], gone[T_ID_MAX], params[300];
  CHECK(insert_job(s, "alice", "map", 0, kept) == 0);
  CHECK(insert_job(s, "alice", "map", 0, gone) == 0);
  x = end_ok(11, "/data/results/gone.npy");
  CHECK(store_job_finish(s, gone, &x, &e) == 0);
  CHECK(job_delete1(s, gone, "alice", &path, &e) == 0);
  free(path);
  store_job j;
  job_init(&j, "alice", "map");
  free(j.params);
  snprintf(params, sizeof params,
           "{\"expr\":\"x+y\",\"inputs\":{\"x\":{\"result\":\"%s\"},"
           "\"y\":{\"result\":\"%s\",\"part\":\"index\"}}}",
           kept, gone);
  j.params = sdup(params);
  int rc = store_job_insert(s, &j, NULL, &e);
  CHECK_MSG(rc == T_ENOTFOUND, "insert: %d %s", rc, e.message);
  CHECK_STR(e.field, "params.inputs.y");
  CHECK(strstr(e.message, gone) != NULL);
  CHECK(http_status_of(e.code) == 404);
  int64_t counts[5];
  CHECK(store_job_counts(s, NULL, counts, &e) == 0);
  CHECK(counts[JOB_QUEUED] == 1); /* `kept` alone */
  store_job_clear(&j);
  /* A queued job's result is a valid reference (a chain): only the row
   * must exist. */
  job_init(&j, "alice", "map");
  free(j.params);
  snprintf(params, sizeof params, "{\"v\":[1,{\"result\":\"%s\"}]}", kept);
  j.params = sdup(params);
  rc = store_job_insert(s, &j, NULL, &e);
  CHECK_MSG(rc == 0, "insert: %d %s", rc, e.message);
  store_job_clear(&j);
  store_close(s);
}

TEST(test_arrays) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  store_array a;
  array_init(&a, "alice", "s1");
  int existing = -1;
  CHECK(store_array_insert(s, &a, &existing, &e) == 0);
  CHECK(existing == 0 && t_id_valid('a', a.id) && a.created_at > 0);

  store_array b;
  array_init(&b, "alice", "s1");
  free(b.path);
  b.path = sdup("/data/arrays/other.npy");
  CHECK(store_array_insert(s, &b, &existing, &e) == 0);
  CHECK(existing == 1);
  CHECK_STR(b.id, a.id);
  CHECK_STR(b.path, "/data/arrays/s1.npy");
  store_array_clear(&b);
  array_init(&b, "bob", "s1"); /* same data, other owner: its own row */
  CHECK(store_array_insert(s, &b, &existing, &e) == 0);
  CHECK(existing == 0 && strcmp(a.id, b.id) != 0);

  store_array g;
  CHECK(store_array_get(s, a.id, "alice", &g, &e) == 0);
  CHECK_STR(g.dtype, "float64");
  CHECK_STR(g.shape, "[100,10]");
  CHECK(g.bytes == 8000 && g.created_at == a.created_at);
  CHECK_STR(g.digest, "s1");
  store_array_clear(&g);
  CHECK(store_array_get(s, a.id, "bob", &g, &e) == T_ENOTFOUND);

  /* Referenced by a queued job: conflict; once it ends: deletable. */
  store_job j;
  job_init(&j, "alice", "map");
  free(j.params);
  char params[200];
  snprintf(params, sizeof params,
           "{\"expr\":\"x\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}", a.id);
  j.params = sdup(params);
  CHECK(store_job_insert(s, &j, NULL, &e) == 0);
  char *path = NULL;
  CHECK(store_array_delete(s, a.id, "alice", &path, &e) == T_ECONFLICT);
  CHECK(path == NULL);
  CHECK(store_array_delete(s, a.id, "bob", &path, &e) == T_ENOTFOUND);
  CHECK(store_job_start(s, j.id, 1, "cpu", NULL, NULL, &e) == 0);
  CHECK(store_array_delete(s, a.id, "alice", &path, &e) == T_ECONFLICT);
  store_job_end x = end_ok(2, NULL);
  CHECK(store_job_finish(s, j.id, &x, &e) == 0);
  store_job_clear(&j);

  /* An array deleted between a submit's check and its insert: the insert
   * fails naming the field (never a queued job on a deleted array). */
  store_array d;
  array_init(&d, "alice", "gone");
  CHECK(store_array_insert(s, &d, NULL, &e) == 0);
  CHECK(store_array_delete(s, d.id, "alice", &path, &e) == 0);
  free(path);
  path = NULL;
  job_init(&j, "alice", "map");
  free(j.params);
  snprintf(params, sizeof params,
           "{\"expr\":\"x+y\",\"inputs\":{\"x\":{\"array\":\"%s\"},"
           "\"y\":{\"array\":\"%s\"}}}",
           a.id, d.id);
  j.params = sdup(params);
  int rc = store_job_insert(s, &j, NULL, &e);
  CHECK_MSG(rc == T_ENOTFOUND, "insert: %d %s", rc, e.message);
  CHECK_STR(e.field, "params.inputs.y");
  CHECK(strstr(e.message, d.id) != NULL);
  int64_t counts[5];
  CHECK(store_job_counts(s, NULL, counts, &e) == 0);
  CHECK(counts[JOB_QUEUED] == 0 && counts[JOB_RUNNING] == 0);
  /* the [async] insert fails the same way: its finish finds no job */
  store_job_clear(&j);
  job_init(&j, "alice", "map");
  free(j.params);
  snprintf(params, sizeof params, "{\"v\":[1,{\"array\":\"%s\"}]}", d.id);
  j.params = sdup(params);
  CHECK(store_job_insert_async(s, &j, &e) == 0);
  CHECK(store_sync(s, &e) == 0);
  store_job got;
  CHECK(store_job_get(s, j.id, NULL, &got, &e) == T_ENOTFOUND);
  store_job_clear(&j);
  store_array_clear(&d);

  /* Listing with paging. */
  for (int i = 0; i < 5; i++) {
    store_array c;
    char sha[16];
    snprintf(sha, sizeof sha, "x%d", i);
    array_init(&c, "alice", sha);
    CHECK(store_array_insert(s, &c, NULL, &e) == 0);
    store_array_clear(&c);
  }
  char cur[T_ID_MAX] = "";
  int total = 0, pages = 0;
  char prev[T_ID_MAX] = "~";
  do {
    store_array *v;
    int n;
    CHECK(store_array_list(s, "alice", pages ? cur : NULL, 4, &v, &n, cur,
                           &e) == 0);
    for (int i = 0; i < n; i++) {
      CHECK(strcmp(v[i].id, prev) < 0);
      snprintf(prev, sizeof prev, "%s", v[i].id);
      CHECK_STR(v[i].owner, "alice");
      store_array_clear(&v[i]);
    }
    free(v);
    total += n;
    pages++;
  } while (cur[0] && pages < 10);
  CHECK(total == 6 && pages == 2);

  CHECK(store_array_delete(s, a.id, "alice", &path, &e) == 0);
  CHECK_STR(path, "/data/arrays/s1.npy");
  free(path);
  CHECK(store_array_get(s, a.id, NULL, &g, &e) == T_ENOTFOUND);
  CHECK(store_array_delete(s, a.id, NULL, &path, &e) == T_ENOTFOUND);
  store_array_clear(&a);
  store_array_clear(&b);
  store_close(s);
}

TEST(test_expire) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  char old_done[T_ID_MAX], new_done[T_ID_MAX], old_queued[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 0, old_done) == 0);
  CHECK(insert_job(s, "", "map", 0, new_done) == 0);
  store_job_end x = end_ok(1000, "/r/old.npy");
  CHECK(store_job_finish(s, old_done, &x, &e) == 0);
  x = end_ok(5000, "/r/new.npy");
  CHECK(store_job_finish(s, new_done, &x, &e) == 0);

  store_array kept_ref, old_free, fresh;
  array_init(&kept_ref, "", "k");
  kept_ref.created_at = 100;
  array_init(&old_free, "", "o");
  old_free.created_at = 100;
  array_init(&fresh, "", "f");
  fresh.created_at = 9000;
  CHECK(store_array_insert(s, &kept_ref, NULL, &e) == 0);
  CHECK(store_array_insert(s, &old_free, NULL, &e) == 0);
  CHECK(store_array_insert(s, &fresh, NULL, &e) == 0);
  store_job j;
  job_init(&j, "", "map");
  free(j.params);
  char params[200];
  snprintf(params, sizeof params, "{\"inputs\":{\"x\":{\"array\":\"%s\"}}}",
           kept_ref.id);
  j.params = sdup(params);
  CHECK(store_job_insert(s, &j, NULL, &e) == 0);
  snprintf(old_queued, sizeof old_queued, "%s", j.id);
  store_job_clear(&j);

  char **paths;
  int np;
  CHECK(store_expire(s, 3000, &paths, &np, &e) == 0);
  CHECK(np == 2);
  int saw_job = 0, saw_arr = 0;
  for (int i = 0; i < np; i++) {
    saw_job += strcmp(paths[i], "/r/old.npy") == 0;
    saw_arr += strcmp(paths[i], "/data/arrays/o.npy") == 0;
    free(paths[i]);
  }
  free(paths);
  CHECK(saw_job == 1 && saw_arr == 1);
  store_job g;
  store_array ga;
  CHECK(store_job_get(s, old_done, NULL, &g, &e) == T_ENOTFOUND);
  CHECK(store_job_get(s, new_done, NULL, &g, &e) == 0);
  store_job_clear(&g);
  CHECK(store_job_get(s, old_queued, NULL, &g, &e) == 0);
  store_job_clear(&g);
  CHECK(store_array_get(s, kept_ref.id, NULL, &ga, &e) == 0);
  store_array_clear(&ga);
  CHECK(store_array_get(s, old_free.id, NULL, &ga, &e) == T_ENOTFOUND);
  CHECK(store_array_get(s, fresh.id, NULL, &ga, &e) == 0);
  store_array_clear(&ga);
  /* Nothing left to expire at the same cutoff. */
  CHECK(store_expire(s, 3000, &paths, &np, &e) == 0);
  CHECK(np == 0 && paths == NULL);
  store_array_clear(&kept_ref);
  store_array_clear(&old_free);
  store_array_clear(&fresh);
  store_close(s);
}

/* Stats against values computed here: compute times 1..20 ms for map/cpu
 * (p50 = 10.5, p95 = 19.05 by linear interpolation), 2 failed, 1 queued. */
TEST(test_stats_counts) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  for (int i = 1; i <= 20; i++) {
    char id[T_ID_MAX];
    CHECK(insert_job(s, "alice", "map", 0, id) == 0);
    CHECK(store_job_start(s, id, 1, "cpu", NULL, NULL, &e) == 0);
    store_job_end x = end_ok(2, NULL);
    memset(&x.timings, 0, sizeof x.timings);
    job_timings_put(&x.timings, JOB_T_COMPUTE, 21 - i);
    job_timings_put(&x.timings, JOB_T_TOTAL, 30);
    CHECK(store_job_finish(s, id, &x, &e) == 0);
  }
  for (int i = 0; i < 2; i++) {
    char id[T_ID_MAX];
    CHECK(insert_job(s, "alice", "map", 0, id) == 0);
    CHECK(store_job_start(s, id, 1, "cpu", NULL, NULL, &e) == 0);
    store_job_end x = {.status = JOB_FAILED, .finished_at = 3,
                       .max_abs_diff = NAN, .error_code = "internal"};
    CHECK(store_job_finish(s, id, &x, &e) == 0);
  }
  CHECK(insert_job(s, "alice", "reduce", 0, NULL) == 0);
  CHECK(insert_job(s, "bob", "map", 0, NULL) == 0);

  int64_t c[5];
  CHECK(store_job_counts(s, "alice", c, &e) == 0);
  CHECK(c[JOB_QUEUED] == 1 && c[JOB_RUNNING] == 0 && c[JOB_SUCCEEDED] == 20);
  CHECK(c[JOB_FAILED] == 2 && c[JOB_CANCELED] == 0);
  CHECK(store_job_counts(s, NULL, c, &e) == 0);
  CHECK(c[JOB_QUEUED] == 2);

  store_stat *rows = NULL;
  int nrows = 0;
  CHECK(store_stats(s, "alice", &rows, &nrows, &e) == 0);
  CHECK(nrows == 3);
  int found = 0;
  for (int i = 0; i < nrows; i++) {
    const store_stat *row = &rows[i];
    const char *kind = row->kind;
    job_status st = row->status;
    if (kind && !strcmp(kind, "map") && st == JOB_SUCCEEDED) {
      found++;
      CHECK_STR(row->backend, "cpu");
      CHECK(row->count == 20);
      CHECK_NEAR(row->p50_ms, 10.5, 1e-12);
      CHECK_NEAR(row->p95_ms, 19.05, 1e-12);
      CHECK(row->result_bytes == 20 * 24);
    } else if (kind && !strcmp(kind, "map") && st == JOB_FAILED) {
      found++;
      CHECK(row->count == 2);
      CHECK(isnan(row->p50_ms));
    } else if (kind && !strcmp(kind, "reduce")) {
      found++;
      CHECK(row->count == 1 && st == JOB_QUEUED);
      CHECK(row->backend == NULL);
    }
  }
  CHECK(found == 3);
  store_stats_free(rows, nrows);
  CHECK(store_stats(s, "nobody", &rows, &nrows, &e) == 0);
  CHECK(nrows == 0);
  store_stats_free(rows, nrows);
  store_close(s);
}

/* The sort key of a row as the store defines it (store.h's orders), for
 * checking pages against it. */
static double key_num(const store_job *j, store_job_order o, int asc) {
  if (o == STORE_ORDER_STATUS) return (double)j->status;
  if (j->timings.set & (1u << JOB_T_TOTAL)) return j->timings.ms[JOB_T_TOTAL];
  return asc ? 1e300 : -1.0; /* no duration: last either way */
}
/* <0 when a comes before b in order o. */
static int order_cmp(const store_job *a, const store_job *b, store_job_order o,
                     int asc) {
  int c = 0;
  if (o == STORE_ORDER_KIND) c = strcmp(a->kind, b->kind);
  else if (o != STORE_ORDER_CREATED) {
    double x = key_num(a, o, asc), y = key_num(b, o, asc);
    c = x < y ? -1 : x > y;
  }
  if (o == STORE_ORDER_CREATED) return asc ? strcmp(a->id, b->id) : strcmp(b->id, a->id);
  if (c) return asc ? c : -c;
  return strcmp(b->id, a->id); /* ties newest first */
}

/* Every order in both directions pages through all of a filter's jobs
 * exactly once, in order, with the total of the filter; q matches part of
 * an id or a label in any case, % and _ literally. */
TEST(test_list_orders_search_total) {
  store *s = open_fresh_store();
  if (!s) return;
  enum { N = 30 };
  const char *kinds[] = {"map", "reduce", "matmul", "geodesic"};
  const char *labels[] = {"a_b", "axb", "100%", "100x", "Mixed Case", NULL};
  char ids[N][T_ID_MAX];
  terr e;
  for (int i = 0; i < N; i++) {
    store_job j;
    job_init(&j, "alice", kinds[i % 4]);
    if (labels[i % 6]) j.label = sdup(labels[i % 6]);
    CHECK(store_job_insert(s, &j, NULL, &e) == 0);
    snprintf(ids[i], T_ID_MAX, "%s", j.id);
    store_job_clear(&j);
    int st = i % 5; /* 0 queued, 1 running, 2 succeeded, 3 failed, 4 canceled */
    if (st >= 1)
      CHECK(store_job_start(s, ids[i], t_wall_ms(), "cpu", "r", NULL, &e) == 0);
    if (st >= 2) {
      store_job_end x = end_ok(t_wall_ms(), NULL);
      x.status = st == 2 ? JOB_SUCCEEDED : st == 3 ? JOB_FAILED : JOB_CANCELED;
      if (st != 2) x.error_code = "canceled", x.result.dtype[0] = 0;
      job_timings_put(&x.timings, JOB_T_TOTAL, (double)(i % 4) * 1.25); /* ties */
      CHECK(store_job_finish(s, ids[i], &x, &e) == 0);
    }
  }
  store_job bj;
  job_init(&bj, "bob", "map");
  bj.label = sdup("a_b");
  CHECK(store_job_insert(s, &bj, NULL, &e) == 0);
  store_job_clear(&bj);

  for (int o = 0; o < STORE_ORDER__COUNT; o++) {
    for (int asc = 0; asc < 2; asc++) {
      store_job_filter f = {.owner = "alice", .status = -1, .limit = 4,
                            .order = (store_job_order)o, .asc = asc};
      store_job_pos pos;
      int more = 0, seen = 0, pages = 0, dup = 0, bad_order = 0;
      int64_t total = -1;
      char got[N][T_ID_MAX];
      store_job prev;
      int have_prev = 0;
      do {
        store_job *v;
        int n;
        CHECK(store_job_list(s, &f, &v, &n, &more, &pos, &total, &e) == 0);
        for (int i = 0; i < n; i++) {
          for (int k = 0; k < seen && k < N; k++) dup += strcmp(got[k], v[i].id) == 0;
          if (seen < N) snprintf(got[seen], T_ID_MAX, "%s", v[i].id);
          seen++;
          if (have_prev && order_cmp(&prev, &v[i], f.order, asc) >= 0) bad_order++;
          if (have_prev) store_job_clear(&prev);
          prev = v[i];
          have_prev = 1;
        }
        free(v);
        f.after = &pos;
      } while (more && ++pages < 20);
      if (have_prev) store_job_clear(&prev);
      CHECK_MSG(seen == N && dup == 0 && bad_order == 0 && total == N,
                "order %d asc %d: seen %d dup %d out of order %d total %lld",
                o, asc, seen, dup, bad_order, (long long)total);
    }
  }

  struct {
    const char *q;
    int want;
  } qs[] = {{"a_b", 5}, {"A_B", 5}, {"_", N}, {"100%", 5}, {"0%", 5},
            {"%", 5}, {"mixed c", 5}, {"MIXED", 5}, {"\\", 0}};
  for (size_t c = 0; c < sizeof qs / sizeof qs[0]; c++) {
    store_job_filter f = {.owner = "alice", .status = -1, .limit = 2,
                          .q = qs[c].q};
    store_job *v;
    int n, more;
    store_job_pos pos;
    int64_t total = -1;
    CHECK(store_job_list(s, &f, &v, &n, &more, &pos, &total, &e) == 0);
    CHECK_MSG(total == qs[c].want, "q '%s': total %lld, want %d", qs[c].q,
              (long long)total, qs[c].want);
    CHECK(n == (qs[c].want < 2 ? qs[c].want : 2));
    for (int i = 0; i < n; i++) store_job_clear(&v[i]);
    free(v);
  }
  /* Part of an id, in upper case: that job alone. */
  char part[16];
  snprintf(part, sizeof part, "%.10s", ids[7] + strlen(ids[7]) - 10);
  for (char *c = part; *c; c++)
    if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
  store_job_filter f = {.owner = "alice", .status = -1, .limit = 5, .q = part};
  store_job *v;
  int n, more;
  store_job_pos pos;
  int64_t total = -1;
  CHECK(store_job_list(s, &f, &v, &n, &more, &pos, &total, &e) == 0);
  CHECK(total == 1 && n == 1);
  if (n == 1) CHECK_STR(v[0].id, ids[7]);
  for (int i = 0; i < n; i++) store_job_clear(&v[i]);
  free(v);
  /* Bounded. */
  char longq[STORE_JOB_Q_MAX + 2];
  memset(longq, 'a', sizeof longq - 1);
  longq[sizeof longq - 1] = 0;
  f.q = longq;
  CHECK(store_job_list(s, &f, &v, &n, &more, &pos, &total, &e) == T_EINVAL);
  CHECK_STR(e.field, "q");
  store_close(s);
}

/* A split job's tiles (rows with a parent): listed by store_job_children in
 * tile order, never in lists, totals or counts; a delete of the parent
 * waits for every tile to end, then takes the tiles and their files with
 * it; expiry takes them with their parent only. */
static void insert_tile(store *s, const char *parent, int tile, int tiles,
                        char id[T_ID_MAX]) {
  store_job j;
  job_init(&j, "alice", "geodesic");
  j.parent = sdup(parent);
  j.tile = tile;
  j.tiles = tiles;
  terr e;
  CHECK(store_job_insert(s, &j, NULL, &e) == 0);
  snprintf(id, T_ID_MAX, "%s", j.id);
  store_job_clear(&j);
}

TEST(test_split_children) {
  store *s = open_fresh_store();
  if (!s) return;
  terr e;
  char p[T_ID_MAX], c0[T_ID_MAX], c1[T_ID_MAX], other[T_ID_MAX];
  store_job j;
  job_init(&j, "alice", "geodesic");
  j.tiles = 2;
  CHECK(store_job_insert(s, &j, NULL, &e) == 0);
  snprintf(p, sizeof p, "%s", j.id);
  store_job_clear(&j);
  insert_tile(s, p, 1, 2, c1); /* out of order on purpose */
  insert_tile(s, p, 0, 2, c0);
  CHECK(insert_job(s, "alice", "map", 0, other) == 0);

  store_job *v = NULL;
  int n = 0, more = 0;
  int64_t total = -1;
  store_job_pos next;
  store_job_filter f = {.status = -1, .limit = 100};
  CHECK(store_job_list(s, &f, &v, &n, &more, &next, &total, &e) == 0);
  CHECK(n == 2 && total == 2);
  for (int i = 0; i < n; i++) {
    CHECK(!v[i].parent);
    CHECK(strcmp(v[i].id, c0) != 0 && strcmp(v[i].id, c1) != 0);
    store_job_clear(&v[i]);
  }
  free(v);
  int64_t counts[5];
  CHECK(store_job_counts(s, NULL, counts, &e) == 0);
  CHECK(counts[JOB_QUEUED] == 2);

  CHECK(store_job_children(s, p, &v, &n, &e) == 0);
  CHECK(n == 2);
  if (n == 2) {
    CHECK_STR(v[0].id, c0);
    CHECK_STR(v[1].id, c1);
    CHECK(v[0].tile == 0 && v[1].tile == 1 && v[0].tiles == 2);
    CHECK_STR(v[0].parent, p);
  }
  for (int i = 0; i < n; i++) store_job_clear(&v[i]);
  free(v);
  CHECK(store_job_get(s, p, NULL, &j, &e) == 0);
  CHECK(j.tiles == 2 && !j.parent);
  store_job_clear(&j);

  /* The parent ends; a tile still queued holds the delete back. */
  store_job_end x = end_ok(10, "/r/p.npy");
  CHECK(store_job_finish(s, p, &x, &e) == 0);
  char **paths = NULL;
  int np = 0;
  CHECK(store_job_delete(s, p, NULL, &paths, &np, &e) == T_ECONFLICT);
  /* A tile is not a job of its own to the user. */
  CHECK(store_job_delete(s, c0, NULL, &paths, &np, &e) == T_ENOTFOUND);
  x = end_ok(8, "/r/c0.npy");
  CHECK(store_job_finish(s, c0, &x, &e) == 0);
  x = end_ok(9, "/r/c1.npy");
  CHECK(store_job_finish(s, c1, &x, &e) == 0);
  /* Expiry before the parent's end takes nothing; a tile never expires on
   * its own even when it ended earlier. */
  CHECK(store_expire(s, 10, &paths, &np, &e) == 0);
  CHECK(np == 0);
  free(paths);
  CHECK(store_job_delete(s, p, NULL, &paths, &np, &e) == 0);
  CHECK(np == 3);
  int seen = 0;
  for (int i = 0; i < np; i++) {
    if (strcmp(paths[i], "/r/p.npy") == 0) seen |= 1;
    if (strcmp(paths[i], "/r/c0.npy") == 0) seen |= 2;
    if (strcmp(paths[i], "/r/c1.npy") == 0) seen |= 4;
    free(paths[i]);
  }
  free(paths);
  CHECK(seen == 7);
  CHECK(store_job_get(s, c1, NULL, &j, &e) == T_ENOTFOUND);

  /* Expiry of a parent takes its tiles. */
  job_init(&j, "alice", "geodesic");
  j.tiles = 1;
  CHECK(store_job_insert(s, &j, NULL, &e) == 0);
  snprintf(p, sizeof p, "%s", j.id);
  store_job_clear(&j);
  insert_tile(s, p, 0, 1, c0);
  x = end_ok(20, "/r/c0b.npy");
  CHECK(store_job_finish(s, c0, &x, &e) == 0);
  x = end_ok(21, "/r/pb.npy");
  CHECK(store_job_finish(s, p, &x, &e) == 0);
  CHECK(store_expire(s, 22, &paths, &np, &e) == 0);
  CHECK(np == 2);
  for (int i = 0; i < np; i++) free(paths[i]);
  free(paths);
  CHECK(store_job_get(s, c0, NULL, &j, &e) == T_ENOTFOUND);
  store_close(s);
}

/* One number from the test's PostgreSQL (sql's first column). */
static long long pg_number(const char *sql) {
  PGconn *c = PQconnectdb(test_pg());
  PGresult *r = PQexec(c, sql);
  long long v = -1;
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
    v = atoll(PQgetvalue(r, 0, 0));
  else
    fprintf(stderr, "pg: %s: %s", sql, PQerrorMessage(c));
  PQclear(r);
  PQfinish(c);
  return v;
}

static int read_line(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  buf[0] = 0;
  if (!fgets(buf, (int)cap, f)) buf[0] = 0;
  fclose(f);
  return 0;
}

/* PostgreSQL's open: migrations recorded and a reopen keeps the rows; a
 * schema newer than the binary is refused (T_EINVAL) with nothing
 * changed; the data dir is tied to the store (store-id); an unreachable
 * server is T_EUNAVAIL and its message never holds the password. */
TEST(test_pg_open) {
  if (!test_pg()) {
    printf("skip on sqlite: the PostgreSQL store's open\n");
    return;
  }
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  CHECK_STR(store_kind(s), "postgresql");
  CHECK(store_is_cluster(s));
  CHECK(store_ready(s));
  int v = store_schema_version(s);
  CHECK(v >= 1);
  CHECK(pg_number("SELECT max(version) FROM schema_migrations") == v);
  char id[T_ID_MAX];
  CHECK(insert_job(s, "alice", "map", 0, id) == 0);
  store_close(s);
  char idfile[400], sid[80], sid2[80];
  snprintf(idfile, sizeof idfile, "%s/store-id", dir);
  CHECK(read_line(idfile, sid, sizeof sid) == 0 && sid[0]);
  CHECK(pg_number("SELECT count(*) FROM meta WHERE key = 'store_id'") == 1);

  s = reopen(dir);
  if (!s) return;
  CHECK(store_schema_version(s) == v);
  store_job j;
  terr e;
  CHECK(store_job_get(s, id, "alice", &j, &e) == 0);
  CHECK_STR(j.kind, "map");
  store_job_clear(&j);
  store_close(s);

  /* A newer schema: refused, nothing written. */
  char sql[200];
  snprintf(sql, sizeof sql,
           "INSERT INTO schema_migrations VALUES (%d, 0)", v + 98);
  pg_admin(sql);
  s = NULL;
  terr_clear(&e);
  CHECK(store_open_url(test_pg(), dir, &s, &e) == T_EINVAL);
  CHECK(s == NULL);
  snprintf(sql, sizeof sql, "%d", v + 98);
  CHECK_MSG(strstr(e.message, sql) != NULL, "%s", e.message);
  CHECK(pg_number("SELECT count(*) FROM schema_migrations") == v + 1);
  CHECK(pg_number("SELECT count(*) FROM jobs") == 1);
  CHECK(read_line(idfile, sid2, sizeof sid2) == 0 && strcmp(sid, sid2) == 0);
  snprintf(sql, sizeof sql, "DELETE FROM schema_migrations WHERE version = %d",
           v + 98);
  pg_admin(sql);

  /* Another data dir: one with another store's id, one with none. */
  char other[300], path[400];
  fresh_dir(other, sizeof other);
  CHECK(t_mkdirs(other) == 0);
  snprintf(path, sizeof path, "%s/store-id", other);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("s_another_store\n", f);
    fclose(f);
  }
  CHECK(store_open_url(test_pg(), other, &s, &e) == T_EINVAL);
  CHECK(s == NULL);
  CHECK_MSG(strstr(e.message, "another store") != NULL, "%s", e.message);
  fresh_dir(other, sizeof other);
  CHECK(store_open_url(test_pg(), other, &s, &e) == T_EINVAL);
  CHECK(s == NULL);
  snprintf(path, sizeof path, "%s/store-id", other);
  CHECK(access(path, F_OK) != 0); /* nothing written */
  CHECK(pg_number("SELECT count(*) FROM meta WHERE key = 'store_id'") == 1);

  /* Unreachable (nothing listens on port 1; no such socket folder): the
   * password is never in the words. */
  const char *bad[] = {
      "postgresql://tessel:secret123@127.0.0.1:1/tessel",
      "host=/nonexistent/tessel-sock dbname=tessel user=tessel "
      "password=secret123"};
  for (int i = 0; i < 2; i++) {
    terr_clear(&e);
    CHECK(store_open_url(bad[i], dir, &s, &e) == T_EUNAVAIL);
    CHECK(s == NULL);
    CHECK(e.message[0] != 0);
    CHECK_MSG(strstr(e.message, "secret123") == NULL, "%s", e.message);
  }
}

typedef struct restart_state {
  atomic_int called;
  int rc;
  job_status status;
} restart_state;

static void on_restart_finish(void *arg, int rc, const terr *e,
                              store_job *row) {
  (void)e;
  restart_state *st = arg;
  st->rc = rc;
  st->status = row ? row->status : JOB_QUEUED;
  if (row) store_job_clear(row);
  atomic_store(&st->called, 1);
}

/* Run "pgserver.sh <cmd> <dir>" on the test's server. */
static int pgserver(const char *cmd) {
  char line[1200];
  snprintf(line, sizeof line, "'%s' %s '%s' >/dev/null 2>&1",
           getenv("TESSEL_TEST_PGSERVER"), cmd, getenv("TESSEL_TEST_PG_DIR"));
  return system(line);
}

/* The server goes away and comes back: store_ready turns 0, a [sync] write
 * is T_EUNAVAIL meanwhile, and an [async] finish queued while it was gone
 * is not dropped: it commits once the server is back and its callback
 * says so. (Waits are bounded polls, not timing assertions.) */
TEST(test_pg_restart) {
  if (!test_pg() || !getenv("TESSEL_TEST_PG_DIR") ||
      !getenv("TESSEL_TEST_PGSERVER")) {
    printf("skip: needs tests/cluster/with_pg.sh\n");
    return;
  }
  store *s = open_fresh_store();
  if (!s) return;
  char id[T_ID_MAX];
  terr e;
  CHECK(insert_job(s, "", "map", 0, id) == 0);
  CHECK(store_job_start(s, id, 1000, "cpu", NULL, NULL, &e) == 0);
  CHECK(pgserver("stop") == 0);
  restart_state st = {0};
  store_job_end x = end_ok(2000, NULL);
  CHECK(store_job_finish_async(s, id, &x, on_restart_finish, &st, &e) == 0);
  int ready = 1;
  for (int i = 0; i < 200 && (ready = store_ready(s)); i++) usleep(100000);
  CHECK(ready == 0);
  char other[T_ID_MAX];
  CHECK(insert_job(s, "", "map", 0, other) == T_EUNAVAIL);
  CHECK(atomic_load(&st.called) == 0); /* still held, not dropped */
  CHECK(pgserver("restart") == 0);
  for (int i = 0; i < 300 && !atomic_load(&st.called); i++) usleep(100000);
  CHECK(atomic_load(&st.called) == 1);
  CHECK(st.rc == 0 && st.status == JOB_SUCCEEDED);
  for (int i = 0; i < 50 && !(ready = store_ready(s)); i++) usleep(100000);
  CHECK(ready == 1);
  store_job g;
  CHECK(store_job_get(s, id, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.finished_at == 2000);
  store_job_clear(&g);
  store_close(s);
}

/* The node fence: once the store knows its node, start and finish leave a
 * job another node holds alone (T_ECONFLICT "held by another node"); a
 * finish of its own job records the node, clears the lease and counts it
 * in nodes.jobs_done. */
TEST(test_pg_node_fence) {
  if (!test_pg()) {
    printf("skip on sqlite: one node, no fence\n");
    return;
  }
  store *s = open_fresh_store();
  if (!s) return;
  char mine[T_ID_MAX], theirs[T_ID_MAX], sql[300];
  terr e;
  CHECK(insert_job(s, "", "map", 0, mine) == 0);
  CHECK(insert_job(s, "", "map", 0, theirs) == 0);
  pg_admin("INSERT INTO nodes (id, name) VALUES ('n_self', 'self'),"
           " ('n_other', 'other')");
  snprintf(sql, sizeof sql,
           "UPDATE jobs SET node = 'n_other', lease_until = 1 WHERE id = '%s';"
           " UPDATE jobs SET node = 'n_self', lease_until = 1 WHERE id = '%s'",
           theirs, mine);
  pg_admin(sql);
  pg__set_node(store_impl(s), "n_self");
  CHECK(store_job_start(s, theirs, 10, "cpu", NULL, NULL, &e) == T_ECONFLICT);
  CHECK_MSG(strstr(e.message, "another node") != NULL, "%s", e.message);
  CHECK(store_job_start(s, mine, 10, "cpu", NULL, NULL, &e) == 0);
  store_job_end x = end_ok(20, NULL);
  CHECK(store_job_finish(s, theirs, &x, &e) == T_ECONFLICT);
  CHECK_MSG(strstr(e.message, "held by another node") != NULL, "%s",
            e.message);
  CHECK(store_job_finish(s, mine, &x, &e) == 0);
  store_job g;
  CHECK(store_job_get(s, theirs, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_QUEUED && g.node && strcmp(g.node, "n_other") == 0);
  store_job_clear(&g);
  CHECK(store_job_get(s, mine, NULL, &g, &e) == 0);
  CHECK(g.status == JOB_SUCCEEDED && g.lease_until == 0);
  CHECK(g.node && strcmp(g.node, "n_self") == 0);
  store_job_clear(&g);
  /* A finish locks no node row (jobs_done is the node's own count, which
   * its heartbeat writes): nothing for a heartbeat to deadlock with. */
  CHECK(pg_number("SELECT jobs_done FROM nodes WHERE id = 'n_self'") == 0);
  store_close(s);
}

typedef struct race_arg {
  store *s;
  char id[T_ID_MAX];
  int rc, existing;
} race_arg;

static void *race_insert(void *p) {
  race_arg *a = p;
  store_job j;
  job_init(&j, "alice", "map");
  j.request_id = sdup("req-1");
  j.body_hash = sdup("hash-1");
  terr e;
  a->rc = store_job_insert(a->s, &j, &a->existing, &e);
  snprintf(a->id, sizeof a->id, "%s", j.id);
  store_job_clear(&j);
  return NULL;
}

/* Two nodes (two stores on one PostgreSQL and one data dir) insert the
 * same (owner, request_id) from 8 threads at once: one job is stored, one
 * insert makes it and the 7 others are answered with it. */
TEST(test_pg_two_nodes_idempotent) {
  if (!test_pg()) {
    printf("skip on sqlite: one node\n");
    return;
  }
  char dir[300];
  store *s1 = open_fresh(dir, sizeof dir);
  store *s2 = s1 ? reopen(dir) : NULL;
  if (!s1 || !s2) {
    store_close(s1);
    return;
  }
  race_arg a[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].s = i % 2 ? s2 : s1;
    CHECK(pthread_create(&t[i], NULL, race_insert, &a[i]) == 0);
  }
  int made = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    CHECK(a[i].rc == 0);
    CHECK_STR(a[i].id, a[0].id);
    made += !a[i].existing;
  }
  CHECK(made == 1);
  CHECK(pg_number("SELECT count(*) FROM jobs") == 1);
  store_close(s2);
  store_close(s1);
}

int main(void) {
  if (fixture_root("/tmp/tessel_store_XXXXXX")) return 1;
  RUN(test_open_migrate_reopen);
  RUN(test_roundtrip_every_field);
  RUN(test_owner_isolation);
  RUN(test_idempotency);
  RUN(test_list_filters_paging);
  RUN(test_list_orders_search_total);
  RUN(test_lifecycle);
  RUN(test_start_async);
  RUN(test_async_insert_finish);
  RUN(test_result_in_row);
  RUN(test_devices_recorded);
  RUN(test_migrate_from_v1);
  RUN(test_requeue_and_unfinished_order);
  RUN(test_delete_job);
  RUN(test_arrays);
  RUN(test_expire);
  RUN(test_stats_counts);
  RUN(test_note_start_and_unstart);
  RUN(test_split_children);
  RUN(test_pg_open);
  RUN(test_pg_node_fence);
  RUN(test_pg_two_nodes_idempotent);
  RUN(test_pg_restart);
  rm_tree(root);
  return check_summary();
}
