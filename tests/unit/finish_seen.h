/* finish_seen.h — an async finish's callback as the store tests of the
 * finish see it (test_store_ended.c, test_store_fold.c): `seen` counts its
 * calls and keeps its rc and the row it hands over (the test's to clear);
 * wait_seen waits for the one call. Include after store_fixture.h. */
#ifndef TESSEL_TESTS_FINISH_SEEN_H
#define TESSEL_TESTS_FINISH_SEEN_H
#include <stdatomic.h>
#include <unistd.h>

typedef struct seen {
  atomic_int calls;
  int rc;
  store_job row;
  int have_row;
} seen;

static void on_finished(void *arg, int rc, const terr *e, store_job *row) {
  (void)e;
  seen *f = arg;
  f->rc = rc;
  f->have_row = row != NULL;
  if (row) f->row = *row; /* ours now */
  atomic_fetch_add(&f->calls, 1);
}

/* Wait (at most 5 s) for the one call of on_finished. */
static void wait_seen(seen *f) {
  for (int i = 0; i < 10000 && atomic_load(&f->calls) == 0; i++) usleep(500);
  CHECK(atomic_load(&f->calls) == 1);
}

#endif
