/* compute/array/parts.h — a job result of several named arrays ("parts"): the
 * document that lists them, written and read in one place.
 *
 * A geodesic knn gives "distance" [n, k] and "index" [n, k] (int64); a
 * radius query "i", "j" and "distance" (compute/kinds/geodesic/query/query.h). The
 * scheduler keeps part 0 where a one-array result goes (the job's row or
 * <results>/<id>.npy) and every other part as <results>/<id>.<name>.npy
 * (compute/sched/run.c), then records the list with the job's end as the text
 * tparts_text writes (db/store.h: store_job.result_parts):
 *   [{"name":"distance","dtype":"float64","shape":[3,2],"bytes":48},
 *    {"name":"index","dtype":"int64","shape":[3,2],"bytes":48,
 *     "path":"/data/results/j_....index.npy"}]
 * A result written into an output region (compute/array/region.h) lists
 * every part with "offset" (its bytes' place in the region) and no path.
 * The store reads only the paths (to remove the files with the row); the
 * job's JSON (compute/jobs/json.c), GET /v1/jobs/{id}/result/{name} (compute/jobs/jobs.c)
 * and a chained input's "part" (compute/array/store_source.c) read it with
 * tparts_parse. The text is the service's own, but it comes back from the
 * database file, so the reader is strict and bounded (fuzzed:
 * tests/fuzz/fuzz_parts.c): a malformed document is T_EIO, never a crash.
 *
 * Ownership: tparts owns its paths (tparts_clear frees them); the text is
 * the caller's (free()). Threads: no shared state.
 */
#ifndef TESSEL_ARRAY_PARTS_H
#define TESSEL_ARRAY_PARTS_H

#include <stdint.h>

#include "compute/array/tarray.h"
#include "util/err.h"

#define TPARTS_MAX 8      /* >= JOB_MAX_PARTS (compute/kinds/kinds.h) */
#define TPART_NAME_MAX 32 /* [a-z][a-z0-9_]{0,30} and the NUL */

typedef struct tpart {
  char name[TPART_NAME_MAX];
  tdtype dtype;
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t bytes;
  char *path; /* the part's file; NULL for part 0 (stored as a one-array
                 result is) */
  int in_region;  /* 1: written into the job's output region at offset
                     (compute/array/region.h), no file (path NULL) */
  int64_t offset;
} tpart;

typedef struct tparts {
  int n;
  tpart p[TPARTS_MAX];
} tparts;

/* 1 when name is a part name: [a-z][a-z0-9_]{0,30}. */
int tpart_name_valid(const char *name);
/* The document for p (new heap string; NULL when out of memory). */
char *tparts_text(const tparts *p);
/* Parse a document (text NULL or "": n = 0). T_EIO (field "", the message
 * saying what is wrong) on anything tparts_text would not write: more than
 * TPARTS_MAX entries, a bad or repeated name, an unknown dtype, a bad
 * shape, bytes that are not the shape's, a path on part 0 or none on the
 * others (unless every part has an "offset" and none a path). On failure *out is cleared. */
int tparts_parse(const char *text, tparts *out, terr *e);
void tparts_clear(tparts *p);
/* The index of the part called name, or -1. */
int tparts_find(const tparts *p, const char *name);

#endif
