/* dirlock.h — one daemon per data directory.
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
 */
#ifndef TESSEL_UTIL_DIRLOCK_H
#define TESSEL_UTIL_DIRLOCK_H

#include "util/err.h"

/* Lock dir (exclusive, or shared when `shared`) for the life of the
 * process (or until dirlock_release). T_ECONFLICT when another process
 * holds a conflicting lock (the message names its pid when known), T_EIO
 * when the lock file cannot be opened. */
int dirlock_take(const char *dir, int shared, terr *e);
/* Drop the lock (at exit; the kernel would anyway). */
void dirlock_release(void);

#endif
