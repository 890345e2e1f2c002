/* store_common.h — what both store backends do the same way, written once
 * (db/store_rec.c); private to db/ and its backends (store_backend.h
 * includes it).
 */
#ifndef TESSEL_DB_STORE_COMMON_H
#define TESSEL_DB_STORE_COMMON_H

#include <stddef.h>

#include "db/store.h"

/* A job row's columns, in the order both backends read them (SQLite's
 * store__job_row, PostgreSQL's pg__job_row): one list, so that the two
 * can never disagree on a column. */
#define STORE_JOB_COLS                                                        \
  "id, owner, kind, params, status, backend_requested, backend_used, "        \
  "backend_reason, estimate, priority, label, request_id, body_hash, "        \
  "timeout_s, created_at, started_at, finished_at, t_queue, progress_done, "  \
  "progress_total, error_code, error_message, result_dtype, result_path, "    \
  "compare, max_abs_diff, attempts, t_prepare, t_h2d, t_compute, t_d2h, "     \
  "t_store, t_total, result_shape, result_bytes, result_nonconverged, "       \
  "output_file, result_parts, node, lease_until, cancel_requested, "          \
  "parent, tile, tiles, devices"
#define STORE_JOB_NCOLS 45

/* The 409 of a delete that queued or running jobs block (both backends'
 * store__referenced / pg__referenced give n and the first one's id): says
 * what blocks it, naming the first dependent and how many there are, so
 * the caller knows which jobs to wait for or cancel. Returns T_ECONFLICT. */
int store_refused_by_dependents(terr *e, const char *noun, const char *id,
                                int n, const char *first);
/* Equal strings, NULL equal only to NULL. */
int store__same_str(const char *a, const char *b);
/* A result's shape as both stores keep it: JSON text "[3,4]". */
void store__shape_text(const job_result_info *r, char *buf, size_t cap);

/* The list's orders (store_job_order): each sort key as SQL (the same text
 * on SQLite and PostgreSQL; NULL for created: the id alone), the sentinel
 * for a job without a duration (below every duration when descending,
 * above when ascending, so such jobs come last either way; durations are
 * >= 0), and the position of row j in order o for the next page's cursor. */
#define STORE_DUR_NONE_DESC (-1.0)
#define STORE_DUR_NONE_ASC 1e300
const char *store__order_key_sql(store_job_order o, int desc);
void store__job_pos(const store_job *j, store_job_order o, int desc,
                    store_job_pos *p);
/* A list's limit (1..1000), status and order: 0 or T_EINVAL naming it. */
int store__job_filter_check(const store_job_filter *f, terr *e);

/* The checks and defaults of an insert (store.h): a job needs its kind and
 * params and gets an id, created_at now and status queued; an array needs
 * dtype, shape, digest and path and gets an id and created_at. 0 or
 * T_EINVAL naming the field. */
int store__job_insert_prep(store_job *j, terr *e);
int store__array_insert_prep(store_array *a, terr *e);

#endif
