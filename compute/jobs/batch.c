/* compute/jobs/batch.c — many submissions in one request (POST /v1/jobs:batch).
 *
 * Each item goes through jobs_submit, the one submit path: the envelope, the
 * kind's check, the limits, the pins, the queue slot, request_id's meaning.
 * Before any item is submitted the batch as a whole is checked: "jobs" an
 * array of at most JOBS_BATCH_MAX items (more: 413 naming "jobs") and no
 * request_id twice among its objects (400 naming "jobs[i].request_id"): a
 * refused batch leaves the store as it was. An item that is not an object,
 * or that its own submit refuses, gets its error with the field prefixed by
 * "jobs[i]" and the other items go on. Items without a request_id are
 * inserted [async] (store_job_insert_async) and a single jobs_sync at the
 * end commits them all before the caller answers: the items share commits
 * (the store's writer groups them) instead of one fsync each. An item whose
 * async insert failed is found missing by the caller's read (jobs_get) and
 * reported as that item's error. (store_insert_jobs could take the rows in
 * chunks of one transaction each; it would need the submit path split
 * around the insert, which this file leaves for later.)
 *
 * Threads: the caller's HTTP thread; no lock is held here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/jobs/jobs.h"
#include "util/util.h"

/* e's field as "jobs[i]" or "jobs[i].<field>". */
static void prefix_field(terr *e, int i) {
  char f[sizeof e->field];
  if (e->field[0])
    snprintf(f, sizeof f, "jobs[%d].%s", i, e->field);
  else
    snprintf(f, sizeof f, "jobs[%d]", i);
  snprintf(e->field, sizeof e->field, "%s", f);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 400 naming the later item when two objects share a request_id. */
static int check_request_ids(json_t *items, terr *e) {
  size_t n = json_array_size(items), m = 0;
  const char **ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *rid = json_object_get(json_array_get(items, i), "request_id");
    if (json_is_string(rid)) ids[m++] = json_string_value(rid);
  }
  qsort(ids, m, sizeof *ids, cmp_str);
  const char *dup = NULL;
  for (size_t i = 1; i < m && !dup; i++)
    if (strcmp(ids[i - 1], ids[i]) == 0) dup = ids[i];
  free(ids);
  if (!dup) return T_OK;
  size_t at = 0, seen = 0; /* name its second use */
  for (size_t i = 0; i < n && seen < 2; i++) {
    json_t *rid = json_object_get(json_array_get(items, i), "request_id");
    if (json_is_string(rid) && strcmp(json_string_value(rid), dup) == 0) {
      seen++;
      at = i;
    }
  }
  char field[48];
  snprintf(field, sizeof field, "jobs[%zu].request_id", at);
  return terr_set(e, T_EINVAL, field, -1,
                  "request_id '%s' is used twice in this batch", dup);
}

int jobs_submit_batch(jobs *J, const char *owner, json_t *items,
                      jobs_batch_item *out, terr *e) {
  if (!json_is_array(items))
    return terr_set(e, T_EINVAL, "jobs", -1,
                    "required: an array of job bodies");
  size_t n = json_array_size(items);
  if (n > JOBS_BATCH_MAX)
    return terr_set(e, T_ETOOLARGE, "jobs", -1,
                    "%zu items: a batch holds at most %d", n, JOBS_BATCH_MAX);
  int rc = check_request_ids(items, e);
  if (rc) return rc;
  int async_any = 0;
  for (size_t i = 0; i < n; i++) {
    jobs_batch_item *it = &out[i];
    memset(it, 0, sizeof *it);
    terr_clear(&it->err);
    json_t *body = json_array_get(items, i);
    if (!json_is_object(body)) {
      it->rc = terr_set(&it->err, T_EINVAL, "", -1, "expected a job object");
    } else {
      int async_insert = 1, retry_after = 1;
      it->rc = jobs_submit(J, owner, body, &async_insert, it->id,
                           &retry_after, &it->err);
      async_any |= it->rc == 0 && async_insert;
    }
    if (it->rc) prefix_field(&it->err, (int)i);
  }
  /* every async insert committed (or failed) before anything is answered */
  if (async_any && (rc = jobs_sync(J, e))) return rc;
  return T_OK;
}
