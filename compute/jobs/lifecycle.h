/* lifecycle.h — the end of every job and array, in one place.
 *
 * Delete (a client's DELETE) and expiry (the daemon's timer) end a job or
 * an array through these calls and no other: each removes the store's row,
 * then the copy the GPUs may hold (gpu_resident_drop), then the files (the
 * result and every part's, or the upload). The API maps the terr code to a
 * reply; it unlinks, renames and drops nothing itself (tests/layout says so).
 *
 * Threads: any; none blocks on compute (the GPU drop is queued when the
 * device is busy). Ownership: `id` and `owner` are borrowed for the call.
 */
#ifndef TESSEL_JOBS_LIFECYCLE_H
#define TESSEL_JOBS_LIFECYCLE_H

#include <stdint.h>

#include "compute/array/arrays.h"
#include "compute/array/codec/parts_upload.h"
#include "compute/jobs/jobs.h"
#include "db/store.h"
#include "util/err.h"

/* Delete a finished job: its row, a chain's GPU copy, its result files
 * (every part's). T_ECONFLICT naming "id" when the job has not finished or
 * a queued job takes its result; T_ENOTFOUND naming "id". */
int jobs_delete(jobs *J, const char *id, const char *owner, terr *e);

/* Delete an uploaded array: its row, its GPU copies, its file. T_ECONFLICT
 * when a queued or running job reads it; T_ENOTFOUND naming "id". */
int jobs_array_delete(arrays *A, const char *id, const char *owner, terr *e);

/* Expire jobs that finished before before_ms (wall ms) and arrays created
 * before it that no unfinished job reads, each ended as the deletes above
 * end one (row, GPU copies, files). *nfiles (may be NULL): the files
 * removed. */
int jobs_expire(store *st, int64_t before_ms, int *nfiles, terr *e);

/* An upload in parts not completed (compute/array/codec/parts_upload.h)
 * ends here too: a client's DELETE (T_ENOTFOUND naming "id"), or, from the
 * daemon's timer, every one untouched for its TTL. No row and no GPU copy:
 * only the table's entry and its .tmp file. *n (may be NULL): how many. */
void jobs_uploads_setup(const parts_limits *l); /* at start */
int jobs_upload_delete(const char *id, const char *owner, terr *e);
void jobs_uploads_expire(int *n);

/* Tests only: the call that drops an id's GPU-resident copies (default
 * gpu_resident_drop); NULL restores the default. */
void jobs_lifecycle_gpu_drop_hook(void (*drop)(const char *id));

#endif
