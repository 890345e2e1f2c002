/* compute/array/region.h — registered shared-memory regions: a file under
 * --local-dir mapped once (MAP_SHARED, read and write) and named by an id,
 * so that jobs read their inputs from it and write their results into it
 * with no upload, no download and no file written per job.
 *
 * Registration (region_add) opens the path exactly as a same-host {"file"}
 * is opened (compute/array/localfile.h: beneath the owner's allowed
 * directory, no symlink, no "..", a regular file; 403 / 404 naming the
 * field), takes its size at that moment as the region's size (an empty
 * file is 400), maps it whole and lists the mapping with util/sigbus.h,
 * so that a truncation by the file's owner reads zeros and marks the
 * region torn instead of killing the daemon. Where a GPU is usable the
 * mapping is also page-locked once (the pin hook, set by the API to
 * compute/gpu's gpu_host_register; compute/array may not call compute/gpu).
 *
 * What a region is afterwards: the mapping registered, whatever happens to
 * the path. A file grown later keeps its registered size; a file renamed
 * away or replaced (os.replace) leaves the region on the inode it mapped;
 * a file truncated below the registered size makes every job that uses
 * the region fail T_ECONFLICT naming its field: checked (fstat) before a
 * job reads or writes it, and at the job's end (a truncation while the
 * job ran tears the mapping: the zeros it then read are never a result).
 * A torn region stays unusable: delete it and register the file again.
 *
 * Owners: a region is its owner's (the token name; "" without tokens):
 * another owner's id is "not found", for every call. Limits per owner:
 * REGION_MAX_PER_OWNER regions and region_set_limit's bytes (the daemon's
 * --region-bytes; 413 naming "path" beyond either). REGION_MAX_ALL regions
 * in all (each holds a SIGBUS guard slot).
 *
 * Lifetime: the registry lives in this process only. Regions are dropped
 * when the daemon stops (the mappings go with the process; the files are
 * the client's and stay): a client registers again after a restart, and
 * a job stored with a region that is gone fails "not found". A cluster
 * node's regions would be invisible to the other nodes, so compute/jobs
 * refuses regions on a cluster store.
 *
 * Jobs: the submit records each job that names a region (region_use); a
 * delete (region_delete) asks the caller's probe whether any of them is
 * still queued or running and answers 409 naming them if so. A run borrows
 * the mapping (region_input: a tarray whose data points into it, no copy;
 * region_output: the result copied in at its offset), each holding a
 * reference, so the mapping outlives a delete that raced with it: it is
 * unmapped when its last reference goes.
 *
 * Threads: any; one mutex orders the registry (never held across a copy
 * or a store call). Ownership: returned infos are the caller's (free).
 */
#ifndef TESSEL_ARRAY_REGION_H
#define TESSEL_ARRAY_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "compute/array/localfile.h"
#include "compute/array/tarray.h"
#include "util/err.h"

#define REGION_ID_MAX 40
#define REGION_MAX_PER_OWNER 16
#define REGION_MAX_ALL 128
#define REGION_ALIGN 64 /* the parts of a result of several arrays */

typedef struct region_info {
  char id[REGION_ID_MAX];
  char path[TLOCAL_PATH_MAX];
  int64_t bytes;
  int64_t created_at; /* ms since the epoch */
  int pinned;         /* page-locked for the GPUs */
  int torn;           /* truncated under the daemon: unusable */
  int jobs;           /* jobs recorded as using it (some may have ended) */
} region_info;

/* The per-owner byte limit (0: a quarter of the machine's RAM). */
void region_set_limit(int64_t bytes);
int64_t region_limit(void);
/* The GPU's page-locking (compute/gpu: gpu_host_register/unregister), set
 * once at start by the API; NULL: regions are not pinned. */
void region_set_pin(int (*pin)(void *p, size_t n, terr *e),
                    void (*unpin)(void *p));

/* Register `path` for owner (errors name `field`). *out: the new region. */
int region_add(const tlocal *l, const char *owner, const char *path,
               const char *field, region_info *out, terr *e);
/* Owner's region id: 0, or T_ENOTFOUND naming field. */
int region_get(const char *owner, const char *id, const char *field,
               region_info *out, terr *e);
/* Owner's regions, oldest first: *out (caller frees), *n. */
int region_list(const char *owner, region_info **out, int *n, terr *e);

/* Whether job `job_id` is still queued or running (the caller's store):
 * 1 yes, 0 no. */
typedef int (*region_job_probe)(void *ud, const char *job_id);
/* Record that job `job_id` uses owner's region id (named at field):
 * T_ENOTFOUND when it is gone. Ended jobs are forgotten as the list grows
 * (probe). */
int region_use(const char *owner, const char *id, const char *job_id,
               const char *field, region_job_probe probe, void *ud, terr *e);
/* Drop owner's region: T_ENOTFOUND, or T_ECONFLICT naming the jobs that
 * still use it (probe says which). The mapping goes with its last
 * reference. */
int region_delete(const char *owner, const char *id, region_job_probe probe,
                  void *ud, terr *e);

/* A range of a region as the API names it: offset and an array of dt and
 * shape, checked against the region's size (T_EINVAL naming
 * field.offset: past its end, or not aligned to the element). T_ENOTFOUND
 * naming field.region. Nothing is mapped or read. */
int region_check_range(const char *owner, const char *id, int64_t offset,
                       int64_t bytes, int64_t align, const char *field,
                       terr *e);
/* A job's input: the tarray of dt/shape at offset, its data the region's
 * mapping (no copy; read/write, so a kind that writes into its input
 * writes the region: none does). The region must be whole (not torn, its
 * file at least the registered size: else T_ECONFLICT naming field). With
 * log, the job's end checks the region again (tlocal_log_hook). tarray_free
 * releases the reference; it never unmaps. */
int region_input(const char *owner, const char *id, int64_t offset,
                 tdtype dt, int ndim, const int64_t *shape,
                 const char *field, tlocal_log *log, tarray **out, terr *e);
/* A result array of dt/shape allocated in place at offset (the job's
 * output region: a kind computes straight into it, a GPU copies straight
 * into its pinned pages); errors as region_input's, naming field. */
int region_result(const char *owner, const char *id, int64_t offset,
                  tdtype dt, int ndim, const int64_t *shape,
                  const char *field, tarray **out, terr *e);
/* A job's result into the region at offset (raw bytes, C order): the range
 * checked, the region whole before and after the copy, else T_EINVAL /
 * T_ECONFLICT naming field and nothing said to be written. A result that
 * already lies there (region_result) is not copied, only checked. */
int region_output(const char *owner, const char *id, int64_t offset,
                  const tarray *a, const char *field, terr *e);

/* A job's output region as its row keeps it (db's output_file column):
 * "region:<id>@<offset>" (a same-host output path is absolute, so it never
 * starts so). region_out_text: a new heap string (NULL out of memory);
 * region_out_parse: 1 with id (REGION_ID_MAX bytes) and *offset, 0 for a
 * path or NULL. */
char *region_out_text(const char *id, int64_t offset);
int region_out_parse(const char *text, char *id, int64_t *offset);

/* Tests only: the count of regions in the registry (deleted ones still
 * referenced included). */
int region_count_all(void);

#endif
