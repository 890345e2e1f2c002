/* sigbus.h — guarded mappings: a file mapping that another process may
 * truncate under us reads zeros instead of killing the daemon.
 *
 * A page of a file mapping that lies past the file's end (the file was
 * truncated after it was mapped) raises SIGBUS when it is touched. For
 * Tessel's own files that is a bug and must crash loudly; for a file a user
 * handed us on the same host (compute/array/localfile.h: {"file": ...} inputs and
 * "output" files under --local-dir) it is something the user can do at any
 * time, and the daemon must survive it. So such mappings are registered
 * here: sigbus_install (once, at start) puts a process-wide SA_SIGINFO
 * handler in place; sigbus_guard lists a mapping; when a SIGBUS hits an
 * address inside a listed mapping, the handler replaces that whole mapping
 * in place with anonymous zero pages of the same protection and marks it
 * torn, and the faulting access resumes (reading zeros, or writing into
 * memory nobody keeps). Any other SIGBUS restores the default action and
 * is raised again: the process dies as it would have.
 *
 * The owner of a guarded mapping checks sigbus_torn (or the flag it passed)
 * when the work on it is done and fails that work ("file changed while the
 * job ran"): the zeros are never a result. It unguards before munmap.
 *
 * Threads: any thread may guard and unguard (a mutex orders them); the
 * handler runs on whichever thread faulted and takes no lock. A mapping
 * must be unguarded only when no thread reads it any more.
 */
#ifndef TESSEL_UTIL_SIGBUS_H
#define TESSEL_UTIL_SIGBUS_H

#include <stdatomic.h>
#include <stddef.h>

/* Slots in the registry: mappings guarded at once. */
#define SIGBUS_MAX_GUARDS 256

/* Install the handler (idempotent, any thread). 0, or -1 with errno. */
int sigbus_install(void);

/* List the mapping [addr, addr + len) (page-aligned addr, as mmap gave it)
 * whose pages are `prot` (PROT_READ, PROT_READ | PROT_WRITE). `torn`, when
 * not NULL, is set to 1 as well if the mapping is torn; it must outlive the
 * guard. Installs the handler when it is not yet. Returns the guard's id
 * (> 0), or 0 when the registry is full or the handler cannot be
 * installed. */
int sigbus_guard(void *addr, size_t len, int prot, atomic_int *torn);

/* 1 when guard `id`'s mapping was torn, else 0 (also for 0). */
int sigbus_torn(int id);

/* Drop guard `id` (0: no-op). Returns sigbus_torn(id) as it was. The
 * caller then unmaps: a torn mapping is an anonymous one of the same
 * range, so munmap(addr, len) releases it just the same. */
int sigbus_unguard(int id);

#endif
