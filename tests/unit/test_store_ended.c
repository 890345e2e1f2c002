/* test_store_ended.c — the row an async finish hands its callback without
 * reading it back (store_job_end.before, store_job_ended) is the row the
 * store holds.
 *
 * The scheduler gives the finish the job's row as queued with its run's
 * start applied; the SQLite store applies the end to it instead of reading
 * the row again in the finish's transaction (issue 26: the read was ~25k
 * of a tiny job's ~320k instructions). That row is what waiters get and
 * what store_recent.c answers reads with, so it must equal the stored one
 * field for field. Checks, for ends of every shape (a lazy start taken
 * over by the finish and a start committed before it; succeeded with a
 * result in the row, a 0-d result, several parts; failed with an error,
 * compare figures and max_abs_diff; a cuda end's devices and backend_used;
 * a label, a request_id, an empty reason, no estimate, partial timings):
 * the callback's row with `before`, the callback's row read back (the same
 * end on a twin job without `before`), and the row read after the store is
 * closed and opened again (nothing cached) are equal in every field.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/store.h"
#include "job_same.h"
#include "store_fixture.h"
#include "finish_seen.h"

/* A queued job as a submit inserts it (the row the scheduler keeps). */
static void insert(store *s, store_job *j, int variant) {
  terr e;
  job_init(j, variant ? "dora" : "", "map");
  if (variant == 1) {
    j->label = sdup("nightly \"run\"");
    static int seq;
    char rid[32];
    snprintf(rid, sizeof rid, "req-ended-%d", seq++);
    j->request_id = sdup(rid);
    j->priority = 3;
    j->timeout_s = 0.25;
  }
  int existing = 0;
  CHECK_MSG(store_job_insert(s, j, &existing, &e) == 0 && !existing, "%s",
            e.message);
}

static void finish_wait(store *s, const char *id, store_job_end *x,
                        seen *f) {
  terr e;
  memset(f, 0, sizeof *f);
  CHECK(store_job_finish_async(s, id, x, on_finished, f, &e) == 0);
  wait_seen(f);
  CHECK(f->rc == 0 && f->have_row);
}

typedef struct a_case {
  const char *name;
  int variant, lazy_start;
  const char *used, *reason, *estimate;
  store_job_end end;
} a_case;

static void run_case(store *s, a_case *c, store_job *with, store_job *without,
                     char ids[2][T_ID_MAX]) {
  terr e;
  for (int twin = 0; twin < 2; twin++) {
    store_job j;
    insert(s, &j, c->variant);
    snprintf(ids[twin], T_ID_MAX, "%s", j.id);
    int64_t at = j.created_at + 5;
    if (c->lazy_start)
      store_job_start_async(s, j.id, at, c->used, c->reason, c->estimate);
    else
      CHECK(store_job_start(s, j.id, at, c->used, c->reason, c->estimate,
                            &e) == 0);
    /* The row as the scheduler holds it with the start applied. */
    store_job before = j;
    before.started_at = at;
    before.backend_used = (char *)c->used;
    before.backend_reason = (char *)c->reason;
    before.estimate = (char *)c->estimate;
    before.attempts = j.attempts + 1;
    store_job_end x = c->end;
    x.before = twin == 0 ? &before : NULL;
    seen f;
    finish_wait(s, j.id, &x, &f);
    *(twin == 0 ? with : without) = f.row;
    store_job_clear(&j);
  }
}

TEST(test_ended_row_is_the_stored_row) {
  char dir[300];
  store *s = open_fresh(dir, sizeof dir);
  if (!s) return;
  static const unsigned char npy[5] = {1, 2, 3, 4, 5};
  a_case cases[6];
  memset(cases, 0, sizeof cases);
  /* 0: a tiny job: lazy start, result in the row, partial timings */
  cases[0] = (a_case){"tiny", 0, 1, "serial", "estimate serial 0.01 ms",
                      "{\"size\":3,\"model\":\"calibrated\"}",
                      {.status = JOB_SUCCEEDED, .finished_at = 0,
                       .result = {.dtype = "float64", .ndim = 2,
                                  .shape = {2, 3}, .bytes = 48},
                       .max_abs_diff = NAN, .progress_done = 3,
                       .progress_total = 3, .result_npy = npy,
                       .result_npy_len = sizeof npy}};
  job_timings_put(&cases[0].end.timings, JOB_T_QUEUE, 0.012);
  job_timings_put(&cases[0].end.timings, JOB_T_TOTAL, 0.125);
  /* 1: committed start, failed, compare figures, label and request_id */
  cases[1] = (a_case){"failed", 1, 0, "cpu", "", NULL,
                      {.status = JOB_FAILED,
                       .compare = "[{\"backend\":\"serial\",\"ms\":0.5}]",
                       .max_abs_diff = 3.7e-9, .error_code = "internal",
                       .error_message = "went \"wrong\"\n", .progress_done = 1,
                       .progress_total = 7}};
  /* 2: a cuda end: devices and its own backend_used */
  cases[2] = (a_case){"cuda", 0, 1, "cuda:0", "cuda requested by the client",
                      NULL,
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "float32", .ndim = 1,
                                  .shape = {4}, .bytes = 16,
                                  .nonconverged = 2},
                       .result_path = "/tmp/none/result.npy",
                       .max_abs_diff = NAN,
                       .devices = "[{\"device\":0,\"rows\":4,\"blocks\":1}]",
                       .backend_used = "cuda:0+cuda:1"}};
  /* 3: a 0-d result, every timing */
  cases[3] = (a_case){"0-d", 1, 1, "serial", NULL, NULL,
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "int64", .ndim = 0, .bytes = 8},
                       .max_abs_diff = NAN, .result_npy = npy,
                       .result_npy_len = 3}};
  for (int t = 0; t < JOB_T__COUNT; t++)
    job_timings_put(&cases[3].end.timings, (job_timing)t, 0.001 * (t + 1));
  /* 4: several parts */
  cases[4] = (a_case){"parts", 0, 0, "cpu", "x", "{}",
                      {.status = JOB_SUCCEEDED,
                       .result = {.dtype = "float64", .ndim = 1,
                                  .shape = {10}, .bytes = 80},
                       .result_path = "/tmp/none/d.npy",
                       .max_abs_diff = NAN,
                       .result_parts = "[{\"name\":\"distance\"},"
                                       "{\"name\":\"index\",\"path\":\"i\"}]"}};
  /* 5: canceled while running; a result dtype without a shape given */
  cases[5] = (a_case){"canceled", 0, 1, "cpu", NULL, NULL,
                      {.status = JOB_CANCELED, .max_abs_diff = NAN,
                       .error_code = "canceled",
                       .error_message = "canceled by the client"}};
  int n = (int)(sizeof cases / sizeof cases[0]);
  store_job with[6], without[6];
  char ids[6][2][T_ID_MAX];
  for (int i = 0; i < n; i++) {
    cases[i].end.finished_at = 1795000000000 + i;
    run_case(s, &cases[i], &with[i], &without[i], ids[i]);
  }
  store_close(s);
  s = reopen(dir); /* nothing cached: every read from the file */
  if (!s) return;
  terr e;
  for (int i = 0; i < n; i++) {
    store_job got, got2;
    CHECK(store_job_get(s, ids[i][0], NULL, &got, &e) == 0);
    CHECK(store_job_get(s, ids[i][1], NULL, &got2, &e) == 0);
    CHECK_MSG(same_job(&with[i], &got, cases[i].name), "%s: composed row",
              cases[i].name);
    /* The twin read back differs only in its id and created_at. */
    snprintf(without[i].id, sizeof without[i].id, "%s", with[i].id);
    without[i].created_at = with[i].created_at;
    if (without[i].request_id && cases[i].variant == 1) {
      free(without[i].request_id); /* the twin's own request_id */
      without[i].request_id = sdup(with[i].request_id);
    }
    without[i].started_at = with[i].started_at;
    CHECK_MSG(same_job(&with[i], &without[i], cases[i].name),
              "%s: composed vs read back", cases[i].name);
    store_job_clear(&got);
    store_job_clear(&got2);
    store_job_clear(&with[i]);
    store_job_clear(&without[i]);
  }
  store_close(s);
}

int main(void) {
  if (fixture_root("/tmp/tessel_ended_XXXXXX")) return 1;
  RUN(test_ended_row_is_the_stored_row);
  rm_tree(root);
  return check_summary();
}
