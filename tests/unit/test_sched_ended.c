/* test_sched_ended.c — the records the scheduler's ends hand back without
 * a read (store_job_end.before: the job's row as queued with the run's
 * start applied, the end applied by the store) are the rows the store
 * holds.
 *
 * Jobs of every ending run through a real scheduler on SQLite: succeeded
 * with a result in the row and in a file, on serial, cpu and auto (the
 * router's figures in the estimate), compared (compare figures,
 * max_abs_diff), failed in prepare and in run, and one whose attempts were
 * counted before (a recovery). Each record is read while the scheduler runs
 * (the store answers a just-finished job from memory: the row its finish
 * handed over), then the store is closed and opened again and each row
 * read from the file: equal in every field (tests/unit/job_same.h).
 */
#include "sched_fixture.h"
#include "job_same.h"

TEST(test_ended_records_are_the_stored_rows) {
  fx f;
  if (fx_prepare(&f, 2)) return;
  f.cfg.row_result_max = 4096;
  /* A job whose earlier start died with its process (attempts 1, queued):
   * its end must count this start on top. */
  char again[T_ID_MAX];
  CHECK(insert_job(f.st, "sleepy", "{\"n\":4,\"value\":2}", "serial", 5, 0,
                   again) == 0);
  terr e;
  CHECK(store_job_start(f.st, again, 1, "cpu", "old", "{}", &e) == 0);
  CHECK(store_job_requeue(f.st, again, &e) == 0);
  if (fx_start(&f)) return;
  static const struct {
    const char *kind, *params, *backend;
  } cases[] = {
      {"sleepy", "{\"n\":4,\"value\":10}", "cpu"},      /* in the row */
      {"sleepy", "{\"n\":900,\"value\":0.5}", "serial"}, /* a file */
      {"map", "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}", "auto"},
      {"sleepy", "{\"n\":20,\"value\":1}", "compare"},
      {"wrong", "{\"n\":20,\"value\":1}", "compare"},
      {"fail", "{\"n\":1,\"at\":\"run\"}", "cpu"},
      {"fail", "{\"n\":1,\"at\":\"prepare\"}", "serial"},
  };
  enum { NJ = sizeof cases / sizeof cases[0] };
  char ids[NJ + 1][T_ID_MAX];
  for (int i = 0; i < NJ; i++)
    CHECK(submit(&f, cases[i].kind, cases[i].params, cases[i].backend, 5, 0,
                 ids[i]) == 0);
  snprintf(ids[NJ], T_ID_MAX, "%s", again);
  store_job seen[NJ + 1];
  int have[NJ + 1];
  for (int i = 0; i <= NJ; i++) have[i] = wait_final(&f, ids[i], &seen[i]);
  CHECK(have[NJ] && seen[NJ].attempts == 2);
  CHECK(have[2] && seen[2].estimate && strstr(seen[2].estimate, "\"model\""));
  fx_close(&f);
  store *st = NULL;
  CHECK(store_open(f.dir, &st, &e) == 0); /* nothing cached */
  for (int i = 0; st && i <= NJ; i++) {
    if (!have[i]) continue;
    store_job got;
    CHECK(store_job_get(st, ids[i], NULL, &got, &e) == 0);
    char what[64];
    snprintf(what, sizeof what, "job %d (%s)", i,
             i < NJ ? cases[i].kind : "recovered");
    CHECK_MSG(same_job(&seen[i], &got, what), "%s: record vs stored row",
              what);
    store_job_clear(&got);
    store_job_clear(&seen[i]);
  }
  store_close(st);
}

int main(void) {
  t_log_level = T_LOG_ERROR;
  snprintf(root, sizeof root, "/tmp/tessel_schedended_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_ended_records_are_the_stored_rows);
  return check_summary();
}
