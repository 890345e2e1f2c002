/* datadir.h — the data directory's two guards: its lock (one daemon per
 * directory) and its disk's reserve (room for the way out of a full disk).
 *
 * The lock (dirlock_*).
 *
 * A daemon that keeps its state in a data directory of its own (the SQLite
 * store, the in-flight journal, the upload sweep) takes an exclusive lock on
 * <data>/tesseld.lock for its whole life and writes its pid into the file; a
 * second daemon on the same directory is refused, the message naming the
 * first's pid, before it reads or changes anything there. Nodes of a
 * cluster store share their data directory by design: each takes a shared
 * lock instead, which its peers share and which keeps a single-node daemon
 * (and the other way round) out.
 *
 * The lock is an open-file-description lock (fcntl F_OFD_SETLK): it goes
 * with the descriptor, not the process, so no other close() in the process
 * drops it, the descriptor is close-on-exec so no child keeps it, and the
 * kernel releases it however the process dies (kill -9 included): a stale
 * lock file never blocks a restart. On a file system without locks the
 * daemon starts with a warning (as before).
 *
 * Threads: call from the main thread at start-up.
 *
 * The reserve (reserve_*).
 *
 * Deleting an array or a job, expiry, a job's end: every one of them is a
 * write to the store (SQLite's WAL grows before a checkpoint frees it), so
 * on a disk with no block left the very requests that would free space
 * failed 507. The daemon therefore keeps a reserve: <data>/tesseld.reserve,
 * a file of --disk-reserve bytes whose blocks are allocated (fallocate) and
 * never written, and two states.
 *
 *   held   the normal state. A new data file (an upload, a result) is
 *          admitted only when it leaves the low mark free besides the
 *          reserve (reserve_admit); otherwise it fails ENOSPC (507 /
 *          "resource_exhausted"), as a file that does not fit always did.
 *   given  the disk is full: the reserve file is emptied, its blocks free
 *          for the store. New work (uploads, job submissions) is refused
 *          507 before it writes anything (reserve_full), new data files of
 *          running jobs are refused, and deletes, expiry and the store's
 *          own bookkeeping use the freed room.
 *
 * Given up when the free space falls under the low mark (reserve_watch:
 * every job submission and upload, the store's writer before each batch
 * at most every few milliseconds, and the main loop every second) or at
 * once when a store write hit the full disk anyway (reserve_release; the
 * store retries its deletes and expiry once, and while the reserve is
 * given its writer restarts the WAL every 64 pages: store_ckpt.c). Taken
 * back (re-allocated) when the free space is at least the reserve plus
 * twice the low mark: after deletes have freed room, at the next
 * submission or upload, or within a second.
 *
 * Sizes: --disk-reserve bytes, 0 for none, at most half of the file
 * system; by default 64 MiB or 5% of it, whichever is smaller. The low mark is a quarter of the
 * reserve, at least 1 MiB (at most the reserve). Only files on the data
 * directory's file system are counted (st_dev); a --local-dir elsewhere
 * is not this disk's business.
 *
 * Threads: every function may be called from any thread (an atomic state
 * for the readers; a mutex around the file's changes).
 */
#ifndef TESSEL_UTIL_DATADIR_H
#define TESSEL_UTIL_DATADIR_H

#include <stdint.h>

#include "util/err.h"

/* ---- the lock ---- */

/* Lock dir (exclusive, or shared when `shared`) for the life of the
 * process (or until dirlock_release). T_ECONFLICT when another process
 * holds a conflicting lock (the message names its pid when known), T_EIO
 * when the lock file cannot be opened. */
int dirlock_take(const char *dir, int shared, terr *e);
/* Drop the lock (at exit; the kernel would anyway). */
void dirlock_release(void);

/* ---- the reserve ---- */

/* The default size for dir's file system: min(64 MiB, 5% of it). */
int64_t reserve_default_bytes(const char *dir);
/* Keep `bytes` on dir's disk (0: no reserve; every call below is then a
 * no-op that admits everything). When the disk has no room for it now the
 * reserve starts given up (a warning). T_EINVAL when bytes is more than
 * half of the file system, T_EIO when the file cannot be created. */
int reserve_open(const char *dir, int64_t bytes, terr *e);
void reserve_close(void);
/* The configured size and the low mark, bytes (0 without a reserve). */
int64_t reserve_size(void);
int64_t reserve_low_mark(void);
/* 1 while the reserve is given up (the disk is full): refuse new work. */
int reserve_full(void);
/* Look at the free space (at most every few ms unless `now`): give the
 * reserve up below the low mark, take it back above reserve + 2 x low. */
void reserve_watch(int now);
/* A store write hit the full disk: give the reserve up now. 1 when this
 * call freed it. */
int reserve_release(void);
/* May a new data file of `bytes` be allocated on fd's file system? 0, or
 * ENOSPC when the reserve is given up (and cannot be taken back now) or
 * the file would leave less than the low mark free. Files on another file
 * system: always 0. */
int reserve_admit(int fd, int64_t bytes);

#endif
