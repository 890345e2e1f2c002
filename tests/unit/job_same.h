/* job_same.h — two store_job records equal in every field (strings
 * NULL-exact: "" is not NULL; reals exact, NaN equal to NaN), each
 * difference printed with `what`: test_store_ended.c and
 * test_sched_ended.c compare the row a finish handed back without reading
 * it with the row the store holds. Header-only (static).
 */
#ifndef TESSEL_TESTS_JOB_SAME_H
#define TESSEL_TESTS_JOB_SAME_H
#pragma GCC diagnostic ignored "-Wunused-function"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db/store.h"

static int same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every field, strings NULL-exact ("" is not NULL), reals exact. */
static int same_job(const store_job *a, const store_job *b, const char *what) {
  int ok = 1;
#define S(f)                                                                \
  if (!same_str(a->f, b->f)) {                                              \
    printf("  %s: %s differs: %s / %s\n", what, #f, a->f ? a->f : "NULL",   \
           b->f ? b->f : "NULL");                                           \
    ok = 0;                                                                 \
  }
#define N(f)                                                                \
  if (a->f != b->f) {                                                       \
    printf("  %s: %s differs: %lld / %lld\n", what, #f, (long long)a->f,    \
           (long long)b->f);                                                \
    ok = 0;                                                                 \
  }
  S(id) S(owner) S(kind) S(params) S(backend_requested) S(backend_used)
  S(backend_reason) S(estimate) S(label) S(request_id) S(body_hash)
  S(error_code) S(error_message) S(result_path) S(compare) S(output_file)
  S(result_parts) S(node) S(parent) S(devices)
  N(status) N(priority) N(created_at) N(started_at) N(finished_at)
  N(progress_done) N(progress_total) N(attempts) N(lease_until)
  N(cancel_requested) N(tile) N(tiles)
#undef S
#undef N
  if (a->timeout_s != b->timeout_s) ok = 0, printf("  %s: timeout_s\n", what);
  if (!(isnan(a->max_abs_diff) && isnan(b->max_abs_diff)) &&
      a->max_abs_diff != b->max_abs_diff)
    ok = 0, printf("  %s: max_abs_diff\n", what);
  if (a->timings.set != b->timings.set ||
      memcmp(a->timings.ms, b->timings.ms, sizeof a->timings.ms) != 0)
    ok = 0, printf("  %s: timings\n", what);
  if (memcmp(&a->result, &b->result, sizeof a->result) != 0)
    ok = 0, printf("  %s: result\n", what);
  return ok;
}

#endif
