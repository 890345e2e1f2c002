/* spare.h — big result files made ahead, their pages already in the page
 * cache (issues 25 and 27: the copy of a big result into a fresh file).
 *
 * A big result is a fresh .npy in the data directory, and every page of it
 * is new to the page cache: the kernel allocates and zeroes each before the
 * copy lands. On the H200 host that caps a result's store at 12-16 GB/s
 * with 16 threads (tests/bench/bench_fill.c: 3,200 MiB in 257 ms), however
 * fast the GPU hands it over. A spare is such a file made in the
 * background beforehand: fallocated (zeros, its blocks reserved), then
 * either zeros written over it and synced (clean pages over written
 * blocks: "written") or its pages read in (clean zero pages over
 * unwritten blocks, nothing written to the disk: "read", the default; see
 * spare_fill_of). Either way the kernel may drop the pages under memory
 * pressure. The next big result of about its size takes it by rename and
 * is copied into pages that are already there: "read" 33.8 GB/s for
 * 3,200 MiB, 26.2 GB/s for 800 MiB (bench_fill `spare:`), 2.6-2.9x a
 * fresh file; "written" 55.7 GB/s for 3,200 MiB (`sparew:`). The same as
 * PostgreSQL keeping WAL segments ready: the cost is paid while nothing
 * waits.
 *
 * A spare holds zeros only (never bytes of an earlier result); it is the
 * daemon's own file in <data dir>/spare, removed at start and at stop.
 *
 * Policy: results of SPARE_MIN bytes and more ask for one (spare_take).
 * One is taken when its size is at least the result's and at most twice
 * it plus SPARE_ROUND (the file is then cut to the result's length);
 * either way the keeper thread then makes spares of that result's size
 * (rounded up to SPARE_ROUND), up to SPARE_MAX of them within the budget
 * (--spare-results), only while the disk keeps SPARE_DISK_FREE of its
 * size free beyond them; a big result that finds the disk under that
 * removes every spare (their blocks go back to the disk) and takes none.
 * A result that finds none that fits removes the
 * oldest spares until one of its size has room: the spares follow the
 * latest big result's size (uploads of 64 MiB and more ask too: their
 * files are made the same way). Back-to-back big results with no time between
 * them find no spare and cost what they did.
 *
 * Threads: every call from any thread; one mutex guards the table, the
 * keeper makes a spare outside it.
 */
#ifndef TESSEL_ARRAY_SPARE_H
#define TESSEL_ARRAY_SPARE_H

#include <stdint.h>

#include "util/err.h"

#define SPARE_MIN ((int64_t)64 << 20)
#define SPARE_ROUND ((int64_t)64 << 20)
#define SPARE_MAX 2
#define SPARE_DISK_FREE 10 /* percent of the file system kept free beyond spares */

/* <data_dir>/spare made (or emptied of an earlier run's files) and the
 * keeper started when budget > 0 (bytes all spares may hold). Call once;
 * spare_stop undoes it. */
int spare_start(const char *data_dir, int64_t budget, terr *e);
/* Stop the keeper (it stops inside a spare it is making) and remove the
 * spares. */
void spare_stop(void);
/* A result of len bytes will be created at path (not there yet): 1 when a
 * spare was renamed to path (its pages in the page cache, zeros, at least
 * len bytes: the caller cuts it), 0 when none fits (or spares are off, or
 * len < SPARE_MIN). Either way the keeper makes spares of this size. */
int spare_take(const char *path, int64_t len);

/* What the spares did (GET /v1/info's storage.spare_results). */
/* How a spare's pages are made (TESSEL_SPARE_FILL, for A/B runs):
 *  read     fallocate, then its pages read in: clean zero pages over
 *           unwritten extents, nothing written to the disk. A copy into
 *           them still pays ext4's unwritten-extent work on each page's
 *           first write fault (bench_fill `spare:` 33.8 GB/s, 16 threads,
 *           3,200 MiB, on the H200 host).
 *  written  fallocate, then zeros written over it and synced: clean pages
 *           over written blocks (bench_fill `sparew:` 55.7 GB/s, same
 *           host and run). The cost: the spare's size written to the disk
 *           once, in the background, per spare made.
 * Unset or anything else: SPARE_FILL_DEFAULT, "read" (anything else is
 * logged as a warning). Measured on a
 * 4xH200 host (64 cores, ext4, 2026-11-29, bench_mgpu.sh, 3 runs 4 s
 * apart): "written" made the stored 6.4 GB square matrix on two GPUs 279
 * ms against 301 and the 7.2 GB one 270 against 292, but a job that runs
 * while a spare is being written stalls behind its writeback (the 7.2 GB
 * matrix's second run 6,010 and 5,732 ms against 582 and 711; a kNN 10^7's
 * host side +270-380 ms): ext4's journal orders the job's page faults
 * after the spare's data. A few percent in the best case is not worth
 * seconds in the worst, so "read" stays the default. */
enum { SPARE_FILL_READ = 0, SPARE_FILL_WRITTEN = 1 };
#define SPARE_FILL_DEFAULT SPARE_FILL_READ
int spare_fill_of(const char *v);

typedef struct spare_stats {
  int64_t budget, held; /* bytes allowed, bytes held in spares now */
  int count;            /* spares ready */
  int fill;             /* SPARE_FILL_READ or SPARE_FILL_WRITTEN */
  int64_t taken, missed; /* results that took one, results that found none */
} spare_stats;
void spare_get_stats(spare_stats *out);

/* The default budget: 0 below 4 CPUs (the keeper would compete with the
 * jobs for the cores), else an eighth of the memory, at most 8 GiB. */
int64_t spare_default_budget(void);

#endif
